"""Minimal edits on model files full of identical lines: the product's line diff against difflib.

    python benchmarks/bench_minimal_edits.py

A fix inserts an import at the top and changes one call at the bottom of a file whose body is N
identical lines. difflib's SequenceMatcher (the previous implementation) is quadratic on repeated
lines; the product trims the common prefix/suffix and runs Myers' diff on line ids, O((N+M)·D).
Prints seconds per N for both and the ratios: growth from N to 10·N (≈10 is linear, ≈100 is
quadratic) and difflib over the product at each N, all measured in this run.
"""

from __future__ import annotations

import difflib

from _common import best

from msprof_lsp.hints.fixes.edits import apply_edits, minimal_edits, split_lines


def texts(n: int) -> tuple[str, str]:
    body = "x = 1\n" * n
    return "import torch\n" + body + "y = f(x)\n", "import torch\nimport torch_npu\n" + body + "y = g(x)\n"


def with_difflib(old: str, new: str) -> int:
    matcher = difflib.SequenceMatcher(None, split_lines(old), split_lines(new), autojunk=False)
    return sum(1 for op in matcher.get_opcodes() if op[0] != "equal")


def main() -> None:
    sizes = (500, 2_000, 5_000, 20_000)
    ours: dict[int, float] = {}
    base: dict[int, float] = {}
    for n in sizes:
        old, new = texts(n)
        assert apply_edits(old, minimal_edits(old, new)) == new
        ours[n] = best(lambda: minimal_edits(old, new), 3)
        if n <= 5_000:  # difflib at 20,000 lines takes minutes
            base[n] = best(lambda: with_difflib(old, new), 1)
    print(f"{'lines':>8s} {'product s':>11s} {'difflib s':>11s} {'difflib/product':>16s}")
    for n in sizes:
        b = base.get(n)
        print(f"{n:8d} {ours[n]:11.4f} {b if b is not None else float('nan'):11.4f} "
              f"{(b / ours[n]) if b is not None else float('nan'):16.1f}")
    print(f"growth 2,000 -> 20,000 lines: product x{ours[20_000] / ours[2_000]:.1f} (10 = linear)")
    print(f"growth   500 ->  5,000 lines: difflib x{base[5_000] / base[500]:.1f}, product x{ours[5_000] / ours[500]:.1f}")


if __name__ == "__main__":
    main()
