"""Operator-sequence matching, the advisor's "Affinity API" detection (hint-rules §3, NPU210-217,
NPU221), and where in the source a matched sequence starts.

The outermost ``aten::``/``npu::`` ops of each host thread, in time order, with ``aten::``
stripped, become one string ``-pow--mean--add--rsqrt--mul-``; a rule pattern such as
``(pow){0,1}-(mean){0,1}-(add){0,1}-rsqrt-mul-(type_as){0,1}`` becomes a regex over those
``-name-`` tokens, so a token only ever matches a whole op name and a match never straddles two
threads (a ``-#-`` token separates them). One string per profile, one ``finditer`` per pattern.

The kernel-only variant (profiles without framework ops, e.g. msprof CLI output) does the same
over device kernel ``Type``s per stream with literal sequences.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from msprof_lsp.hints.context import RuleContext
from msprof_lsp.mapping.heat import Site
from msprof_lsp.mapping.spans import Confidence, Span

from . import _facts, _ops

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


def literal_regex(types: str) -> re.Pattern[str]:
    """``Add-LayerNorm`` -> a regex matching exactly that run of kernel types."""
    return re.compile("".join(f"-{re.escape(t)}-" for t in types.split("-")))


@dataclass(frozen=True, slots=True)
class Tokens:
    """One string of ``-name-`` tokens and the table rows behind them."""

    rows: np.ndarray  # table row per token (-1 for thread breaks)
    names: list[str]
    text: str
    starts: np.ndarray  # char offset of each token

    def find(self, regex: re.Pattern[str]) -> list[tuple[int, int]]:
        """Token ranges [a, b) of every (non-overlapping) match, in order."""
        out = []
        for m in regex.finditer(self.text):
            a = int(np.searchsorted(self.starts, m.start()))
            b = int(np.searchsorted(self.starts, m.end())) if m.end() < len(self.text) else len(self.rows)
            if b > a and (self.rows[a:b] >= 0).all():
                out.append((a, b))
        return out

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
    lengths = np.fromiter((len(n) + 2 for n in out_names), dtype=np.int64, count=len(out_names))
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])) if len(lengths) else np.zeros(0, dtype=np.int64)
    text = "".join(f"-{n}-" for n in out_names)
    return Tokens(np.asarray(out_rows, dtype=np.int64), out_names, text, starts)


_HOST_CACHE: weakref.WeakKeyDictionary[RuleContext, Tokens] = weakref.WeakKeyDictionary()
_KERNEL_CACHE: weakref.WeakKeyDictionary[RuleContext, Tokens] = weakref.WeakKeyDictionary()


def host_tokens(ctx: RuleContext) -> Tokens:
    """Outermost framework ops per host thread, time order, ``aten::`` stripped (cached per context)."""
    hit = _HOST_CACHE.get(ctx)
    if hit is not None:
        return hit
    h = ctx.profile.host_ops
    top = np.flatnonzero(_ops.outermost_framework_ops(ctx.profile))
    if len(top):
        sub = h.iloc[top]
        order = np.lexsort((sub["start_ns"].to_numpy(), sub["tid"].to_numpy(), sub["pid"].to_numpy()))
        rows = top[order]
        names = _facts.strs(h["name"])[rows]
        names = np.array([n[6:] if n.startswith("aten::") else n for n in names], dtype=object)
        thread = h["pid"].to_numpy(np.int64)[rows] * (1 << 32) + h["tid"].to_numpy(np.int64)[rows]
        toks = _tokens(rows, names, thread)
    else:
        toks = _tokens(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object), np.zeros(0, dtype=np.int64))
    _HOST_CACHE[ctx] = toks
    return toks


def kernel_tokens(ctx: RuleContext) -> Tokens:
    """Device kernel types per (device, stream), start order, of the profiled steps (cached)."""
    hit = _KERNEL_CACHE.get(ctx)
    if hit is not None:
        return hit
    k = ctx.profile.kernels_in_steps()
    if len(k):
        order = np.lexsort((k["start_ns"].to_numpy(), k["stream"].to_numpy(), k["device"].to_numpy()))
        rows = k.index.to_numpy(np.int64)[order]
        names = _facts.strs(k["type"])[order]
        group = k["device"].to_numpy(np.int64)[order] * (1 << 32) + k["stream"].to_numpy(np.int64)[order]
        toks = _tokens(rows, names, group)
    else:
        toks = _tokens(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object), np.zeros(0, dtype=np.int64))
    _KERNEL_CACHE[ctx] = toks
    return toks


# ---------------------------------------------------------------------------------------------
# Where a matched sequence is in the source


@dataclass(frozen=True, slots=True)
class Place:
    span: Span | None
    confidence: Confidence
    site: Site | None  # the site the anchor came from (None: from a frame line, or nothing)


def _common_prefix(chains: Sequence[list[tuple[str, str]]]) -> list[tuple[str, str]]:
    chains = [c for c in chains if c]
    if not chains:
        return []
    out = []
    for level in zip(*chains):
        if all(x == level[0] for x in level):
            out.append(level[0])
        else:
            break
    return out


def place_ops(ctx: RuleContext, rows: Sequence[int]) -> Place:
    """The first statement of the code that ran ``rows`` (time order).

    The matched ops may sit in nested calls (rotary: ``chunk``/``neg``/``cat`` inside
    ``rotate_half``, the ``mul``/``add`` in ``forward``): the anchor is in the deepest function
    every op's user call chain passes through, at the earliest line any of them was called from
    there.
    """
    sites = [_ops.site_of_op(ctx, int(r)) for r in rows]
    h = ctx.profile.host_ops
    stack_ids = h["stack"].to_numpy(np.int64)
    framed: list[list[tuple[str, object]]] = []
    for r in rows:
        sid = int(stack_ids[int(r)])
        framed.append(_ops.user_frames(ctx, ctx.profile.stack_of(sid)) if sid >= 0 else [])
    chains = [[(p, f.func) for p, f in fr] for fr in framed]  # type: ignore[attr-defined]
    common = _common_prefix(chains)
    if common:
        path, func = common[-1]
        here = [s for s in sites if s is not None and s.span.path == path and s.function.rsplit(".", 1)[-1] == func]
        # A "function" site is the def header (the call inside was ambiguous): a last resort.
        lines = [s for s in here if s.kind != "function"]
        if lines:
            site = min(lines, key=lambda s: (s.span.line, s.span.col))
            return Place(_ops.site_statement(ctx, site), site.confidence, site)
        level = len(common) - 1
        index = _ops.index_of(ctx, path)
        frame_lines = sorted({fr[level][1].line for fr in framed if len(fr) > level})  # type: ignore[attr-defined]
        for line in frame_lines:  # executing lines (torch_npu); Kineto's def lines are skipped
            if index is not None and line > 0 and not index.functions_starting_at(line):
                span = _ops.statement_span(ctx, path, line)
                if span is not None:
                    return Place(span, Confidence.STACK, None)
        if here:
            return Place(_ops.site_statement(ctx, here[0]), here[0].confidence, here[0])
    site = next((s for s in sites if s is not None and s.kind != "function"), None) or _ops.best_site(sites)
    if site is None:
        return Place(None, Confidence.MODULE, None)
    return Place(_ops.site_statement(ctx, site), site.confidence, site)


def place_kernels(ctx: RuleContext, rows: Sequence[int]) -> Place:
    """Anchor of a kernel-only match: the attribution's site of its first kernel (inferred)."""
    for r in rows:
        pos = ctx.profile.kernels.index.get_loc(int(r))
        site = _ops.site_of_kernel_row(ctx, int(pos))
        if site is not None:
            return Place(_ops.site_statement(ctx, site), Confidence.INFERRED, site)
    return Place(None, Confidence.INFERRED, None)
