"""Helpers for the rule tests: build a linked Profile directly (spec-exact tables, real linking),
run rules on it against source files the test writes, and check offered fixes."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.engine import run_rules
from msprof_lsp.hints.finding import Finding, Fix
from msprof_lsp.hints.fixes.edits import apply_edits
from msprof_lsp.hints.registry import Rule, rules_matching
from msprof_lsp.mapping.source.attribute import attribute
from msprof_lsp.mapping.profile.frames import StackTable
from msprof_lsp.mapping.profile.linking import assign_parents, resolve_kernel_links
from msprof_lsp.mapping.profile.model import (
    HOST_EVENT_SCHEMA,
    HOST_OP_SCHEMA,
    KERNEL_SCHEMA,
    OVERLAP_SCHEMA,
    Backend,
    Profile,
    ProfileKind,
    ProfileMeta,
    Step,
    make_table,
)
from msprof_lsp.mapping.source.workspace import SourceWorkspace

T0 = 1_736_413_971_000_000_000  # epoch ns of the first step
US = 1000


DDP_TRAIN = '''import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def train(model, loader, opt):
    model = DDP(model, bucket_cap_mb=25)
    for x, y in loader:
        loss = model(x).sum()
        loss.backward()
        opt.step()
'''
"""A data-parallel training loop: DDP issues its collectives from ``loss.backward()``."""


class ProfileBuilder:
    """Rows in µs relative to the first step; ``build()`` links them with mapping.linking."""

    def __init__(self, *, backend: Backend = Backend.ASCEND, kind: ProfileKind = ProfileKind.TORCH_NPU,
                 steps: int = 1, step_us: float = 10_000, **meta) -> None:
        self.meta = ProfileMeta(kind=kind, path="/prof/run_ascend_pt", backend=backend, **meta)
        self.step_us = step_us
        self.n_steps = steps
        self.ops: dict[str, list] = {c: [] for c in ("name", "cat", "start_ns", "dur_ns", "pid", "tid", "stack",
                                                     "input_types", "input_dims", "concrete_inputs", "fwd_thread")}
        self.kernels: dict[str, list] = {c: [] for c in ("name", "type", "core", "start_ns", "dur_ns", "host_op", "stream",
                                                         "input_dtypes", "output_dtypes", "step", "device", "op_state",
                                                         "input_shapes", "output_shapes", "block_dim")}
        self.pmu: dict[str, list[float]] = {}
        self.events: dict[str, list] = {c: [] for c in ("name", "cat", "start_ns", "dur_ns", "pid", "tid")}
        self.lanes: dict[str, list] = {c: [] for c in ("lane", "start_ns", "dur_ns", "device")}
        self.stacks = StackTable()

    @staticmethod
    def ns(us: float) -> int:
        return T0 + round(us * US)

    def op(self, name: str, start_us: float, dur_us: float, *, stack: Sequence[str] = (), tid: int = 1,
           cat: str = "cpu_op", input_types: str = "", input_dims: str = "", concrete_inputs: str = "") -> int:
        o = self.ops
        o["name"].append(name)
        o["cat"].append(cat)
        o["start_ns"].append(self.ns(start_us))
        o["dur_ns"].append(round(dur_us * US))
        o["pid"].append(100)
        o["tid"].append(tid)
        o["stack"].append(self.stacks.intern_text(";\r\n".join(stack)) if stack else -1)
        o["input_types"].append(input_types)
        o["input_dims"].append(input_dims)
        o["concrete_inputs"].append(concrete_inputs)
        o["fwd_thread"].append(0)
        return len(o["name"]) - 1

    def kernel(self, name: str, start_us: float, dur_us: float, *, op: int = -1, core: str = "AI_CORE", type: str = "",
               input_dtypes: str = "", output_dtypes: str = "", stream: int = 2, op_state: str = "",
               pmu: dict[str, float] | None = None, input_shapes: str = "", output_shapes: str = "",
               block_dim: int = -1) -> int:
        """``pmu``: counter columns by their export name (``aic_mac_ratio``), NaN where not given."""
        k = self.kernels
        n = len(k["name"])
        for col, value in (pmu or {}).items():
            self.pmu.setdefault(f"pmu:{col}", [float("nan")] * n)
        for col, values in self.pmu.items():
            values.append(float((pmu or {}).get(col[4:], float("nan"))))
        k["op_state"].append(op_state)
        k["name"].append(name)
        k["type"].append(type)
        k["core"].append(core)
        k["start_ns"].append(self.ns(start_us))
        k["dur_ns"].append(round(dur_us * US))
        k["host_op"].append(op)
        k["stream"].append(stream)
        k["input_dtypes"].append(input_dtypes)
        k["output_dtypes"].append(output_dtypes)
        k["input_shapes"].append(input_shapes)
        k["output_shapes"].append(output_shapes)
        k["block_dim"].append(block_dim)
        k["step"].append(1 + int(start_us // self.step_us) if 0 <= start_us < self.step_us * self.n_steps else -1)
        k["device"].append(0)
        return len(k["name"]) - 1

    def event(self, name: str, cat: str, start_us: float, dur_us: float, tid: int = 1) -> None:
        e = self.events
        for col, v in (("name", name), ("cat", cat), ("start_ns", self.ns(start_us)), ("dur_ns", round(dur_us * US)), ("pid", 100), ("tid", tid)):
            e[col].append(v)

    def lane(self, lane: str, start_us: float, dur_us: float) -> None:
        for col, v in (("lane", lane), ("start_ns", self.ns(start_us)), ("dur_ns", round(dur_us * US)), ("device", 0)):
            self.lanes[col].append(v)

    def build(self) -> Profile:
        host = make_table(HOST_OP_SCHEMA, self.ops)
        assign_parents(host)
        kernels = make_table(KERNEL_SCHEMA, {**self.kernels, **self.pmu})
        resolve_kernel_links(kernels, host)
        steps = [Step(i + 1, self.ns(i * self.step_us), self.ns((i + 1) * self.step_us)) for i in range(self.n_steps)]
        return Profile(
            meta=self.meta,
            kernels=kernels,
            host_ops=host,
            host_events=make_table(HOST_EVENT_SCHEMA, self.events),
            overlap=make_table(OVERLAP_SCHEMA, self.lanes),
            stacks=self.stacks.stacks,
            steps=steps,
        )


@dataclass(frozen=True, eq=False, repr=False)
class FakeRule(Rule):
    """A rule declared like every other whose check calls ``emit(rule, ctx)``; built per test,
    never registered."""

    emit: Callable[[Rule, RuleContext], Iterable[Finding]]

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        return self.emit(self, ctx)


def fake_rule(code: str, emit: Callable[[Rule, RuleContext], Iterable[Finding]], **declared: object) -> FakeRule:
    return FakeRule(code, f"fake-{code.lower()}", emit, summary="A fake rule.", rationale="Tests the engine.", **declared)


def context(profile: Profile, roots: Sequence[Path] = (), *, config: RuleConfig | None = None) -> RuleContext:
    ws = SourceWorkspace(list(roots)) if roots else None
    att = attribute(profile, ws) if ws is not None else None
    return RuleContext(profile, att, ws, config or RuleConfig(min_share=0.0))


def findings(profile: Profile, codes: Sequence[str], roots: Sequence[Path] = (), *, config: RuleConfig | None = None) -> list[Finding]:
    return run_rules(context(profile, roots, config=config), rules_matching(codes))


def only(fs: Sequence[Finding], code: str) -> list[Finding]:
    return [f for f in fs if f.code == code]


def line_of(text: str, needle: str, nth: int = 0) -> int:
    """1-based line of the nth line containing ``needle`` (from the text itself)."""
    hits = [i for i, ln in enumerate(text.splitlines(), 1) if needle in ln]
    assert len(hits) > nth, f"{needle!r} not found {nth + 1} times"
    return hits[nth]


def applied(text: str, fix: Fix) -> str:
    """Apply a finding's fix; the result must parse."""
    new = apply_edits(text, fix.edits)
    ast.parse(new)
    return new


def frame(path: Path | str, line: int, func: str) -> str:
    return f"{path}({line}): {func}"


LIB = "/usr/local/python3.9/lib/python3.9/site-packages"
