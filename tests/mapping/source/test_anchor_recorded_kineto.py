"""Anchoring on a REAL trace: torch (CPU) records a small model with the verbose ``Call stack``
(def-line frames, prefix-stripped paths, ``nn.Module: <Class>_<k>`` entries) and
every forward op must land on the call that launched it.

The trace is read here with the json module only (host ops, their nesting and stacks): the
product's Kineto reader is tested elsewhere; this checks the mapping against real frames.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from srcmap_builder import ProfileBuilder, locate, span_tuple

from msprof_lsp.mapping.source.attribute import attribute
from msprof_lsp.mapping.profile.model import ProfileKind
from msprof_lsp.mapping.spans import Confidence
from msprof_lsp.mapping.source.workspace import SourceWorkspace

pytestmark = pytest.mark.torch

MODEL = '''import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self, d=16, classes=4):
        super().__init__()
        self.fc1 = nn.Linear(d, d)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(0.3)
        self.fc2 = nn.Linear(d, classes)

    def forward(self, x):
        # 中文注释 😋
        x = self.drop(self.act(self.fc1(x)))
        x = F.dropout(F.relu(x), p=0.1, training=self.training)
        return self.fc2(x)
'''

TRAIN = textwrap.dedent('''
    import sys
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile, schedule

    from model import Net


    def main(out):
        torch.manual_seed(0)
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        config = torch._C._profiler._ExperimentalConfig(verbose=True)
        with profile(activities=[ProfilerActivity.CPU], with_stack=True, with_modules=True,
                     schedule=schedule(wait=0, warmup=1, active=2), experimental_config=config,
                     on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
            for _ in range(3):
                x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
                prof.step()


    if __name__ == "__main__":
        main(sys.argv[1])
''')


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, list[dict]]:
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("proj")
    (root / "model.py").write_text(MODEL, encoding="utf-8")
    (root / "train.py").write_text(TRAIN, encoding="utf-8")
    out = root / "trace.json"
    run = subprocess.run([sys.executable, "train.py", str(out)], cwd=root, capture_output=True, text=True,
                         timeout=300)
    if run.returncode != 0 or not out.exists():
        pytest.skip(f"could not record a torch trace here: {run.stderr[-500:]}")
    events = json.loads(out.read_text(encoding="utf-8"))["traceEvents"]
    return root, events


def build_profile(events: list[dict]) -> tuple:
    """Host ops from cpu_op/user_annotation events, parents from nesting per thread."""
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    ops.sort(key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    b = ProfileBuilder(kind=ProfileKind.KINETO)
    rows = []
    open_: list[tuple[float, int, object]] = []
    for e in ops:
        while open_ and (open_[-1][2] != e["tid"] or open_[-1][0] < e["ts"] + e["dur"]):
            open_.pop()
        parent = open_[-1][1] if open_ else -1
        stack = e.get("args", {}).get("Call stack") or None
        start, dur = round(e["ts"] * 1000), round(e["dur"] * 1000)
        row = b.op(e["name"], start, dur, parent=parent, stack=stack, cat=e["cat"], tid=e["tid"])
        if e["name"].startswith("ProfilerStep#"):
            b.step(int(e["name"].split("#")[1]), start, start + dur)
        rows.append((row, e))
        open_.append((e["ts"] + e["dur"], row, e["tid"]))
    return b.build(), rows


def expected_call(stack: str) -> tuple[str, int] | None:
    """The call that launched an op, read off its recorded stack (not from the product)."""
    frames = [f for f in stack.split(";") if f]
    user = next(i for i, f in enumerate(frames) if f.startswith("model.py("))
    modules = [f for f in frames[:user] if f.startswith("nn.Module: ")]
    if modules:
        return {"nn.Module: Linear_0": ("self.fc1(x)", 0), "nn.Module: Linear_1": ("self.fc2(x)", 0),
                "nn.Module: ReLU_0": ("self.act(self.fc1(x))", 0),
                "nn.Module: Dropout_0": ("self.drop(self.act(self.fc1(x)))", 0)}[modules[-1]]
    builtin = frames[0]
    if "relu" in builtin:
        return "F.relu(x)", 0
    if "dropout" in builtin:
        return "F.dropout(F.relu(x), p=0.1, training=self.training)", 0
    return None


def test_recorded_def_line_frames_map_to_their_calls(recorded):
    root, events = recorded
    profile, rows = build_profile(events)
    assert profile.has_call_stacks
    a = attribute(profile, SourceWorkspace([root]))
    assert a.heat.time_source == "host"
    checked = 0
    names = ("aten::linear", "aten::relu", "aten::dropout")
    for row, e in rows:
        stack = e.get("args", {}).get("Call stack", "")
        if e["name"] not in names or "model.py(" not in stack:
            continue
        # the recorded frame is the def line of forward, not the call's line
        assert f"model.py({locate(MODEL, 'def forward')[0]}): forward" in stack
        want = expected_call(stack)
        site = a.site_of_op(row)
        assert site is not None, (e["name"], stack, a.heat.notes)
        assert span_tuple(site.span) == locate(MODEL, *want), (e["name"], stack)
        assert site.confidence is Confidence.MODULE and site.function == "Net.forward"
        checked += 1
    assert checked >= 2 * 6  # two active steps, six forward calls each
    # the forward calls carry host time; the hottest span is one of them
    texts = {s.site.call_text for s in a.heat.spans if s.device_ns > 0}
    assert {"self.fc1(x)", "F.relu(x)", "self.fc2(x)"} <= texts
