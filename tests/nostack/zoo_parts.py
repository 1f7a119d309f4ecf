"""Building blocks of the zoo jobs (tests/nostack/zoo.py): the stack of a line of a zoo script,
one-kernel ops with their backward, and the training loop's usual lines.

Every zoo script has the same outer shape (a ``train(args)`` with the loop, a ``main()`` calling
``train(parser.parse_args())``, ``main()`` at module level), so a line of the loop has one stack;
everything else about the scripts differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests.synth import library as L
from tests.synth.run import AI_CPU, AI_VECTOR_CORE, CommLaunch, Gap, Launch, OpSpec, StepItem, UserCall, us
from tests.synth.sample_runs import REMOTE_ROOT, SourceIndex, Stack, mod

Shape = tuple[int, ...]


class Script:
    """A zoo script's lines, as frames of the training host's path."""

    def __init__(self, path: Path) -> None:
        self.name = path.stem
        self.src = SourceIndex(path, f"{REMOTE_ROOT}/{path.stem}/{path.name}")

    def loop(self, text: str) -> Stack:
        return (self.src.frame(text, "train", active=True),
                self.src.frame("train(parser.parse_args())", "main", active=True), self.src.module_frame("main()"))

    def at(self, text: str, func: str, outer: Stack) -> Stack:
        return (self.src.frame(text, func),) + outer

    def line(self, text: str, func: str | None = None) -> int:
        return self.src.line(text, func) if func else self.src.line(text)


def one(aten: str, api: str, typ: str, ins: Sequence[Shape], outs: Sequence[Shape], dur_us: float, *,
        grad: str | None = "", core: str = AI_VECTOR_CORE, dtype: str = "DT_BF16",
        frames: Stack = (), children: tuple[OpSpec, ...] = ()) -> Launch:
    """An aten op launching one kernel; ``grad``: the backward kernel's type ('' -- the same type,
    None -- no autograd node)."""
    k = L.aclnn(api, f"{typ}AiCore" if core != AI_CPU else f"{typ}AiCpu", typ, core, dur_us, inputs=tuple(ins),
                outputs=tuple(outs), dtype=dtype)
    bwd: tuple[OpSpec, ...] = ()
    autograd = ""
    if grad is not None:
        gtyp = grad or typ
        kb = L.aclnn(f"{api}Backward", f"{gtyp}AiCore", gtyp, core, dur_us * 1.3, inputs=tuple(outs) + tuple(ins),
                     outputs=tuple(ins[:1]), dtype=dtype)
        bwd = (L.op(f"{aten}_backward", L.scope(f"{api}Backward", kb), inputs=tuple(outs)),)
        autograd = aten.split("::")[-1].capitalize() + "Backward0"
    return Launch(L.op(aten, *children, L.scope(api, k), inputs=tuple(ins), autograd=autograd, backward=bwd), frames)


def aicpu(aten: str, api: str, typ: str, ins: Sequence[Shape], outs: Sequence[Shape], dur_us: float,
          dtype: str = "DT_INT64") -> Launch:
    """An op whose kernel runs on the AI CPU (no autograd node)."""
    return one(aten, api, typ, ins, outs, dur_us, grad=None, core=AI_CPU, dtype=dtype)


def ew(aten: str, api: str, typ: str, shape: Shape, dur_us: float, n: int = 2, frames: Stack = ()) -> Launch:
    """An elementwise op with its backward (the char_lm job's helper, shared)."""
    bwd = L.backward_of(aten, api, typ, shape, dur_us=dur_us, n_inputs=n)
    return L.elementwise(aten, api, typ, shape, dur_us=dur_us, n_inputs=n,
                         autograd=aten.split("::")[-1].capitalize() + "Backward0", bwd=bwd, frames=frames)


def rms_norm(shape: Shape, dur_us: float = 20.0) -> tuple[Launch, ...]:
    """The written-out RMSNorm's six kernels: pow, mean, add eps, rsqrt, two muls (NPU210)."""
    red = shape[:-1] + (1,)
    return (ew("aten::pow", "aclnnPowTensorScalar", "Pow", shape, dur_us, n=1),
            ew("aten::mean", "aclnnMean", "ReduceMean", red, dur_us, n=1),
            ew("aten::add", "aclnnAdds", "Add", red, dur_us, n=1),
            ew("aten::rsqrt", "aclnnRsqrt", "Rsqrt", red, dur_us, n=1),
            ew("aten::mul", "aclnnMul", "Mul", shape, dur_us),
            ew("aten::mul", "aclnnMul", "Mul", shape, dur_us))


def layer_norm(shape: Shape, dur_us: float = 18.0, frames: Stack = ()) -> Launch:
    d = (shape[-1],)
    return one("aten::layer_norm", "aclnnLayerNorm", "LayerNormV4", (shape, d, d), (shape,), dur_us,
               grad="LayerNormGradV3", frames=frames)


def data_wait(s: Script, line: str, ms: float, batch: int, sample: Shape) -> UserCall:
    """The DataLoader fetch of the ``for`` line."""
    return UserCall(L.DATALOADER_NEXT + s.loop(line), (Launch(L.dataloader(ms, batch=batch, sample_shape=sample).op),),
                    label="dataloader")


def to_device(s: Script, line: str, *shapes: Shape, copy_us: float = 20.0) -> UserCall:
    return UserCall(s.loop(line), tuple(L.to_device(sh, nbytes=4 * _numel(sh), copy_us=copy_us) for sh in shapes),
                    label="to_device")


def _numel(shape: Shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def loop_tail(s: Script, params: Sequence[Shape], *, print_line: str, zero_line: str = "optimizer.zero_grad()",
              comm: tuple[CommLaunch, ...] = (), clip: str = "", syncs: int = 1, gap_us: float = 80.0,
              adam_us: float = 16.0, clip_us: float = 12.0) -> list[StepItem]:
    """backward (with DDP's collectives), clipping, single-tensor AdamW, zero_grad, the logging sync."""
    items: list[StepItem] = [UserCall(L.BACKWARD + s.loop("loss.backward()"), (Launch(L.grad_seed().op),),
                                      label="backward", backward=True, comm=comm)]
    if clip:
        items.append(UserCall(s.loop(clip), L.clip_grad_norm(params, norm_us=clip_us), label="clip", wait_comm=bool(comm)))
    items += [
        UserCall(s.loop("optimizer.step()"), (L.adamw_step(params, kernel_us=adam_us),), label="optimizer.step",
                 wait_comm=bool(comm) and not clip),
        UserCall(s.loop(zero_line), (L.zero_grad_to_none("AdamW"),), label="zero_grad"),
        UserCall(s.loop(print_line), (L.item(),) * syncs, label="sync"),
        Gap(us(gap_us)),
    ]
    return items


def module(cls: str, k: int, outer: Stack) -> Stack:
    return mod(cls, k) + outer
