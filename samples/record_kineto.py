"""Record (or re-record) the sample Kineto traces.

    python samples/record_kineto.py                    # both samples -> samples/<sample>/kineto/
    python samples/record_kineto.py cnn_classifier     # one sample
    python samples/record_kineto.py --out-dir /tmp/t --call-stacks   # elsewhere, verbose stacks

Each sample's ``train.py`` runs for 4 steps on the CPU with ``--profile-dir``; its profiler
schedule (wait=1, warmup=1, active=2) records ProfilerStep#2 and #3 into one
``<sample>.<time ns>.pt.trace.json.gz`` (torch.profiler.tensorboard_trace_handler). Old traces
in the target folder are removed first, so the folder always holds exactly the latest run.

``--call-stacks`` adds ``experimental_config=_ExperimentalConfig(verbose=True)``, which puts a
``Call stack`` argument on every op (the variant the reader must also accept); the committed
traces are recorded without it, like most users record. Needs torch (the CPU build is enough).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

SAMPLES_DIR = Path(__file__).resolve().parent
SAMPLES = ("cnn_classifier", "tiny_transformer")


def record(sample: str, out_dir: Path, steps: int = 4, call_stacks: bool = False) -> Path:
    """Run one sample with the profiler on; return the trace file it wrote into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.pt.trace.json*"):
        old.unlink()
    cmd = [
        sys.executable,
        str(SAMPLES_DIR / sample / "train.py"),
        "--steps", str(steps),
        "--device", "cpu",
        "--profile-dir", str(out_dir),
    ]
    if call_stacks:
        cmd.append("--call-stacks")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    traces = sorted(out_dir.glob("*.pt.trace.json.gz"))
    if len(traces) != 1:
        raise RuntimeError(f"{sample}: expected one trace in {out_dir}, found {len(traces)}")
    return traces[0]


def main() -> None:
    parser = argparse.ArgumentParser(description="Record the sample Kineto traces.")
    parser.add_argument("samples", nargs="*", metavar="SAMPLE", help=f"default: {' '.join(SAMPLES)}")
    parser.add_argument("--out-dir", type=Path, help="write to OUT_DIR/<sample>/ instead")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--call-stacks", action="store_true", help="verbose 'Call stack' variant")
    args = parser.parse_args()
    unknown = set(args.samples) - set(SAMPLES)
    if unknown:
        parser.error(f"unknown sample(s) {', '.join(sorted(unknown))}; choose from {', '.join(SAMPLES)}")
    for sample in args.samples or SAMPLES:
        out = (args.out_dir / sample) if args.out_dir else SAMPLES_DIR / sample / "kineto"
        trace = record(sample, out, args.steps, args.call_stacks)
        print(f"{trace} ({trace.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
