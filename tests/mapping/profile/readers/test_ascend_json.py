"""Tests of mapping.readers.ascend_json on the real fixtures and spec-exact synthetic files."""

from __future__ import annotations

import json
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from conftest import shared_fixture

from msprof_lsp.mapping.errors import ProfileError
from msprof_lsp.mapping.profile.model import ProfileKind, ProfileMeta
from msprof_lsp.mapping.profile.readers.ascend_json import (
    read_communication,
    read_communication_matrix,
    read_msprof_info,
    read_profiler_info,
    read_profiler_metadata,
)

MEMORY_RUN = "verl-project-rl-insight/data/recipe/memory_data/20260526_085155_ascend_pt"
MSTX_RUN = "verl-project-rl-insight/data/recipe/mstx_data/mstx_profile/agent_loop_rollout_replica_0/xxx_ascend_pt"
CLUSTER_COMM = "Ascend-msprof-analyze/test/resource/advisor/cluster_analysis_output/cluster_communication.json"


def meta() -> ProfileMeta:
    return ProfileMeta(ProfileKind.TORCH_NPU, "run")


def exact(text: str, factor: int) -> int:
    return int((Decimal(text) * factor).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def raw_json(path: Path):
    """The file decoded with numbers kept as their text (the test's independent view)."""
    return json.loads(path.read_text(encoding="utf-8"), parse_float=str, parse_int=str)


# -- profiler_info*.json -------------------------------------------------------------------------


@pytest.mark.parametrize("run", [MEMORY_RUN, MSTX_RUN], ids=["rank-string", "rank-int"])
def test_profiler_info_fixtures(run):
    path = shared_fixture(f"{run}/profiler_info_0.json")
    data = json.loads(path.read_text())
    common = data["config"]["common_config"]
    exp = data["config"]["experimental_config"]
    m = meta()
    assert read_profiler_info(path, m) == []
    assert m.rank == int(data["rank_id"]) == 0
    assert m.with_stack is common["with_stack"] and m.record_shapes is common["record_shapes"]
    assert m.profile_memory is common["profile_memory"] and m.with_modules is common["with_modules"]
    assert m.level == exp["_profiler_level"] and m.aic_metrics == exp["_aic_metrics"]
    assert m.export_type == tuple(exp["_export_type"]) == ("text",)
    assert m.gc_detect_threshold is None
    assert m.torch_npu_version == data["torch_npu_version"] and m.cann_version == data["cann_version"]
    assert m.collection_end_ns == data["end_info"]["collectionTimeEnd"]
    assert m.extra["schedule"] == common["schedule"] and m.extra["activities"] == common["activities"]
    assert m.extra["data_simplification"] is exp["_data_simplification"]
    assert m.extra["start_info"] == data["start_info"]
    assert str(path) in m.files


def test_profiler_info_rank_types_differ_between_fixtures():
    a = json.loads(shared_fixture(f"{MEMORY_RUN}/profiler_info_0.json").read_text())
    b = json.loads(shared_fixture(f"{MSTX_RUN}/profiler_info_0.json").read_text())
    assert isinstance(a["rank_id"], str) and isinstance(b["rank_id"], int)
    ma, mb = meta(), meta()
    read_profiler_info(shared_fixture(f"{MEMORY_RUN}/profiler_info_0.json"), ma)
    read_profiler_info(shared_fixture(f"{MSTX_RUN}/profiler_info_0.json"), mb)
    assert (ma.level, ma.torch_npu_version, ma.cann_version) == ("Level0", "2.9.0", "8.5.0")
    assert (mb.level, mb.aic_metrics, mb.torch_npu_version, mb.cann_version) == (
        "Level1", "ACL_AICORE_PIPE_UTILIZATION", "2.7.1", "8.3.RC1")


def info_doc(**over) -> dict:
    doc = {
        "config": {
            "common_config": {"activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"], "schedule": {},
                              "record_shapes": True, "profile_memory": False, "with_stack": True,
                              "with_flops": False, "with_modules": True},
            "experimental_config": {"_profiler_level": "Level1", "_aic_metrics": "ACL_AICORE_PIPE_UTILIZATION",
                                    "_export_type": ["text", "db"], "_gc_detect_threshold": 1.5},
        },
        "end_info": {"collectionTimeEnd": "1779785779209968682", "MonotonicTimeEnd": 1},
        "torch_npu_version": "2.14.0",
        "cann_version": "8.5.0",
    }
    doc.update(over)
    return doc


def test_profiler_info_rank_from_file_name(tmp_path):
    path = tmp_path / "profiler_info_5.json"
    path.write_text(json.dumps(info_doc()))
    m = meta()
    assert read_profiler_info(path, m) == []
    assert m.rank == 5 and m.with_stack is True and m.with_modules is True
    assert m.gc_detect_threshold == 1.5 and m.export_type == ("text", "db")
    assert m.collection_end_ns == 1779785779209968682  # a string in this file


def test_profiler_info_rank_mismatch_and_bad_values(tmp_path):
    doc = info_doc(rank_id="3")
    doc["config"]["common_config"]["with_stack"] = "yes"
    path = tmp_path / "profiler_info_2.json"
    path.write_text(json.dumps(doc))
    m = meta()
    issues = read_profiler_info(path, m)
    assert m.rank == 3 and m.with_stack is None
    messages = " | ".join(i.message for i in issues)
    assert "differs from the file name's rank 2" in messages and "with_stack" in messages
    assert all(i.path == str(path) for i in issues)


@pytest.mark.parametrize("gc", [10**400, "1.5", True, None])
def test_gc_threshold_past_float_range_is_skipped(tmp_path, gc):
    """Found by the 20,000-case campaign (seed 27): a 400-digit ``_gc_detect_threshold`` raised
    OverflowError in float(); it is skipped with a notice like any value that is no number."""
    doc = info_doc(rank_id="2")
    doc["config"].setdefault("experimental_config", {})["_gc_detect_threshold"] = gc
    path = tmp_path / "profiler_info_2.json"
    path.write_text(json.dumps(doc))
    m = meta()
    issues = read_profiler_info(path, m)
    assert m.gc_detect_threshold is None
    assert (gc is None) == (not any("_gc_detect_threshold" in i.message for i in issues))


def test_profiler_info_without_rank(tmp_path):
    path = tmp_path / "profiler_info.json"
    path.write_text(json.dumps(info_doc(rank_id=-1)))
    m = meta()
    assert read_profiler_info(path, m) == [] and m.rank is None


def test_malformed_json_names_line_and_column(tmp_path):
    path = tmp_path / "profiler_info_0.json"
    path.write_text('{\n  "config": {\n    "common_config": {,}\n  }\n}\n')
    with pytest.raises(ProfileError) as err:
        read_profiler_info(path, meta())
    assert err.value.path == str(path) and err.value.line == 3 and "column 23" in err.value.message


@pytest.mark.parametrize("content", [b"", b"  \n"], ids=["empty", "blank"])
def test_empty_json(tmp_path, content):
    path = tmp_path / "profiler_metadata.json"
    path.write_bytes(content)
    with pytest.raises(ProfileError, match="empty file"):
        read_profiler_metadata(path, meta())


def test_json_not_an_object(tmp_path):
    path = tmp_path / "communication.json"
    path.write_text("[1, 2]")
    with pytest.raises(ProfileError, match="expected a JSON object"):
        read_communication(path)


def test_json_bom_and_gb18030(tmp_path):
    path = tmp_path / "profiler_metadata.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"ENV_VARIABLES": {"HCCL_ALGO": ""}}).encode())
    m = meta()
    assert read_profiler_metadata(path, m) == [] and m.env == {"HCCL_ALGO": ""}
    path.write_bytes(json.dumps({"模型": "训练"}, ensure_ascii=False).encode("gb18030"))
    m = meta()
    issues = read_profiler_metadata(path, m)
    assert m.extra == {"模型": "训练"} and "GB18030" in issues[0].message


# -- profiler_metadata.json ------------------------------------------------------------------------


def test_profiler_metadata_fixture():
    path = shared_fixture(f"{MEMORY_RUN}/profiler_metadata.json")
    data = json.loads(path.read_text())
    m = meta()
    assert read_profiler_metadata(path, m) == []
    assert m.env == data["ENV_VARIABLES"]
    assert m.env["PYTORCH_NPU_ALLOC_CONF"] == "max_split_size_mb:2048"
    assert m.env["HCCL_ALGO"] == ""  # unset stays ""
    assert m.parallel_groups == data["parallel_group_info"] and len(m.parallel_groups) == 10
    assert m.extra == {}


def test_profiler_metadata_user_keys(tmp_path):
    path = tmp_path / "profiler_metadata.json"
    path.write_text(json.dumps({"ENV_VARIABLES": {"ASCEND_LAUNCH_BLOCKING": None, "HCCL_RDMA_TC": 3},
                                "distributed_args": {"tp": 2}, "model": "llama"}))
    m = meta()
    assert read_profiler_metadata(path, m) == []
    assert m.env == {"ASCEND_LAUNCH_BLOCKING": "", "HCCL_RDMA_TC": "3"}
    assert m.extra == {"distributed_args": {"tp": 2}, "model": "llama"}


# -- communication.json (no public sample: spec-exact) ----------------------------------------------

COMMUNICATION = """{"step3": {"collective": {
  "hcom_allReduce__428_0_1@14286941414124": {
    "Communication Time Info": {"Start Timestamp(us)": 1736413971558972.912, "Elapse Time(ms)": 12.3456785,
      "Transit Time(ms)": 3.2, "Wait Time(ms)": 8.0000005, "Synchronization Time(ms)": 7.5,
      "Idle Time(ms)": 1.1454, "Wait Time Ratio": 0.7143, "Synchronization Time Ratio": 0.7009},
    "Communication Bandwidth Info": {
      "HCCS": {"Transit Size(MB)": 256.0, "Transit Time(ms)": 3.2, "Bandwidth(GB/s)": 80.0,
               "Large Packet Ratio": 1.0, "Size Distribution": {"4.0": [64, 3.2]}},
      "RDMA": {"Transit Size(MB)": 0, "Transit Time(ms)": 0, "Bandwidth(GB/s)": 0, "Large Packet Ratio": 0,
               "Size Distribution": {}}}},
  "Total Op Info": {"Communication Time Info": {"Start Timestamp(us)": 0, "Elapse Time(ms)": 12.3456785}}},
 "p2p": {"hcom_send__12_0@pp_group": {
    "Communication Time Info": {"Start Timestamp(us)": 1736413971600000, "Elapse Time(ms)": 0.5,
      "Transit Time(ms)": 0.25, "Wait Time(ms)": 0, "Synchronization Time(ms)": 0, "Idle Time(ms)": 0.25},
    "Communication Bandwidth Info": {}}}},
 "step": {"collective": {"hcom_broadcast__1_0@g": {"Communication Time Info": {
    "Start Timestamp(us)": "1736413971700000.5", "Elapse Time(ms)": 1, "Transit Time(ms)": 1,
    "Wait Time(ms)": 0, "Synchronization Time(ms)": 0, "Idle Time(ms)": 0}}}}}
"""


def test_communication_json(tmp_path):
    path = tmp_path / "communication.json"
    path.write_text(COMMUNICATION)
    ops, issues = read_communication(path)
    assert issues == []
    assert [(o.name, o.group, o.step, o.kind, o.rank) for o in ops] == [
        ("hcom_allReduce__428_0_1", "14286941414124", 3, "collective", -1),
        ("hcom_send__12_0", "pp_group", 3, "p2p", -1),
        ("hcom_broadcast__1_0", "g", -1, "collective", -1),
    ]
    a, send, bcast = ops
    assert a.start_ns == 1736413971558972912  # beyond float64: decoded exactly
    assert a.elapse_ns == exact("12.3456785", 10**6) == 12345679
    assert a.wait_ns == exact("8.0000005", 10**6) and a.transit_ns == 3_200_000
    assert a.sync_ns == 7_500_000 and a.idle_ns == 1_145_400
    assert a.bandwidth["HCCS"]["Bandwidth(GB/s)"] == 80.0
    assert a.bandwidth["HCCS"]["Size Distribution"] == {"4.0": [64, 3.2]}
    assert set(a.bandwidth) == {"HCCS", "RDMA"}
    assert send.start_ns == 1736413971600000000 and send.elapse_ns == 500_000
    assert bcast.start_ns == 1736413971700000500 and bcast.elapse_ns == 1_000_000 and bcast.bandwidth == {}


def test_communication_json_bad_op_is_skipped(tmp_path):
    path = tmp_path / "communication.json"
    path.write_text(json.dumps({"step1": {"collective": {
        "hcom_allGather__1@g": {"Communication Time Info": {"Start Timestamp(us)": "soon", "Elapse Time(ms)": 1}},
        "hcom_allGather__2@g": {"Communication Bandwidth Info": {}},
        "hcom_allGather__3@g": {"Communication Time Info": {"Start Timestamp(us)": 5, "Elapse Time(ms)": 2}},
    }}}))
    ops, issues = read_communication(path)
    assert [o.name for o in ops] == ["hcom_allGather__3"]
    assert ops[0].start_ns == 5000 and ops[0].elapse_ns == 2_000_000 and ops[0].wait_ns == -1
    assert len(issues) == 2 and all(i.path == str(path) for i in issues)


@pytest.mark.parametrize("number", ["1.5e99999999999999999999999999", "-2.5E99999999999999999999",
                                    "1e999999999999999999", "7e999999999999999990"])
@pytest.mark.parametrize("field", ["Start Timestamp(us)", "Elapse Time(ms)", "Wait Time(ms)"])
def test_communication_json_exponent_past_decimal_range_is_skipped(tmp_path, field, number):
    """Found by the fuzz campaign (seed 26): valid JSON numbers whose exponent Decimal refuses
    (InvalidOperation) or whose ms -> ns product overflows the decimal context (Overflow) ended the
    run as an internal error; the op is skipped with a notice naming the file."""
    times = {"Start Timestamp(us)": 5, "Elapse Time(ms)": 2, "Wait Time(ms)": 0}
    bad = json.dumps({**times, field: 0}).replace(f'"{field}": 0', f'"{field}": {number}')
    path = tmp_path / "communication.json"
    path.write_text('{"step1": {"collective": {'
                    f'"hcom_allGather__1@g": {{"Communication Time Info": {bad}}}, '
                    f'"hcom_allGather__2@g": {{"Communication Time Info": {json.dumps(times)}}}}}}}}}')
    ops, issues = read_communication(path)
    assert [o.name for o in ops] == ["hcom_allGather__2"]
    assert len(issues) == 1 and issues[0].path == str(path) and "hcom_allGather__1" in issues[0].message


def test_cluster_communication_fixture():
    path = shared_fixture(CLUSTER_COMM)
    data = raw_json(path)
    expected = []
    for _group, steps in data.items():
        for _step, step_ops in steps.items():
            for op_key, per_rank in step_ops.items():
                for rank, info in per_rank.items():
                    expected.append((op_key, int(rank), info["Communication Time Info"]))
    ops, issues = read_communication(path)
    assert issues == []
    assert len(ops) == len(expected) == 4
    for op, (op_key, rank, times) in zip(ops, expected):
        assert f"{op.name}@{op.group}" == op_key and op.rank == rank and op.step == -1
        assert op.start_ns == exact(times["Start Timestamp(us)"], 1000)
        assert op.elapse_ns == exact(times["Elapse Time(ms)"], 10**6)
        assert op.wait_ns == exact(times["Wait Time(ms)"], 10**6)
        assert op.sync_ns == exact(times["Synchronization Time(ms)"], 10**6)
    assert {o.rank for o in ops} == {0, 1}
    assert set(ops[0].bandwidth) == {"RDMA", "HCCS", "PCIE", "SDMA"}


# -- communication_matrix.json -----------------------------------------------------------------------


def test_communication_matrix(tmp_path):
    doc = {"step1": {"collective": {"allreduce-top1@g": {"0-1": {"Transport Type": "HCCS", "Transit Size(MB)": 4.0,
                                                                "Transit Time(ms)": 0.05, "Bandwidth(GB/s)": 80.0,
                                                                "Op Name": "hcom_allReduce__1_0_1"}}},
                     "p2p": {}},
           "bogus": 3}
    path = tmp_path / "communication_matrix.json"
    path.write_text(json.dumps(doc))
    matrix, issues = read_communication_matrix(path)
    assert matrix == {"step1": doc["step1"]}
    (issue,) = issues
    assert "'bogus'" in issue.message


# -- msprof info.json ----------------------------------------------------------------------------------


def test_msprof_info_device_info_list(tmp_path):
    path = tmp_path / "info.json"
    path.write_text(json.dumps({"devices": "0", "platform_version": "5", "DeviceInfo": [
        {"id": 0, "ai_core_num": 24, "aic_frequency": "1800", "aiv_num": 48, "aiv_frequency": "1800",
         "hwts_frequency": "50"}]}))
    info = read_msprof_info(path)
    assert (info.ai_core_num, info.aiv_num, info.aic_frequency_mhz, info.device_id) == (24, 48, 1800.0, 0)
    assert info.extra["platform_version"] == "5" and info.issues == []


def test_msprof_info_flat(tmp_path):
    path = tmp_path / "info.json"
    path.write_text(json.dumps({"ai_core_num": 20, "aiv_num": 40, "aic_frequency": "fast"}))
    info = read_msprof_info(path)
    assert info.ai_core_num == 20 and info.aiv_num == 40 and info.aic_frequency_mhz is None
    assert "aic_frequency" in info.issues[0].message
