"""Single-tensor optimizer updates in a profile without host data, placed on ``optimizer.step()``.

Without host ops (msprof CLI) nothing says which kernels an ``Optimizer.step#`` scope launched,
and single-tensor Adam/AdamW spells its update out per parameter as generic elementwise kernels
(Muls, Add, Sqrt, ...), so anchoring by type finds many candidate calls and places none. The
update has one signature the kernel types determine: ``exp_avg_sq.addcmul_``, the denominator
``sqrt`` / bias correction + eps, ``param.addcdiv_`` (``ADAM_UPDATE_TYPES``). Each run of that
signature, with the elementwise kernels right before it on the same parameter tensor (weight
decay, ``exp_avg``'s update, ``exp_avg_sq.mul_``: at most ``MAX_LEAD``), is one parameter's
update: those kernels go to the workspace's one ``optimizer.step()`` call (none placed when
there is not exactly one), confidence inferred, the note naming the matched types.
"""

from __future__ import annotations

from collections.abc import Sequence

# one element per kernel, its accepted OpTypes (hints/rules/optimizer.py builds NPU220's pattern from it)
ADAM_UPDATE_TYPES: tuple[tuple[str, ...], ...] = (
    ("Addcmul",), ("Sqrt",), ("RealDiv", "Div", "Divs"), ("Add", "Adds"), ("Addcdiv",))
LEAD_TYPES = frozenset({"Muls", "Mul", "Add", "Adds", "Lerp", "Axpy"})
MAX_LEAD = 4  # weight decay, exp_avg (lerp, or mul + add), exp_avg_sq.mul_


def adam_update_pattern() -> str:
    """``ADAM_UPDATE_TYPES`` as a kernel-type sequence pattern (``Addcmul-Sqrt-(RealDiv|Div|Divs)-...``)."""
    return "-".join(t[0] if len(t) == 1 else f"({'|'.join(t)})" for t in ADAM_UPDATE_TYPES)


def _first_tensor(shapes: str) -> str:
    return shapes.split(";", 1)[0].strip().strip('"')


def update_rows(types: Sequence[str], shapes: Sequence[str]) -> list[int]:
    """Positions (into ``types``, one stream's kernels in launch order) of the kernels of every
    single-tensor Adam update: each ``ADAM_UPDATE_TYPES`` run and up to ``MAX_LEAD`` elementwise
    kernels right before it whose first input is the same tensor shape."""
    n, width = len(types), len(ADAM_UPDATE_TYPES)
    out: list[int] = []
    i = 0
    while i + width <= n:
        if not all(types[i + j] in ADAM_UPDATE_TYPES[j] for j in range(width)):
            i += 1
            continue
        param = _first_tensor(shapes[i])
        lo = i
        taken = set(out)
        while lo > 0 and i - lo < MAX_LEAD and (lo - 1) not in taken and types[lo - 1] in LEAD_TYPES \
                and _first_tensor(shapes[lo - 1]) == param:
            lo -= 1
        out.extend(range(lo, i + width))
        i += width
    return out
