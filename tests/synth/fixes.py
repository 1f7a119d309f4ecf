"""Run descriptions with a problem fixed: the re-simulated truth of a finding's saving.

Each transform takes a ``Run`` and returns the same job with one fix applied to its description
(every step): no TransData kernels, no DataLoader fetch on the training thread, no blocking syncs,
one kernel where a ReLU -> Dropout pair ran, one all-reduce every k steps. ``step_ns`` is the
figure a saving is compared with: the mean ProfilerStep duration (the host's period, which is
when the next step can begin; the samples' host waits for the device at their syncs).
benchmarks/savings.py and tests/hints/test_savings.py lay out both runs (``clock.lay_out``) and
take the difference. Where a fix changes how long kernels take (padding, autocast, a fused kernel),
``timed`` gives both runs the device model's times (tests/synth/device_model.py), not a knob's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .device_model import CUBE, DEVICE, DeviceModel
from .run import AI_VECTOR_CORE, KernelSpec, Launch, OpSpec, RepeatedSteps, Run, StepItem, UserCall
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


def timed(run: Run, device: DeviceModel = DEVICE, keep: frozenset[str] = frozenset()) -> Run:
    """Every kernel with shapes at the device model's time (tests/synth/device_model.py): the run
    before a fix and after it are both timed so, and the rules never read the model. ``keep``:
    kernel types whose described time stays (a recurrent kernel such as DynamicGRUV2 runs its
    time steps one after another, which a roofline of its tensors cannot time)."""
    return map_ops(run, lambda op: replace(op, kernels=tuple(k if k.type in keep else device.timed(k)
                                                             for k in op.kernels)) if op.kernels else op)


def _resize_dims(text: str, old: int, new: int) -> str:
    return ";".join(",".join(str(new) if d == str(old) else d for d in s.split(",")) for s in text.split(";"))


def resized(run: Run, old: int, new: int) -> Run:
    """Every tensor axis of size ``old`` grown to ``new`` (a vocabulary padded to an aligned size:
    the embedding, the head's GEMMs, the logits, the loss and the optimizer's state all grow)."""

    def fn(op: OpSpec) -> OpSpec:
        ks = tuple(replace(k, input_shapes=_resize_dims(k.input_shapes, old, new),
                           output_shapes=_resize_dims(k.output_shapes, old, new)) for k in op.kernels)
        return replace(op, kernels=ks, input_dims=_resize_dims(op.input_dims, old, new))

    return map_ops(run, fn)


FP32_TYPES = frozenset({"DT_FLOAT", "FLOAT"})


def _cast(k: KernelSpec, shapes: str, src: str, dst: str) -> KernelSpec:
    return replace(k, name="aclnnCast_CastAiCore_Cast", type="Cast", core=AI_VECTOR_CORE, input_shapes=shapes,
                   output_shapes=shapes, input_dtypes=src, output_dtypes=dst, input_formats="ND",
                   output_formats="ND", pmu=(), block_dim=8)


def _autocast_kernels(kernels: tuple[KernelSpec, ...], forward: bool) -> tuple[KernelSpec, ...]:
    out: list[KernelSpec] = []
    for k in kernels:
        if not (CUBE.search(k.type) and k.input_dtypes.split(";")[0] in FP32_TYPES):
            out.append(k)
            continue
        half = replace(k, input_dtypes=";".join("DT_BF16" for _ in k.input_dtypes.split(";")),
                       output_dtypes=";".join("DT_BF16" for _ in k.output_dtypes.split(";")))
        if forward:  # autocast casts each fp32 operand to bf16 before the GEMM
            out += [_cast(k, s, "DT_FLOAT", "DT_BF16") for s in k.input_shapes.split(";")] + [half]
        else:  # the gradient comes back to an fp32 tensor: one cast of the GEMM's output
            out += [half] + [_cast(k, s, "DT_BF16", "DT_FLOAT") for s in k.output_shapes.split(";")]
    return tuple(out)


def autocast(run: Run) -> Run:
    """bf16 autocast around the forward: every fp32 cube kernel runs in bf16; a forward GEMM first
    casts each operand (a Cast kernel per input), a backward GEMM casts its gradient back to fp32
    (a Cast per output). The casts' times come from the device model like every other kernel's."""

    def walk(op: OpSpec, forward: bool) -> OpSpec:
        return replace(op, kernels=_autocast_kernels(op.kernels, forward),
                       children=tuple(walk(c, forward) for c in op.children),
                       backward=tuple(walk(b, False) for b in op.backward))

    def item(it: StepItem) -> StepItem:
        if not isinstance(it, UserCall):
            return it
        return replace(it, launches=tuple(replace(la, op=walk(la.op, True)) for la in it.launches))

    return _map_items(run, lambda items: tuple(item(i) for i in items))


def fused_pairs(run: Run, first: str, second: str, fused: Callable[[OpSpec, OpSpec], Launch]) -> Run:
    """Every ``first`` op launched right before a ``second`` op (across source lines, as the
    profile's op sequence has them) replaced by one fused launch ``fused(first_op, second_op)`` in
    the second's place (``torch_npu.npu_add_layer_norm`` for an add and the LayerNorm after it)."""

    def fuse(items: tuple[StepItem, ...]) -> tuple[StepItem, ...]:
        places = [(i, j) for i, it in enumerate(items) if isinstance(it, UserCall) for j in range(len(it.launches))]
        names = [items[i].launches[j].op.name for i, j in places]  # type: ignore[union-attr]
        pairs = [(places[n - 1], places[n]) for n in range(1, len(places))
                 if names[n - 1] == first and names[n] == second]
        drop = {p for p, _ in pairs}
        new = {q: fused(items[p[0]].launches[p[1]].op, items[q[0]].launches[q[1]].op)  # type: ignore[union-attr]
               for p, q in pairs}
        out = list(items)
        for i, it in enumerate(items):
            if isinstance(it, UserCall):
                las = tuple(new.get((i, j), la) for j, la in enumerate(it.launches) if (i, j) not in drop)
                out[i] = replace(it, launches=las)
        return tuple(out)

    return _map_items(run, fuse)


def replaced_ops(run: Run, name: str, launch: Callable[[OpSpec], Launch]) -> Run:
    """Every launch of the op ``name`` replaced by ``launch(op)`` (a fused API for one op)."""
    return _map_items(run, lambda items: tuple(
        replace(i, launches=tuple(launch(la.op) if la.op.name == name else la for la in i.launches))
        if isinstance(i, UserCall) else i for i in items))
