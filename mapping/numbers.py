"""The one validated conversion of numbers read from files.

Profiles are written by other programs and may be broken or hostile: a pid of
"9999999999999999999", a rank of "²" (``str.isdigit()`` says yes, ``int()`` says no), a size of
2**64, NaN or 1e999. Python's ``int()``/``float()`` accept some of these and reject others with
different exceptions, and numpy's int64 columns and the cache codec overflow later, far from the
file. So every integer or float that comes from a file goes through ``int64_of``/``float_of``
here: the answer is a value the model can hold (int64, finite float64) or None, "unreadable",
and the caller skips the value or row, or drops the optional table, with an Issue naming the
file (docs/limits.md, "Numbers").
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np

from msprof_lsp.mapping.units import INT64_MAX, INT64_MIN

# ASCII only (re.ASCII): \d would otherwise match "٣" or "²"-like digits that int() handles
# differently from the producers. No "_" separators, no "inf"/"nan" words, no hex.
_INT_TEXT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_SPACE = " \t\r\n"  # what producers pad numbers with (torch_npu ends time cells with a TAB)
_MAX_TEXT = 400  # longer text is no number a profiler writes (and int() of it costs)


def int64_of(value: object, *, integral_floats: bool = True) -> int | None:
    """``value`` as an int in int64, or None when it is not one.

    Accepts Python/numpy ints in range, ASCII decimal text with an optional sign (padding spaces
    and TABs allowed), and -- unless ``integral_floats`` is False -- finite floats with no
    fraction (JSON encoders write 3.0 for 3). Rejects bools, Unicode digits, 2**63, NaN, inf,
    1.5, "1_000", "0x10", and anything else.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):  # numpy integers are not int; they take the generic path below
        return value if INT64_MIN <= value <= INT64_MAX else None
    if isinstance(value, str):
        text = value.strip(_SPACE)
        if len(text) > _MAX_TEXT or not _INT_TEXT.fullmatch(text):
            return None
        digits = text.lstrip("+-").lstrip("0")
        if len(digits) > 19:  # beyond int64 whatever the digits: no int() of 400 digits
            return None
        n = int(text)
        return n if INT64_MIN <= n <= INT64_MAX else None
    if isinstance(value, float):
        if not integral_floats or not math.isfinite(value) or not value.is_integer():
            return None
        n = int(value)
        return n if INT64_MIN <= n <= INT64_MAX else None
    if isinstance(value, np.integer):  # numpy scalars by their exact value
        return int64_of(int(value))
    if isinstance(value, np.floating):
        return int64_of(float(value), integral_floats=integral_floats)
    return None


def int_literal(text: str) -> int | None:
    """The value of a Python integer literal as written in a source file (``1_024``, ``0x10``), or
    None when it is no integer literal or longer than any real one: ``int()`` of more than 4,300
    digits raises, and a hostile file may hold one."""
    if len(text) > 64:
        return None
    try:
        return int(text.replace("_", ""), 0)
    except ValueError:
        return None


def float_of(value: object) -> float | None:
    """``value`` as a finite float64, or None when it is not one.

    Accepts ints and floats (numpy's too) whose float is finite, and ASCII decimal text (with
    a fraction and an exponent, padding spaces/TABs allowed). Rejects bools, NaN, inf, text
    such as "nan"/"inf"/"1e999", Unicode digits, and ints beyond float64 (10**400).
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip(_SPACE)
        if len(text) > _MAX_TEXT or not _FLOAT_TEXT.fullmatch(text):
            return None
        f = float(text)
    else:
        try:
            f = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):  # OverflowError: an int of 400 digits
            return None
    return f if math.isfinite(f) else None


def scaled_int64(value: object, scale: float) -> int | None:
    """``round(value * scale)`` as an int64 (ms or µs floats to ns), None when ``value`` is no
    finite number or the product leaves int64 (a REAL of 1e300 in a DB, "1e999" cast to inf)."""
    f = float_of(value)
    if f is None:
        return None
    product = f * scale
    if not math.isfinite(product) or not -(2.0**63) <= product < 2.0**63:
        return None
    return round(product)


def fit_int64_in_place(value: object, replace: Callable[[int], object] | None = None) -> int:
    """Replace, inside JSON-like ``value`` (dicts and lists, any depth), each int beyond int64
    by ``replace(int)`` (default: its decimal text); returns how many were replaced.

    Metadata a reader keeps as written (``meta.extra``: start_info, distributedInfo, ...) must
    still go through the cache and the rank workers' codec, which holds int64 (and uint64) only;
    the text keeps the value for display. Iterative: JSON may nest as deep as the decoder allows.
    """
    fix = replace or _int_text
    replaced = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            keys = list(item)
            for k in keys:
                v = item[k]
                if isinstance(v, int) and not isinstance(v, bool) and not INT64_MIN <= v <= INT64_MAX:
                    item[k] = fix(v)
                    replaced += 1
                elif isinstance(v, (dict, list)):
                    stack.append(v)
        elif isinstance(item, list):
            for i, v in enumerate(item):
                if isinstance(v, int) and not isinstance(v, bool) and not INT64_MIN <= v <= INT64_MAX:
                    item[i] = fix(v)
                    replaced += 1
                elif isinstance(v, (dict, list)):
                    stack.append(v)
    return replaced


def _int_text(v: int) -> str:
    try:
        return str(v)
    except ValueError:  # past Python's int-to-text digit limit
        return "<integer out of range>"


def shown(value: object, limit: int = 40) -> str:
    """A short repr of a rejected value for a notice (a 400-digit number is not printed whole)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = ["fit_int64_in_place", "float_of", "int64_of", "scaled_int64", "shown"]
