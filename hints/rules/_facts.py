"""Profile queries the seed rules (NPU101-NPU109) share: step windows, record_function scopes, host
op subtrees, kernel types from names, and the durations of CANN API / runtime events.

Everything is vectorised over the model's columnar tables (profiles hold millions of rows); the
rules only loop over the few groups these queries return.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

from msprof_lsp.mapping import step_windows, timemodel
from msprof_lsp.mapping.model import Profile

_TRAILING_NUMBER = re.compile(r"\d+$")
_API_PREFIX = re.compile(r"^[A-Za-z]+@")
_TRANS_NAME = re.compile(r"^trans_(?P<type>[A-Za-z][A-Za-z0-9]*)_\d+$")
_ACLNN_NAME = re.compile(r"^aclnn[A-Za-z0-9]+_[A-Za-z0-9]+_(?P<type>[A-Za-z][A-Za-z0-9]*)$")
_ACL_OP_NAME = re.compile(r"^(?P<type>[A-Za-z][A-Za-z0-9]*?)(?:\d+)(?:/.*)?$")


def kernel_op_type(name: str, op_type: str = "") -> str:
    """The OpType of a kernel: the ``Type`` column when known, else read from the name (formats §13):
    ``aclnnMm_TransData_TransData`` -> TransData, ``trans_TransData_3`` -> TransData,
    ``Conv2D17`` -> Conv2D, ``StatelessDropOutGenMask23/DSA...`` -> StatelessDropOutGenMask."""
    if op_type and op_type not in ("N/A", "NULL"):
        return op_type
    m = _TRANS_NAME.match(name)
    if m:
        return m.group("type")
    if name.rsplit("_", 1)[-1] == "MemSet":  # trans_TransData_27_MemSet, aclnnMm_MatMulCommon_MemSet
        return "MemSet"
    m = _ACLNN_NAME.match(name)
    if m:
        return m.group("type")
    m = _ACL_OP_NAME.match(name)
    if m:
        return m.group("type")
    return _TRAILING_NUMBER.sub("", name)


def kernel_types(profile: Profile) -> np.ndarray:
    """``kernel_op_type`` per kernel row, computed once per distinct (name, type) pair."""
    k = profile.kernels
    if not len(k):
        return np.zeros(0, dtype=object)
    names, types = k["name"], k["type"]
    if isinstance(names.dtype, pd.CategoricalDtype) and isinstance(types.dtype, pd.CategoricalDtype):
        nc = names.cat.codes.to_numpy().astype(np.int64)
        tc = types.cat.codes.to_numpy().astype(np.int64)
        codes, uniques = pd.factorize(nc * (len(types.cat.categories) + 1) + tc + 1)
        ncat = np.asarray(names.cat.categories.astype(str), dtype=object)
        tcat = np.asarray(types.cat.categories.astype(str), dtype=object)
        width = len(tcat) + 1
        table = np.array([kernel_op_type(ncat[u // width] if u // width >= 0 else "",
                                         tcat[u % width - 1] if u % width else "") for u in uniques], dtype=object)
        return table[codes]
    pairs = pd.MultiIndex.from_arrays([strs(names), strs(types)])
    codes, uniques = pd.factorize(pairs)
    table = np.array([kernel_op_type(n, t) for n, t in uniques], dtype=object)
    return table[codes]


def is_task(profile: Profile) -> np.ndarray:
    """Kernel rows that are operator tasks (compute kernels, communication), not copies, waits or
    markers (the time model's classes)."""
    return timemodel.is_class(profile.kernels, timemodel.TaskClass.COMPUTE, timemodel.TaskClass.COMMUNICATION)


def kernels_in_steps_mask(profile: Profile) -> np.ndarray:
    """Kernels inside profiled steps (all of them when the profile has no device step ids)."""
    step = profile.kernels["step"].to_numpy(np.int64)
    if (step >= 0).any():
        return step >= 0
    return np.ones(len(step), dtype=bool)


def in_steps(profile: Profile, starts: np.ndarray) -> np.ndarray:
    """Which start times (ns) fall inside a ProfilerStep range (all, when there are none)."""
    return step_windows.in_steps(profile.steps, starts)


def host_scope_mask(profile: Profile) -> np.ndarray:
    """record_function scopes: ProfilerStep#N, Optimizer.step#..., enumerate(DataLoader)#..., DDP's
    ``DistributedDataParallel.forward`` (Kineto ``user_annotation``)."""
    h = profile.host_ops
    if not len(h):
        return np.zeros(0, dtype=bool)
    scope_name = mask(h["name"], lambda n: ("#" in n) or n.startswith("ProfilerStep"))
    return scope_name | mask(h["cat"], "user_annotation".__eq__)


def parents(profile: Profile) -> np.ndarray:
    h = profile.host_ops
    n = len(h)
    p = h["parent"].to_numpy(np.int64) if n else np.zeros(0, np.int64)
    return np.where((p >= 0) & (p < n), p, -1)


def nearest_marked(parent: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """Per row: itself when marked, else its nearest marked ancestor, else -1."""
    return fill_from_ancestors(np.where(marked, np.arange(len(marked), dtype=np.int64), -1), parent)


def fill_from_ancestors(values: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Each row's value, else its nearest ancestor's (values < 0 mean "none"). Pointer doubling:
    each round doubles the distance looked at, so log2(depth) array passes."""
    v = values.astype(np.int64, copy=True)
    p = parent.astype(np.int64, copy=True)
    while True:
        need = (v < 0) & (p >= 0)
        if not need.any():
            return v
        pi = np.where(need, p, 0)
        v, p = np.where(need, v[pi], v), np.where(need, p[pi], p)


def outermost_ops(profile: Profile) -> np.ndarray:
    """Framework ops not nested in another framework op (their parent is a scope or nothing)."""
    scope = host_scope_mask(profile)
    par = parents(profile)
    ok = par < 0
    has = par >= 0
    ok[has] = scope[par[has]]
    return ok & ~scope


def rows_named(profile: Profile, names: Iterable[str]) -> np.ndarray:
    h = profile.host_ops
    if not len(h):
        return np.zeros(0, dtype=bool)
    return mask(h["name"], set(names).__contains__)  # writable: callers add rows


def rows_prefixed(profile: Profile, prefix: str) -> np.ndarray:
    h = profile.host_ops
    if not len(h):
        return np.zeros(0, dtype=bool)
    return mask(h["name"], lambda n: n.startswith(prefix))


def api_events(profile: Profile, names: Iterable[str]) -> pd.DataFrame:
    """Host (CANN/CUDA runtime) events with one of ``names`` (``AscendCL@`` prefix optional),
    inside the profiled steps, with a ``api`` column holding the bare API name."""
    ev = profile.host_events
    if not len(ev):
        return ev.assign(api=pd.Series([], dtype=object))
    wanted = set(names)
    sel = mask(ev["name"], lambda n: _API_PREFIX.sub("", n) in wanted)
    sel &= in_steps(profile, ev["start_ns"].to_numpy(np.int64))
    out = ev[sel].copy()
    out["api"] = [_API_PREFIX.sub("", n) for n in strs(out["name"])]
    return out


def mean(values: np.ndarray) -> float:
    return float(np.mean(values)) if len(values) else 0.0


def matches(values: np.ndarray, pattern: re.Pattern[str], *, full_start: bool = False) -> np.ndarray:
    """``pattern.search`` (``match`` with ``full_start``) per value, evaluated once per distinct value."""
    if not len(values):
        return np.zeros(0, dtype=bool)
    codes, uniques = pd.factorize(np.asarray(values, dtype=object))
    test = pattern.match if full_start else pattern.search
    table = np.array([bool(test(str(u))) for u in uniques], dtype=bool)
    return table[codes]


def strs(col: pd.Series) -> np.ndarray:
    """A text column as an object array, decoded once per category (``astype(str)`` on a pandas 3
    categorical builds an Arrow string array of every row first: ~10x slower)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = np.asarray(col.cat.categories.astype(str), dtype=object)
        codes = col.cat.codes.to_numpy()
        out = np.full(len(col), "", dtype=object)
        ok = codes >= 0
        out[ok] = cats[codes[ok]]
        return out
    return np.asarray(col.astype(str), dtype=object)


def mask(col: pd.Series, test: Callable[[str], object]) -> np.ndarray:
    """``bool(test(value))`` per row, evaluated once per distinct value (a writable array)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        table = np.array([bool(test(str(c))) for c in col.cat.categories], dtype=bool)
        codes = col.cat.codes.to_numpy()
        out = np.zeros(len(col), dtype=bool)
        ok = codes >= 0
        out[ok] = table[codes[ok]]
        if (~ok).any():
            out[~ok] = bool(test(""))
        return out
    codes, uniques = pd.factorize(np.asarray(col, dtype=object))
    table = np.array([bool(test(str(u))) for u in uniques], dtype=bool)
    return table[codes] if len(codes) else np.zeros(0, dtype=bool)
