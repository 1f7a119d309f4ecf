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
* ``edits.minimal``           -- ``minimal_edits`` for that rewrite (difflib over lines);
* ``offers.parse_each``       -- the NPU101 offers of the last ``--offers`` classes (compile, in-place,
                                 p=0) expanded the way fixes ran before offers: each on a fresh parse;
* ``offers.one_parse``        -- the same offers through ``offers.expand_offers``: one parse for all.
                                 Printed as a before/after ratio as well.

Usage::

    python benchmarks/bench_fixes.py [--lines 5000] [--repeat 3] [--offers 5]
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from _common import best

from msprof_lsp.hints import suppress
from msprof_lsp.hints.fixes import cst_tools, make_offer, offer, relu_dropout, transform_of
from msprof_lsp.hints.fixes.edits import minimal_edits
from msprof_lsp.hints.fixes.offers import Sources, expand_offers
from msprof_lsp.hints.fixes.relu_dropout import compile_pair

MODEL = Path(__file__).resolve().parents[1] / "tests" / "hints" / "fixes" / "models" / "mlp_classifier.py"


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
    ap.add_argument("--offers", type=int, default=5, help="classes whose NPU101 fixes are offered")
    args = ap.parse_args()
    text = build(args.lines)
    last_site = max(i for i, ln in enumerate(text.splitlines(), 1) if "h = self.drop(self.act(" in ln)
    fixed = compile_pair(text, last_site)
    assert fixed is not None

    sites = [i for i, ln in enumerate(text.splitlines(), 1) if "h = self.drop(self.act(" in ln][-args.offers:]
    offers = [make_offer(t, "model.py", line) for line in sites
              for t in (relu_dropout.compile_pair, relu_dropout.inplace_relu, relu_dropout.drop_zero_dropout)]

    def parse_each():  # before offers: every fix parsed the text it was given
        for o in offers:
            offer(transform_of(o.fix), cst_tools.Source(text), o.anchor, path=o.path)

    def one_parse():
        expand_offers(offers, Sources(lambda path: text))

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
        "offers.parse_each": parse_each,
        "offers.one_parse": one_parse,
    }
    results = {name: best(fn, args.repeat) for name, fn in cases.items()}
    base = results["ast.parse"]
    print(f"{text.count(chr(10))} lines, {len(text) / 1024:.0f} KiB; best of {args.repeat}")
    for name, secs in results.items():
        print(f"{name:26s} {secs * 1000:9.1f} ms  {secs / base:7.1f}x ast.parse")
    before, after = results["offers.parse_each"], results["offers.one_parse"]
    print(f"{len(offers)} offers on one file: one parse {after / before:.2f}x the parse-per-fix path ({before / after:.1f}x faster)")


if __name__ == "__main__":
    main()
