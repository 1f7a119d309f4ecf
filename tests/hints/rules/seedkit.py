"""Test support for the seed-rule tests (NPU101-NPU109): a small training project written into a
temporary folder, run descriptions whose stacks point at its real lines (found by text, never by
a number written here), and the analysis of the written profile against that project.

Expected figures are computed by the tests themselves, from ``tests.synth.truth`` or from the
written files read with the json/csv modules -- never from a rule's output.
"""

from __future__ import annotations

import ast
import csv
import json
from dataclasses import dataclass
from pathlib import Path

from tests.synth import library as L
from tests.synth.run import (
    CannSpec,
    CommLaunch,
    Frame,
    Gap,
    Launch,
    OpSpec,
    ProfilerConfig,
    RepeatedSteps,
    Run,
    UserCall,
    us,
)
from tests.synth.write_text import write_torch_npu_text

from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.engine import run_rules
from msprof_lsp.hints.fixes import expand
from msprof_lsp.hints.finding import Finding
from msprof_lsp.hints.fixes.edits import apply_edits
from msprof_lsp.hints.registry import rule
from msprof_lsp.mapping.source.attribute import attribute
from msprof_lsp.mapping.profile.load import load_location, locate
from msprof_lsp.mapping.profile.model import Profile
from msprof_lsp.mapping.spans import Span
from msprof_lsp.mapping.source.workspace import SourceWorkspace

REMOTE = "/home/ma-user/work/proj"

MODEL_PY = '''\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self, vocab: int = 15365) -> None:
        super().__init__()
        self.fc1 = nn.Linear(1024, 64)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(0.3)
        self.fc2 = nn.Linear(64, 64)
        self.block = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.1))
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.head = nn.Linear(64, vocab)
        self.p = 0.2

    def forward(self, x, img):
        c = self.conv(img)
        x = self.drop(self.act(self.fc1(x)))
        x = F.dropout(F.relu(self.fc2(x)), p=self.p, training=self.training)
        x = self.block(x)
        h = F.relu(x)
        h = F.dropout(h, p=0.0, training=self.training)
        return self.head(h), c
'''

TRAIN_PY = '''\
import torch
import torch_npu
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from model import Net


def train(dataset, steps):
    loader = DataLoader(dataset, batch_size=32)
    model = DistributedDataParallel(Net().npu())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (x, y) in enumerate(loader):
        x, y = x.to("npu"), y.to("npu")
        logits, _ = model(x, x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch.npu.synchronize()
        print(f"step {step} loss {loss.item():.4f}")
        torch.npu.empty_cache()


if __name__ == "__main__":
    train(None, 4)
'''


class Source:
    """Lines and functions of one project file, looked up by text."""

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.text = text
        self.lines = text.splitlines()
        self.funcs: dict[str, int] = {}
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef):
                        self.funcs[f"{node.name}.{item.name}"] = item.lineno
            elif isinstance(node, ast.FunctionDef) and node.name not in ("__init__", "forward"):
                self.funcs.setdefault(node.name, node.lineno)

    def line(self, needle: str) -> int:
        hits = [i for i, ln in enumerate(self.lines, 1) if needle in ln]
        assert len(hits) == 1, f"{needle!r} on lines {hits}"
        return hits[0]

    def frame(self, needle: str, func: str) -> Frame:
        return Frame(f"{REMOTE}/{self.name}", self.line(needle), func.rsplit(".", 1)[-1], self.funcs[func])

    def span_of(self, text: str) -> tuple[int, int, int, int]:
        """(line, col, end_line, end_col) of the only occurrence of ``text`` (0-based columns)."""
        full = self.text
        at = full.index(text)
        assert full.count(text) == 1, text
        line = full.count("\n", 0, at) + 1
        col = at - (full.rfind("\n", 0, at) + 1)
        end = at + len(text)
        end_line = full.count("\n", 0, end) + 1
        end_col = end - (full.rfind("\n", 0, end) + 1)
        return line, col, end_line, end_col


MODEL = Source("model.py", MODEL_PY)
TRAIN = Source("train.py", TRAIN_PY)
MODULE = Frame(f"{REMOTE}/train.py", TRAIN.line('train(None, 4)'), "<module>")
SEQUENTIAL = (L.lib("torch/nn/modules/container.py", 250, "forward", 248),)  # nn.Sequential.forward
CALL_IMPL = (L.lib("torch/nn/modules/module.py", 1747, "_call_impl", 1741),
             L.lib("torch/nn/modules/module.py", 1736, "_wrapped_call_impl", 1734))  # entering a sub-module


def loop(needle: str) -> tuple:
    """A line of the training loop with the frames above it (train is active: its executing line)."""
    return (Frame(f"{REMOTE}/train.py", TRAIN.line(needle), "train"), MODULE)


def fwd(needle: str) -> tuple:
    """A line of Net.forward called through DDP from the loop."""
    return (MODEL.frame(needle, "Net.forward"), *L.DDP_FWD, *loop("logits, _ = model(x, x)"))


def item_call() -> UserCall:
    return UserCall(loop("print(f\"step {step} loss {loss.item():.4f}\")"), (L.item(),), label="item")


MASK_TRAIN_PY = '''\
import torch
import torch_npu

from model import MODEL_CLASS


def train(loader):
    model = MODEL_CLASS().npu()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, mask in loader:
        loss = model(x, mask).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    train([])
'''


def mask_train(model_class: str) -> Source:
    """``train.py`` of the masked-softmax and attention truth cases: SGD over ``(x, mask)`` batches
    through model.py's ``model_class``."""
    return Source("train.py", MASK_TRAIN_PY.replace("MODEL_CLASS", model_class))


def train_loop(train: Source, needle: str) -> tuple:
    """A line of ``train()`` of a ``mask_train`` script (active: its executing line) and the module's call."""
    return (Frame(f"{REMOTE}/train.py", train.line(needle), "train", train.funcs["train"]),
            Frame(f"{REMOTE}/train.py", train.line("train([])"), "<module>"))


def step_run(items: list, *, steps: int = 2, config: ProfilerConfig | None = None, **kw) -> Run:
    return Run(steps=RepeatedSteps([tuple(items)], steps, first=2), config=config or ProfilerConfig(), **kw)


def backward(comm_us: float | None = None, *, size_mb: float = 2.0, packet_mb: float = 4.0) -> UserCall:
    comm = (CommLaunch(L.allreduce(size_mb, dur_us=comm_us, packet_mb=packet_mb)),) if comm_us else ()
    return UserCall(L.BACKWARD + loop("loss.backward()"), (Launch(L.grad_seed().op),), label="backward",
                    backward=True, comm=comm)


def optimizer_step(wait_comm: bool = True) -> UserCall:
    return UserCall(loop("optimizer.step()"), (L.sgd_step(((64, 1024), (64,)), kernel_us=2.0),), label="optimizer",
                    wait_comm=wait_comm)


@dataclass
class Analysed:
    root: Path  # the *_ascend_pt folder
    project: Path
    profile: Profile
    ctx: RuleContext

    def run(self, code: str, **config) -> list[Finding]:
        """The rule through the engine (severity, min_share, suppressions)."""
        ctx = self.with_config(**config) if config else self.ctx
        return run_rules(ctx, [rule(code)])

    def raw(self, code: str, **config) -> list[Finding]:
        """The rule's own findings, before the engine's min_share cut (fix offers expanded, as the
        engine does for --check)."""
        ctx = self.with_config(**config) if config else self.ctx
        found = list(rule(code).check(ctx))
        expand(found, ctx.source_text)
        return found

    def with_config(self, **config) -> RuleContext:
        return RuleContext(self.profile, self.ctx.attribution, self.ctx.workspace, RuleConfig(**config))

    def trace(self) -> list[dict]:
        return json.loads((self.root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text(encoding="utf-8"))

    def kernel_rows(self) -> list[dict[str, str]]:
        with open(self.root / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))

    def step_rows(self) -> list[dict[str, str]]:
        with open(self.root / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv", newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))


def write_project(base: Path, model: str = MODEL_PY, train: str = TRAIN_PY) -> Path:
    proj = base / "proj"
    proj.mkdir(parents=True, exist_ok=True)
    (proj / "model.py").write_text(model, encoding="utf-8")
    (proj / "train.py").write_text(train, encoding="utf-8")
    return proj


def analyse(run: Run, tmp_path: Path, *, project: bool = True, **config) -> Analysed:
    root = write_torch_npu_text(run, tmp_path / "prof")
    proj = write_project(tmp_path) if project else tmp_path / "empty"
    proj.mkdir(exist_ok=True)
    profile = load_location(locate(root), use_cache=False)
    ws = SourceWorkspace([proj])
    att = attribute(profile, ws)
    return Analysed(root, proj, profile, RuleContext(profile, att, ws, RuleConfig(**config)))


def span_text(span: Span) -> str:
    text = Path(span.path).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    start = sum(len(x) for x in lines[: span.line - 1]) + span.col
    end = sum(len(x) for x in lines[: span.end_line - 1]) + span.end_col
    return text[start:end]


def applied(finding: Finding, title_part: str) -> tuple[str, str]:
    """Apply the fix whose title contains ``title_part``; (path, new text), checked to parse."""
    fix = next(f for f in finding.fixes if title_part in f.title)
    paths = {e.path for e in fix.edits}
    assert len(paths) == 1, paths
    path = paths.pop()
    new = apply_edits(Path(path).read_text(encoding="utf-8"), fix.edits)
    ast.parse(new)
    return path, new


def ns(text: str) -> int:
    """A µs string of the profiler files -> ns, exactly (independent of the product's parser)."""
    whole, _, frac = text.strip().partition(".")
    return int(whole or "0") * 1000 + int((frac + "000")[:3])


def pct(share: float) -> str:
    return f"{share * 100:.1f}%"


__all__ = [
    "CannSpec", "Gap", "L", "Launch", "OpSpec", "ProfilerConfig", "UserCall", "us",
]
