"""NPU104's estimate against re-recordings on the CPU, before and after interleaved
(docs/savings.md "The CPU loop").

    python benchmarks/loop_npu104.py               # 4 rounds of A B B A
    python benchmarks/loop_npu104.py --rounds 8

The workspace is the CPU loop test's (tests/server/lsp/test_lsp_the_loop.py): the CNN sample's
model and ``BlurredImages`` under the guarded training script, with the record action's block
inserted (``insert_profiler``). A is that script; B is A with NPU104's fix (``tune_dataloader``,
the workers the setting's default writes). The estimate is ``--check``'s saving for NPU104 on each
A recording. The truth is the recorded step (the mean ``ProfilerStep``, as ``--check --baseline``
compares) of the A recordings minus the B recordings. A machine whose speed drifts by tens of
percent within a minute (this project's: a fixed pure-Python loop takes 198-360 ms) makes one
pair of recordings a poor truth, so the sides are recorded A B B A per round, which cancels a
drift linear over the round, and the medians over rounds are compared. Prints each recording,
then the median estimate, the median truth with its range over rounds, and their ratio, against
issue 23's bar (35 % or 0.5 ms). Needs torch (``pip install torch==2.13.0``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from msprof_lsp.hints.fixes.dataloader import tune_dataloader  # noqa: E402
from msprof_lsp.hints.fixes.edits import apply_edits  # noqa: E402
from msprof_lsp.hints.fixes.profiling import PROFILE_ENV, PROFILE_FOLDER, SKIP_FIRST, insert_profiler  # noqa: E402
from msprof_lsp.mapping.profile.load import load_location, locate  # noqa: E402

sys.path.insert(0, str(REPO / "tests" / "loop"))
from test_record_profile import GUARDED_TRAIN  # noqa: E402

STEPS = SKIP_FIRST + 6  # skipped, wait 1, warm up 1, record 3, one to spare
BAR, BAR_US = 0.35, 500.0


def _line(text: str, needle: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


def _workspaces(root: Path) -> tuple[Path, Path]:
    text = GUARDED_TRAIN.replace("SyntheticImages", "BlurredImages")
    res = insert_profiler(text, _line(text, "loss.backward()"), path="train.py")
    assert res is not None
    a_text = apply_edits(text, res.edits)
    fix = tune_dataloader(a_text, _line(a_text, "DataLoader("), path="train.py")
    assert fix is not None
    b_text = apply_edits(a_text, fix.edits)
    out = []
    for side, body in (("A", a_text), ("B", b_text)):
        ws = root / side
        ws.mkdir()
        for name in ("model.py", "data.py"):
            shutil.copy2(REPO / "samples" / "cnn_classifier" / name, ws / name)
        (ws / "train.py").write_text(body, encoding="utf-8")
        out.append(ws)
    return out[0], out[1]


def _record(ws: Path) -> Path:
    shutil.rmtree(ws / PROFILE_FOLDER, ignore_errors=True)
    # one intra-op thread: the training thread takes one core, as a host thread feeding a device does
    env = {**os.environ, PROFILE_ENV: "1", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-W", "ignore", "train.py", str(STEPS)], cwd=ws, env=env,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"loop_npu104: the recording in {ws} failed: {out.stderr.strip().splitlines()[-1:]}")
    (trace,) = (ws / PROFILE_FOLDER).glob("*.pt.trace.json*")
    kept = ws.parent / f"{ws.name}-{len(list(ws.parent.glob(ws.name + '-*')))}.pt.trace.json"
    shutil.move(trace, kept)
    return kept


def _step_us(trace: Path) -> float:
    profile = load_location(locate(trace), use_cache=False)
    return statistics.fmean(s.dur_ns for s in profile.steps) / 1000


def _estimate_us(ws: Path, trace: Path, cache: Path) -> float:
    out = subprocess.run(
        [sys.executable, "-m", "msprof_lsp.server", "--check", str(ws), "--profile", str(trace), "--select", "NPU104",
         "--format", "json", "--fail-on", "never", "--cache-dir", str(cache)], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"loop_npu104: --check on {trace} failed: {out.stderr.strip()[-300:]}")
    (finding,) = [f for f in json.loads(out.stdout)["findings"] if f["code"] == "NPU104"]
    return float(finding["saving"]["us_per_step"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4, help="rounds of A B B A (default 4)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="loop_npu104-") as tmp:
        root = Path(tmp)
        a, b = _workspaces(root)
        estimates, truths = [], []
        for r in range(1, args.rounds + 1):
            steps: dict[str, list[float]] = {"A": [], "B": []}
            for ws in (a, b, b, a):
                trace = _record(ws)
                steps[ws.name].append(_step_us(trace))
                if ws is a:
                    estimates.append(_estimate_us(a, trace, root / "cache"))
                print(f"round {r} {ws.name}: step {steps[ws.name][-1]:,.0f} µs", flush=True)
            truths.append(statistics.fmean(steps["A"]) - statistics.fmean(steps["B"]))
            print(f"round {r}: saved {truths[-1]:,.0f} µs/step; estimates {estimates[-2]:,.0f}, {estimates[-1]:,.0f}",
                  flush=True)
    est, truth = statistics.median(estimates), statistics.median(truths)
    within = abs(est - truth) <= max(BAR * abs(truth), BAR_US)
    print(f"NPU104 on the CPU loop, {args.rounds} rounds: estimate {est:,.0f} µs/step (median of "
          f"{min(estimates):,.0f}-{max(estimates):,.0f}), truth {truth:,.0f} µs/step (median of "
          f"{min(truths):,.0f}-{max(truths):,.0f}); estimate / truth {est / truth:.2f}; "
          f"within 35 % or 0.5 ms: {'yes' if within else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
