"""Saving estimates against the re-simulated truth (docs/savings.md "How good are the estimates").

    python benchmarks/savings.py            # every case
    python benchmarks/savings.py NPU103     # one rule's cases

For every rule with a model, on our own cases (tests/synth/savings_cases.py): the sample's run
description with the problem is written as a torch_npu export and analysed as ``--check`` does;
the saving of the rule's finding (the ones the case picks, summed) is the estimate. The truth is
the same description with the fix applied (tests/synth/fixes.py), both laid out by the generator:
the mean ProfilerStep before minus after. A row marked ``*`` is a case where the truth differs from
what a recording would show (the note says why); ``within`` is issue 23's bar: 35 % or 0.5 ms.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.synth.savings_cases import CASES, Result, run_case  # noqa: E402


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def row(r: Result) -> str:
    c = r.case
    err = "-" if r.error is None else f"{r.error * 100:.0f} %"
    rng = "-" if r.low_us is None else f"{_us(r.low_us)}-{_us(r.high_us)}"
    mark = "*" if c.why_not else " "
    ok = "yes" if r.within else "no"
    return (f"| {c.rule} | {c.name}{mark} | {r.findings} | {_us(r.estimate_us)} | {rng} | {_us(r.truth_us)} | {err} "
            f"| {ok} |")


def main(argv: list[str]) -> int:
    logging.disable(logging.WARNING)
    chosen = [c for c in CASES if not argv or c.rule in argv]
    print("| rule | case | findings | estimate µs/step | low-high | truth µs/step | error | within |")
    print("|---|---|---|---|---|---|---|---|")
    notes = []
    t0 = time.perf_counter()
    for c in chosen:
        r = run_case(c)
        print(row(r), flush=True)
        if c.why_not:
            notes.append(f"* {c.rule} {c.name}: {c.why_not}")
    for n in dict.fromkeys(notes):
        print(n)
    print(f"{len(chosen)} cases in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
