"""Discovery never walks into a linked folder that leads out of the walked path.

``profile = "/"`` in a repository's pyproject is refused (test_settings_confinement.py), but the
same repository could commit ``ln -s / x``: discovery followed it, listed the whole file system and
offered every job found anywhere to ``--check .``. A link leading out is now a profile itself or
nothing: a run folder linked into the workspace (the user's own layout) is still found, a folder
holding other projects is not walked.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from msprof_lsp.mapping.profile.discover import find_all
from msprof_lsp.mapping.profile.readers.protocol import Listings
from tests.mapping.profile.test_cluster import write_rank

SCRIPT = Path(sys.executable).with_name("msprof-lsp")


def _layout(tmp: Path) -> tuple[Path, Path]:
    ws, elsewhere = tmp / "repo", tmp / "elsewhere"
    write_rank(ws / "prof", 0)
    write_rank(elsewhere / "projects" / "secret" / "prof", 0)  # another project's run, 3 levels down
    return ws, elsewhere


def test_a_link_to_a_folder_outside_is_not_walked(tmp_path: Path) -> None:
    ws, elsewhere = _layout(tmp_path)
    (ws / "x").symlink_to(elsewhere, target_is_directory=True)
    found = [loc.path for loc in find_all([ws])]
    assert found and all("secret" not in str(p) for p in found), found
    assert all(Path(p).resolve().is_relative_to(ws.resolve()) for p in found), found


def test_a_link_to_the_file_system_root_lists_nothing_outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws, _ = _layout(tmp_path)
    (ws / "x").symlink_to("/", target_is_directory=True)
    listed: list[Path] = []
    entries = Listings.entries

    def recording(self: Listings, path: Path) -> tuple[os.DirEntry[str], ...]:
        listed.append(Path(path).resolve())
        return entries(self, path)

    monkeypatch.setattr(Listings, "entries", recording)  # every folder discovery lists goes through it
    found = [loc.path for loc in find_all([ws])]
    outside = [p for p in listed if not p.is_relative_to(ws.resolve()) and p != Path("/")]
    assert outside == [], outside[:5]  # "/" itself is looked at once (is it a profile?), nothing below it
    assert found and all(Path(p).resolve().is_relative_to(ws.resolve()) for p in found), found


def test_a_linked_run_folder_is_still_found(tmp_path: Path) -> None:
    ws, elsewhere = _layout(tmp_path)
    run = next((elsewhere / "projects" / "secret" / "prof").iterdir())  # the *_ascend_pt run folder
    (ws / "linked_run").symlink_to(run, target_is_directory=True)
    found = [str(loc.path) for loc in find_all([ws])]
    assert any("linked_run" in p for p in found), found


def test_a_link_inside_the_workspace_is_walked(tmp_path: Path) -> None:
    ws, _ = _layout(tmp_path)
    write_rank(ws / "runs" / "deep" / "more", 1)
    (ws / "alias").symlink_to(ws / "runs", target_is_directory=True)
    found = [str(loc.path) for loc in find_all([ws / "alias"])]  # the walked path itself is a link
    assert len(found) == 1, found


@pytest.mark.skipif(not SCRIPT.is_file(), reason="no console script beside this interpreter")
def test_check_of_a_repository_linking_outside_analyses_only_its_own_job(tmp_path: Path) -> None:
    ws, elsewhere = _layout(tmp_path)
    (ws / "x").symlink_to(elsewhere, target_is_directory=True)
    proc = subprocess.run([str(SCRIPT), "--check", ".", "--format", "concise", "--no-cache"], cwd=ws,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    assert "secret" not in proc.stderr + proc.stdout
    assert "job 2" not in proc.stderr, proc.stderr  # one job: the repository's own
