"""The rules' query layer (hints.profile_query, hints.source_query) against independent answers:
the producers' own OpType column, a Python walk of the op tree, and hand-written sources."""

from __future__ import annotations

import csv
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from msprof_lsp.hints import profile_query as pq
from msprof_lsp.hints import source_query as sq
from msprof_lsp.mapping.source.heat import SiteKind
from msprof_lsp.mapping.profile.load import load_location, locate
from msprof_lsp.mapping.source.source_index import SourceIndex
from msprof_lsp.mapping.spans import Confidence
from msprof_lsp.mapping.profile.timemodel import op_type, op_types
from tests.conftest import shared_fixture
from tests.hints.rules.rulekit import ProfileBuilder, context, frame

# Real torch_npu 2.1 exports (2-rank DDP AlexNet) and the advisor's test data (kernel_details
# from 2023 and 2025 releases); each has the producer's own Type column beside the Name.
MSINSIGHT = "Ascend-msinsight/text/level1/rank{}_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
KD_2023 = "Ascend-msprof-analyze/test/ut/advisor/advisor_backend/compute_advice/kernel_details.csv"
KD_2025 = "Ascend-msprof-analyze/test/ut/advisor/compute_advice/data/kernel_details.csv"
TRACE_2024 = "Ascend-msprof-analyze/test/ut/advisor/timeline_advice/trace_view.json"


def _name_type(rel: str) -> list[tuple[str, str]]:
    with open(shared_fixture(rel), newline="", encoding="utf-8") as fh:
        return [(r["Name"], r["Type"]) for r in csv.DictReader(fh)]


@pytest.mark.parametrize("rank", [0, 1])
def test_op_type_from_the_name_alone_is_the_producers_type(rank: int) -> None:
    rows = _name_type(MSINSIGHT.format(rank))
    assert len(rows) == 191
    assert [op_type(n) for n, _ in rows] == [t for _, t in rows]  # aclnn, acl_op, MemSet, hcom_*
    assert all(op_type(n, t) == t for n, t in rows)  # a written Type always wins


def test_op_type_misses_only_what_the_name_does_not_say() -> None:
    rows = _name_type(KD_2023)
    wrong = {(n, t, op_type(n)) for n, t in rows if op_type(n) != t}
    assert sum(op_type(n) == t for n, t in rows) >= 440  # of 591
    # The rest are acl_op node names that differ from their OpType after the name part
    # (ReduceSum147 is a ReduceSumD, LpNormUpdateV2159 an LpNormUpdateV2), or DSA tasks.
    assert all(t.startswith(ours) or t.startswith("DSA") for _, t, ours in wrong), sorted(wrong)[:5]
    rows = _name_type(KD_2025)
    assert {(n, op_type(n)) for n, t in rows if op_type(n) != t} == {("aclnnMatmul_MatMulV3Common_MatMulV5", "MatMulV5")}
    assert op_type("aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore_varlen") == "FlashAttentionScore"


def test_op_types_per_distinct_pair_equals_per_row() -> None:
    rows = _name_type(KD_2023)
    names, types = [n for n, _ in rows], ["" if i % 3 else t for i, (_, t) in enumerate(rows)]
    plain = pd.DataFrame({"name": names, "type": types})
    cat = plain.astype("category")
    expected = [op_type(n, t) for n, t in zip(names, types)]
    assert op_types(plain).tolist() == expected
    assert op_types(cat).tolist() == expected
    assert pq.kernel_types(cat.iloc[5:40]).tolist() == expected[5:40]  # any subset of a kernel table
    assert op_types(plain.iloc[0:0]).tolist() == []


def _python_nearest(parent: np.ndarray, marked: np.ndarray) -> list[int]:
    out = []
    for i in range(len(parent)):
        j = i
        while j >= 0 and not marked[j]:
            j = int(parent[j])
        out.append(j)
    return out


def test_nearest_marked_and_strict_ancestor_match_a_python_walk() -> None:
    p = load_location(locate(shared_fixture(TRACE_2024)), use_cache=False)
    par = pq.parents(p)
    assert len(par) > 100 and (par >= 0).sum() > 50  # a real nested tree
    for marked in (pq.mask(p.host_ops["name"], pq.is_framework_op), np.arange(len(par)) % 7 == 0):
        assert pq.nearest_marked(par, marked).tolist() == _python_nearest(par, marked)
        up = _python_nearest(par, marked)
        strict = [up[int(par[i])] if par[i] >= 0 else -1 for i in range(len(par))]
        assert pq.strict_ancestor(marked, par).tolist() == strict
    chain = np.arange(-1, 2999, dtype=np.int64)  # 3,000 deep: row i's parent is i - 1
    top = np.zeros(3000, dtype=bool)
    top[0] = True
    assert (pq.nearest_marked(chain, top) == 0).all()


LOOPS = textwrap.dedent("""\
    import torch

    def train(model, loader, opt, scheduler, prof):
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            scheduler.step()
            prof.step()

    def fit(model, loader):
        optimizer = torch.optim.AdamW(model.parameters())
        while True:
            loss = model(next(loader))
            loss.backward()
            optimizer.step()
""")


def test_one_training_loop_predicate() -> None:
    index = SourceIndex.build("/w/train.py", LOOPS)
    loops = {lp.span.line: sq.is_training_loop(index, lp) for lp in index.loops}
    assert loops == {4: True, 9: False, 17: True}  # scheduler.step()/prof.step() are no optimizer step
    assert [lp.span.line for lp in sq.training_loops(index)] == [4, 17]
    assert sq.innermost_training_loop(index, 19).span.line == 17
    assert sq.innermost_training_loop(index, 11) is None
    lp = sq.innermost_training_loop(index, 6)
    assert sq.optimizer_step_call(index, lp).text == "opt.step()"
    assert sq.loop_call(index, lp, "backward").text == "loss.backward()"


def test_op_place_takes_the_nearest_stack_and_names_the_function(tmp_path: Path) -> None:
    src = tmp_path / "train.py"
    src.write_text("import torch.nn.functional as F\n\n\ndef train(x, w):\n    y = F.linear(x, w)\n    return y\n", encoding="utf-8")
    b = ProfileBuilder()
    outer = b.op("aten::linear", 10, 50, stack=[frame(src, 5, "train")])
    inner = b.op("aten::addmm", 12, 40)
    b.kernel("MatMulV2_1", 15, 20, op=inner, type="MatMulV2")
    ctx = context(b.build(), [tmp_path])
    assert pq.op_stack(ctx.profile, inner) == pq.op_stack(ctx.profile, outer) >= 0
    place = sq.op_place(ctx, inner)
    assert place is not None and place.index is not None
    assert (place.span.path, place.line, place.function, place.confidence, place.def_line) == (str(src), 5, "train", Confidence.STACK, False)
    site = sq.site_of_op(ctx, inner)
    assert site is not None and site.kind == SiteKind.CALL and site.kind is SiteKind.CALL
    assert sq.site_statement(ctx, site).line == 5
    anchored = sq.place_ops(ctx, [outer, inner])
    assert anchored.span is not None and anchored.span.line == 5 and anchored.site is not None


def test_a_def_line_frame_is_a_module_place_in_the_function_it_names(tmp_path: Path) -> None:
    src = tmp_path / "model.py"
    src.write_text("import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n", encoding="utf-8")
    b = ProfileBuilder(extra={"frame_lines": "def"})
    op = b.op("aten::relu", 10, 5, stack=[frame(src, 5, "forward")])
    place = sq.op_place(context(b.build(), [tmp_path]), op)
    assert place is not None
    assert (place.line, place.function, place.def_line, place.confidence) == (5, "Net.forward", True, Confidence.MODULE)


def test_kernels_by_statement_equals_a_per_row_grouping() -> None:
    """One statement lookup per distinct site gives what a lookup per kernel row gives: groups in
    first-seen order, each with its first kernel's site, rows in the order asked (unmapped rows,
    -1 and rows past the table in the ``None`` group)."""
    from msprof_lsp.hints.context import RuleContext
    from msprof_lsp.hints.config import RuleConfig
    from msprof_lsp.mapping.source.attribute import attribute
    from msprof_lsp.mapping.source.workspace import SourceWorkspace

    sample = Path(__file__).resolve().parents[2] / "samples" / "tiny_transformer"
    profile = load_location(locate(sample / "npu_profile"), use_cache=False)
    ws = SourceWorkspace([sample])
    ctx = RuleContext(profile, attribute(profile, ws), ws, RuleConfig(min_share=0.0))
    n = len(profile.kernels)
    rng = np.random.default_rng(7)
    rows = [*rng.permutation(n).tolist(), -1, n, n + 5, *rng.integers(0, n, 50).tolist()]

    expected: dict[object, tuple[object, list[int]]] = {}
    for r in rows:
        site = sq.site_of_kernel_row(ctx, r)
        span = sq.site_statement(ctx, site) if site is not None else None
        expected.setdefault(span, (site, []))[1].append(r)
    got = sq.kernels_by_statement(ctx, rows)
    assert len(got) > 3  # several statements, and the unmapped rows
    assert [(g.span, g.site, g.rows) for g in got] == [(span, s, rs) for span, (s, rs) in expected.items()]
    assert sq.kernels_by_statement(ctx, []) == []


def test_packets_skip_size_distribution_entries_past_float_or_int64_range() -> None:
    """Found by the fuzz campaign (seed 26): a Size Distribution entry of 1e400 ms or 1e400 packets
    (inf once read) made NPU102, NPU203 and NPU204 fail with OverflowError; such entries are skipped
    like unreadable text, the readable ones kept."""
    from msprof_lsp.mapping.profile.model import CommOp

    dist = {"4.0": [3, 1.5], "8.0": [float("inf"), 1.0], "16.0": [2, float("inf")], "1e400": [1, 1.0],
            "2.0": [10**400, 1.0], "nan": [1, 1.0], "1.0": [1, float("nan")]}
    op = CommOp("hcom_allReduce__1_0_1", "g", 1, "collective", 0, 10, 5, 0, 0, 0,
                bandwidth={"HCCS": {"Size Distribution": dist}})
    got = pq.packets([op])
    assert [(p.link, p.size_bytes, p.count, p.total_ns) for p in got] == [("HCCS", 4_000_000, 3, 1_500_000)]
