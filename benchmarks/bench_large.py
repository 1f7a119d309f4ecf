"""``--check`` on a large trace_view.json: cold, warm (cached) and peak RSS, against orjson.loads.

    python benchmarks/bench_large.py --mb 500          # generate, measure, delete
    python benchmarks/bench_large.py --project DIR     # a folder written by an earlier --keep
    python benchmarks/bench_large.py --mb 60 --keep DIR
    python benchmarks/bench_large.py --mb 100 --repeat 3 --baseline-rev 8a03ff1   # before/after

The project is the sources ``benchmarks/gen_large_trace.py`` writes (model.py, train.py, on the
lines its call stacks name) plus its torch_npu result. Every measurement runs in a fresh process
(this script in its child mode, imports done before the clock starts); the child reports wall
time, CPU time and its own peak RSS. Printed ratios, all from this one run:

* cold run / ``orjson.loads`` of the same trace_view.json (the baseline);
* warm run / cold run, where the warm run is the same ``--check`` with the cache filled by an
  earlier run (the fill run itself is printed, not compared);
* peak RSS of the cold run, in MiB;
* with ``--baseline-rev``: the same for that revision of the product (``git archive``, imported
  instead of the editable install, its own cache folder), and current / baseline.

With ``--repeat N`` the measurements run N times, interleaved (orjson, then each revision's cold
and warm run, round after round), and the medians are compared: the shared machine's load moves
single runs.

The cold run is the whole ``--check --no-cache`` (read, link, attribute, rules, report); the warm
run is ``--check --cache-dir`` on unchanged inputs.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _common import Usage, archive, measure_child, median_usage, report_usage, use_tree  # noqa: E402


def _trace(project: Path) -> Path:
    return next(project.glob("prof/*_ascend_pt")) / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"


def child(mode: str, tree: str, project: Path, cache_dir: Path | None) -> None:
    if tree != "-":
        use_tree(tree)
    if mode == "orjson":
        import orjson

        path = _trace(project)
        cpu, t = time.process_time(), time.perf_counter()
        orjson.loads(path.read_bytes())
        report_usage(time.perf_counter() - t, cpu)
        return
    from msprof_lsp.server.check.command import run_check
    from msprof_lsp.server.cli import parse

    assert tree == "-" or sys.modules[run_check.__module__].__file__.startswith(tree)  # the revision asked for

    argv = ["--check", "--quiet", str(project)]
    argv += ["--no-cache"] if cache_dir is None else ["--cache-dir", str(cache_dir)]
    _, args = parse(argv)
    out, err = io.StringIO(), io.StringIO()
    os.chdir(project)
    cpu, t = time.process_time(), time.perf_counter()
    status = run_check(args, stdout=out, stderr=err)
    seconds = time.perf_counter() - t
    if status not in (0, 1):
        raise SystemExit(f"--check exited {status}: {err.getvalue()}")
    last = out.getvalue().strip().splitlines()[-1:]
    print(f"report: {last}")
    report_usage(seconds, cpu)


def _print(name: str, u: Usage) -> None:
    print(f"{name:44s} {u.seconds:8.2f} {u.cpu_seconds:8.2f} {u.peak_rss_mib:13.0f}")


def _ratios(label: str, base: Usage, cold: Usage, warm: Usage) -> None:
    print(f"{label}: cold / orjson.loads {cold.seconds / base.seconds:.2f}x wall, "
          f"{cold.cpu_seconds / base.cpu_seconds:.2f}x CPU; warm / cold {warm.seconds / cold.seconds:.3f}x wall, "
          f"{warm.cpu_seconds / cold.cpu_seconds:.3f}x CPU; cold peak RSS {cold.peak_rss_mib:.0f} MiB")


def measure(project: Path, tmp: Path, revs: list[tuple[str, str]], repeat: int) -> None:
    """Fill each revision's cache, then ``repeat`` interleaved rounds; print medians and ratios."""
    me = [str(Path(__file__).resolve()), "--child"]
    caches = {name: tmp / f"cache-{name}" for name, _ in revs}
    fills = {name: measure_child([*me, "fill", tree, str(project), str(caches[name])]) for name, tree in revs}
    base: list[Usage] = []
    cold: dict[str, list[Usage]] = {name: [] for name, _ in revs}
    warm: dict[str, list[Usage]] = {name: [] for name, _ in revs}
    for _ in range(repeat):
        base.append(measure_child([*me, "orjson", "-", str(project)]))
        for name, tree in revs:
            cold[name].append(measure_child([*me, "cold", tree, str(project)]))
            warm[name].append(measure_child([*me, "warm", tree, str(project), str(caches[name])]))
    b = median_usage(base)
    print(f"\n{'measurement (median of ' + str(repeat) + ')':44s} {'wall s':>8s} {'CPU s':>8s} {'peak RSS MiB':>13s}")
    _print("orjson.loads (baseline)", b)
    for name, _ in revs:
        _print(f"{name}: --check, filling the cache (once)", fills[name])
        _print(f"{name}: --check --no-cache (cold)", median_usage(cold[name]))
        _print(f"{name}: --check, cache hit (warm)", median_usage(warm[name]))
    print()
    for name, _ in revs:
        _ratios(name, b, median_usage(cold[name]), median_usage(warm[name]))
    if len(revs) == 2:
        (now, _), (was, _) = revs
        for kind, runs in (("cold", cold), ("warm", warm)):
            a, z = median_usage(runs[now]), median_usage(runs[was])
            print(f"{kind} {now} / {was}: {a.seconds / z.seconds:.2f}x wall, {a.cpu_seconds / z.cpu_seconds:.2f}x CPU")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=500.0, help="trace_view.json size to generate (MiB)")
    ap.add_argument("--project", type=Path, help="measure this generated project instead of writing one")
    ap.add_argument("--keep", type=Path, help="write the project here and keep it")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds; medians are compared")
    ap.add_argument("--baseline-rev", help="also measure this git revision of the product (before/after)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, tree, project, *rest = args.child
        child(mode, tree, Path(project), Path(rest[0]) if rest else None)
        return

    tmp = Path(tempfile.mkdtemp(prefix="msprof-bench-large-"))
    try:
        project = args.project
        if project is None:
            from gen_large_trace import generate, write_sources

            project = args.keep or tmp / "project"
            t = time.perf_counter()
            write_sources(project)
            generate(project / "prof", args.mb)
            print(f"generated {project} in {time.perf_counter() - t:.0f} s")
        trace = _trace(project)
        print(f"trace_view.json: {trace.stat().st_size / (1 << 20):.0f} MiB")
        revs = [("current", "-")]
        if args.baseline_rev:
            print(f"baseline = {args.baseline_rev}")
            revs.append(("baseline", str(archive(args.baseline_rev, tmp / "baseline"))))
        measure(project, tmp, revs, max(1, args.repeat))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
