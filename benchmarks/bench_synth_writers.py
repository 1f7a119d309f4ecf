"""Throughput and memory of the spec-exact writers (tests/synth), and large synthetic profiles.

    python benchmarks/bench_synth_writers.py                      # 100 steps, every format
    python benchmarks/bench_synth_writers.py --format text --gb 2 --out /data/big --keep

Each writer streams one laid-out step at a time, so a multi-GB profile never sits in memory.
Printed per format: output size, seconds, MB/s, and ratios against two baselines measured in the
same run on the same machine; then the Python peak allocation (tracemalloc, in a separate run
because it slows the code down) for 10 and 40 steps -- flat when the writer streams:
* ``write floor``: writing the same number of bytes in 1 MiB chunks (disk + page cache);
* ``json.dumps``: encoding the run's trace events as one list in memory with the stdlib
  encoder (what a non-streaming writer would do), extrapolated per byte.
No thresholds: the numbers are for reading, docs/performance.md records them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.synth import write_kineto, write_msprof_cli, write_torch_npu_db, write_torch_npu_text  # noqa: E402
from tests.synth.clock import Clock  # noqa: E402
from tests.synth.examples import small_run  # noqa: E402
from tests.synth.trace_events import TraceWriter  # noqa: E402
from tests.synth.variant import TextVariant  # noqa: E402

WRITERS = {
    "text": lambda run, out: write_torch_npu_text(run, out),
    "db": lambda run, out: write_torch_npu_db(run, out),
    "msprof": lambda run, out: write_msprof_cli(run, out),
    "kineto": lambda run, out: write_kineto(run, out / "trace.pt.trace.json"),
}


def tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure(fmt: str, steps: int, out: Path) -> tuple[int, float]:
    run = small_run(steps=steps)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    WRITERS[fmt](run, out)
    return tree_bytes(out), time.perf_counter() - t0


def peak_alloc(fmt: str, steps: int, out: Path) -> int:
    run = small_run(steps=steps)
    out.mkdir(parents=True, exist_ok=True)
    tracemalloc.start()
    WRITERS[fmt](run, out)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    shutil.rmtree(out)
    return peak


def write_floor(nbytes: int, out: Path) -> float:
    chunk = b"x" * (1 << 20)
    t0 = time.perf_counter()
    with open(out, "wb") as f:
        for _ in range(max(nbytes >> 20, 1)):
            f.write(chunk)
    dt = time.perf_counter() - t0
    out.unlink()
    return dt * nbytes / max(nbytes >> 20, 1) / (1 << 20)


def dumps_baseline(steps: int) -> tuple[float, int]:
    """Seconds and bytes of json.dumps over the same trace events held in one list."""
    run = small_run(steps=steps)
    tw = TraceWriter(run, TextVariant())
    events = tw.metadata()
    for tl in Clock(run).steps():
        events.extend(tw.step_events(tl))
    t0 = time.perf_counter()
    text = json.dumps(events, ensure_ascii=False)
    return time.perf_counter() - t0, len(text.encode())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--format", choices=[*WRITERS, "all"], default="all")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--gb", type=float, default=0.0, help="size the run to about this many GB instead of --steps")
    ap.add_argument("--out", type=Path, default=None, help="where to write (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the written profiles")
    args = ap.parse_args()
    base = args.out or Path(tempfile.mkdtemp(prefix="synth-bench-"))
    formats = list(WRITERS) if args.format == "all" else [args.format]
    d_sec, d_bytes = dumps_baseline(min(args.steps, 50))
    dumps_mbs = d_bytes / d_sec / 1e6
    print(f"baseline json.dumps (one list, in memory): {dumps_mbs:8.1f} MB/s")
    for fmt in formats:
        steps = args.steps
        if args.gb:
            size, _ = measure(fmt, 4, base / f"{fmt}-probe")
            shutil.rmtree(base / f"{fmt}-probe")
            steps = max(1, int(args.gb * 1e9 / (size / 4)))
        nbytes, sec = measure(fmt, steps, base / fmt)
        floor = write_floor(nbytes, base / "floor.bin")
        mbs = nbytes / sec / 1e6
        p10, p40 = peak_alloc(fmt, 10, base / "p10"), peak_alloc(fmt, 40, base / "p40")
        print(f"{fmt:7s} {steps:7d} steps {nbytes / 1e6:9.1f} MB {sec:8.2f} s {mbs:6.1f} MB/s | "
              f"x{sec / floor:7.1f} write floor, x{mbs / dumps_mbs:4.2f} json.dumps speed | "
              f"peak alloc 10 steps {p10 / 1e6:5.1f} MB, 40 steps {p40 / 1e6:5.1f} MB")
        if not args.keep:
            shutil.rmtree(base / fmt)
    if not args.keep and args.out is None:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
