"""The language server's view of a profile whose frames point outside the workspace folder: the
engine behind diagnostics, hover, code lens, inlay hints and code actions maps through the same
workspace confinement as ``--check``, so nothing outside is read, reported or edited -- not even a
file the editor has open."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from tests.security.open_audit import opens_under
from tests.synth import write_torch_npu_text
from tests.synth.sample_runs import CnnKnobs, cnn_runs

from msprof_lsp.server.lsp.state.engine import Engine, LoadRequest
from msprof_lsp.server.analysis.settings import Settings

REPO = Path(__file__).resolve().parents[3]
def _job(tmp_path: Path) -> tuple[Path, Path]:
    """The CNN sample's sources in ``outside/``; its generated profile (stacks naming outside/'s
    files by their absolute paths) in the workspace folder ``ws/``."""
    outside = tmp_path / "outside"
    outside.mkdir()
    for f in (REPO / "samples" / "cnn_classifier").glob("*.py"):
        shutil.copy2(f, outside / f.name)
    ws = tmp_path / "ws"
    ws.mkdir()
    for run in cnn_runs(outside, replace(CnnKnobs(), ranks=1)):
        write_torch_npu_text(run, ws / "prof")
    return ws, outside


def _snapshot(outside: Path, folders: list[Path], open_texts: dict[str, str] | None = None):
    """(snapshot, the files under ``outside`` opened while loading and analysing)."""
    with opens_under(outside) as opened:
        snap = Engine().load(LoadRequest(folders=folders, settings=Settings(), open_texts=open_texts or {},
                                         use_cache=False))
    return snap, opened


def test_control_the_same_job_with_its_sources_in_the_folder_is_mapped(tmp_path):
    ws, outside = _job(tmp_path)
    snap, opened = _snapshot(outside, [tmp_path])
    assert any(p.startswith(str(outside)) for p in snap.lines) and opened
    assert any(p.startswith(str(outside)) for p in snap.findings)


def test_frames_outside_the_workspace_folder_reach_no_lsp_feature(tmp_path):
    ws, outside = _job(tmp_path)
    model = str(outside / "model.py")
    snap, opened = _snapshot(outside, [ws], open_texts={model: (outside / "model.py").read_text()})
    assert opened == []
    assert snap.loaded and snap.info is not None
    paths = snap.paths() | set(snap.spans) | set(snap.texts) | {h.site.span.path for h in snap.hotspots}
    for fs in snap.findings.values():
        for f in fs:
            paths |= {r.span.path for r in f.related} | {e.path for fix in f.fixes for e in fix.edits}
    assert not any(p.startswith(str(outside)) for p in paths), sorted(paths)
    assert snap.lines == {} and snap.hotspots == []  # every frame was outside: all time unattributed
