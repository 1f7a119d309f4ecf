"""The synthetic writers' collective packets: communication.json's Size Distribution sums to each
op's Transit Size (and the matrix's), the packets are those of a ring all-reduce of the fp32 bucket,
and that ring model reproduces the real 8-rank AlexNet job's packets (read with the json module)."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from conftest import shared_fixture
from tests.synth import write_torch_npu_db, write_torch_npu_text
from tests.synth.examples import small_run
from tests.synth.run import CommInfo

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
ALEXNET = "Ascend-msinsight/text/level1/rank{}_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json"


def _ops(comm: dict):
    for step in comm.values():
        for kind in ("collective", "p2p"):
            for op, info in step.get(kind, {}).items():
                if op != "Total Op Info":
                    yield op, info["Communication Bandwidth Info"]


def _packets(bw: dict) -> Counter:
    """bytes -> count over the links of one op (the "SDMA" entry repeats the others)."""
    out: Counter = Counter()
    for link, b in bw.items():
        if link != "SDMA":
            out.update({round(float(size) * 1e6): count for size, (count, _ms) in b["Size Distribution"].items()})
    return out


def _check_sums(out: Path) -> int:
    comm = json.loads((out / "communication.json").read_text(encoding="utf-8"))
    matrix = json.loads((out / "communication_matrix.json").read_text(encoding="utf-8"))
    matrix_mb = {v["Op Name"]: v["Transit Size(MB)"] for step in matrix.values() for kind in step.values()
                 for group in kind.values() for v in group.values()}
    n = 0
    for op, bw in _ops(comm):
        packets = _packets(bw)
        transit_mb = sum(b["Transit Size(MB)"] for link, b in bw.items() if link != "SDMA")
        assert sum(size * count for size, count in packets.items()) == pytest.approx(transit_mb * 1e6, abs=0.5)
        assert all(size % 4 == 0 for size in packets), op  # whole fp32 elements
        if op in matrix_mb:
            assert matrix_mb[op] == pytest.approx(transit_mb, abs=1e-9)
        n += 1
    return n


@pytest.mark.parametrize("world_size", [2, 3])
def test_written_packets_sum_to_the_transfer(tmp_path, world_size):
    for rank in range(world_size):
        root = write_torch_npu_text(small_run(world_size=world_size, rank=rank), tmp_path / str(rank))
        assert _check_sums(root / "ASCEND_PROFILER_OUTPUT") > 0


def test_cnn_sample_sends_its_gradient_bucket_in_two_ring_chunks():
    roots = sorted((SAMPLES / "cnn_classifier" / "npu_profile").glob("*_ascend_pt"))
    assert len(roots) == 2
    for root in roots:
        out = root / "ASCEND_PROFILER_OUTPUT"
        assert _check_sums(out) > 0
        comm = json.loads((out / "communication.json").read_text(encoding="utf-8"))
        for _op, bw in _ops(comm):
            # 571,482 fp32 gradients = 2,285,928 B; halves rounded up to 16 KiB, the remainder last
            assert _packets(bw) == Counter({1146880: 1, 1139048: 1})


def test_db_count_is_the_bucket_the_text_export_sends(tmp_path):
    run = small_run(world_size=2)
    text = write_torch_npu_text(run, tmp_path / "text") / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    # 2 ranks: each sends both halves once, so its packets add up to the whole bucket
    buckets = {sum(s * c for s, c in _packets(bw).items()) for _op, bw in _ops(json.loads(text.read_text()))}
    root = write_torch_npu_db(run, tmp_path / "db")
    con = sqlite3.connect(f"file:{next((root / 'ASCEND_PROFILER_OUTPUT').glob('ascend_pytorch_profiler_*.db'))}?mode=ro&immutable=1", uri=True)
    try:
        counts = {r[0] for r in con.execute("SELECT count FROM COMMUNICATION_OP")}
    finally:
        con.close()
    assert len(buckets) == 1 and counts == {b // 4 for b in buckets}


@pytest.mark.parametrize("rank", [0, 1])
def test_ring_model_reproduces_the_real_alexnet_packets(rank):
    comm = json.loads(shared_fixture(ALEXNET.format(rank)).read_text(encoding="utf-8"))
    checked = 0
    for op, bw in _ops(comm):
        got = _packets(bw)
        if not got:
            continue
        big, small = max(got), min(got)
        bucket = 7 * big + small  # 8 ranks: 7 full chunks and the remainder
        assert got == Counter(CommInfo(bucket / 1e6).packets(rank, 8)), op
        checked += 1
    assert checked == 4
