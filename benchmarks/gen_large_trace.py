"""Write a spec-exact torch_npu profile directory of a requested size.

    python benchmarks/gen_large_trace.py OUT_DIR --mb 500

Creates ``OUT_DIR/bench_<stamp>_ascend_pt/`` with profiler_info_0.json, and in
ASCEND_PROFILER_OUTPUT/: trace_view.json, kernel_details.csv and analyse.done. The trace is
streamed to disk step by step (never held in memory) and carries what the reader has to handle on
real captures: nested cpu_ops whose aten op has a ``Call stack`` (``;\\r\\n``-joined, innermost
first) and ``Input Dims``; dispatch scopes (aclnn*) with Enqueue / Dequeue and their
``enqueue_to_dequeue`` flows; CANN ``AscendCL@`` / ``Node@launch`` events with ``HostToDevice``
flows; device kernels on the ``Ascend Hardware`` process with ``torch_to_npu`` flows (id = kernel
start in ns); backward nodes on the autograd thread with ``fwdbwd`` flows; ``nn.Module``
python_function events; Overlap Analysis slices; ``ProfilerStep#N``. kernel_details.csv has one
row per kernel with the trace's name and start (TAB after the time, triple-quoted shapes, CRLF).

``write_sources(DIR)`` writes the ``model.py`` / ``train.py`` those call stacks name, line for
line, so a ``--check`` of DIR maps the kernels to calls (benchmarks/bench_large.py,
bench_vs_advisor.py); ``generate(..., steps=N)`` stops after N steps instead of at a size.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

PID = 437675  # Python process (OS pid)
MAIN_TID = 437675
AUTOGRAD_TID = 439228
QUEUE_TID = 439084  # task-queue (Dequeue) thread
CANN_PID = 43767502  # synthetic, as torch_npu writes them
HW_PID = 800
STREAM = 3
OVERLAP_PID = 4376751100
T0_NS = 1_704_161_511_420_289_011

KD_HEADER = (
    "Step Id,Device_id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start Time(us),"
    "Duration(us),Wait Time(us),Block Num,Mix Block Num,HF32 Eligible,Input Shapes,Input Data Types,"
    "Input Formats,Output Shapes,Output Data Types,Output Formats,Context ID,aicore_time(us),"
    "aic_total_cycles,aic_mac_time(us),aic_mac_ratio,aic_scalar_time(us),aic_scalar_ratio,aic_mte1_time(us),"
    "aic_mte1_ratio,aic_mte2_time(us),aic_mte2_ratio,aic_fixpipe_time(us),aic_fixpipe_ratio,"
    "aic_icache_miss_rate,aiv_time(us),aiv_total_cycles,aiv_vec_time(us),aiv_vec_ratio,aiv_scalar_time(us),"
    "aiv_scalar_ratio,aiv_mte2_time(us),aiv_mte2_ratio,aiv_mte3_time(us),aiv_mte3_ratio,"
    "aiv_icache_miss_rate,cube_utilization(%)"
).split(",")


@dataclass(frozen=True)
class Kernel:
    name: str
    type: str
    core: str
    dur_ns: int


@dataclass(frozen=True)
class Unit:
    """One layer call: module class, forward aten op chain, dispatch scope, kernels, backward."""

    module: str
    line: int  # line of the call in model.py
    chain: tuple[str, ...]  # outer aten op first; the first one carries the stack and the seq
    scope: str
    kernels: tuple[Kernel, ...]
    dims: str
    types: str
    bwd_node: str
    bwd_chain: tuple[str, ...]
    bwd_scope: str
    bwd_kernels: tuple[Kernel, ...]


UNITS = (
    Unit(
        "Linear", 41, ("aten::linear", "aten::addmm"), "aclnnAddmm",
        (
            Kernel("aclnnAddmm_MatMulCommon_MatMulV2", "MatMulV2", "AI_CORE", 185_504),
            Kernel("aclnnAddmm_TransData_TransData", "TransData", "AI_CORE", 12_310),
            Kernel("aclnnAddmm_Muls_Muls", "Muls", "AI_VECTOR_CORE", 4_020),
        ),
        "8192,4096;\r\n4096,4096;\r\n4096", "c10::BFloat16;\r\nc10::BFloat16;\r\nc10::BFloat16",
        "AddmmBackward0", ("aten::mm",), "aclnnMm",
        (
            Kernel("aclnnMm_MatMulCommon_MatMulV2", "MatMulV2", "AI_CORE", 190_112),
            Kernel("aclnnMm_TransData_TransData", "TransData", "AI_CORE", 11_870),
            Kernel("aclnnMm_CastAiCore_Cast", "Cast", "AI_VECTOR_CORE", 6_400),
            Kernel("aclnnMm_MatMulCommon_MemSet", "MemSet", "AI_VECTOR_CORE", 1_350),
        ),
    ),
    Unit(
        "ReLU", 42, ("aten::relu",), "aclnnRelu",
        (Kernel("aclnnRelu_Relu_Relu", "Relu", "AI_VECTOR_CORE", 21_170),),
        "8192,4096", "c10::BFloat16",
        "ReluBackward0", ("aten::threshold_backward",), "aclnnThresholdBackward",
        (Kernel("aclnnThresholdBackward_ReluGrad_ReluGrad", "ReluGrad", "AI_VECTOR_CORE", 24_800),),
    ),
    Unit(
        "LayerNorm", 43, ("aten::layer_norm", "aten::native_layer_norm"), "aclnnLayerNorm",
        (Kernel("aclnnLayerNorm_LayerNormV4_LayerNormV4", "LayerNormV4", "AI_VECTOR_CORE", 33_020),),
        "8192,4096;\r\n;\r\n4096;\r\n4096;\r\n;\r\n", "c10::BFloat16;\r\nScalar;\r\nc10::BFloat16;\r\nc10::BFloat16;\r\ndouble;\r\nbool",
        "NativeLayerNormBackward0", ("aten::native_layer_norm_backward",), "aclnnLayerNormBackward",
        (
            Kernel("aclnnLayerNormBackward_LayerNormGradV3_LayerNormGradV3", "LayerNormGradV3", "AI_VECTOR_CORE", 61_200),
            Kernel("aclnnLayerNormBackward_ReduceSum_ReduceSum", "ReduceSum", "AI_VECTOR_CORE", 9_900),
        ),
    ),
    Unit(
        "Dropout", 44, ("aten::dropout", "npu::_npu_dropout"), "aclnnDropoutDoMask",
        (
            Kernel("aclnnDropoutGenMask_DropOutGenMaskV3_DropOutGenMaskV3", "DropOutGenMaskV3", "AI_VECTOR_CORE", 8_800),
            Kernel("aclnnDropoutDoMask_DropOutDoMaskV3_DropOutDoMaskV3", "DropOutDoMaskV3", "AI_VECTOR_CORE", 17_250),
        ),
        "8192,4096;\r\n;\r\n", "c10::BFloat16;\r\ndouble;\r\nbool",
        "NpuDropoutBackward0", ("npu::npu_dropout_backward",), "aclnnDropoutDoMask",
        (Kernel("aclnnDropoutDoMask_DropOutDoMaskV3_DropOutDoMaskV3", "DropOutDoMaskV3", "AI_VECTOR_CORE", 17_900),),
    ),
)


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _stack(unit: Unit, layer: int) -> str:
    frames = [
        f"/home/user/project/model.py({unit.line}): forward",
        "/usr/local/lib/python3.10/site-packages/torch/nn/modules/module.py(1527): _call_impl",
        f"/home/user/project/model.py({60 + layer % 4}): forward",
        "/usr/local/lib/python3.10/site-packages/torch/nn/modules/module.py(1527): _call_impl",
        "/home/user/project/train.py(118): train_step",
        "/home/user/project/train.py(201): <module>",
    ]
    return ";\r\n".join(frames)


class TraceWriter:
    def __init__(self, trace: Path, kernel_csv: Path) -> None:
        self.f = open(trace, "w", encoding="utf-8", newline="")
        self.kd_file = open(kernel_csv, "w", encoding="utf-8", newline="")
        self.kd = csv.writer(self.kd_file)
        self.kd.writerow(KD_HEADER)
        self.first = True
        self.f.write("[")
        self.flow_id = 0
        self.corr = 0
        self.task_id = 0
        self.seq = 0
        self.device_ns = T0_NS
        self.last_kernel_end = T0_NS
        self.rng = random.Random(0)

    def raw(self, text: str) -> None:
        if self.first:
            self.first = False
            self.f.write(text)
        else:
            self.f.write(", ")
            self.f.write(text)

    def x(self, name: str, pid: int, tid: int, ts: int, dur: int, cat: str | None, args: str) -> None:
        cat_part = f', "cat": "{cat}"' if cat else ""
        self.raw(
            f'{{"ph": "X", "name": {json.dumps(name)}, "pid": {pid}, "tid": {tid}, "ts": "{_us(ts)}", '
            f'"dur": {dur / 1000}{cat_part}, "args": {{{args}}}}}'
        )

    def flow(self, ph: str, name: str, cat: str, fid: int | str, pid: int, tid: int, ts: int) -> None:
        fid_text = f'"{fid}"' if isinstance(fid, str) else str(fid)
        self.raw(
            f'{{"ph": "{ph}", "bp": "e", "name": "{name}", "id": {fid_text}, "pid": {pid}, "tid": {tid}, '
            f'"ts": "{_us(ts)}", "cat": "{cat}"}}'
        )

    def metadata(self) -> None:
        meta = [
            (PID, 0, "process_name", '"name": "Python"'), (PID, 0, "process_labels", '"labels": "CPU"'),
            (PID, MAIN_TID, "thread_name", f'"name": "Thread {MAIN_TID}"'),
            (PID, AUTOGRAD_TID, "thread_name", f'"name": "Thread {AUTOGRAD_TID}"'),
            (PID, QUEUE_TID, "thread_name", f'"name": "Thread {QUEUE_TID}"'),
            (HW_PID, 0, "process_name", '"name": "Ascend Hardware"'), (HW_PID, 0, "process_labels", '"labels": "NPU 0"'),
            (HW_PID, STREAM, "thread_name", f'"name": "Stream {STREAM}"'),
            (CANN_PID, 0, "process_name", '"name": "CANN"'), (CANN_PID, 0, "process_labels", '"labels": "CPU"'),
            (OVERLAP_PID, 0, "process_name", '"name": "Overlap Analysis"'),
            (OVERLAP_PID, 0, "process_labels", '"labels": "NPU 0"'),
        ]
        for i, lane in enumerate(("Computing", "Communication", "Communication(Not Overlapped)", "Free")):
            meta.append((OVERLAP_PID, i, "thread_name", f'"name": "{lane}"'))
        for pid, tid, name, args in meta:
            self.raw(f'{{"ph": "M", "name": "{name}", "pid": {pid}, "tid": {tid}, "args": {{{args}}}}}')

    def kernels(self, step: int, scope: tuple[int, int], launch_ns: int, kernels: tuple[Kernel, ...], dims: str) -> None:
        """Device tasks of one dispatch scope, with torch_to_npu / HostToDevice flows and overlap."""
        for k in kernels:
            start = max(self.device_ns, launch_ns + 4_000)
            if start > self.last_kernel_end:
                gap = start - self.last_kernel_end
                self.x("Free", OVERLAP_PID, 3, self.last_kernel_end, gap, None, "")
            dur = k.dur_ns + self.rng.randrange(0, 997)
            self.task_id += 1
            self.x(
                k.name, HW_PID, STREAM, start, dur, None,
                f'"Model Id": 4294967295, "Task Type": "Other", "Stream Id": {STREAM}, "Task Id": {self.task_id}, '
                f'"Batch Id": 0, "Subtask Id": 4294967295, "connection_id": {self.task_id}',
            )
            self.x("Computing", OVERLAP_PID, 0, start, dur, None, "")
            self.flow("s", "torch_to_npu", "async_npu", start, PID, scope[1], scope[0])  # on the scope
            self.flow("f", "torch_to_npu", "async_npu", start, HW_PID, STREAM, start)
            # CANN launch and its HostToDevice flow
            self.x("Node@launch", CANN_PID, QUEUE_TID, launch_ns, 2_100, None,
                   f'"Thread Id": {QUEUE_TID}, "Mode": "ACL_RTS", "level": "node", "id": "launch", "item_id": "{k.type}", "connection_id": {self.task_id}')
            htd = str(38654705663 + self.task_id * 4294967296)
            self.flow("s", "HostToDevice" + htd, "HostToDevice", htd, CANN_PID, QUEUE_TID, launch_ns)
            self.flow("f", "HostToDevice" + htd, "HostToDevice", htd, HW_PID, STREAM, start)
            launch_ns += 2_500
            shapes = dims.replace(";\r\n", ";")
            wait = max(start - self.last_kernel_end, 0)
            cube = k.core == "AI_CORE"
            pmu = [
                f"{dur * 0.98 / 1000:.3f}", str(dur * 28), f"{dur * 0.8 / 1000:.3f}", "0.824" if cube else "0",
                "88.03", "0.479", "119.148", "0.648", "177.314", "0.964", "5.736", "0.031", "0.001",
                "0" if cube else f"{dur / 1000:.3f}", "0", "0", "0" if cube else "0.71", "0", "0", "0", "0", "0",
                "0", "0", "79.295" if cube else "0",
            ]
            self.kd.writerow(
                [str(step), "0", "4294967295", str(self.task_id), str(STREAM), k.name, k.type, "dynamic", k.core,
                 _us(start) + "\t", f"{dur / 1000}", f"{wait / 1000}", "16", "0", "NO", f'"{shapes}"',
                 "DT_BF16", "ND", f'"{shapes.split(";")[0]}"', "DT_BF16", "ND", "N/A", *pmu]
            )
            self.device_ns = start + dur
            self.last_kernel_end = start + dur

    def scope(self, step: int, tid: int, t: int, scope: str, kernels: tuple[Kernel, ...], dims: str) -> int:
        """Dispatch scope cpu_op at host time t with Enqueue inside, Dequeue + CANN on the queue thread."""
        dur = 18_000 + 2_000 * len(kernels)
        self.x(scope, PID, tid, t, dur, "cpu_op", '"Sequence number": -1, "Fwd thread id": 0')
        self.corr += 1
        enq_ts = t + 3_000
        self.x("Enqueue", PID, tid, enq_ts, 9_000, "enqueue", f'"correlation_id": {self.corr}')
        self.flow("s", "enqueue_to_dequeue", "async_task_queue", self.corr, PID, tid, enq_ts)
        deq_ts = t + 14_000
        deq_dur = 6_000 + 3_000 * len(kernels)
        self.x(f"Dequeue@{scope}", PID, QUEUE_TID, deq_ts, deq_dur, "dequeue", f'"correlation_id": {self.corr}')
        self.flow("f", "enqueue_to_dequeue", "async_task_queue", self.corr, PID, QUEUE_TID, deq_ts)
        self.x(f"AscendCL@{scope}", CANN_PID, QUEUE_TID, deq_ts + 500, deq_dur - 1_000, None,
               f'"Thread Id": {QUEUE_TID}, "Mode": "ACL_RTS", "level": "acl", "id": "{scope}", "item_id": "0", "connection_id": 0')
        self.kernels(step, (t, tid), deq_ts + 1_000, kernels, dims)
        return dur

    def forward(self, step: int, layer: int, unit: Unit, t: int) -> tuple[int, int, int]:
        """One layer call; returns (duration, seq number, start of the op carrying the fwdbwd flow)."""
        k = layer // len(UNITS)  # instance counter of this class (first-call order)
        self.seq += 1
        inner_t = t + 5_000
        depth_pad = 4_000
        scope_t = inner_t + depth_pad * len(unit.chain)
        scope_dur = self.scope(step, MAIN_TID, scope_t, unit.scope, unit.kernels, unit.dims)
        # aten chain, outermost first: the outer op carries the stack, the innermost the seq
        ends = scope_t + scope_dur + 2_000
        seq_op_ts = inner_t
        for i, name in enumerate(unit.chain):
            op_t = inner_t + depth_pad * i
            op_dur = ends + (len(unit.chain) - i) * 1_000 - op_t
            stack = f', "Call stack": {json.dumps(_stack(unit, layer))}' if i == 0 else ""
            dims = f', "Input Dims": {json.dumps(unit.dims)}, "Input type": {json.dumps(unit.types)}'
            self.x(name, PID, MAIN_TID, op_t, op_dur, "cpu_op",
                   f'"Sequence number": {self.seq}, "Fwd thread id": 0{dims}{stack}')
            seq_op_ts = op_t
        total = ends + len(unit.chain) * 1_000 + 5_000 - t
        self.x(f"nn.Module: {unit.module}_{k}", PID, MAIN_TID, t, total, "python_function",
               f'"Python id": {100 + layer}, "Python parent id": 1, "Python module id": {layer}')
        return total + 3_000, self.seq, seq_op_ts

    def backward(self, step: int, unit: Unit, seq: int, fwd_ts: int, t: int) -> int:
        node_t = t + 4_000
        inner_t = node_t + 4_000
        scope_t = inner_t + 4_000 * len(unit.bwd_chain)
        scope_dur = self.scope(step, AUTOGRAD_TID, scope_t, unit.bwd_scope, unit.bwd_kernels, unit.dims)
        ends = scope_t + scope_dur + 2_000
        for i, name in enumerate(unit.bwd_chain):
            op_t = inner_t + 4_000 * i
            self.x(name, PID, AUTOGRAD_TID, op_t, ends + (len(unit.bwd_chain) - i) * 1_000 - op_t, "cpu_op",
                   '"Sequence number": -1, "Fwd thread id": 0')
        node_dur = ends + len(unit.bwd_chain) * 1_000 + 2_000 - node_t
        self.x(unit.bwd_node, PID, AUTOGRAD_TID, node_t, node_dur, "cpu_op", f'"Sequence number": {seq}, "Fwd thread id": 1')
        self.x(f"autograd::engine::evaluate_function: {unit.bwd_node}", PID, AUTOGRAD_TID, t, node_dur + 6_000,
               "cpu_op", '"Sequence number": -1, "Fwd thread id": 0')
        self.flow("s", "fwdbwd", "fwdbwd", seq, PID, MAIN_TID, fwd_ts)
        self.flow("f", "fwdbwd", "fwdbwd", seq, PID, AUTOGRAD_TID, node_t)
        return node_dur + 9_000

    def step(self, n: int, t: int, layers: int) -> int:
        start = t
        calls = []
        for layer in range(layers):
            unit = UNITS[layer % len(UNITS)]
            dur, seq, fwd_ts = self.forward(n, layer, unit, t)
            calls.append((unit, seq, fwd_ts))
            t += dur
        for unit, seq, fwd_ts in reversed(calls):
            t += self.backward(n, unit, seq, fwd_ts, t)
        t = max(t, self.device_ns - 20_000)  # the host waits for the device now and then
        self.x(f"ProfilerStep#{n}", PID, MAIN_TID, start - 1_000, t - start + 2_000, "cpu_op",
               '"Sequence number": -1, "Fwd thread id": 0')
        return t + 10_000

    def close(self) -> None:
        self.f.write("]")
        self.f.close()
        self.kd_file.close()


def _place(lines: dict[int, str], header: str) -> str:
    """A module whose line N is ``lines[N]`` (the gaps filled with comments)."""
    out = header.splitlines()
    for number in sorted(lines):
        while len(out) < number - 1:
            out.append("")
        out.append(lines[number])
    return "\n".join(out) + "\n"


def write_sources(project: Path) -> None:
    """``model.py`` and ``train.py`` whose lines are the ones the generated ``Call stack`` frames
    name (``/home/user/project/...``), so a ``--check`` of the folder maps every kernel to a call."""
    project.mkdir(parents=True, exist_ok=True)
    model = {
        30: "class Layer(nn.Module):",
        31: "    def __init__(self, dim: int) -> None:",
        32: "        super().__init__()",
        33: "        self.fc = nn.Linear(dim, dim)",
        34: "        self.act = nn.ReLU()",
        35: "        self.norm = nn.LayerNorm(dim)",
        36: "        self.drop = nn.Dropout(0.1)",
        40: "    def forward(self, x):",
        **{u.line: f"        x = self.{attr}(x)" for u, attr in zip(UNITS, ("fc", "act", "norm", "drop"))},
        45: "        return x",
        49: "class Net(nn.Module):",
        50: "    def __init__(self, dim: int = 4096) -> None:",
        51: "        super().__init__()",
        52: "        self.blocks = nn.ModuleList(Layer(dim) for _ in range(4))",
        59: "    def forward(self, x):",
        **{60 + i: f"        x = self.blocks[{i}](x)" for i in range(4)},
        64: "        return x",
    }
    (project / "model.py").write_text(_place(model, "import torch\nfrom torch import nn"), encoding="utf-8")
    train = {
        116: "def train_step(model, batch, optimizer):",
        117: "    optimizer.zero_grad()",
        118: "    loss = model(batch).float().pow(2).mean(); loss.backward()",
        119: "    optimizer.step()",
        199: "model = Net()",
        200: "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
        201: "train_step(model, torch.randn(8192, 4096), optimizer)",
    }
    (project / "train.py").write_text(_place(train, "import torch\n\nfrom model import Net"), encoding="utf-8")


def generate(out_dir: Path, mb: float, layers: int = 24, steps: int | None = None) -> Path:
    """Write the profile (``steps`` steps of ``layers`` layer calls when given, else steps until
    the trace reaches ``mb`` MiB); returns the ``*_ascend_pt`` root."""
    root = out_dir / f"bench_{time.strftime('%Y%m%d%H%M%S')}000_ascend_pt"
    output = root / "ASCEND_PROFILER_OUTPUT"
    output.mkdir(parents=True, exist_ok=True)
    info = {
        "config": {
            "common_config": {"activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"], "schedule": {},
                              "record_shapes": True, "profile_memory": False, "with_stack": True,
                              "with_flops": False, "with_modules": True},
            "experimental_config": {"_profiler_level": "Level1", "_aic_metrics": "ACL_AICORE_PIPE_UTILIZATION",
                                    "_export_type": ["text"], "_data_simplification": True},
        },
        "torch_npu_version": "2.7.1", "cann_version": "8.3.RC1", "rank_id": 0,
    }
    (root / "profiler_info_0.json").write_text(json.dumps(info, indent=4), encoding="utf-8")
    w = TraceWriter(output / "trace_view.json", output / "kernel_details.csv")
    w.metadata()
    target = int(mb * (1 << 20))
    t = T0_NS
    n = 1
    while True:
        t = w.step(n, t, layers)
        n += 1
        if (n > steps) if steps is not None else w.f.tell() >= target:
            break
    w.close()
    (output / "analyse.done").write_bytes(b"")
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--mb", type=float, default=500.0, help="approximate trace_view.json size in MiB")
    ap.add_argument("--layers", type=int, default=24, help="layer calls per step")
    args = ap.parse_args()
    t = time.perf_counter()
    root = generate(args.out_dir, args.mb, args.layers)
    size = os.path.getsize(root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
    print(f"{root} ({size / (1 << 20):.1f} MiB trace) in {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
