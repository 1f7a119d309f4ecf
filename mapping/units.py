"""Exact time conversions.

Profiler timestamps are epoch microseconds with up to three decimals ("1736413971558972.912");
float64 cannot hold them exactly, so everything in the model is integer nanoseconds.
"""

from __future__ import annotations

import math

NS_PER_US = 1000


def us_text_to_ns(text: str) -> int:
    """Convert a decimal microsecond string to integer nanoseconds, exactly.

    Accepts the quirks of the producers: surrounding whitespace and trailing TABs, 0 to many
    decimals (digits beyond the third are rounded half-up), a leading sign, and exponent forms
    written by some JSON encoders (those go through float, which is exact enough for durations).
    Raises ValueError for anything else, and for values outside int64 nanoseconds (about 292
    years) or not finite (callers turn it into a file/line message or drop the value).
    """
    ns = _us_text_to_ns(text)
    if not INT64_MIN <= ns <= INT64_MAX:
        raise ValueError(f"time value out of range: {text[:40]!r}")
    return ns


INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


def _us_text_to_ns(text: str) -> int:
    s = text.strip()
    if not s:
        raise ValueError("empty time value")
    neg = s[0] == "-"
    if s[0] in "+-":
        s = s[1:]
    if "e" in s or "E" in s:
        us = float(s)
        if not math.isfinite(us * NS_PER_US):
            raise ValueError(f"time value out of range: {text[:40]!r}")
        ns = round(us * NS_PER_US)
        return -ns if neg else ns
    whole, dot, frac = s.partition(".")
    if not whole:
        whole = "0"
    if not whole.isdigit() or (frac and not frac.isdigit()):
        raise ValueError(f"not a number: {text!r}")
    ns = int(whole) * NS_PER_US
    if frac:
        head = frac[:3].ljust(3, "0")
        ns += int(head)
        if len(frac) > 3 and frac[3] >= "5":
            ns += 1
    return -ns if neg else ns


def ns_to_us(ns: int | float) -> float:
    return ns / NS_PER_US


def format_us(us: float) -> str:
    """Human form used in messages: µs below 10 ms, else ms with one decimal."""
    if abs(us) < 10_000:
        if abs(us) >= 100:
            return f"{us:,.0f} µs"
        return f"{us:.1f} µs"
    return f"{us / 1000:,.1f} ms"


def format_share(share: float) -> str:
    """A share of the step as shown in messages, hovers and reports: percent, one decimal."""
    return f"{share * 100:.1f}%"
