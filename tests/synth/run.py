"""The run description: what a profiled training job did, independent of any output format.

A ``Run`` holds the profiler configuration, the job's identity (rank, device, versions, env) and a
sequence of steps. A step is a list of items executed on the host main thread: user-level calls
(one source line each, producing host op trees that launch device kernels), ``loss.backward()``
(replays the step's autograd nodes on the backward thread), plain host gaps and GC pauses.

Nothing here has a timestamp: ``clock.lay_out`` turns the description into a consistent timeline,
the writers turn the timeline into files, ``truth`` computes the expected figures. All durations
are integer nanoseconds so the expected figures are exact.

Frames follow the profilers: innermost first, ``<module>`` last, the line being
the executing line (``def_line`` is what Kineto records for functions entered after tracing began).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Union

NS_PER_US = 1000

# Accelerator cores (kernel_details ``Accelerator Core`` / op_summary ``Task Type``).
AI_CORE = "AI_CORE"
AI_VECTOR_CORE = "AI_VECTOR_CORE"
AI_CPU = "AI_CPU"
MIX_AIC = "MIX_AIC"
MIX_AIV = "MIX_AIV"
HCCL = "HCCL"
COMMUNICATION = "COMMUNICATION"
DSA_SQE = "DSA_SQE"
COMM_CORES = frozenset({HCCL, COMMUNICATION})

# Device tasks that are runtime work, not operators: they appear in trace_view.json but not in
# op_summary / kernel_details.
NON_OP_TASK_TYPES = frozenset({"MEMCPY_ASYNC", "EVENT_RECORD", "EVENT_WAIT"})


def us(value: float) -> int:
    """Microseconds (as written in descriptions) -> integer nanoseconds."""
    return round(value * NS_PER_US)


@dataclass(frozen=True, slots=True)
class Frame:
    """One Python frame: ``<file>(<line>): <func>``."""

    file: str
    line: int
    func: str
    def_line: int = -1  # line of the ``def``; -1 = the frame was active when tracing began

    @property
    def text(self) -> str:
        return f"{self.file}({self.line}): {self.func}"

    @property
    def library(self) -> bool:
        """Inside an installed package (torch, torch_npu, ...), not the user's workspace."""
        f = self.file.replace("\\", "/")
        return "site-packages/" in f or "dist-packages/" in f or f.startswith("<")


@dataclass(frozen=True, slots=True)
class ModuleFrame:
    """An ``nn.Module: <Class>_<k>`` entry (Kineto python_function); torch_npu stacks omit it."""

    cls: str
    k: int = 0

    @property
    def text(self) -> str:
        return f"nn.Module: {self.cls}_{self.k}"


StackEntry = Union[Frame, ModuleFrame]
Stack = tuple[StackEntry, ...]


def frames_only(stack: Stack) -> tuple[Frame, ...]:
    return tuple(f for f in stack if isinstance(f, Frame))


def first_user_frame(stack: Stack) -> Frame | None:
    """Innermost frame outside installed packages (the line a hint anchors on)."""
    for f in stack:
        if isinstance(f, Frame) and not f.library:
            return f
    return None


RING_CHUNK_ALIGN = 16384  # bytes: HCCL rounds each ring chunk up to this


@dataclass(frozen=True, slots=True)
class CommInfo:
    """communication.json figures of one collective kernel."""

    size_mb: float  # the gradient bucket all-reduced, MB of 10^6 B (fp32: rounded to 4 B multiples)
    link: str = "HCCS"  # RDMA, HCCS, PCIE, SDMA, SIO
    transit_share: float = 0.8  # of the elapse time spent moving data
    wait_share: float = 0.1  # of the elapse time waiting for peers
    packet_mb: float | None = None  # None: a ring all-reduce's chunks; else whole packets of this size

    @property
    def bucket_bytes(self) -> int:
        return round(self.size_mb * 1e6 / 4) * 4

    def packets(self, rank: int, ranks: int) -> list[int]:
        """Bytes of each packet ``rank`` sends; they sum to its Transit Size.

        A ring all-reduce over ``ranks`` splits the bucket into one chunk per rank, each rounded up
        to 16 KiB with the remainder in the last (the real 8-rank AlexNet job's chunks fit this),
        and sends ``ranks - 1`` chunks in the reduce-scatter and as many in the all-gather.
        ``packet_mb`` instead models a transfer of whole packets of one size (threshold tests)."""
        if self.packet_mb is not None:
            size = round(self.packet_mb * 1e6)
            return [size] * max(1, math.ceil(self.bucket_bytes / size))
        if ranks <= 1:
            return [self.bucket_bytes]
        chunk = -(-self.bucket_bytes // ranks // RING_CHUNK_ALIGN) * RING_CHUNK_ALIGN
        sizes = [max(0, min(chunk, self.bucket_bytes - i * chunk)) for i in range(ranks)]
        # step s of the reduce-scatter sends chunk (rank - s); of the all-gather, chunk (rank + 1 - s)
        sent = [sizes[(rank - s) % ranks] for s in range(ranks - 1)]
        sent += [sizes[(rank + 1 - s) % ranks] for s in range(ranks - 1)]
        return [b for b in sent if b]


@dataclass(frozen=True, slots=True)
class KernelSpec:
    """One device task launched by a host op.

    ``name`` may contain ``{n}``: it is replaced by a per-run counter (acl_op names ``Conv2D17``,
    HCCL ``hcom_allReduce__{n}_0_1``).
    """

    name: str
    type: str
    core: str
    dur_ns: int
    stream: int = -1  # -1: the run's compute stream (communication kernels: its comm stream)
    block_dim: int = 0
    mix_block_dim: int = 0
    op_state: str = "dynamic"
    hf32: str = "NO"
    input_shapes: str = ""  # ";"-joined tensors, ","-joined dims, no quotes
    input_dtypes: str = ""
    input_formats: str = ""
    output_shapes: str = ""
    output_dtypes: str = ""
    output_formats: str = ""
    pmu: tuple[tuple[str, float], ...] = ()  # PMU column -> value (ratios, cube_utilization(%))
    memcpy_bytes: int = -1  # MEMCPY_ASYNC only
    comm: CommInfo | None = None  # collectives only

    @property
    def is_comm(self) -> bool:
        return self.core in COMM_CORES

    @property
    def linked(self) -> bool:
        """Whether trace_view.json links the task to its launch: the 2024 sample has no
        torch_to_npu or HostToDevice flow on MEMCPY_ASYNC tasks."""
        return self.type != "MEMCPY_ASYNC"

    @property
    def is_op(self) -> bool:
        """Listed in op_summary / kernel_details (runtime tasks are not)."""
        return self.type not in NON_OP_TASK_TYPES


@dataclass(frozen=True, slots=True)
class CannSpec:
    """A CANN API call made by a host op besides its kernel launches (e.g. a synchronisation)."""

    name: str  # "AscendCL@aclrtMemcpy"
    dur_ns: int
    level: str = "acl"


@dataclass(frozen=True, slots=True)
class OpSpec:
    """One host op (``cat: cpu_op``) and what it does.

    A *dispatch scope* (torch_npu's ``aclnnMm``, ``Conv2D`` ...) is an op without ``::`` in its name
    that launches kernels; Kineto has no such scopes (its kernels hang off the aten op).
    """

    name: str
    self_ns: int = 3000  # host time not spent in children or launches
    children: tuple[OpSpec, ...] = ()
    kernels: tuple[KernelSpec, ...] = ()
    input_dims: str = ""  # ";"-joined tensors, ","-joined dims (record_shapes)
    input_types: str = ""  # ";"-joined
    concrete_inputs: tuple[str, ...] = ()  # Kineto ``Concrete Inputs``
    autograd: str = ""  # backward node this op creates ("ReluBackward0"): gets a sequence number
    backward: tuple[OpSpec, ...] = ()  # ops that node runs on the backward thread
    frames: tuple[StackEntry, ...] = ()  # library frames inside this op's call, innermost first
    cann: tuple[CannSpec, ...] = ()
    sync: bool = False  # host blocks until the device is drained (aten::_local_scalar_dense)
    compile: bool = False  # acl_op path that compiles online (aclopCompileAndExecute + opCompile)
    compile_ns: int = 400_000

    @property
    def is_dispatch_scope(self) -> bool:
        return bool(self.kernels) and "::" not in self.name

    def walk(self) -> Iterator[OpSpec]:
        yield self
        for c in self.children:
            yield from c.walk()


@dataclass(frozen=True, slots=True)
class Launch:
    """One outermost op issued from a source line, with the library frames between the two."""

    op: OpSpec
    frames: tuple[StackEntry, ...] = ()  # innermost first; the call site's frames follow


@dataclass(frozen=True, slots=True)
class CommLaunch:
    """A collective issued on the backward thread (DDP bucket all-reduce) after ``after_nodes``
    backward nodes (-1: after the last one)."""

    op: OpSpec
    after_nodes: int = -1


@dataclass(frozen=True, slots=True)
class UserCall:
    """One source line executed in the step.

    ``backward=True`` marks ``loss.backward()``: after its own launches (the grad seed), every
    forward op of the step that created an autograd node runs its backward on the backward thread,
    in reverse order, with ``comm`` collectives interleaved.
    """

    site: Stack  # innermost first, ends with <module>
    launches: tuple[Launch, ...] = ()
    label: str = ""
    gap_ns: int = 5000  # host time before the call (Python between statements)
    wait_comm: bool = False  # device waits for pending collectives first (grad sync before step)
    backward: bool = False
    comm: tuple[CommLaunch, ...] = ()
    node_gap_ns: int = 4000  # backward thread: time between autograd nodes
    sync_api: str = ""  # a runtime sync called from Python without an op ("AscendCL@aclrtSynchronizeDevice")


@dataclass(frozen=True, slots=True)
class Gap:
    """Host time without any recorded op (Python work, logging)."""

    ns: int


@dataclass(frozen=True, slots=True)
class GcPause:
    """A Python GC pause on the main thread (recorded with ``gc_detect_threshold``)."""

    ns: int
    gap_ns: int = 2000


StepItem = Union[UserCall, Gap, GcPause]


@dataclass(frozen=True, slots=True)
class StepSpec:
    number: int
    items: tuple[StepItem, ...]


class RepeatedSteps(Sequence[StepSpec]):
    """``count`` steps cycling through ``templates``, built on demand (GB-size runs stay small)."""

    def __init__(self, templates: Sequence[tuple[StepItem, ...]], count: int, first: int = 1) -> None:
        if not templates:
            raise ValueError("need at least one step template")
        self.templates = tuple(tuple(t) for t in templates)
        self.count = count
        self.first = first

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.count))]
        if i < 0:
            i += self.count
        if not 0 <= i < self.count:
            raise IndexError(i)
        return StepSpec(self.first + i, self.templates[i % len(self.templates)])


@dataclass(frozen=True, slots=True)
class ProfilerConfig:
    """torch_npu.profiler settings (profiler_info.json ``config``)."""

    with_stack: bool = True
    record_shapes: bool = True
    profile_memory: bool = False
    with_modules: bool = False
    with_flops: bool = False
    level: str = "Level1"  # Level_none / Level0 / Level1 / Level2
    aic_metrics: str = "ACL_AICORE_PIPE_UTILIZATION"  # ACL_AICORE_NONE = no PMU columns
    task_queue: bool = True
    gc_detect_threshold: float | None = None  # ms; None = no GC events
    export_type: tuple[str, ...] = ("text",)
    data_simplification: bool = True
    schedule: tuple[tuple[str, int], ...] = (("wait", 1), ("active", 2), ("warmup", 1), ("repeat", 1), ("skip_first", 0))


DEFAULT_ENV: dict[str, str] = {
    "ASCEND_GLOBAL_LOG_LEVEL": "",
    "HCCL_RDMA_TC": "",
    "HCCL_RDMA_SL": "",
    "ACLNN_CACHE_LIMIT": "",
    "HOST_CACHE_CAPACITY": "",
    "ASCEND_ENHANCE_ENABLE": "",
    "PYTORCH_NPU_ALLOC_CONF": "",
    "ASCEND_LAUNCH_BLOCKING": "",
    "HCCL_ALGO": "",
}


@dataclass
class Run:
    """One rank of a profiled job."""

    steps: Sequence[StepSpec]
    config: ProfilerConfig = field(default_factory=ProfilerConfig)
    rank: int = 0
    world_size: int = 1
    device: int = 0
    hostname: str = "train-node-0"
    pid: int = 2894371
    start_ns: int = 1_736_413_971_000_000_000  # epoch ns of the first step
    torch_version: str = "2.5.1"
    torch_npu_version: str = "2.5.1"
    cann_version: str = "8.0.RC3"
    env: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ENV))
    parallel_groups: dict[str, dict] = field(default_factory=dict)
    user_metadata: dict[str, object] = field(default_factory=dict)
    compute_stream: int = 2
    comm_stream: int = 8
    launch_latency_ns: int = 6000  # launch call -> earliest device start
    queue_latency_ns: int = 3000  # Enqueue -> Dequeue start (task queue)
    hccl_group: str = "7386924375452012417"  # communication.json "<op>@<group>"
    jitter_ns: int = 300  # deterministic noise on host times and kernel durations (0: exact)
    # a wait for pending collectives written as EVENT_RECORD / EVENT_WAIT tasks (as a real export
    # has them); False: the wait happens but leaves no task (the committed samples)
    record_comm_waits: bool = False

    @property
    def worker_name(self) -> str:
        return f"{self.hostname}_{self.pid}"

    @property
    def level0(self) -> bool:
        return self.config.level in ("Level0", "Level_none")

    @property
    def pmu_set(self) -> str:
        """'pipe', 'arith' or '' from the aic_metrics setting."""
        m = self.config.aic_metrics
        if m == "ACL_AICORE_PIPE_UTILIZATION":
            return "pipe"
        if m == "ACL_AICORE_ARITHMETIC_UTILIZATION":
            return "arith"
        return ""
