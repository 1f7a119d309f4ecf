"""Benchmark: how much of the stack form's mapping survives when the call stacks are missing.

Writes each harness job (tests/nostack/jobs.py: two model scripts made for this, with the rule
catalog's problems planted at known lines) in every form -- torch_npu text export with stacks,
without stacks, Level0, DB export without PYTORCH_CALLCHAINS, msprof CLI ``PROF_*`` -- runs
``msprof-lsp --check --format json`` on each, and prints per form (tests/nostack/score.py has the
definitions):

* findings       -- (code, line) findings outside the NPU9xx notices;
* recall         -- share of the stack form's findings reported on the same line;
* precision      -- share of the form's findings on the stack form's line for that code;
* top hotspot    -- file:line of the first hotspot, and whether it is the stack form's;
* steps          -- the profile's step count (the job's true count in the header) and where the
                    steps came from (markers, or "inferred from a period of N launches, K repetitions").

The stack form's own line compares its findings with the planted problems (recall of planted).

Usage::

    python benchmarks/bench_nostack_recall.py [--job patch_classifier|char_lm] [--steps 5] [--warmup-step]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.nostack.jobs import Form, JOBS, NO_STACK_FORMS  # noqa: E402
from tests.nostack.score import check_every_form, planted_keys, score  # noqa: E402


def _pct(x: float | None) -> str:
    return "   -" if x is None else f"{100 * x:4.0f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", choices=sorted(JOBS), action="append")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup-step", action="store_true", help="the first step also compiles and runs extra kernels")
    args = ap.parse_args()
    for name in args.job or list(JOBS):
        job = JOBS[name](args.steps, warmup_step=args.warmup_step)
        with tempfile.TemporaryDirectory() as tmp:
            results = check_every_form(job, Path(tmp))
        ref = results[Form.STACK]
        planted = planted_keys(job)
        print(f"job {name}: {len(job.planted)} planted problems, {job.steps} steps")
        print(f"  {'form':8} {'findings':>8} {'recall':>7} {'precision':>9} {'steps':>5}  top hotspot")
        pr = len(planted & ref.findings) / len(planted)
        print(f"  {'stack':8} {len(ref.findings):8d} {_pct(pr):>7} {'':>9} {ref.steps!s:>5}  "
              f"{_loc(ref.top_hotspot)}  (recall of planted)")
        for form in NO_STACK_FORMS:
            r = results[form]
            if r.status == 2:
                print(f"  {form.value:8} failed: {r.stderr.strip()}")
                continue
            s = score(ref, r)
            same = "same" if s.same_top_hotspot else "differs"
            print(f"  {form.value:8} {len(r.findings):8d} {_pct(s.recall):>7} {_pct(s.precision):>9} {r.steps!s:>5}  "
                  f"{_loc(r.top_hotspot)} ({same}); steps: {r.steps_source}")
        missed = sorted(planted - ref.findings)
        if missed:
            print(f"  planted but not found in the stack form: {missed}")


def _loc(top: tuple[str, int] | None) -> str:
    return "-" if top is None else f"{top[0]}:{top[1]}"


if __name__ == "__main__":
    main()
