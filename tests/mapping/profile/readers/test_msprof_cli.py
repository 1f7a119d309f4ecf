"""msprof CLI reader on PROF_* trees: the synth writer's output, and trees built here (current
layout with slices, two devices and an older re-export; the CANN 7.0.x / 6.3.RC2 per-device layout;
``--type=db``; raw data only; a truncated timeline). No public msprof sample exists."""

from __future__ import annotations

import csv
import json
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import pytest

from msprof_lsp.mapping.errors import ProfileError
from msprof_lsp.mapping.profile.locations import ProfileLocation, no_progress
from msprof_lsp.mapping.profile.model import LinkKind, ProfileKind
from msprof_lsp.mapping.profile.readers import msprof_cli
from tests.synth import truth, write_msprof_cli
from tests.synth.examples import small_run

from npu_db_builder import DbBuilder

PROF = "PROF_000001_20250102030405678_ABCDEFGHIJKLMNOP"
OP_SUMMARY_HEADER = [
    "Device_id", "Model ID", "Task ID", "Stream ID", "Op Name", "OP Type", "OP State", "Task Type",
    "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)", "Block Num", "Mix Block Num",
    "HF32 Eligible", "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types",
    "Output Formats", "Context ID", "aicore_time(us)", "aic_total_cycles", "aic_mac_ratio",
]
T0_US = Decimal("1736413971558972.912")


def load(path: Path, rank: int | None = None):
    return msprof_cli.read(ProfileLocation(ProfileKind.MSPROF, path, rank), no_progress)


def _cell(v: object) -> str:
    s = str(v)
    if any(c in s for c in ',"\t\n'):
        return '"' + s.replace('"', '""') + '"'
    return s


def write_csv(path: Path, header: list[str], rows: list[list[object]], newline: str = "\n") -> Path:
    """As msprof writes them: quoted TAB-suffixed times, triple-quoted shapes, LF line ends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        for row in [header, *rows]:
            f.write(",".join(_cell(c) for c in row) + newline)
    return path


def kernel_rows(device: int, n: int, offset_us: int) -> list[dict]:
    """n kernels per device, alternating MatMulV2 (AI_CORE) and Add (AI_VECTOR_CORE)."""
    out = []
    for i in range(n):
        mm = i % 2 == 0
        start = T0_US + offset_us + i * 100 + Decimal(device) / 1000
        dur = Decimal("12.345") if mm else Decimal("3.2")
        out.append(dict(device=device, name=f"aclnnMm_MatMulCommon_MatMulV2" if mm else "aclnnAdd_AddAiCore_Add",
                        type="MatMulV2" if mm else "Add", core="AI_CORE" if mm else "AI_VECTOR_CORE",
                        start=start, dur=dur, shapes='"128,256;256,512"' if mm else '"128,512;128,512"',
                        mac=0.5 if mm else "N/A"))
    return out


def summary_row(k: dict, *, device_column: bool = True) -> list[object]:
    row = [k["device"]] if device_column else []
    row += [4294967295, 10, 2, k["name"], k["type"], "dynamic", k["core"], f"{k['start']}\t", k["dur"], 0, 8, 0,
            "NO", k["shapes"], '"DT_BF16;DT_BF16"', '"ND;ND"', '"128,512"', "DT_BF16", "ND", "N/A", k["dur"],
            1000, k["mac"]]
    return row


def timeline(kernels: list[dict], cann: list[tuple[str, Decimal, Decimal]]) -> list[dict]:
    """A bare-array msprof_*.json: Ascend Hardware per device, a CANN process; no Python."""
    ev: list[dict] = [
        {"name": "process_name", "ph": "M", "pid": 4376751100, "tid": 0, "args": {"name": "CANN"}},
        {"name": "process_labels", "ph": "M", "pid": 4376751100, "tid": 0, "args": {"labels": "CPU"}},
    ]
    for dev in sorted({k["device"] for k in kernels}):
        pid = 800 + dev
        ev += [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "Ascend Hardware"}},
               {"name": "process_labels", "ph": "M", "pid": pid, "tid": 0, "args": {"labels": f"NPU {dev}"}},
               {"name": "thread_name", "ph": "M", "pid": pid, "tid": 2, "args": {"name": "Stream 2"}}]
    for i, k in enumerate(kernels):
        ev.append({"name": k["name"], "pid": 800 + k["device"], "tid": 2, "ts": str(k["start"]), "dur": float(k["dur"]),
                   "args": {"Model Id": 4294967295, "Task Type": "Other", "Stream Id": 2, "Task Id": i,
                            "connection_id": i}, "ph": "X"})
    for name, ts, dur in cann:
        ev.append({"name": name, "pid": 4376751100, "tid": 7001, "ts": str(ts), "dur": float(dur),
                   "args": {"Thread Id": 7001, "Mode": "ACL_OP", "level": "acl"}, "ph": "X"})
    return ev


# ---------------------------------------------------------------------------------------------
# The synth writer's PROF_* (current layout, one device)


def test_synth_prof_dir_reads_back_the_description(tmp_path: Path) -> None:
    run = small_run(steps=2, world_size=2, rank=1)
    root = write_msprof_cli(run, tmp_path)
    p = load(root)
    t = truth(run)
    assert p.meta.kind is ProfileKind.MSPROF and p.meta.backend.value == "ascend"
    assert p.meta.rank == 1  # host/info.json rank_id
    k = p.kernels
    ops = k[k["name"].astype(str) != "MEMCPY_ASYNC"]
    assert {ty: int(v) for ty, v in ops.groupby(ops["type"].astype(str))["dur_ns"].sum().items()} == dict(
        t.kernel_ns_by_type)
    memcpy = k[k["name"].astype(str) == "MEMCPY_ASYNC"]
    assert int(memcpy["dur_ns"].sum()) == t.memcpy_ns and len(memcpy) == t.memcpy_count
    assert set(memcpy["type"].astype(str)) == {"MEMCPY_ASYNC"}  # timeline-only tasks: name = type
    # No Python layer: nothing linked, no stacks; but everything for type-based anchoring is there.
    assert set(k["link"].astype(str)) == {LinkKind.NONE.value} and not p.has_call_stacks
    assert p.meta.with_stack is False
    assert (ops["core"].astype(str) != "").all() and (ops["type"].astype(str) != "").all()
    # CANN API events from the timeline, named as in the text export.
    cann = p.host_events[p.host_events["cat"] == "cann"]
    assert Counter(cann["name"].astype(str)) == Counter(t.cann_counts)
    # Steps: the step_trace_*.csv iterations, read independently with csv + Decimal.
    out = root / "mindstudio_profiler_output"
    [st] = list(out.glob("step_trace_*.csv"))
    with open(st, newline="") as f:
        rows = list(csv.DictReader(f))
    ns = lambda v: int(Decimal(v.strip()) * 1000)  # noqa: E731
    assert [(s.id, s.start_ns, s.end_ns) for s in p.steps] == [
        (int(r["Iteration ID"]), ns(r["Iteration End(us)"]) - ns(r["Iteration Time(us)"]), ns(r["Iteration End(us)"]))
        for r in rows]
    # Statistics, counted from the files.
    [api] = list(out.glob("api_statistic_*.csv"))
    assert len(p.api_statistic) == sum(1 for _ in open(api)) - 1
    [ops_stat] = list(out.glob("op_statistic_*.csv"))
    assert len(p.op_statistic) == sum(1 for _ in open(ops_stat)) - 1
    assert p.meta.extra["communication_statistic"][0]["total_ns"] == t.comm_kernel_ns
    assert p.meta.extra["ai_core_num"] == 24


# ---------------------------------------------------------------------------------------------
# Current layout, built here: slices, two devices, an older export beside the newer one


def test_current_layout_slices_two_devices_newest_export(tmp_path: Path) -> None:
    out = tmp_path / PROF / "mindstudio_profiler_output"
    k0, k1 = kernel_rows(0, 6, 0), kernel_rows(1, 4, 50)
    kernels = sorted(k0 + k1, key=lambda k: k["start"])
    half = len(kernels) // 2
    new, old = "20250102030600", "20250102030500"
    write_csv(out / f"op_summary_slice_0_{new}.csv", OP_SUMMARY_HEADER, [summary_row(k) for k in kernels[:half]])
    write_csv(out / f"op_summary_slice_1_{new}.csv", OP_SUMMARY_HEADER, [summary_row(k) for k in kernels[half:]],
              newline="\r\n")
    # An earlier export of the same run: must be ignored (its one row would change every total).
    write_csv(out / f"op_summary_{old}.csv", OP_SUMMARY_HEADER,
              [summary_row(dict(kernels[0], name="stale", type="Stale", dur=Decimal(999)))])
    cann = [("AscendCL@aclrtSynchronizeStream", T0_US + 2000, Decimal("150.5"))]
    for part, chunk in enumerate((kernels[:half], kernels[half:])):
        (out / f"msprof_slice_{part}_{new}.json").write_text(json.dumps(timeline(chunk, cann if part else [])))
    (out / f"msprof_tx_{new}.json").write_text("[]")  # another name: not the timeline

    p = load(tmp_path / PROF)
    k = p.kernels
    assert len(k) == len(kernels) and "Stale" not in set(k["type"].astype(str))
    want: dict[tuple[int, str], int] = defaultdict(int)
    for x in kernels:
        want[(x["device"], x["type"])] += int(x["dur"] * 1000)
    got = {(int(d), str(t)): int(v) for (d, t), v in k.groupby([k["device"], k["type"].astype(str)],
                                                                 observed=True)["dur_ns"].sum().items()}
    assert got == dict(want)
    assert list(k["start_ns"]) == sorted(int(x["start"] * 1000) for x in kernels)
    assert set(k[k["type"] == "MatMulV2"]["input_shapes"].astype(str)) == {"128,256;256,512"}
    assert list(k[k["type"] == "MatMulV2"]["pmu:aic_mac_ratio"]) == [0.5] * sum(x["type"] == "MatMulV2" for x in kernels)
    assert p.meta.extra["op_summary_matched"] == len(kernels)
    assert p.meta.extra["devices"] == [0, 1]
    ev = p.host_events
    assert list(zip(ev["name"].astype(str), ev["level"].astype(str), ev["dur_ns"])) == [
        ("AscendCL@aclrtSynchronizeStream", "acl", 150_500)]
    assert str(out / f"op_summary_{old}.csv") not in p.meta.files


def test_newest_exports_grouping() -> None:
    names = ["op_summary_20250101000000.csv", "op_summary_slice_0_20250102000000.csv",
             "op_summary_slice_1_20250102000000.csv", "msprof_20250101000000.json", "msprof_tx_20250105000000.json",
             "op_summary_0_1_20230101120000.csv", "op_summary_0_4_20230101120000.csv"]
    got = msprof_cli.newest_exports([Path(n) for n in names])
    # The 2025 stamp is newer than the 2023 one; both slices of it are kept.
    assert got["op_summary"] == [Path("op_summary_slice_0_20250102000000.csv"),
                                 Path("op_summary_slice_1_20250102000000.csv")]
    assert got["msprof"] == [Path("msprof_20250101000000.json")]
    assert got["msprof_tx"] == [Path("msprof_tx_20250105000000.json")]
    # 6.3.RC2 names carry no timestamp: all of them are one export.
    old = msprof_cli.newest_exports([Path("op_summary_0_1.csv"), Path("op_summary_0_2.csv")])
    assert old["op_summary"] == [Path("op_summary_0_1.csv"), Path("op_summary_0_2.csv")]


# ---------------------------------------------------------------------------------------------
# CANN 7.0.x / 6.3.RC2: device_{id}/summary and device_{id}/timeline


def test_cann7_per_device_layout(tmp_path: Path) -> None:
    root = tmp_path / PROF
    k0, k1 = kernel_rows(0, 4, 0), kernel_rows(1, 2, 30)
    # 7.0.x names with model id and timestamp; an older timestamp beside it is ignored.
    write_csv(root / "device_0" / "summary" / "op_summary_0_1_20230101120000.csv", OP_SUMMARY_HEADER,
              [summary_row(k) for k in k0])
    write_csv(root / "device_0" / "summary" / "op_summary_0_1_20221231120000.csv", OP_SUMMARY_HEADER,
              [summary_row(dict(k0[0], type="Stale"))])
    (root / "device_0" / "timeline").mkdir(parents=True)
    (root / "device_0" / "timeline" / "msprof_0_1_20230101120000.json").write_text(json.dumps(timeline(k0, [])))
    # 6.3.RC2: no timestamp in the name and no Device_id column: the folder gives the device.
    write_csv(root / "device_1" / "summary" / "op_summary_1_1.csv", OP_SUMMARY_HEADER[1:],
              [summary_row(k, device_column=False) for k in k1])
    p = load(root)
    assert p.meta.extra["layout"] == "cann7"
    k = p.kernels
    assert sorted(zip(k["device"], k["start_ns"], k["dur_ns"])) == sorted(
        (x["device"], int(x["start"] * 1000), int(x["dur"] * 1000)) for x in k0 + k1)
    assert "Stale" not in set(k["type"].astype(str))
    assert p.meta.extra["op_summary_matched"] == len(k0)


# ---------------------------------------------------------------------------------------------
# --type=db, raw data only, damaged files


def test_db_only_prof_dir(tmp_path: Path) -> None:
    root = tmp_path / PROF
    b = DbBuilder()
    kernels = kernel_rows(0, 5, 0)
    for i, x in enumerate(kernels):
        s = int(x["start"] * 1000)
        g = b.task(s, s + int(x["dur"] * 1000), connection=i, task_type="KERNEL_AICORE")
        b.compute_info(g, name=x["name"], op_type=x["type"], core=x["core"])
    b.rows["CANN_API"].append((int(T0_US * 1000), int(T0_US * 1000) + 5000, 20000, (10 << 32) | 11, 99,
                               b.s("aclrtSynchronizeDevice", cann=True)))
    cann_only = {"STRING_IDS", "ENUM_API_TYPE", "TASK", "COMPUTE_TASK_INFO", "CANN_API", "COMMUNICATION_OP"}
    b.write(root / "msprof_20250102030600.db", only=cann_only)
    (root / "device_0" / "data").mkdir(parents=True)
    p = load(root)
    assert p.meta.extra["layout"] == "db"
    assert sorted(zip(p.kernels["type"].astype(str), p.kernels["dur_ns"])) == sorted(
        (x["type"], int(x["dur"] * 1000)) for x in kernels)
    assert list(p.host_events["name"].astype(str)) == ["AscendCL@aclrtSynchronizeDevice"]
    assert set(p.kernels["link"].astype(str)) == {LinkKind.NONE.value}


def test_raw_data_only_says_how_to_export(tmp_path: Path) -> None:
    root = tmp_path / PROF
    (root / "host" / "data").mkdir(parents=True)
    (root / "device_0" / "data").mkdir(parents=True)
    with pytest.raises(ProfileError) as err:
        load(root)
    assert "msprof --export=on" in str(err.value) and str(root) in str(err.value)


def test_truncated_timeline_keeps_the_complete_part(tmp_path: Path) -> None:
    out = tmp_path / PROF / "mindstudio_profiler_output"
    kernels = kernel_rows(0, 6, 0)
    write_csv(out / "op_summary_20250102030600.csv", OP_SUMMARY_HEADER, [summary_row(k) for k in kernels])
    text = json.dumps(timeline(kernels, []))
    (out / "msprof_20250102030600.json").write_text(text[: int(len(text) * 0.8)])  # half-written
    p = load(tmp_path / PROF)
    assert p.meta.complete is False
    assert any("msprof_20250102030600.json" in i.path for i in p.issues)
    assert len(p.kernels) == len(kernels)  # op_summary rows are all kept


def test_unreadable_op_summary_is_an_issue_when_the_timeline_is_there(tmp_path: Path) -> None:
    out = tmp_path / PROF / "mindstudio_profiler_output"
    kernels = kernel_rows(0, 4, 0)
    (out).mkdir(parents=True)
    (out / "op_summary_20250102030600.csv").write_bytes(b"")
    (out / "msprof_20250102030600.json").write_text(json.dumps(timeline(kernels, [])))
    p = load(tmp_path / PROF)
    assert len(p.kernels) == len(kernels)
    assert any("op_summary" in i.path for i in p.issues)


def test_nothing_readable_is_an_error(tmp_path: Path) -> None:
    out = tmp_path / PROF / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    (out / "op_summary_20250102030600.csv").write_bytes(b"")
    with pytest.raises(ProfileError) as err:
        load(tmp_path / PROF)
    assert str(tmp_path / PROF) in str(err.value)


def test_found_and_loaded_through_load_profile(tmp_path: Path) -> None:
    from msprof_lsp.mapping.profile.cluster import load_profile

    run = small_run(steps=1, world_size=2, rank=1)
    root = write_msprof_cli(run, tmp_path / "job")
    res = load_profile([tmp_path], use_cache=False)
    assert (res.location.kind, res.location.path, res.location.rank) == (ProfileKind.MSPROF, root, 1)
    assert res.cluster is None and len(res.profile.kernels) == truth(run).kernel_count + truth(run).memcpy_count


def test_db_overlap_analysis_is_the_breakdown(tmp_path: Path) -> None:
    """Issue 25 defect 8: an msprof DB export's OVERLAP_ANALYSIS (type 0 Computing, 1 Communication,
    2 Communication(Not Overlapped), 3 Free; one slice per row, as in the real torch_npu DB export) is
    the producer's breakdown and wins over one recomputed from the tasks. Here the producer's Free
    slices are 96 µs where the tasks leave 100 µs gaps: the breakdown says 96 µs each, not 100."""
    from msprof_lsp.mapping.profile.timemodel import BreakdownSource, profile_breakdown

    root = tmp_path / PROF
    b = DbBuilder()
    b.tables["OVERLAP_ANALYSIS"] = ["id INTEGER", "deviceId INTEGER", "startNs INTEGER", "endNs INTEGER",
                                    "type INTEGER"]
    b.rows["OVERLAP_ANALYSIS"] = []
    t0 = int(T0_US * 1000)
    for i in range(5):  # 100 µs kernels every 200 µs
        s = t0 + i * 200_000
        g = b.task(s, s + 100_000, connection=i, task_type="KERNEL_AICORE")
        b.compute_info(g, name=f"MatMulV2_{i}", op_type="MatMulV2", core="AI_CORE")
        b.rows["OVERLAP_ANALYSIS"].append((2 * i + 1, 0, s, s + 100_000, 0))
        if i < 4:
            b.rows["OVERLAP_ANALYSIS"].append((2 * i + 2, 0, s + 100_000, s + 196_000, 3))
    b.write(root / "msprof_20250102030600.db",
            only={"STRING_IDS", "ENUM_API_TYPE", "TASK", "COMPUTE_TASK_INFO", "CANN_API", "OVERLAP_ANALYSIS"})
    (root / "device_0" / "data").mkdir(parents=True)
    p = load(root)
    assert sorted(set(p.overlap["lane"].astype(str))) == ["Computing", "Free"]
    br = profile_breakdown(p)
    assert br.source is BreakdownSource.OVERLAP_ANALYSIS
    assert sum(s.free_ns for s in br.steps) == 4 * 96_000  # the tasks' gaps would give 4 * 100_000
    assert sum(s.computing_ns for s in br.steps) == 5 * 100_000
