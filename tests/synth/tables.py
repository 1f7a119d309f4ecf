"""Row builders shared by the text export, the msprof CLI output and the DB export.

Everything here works one laid-out step at a time, so the writers can stream; the aggregates
(op/api statistics, communication files) keep only small per-name accumulators.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from .clock import StepTimeline, TKernel, TOp
from .fmt import quoted_shape, ts_text, us_trim
from .overlap import StepOverlap
from .run import AI_CORE, AI_CPU, AI_VECTOR_CORE, DSA_SQE, MIX_AIC, MIX_AIV, Run
from .variant import KD_2023, KD_2025, KD_AUTO, KD_LEVEL0, KD_LEVEL1, TextVariant

NA = "N/A"

# PMU column lists, exactly as the fixtures' headers (2025: PipeUtilization, 2023: Arithmetic).
PIPE_PMU = (
    "aicore_time(us)", "aic_total_cycles", "aic_mac_time(us)", "aic_mac_ratio", "aic_scalar_time(us)",
    "aic_scalar_ratio", "aic_mte1_time(us)", "aic_mte1_ratio", "aic_mte2_time(us)", "aic_mte2_ratio",
    "aic_fixpipe_time(us)", "aic_fixpipe_ratio", "aic_icache_miss_rate", "aiv_time(us)", "aiv_total_cycles",
    "aiv_vec_time(us)", "aiv_vec_ratio", "aiv_scalar_time(us)", "aiv_scalar_ratio", "aiv_mte2_time(us)",
    "aiv_mte2_ratio", "aiv_mte3_time(us)", "aiv_mte3_ratio", "aiv_icache_miss_rate", "cube_utilization(%)",
)
ARITH_PMU = (
    "aicore_time(us)", "aic_total_cycles", "aic_mac_fp16_ratio", "aic_mac_int8_ratio", "aic_cube_fops",
    "aic_vector_fops", "aiv_time(us)", "aiv_total_cycles", "aiv_vec_fp32_ratio", "aiv_vec_fp16_ratio",
    "aiv_vec_int32_ratio", "aiv_vec_misc_ratio", "aiv_cube_fops", "aiv_vector_fops",
)
SHAPE_COLS = ("Input Shapes", "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types",
              "Output Formats")

OP_SUMMARY_BASE = (
    "Device_id", "Model ID", "Task ID", "Stream ID", "Op Name", "OP Type", "OP State", "Task Type",
    "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)", "Block Num", "Mix Block Num", "HF32 Eligible",
    *SHAPE_COLS, "Context ID",
)
# torch_npu's renames op_summary -> kernel_details
KD_RENAMES = {"Op Name": "Name", "OP Type": "Type", "Task Type": "Accelerator Core",
              "Task Start Time(us)": "Start Time(us)", "Task Duration(us)": "Duration(us)",
              "Task Wait Time(us)": "Wait Time(us)"}

OPERATOR_DETAILS_HEADER = (
    "Name", "Input Shapes", "Call Stack", "Host Self Duration(us)", "Host Total Duration(us)",
    "Device Self Duration(us)", "Device Total Duration(us)", "Device Self Duration With AICore(us)",
    "Device Total Duration With AICore(us)",
)
STEP_TRACE_HEADER = (
    "Device_id", "Step", "Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free",
    "Stage", "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing",
)
OP_STATISTIC_HEADER = ("Device_id", "OP Type", "Core Type", "Count", "Total Time(us)", "Min Time(us)",
                       "Avg Time(us)", "Max Time(us)", "Ratio(%)")
API_STATISTIC_HEADER = ("Device_id", "Level", "API Name", "Time(us)", "Count", "Avg(us)", "Min(us)", "Max(us)",
                        "Variance")
COMM_STATISTIC_HEADER = ("Device_id", "OP Type", "Count", "Total Time(us)", "Min Time(us)", "Avg Time(us)",
                         "Max Time(us)", "Ratio(%)")


def pmu_columns(run: Run, family: str) -> tuple[str, ...]:
    if family == KD_2025:
        return PIPE_PMU
    if family == KD_2023:
        return ARITH_PMU
    if family == KD_LEVEL0:
        return ()
    return {"pipe": PIPE_PMU, "arith": ARITH_PMU}.get(run.pmu_set, ())


def kernel_family(run: Run, variant: TextVariant) -> str:
    if variant.kernel_header != KD_AUTO:
        return variant.kernel_header
    return KD_LEVEL0 if run.level0 else KD_LEVEL1


@dataclass(frozen=True, slots=True)
class KernelTable:
    """Column layout of one kernel_details.csv / op_summary_*.csv flavour."""

    header: tuple[str, ...]
    family: str
    pmu: tuple[str, ...]
    tab: bool
    trim: bool
    step_id: bool
    keys: tuple[str, ...] = ()  # op_summary names of the header's columns

    def __post_init__(self) -> None:
        alias = {"Block Dim": "Block Num", "Mix Block Dim": "Mix Block Num"}
        object.__setattr__(self, "keys", tuple(_inverse(alias.get(c, c)) for c in self.header))

    @classmethod
    def kernel_details(cls, run: Run, variant: TextVariant) -> KernelTable:
        fam = kernel_family(run, variant)
        pmu = pmu_columns(run, fam)
        dev_default = fam in (KD_LEVEL0, KD_LEVEL1)
        dev = dev_default if variant.device_id_column is None else variant.device_id_column
        block = ("Block Dim", "Mix Block Dim") if fam in (KD_2025, KD_2023) else ("Block Num", "Mix Block Num")
        if fam == KD_LEVEL0:
            cols = ["Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)", "Wait Time(us)", *block,
                    *SHAPE_COLS]
        else:
            cols = ["Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State", "Accelerator Core",
                    "Start Time(us)", "Duration(us)", "Wait Time(us)", *block, "HF32 Eligible", *SHAPE_COLS,
                    "Context ID", *pmu]
            if fam == KD_2023:
                cols.remove("OP State")
                cols.remove("HF32 Eligible")
        if dev:
            cols.insert(0, "Device_id")
        if variant.step_id_column:
            cols.insert(0, "Step Id")
        tab = (fam != KD_2023) if variant.tab_times is None else variant.tab_times
        trim = (fam == KD_2023) if variant.trim_decimals is None else variant.trim_decimals
        return cls(tuple(cols), fam, pmu, tab, trim, variant.step_id_column)

    @classmethod
    def op_summary(cls, run: Run) -> KernelTable:
        pmu = {"pipe": PIPE_PMU, "arith": ARITH_PMU}.get(run.pmu_set, ())
        return cls(OP_SUMMARY_BASE + pmu, "op_summary", pmu, True, False, False)

    def row(self, run: Run, k: TKernel, wait_ns: int) -> list[str]:
        v = kernel_values(run, k, wait_ns, self.pmu, tab=self.tab, trim=self.trim,
                          mix_na=self.family == KD_2023)
        return [v.get(k, NA) for k in self.keys]


_INV = {v: k for k, v in KD_RENAMES.items()}


def _inverse(col: str) -> str:
    return _INV.get(col, col)


def _pmu_defaults(k: TKernel, cols: Iterable[str]) -> dict[str, str]:
    core = k.spec.core
    given = dict(k.spec.pmu)
    out: dict[str, str] = {}
    dur_us = k.dur_ns / 1000
    cube = core in (AI_CORE, MIX_AIC, MIX_AIV)
    vec = core in (AI_VECTOR_CORE, MIX_AIC, MIX_AIV)
    for col in cols:
        if col in given:
            out[col] = _num(given[col])
        elif col == "aicore_time(us)":
            out[col] = _num(round(dur_us * 0.98, 3) if cube else 0)
        elif col == "aic_total_cycles":
            out[col] = _num(round(dur_us * 0.98 * 1800) if cube else 0)
        elif col == "aiv_time(us)":
            out[col] = _num(round(dur_us * 0.97, 3) if vec else 0)
        elif col == "aiv_total_cycles":
            out[col] = _num(round(dur_us * 0.97 * 1800) if vec else 0)
        else:
            out[col] = "0"
    return out


def _num(x: float | int) -> str:
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


def kernel_values(run: Run, k: TKernel, wait_ns: int, pmu: tuple[str, ...], *, tab: bool, trim: bool,
                  mix_na: bool = False) -> dict[str, str]:
    """All cells of one kernel row, keyed by op_summary column name."""
    s = k.spec
    comm = s.is_comm
    start = us_trim(k.start_ns) if trim else ts_text(k.start_ns)
    if tab:
        start += "\t"
    v = {
        "Step Id": str(k.step) if k.step >= 0 else "",
        "Device_id": str(run.device),
        "Model ID": "4294967295",
        "Task ID": NA if comm else str(k.task_id),
        "Stream ID": NA if comm else str(k.stream),
        "Op Name": k.name,
        "OP Type": s.type,
        "OP State": NA if comm else s.op_state,
        "Task Type": s.core,
        "Task Start Time(us)": start,
        "Task Duration(us)": us_trim(k.dur_ns),
        "Task Wait Time(us)": us_trim(wait_ns),
        "Block Num": str(s.block_dim),
        "Mix Block Num": NA if (comm and mix_na) else str(s.mix_block_dim),
        "HF32 Eligible": NA if comm else s.hf32,
        "Context ID": NA,
    }
    if comm:
        for col in SHAPE_COLS:
            v[col] = NA
        for col in pmu:
            v[col] = NA
    else:
        v["Input Shapes"] = quoted_shape(s.input_shapes)
        v["Input Data Types"] = s.input_dtypes
        v["Input Formats"] = s.input_formats
        v["Output Shapes"] = quoted_shape(s.output_shapes)
        v["Output Data Types"] = s.output_dtypes
        v["Output Formats"] = s.output_formats
        if s.core in (AI_CPU, DSA_SQE):
            for col in pmu:
                v[col] = NA
        else:
            v.update(_pmu_defaults(k, pmu))
    return v


class WaitClock:
    """``Wait Time(us)``: gap between a task's start and the previous listed task's end, >= 0."""

    def __init__(self) -> None:
        self.prev_end: int | None = None

    def __call__(self, k: TKernel) -> int:
        wait = 0 if self.prev_end is None else max(0, k.start_ns - self.prev_end)
        self.prev_end = k.end_ns
        return wait


def summary_kernels(tl: StepTimeline) -> list[TKernel]:
    """The step's op_summary / kernel_details rows, in device-start order."""
    return sorted((k for k in tl.kernels if k.spec.is_op), key=lambda k: k.start_ns)


# -- operator_details -------------------------------------------------------------------------


@dataclass(slots=True)
class OpTimes:
    host_self_ns: int
    host_total_ns: int
    device_self_ns: int
    device_total_ns: int
    device_self_aicore_ns: int
    device_total_aicore_ns: int


def op_times(tl: StepTimeline, *, aicore_counts: bool) -> dict[int, OpTimes]:
    """Per-op host/device self and total times."""
    kernels = {k.uid: k for k in tl.kernels}
    out: dict[int, OpTimes] = {}
    child_host: dict[int, int] = {}
    for op in tl.ops:
        mine = [kernels[u] for u in op.kernels if kernels[u].spec.linked]  # linked by flows only
        dev = sum(k.dur_ns for k in mine)
        aic = sum(k.dur_ns for k in mine if k.spec.core == AI_CORE) if aicore_counts else 0
        out[op.uid] = OpTimes(op.dur_ns, op.dur_ns, dev, dev, aic, aic)
    for op in reversed(tl.ops):
        if op.parent >= 0 and op.parent in out:
            p = out[op.parent]
            child_host[op.parent] = child_host.get(op.parent, 0) + op.dur_ns
            p.device_total_ns += out[op.uid].device_total_ns
            p.device_total_aicore_ns += out[op.uid].device_total_aicore_ns
    for uid, ch in child_host.items():
        out[uid].host_self_ns = out[uid].host_total_ns - ch
    return out


def operator_rows(run: Run, tl: StepTimeline, *, aicore_counts: bool, frame_space: bool = True) -> Iterator[list[str]]:
    from .trace_events import dims_text, stack_text

    times = op_times(tl, aicore_counts=aicore_counts)
    for op in tl.ops:
        if op.name.startswith("ProfilerStep#"):
            continue
        t = times[op.uid]
        shapes = dims_text(op.input_dims) if run.config.record_shapes else ""
        stack = "" if op.backward else stack_text(op.stack, space=frame_space)
        yield [op.name, shapes, stack, us_trim(t.host_self_ns), us_trim(t.host_total_ns), us_trim(t.device_self_ns),
               us_trim(t.device_total_ns), us_trim(t.device_self_aicore_ns), us_trim(t.device_total_aicore_ns)]


def step_trace_row(run: Run, ov: StepOverlap, *, device_cell: str | None = None) -> list[str]:
    return [
        device_cell if device_cell is not None else str(run.device),
        str(ov.step),
        us_trim(ov.computing_ns),
        us_trim(ov.not_overlapped_ns),
        us_trim(ov.overlapped_ns),
        us_trim(ov.comm_ns),
        us_trim(ov.free_ns),
        us_trim(ov.stage_ns),
        "0",
        us_trim(ov.not_overlapped_ns),
        us_trim(ov.preparing_ns),
    ]


# -- aggregates -------------------------------------------------------------------------------


@dataclass(slots=True)
class Agg:
    count: int = 0
    total: int = 0
    lo: int = 0
    hi: int = 0
    sq: float = 0.0  # sum of squares (µs^2), for the variance

    def add(self, ns: int) -> None:
        if self.count == 0 or ns < self.lo:
            self.lo = ns
        if ns > self.hi:
            self.hi = ns
        self.count += 1
        self.total += ns
        self.sq += (ns / 1000) ** 2

    @property
    def avg_us(self) -> float:
        return self.total / self.count / 1000

    @property
    def variance(self) -> float:
        mean = self.avg_us
        return max(self.sq / self.count - mean * mean, 0.0)


def _f3(x: float) -> str:
    return f"{x:.3f}"


@dataclass
class Statistics:
    """op_statistic / api_statistic / communication_statistic accumulators."""

    ops: dict[tuple[str, str], Agg] = field(default_factory=dict)
    apis: dict[tuple[str, str], Agg] = field(default_factory=dict)
    comm: dict[str, Agg] = field(default_factory=dict)

    def add_step(self, tl: StepTimeline, *, level0: bool) -> None:
        for k in tl.kernels:
            if not k.spec.is_op:
                continue
            self.ops.setdefault((k.spec.type, k.spec.core), Agg()).add(k.dur_ns)
            if k.spec.is_comm:
                self.comm.setdefault(k.spec.type, Agg()).add(k.dur_ns)
        if not level0:
            for c in tl.cann:
                api = c.name.split("@", 1)[1] if "@" in c.name else c.name
                self.apis.setdefault((c.level, api), Agg()).add(c.dur_ns)

    def op_rows(self, device: str) -> list[list[str]]:
        grand = sum(a.total for a in self.ops.values()) or 1
        rows = sorted(self.ops.items(), key=lambda kv: -kv[1].total)
        return [[device, t, core, str(a.count), us_trim(a.total), us_trim(a.lo), _f3(a.avg_us), us_trim(a.hi),
                 f"{a.total / grand * 100:.2f}"] for (t, core), a in rows]

    def api_rows(self) -> list[list[str]]:
        rows = sorted(self.apis.items(), key=lambda kv: -kv[1].total)
        return [["host", level, api, us_trim(a.total), str(a.count), _f3(a.avg_us), us_trim(a.lo), us_trim(a.hi),
                 _f3(a.variance)] for (level, api), a in rows]

    def comm_rows(self, device: str) -> list[list[str]]:
        grand = sum(a.total for a in self.comm.values()) or 1
        rows = sorted(self.comm.items(), key=lambda kv: -kv[1].total)
        return [[device, t, str(a.count), us_trim(a.total), us_trim(a.lo), _f3(a.avg_us), us_trim(a.hi),
                 f"{a.total / grand * 100:.2f}"] for t, a in rows]


# -- communication.json / communication_matrix.json ---------------------------------------------

LINKS = ("RDMA", "HCCS", "PCIE", "SDMA", "SIO")


def _r(x: float) -> float:
    return round(x, 4)


def comm_time_info(k: TKernel) -> dict:
    info = k.spec.comm
    elapse = k.dur_ns / 1e6
    transit = elapse * (info.transit_share if info else 1.0)
    wait = elapse * (info.wait_share if info else 0.0)
    sync = wait / 2
    idle = max(elapse - transit - wait, 0.0)
    return {
        "Start Timestamp(us)": k.start_ns / 1000,
        "Elapse Time(ms)": _r(elapse),
        "Transit Time(ms)": _r(transit),
        "Wait Time(ms)": _r(wait),
        "Synchronization Time(ms)": _r(sync),
        "Idle Time(ms)": _r(idle),
        "Wait Time Ratio": _r(wait / (wait + transit)) if wait + transit else 0,
        "Synchronization Time Ratio": _r(sync / (sync + transit)) if sync + transit else 0,
    }


def comm_transit_mb(k: TKernel, run: Run) -> float:
    """MB (10^6 B) ``run``'s rank sends for collective ``k``: the sum of its packets."""
    info = k.spec.comm
    return sum(info.packets(run.rank, run.world_size)) / 1e6 if info else 0.0


def comm_bandwidth_info(k: TKernel, run: Run) -> dict:
    info = k.spec.comm
    elapse = k.dur_ns / 1e6
    out = {}
    for link in LINKS:
        if info is not None and link == info.link:
            transit = elapse * info.transit_share
            sizes = info.packets(run.rank, run.world_size)
            size_mb = sum(sizes) / 1e6
            dist: dict[str, list] = {}
            for b in sizes:  # transfer time shared by bytes, as the real file's buckets are
                cur = dist.setdefault(str(b / 1e6), [0, 0.0])
                cur[0] += 1
                cur[1] = _r(cur[1] + transit * b / sum(sizes))
            out[link] = {
                "Transit Size(MB)": size_mb,  # unrounded, as real files: the packets add up to it
                "Transit Time(ms)": _r(transit),
                "Bandwidth(GB/s)": _r(size_mb / transit) if transit else 0,
                "Large Packet Ratio": 1.0 if all(b >= 1e6 for b in sizes) else 0.0,
                "Size Distribution": dist,
            }
        else:
            out[link] = {"Transit Size(MB)": 0, "Transit Time(ms)": 0, "Bandwidth(GB/s)": 0,
                         "Large Packet Ratio": 0, "Size Distribution": {}}
    return out


def _total_op_info(entries: list[dict]) -> dict:
    keys = ("Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)", "Synchronization Time(ms)", "Idle Time(ms)")
    t = {"Start Timestamp(us)": min(e["Communication Time Info"]["Start Timestamp(us)"] for e in entries)}
    for key in keys:
        t[key] = _r(sum(e["Communication Time Info"][key] for e in entries))
    w, tr, s = t["Wait Time(ms)"], t["Transit Time(ms)"], t["Synchronization Time(ms)"]
    t["Wait Time Ratio"] = _r(w / (w + tr)) if w + tr else 0
    t["Synchronization Time Ratio"] = _r(s / (s + tr)) if s + tr else 0
    bw: dict = {}
    for link in LINKS:
        size = sum(e["Communication Bandwidth Info"][link]["Transit Size(MB)"] for e in entries)
        tt = _r(sum(e["Communication Bandwidth Info"][link]["Transit Time(ms)"] for e in entries))
        dist: dict[str, list] = {}
        for e in entries:
            for pk, (cnt, ms) in e["Communication Bandwidth Info"][link]["Size Distribution"].items():
                cur = dist.setdefault(pk, [0, 0.0])
                cur[0] += cnt
                cur[1] = _r(cur[1] + ms)
        bw[link] = {"Transit Size(MB)": size, "Transit Time(ms)": tt, "Bandwidth(GB/s)": _r(size / tt) if tt else 0,
                    "Large Packet Ratio": 1.0 if size and dist and all(float(p) >= 1 for p in dist) else 0.0,
                    "Size Distribution": dist}
    return {"Communication Time Info": t, "Communication Bandwidth Info": bw}


P2P_PREFIXES = ("hcom_send", "hcom_receive", "hcom_batchsendrecv")


def communication_step(run: Run, tl: StepTimeline) -> dict | None:
    """``{"collective": {...}, "p2p": {...}}`` for one step, None when the step has no collectives."""
    comm = [k for k in tl.kernels if k.spec.is_comm]
    if not comm:
        return None
    out: dict = {"collective": {}, "p2p": {}}
    for kind in ("collective", "p2p"):
        entries = {}
        for k in comm:
            is_p2p = k.name.startswith(P2P_PREFIXES)
            if (kind == "p2p") != is_p2p:
                continue
            entries[f"{k.name}@{run.hccl_group}"] = {"Communication Time Info": comm_time_info(k),
                                                      "Communication Bandwidth Info": comm_bandwidth_info(k, run)}
        if entries:
            entries["Total Op Info"] = _total_op_info(list(entries.values()))
        out[kind] = entries
    return out


def matrix_type(op_type: str) -> str:
    """``hcom_allReduce_`` -> ``allreduce`` (the matrix key vocabulary)."""
    return op_type.lower().replace("hcom_", "").replace("_", "")


def communication_matrix_step(run: Run, tl: StepTimeline) -> dict | None:
    comm = [k for k in tl.kernels if k.spec.is_comm and k.spec.comm is not None]
    if not comm:
        return None
    peers = [r for r in range(run.world_size) if r != run.rank] or [run.rank]
    out: dict = {"collective": {}, "p2p": {}}
    by_type: dict[str, list[TKernel]] = {}
    for k in comm:
        by_type.setdefault(matrix_type(k.spec.type), []).append(k)

    def links(k: TKernel) -> dict:
        info = k.spec.comm
        assert info is not None
        transit = k.dur_ns / 1e6 * info.transit_share
        size_mb = comm_transit_mb(k, run)
        return {f"{run.rank}-{p}": {"Transport Type": info.link, "Transit Size(MB)": size_mb,
                                    "Transit Time(ms)": _r(transit),
                                    "Bandwidth(GB/s)": _r(size_mb / transit) if transit else 0,
                                    "Op Name": f"{k.name}@{run.hccl_group}"} for p in peers}

    for typ, ks in by_type.items():
        kind = "p2p" if typ in ("send", "receive", "batchsendrecv") else "collective"
        ordered = sorted(ks, key=lambda k: -k.dur_ns)
        picks = {"top1": ordered[0], "middle": ordered[len(ordered) // 2], "bottom1": ordered[-1],
                 "bottom2": ordered[-2] if len(ordered) > 1 else ordered[-1],
                 "bottom3": ordered[-3] if len(ordered) > 2 else ordered[-1]}
        for tag, k in picks.items():
            out[kind][f"{typ}-{tag}@{run.hccl_group}"] = links(k)
        total: dict = {}
        for k in ks:
            for key, val in links(k).items():
                cur = total.setdefault(key, {"Transport Type": val["Transport Type"], "Transit Size(MB)": 0.0,
                                             "Transit Time(ms)": 0.0, "Bandwidth(GB/s)": 0, "Op Name": ""})
                cur["Transit Size(MB)"] = _r(cur["Transit Size(MB)"] + val["Transit Size(MB)"])
                cur["Transit Time(ms)"] = _r(cur["Transit Time(ms)"] + val["Transit Time(ms)"])
        for cur in total.values():
            tt = cur["Transit Time(ms)"]
            cur["Bandwidth(GB/s)"] = _r(cur["Transit Size(MB)"] / tt) if tt else 0
        out[kind][f"{typ}-total@{run.hccl_group}"] = total
    return out


def host_op_is_step(op: TOp) -> bool:
    return op.name.startswith("ProfilerStep#")
