"""A repository's settings are confined to the repository (issue 22, item 2).

``[tool.msprof-lsp]`` in a pyproject.toml belongs to the repository, which may be hostile: the
places it names to read (``profile``, ``baseline``, the local side of ``path-mappings``) must
resolve, symlinks followed, inside the workspace roots, else they are ignored with one warning
naming the file, the key and why, and the default is used. The file itself is read within the
config limits (size, nesting). What the user gives on the command line stays free.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tracemalloc
from pathlib import Path

import pytest

from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.profile.safe_io import LIMITS, toml_depth
from msprof_lsp.server.__main__ import main
from msprof_lsp.server.lsp.configuration import base_settings
from msprof_lsp.server.analysis.settings import Settings, from_pyproject
from tests.server.check.cli_support import copy_sample_sources, run_cli, single_rank, write_cnn_profiles
from tests.security.open_audit import opens_under

REPO = Path(__file__).resolve().parents[2]

# -- a walker watch: every directory listed while it is on (one hook per process, cheap when off) --

_listed: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if _listed is not None and event in ("os.scandir", "os.listdir") and args and args[0] is not None:
        try:
            _listed.append(os.path.realpath(os.fsdecode(args[0])))
        except (TypeError, ValueError):  # a file descriptor
            pass


sys.addaudithook(_audit)


def _outside(listed: list[str], *inside: Path) -> list[str]:
    """The listed directories outside ``inside`` and outside the import path (imports list those)."""
    homes = [str(p) for p in inside] + [os.path.realpath(p) for p in sys.path if p]
    return sorted({p for p in listed if not any(p == h or p.startswith(h.rstrip(os.sep) + os.sep) for h in homes)})


def _check(argv: list[str], capsys) -> tuple[object, list[str]]:
    """Run ``msprof-lsp --check`` in-process; (result, every directory listed meanwhile)."""
    global _listed
    _listed = []
    try:
        r = run_cli(argv, capsys)
    finally:
        listed, _listed = _listed, None
    return r, listed


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    monkeypatch.delenv("MSPROF_LSP_DEBUG", raising=False)


def _repo(root: Path, settings: str = "") -> Path:
    repo = copy_sample_sources(root)
    write_cnn_profiles(repo, repo / "profiles", single_rank())
    (repo / "pyproject.toml").write_text(f'[project]\nname = "victim"\n\n[tool.msprof-lsp]\n{settings}',
                                         encoding="utf-8")
    return repo


@pytest.fixture(scope="module")
def other_project(tmp_path_factory) -> Path:
    """Another project's profile, outside the repository under test."""
    other = copy_sample_sources(tmp_path_factory.mktemp("other") / "project")
    write_cnn_profiles(other, other / "profiles", single_rank())
    return other


def _profiles_of(out: str) -> list[str]:
    """The analysed profiles of a JSON report, as absolute real paths."""
    return [os.path.realpath(Path.cwd() / p["path"]) for p in json.loads(out)["profiles"]]


def _baseline_of(out: str) -> object:
    return json.loads(out)["baseline"]


@pytest.fixture(scope="module")
def clean_code(tmp_path_factory) -> int:
    """The exit status of the same repository without settings (what a bad pyproject must not change)."""
    control = _repo(tmp_path_factory.mktemp("control") / "repo")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(["--check", str(control), "--format", "json"])


# -- profile / baseline outside the repository ----------------------------------------------------


def test_profile_slash_is_ignored_and_nothing_outside_is_walked(tmp_path: Path, capsys, clean_code: int) -> None:
    clean = clean_code  # the control run also imported what a run imports, before the watch
    repo = _repo(tmp_path / "repo", 'profile = "/"\n')
    r, listed = _check(["--check", str(repo), "--format", "json"], capsys)
    assert r.code == clean, r.err
    pyproject = repo / "pyproject.toml"
    (line,) = [x for x in r.err.splitlines() if "'profile'" in x]
    assert str(pyproject) in line and "outside the workspace" in line and "keeping ''" in line
    assert line.count(str(repo)) == 2  # the file, and the root once (the checked path is the same folder)
    assert "Traceback" not in r.err
    assert str(repo) in listed and _outside(listed, repo) == []
    assert _profiles_of(r.out) and all(p.startswith(str(repo)) for p in _profiles_of(r.out))


def test_control_the_hook_sees_a_walk_outside(tmp_path: Path, capsys) -> None:
    """Without confinement the setting is obeyed: a --profile from the user is walked (so the
    hook above would see a repository's ``/`` walked, too)."""
    repo = _repo(tmp_path / "repo")
    other = copy_sample_sources(tmp_path / "elsewhere")
    write_cnn_profiles(other, other / "profiles", single_rank())
    r, listed = _check(["--check", str(repo), "--profile", str(other / "profiles"), "--format", "json"], capsys)
    assert r.code in (0, 1), r.err
    assert _outside(listed, repo) and all(p.startswith(str(other)) for p in _outside(listed, repo))


@pytest.mark.parametrize("value", ["../elsewhere/profiles", "ABSOLUTE"], ids=["dotdot", "absolute"])
@pytest.mark.parametrize("key", ["profile", "baseline"])
def test_read_location_outside_the_repository_is_ignored(tmp_path: Path, capsys, other_project: Path,
                                                          key: str, value: str) -> None:
    (tmp_path / "elsewhere").symlink_to(other_project, target_is_directory=True)
    value = str(other_project / "profiles") if value == "ABSOLUTE" else value
    repo = _repo(tmp_path / "repo", f'{key} = "{value}"\n')
    with opens_under(other_project) as opened:
        r, listed = _check(["--check", str(repo), "--format", "json"], capsys)
    assert r.code in (0, 1), r.err
    (line,) = [x for x in r.err.splitlines() if f"'{key}'" in x]
    assert str(repo / "pyproject.toml") in line and "outside the workspace" in line
    assert str(other_project.resolve() / "profiles") in line  # where it really leads, symlinks followed
    assert opened == [] and _outside(listed, repo) == []
    assert _profiles_of(r.out) and all(p.startswith(str(repo)) for p in _profiles_of(r.out))
    assert _baseline_of(r.out) is None  # no baseline read


@pytest.mark.parametrize("key", ["profile", "baseline"])
def test_a_symlink_in_the_repository_pointing_out_is_ignored(tmp_path: Path, capsys, other_project: Path,
                                                              key: str) -> None:
    """The value is checked where it leads. (Discovery, which the setting's default falls back
    to, walks the repository and its symlinks on its own: that is not a setting's doing.)"""
    repo = _repo(tmp_path / "repo", f'{key} = "link/inner"\n')
    (repo / "link").symlink_to(other_project, target_is_directory=True)
    settings, warnings = from_pyproject(Settings(), repo / "pyproject.toml")
    (w,) = warnings
    assert f"'{key}'" in w and str(repo / "pyproject.toml") in w and str(other_project.resolve() / "inner") in w
    assert (settings.profile, settings.baseline) == ("", "")
    r = run_cli(["--check", str(repo), "--format", "json"], capsys)
    assert r.code in (0, 1) and "outside the workspace" in r.err, r.err
    assert _baseline_of(r.out) is None


def test_read_locations_inside_the_repository_still_work(tmp_path: Path, capsys) -> None:
    repo = _repo(tmp_path / "repo", 'profile = "profiles"\nbaseline = "inner-link"\n')
    (repo / "inner-link").symlink_to(repo / "profiles", target_is_directory=True)
    r = run_cli(["--check", str(repo), "--format", "json"], capsys)
    assert r.code in (0, 1), r.err
    assert "outside the workspace" not in r.err
    assert _profiles_of(r.out) and _baseline_of(r.out) is not None


def test_the_users_flags_are_not_confined(tmp_path: Path, capsys, other_project: Path) -> None:
    repo = _repo(tmp_path / "repo")
    r = run_cli(["--check", str(repo), "--profile", str(other_project / "profiles"),
                 "--baseline", str(other_project / "profiles"), "--format", "json"], capsys)
    assert r.code in (0, 1), r.err
    assert "outside the workspace" not in r.err
    assert _profiles_of(r.out) and all(p.startswith(str(other_project.resolve())) for p in _profiles_of(r.out))
    assert _baseline_of(r.out) is not None


def test_path_mapping_to_a_folder_outside_is_ignored(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    p = repo / "pyproject.toml"
    p.write_text('[tool.msprof-lsp]\npath-mappings = ["/remote=/etc", "/src=src"]\n', encoding="utf-8")
    settings, warnings = from_pyproject(Settings(), p)
    (w,) = warnings
    assert str(p) in w and "'path-mappings'" in w and "/etc" in w and "outside the workspace" in w
    assert settings.path_mappings == ()
    p.write_text('[tool.msprof-lsp]\npath-mappings = ["/src=src"]\n', encoding="utf-8")
    settings, warnings = from_pyproject(Settings(), p)
    assert warnings == [] and settings.path_mappings == (("/src", str(repo.resolve() / "src")),)


def test_the_editor_confines_the_pyproject_to_the_workspace_folders(tmp_path: Path, other_project: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    (first / "pyproject.toml").write_text(f'[tool.msprof-lsp]\nprofile = "{second}"\nbaseline = "{other_project}"\n',
                                          encoding="utf-8")
    settings, warnings = base_settings(first, [first, second])
    assert settings.profile == str(second.resolve())  # another workspace folder is inside
    (w,) = warnings
    assert "'baseline'" in w and str(first / "pyproject.toml") in w and settings.baseline == ""


# -- the pyproject itself: size and nesting ------------------------------------------------------


@pytest.mark.parametrize("size", [2 << 20, 1 << 30], ids=["2MiB", "1GiB-sparse"])
def test_oversized_pyproject_is_refused_without_being_read(tmp_path: Path, capsys, clean_code: int, size: int) -> None:
    repo = _repo(tmp_path / "repo", 'profile = "/"\n')
    pyproject = repo / "pyproject.toml"
    with open(pyproject, "r+b") as f:
        f.truncate(size)  # sparse: the settings line stays at the start, zeros after it
    tracemalloc.start()
    try:
        _, warnings = from_pyproject(Settings(), pyproject)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    (w,) = warnings
    assert str(pyproject) in w and "config file size" in w and f"{size:,} bytes" in w
    assert peak < LIMITS.config_bytes  # not read whole, not even the first MiB
    r = run_cli(["--check", str(repo), "--format", "json"], capsys)
    assert r.code == clean_code, r.err
    assert "config file size" in r.err and "outside the workspace" not in r.err


@pytest.mark.parametrize("body", [
    "select = " + "[" * 100_000 + "]" * 100_000,
    "select = " + "[" * 400 + "]" * 400,  # under Python's recursion limit, over ours
    "severity." + ".".join(["a"] * 100_000) + " = 1",  # tomllib: quadratic (10,000 parts: 8 s, 600 MB)
    "x = " + "{a = " * 50_000 + "1" + "}" * 50_000,
], ids=["brackets-100k", "brackets-400", "dotted-100k", "inline-tables-50k"])
def test_deeply_nested_pyproject_is_one_warning(tmp_path: Path, capsys, clean_code: int, body: str) -> None:
    repo = _repo(tmp_path / "repo", body + "\n")
    r = run_cli(["--check", str(repo), "--format", "json"], capsys)
    assert r.code == clean_code, r.err
    pyproject = repo / "pyproject.toml"
    (w,) = [x for x in r.err.splitlines() if "warning" in x]
    assert str(pyproject) in w and "TOML nesting depth" in w and "using the defaults" in w
    assert "internal error" not in r.err and "RecursionError" not in r.err and "Traceback" not in r.err


@pytest.mark.parametrize("body", [
    b"[tool.msprof-lsp]\nselect = 5\n",
    b"[tool.msprof-lsp\n",
    b"[tool.msprof-lsp]\nselect = [\"\xff\"]\n",
    b"[tool.msprof-lsp]\nseverity = {NPU1 = [[[1]]]}\npath-mappings = {\"/r\" = {a = {b = 1}}}\n",
    b"[tool.msprof-lsp]\n" + b"x" * 200_000 + b" = 1\n",
    b"[tool.msprof-lsp]\nrank = " + b"7" * 5_000 + b"\n",  # past Python's int-conversion limit (fuzz)
], ids=["wrong-type", "not-toml", "not-utf8", "nested-values", "long-key", "5000-digit-int"])
def test_invalid_settings_never_stop_the_run(tmp_path: Path, capsys, clean_code: int, body: bytes) -> None:
    repo = _repo(tmp_path / "repo")
    (repo / "pyproject.toml").write_bytes(body)
    r = run_cli(["--check", str(repo), "--format", "json"], capsys)
    assert r.code == clean_code, r.err
    lines = [x for x in r.err.splitlines() if "warning" in x]
    assert lines and all(str(repo / "pyproject.toml") in x and len(x) < 1000 for x in lines)
    assert "internal error" not in r.err and "Traceback" not in r.err


def test_a_fifo_pyproject_is_a_warning_not_a_hang(tmp_path: Path) -> None:
    folder = tmp_path / "ws"
    folder.mkdir()
    os.mkfifo(folder / "pyproject.toml")
    settings, warnings = base_settings(folder)
    (w,) = warnings
    assert "FIFO" in w and str(folder / "pyproject.toml") in w and settings == Settings(base_dir=str(folder))


# -- the depth scan --------------------------------------------------------------------------------


def test_depth_scan_skips_strings_and_comments() -> None:
    text = ('a = "[[[[\\"[[[[" # [[[[[[\n'
            "b = '[[[[.....'\n"
            'c = """\n[[[[\n\\"""[[[""""\n'
            "d = '''[[[['''\n"
            "[x.y.z]\ne.f = {g.h = [1.5, 2.5]}\n")
    assert toml_depth(text, 32) == 3  # [x.y.z]: 1 + 2 dots; e.f = {g.h = [1.5]}: 2 brackets + 1 dot
    assert toml_depth("a = " + "[" * 40, 32) == 33  # stops just past the limit


def test_real_pyprojects_pass_the_config_limits() -> None:
    for p in [REPO / "pyproject.toml", *REPO.glob("samples/*/pyproject.toml")]:
        assert isinstance(safe_io.read_toml(p), dict)


@pytest.mark.parametrize("value", ["~/prof", "~no-such-user-here/prof", "loop/x"], ids=["home", "unknown-user", "symlink-loop"])
def test_paths_that_leave_or_cannot_be_resolved_are_one_warning(tmp_path: Path, value: str) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "loop").symlink_to(repo / "loop")
    p = repo / "pyproject.toml"
    p.write_text(f'[tool.msprof-lsp]\nprofile = "{value}"\n', encoding="utf-8")
    settings, warnings = from_pyproject(Settings(), p)
    (w,) = warnings
    assert str(p) in w and "'profile'" in w and settings.profile == ""
    assert w.count(str(repo)) <= 2  # the root is named once (the file once)
