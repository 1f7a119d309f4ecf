"""NPU205 copy-fragments: built Ascend profiles at and just under copyFragmentsMin copies per step
from one line (MEMCPY_ASYNC tasks launched by acl_memcpy_host_to_device), and the real ResNet-50
Kineto trace (2 pageable H2D copies per step, counted here with gzip/json) and the AlexNet text
export, which stay under the default."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import shared_fixture
from rulekit import ProfileBuilder, findings, frame, line_of, only

from msprof_lsp.hints.config import RuleConfig, Thresholds
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.engine import run_rules
from msprof_lsp.hints.registry import rule
from msprof_lsp.mapping.profile.cluster import load_profile
from msprof_lsp.mapping.spans import Confidence

RESNET = "pytorch-kineto-tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
ALEXNET = "Ascend-msinsight/text/level1/rank0_ascend_pt"

SOURCE = '''import torch


def to_device(batch):
    return [t.npu() for t in batch]
'''


def _profile(path: Path, copies: int, *, direction: str = "host_to_device") -> object:
    b = ProfileBuilder()
    text = path.read_text()
    stack = [frame(path, line_of(text, "t.npu()"), "to_device")]
    for i in range(copies):
        op = b.op("aten::to", 100 + i * 100, 60, stack=stack)
        inner = b.op(f"acl_memcpy_{direction}", 110 + i * 100, 30)
        assert inner > op
        b.kernel("MEMCPY_ASYNC", 130 + i * 100, 20, op=inner, core="MEMCPY_ASYNC", type="MEMCPY_ASYNC")
    # a device-to-device copy from the same line is not a host transfer
    b.kernel("MEMCPY_ASYNC", 5000, 20, op=b.op("aclnnInplaceCopy", 4990, 40, stack=stack), core="MEMCPY_ASYNC")
    return b.build()


@pytest.fixture
def src(tmp_path) -> Path:
    p = tmp_path / "data.py"
    p.write_text(SOURCE)
    return p


def test_many_copies_from_one_line_fire_there(src):
    (f,) = only(findings(_profile(src, 8), ["NPU205"], [src.parent]), "NPU205")
    assert f.span.path == str(src) and f.span.line == line_of(SOURCE, "t.npu()") and f.confidence is Confidence.STACK
    assert f.evidence["copies"] == 8 and f.evidence["directions"] == {"H2D": 8}
    assert f.evidence["mean_us"] == 20.0 and f.evidence["pageable"] == 0
    assert f.message.startswith("H2D copy fragments: 8 copies, 160 µs/step (1.6% of the device step), mean 20 µs")
    assert f.message.endswith("Batch into one copy, or keep the tensors on the device.") and f.fixes == []


@pytest.mark.parametrize(("copies", "fires"), [(7, False), (8, True)])
def test_threshold(src, copies, fires):
    assert bool(only(findings(_profile(src, copies), ["NPU205"], [src.parent]), "NPU205")) is fires


def test_device_to_host_copies_count_too(src):
    (f,) = only(findings(_profile(src, 9, direction="device_to_host"), ["NPU205"], [src.parent]), "NPU205")
    assert f.evidence["directions"] == {"D2H": 9} and f.message.startswith("D2H copy fragments")


def _resnet_h2d() -> tuple[int, int]:
    """(H2D copies inside ProfilerStep#N ranges, steps), from the trace with gzip/json."""
    with gzip.open(shared_fixture(RESNET), "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    h2d = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("Memcpy HtoD")]
    assert all("Pageable" in e["name"] for e in h2d)
    inside = [e for e in h2d if any(a <= e["ts"] < b for a, b in steps)]
    return len(inside), len(steps)


@pytest.mark.parametrize(("least", "fires"), [(2, True), (3, False)])
def test_real_resnet_trace_two_pageable_copies_per_step(least, fires):
    copies, steps = _resnet_h2d()
    assert (copies, steps) == (12, 6)
    profile = load_profile([shared_fixture(RESNET)], use_cache=False).profile
    ctx = RuleContext(profile, None, None, RuleConfig(min_share=0.0, thresholds=Thresholds(copy_fragments_min=least)))
    fs = run_rules(ctx, [rule("NPU205")])
    assert bool(fs) is fires
    if fires:
        (f,) = fs
        assert f.evidence["copies"] == copies and f.evidence["pageable"] == copies
        assert "pin_memory() and non_blocking=True" in f.message


def test_real_alexnet_has_two_h2d_copies_under_the_default():
    profile = load_profile([shared_fixture(ALEXNET)], use_cache=False).profile
    assert run_rules(RuleContext(profile, None, None, RuleConfig(min_share=0.0)), [rule("NPU205")]) == []
    ctx = RuleContext(profile, None, None, RuleConfig(min_share=0.0, thresholds=Thresholds(copy_fragments_min=2)))
    (f,) = run_rules(ctx, [rule("NPU205")])
    # two copies launched by acl_memcpy_host_to_device; the other 22 MEMCPY_ASYNC tasks name no host transfer
    assert f.evidence["copies"] == 2 and f.evidence["longest_us"] == 840.1
