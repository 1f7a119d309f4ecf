"""Benchmark: recall and precision of mapping without stacks on the zoo, per model and per form,
for the tuning half and the held-out half (tests/nostack/zoo_split.py).

Each zoo job (tests/nostack/zoo.py) is written in every form (tests/nostack/jobs.py), checked with
``msprof-lsp --check --format json`` and scored against its stack form (tests/nostack/score.py has
the definitions: recall -- share of the stack form's (code, line) findings the form reports on the
same line; precision -- share of the form's findings on the stack form's line for that code;
"mapping" recall leaves out the codes whose data the form does not hold, score.FORM_LACKS).
Per model it also prints the stack form's recall of the planted problems, the step count and
step time of each form, and whether the top hotspot is the stack form's. The last lines are the
per-half minimum over models of recall and precision per form, the figures the targets are about.

Usage::

    python benchmarks/zoo.py [--half tuning|held-out] [--job NAME ...] [--steps 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.nostack.jobs import Form, NO_STACK_FORMS  # noqa: E402
from tests.nostack.score import check_every_form, mapping_score, planted_keys, score  # noqa: E402
from tests.nostack.zoo import ZOO  # noqa: E402
from tests.nostack.zoo_split import HELD_OUT, TUNING  # noqa: E402


def _pct(x: float | None) -> str:
    return "   -" if x is None else f"{100 * x:4.0f}%"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x / 1000:.3f}"


def run_job(name: str, steps: int, verbose: bool) -> dict[Form, tuple[float | None, ...]]:
    job = ZOO[name](steps)
    with tempfile.TemporaryDirectory() as tmp:
        results = check_every_form(job, Path(tmp))
    ref = results[Form.STACK]
    planted = planted_keys(job)
    pr = len(planted & ref.findings) / len(planted)
    print(f"{name}: {len(job.planted)} planted, stack form finds {_pct(pr).strip()} of them, "
          f"{len(ref.findings)} findings, {ref.steps} steps of {_ms(ref.step_time_us)} ms, top {_loc(ref.top_hotspot)}")
    if planted - ref.findings:
        print(f"  planted but not found in the stack form: {sorted(planted - ref.findings)}")
    scores: dict[Form, tuple[float | None, ...]] = {}
    for form in NO_STACK_FORMS:
        r = results[form]
        if r.status == 2:
            print(f"  {form.value:8} failed: {r.stderr.strip()}")
            scores[form] = (0.0, 0.0, 0.0)
            continue
        sc, ms = score(ref, r), mapping_score(ref, r)
        scores[form] = (sc.recall, sc.precision, ms.recall)
        same = "same top" if sc.same_top_hotspot else f"top differs ({_loc(r.top_hotspot)})"
        print(f"  {form.value:8} recall {_pct(sc.recall)} (mapping {_pct(ms.recall)}) precision {_pct(sc.precision)}  "
              f"steps {r.steps} of {_ms(r.step_time_us)} ms  {same}")
        if verbose:
            for k in sorted(ref.findings - r.findings):
                print(f"      missed {k}")
            for k in sorted(r.findings - ref.findings):
                print(f"      wrong  {k}")
    return scores


def _loc(top: tuple[str, int] | None) -> str:
    return "-" if top is None else f"{top[0]}:{top[1]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--half", choices=("tuning", "held-out"), action="append")
    ap.add_argument("--job", choices=sorted(ZOO), action="append")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("-v", "--verbose", action="store_true", help="list the missed and wrong findings")
    args = ap.parse_args()
    halves = {"tuning": TUNING, "held-out": HELD_OUT}
    for half in args.half or list(halves):
        names = [n for n in halves[half] if not args.job or n in args.job]
        if not names:
            continue
        print(f"== {half} half ==")
        per = {n: run_job(n, args.steps, args.verbose) for n in names}
        for form in NO_STACK_FORMS:
            rec = [per[n][form][0] for n in names if per[n][form][0] is not None]
            pre = [per[n][form][1] for n in names if per[n][form][1] is not None]
            mrec = [per[n][form][2] for n in names if per[n][form][2] is not None]
            print(f"  {half} {form.value:8} min recall {_pct(min(rec, default=None))} "
                  f"(mapping {_pct(min(mrec, default=None))})  min precision {_pct(min(pre, default=None))}  "
                  f"over {len(names)} models")


if __name__ == "__main__":
    main()
