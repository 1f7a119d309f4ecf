"""``msprof-lsp check --fix / --unsafe-fixes / --diff`` (ruff's conventions) on copies of the
samples and of a seeded project: the diff applies with ``git apply`` and equals what ``--fix``
writes, a second ``--fix`` changes nothing, the fixed samples still train (torch_npu stand-in),
only the checked PATH is written, overlapping fixes are skipped and counted."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli_support import isolated_cache  # noqa: F401 - autouse fixture
from cli_support import REPO, run_cli
from msprof_lsp.hints.finding import Finding, Fix, Severity, TextEdit
from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.server.check import fixing
from msprof_lsp.server.analysis.views.result import CheckRun, JobReport
from tests.hints.rules import seedkit as sk

SAMPLES = REPO / "samples"
RUN_FIXED = REPO / "tests" / "hints" / "fixes" / "run_fixed.py"  # runs a copy with the torch_npu stand-in

pytestmark = pytest.mark.skipif(not SAMPLES.is_dir(), reason="samples/ not in this checkout")


def _sources(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.py"))}


def _copy(sample: str, dest: Path) -> Path:
    shutil.copytree(SAMPLES / sample, dest / sample, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.mark.parametrize("sample", ["cnn_classifier", "tiny_transformer"])
def test_diff_applies_fix_writes_it_a_second_fix_changes_nothing_and_the_sample_trains(sample, tmp_path, monkeypatch, capsys):
    ws = _copy(sample, tmp_path / "ws")
    monkeypatch.chdir(ws)
    before = _sources(ws)

    diff = run_cli(["check", sample, "--diff", "--unsafe-fixes"], capsys)
    assert diff.code == 1, diff.err  # nothing written: the warnings remain
    assert _sources(ws) == before
    assert diff.out.startswith(f"--- a/{sample}/") and "would fix" in diff.err

    applied = _copy(sample, tmp_path / "applied")
    (tmp_path / "fixes.patch").write_text(diff.out, encoding="utf-8")
    done = subprocess.run(["git", "apply", str(tmp_path / "fixes.patch")], cwd=applied, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

    fixed = run_cli(["check", sample, "--fix", "--unsafe-fixes", "--format", "concise"], capsys)
    assert "fixed" in fixed.err and "Traceback" not in fixed.err
    after = _sources(ws)
    assert after != before and after == _sources(applied)  # the diff is exactly what --fix writes

    again = run_cli(["check", sample, "--fix", "--unsafe-fixes"], capsys)
    assert _sources(ws) == after, "a second --fix changed the files"
    assert "no fix to apply" in again.err

    work = ws / sample
    proc = subprocess.run([sys.executable, str(RUN_FIXED), "train", "2", str(work)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not (work / "error.txt").exists(), (work / "error.txt").read_text(encoding="utf-8")[-3000:]
    assert "step 1 loss" in (work / "stdout.txt").read_text(encoding="utf-8")


def test_fix_exit_status_is_that_of_what_remains(tmp_path, monkeypatch, capsys):
    """NPU104 (a warning; review fixes: workers and pinned memory, non_blocking copies) fails the run
    at --fail-on info; after --fix --unsafe-fixes the source has the fix, the finding is a hint
    ("fixed in the source since this profile was recorded") and the run passes."""
    ws = _copy("cnn_classifier", tmp_path)
    monkeypatch.chdir(ws)
    argv = ["check", "cnn_classifier", "--select", "NPU104", "--fail-on", "info", "--format", "concise"]
    assert run_cli(argv, capsys).code == 1
    safe_only = run_cli([*argv, "--fix"], capsys)
    assert safe_only.code == 1 and "add --unsafe-fixes" in safe_only.err
    fixed = run_cli([*argv, "--fix", "--unsafe-fixes"], capsys)
    assert fixed.code == 0, fixed.out + fixed.err
    assert "pin_memory=True" in (ws / "cnn_classifier" / "train.py").read_text(encoding="utf-8")
    assert "fixed in the source" in fixed.out


def _seeded(tmp_path: Path) -> Path:
    """The seed project and a profile whose allocator churn NPU109 blames on its empty_cache()."""
    lin = sk.L.linear(32, 1024, 64, mm_us=60.0)
    alloc = sk.OpSpec("aten::empty_strided", cann=(sk.CannSpec("AscendCL@aclrtFree", sk.us(9000.0)),
                                                   sk.CannSpec("AscendCL@aclMallocMemInner", sk.us(3000.0))))
    op = dataclasses.replace(lin.op, children=(alloc, *lin.op.children))
    run = sk.step_run([sk.UserCall(sk.fwd("x = self.drop(self.act(self.fc1(x)))"), (sk.Launch(op, lin.frames),))])
    sk.write_torch_npu_text(run, tmp_path / "prof")
    return sk.write_project(tmp_path)


def test_fix_writes_the_safe_fix_only_and_is_idempotent(tmp_path, monkeypatch, capsys):
    proj = _seeded(tmp_path)
    monkeypatch.chdir(tmp_path)
    train = proj / "train.py"
    first = run_cli(["check", "proj", "--profile", "prof", "--fix"], capsys)
    assert "fixed 1 finding (1 fix) in 1 file" in first.err, first.err
    assert "review fix" in first.err and "add --unsafe-fixes" in first.err  # NPU107's is review: not written
    text = train.read_text(encoding="utf-8")
    assert "empty_cache" not in text and "set_compile_mode" not in text
    second = run_cli(["check", "proj", "--profile", "prof", "--fix"], capsys)
    assert train.read_text(encoding="utf-8") == text and "no fix to apply" in second.err


def test_quiet_prints_nothing_on_a_clean_run(tmp_path, monkeypatch, capsys):
    _seeded(tmp_path)
    monkeypatch.chdir(tmp_path)
    clean = run_cli(["check", "proj", "--profile", "prof", "--select", "NPU230", "-q"], capsys)
    assert (clean.code, clean.out, clean.err) == (0, "", "")
    loud = run_cli(["check", "proj", "--profile", "prof", "--select", "NPU230"], capsys)
    assert loud.code == 0 and loud.out  # without -q the report says there is nothing


# -- the plan, without an analysis ----------------------------------------------------------------


def _run_with(path: Path, *fixes: Fix) -> CheckRun:
    finding = Finding("NPU109", "alloc-churn", Severity.WARNING, "m", None, fixes=list(fixes))
    job = JobReport(profile=None, heat=None, findings=[finding],  # type: ignore[arg-type] - the plan reads neither
                    source_text=safe_io.read_source_text)  # as the workspace reads a file
    return CheckRun(jobs=[job], cwd=path.parent, tool_version="0")


def _edit(path: Path, line: int, col: int, end_col: int, new: str) -> TextEdit:
    return TextEdit(str(path), line, col, line, end_col, new)


def test_overlapping_fixes_apply_the_first_and_count_the_rest(tmp_path):
    src = tmp_path / "ws" / "a.py"
    src.parent.mkdir()
    src.write_text("x = compute(1)\ny = 2\nz = 3\n", encoding="utf-8")
    first = Fix("one", True, (_edit(src, 1, 4, 14, "fast(1)"),))
    clash = Fix("two", True, (_edit(src, 1, 4, 11, "slow"),))
    other = Fix("three", True, (_edit(src, 2, 4, 5, "3"),))
    preferred = Fix("pref", True, (_edit(src, 3, 0, 1, "w"),), group="g")
    alternative = Fix("alt", True, (_edit(src, 3, 0, 1, "v"),), group="g")  # would overlap: never tried
    review = Fix("review", False, (_edit(src, 2, 0, 0, "# r\n"),))
    plan = fixing.plan(_run_with(src, first, clash, other, preferred, alternative, review), [src.parent], unsafe=False)
    [f] = plan.files
    assert f.new == "x = fast(1)\ny = 3\nw = 3\n"
    assert (plan.skipped, plan.review_left, f.fixes) == (1, 1, 3)  # the alternative is no overlap
    lines = fixing.summary(plan, wrote=False)
    assert lines[0] == "would fix 1 finding (3 fixes) in 1 file"
    assert "1 fix skipped: it overlaps a fix applied in the same file" in lines
    assert "1 review fix not applied (add --unsafe-fixes)" in lines
    assert src.read_text(encoding="utf-8") == "x = compute(1)\ny = 2\nz = 3\n"  # planning writes nothing


def test_only_files_inside_the_checked_paths_are_written(tmp_path):
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (outside / "b.py").write_text("b = 1\n", encoding="utf-8")
    (ws / "link.py").symlink_to(outside / "b.py")
    for target in (outside / "b.py", ws / "link.py"):
        plan = fixing.plan(_run_with(target, Fix("t", True, (_edit(target, 1, 4, 5, "2"),))), [ws], unsafe=False)
        assert not plan.files and "outside the checked paths" in plan.refused[0]
    assert (outside / "b.py").read_text(encoding="utf-8") == "b = 1\n"
    with pytest.raises(OSError):
        fixing._write_regular(str(ws / "link.py"), b"b = 2\n")  # never through a symlink
    assert (outside / "b.py").read_text(encoding="utf-8") == "b = 1\n"


def test_a_failed_write_leaves_the_file_whole(tmp_path, monkeypatch):
    """A fix is written to a temporary file renamed over the original: a write that fails (a full
    disk here) leaves the old text, its mode, and no temporary file behind."""
    target = tmp_path / "model.py"
    target.write_text("x = 1\n", encoding="utf-8")
    target.chmod(0o640)

    def full(fd):  # noqa: ANN001, ANN202
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fixing.os, "fsync", full)
    with pytest.raises(OSError):
        fixing._write_regular(str(target), b"x = 2\n")
    assert target.read_text(encoding="utf-8") == "x = 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.py"]
    monkeypatch.undo()
    fixing._write_regular(str(target), b"x = 2\n")
    assert target.read_text(encoding="utf-8") == "x = 2\n" and (target.stat().st_mode & 0o777) == 0o640


def test_a_file_changed_since_the_analysis_is_not_written_and_encodings_are_kept(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    latin = ws / "latin.py"
    latin.write_bytes(b"# -*- coding: latin-1 -*-\r\nname = '\xe9'\r\nx = 1\r\n")
    run = _run_with(latin, Fix("t", True, (_edit(latin, 3, 4, 5, "2"),)))
    plan = fixing.plan(run, [ws], unsafe=False)
    fixing.write(plan)
    assert latin.read_bytes() == b"# -*- coding: latin-1 -*-\r\nname = '\xe9'\r\nx = 2\r\n"
    arrow = fixing.plan(_run_with(latin, Fix("t", True, (_edit(latin, 3, 4, 5, "'\u2192'"),))), [ws], unsafe=False)
    assert not fixing.write(arrow) and "cannot be written in the file's encoding" in arrow.refused[0]
    assert latin.read_bytes().endswith(b"x = 2\r\n")
    run.jobs[0].source_text = lambda p: "something else"
    assert "changed since it was analysed" in fixing.plan(run, [ws], unsafe=False).refused[0]


def test_diff_marks_a_last_line_without_newline(tmp_path):
    src = tmp_path / "a.py"
    src.write_text("x = 1", encoding="utf-8")
    plan = fixing.plan(_run_with(src, Fix("t", True, (_edit(src, 1, 4, 5, "2"),))), [tmp_path], unsafe=False)
    patch = fixing.diff(plan, tmp_path)
    assert patch.endswith("+x = 2\n\\ No newline at end of file\n")
    (tmp_path / "p.patch").write_text(patch, encoding="utf-8")
    done = subprocess.run(["git", "apply", "p.patch"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert src.read_text(encoding="utf-8") == "x = 2"
