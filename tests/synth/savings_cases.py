"""Saving estimates against re-simulated truth, on the samples' run descriptions.

A case is a rule, a run with its problem (the sample's knobs) and the same run with the rule's fix
applied to the description (tests/synth/fixes.py). The estimate: the run written as a torch_npu
export, analysed as ``--check`` does (``analyse_paths``), the savings of the rule's findings
summed (a fix like ``allow_internal_format = False`` acts on all of them at once). The truth: the
two runs laid out, the mean ProfilerStep before minus after. Used by benchmarks/savings.py (the
table) and tests/hints/test_savings.py (the 35 % bound).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from msprof_lsp.hints.finding import Finding, Saving

from . import fixes as fx
from .run import Launch, OpSpec, RepeatedSteps, Run
from . import library as L
from .sample_runs import CnnKnobs, TransformerKnobs, _tf_params, cnn_runs, transformer_run
from .write_text import write_torch_npu_text

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"
ZOO = REPO / "tests/nostack/models"


@dataclass(frozen=True)
class Build:
    """A run with its problem; ``key`` names the run, so the cases of one run can be ranked."""

    key: str
    make: Callable[[], Run]

    def __call__(self) -> Run:
        return self.make()


@dataclass(frozen=True)
class Case:
    rule: str  # the code whose findings' savings are summed
    name: str
    sample: str  # <where>/<sample>: the sources the findings anchor on
    build: Build  # the run with the problem
    fix: Callable[[Run], Run] | None  # the description with the fix; None: the generator cannot express it
    why_not: str = ""  # when ``fix`` is None, or why the truth differs from what a recording would show
    picks: str = ""  # only the findings whose message or anchored source line holds this text
    accum_steps: int = 4  # the NPU102 fix's micro-batches (the accumSteps setting)
    where: Path = SAMPLES  # the folder holding ``sample``


@dataclass(frozen=True)
class Result:
    case: Case
    findings: int
    estimate_us: float | None
    low_us: float | None
    high_us: float | None
    truth_us: float | None
    basis: str

    @property
    def error(self) -> float | None:
        """|estimate - truth| / truth (None without both)."""
        if self.estimate_us is None or self.truth_us is None or self.truth_us == 0:
            return None
        return abs(self.estimate_us - self.truth_us) / abs(self.truth_us)

    @property
    def within(self) -> bool:
        """Within 35 % of the truth, or 0.5 ms (issue 23's bar)."""
        if self.estimate_us is None or self.truth_us is None:
            return False
        return within_bar(self.estimate_us, self.truth_us)


def _key(sample: str, kw: dict) -> str:
    return " ".join([sample, *(f"{k}={v}" for k, v in sorted(kw.items()))])


def _cnn(events: bool = False, **kw) -> Build:
    """The CNN sample's rank 0 (``events``: its wait for the all-reduce written as event tasks)."""
    def build() -> Run:
        run = cnn_runs(SAMPLES / "cnn_classifier", CnnKnobs(ranks=1, **kw))[0]
        return replace(run, record_comm_waits=True) if events else run
    return Build(_key("cnn" + (" events" if events else ""), kw), build)


def _tf(**kw) -> Build:
    return Build(_key("transformer", kw), lambda: transformer_run(SAMPLES / "tiny_transformer", TransformerKnobs(**kw)))


def _tf_timed(workers: bool = False, **kw) -> Build:
    """The transformer with every kernel timed by the device model (tests/synth/device_model.py);
    ``workers``: the DataLoader's fetch off the training thread (a device-bound step)."""
    def build() -> Run:
        run = fx.timed(transformer_run(SAMPLES / "tiny_transformer", TransformerKnobs(**kw)))
        return fx.without_dataloader(run) if workers else run
    return Build(_key("transformer timed" + (" workers" if workers else ""), kw), build)


DEVICE_MODEL = ("kernel times from the generator's device model (tests/synth/device_model.py), before and after "
                "the fix alike; the rule reads only the recorded durations")
VOCAB, VOCAB_PADDED = 32003, 32256


def _pad_vocab(run: Run) -> Run:
    """``vocab_size = 32256``: every vocabulary axis grows (the padded logits masked), then re-timed."""
    return fx.timed(fx.resized(run, VOCAB, VOCAB_PADDED))


def _autocast(run: Run) -> Run:
    return fx.timed(fx.autocast(run))


def _vit(workers: bool = False) -> Build:
    """The no-stack zoo's vision transformer (tests/nostack/models/vit_classifier.py), every kernel
    timed by the device model; ``workers``: the DataLoader's fetch off the training thread."""
    def build() -> Run:
        from tests.nostack.zoo import vit_classifier

        run = vit_classifier(steps=2).run
        run = replace(run, steps=RepeatedSteps([run.steps[0].items], len(run.steps), run.steps[0].number))
        run = fx.timed(run)
        return fx.without_dataloader(run) if workers else run
    return Build("vit timed" + (" workers" if workers else ""), build)


GRU_KEEP = frozenset({"DynamicGRUV2", "DynamicGRUV2Grad"})
GRU_TIMED = ("kernel times from the generator's device model (tests/synth/device_model.py), before and after the fix "
             "alike, but the GRU's own kernels (a recurrence the roofline cannot time: the zoo's 420/700 us); the "
             "fused optimizer's and multi-tensor clip's kernels timed by the tensors they move, not a chosen ratio")

# the note only (written after the benchmark ran: the case, its fix and its truth are as committed before)
GRU_NO_SYNC = ("with no sync left the generator's host runs ahead of the device without bound (nothing gives "
               "back-pressure: torch_npu's task queue or the allocator would block it), so the truth is the host's "
               "period, 3.07 ms, while the device needs 5.08 ms a step; laid out over 8 steps the steady state saves "
               "952 us (docs/savings.md, 2026-12-04)")


def _gru(recurrence: float = 1.0) -> Build:
    """The no-stack zoo's GRU tagger (tests/nostack/models/gru_tagger.py) as the zoo describes it
    (a 0.6 ms single-process DataLoader fetch, ReLU -> Dropout, per-tensor clip_grad_norm_,
    unfused AdamW over 9 parameters one of which, the 20000 x 128 embedding, holds 90 % of the
    bytes, loss.item() every step); every kernel but the GRU's timed by the device model.
    ``recurrence``: the GRU's two kernels that many times longer (a slower recurrence: the step
    device-bound, where the zoo's is bound by the host)."""
    def build() -> Run:
        from tests.nostack.zoo import gru_tagger

        run = gru_tagger(steps=2).run
        run = replace(run, steps=RepeatedSteps([run.steps[0].items], len(run.steps), run.steps[0].number))
        if recurrence != 1.0:
            run = fx.map_ops(run, lambda op: replace(op, kernels=tuple(
                replace(k, dur_ns=round(k.dur_ns * recurrence)) if k.type in GRU_KEEP else k for k in op.kernels)))
        return fx.timed(run, keep=GRU_KEEP)
    return Build("gru timed" + (f" recurrence x{recurrence:g}" if recurrence != 1.0 else ""), build)


def _mlp() -> Build:
    """The no-stack zoo's regressor with a ``torch.compile``'d mixer (tests/nostack/models/compiled_mlp.py)
    as the zoo describes it (an 11 ms single-process DataLoader fetch, per-tensor clip_grad_norm_ and
    unfused AdamW over 7 parameters, loss.item() every step), recorded over 3 steps; every kernel
    timed by the device model."""
    def build() -> Run:
        from tests.nostack.zoo import compiled_mlp

        run = compiled_mlp(steps=3).run
        run = replace(run, steps=RepeatedSteps([run.steps[0].items], len(run.steps), run.steps[0].number))
        return fx.timed(run)
    return Build("compiled_mlp timed, 3 steps", build)


def _mlp_fused_adamw(r: Run) -> Run:
    from tests.nostack.zoo import COMPILED_PARAMS

    return fx.timed(fx.fused_optimizer(r, L.adamw_step(COMPILED_PARAMS, kernel_us=60.0, fused=True)))


def _mlp_foreach_clip(r: Run) -> Run:
    from tests.nostack.zoo import COMPILED_PARAMS

    launches = L.clip_grad_norm_foreach(COMPILED_PARAMS, norm_us=12.0)
    return fx.timed(fx.map_calls(r, frozenset({"clip"}), lambda c: replace(c, launches=launches)))


def _gru_fix(fix: Callable[[Run], Run]) -> Callable[[Run], Run]:
    return lambda r: fx.timed(fix(r), keep=GRU_KEEP)


def _gru_fused_adamw(r: Run) -> Run:
    from tests.nostack.zoo import GRU_PARAMS

    return fx.fused_optimizer(r, L.adamw_step(GRU_PARAMS, kernel_us=40.0, fused=True))


def _gru_foreach_clip(r: Run) -> Run:
    from tests.nostack.zoo import GRU_PARAMS

    launches = L.clip_grad_norm_foreach(GRU_PARAMS, norm_us=12.0)
    return fx.map_calls(r, frozenset({"clip"}), lambda c: replace(c, launches=launches))


def _one_op(aten: str, api: str, typ: str, ins: tuple, outs: tuple, grad: str) -> Launch:
    """A torch_npu fused op: one kernel forward, one backward (times from the device model)."""
    from tests.nostack.zoo_parts import one

    return one(aten, api, typ, ins, outs, 1.0, grad=grad)


def _shapes_of(op: OpSpec) -> tuple:
    return tuple(tuple(int(d) for d in s.split(",") if d) for s in op.input_dims.split(";"))


def _fast_gelu(run: Run) -> Run:
    """``torch_npu.fast_gelu(x)`` for ``F.gelu(x)``: one FastGelu kernel each way, same tensors."""
    def launch(op: OpSpec) -> Launch:
        x = _shapes_of(op)[0]
        return _one_op("npu::npu_fast_gelu", "aclnnFastGelu", "FastGelu", (x,), (x,), "FastGeluGrad")
    return fx.timed(fx.replaced_ops(run, "aten::gelu", launch))


def _add_layer_norm(run: Run) -> Run:
    """``torch_npu.npu_add_layer_norm`` for every add followed by a LayerNorm: one kernel reads both
    addends and writes the sum and the normalised output; one AddLayerNormGrad backward."""
    def launch(_add: OpSpec, ln: OpSpec) -> Launch:
        x, w, b = _shapes_of(ln)[:3]
        return _one_op("npu::npu_add_layer_norm", "aclnnAddLayerNorm", "AddLayerNorm", (x, x, w, b), (x, x),
                       "AddLayerNormGrad")
    return fx.timed(fx.fused_pairs(run, "aten::add", "aten::layer_norm", launch))


NO_EVENT = ("the generator lays the optimizer's wait for the all-reduce out without writing an EVENT_WAIT task, "
            "so no replay of the export can see it")

TRANSDATA = frozenset({"TransData"})
RELU = frozenset({"Relu", "ReluGrad"})
CONVS = frozenset({"features.0", "features.1"})
DEVICE_BOUND = dict(transdata_us=400.0, linear_transdata_us=200.0, allreduce_us=100.0)

RMS_NORMS = frozenset({"block0.attn_norm", "block0.mlp_norm", "block1.attn_norm", "block1.mlp_norm", "norm"})
FUSED_KNOB = ("the fused kernel's time is the generator's choice (the longest piece's, as the estimate assumes); "
              "the host side, one op instead of six, is laid out")


def _fused_op(name: str, typ: str, shape: tuple, fwd_us: float, bwd_us: float | None = None) -> Launch:
    """A fused torch_npu API ``npu::<name>``: one op and one kernel forward, one op and one kernel
    backward (none where ``bwd_us`` is None); the kernels' times are the generator's choice."""
    api = "aclnn" + "".join(w.title() for w in name.removeprefix("npu_").split("_"))
    bwd = () if bwd_us is None else L.backward_of(f"npu::{name}_backward", api + "Grad", typ + "Grad", shape,
                                                  dur_us=bwd_us)
    autograd = "".join(w.title() for w in name.split("_")) + "Backward0"
    return L.elementwise(f"npu::{name}", api, typ, shape, dur_us=fwd_us, autograd=autograd, bwd=bwd)


def _rms_norm(k: TransformerKnobs) -> Callable[[Run], Run]:
    """``torch_npu.npu_rms_norm`` on every RMSNorm line: one kernel forward and one backward, each
    as long as the written-out norm's longest piece (all its pieces take ``elementwise_us``)."""
    fused = _fused_op("npu_rms_norm", "RmsNorm", (k.batch, k.seq, 128), k.elementwise_us, k.elementwise_us)
    return lambda r: fx.one_launch(r, RMS_NORMS, lambda _call: fused)


LAYERS = (0, 1)


def _swiglu(k: TransformerKnobs) -> Callable[[Run], Run]:
    """``torch_npu.npu_swiglu(x)`` for ``a, b = x.chunk(2); F.silu(a) * b``: the chunk goes, the
    fused kernel takes the longest piece's time (``elementwise_us``); ``w_out`` stays."""
    fused = _fused_op("npu_swiglu", "SwiGlu", (k.batch, k.seq, 256), k.elementwise_us, k.elementwise_us)
    chunks = frozenset(f"block{i}.chunk" for i in LAYERS)
    lines = frozenset(f"block{i}.swiglu" for i in LAYERS)
    return lambda r: fx.map_calls(fx.map_calls(r, chunks, lambda c: replace(c, launches=())), lines,
                                  lambda c: replace(c, launches=(fused, c.launches[-1])))


def _rotary(k: TransformerKnobs, which: str) -> Callable[[Run], Run]:
    """``torch_npu.npu_rotary_mul`` on the ``which`` (q or k) line of both blocks: one kernel each
    way at the longest piece's time."""
    fused = _fused_op("npu_rotary_mul", "RotaryMul", (k.batch, 4, k.seq, 32), k.elementwise_us, k.elementwise_us)
    return lambda r: fx.one_launch(r, frozenset(f"block{i}.rotary_{which}" for i in LAYERS), lambda _call: fused)


ATTENTION = ("mask", "softmax", "attn_drop", "pv")


def _attention(k: TransformerKnobs) -> Callable[[Run], Run]:
    """``torch_npu.npu_fusion_attention`` for scores-mask-softmax-dropout-pv: one kernel forward at
    the two GEMMs' time, one backward at the four backward GEMMs' time (a flash attention kernel is
    bound by its GEMMs: the generator's choice); the other lines launch nothing."""
    fused = _fused_op("npu_fusion_attention", "FlashAttentionScore", (k.batch, 4, k.seq, 32),
                      2 * k.attn_bmm_us, 4 * k.attn_bmm_us)
    scores = frozenset(f"block{i}.scores" for i in LAYERS)
    rest = frozenset(f"block{i}.{n}" for i in LAYERS for n in ATTENTION)
    return lambda r: fx.map_calls(fx.one_launch(r, scores, lambda _call: fused), rest,
                                  lambda c: replace(c, launches=()))


def _confusion_transpose(k: TransformerKnobs) -> Callable[[Run], Run]:
    """``torch_npu.npu_confusion_transpose`` for ``permute().contiguous().view()``: one op and one
    transpose kernel at the copy's time (the permute and view launched none); the backward stays a
    view (no kernel), as the permute's was."""
    x, out = (k.batch, 4, k.seq, 32), (k.batch, k.seq, 128)
    copy = L.kernel("aclnnConfusionTranspose_ConfusionTransposeDAiCore_ConfusionTransposeD", "ConfusionTransposeD",
                    L.AI_VECTOR_CORE, k.copy_us, inputs=(x,), outputs=(out,))
    fused = Launch(L.op("npu::npu_confusion_transpose", L.scope("aclnnConfusionTranspose", copy), inputs=(x,),
                        autograd="NpuConfusionTransposeBackward0",
                        backward=(L.op("npu::npu_confusion_transpose", self_us=3),)))
    return lambda r: fx.one_launch(r, frozenset(f"block{i}.merge_heads" for i in LAYERS), lambda _call: fused)


def _foreach_clip(k: TransformerKnobs) -> Callable[[Run], Run]:
    """``clip_grad_norm_(..., foreach=True)``: two multi-tensor kernels instead of a norm and a
    ``mul_`` per gradient."""
    launches = L.clip_grad_norm_foreach(_tf_params(32003, 128, 256, 2), norm_us=k.clip_norm_us)
    return lambda r: fx.map_calls(r, frozenset({"clip_grad_norm_"}), lambda c: replace(c, launches=launches))


def _fused_adamw(k: TransformerKnobs) -> Callable[[Run], Run]:
    return lambda r: fx.fused_optimizer(r, L.adamw_step(_tf_params(32003, 128, 256, 2), kernel_us=k.adamw_kernel_us,
                                                        fused=True))


TF = TransformerKnobs()
EW40 = TransformerKnobs(elementwise_us=40.0)
BMM120 = TransformerKnobs(attn_bmm_us=120.0)
COPY150 = TransformerKnobs(copy_us=150.0)
ADAMW30 = TransformerKnobs(adamw_kernel_us=30.0)
NORM60 = TransformerKnobs(clip_norm_us=60.0)
FOREACH = "the generator's multi-tensor kernels take 4x a per-tensor kernel's time: a chosen duration"
ADAMW = ("the generator's fused AdamW launches what torch_npu's does (per parameter an ApplyAdamWV2 and a step-counter "
         "Sub, one _foreach_add_); ApplyAdamWV2's time, 7/3 of an unfused kernel's (the tensors it moves), is a chosen duration")
DEVICE_BOUND_AR = dict(transdata_us=400.0, linear_transdata_us=200.0)
NO_SYNC = Build("cnn without synchronize()", lambda: fx.without_syncs(_cnn()(), ops=False))

CASES: tuple[Case, ...] = (
    Case("NPU103", "cnn: TransData around the convs", "cnn_classifier", _cnn(),
         lambda r: fx.without_kernels(r, TRANSDATA, CONVS), NO_EVENT, picks="Conv2D"),
    Case("NPU103", "cnn: TransData around the embed Linear", "cnn_classifier", _cnn(),
         lambda r: fx.without_kernels(r, TRANSDATA, frozenset({"embed"})), picks="MatMul"),
    Case("NPU103", "cnn, device-bound: TransData around the convs", "cnn_classifier", _cnn(**DEVICE_BOUND),
         lambda r: fx.without_kernels(r, TRANSDATA, CONVS), picks="Conv2D"),
    Case("NPU103", "cnn, device-bound: TransData around the Linear", "cnn_classifier", _cnn(**DEVICE_BOUND),
         lambda r: fx.without_kernels(r, TRANSDATA, frozenset({"embed"})), picks="MatMul"),
    Case("NPU103", "cnn, device-bound, 1.5 ms all-reduce: the convs", "cnn_classifier", _cnn(**DEVICE_BOUND_AR),
         lambda r: fx.without_kernels(r, TRANSDATA, CONVS), NO_EVENT, picks="Conv2D"),
    Case("NPU103", "cnn, device-bound, 1.5 ms all-reduce: the Linear", "cnn_classifier", _cnn(**DEVICE_BOUND_AR),
         lambda r: fx.without_kernels(r, TRANSDATA, frozenset({"embed"})), NO_EVENT, picks="MatMul"),
    Case("NPU103", "cnn, device-bound, 1.5 ms all-reduce, events: the convs", "cnn_classifier",
         _cnn(True, **DEVICE_BOUND_AR), lambda r: fx.without_kernels(r, TRANSDATA, CONVS), picks="Conv2D"),
    Case("NPU102", "cnn: 1.5 ms all-reduce, events, accumulation over 4", "cnn_classifier", _cnn(True),
         lambda r: fx.allreduce_every(r, 4)),
    Case("NPU102", "cnn: 1.5 ms all-reduce, no events", "cnn_classifier", _cnn(),
         lambda r: fx.allreduce_every(r, 4), NO_EVENT),
    Case("NPU102", "cnn: 1.5 ms all-reduce, no events, accumulation over 2", "cnn_classifier", _cnn(),
         lambda r: fx.allreduce_every(r, 2), NO_EVENT, accum_steps=2),
    Case("NPU104", "cnn: single-process DataLoader, 12.5 ms", "cnn_classifier", _cnn(), fx.without_dataloader),
    Case("NPU104", "transformer: single-process DataLoader, 11 ms", "tiny_transformer", _tf(), fx.without_dataloader),
    Case("NPU108", "cnn: torch.npu.synchronize() (loss.item() stays)", "cnn_classifier", _cnn(),
         lambda r: fx.without_syncs(r, ops=False), picks="synchronize"),
    Case("NPU108", "cnn: loss.item() (synchronize() stays)", "cnn_classifier", _cnn(),
         lambda r: fx.without_syncs(r, apis=False), picks="item"),
    Case("NPU108", "cnn without synchronize(): loss.item()", "cnn_classifier", NO_SYNC,
         lambda r: fx.without_syncs(r, apis=False), picks="item"),
    Case("NPU108", "transformer: loss.item()", "tiny_transformer", _tf(), fx.without_syncs),
    Case("NPU220", "transformer: unfused AdamW, 19 parameters", "tiny_transformer", _tf(), _fused_adamw(TF), ADAMW),
    Case("NPU220", "transformer, 30 us AdamW kernels: unfused AdamW, 19 parameters", "tiny_transformer",
         _tf(adamw_kernel_us=30.0), _fused_adamw(ADAMW30), ADAMW),
    Case("NPU221", "transformer: per-tensor clip_grad_norm_", "tiny_transformer", _tf(), _foreach_clip(TF), FOREACH),
    Case("NPU221", "transformer, 60 us norm kernels: per-tensor clip_grad_norm_", "tiny_transformer",
         _tf(clip_norm_us=60.0), _foreach_clip(NORM60), FOREACH),
    Case("NPU210", "transformer: RMSNorm written out", "tiny_transformer", _tf(), _rms_norm(TF), FUSED_KNOB,
         picks="x.pow(2)"),
    Case("NPU210", "transformer, 40 us elementwise: RMSNorm written out", "tiny_transformer", _tf(elementwise_us=40.0),
         _rms_norm(EW40), FUSED_KNOB, picks="x.pow(2)"),
    Case("NPU211", "transformer: SwiGLU written out", "tiny_transformer", _tf(), _swiglu(TF), FUSED_KNOB),
    Case("NPU211", "transformer, 40 us elementwise: SwiGLU written out", "tiny_transformer", _tf(elementwise_us=40.0),
         _swiglu(EW40), FUSED_KNOB),
    Case("NPU212", "transformer: rotary embedding of q written out", "tiny_transformer", _tf(), _rotary(TF, "q"),
         FUSED_KNOB, picks="q = q * cos"),
    Case("NPU212", "transformer: rotary embedding of k written out", "tiny_transformer", _tf(), _rotary(TF, "k"),
         FUSED_KNOB, picks="k = k * cos"),
    Case("NPU213", "transformer: attention written out", "tiny_transformer", _tf(), _attention(TF), FUSED_KNOB),
    Case("NPU213", "transformer, 120 us attention matmuls: attention written out", "tiny_transformer",
         _tf(attn_bmm_us=120.0), _attention(BMM120), FUSED_KNOB),
    Case("NPU215", "transformer: permute().contiguous() before the output projection", "tiny_transformer", _tf(),
         _confusion_transpose(TF), FUSED_KNOB),
    Case("NPU215", "transformer, 150 us copies: permute().contiguous() before the output projection",
         "tiny_transformer", _tf(copy_us=150.0), _confusion_transpose(COPY150), FUSED_KNOB),
    Case("NPU106", "transformer: lm_head N = 32003", "tiny_transformer", _tf(), None,
         "a padded GEMM's time would be a knob of the generator; the sample's lm_head GEMMs all take one knob time, "
         "its weight gradient (the aligned GEMM of comparable work) too, so the estimate is 0"),
    Case("NPU106", "transformer, device-model GEMMs: lm_head N = 32003 padded to 32256", "tiny_transformer",
         _tf_timed(linear_type="MatMulV3"), _pad_vocab, DEVICE_MODEL),
    Case("NPU106", "transformer, device-model GEMMs, batch 128, DataLoader workers: lm_head N = 32003 padded to 32256",
         "tiny_transformer", _tf_timed(True, linear_type="MatMulV3", batch=128), _pad_vocab, DEVICE_MODEL),
    Case("NPU106", "transformer, device-model GEMMs, batch 64, seq 128, DataLoader workers: lm_head N = 32003 padded "
         "to 32256", "tiny_transformer", _tf_timed(True, linear_type="MatMulV3", batch=64, seq=128), _pad_vocab,
         DEVICE_MODEL),
    Case("NPU106", "transformer in fp32, device-model GEMMs, batch 96, DataLoader workers: lm_head N = 32003 padded "
         "to 32256", "tiny_transformer", _tf_timed(True, linear_type="MatMulV3", batch=96, cube_dtype="DT_FLOAT"),
         _pad_vocab, DEVICE_MODEL),
    Case("NPU106", "transformer, device-model GEMMs, batch 48, seq 96, DataLoader workers: lm_head N = 32003 padded "
         "to 32256", "tiny_transformer", _tf_timed(True, linear_type="MatMulV3", batch=48, seq=96), _pad_vocab,
         DEVICE_MODEL),
    Case("NPU106", "transformer, device-model GEMMs, batch 160, DataLoader workers: lm_head N = 32003 padded to 32256",
         "tiny_transformer", _tf_timed(True, linear_type="MatMulV3", batch=160), _pad_vocab, DEVICE_MODEL),
    Case("NPU222", "transformer in fp32, device-model GEMMs: bf16 autocast", "tiny_transformer",
         _tf_timed(cube_dtype="DT_FLOAT"), _autocast, DEVICE_MODEL),
    Case("NPU222", "transformer in fp32, device-model GEMMs, batch 128, DataLoader workers: bf16 autocast",
         "tiny_transformer", _tf_timed(True, cube_dtype="DT_FLOAT", batch=128), _autocast, DEVICE_MODEL),
    Case("NPU214", "vit, device-model kernels: F.gelu", "vit_classifier.py", _vit(), _fast_gelu, DEVICE_MODEL,
         where=ZOO),
    Case("NPU214", "vit, device-model kernels, DataLoader workers: F.gelu", "vit_classifier.py", _vit(True), _fast_gelu,
         DEVICE_MODEL, where=ZOO),
    Case("NPU217", "vit, device-model kernels: add + LayerNorm", "vit_classifier.py", _vit(), _add_layer_norm,
         DEVICE_MODEL, where=ZOO),
    Case("NPU217", "vit, device-model kernels, DataLoader workers: add + LayerNorm", "vit_classifier.py", _vit(True),
         _add_layer_norm, DEVICE_MODEL, where=ZOO),
    # 2026-12-04: a held-out run on a model no other case uses (the zoo's GRU tagger), fixed before any estimate
    Case("NPU104", "gru, device-model kernels: single-process DataLoader, 0.6 ms", "gru_tagger.py", _gru(),
         _gru_fix(fx.without_dataloader), GRU_TIMED, where=ZOO),
    Case("NPU108", "gru, device-model kernels: loss.item()", "gru_tagger.py", _gru(), _gru_fix(fx.without_syncs),
         GRU_TIMED, where=ZOO),
    Case("NPU220", "gru, device-model kernels: unfused AdamW, 9 parameters, one 20000 x 128", "gru_tagger.py", _gru(),
         _gru_fix(_gru_fused_adamw), GRU_TIMED, where=ZOO),
    Case("NPU221", "gru, device-model kernels: per-tensor clip_grad_norm_, 9 gradients", "gru_tagger.py", _gru(),
         _gru_fix(_gru_foreach_clip), GRU_TIMED, where=ZOO),
    Case("NPU101", "gru, device-model kernels: F.relu -> nn.Dropout after proj", "gru_tagger.py", _gru(),
         _gru_fix(lambda r: fx.without_kernels(r, RELU, frozenset({"proj"}))), GRU_TIMED, where=ZOO),
    # 2026-12-04, later: the same five on the GRU tagger made device-bound, fixed before any estimate of them
    Case("NPU104", "gru, device-model kernels, 4x GRU time: single-process DataLoader, 0.6 ms", "gru_tagger.py",
         _gru(4.0), _gru_fix(fx.without_dataloader), GRU_TIMED, where=ZOO),
    Case("NPU108", "gru, device-model kernels, 4x GRU time: loss.item()", "gru_tagger.py", _gru(4.0),
         _gru_fix(fx.without_syncs), GRU_TIMED + "; " + GRU_NO_SYNC, where=ZOO),
    Case("NPU220", "gru, device-model kernels, 4x GRU time: unfused AdamW, 9 parameters, one 20000 x 128",
         "gru_tagger.py", _gru(4.0), _gru_fix(_gru_fused_adamw), GRU_TIMED, where=ZOO),
    Case("NPU221", "gru, device-model kernels, 4x GRU time: per-tensor clip_grad_norm_, 9 gradients",
         "gru_tagger.py", _gru(4.0), _gru_fix(_gru_foreach_clip), GRU_TIMED, where=ZOO),
    Case("NPU101", "gru, device-model kernels, 4x GRU time: F.relu -> nn.Dropout after proj", "gru_tagger.py",
         _gru(4.0), _gru_fix(lambda r: fx.without_kernels(r, RELU, frozenset({"proj"}))), GRU_TIMED, where=ZOO),
    # 2026-12-04, later still: fresh held-out cases on another zoo model, fixed before any estimate of them and before
    # NPU221's per-call count (the GRU cases were looked at for that change)
    Case("NPU104", "compiled_mlp, device-model kernels, 3 steps: single-process DataLoader, 11 ms", "compiled_mlp.py",
         _mlp(), lambda r: fx.timed(fx.without_dataloader(r)), DEVICE_MODEL, where=ZOO),
    Case("NPU108", "compiled_mlp, device-model kernels, 3 steps: loss.item()", "compiled_mlp.py", _mlp(),
         lambda r: fx.timed(fx.without_syncs(r)), DEVICE_MODEL, where=ZOO),
    Case("NPU220", "compiled_mlp, device-model kernels, 3 steps: unfused AdamW, 7 parameters", "compiled_mlp.py",
         _mlp(), _mlp_fused_adamw, DEVICE_MODEL, where=ZOO),
    Case("NPU221", "compiled_mlp, device-model kernels, 3 steps: per-tensor clip_grad_norm_, 7 gradients",
         "compiled_mlp.py", _mlp(), _mlp_foreach_clip, DEVICE_MODEL, where=ZOO),
    Case("NPU101", "cnn: ReLU -> Dropout in the embed block", "cnn_classifier", _cnn(),
         lambda r: fx.without_kernels(r, RELU, frozenset({"embed"})), picks="nn.ReLU(),"),
    Case("NPU101", "cnn: F.dropout(F.relu(self.fc2(x)))", "cnn_classifier", _cnn(),
         lambda r: fx.without_kernels(r, RELU, frozenset({"fc2.relu.dropout"})), picks="F.dropout(F.relu"),
)


SPLIT_FILE = Path(__file__).with_name("savings_split.txt")
HALVES = ("tuning", "held-out")


def split() -> dict[str, str]:
    """Case name -> its half (tests/synth/savings_split.txt, fixed before any model change)."""
    out: dict[str, str] = {}
    for line in SPLIT_FILE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            half, _rule, name = (x.strip() for x in line.split("|", 2))
            out[name] = half
    return out


def within_bar(estimate_us: float, truth_us: float) -> bool:
    """Within 35 % of the truth, or 0.5 ms (issue 23's bar)."""
    return abs(estimate_us - truth_us) <= max(0.35 * abs(truth_us), 500.0)


def _picked(f: Finding, picks: str) -> bool:
    if picks in f.message:
        return True
    if f.span is None:
        return False
    lines = Path(f.span.path).read_text(encoding="utf-8").splitlines()
    return picks in lines[f.span.line - 1] if 0 < f.span.line <= len(lines) else False


def estimate(case: Case, run: Run) -> tuple[int, float | None, float | None, float | None, str]:
    """(findings, estimate, low, high µs, basis) of the case's rule on ``run``'s export."""
    from msprof_lsp.hints.config import Thresholds
    from msprof_lsp.server.analysis.run import analyse_paths
    from msprof_lsp.server.analysis.settings import Settings

    with tempfile.TemporaryDirectory(prefix="msprof-savings-") as tmp:
        root = write_torch_npu_text(run, tmp)
        settings = Settings(min_share=0.0, thresholds=Thresholds(accum_steps=case.accum_steps))
        analyses = analyse_paths([case.where / case.sample], settings, profile=root, use_cache=False)
    found = [f for a in analyses for f in a.findings if f.code == case.rule and _picked(f, case.picks)]
    known = [f.saving for f in found if f.saving is not None and f.saving.known]
    basis = found[0].saving.basis if found and found[0].saving is not None else "no finding"
    if not found:  # folded into another finding of the same cause: its saving applied alone
        folded = [(f.code, x) for a in analyses for f in a.findings
                  for x in f.evidence.get("same_cause_findings", []) if x["code"] == case.rule]
        known = [Saving(**x["saving"]) for _, x in folded if x.get("saving") and x["saving"]["us_per_step"] is not None]
        if folded:
            basis = f"folded into {folded[0][0]}: " + (folded[0][1].get("saving") or {}).get("basis", "no saving")
    if not known:
        return len(found), None, None, None, basis
    return (len(found), sum(s.us_per_step for s in known), sum(s.low_us for s in known),
            sum(s.high_us for s in known), basis)


def run_case(case: Case) -> Result:
    run = case.build()
    n, est, low, high, basis = estimate(case, run)
    truth = fx.saving_ns(run, case.fix(run)) / 1000 if case.fix is not None else None
    return Result(case, n, est, low, high, truth, basis)
