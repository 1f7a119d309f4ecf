"""The HTML report's model (server/analysis/views/model.py): the communication matrix against the
producer's own per-link figures, the lane summary's bounds and what it keeps, the breakdown bars'
identity, and a fix's diff applied back to its file giving the fixed, parseable source."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from msprof_lsp.hints.finding import Fix, TextEdit
from msprof_lsp.mapping.profile.cluster import comm_links
from msprof_lsp.mapping.profile.load import load_location, locate
from msprof_lsp.mapping.profile.step_windows import windows
from msprof_lsp.mapping.profile.timemodel import profile_breakdown
from msprof_lsp.server.analysis.views import model
from tests.conftest import shared_fixture

REPO = Path(__file__).resolve().parents[4]
CNN_RANK0 = REPO / "samples" / "cnn_classifier" / "npu_profile" / "ma-node-0_3185260_20250731080000000_ascend_pt"


def test_matrix_of_the_cnn_sample_matches_the_files_own_bandwidth() -> None:
    profile = load_location(locate(CNN_RANK0), use_cache=False)
    links = comm_links(profile, 0)
    assert [(x.src, x.dst, x.steps) for x in links] == [(0, 1, 2)]
    m = model.comm_matrix(links)
    assert m.ranks == [0, 1] and m.transit_ms[0][0] is None and m.transit_ms[1][0] is None
    # allreduce-total 0-1: 1.2001 ms and 1.1999 ms, 2.2859 MB each step; Bandwidth(GB/s) 1.9048 / 1.9051
    assert m.transit_ms[0][1] == pytest.approx(1.2, abs=1e-6)
    assert m.size_mb[0][1] == pytest.approx(2.2859, abs=1e-6)
    assert m.bandwidth_gbps[0][1] == pytest.approx(1.905, abs=5e-4)


def test_matrix_of_the_real_export_keeps_each_ranks_own_rows() -> None:
    rank0 = shared_fixture("Ascend-msinsight/text/level1/rank0_ascend_pt")
    profile = load_location(locate(rank0), use_cache=False)
    links = comm_links(profile, 0)
    assert {x.src for x in links} == {0} and {x.dst for x in links} == set(range(8))
    assert comm_links(profile, 1) == []  # rank 1's rows come from rank 1's own file
    m = model.comm_matrix(links)
    one = m.ranks.index(1)
    # the file's allreduce-total 0-1 of its one step: 3.8839 ms, 61.2106 MB, 15.7599 GB/s
    assert m.transit_ms[0][one] == pytest.approx(3.88393759375, abs=1e-6)  # rounded to the ns
    assert m.bandwidth_gbps[0][one] == pytest.approx(15.7599, rel=1e-3)


def test_the_timeline_draws_the_rules_step_windows_of_a_step_id_export() -> None:
    """A real export with kernel_details Step Id and no ProfilerStep range: the timeline's step
    is the Step Id window the rules and the critical path measure in (step_windows.windows)."""
    rank0 = shared_fixture("Ascend-msinsight-st-level2/level2/rank_0_ascend_pt")
    profile = load_location(locate(rank0), use_cache=False)
    assert not profile.steps and set(profile.kernels["step"]) == {13}
    wins = windows(profile)
    assert [w.id for w in wins] == [13]
    t = model.timeline(profile, None, [], REPO)
    assert [s.step for s in t.steps] == [13] and t.steps_total == 1
    assert t.steps[0].dur_us == pytest.approx((wins[0].end_ns - wins[0].start_ns) / 1000, abs=1e-3)


def _lane(n: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    dur = rng.integers(100, 2_000, n)
    gap = rng.integers(0, 500, n)
    start = np.cumsum(dur + gap) - dur
    cls = rng.integers(0, 4, n)
    site = np.where(rng.random(n) < 0.3, rng.integers(0, 5, n), -1)
    return start, dur, cls, site, np.arange(n) % 7


def test_a_lane_summary_is_bounded_and_keeps_time_classes_and_the_longest_tasks() -> None:
    start, dur, cls, site, name = _lane(100_000)
    window = int(start[-1] + dur[-1] - start[0])
    s, extent, busy, c, count, nm, src = (np.array(v) for v in model.summarise_lane(start, dur, cls, site, name, window))
    assert len(s) <= 2 * model.TOP_PER_LANE + 4 * (model.LANE_BINS + 1)  # 4 classes: a run per class and bin
    assert np.all(np.diff(s) >= 0)  # drawn in time order
    for k in range(4):  # every task and every ns, once, in its own class
        assert count[c == k].sum() == (cls == k).sum() and busy[c == k].sum() == dur[cls == k].sum()
    assert np.all(busy <= extent) and s.min() == start.min() and (s + extent).max() == (start + dur).max()
    singles = count == 1
    kept = set(zip(s[singles].tolist(), extent[singles].tolist()))
    longest = np.argsort(-dur, kind="stable")[: model.TOP_PER_LANE]
    assert all((int(start[i]), int(dur[i])) in kept for i in longest)
    linked = np.flatnonzero(site >= 0)
    for i in linked[np.argsort(-dur[linked], kind="stable")[: model.TOP_PER_LANE]]:
        j = np.flatnonzero((s == start[i]) & singles)
        assert len(j) == 1 and src[j[0]] == site[i] and nm[j[0]] == name[i]
    assert np.all(nm[~singles] == -1)


def test_breakdown_bars_add_up_to_the_step() -> None:
    profile = load_location(locate(CNN_RANK0), use_cache=False)
    bars = model.breakdown_bars(profile_breakdown(profile), 0)
    assert [b.step for b in bars] == [2, 3]
    for b in bars:
        assert b.computing_us + b.communication_not_overlapped_us + b.free_us == pytest.approx(b.step_us, abs=2e-3)
    assert bars[1].step_us == pytest.approx(3358.136, abs=1e-3)  # step_trace_time.csv Stage, step 3


def _apply_unified(old: str, diff: str) -> str:
    """Apply a unified diff (what the page shows) to ``old``, hunk by hunk."""
    lines = old.splitlines(keepends=True)
    out: list[str] = []
    pos = 0
    for hunk in re.split(r"(?m)^(?=@@ )", diff)[1:]:
        head, *body = hunk.splitlines(keepends=True)
        start = int(re.match(r"@@ -(\d+)", head).group(1)) - 1
        out += lines[pos:start]
        pos = start
        for b in body:
            if b.startswith("+"):
                out.append(b[1:])
            elif b.startswith("-"):
                assert lines[pos] == b[1:]
                pos += 1
            elif b.startswith(" "):
                assert lines[pos] == b[1:]
                out.append(lines[pos])
                pos += 1
    return "".join(out + lines[pos:])


def test_a_fix_diff_applied_to_the_file_gives_the_fixed_source(tmp_path: Path) -> None:
    src = tmp_path / "train.py"
    old = "import torch\n\n\ndef step(x):\n    y = torch.relu(x)\n    return torch.dropout(y, 0.1, True)\n"
    src.write_text(old, encoding="utf-8")
    fix = Fix(title="inplace", safe=True, edits=(
        TextEdit(path=str(src), line=5, col=8, end_line=5, end_col=21, new_text="F.relu(x, inplace=True)"),
        TextEdit(path=str(src), line=1, col=0, end_line=1, end_col=0, new_text="import torch.nn.functional as F\n"),
    ))
    diff = model.fix_diff(fix, lambda p: Path(p).read_text(encoding="utf-8"), tmp_path)
    assert diff.startswith("--- a/train.py\n+++ b/train.py\n")
    new = _apply_unified(old, diff)
    assert new.startswith("import torch.nn.functional as F\nimport torch\n")
    assert "    y = F.relu(x, inplace=True)\n" in new and "torch.relu(" not in new
    ast.parse(new)
    assert model.fix_diff(fix, lambda p: None, tmp_path) == ""  # unreadable file: no diff, said on the page
