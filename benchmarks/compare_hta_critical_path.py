"""Compare msprof-lsp's critical path with HolisticTraceAnalysis' on a real CUDA trace.

    python benchmarks/compare_hta_critical_path.py [--trace PATH] [--hta-python PY] [--steps N]

HTA is not a dependency: ``--hta-python`` names an interpreter of a throwaway environment where
``holistictraceanalysis`` (and a pandas it works with: 2.x) is installed; this script runs HTA
there in a subprocess on a private copy of the trace and reads back its per-step figures. Without
it, only msprof-lsp's side is printed. docs/numbers.md "Critical path" explains the differences.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = REPO.parent / "shared" / "fixtures" / "HolisticTraceAnalysis" / "trace_diff" / "control" / "control.json.gz"

# Run inside the HTA environment: argv = trace folder, number of steps; prints one JSON object.
HTA_SIDE = r"""
import json, sys, io, contextlib
from hta.trace_analysis import TraceAnalysis
folder, steps = sys.argv[1], int(sys.argv[2])
with contextlib.redirect_stdout(io.StringIO()):
    a = TraceAnalysis(trace_dir=folder)
    rank = next(iter(a.t.traces))
out = {"rank": int(rank), "steps": []}
for i in range(steps):
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            cp, ok = a.critical_path_analysis(rank=rank, annotation="ProfilerStep", instance_id=i)
    except Exception as e:  # HTA fails on some steps; say which and go on
        out["steps"].append({"instance": i, "error": f"{type(e).__name__}: {e}"})
        continue
    if not ok:
        out["steps"].append({"instance": i, "error": "HTA reported no success"})
        continue
    df = cp.get_critical_path_breakdown()
    by = df.groupby("bound_by")["duration"].sum()
    ops = df[df["type"] == "critical_path_operator"]
    kernels = ops[ops["stream"] >= 0]
    out["steps"].append({
        "instance": i,
        "total_us": float(df["duration"].sum()),
        "by_bound_us": {str(k) or "dependency": float(v) for k, v in by.items()},
        "kernel_us": float(kernels["duration"].sum()),
        "kernels": int(len(kernels)),
        "cpu_op_us": float(ops[ops["stream"] < 0]["duration"].sum()),
    })
print(json.dumps(out))
"""


def hta_side(python: str, trace: Path, steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="hta_cp_") as tmp:
        shutil.copy(trace, Path(tmp) / trace.name)  # HTA reads a folder of rank traces
        res = subprocess.run([python, "-c", HTA_SIDE, tmp, str(steps)], capture_output=True, text=True,
                             timeout=1800, check=False)
    if res.returncode != 0:
        raise SystemExit(f"HTA run failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def our_side(trace: Path, steps: int) -> dict:
    from msprof_lsp.mapping.source.critical_path import SegmentKind, critical_path
    from msprof_lsp.mapping.profile.load import load_location, locate

    profile = load_location(locate(trace), use_cache=False)
    cp = critical_path(profile, max_steps=steps)
    rows = []
    for p in cp.steps:
        kinds = p.by_kind()
        rows.append({
            "step": p.step,
            "total_us": p.total_ns / 1000,
            "span_us": p.span_ns / 1000,
            "by_kind_us": {k.value: v / 1000 for k, v in kinds.items()},
            "kernels": sum(1 for s in p.segments if s.kind in (SegmentKind.KERNEL, SegmentKind.COMM)),
        })
    return {"steps": rows, "step_us": [s.dur_ns / 1000 for s in profile.steps[:steps]]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--hta-python", default="", help="interpreter with holistictraceanalysis installed")
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args(argv)
    if not args.trace.is_file():
        print(f"{args.trace}: not found (../shared is absent?)", file=sys.stderr)
        return 2
    ours = our_side(args.trace, args.steps)
    theirs = hta_side(args.hta_python, args.trace, args.steps) if args.hta_python else None
    print(f"{'step':>5} {'ProfilerStep':>12} | {'ours total':>10} {'host':>9} {'kernel':>8} {'wait':>8} {'#k':>5}"
          + (f" | {'HTA total':>10} {'cpu':>9} {'gpu comp':>8} {'k-k gap':>9} {'launch':>7} {'#k':>5}" if theirs else ""))
    for i, row in enumerate(ours["steps"]):
        k = row["by_kind_us"]
        line = (f"{row['step']:>5} {ours['step_us'][i]:>12.0f} | {row['total_us']:>10.0f} {k['host']:>9.0f} "
                f"{k['kernel'] + k['comm']:>8.0f} {k['wait']:>8.0f} {row['kernels']:>5}")
        h = theirs["steps"][i] if theirs and i < len(theirs["steps"]) else None
        if h and "error" in h:
            line += f" | HTA: {h['error'][:60]}"
        elif h:
            b = h["by_bound_us"]
            line += (f" | {h['total_us']:>10.0f} {b.get('cpu_bound', 0):>9.0f} {b.get('gpu_compute_bound', 0):>8.0f} "
                     f"{b.get('gpu_kernel_kernel_overhead', 0):>9.0f} {b.get('gpu_kernel_launch_overhead', 0):>7.0f} "
                     f"{h['kernels']:>5}")
        print(line)
    if theirs:
        ratio = [o["total_us"] / h["total_us"] for o, h in zip(ours["steps"], theirs["steps"])
                 if h.get("total_us", 0) > 0]
        print("ours / HTA total per step: " + ", ".join(f"{r:.3f}" for r in ratio))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
