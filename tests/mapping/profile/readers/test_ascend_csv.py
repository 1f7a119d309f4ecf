"""Tests of mapping.readers.ascend_csv on the real fixtures and on spec-exact synthetic files.

Expected figures are computed here from the files themselves with the csv module and Decimal
(µs -> ns exactly, half-up beyond three decimals), or from the rows the test writes.
"""

from __future__ import annotations

import csv
from collections import Counter, defaultdict
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import shared_fixture

from msprof_lsp.mapping.errors import ProfileError
from msprof_lsp.mapping.profile.frames import StackTable
from msprof_lsp.mapping.profile.model import (
    HOST_OP_SCHEMA,
    KERNEL_SCHEMA,
    MEMORY_RECORD_SCHEMA,
    OP_MEMORY_SCHEMA,
)
from msprof_lsp.mapping.profile.readers.ascend_csv import (
    API_STATISTIC_COLUMNS,
    read_api_statistic,
    read_communication_statistic,
    read_kernel_table,
    read_memory_record,
    read_msprof_step_trace,
    read_op_statistic,
    read_operator_details,
    read_operator_memory,
    read_step_trace_time,
)

KD_2025 = "Ascend-msprof-analyze/test/ut/advisor/compute_advice/data/kernel_details.csv"
KD_2023 = "Ascend-msprof-analyze/test/ut/advisor/advisor_backend/compute_advice/kernel_details.csv"
TEST_CSV = "Ascend-msprof-analyze/test/resource/test.csv"
OP_MEMORY = (
    "verl-project-rl-insight/data/recipe/memory_data/20260526_085155_ascend_pt/"
    "ASCEND_PROFILER_OUTPUT/operator_memory.csv"
)
CLUSTER_STEP = "Ascend-msprof-analyze/test/resource/advisor/cluster_analysis_output/cluster_step_trace_time.csv"


# -- independent helpers -------------------------------------------------------------------------


def ns(us_text: str) -> int:
    """µs text -> ns with Decimal, half-up (the test's own reference conversion)."""
    return int((Decimal(us_text.strip()) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def scaled(text: str, factor: int) -> int:
    return int((Decimal(text.strip()) * factor).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def dict_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def cell(value: str) -> str:
    """Quote one cell the way torch_npu's files hold it (QUOTE_MINIMAL; TAB cells quoted too)."""
    if any(c in value for c in ',"\t\r\n'):
        return '"' + value.replace('"', '""') + '"'
    return value


def write_csv(
    path: Path,
    header: list[str],
    rows: list[list[str]],
    *,
    eol: str = "\r\n",
    encoding: str = "utf-8",
    final_eol: bool = True,
) -> Path:
    lines = [",".join(cell(c) for c in r) for r in [header, *rows]]
    text = eol.join(lines) + (eol if final_eol else "")
    path.write_bytes(text.encode(encoding))
    return path


def strip_quotes(shape: str) -> str:
    return shape[1:-1] if len(shape) >= 2 and shape[0] == shape[-1] == '"' else shape


# -- real fixtures -------------------------------------------------------------------------------


def test_kernel_details_2025_fixture():
    path = shared_fixture(KD_2025)
    rows = dict_rows(path)
    table = read_kernel_table(path)
    frame = table.to_frame()
    assert table.issues == []
    assert table.length == len(rows) == 29
    assert list(frame["name"]) == [r["Name"] for r in rows]
    # exact ns of every start (TAB inside the quoted cell) and duration
    assert frame["start_ns"].tolist() == [ns(r["Start Time(us)"]) for r in rows]
    assert frame["start_ns"].iloc[0] == 1736413971558972912
    assert frame["dur_ns"].tolist() == [ns(r["Duration(us)"]) for r in rows]
    assert frame["wait_ns"].tolist() == [ns(r["Wait Time(us)"]) for r in rows]
    # totals per Type and per Accelerator Core
    per_type: dict[str, int] = defaultdict(int)
    per_core: dict[str, int] = defaultdict(int)
    for r in rows:
        per_type[r["Type"]] += ns(r["Duration(us)"])
        per_core[r["Accelerator Core"]] += ns(r["Duration(us)"])
    assert frame.groupby("type", observed=True)["dur_ns"].sum().to_dict() == per_type
    assert frame.groupby("core", observed=True)["dur_ns"].sum().to_dict() == per_core
    # Step Id, Block Dim alias, no Device_id, task ids, triple-quoted shapes
    assert frame["step"].tolist() == [int(r["Step Id"]) for r in rows]
    assert frame["block_dim"].tolist() == [int(r["Block Dim"]) for r in rows]
    assert (frame["device"] == -1).all()
    assert frame["task_id"].tolist() == [int(r["Task ID"]) for r in rows]
    assert frame["input_shapes"].tolist() == [strip_quotes(r["Input Shapes"]) for r in rows]
    assert frame["output_shapes"].tolist() == [strip_quotes(r["Output Shapes"]) for r in rows]
    assert "8192,15365;8192,4096" in set(frame["input_shapes"])
    assert frame["op_state"].tolist() == [r["OP State"] for r in rows]
    # PMU columns: every numeric extra column, under its original header
    header = next(csv.reader(path.open(newline="")))
    pmu_headers = header[header.index("Context ID") + 1 :]
    assert {c for c in frame.columns if c.startswith("pmu:")} == {"pmu:" + h for h in pmu_headers} | {"pmu:Mix Block Num"}
    for h in ("aic_mac_ratio", "aic_mte2_ratio", "cube_utilization(%)"):
        assert frame["pmu:" + h].tolist() == [float(r[h]) for r in rows]
    assert frame["pmu:Mix Block Num"].tolist() == [float(r["Mix Block Dim"]) for r in rows]
    # link columns at their defaults, schema dtypes
    assert (frame["host_op"] == -1).all() and (frame["link"] == "none").all()
    assert list(frame.columns[: len(KERNEL_SCHEMA)]) == list(KERNEL_SCHEMA)


def test_kernel_details_2023_fixture():
    path = shared_fixture(KD_2023)
    rows = dict_rows(path)
    frame = read_kernel_table(path).to_frame()
    assert len(frame) == len(rows) == 591
    cores = Counter(r["Accelerator Core"] for r in rows)
    assert cores["HCCL"] == 19 and cores["AI_CPU"] == 7
    assert Counter(frame["core"]) == cores
    hccl = frame[frame["core"] == "HCCL"]
    assert (hccl["task_id"] == -1).all() and (hccl["stream"] == -1).all()  # N/A -> -1
    assert (hccl["input_shapes"] == "").all() and (hccl["input_formats"] == "").all()
    assert (hccl["block_dim"] == 0).all()
    ai_cpu = frame[frame["core"] == "AI_CPU"]
    assert ai_cpu["name"].str.startswith("trans_Cast_").all()
    per_core: dict[str, int] = defaultdict(int)
    for r in rows:
        per_core[r["Accelerator Core"]] += ns(r["Duration(us)"])
    assert frame.groupby("core", observed=True)["dur_ns"].sum().to_dict() == per_core
    assert frame["start_ns"].tolist() == [ns(r["Start Time(us)"]) for r in rows]
    # NULL and N/A formats both become "", real formats stay
    expected_formats = ["" if r["Input Formats"] in ("NULL", "N/A") else r["Input Formats"] for r in rows]
    assert frame["input_formats"].tolist() == expected_formats
    assert "NCHW;NCHW" in set(frame["input_formats"])
    # ArithmeticUtilization PMU set; N/A PMU cells (HCCL rows) are NaN
    assert "pmu:aic_mac_fp16_ratio" in frame.columns and "pmu:aiv_vec_fp32_ratio" in frame.columns
    assert hccl["pmu:aicore_time(us)"].isna().all()
    adamw = [r for r in rows if r["Type"] == "ApplyAdamW"]
    assert len(frame[frame["type"] == "ApplyAdamW"]) == len(adamw) == 28


def test_acl_op_test_csv_fixture():
    path = shared_fixture(TEST_CSV)
    rows = dict_rows(path)
    frame = read_kernel_table(path).to_frame()
    assert len(frame) == len(rows) == 8
    assert frame["name"].tolist() == [r["Name"] for r in rows]
    assert (frame["type"] == "").all() and (frame["core"] == "").all()  # N/A
    # 0-4 decimals: "932.0498" rounds half-up to 932050 ns
    assert frame["dur_ns"].tolist() == [ns(r["Duration(us)"]) for r in rows]
    assert frame["dur_ns"].iloc[0] == 932050
    assert frame["start_ns"].tolist() == [ns(r["Start Time(us)"]) for r in rows]
    assert frame["wait_ns"].tolist() == [ns(r["Wait Time(us)"]) for r in rows]
    assert (frame["step"] == -1).all()


def test_operator_memory_fixture():
    path = shared_fixture(OP_MEMORY)
    rows = dict_rows(path)
    frame, issues = read_operator_memory(path)
    assert issues == []
    assert len(frame) == len(rows) == 49
    assert list(frame.columns) == list(OP_MEMORY_SCHEMA)
    assert frame["size_bytes"].tolist() == [scaled(r["Size(KB)"], 1024) for r in rows]
    assert frame["alloc_ns"].tolist() == [ns(r["Allocation Time(us)"]) for r in rows]
    release = [ns(r["Release Time(us)"]) if r["Release Time(us)"].strip() else -1 for r in rows]
    assert frame["release_ns"].tolist() == release
    assert frame["dur_ns"].tolist() == [ns(r["Duration(us)"]) if r["Duration(us)"].strip() else -1 for r in rows]
    mb = 1 << 20
    assert frame["alloc_reserved_bytes"].tolist() == [scaled(r["Allocation Total Reserved(MB)"], mb) for r in rows]
    assert frame["alloc_allocated_bytes"].tolist() == [
        scaled(r["Allocation Total Allocated(MB)"], mb) for r in rows
    ]
    assert set(frame["device_type"]) == {r["Device Type"] for r in rows} == {"NPU:0"}
    assert (frame["device"] == 0).all()
    assert frame["name"].tolist() == [r["Name"] for r in rows]


def test_cluster_step_trace_time_fixture():
    path = shared_fixture(CLUSTER_STEP)
    rows = dict_rows(path)
    steps, issues = read_step_trace_time(path)
    assert issues == []
    rank_rows = [r for r in rows if r["Type"] == "rank"]
    assert len(steps) == len(rank_rows) == 8
    assert [s.device for s in steps] == [int(r["Index"]) for r in rank_rows]
    for s, r in zip(steps, rank_rows):
        assert s.step == -1
        assert s.computing_ns == ns(r["Computing"])
        assert s.comm_not_overlapped_ns == ns(r["Communication(Not Overlapped)"])
        assert s.free_ns == ns(r["Free"])
        assert s.stage_ns == ns(r["Stage"])
        assert s.comm_not_overlapped_excl_receive_ns == ns(r["Communication(Not Overlapped and Exclude Receive)"])
        assert s.preparing_ns == -1  # no Preparing column
    # Stage = Computing + Communication(Not Overlapped) + Free when Bubble is 0; the file's Stage
    # is float32-rounded (1754645.75), so compare relatively
    for s in steps:
        assert abs(s.step_time_ns - s.stage_ns) <= 1e-6 * s.stage_ns


# -- kernel tables: header variants ---------------------------------------------------------------

LEVEL0 = ["Step Id", "Device_id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)",
          "Wait Time(us)", "Block Num", "Mix Block Num", "Input Shapes", "Input Data Types", "Input Formats",
          "Output Shapes", "Output Data Types", "Output Formats"]
LEVEL1 = ["Device_id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State", "Accelerator Core",
          "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Num", "Mix Block Num", "HF32 Eligible",
          "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types",
          "Output Formats", "Context ID", "aicore_time(us)", "aic_total_cycles", "aic_mac_ratio",
          "aic_mte2_ratio", "aiv_time(us)", "aiv_vec_ratio", "cube_utilization(%)"]
OP_SUMMARY = ["Device_id", "Model ID", "Task ID", "Stream ID", "Op Name", "OP Type", "OP State", "Task Type",
              "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)", "Block Num", "Mix Block Num",
              "HF32 Eligible", "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes",
              "Output Data Types", "Output Formats", "Context ID", "aicore_time(us)", "aic_total_cycles",
              "aic_mac_ratio", "aic_mte2_ratio", "aiv_time(us)", "aiv_vec_ratio", "cube_utilization(%)"]

# Logical kernels used to fill any header: (name, type, core, start, dur, wait, shapes)
KERNELS = [
    ("aclnnMm_MatMulCommon_MatMulV2", "MatMulV2", "AI_CORE", "1736413971558972.912\t", "185.504", "1.087",
     '"81920,4096;8192,512"'),
    ("aclnnRelu_Relu_Relu", "Relu", "AI_VECTOR_CORE", "1736413971559200.5\t", "3.2", "42.29", '"1;;1;2"'),
    ("hcom_allReduce__428_0_1", "hcom_allReduce_", "HCCL", "1736413971560000\t", "1500", "0", "N/A"),
    ("aclnnAdd_AddAiCore_Add", "Add", "AI_VECTOR_CORE", "1736413971561600.25\t", "1.58", "0.0", '";"'),
    ("aclnnCast_CastAiCpu_Cast", "Cast", "AI_CPU", "1736413971561700.001\t", "20.999", "98.142", '""'),
]
ALIASES = {  # logical field -> every header spelling
    "step": ("Step Id", "Step ID"), "name": ("Name", "Op Name"), "type": ("Type", "OP Type"),
    "core": ("Accelerator Core", "Task Type"), "start": ("Start Time(us)", "Task Start Time(us)"),
    "dur": ("Duration(us)", "Task Duration(us)"), "wait": ("Wait Time(us)", "Task Wait Time(us)"),
    "block": ("Block Num", "Block Dim"), "mix": ("Mix Block Num", "Mix Block Dim"),
    "shapes": ("Input Shapes",), "oshapes": ("Output Shapes",), "cube": ("cube_utilization(%)", "cube_utilization( %)"),
}


def kernel_rows(header: list[str], *, tab: bool = True) -> list[list[str]]:
    rows = []
    for i, (name, typ, core, start, dur, wait, shapes) in enumerate(KERNELS):
        values = {"step": "3" if i < 4 else "", "name": name, "type": typ, "core": core,
                  "start": start if tab else start.rstrip("\t"), "dur": dur, "wait": wait,
                  "block": "0" if core == "HCCL" else str(8 * (i + 1)), "mix": "0", "shapes": shapes,
                  "oshapes": shapes, "cube": "N/A" if core == "HCCL" else f"{10 * i + 0.5}"}
        row = []
        for h in header:
            key = next((k for k, names in ALIASES.items() if h in names), None)
            if key is not None:
                row.append(values[key])
            elif h == "Device_id":
                row.append("2")
            elif h == "Model ID":
                row.append("4294967295")
            elif h in ("Task ID", "Stream ID"):
                row.append("N/A" if core == "HCCL" else str(100 + i))
            elif h == "OP State":
                row.append("N/A" if core == "HCCL" else "dynamic")
            elif h in ("Input Data Types", "Output Data Types"):
                row.append("N/A" if core == "HCCL" else "DT_BF16")
            elif h in ("Input Formats", "Output Formats"):
                row.append("NULL" if core == "HCCL" else "ND")
            elif h in ("HF32 Eligible",):
                row.append("NO")
            elif h == "Context ID":
                row.append("N/A")
            else:  # PMU
                row.append("N/A" if core == "HCCL" else f"0.{i + 1}")
        rows.append(row)
    return rows


def swap(header: list[str], old: str, new: str) -> list[str]:
    return [new if h == old else h for h in header]


VARIANTS = {
    "level0": ("torch_npu", LEVEL0),
    "level0-short": ("torch_npu", LEVEL0[:9]),
    "level0-no-step": ("torch_npu", LEVEL0[1:]),
    "level1": ("torch_npu", ["Step Id", *LEVEL1]),
    "level1-no-device": ("torch_npu", ["Step ID", *LEVEL1[1:]]),
    "level1-block-dim": ("torch_npu", swap(swap(LEVEL1, "Block Num", "Block Dim"), "Mix Block Num", "Mix Block Dim")),
    "level1-cube-space": ("torch_npu", swap(LEVEL1, "cube_utilization(%)", "cube_utilization( %)")),
    "op-summary": ("msprof", OP_SUMMARY),
    "op-summary-minimal": ("msprof", OP_SUMMARY[:11]),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("eol", ["\r\n", "\n"], ids=["crlf", "lf"])
@pytest.mark.parametrize("tab", [True, False], ids=["tab", "notab"])
def test_kernel_header_variants(tmp_path, variant, eol, tab):
    producer, header = VARIANTS[variant]
    path = write_csv(tmp_path / "kernel_details.csv", header, kernel_rows(header, tab=tab), eol=eol)
    table = read_kernel_table(path, producer=producer)
    frame = table.to_frame()
    assert table.issues == []
    assert len(frame) == len(KERNELS)
    assert frame["name"].tolist() == [k[0] for k in KERNELS]
    assert frame["type"].tolist() == [k[1] for k in KERNELS]
    assert frame["core"].tolist() == [k[2] for k in KERNELS]
    assert frame["start_ns"].tolist() == [ns(k[3]) for k in KERNELS]
    assert frame["dur_ns"].tolist() == [ns(k[4]) for k in KERNELS]
    assert frame["wait_ns"].tolist() == [ns(k[5]) for k in KERNELS]
    has = set(header)
    if has & set(ALIASES["step"]):
        assert frame["step"].tolist() == [3, 3, 3, 3, -1]
    else:
        assert (frame["step"] == -1).all()
    assert (frame["device"] == (2 if "Device_id" in has else -1)).all()
    if has & set(ALIASES["block"]):
        assert frame["block_dim"].tolist() == [8, 16, 0, 32, 40]
    if "Input Shapes" in has:
        assert frame["input_shapes"].tolist() == ["81920,4096;8192,512", "1;;1;2", "", ";", ""]
        assert frame["input_formats"].tolist() == ["ND", "ND", "", "ND", "ND"]
    if "Task ID" in has:
        assert frame["task_id"].tolist() == [100, 101, -1, 103, 104]
    if has & set(ALIASES["cube"]):
        cube = frame["pmu:cube_utilization(%)"].tolist()
        assert cube[:2] == [0.5, 10.5] and np.isnan(cube[2])
    if has & set(ALIASES["mix"]):
        assert "pmu:Mix Block Num" in frame.columns
    assert not any(c in frame.columns for c in ("pmu:Model ID", "pmu:HF32 Eligible", "pmu:Context ID"))
    # schema dtypes
    assert frame["start_ns"].dtype == np.int64 and isinstance(frame["name"].dtype, pd.CategoricalDtype)


def test_decimals_zero_to_three_are_exact(tmp_path):
    starts = ["1736413971558972", "1736413971558972.9", "1736413971558972.91", "1736413971558972.912"]
    rows = [[f"k{i}", "Add", "AI_CORE", s + "\t", s[-5:], "0"] for i, s in enumerate(starts)]
    path = write_csv(tmp_path / "k.csv", LEVEL0[2:8], rows)
    frame = read_kernel_table(path).to_frame()
    assert frame["start_ns"].tolist() == [1736413971558972000, 1736413971558972900, 1736413971558972910,
                                         1736413971558972912]
    assert frame["dur_ns"].tolist() == [ns(s[-5:]) for s in starts]


# -- kernel tables: encodings, truncation, bad input --------------------------------------------------


def test_utf8_bom(tmp_path):
    header = LEVEL0[:9]
    path = tmp_path / "k.csv"
    write_csv(path, header, kernel_rows(header))
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    table = read_kernel_table(path)
    assert table.header[0] == "Step Id" and table.issues == []
    assert table.to_frame()["step"].tolist() == [3, 3, 3, 3, -1]


def test_gb18030_fallback(tmp_path):
    header = LEVEL0[2:9]
    rows = [["自定义算子_Add", "Add", "AI_CORE", "1736413971558972.912\t", "1.5", "0", "1"]]
    path = write_csv(tmp_path / "k.csv", header, rows, encoding="gb18030")
    with pytest.raises(UnicodeDecodeError):
        path.read_bytes().decode("utf-8")
    table = read_kernel_table(path)
    assert table.to_frame()["name"].tolist() == ["自定义算子_Add"]
    assert any("GB18030" in i.message and i.path == str(path) for i in table.issues)


def test_utf8_non_ascii_names(tmp_path):
    header = LEVEL0[2:9]
    rows = [["算子_Add", "Add", "AI_CORE", "1.5", "1.5", "0", "1"]]
    table = read_kernel_table(write_csv(tmp_path / "k.csv", header, rows))
    assert table.issues == [] and table.to_frame()["name"].tolist() == ["算子_Add"]


@pytest.mark.parametrize("cut", ["inside-quoted-time", "missing-fields"])
def test_truncated_last_row(tmp_path, cut):
    header = LEVEL0[:9]
    path = write_csv(tmp_path / "k.csv", header, kernel_rows(header))
    data = path.read_bytes()
    last_start = data.rstrip(b"\r\n").rfind(b"\n") + 1
    if cut == "inside-quoted-time":
        end = data.index(b"\t", last_start)  # stops inside the quoted start time
    else:
        end = data.index(b",", data.index(b"\t", last_start))  # after the time, fields missing
    path.write_bytes(data[:end])
    line = data[:last_start].count(b"\n") + 1  # physical line of the cut row
    table = read_kernel_table(path)
    assert table.length == len(KERNELS) - 1
    assert table.to_frame()["name"].tolist() == [k[0] for k in KERNELS[:-1]]
    (issue,) = table.issues
    assert issue.line == line == 6 and f"file ends mid-row at line {line}" in issue.message
    assert issue.path == str(path)


def test_complete_last_row_without_final_newline_is_kept(tmp_path):
    header = LEVEL0[:9]
    path = write_csv(tmp_path / "k.csv", header, kernel_rows(header), final_eol=False)
    table = read_kernel_table(path)
    assert table.length == len(KERNELS) and table.issues == []


def test_missing_required_column(tmp_path):
    header = [h for h in LEVEL0 if h != "Duration(us)"]
    path = write_csv(tmp_path / "kernel_details.csv", header, kernel_rows(header))
    with pytest.raises(ProfileError) as err:
        read_kernel_table(path)
    assert err.value.path == str(path) and err.value.line == 1
    assert "Duration(us)" in err.value.message and "Start Time(us)" in err.value.message  # header shown


def test_missing_required_column_names_msprof_spelling(tmp_path):
    header = [h for h in OP_SUMMARY if h != "Op Name"]
    path = write_csv(tmp_path / "op_summary_0_1.csv", header, kernel_rows(header))
    with pytest.raises(ProfileError, match="'Op Name'"):
        read_kernel_table(path, producer="msprof")


def test_empty_file(tmp_path):
    path = tmp_path / "kernel_details.csv"
    path.write_bytes(b"")
    with pytest.raises(ProfileError, match="empty file") as err:
        read_kernel_table(path)
    assert err.value.path == str(path)


def test_missing_file(tmp_path):
    with pytest.raises(ProfileError, match="cannot read"):
        read_kernel_table(tmp_path / "nope.csv")


def test_header_only(tmp_path):
    path = write_csv(tmp_path / "k.csv", ["Step Id", *LEVEL1], [])
    table = read_kernel_table(path)
    frame = table.to_frame()
    assert table.length == 0 and len(frame) == 0 and table.issues == []
    assert list(frame.columns[: len(KERNEL_SCHEMA)]) == list(KERNEL_SCHEMA)


def test_binary_content(tmp_path):
    path = tmp_path / "k.csv"
    path.write_bytes(b"Name,Type\r\nabc,\x00\x01\x02\r\n")
    with pytest.raises(ProfileError, match="NUL") as err:
        read_kernel_table(path)
    assert err.value.line == 2


def test_unparseable_numbers(tmp_path):
    header = LEVEL0[:9]
    rows = kernel_rows(header)
    rows[1][6] = "1.2.3"  # Duration: required -> row skipped
    rows[3][8] = "many"  # Block Num: defaulted to -1
    rows[4][5] = "N/A"  # Start: required and absent -> row skipped
    path = write_csv(tmp_path / "k.csv", header, rows)
    table = read_kernel_table(path)
    frame = table.to_frame()
    assert frame["name"].tolist() == [KERNELS[0][0], KERNELS[2][0], KERNELS[3][0]]
    assert frame["block_dim"].tolist() == [8, 0, -1]
    by_line = {i.line: i.message for i in table.issues}
    assert set(by_line) == {3, 5, 6}  # data row k sits on line k + 2
    assert "'1.2.3'" in by_line[3] and "row skipped" in by_line[3]
    assert "'many'" in by_line[5] and "left empty" in by_line[5]
    assert "Start Time(us)" in by_line[6] and "row skipped" in by_line[6]


def test_many_bad_cells_are_summarised(tmp_path):
    header = LEVEL0[2:9]
    rows = [[f"k{i}", "Add", "AI_CORE", f"{1000 + i}.5", "x" if i % 2 else "1.0", "0", "1"] for i in range(40)]
    table = read_kernel_table(write_csv(tmp_path / "k.csv", header, rows))
    assert table.length == 20
    assert len(table.issues) == 6  # five with lines, one summary
    assert [i.line for i in table.issues[:5]] == [3, 5, 7, 9, 11]
    assert "15 more rows" in table.issues[5].message


def test_row_with_extra_fields_is_skipped(tmp_path):
    header = LEVEL0[2:9]
    rows = [["a", "Add", "AI_CORE", "1.5", "1", "0", "1"], ["b,c", "Add", "AI_CORE", "2.5", "1", "0", "1"],
            ["d", "Add", "AI_CORE", "3.5", "1", "0", "1"]]
    path = tmp_path / "k.csv"
    text = ",".join(header) + "\r\n" + "\r\n".join(",".join(r) for r in rows) + "\r\n"  # b,c unquoted
    path.write_text(text, newline="")
    table = read_kernel_table(path)
    assert table.to_frame()["name"].tolist() == ["a", "d"]
    (issue,) = table.issues
    assert issue.line == 3 and "8 fields" in issue.message


def test_unclosed_quote_drops_the_rest_with_its_line(tmp_path):
    header = LEVEL0[2:9]
    path = tmp_path / "k.csv"
    # row 2 opens a quote that never closes although the file ends with a line break
    path.write_text(",".join(header) + '\r\na,Add,AI_CORE,1.5,1,0,1\r\nb,Add,AI_CORE,"2.5,1,0,1\r\nc,Add\r\n', newline="")
    table = read_kernel_table(path)
    assert table.to_frame()["name"].tolist() == ["a"]
    (issue,) = table.issues
    assert issue.line == 3 and "file ends mid-row at line 3" in issue.message and "never closed" in issue.message


# -- operator_details.csv (no public sample: spec-exact, csv.writer defaults) --------------------------

OPERATOR_HEADER = ["Name", "Input Shapes", "Call Stack", "Host Self Duration(us)", "Host Total Duration(us)",
                   "Device Self Duration(us)", "Device Total Duration(us)",
                   "Device Self Duration With AICore(us)", "Device Total Duration With AICore(us)"]
STACK_A = ["/home/ma-user/work/model.py(42): forward", "/usr/lib/python3.9/site-packages/torch/nn/modules/module.py(1501): _call_impl",
           "/home/ma-user/work/train.py(88): <module>"]
STACK_B = ["/home/ma-user/work/model.py(57): forward", "/home/ma-user/work/train.py(88): <module>"]


def operator_rows() -> list[list[str]]:
    """One forward op with a stack, the same stack again, a backward op (no stack), a scope."""
    join = ";\r\n".join
    return [
        ["aten::linear", join(["8,1024", "4096,1024", "4096"]), join(STACK_A), "12.5", "80.25", "0", "35.7", "0", "35.7"],
        ["aten::relu", join(["8,4096", ""]), join(STACK_B), "5", "9.001", "3.2", "3.2", "3.2", "3.2"],
        ["aten::linear", join(["8,1024", "4096,1024", "4096"]), join(STACK_A), "11", "70", "0", "30", "0", "30"],
        ["aten::threshold_backward", join(["8,4096", "8,4096", ""]), "", "4", "6.5", "2.1", "2.1", "2.1", "2.1"],
        ["Optimizer.step#AdamW.step", "", "", "100", "2500.125", "0", "1200", "0", "1200"],
    ]


def write_operator_details(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])  # torch_npu: csv.writer defaults
    return path


def test_operator_details_multiline_cells(tmp_path):
    rows = operator_rows()
    path = write_operator_details(tmp_path / "operator_details.csv", OPERATOR_HEADER, rows)
    raw = path.read_bytes()
    assert b";\r\n" in raw and raw.count(b"\r\n") > len(rows) + 1  # cells span lines
    stacks = StackTable()
    frame, issues = read_operator_details(path, stacks)
    assert issues == []
    assert list(frame.columns) == list(HOST_OP_SCHEMA)
    assert frame["name"].tolist() == [r[0] for r in rows]
    assert frame["input_dims"].tolist() == ["8,1024;4096,1024;4096", "8,4096;", "8,1024;4096,1024;4096",
                                            "8,4096;8,4096;", ""]
    assert frame["dur_ns"].tolist() == [ns(r[4]) for r in rows]
    assert frame["device_self_ns"].tolist() == [ns(r[5]) for r in rows]
    assert frame["device_total_ns"].tolist() == [ns(r[6]) for r in rows]
    assert (frame["start_ns"] == -1).all()
    ids = frame["stack"].tolist()
    assert ids[0] == ids[2] != ids[1] and ids[3] == ids[4] == -1
    assert len(stacks.stacks) == 2
    a = stacks.stacks[ids[0]]
    assert [f.raw for f in a] == STACK_A and a[0].file == "/home/ma-user/work/model.py" and a[0].line == 42
    assert stacks.stacks[ids[1]][-1].func == "<module>"


def test_operator_details_leading_device_id_and_missing_columns(tmp_path):
    header = ["Device_id", "Name", "Input Shapes", "Host Total Duration(us)", "Device Self Duration(us)", "Extra Column"]
    rows = [["0", "aten::add", "2,3;\r\n2,3", "4.5", "1.25", "x"], ["0", "aten::mul", "", "N/A", "", "y"]]
    path = write_operator_details(tmp_path / "operator_details.csv", header, rows)
    frame, issues = read_operator_details(path, StackTable())
    assert issues == []
    assert frame["name"].tolist() == ["aten::add", "aten::mul"]
    assert frame["input_dims"].tolist() == ["2,3;2,3", ""]
    assert frame["dur_ns"].tolist() == [4500, 0]
    assert frame["device_self_ns"].tolist() == [1250, -1]
    assert (frame["device_total_ns"] == -1).all() and (frame["stack"] == -1).all()


def test_operator_details_bad_cell_reports_physical_line(tmp_path):
    rows = operator_rows()
    rows[3][6] = "oops"  # Device Total Duration of the 4th op
    path = write_operator_details(tmp_path / "operator_details.csv", OPERATOR_HEADER, rows)
    frame, issues = read_operator_details(path, StackTable())
    assert len(frame) == len(rows)
    # the 4th record starts after the header and three multi-line records
    text = path.read_bytes().decode()
    records_before = text.split("aten::threshold_backward")[0]
    line = records_before.count("\n") + 1
    (issue,) = issues
    assert issue.line == line and "'oops'" in issue.message
    assert frame["device_total_ns"].tolist()[3] == -1


def test_operator_details_missing_name_column(tmp_path):
    path = write_operator_details(tmp_path / "operator_details.csv", OPERATOR_HEADER[1:], [r[1:] for r in operator_rows()])
    with pytest.raises(ProfileError, match="'Name'"):
        read_operator_details(path, StackTable())


# -- statistics, step traces, memory ----------------------------------------------------------------


def test_op_statistic(tmp_path):
    header = ["Device_id", "OP Type", "Core Type", "Count", "Total Time(us)", "Min Time(us)", "Avg Time(us)",
              "Max Time(us)", "Ratio(%)"]
    rows = [["0", "MatMulV2", "AI_CORE", "120", "35210.512", "250.1", "293.421", "402.88", "41.3"],
            ["0", "hcom_allReduce_", "HCCL", "4", "1200", "300", "300", "300", "1.41"]]
    path = write_csv(tmp_path / "op_statistic.csv", header, rows)
    stats, issues = read_op_statistic(path)
    assert issues == []
    assert [(s.op_type, s.core, s.count) for s in stats] == [("MatMulV2", "AI_CORE", 120), ("hcom_allReduce_", "HCCL", 4)]
    assert stats[0].total_ns == ns("35210.512") and stats[0].avg_ns == ns("293.421")
    assert stats[0].min_ns == ns("250.1") and stats[0].max_ns == ns("402.88") and stats[0].ratio == 41.3


def test_op_statistic_msprof_without_device(tmp_path):
    header = ["OP Type", "Core Type", "Count", "Total Time(us)", "Min Time(us)", "Avg Time(us)", "Max Time(us)",
              "Ratio(%)"]
    path = write_csv(tmp_path / "op_statistic_0_1_20240101.csv", header, [["Add", "AI_VECTOR_CORE", "3", "3", "1", "1", "1", "100"]], eol="\n")
    (stat,), issues = read_op_statistic(path)
    assert issues == [] and stat.total_ns == 3000 and stat.count == 3


def test_step_trace_time_torch_npu(tmp_path):
    header = ["Device_id", "Step", "Computing", "Communication(Not Overlapped)", "Overlapped", "Communication",
              "Free", "Stage", "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing"]
    rows = [["0", "3", "1200.5", "300.25", "50", "350.25", "80.125", "0", "0", "300.25", "12.5"],
            ["-1", "", "10", "0", "0", "0", "5", "0", "0", "0", "0"]]
    path = write_csv(tmp_path / "step_trace_time.csv", header, rows)
    steps, issues = read_step_trace_time(path)
    assert issues == []
    a, b = steps
    assert (a.step, a.device) == (3, 0) and (b.step, b.device) == (-1, -1)
    assert a.computing_ns == 1200500 and a.comm_not_overlapped_ns == 300250 and a.free_ns == 80125
    assert a.overlapped_ns == 50000 and a.comm_ns == 350250 and a.preparing_ns == 12500
    assert a.step_time_ns == 1200500 + 300250 + 80125


def test_step_trace_time_missing_required(tmp_path):
    path = write_csv(tmp_path / "step_trace_time.csv", ["Device_id", "Step", "Computing"], [["0", "1", "5"]])
    with pytest.raises(ProfileError, match="Communication\\(Not Overlapped\\)"):
        read_step_trace_time(path)


def test_msprof_step_trace(tmp_path):
    header = ["Device_id", "Iteration ID", "FP Start(us)", "BP End(us)", "Iteration End(us)", "Iteration Time(us)",
              "FP to BP Time(us)", "Iteration Refresh(us)", "Data Aug Bound(us)", "Model ID", "Reduce Start(us)",
              "Reduce Duration(us)"]
    rows = [["0", "1", "1736413971558972.912\t", "1736413971600000.5\t", "1736413971650000\t", "91027.088",
             "41027.588", "50000", "N/A", "1", "N/A", "N/A"]]
    path = write_csv(tmp_path / "step_trace_0_1_20240101.csv", header, rows, eol="\n")
    (it,), issues = read_msprof_step_trace(path)
    assert issues == []
    assert it.device == 0 and it.iteration_id == 1 and it.model_id == 1
    assert it.fp_start_ns == 1736413971558972912 and it.iteration_end_ns == 1736413971650000000
    assert it.iteration_time_ns == 91027088 and it.data_aug_bound_ns == -1 and it.reduce_start_ns == -1
    step = it.to_step()
    assert step.id == 1 and step.end_ns == it.iteration_end_ns and step.dur_ns == 91027088


def test_api_statistic(tmp_path):
    header = ["Device_id", "Level", "API Name", "Time(us)", "Count", "Avg(us)", "Min(us)", "Max(us)", "Variance"]
    rows = [["host", "acl", "aclnnMatmul", "1520.5", "40", "38.0125", "30", "60.5", "12.25"],
            ["0", "runtime", "launch", "80", "80", "1", "1", "1", "0"]]
    path = write_csv(tmp_path / "api_statistic.csv", header, rows)
    frame, issues = read_api_statistic(path)
    assert issues == []
    assert list(frame.columns) == list(API_STATISTIC_COLUMNS)
    assert frame["device"].tolist() == [-1, 0]
    assert frame["api_name"].tolist() == ["aclnnMatmul", "launch"] and frame["level"].tolist() == ["acl", "runtime"]
    assert frame["time_ns"].tolist() == [1520500, 80000] and frame["avg_ns"].tolist() == [38013, 1000]
    assert frame["count"].tolist() == [40, 80] and frame["variance"].tolist() == [12.25, 0.0]


def test_communication_statistic(tmp_path):
    header = ["Device_id", "OP Type", "Count", "Total Time(us)", "Min Time(us)", "Avg Time(us)", "Max Time(us)", "Ratio(%)"]
    rows = [["0", "hcom_allReduce_", "12", "6000.5", "400", "500.042", "700", "80.5"]]
    path = write_csv(tmp_path / "communication_statistic_0_1.csv", header, rows, eol="\n")
    (s,), issues = read_communication_statistic(path)
    assert issues == [] and s.op_type == "hcom_allReduce_" and s.count == 12
    assert s.total_ns == 6000500 and s.avg_ns == 500042 and s.ratio == 80.5 and s.device == 0


def test_memory_record_torch_npu_mb(tmp_path):
    header = ["Component", "Timestamp(us)", "Total Allocated(MB)", "Total Reserved(MB)", "Total Active(MB)",
              "Stream Ptr", "Device Type"]
    rows = [["PTA", "1779785515596661.420\t", "19071.576171875", "21084", "19071.576171875", "6", "NPU:3"],
            ["GE", "1779785515596700\t", "10.5", "20", "", "", "CPU"]]
    path = write_csv(tmp_path / "memory_record.csv", header, rows)
    frame, issues = read_memory_record(path)
    assert issues == []
    assert list(frame.columns) == list(MEMORY_RECORD_SCHEMA)
    assert frame["ts_ns"].tolist() == [1779785515596661420, 1779785515596700000]
    assert frame["allocated_bytes"].tolist() == [scaled("19071.576171875", 1 << 20), scaled("10.5", 1 << 20)]
    assert frame["reserved_bytes"].tolist() == [21084 << 20, 20 << 20]
    assert frame["active_bytes"].tolist()[1] == -1
    assert frame["device"].tolist() == [3, -1] and frame["component"].tolist() == ["PTA", "GE"]


def test_memory_record_msprof_kb(tmp_path):
    header = ["Device_id", "Component", "Timestamp(us)", "Total Allocated(KB)", "Total Reserved(KB)", "Device"]
    rows = [["1", "APP", "1736413971558972.912\t", "2048.5", "4096", "NPU:1"]]
    path = write_csv(tmp_path / "memory_record_0_1.csv", header, rows, eol="\n")
    frame, issues = read_memory_record(path)
    assert issues == []
    assert frame["allocated_bytes"].tolist() == [2048 * 1024 + 512] and frame["reserved_bytes"].tolist() == [4096 * 1024]
    assert frame["device"].tolist() == [1] and frame["device_type"].tolist() == ["NPU:1"]
    assert frame["ts_ns"].tolist() == [1736413971558972912]


def test_time_beyond_int64_ns_is_an_issue(tmp_path):
    header = LEVEL0[2:9]
    rows = [["a", "Add", "AI_CORE", "9999999999999999.5\t", "1", "0", "1"], ["b", "Add", "AI_CORE", "2.5", "1", "0", "1"]]
    table = read_kernel_table(write_csv(tmp_path / "k.csv", header, rows))
    assert table.to_frame()["name"].tolist() == ["b"]
    (issue,) = table.issues
    assert issue.line == 2 and "Start Time(us)" in issue.message


def test_unknown_text_column_is_not_kept_and_numbers_are(tmp_path):
    header = [*LEVEL0[2:9], "Op Attr", "aic_new_ratio"]
    rows = [["a", "Add", "AI_CORE", "1.5", "1", "0", "1", "keep_dims=1", "0.25"],
            ["b", "Add", "AI_CORE", "2.5", "1", "0", "1", "", "N/A"]]
    table = read_kernel_table(write_csv(tmp_path / "k.csv", header, rows))
    frame = table.to_frame()
    assert "pmu:Op Attr" not in frame.columns
    assert frame["pmu:aic_new_ratio"].tolist()[0] == 0.25 and np.isnan(frame["pmu:aic_new_ratio"].tolist()[1])
    (issue,) = table.issues
    assert "'Op Attr' holds text" in issue.message


def test_text_in_a_pmu_column_is_reported_with_its_line(tmp_path):
    header = [*LEVEL0[2:9], "aic_mac_ratio"]
    rows = [["a", "Add", "AI_CORE", "1.5", "1", "0", "1", "0.5"], ["b", "Add", "AI_CORE", "2.5", "1", "0", "1", "high"],
            ["c", "Add", "AI_CORE", "3.5", "1", "0", "1", "0.75"]]
    table = read_kernel_table(write_csv(tmp_path / "k.csv", header, rows))
    frame = table.to_frame()
    assert frame["name"].tolist() == ["a", "b", "c"]  # a PMU cell is optional: row kept
    values = frame["pmu:aic_mac_ratio"].tolist()
    assert values[0] == 0.5 and np.isnan(values[1]) and values[2] == 0.75
    (issue,) = table.issues
    assert issue.line == 3 and "'high'" in issue.message


def test_cluster_rank_row_with_bad_index(tmp_path):
    header = ["Step", "Type", "Index", "Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free"]
    rows = [["", "rank", "0", "10", "5", "1", "6", "2"], ["", "rank", "x", "10", "5", "1", "6", "2"],
            ["", "stage", "(0, 1)", "10", "5", "1", "6", "2"]]
    steps, issues = read_step_trace_time(write_csv(tmp_path / "cluster_step_trace_time.csv", header, rows))
    assert [s.device for s in steps] == [0] and steps[0].computing_ns == 10000
    (issue,) = issues
    assert issue.line == 3 and "'x'" in issue.message


def test_rows_with_extra_fields_are_summarised(tmp_path):
    header = LEVEL0[2:9]
    path = tmp_path / "k.csv"
    rows = [f"k{i},Add,AI_CORE,{i}.5,1,0,1" + (",extra" if i else "") for i in range(12)]
    path.write_text(",".join(header) + "\r\n" + "\r\n".join(rows) + "\r\n", newline="")
    table = read_kernel_table(path)
    assert table.to_frame()["name"].tolist() == ["k0"]
    assert [i.line for i in table.issues[:5]] == [3, 4, 5, 6, 7]
    assert "6 more rows" in table.issues[5].message and "line 13" in table.issues[5].message
    assert len(table.issues) == 6


def test_header_only_without_final_newline(tmp_path):
    path = write_csv(tmp_path / "k.csv", LEVEL0, [], final_eol=False)
    table = read_kernel_table(path)
    assert table.length == 0 and table.issues == []


def test_operator_details_cut_inside_a_multiline_call_stack(tmp_path):
    rows = operator_rows()
    path = write_operator_details(tmp_path / "operator_details.csv", OPERATOR_HEADER, rows)
    data = path.read_bytes()
    third = data.index(b"aten::linear", data.index(b"aten::relu"))  # start of the 3rd record
    cut = data.index(b";\r\n", data.index(b"model.py", third)) + 3  # just after a frame's line break
    path.write_bytes(data[:cut])
    frame, issues = read_operator_details(path, StackTable())
    assert frame["name"].tolist() == ["aten::linear", "aten::relu"]
    (issue,) = issues
    line = data[:third].count(b"\n") + 1
    assert issue.line == line and f"file ends mid-row at line {line}" in issue.message
