"""The language server's view of a profile whose frames point outside the workspace folder: the
engine behind diagnostics, hover, code lens, inlay hints and code actions maps through the same
workspace confinement as ``--check``, so nothing outside is read, reported or edited -- not even a
file the editor has open."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

from tests.synth import write_torch_npu_text
from tests.synth.sample_runs import CnnKnobs, cnn_runs

from msprof_lsp.server.lsp.engine import Engine, LoadRequest
from msprof_lsp.server.settings import Settings

REPO = Path(__file__).resolve().parents[2]
_watched: list[str] = []
_opened: list[str] = []


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _watched and isinstance(args[0], (str, bytes, os.PathLike)):
        p = os.fsdecode(args[0])
        if any(p.startswith(w) for w in _watched):
            _opened.append(p)


sys.addaudithook(_audit)


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


def _snapshot(ws: Path, outside: Path, folders: list[Path], open_texts: dict[str, str] | None = None):
    _opened.clear()
    _watched[:] = [str(outside)]
    try:
        return Engine().load(LoadRequest(folders=folders, settings=Settings(), open_texts=open_texts or {},
                                         use_cache=False))
    finally:
        _watched.clear()


def test_control_the_same_job_with_its_sources_in_the_folder_is_mapped(tmp_path):
    ws, outside = _job(tmp_path)
    snap = _snapshot(ws, outside, [tmp_path])
    assert any(p.startswith(str(outside)) for p in snap.lines) and _opened
    assert any(p.startswith(str(outside)) for p in snap.findings)


def test_frames_outside_the_workspace_folder_reach_no_lsp_feature(tmp_path):
    ws, outside = _job(tmp_path)
    model = str(outside / "model.py")
    snap = _snapshot(ws, outside, [ws], open_texts={model: (outside / "model.py").read_text()})
    assert _opened == []
    assert snap.loaded and snap.info is not None
    paths = snap.paths() | set(snap.spans) | set(snap.texts) | {h.site.span.path for h in snap.hotspots}
    for fs in snap.findings.values():
        for f in fs:
            paths |= {r.span.path for r in f.related} | {e.path for fix in f.fixes for e in fix.edits}
    assert not any(p.startswith(str(outside)) for p in paths), sorted(paths)
    assert snap.lines == {} and snap.hotspots == []  # every frame was outside: all time unattributed
