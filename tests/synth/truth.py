"""Ground truth: the figures a correct reader must find, computed from the description's layout.

Nothing here reads a written file. Kernel figures cover operator tasks (the op_summary /
kernel_details rows); runtime tasks (MEMCPY_ASYNC) are counted separately. Attribution follows the
linking recipe: a kernel belongs to the first user frame (outside installed
packages) of its launching call's stack; a backward kernel to the stack of the forward op its
autograd node came from; collectives issued by DDP on the backward thread have no frame.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .clock import StepTimeline, lay_out
from .overlap import step_overlap
from .run import Run, first_user_frame

SourceLine = tuple[str, int]  # (file as recorded, line)


@dataclass(frozen=True, slots=True)
class StepTruth:
    number: int
    start_ns: int  # ProfilerStep#N range
    end_ns: int
    computing_ns: int
    comm_ns: int
    comm_not_overlapped_ns: int
    overlapped_ns: int
    free_ns: int
    preparing_ns: int
    first_task_ns: int
    last_task_ns: int

    @property
    def step_time_ns(self) -> int:
        """Computing + Communication(Not Overlapped) + Free."""
        return self.computing_ns + self.comm_not_overlapped_ns + self.free_ns

    @property
    def host_dur_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class Truth:
    steps: list[StepTruth] = field(default_factory=list)
    kernel_ns_by_type: Counter = field(default_factory=Counter)
    kernel_ns_by_name: Counter = field(default_factory=Counter)
    kernel_ns_by_core: Counter = field(default_factory=Counter)
    kernel_count_by_type: Counter = field(default_factory=Counter)
    kernel_ns_by_line: Counter = field(default_factory=Counter)  # SourceLine -> ns (fwd + bwd)
    forward_ns_by_line: Counter = field(default_factory=Counter)
    backward_ns_by_line: Counter = field(default_factory=Counter)
    kernel_ns_by_label: Counter = field(default_factory=Counter)  # UserCall.label -> ns
    unattributed_ns: int = 0
    forward_ns: int = 0
    backward_ns: int = 0  # kernels launched in backward scope (incl. collectives there)
    comm_kernel_ns: int = 0
    memcpy_ns: int = 0
    memcpy_count: int = 0
    kernel_count: int = 0
    host_op_counts: Counter = field(default_factory=Counter)
    cann_counts: Counter = field(default_factory=Counter)
    gc_count: int = 0
    gc_ns: int = 0
    fwdbwd_pairs: int = 0

    # -- derived ---------------------------------------------------------------------------------

    @property
    def kernel_ns(self) -> int:
        return sum(self.kernel_ns_by_type.values())

    @property
    def mean_step_time_ns(self) -> float:
        timed = [s for s in self.steps if s.first_task_ns >= 0]
        return sum(s.step_time_ns for s in timed) / len(timed) if timed else 0.0

    @property
    def comm_not_overlapped_share(self) -> float:
        """Mean over steps of Communication(Not Overlapped) / step time."""
        timed = [s for s in self.steps if s.step_time_ns > 0]
        return sum(s.comm_not_overlapped_ns / s.step_time_ns for s in timed) / len(timed) if timed else 0.0

    def per_step(self, ns: float) -> float:
        return ns / len(self.steps) if self.steps else 0.0


def add_step(t: Truth, tl: StepTimeline) -> None:
    ov = step_overlap(tl)
    t.steps.append(StepTruth(tl.number, tl.start_ns, tl.end_ns, ov.computing_ns, ov.comm_ns, ov.not_overlapped_ns,
                             ov.overlapped_ns, ov.free_ns, ov.preparing_ns, ov.first_ns, ov.last_ns))
    for k in tl.kernels:
        if not k.spec.is_op:
            t.memcpy_ns += k.dur_ns
            t.memcpy_count += 1
            continue
        t.kernel_count += 1
        t.kernel_ns_by_type[k.spec.type] += k.dur_ns
        t.kernel_ns_by_name[k.name] += k.dur_ns
        t.kernel_ns_by_core[k.spec.core] += k.dur_ns
        t.kernel_count_by_type[k.spec.type] += 1
        if k.label:
            t.kernel_ns_by_label[k.label] += k.dur_ns
        if k.spec.is_comm:
            t.comm_kernel_ns += k.dur_ns
        if k.backward:
            t.backward_ns += k.dur_ns
        else:
            t.forward_ns += k.dur_ns
        f = first_user_frame(k.attribution)
        if f is None:
            t.unattributed_ns += k.dur_ns
            continue
        key = (f.file, f.line)
        t.kernel_ns_by_line[key] += k.dur_ns
        (t.backward_ns_by_line if k.backward else t.forward_ns_by_line)[key] += k.dur_ns
    for op in tl.ops:
        t.host_op_counts[op.name] += 1
    for c in tl.cann:
        t.cann_counts[c.name] += 1
    t.gc_count += len(tl.gc)
    t.gc_ns += sum(d for _, d in tl.gc)
    t.fwdbwd_pairs += len(tl.fwdbwd)


def truth(run: Run) -> Truth:
    """Expected figures of ``run`` (lays it out afresh: the same timeline the writers produce)."""
    t = Truth()
    for tl in lay_out(run):
        add_step(t, tl)
    return t
