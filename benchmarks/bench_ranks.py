"""A job of 16, 128 and 1,024 ranks: wall time and peak RSS of ``msprof-lsp --check``, and the old way.

Builds each job with tests/synth/rank_job.py from one real-shaped torch_npu text rank (``--source``,
default the sample's rank 0; the issue's figures use the 37 MB
``/work/shared/fixtures/Ascend-msinsight/text/level1/rank0_ascend_pt``): every large file is a hard
link, each rank has its own summary files with a planted slow rank and slow link. Then per size,
each in a fresh process:

* ``cold``: ``msprof-lsp --check --no-cache`` (the cluster view from every rank's summary files,
  the analysed rank loaded whole);
* ``warm``: the same with a cache folder that a first run (not timed) filled;

and checks that the report names the planted slow rank (NPU207) and slow link (NPU208) and lists
every rank. In the same run, the baseline: the old way at ``--baseline-ranks`` (16) ranks -- every
rank loaded whole in the rank pool and kept (``cluster._load_ranks``), then summarised -- against
the new cold run of the same job, with the ratio.

Peak RSS is the largest ``ru_maxrss`` among the processes the run started (the main process or one
pool worker; never their sum). The pool-vs-sequential measurement of earlier versions is gone: it
timed whole loads of every rank, which the cluster view no longer does; the baseline row is that
path now.

    python benchmarks/bench_ranks.py                       # 16, 128, 1024 from the sample
    python benchmarks/bench_ranks.py --sizes 16 --source /work/shared/fixtures/Ascend-msinsight/text/level1/rank0_ascend_pt
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.synth.rank_job import JobPlan, build_job  # noqa: E402

SAMPLE_RANK0 = REPO / "samples" / "cnn_classifier" / "npu_profile" / "ma-node-0_3185260_20250731080000000_ascend_pt"
SOURCE_ROOT = REPO / "samples" / "cnn_classifier"

# Runs `argv` as a child and prints its wall time and the largest RSS among its processes.
_MEASURE = """
import resource, subprocess, sys, time
t = time.perf_counter()
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
print(rc, time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""

# The old way in one process: every rank loaded whole in the rank pool, all kept, then summarised.
_OLD_WAY = """
import sys
from pathlib import Path
from msprof_lsp.mapping.profile.cluster import _load_ranks, summarize
from msprof_lsp.mapping.profile.jobs import discover_jobs
(job,) = discover_jobs([Path(sys.argv[1])])
profiles, failures = _load_ranks(job.locations, use_cache=False, cache_dir=None, progress=lambda m, f: None)
assert not failures, failures
s = summarize(profiles, {loc.rank: loc for loc in job.locations})
print("slowest rank", s.slowest_rank, "of", len(s.ranks), file=sys.stderr)
"""


def measure(argv: list[str]) -> tuple[int, float, float]:
    """(exit status, wall s, peak RSS MB) of ``argv`` run in a fresh process."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, *argv], capture_output=True, text=True, check=True)
    rc, wall, kb = out.stdout.split()
    return int(rc), float(wall), int(kb) / 1024


def check_argv(job: Path, report: Path, cache: Path | None) -> list[str]:
    where = ["--no-cache"] if cache is None else ["--cache-dir", str(cache)]
    return [sys.executable, "-m", "msprof_lsp.server", "--check", "-q", *where, "--profile", str(job),
            "--format", "json", "--output", str(report), str(SOURCE_ROOT)]


def named_right(report: Path, plan: JobPlan) -> str:
    """"ok" when the report lists every rank and NPU207/NPU208 name the planted rank and link."""
    doc = json.loads(report.read_text())
    (prof,) = doc["profiles"]
    ranks = [r["rank"] for r in prof["cluster"]["ranks"]]
    by_code = {f["code"]: f["message"] for f in doc["findings"]}
    problems = []
    if ranks != list(range(plan.ranks)):
        problems.append(f"{len(ranks)} ranks listed")
    if f"rank {plan.slow_rank}" not in by_code.get("NPU207", ""):
        problems.append("slow rank not named")
    if f"rank {plan.slow_link[0]}" not in by_code.get("NPU208", ""):
        problems.append("slow link not named")
    return "; ".join(problems) or "ok"


def plan_for(n: int) -> JobPlan:
    slow = (n * 7) // 10 + 1  # 713 of 1,024: not the first or the last rank
    return JobPlan(n, slow_rank=slow, slow_link=(n // 3, n // 3 + 1))


def bench_size(tmp: Path, source: Path, n: int) -> tuple[Path, float]:
    plan = plan_for(n)
    t = time.perf_counter()
    job = build_job(tmp / f"job{n}", source, plan)
    built = time.perf_counter() - t
    report, cache = tmp / f"report{n}.json", tmp / f"cache{n}"
    rc, cold_s, cold_mb = measure(check_argv(job, report, None))
    verdict = named_right(report, plan)
    measure(check_argv(job, report, cache))  # fills the cache
    _rc, warm_s, warm_mb = measure(check_argv(job, report, cache))
    print(f"{n:>5} ranks  built {built:6.1f} s   cold {cold_s:7.1f} s {cold_mb:7.0f} MB   "
          f"warm {warm_s:7.1f} s {warm_mb:7.0f} MB   exit {rc}   slow rank {plan.slow_rank}, "
          f"link {plan.slow_link[0]}->{plan.slow_link[1]}: {verdict}", flush=True)
    return job, cold_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=SAMPLE_RANK0, help="one torch_npu text rank (*_ascend_pt)")
    ap.add_argument("--sizes", default="16,128,1024", help="comma-separated rank counts")
    ap.add_argument("--baseline-ranks", type=int, default=16, help="job size of the old-way baseline (0: skip)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    print(f"source rank: {args.source}")
    with tempfile.TemporaryDirectory(prefix="bench_ranks_") as name:
        tmp = Path(name)
        cold = {}
        for n in sizes:
            job, cold[n] = bench_size(tmp, args.source, n)
        n = args.baseline_ranks
        if n:
            job = tmp / f"job{n}"
            if n not in cold:
                build_job(job, args.source, plan_for(n))
                _rc, cold[n], _mb = measure(check_argv(job, tmp / "report.json", None))
            _rc, old_s, old_mb = measure([sys.executable, "-c", _OLD_WAY, str(job)])
            print(f"baseline at {n} ranks: old way (every rank loaded whole) {old_s:.1f} s {old_mb:.0f} MB; "
                  f"whole --check now {cold[n]:.1f} s: {old_s / cold[n]:.1f}x faster")


if __name__ == "__main__":
    main()
