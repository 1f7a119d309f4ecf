"""Python call stacks of a Kineto trace, rebuilt from its ``python_function`` events.

Stock PyTorch writes no ``Call stack`` on its ops. With ``with_stack=True`` the Python tracer
records every Python call as a ``python_function`` event (``"model.py(14): forward"``,
``"nn.Module: ReLU_0"``, ``"<built-in method relu ...>"``) with ``Python id`` and
``Python parent id``. An op's stack is the deepest such event enclosing it on its thread,
followed up the parent-id chain; innermost first, frames kept exactly as recorded (their line is
the function's ``def`` line, their path prefix-stripped: resolving both is the source index's
job, not the reader's).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from msprof_lsp.mapping.profile.frames import Frame, Stack, StackTable, parse_frame
from msprof_lsp.mapping.profile.linking import assign_parents, innermost_enclosing
from msprof_lsp.mapping.profile.model import MODULE_SCHEMA, make_table


@dataclass(slots=True)
class PythonCalls:
    """The python_function events of one trace as parallel columns (times in ns)."""

    names: list[str]
    start: np.ndarray
    end: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    python_id: list[int | None]
    parent_id: list[int | None]


def _sorted(calls: PythonCalls) -> PythonCalls:
    order = np.lexsort((calls.start - calls.end, calls.start))
    pick = order.tolist()
    return PythonCalls(
        names=[calls.names[i] for i in pick],
        start=calls.start[order],
        end=calls.end[order],
        pid=calls.pid[order],
        tid=calls.tid[order],
        python_id=[calls.python_id[i] for i in pick],
        parent_id=[calls.parent_id[i] for i in pick],
    )


class PythonTree:
    """Call tree of the python_function events; hands out interned stacks and module rows."""

    def __init__(self, calls: PythonCalls, stacks: StackTable) -> None:
        calls = _sorted(calls)
        self.calls = calls
        self._stacks = stacks
        n = len(calls.names)
        # Time nesting (what the enclosure search walks); rows in (start, longer first) order so
        # that among calls starting together the deeper one is found.
        self._intervals = pd.DataFrame(
            {
                "start_ns": calls.start,
                "dur_ns": calls.end - calls.start,
                "pid": calls.pid,
                "tid": calls.tid,
                "parent": np.full(n, -1, dtype=np.int64),
            }
        )
        assign_parents(self._intervals)
        frame_of_name: dict[str, Frame] = {}
        self.frames: list[Frame] = []
        for name in calls.names:
            frame = frame_of_name.get(name)
            if frame is None:
                frame = frame_of_name[name] = parse_frame(name)
            self.frames.append(frame)
        self.parent = self._parents(n)
        self._stack_id = [-2] * n  # -2: not computed yet
        self._tuple: list[Stack | None] = [None] * n
        self._module_row = [-2] * n
        self.module_rows, self.modules = self._module_table()

    def _parents(self, n: int) -> list[int]:
        """Parent index by ``Python parent id``; by time nesting where ids are missing."""
        calls = self.calls
        index_of = {pyid: i for i, pyid in enumerate(calls.python_id) if pyid is not None}
        parent = [-1] * n
        missing = False
        for i, pyid in enumerate(calls.parent_id):
            if pyid is None:
                if calls.python_id[i] is None:
                    missing = True
                continue
            parent[i] = index_of.get(pyid, -1)
        if missing:
            nested = self._intervals["parent"].tolist()
            for i, pyid in enumerate(calls.python_id):
                if pyid is None:
                    parent[i] = nested[i]
        return parent

    # -- stacks ---------------------------------------------------------------------------------

    def stack_tuple(self, i: int) -> Stack:
        """Frames from call ``i`` up to the root, innermost first (memoised along the chain)."""
        chain = []
        j = i
        while j >= 0 and self._tuple[j] is None:
            chain.append(j)
            j = self.parent[j]
        above: Stack = self._tuple[j] if j >= 0 else ()  # type: ignore[assignment]
        for k in reversed(chain):
            above = (self.frames[k], *above)
            self._tuple[k] = above
        return self._tuple[i]  # type: ignore[return-value]

    def stack_id(self, i: int) -> int:
        if i < 0:
            return -1
        sid = self._stack_id[i]
        if sid == -2:
            sid = self._stack_id[i] = self._stacks.intern(self.stack_tuple(i))
        return sid

    def enclosing_calls(
        self, pid: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray
    ) -> np.ndarray:
        """Deepest python_function enclosing each given interval (-1 if none)."""
        return innermost_enclosing(self._intervals, pid, tid, start, end)

    # -- modules --------------------------------------------------------------------------------

    def _module_table(self) -> tuple[list[int], pd.DataFrame]:
        """One row per ``nn.Module: <Class>_<k>`` call, in start order."""
        calls = self.calls
        module_calls = [i for i, f in enumerate(self.frames) if f.module is not None]
        row_of_call = [-1] * len(self.frames)
        for row, i in enumerate(module_calls):
            row_of_call[i] = row
        self._row_of_call = row_of_call
        cls, k, parent = [], [], []
        for i in module_calls:
            name, number = self.frames[i].module  # type: ignore[misc]
            cls.append(name)
            k.append(number)
            parent.append(self.module_row(self.parent[i]))
        idx = np.asarray(module_calls, dtype=np.int64)
        table = make_table(
            MODULE_SCHEMA,
            {
                "cls": cls,
                "k": k,
                "start_ns": calls.start[idx] if len(idx) else [],
                "dur_ns": (calls.end[idx] - calls.start[idx]) if len(idx) else [],
                "pid": calls.pid[idx] if len(idx) else [],
                "tid": calls.tid[idx] if len(idx) else [],
                "parent": parent,
            },
            len(module_calls),
        )
        return module_calls, table

    def module_row(self, i: int) -> int:
        """Row of the innermost nn.Module call at or above call ``i`` (-1 if none)."""
        chain = []
        j = i
        while j >= 0 and self._module_row[j] == -2:
            chain.append(j)
            j = self.parent[j]
        row = self._module_row[j] if j >= 0 else -1
        for k in reversed(chain):
            own = self._row_of_call[k]
            if own >= 0:
                row = own
            self._module_row[k] = row
        return self._module_row[i] if i >= 0 else -1
