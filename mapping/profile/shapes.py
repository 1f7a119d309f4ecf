"""Tensor-shape lists as the Ascend profilers write them.

A shape list is one text: tensors joined by ``;``, dims by ``,`` -- ``"81920,4096;8192,512"``.
An empty entry is a scalar or absent input (``"1;;1;2"``, ``";"``); ``""`` is an empty list.
Readers store the text (quotes stripped, ``;\\r\\n`` joins normalised to ``;``); rules that need
the numbers (cube-shape alignment) parse it here.
"""

from __future__ import annotations

from collections.abc import Iterable

from msprof_lsp.mapping.units import INT64_MAX, INT64_MIN

Shape = tuple[int, ...]

_MISSING = frozenset({"", "N/A", "NULL"})


def parse_shapes(text: str) -> list[Shape | None]:
    """``"81920,4096;8192,512"`` -> ``[(81920, 4096), (8192, 512)]``.

    Empty entries give None (scalar/absent input), so ``"1;;1;2"`` -> ``[(1,), None, (1,), (2,)]``
    and ``";"`` -> ``[None, None]``; ``""``, ``N/A`` and ``NULL`` give ``[]``. Surrounding quotes
    (the CSV's triple quoting) and the ``;\\r\\n`` joins of multi-line cells are tolerated. An entry
    that is not a list of integers (a symbolic dim) also gives None: the rules only use shapes they
    can compute with.
    """
    text = text.strip().strip('"').strip()
    if text in _MISSING:
        return []
    out: list[Shape | None] = []
    for entry in text.replace("\r", "").replace("\n", "").split(";"):
        entry = entry.strip()
        if not entry:
            out.append(None)
            continue
        out.append(_dims(entry))
    return out


def _dims(entry: str) -> Shape | None:
    """One tensor's dims; None unless every dim is an ASCII integer in int64 ("²", "1_0", 400
    digits and symbolic dims are no computable shape)."""
    if not entry.isascii() or "_" in entry:
        return None
    try:
        dims = tuple(int(d) for d in entry.split(","))  # the fast path (rules parse many shapes)
    except ValueError:
        return None
    return dims if INT64_MIN <= min(dims) and max(dims) <= INT64_MAX else None


def format_shapes(shapes: Iterable[Shape | None]) -> str:
    """Inverse of :func:`parse_shapes` for integer shapes: ``[(2, 3), None]`` -> ``"2,3;"``."""
    return ";".join("" if s is None else ",".join(str(d) for d in s) for s in shapes)


def numel(shape: Shape) -> int:
    """Element count of one tensor shape (1 for a 0-dim tensor)."""
    n = 1
    for d in shape:
        n *= d
    return n


DTYPE_BYTES = {
    "DT_BF16": 2, "BF16": 2, "FLOAT16": 2, "DT_FLOAT16": 2, "FLOAT": 4, "DT_FLOAT": 4, "FLOAT32": 4,
    "INT8": 1, "UINT8": 1, "BOOL": 1, "DT_BOOL": 1, "INT32": 4, "DT_INT32": 4, "INT64": 8, "DT_INT64": 8,
    "DOUBLE": 8, "INT16": 2,
}


def dtype_bytes(types: str, n: int) -> list[int]:
    parts = [t.strip().upper() for t in types.split(";")] if types else []
    return [DTYPE_BYTES.get(parts[i], 2) if i < len(parts) else 2 for i in range(n)]


def io_bytes(shapes: list[Shape | None], types: str) -> int:
    """Bytes of the tensors of one side of a kernel (its shapes and dtypes; 2 B where unknown)."""
    sizes = dtype_bytes(types, len(shapes))
    return sum(numel(s) * b for s, b in zip(shapes, sizes) if s is not None)


def gemm_flops(ins: list[Shape | None], outs: list[Shape | None]) -> int:
    """Floating-point operations of a (batched) matrix product, 2·M·N·K per output matrix, from its
    first input (…, M, K) and its output (…, M, N): K = numel(a)·N / numel(out), so transposed and
    batched layouts need no case of their own. 0 when a shape is missing or does not fit."""
    if not ins or not outs or ins[0] is None or outs[0] is None or not outs[0]:
        return 0
    a, out = ins[0], outs[0]
    n_out = numel(out)
    if n_out <= 0 or numel(a) <= 0:
        return 0
    k, rest = divmod(numel(a) * out[-1], n_out)
    return 2 * n_out * k if k > 0 and not rest else 0
