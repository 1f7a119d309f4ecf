"""Stock PyTorch (Kineto) Chrome trace from a run description.

The description is translated to what torch does on the target device: no torch_npu dispatch
scopes (kernels hang off the aten op), CUDA ``aten::native_dropout`` / CPU eager dropout and relu
decompositions, synchronous launches (``cudaLaunchKernel`` inside the op), NCCL collectives via
``record_param_comms``. The trace is an object with ``baseTimeNanoseconds`` and numeric ``ts``
relative to it; python_function events carry DEF-line frames with prefix-stripped paths,
``nn.Module: X_k`` entries, ``Python id`` / ``Python parent id``.
"""

from __future__ import annotations

import gzip
import json
import os
import posixpath
from dataclasses import replace
from pathlib import Path
from typing import IO

from .clock import Clock, StepTimeline, TOp
from .run import (
    CommLaunch,
    Frame,
    KernelSpec,
    Launch,
    ModuleFrame,
    OpSpec,
    RepeatedSteps,
    Run,
    Stack,
    StepSpec,
    UserCall,
)

ANNOTATION_PREFIXES = ("ProfilerStep#", "enumerate(DataLoader)#", "Optimizer.")
GPU_NAMES = {
    "MatMul": "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn",
    "Conv2D": "sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nchw_tilesize128x128x32",
    "hcom_allReduce_": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
}


# -- translation of the description ---------------------------------------------------------------------


def _kernel_name(k: KernelSpec) -> str:
    for key, name in GPU_NAMES.items():
        if k.type.startswith(key) or (key == "MatMul" and "MatMul" in k.type):
            return name
    if k.type == "MEMCPY_ASYNC":
        return "Memcpy HtoD (Pageable -> Device)"
    return f"void at::native::vectorized_elementwise_kernel<4, at::native::{k.type}Functor<float> >(int, at::native::{k.type}Functor<float>, at::detail::Array<char*, 2>)"


def _translate_op(op: OpSpec, device: str) -> OpSpec:
    """torch_npu op tree -> the tree stock torch records on ``device``."""
    kernels: list[KernelSpec] = []
    children: list[OpSpec] = []
    for c in op.children:
        if c.is_dispatch_scope:
            if device == "cuda":
                kernels.extend(replace(k, name=_kernel_name(k)) for k in c.kernels)
            continue
        children.append(_translate_op(c, device))
    if "::" in op.name and op.kernels and device == "cuda":
        kernels.extend(replace(k, name=_kernel_name(k)) for k in op.kernels)
    name = op.name
    autograd = op.autograd
    if name == "npu::_npu_dropout":
        name, autograd = "aten::native_dropout", "NativeDropoutBackward0"
    elif name == "npu::npu_dropout_backward":
        name = "aten::native_dropout_backward"
    if device == "cpu":
        if name == "aten::native_dropout":
            # CPU eager dropout: aten::dropout > empty_like, bernoulli_, div_, mul
            return replace(op, name="aten::empty_like", children=(), kernels=(), autograd="", backward=(),
                           sync=False)
        if name == "aten::relu":
            children = [OpSpec("aten::clamp_min", self_ns=3000)]
        kernels = []
    if name.startswith("c10d::"):
        rpc = OpSpec("record_param_comms", self_ns=4000, kernels=tuple(kernels) if device == "cuda" else ())
        return replace(op, name=name, children=(rpc,), kernels=(), autograd=autograd)
    backward = tuple(_translate_op(b, device) for b in op.backward)
    out = replace(op, name=name, children=tuple(children), kernels=tuple(kernels), autograd=autograd,
                  backward=backward, sync=op.sync and device == "cuda")
    if device == "cpu" and op.name == "aten::dropout":
        extra = (OpSpec("aten::bernoulli_", 5000), OpSpec("aten::div_", 3000), OpSpec("aten::mul", 3000))
        out = replace(out, children=out.children + extra, autograd="MulBackward0",
                      backward=(OpSpec("aten::mul", 3000),))
    return out


def translate(run: Run, device: str) -> Run:
    """The run as stock torch records it on ``device`` (``cuda`` or ``cpu``)."""

    def call(c: UserCall) -> UserCall:
        return replace(c, launches=tuple(Launch(_translate_op(la.op, device), la.frames) for la in c.launches),
                       comm=tuple(CommLaunch(_translate_op(x.op, device), x.after_nodes) for x in c.comm))

    def step_items(items):
        return tuple(call(i) if isinstance(i, UserCall) else i for i in items)

    steps = run.steps
    if isinstance(steps, RepeatedSteps):
        new_steps = RepeatedSteps([step_items(t) for t in steps.templates], steps.count, steps.first)
    else:
        new_steps = [StepSpec(s.number, step_items(s.items)) for s in steps]
    return replace(run, steps=new_steps, config=replace(run.config, task_queue=False))


# -- writing ------------------------------------------------------------------------------------------------


def _dims_list(text: str) -> list[list[int]]:
    if not text:
        return []
    return [[int(d) for d in part.split(",") if d] for part in text.split(";")]


class _PyTracer:
    """Builds python_function events from the launch stacks of one thread."""

    def __init__(self, w: _KinetoWriter, tid: int) -> None:
        self.w = w
        self.tid = tid
        self.open: list[list] = []  # [key, python id, start_ns, last_end_ns, name, module_id]
        self.module_ids: dict[str, int] = {}

    def visit(self, stack: Stack, start: int, end: int) -> None:
        outer = [f for f in reversed(stack) if not _module_call_frame(f)]
        keys = [(i, self.w.frame_name(f)) for i, f in enumerate(outer)]
        common = 0
        while common < min(len(keys), len(self.open)) and self.open[common][0] == keys[common]:
            common += 1
        self.close(common)
        for i in range(common, len(keys)):
            pid_ = self.w.next_python_id()
            entry = outer[i]
            mod = None
            if isinstance(entry, ModuleFrame):
                mod = self.module_ids.setdefault(entry.text, len(self.module_ids) + 1)
            self.open.append([keys[i], pid_, start - (len(keys) - i), end, keys[i][1], mod])
        for depth, o in enumerate(self.open):
            o[3] = max(o[3], end + (len(self.open) - depth))

    def close(self, keep: int) -> None:
        while len(self.open) > keep:
            key, py_id, start, end, name, mod = self.open.pop()
            parent = self.open[-1][1] if self.open else None
            args = {"Python id": py_id, "Python parent id": parent, "Ev Idx": self.w.next_ev()}
            if mod is not None:
                args["Python module id"] = mod
            self.w.emit({"ph": "X", "cat": "python_function", "name": name, "pid": self.w.run.pid, "tid": self.tid,
                         "ts": self.w.rel(start), "dur": (end - start) / 1000, "args": args})


class _KinetoWriter:
    def __init__(self, run: Run, device: str, f: IO[str], source_root: str | None, verbose_stacks: bool) -> None:
        self.run = run
        self.device = device
        self.f = f
        self.first = True
        self.base = (run.start_ns // 1_000_000 - 5) * 1_000_000
        self.source_root = source_root
        self.verbose = verbose_stacks
        self.python_id = 0
        self.ev = 0
        self.ext = 0
        self.corr = 0
        self.flow = 0
        self.enc = json.JSONEncoder(ensure_ascii=False)
        self.tracers: dict[int, _PyTracer] = {}
        self.ext_of: dict[int, int] = {}

    def rel(self, ns: int) -> float:
        return (ns - self.base) / 1000

    def emit(self, ev: dict) -> None:
        self.f.write(("" if self.first else ",\n  ") + self.enc.encode(ev))
        self.first = False

    def next_python_id(self) -> int:
        self.python_id += 1
        return self.python_id

    def next_ev(self) -> int:
        self.ev += 1
        return self.ev - 1

    def frame_name(self, f: Frame | ModuleFrame) -> str:
        if isinstance(f, ModuleFrame):
            return f.text
        path = f.file.replace("\\", "/")
        if "site-packages/" in path:
            path = path.split("site-packages/", 1)[1]
        elif self.source_root and path.startswith(self.source_root.rstrip("/") + "/"):
            path = path[len(self.source_root.rstrip("/")) + 1:]
        line = f.def_line if f.def_line >= 0 else f.line
        return f"{path}({line}): {f.func}"

    def stack_text(self, stack: Stack) -> str:
        return "".join(self.frame_name(f) + ";" for f in stack if not _module_call_frame(f))

    def metadata(self) -> None:
        run = self.run
        for name, args in (("process_name", {"name": "python"}), ("process_labels", {"labels": "CPU"}),
                           ("process_sort_index", {"sort_index": run.pid})):
            self.emit({"name": name, "ph": "M", "ts": 0, "pid": run.pid, "tid": 0, "args": args})
        tids = [run.pid, run.pid + 1553]
        for tid in tids:
            self.emit({"name": "thread_name", "ph": "M", "ts": 0, "pid": run.pid, "tid": tid,
                       "args": {"name": f"thread {tid} (python)"}})
        if self.device == "cuda":
            dev = run.device
            for name, args in (("process_name", {"name": "python"}), ("process_labels", {"labels": f"GPU {dev}"}),
                               ("process_sort_index", {"sort_index": 5000000 + dev})):
                self.emit({"name": name, "ph": "M", "ts": 0, "pid": dev, "tid": 0, "args": args})
            for stream in sorted({run.compute_stream, run.comm_stream}):
                self.emit({"name": "thread_name", "ph": "M", "ts": 0, "pid": dev, "tid": stream,
                           "args": {"name": f"stream {stream} "}})

    def cpu_op(self, op: TOp) -> None:
        run = self.run
        self.ext += 1
        self.ext_of[op.uid] = self.ext
        annotation = op.name.startswith(ANNOTATION_PREFIXES)
        args: dict = {"External id": self.ext, "Record function id": 0, "Ev Idx": self.next_ev()}
        if not annotation:
            if op.seq >= 0:
                args["Sequence number"] = op.seq
                args["Fwd thread id"] = run.pid if op.backward else 0
            if run.config.record_shapes:
                dims = _dims_list(op.input_dims)
                types = op.input_types.split(";") if op.input_types else []
                args["Input Dims"] = dims
                args["Input type"] = types
                args["Input Strides"] = [_strides(d) for d in dims]
                ci = list(op.concrete_inputs) or [""] * len(dims)
                args["Concrete Inputs"] = ci
            if self.verbose and op.stack:
                args["Call stack"] = self.stack_text(op.attribution)
        self.emit({"ph": "X", "cat": "user_annotation" if annotation else "cpu_op", "name": op.name,
                   "pid": run.pid, "tid": op.tid, "ts": self.rel(op.start_ns), "dur": op.dur_ns / 1000, "args": args})

    def step(self, tl: StepTimeline, c_ops: dict[int, TOp]) -> None:
        run = self.run
        cpu_tid = run.pid
        for op in tl.ops:
            if self.device == "cpu" and op.backward:
                op.tid = cpu_tid  # CPU autograd runs on the calling thread
            c_ops[op.uid] = op
            if op.stack is not None and op.tid == cpu_tid and not op.backward:
                tracer = self.tracers.setdefault(op.tid, _PyTracer(self, op.tid))
                tracer.visit(op.attribution, op.start_ns, op.end_ns)
            self.cpu_op(op)
        seq_ids: dict[int, int] = {}
        for fwd, node, seq in tl.fwdbwd:
            self.flow += 1
            seq_ids[seq] = self.flow
            for ph, uid in (("s", fwd), ("f", node)):
                o = c_ops[uid]
                ev = {"ph": ph, "id": self.flow, "pid": run.pid, "tid": o.tid, "ts": self.rel(o.start_ns),
                      "cat": "fwdbwd", "name": "fwdbwd"}
                if ph == "f":
                    ev["bp"] = "e"
                self.emit(ev)
        if self.device != "cuda":
            return
        launches = {c.kernel_uid: c for c in tl.cann if c.kernel_uid >= 0}
        for k in tl.kernels:
            op = c_ops[k.op_uid]
            ext = self.ext_of[op.uid]
            self.corr += 1
            launch = launches[k.uid]
            memcpy = k.spec.type == "MEMCPY_ASYNC"
            self.emit({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync" if memcpy else "cudaLaunchKernel",
                       "pid": run.pid, "tid": op.tid, "ts": self.rel(launch.start_ns), "dur": launch.dur_ns / 1000,
                       "args": {"cbid": 41 if memcpy else 211, "correlation": self.corr, "External id": ext}})
            args: dict = {"queued": 0, "device": run.device, "context": 1, "stream": k.stream,
                          "correlation": self.corr, "External id": ext}
            if memcpy:
                args["bytes"] = max(k.spec.memcpy_bytes, 0)
                args["memory bandwidth (GB/s)"] = round(max(k.spec.memcpy_bytes, 0) / k.dur_ns, 3)
                cat = "gpu_memcpy"
            else:
                cat = "kernel"
                args.update({"registers per thread": 128, "shared memory": 49152, "blocks per SM": 2.5,
                             "warps per SM": 10.0, "grid": [k.spec.block_dim or 1, 1, 1], "block": [256, 1, 1],
                             "est. achieved occupancy %": 25})
                if op.name == "record_param_comms" and k.spec.comm is not None:
                    args.update(_comm_args(run, k.spec))
            self.emit({"ph": "X", "cat": cat, "name": k.name, "pid": run.device, "tid": k.stream,
                       "ts": self.rel(k.start_ns), "dur": k.dur_ns / 1000, "args": args})
            self.emit({"ph": "s", "id": self.corr, "pid": run.pid, "tid": op.tid, "ts": self.rel(launch.start_ns),
                       "cat": "ac2g", "name": "ac2g"})
            self.emit({"ph": "f", "id": self.corr, "pid": run.device, "tid": k.stream, "ts": self.rel(k.start_ns),
                       "cat": "ac2g", "name": "ac2g", "bp": "e"})
        for c in tl.cann:
            if c.name.startswith("AscendCL@aclrtSynchronize"):
                self.corr += 1
                name = "cudaDeviceSynchronize" if c.name.endswith("Device") else "cudaStreamSynchronize"
                self.emit({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": run.pid,
                           "tid": c.tid, "ts": self.rel(c.start_ns), "dur": c.dur_ns / 1000,
                           "args": {"cbid": 165 if name == "cudaDeviceSynchronize" else 131,
                                    "correlation": self.corr}})


def _module_call_frame(f: Frame | ModuleFrame) -> bool:
    """``module.py(...): _call_impl`` frames: torch's tracer shows ``nn.Module: X_k`` instead."""
    return (isinstance(f, Frame) and f.file.endswith("torch/nn/modules/module.py")
            and f.func in ("_call_impl", "_wrapped_call_impl"))


def _strides(dims: list[int]) -> list[int]:
    out, acc = [], 1
    for d in reversed(dims):
        out.append(acc)
        acc *= max(d, 1)
    return list(reversed(out))


def _comm_args(run: Run, k: KernelSpec) -> dict:
    info = k.comm
    n = info.bucket_bytes // 4 if info else 0  # fp32 elements of the bucket
    return {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": n, "Out msg nelems": n,
            "In split size": "[]", "Out split size": "[]", "Global rank start": 0, "Global rank stride": 1,
            "Group size": run.world_size, "Process Group Name": "0", "Process Group Description": "default_pg",
            "Process Group Ranks": str(list(range(run.world_size)))}


def write_kineto(run: Run, path: str | os.PathLike[str], *, device: str = "cuda", gz: bool = False,
                 source_root: str | None = None, verbose_stacks: bool = False) -> Path:
    """Write a Kineto trace of ``run`` to ``path`` (``.json`` or, with ``gz``, gzip-compressed).

    ``source_root``: the directory stripped from user paths (torch strips ``sys.path`` entries);
    default: the directory of the outermost ``<module>`` frame found.
    ``verbose_stacks``: add the ``Call stack`` arg (``_ExperimentalConfig(verbose=True)``).
    """
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda' or 'cpu', not {device!r}")
    path = Path(path)
    krun = translate(run, device)
    if source_root is None:
        source_root = _entry_dir(krun)
    opener = (lambda p: gzip.open(p, "wt", encoding="utf-8")) if gz else (lambda p: open(p, "w", encoding="utf-8"))
    with opener(path) as f:
        head = {"schemaVersion": 1, "deviceProperties": _device_props(device), "record_shapes": 1, "with_stack": 1,
                "trace_id": f"{run.pid:X}{run.rank:04X}", "host_name": run.hostname}
        if run.world_size > 1:
            head["distributedInfo"] = {"backend": "nccl" if device == "cuda" else "gloo", "rank": run.rank,
                                       "world_size": run.world_size, "pg_count": 1,
                                       "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config":
                                                      "cuda:nccl" if device == "cuda" else "cpu:gloo",
                                                      "pg_size": run.world_size,
                                                      "ranks": list(range(run.world_size))}],
                                       "nccl_version": "2.21.5"}
        w = _KinetoWriter(krun, device, f, source_root, verbose_stacks)
        head["displayTimeUnit"] = "ms"
        head["baseTimeNanoseconds"] = w.base
        f.write(json.dumps(head, ensure_ascii=False)[:-1] + ',\n  "traceEvents": [\n  ')
        w.metadata()
        end = krun.start_ns
        for tl in Clock(krun).steps():
            w.step(tl, {})
            end = max(end, tl.end_ns)
        for tracer in w.tracers.values():
            tracer.close(0)
        # Kineto's own bookkeeping events, with string pids
        w.emit({"ph": "X", "cat": "Trace", "ts": w.rel(krun.start_ns), "dur": (end - krun.start_ns) / 1000,
                "pid": "Spans", "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}})
        w.emit({"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces",
                "tid": "Trace PyTorch Profiler", "ts": w.rel(krun.start_ns)})
        w.emit({"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": w.rel(end + 1000)})
        f.write('\n],\n  "traceName": ' + json.dumps(str(path)) + "\n}\n")
    return path


def _entry_dir(run: Run) -> str | None:
    for step in run.steps[:1]:
        for item in step.items:
            if isinstance(item, UserCall):
                for f in reversed(item.site):
                    if isinstance(f, Frame) and not f.library:
                        return posixpath.dirname(f.file.replace("\\", "/"))
    return None


def _device_props(device: str) -> list[dict]:
    if device != "cuda":
        return []
    return [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85051572224, "computeMajor": 8,
             "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
             "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 108,
             "sharedMemPerMultiprocessor": 167936}]
