"""Benchmark: the per-request costs of hints (suppression parsing, fix transforms, minimal edits).

Builds one large, realistic module by repeating the test MLP classifier (classes renamed) until it
has ``--lines`` lines, then times, on the same text:

* ``ast.parse``               -- the stdlib parser: the baseline every ratio is printed against;
* ``suppress.tokenize``       -- ``hints.suppress.suppressions`` (tokenize-based, strings-aware);
* ``suppress.linescan``       -- the fallback quote-aware line scanner alone (what it would cost
                                 to skip tokenize);
* ``libcst.parse``            -- ``libcst.parse_module``;
* ``libcst.metadata``         -- parse + libcst's PositionProvider + ParentNodeProvider +
                                 QualifiedNameProvider over the whole module (the textbook way);
* ``source.index``            -- ``cst_tools.Source``: parse + top-level statement line ranges
                                 (positions and parents come later, per statement, on demand);
* ``source.names``            -- the above + the import alias table (name resolution);
* ``fix.compile_pair``        -- the NPU101 transform at the last class's ReLU->Dropout site, end to end;
* ``edits.minimal``           -- ``minimal_edits`` for that rewrite (difflib over lines).

Usage::

    python benchmarks/bench_fixes.py [--lines 5000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from _common import best

from msprof_lsp.hints import suppress
from msprof_lsp.hints.fixes import cst_tools
from msprof_lsp.hints.fixes.edits import minimal_edits
from msprof_lsp.hints.fixes.relu_dropout import compile_pair

MODEL = Path(__file__).resolve().parents[1] / "tests" / "hints" / "models" / "mlp_classifier.py"


def build(lines: int) -> str:
    text = MODEL.read_text(encoding="utf-8")
    head, _, rest = text.partition("class MLP(")
    body, _, _ = rest.partition("\ndef parse_args")
    parts = [head]
    i = 0
    while sum(p.count("\n") for p in parts) < lines:
        parts.append(f"class MLP{i}(" + body + "\n")
        i += 1
    return "".join(parts)


def linescan(text: str) -> int:
    state = None
    n = 0
    for line in text.splitlines():
        col, state = suppress._scan_line(line, state)
        n += col is not None
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    text = build(args.lines)
    last_site = max(i for i, ln in enumerate(text.splitlines(), 1) if "h = self.drop(self.act(" in ln)
    fixed = compile_pair(text, last_site)
    assert fixed is not None

    def names():
        src = cst_tools.Source(text)
        src.qnames(src.module.body[-1])

    def full_metadata():
        from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider, QualifiedNameProvider

        wrapper = MetadataWrapper(cst_tools.cst.parse_module(text), unsafe_skip_copy=True)
        wrapper.resolve_many([PositionProvider, ParentNodeProvider, QualifiedNameProvider])

    cases = {
        "ast.parse": lambda: ast.parse(text),
        "suppress.tokenize": lambda: suppress.suppressions(text),
        "suppress.linescan": lambda: linescan(text),
        "libcst.parse": lambda: cst_tools.cst.parse_module(text),
        "libcst.metadata": full_metadata,
        "source.index": lambda: cst_tools.Source(text),
        "source.names": names,
        "fix.compile_pair": lambda: compile_pair(text, last_site),
        "edits.minimal": lambda: minimal_edits(text, fixed.new_source),
    }
    results = {name: best(fn, args.repeat) for name, fn in cases.items()}
    base = results["ast.parse"]
    print(f"{text.count(chr(10))} lines, {len(text) / 1024:.0f} KiB; best of {args.repeat}")
    for name, secs in results.items():
        print(f"{name:26s} {secs * 1000:9.1f} ms  {secs / base:7.1f}x ast.parse")


if __name__ == "__main__":
    main()
