"""Run copies of a sample, fixed or not, one after another in one fresh interpreter with the
torch_npu stand-in importable (``import torch_npu`` registers the ``npu`` compile backend and
``torch.npu`` only then, as the real package does). Test-only: executes the repository's own
sample code. Each copy gets its results, or ``error.txt`` with the traceback, in its folder.

    python run_fixed.py forward DIR...       # import model.py, eval forward pass -> out.npy, keys.txt
    python run_fixed.py train STEPS DIR...   # run train.py on the CPU -> stdout.txt
    python run_fixed.py --no-npu MODE ...    # the same where torch_npu is not installed: its import
                                             # raises ImportError (a CPU laptop, CI)
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import npu_standin  # noqa: E402

SAMPLE_MODULES = ("model", "data", "train")


def forward(work: Path) -> None:
    import model  # the copy's model.py (sys.path[0] is the copy)

    torch.manual_seed(0)
    if hasattr(model, "CNNClassifier"):
        net, x = model.CNNClassifier(), torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    else:
        cfg = model.Config(vocab_size=97, dim=32, n_heads=4, n_layers=2, hidden_dim=64, max_seq_len=16)
        net, x = model.TinyTransformer(cfg), torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(1))
    net.eval()
    with torch.no_grad():
        y = net(x)
    np.save(work / "out.npy", y.numpy())
    (work / "keys.txt").write_text("\n".join(net.state_dict()), encoding="utf-8")


def train(work: Path, steps: str) -> None:
    extra = ["--seq-len", "16"] if "class TinyTransformer" in (work / "model.py").read_text(encoding="utf-8") else []
    sys.argv = ["train.py", "--steps", steps, "--batch-size", "4", "--device", "cpu", *extra]
    with open(work / "stdout.txt", "w", encoding="utf-8") as out, contextlib.redirect_stdout(out):
        runpy.run_path(str(work / "train.py"), run_name="__main__")


@contextlib.contextmanager
def no_torch_npu():
    """``import torch_npu`` raises ImportError inside the block (None in sys.modules), installed or not."""
    saved = sys.modules.get("torch_npu")
    sys.modules["torch_npu"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.modules.pop("torch_npu", None)
        if saved is not None:
            sys.modules["torch_npu"] = saved


def main() -> None:
    args = sys.argv[1:]
    without = args[:1] == ["--no-npu"]
    args = args[1:] if without else args
    mode = args[0]
    steps, dirs = (args[1], args[2:]) if mode == "train" else ("", args[1:])
    for d in dirs:
        work = Path(d).resolve()
        os.chdir(work)
        sys.path.insert(0, str(work))
        for name in SAMPLE_MODULES:
            sys.modules.pop(name, None)
        try:
            with no_torch_npu() if without else npu_standin.importable():
                forward(work) if mode == "forward" else train(work, steps)
        except BaseException:  # noqa: BLE001 - reported per copy; SystemExit from argparse too
            (work / "error.txt").write_text(traceback.format_exc(), encoding="utf-8")
        finally:
            sys.path.remove(str(work))


if __name__ == "__main__":
    main()
