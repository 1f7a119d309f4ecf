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
import shutil
import sys
import tempfile
from pathlib import Path

import _abba
from _abba import REPO, STEPS, line_of

from msprof_lsp.hints.fixes.dataloader import tune_dataloader  # noqa: E402
from msprof_lsp.hints.fixes.edits import apply_edits  # noqa: E402
from msprof_lsp.hints.fixes.profiling import insert_profiler  # noqa: E402

sys.path.insert(0, str(REPO / "tests" / "loop"))
from test_record_profile import GUARDED_TRAIN  # noqa: E402


def _workspaces(root: Path, batch: int = 4) -> tuple[Path, Path]:
    text = GUARDED_TRAIN.replace("SyntheticImages", "BlurredImages").replace("batch_size=4", f"batch_size={batch}").replace("length=steps * 4", f"length=steps * {batch}")
    res = insert_profiler(text, line_of(text, "loss.backward()"), path="train.py")
    assert res is not None
    a_text = apply_edits(text, res.edits)
    fix = tune_dataloader(a_text, line_of(a_text, "DataLoader("), path="train.py")
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4, help="rounds of A B B A (default 4)")
    ap.add_argument("--batch-size", type=int, default=4,
                    help="the loop's batch size (default 4, the case the receive charge was read off; "
                         "16: the held-out case, fixed before it was measured)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="loop_npu104-") as tmp:
        root = Path(tmp)
        a, b = _workspaces(root, args.batch_size)
        res = _abba.interleave(
            a, b, args.rounds,
            lambda ws: _abba.record(ws, ["train.py", str(STEPS)], "loop_npu104"),
            lambda ws, trace: _abba.estimate_us(ws, trace, "NPU104", root / "cache", "loop_npu104"),
            f"NPU104 on the CPU loop, batch {args.batch_size}")
    print(res.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
