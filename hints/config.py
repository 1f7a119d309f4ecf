"""Rule configuration: selection, severities, minimum share, thresholds.

``RuleConfig`` declares what rules read (the settings model extends it, so each field is declared
once); rules read only this object. ``Thresholds`` and ``RuleConfig`` are annotated models: each
field's type, range (``msgspec.Meta`` ``ge``/``le``), default, description and unit live on the
field, and ``setting_specs`` reads them, so the settings conversion, the docs table and the VS
Code manifest cannot disagree with what rules read.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import types
import typing
from dataclasses import dataclass, field
from functools import cache
from typing import Annotated, Any, Literal

from msgspec import Meta

from .finding import Severity

DEFAULT_MIN_SHARE = 0.01


def _us(description: str) -> Meta:
    return Meta(ge=0, description=description, extra={"unit": "µs"})


def _percent(description: str) -> Meta:
    return Meta(ge=0, le=100, description=description, extra={"unit": "%"})


def _whole(description: str, unit: str, *, ge: int = 1) -> Meta:
    """Counts, alignments, sizes: a fraction means nothing (and 0 may divide)."""
    return Meta(ge=ge, description=description, extra={"unit": unit})


@dataclass(frozen=True, slots=True)
class Thresholds:
    """What rules compare against; user-facing keys are the fields in camelCase (``smallKernelUs``)."""

    small_kernel_us: Annotated[float, _us("A kernel shorter than this is 'small' (launch/dispatch-bound).")] = 50
    scheduling_delay_us: Annotated[float, _us("Mean kernel wait time above which a group is called dispatch-bound.")] = 5
    free_max_percent: Annotated[float, _percent("Device idle (Free) share of the step above which NPU105 fires.")] = 15
    compute_min_percent: Annotated[float, _percent("Computing share of the step below which NPU105 fires.")] = 70
    comm_max_percent: Annotated[float, _percent("Not-overlapped communication share above which NPU102 fires.")] = 15
    dataloader_max_us: Annotated[float, _us("DataLoader time per step above which NPU104 fires.")] = 10000
    dataloader_max_percent: Annotated[float, _percent("DataLoader share of the step above which NPU104 fires.")] = 5
    h2d_max_percent: Annotated[float, _percent("Host-to-device copy share of the step above which NPU104 fires.")] = 25
    transdata_min_percent: Annotated[float, _percent("TransData share of the step above which NPU103 fires.")] = 1
    op_compile_max_count: Annotated[int, _whole("Online op compilations per capture at which NPU107 fires.", "events")] = 20
    aicpu_min_us: Annotated[float, _us("Longest AI_CPU kernel at which NPU201 fires.")] = 20
    no_bound_min_us: Annotated[float, _us("Kernel duration from which NPU202 checks its pipe counters.")] = 20
    pipe_bound_percent: Annotated[float, _percent("Pipe busy share above which a kernel is bound (NPU202).")] = 80
    cube_mac_bound_percent: Annotated[float, _percent("aic_mac_ratio from which a Cube kernel is compute-bound (NPU206).")] = 80
    cube_mte2_bound_percent: Annotated[float, _percent("aic_mte2_ratio from which a Cube kernel is memory-bound (NPU206).")] = 95
    fa_mte2_bound_percent: Annotated[float, _percent("aic_mte2_ratio from which a FlashAttention kernel is memory-bound (NPU206).")] = 80
    fa_pipe_bound_percent: Annotated[float, _percent("aiv_vec_ratio (forward) / aic_fixpipe_ratio (grad) from which a FlashAttention kernel is bound (NPU206).")] = 75
    vector_pipe_bound_percent: Annotated[float, _percent("aiv_vec / aiv_mte2 / aiv_mte3 ratio from which a Vector kernel is bound (NPU206).")] = 70
    vector_total_bound_percent: Annotated[float, Meta(ge=0, le=300, description="Sum of aiv_vec, aiv_mte2 and aiv_mte3 ratios from which a Vector kernel is bound (NPU206).", extra={"unit": "%"})] = 90
    vector_min_percent: Annotated[float, _percent("Share of all kernel time from which an OpType's Vector kernels are checked (NPU206).")] = 1
    slow_rank_gap_percent: Annotated[float, _percent("Gap between the ranks' Computing, Communication or Free, as a share of the mean step, above which NPU207 fires.")] = 5
    slow_link_gap_percent: Annotated[float, _percent("Gap between the ranks' link bandwidths, as a share of the mean, above which NPU208 fires.")] = 5
    block_dim_min_us: Annotated[float, _us("Kernel duration from which NPU209 checks the block dim against the core count.")] = 20
    aicore_freq_drop_percent: Annotated[float, _percent("Mean AI Core clock drop below the rated frequency during a kernel's runs at which NPU218 fires.")] = 5
    sdma_baseline_gbps: Annotated[float, Meta(ge=0, description="SDMA bandwidth baseline NPU219 compares overlapped collectives with.", extra={"unit": "GB/s"})] = 18
    contention_bandwidth_percent: Annotated[float, _percent("Share of the SDMA baseline under which an overlapped collective is contended (NPU219).")] = 80
    comm_align_bytes: Annotated[int, _whole("SDMA transfer size alignment checked by NPU203.", "bytes")] = 512
    sdma_small_packet_mb: Annotated[float, Meta(ge=0, description="SDMA packet size under which a packet is small (NPU102, NPU204).", extra={"unit": "MB"})] = 16
    rdma_small_packet_mb: Annotated[float, Meta(ge=0, description="RDMA packet size under which a packet is small (NPU102, NPU204).", extra={"unit": "MB"})] = 1
    critical_path_min_percent: Annotated[float, _percent("Share of a line's own time on the critical path from which NPU251 checks what binds it.")] = 50
    copy_fragments_min: Annotated[int, _whole("Host-device copies per step from one line at which NPU205 fires.", "copies")] = 8
    small_packet_max_percent: Annotated[float, _percent("Share of small packets above which NPU204 fires (NPU102 says 'small packets').")] = 20
    cube_align: Annotated[int, _whole("Inner-axis alignment expected by the Cube unit (NPU106).", "elements")] = 256
    fa_align: Annotated[int, _whole("Head-dim / sequence alignment for FlashAttention (NPU106).", "elements")] = 128
    cube_min_bytes: Annotated[int, _whole("MatMul input+output size from which NPU106 checks alignment.", "bytes", ge=0)] = 100 * 1024 * 1024
    alloc_max_us: Annotated[float, _us("Memory allocate/free API time per capture at which NPU109 fires.")] = 10000
    foreach_host_ratio: Annotated[float, Meta(ge=0, description="Host time of a multi-tensor (_foreach_) optimizer step over its kernels' device time at which NPU220 fires on Ascend.", extra={"unit": "×"})] = 2
    gc_min_us: Annotated[float, _us("GC pause length at which NPU230 fires.")] = 1000
    accum_steps: Annotated[int, _whole("Micro-batches per optimizer step written by the NPU102 fix.", "steps")] = 4
    dataloader_workers: Annotated[int, _whole("num_workers written by the NPU104 fix.", "workers")] = 4


# -- reading an annotated model ------------------------------------------------------------------


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def kebab(key: str) -> str:
    """camelCase (or snake_case) -> the kebab-case TOML key."""
    return re.sub(r"(?<!^)(?=[A-Z])", "-", key).replace("_", "-").lower()


class Scope(str, enum.Enum):
    """Where an editor may set a setting (VS Code configuration scopes)."""

    RESOURCE = "resource"
    MACHINE = "machine"


@dataclass(frozen=True, slots=True)
class SettingSpec:
    """One user-facing setting, as its model field declares it."""

    group: str | None  # the enclosing field of a nested model (``thresholds``), None at top level
    name: str  # the Python field
    type: Any  # the field's type, ``Annotated`` stripped
    default: Any
    description: str
    unit: str = ""
    minimum: float | None = None
    maximum: float | None = None
    scope: Scope = Scope.RESOURCE
    user_only: bool = False  # a write location: never taken from a workspace (pyproject.toml)
    path: bool = False  # a file system path: no NUL
    absolute: bool = False  # must be absolute (or ~/...)
    schema: dict[str, Any] = field(default_factory=dict)  # JSON-schema details a type cannot say

    @property
    def key(self) -> str:
        """camelCase: editor settings, initializationOptions, workspace/configuration."""
        return camel(self.name)

    @property
    def toml_key(self) -> str:
        """kebab-case: ``[tool.msprof-lsp]``."""
        return kebab(self.name)

    @property
    def optional(self) -> bool:
        return _without_none(self.type) is not self.type

    @property
    def base(self) -> Any:
        """The type without ``| None``."""
        return _without_none(self.type)

    @property
    def json_type(self) -> str | list[str]:
        base = json_type(self.base)
        return [base, "null"] if self.optional else base

    @property
    def integer(self) -> bool:
        return self.base is int

    @property
    def choices(self) -> tuple[Any, ...]:
        """The allowed values of a ``Literal`` field (empty otherwise)."""
        return typing.get_args(self.base) if typing.get_origin(self.base) is Literal else ()


def _without_none(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return hint


def json_type(hint: Any) -> str:
    """The JSON-schema type of a (non-optional) field type."""
    origin = typing.get_origin(hint) or hint
    if origin is Literal:
        return json_type(type(typing.get_args(hint)[0]))
    for py, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
                     (tuple, "array"), (list, "array"), (dict, "object")):
        if isinstance(origin, type) and issubclass(origin, py):
            return name
    raise TypeError(f"no JSON type for {hint!r}")


@cache
def setting_specs(model: type) -> tuple[SettingSpec, ...]:
    """The settings a frozen dataclass declares, in field order; a field whose type is itself such a
    model (``thresholds``) contributes its fields, flat. Fields without a ``Meta`` description are
    not settings (e.g. a resolved base directory)."""
    hints = typing.get_type_hints(model, include_extras=True)
    specs: list[SettingSpec] = []
    groups: list[SettingSpec] = []  # a composed model's fields come after the flat ones
    for f in dataclasses.fields(model):
        hint = hints[f.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            groups += [dataclasses.replace(s, group=f.name) for s in setting_specs(hint)]
            continue
        if typing.get_origin(hint) is not Annotated:
            continue
        base, *metadata = typing.get_args(hint)
        meta = next((m for m in metadata if isinstance(m, Meta)), None)
        if meta is None or not meta.description:
            continue
        extra = dict(meta.extra or {})
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        specs.append(SettingSpec(
            group=None,
            name=f.name,
            type=base,
            default=default,
            description=meta.description,
            unit=extra.pop("unit", ""),
            minimum=meta.ge,
            maximum=meta.le,
            scope=Scope(extra.pop("scope", Scope.RESOURCE)),
            user_only=extra.pop("user_only", False),
            path=extra.pop("path", False),
            absolute=extra.pop("absolute", False),
            schema=dict(meta.extra_json_schema or {}),
        ))
        if extra:
            raise TypeError(f"{model.__name__}.{f.name}: unknown Meta.extra keys {sorted(extra)}")
    return tuple(specs + groups)


THRESHOLD_KEYS: frozenset[str] = frozenset(s.key for s in setting_specs(Thresholds))


CompileBackend = Literal["auto", "npu", "inductor"]


@dataclass(frozen=True, slots=True)
class RuleConfig:
    """What the rules read, declared once: the settings model (``server.analysis.settings``)
    extends this class, so these fields are settings with the keys, ranges and descriptions below."""

    select: Annotated[tuple[str, ...], Meta(description="Rule codes or prefixes to enable (empty = all), e.g. [\"NPU1\"].")] = ()
    ignore: Annotated[tuple[str, ...], Meta(description="Rule codes or prefixes to disable, e.g. [\"NPU9\"].")] = ()
    severity: Annotated[dict[str, Severity], Meta(description="Severity per rule code or prefix: error, warning, info or hint.")] = field(default_factory=dict)
    min_share: Annotated[float, Meta(ge=0, le=1, description="Findings below this share of step time (0..1) are not reported.")] = DEFAULT_MIN_SHARE
    compile_backend: Annotated[CompileBackend, Meta(
        description="torch.compile backend the NPU101 fix writes: auto (npu for Ascend profiles, inductor otherwise), npu or inductor.")] = "auto"
    thresholds: Thresholds = Thresholds()  # each field is a flat setting: smallKernelUs / small-kernel-us

    def enabled(self, code: str) -> bool:
        if self.select and not any(code.startswith(p) for p in self.select):
            return False
        return not any(code.startswith(p) for p in self.ignore)

    def severity_override(self, code: str) -> Severity | None:
        """The most specific configured severity for a code (longest matching prefix)."""
        best: tuple[int, Severity] | None = None
        for prefix, sev in self.severity.items():
            if code.startswith(prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), sev)
        return best[1] if best else None

    def severity_for_share(self, code: str, share: float) -> Severity:
        """Advisor priority by share of step (>= 5 % warning, >= 3 % info, else hint)."""
        override = self.severity_override(code)
        if override is not None:
            return override
        if share >= 0.05:
            return Severity.WARNING
        if share >= 0.03:
            return Severity.INFO
        return Severity.HINT
