"""Time nesting of events on one thread: which interval encloses which.

Chrome-trace ``X`` events on one (pid, tid) nest like call frames. Two questions come up again
and again: the enclosing event of each event of the same kind (host op parents), and the
deepest event of one kind enclosing each event of another kind (the python_function around a
host op, the host op around a CUDA runtime call). Both are one sort plus one stack sweep.
"""

from __future__ import annotations

import numpy as np


def nest(
    pid: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Parent (index of the enclosing interval, -1 at top level) and depth of every interval.

    An interval is the child of the innermost open interval on its thread that it starts
    inside; among equal starts the longer one is the parent. A child that runs past its
    parent's end (clock rounding) is still its child.
    """
    n = len(start)
    parent = [-1] * n
    depth = [0] * n
    if n == 0:
        return np.asarray(parent, dtype=np.int64), np.asarray(depth, dtype=np.int64)
    order = np.lexsort((-end, start, tid, pid)).tolist()
    P, T, S, E = pid.tolist(), tid.tolist(), start.tolist(), end.tolist()
    stack: list[int] = []
    current = None
    for i in order:
        key = (P[i], T[i])
        if key != current:
            stack = []
            current = key
        s = S[i]
        while stack and E[stack[-1]] <= s:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
            depth[i] = len(stack)
        stack.append(i)
    return np.asarray(parent, dtype=np.int64), np.asarray(depth, dtype=np.int64)


def deepest_enclosing(
    a_pid: np.ndarray,
    a_tid: np.ndarray,
    a_start: np.ndarray,
    a_end: np.ndarray,
    q_pid: np.ndarray,
    q_tid: np.ndarray,
    q_start: np.ndarray,
    q_end: np.ndarray,
) -> np.ndarray:
    """For each query interval, the index of the deepest ``a`` interval on the same thread that
    contains it (``a_start <= q_start`` and ``q_end <= a_end``), or -1.

    ``a`` intervals must nest properly per thread (call frames do). An ``a`` interval starting
    at the same time as a query counts as enclosing it.
    """
    na, nq = len(a_start), len(q_start)
    result = [-1] * nq
    if na == 0 or nq == 0:
        return np.asarray(result, dtype=np.int64)
    # One merged sweep: a-intervals before queries at equal start (kind 0 < 1), longer first.
    pid = np.concatenate([a_pid, q_pid])
    tid = np.concatenate([a_tid, q_tid])
    start = np.concatenate([a_start, q_start])
    end = np.concatenate([a_end, q_end])
    kind = np.concatenate([np.zeros(na, dtype=np.int8), np.ones(nq, dtype=np.int8)])
    order = np.lexsort((-end, kind, start, tid, pid)).tolist()
    P, T, S, E = pid.tolist(), tid.tolist(), start.tolist(), end.tolist()
    stack: list[int] = []
    current = None
    for i in order:
        key = (P[i], T[i])
        if key != current:
            stack = []
            current = key
        s = S[i]
        if i < na:
            while stack and E[stack[-1]] <= s:
                stack.pop()
            stack.append(i)
            continue
        while stack and E[stack[-1]] < s:
            stack.pop()
        e = E[i]
        for j in range(len(stack) - 1, -1, -1):
            if E[stack[j]] >= e:
                result[i - na] = stack[j]
                break
    return np.asarray(result, dtype=np.int64)
