"""Producer-agnostic linking of host ops, modules and device kernels.

Every reader (torch_npu text and DB, Kineto, msprof) fills the model tables, sets
``kernels.host_op`` from its own flow/correlation data and ``host_ops.stack`` / ``host_ops.fwd_op``
where it has them; these functions then derive the rest the same way for all of them:

* :func:`assign_parents`: nesting of ops per thread -> ``parent``/``depth``;
* :func:`link_backward_by_sequence`: the Sequence-number fallback for missing ``fwdbwd`` flows;
* :func:`assign_modules`: innermost enclosing ``nn.Module`` event of each op;
* :func:`resolve_kernel_links`: kernel -> launching op -> nearest stack (ancestor walk), or for
  backward kernels -> autograd node -> forward op -> its stack.

All work on numpy columns; the only Python-level loop is the per-thread nesting stack (O(n) after
an O(n log n) sort), so a few million ops link in seconds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from msprof_lsp.mapping.profile.model import LinkKind


_KEY_LIMIT = 1 << 62  # a combined key stays below this (no int64 overflow)


def row_groups(columns: Sequence[np.ndarray]) -> np.ndarray:
    """Group id of every row of equal-length key columns, numbered in order of first appearance
    (what ``groupby(..., sort=False).ngroup()`` gives; a missing value is a value of its own), at a
    fraction of its cost: the columns' integer codes (an integer column's values less its minimum,
    any other column factorized) are combined into one int64 key per row, mixed radix, and only
    that key is factorized; a key that would pass 2**62 is renumbered densely first. Only integers
    are hashed."""
    if not len(columns):
        raise ValueError("row_groups needs at least one column")
    key: np.ndarray | None = None
    span = 1
    for col in columns:
        codes, size = _codes(np.asarray(col))
        if key is None:
            key, span = codes, size
            continue
        if span * size >= _KEY_LIMIT:
            key, span = _dense(key)
            if span * size >= _KEY_LIMIT:
                codes, size = _dense(codes)
        key, span = key * size + codes, span * size
    assert key is not None
    return _dense(key)[0]


def _codes(col: np.ndarray) -> tuple[np.ndarray, int]:
    """Codes in [0, size) that are equal where the column's values are, and ``size``."""
    if col.dtype.kind in "iub" and len(col):
        lo, hi = int(col.min()), int(col.max())
        if hi < 1 << 63 and hi - lo < _KEY_LIMIT:
            return col.astype(np.int64) - lo, hi - lo + 1
    return _dense(col)


def _dense(col: np.ndarray) -> tuple[np.ndarray, int]:
    """First-appearance codes of the values and how many there are."""
    codes, uniques = pd.factorize(col, use_na_sentinel=False)
    return codes.astype(np.int64), max(len(uniques), 1)


def assign_parents(table: pd.DataFrame) -> None:
    """Set ``parent`` and ``depth`` of every timed row from interval nesting per (pid, tid).

    Works for host ops and for modules (any table with start_ns, dur_ns, pid, tid, parent and,
    optionally, depth). Rows are visited sorted by (start asc, dur desc), so an op that starts
    together with its parent comes after it; a stack of open intervals gives each row its
    innermost enclosing row. Rows without a time (start_ns < 0) keep parent -1, depth 0.
    Partly overlapping intervals (bad data) nest under the one still open.
    """
    n = len(table)
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    if n:
        start = table["start_ns"].to_numpy(dtype=np.int64)
        dur = np.maximum(table["dur_ns"].to_numpy(dtype=np.int64), 0)
        pid = table["pid"].to_numpy(dtype=np.int64)
        tid = table["tid"].to_numpy(dtype=np.int64)
        timed = np.flatnonzero(start >= 0)
        order = timed[np.lexsort((-dur[timed], start[timed], tid[timed], pid[timed]))]
        # Thread changes in sorted order: reset the stack there.
        new_thread = np.ones(len(order), dtype=bool)
        if len(order) > 1:
            new_thread[1:] = (pid[order][1:] != pid[order][:-1]) | (tid[order][1:] != tid[order][:-1])
        starts = start[order].tolist()
        ends = (start[order] + dur[order]).tolist()
        rows = order.tolist()
        resets = new_thread.tolist()
        par = [-1] * len(rows)
        dep = [0] * len(rows)
        stack_rows: list[int] = []
        stack_ends: list[int] = []
        for k, row in enumerate(rows):
            if resets[k]:
                stack_rows.clear()
                stack_ends.clear()
            s = starts[k]
            while stack_ends and stack_ends[-1] <= s:
                stack_ends.pop()
                stack_rows.pop()
            if stack_rows:
                par[k] = stack_rows[-1]
                dep[k] = len(stack_rows)
            stack_rows.append(row)
            stack_ends.append(ends[k])
        parent[order] = par
        depth[order] = dep
    table["parent"] = parent
    if "depth" in table.columns:
        table["depth"] = depth


def nearest_on_chain(parent: np.ndarray, has: np.ndarray) -> np.ndarray:
    """For each row, the nearest row on its ancestor chain (itself first) where ``has``; else -1.

    Pointer doubling over ``parent``: each round doubles the distance looked at, so log2(depth)
    vectorised passes (rules ask this of millions of host ops, several times per profile).
    """
    found = np.where(has, np.arange(len(parent), dtype=np.int64), -1)
    up = np.asarray(parent, dtype=np.int64).copy()
    while True:
        need = (found < 0) & (up >= 0)
        if not need.any():
            return found
        at = np.where(need, up, 0)
        found, up = np.where(need, found[at], found), np.where(need, up[at], up)


def self_ns(dur: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Per host op: its duration less its children's (``parent`` -1: none), never below 0."""
    dur = np.asarray(dur, np.int64)
    has = parent >= 0
    child = np.bincount(parent[has], weights=dur[has], minlength=len(dur)) if len(dur) else np.zeros(0)
    return np.maximum(dur - child.astype(np.int64), 0)


def nearest_stack(host_ops: pd.DataFrame, op: int) -> tuple[int, int]:
    """(stack id, op that carries it) for one op: its own stack or its nearest ancestor's; (-1, -1)."""
    parents = host_ops["parent"].to_numpy()
    stacks = host_ops["stack"].to_numpy()
    while op >= 0:
        if stacks[op] >= 0:
            return int(stacks[op]), op
        op = int(parents[op])
    return -1, -1


def resolve_kernel_links(kernels: pd.DataFrame, host_ops: pd.DataFrame) -> None:
    """Fill ``kernels.stack``, ``fwd_op``, ``link`` and ``backward`` from ``kernels.host_op``.

    Needs ``host_ops.parent`` (see :func:`assign_parents`), ``host_ops.stack`` and
    ``host_ops.fwd_op`` (fwdbwd flows or :func:`link_backward_by_sequence`).

    * The launching op's chain (the op, then its ancestors) is walked up to the first op with a
      forward link: the kernel is a backward kernel; it takes the stack nearest to that forward
      op (the forward op's own, or an ancestor's) and link ``backward`` -- also when the forward
      op has no stack at all (``stack`` -1): the forward op still names the source construct.
    * Otherwise the nearest stack on the chain gives link ``stack``; no stack anywhere: ``host``.
    * ``host_op`` -1 (no launching op known): link ``none``.
    """
    n = len(kernels)
    op = kernels["host_op"].to_numpy(dtype=np.int64)
    stack = np.full(n, -1, dtype=np.int64)
    fwd = np.full(n, -1, dtype=np.int64)
    backward = np.zeros(n, dtype=bool)
    link = np.full(n, LinkKind.NONE.value, dtype=object)
    h = len(host_ops)
    linked = (op >= 0) & (op < h)
    if h and linked.any():
        parent = host_ops["parent"].to_numpy(dtype=np.int64)
        op_stack = host_ops["stack"].to_numpy(dtype=np.int64)
        op_fwd = host_ops["fwd_op"].to_numpy(dtype=np.int64)
        stack_at = nearest_on_chain(parent, op_stack >= 0)
        node_at = nearest_on_chain(parent, (op_fwd >= 0) & (op_fwd < h))
        lk = op[linked]
        node = node_at[lk]
        is_bwd = node >= 0
        fwd_of = np.where(is_bwd, op_fwd[np.where(is_bwd, node, 0)], -1)
        fwd_stack_at = np.where(is_bwd, stack_at[np.where(is_bwd, fwd_of, 0)], -1)
        own_stack_at = stack_at[lk]
        k_stack = np.where(
            is_bwd,
            np.where(fwd_stack_at >= 0, op_stack[np.maximum(fwd_stack_at, 0)], -1),
            np.where(own_stack_at >= 0, op_stack[np.maximum(own_stack_at, 0)], -1),
        )
        k_link = np.where(
            is_bwd,
            LinkKind.BACKWARD.value,
            np.where(own_stack_at >= 0, LinkKind.STACK.value, LinkKind.HOST.value),
        )
        stack[linked] = k_stack
        fwd[linked] = fwd_of
        backward[linked] = is_bwd
        link[linked] = k_link
    kernels["stack"] = stack
    kernels["fwd_op"] = fwd
    kernels["backward"] = backward
    kernels["link"] = pd.Categorical(link, categories=[k.value for k in LinkKind])


def link_backward_by_sequence(host_ops: pd.DataFrame, forward: np.ndarray, backward: np.ndarray) -> int:
    """Sequence-number fallback for ``fwd_op``; returns links added.

    Each backward autograd node (``backward`` mask, ``seq`` >= 0, no ``fwd_op`` yet) is linked to
    the forward op (``forward`` mask) of the same process with the same sequence number that
    started last before it -- the op that created the autograd node, which is where torch puts
    the ``fwdbwd`` flow (``aten::convolution``, not the enclosing ``aten::conv2d``, which records
    the same number earlier).
    """
    seq = host_ops["seq"].to_numpy(dtype=np.int64)
    fwd_op = host_ops["fwd_op"].to_numpy(dtype=np.int64).copy()
    start = host_ops["start_ns"].to_numpy(dtype=np.int64)
    pid = host_ops["pid"].to_numpy(dtype=np.int64)
    need = np.flatnonzero(backward & (seq >= 0) & (fwd_op < 0) & (start >= 0))
    cand = np.flatnonzero(forward & (seq >= 0) & (start >= 0))
    if not len(need) or not len(cand):
        return 0
    left = pd.DataFrame({"start": start[need], "pid": pid[need], "seq": seq[need], "row": need})
    right = pd.DataFrame({"start": start[cand], "pid": pid[cand], "seq": seq[cand], "fwd": cand})
    left = left.sort_values("start", kind="stable")
    right = right.sort_values("start", kind="stable")
    merged = pd.merge_asof(left, right, on="start", by=["pid", "seq"], direction="backward")
    ok = merged["fwd"].notna().to_numpy()
    rows = merged["row"].to_numpy()[ok]
    fwd_op[rows] = merged["fwd"].to_numpy()[ok].astype(np.int64)
    host_ops["fwd_op"] = fwd_op
    return int(ok.sum())


def innermost_enclosing(
    intervals: pd.DataFrame,
    pid: np.ndarray,
    tid: np.ndarray,
    start: np.ndarray,
    end: np.ndarray | None = None,
) -> np.ndarray:
    """Row of ``intervals`` innermost enclosing each query [start, end] on the same (pid, tid).

    ``intervals`` needs start_ns, dur_ns, pid, tid and a consistent ``parent`` (assign_parents).
    ``end`` None: point queries (enclosing ``start``). Returns -1 where nothing encloses.
    The last interval starting at or before the query either encloses it or ended before it;
    in the latter case the answer is among its ancestors (proper nesting), reached by climbing
    ``parent`` vectorised.
    """
    q = len(start)
    result = np.full(q, -1, dtype=np.int64)
    if not q or not len(intervals):
        return result
    end = start if end is None else end
    i_start = intervals["start_ns"].to_numpy(dtype=np.int64)
    i_end = i_start + np.maximum(intervals["dur_ns"].to_numpy(dtype=np.int64), 0)
    i_pid = intervals["pid"].to_numpy(dtype=np.int64)
    i_tid = intervals["tid"].to_numpy(dtype=np.int64)
    i_parent = intervals["parent"].to_numpy(dtype=np.int64)
    timed = np.flatnonzero(i_start >= 0)
    order = timed[np.lexsort((i_start[timed], i_tid[timed], i_pid[timed]))]
    o_pid, o_tid, o_start = i_pid[order], i_tid[order], i_start[order]
    # Binary search on (pid, tid, start) at once: rank threads, then search a combined key.
    threads = pd.MultiIndex.from_arrays([o_pid, o_tid])
    thread_ids = pd.MultiIndex.from_arrays([pid, tid])
    uniq = threads.unique()
    t_int = uniq.get_indexer(threads)
    q_thread = uniq.get_indexer(thread_ids)
    known = np.flatnonzero(q_thread >= 0)
    if not len(known):
        return result
    # positions: last interval on the same thread with start <= query start
    first = np.searchsorted(t_int, q_thread[known], side="left")
    last = np.searchsorted(t_int, q_thread[known], side="right")
    cand = np.empty(len(known), dtype=np.int64)
    for t in np.unique(q_thread[known]):
        sel = q_thread[known] == t
        lo, hi = first[sel][0], last[sel][0]
        pos = np.searchsorted(o_start[lo:hi], start[known][sel], side="right") - 1
        cand[sel] = np.where(pos >= 0, order[lo + np.maximum(pos, 0)], -1)
    q_end = end[known]
    q_start = start[known]
    todo = np.arange(len(known))
    while len(todo):
        c = cand[todo]
        alive = c >= 0
        todo, c = todo[alive], c[alive]
        hit = (i_end[c] >= q_end[todo]) & (i_start[c] <= q_start[todo])
        result[known[todo[hit]]] = c[hit]
        todo = todo[~hit]
        cand[todo] = i_parent[c[~hit]]
    return result


def assign_modules(host_ops: pd.DataFrame, modules: pd.DataFrame) -> None:
    """Set ``host_ops.module``: the innermost ``nn.Module`` event enclosing each op on its thread.

    ``modules.parent`` must be set (``assign_parents(modules)``).
    """
    if not len(host_ops):
        return
    start = host_ops["start_ns"].to_numpy(dtype=np.int64)
    end = start + np.maximum(host_ops["dur_ns"].to_numpy(dtype=np.int64), 0)
    found = innermost_enclosing(
        modules,
        host_ops["pid"].to_numpy(dtype=np.int64),
        host_ops["tid"].to_numpy(dtype=np.int64),
        start,
        end,
    )
    found[start < 0] = -1
    host_ops["module"] = found


def match_rows(
    table_keys: Sequence[np.ndarray], query_keys: Sequence[np.ndarray], prefer: np.ndarray | None = None
) -> np.ndarray:
    """Row of the table whose key columns equal each query's, or -1 (exact match, vectorised).

    Several table rows with one key: the one with the largest ``prefer`` wins (e.g. depth, so a
    flow on (pid, tid, ts) lands on the deepest op starting there).
    """
    q = len(query_keys[0]) if query_keys else 0
    if not q or not len(table_keys[0]):
        return np.full(q, -1, dtype=np.int64)
    cols = [f"k{i}" for i in range(len(table_keys))]
    table = pd.DataFrame(dict(zip(cols, table_keys)))
    table["row"] = np.arange(len(table))
    if prefer is not None:
        table["prefer"] = prefer
        table = table.sort_values("prefer", kind="stable")
    table = table.drop_duplicates(cols, keep="last")
    query = pd.DataFrame(dict(zip(cols, query_keys)))
    merged = query.merge(table[cols + ["row"]], on=cols, how="left", sort=False)
    return np.array(merged["row"].fillna(-1).to_numpy(), dtype=np.int64)  # writable copy
