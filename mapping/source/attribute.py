"""Attribution: profile time -> source spans (``attribute(profile, workspace) -> Attribution``).

How time reaches a line (docs/source-mapping.md has the user-facing version):

1. Every host op gets its *context* with vectorised pointer-jumping over ``host_ops.parent``: its
   effective stack (own, else the nearest ancestor's), the *user-called op* (the outermost
   ancestor with the same stack and module: ``aten::linear`` above ``aten::addmm`` above
   ``aclnnAddmm``), and for backward ops the forward op they were linked to (``fwd_op``).
2. Kernels inherit the context of the op that launched them (backward kernels: of the forward op),
   so work is grouped per distinct (stack, launching op, user-called op, module chain) -- a few
   thousand groups for millions of kernels -- and each group is anchored once (mapping.anchor).
3. Group decisions become per-kernel site indices with numpy; heat is a group-by over them.

Profiles without device kernels (Kineto CPU traces) use host op *self* time (duration minus the
children's) as the time source. The :class:`Attributor` keeps the per-group decisions, so after an
edit ``update_file`` only re-anchors that file's sites by function + call text (no profile walk).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from msprof_lsp.mapping.interning import Interner
from msprof_lsp.mapping.source.anchor import NO_USER_FRAME, Anchor, Anchorer, OpContext
from msprof_lsp.mapping.source.constructs import op_keys
from msprof_lsp.mapping.source.heat import MAX_SHAPES, Attribution, FunctionHeat, LineHeat, OpHeat, Site, SiteKind, SourceHeat, SpanHeat, TimeSource, merge_ops
from msprof_lsp.mapping.profile.frames import Frame
from msprof_lsp.mapping.profile.linking import row_groups, self_ns
from msprof_lsp.mapping.profile.model import Profile
from msprof_lsp.mapping.source.optimizer_anchor import adam_update_pattern, update_rows
from msprof_lsp.mapping.source.sequence_anchor import SequenceAnchorer, attached, shared_tensor
from msprof_lsp.mapping.source.shape_anchor import Form, ShapeAnchorer
from msprof_lsp.mapping.source.source_index import SourceIndex
from msprof_lsp.mapping.spans import Span
from msprof_lsp.mapping.profile.step_windows import in_steps
from msprof_lsp.mapping.profile.timemodel import column_codes, distinct_rows, work_mask
from msprof_lsp.mapping.source.workspace import SourceWorkspace



# ---------------------------------------------------------------------------------------------
# Vectorised helpers


def _jump_fill(values: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Each row's value, else its nearest ancestor's (values < 0 mean "none")."""
    v = values.copy()
    p = parent.copy()
    while True:
        need = (v < 0) & (p >= 0)
        if not need.any():
            return v
        pp = np.where(p >= 0, p, 0)
        v = np.where(need, v[pp], v)
        p = np.where(need, np.where(p >= 0, p[pp], -1), p)


def _jump_root(up: np.ndarray) -> np.ndarray:
    """Follow ``up`` pointers (roots point at themselves) to the end, by pointer doubling."""
    t = up.copy()
    while True:
        t2 = t[t]
        if np.array_equal(t2, t):
            return t
        t = t2



# ---------------------------------------------------------------------------------------------
# Per-group decision records


@dataclass(slots=True)
class _Group:
    sid: int
    ctx: int  # representative context op (-1: kernels without host op)
    top: int
    modpath: int
    ktype: str
    anchor: Anchor | None = None
    path: str = ""  # local file of the chosen frame ("" for module/inferred anchors)
    fwd_sites: tuple[int, ...] = ()
    bwd_sites: tuple[int, ...] = ()
    fallback: tuple[int, int] = (-1, -1)  # (forward, backward) site of the fallback statement
    library: Frame | None = None  # the chosen frame's library line (FrameChoice.library)
    shapes: str = ""  # stackless kernels: "inputs|outputs|backward" (shape anchoring's key)
    kname: str = ""  # stackless kernels: the OpType
    keys: frozenset[str] = frozenset()  # stackless kernels: construct keys (sequence anchoring)
    by_shape: bool = False  # anchored by shape: a landmark for sequence anchoring
    forward: bool = False  # the landmark is a forward use of the layer (not a gradient)


class _Prepared(NamedTuple):
    """A group's decision inputs: ``kind`` stack (``obj``: its FrameChoice, None when no frame
    maps to a local file), module (``obj``: the module chain) or inferred (``obj``: None)."""

    kind: str
    obj: Any
    ctx: OpContext


@dataclass(slots=True)
class _SiteAgg:
    device_ns: int = 0
    fwd_ns: int = 0
    bwd_ns: int = 0
    host_ns: int = 0
    calls: int = 0
    ops: list[OpHeat] | None = None


@dataclass(frozen=True, slots=True)
class _PerStep:
    """Time over the capture -> (per step, share): ``denom`` is the step time, or the summed work
    time per step where concurrent streams make that longer (the shares then add up to <= 1)."""

    steps: int
    denom: float

    def __call__(self, ns: float) -> tuple[float, float]:
        p = ns / self.steps
        return p, (p / self.denom if self.denom > 0 else 0.0)


class Attributor:
    """Computes an :class:`Attribution` and keeps what re-anchoring one edited file needs."""

    def __init__(self, profile: Profile, workspace: SourceWorkspace) -> None:
        self.profile = profile
        self.workspace = workspace
        self._unmapped_before = set(workspace.unmapped)
        self._prepare_host()
        self._prepare_items()
        self._group()
        self._run()

    def _run(self) -> None:
        """Decide every group and aggregate (also re-run when a file that did not parse does)."""
        meta = self.profile.meta
        def_lines = meta.def_line_frames
        self.anchorer = Anchorer(self.workspace, def_line_frames=def_lines)
        self.shape_anchorer = ShapeAnchorer(self.workspace)
        self._sequence = SequenceAnchorer(self.workspace)
        self.notes: dict[str, int] = {}
        self.edit_notes: dict[int, str] = {}
        for g in self.groups:
            g.anchor, g.path, g.library = None, "", None
        self._decide()
        self._assign()
        self._aggregate()
        self._base_index: dict[str, SourceIndex | None] = {}
        self._sites_of: dict[str, list[int]] = {}  # path -> its sites (an edit re-anchors those alone)
        for i, s in enumerate(self.base_sites):
            if s.span.path not in self._base_index:
                self._base_index[s.span.path] = self.workspace.index(s.span.path)
            self._sites_of.setdefault(s.span.path, []).append(i)
        self.current: list[Site | None] = list(self.base_sites)
        self.attribution = self._make_attribution()

    # -- 1. host op context --------------------------------------------------------------------

    def _prepare_host(self) -> None:
        h = self.profile.host_ops
        n = len(h)
        self.n_host = n
        self.h_name, self.h_names = column_codes(h["name"]) if n else (np.zeros(0, np.int64), [])
        parent = h["parent"].to_numpy(np.int64) if n else np.zeros(0, np.int64)
        parent = np.where((parent >= 0) & (parent < n), parent, -1)
        self.h_parent = parent
        cat = h["cat"].astype(str).to_numpy() if n else np.zeros(0, object)
        scope_name = np.array(
            [("#" in s) or s.startswith("ProfilerStep") for s in self.h_names], dtype=bool
        ) if len(self.h_names) else np.zeros(0, bool)
        self.h_scope = (cat == "user_annotation") | (scope_name[self.h_name] if n else np.zeros(0, bool))
        stack = h["stack"].to_numpy(np.int64) if n else np.zeros(0, np.int64)
        nstacks = len(self.profile.stacks)
        stack = np.where((stack >= 0) & (stack < nstacks), stack, -1)
        self.h_stack = _jump_fill(stack, parent)
        module = h["module"].to_numpy(np.int64) if n else np.zeros(0, np.int64)
        nmod = len(self.profile.modules)
        self.h_module = np.where((module >= 0) & (module < nmod), module, -1)
        fwd = h["fwd_op"].to_numpy(np.int64) if n else np.zeros(0, np.int64)
        fwd = np.where((fwd >= 0) & (fwd < n), fwd, -1)
        self.h_bwd_fwd = _jump_fill(fwd, parent)
        idx = np.arange(n, dtype=np.int64)
        pp = np.where(parent >= 0, parent, 0)
        ok = (
            (parent >= 0)
            & ~self.h_scope[pp]
            & (self.h_stack[pp] == self.h_stack)
            & (self.h_module[pp] == self.h_module)
            & ~self.h_scope
        ) if n else np.zeros(0, bool)
        self.h_top = _jump_root(np.where(ok, parent, idx)) if n else idx
        self.h_root = _jump_root(np.where(parent >= 0, parent, idx)) if n else idx
        # without stacks: the op whose shapes name the layer is the outermost of the chain of
        # shaped ops around it (aten::linear above aten::addmm above aclnnAddmm), not a
        # record_function wrapper above them (DistributedDataParallel.forward)
        shaped = (h["input_dims"].astype(str).to_numpy(object) != "") & ~self.h_scope if n else np.zeros(0, bool)
        self.h_shaped = shaped
        self.h_user = _jump_root(np.where((parent >= 0) & shaped[pp], parent, idx)) if n else idx
        self.h_ctx = np.where(self.h_bwd_fwd >= 0, self.h_bwd_fwd, idx)
        # nearest record_function scope around each op (ProfilerStep#N does not count)
        step_name = np.array([s.startswith("ProfilerStep") for s in self.h_names], dtype=bool) \
            if len(self.h_names) else np.zeros(0, bool)
        own = np.where(self.h_scope & ~(step_name[self.h_name] if n else np.zeros(0, bool)), idx, -1)
        self.h_ann = _jump_fill(own, parent) if n else idx
        self.h_is_bwd = self.h_bwd_fwd >= 0
        self.h_start = h["start_ns"].to_numpy(np.int64) if n else np.zeros(0, np.int64)
        dur = h["dur_ns"].to_numpy(np.int64) if n else np.zeros(0, np.int64)
        self.h_self = self_ns(dur, parent)
        self._module_paths()

    def _module_paths(self) -> None:
        """Intern the nn.Module chain (outermost first) of every module row: level by level from
        the outermost modules, each distinct (parent chain, class, index) once."""
        m = self.profile.modules
        nm = len(m)
        parent = m["parent"].to_numpy(np.int64) if nm else np.zeros(0, np.int64)
        self.m_parent = parent = np.where((parent >= 0) & (parent < nm), parent, -1)
        cls, cls_names = column_codes(m["cls"]) if nm else (np.zeros(0, np.int64), [])
        ks = m["k"].to_numpy(np.int64) if nm else np.zeros(0, np.int64)
        chains: list[tuple[tuple[str, int], ...]] = []
        mp = np.full(nm, -1, dtype=np.int64)  # a row on a parent cycle (bad data) keeps -1: no chain
        level = np.flatnonzero(parent < 0)
        while len(level):
            above = np.where(parent[level] >= 0, mp[np.maximum(parent[level], 0)], -1)
            gid = row_groups([above, cls[level], ks[level]])
            first = np.full(int(gid.max()) + 1, -1, dtype=np.int64)
            first[gid[::-1]] = np.arange(len(gid) - 1, -1, -1)
            for r in level[first].tolist():
                up = int(mp[parent[r]]) if parent[r] >= 0 else -1
                chains.append((chains[up] if up >= 0 else ()) + ((cls_names[cls[r]], int(ks[r])),))
            mp[level] = len(chains) - len(first) + gid
            level = np.flatnonzero((parent >= 0) & (mp < 0) & (mp[np.where(parent >= 0, parent, 0)] >= 0))
        self.chains = chains
        self.m_path = mp
        self.h_modpath = np.where(self.h_module >= 0, mp[np.where(self.h_module >= 0, self.h_module, 0)], -1) \
            if nm and self.n_host else np.full(self.n_host, -1, dtype=np.int64)

    # -- 2. work items -------------------------------------------------------------------------

    def _prepare_items(self) -> None:
        """Kernels, or (no kernels at all) host ops with their self time."""
        k = self.profile.kernels
        n = self.n_host
        if len(k):
            self.source = TimeSource.DEVICE
            self.i_dur = k["dur_ns"].to_numpy(np.int64)
            host = k["host_op"].to_numpy(np.int64)
            host = np.where((host >= 0) & (host < n), host, -1)
            fwd = k["fwd_op"].to_numpy(np.int64)
            fwd = np.where((fwd >= 0) & (fwd < n), fwd, -1)
            bwd = k["backward"].to_numpy(bool)
            hh = np.where(host >= 0, host, 0)
            host_ctx = np.where(host >= 0, self.h_ctx[hh] if n else -1, -1)
            self.i_ctx = np.where(bwd & (fwd >= 0), fwd, host_ctx)
            self.i_bwd = bwd | ((host >= 0) & (self.h_is_bwd[hh] if n else False))
            kstack = k["stack"].to_numpy(np.int64)
            nst = len(self.profile.stacks)
            kstack = np.where((kstack >= 0) & (kstack < nst), kstack, -1)
            cc = np.where(self.i_ctx >= 0, self.i_ctx, 0)
            ctx_stack = np.where(self.i_ctx >= 0, self.h_stack[cc] if n else -1, -1)
            self.i_sid = np.where(kstack >= 0, kstack, ctx_stack)
            # the text columns as codes and names (a missing value is ""), and as text
            self.i_text = {c: column_codes(k[col]) for c, col in (("type", "type"), ("name", "name"), ("core", "core"),
                                                                  ("shapes", "input_shapes"))}
            self.i_type, self.i_name, self.i_core, self.i_shapes = (
                np.asarray(names, dtype=object)[codes] for codes, names in self.i_text.values())
            out_codes, out_names = column_codes(k["output_shapes"])
            self.i_out_shapes = np.asarray(out_names, dtype=object)[out_codes]
            ins = np.zeros(len(k), dtype=bool)
            ins[self.profile.kernels.index.get_indexer(self.profile.kernels_in_steps().index)] = True
            self.i_in_step = ins & work_mask(k)  # waits and communication are no line's work
            self.i_host = host
        else:
            self.source = TimeSource.HOST
            rows = np.nonzero(~self.h_scope & (self.h_self > 0))[0] if n else np.zeros(0, np.int64)
            self.i_rows = rows
            self.i_dur = self.h_self[rows]
            self.i_ctx = self.h_ctx[rows]
            self.i_bwd = self.h_is_bwd[rows]
            self.i_sid = self.h_stack[self.i_ctx] if len(rows) else np.zeros(0, np.int64)
            names = np.asarray(self.h_names, dtype=object)
            self.i_type = names[self.h_name[rows]] if len(rows) else np.zeros(0, object)
            self.i_name = self.i_type
            self.i_core = np.full(len(rows), "CPU", dtype=object)
            self.i_shapes = self.profile.host_ops["input_dims"].to_numpy()[rows] if len(rows) else np.zeros(0, object)
            shape_codes, shape_names = pd.factorize(self.i_shapes)  # a missing value: -1
            type_codes = self.h_name[rows] if len(rows) else np.zeros(0, np.int64)
            self.i_text = {"type": (type_codes, self.h_names), "name": (type_codes, self.h_names),
                           "core": (np.zeros(len(rows), np.int64), ["CPU"]), "shapes": (shape_codes, list(shape_names))}
            self.i_out_shapes = np.full(len(rows), "", dtype=object)
            self.i_in_step = in_steps(self.profile.steps, self.h_start[rows])
            self.i_host = rows
        self.h_in_step = in_steps(self.profile.steps, self.h_start) if n else np.zeros(0, bool)

    # -- 3. groups -----------------------------------------------------------------------------

    def _group(self) -> None:
        n = self.n_host
        # host-op keys (every op, so host ops without kernels get sites too)
        hc = self.h_ctx
        h_keys = pd.DataFrame({
            "sid": self.h_stack[hc] if n else np.zeros(0, np.int64),
            "ctx": self.h_name[hc] if n else np.zeros(0, np.int64),
            "top": self.h_name[self.h_top[hc]] if n else np.zeros(0, np.int64),
            "mod": self.h_modpath[self.h_top[hc]] if n else np.zeros(0, np.int64),
            "ann": self._ann_code(self.h_top[hc]) if n else np.zeros(0, np.int64),
            "kt": np.full(n, -1, dtype=np.int64),
            "shp": np.full(n, -1, dtype=np.int64),
        })
        ni = len(self.i_dur)
        ctx = self.i_ctx
        cc = np.where(ctx >= 0, ctx, 0)
        has = ctx >= 0
        kt_codes, kt_names = pd.factorize(pd.Series(self.i_type, dtype=object))
        # kernels without a stack or module chain are also told apart by their shapes (and
        # direction), which shape anchoring (mapping.shape_anchor) turns into the layer's call
        stackless = (self.i_sid < 0) & (np.where(has, self.h_modpath[self.h_top[cc]] if n else -1, -1) < 0)
        shp_codes, self._shape_sigs = self._shape_signatures(has, cc)
        self.i_stackless = stackless
        i_keys = pd.DataFrame({
            "sid": self.i_sid,
            "ctx": np.where(has, self.h_name[cc] if n else -1, -1),
            "top": np.where(has, self.h_name[self.h_top[cc]] if n else -1, -1),
            "mod": np.where(has, self.h_modpath[self.h_top[cc]] if n else -1, -1),
            "ann": np.where(has, self._ann_code(self.h_top[cc]) if n else -1, -1),
            "kt": np.where(has, -1, kt_codes),
            "shp": np.where(stackless, shp_codes, -1),
        }) if ni else h_keys.iloc[:0]
        both = pd.concat([h_keys, i_keys], ignore_index=True)
        if len(both):
            gid = row_groups([both[c].to_numpy() for c in ("sid", "ctx", "top", "mod", "ann", "kt", "shp")])
        else:
            gid = np.zeros(0, np.int64)
        self.h_group = gid[:n]
        self.i_group = gid[n:]
        ng = int(gid.max()) + 1 if len(gid) else 0
        first = np.full(ng, -1, dtype=np.int64)
        # representative row per group: a host op when there is one, else a kernel
        order = np.arange(len(gid))[::-1]
        first[gid[order]] = order
        groups: list[_Group] = []
        for g in range(ng):
            r = int(first[g])
            if r < n:
                c = int(hc[r])
                groups.append(_Group(int(self.h_stack[c]), c, int(self.h_top[c]), int(self.h_modpath[self.h_top[c]]), ""))
            else:
                i = r - n
                c = int(ctx[i])
                if c >= 0:
                    groups.append(_Group(int(self.i_sid[i]), c, int(self.h_top[c]),
                                         int(self.h_modpath[self.h_top[c]]), ""))
                else:
                    groups.append(_Group(int(self.i_sid[i]), -1, -1, -1, str(kt_names[kt_codes[i]])))
                if stackless[i]:
                    groups[-1].shapes = self._shape_sigs[shp_codes[i]]
                    groups[-1].kname = self.h_names[self.h_name[self.h_user[c]]] if c >= 0 else str(self.i_type[i])
        self.groups = groups

    def _shape_signatures(self, has: np.ndarray, cc: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """Per kernel item its shape signature's code, and the signatures (numbered in order of
        first appearance): the op the user called (aten::linear: X, W, bias) names the layer for
        every kernel it launched (TransData, Cast, the matmul itself), ``"<its input dims>||<bwd>"``;
        a kernel without host op uses its own, ``"<input shapes>|<output shapes>|<bwd>"``. Each
        distinct combination is written once, not once per kernel."""
        ni = len(self.i_dur)
        if not ni:
            return np.zeros(0, np.int64), []
        if not self.n_host:
            has = np.zeros(ni, dtype=bool)
        # the texts as codes of their values: the dims of each distinct user op, the own shapes of
        # the kernels without one
        dims, dim_text = np.full(ni, -1, np.int64), np.zeros(0, dtype=object)
        if has.any():
            ops, op_of = pd.factorize(self.h_user[cc[has]])
            dim_codes, dim_text = pd.factorize(self.profile.host_ops["input_dims"].iloc[op_of].astype(str).to_numpy(object),
                                               use_na_sentinel=False)
            dims[has] = dim_codes[ops]
        own = np.flatnonzero(~has)
        ins, outs = np.full(ni, -1, np.int64), np.full(ni, -1, np.int64)
        ins[own], in_text = pd.factorize(np.asarray(self.i_shapes, dtype=object)[own], use_na_sentinel=False)
        outs[own], out_text = pd.factorize(np.asarray(self.i_out_shapes, dtype=object)[own], use_na_sentinel=False)
        rows, keys = distinct_rows([has, dims, ins, outs, np.asarray(self.i_bwd, dtype=bool)])
        sigs = [f"{dim_text[d]}||{b}" if h else f"{in_text[i]}|{out_text[o]}|{b}" for h, d, i, o, b in keys]
        codes, names = pd.factorize(np.asarray(sigs, dtype=object))  # two combinations may write one signature
        return codes.astype(np.int64)[rows], [str(x) for x in names]

    def _ann_code(self, ops: np.ndarray) -> np.ndarray:
        ann = self.h_ann[ops]
        return np.where(ann >= 0, self.h_name[np.where(ann >= 0, ann, 0)], -1)

    def _annotation(self, g: _Group) -> str:
        if g.top < 0:
            return ""
        a = int(self.h_ann[g.top])
        return self.h_names[self.h_name[a]] if a >= 0 else ""

    def _names(self, g: _Group) -> tuple[str, ...]:
        if g.ctx < 0:
            return ()
        names = []
        op = g.ctx
        for _ in range(64):
            names.append(self.h_names[self.h_name[op]])
            if op == g.top or op < 0:
                break
            op = int(self.h_parent[op])
            if op < 0:
                break
        return tuple(names)

    # -- 4. decisions --------------------------------------------------------------------------

    def _stack_ctx(self, g: _Group, names: tuple[str, ...]):
        """(FrameChoice, OpContext, scope) for a group with a stack, or (None, ctx, "")."""
        a = self.anchorer
        choice = a.choose_frame(self.profile.stacks[g.sid], key=g.sid)
        chain = self.chains[g.modpath] if g.modpath >= 0 else ()
        if choice is None:
            return None, OpContext(names, (g.ktype,) if g.ktype else (), annotation=self._annotation(g)), ""
        index = self.workspace.index(choice.path)
        scope = ""
        if index is not None:
            fs = a.frame_scope(index, choice.frame)
            scope = fs.scope
            if not scope and fs.mode == "drift":
                scope = a._drift_scope(index, choice.frame) or ""
        if choice.has_module_frames:
            modules, known = choice.modules, True
        elif chain:
            known = True
            modules = chain
            if index is not None and scope:
                fn = index.functions.get(scope)
                cls_name = fn.cls.rsplit(".", 1)[-1] if fn is not None and fn.cls else ""
                pos = [i for i, (c, _) in enumerate(chain) if c == cls_name] if cls_name else []
                if pos:
                    modules = chain[pos[-1] + 1:]
                elif cls_name:
                    modules, known = (), False  # the frame's class is not in the chain: unknown
        else:
            modules, known = (), False
        ctx = OpContext(names, (g.ktype,) if g.ktype else (), tuple(modules), known, self._annotation(g))
        return choice, ctx, scope

    def _decide(self) -> None:
        """Anchor every group: undoubted stack frames first (aligned per function against the
        edited text), then everything else, each distinct question asked once (``cache``)."""
        prepared = self._prepare_decisions()
        cache: dict[tuple, Anchor | None] = {}
        self._anchor_stack_frames(prepared, cache)
        for g, (kind, obj, ctx) in zip(self.groups, prepared):
            if g.anchor is not None:
                continue
            if kind == "stack":
                self._anchor_final_frame(g, obj, ctx, cache)
            elif kind == "module":
                self._anchor_module(g, obj, ctx, cache)
            else:
                self._anchor_stackless(g, ctx, cache)

    def _prepare_decisions(self) -> list[_Prepared]:
        """Pass 0: each group's frame (or module chain) and context; the module instances seen
        under each function are observed on the way."""
        a = self.anchorer
        prepared = []
        for g in self.groups:
            names = self._names(g)
            if g.sid >= 0:
                choice, ctx, scope = self._stack_ctx(g, names)
                if choice is not None and scope:
                    a.observe(choice.path, scope, ctx.modules)
                prepared.append(_Prepared("stack", choice, ctx))
            elif g.modpath >= 0:
                chain = self.chains[g.modpath]
                ctx = OpContext(names, (g.ktype,) if g.ktype else (), (), True, self._annotation(g))
                ms = a.module_scope(chain)
                if ms is not None:
                    a.observe(ms[0], ms[1], ms[2])
                prepared.append(_Prepared("module", chain, ctx))
            else:
                prepared.append(_Prepared("inferred", None, OpContext(names, (g.ktype,) if g.ktype else (),
                                                                      annotation=self._annotation(g))))
        return prepared

    def _anchor_stack_frames(self, prepared: list[_Prepared], cache: dict) -> None:
        """Pass 1: undoubted stack anchors, grouped per function for the drift alignment."""
        a = self.anchorer
        per_scope: dict[tuple[str, str], list[tuple[_Group, Any, OpContext]]] = {}
        for g, (kind, obj, ctx) in zip(self.groups, prepared):
            if kind != "stack" or obj is None:
                continue
            g.path = obj.path
            g.library = obj.library
            key = ("s", g.sid, ctx)
            if key not in cache:
                cache[key] = a.anchor_frame(obj, ctx, final=False)
            g.anchor = cache[key]
            if g.anchor is not None and not g.anchor.exact:
                continue  # def-line frames: decided, no line to align
            index, fs = a.place(obj)
            if index is not None and fs.scope and fs.mode in ("line", "drift"):
                per_scope.setdefault((obj.path, fs.scope), []).append((g, obj, ctx))
        for (path, scope), items in per_scope.items():
            self._align_scope(path, scope, items)

    def _align_scope(self, path: str, scope: str, items: list[tuple[_Group, Any, OpContext]]) -> None:
        """Shift the frames of one function by the drift its current text shows; a stale line
        that may hold some other matching call is left for pass 2."""
        a = self.anchorer
        index = self.workspace.index(path)
        assert index is not None
        accepted = a.align(index, scope, [(obj.frame.line, ctx) for _, obj, ctx in items])
        for g, obj, ctx in items:
            line = obj.frame.line
            shift = accepted.get(line)
            if shift:
                g.anchor = a.shifted(obj, scope, ctx, shift)
                a.add_evidence(path, scope, line, shift)
            elif shift == 0 and g.anchor is not None and g.anchor.exact:
                a.add_evidence(path, scope, line, 0)
            elif ctx.keys:
                g.anchor = None  # a stale line that may hold some other matching call
                a.stale.add((path, scope, line))

    def _anchor_final_frame(self, g: _Group, choice: Any, ctx: OpContext, cache: dict) -> None:
        if choice is None:
            g.anchor = Anchor(note=self._no_frame_note(g.sid))
            return
        key = ("f", g.sid, ctx)
        anchor = cache.get(key)
        if anchor is None:
            anchor = cache[key] = self.anchorer.anchor_frame(choice, ctx, final=True)
        g.anchor = anchor

    def _anchor_module(self, g: _Group, chain: Any, ctx: OpContext, cache: dict) -> None:
        """A stackless group under a module chain: the module's call, else the one construct of
        its type."""
        a = self.anchorer
        key = ("m", chain, ctx)
        anchor = cache.get(key)
        if anchor is None:
            anchor = cache[key] = a.anchor_module(chain, ctx)
        if not anchor.sites and ctx.keys:
            inferred = cache.get(("i", ctx.keys))
            if inferred is None:
                inferred = cache[("i", ctx.keys)] = a.anchor_inferred(ctx)
            if inferred.sites:
                anchor = inferred
        g.anchor = anchor

    def _anchor_stackless(self, g: _Group, ctx: OpContext, cache: dict) -> None:
        """No stack, no module: the layer its shapes name first; else the one construct of its type."""
        if g.ctx >= 0 and self.h_scope[g.ctx]:
            g.anchor = Anchor(note=f"time under {self.h_names[self.h_name[g.ctx]]} outside any op")
            return
        g.keys = ctx.keys
        by_shape = self._by_shape(g, ctx, cache) if g.shapes else None
        if by_shape is not None and by_shape.sites:
            g.anchor, g.by_shape = by_shape, True
            return
        key = ("i", ctx.keys) if ctx.keys else ("i", ctx)
        anchor = cache.get(key)
        if anchor is None:
            anchor = cache[key] = self.anchorer.anchor_inferred(ctx)
        # not attributed: the shape note (which layers fit) says more than the type note
        g.anchor = anchor if anchor.sites or by_shape is None else by_shape


    def _by_shape(self, g: _Group, ctx: OpContext, cache: dict) -> Anchor | None:
        """A stackless kernel group anchored by the layer its shapes name (None: not a layer op)."""
        ins, outs, bwd = g.shapes.split("|")
        key = ("shape", ctx.keys, g.kname, g.shapes)
        if key not in cache:
            sa = self.shape_anchorer.anchor(ctx.keys, g.kname, ctx.label, ins, outs, bwd == "True")
            # a kernel recorded in backward is a gradient even where its forward op's shapes name the
            # layer as a forward use (kernels of the backward take their forward op's input shapes)
            cache[key] = (None if not sa.note else (Anchor((sa.site,)) if sa.site is not None else Anchor(note=sa.note)),
                          sa.form is Form.FORWARD and bwd != "True")
        anchor, g.forward = cache[key]
        return anchor

    def _no_frame_note(self, sid: int) -> str:
        stack = self.profile.stacks[sid]
        user = [f for f in stack if self.workspace.is_user_frame(f)]
        if user:
            return f"user frames map to no local file ({user[0].file}); set pathMappings"
        return NO_USER_FRAME

    # -- 5. sites per item ---------------------------------------------------------------------

    def _register(self, site: Site) -> int:
        return self._site_ids.code(site)

    def _assign(self) -> None:
        self._site_ids: Interner[Site] = Interner()
        self.base_sites: list[Site] = self._site_ids.values
        for g in self.groups:
            anchor = g.anchor
            if anchor is None:
                continue
            fwd_name = self.h_names[self.h_name[g.top]] if g.top >= 0 else (g.ktype or "op")
            bnote = f"backward of {fwd_name}"
            sites = anchor.sites if g.library is None else tuple(replace(s, library=g.library) for s in anchor.sites)
            g.fwd_sites = tuple(self._register(s) for s in sites)
            g.bwd_sites = tuple(self._register(replace(s, note=_join(s.note, bnote))) for s in sites)
            if anchor.fallback is not None:
                fb = anchor.fallback if g.library is None else replace(anchor.fallback, library=g.library)
                g.fallback = (self._register(fb), self._register(replace(fb, note=_join(fb.note, bnote))))
        self.i_site = self._sites_for(self.i_group, self.i_bwd, self.i_ctx, self.i_dur)
        if self.source is TimeSource.DEVICE:
            self._by_sequence()
            if not self.n_host:
                self._optimizer_updates()
        n = self.n_host
        if n:
            real = ~self.h_scope
            op_site = self._sites_for(self.h_group, self.h_is_bwd, self.h_ctx, self.h_self)
            self.h_site = np.where(real, op_site, -1)
            if self.source is TimeSource.DEVICE:
                # a stackless op anchored through its kernels (shape, sequence) is where they are:
                # the first forward kernel launched under its user-called op decides
                kf = np.nonzero((self.i_site >= 0) & ~self.i_bwd & (self.i_ctx >= 0) & self.i_stackless)[0][::-1]
                top_site = np.full(n, -1, dtype=np.int64)
                top_site[self.h_user[self.i_ctx[kf]]] = self.i_site[kf]
                cand = top_site[self.h_user]
                self.h_site = np.where(real & (self.h_site < 0) & (cand >= 0) & (self.h_stack[self.h_ctx] < 0),
                                       cand, self.h_site)
                self._host_by_sequence()
        else:
            self.h_site = np.zeros(0, np.int64)

    def _by_sequence(self) -> None:
        """Stackless kernels still without a site, placed by launch order around the kernels
        anchored by shape (mapping.sequence_anchor): between two of them by the calls that run
        in between, and next to one when they convert or finish its tensors."""
        land_g = np.array([g.by_shape for g in self.groups] + [False], dtype=bool)
        grp = np.where(self.i_group >= 0, self.i_group, len(self.groups))
        land = self.i_stackless & land_g[grp] & (self.i_site >= 0)
        if not land.any() or not (self.i_stackless & (self.i_site < 0)).any():
            return
        seq = self._sequence
        start = self.profile.kernels["start_ns"].to_numpy(np.int64)
        rows = np.nonzero(self.i_stackless & work_mask(self.profile.kernels))[0]
        rows = rows[np.argsort(start[rows], kind="stable")].tolist()
        marks = [i for i, r in enumerate(rows) if land[r]]
        for j, m in enumerate([-1, *marks]):
            nxt = marks[j] if j < len(marks) else len(rows)
            segment = rows[m + 1:nxt]
            if not segment:
                continue
            a = rows[m] if m >= 0 else -1
            b = rows[nxt] if nxt < len(rows) else -1
            # conversions and bias/reduce kernels right after / right before a layer's kernel
            for land_row, run in ((a, segment), (b, segment[::-1])):
                if land_row < 0:
                    continue
                for r in run:
                    if self.i_site[r] >= 0 or not attached(self.groups[int(self.i_group[r])].keys):
                        break
                    shared = shared_tensor((self.i_shapes[r], self.i_out_shapes[r]),
                                           (self.i_shapes[land_row], self.i_out_shapes[land_row]))
                    if shared is None:
                        break
                    self.i_site[r] = self._register(seq.beside(self.base_sites[int(self.i_site[land_row])], shared))
            ops = self._pending_ops([r for r in segment if self.i_site[r] < 0])
            ga = self.groups[int(self.i_group[a])] if a >= 0 else None
            gb = self.groups[int(self.i_group[b])] if b >= 0 else None
            if ga is not None and gb is not None and ops and ga.forward == gb.forward:
                sites = seq.align(self.base_sites[int(self.i_site[a])], self.base_sites[int(self.i_site[b])],
                                  ga.forward, [self.groups[int(self.i_group[op[0]])].keys for op in ops])
                for op, site in zip(ops, sites):
                    if site is not None:
                        self.i_site[op] = self._register(site)

    def _pending_ops(self, pending: list[int]) -> list[list[int]]:
        """Kernels to align, one item per op: consecutive kernels launched by one host op (a
        pooling's layout conversions and the pooling kernel) are one call's; without host ops
        each kernel is its own item."""
        out: list[list[int]] = []
        for r in pending:
            ctx = int(self.i_ctx[r])
            if out and ctx >= 0 and int(self.i_ctx[out[-1][-1]]) == ctx:
                out[-1].append(r)
            else:
                out.append([r])
        return out

    def _optimizer_updates(self) -> None:
        """No host data: single-tensor Adam update kernels still without a site go to the one
        ``optimizer.step()`` (mapping.source.optimizer_anchor), per stream in launch order."""
        free = self.i_stackless & (self.i_site < 0)
        if not free.any():
            return
        anchor = self.anchorer.anchor_inferred(OpContext(annotation="Optimizer.step#"))
        if len(anchor.sites) != 1:
            return
        k = self.profile.kernels
        stream = k["stream"].to_numpy(np.int64) if "stream" in k else np.zeros(len(k), np.int64)
        rows = np.lexsort((k["start_ns"].to_numpy(np.int64), stream))
        pattern = adam_update_pattern()
        site = self._register(replace(anchor.sites[0], note=f"by kernel types: a single-tensor Adam update "
                                                            f"({pattern}) of one parameter; no call stack"))
        for s in np.unique(stream[rows]):
            on = rows[stream[rows] == s]
            for j in update_rows(self.i_type[on].tolist(), self.i_shapes[on].tolist()):
                r = on[j]
                if free[r]:
                    self.i_site[r] = site

    def _host_by_sequence(self) -> None:
        """Stackless forward ops without kernels (``chunk``, ``view``) placed by launch order
        between the placed user-called ops around them, as kernels are."""
        n = self.n_host
        top = (self.h_user == np.arange(n)) & self.h_shaped & ~self.h_is_bwd & (self.h_stack < 0)
        rows = np.nonzero(top & (self.h_start >= 0))[0]
        if not len(rows) or not (self.h_site[rows] < 0).any() or not (self.h_site[rows] >= 0).any():
            return
        seq = self._sequence
        rows = rows[np.lexsort((self.h_start[rows], self.profile.host_ops["tid"].to_numpy(np.int64)[rows]))].tolist()
        marks = [i for i, r in enumerate(rows) if self.h_site[r] >= 0
                 and seq.position(self.base_sites[int(self.h_site[r])]) is not None]
        for m0, m1 in zip(marks, marks[1:]):
            pending = [r for r in rows[m0 + 1:m1] if self.h_site[r] < 0]
            if not pending:
                continue
            a, b = self.base_sites[int(self.h_site[rows[m0]])], self.base_sites[int(self.h_site[rows[m1]])]
            sites = seq.align(a, b, True, [op_keys(self.h_names[self.h_name[r]]) for r in pending])
            for r, site in zip(pending, sites):
                if site is not None:
                    self.h_site[r] = self._register(site)

    def _sites_for(self, group: np.ndarray, bwd: np.ndarray, ctx: np.ndarray, dur: np.ndarray) -> np.ndarray:
        """Base site index per row from its group's decision (and ordinal when several calls)."""
        ng = len(self.groups)
        out = np.full(len(group), -1, dtype=np.int64)
        if not len(group) or not ng:
            return out
        single_f = np.full(ng, -1, dtype=np.int64)
        single_b = np.full(ng, -1, dtype=np.int64)
        multi = []
        for gi, g in enumerate(self.groups):
            if len(g.fwd_sites) == 1:
                single_f[gi] = g.fwd_sites[0]
                single_b[gi] = g.bwd_sites[0]
            elif len(g.fwd_sites) > 1:
                multi.append(gi)
        out = np.where(bwd, single_b[group], single_f[group])
        if not multi:
            return out
        order = np.argsort(group, kind="stable")
        sg = group[order]
        for gi in multi:
            lo, hi = np.searchsorted(sg, gi, "left"), np.searchsorted(sg, gi, "right")
            rows = order[lo:hi]
            if not len(rows):
                continue
            out[rows] = self._ordinal_sites(self.groups[gi], rows, bwd, ctx, dur)
        return out

    def _ordinal_sites(self, g: _Group, rows: np.ndarray, bwd: np.ndarray, ctx: np.ndarray,
                       dur: np.ndarray) -> np.ndarray:
        """Several matching calls: the k-th user-called op of the group within one invocation goes
        to the (k mod N)-th call; counts that do not divide by N use the statement fallback."""
        assert g.anchor is not None
        nsites = len(g.fwd_sites)
        c = ctx[rows]
        ok_rows = c >= 0
        tops = np.where(ok_rows, self.h_top[np.where(ok_rows, c, 0)], -1)
        uniq = np.unique(tops[tops >= 0])
        if not len(uniq):
            return self._fallback_rows(g, rows, bwd, nsites)
        # invocation: the module call of the user's function (levels_up above the op's module),
        # else the root op (ProfilerStep) the call ran under
        m = self.h_module[uniq]
        for _ in range(g.anchor.levels_up):
            m = np.where(m >= 0, self.m_parent[np.where(m >= 0, m, 0)], -1)
        inv = np.where(m >= 0, m, -(self.h_root[uniq] + 2))
        order = np.lexsort((self.h_start[uniq], inv))
        inv_s = inv[order]
        first = np.r_[True, inv_s[1:] != inv_s[:-1]] if len(inv_s) else np.zeros(0, bool)
        pos = np.arange(len(inv_s))
        run_start = np.maximum.accumulate(np.where(first, pos, 0))
        run_bounds = np.r_[np.nonzero(first)[0], len(inv_s)]
        if (np.diff(run_bounds) % nsites).any():
            return self._fallback_rows(g, rows, bwd, nsites)  # some invocation ran a different count
        ordinal = np.empty(len(uniq), dtype=np.int64)
        ordinal[order] = (pos - run_start) % nsites
        pick = np.full(len(rows), -1, dtype=np.int64)
        has = tops >= 0
        pick[has] = ordinal[np.searchsorted(uniq, tops[has])]
        f_sites = np.array(g.fwd_sites, dtype=np.int64)
        b_sites = np.array(g.bwd_sites, dtype=np.int64)
        safe = np.maximum(pick, 0)
        res = np.where(bwd[rows], b_sites[safe], f_sites[safe])
        return np.where(pick >= 0, res, -1)

    def _fallback_rows(self, g: _Group, rows: np.ndarray, bwd: np.ndarray, nsites: int) -> np.ndarray:
        f, b = g.fallback
        if f < 0:
            return np.full(len(rows), -1, dtype=np.int64)
        return np.where(bwd[rows], b, f)

    # -- 6. aggregates per base site -----------------------------------------------------------

    def _aggregate(self) -> None:
        prof = self.profile
        self.step_time_ns = float(prof.step_time()[0])
        self.num_steps = max(int(prof.num_steps), 1)
        m = self.i_in_step
        site = self.i_site[m]
        dur = self.i_dur[m]
        bwd = self.i_bwd[m]
        self.total_ns = int(dur.sum())
        self.attributed_base_ns = int(dur[site >= 0].sum())
        self.aggs: dict[int, _SiteAgg] = {}
        if len(site):
            frame = pd.DataFrame({"site": site, "dur": dur, "bwd": bwd,
                                  **{c: codes[m] for c, (codes, _) in self.i_text.items()}})
            frame = frame[frame["site"] >= 0]
            if len(frame):
                self._aggregate_items(frame)
        # unattributed time per reason (the group's note)
        gsel = self.i_group[m]
        lost = gsel[site < 0]
        if len(lost):
            per_group = np.bincount(lost, weights=dur[site < 0], minlength=len(self.groups))
            for gi in np.nonzero(per_group)[0]:
                g = self.groups[int(gi)]
                note = g.anchor.note if g.anchor is not None and g.anchor.note else "not mapped"
                self.notes[note] = self.notes.get(note, 0) + int(per_group[gi])
        # host self time and calls per site
        n = self.n_host
        if n:
            hm = self.h_in_step & (self.h_site >= 0)
            hs = self.h_site[hm]
            host = np.bincount(hs, weights=self.h_self[hm], minlength=len(self.base_sites))
            is_call = hm & (self.h_top == np.arange(n)) & ~self.h_is_bwd & ~self.h_scope
            calls = np.bincount(self.h_site[is_call], minlength=len(self.base_sites))
            for i in np.nonzero(host + calls)[0]:
                agg = self.aggs.setdefault(int(i), _SiteAgg(ops=[]))
                agg.host_ns += int(host[i])
                agg.calls += int(calls[i])

    def _aggregate_items(self, coded: pd.DataFrame) -> None:
        """Per site its device time and its operators. The text columns come as the codes of
        ``i_text`` (grouping by the kernels' strings cost more than the rest); the groups and
        their order are those of the text, and a missing value (code -1) leaves the groupings it
        keys, as groupby drops a NaN key."""
        sums = coded.groupby(["site", "bwd"], sort=False)["dur"].sum()
        for (s, b), v in sums.items():
            agg = self.aggs.setdefault(int(s), _SiteAgg(ops=[]))
            agg.device_ns += int(v)
            if b:
                agg.bwd_ns += int(v)
            else:
                agg.fwd_ns += int(v)
        keys = ["site", "type", "core", "bwd"]
        coded = coded[(coded["type"] >= 0) & (coded["core"] >= 0)]
        ops = coded.groupby(keys, sort=False)["dur"].agg(["sum", "size"])
        by_name = coded[coded["name"] >= 0].groupby(keys + ["name"], sort=False)["dur"].sum()
        top_name = by_name.sort_values(ascending=False).reset_index().drop_duplicates(keys).set_index(keys)["name"]
        shape_text = self.i_text["shapes"][1]
        written = np.array([str(x) != "" for x in shape_text] + [False], dtype=bool)  # [-1]: missing
        shaped = coded[written[coded["shapes"].to_numpy()]]
        shapes: dict[tuple, list[str]] = {}
        if len(shaped):
            by_shape = shaped.groupby(keys + ["shapes"], sort=False)["dur"].sum().sort_values(ascending=False)
            for (s, t, c, b, sh), _ in by_shape.items():
                lst = shapes.setdefault((s, t, c, b), [])
                if len(lst) < MAX_SHAPES:
                    lst.append(str(shape_text[sh]))
        types, cores, names = self.i_text["type"][1], self.i_text["core"][1], self.i_text["name"][1]
        for (s, t, c, b), total, size in zip(ops.index, ops["sum"].tolist(), ops["size"].tolist()):
            agg = self.aggs[int(s)]
            assert agg.ops is not None
            top = top_name.get((s, t, c, b))
            agg.ops.append(OpHeat(str(names[top]) if top is not None else str(types[t]), str(types[t]), str(cores[c]),
                                  int(size), int(total), tuple(shapes.get((s, t, c, b), ())), bool(b)))

    # -- 7. the result -------------------------------------------------------------------------

    def _make_attribution(self) -> Attribution:
        ids: Interner[Site] = Interner()
        current = ids.values
        remap = np.full(len(self.base_sites) + 1, -1, dtype=np.int64)
        for i, s in enumerate(self.current):
            if s is not None:
                remap[i] = ids.code(s)
        kernel_site = remap[self.i_site] if self.source is TimeSource.DEVICE else np.full(len(self.profile.kernels), -1, np.int64)
        op_site = remap[self.h_site] if self.n_host else np.zeros(0, np.int64)
        heat = self._heat(current, remap)
        return Attribution(current, kernel_site.astype(np.int64), op_site.astype(np.int64), heat, state=self)

    def _heat(self, current: list[Site], remap: np.ndarray) -> SourceHeat:
        """Base-site aggregates merged onto the current spans, then per line and per function."""
        step = self.step_time_ns
        steps = self.num_steps
        # Share of the step; of the summed work time instead where concurrent streams make it
        # longer than the step, so the shares of all spans add up to at most 1.
        per = _PerStep(steps, max(step, self.total_ns / steps))
        spans, lost_edit = self._span_heat(current, remap, per)
        lines, functions = self._line_function_heat(spans, per)
        attributed = self.attributed_base_ns - lost_edit
        notes = dict(self.notes)
        for i, text in self.edit_notes.items():
            agg = self.aggs.get(i)
            if remap[i] < 0 and agg is not None:
                notes[text] = notes.get(text, 0) + agg.device_ns
        unmapped = [p for p in self.workspace.unmapped if p not in self._unmapped_before]
        return SourceHeat(
            step_time_ns=step,
            num_steps=steps,
            spans=spans,
            lines=sorted(lines, key=lambda x: (-x.device_ns, x.path, x.line)),
            functions=sorted(functions, key=lambda x: (-x.device_ns, x.path, x.function)),
            total_device_ns=self.total_ns,
            attributed_ns=attributed,
            unattributed_ns=self.total_ns - attributed,
            unmapped_files=unmapped,
            notes=[n for n, _ in sorted(notes.items(), key=lambda kv: -kv[1])],
            time_source=self.source,
            fwd_ns=sum(s.fwd_ns for s in spans),
            bwd_ns=sum(s.bwd_ns for s in spans),
        )

    def _span_heat(self, current: list[Site], remap: np.ndarray, per: _PerStep) -> tuple[list[SpanHeat], int]:
        """One SpanHeat per current span (its sites' aggregates merged), hottest first; and the
        device time of sites an edit removed (each gets an edit note)."""
        by_span: dict[Span, list[tuple[Site, _SiteAgg]]] = {}
        lost_edit = 0
        for i, agg in self.aggs.items():
            j = remap[i]
            if j < 0:
                lost_edit += agg.device_ns
                if agg.device_ns:
                    base = self.base_sites[i]
                    self.edit_notes[i] = (
                        f"{base.call_text or base.function} ({base.function}) is no longer in "
                        f"{Path(base.span.path).name}: its time is unattributed until the code is back"
                    )
                continue
            by_span.setdefault(current[j].span, []).append((current[j], agg))
        spans: list[SpanHeat] = []
        for span, parts in by_span.items():
            fwd_sites = [s for s, _ in parts if "backward of" not in s.note]
            site = fwd_sites[0] if fwd_sites else parts[0][0]
            dev = sum(a.device_ns for _, a in parts)
            p, share = per(dev)
            ops = merge_ops(op for _, a in parts for op in (a.ops or []))
            libs: dict[Frame, int] = {}
            for s, a in parts:
                if s.library is not None:
                    libs[s.library] = libs.get(s.library, 0) + a.device_ns
            spans.append(SpanHeat(site, dev, sum(a.fwd_ns for _, a in parts), sum(a.bwd_ns for _, a in parts),
                                  sum(a.host_ns for _, a in parts), sum(a.calls for _, a in parts), p, share, ops,
                                  sorted(libs.items(), key=lambda kv: (-kv[1], kv[0].raw))))
        spans.sort(key=lambda s: (-s.device_ns, -s.host_ns, s.site.span))
        return spans, lost_edit

    def _line_function_heat(self, spans: list[SpanHeat], per: _PerStep) -> tuple[list[LineHeat], list[FunctionHeat]]:
        """The spans summed per line and per function (in first-seen order)."""
        lines: dict[tuple[str, int], LineHeat] = {}
        functions: dict[tuple[str, str], FunctionHeat] = {}
        line_ops: dict[tuple[str, int], list[OpHeat]] = {}
        for sh in spans:
            key = (sh.site.span.path, sh.site.span.line)
            lh = lines.get(key)
            if lh is None:
                lh = lines[key] = LineHeat(key[0], key[1], 0, 0.0, 0.0)
                line_ops[key] = []
            lh.device_ns += sh.device_ns
            lh.fwd_ns += sh.fwd_ns
            lh.bwd_ns += sh.bwd_ns
            line_ops[key].extend(sh.ops)
            fkey = (sh.site.span.path, self._heat_function(sh.site))
            fh = functions.get(fkey)
            if fh is None:
                index = self.workspace.index(fkey[0])
                fspan = index.function_span(fkey[1]) if index is not None else sh.site.span
                fh = functions[fkey] = FunctionHeat(fkey[0], fkey[1], fspan, 0, 0.0, 0.0)
            fh.device_ns += sh.device_ns
            fh.fwd_ns += sh.fwd_ns
            fh.bwd_ns += sh.bwd_ns
        for key, lh in lines.items():
            lh.per_step_ns, lh.share = per(lh.device_ns)
            lh.ops = merge_ops(line_ops[key])
        for fh in functions.values():
            fh.per_step_ns, fh.share = per(fh.device_ns)
        return list(lines.values()), list(functions.values())


    def _heat_function(self, site: Site) -> str:
        """Function whose heat a site counts in: a container element (``nn.ReLU()`` inside
        ``nn.Sequential`` in ``__init__``) runs in its owner's ``forward``."""
        if site.kind == SiteKind.ELEMENT and site.function.endswith(".__init__"):
            fwd = site.function[: -len("__init__")] + "forward"
            index = self.workspace.index(site.span.path)
            if index is not None and fwd in index.functions:
                return fwd
        return site.function

    # -- per keystroke -------------------------------------------------------------------------

    def update_file(self, path: str | Path) -> Attribution:
        """Re-anchor the sites of one edited file (its new text is in the workspace).

        Sites follow their call by function + call text (the occurrence among equal texts, else
        the nearest one); a call that is gone is dropped with a note and comes back when the text
        does. No profile data is walked again.
        """
        key = self.workspace.key(path)
        new = self.workspace.index(key)
        base = self._base_index.get(key)
        if new is None:
            return self.attribution
        if base is None and key in self._pending_paths():
            self._run()  # the file did not parse when attributing: anchor it now
            return self.attribution
        for i in self._sites_of.get(key, ()):
            site = self.base_sites[i]
            self.current[i] = reanchor_site(site, base, new) if base is not None else site
            self.edit_notes.pop(i, None)
        self.attribution = self._make_attribution()
        return self.attribution

    def line_now(self, path: str | Path, line: int) -> int | None:
        """Where ``line`` of ``path`` as attributed (the profile's frames point there) is in the
        file's current text: the statement covering it is followed by its text like a site, so
        profile lines stay meaningful after edits. None when that statement is gone."""
        key = self.workspace.key(path)
        base = self._base_index.get(key)
        new = self.workspace.index(key)
        if base is None or new is None or base is new or line <= 0:
            return line
        st = base.statement_at(line)
        if st is None:  # a comment or blank line as attributed: nothing to follow
            return None
        found = follow_text(base, new, st.function, st.text, st.span,
                            base.statement_occurrence(st.span, st.function), statements=True)
        return None if found is None else found[0].line + (line - st.span.line)

    def _pending_paths(self) -> set[str]:
        return {g.path for g in self.groups if g.path and g.anchor is not None and not g.anchor.sites
                and ("syntax error" in g.anchor.note or "not parsed" in g.anchor.note)}


def reanchor_site(site: Site, old: SourceIndex, new: SourceIndex) -> Site | None:
    """Where ``site`` (anchored in ``old``) is in ``new``: same function, same text; None if gone."""
    if site.kind == SiteKind.FUNCTION:
        f = new.functions.get(site.function)
        return replace(site, span=f.header) if f is not None else None
    found = follow_text(old, new, site.function, site.call_text, site.span, site.occurrence,
                        statements=site.kind == SiteKind.STATEMENT)
    if found is None:
        return None
    span, occurrence = found
    if span == site.span:
        return site
    return replace(site, span=span, occurrence=occurrence)


def follow_text(old: SourceIndex, new: SourceIndex, function: str, text: str, span: Span, occurrence: int,
                *, statements: bool) -> tuple[Span, int] | None:
    """The span in ``new`` of the call (or statement) of ``function`` with ``text`` that was at
    ``span`` in ``old``, and its occurrence among equal texts; None when it is gone."""
    old_items = old.spans_of_text(function, text, statements=statements)
    new_items = new.spans_of_text(function, text, statements=statements)
    if not new_items:
        return None
    old_items.sort()
    new_items.sort()
    try:
        k = old_items.index(span)
    except ValueError:
        k = min(occurrence, len(old_items) - 1) if old_items else 0
    if len(new_items) == len(old_items):
        found = new_items[k]
    else:
        # equal texts were added or removed: the one nearest the old position within the function
        of = old.functions.get(function)
        nf = new.functions.get(function)
        shift = (nf.def_line - of.def_line) if of is not None and nf is not None else 0
        target = span.line + shift
        dists = sorted((abs(s.line - target), s) for s in new_items)
        if len(dists) > 1 and dists[0][0] == dists[1][0]:
            return None
        found = dists[0][1]
    return found, new_items.index(found)


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def attribute(profile: Profile, workspace: SourceWorkspace) -> Attribution:
    """Tie the profile's time to source spans of the workspace (see the module docstring)."""
    return Attributor(profile, workspace).attribution


def reanchor(attribution: Attribution, path: str | Path, index: SourceIndex | None = None) -> Attribution:
    """The attribution after ``path`` was edited (per keystroke; cheap).

    ``index``: the file's new index if the caller built it; otherwise the workspace's is used.
    """
    state = attribution.state
    if not isinstance(state, Attributor):
        raise ValueError("this Attribution was not made by mapping.attribute (no re-anchoring state)")
    if index is not None:
        state.workspace.adopt(index)
    return state.update_file(path)


__all__ = ["Attributor", "attribute", "follow_text", "reanchor", "reanchor_site"]
