"""Saving estimates against the re-simulated truth (docs/savings.md "How good are the estimates").

    python benchmarks/savings.py                  # every case, both halves
    python benchmarks/savings.py --half tuning    # one half
    python benchmarks/savings.py NPU103           # one rule's cases

For every rule with a model, on our own cases (tests/synth/savings_cases.py): the sample's run
description with the problem is written as a torch_npu export and analysed as ``--check`` does;
the saving of the rule's finding (the ones the case picks, summed) is the estimate. The truth is
the same description with the fix applied (tests/synth/fixes.py), both laid out by the generator:
the mean ProfilerStep before minus after. A row marked ``*`` is a case where the truth differs from
what a recording would show (the note says why); ``within`` is issue 23's bar: 35 % or 0.5 ms.

The cases are split into a tuning and a held-out half (tests/synth/savings_split.txt, fixed before
any model change). Per half: the share of cases within the bar, and per run (the cases whose
problems sit in one recording) whether the estimates rank the fixes as the truths do and whether
the top three by estimate ("start here") are the true top three. Two fixes whose truths are
within the bar of each other are a tie: either order, and either in the top three, is right.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.synth.savings_cases import CASES, HALVES, Result, run_case, split, within_bar  # noqa: E402

TOP = 3


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def row(r: Result, half: str) -> str:
    c = r.case
    err = "-" if r.error is None else f"{r.error * 100:.0f} %"
    rng = "-" if r.low_us is None else f"{_us(r.low_us)}-{_us(r.high_us)}"
    mark = "*" if c.why_not else " "
    ok = "yes" if r.within else "no"
    return (f"| {half} | {c.rule} | {c.name}{mark} | {r.findings} | {_us(r.estimate_us)} | {rng} | {_us(r.truth_us)} "
            f"| {err} | {ok} |")


def misordered(rs: list[Result]) -> list[tuple[Result, Result]]:
    """Pairs the estimates order against the truths, where the truths are not a tie."""
    out = []
    for i, a in enumerate(rs):
        for b in rs[i + 1:]:
            if within_bar(a.truth_us, b.truth_us) or within_bar(b.truth_us, a.truth_us):
                continue
            if (a.estimate_us - b.estimate_us) * (a.truth_us - b.truth_us) < 0:
                out.append((a, b))
    return out


def top_matches(rs: list[Result]) -> bool:
    """The top three by estimate are the true top three, up to ties with the third true saving."""
    k = min(TOP, len(rs))
    by_truth = sorted(rs, key=lambda r: -r.truth_us)
    third = by_truth[k - 1].truth_us
    chosen = sorted(rs, key=lambda r: -r.estimate_us)[:k]
    return all(r.truth_us >= third or within_bar(r.truth_us, third) for r in chosen)


def summary(half: str, results: list[Result]) -> list[str]:
    scored = [r for r in results if r.estimate_us is not None and r.truth_us is not None]
    within = sum(r.within for r in scored)
    out = [f"{half}: {within} of {len(scored)} cases with an estimate and a truth within the bar"
           f" ({len(results) - len(scored)} without)"]
    runs: dict[str, list[Result]] = defaultdict(list)
    for r in scored:
        runs[r.case.build.key].append(r)
    for key, rs in runs.items():
        if len(rs) < 2:
            continue
        bad = misordered(rs)
        pairs = len(rs) * (len(rs) - 1) // 2
        names = "; ".join(f"{a.case.rule} vs {b.case.rule}" for a, b in bad)
        out.append(f"  run `{key}`: {len(rs)} fixes, ranking {pairs - len(bad)} of {pairs} pairs in order"
                   f"{' (misordered: ' + names + ')' if bad else ''}; start here = true top {min(TOP, len(rs))}: "
                   f"{'yes' if top_matches(rs) else 'no'}")
    return out


def main(argv: list[str]) -> int:
    logging.disable(logging.WARNING)
    halves = split()
    want = HALVES
    if "--half" in argv:
        i = argv.index("--half")
        want, argv = (argv[i + 1],), argv[:i] + argv[i + 2:]
    chosen = [c for c in CASES if (not argv or c.rule in argv) and halves.get(c.name) in want]
    print("| half | rule | case | findings | estimate µs/step | low-high | truth µs/step | error | within |")
    print("|---|---|---|---|---|---|---|---|---|")
    notes, results = [], defaultdict(list)
    t0 = time.perf_counter()
    for c in sorted(chosen, key=lambda c: (HALVES.index(halves[c.name]), c.rule)):
        r = run_case(c)
        results[halves[c.name]].append(r)
        print(row(r, halves[c.name]), flush=True)
        if c.why_not:
            notes.append(f"* {c.rule} {c.name}: {c.why_not}")
    for n in dict.fromkeys(notes):
        print(n)
    for half in want:
        print("\n".join(summary(half, results[half])))
    print(f"{len(chosen)} cases in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
