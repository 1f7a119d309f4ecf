"""Builds linked Profiles directly (the shape readers produce), for the source-mapping tests.

Rows are appended in the order the test describes them; ids returned are the table rows other
rows refer to. Kernels get ``stack``/``fwd_op``/``link``/``backward`` the way the linking step
fills them: the launching op's stack, else the nearest ancestor's;
backward kernels the forward op's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from msprof_lsp.mapping.profile.frames import StackTable
from msprof_lsp.mapping.profile.model import (
    HOST_OP_SCHEMA,
    KERNEL_SCHEMA,
    MODULE_SCHEMA,
    Profile,
    ProfileKind,
    ProfileMeta,
    Step,
    make_table,
)


@dataclass
class ProfileBuilder:
    kind: ProfileKind = ProfileKind.TORCH_NPU
    ops: list[dict[str, Any]] = field(default_factory=list)
    kernels: list[dict[str, Any]] = field(default_factory=list)
    modules: list[dict[str, Any]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    table: StackTable = field(default_factory=StackTable)

    def stack(self, frames: list[str] | str | None) -> int:
        if frames is None:
            return -1
        if isinstance(frames, str):
            return self.table.intern_text(frames)
        return self.table.intern_text(";\r\n".join(frames))  # torch_npu's joiner, innermost first

    def op(self, name: str, start: int, dur: int, *, parent: int = -1, stack: list[str] | str | None = None,
           module: int = -1, fwd_op: int = -1, cat: str = "cpu_op", input_dims: str = "", tid: int = 1) -> int:
        self.ops.append(dict(name=name, cat=cat, start_ns=start, dur_ns=dur, pid=1, tid=tid, parent=parent,
                             depth=0, stack=self.stack(stack), module=module, fwd_op=fwd_op,
                             input_dims=input_dims))
        return len(self.ops) - 1

    def module(self, cls: str, k: int, start: int, dur: int, *, parent: int = -1) -> int:
        self.modules.append(dict(cls=cls, k=k, start_ns=start, dur_ns=dur, pid=1, tid=1, parent=parent))
        return len(self.modules) - 1

    def kernel(self, name: str, type: str, start: int, dur: int, *, host_op: int = -1, core: str = "AI_CORE",
               step: int = -1, shapes: str = "", backward: bool = False, fwd_op: int = -1,
               out_shapes: str = "") -> int:
        self.kernels.append(dict(name=name, type=type, core=core, start_ns=start, dur_ns=dur, host_op=host_op,
                                 step=step, input_shapes=shapes, backward=backward, fwd_op=fwd_op,
                                 output_shapes=out_shapes))
        return len(self.kernels) - 1

    def step(self, sid: int, start: int, end: int) -> None:
        self.steps.append(Step(sid, start, end))

    def _stack_of_chain(self, op: int) -> int:
        while op >= 0:
            if self.ops[op]["stack"] >= 0:
                return self.ops[op]["stack"]
            op = self.ops[op]["parent"]
        return -1

    def build(self) -> Profile:
        ops = {k: [o[k] for o in self.ops] for k in self.ops[0]} if self.ops else {}
        host = make_table(HOST_OP_SCHEMA, ops, len(self.ops))
        cols: dict[str, list[Any]] = {k: [] for k in ("name", "type", "core", "start_ns", "dur_ns", "host_op",
                                                      "step", "input_shapes", "backward", "fwd_op", "stack",
                                                      "link", "output_shapes")}
        for k in self.kernels:
            for c in ("name", "type", "core", "start_ns", "dur_ns", "host_op", "step", "input_shapes",
                      "backward", "fwd_op", "output_shapes"):
                cols[c].append(k[c])
            if k["backward"] and k["fwd_op"] >= 0:
                cols["stack"].append(self._stack_of_chain(k["fwd_op"]))
                cols["link"].append("backward")
            else:
                sid = self._stack_of_chain(k["host_op"])
                cols["stack"].append(sid)
                cols["link"].append("stack" if sid >= 0 else ("host" if k["host_op"] >= 0 else "none"))
        kernels = make_table(KERNEL_SCHEMA, cols, len(self.kernels))
        modules = make_table(MODULE_SCHEMA, {k: [m[k] for m in self.modules] for k in self.modules[0]}
                             if self.modules else {}, len(self.modules))
        return Profile(ProfileMeta(self.kind, "/profiles/run"), kernels=kernels, host_ops=host, modules=modules,
                       stacks=list(self.table.stacks), steps=list(self.steps))


def locate(text: str, needle: str, nth: int = 0) -> tuple[int, int, int, int]:
    """(line, col, end_line, end_col) of the nth ``needle`` in ``text``: 1-based lines, code-point
    columns, found by plain string search (independent of libcst)."""
    pos = -1
    for _ in range(nth + 1):
        pos = text.index(needle, pos + 1)
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1)
    end = pos + len(needle)
    end_line = text.count("\n", 0, end) + 1
    end_col = end - (text.rfind("\n", 0, end) + 1)
    return line, col, end_line, end_col


def span_tuple(span) -> tuple[int, int, int, int]:
    return span.line, span.col, span.end_line, span.end_col
