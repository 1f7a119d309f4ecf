"""The planted-cache-entry attack, end to end through ``msprof-lsp --check``.

A repository sets ``cache-dir`` in its pyproject.toml and ships a pickle under the name the product
would look for. Neither the setting is obeyed nor, when the user points the cache there on purpose,
is the file unpickled: the marker the pickle would create never appears.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from msprof_lsp.mapping.profile import cache
from msprof_lsp.mapping.profile.discover import find_all

from cli_support import isolated_cache  # noqa: F401 - autouse fixture
from cli_support import copy_sample_sources, run_cli, single_rank, write_cnn_profiles


class _Payload:
    """Unpickling this creates ``path`` (what an attacker's entry would do, harmlessly)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (str(self.path),))


def _repository(tmp_path: Path, cache_dir_value: str) -> tuple[Path, Path]:
    repo = copy_sample_sources(tmp_path / "repo")
    write_cnn_profiles(repo, repo / "profiles", single_rank())
    (repo / "pyproject.toml").write_text(
        f'[project]\nname = "victim"\n\n[tool.msprof-lsp]\ncache-dir = "{cache_dir_value}"\n', encoding="utf-8"
    )
    return repo, tmp_path / "PWNED"


def _plant(repo: Path, cache_dir: Path, marker: Path) -> Path:
    (loc,) = find_all([repo])
    entry = cache.entry_path(loc, cache_dir)
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_bytes(pickle.dumps(_Payload(marker)))
    return entry


def test_workspace_cache_dir_is_ignored_and_planted_entry_never_runs(tmp_path: Path, capsys) -> None:
    repo, marker = _repository(tmp_path, ".msprof-cache")
    entry = _plant(repo, repo / ".msprof-cache", marker)
    planted = entry.read_bytes()
    r = run_cli(["--check", str(repo), "--format", "json"], capsys)
    assert r.code in (0, 1), r.err
    assert not marker.exists()
    assert entry.read_bytes() == planted  # never opened as ours, never rewritten
    assert f"{repo / 'pyproject.toml'} [tool.msprof-lsp]: 'cache-dir' is a user setting" in r.err
    user_cache = Path(os.environ["XDG_CACHE_HOME"]) / "msprof-lsp"
    assert any(user_cache.iterdir())  # the cache went where the user's cache lives


def test_planted_entry_in_the_users_own_cache_dir_is_discarded(tmp_path: Path, capsys) -> None:
    repo, marker = _repository(tmp_path, ".msprof-cache")
    user_dir = tmp_path / "user-cache"
    entry = _plant(repo, user_dir, marker)
    r = run_cli(["--check", str(repo), "--cache-dir", str(user_dir), "--format", "json"], capsys)
    assert r.code in (0, 1), r.err
    assert not marker.exists()
    (profile,) = json.loads(r.out)["profiles"]
    notes = [i for i in profile["issues"] if "cache entry discarded and rebuilt" in i]
    assert len(notes) == 1 and notes[0].startswith(f"{entry}: ")
    assert entry.read_bytes().startswith(cache.MAGIC)  # rebuilt in our format
    r = run_cli(["--check", str(repo), "--cache-dir", str(user_dir)], capsys)
    assert "cache entry discarded" not in r.out  # a clean hit now


@pytest.mark.parametrize("value", ["../elsewhere", "../../elsewhere/deeper"])
def test_relative_cache_dir_never_creates_folders_outside(tmp_path: Path, capsys, value: str) -> None:
    repo, _ = _repository(tmp_path, value)
    before = sorted(p.name for p in tmp_path.iterdir())
    above = sorted(p.name for p in tmp_path.parent.iterdir())
    r = run_cli(["--check", str(repo)], capsys)
    assert r.code in (0, 1), r.err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert sorted(p.name for p in tmp_path.parent.iterdir()) == above
    assert "'cache-dir' is a user setting" in r.err


def test_cache_dir_flag_relative_to_the_cwd(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, _ = _repository(tmp_path, "ignored")
    monkeypatch.chdir(tmp_path)
    r = run_cli(["--check", str(repo), "--cache-dir", "mine"], capsys)
    assert r.code in (0, 1), r.err
    # the entry, and the values the analysis derived from it (critical paths) beside it
    names = sorted(p.name for p in (tmp_path / "mine").iterdir())
    assert len(names) == 2 and names[0].endswith(cache.DERIVED_SUFFIX) and names[1].endswith(cache.SUFFIX)
