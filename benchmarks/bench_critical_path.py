"""Critical path speed: the current implementation against an earlier revision's, same trace, same run.

    python benchmarks/bench_critical_path.py [--trace PATH] [--baseline-rev REV] [--repeat N]
    python benchmarks/bench_critical_path.py --scaling [--rows N] [--baseline-rev 5b23080]

``--scaling`` times the hostile cases of tests/security/test_linear_work.py (device tasks no host
op launched, event waits behind many records of their own stream, one op per thread, host ops
that overlap without nesting) at N and 4N rows, for both implementations, and prints each one's
growth (linear work grows about 4x, quadratic 16x), the speed-up, and whether the two give the
same paths and per-line figures.

The baseline is ``mapping/source/critical_path.py`` as it was at ``--baseline-rev`` (default: the
last revision before the speed-up), read with ``git show`` and run against the same loaded
profile. Prints the best of ``--repeat`` runs of each, their ratio, and whether the two give the
same paths: per step the total, and the segments (kind, times, weight, host op, kernel, name).
Against the default baseline the totals are identical and the segments differ where that
revision kept a zero-duration host op open to the end of the step (its ancestors' self time went
to it).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import best

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = REPO.parent / "shared" / "fixtures" / "HolisticTraceAnalysis" / "trace_diff" / "control" / "control.json.gz"
BASELINE_REV = "5537b56"  # critical_path.py before the columnar graph
SCALING_BASELINE_REV = "5b23080"  # before the per-segment slicing and the scans back went (issue 22)
MODULE = "mapping/source/critical_path.py"


def baseline_module(rev: str, tmp: Path):
    text = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{MODULE}"], capture_output=True, text=True,
                          check=True).stdout
    path = tmp / "critical_path_baseline.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("critical_path_baseline", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def as_rows(cp) -> list[tuple]:
    return [(p.step, p.total_ns, p.span_ns,
             [(s.kind.value, s.start_ns, s.end_ns, s.weight_ns, s.host_op, s.kernel, s.name) for s in p.segments])
            for p in cp.steps]


def line_rows(cp) -> list[tuple]:
    return [(lp.path, lp.line, lp.on_path_per_step_ns, lp.host_on_path_per_step_ns, lp.own_per_step_ns,
             sorted((b.value, v) for b, v in lp.charged.items()), lp.waits) for lp in cp.lines]


def scaling(rev: str, rows: int) -> int:
    spec = importlib.util.spec_from_file_location("linear_cases", REPO / "tests" / "security" / "test_linear_work.py")
    assert spec is not None and spec.loader is not None
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    from msprof_lsp.mapping.source import critical_path as current

    builders = (cases.unmatched_tasks, cases.event_tasks, cases.thread_launches, cases.overlapping_ops)
    with tempfile.TemporaryDirectory(prefix="cp_bench_") as tmp:
        base = baseline_module(rev, Path(tmp))
        print(f"{'case':16} {'rows':>7} {'baseline s':>11} {'current s':>10} {'speed-up':>9}  same")
        for build in builders:
            took: dict[str, list[float]] = {"base": [], "now": []}
            for n in (rows, 4 * rows):
                p = build(n)
                att = cases.attribution(p)
                t_now = best(lambda: (p.derived.memos.clear(), current.critical_path(p, att)), 1)
                now = current.critical_path(p, att)
                p.derived.memos.clear()
                t_base = best(lambda: (p.derived.memos.clear(), base.critical_path(p, att)), 1)
                old = base.critical_path(p, att)
                same = as_rows(old) == as_rows(now) and line_rows(old) == line_rows(now)
                took["base"].append(t_base)
                took["now"].append(t_now)
                print(f"{build.__name__:16} {n:7,} {t_base:11.3f} {t_now:10.3f} {t_base / t_now:8.1f}x  "
                      f"{'identical' if same else 'DIFFER'}")
            print(f"{'':16} growth at 4x rows: baseline {took['base'][1] / took['base'][0]:5.1f}x, "
                  f"current {took['now'][1] / took['now'][0]:5.1f}x")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--baseline-rev", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scaling", action="store_true", help="the hostile cases at --rows and 4x --rows")
    ap.add_argument("--rows", type=int, default=5000)
    args = ap.parse_args(argv)
    if args.scaling:
        return scaling(args.baseline_rev or SCALING_BASELINE_REV, args.rows)
    args.baseline_rev = args.baseline_rev or BASELINE_REV
    if not args.trace.exists():
        print(f"{args.trace}: not found (../shared is absent?)", file=sys.stderr)
        return 2
    from msprof_lsp.mapping.profile.load import load_location, locate
    from msprof_lsp.mapping.source import critical_path as current

    profile = load_location(locate(args.trace), use_cache=False)
    with tempfile.TemporaryDirectory(prefix="cp_bench_") as tmp:
        base = baseline_module(args.baseline_rev, Path(tmp))
        t_base = best(lambda: base.critical_path(profile), args.repeat)
        def fresh():  # the paths are kept with the profile once computed: measure computing them
            profile.derived.memos.clear()
            return current.critical_path(profile)

        t_now = best(fresh, args.repeat)
        t_kept = best(lambda: current.critical_path(profile), args.repeat)
        profile.derived.memos.clear()  # both revisions keep their paths under one memo name
        old = as_rows(base.critical_path(profile))
        profile.derived.memos.clear()
        new = as_rows(current.critical_path(profile))
    print(f"{args.trace.name}: {len(profile.kernels):,} kernels, {len(profile.host_ops):,} host ops, "
          f"{len(profile.host_events):,} runtime calls, {len(new)} steps analysed")
    print(f"baseline ({args.baseline_rev}) {t_base:8.3f} s")
    print(f"current               {t_now:8.3f} s   {t_base / t_now:6.1f}x faster")
    print(f"asked again (kept)    {t_kept:8.3f} s")
    same_totals = [(o[0], o[1]) for o in old] == [(n[0], n[1]) for n in new]
    differing = sum(1 for o, n in zip(old, new) if o != n) + abs(len(old) - len(new))
    print(f"per-step totals {'identical' if same_totals else 'DIFFER'}; "
          f"steps whose segments differ: {differing} of {len(new)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
