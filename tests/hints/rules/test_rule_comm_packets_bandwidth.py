"""NPU219 comm-bandwidth-contention: built collectives beside a MatMul at and just over 0.8 x 18
GB/s, one away from any MatMul, and the real AlexNet text export, whose pairing of collectives and
MatMuls is computed here from communication.json and kernel_details.csv with the json and csv
modules: the one all-reduce beside MatMuls runs at 15.8 GB/s, so nothing fires."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import shared_fixture
from rulekit import DDP_TRAIN as TRAIN, T0, US, ProfileBuilder, context, findings, line_of, only

from msprof_lsp.hints.config import RuleConfig, Thresholds
from msprof_lsp.hints.rules.comm_packets import contended_ops
from msprof_lsp.mapping.profile.cluster import load_profile
from msprof_lsp.mapping.profile.model import CommOp



def _op(name: str, start_us: float, elapse_us: float, gbps: float, mb: float = 100.0) -> CommOp:
    sdma = {"Transit Size(MB)": mb, "Transit Time(ms)": mb / gbps, "Bandwidth(GB/s)": gbps}
    return CommOp(name, "g", 1, "collective", T0 + round(start_us * US), round(elapse_us * US), 0, 0, 0, 0, {"SDMA": sdma})


def _profile(*ops: CommOp):
    b = ProfileBuilder()
    b.kernel("aclnnMm_MatMulCommon_MatMulV2", 1000, 2000, core="AI_CORE", type="MatMulV2")
    p = b.build()
    p.comm_ops = list(ops)
    return p


@pytest.mark.parametrize(("gbps", "fires"), [(14.39, True), (14.4, False)])
def test_contended_bandwidth_threshold(gbps, fires):
    assert bool(only(findings(_profile(_op("hcom_allReduce__1_0_1", 2500, 8000, gbps)), ["NPU219"]), "NPU219")) is fires


def test_finding_on_the_backward_call_with_the_lost_time(tmp_path):
    src = tmp_path / "train.py"
    src.write_text(TRAIN)
    # 100 MB at 10 GB/s = 10 ms; at the 18 GB/s baseline 5.556 ms: 4.444 ms lost
    (f,) = only(findings(_profile(_op("hcom_allReduce__1_0_1", 500, 12000, 10.0)), ["NPU219"], [tmp_path]), "NPU219")
    assert f.span.line == line_of(TRAIN, "loss.backward()") and f.related[0].span.line == line_of(TRAIN, "DDP(model")
    assert f.evidence["lost_us"] == pytest.approx((10 - 100 / 18) * 1000, abs=0.01)
    assert f.evidence["threshold_gbps"] == 14.4
    assert f.message.startswith("SDMA contention: 1 collective, 4,444 µs/step (44.4% of the device step), 10.0 GB/s < 14.4 GB/s")


def test_slow_collective_away_from_matmuls_is_not_contention():
    p = _profile(_op("hcom_allReduce__1_0_1", 3500, 1000, 5.0), _op("hcom_allReduce__1_1_1", 0, 999, 5.0))
    assert not findings(p, ["NPU219"])
    assert [o["op"] for o in contended_ops(context(_profile(_op("a", 2999, 10, 5.0))))] == ["a"]  # touches the MatMul's end


def test_thresholds_are_read():
    p = _profile(_op("hcom_allReduce__1_0_1", 2500, 8000, 15.0))
    assert not findings(p, ["NPU219"])
    cfg = RuleConfig(min_share=0.0, thresholds=Thresholds(sdma_baseline_gbps=20))
    assert findings(p, ["NPU219"], config=cfg)


def test_real_alexnet_pairs_match_the_files():
    root = shared_fixture("Ascend-msinsight/text/level1/rank0_ascend_pt")
    out = root / "ASCEND_PROFILER_OUTPUT"
    with open(out / "kernel_details.csv", newline="", encoding="utf-8") as fh:
        mm = [(float(r["Start Time(us)"].strip()), float(r["Duration(us)"])) for r in csv.DictReader(fh)
              if "matmul" in r["Type"].lower() and r["Step Id"]]
    expected = {}
    for step in json.loads((out / "communication.json").read_text(encoding="utf-8")).values():
        for name, info in step["collective"].items():
            if name == "Total Op Info":
                continue
            t = info["Communication Time Info"]
            s, e = t["Start Timestamp(us)"], t["Start Timestamp(us)"] + t["Elapse Time(ms)"] * 1000
            sdma = info["Communication Bandwidth Info"]["SDMA"]
            if sdma["Transit Size(MB)"] > 0 and any(ms < e and ms + d > s for ms, d in mm):
                expected[name.split("@")[0]] = sdma["Bandwidth(GB/s)"]
    profile = load_profile([root], use_cache=False).profile
    got = {o["op"]: o["gbps"] for o in contended_ops(context(profile))}
    assert got == expected and len(got) == 1 and min(got.values()) > 14.4
    assert not findings(profile, ["NPU219"])


def test_pipeline_send_recv_is_not_counted():
    """Issue 25 defect 5: a batch send/recv (communication.json's p2p section) beside a MatMul moves
    activations between pipeline stages; only the all-reduce is counted."""
    send = CommOp("hcom_batchSendRecv__128_4_1", "g", 1, "p2p", T0 + 2500 * US, 8000 * US, 0, 0, 0, 0,
                  {"SDMA": {"Transit Size(MB)": 100.0, "Transit Time(ms)": 10.0, "Bandwidth(GB/s)": 10.0}})
    assert not findings(_profile(send), ["NPU219"])
    both = _profile(send, _op("hcom_allReduce__1_0_1", 2500, 8000, 10.0))
    assert [o["op"] for o in contended_ops(context(both))] == ["hcom_allReduce__1_0_1"]
    (f,) = only(findings(both, ["NPU219"]), "NPU219")
    assert f.evidence["lost_us"] == pytest.approx((10 - 100 / 18) * 1000, abs=0.01)
