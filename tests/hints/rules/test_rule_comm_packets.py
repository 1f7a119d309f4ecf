"""NPU203 comm-byte-alignment and NPU204 comm-small-packets: spec-exact torch_npu text exports (tests.synth) whose all-reduce
moves packets one byte-multiple either side of 512 B alignment, anchored on loss.backward() with
the DDP wrap as related information; the real AlexNet DDP job (text communication.json and the DB
export), counted here with the json module."""

from __future__ import annotations

import json

import pytest
from conftest import shared_fixture
from seedkit import L, Launch, UserCall, analyse, backward, fwd, optimizer_step, span_text, step_run
from tests.synth.run import Gap, us

from msprof_lsp.hints.config import Thresholds
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.engine import run_rules
from msprof_lsp.hints.registry import rule
from msprof_lsp.mapping.profile.cluster import load_profile
from msprof_lsp.mapping.spans import Confidence

ALEXNET = "Ascend-msinsight/{}/level1/rank0_ascend_pt"
SDMA_LINKS = ("HCCS", "PCIE", "SIO")


def _run(packet_mb: float):
    lin = L.linear(32, 1024, 64, mm_us=60.0)
    items = [
        UserCall(fwd("x = self.drop(self.act(self.fc1(x)))"), (Launch(lin.op, lin.frames),), label="fc1"),
        backward(400.0, size_mb=2.0, packet_mb=packet_mb),
        optimizer_step(wait_comm=True),
        Gap(us(50)),
    ]
    return step_run(items, world_size=2)


def _json_packets(root) -> list[tuple[int, int, float]]:
    """(bytes, count, ms) of every SDMA-link packet size of the gradient ops, read with json."""
    comm = json.loads((root / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
    out = []
    for step in comm.values():
        for op, info in step.get("collective", {}).items():
            if op == "Total Op Info" or "allReduce" not in op:
                continue
            for link, bw in info["Communication Bandwidth Info"].items():
                if link in SDMA_LINKS:
                    out += [(round(float(size) * 1e6), count, ms) for size, (count, ms) in bw["Size Distribution"].items()]
    return out


def _json_transit(root) -> dict[str, tuple[float, float]]:
    """Per gradient op: (its Transit Time, the sum of its links' Size Distribution times), ms."""
    comm = json.loads((root / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
    out = {}
    for step in comm.values():
        for op, info in step.get("collective", {}).items():
            if op == "Total Op Info" or "allReduce" not in op:
                continue
            links = sum(ms for bw in info["Communication Bandwidth Info"].values()
                        for _, ms in bw["Size Distribution"].values())
            out[op.partition("@")[0]] = (info["Communication Time Info"]["Transit Time(ms)"], links)
    return out


def test_unaligned_packets_fire_on_backward_with_the_ddp_wrap(tmp_path):
    a = analyse(_run(1.937312), tmp_path)  # 1,937,312 B = 3,783.8 x 512
    [f] = a.run("NPU203", min_share=0.0)
    packets = _json_packets(a.root)
    bad = [p for p in packets if p[0] % 512]
    assert bad and all(p[0] == 1937312 for p in bad)
    assert f.evidence["unaligned_packets"] == sum(p[1] for p in bad) == f.evidence["packets"]
    assert f.evidence["unaligned_us"] == pytest.approx(sum(p[2] for p in bad) * 1000, abs=1e-3)
    assert f.evidence["unaligned_time_share"] == 1.0 and f.evidence["priority"] == "high"
    assert span_text(f.span) == "loss.backward()" and f.confidence is Confidence.STACK
    assert [span_text(r.span) for r in f.related] == ["DistributedDataParallel(Net().npu())"]
    assert f.message.startswith(f"SDMA unaligned: {round(sum(p[1] for p in bad) / 2)} transfers, ")
    assert "100% of SDMA time, sizes not multiples of 512 B" in f.message and "bucket_cap_mb" in f.message
    assert f.fixes == []


def test_aligned_packets_do_not_fire(tmp_path):
    a = analyse(_run(1.937408), tmp_path)  # 3,784 x 512 B: one 512 B step up
    assert all(p[0] % 512 == 0 for p in _json_packets(a.root))
    assert a.run("NPU203", min_share=0.0) == []


def test_alignment_setting_is_read(tmp_path):
    a = analyse(_run(1.937408), tmp_path)
    # 1,937,408 B = 473 x 4,096: a multiple of 512, not of 8,192
    [f] = a.run("NPU203", min_share=0.0, thresholds=Thresholds(comm_align_bytes=8192))
    assert f.evidence["align_bytes"] == 8192


def test_transfers_up_to_the_alignment_are_skipped(tmp_path):
    a = analyse(_run(0.0005), tmp_path)  # 500 B packets: at most 512 B, as the advisor skips them
    assert a.run("NPU203", min_share=0.0) == []


@pytest.mark.parametrize("export", ["text", "db"])
def test_real_alexnet_ddp_buckets_end_unaligned(export):
    profile = load_profile([shared_fixture(ALEXNET.format(export))], use_cache=False).profile
    [f] = run_rules(RuleContext(profile, None, None, RuleConfig(min_share=0.0)), [rule("NPU203")])
    assert f.span is None  # the job's main.py is not public: no loop to anchor on
    if export == "text":
        packets = _json_packets(shared_fixture(ALEXNET.format("text")))
        bad = [p for p in packets if p[0] > 512 and p[0] % 512]
        # the last two packets of two of the four buckets: 1,937,312 B and 1,162,496 B
        assert sorted({p[0] for p in bad}) == [1162496, 1937312]
        assert f.evidence["unaligned_packets"] == sum(p[1] for p in bad) == 4
        assert f.evidence["packets"] == sum(p[1] for p in packets if p[0] > 512) == 56
        assert f.evidence["unaligned_link_us"] == pytest.approx(sum(p[2] for p in bad) * 1000, abs=1e-3)
        # the time is the links' share of the ops' Transit: the per-link sum runs past it
        transit = _json_transit(shared_fixture(ALEXNET.format("text")))
        assert 0 < f.evidence["unaligned_us"] < f.evidence["unaligned_link_us"]
        assert f.evidence["unaligned_us"] <= sum(t for t, _ in transit.values()) * 1000
    else:
        # the DB capture is a separate run of the same job: same buckets, its own times
        assert f.evidence["unaligned_packets"] == 4
        assert {s for op in f.evidence["ops"].values() for s in op["sizes"]} == {"1162496", "1937312"}
    assert 0 < f.evidence["unaligned_time_share"] < 0.2 and f.evidence["priority"] == "low"


# -- NPU204 comm-small-packets -------------------------------------------------------------------


def test_small_packets_fire_on_backward(tmp_path):
    a = analyse(_run(4.0), tmp_path)  # the 2 MB bucket in one 4 MB-bucket packet: under 16 MB
    [f] = a.run("NPU204", min_share=0.0)
    packets = _json_packets(a.root)
    assert packets and all(p[0] < 16_000_000 for p in packets)
    sdma = f.evidence["links"]["SDMA"]
    assert sdma["packets"] == sdma["small"] == sum(p[1] for p in packets) and sdma["small_ratio"] == 1.0
    assert f.evidence["small_us"] == pytest.approx(sum(p[2] for p in packets) * 1000, abs=1e-3)
    assert span_text(f.span) == "loss.backward()" and f.confidence is Confidence.STACK
    assert [span_text(r.span) for r in f.related] == ["DistributedDataParallel(Net().npu())"]
    assert "100% of SDMA packets under 16 MB" in f.message and "bucket_cap_mb" in f.message


@pytest.mark.parametrize(("packet_mb", "fires"), [(15.999999, True), (16.0, False)])
def test_sdma_packet_size_threshold(tmp_path, packet_mb, fires):
    a = analyse(_run(packet_mb), tmp_path)
    assert bool(a.run("NPU204", min_share=0.0)) is fires


def _comm_profile(small: int, large: int, link: str = "HCCS", small_mb: float = 2.0, large_mb: float = 20.0):
    from rulekit import ProfileBuilder

    from msprof_lsp.mapping.profile.model import CommOp

    profile = ProfileBuilder().build()
    dist = {str(small_mb): [small, 0.01 * small], str(large_mb): [large, 0.05 * large]}
    profile.comm_ops = [CommOp("hcom_allReduce__1_0_1", "", 1, "collective", 0, 10**6, 8 * 10**5, 10**5, 0, 0,
                               {link: {"Size Distribution": dist}})]
    return profile


@pytest.mark.parametrize(("small", "fires"), [(20, False), (21, True)])
def test_small_share_threshold_is_strictly_over_20_percent(small, fires):
    profile = _comm_profile(small, 100 - small)
    fs = run_rules(RuleContext(profile, None, None, RuleConfig(min_share=0.0)), [rule("NPU204")])
    assert bool(fs) is fires
    if fires:
        assert fs[0].evidence["links"]["SDMA"]["small_ratio"] == 0.21
        # the links' 0.21 ms of small packets (of 4.16 ms link time) inside the op's 0.8 ms Transit
        assert fs[0].evidence["small_link_us"] == pytest.approx(0.01 * 21 * 1000)
        assert fs[0].evidence["small_us"] == pytest.approx(0.01 * 21 * 1000 * 0.8 / (0.21 + 0.05 * 79), abs=1e-3)


def test_rdma_uses_its_own_limit():
    # 2 MB over RDMA is not small (limit 1 MB); 0.5 MB is
    ctx = lambda p: RuleContext(p, None, None, RuleConfig(min_share=0.0))  # noqa: E731
    assert run_rules(ctx(_comm_profile(50, 50, link="RDMA")), [rule("NPU204")]) == []
    [f] = run_rules(ctx(_comm_profile(50, 50, link="RDMA", small_mb=0.5)), [rule("NPU204")])
    assert f.evidence["small_links"] == ["RDMA"]


@pytest.mark.parametrize("export", ["text", "db"])
def test_real_alexnet_buckets_are_small_packets(export):
    profile = load_profile([shared_fixture(ALEXNET.format(export))], use_cache=False).profile
    [f] = run_rules(RuleContext(profile, None, None, RuleConfig(min_share=0.0)), [rule("NPU204")])
    packets = _json_packets(shared_fixture(ALEXNET.format("text")))
    small = sum(c for b, c, _ in packets if b < 16_000_000)
    assert (small, sum(c for _, c, _ in packets)) == (42, 56)  # only the 18.9 MB packets are large
    sdma = f.evidence["links"]["SDMA"]
    assert (sdma["small"], sdma["packets"]) == (42, 56) and sdma["small_ratio"] == 0.75
    split = f.evidence["time_split"]
    if export == "text":
        link_ms = sum(ms for b, _, ms in packets if b < 16_000_000)
        assert f.evidence["small_link_us"] == pytest.approx(link_ms * 1000, abs=2e-3)  # ns rounding per size
        assert round(link_ms, 1) == 12.1  # what NPU204 used to print: past the ops' 3.7 ms of Transit
        assert split["transit_us"] == pytest.approx(3683.353, abs=1e-3)
    # issue 23: a per-link figure is never a share and never exceeds the Transit it belongs to
    assert 0 < f.evidence["small_us"] <= split["transit_us"] < f.evidence["small_link_us"]
    assert f.time_per_step_us == pytest.approx(f.evidence["small_us"])
    # the collectives mostly wait: packet overhead is not what binds them
    assert not split["transfer_bound"] and "mostly wait, not transfer" in f.message
