"""How a torch_npu text export is written: the real-world variations and the broken forms.

The defaults give a current (CANN 8.x, Level1) export. Each knob reproduces one variation seen in
real files or named by the reference, or one kind of damaged output for
negative tests.
"""

from __future__ import annotations

from dataclasses import dataclass

# kernel_details.csv header families
KD_AUTO = "auto"  # level0 for Level0, else level1
KD_LEVEL0 = "level0"  # short: [Step Id,] Device_id, Name, Type, Accelerator Core, times, Block Num, shapes
KD_LEVEL1 = "level1"  # all op_summary columns (Device_id, Model ID, ... Context ID) + PMU
KD_2025 = "v2025"  # the 2025 fixture: Block Dim / Mix Block Dim, no Device_id, PipeUtilization
KD_2023 = "v2023"  # the 2023 fixture: no OP State / HF32 Eligible, ArithmeticUtilization, no TAB

ALL_FILES = (
    "trace_view.json",
    "kernel_details.csv",
    "operator_details.csv",
    "step_trace_time.csv",
    "op_statistic.csv",
    "api_statistic.csv",
    "communication.json",
    "communication_matrix.json",
    "profiler_info.json",
    "profiler_metadata.json",
)


@dataclass(frozen=True, slots=True)
class TextVariant:
    kernel_header: str = KD_AUTO
    device_id_column: bool | None = None  # None: as the header family has it
    step_id_column: bool = True  # leading "Step Id" (written when ProfilerStep ranges exist)
    tab_times: bool | None = None  # trailing TAB in CSV start times; None: all but v2023
    trim_decimals: bool | None = None  # CSV start times with 0-3 decimals; None: only v2023
    newline: str = "\r\n"  # torch_npu csv.writer default; "\n" as the stored fixtures
    numeric_ts: bool = False  # trace_view ts as JSON numbers instead of strings
    task_type: str = "core"  # trace device "Task Type": "core" (AI_CORE ...) or "other" (2024 sample)
    overlap_tids: str = "2024"  # 2024: Computing=0..Free=3; 2026: Communication=0, NotOverlapped=1, Computing=2
    enqueue_names: str = "plain"  # "plain": Enqueue; "op": Enqueue@<scope> (newer builds)
    device_label: str = "id"  # "id": "NPU <id>"; "bare": "NPU"
    omit: frozenset[str] = frozenset()  # file names (see ALL_FILES) to leave out
    analyse_done: bool = True  # write ASCEND_PROFILER_OUTPUT/analyse.done
    truncate_trace_bytes: int | None = None  # keep only the first N bytes of trace_view.json
    info_file_rank: bool = True  # profiler_info_{rank}.json (False: profiler_info.json)
    rank_id_string: bool = False  # rank_id "0" (string) instead of 0
    frame_space: bool = True  # "file(12): f" (False: "file(12):f", older builds)
    csv_encoding: str = "utf-8"  # "utf-8-sig" writes a BOM, "gb18030" a legacy Chinese-locale file
