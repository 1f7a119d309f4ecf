"""linking: nesting, ancestor walk, backward resolution, modules -- on hand-described tables and the real trace."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest
import pandas as pd

from conftest import shared_fixture
from msprof_lsp.mapping.profile.linking import (
    assign_modules,
    assign_parents,
    innermost_enclosing,
    link_backward_by_sequence,
    match_rows,
    nearest_on_chain,
    nearest_stack,
    resolve_kernel_links,
    row_groups,
)
from msprof_lsp.mapping.profile.model import HOST_OP_SCHEMA, KERNEL_SCHEMA, MODULE_SCHEMA, make_table

TRACE_2024 = "Ascend-msprof-analyze/test/ut/advisor/timeline_advice/trace_view.json"


def ops_table(rows: list[dict]) -> pd.DataFrame:
    cols = {k: [r.get(k, HOST_OP_SCHEMA[k][1]) for r in rows] for k in HOST_OP_SCHEMA if any(k in r for r in rows)}
    return make_table(HOST_OP_SCHEMA, cols, len(rows))


# Two threads. Thread 1: step [0,100) > linear [10,60) > addmm [10,50) (same start: longer first)
# > aclnnAddmm [20,40); relu [60,80) > aclnnRelu [65,70); zero-length op at 90 under step.
# Thread 2 (autograd): node [200,300) > ReluBackward0 [210,290) > threshold_backward [220,280)
# > aclnnThresholdBackward [230,250). An untimed op (operator_details only) at the end.
OPS = [
    dict(name="aclnnAddmm", start_ns=20, dur_ns=20, pid=1, tid=1),  # 0
    dict(name="aten::addmm", start_ns=10, dur_ns=40, pid=1, tid=1, seq=1),  # 1
    dict(name="aten::linear", start_ns=10, dur_ns=50, pid=1, tid=1, stack=0, seq=1),  # 2
    dict(name="ProfilerStep#1", start_ns=0, dur_ns=100, pid=1, tid=1),  # 3
    dict(name="aten::relu", start_ns=60, dur_ns=20, pid=1, tid=1, stack=1, seq=2),  # 4
    dict(name="aclnnRelu", start_ns=65, dur_ns=5, pid=1, tid=1),  # 5
    dict(name="aten::empty", start_ns=90, dur_ns=0, pid=1, tid=1),  # 6
    dict(name="autograd::engine::evaluate_function: ReluBackward0", start_ns=200, dur_ns=100, pid=1, tid=2),  # 7
    dict(name="ReluBackward0", start_ns=210, dur_ns=80, pid=1, tid=2, seq=2, fwd_thread=1),  # 8
    dict(name="aten::threshold_backward", start_ns=220, dur_ns=60, pid=1, tid=2),  # 9
    dict(name="aclnnThresholdBackward", start_ns=230, dur_ns=20, pid=1, tid=2),  # 10
    dict(name="aten::add_", start_ns=-1, dur_ns=0, pid=-1, tid=-1),  # 11
]
PARENTS = [1, 2, 3, -1, 3, 4, 3, -1, 7, 8, 9, -1]
DEPTHS = [3, 2, 1, 0, 1, 2, 1, 0, 1, 2, 3, 0]


def test_assign_parents_nests_per_thread() -> None:
    ops = ops_table(OPS)
    assign_parents(ops)
    assert ops["parent"].tolist() == PARENTS
    assert ops["depth"].tolist() == DEPTHS


def test_assign_parents_is_independent_of_row_order() -> None:
    order = [7, 0, 11, 5, 3, 9, 1, 8, 6, 2, 10, 4]
    ops = ops_table([OPS[i] for i in order])
    assign_parents(ops)
    back = {new: old for new, old in enumerate(order)}
    parents = [back[p] if p >= 0 else -1 for p in ops["parent"]]
    assert parents == [PARENTS[i] for i in order]


def test_nearest_on_chain_and_nearest_stack() -> None:
    ops = ops_table(OPS)
    assign_parents(ops)
    has = ops["stack"].to_numpy() >= 0
    got = nearest_on_chain(ops["parent"].to_numpy(), has)
    # aclnnAddmm -> addmm -> linear (stack 0); aclnnRelu -> relu (stack 1); backward chain: none
    assert got.tolist() == [2, 2, 2, -1, 4, 4, -1, -1, -1, -1, -1, -1]
    assert nearest_stack(ops, 0) == (0, 2)
    assert nearest_stack(ops, 10) == (-1, -1)


def kernels_for(host_ops: list[int]) -> pd.DataFrame:
    return make_table(KERNEL_SCHEMA, {"name": [f"k{i}" for i in range(len(host_ops))], "host_op": host_ops})


def test_resolve_kernel_links() -> None:
    ops = ops_table(OPS)
    assign_parents(ops)
    ops.loc[8, "fwd_op"] = 4  # fwdbwd: ReluBackward0 -> aten::relu
    kernels = kernels_for([0, 5, 10, -1, 6])
    resolve_kernel_links(kernels, ops)
    assert kernels["link"].astype(str).tolist() == ["stack", "stack", "backward", "none", "host"]
    assert kernels["stack"].tolist() == [0, 1, 1, -1, -1]  # backward kernel takes aten::relu's stack
    assert kernels["fwd_op"].tolist() == [-1, -1, 4, -1, -1]
    assert kernels["backward"].tolist() == [False, False, True, False, False]


def test_backward_kernel_whose_forward_op_has_no_stack() -> None:
    ops = ops_table(OPS)
    ops["stack"] = -1  # captured without with_stack
    assign_parents(ops)
    ops.loc[8, "fwd_op"] = 4
    kernels = kernels_for([10, 0])
    resolve_kernel_links(kernels, ops)
    assert kernels["link"].astype(str).tolist() == ["backward", "host"]
    assert kernels["stack"].tolist() == [-1, -1] and kernels["fwd_op"].tolist() == [4, -1]


def test_forward_stack_found_on_an_ancestor_of_the_forward_op() -> None:
    ops = ops_table(OPS)
    assign_parents(ops)
    ops.loc[8, "fwd_op"] = 1  # aten::addmm has no stack; its parent aten::linear has stack 0
    kernels = kernels_for([10])
    resolve_kernel_links(kernels, ops)
    assert kernels["stack"].tolist() == [0] and kernels["link"].astype(str).tolist() == ["backward"]


def test_link_backward_by_sequence_picks_the_op_that_created_the_node() -> None:
    ops = ops_table(OPS)
    assign_parents(ops)
    fwd_thread = ops["fwd_thread"].to_numpy()
    seq = ops["seq"].to_numpy()
    forward = (fwd_thread <= 0) & (seq >= 0)
    backward = fwd_thread > 0
    assert link_backward_by_sequence(ops, forward, backward) == 1
    assert ops["fwd_op"].tolist()[8] == 4
    # seq 1 is on aten::linear and aten::addmm (same start): a backward node with seq 1 after
    # them links to one of those two, never to an op with another number
    extra = ops_table(OPS + [dict(name="AddmmBackward0", start_ns=400, dur_ns=5, pid=1, tid=2, seq=1, fwd_thread=1)])
    assign_parents(extra)
    ft, sq = extra["fwd_thread"].to_numpy(), extra["seq"].to_numpy()
    link_backward_by_sequence(extra, (ft <= 0) & (sq >= 0), ft > 0)
    assert extra["fwd_op"].tolist()[12] in (1, 2)


def test_sequence_fallback_reproduces_the_real_fwdbwd_flows() -> None:
    """On the 2024 trace, the fallback finds the same forward op as every fwdbwd flow."""
    ref = json.loads(shared_fixture(TRACE_2024).read_text(encoding="utf-8"))
    cpu = [e for e in ref if e.get("cat") == "cpu_op"]
    key = {(e["pid"], e["tid"], e["ts"]): i for i, e in enumerate(cpu)}
    flows = defaultdict(dict)
    for e in ref:
        if e.get("cat") == "fwdbwd":
            flows[e["id"]][e["ph"]] = key[(e["pid"], e["tid"], e["ts"])]
    expected = {f["f"]: f["s"] for f in flows.values()}
    assert len(expected) == 17

    from decimal import Decimal

    ops = ops_table(
        [
            dict(
                name=e["name"], start_ns=int(Decimal(e["ts"]) * 1000), dur_ns=round(e["dur"] * 1000),
                pid=e["pid"], tid=e["tid"], seq=e["args"]["Sequence number"], fwd_thread=e["args"]["Fwd thread id"],
            )
            for e in cpu
        ]
    )
    assign_parents(ops)
    ft = ops["fwd_thread"].to_numpy()
    link_backward_by_sequence(ops, ft == 0, ft > 0)
    fwd = ops["fwd_op"].to_numpy()
    assert {i: int(fwd[i]) for i in expected} == expected
    # backward nodes that have no flow (AccumulateGrad) must not be linked by a false match
    linked = set(np.flatnonzero(fwd >= 0).tolist())
    assert linked == set(expected)


def test_innermost_enclosing_points_and_intervals() -> None:
    ops = ops_table(OPS)
    assign_parents(ops)
    pid = np.array([1, 1, 1, 1, 1, 9])
    tid = np.array([1, 1, 1, 2, 1, 1])
    start = np.array([25, 55, 95, 240, 150, 25])
    got = innermost_enclosing(ops, pid, tid, start)
    # 25: inside aclnnAddmm; 55: linear; 95: step; 240: aclnnThresholdBackward; 150: nothing; pid 9: nothing
    assert got.tolist() == [0, 2, 3, 10, -1, -1]
    end = np.array([45, 75, 99, 285, 151, 30])
    # [25,45] fits addmm (not aclnnAddmm, ends 40); [55,75] only the step; [240,285] ReluBackward0
    assert innermost_enclosing(ops, pid, tid, start, end).tolist() == [1, 3, 3, 8, -1, -1]


def test_assign_modules_innermost_module_on_the_same_thread() -> None:
    ops = ops_table(OPS)
    assign_parents(ops)
    modules = make_table(
        MODULE_SCHEMA,
        {
            "cls": ["Net", "Linear", "ReLU", "Other"],
            "k": [0, 0, 0, 0],
            "start_ns": [5, 8, 60, 200],
            "dur_ns": [80, 52, 25, 100],
            "pid": [1, 1, 1, 1],
            "tid": [1, 1, 1, 3],  # "Other" on another thread: encloses nothing here
        },
    )
    assign_parents(modules)
    assert modules["parent"].tolist() == [-1, 0, 0, -1]
    assign_modules(ops, modules)
    #             aclnnAddmm addmm linear step relu aclnnRelu empty(90) bwd...        untimed
    assert ops["module"].tolist() == [1, 1, 1, -1, 2, 2, -1, -1, -1, -1, -1, -1]


def test_match_rows_prefers_the_deepest() -> None:
    table = (np.array([1, 1, 1, 2]), np.array([10, 10, 20, 10]))
    depth = np.array([0, 3, 1, 0])
    query = (np.array([1, 1, 2, 3]), np.array([10, 20, 10, 10]))
    assert match_rows(table, query, prefer=depth).tolist() == [1, 2, 3, -1]
    assert match_rows(table, query, prefer=-depth).tolist() == [0, 2, 3, -1]


def test_row_groups_numbers_groups_like_groupby_ngroup() -> None:
    """First-appearance numbering of distinct key rows, -1 and huge values included (the
    attribution groups on stack / op / module ids where -1 means none)."""
    rng = np.random.default_rng(3)
    cols = {
        "sid": rng.integers(-1, 40, 2000),
        "ctx": rng.integers(-1, 6, 2000),
        "big": rng.choice(np.array([-1, 2**62, 2**62 + 1, 7]), 2000),
        "kt": rng.integers(-1, 3, 2000),
    }
    frame = pd.DataFrame(cols)
    expected = frame.groupby(list(cols), sort=False).ngroup().to_numpy()
    assert row_groups(list(cols.values())).tolist() == expected.tolist()
    assert row_groups([np.array([5, 5, 3])]).tolist() == [0, 0, 1]


@pytest.mark.parametrize("seed", range(40))
def test_row_groups_combines_any_columns_like_groupby(seed: int) -> None:
    """Integer columns go into one mixed-radix key unfactorized (wide ranges, int64 and uint64
    extremes renumbered first), text and bool columns by their codes: the same groups as pandas."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    kinds = [
        lambda: rng.integers(-3, 3, n),
        lambda: rng.random(n) < 0.5,
        lambda: np.array(rng.choice(["a", "b", "c"], n), dtype=object),
        lambda: np.array([-(2**62), 0, 2**62, 2**63 - 1])[rng.integers(0, 4, n)],
        lambda: np.array([0, 2**64 - 1, 5], dtype=np.uint64)[rng.integers(0, 3, n)],
        lambda: rng.integers(0, 2**40, n),
    ]
    cols = [kinds[int(k)]() for k in rng.integers(0, len(kinds), int(rng.integers(1, 6)))]
    expected = pd.DataFrame(dict(enumerate(cols))).groupby(list(range(len(cols))), sort=False).ngroup().to_numpy()
    assert row_groups(cols).tolist() == expected.tolist()
