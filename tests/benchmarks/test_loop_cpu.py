"""benchmarks/loop_cpu.py builds what it claims to compare: A is the sample with the product's record
block and nothing else changed but the sample's own profiler gone; B is A with the rule's fix.
(The recordings themselves need torch and minutes: the script, not a test, runs them.)"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import pytest

from msprof_lsp.hints.fixes.profiling import PROFILE_ENV, SKIP_FIRST

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def loop_cpu():
    sys.path.insert(0, str(BENCH))
    try:
        import loop_cpu as mod

        yield mod
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.parametrize("sample", ["tiny_transformer", "cnn_classifier"])
def test_workspace_a_is_the_sample_with_the_record_block(loop_cpu, sample, tmp_path):
    a = loop_cpu.workspace_a(sample, tmp_path)
    before = (loop_cpu.REPO / "samples" / sample / "train.py").read_text(encoding="utf-8")
    after = (a / "train.py").read_text(encoding="utf-8")
    assert "torch.profiler.profile(" in after and PROFILE_ENV in after and f"skip_first={SKIP_FIRST}" in after
    removed = [ln[2:] for ln in difflib.ndiff(before.splitlines(), after.splitlines()) if ln.startswith("- ")]
    # only the sample's own profiler goes (its function and the one line that calls it) and the loop
    # is re-indented under the block
    own = before[before.index("def make_profiler("):before.index("\n\n\n", before.index("def make_profiler("))]
    loop_lines = {ln.strip() for ln in after.splitlines()}
    assert all(ln in own or ln.strip() in loop_lines or "make_profiler(args.profile_dir" in ln for ln in removed)
    assert "min-share = 0" in (a / "pyproject.toml").read_text(encoding="utf-8")


def test_workspace_b_applies_npu220s_fix(loop_cpu, tmp_path):
    a = loop_cpu.workspace_a("tiny_transformer", tmp_path)
    text = (a / "train.py").read_text(encoding="utf-8")
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "torch.optim.AdamW(" in ln)
    b, summary = loop_cpu.workspace_b(a, "NPU220", a / "train.py", line, "NPU220")
    assert summary == "fused=True"
    assert "weight_decay=0.1, fused=True)" in (b / "train.py").read_text(encoding="utf-8")
    assert (b / "model.py").read_bytes() == (a / "model.py").read_bytes()
