"""NPU241-NPU247: environment variables recorded with the profile (``ENV_VARIABLES`` of the text
export's ``profiler_metadata.json`` or of the DB export's ``META_DATA`` table, the advisor's
``environment_variable_analysis``). ``""`` means unset; a profile without them (or without the
variable) gives no finding.

Fixed severity Information. Anchored where the script itself sets the variable
(``os.environ["X"] = ...``, ``os.environ.setdefault("X", ...)``, ``os.putenv("X", ...)``), with a
fix that edits or deletes that statement; else on line 1 of the entry script; else a
profile-level finding (no span) for ``--check``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.finding import Finding, Severity
from msprof_lsp.hints.fixes import env_vars, make_offer
from msprof_lsp.hints.registry import Data, Rule, declare
from msprof_lsp.mapping.spans import Confidence, Span
from msprof_lsp.mapping.profile.model import Backend

from .. import source_query as sq


def _int_below(limit: int) -> Callable[[str], bool]:
    def check(v: str) -> bool:
        if v == "":
            return True
        try:
            return int(v.strip()) < limit
        except ValueError:
            return False  # not a number: CANN's own parse decides; do not guess
    return check


def _lacks_expandable(v: str) -> bool:
    parts = {p.strip().replace(" ", "") for p in v.split(",")}
    return "expandable_segments:True" not in parts


@dataclass(frozen=True, eq=False, repr=False)
class EnvRule(Rule):
    """One variable family: the rule's own fields after code and name; each family is a subclass
    below, its ``@declare`` giving them."""

    variables: tuple[str, ...]
    fires: Callable[[str], bool]  # on the recorded value ("" = unset)
    short: str
    diagnosis: str
    advice: str  # <= 12 words
    value: env_vars.Value | str = ""  # what the fix writes (None: delete the statement); "" = no fix
    default_severity: Severity | None = field(default=Severity.INFO, kw_only=True)
    backends: tuple[Backend, ...] = field(default=(Backend.ASCEND,), kw_only=True)
    needs: tuple[Data, ...] = field(default=(Data.ENV,), kw_only=True)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        env = ctx.profile.meta.env
        present = [v for v in self.variables if v in env]
        firing = [v for v in present if self.fires(env[v])]
        if not firing:
            return
        for var in firing:
            value = env[var]
            evidence = {
                "variable": var,
                "value": value,
                "unset": value == "",
                "advice": self.advice,
                "source": ctx.profile.meta.env_source or "ENV_VARIABLES",
            }
            span, conf, fixes = None, Confidence.MODULE, []
            sites = setter_statements(ctx, var)
            if sites:
                span = sites[0]
                index = sq.index_of(ctx, span.path)
                imp = index.torch_npu_import if index is not None else None
                if imp is not None and imp.span.line < span.line:
                    evidence["note"] = f"set after `import torch_npu` (line {imp.span.line}): too late to take effect"
                if self.value != "":
                    fixes.append(make_offer(env_vars.set_env_value, span.path, span, name=var, value=self.value))
            else:
                entries = sq.entry_scripts(ctx)
                if entries:
                    span = sq.file_start(entries[0])
                    evidence["anchor"] = "entry script (the variable belongs in the launcher)"
            shown = f"{var}={value}" if value else f"{var} unset"
            msg = f"{self.short}: {shown} when profiled: {self.diagnosis}. {self.advice}."
            yield ctx.finding(self, span=span, message=msg, confidence=conf, evidence=evidence, fixes=fixes)


@declare("NPU241", "env-log-level", variables=("ASCEND_GLOBAL_LOG_LEVEL",),
         fires=lambda v: v != "" and v.strip() != "3", short="Verbose CANN logging",
         diagnosis="logging below ERROR level slows every API call", advice="export ASCEND_GLOBAL_LOG_LEVEL=3",
         value="3")
class EnvLogLevel(EnvRule):
    """CANN logs at INFO/DEBUG/WARNING level during the run.

    Below level 3 (ERROR) CANN writes log records on the hot path of every API call.
    """


@declare("NPU242", "env-hccl-rdma-qos", variables=("HCCL_RDMA_TC", "HCCL_RDMA_SL"), fires=lambda v: v != "",
         short="RDMA QoS set", diagnosis="HCCL traffic class / service level differs from the defaults",
         advice="Review the network QoS settings with your cluster admin")
class EnvHcclRdmaQos(EnvRule):
    """HCCL_RDMA_TC / HCCL_RDMA_SL are set (informational).

    A traffic class or service level that does not match the switch configuration can throttle
    collective bandwidth.
    """


@declare("NPU243", "env-aclnn-cache", variables=("ACLNN_CACHE_LIMIT",), fires=_int_below(10000),
         short="Small aclnn cache", diagnosis="op executors are rebuilt when the cache overflows",
         advice="export ACLNN_CACHE_LIMIT=100000", value="100000")
class EnvAclnnCache(EnvRule):
    """ACLNN_CACHE_LIMIT is unset or below 10000.

    aclnn caches compiled op executors per shape; a small cache makes models with many shapes
    rebuild them on the host.
    """


@declare("NPU244", "env-host-cache", variables=("HOST_CACHE_CAPACITY",), fires=lambda v: v.strip() in ("", "0"),
         short="Host op cache off", diagnosis="op host information is recomputed on every launch",
         advice="export HOST_CACHE_CAPACITY=20", value="20", pytorch_only=True)
class EnvHostCache(EnvRule):
    """HOST_CACHE_CAPACITY is unset or 0.

    With the host cache off, torch_npu rebuilds the host-side description of every op launch instead
    of reusing it.
    """


@declare("NPU245", "env-alloc-conf", variables=("PYTORCH_NPU_ALLOC_CONF",), fires=_lacks_expandable,
         short="No expandable segments", diagnosis="the caching allocator fragments device memory",
         advice="export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True",
         value=env_vars.merge_setting("expandable_segments:True"), pytorch_only=True)
class EnvAllocConf(EnvRule):
    """PYTORCH_NPU_ALLOC_CONF lacks expandable_segments:True.

    Without expandable segments the allocator reserves fixed blocks; fragmentation forces frees,
    re-allocations and out-of-memory retries.
    """


@declare("NPU246", "env-launch-blocking", variables=("ASCEND_LAUNCH_BLOCKING",), fires=lambda v: v.strip() == "1",
         short="Synchronous launches", diagnosis="every op waits for the device to finish",
         advice="unset ASCEND_LAUNCH_BLOCKING", value=None)
class EnvLaunchBlocking(EnvRule):
    """ASCEND_LAUNCH_BLOCKING=1 makes every launch synchronous.

    A debugging switch: the host blocks after each kernel launch, so host and device never overlap.
    """


@declare("NPU247", "env-hccl-algo", variables=("HCCL_ALGO",), fires=lambda v: v != "", short="HCCL algorithm forced",
         diagnosis="a fixed collective algorithm overrides HCCL's per-size choice",
         advice="unset HCCL_ALGO unless it was tuned for this cluster", value=None)
class EnvHcclAlgo(EnvRule):
    """HCCL_ALGO forces a collective algorithm.

    HCCL picks an algorithm per message size and topology; a forced one is slower unless tuned for
    this cluster.
    """


def _setter_re(var: str) -> re.Pattern[str]:
    v = re.escape(var)
    return re.compile(
        rf"os\.environ\s*\[\s*['\"]{v}['\"]\s*\]\s*=(?!=)|os\.environ\.setdefault\(\s*['\"]{v}['\"]|os\.putenv\(\s*['\"]{v}['\"]"
    )


def setter_statements(ctx: RuleContext, var: str) -> list[Span]:
    """Statements of the workspace that set ``var`` in ``os.environ`` (entry scripts first)."""
    key = _setter_re(var)
    out: list[Span] = []
    seen: set[str] = set()
    for path in [*sq.entry_scripts(ctx), *sq.python_files(ctx)]:
        if path in seen:
            continue
        seen.add(path)
        text = ctx.source_text(path)
        if text is None or var not in text:
            continue  # read, not parsed: only files naming the variable get indexed
        index = sq.index_of(ctx, path)
        if index is None:
            continue
        out += [st.span for st in index.statements if key.search(st.text)]
    return out
