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

from msprof_lsp.hints.finding import Finding

from . import fixes as fx
from .run import Launch, Run
from . import library as L
from .sample_runs import CnnKnobs, TransformerKnobs, _tf_params, cnn_runs, transformer_run
from .write_text import write_torch_npu_text

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"


@dataclass(frozen=True)
class Case:
    rule: str  # the code whose findings' savings are summed
    name: str
    sample: str  # samples/<sample>: the sources the findings anchor on
    build: Callable[[], Run]  # the run with the problem
    fix: Callable[[Run], Run] | None  # the description with the fix; None: the generator cannot express it
    why_not: str = ""  # when ``fix`` is None, or why the truth differs from what a recording would show
    picks: str = ""  # only the findings whose message or anchored source line holds this text


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
        return abs(self.estimate_us - self.truth_us) <= max(0.35 * abs(self.truth_us), 500.0)


def _cnn(events: bool = False, **kw) -> Callable[[], Run]:
    """The CNN sample's rank 0 (``events``: its wait for the all-reduce written as event tasks)."""
    def build() -> Run:
        run = cnn_runs(SAMPLES / "cnn_classifier", CnnKnobs(ranks=1, **kw))[0]
        return replace(run, record_comm_waits=True) if events else run
    return build


def _tf(**kw) -> Callable[[], Run]:
    return lambda: transformer_run(SAMPLES / "tiny_transformer", TransformerKnobs(**kw))


NO_EVENT = ("the generator lays the optimizer's wait for the all-reduce out without writing an EVENT_WAIT task, "
            "so no replay of the export can see it")

TRANSDATA = frozenset({"TransData"})
RELU = frozenset({"Relu", "ReluGrad"})
CONVS = frozenset({"features.0", "features.1"})
DEVICE_BOUND = dict(transdata_us=400.0, linear_transdata_us=200.0, allreduce_us=100.0)

RMS_NORMS = frozenset({"block0.attn_norm", "block0.mlp_norm", "block1.attn_norm", "block1.mlp_norm", "norm"})
FUSED_KNOB = ("the fused kernel's time is the generator's choice (the longest piece's, as the estimate assumes); "
              "the host side, one op instead of six, is laid out")


def _rms_norm(call) -> Launch:  # noqa: ANN001 - a UserCall of an RMSNorm line
    """``torch_npu.npu_rms_norm``: one op, one kernel forward and one backward, each as long as the
    written-out norm's longest piece (all its pieces take ``elementwise_us``)."""
    k = TransformerKnobs()
    x3 = (k.batch, k.seq, 128)
    bwd = L.backward_of("npu::npu_rms_norm_backward", "aclnnRmsNormGrad", "RmsNormGrad", x3, dur_us=k.elementwise_us)
    return L.elementwise("npu::npu_rms_norm", "aclnnRmsNorm", "RmsNorm", x3, dur_us=k.elementwise_us,
                         autograd="NpuRmsNormBackward0", bwd=bwd)


CASES: tuple[Case, ...] = (
    Case("NPU103", "cnn: TransData around the convs", "cnn_classifier", _cnn(),
         lambda r: fx.without_kernels(r, TRANSDATA, CONVS), NO_EVENT, picks="Conv2D"),
    Case("NPU103", "cnn: TransData around the embed Linear", "cnn_classifier", _cnn(),
         lambda r: fx.without_kernels(r, TRANSDATA, frozenset({"embed"})), picks="MatMul"),
    Case("NPU103", "cnn, device-bound: TransData around the convs", "cnn_classifier", _cnn(**DEVICE_BOUND),
         lambda r: fx.without_kernels(r, TRANSDATA, CONVS), picks="Conv2D"),
    Case("NPU103", "cnn, device-bound: TransData around the Linear", "cnn_classifier", _cnn(**DEVICE_BOUND),
         lambda r: fx.without_kernels(r, TRANSDATA, frozenset({"embed"})), picks="MatMul"),
    Case("NPU103", "cnn, device-bound, 1.5 ms all-reduce: the convs", "cnn_classifier",
         _cnn(transdata_us=400.0, linear_transdata_us=200.0), lambda r: fx.without_kernels(r, TRANSDATA, CONVS),
         NO_EVENT, picks="Conv2D"),
    Case("NPU103", "cnn, device-bound, 1.5 ms all-reduce, events: the convs", "cnn_classifier",
         _cnn(True, transdata_us=400.0, linear_transdata_us=200.0), lambda r: fx.without_kernels(r, TRANSDATA, CONVS),
         picks="Conv2D"),
    Case("NPU102", "cnn: 1.5 ms all-reduce, events, accumulation over 4", "cnn_classifier", _cnn(True),
         lambda r: fx.allreduce_every(r, 4)),
    Case("NPU102", "cnn: 1.5 ms all-reduce, no events", "cnn_classifier", _cnn(),
         lambda r: fx.allreduce_every(r, 4), NO_EVENT),
    Case("NPU104", "cnn: single-process DataLoader, 12.5 ms", "cnn_classifier", _cnn(), fx.without_dataloader),
    Case("NPU104", "transformer: single-process DataLoader, 11 ms", "tiny_transformer", _tf(), fx.without_dataloader),
    Case("NPU108", "cnn: torch.npu.synchronize() (loss.item() stays)", "cnn_classifier", _cnn(),
         lambda r: fx.without_syncs(r, ops=False), picks="synchronize"),
    Case("NPU108", "cnn: loss.item() (synchronize() stays)", "cnn_classifier", _cnn(),
         lambda r: fx.without_syncs(r, apis=False), picks="item"),
    Case("NPU108", "cnn without synchronize(): loss.item()", "cnn_classifier",
         lambda: fx.without_syncs(_cnn()(), ops=False), lambda r: fx.without_syncs(r, apis=False), picks="item"),
    Case("NPU108", "transformer: loss.item()", "tiny_transformer", _tf(), fx.without_syncs),
    Case("NPU220", "transformer: unfused AdamW, 19 parameters", "tiny_transformer", _tf(),
         lambda r: fx.fused_optimizer(r, L.adamw_step(_tf_params(32003, 128, 256, 2),
                                                      kernel_us=TransformerKnobs().adamw_kernel_us, fused=True)),
         "the generator's fused AdamW is one kernel per parameter at 4x an unfused kernel's time: a chosen duration"),
    Case("NPU221", "transformer: per-tensor clip_grad_norm_", "tiny_transformer", _tf(), None,
         "the generator has no multi-tensor clipping to lay out"),
    Case("NPU210", "transformer: RMSNorm written out", "tiny_transformer", _tf(),
         lambda r: fx.one_launch(r, RMS_NORMS, _rms_norm), FUSED_KNOB, picks="x.pow(2)"),
    Case("NPU106", "transformer: lm_head N = 32003", "tiny_transformer", _tf(), None,
         "a padded GEMM's time would be a knob of the generator; the sample has no aligned MatMulV3 to rate it"),
    Case("NPU101", "cnn: ReLU -> Dropout in the embed block", "cnn_classifier", _cnn(),
         lambda r: fx.without_kernels(r, RELU, frozenset({"embed"})), picks="nn.ReLU(),"),
    Case("NPU101", "cnn: F.dropout(F.relu(self.fc2(x)))", "cnn_classifier", _cnn(),
         lambda r: fx.without_kernels(r, RELU, frozenset({"fc2.relu.dropout"})), picks="F.dropout(F.relu"),
)


def _picked(f: Finding, picks: str) -> bool:
    if picks in f.message:
        return True
    if f.span is None:
        return False
    lines = Path(f.span.path).read_text(encoding="utf-8").splitlines()
    return picks in lines[f.span.line - 1] if 0 < f.span.line <= len(lines) else False


def estimate(case: Case, run: Run) -> tuple[int, float | None, float | None, float | None, str]:
    """(findings, estimate, low, high µs, basis) of the case's rule on ``run``'s export."""
    from msprof_lsp.server.analysis.run import analyse_paths
    from msprof_lsp.server.analysis.settings import Settings

    with tempfile.TemporaryDirectory(prefix="msprof-savings-") as tmp:
        root = write_torch_npu_text(run, tmp)
        analyses = analyse_paths([SAMPLES / case.sample], Settings(min_share=0.0), profile=root, use_cache=False)
    found = [f for a in analyses for f in a.findings if f.code == case.rule and _picked(f, case.picks)]
    known = [f.saving for f in found if f.saving is not None and f.saving.known]
    basis = found[0].saving.basis if found and found[0].saving is not None else "no finding"
    if not known:
        return len(found), None, None, None, basis
    return (len(found), sum(s.us_per_step for s in known), sum(s.low_us for s in known),
            sum(s.high_us for s in known), basis)


def run_case(case: Case) -> Result:
    run = case.build()
    n, est, low, high, basis = estimate(case, run)
    truth = fx.saving_ns(run, case.fix(run)) / 1000 if case.fix is not None else None
    return Result(case, n, est, low, high, truth, basis)
