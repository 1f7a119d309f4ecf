"""Run descriptions with a problem fixed: the re-simulated truth of a finding's saving.

Each transform takes a ``Run`` and returns the same job with one fix applied to its description
(every step): no TransData kernels, no DataLoader fetch on the training thread, no blocking syncs,
one kernel where a ReLU -> Dropout pair ran, one all-reduce every k steps. ``step_ns`` is the
figure a saving is compared with: the mean ProfilerStep duration (the host's period, which is
when the next step can begin; the samples' host waits for the device at their syncs).
benchmarks/savings.py and tests/hints/test_savings.py lay out both runs (``clock.lay_out``) and
take the difference.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .run import Launch, OpSpec, RepeatedSteps, Run, StepItem, UserCall
from .truth import truth

OpMap = Callable[[OpSpec], OpSpec]


def map_ops(run: Run, fn: OpMap, labels: frozenset[str] | None = None) -> Run:
    """``run`` with ``fn`` applied to every op of every step (of the calls ``labels`` only, when
    given), innermost first: children, the backward ops their autograd node runs, collectives."""

    def walk(op: OpSpec) -> OpSpec:
        return fn(replace(op, children=tuple(walk(c) for c in op.children),
                          backward=tuple(walk(b) for b in op.backward)))

    def item(it: StepItem) -> StepItem:
        if not isinstance(it, UserCall) or (labels is not None and it.label not in labels):
            return it
        return replace(it, launches=tuple(replace(la, op=walk(la.op)) for la in it.launches),
                       comm=tuple(replace(c, op=walk(c.op)) for c in it.comm))

    return _map_items(run, lambda items: tuple(item(i) for i in items))


def _map_items(run: Run, fn: Callable[[tuple[StepItem, ...]], tuple[StepItem, ...]]) -> Run:
    steps = run.steps
    assert isinstance(steps, RepeatedSteps), "the samples' runs repeat step templates"
    return replace(run, steps=RepeatedSteps([fn(t) for t in steps.templates], steps.count, steps.first))


def without_kernels(run: Run, kernel_types: frozenset[str], labels: frozenset[str] | None = None) -> Run:
    """No kernel of ``kernel_types`` (of the calls ``labels``, when given): ``TransData`` with
    internal formats off; ``Relu``/``ReluGrad`` where a ReLU -> Dropout pair runs as one kernel (the
    dropout's mask and DoMask kernels stay: the fused kernel applies both)."""
    return map_ops(run, lambda op: replace(op, kernels=tuple(k for k in op.kernels if k.type not in kernel_types)),
                   labels)


def without_dataloader(run: Run) -> Run:
    """The DataLoader fetch leaves the training thread (workers prefetch the batch)."""
    return _map_items(run, lambda items: tuple(
        replace(i, launches=()) if isinstance(i, UserCall) and i.label == "dataloader" else i for i in items))


def without_syncs(run: Run, *, ops: bool = True, apis: bool = True) -> Run:
    """No blocking sync: ``ops`` the ``.item()`` kind (an op that drains the device), ``apis`` the
    ``torch.npu.synchronize()`` kind (a runtime call from Python)."""
    if ops:
        run = map_ops(run, lambda op: replace(op, sync=False) if op.sync else op)
    if apis:
        run = _map_items(run, lambda items: tuple(
            replace(i, sync_api="") if isinstance(i, UserCall) and i.sync_api else i for i in items))
    return run


def allreduce_every(run: Run, k: int) -> Run:
    """Gradient accumulation over ``k`` micro-batches: the all-reduce's time divided by ``k``
    (one of every k steps runs it; the step's mean)."""

    def scale(op: OpSpec) -> OpSpec:
        ks = tuple(replace(x, dur_ns=max(1, x.dur_ns // k)) if x.is_comm else x for x in op.kernels)
        return replace(op, kernels=ks)

    return map_ops(run, scale)


def fused_optimizer(run: Run, launch: Launch) -> Run:
    """``optimizer.step()`` replaced by ``launch`` (the fused form of the same optimizer)."""
    return _map_items(run, lambda items: tuple(
        replace(i, launches=(launch,)) if isinstance(i, UserCall) and i.label == "optimizer.step" else i
        for i in items))


def one_launch(run: Run, labels: frozenset[str], launch: Callable[[UserCall], Launch]) -> Run:
    """The calls ``labels`` issue one launch, ``launch(call)``, instead of theirs (a fused API)."""
    return _map_items(run, lambda items: tuple(
        replace(i, launches=(launch(i),)) if isinstance(i, UserCall) and i.label in labels else i for i in items))


def map_calls(run: Run, labels: frozenset[str], fn: Callable[[UserCall], UserCall]) -> Run:
    """The calls ``labels`` replaced by ``fn(call)`` (a fused API: the first call of a pattern
    launches the fused op, the others nothing)."""
    return _map_items(run, lambda items: tuple(
        fn(i) if isinstance(i, UserCall) and i.label in labels else i for i in items))


def step_ns(run: Run) -> float:
    """Mean ProfilerStep duration of the laid-out run, ns."""
    steps = truth(run).steps
    return sum(s.host_dur_ns for s in steps) / len(steps)


def saving_ns(run: Run, fixed: Run) -> float:
    """The re-simulated truth: the step before minus the step after."""
    return step_ns(run) - step_ns(fixed)
