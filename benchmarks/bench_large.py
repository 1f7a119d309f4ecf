"""``--check`` on a large trace_view.json: cold, warm (cached) and peak RSS, against orjson.loads.

    python benchmarks/bench_large.py --mb 500          # generate, measure, delete
    python benchmarks/bench_large.py --project DIR     # a folder written by an earlier --keep
    python benchmarks/bench_large.py --mb 60 --keep DIR

The project is the sources ``benchmarks/gen_large_trace.py`` writes (model.py, train.py, on the
lines its call stacks name) plus its torch_npu result. Every measurement runs in a fresh process
(this script in its child mode, imports done before the clock starts); the child reports wall
time, CPU time and its own peak RSS. Printed ratios, all from this one run:

* cold run / ``orjson.loads`` of the same trace_view.json (the baseline);
* warm run / cold run, where the warm run is the same ``--check`` with the cache filled by an
  earlier run (the fill run itself is printed, not compared);
* peak RSS of the cold run, in MiB.

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

from _common import measure_child, report_usage  # noqa: E402


def _trace(project: Path) -> Path:
    return next(project.glob("prof/*_ascend_pt")) / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"


def child(mode: str, project: Path, cache_dir: Path | None) -> None:
    if mode == "orjson":
        import orjson

        path = _trace(project)
        cpu, t = time.process_time(), time.perf_counter()
        orjson.loads(path.read_bytes())
        report_usage(time.perf_counter() - t, cpu)
        return
    from msprof_lsp.server.check.command import run_check
    from msprof_lsp.server.cli import parse

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=500.0, help="trace_view.json size to generate (MiB)")
    ap.add_argument("--project", type=Path, help="measure this generated project instead of writing one")
    ap.add_argument("--keep", type=Path, help="write the project here and keep it")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, project, *rest = args.child
        child(mode, Path(project), Path(rest[0]) if rest else None)
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
        me = [str(Path(__file__).resolve()), "--child"]
        cache_dir = tmp / "cache"
        base = measure_child([*me, "orjson", str(project)])
        cold = measure_child([*me, "cold", str(project)])
        fill = measure_child([*me, "fill", str(project), str(cache_dir)])
        warm = measure_child([*me, "warm", str(project), str(cache_dir)])
        print(f"\n{'measurement':40s} {'wall s':>8s} {'CPU s':>8s} {'peak RSS MiB':>13s}")
        for name, u in (("orjson.loads (baseline)", base), ("--check --no-cache (cold)", cold),
                        ("--check, filling the cache", fill), ("--check, cache hit (warm)", warm)):
            print(f"{name:40s} {u.seconds:8.2f} {u.cpu_seconds:8.2f} {u.peak_rss_mib:13.0f}")
        print(f"\ncold / orjson.loads: {cold.seconds / base.seconds:.2f}x wall, {cold.cpu_seconds / base.cpu_seconds:.2f}x CPU")
        print(f"warm / cold:         {warm.seconds / cold.seconds:.3f}x wall, {warm.cpu_seconds / cold.cpu_seconds:.3f}x CPU")
        print(f"cold peak RSS:       {cold.peak_rss_mib:.0f} MiB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
