"""The old profile after a fix: re-checking the CNN sample's recorded NPU profile after applying a
finding's fix to a copy of the source. A finding whose fix is now in the source says so, drops to
hint and offers to record instead of the fix; a finding whose recorded line is gone is not moved
onto other code."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from msprof_lsp.hints.finding import Finding, Severity
from msprof_lsp.hints.fixes import apply_edits, apply_fixes, fix_id
from msprof_lsp.hints.fixes.profiling import insert_profiler
from msprof_lsp.hints.fixed_in_source import FIXED_NOTE
from msprof_lsp.server.analysis.run import analyse_paths
from msprof_lsp.server.analysis.settings import Settings

CNN = Path(__file__).resolve().parents[2] / "samples" / "cnn_classifier"


def _copy(dst: Path) -> Path:
    dst.mkdir(parents=True)
    for name in ("model.py", "train.py", "data.py"):
        shutil.copy2(CNN / name, dst / name)
    shutil.copytree(CNN / "npu_profile", dst / "npu_profile")
    return dst


def _findings(root: Path, cache: Path) -> list[Finding]:
    (a,) = analyse_paths([root], Settings(cache_dir=str(cache)))
    return a.findings


def _apply_first_fix(findings: list[Finding], code: str) -> None:
    f = next(f for f in findings if f.code == code)
    fix = f.fixes[0]
    path = Path(fix.edits[0].path)
    path.write_text(apply_edits(path.read_text(encoding="utf-8"), list(fix.edits)), encoding="utf-8")


def _one(findings: list[Finding], code: str) -> Finding:
    (f,) = [f for f in findings if f.code == code]
    return f


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


def _is_fixed(f: Finding, fix: str) -> None:
    assert f.severity is Severity.HINT
    assert f.message.endswith(f"Now {FIXED_NOTE}.")
    assert f.evidence["fixed_in_source"] == fix
    # the record action instead of the fix: the sample's script already records a profile, so it
    # is declined with that reason, and no fix of the finding is offered
    assert [o.fix for o in f.offers] == [fix_id(insert_profiler)] and f.fixes == []
    assert f.evidence["no_fix"] == "the script already records a profile"


def test_dataloader_and_fused_optimizer_fixed_since_the_profile(tmp_path, cache):
    root = _copy(tmp_path / "cnn")
    before = _findings(root, cache)
    assert _one(before, "NPU104").severity is Severity.WARNING and _one(before, "NPU220").fixes
    _apply_first_fix(before, "NPU104")
    _apply_first_fix(before, "NPU220")
    text = (root / "train.py").read_text(encoding="utf-8")
    assert "num_workers=4" in text and "pin_memory=True" in text and "fused=True" in text
    after = _findings(root, cache)
    _is_fixed(_one(after, "NPU104"), "dataloader.tune_dataloader")
    _is_fixed(_one(after, "NPU220"), "optimizer.fused_optimizer")
    # the same time and place as before: the finding is the old run's evidence
    assert _one(after, "NPU104").time_per_step_us == _one(before, "NPU104").time_per_step_us
    assert _one(after, "NPU104").span == _one(before, "NPU104").span
    # findings whose fix is not in the source are as they were
    b, a = _one(before, "NPU102"), _one(after, "NPU102")
    assert (a.severity, a.message, [x.title for x in a.fixes]) == (b.severity, b.message, [x.title for x in b.fixes])


def test_removed_synchronize_is_fixed_not_moved(tmp_path, cache):
    root = _copy(tmp_path / "cnn")
    before = _findings(root, cache)
    # the synchronize() is a cause of its own (its fix changes the sync calls, the DataLoader's the
    # fetch): NPU108 keeps its finding and its fix
    sync = _one(before, "NPU108")
    assert "NPU108" not in _one(before, "NPU104").evidence.get("same_cause", [])
    fix = next(x for x in sync.fixes if "synchronize" in x.title)
    path = Path(fix.edits[0].path)
    path.write_text(apply_edits(path.read_text(encoding="utf-8"), list(fix.edits)), encoding="utf-8")
    assert "synchronize()" not in (root / "train.py").read_text(encoding="utf-8").replace("# make", "")
    f = _one(_findings(root, cache), "NPU108")
    _is_fixed(f, "host_sync.remove_synchronize")
    assert f.span is None  # the statement is gone: nothing to point at


def test_stale_relu_dropout_is_not_moved_to_a_relu_without_dropout(tmp_path, cache):
    root = _copy(tmp_path / "cnn")
    before = _findings(root, cache)
    assert sorted(f.span.line for f in before if f.code == "NPU101") == [34, 48, 49]
    _apply_first_fix(before, "NPU101")
    text = (root / "model.py").read_text(encoding="utf-8")
    conv_relu = next(i for i, ln in enumerate(text.splitlines(), 1) if "F.relu(self.bn(" in ln)
    for f in _findings(root, cache):
        if f.span is not None and Path(f.span.path).name == "model.py":
            assert f.span.line != conv_relu, f
        if f.code == "NPU101" and f.span is not None:
            assert "dropout" in text.splitlines()[f.span.line - 1].lower() or "drop" in text.splitlines()[f.span.line - 1]


def _compile_pairs(root: Path, findings: list[Finding], lines: list[int]) -> None:
    """Apply the compile fix of the NPU101 findings on ``lines`` of model.py, together."""
    model = root / "model.py"
    fixes = [f.fixes[0] for f in findings if f.code == "NPU101" and f.span.line in lines]
    assert len(fixes) == len(lines) and all(x.title.startswith("Compile ReLU+Dropout") for x in fixes)
    done = apply_fixes(model.read_text(encoding="utf-8"), fixes, path=str(model))
    assert len(done.applied) == len(lines) and not done.declined
    model.write_text(done.source, encoding="utf-8")


def test_compiled_pairs_fixed_since_the_profile(tmp_path, cache):
    """Every ReLU->Dropout pair compiled: the profile's pairs no longer anchor (model.py gained a
    third forward and shifted), and the file holds the fix's compiled helper and no pair outside
    it, so the stale NPU101 is the old run's evidence, marked fixed, offering to re-profile."""
    root = _copy(tmp_path / "cnn")
    before = _findings(root, cache)
    old = [f for f in before if f.code == "NPU101"]
    _compile_pairs(root, before, [f.span.line for f in old])
    text = (root / "model.py").read_text(encoding="utf-8")
    # the npu form (an Ascend profile): the helper compiles on its first call
    assert text.count("def _relu_dropout_fn():") == 1 and "F.dropout(F.relu(self.fc2(x))" not in text  # applied together: once
    f = _one(_findings(root, cache), "NPU101")
    _is_fixed(f, "relu_dropout.compile_pair")
    assert f.span is None  # not moved onto other code
    assert f.time_per_step_us == pytest.approx(sum(g.time_per_step_us for g in old))


def test_one_pair_compiled_of_three_is_not_called_fixed(tmp_path, cache):
    root = _copy(tmp_path / "cnn")
    before = _findings(root, cache)
    _compile_pairs(root, before, [max(f.span.line for f in before if f.code == "NPU101")])
    after = [f for f in _findings(root, cache) if f.code == "NPU101"]
    assert after and all("fixed_in_source" not in f.evidence and FIXED_NOTE not in f.message for f in after)


def test_fixed_finding_offers_the_record_action_when_the_loop_has_no_profiler(tmp_path, cache):
    root = _copy(tmp_path / "cnn")
    train = root / "train.py"
    text = train.read_text(encoding="utf-8")
    # the sample's own profiler made unrecognisable, on the same lines (the profile's frames stay valid)
    assert text.count("return torch.profiler.profile(") == 1
    train.write_text(text.replace("return torch.profiler.profile(", "return dict("), encoding="utf-8")
    _apply_first_fix(_findings(root, cache), "NPU104")
    f = _one(_findings(root, cache), "NPU104")
    assert f.severity is Severity.HINT and f.message.endswith(f"Now {FIXED_NOTE}.")
    (fix,) = f.fixes
    assert fix.title.startswith("Record a profile of this training loop")
    now = train.read_text(encoding="utf-8")
    new = apply_edits(now, list(fix.edits))
    assert new == insert_profiler(now, f.offers[0].anchor, path=str(train)).new_source
    assert "with msprof_profiler as prof:" in new and "MSPROF_LSP_PROFILE" in new
