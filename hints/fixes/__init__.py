"""Quick fixes as libcst transforms, one module per fix family.

Every transform is a pure function ``(source, anchor, *, path=None, why=None, **options) ->
FixResult | None`` where ``source`` is the text or its parsed ``Source``. ``CATALOG`` lists them
per rule code so rules, the server and the docs agree on what is offered where; rules name them in
``FixOffer``s (``offers.make_offer``), expanded into edits by ``offers.expand``.
``suppression_edit`` (hints.suppress) is the extra "Disable <CODE> for this line" action every
rule offers; ``RECORD`` (profiling.insert_profiler) records a profile of the training loop.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass

from msprof_lsp.hints.finding import Safety

from . import (
    aicpu,
    dataloader,
    empty_cache,
    env_vars,
    fused_api,
    gc_freeze,
    grad_accum,
    host_sync,
    inference,
    npu_switches,
    optimizer,
    profiling,
    relu_dropout,
)
from .edits import apply_edits, minimal_edits
from .apply import Applied, Declined, apply_fixes
from .result import Anchor, FixResult, Text, where
from .offers import Expansion, expand, expand_offers, fix_id, make_offer

__all__ = [
    "CATALOG", "RECORD", "Anchor", "Applied", "Declined", "Expansion", "FixResult", "FixSpec", "apply_edits", "apply_fixes",
    "expand", "expand_offers", "fixes_for", "make_offer", "minimal_edits", "offer", "spec_of", "transform_of",
]

log = logging.getLogger("msprof_lsp.hints.fixes")


@dataclass(frozen=True, slots=True)
class FixSpec:
    code: str  # rule code the fix belongs to
    transform: Callable[..., FixResult | None]
    safety: Safety
    options: tuple[str, ...]  # keyword options beyond path/why, with the setting that feeds them
    summary: str
    group: str = ""  # the fixes of one code with the same group rewrite one construct: alternatives
    applied: Callable[[str], bool] | None = None  # the anchor's current text already has this fix

    @property
    def id(self) -> str:
        """What a ``FixOffer`` names: ``<module>.<transform>``, e.g. ``relu_dropout.compile_pair``."""
        return fix_id(self.transform)


CATALOG: tuple[FixSpec, ...] = (
    FixSpec("NPU101", relu_dropout.compile_pair, Safety.REVIEW, ("backend: compileBackend / profile backend",), "torch.compile the ReLU->Dropout pair", "pair"),
    FixSpec("NPU101", relu_dropout.inplace_relu, Safety.REVIEW, (), "inplace=True when the ReLU input is dead", "pair"),
    FixSpec("NPU101", relu_dropout.drop_zero_dropout, Safety.SAFE, (), "delete a dropout with literal p=0", "pair"),
    FixSpec("NPU102", grad_accum.accumulate_gradients, Safety.REVIEW, ("accum_steps: accumSteps",), "gradient accumulation with no_sync()"),
    FixSpec("NPU103", npu_switches.disable_internal_format, Safety.REVIEW, (), "allow_internal_format = False"),
    FixSpec("NPU104", dataloader.tune_dataloader, Safety.REVIEW, ("workers: dataloaderWorkers",), "workers and pinned memory",
            applied=dataloader.is_tuned),
    FixSpec("NPU104", dataloader.non_blocking_copies, Safety.REVIEW, (), ".to(device, non_blocking=True)"),
    FixSpec("NPU107", npu_switches.disable_jit_compile, Safety.PER_MATCH, (), "set_compile_mode(jit_compile=False)"),
    FixSpec("NPU108", host_sync.defer_loss_item, Safety.REVIEW, ("every",), "accumulate loss.detach(); log every N"),
    FixSpec("NPU108", host_sync.remove_synchronize, Safety.REVIEW, (), "delete synchronize() in the loop"),
    FixSpec("NPU109", empty_cache.remove_empty_cache, Safety.SAFE, (), "delete empty_cache() in the loop"),
    FixSpec("NPU201", aicpu.double_to_float, Safety.REVIEW, (), ".double() -> .float()"),
    FixSpec("NPU201", aicpu.masked_fill, Safety.REVIEW, (), "t[mask] = v -> t.masked_fill_(mask, v)"),
    FixSpec("NPU201", aicpu.index_select, Safety.REVIEW, (), "t[idx] -> torch.index_select(t, 0, idx)"),
    FixSpec("NPU210", fused_api.rms_norm, Safety.REVIEW, (), "torch_npu.npu_rms_norm"),
    FixSpec("NPU211", fused_api.swiglu, Safety.REVIEW, (), "torch_npu.npu_swiglu"),
    FixSpec("NPU212", fused_api.rotary_mul, Safety.REVIEW, (), "torch_npu.npu_rotary_mul"),
    FixSpec("NPU213", fused_api.attention, Safety.REVIEW, ("backend: ascend | cuda | cpu",), "npu_fusion_attention / SDPA"),
    FixSpec("NPU214", fused_api.fast_gelu, Safety.REVIEW, ("backend: ascend | cuda | cpu",), "torch_npu.fast_gelu / tanh GELU"),
    FixSpec("NPU215", fused_api.confusion_transpose, Safety.REVIEW, (), "torch_npu.npu_confusion_transpose"),
    FixSpec("NPU216", fused_api.scaled_masked_softmax, Safety.REVIEW, (), "torch_npu.npu_scaled_masked_softmax"),
    FixSpec("NPU217", fused_api.add_layer_norm, Safety.REVIEW, (), "torch_npu.npu_add_layer_norm"),
    FixSpec("NPU220", optimizer.fused_optimizer, Safety.REVIEW, (), "fused=True", "optimizer", optimizer.is_fused),
    FixSpec("NPU220", optimizer.npu_fused_optimizer, Safety.REVIEW, (), "torch_npu.optim.NpuFused<Name>", "optimizer",
            optimizer.is_fused),
    FixSpec("NPU221", optimizer.fused_grad_clip, Safety.REVIEW, (), "clip_grad_norm_fused_ / foreach=True"),
    FixSpec("NPU230", gc_freeze.freeze_before_loop, Safety.REVIEW, (), "gc.freeze() before the loop"),
    *(
        FixSpec(code, env_vars.set_env_value, Safety.REVIEW, ("name", "value"), "edit os.environ in the script")
        for code in ("NPU241", "NPU243", "NPU244", "NPU245", "NPU246", "NPU247")  # NPU242 is informational
    ),
    FixSpec("NPU250", inference.eval_before_loop, Safety.SAFE, (), "model.eval() before the loop"),
    FixSpec("NPU250", inference.inference_mode, Safety.REVIEW, (), "with torch.inference_mode():"),
)


RECORD = FixSpec("", profiling.insert_profiler, Safety.REVIEW, (), "record a profile of the training loop")
"""Not a rule's fix: the record action, offered on training loops and by findings whose fix is already in the source."""

_BY_ID = {s.id: s.transform for s in (*CATALOG, RECORD)}


_SPECS = {s.id: s for s in CATALOG}


def spec_of(fix: str) -> FixSpec | None:
    """The catalog entry a ``FixOffer.fix`` names."""
    return _SPECS.get(fix)


def transform_of(fix: str) -> Callable[..., FixResult | None] | None:
    """The transform a ``FixOffer.fix`` names."""
    return _BY_ID.get(fix)


def fixes_for(code: str) -> list[FixSpec]:
    """The fixes a rule code offers, preferred first."""
    return [f for f in CATALOG if f.code == code.upper()]


def offer(
    transform: Callable[..., FixResult | None],
    source: Text,
    anchor: Anchor,
    *,
    why: list[str] | None = None,
    **options: object,
) -> FixResult | None:
    """Run a transform for a code action: an unexpected error is logged and means "no fix",
    never a failed request (the user's buffer may hold anything mid-edit)."""
    try:
        res = transform(source, anchor, why=why, **options)
        if res is None:
            return None
        spec = next((s for s in CATALOG if s.transform is transform and s.group), None)
        # one id per finding's construct: the alternatives of two optimizers stay two groups
        return dataclasses.replace(res, group=f"{spec.code}/{spec.group}@{where(anchor).line}") if spec else res
    except (RecursionError, MemoryError, ValueError, TypeError, KeyError, IndexError, AttributeError, StopIteration) as exc:
        log.exception("fix %s failed", getattr(transform, "__qualname__", transform))
        if why is not None:
            why.append(f"the fix could not be computed ({type(exc).__name__}: {exc})")
        return None
