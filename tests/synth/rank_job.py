"""A job of N ranks built from one torch_npu text rank: the large files hard-linked, the summary
files written per rank with a planted slow rank and a planted slow link.

Used by benchmarks/bench_ranks.py (16 to 1,024 ranks) and tests/mapping/profile/test_cluster_rank_summaries.py. Each rank
gets its own ``profiler_info_<r>.json`` (the source's, with ``rank_id`` set), and its own
``step_trace_time.csv``, ``communication.json`` and ``communication_matrix.json`` in the formats
torch_npu writes (the sample's files are the model). Every other file of the source rank is a hard
link (a copy where the file system refuses one), so 1,024 ranks cost the summaries' kilobytes each.

The plan, per rank and step (µs): Computing ``COMPUTE_US`` (the slow rank ``SLOW_FACTOR`` times
that), Communication(Not Overlapped) ``COMM_US``, Free ``FREE_US``; one all-reduce per step whose
Wait Time is what the rank waited for the slowest (the slow rank waits least). Each rank sends
``LINK_MB`` per step to the next rank of the ring in ``LINK_MS`` -- the slow link ``SLOW_LINK_MS``
-- and reports the same transfer in its SDMA bandwidth figures.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

OUTPUT = "ASCEND_PROFILER_OUTPUT"
SUMMARY_FILES = frozenset({"step_trace_time.csv", "communication.json", "communication_matrix.json"})
COMPUTE_US, COMM_US, FREE_US = 1_200.0, 300.0, 500.0
SLOW_FACTOR = 1.5
LINK_MB, LINK_MS, SLOW_LINK_MS = 2.0, 0.1, 0.8
GROUP = "7386924375452012417"
T0_US = 1_753_948_800_000_000.0


@dataclass(frozen=True, slots=True)
class JobPlan:
    ranks: int
    slow_rank: int
    slow_link: tuple[int, int]  # (src, dst): src sends to dst = src + 1 mod ranks
    steps: int = 2

    def compute_us(self, rank: int) -> float:
        return COMPUTE_US * (SLOW_FACTOR if rank == self.slow_rank else 1.0) + (rank % 7) * 0.5

    def step_us(self, rank: int) -> float:
        return self.compute_us(rank) + COMM_US + FREE_US


def build_job(dst: Path, source: Path, plan: JobPlan) -> Path:
    """Write the plan's ranks under ``dst`` from the torch_npu run root ``source``; returns ``dst``."""
    info = next(source.glob("profiler_info*.json"))
    info_data = json.loads(info.read_text())
    shared = [p for p in sorted((source / OUTPUT).iterdir()) if p.is_file() and p.name not in SUMMARY_FILES]
    root_files = [p for p in sorted(source.iterdir()) if p.is_file() and not p.name.startswith("profiler_info")]
    for r in range(plan.ranks):
        run = dst / f"node{r // 8}_{100000 + r}_20250731080000000_ascend_pt"
        out = run / OUTPUT
        out.mkdir(parents=True)
        for p in root_files:
            _link(p, run / p.name)
        for p in shared:
            _link(p, out / p.name)
        (run / f"profiler_info_{r}.json").write_text(json.dumps({**info_data, "rank_id": r}))
        _write_summaries(out, r, plan)
    return dst


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links refused: a copy
        shutil.copyfile(src, dst)


def _write_summaries(out: Path, r: int, plan: JobPlan) -> None:
    slowest = max(plan.step_us(q) for q in range(plan.ranks))
    rows = ["Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
            "Communication(Not Overlapped and Exclude Receive),Preparing"]
    comm: dict[str, dict] = {}
    matrix: dict[str, dict] = {}
    dst = (r + 1) % plan.ranks
    link_ms = SLOW_LINK_MS if (r, dst) == plan.slow_link else LINK_MS
    for s in range(1, plan.steps + 1):
        c = plan.compute_us(r)
        rows.append(f"{r % 8},{s},{c:.3f},{COMM_US:.3f},0,{COMM_US:.3f},{FREE_US:.3f},"
                    f"{c + COMM_US + FREE_US:.3f},0,{COMM_US:.3f},0")
        wait_ms = (slowest - plan.step_us(r)) / 1000
        op = f"hcom_allReduce__{s}_0_1@{GROUP}"
        band = {k: {"Transit Size(MB)": 0, "Transit Time(ms)": 0, "Bandwidth(GB/s)": 0, "Large Packet Ratio": 0,
                    "Size Distribution": {}} for k in ("RDMA", "HCCS", "PCIE", "SIO")}
        band["SDMA"] = {"Transit Size(MB)": LINK_MB, "Transit Time(ms)": link_ms,
                        "Bandwidth(GB/s)": round(LINK_MB / link_ms, 4), "Large Packet Ratio": 1.0,
                        "Size Distribution": {str(LINK_MB): [1, link_ms]}}
        start = T0_US + s * slowest
        comm[f"step{s}"] = {"collective": {op: {
            "Communication Time Info": {
                "Start Timestamp(us)": start, "Elapse Time(ms)": wait_ms + link_ms, "Transit Time(ms)": link_ms,
                "Wait Time(ms)": wait_ms, "Synchronization Time(ms)": 0.0, "Idle Time(ms)": 0.0,
                "Wait Time Ratio": round(wait_ms / (wait_ms + link_ms), 4), "Synchronization Time Ratio": 0.0},
            "Communication Bandwidth Info": band}}, "p2p": {}}
        link = {"Transport Type": "HCCS", "Transit Size(MB)": LINK_MB, "Transit Time(ms)": link_ms,
                "Bandwidth(GB/s)": round(LINK_MB / link_ms, 4)}
        matrix[f"step{s}"] = {"collective": {
            f"allreduce-top1@{GROUP}": {f"{r}-{dst}": {**link, "Op Name": op}},
            f"allreduce-total@{GROUP}": {f"{r}-{dst}": {**link, "Op Name": ""}}}, "p2p": {}}
    (out / "step_trace_time.csv").write_text("\n".join(rows) + "\n")
    (out / "communication.json").write_text(json.dumps(comm))
    (out / "communication_matrix.json").write_text(json.dumps(matrix))
