"""Issue 25 defects 3 and 5 on the real 4-rank PP=2 job (ranks 1 and 3 keep only summary files):
the analysed rank is one with device tasks, the report says why, and the notice of a rank with
no kernel table names what is missing."""

from __future__ import annotations

import pytest

from conftest import shared_fixture
from msprof_lsp.mapping.profile.cluster import load_profile, pick_rank
from msprof_lsp.mapping.profile.model import RankSummary

QWEN_PP = "Ascend-msinsight-st-level2/level2"


def test_real_cluster_analyses_the_slowest_rank_with_kernels():
    loaded = load_profile([shared_fixture(QWEN_PP)], use_cache=False)
    c = loaded.cluster
    assert c is not None and c.slowest_rank == 3  # 810.2 ms, 0.1 % over the fastest
    data = {r.rank: r.device_data for r in c.ranks}
    assert data == {0: True, 1: False, 2: True, 3: False}
    # rank 0 (810.0 ms) is slower than rank 2 (809.8 ms) among the ranks with kernels
    assert c.analysed_rank == 0 and loaded.location.rank == 0
    assert c.analysed_why == "the slowest rank with device tasks (none in ranks 1, 3)"
    assert len(loaded.profile.kernels) > 2000


def test_real_rank_without_kernels_is_not_blamed_on_a_missing_trace():
    loaded = load_profile([shared_fixture(QWEN_PP)], rank=3, use_cache=False)
    assert loaded.cluster is not None and loaded.cluster.analysed_rank == 3
    assert loaded.cluster.analysed_why == "rank 3 was asked for"
    texts = [i.message for i in loaded.profile.issues]
    assert not any("kernels come from trace_view.json" in t for t in texts)
    assert any(t.startswith("no kernel table (kernel_details.csv and trace_view.json both absent)") for t in texts)


def _rank(r: int, step_ms: float, tasks: int) -> RankSummary:
    return RankSummary(rank=r, path=f"r{r}", step_time_ns=step_ms * 1e6, comm_not_overlapped_ns=0.0,
                       comm_share=0.0, device_data=tasks > 0)


@pytest.mark.parametrize(("ranks", "expected"), [
    ([_rank(0, 10, 5), _rank(1, 11, 5)], (1, "the slowest rank")),
    ([_rank(0, 10, 5), _rank(1, 11, 0)], (0, "the slowest rank with device tasks (none in rank 1)")),
    ([_rank(0, 10, 0), _rank(1, 11, 0)], (1, "the slowest rank (no rank holds device tasks)")),
])
def test_pick_rank(ranks, expected):
    assert pick_rank(ranks) == expected
