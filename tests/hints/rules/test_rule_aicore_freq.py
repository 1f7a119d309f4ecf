"""NPU218 aicore-freq-drop: built clock samples at and just under the 5 % drop, the advisor's
ratio (samples in effect per kernel), and the real AlexNet exports, whose trace_view.json
``AI Core Freq`` counter and DB ``AICORE_FREQ`` table (read here with the json and sqlite3
modules) hold 1800 MHz throughout: no finding."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from conftest import shared_fixture
from rulekit import T0, US, ProfileBuilder, findings, frame, line_of, only

from msprof_lsp.mapping.profile.cluster import load_profile
from msprof_lsp.mapping.profile.model import AICORE_FREQ_KEY

SOURCE = '''import torch


def block(x, w):
    return torch.matmul(x, w)
'''


def _profile(src: Path, clock: list[tuple[float, int]], *, kernels=((150, 100), (400, 100))):
    b = ProfileBuilder(extra={AICORE_FREQ_KEY: [[T0 + round(us * US), mhz] for us, mhz in clock]})
    op = b.op("aten::matmul", 100, 60, stack=[frame(src, line_of(SOURCE, "torch.matmul"), "block")])
    for start, dur in kernels:
        b.kernel("MatMulV3_1", start, dur, op=op, core="AI_CORE", type="MatMulV3")
    return b.build()


@pytest.fixture
def src(tmp_path) -> Path:
    p = tmp_path / "block.py"
    p.write_text(SOURCE)
    return p


def test_clock_drop_fires_on_the_line(src):
    # kernel 1 sees 1800 then 1500 (sample at 200 µs), kernel 2 sees 1500: (0 + 300 + 300) / (3 * 1800) = 11 %
    (f,) = only(findings(_profile(src, [(0, 1800), (200, 1500)]), ["NPU218"], [src.parent]), "NPU218")
    assert f.span.line == line_of(SOURCE, "torch.matmul")
    k = f.evidence["kernels"]["MatMulV3_1"]
    assert k["drop_ratio"] == pytest.approx(600 / 5400, abs=1e-4) and k["min_mhz"] == 1500 and k["count"] == 2
    assert f.message.startswith("AI Core clock drop: 2 kernels, 200 µs/step (2.0% of the device step), 11% below 1800 MHz")


@pytest.mark.parametrize(("mhz", "fires"), [(1710, True), (1711, False)])
def test_drop_threshold(src, mhz, fires):
    # one sample before both kernels: the drop is (1800 - mhz) / 1800; 1710 is exactly 5 %
    assert bool(findings(_profile(src, [(0, mhz)]), ["NPU218"], [src.parent])) is fires


def test_no_samples_no_finding(src):
    assert not findings(_profile(src, []), ["NPU218"], [src.parent])


@pytest.mark.parametrize("fmt", ["text", "db"])
def test_real_alexnet_clock_holds_at_1800(fmt):
    root = shared_fixture(f"Ascend-msinsight/{fmt}/level1/rank0_ascend_pt")
    out = root / "ASCEND_PROFILER_OUTPUT"
    if fmt == "text":
        events = json.loads((out / "trace_view.json").read_text(encoding="utf-8"))
        expected = sorted([round(float(e["ts"]) * 1000), e["args"]["MHz"]] for e in events
                          if e.get("ph") == "C" and e.get("name") == "AI Core Freq")
    else:
        con = sqlite3.connect(f"file:{out / 'ascend_pytorch_profiler_0.db'}?mode=ro&immutable=1", uri=True)
        expected = sorted([t, f] for t, f in con.execute("SELECT timestampNs, freq FROM AICORE_FREQ"))
        con.close()
    profile = load_profile([root], use_cache=False).profile
    got = profile.meta.extra[AICORE_FREQ_KEY]
    assert [f for _, f in got] == [f for _, f in expected] and {f for _, f in got} == {1800}
    assert [t for t, _ in got] == pytest.approx([t for t, _ in expected], abs=1000)  # µs text with 3 decimals
    assert not findings(profile, ["NPU218"])
