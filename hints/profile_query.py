"""Profile queries the rules share: text columns, step windows, host op trees, kernel OpTypes and
classes, CANN API events, and operator-sequence matching (the advisor's "Affinity API" search).

Everything works on the model's columnar tables with numpy: name tests run once per distinct
category (a few thousand) and are broadcast through the category codes; ancestor questions walk
``host_ops.parent`` one vectorised pass per nesting level (mapping's own walk) -- so a profile
with millions of ops costs a handful of array passes, not a Python loop per op. What each device
task is (its class, its OpType) is the time model's answer; nothing here classifies kernels again.
The source side (where in the user's code) is :mod:`.source_query`.
"""

from __future__ import annotations

from enum import Enum

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import msgspec
import numpy as np
import pandas as pd

from msprof_lsp.mapping.interning import per_distinct
from msprof_lsp.mapping.profile import comm_time, linking, step_windows, timemodel
from msprof_lsp.mapping.profile.model import CommOp, Persist, Profile, ProfileKind, array_bytes, bytes_array
from msprof_lsp.mapping.profile.shapes import gemm_flops, io_bytes, parse_shapes
from msprof_lsp.mapping.profile.timemodel import KernelClass
from msprof_lsp.mapping.numbers import int64_of
from msprof_lsp.mapping.units import format_us, ns_to_us

from .config import Thresholds
from .context import RuleContext

# ---------------------------------------------------------------------------------------------
# Columns


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
    """``bool(test(value))`` per row, evaluated once per distinct value (a writable array; a
    missing category is tested as "")."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        table = np.array([bool(test(str(c))) for c in col.cat.categories], dtype=bool)
        codes = col.cat.codes.to_numpy()
        out = np.zeros(len(col), dtype=bool)
        ok = codes >= 0
        out[ok] = table[codes[ok]]
        if (~ok).any():
            out[~ok] = bool(test(""))
        return out
    return per_distinct(np.asarray(col, dtype=object), lambda u: bool(test(_text(u))), bool)


def matches(values: np.ndarray, pattern: re.Pattern[str], *, full_start: bool = False) -> np.ndarray:
    """``pattern.search`` (``match`` with ``full_start``) per value, evaluated once per distinct value."""
    test = pattern.match if full_start else pattern.search
    return per_distinct(np.asarray(values, dtype=object), lambda u: bool(test(_text(u))), bool)


def _text(value: object) -> str:
    """A cell as the tests see it: a missing value (None, NaN) is "", as a missing category is."""
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def mean(values: np.ndarray) -> float:
    return float(np.mean(values)) if len(values) else 0.0


def format_ns_us(ns: float) -> float:
    """ns -> µs rounded to 0.1 (evidence numbers; a plain float for JSON)."""
    return round(float(ns_to_us(ns)), 1)


def mask_of(n: int, rows: Iterable[int]) -> np.ndarray:
    m = np.zeros(n, dtype=bool)
    m[list(rows)] = True
    return m


# ---------------------------------------------------------------------------------------------
# Device kernels: OpType and class come from the time model


def kernel_types(kernels: pd.DataFrame) -> np.ndarray:
    """The OpType per row of a kernel table (``profile.kernels`` or any subset of it)."""
    return timemodel.op_types(kernels)


# The pipes the advisor's operator-bound check reads (its ``vec/mac/scalar/mte1/mte2/mte3_ratio``);
# fixpipe is not among them. Each exists on the cube (``aic_``) and vector (``aiv_``) core.
PIPES = ("vec", "mac", "scalar", "mte1", "mte2", "mte3")
COMPUTE_PIPES = frozenset({"vec", "mac"})
TRANSFER_PIPES = frozenset({"mte1", "mte2", "mte3", "fixpipe"})  # moving data, not computing


def pipe_ratios(kernels: pd.DataFrame) -> pd.DataFrame | None:
    """Per kernel and pipe, the busy share of its duration from the PipeUtilization counters
    (``pmu:{aic,aiv}_<pipe>_ratio``, text, DB and msprof exports alike): the larger of the two
    cores' ratios, 0 where neither is written. None when the profile has no pipe counters (other
    ``aic_metrics`` sets, Level0). A row whose ratios are all 0 has no counter data (HCCL, AI_CPU,
    over-long ops written ``N/A``)."""
    out: dict[str, np.ndarray] = {}
    for pipe in PIPES:
        cols = [c for c in (f"pmu:aic_{pipe}_ratio", f"pmu:aiv_{pipe}_ratio") if c in kernels.columns]
        if not cols:
            continue
        vals = np.nan_to_num(kernels[cols].to_numpy(np.float64), nan=0.0)
        out[pipe] = np.clip(vals.max(axis=1), 0.0, 1.0)
    if not out:
        return None
    return pd.DataFrame(out, index=kernels.index)


PAGEABLE = re.compile(r"Pageable", re.I)  # Kineto "Memcpy HtoD (Pageable -> Device)": unpinned host memory
_H2D = re.compile(r"HtoD|host_to_device|H2D", re.I)
_D2H = re.compile(r"DtoH|device_to_host|D2H", re.I)


def copy_directions(profile: Profile) -> np.ndarray:
    """Per kernel row: "H2D", "D2H" or "" -- memory copies only (the time model's MEMCPY class),
    from the task name (Kineto ``Memcpy HtoD``/``DtoH``) or, for Ascend ``MEMCPY_ASYNC`` tasks,
    the name of the host op that launched them (``acl_memcpy_host_to_device``). Device-to-device
    copies, memsets and copies of unknown direction are ""."""
    k = profile.kernels
    out = np.full(len(k), "", dtype=object)
    copy = timemodel.is_class(k, timemodel.TaskClass.MEMCPY)
    if not copy.any():
        return out
    names = strs(k["name"])
    op = k["host_op"].to_numpy(np.int64)
    op_names = strs(profile.host_ops["name"]) if len(profile.host_ops) else np.zeros(0, dtype=object)
    for r in np.flatnonzero(copy):
        text = str(names[r])
        if 0 <= op[r] < len(op_names):
            text += " " + str(op_names[op[r]])
        out[r] = "H2D" if _H2D.search(text) else "D2H" if _D2H.search(text) else ""
    return out


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


# ---------------------------------------------------------------------------------------------
# Host op trees


def parents(profile: Profile) -> np.ndarray:
    """``host_ops.parent`` with anything out of range as -1 (no parent)."""
    h = profile.host_ops
    n = len(h)
    p = h["parent"].to_numpy(np.int64) if n else np.zeros(0, np.int64)
    return np.where((p >= 0) & (p < n), p, -1)


def nearest_marked(parent: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """Per row: itself when marked, else its nearest marked ancestor, else -1."""
    return linking.nearest_on_chain(parent, marked)


def strict_ancestor(marked: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Nearest strict ancestor that is ``marked`` (-1 none), per row."""
    if not len(marked):
        return np.empty(0, dtype=np.int64)
    own = nearest_marked(parent, marked)
    return np.where(parent >= 0, own[np.where(parent >= 0, parent, 0)], -1)


def op_stack(profile: Profile, row: int) -> int:
    """The call stack of a host op: its own, else its nearest enclosing op's (-1 none)."""
    return linking.nearest_stack(profile.host_ops, row)[0]


def host_scope_mask(profile: Profile) -> np.ndarray:
    """record_function scopes: ProfilerStep#N, Optimizer.step#..., enumerate(DataLoader)#..., DDP's
    ``DistributedDataParallel.forward`` (Kineto ``user_annotation``)."""
    h = profile.host_ops
    if not len(h):
        return np.zeros(0, dtype=bool)
    scope_name = mask(h["name"], lambda n: ("#" in n) or n.startswith("ProfilerStep"))
    return scope_name | mask(h["cat"], "user_annotation".__eq__)


def outermost_ops(profile: Profile) -> np.ndarray:
    """Host ops (any kind) not nested in another op: their parent is a scope or nothing."""
    scope = host_scope_mask(profile)
    par = parents(profile)
    ok = par < 0
    has = par >= 0
    ok[has] = scope[par[has]]
    return ok & ~scope


def is_framework_op(name: str) -> bool:
    return name.startswith(("aten::", "npu::"))


_BACKWARD_NODE = re.compile(r"^autograd::engine::evaluate_function|Backward\d*$")


def is_backward_node(name: str) -> bool:
    """An autograd node scope (``autograd::engine::evaluate_function: ReluBackward0``, ``ReluBackward0``)."""
    return bool(_BACKWARD_NODE.search(name))


def backward_mask(profile: Profile) -> np.ndarray:
    """Host ops that run inside an autograd node (the backward pass), the nodes included."""
    h = profile.host_ops
    if not len(h):
        return np.zeros(0, dtype=bool)
    return nearest_marked(parents(profile), mask(h["name"], is_backward_node)) >= 0


def outermost_framework_ops(profile: Profile, *, forward_only: bool = True) -> np.ndarray:
    """Boolean mask of ``aten::``/``npu::`` ops not nested in another such op (the ops user
    code called: ``aten::linear`` above ``aten::addmm``, ``aten::dropout`` above
    ``npu::_npu_dropout``), inside the profiled steps; by default outside the backward pass,
    whose op sequences mirror the forward ones."""
    h = profile.host_ops
    if not len(h):
        return np.zeros(0, dtype=bool)
    fw = mask(h["name"], is_framework_op)
    top = fw & (strict_ancestor(fw, parents(profile)) < 0)
    if forward_only:
        top &= ~backward_mask(profile)
    return top & in_steps(profile, h["start_ns"].to_numpy(np.int64))


# Producers that only a PyTorch program writes: torch_npu.profiler's exports and torch.profiler's trace.
PYTORCH_KINDS = frozenset({ProfileKind.TORCH_NPU, ProfileKind.TORCH_NPU_DB, ProfileKind.KINETO})


def profile_is_pytorch(profile: Profile) -> bool:
    """Whether the profiled program is a PyTorch one, so PyTorch advice applies: a torch_npu or
    torch.profiler export, or an msprof CLI capture with a framework layer (``aten::``/``npu::``
    host ops) or torch versions in its metadata. An msprof run of anything else (a plain ACL
    program, another framework) has none of these; ``source_query.runs_pytorch`` also asks the
    source."""
    if profile.meta.kind in PYTORCH_KINDS or profile.meta.torch_version or profile.meta.torch_npu_version:
        return True
    h = profile.host_ops
    return bool(len(h)) and bool(mask(h["name"], is_framework_op).any())


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


def descendants(profile: Profile, rows: Iterable[int]) -> np.ndarray:
    """Mask of host ops inside the subtrees of ``rows`` (the rows included)."""
    roots = mask_of(len(profile.host_ops), rows)
    if not roots.any():
        return roots
    return nearest_marked(parents(profile), roots) >= 0


def kernel_roots(profile: Profile, roots: np.ndarray, kernels: pd.DataFrame) -> np.ndarray:
    """Per kernel row: the ``roots`` host op whose subtree launched it (-1 none)."""
    owner = nearest_marked(parents(profile), roots)
    if not len(owner):
        return np.full(len(kernels), -1, dtype=np.int64)
    launched = kernels["host_op"].to_numpy(np.int64)
    ok = (launched >= 0) & (launched < len(owner))
    return np.where(ok, owner[np.where(ok, launched, 0)], -1)


def kernel_time_per_root(profile: Profile, roots: np.ndarray, kernels: pd.DataFrame | None = None) -> np.ndarray:
    """Device ns of the kernels launched inside each root op's subtree (indexed by host op row)."""
    out = np.zeros(len(profile.host_ops), dtype=np.int64)
    k = profile.kernels_in_steps() if kernels is None else kernels
    if not len(k) or not len(out):
        return out
    root = kernel_roots(profile, roots, k)
    sel = root >= 0
    np.add.at(out, root[sel], k["dur_ns"].to_numpy(np.int64)[sel])
    return out


def backward_roots(profile: Profile, roots: np.ndarray, kernels: pd.DataFrame) -> np.ndarray:
    """Per kernel row: for a backward kernel, the ``roots`` host op whose subtree holds the forward
    op its autograd node was linked to (``kernels.fwd_op``: the fwdbwd flow or the sequence number);
    -1 for forward kernels and unlinked ones."""
    owner = nearest_marked(parents(profile), roots)
    if not len(owner):
        return np.full(len(kernels), -1, dtype=np.int64)
    fwd = kernels["fwd_op"].to_numpy(np.int64)
    ok = kernels["backward"].to_numpy(bool) & (fwd >= 0) & (fwd < len(owner))
    return np.where(ok, owner[np.where(ok, fwd, 0)], -1)


def kernels_under(profile: Profile, rows: Iterable[int], kernels: pd.DataFrame | None = None) -> pd.DataFrame:
    """The kernels launched inside the subtrees of ``rows``."""
    k = profile.kernels_in_steps() if kernels is None else kernels
    roots = mask_of(len(profile.host_ops), rows)
    if not roots.any() or not len(k):
        return k.iloc[0:0]
    return k[kernel_roots(profile, roots, k) >= 0]


def op_time_ns(profile: Profile, rows: Sequence[int], per_root_device: np.ndarray | None = None) -> int:
    """Time of the ops: device time of their kernels, or host duration when the profile has no
    device kernels at all (Kineto CPU traces)."""
    if not len(rows):
        return 0
    if len(profile.kernels):
        dev = per_root_device if per_root_device is not None else kernel_time_per_root(profile, mask_of(len(profile.host_ops), rows))
        return int(dev[list(rows)].sum())
    return int(profile.host_ops["dur_ns"].to_numpy(np.int64)[list(rows)].sum())


# ---------------------------------------------------------------------------------------------
# CANN runtime: API events and versions

_API_PREFIX = re.compile(r"^[A-Za-z]+@")


# The allocator calls of the CANN / CUDA runtime: timed by NPU109, left out of NPU108's sync time
# when they run inside a blocking op at start-up.
ALLOC_APIS = frozenset({"aclMallocMemInner", "aclrtFreePhysical", "aclrtFree", "cudaMalloc", "cudaFree"})


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


# CANN versions ("8.0.RC3", "7.0.0", "8.5.0"): RCs come before the release of the same x.y
_CANN_RE = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(?:(?P<rc>RC|rc|T|t)?(?P<n>\d+)))?")


def cann_key(version: str) -> tuple[int, int, int, int] | None:
    m = _CANN_RE.match(version or "")
    if not m:
        return None
    major, minor, n = int64_of(m.group(1)), int64_of(m.group(2)), int64_of(m.group("n") or "0")
    if major is None or minor is None or n is None:  # 5,000 digits or non-ASCII digits: no version
        return None
    return major, minor, 0 if m.group("rc") else 1, n


def cann_at_least(version: str, minimum: str) -> bool:
    have, need = cann_key(version), cann_key(minimum)
    return have is None or need is None or have >= need


# ---------------------------------------------------------------------------------------------
# Operator sequences (docs/rules/README.md "Operator sequences")
#
# The outermost ``aten::``/``npu::`` ops of each host thread, in time order, with ``aten::``
# stripped, become one string ``-pow--mean--add--rsqrt--mul-``; a rule pattern such as
# ``(pow){0,1}-(mean){0,1}-(add){0,1}-rsqrt-mul-(type_as){0,1}`` becomes a regex over those
# ``-name-`` tokens, so a token only ever matches a whole op name and a match never straddles two
# threads (a ``-#-`` token separates them). One string per profile, one ``finditer`` per pattern.
# The kernel-only variant (profiles without framework ops, e.g. msprof CLI output) does the same
# over device kernel ``Type``s per stream (patterns in the same syntax, over OpTypes).

THREAD_BREAK = "#"
_ELEMENT_RE = re.compile(r"^\((?P<names>[\w|]+)\)(?P<quant>\{\d*,?\d*\}|[*+?])?$|^(?P<name>\w+)$")


def pattern_regex(rule: str) -> re.Pattern[str]:
    """``(slice|chunk)-silu-mul`` -> a regex over ``-name-`` tokens. Elements: ``name`` or
    ``(a|b)`` with an optional quantifier (``{0,1}``, ``*``, ...)."""
    parts = []
    for element in rule.strip("-").split("-"):
        m = _ELEMENT_RE.match(element.strip())
        if m is None:
            raise ValueError(f"bad sequence pattern element {element!r} in {rule!r}")
        names = m.group("names") or m.group("name")
        alts = "|".join(re.escape(n) for n in names.split("|"))
        parts.append(f"(?:-(?:{alts})-){m.group('quant') or ''}")
    return re.compile("".join(parts))


@dataclass(frozen=True, slots=True)
class Tokens:
    """One string of ``-name-`` tokens and the table rows behind them."""

    rows: np.ndarray  # table row per token (-1 for thread breaks)
    names: list[str]
    text: str
    starts: np.ndarray  # char offset of each token
    # matches per regex: the tokens are the profile's (kept with it), so a search runs once per
    # profile, not once per rule run (the editor re-runs the rules after every pause in typing)
    found: dict[tuple[str, int], list[tuple[int, int]]] = field(default_factory=dict, repr=False, compare=False)

    def find(self, regex: re.Pattern[str]) -> list[tuple[int, int]]:
        """Token ranges [a, b) of every (non-overlapping) match, in order."""
        key = (regex.pattern, regex.flags)
        hit = self.found.get(key)
        if hit is not None:
            return list(hit)
        out = []
        for m in regex.finditer(self.text):
            a = int(np.searchsorted(self.starts, m.start()))
            b = int(np.searchsorted(self.starts, m.end())) if m.end() < len(self.text) else len(self.rows)
            if b > a and (self.rows[a:b] >= 0).all():
                out.append((a, b))
        self.found[key] = out
        return list(out)

    def sequence(self, a: int, b: int) -> str:
        """``pow-mean-add-rsqrt-mul`` for the tokens [a, b)."""
        return "-".join(self.names[a:b])


def _tokens(rows: np.ndarray, names: np.ndarray, groups: np.ndarray) -> Tokens:
    """Tokens for ``rows`` (already in group, time order) with a break between groups."""
    out_rows: list[int] = []
    out_names: list[str] = []
    prev = None
    for r, n, g in zip(rows.tolist(), names.tolist(), groups.tolist()):
        if prev is not None and g != prev:
            out_rows.append(-1)
            out_names.append(THREAD_BREAK)
        out_rows.append(r)
        out_names.append(n)
        prev = g
    return _joined(np.asarray(out_rows, dtype=np.int64), out_names)


def _joined(rows: np.ndarray, names: list[str]) -> Tokens:
    lengths = np.fromiter((len(n) + 2 for n in names), dtype=np.int64, count=len(names))
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])) if len(lengths) else np.zeros(0, dtype=np.int64)
    text = "".join(f"-{n}-" for n in names)
    return Tokens(rows, names, text, starts)


class _TokensRecord(msgspec.Struct, array_like=True, frozen=True):
    rows: bytes  # little-endian int64 per token
    names: list[str]
    text: str
    starts: bytes  # little-endian int64 per token
    found: list[tuple[str, int, bytes]]  # per regex searched (pattern, flags): its [a, b) ranges as int64 pairs


_TOKENS_DECODER = msgspec.msgpack.Decoder(_TokensRecord)


def _encode_tokens(toks: Tokens) -> bytes:
    found = [(pattern, flags, array_bytes(np.asarray(ranges, np.int64).reshape(-1)))
             for (pattern, flags), ranges in toks.found.items()]
    return msgspec.msgpack.encode(_TokensRecord(array_bytes(toks.rows), toks.names, toks.text, array_bytes(toks.starts),
                                                found))


def _decode_tokens(data: bytes) -> Tokens:
    rec = _TOKENS_DECODER.decode(data)
    n = len(rec.names)
    rows, starts = bytes_array(rec.rows, n), bytes_array(rec.starts, n)  # ValueError: not one per name
    if n and (starts[0] != 0 or starts[-1] + len(rec.names[-1]) + 2 != len(rec.text)):
        raise ValueError("token offsets do not match the text")
    toks = Tokens(rows, rec.names, rec.text, starts)
    breaks = np.concatenate([[0], np.cumsum(rows < 0)])  # thread breaks before each token
    for pattern, flags, raw in rec.found:  # the searches of the run that stored them, as find gives them
        pairs = bytes_array(raw)
        if len(pairs) % 2:
            raise ValueError("a match range without its end")
        a, b = pairs[0::2], pairs[1::2]
        if ((a < 0) | (b <= a) | (b > n)).any() or (a[1:] < b[:-1]).any() or (breaks[b] > breaks[a]).any():
            raise ValueError("a match outside the tokens, overlapping another or across a thread break")
        toks.found[(pattern, flags)] = list(zip(a.tolist(), b.tolist()))
    return toks


TOKENS_PERSIST = Persist(_encode_tokens, _decode_tokens)
"""The token strings travel with the profile's cache entry (text and offsets as computed: joining
the text again would cost what computing the tokens does)."""


def host_tokens(ctx: RuleContext) -> Tokens:
    """Outermost framework ops per host thread, time order, ``aten::`` stripped (kept with the profile)."""
    profile = ctx.profile
    return profile.derived.memo("tokens/host", profile.fields(), lambda: _host_tokens(profile), TOKENS_PERSIST)


def _host_tokens(profile: Profile) -> Tokens:
    h = profile.host_ops
    top = np.flatnonzero(outermost_framework_ops(profile))
    rows = top
    names = np.zeros(0, dtype=object)
    thread = np.zeros(0, dtype=np.int64)
    if len(top):
        sub = h.iloc[top]
        rows = top[np.lexsort((sub["start_ns"].to_numpy(), sub["tid"].to_numpy(), sub["pid"].to_numpy()))]
        names = np.array([n[6:] if n.startswith("aten::") else n for n in strs(h["name"])[rows]], dtype=object)
        thread = h["pid"].to_numpy(np.int64)[rows] * (1 << 32) + h["tid"].to_numpy(np.int64)[rows]
    return _tokens(rows, names, thread)


def kernel_tokens(ctx: RuleContext) -> Tokens:
    """Device kernel OpTypes per (device, stream), start order, of the profiled steps (kept with the profile)."""
    profile = ctx.profile
    return profile.derived.memo("tokens/kernel", profile.fields(), lambda: _kernel_tokens(profile), TOKENS_PERSIST)


def _kernel_tokens(profile: Profile) -> Tokens:
    k = profile.kernels_in_steps()
    order = np.lexsort((k["start_ns"].to_numpy(), k["stream"].to_numpy(), k["device"].to_numpy()))
    rows = k.index.to_numpy(np.int64)[order]
    names = kernel_types(k)[order]
    group = k["device"].to_numpy(np.int64)[order] * (1 << 32) + k["stream"].to_numpy(np.int64)[order]
    return _tokens(rows, names, group)


# ---------------------------------------------------------------------------------------------
# Communication packets: communication.json's Size Distribution (the DB's CommAnalyzerBandwidth)

BYTES_PER_MB = 1_000_000  # communication.json's MB: Transit Size(MB) 28.647232 = 12 x 2.064384 + 2 x 1.937312
GRADIENT_COLLECTIVE = comm_time.GRADIENT


@dataclass(frozen=True, slots=True)
class Packets:
    """The transfers of one size on one link of one communication op."""

    op: str  # hcom_allReduce__586_0_1
    link: str  # HCCS, PCIE, SIO, SDMA, RDMA
    size_bytes: int
    count: int
    total_ns: int  # transfer time of all ``count`` packets, as the link's Size Distribution says
    # ``total_ns`` as a part of the op's Transit Time (comm_time.wall_factor): link times of an op
    # add up past its Transit when links run at once, so only this one is a share of a step
    wall_ns: int = -1


# Beyond these a Size Distribution entry is not a transfer (2^53 B, 9 PB, a packet; 9e12 ms, the
# int64 ns range): skipped, so that the byte and ns sums stay exact int64 figures.
MAX_PACKET_MB = 2.0**53 / BYTES_PER_MB
MAX_PACKET_MS = 9e12


def packets(ops: Iterable[CommOp], *, gradient_only: bool = True) -> list[Packets]:
    """Every (op, link, size) of the ops' Size Distributions; malformed entries are skipped.
    ``gradient_only``: only the all-reduce / reduce-scatter / all-gather ops."""
    out: list[Packets] = []
    for op in ops:
        if gradient_only and not GRADIENT_COLLECTIVE.search(op.name):
            continue
        factor = comm_time.wall_factor(op)
        for link, info in op.bandwidth.items():
            dist = info.get("Size Distribution") if isinstance(info, dict) else None
            for size, val in (dist or {}).items():
                try:
                    mb, count, ms = float(size), int(val[0]), float(val[1])
                except (TypeError, ValueError, IndexError, OverflowError):  # OverflowError: int(inf)
                    continue
                # a size or time past float range (1e400 in the file) is skipped like text
                if 0 < count < 2**53 and 0 <= mb < MAX_PACKET_MB and 0 <= ms < MAX_PACKET_MS:
                    ns = round(ms * 1_000_000)
                    out.append(Packets(op.name, str(link), round(mb * BYTES_PER_MB), count, ns, round(ns * factor)))
    return out


SDMA_LINK_GROUP = frozenset({"SDMA", "HCCS", "PCIE", "SIO"})  # intra-node links; RDMA is between nodes


def small_packets(ops: Iterable[CommOp], *, sdma_mb: float, rdma_mb: float) -> dict[str, dict]:
    """Per link group (``SDMA`` for the intra-node links, ``RDMA``) of the gradient collectives:
    packets, the ones under the group's limit (MB of 10^6 B), their share of the count and of the
    bytes (the advisor's packet analysis counts packets) and their transfer time: ``small_ns`` summed
    over the links as the file writes it, ``small_wall_ns`` the part of the ops' Transit Time it is
    (``Packets.wall_ns``), never more than that Transit."""
    limits_mb = {"SDMA": float(sdma_mb), "RDMA": float(rdma_mb)}
    out: dict[str, dict] = {}
    for p in packets(ops):
        group = "SDMA" if p.link in SDMA_LINK_GROUP else p.link
        if group not in limits_mb:
            continue
        e = out.setdefault(group, {"packets": 0, "small": 0, "bytes": 0, "small_bytes": 0, "small_ns": 0,
                                   "small_wall_ns": 0, "limit_mb": limits_mb[group]})
        e["packets"] += p.count
        e["bytes"] += p.count * p.size_bytes
        if p.size_bytes < limits_mb[group] * BYTES_PER_MB:
            e["small"] += p.count
            e["small_bytes"] += p.count * p.size_bytes
            e["small_ns"] += p.total_ns
            e["small_wall_ns"] += p.wall_ns
    for e in out.values():
        e["small_ratio"] = e["small"] / e["packets"] if e["packets"] else 0.0
        e["small_bytes_ratio"] = e["small_bytes"] / e["bytes"] if e["bytes"] else 0.0
    return {k: v for k, v in out.items() if v["packets"]}



GRADIENT_ROLE = frozenset({comm_time.CommRole.GRADIENT})


@dataclass(frozen=True, slots=True)
class CommDiagnosis:
    """How the analysed rank's gradient collectives spent their time, and the rank they wait for."""

    split: comm_time.CommSplit
    late_rank: int | None  # None: one rank only, or no rank waited for markedly less

    @property
    def transfer_bound(self) -> bool:
        return self.split.transfer_bound

    def words(self) -> str:
        """``transfers 3,683 µs, waits 5,941 µs, idle 96.4 ms of 106.0 ms``, per step."""
        s = self.split
        return (f"transfers {format_us(s.transit_ns / 1000)}, waits {format_us(s.wait_ns / 1000)}, "
                f"idle {format_us(s.idle_ns / 1000)} of {format_us(s.elapse_ns / 1000)}")

    def as_dict(self) -> dict:
        return {**self.split.as_dict(), "late_rank": self.late_rank, "transfer_bound": self.transfer_bound}


def gradient_comm(ctx: RuleContext) -> CommDiagnosis | None:
    """The gradient collectives' time split (communication.json / CommAnalyzerTime) of the analysed
    rank, and the late rank: from the other ranks of a cluster_communication.json, else from the
    job's ranks (``ctx.cluster``)."""
    per_rank = comm_time.split_by_rank(ctx.profile.comm_ops, GRADIENT_ROLE)
    if not per_rank:
        return None
    cluster = ctx.cluster
    own = cluster.analysed_rank if cluster is not None and cluster.analysed_rank in per_rank else None
    if own is None:
        own = -1 if -1 in per_rank else max(per_rank, key=lambda r: per_rank[r].elapse_ns)
    waits = {r: s.wait_ns for r, s in per_rank.items()}
    if len(waits) < 2 and cluster is not None:
        waits = {r.rank: r.comm_wait_ns for r in cluster.ranks if r.comm_wait_ns >= 0}
        own_key = cluster.analysed_rank
    else:
        own_key = own
    return CommDiagnosis(per_rank[own], comm_time.late_rank(waits, own_key))

# The advisor's names: its tune-ops file, its AOE command (job type 2: operator tuning) and the
# number of operators it lists (OPERATOR_OUT_TOPK).
TUNE_OPS_FILE = "operator_tuning_file.cfg"
AOE_DUMP = "./aoe_dump"
AOE_COMMAND = f"aoe --job_type=2 --model_path={AOE_DUMP} --tune_ops_file={TUNE_OPS_FILE}"
TUNE_TOPK = 10


class PipeBound(str, Enum):
    """What limits a kernel, from its PipeUtilization counters (``kernel_bounds``). Not the critical
    path's ``Bound`` (what a line's time on the path waits for: host, sync, bandwidth, compute)."""

    COMPUTE = "compute-bound"  # the cube (mac) or vector (vec) pipe at its limit
    MEMORY = "memory-bound"  # a transfer pipe (mte1/mte2/mte3/fixpipe) at its limit
    SCALAR = "scalar-bound"
    NONE = "no-bound"  # no pipe at its limit: tiling or scheduling limits it
    NO_DATA = "no counters"


# The counters are written with 3 decimals: a mean of them may miss its threshold by float
# rounding alone, so ratios are compared to 9 decimals.
_DECIMALS = 9


def at_least(ratio: float, threshold: float) -> bool:
    return round(ratio, _DECIMALS) >= round(threshold, _DECIMALS)


@dataclass(frozen=True, slots=True)
class BoundLimits:
    """The busy ratios (0..1) at which a pipe limits a kernel: per kernel class the advisor's
    thresholds for the pipes it reads; ``pipe`` for every other pipe and class."""

    cube_mac: float
    cube_mte2: float
    fa_mte2: float
    fa_pipe: float
    vector_pipe: float
    pipe: float

    @classmethod
    def of(cls, t: Thresholds) -> "BoundLimits":
        return cls(t.cube_mac_bound_percent / 100, t.cube_mte2_bound_percent / 100, t.fa_mte2_bound_percent / 100,
                   t.fa_pipe_bound_percent / 100, t.vector_pipe_bound_percent / 100, t.pipe_bound_percent / 100)

    def as_dict(self) -> dict[str, float]:
        return {f: round(getattr(self, f), 4) for f in self.__slots__}  # type: ignore[attr-defined]


# Per kernel class (and FlashAttention grad): the pipes judged with the class's own limit, in the
# advisor's order, each read from the core's own counter column (docs/numbers.md "Bound").
CLASS_PIPES: dict[tuple[KernelClass, bool], tuple[tuple[str, str, str], ...]] = {
    (KernelClass.CUBE, False): (("mac", "aic_mac_ratio", "cube_mac"), ("mte2", "aic_mte2_ratio", "cube_mte2")),
    (KernelClass.MIX, False): (("mac", "aic_mac_ratio", "cube_mac"), ("mte2", "aic_mte2_ratio", "cube_mte2")),
    (KernelClass.FLASH_ATTENTION, False): (("mte2", "aic_mte2_ratio", "fa_mte2"), ("vec", "aiv_vec_ratio", "fa_pipe")),
    (KernelClass.FLASH_ATTENTION, True): (("mte2", "aic_mte2_ratio", "fa_mte2"), ("fixpipe", "aic_fixpipe_ratio", "fa_pipe")),
    (KernelClass.VECTOR, False): (("mte2", "aiv_mte2_ratio", "vector_pipe"), ("mte3", "aiv_mte3_ratio", "vector_pipe"),
                                  ("vec", "aiv_vec_ratio", "vector_pipe")),
}


@dataclass(frozen=True, slots=True)
class BoundVerdict:
    """The one bound verdict of a group of kernels: what limits it, by which pipe, at what ratio."""

    bound: PipeBound
    label: str  # the pipes at their limit (mac, mte2, mac_and_mte2, ...); "" when none
    pipe: str  # the pipe the verdict names (the busiest one when none is at its limit)
    ratio: float  # its mean busy ratio
    threshold: float  # the limit it was judged against


def bound_verdict(cls: KernelClass, grad: bool, means: Mapping[str, float], lim: BoundLimits) -> BoundVerdict:
    """The verdict from mean ratios (``pmu`` column name without the prefix -> mean): each pipe is
    compared on its own with its limit -- never a sum of pipes. A transfer pipe at its limit makes
    the kernel memory-bound even when a compute pipe is at its limit too (it waits on data)."""
    own = CLASS_PIPES.get((cls, grad and cls is KernelClass.FLASH_ATTENTION), ())
    judged = [(pipe, float(means.get(col, 0.0)), getattr(lim, field)) for pipe, col, field in own]
    seen = {pipe for pipe, _, _ in own}
    for pipe in PIPES:
        vals = [means[c] for c in (f"aic_{pipe}_ratio", f"aiv_{pipe}_ratio") if c in means]
        if pipe not in seen and vals:
            judged.append((pipe, float(max(vals)), lim.pipe))
    if not any(r > 0 for _, r, _ in judged):
        return BoundVerdict(PipeBound.NO_DATA, "", "", 0.0, lim.pipe)
    hits = [j for j in judged if at_least(j[1], j[2])]
    if not hits:
        pipe, ratio, thr = max(judged, key=lambda j: j[1])
        return BoundVerdict(PipeBound.NONE, "", pipe, ratio, thr)
    pipe, ratio, thr = next((j for j in hits if j[0] in TRANSFER_PIPES), hits[0])
    bound = (PipeBound.MEMORY if pipe in TRANSFER_PIPES else PipeBound.COMPUTE if pipe in COMPUTE_PIPES
             else PipeBound.SCALAR)
    return BoundVerdict(bound, "_and_".join(j[0] for j in hits), pipe, ratio, thr)


@dataclass(frozen=True, slots=True)
class KernelBounds:
    """``bound_verdict`` per group of compute kernels with counters -- one (class, name, shapes,
    OpType), as the advisor groups them, the ratios averaged over the group's kernels."""

    group: np.ndarray  # per row of the kernel table: its group, -1 (not a compute kernel with counters)
    verdicts: list[BoundVerdict]  # per group
    means: list[dict[str, float]]  # per group: the mean of every ratio column read
    classes: list[KernelClass]  # per group
    op_types: list[str]  # per group
    dtypes: list[str]  # per group: the input dtypes

    def per_row(self) -> list[BoundVerdict | None]:
        return [self.verdicts[g] if g >= 0 else None for g in self.group.tolist()]


RATIO_COLUMNS = tuple(f"{core}_{pipe}_ratio" for pipe in (*PIPES, "fixpipe") for core in ("aic", "aiv"))


def kernel_bounds(kernels: pd.DataFrame, limits: BoundLimits) -> KernelBounds:
    """The bound verdicts of a kernel table (``profile.kernels`` or any subset). Rows whose
    counters are all 0 or ``N/A`` (HCCL, AI_CPU, over-long ops) have none, as the advisor skips them."""
    cols = [c for c in RATIO_COLUMNS if f"pmu:{c}" in kernels.columns]
    group = np.full(len(kernels), -1, dtype=np.int64)
    empty = KernelBounds(group, [], [], [], [], [])
    if not cols or not len(kernels):
        return empty
    vals = kernels[[f"pmu:{c}" for c in cols]].to_numpy(np.float64)
    has = (np.nan_to_num(vals, nan=0.0) > 0).any(axis=1) & timemodel.is_class(kernels, timemodel.TaskClass.COMPUTE)
    rows = np.flatnonzero(has)
    if not len(rows):
        return empty
    sub = kernels.iloc[rows]
    classes = timemodel.kernel_class_values(sub)
    types = kernel_types(sub)
    codes, uniques = timemodel.distinct_rows([classes, sub["name"], sub["input_shapes"], sub["output_shapes"], types,
                                              sub["input_dtypes"]])
    group[rows] = codes
    frame = pd.DataFrame(vals[rows], columns=cols).groupby(codes).mean()  # NaN (N/A) cells skipped
    out_v, out_m, out_c, out_t, out_d = [], [], [], [], []
    for g, (cls_v, _name, _i, _o, op_type, dtypes) in enumerate(uniques):
        means = {c: float(v) for c, v in frame.loc[g].items() if np.isfinite(v)}
        cls = KernelClass(cls_v)
        out_v.append(bound_verdict(cls, str(op_type).endswith("Grad"), means, limits))
        out_m.append(means)
        out_c.append(cls)
        out_t.append(str(op_type))
        out_d.append(str(dtypes))
    return KernelBounds(group, out_v, out_m, out_c, out_t, out_d)


def step_kernel_bounds(ctx: RuleContext, limits: BoundLimits) -> tuple[pd.DataFrame, KernelBounds]:
    """The profiled steps' kernels (``kernels_in_steps``) and their bound verdicts at ``limits``
    (the caller's ``BoundLimits.of(ctx.thresholds)``: what it reads stays in its code), once per
    rules run and limits: NPU202, NPU206 and NPU209 each read them."""
    def compute() -> tuple[pd.DataFrame, KernelBounds]:
        k = ctx.profile.kernels_in_steps()
        return k, kernel_bounds(k, limits)
    return ctx.derived(("step_kernel_bounds", limits), compute)


# ---------------------------------------------------------------------------------------------
# Achieved throughput (docs/numbers.md "Achieved throughput")

COMPARABLE_WORK = 4.0  # "comparable size": mean work per kernel within this factor either way


def kernel_work(kernels: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel: (work, is_flops). A matrix product (a Cube-class kernel) does 2·M·N·K FLOPs;
    any other kernel moves the bytes of its inputs and outputs. 0 where the shapes are unknown.
    Computed once per distinct (class, shapes, dtypes)."""
    n = len(kernels)
    if not n:
        return np.zeros(0), np.zeros(0, dtype=bool)
    cube = timemodel.kernel_class_values(kernels) == KernelClass.CUBE.value
    cols = [kernels[c] for c in ("input_shapes", "input_dtypes", "output_shapes", "output_dtypes")]
    codes, uniques = timemodel.distinct_rows([cube, *cols])
    table = np.zeros(len(uniques), dtype=np.float64)
    for i, (is_cube, ins, idt, outs, odt) in enumerate(uniques):
        a, b = parse_shapes(ins), parse_shapes(outs)
        table[i] = gemm_flops(a, b) if is_cube else io_bytes(a, idt) + io_bytes(b, odt)
    return table[codes], cube


def group_rates(kernels: pd.DataFrame, group: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group (``group``: a group per kernel row, -1 none): (mean work per kernel, achieved
    rate = its kernels' work / their device time, per second; NaN where the work is unknown)."""
    work, _ = kernel_work(kernels)
    dur = kernels["dur_ns"].to_numpy(np.float64)
    ok = (group >= 0) & (work > 0) & (dur > 0)
    tot_w = np.bincount(group[ok], weights=work[ok], minlength=n_groups)[:n_groups]
    tot_t = np.bincount(group[ok], weights=dur[ok], minlength=n_groups)[:n_groups]
    cnt = np.bincount(group[ok], minlength=n_groups)[:n_groups]
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_w = np.where(cnt > 0, tot_w / np.maximum(cnt, 1), np.nan)
        rate = np.where(tot_t > 0, tot_w / tot_t * 1e9, np.nan)
    return mean_w, rate


def rate_vs_best(kernels: pd.DataFrame, bounds: KernelBounds) -> np.ndarray:
    """Per bound group: its achieved rate over the best rate the profile shows for the same OpType
    and input dtypes at comparable work (itself included, so at most 1); NaN when unknown."""
    n = len(bounds.verdicts)
    mean_w, rate = group_rates(kernels, bounds.group, n)
    out = np.full(n, np.nan)
    peers: dict[tuple[str, str], list[int]] = {}
    for g in range(n):
        if np.isfinite(rate[g]):
            peers.setdefault((bounds.op_types[g], bounds.dtypes[g]), []).append(g)
    for members in peers.values():
        w = mean_w[members]
        r = rate[members]
        for i, g in enumerate(members):
            near = (w >= w[i] / COMPARABLE_WORK) & (w <= w[i] * COMPARABLE_WORK)
            out[g] = r[i] / r[near].max()
    return out
