"""Every install command the README and docs give works, because it is run here.

``RUN_HERE`` is the set of commands these tests run, each exactly as the docs write it (with
``COMMIT_SHA`` and the repository URL replaced by a local clone and its HEAD);
``RUN_BY_CI`` the ones ``.ci/run`` runs verbatim. ``test_docs_give_only_commands_that_are_run``
reads every fenced block and code span of README.md, docs/ and the extension's README and fails on
a pip / pipx / pre-commit command outside those sets, or on a set entry the docs no longer give.

The installs are real (a fresh virtual environment, pipx's own, pre-commit's own) and take their
dependencies from the machine's configured package index; one clone and one wheel built from it
serve every test.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VERSION = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(encoding="utf-8"), re.M).group(1)
WHEEL = f"msprof_lsp-{VERSION}-py3-none-any.whl"
REPO_URL = "https://github.com/msprof-lsp/msprof-lsp"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), REPO / "vscode-client" / "README.md"]

PIP_FROM_CLONE = "python3 -m pip install ."
QUICK_START = "pip install . && msprof-lsp --check samples"
BUILD_WHEEL = "python3 -m pip wheel --no-deps . -w dist/"
PIP_WHEEL = f"python3 -m pip install dist/{WHEEL}"
PIP_GIT = f'python3 -m pip install "msprof-lsp @ git+{REPO_URL}@COMMIT_SHA"'
PIPX_CLONE = "pipx install ."
PIPX_WHEEL = f"pipx install dist/{WHEEL}"
PRE_COMMIT_RUN = "pre-commit run --all-files"

RUN_HERE = {
    QUICK_START: "test_pip_install_from_a_clone_a_wheel_and_the_repository_url",
    PIP_FROM_CLONE: "test_pip_install_from_a_clone_a_wheel_and_the_repository_url",
    BUILD_WHEEL: "test_pip_install_from_a_clone_a_wheel_and_the_repository_url",
    PIP_WHEEL: "test_pip_install_from_a_clone_a_wheel_and_the_repository_url",
    PIP_GIT: "test_pip_install_from_a_clone_a_wheel_and_the_repository_url",
    PIPX_CLONE: "test_pipx_install_of_the_clone_and_of_the_wheel",
    PIPX_WHEEL: "test_pipx_install_of_the_clone_and_of_the_wheel",
    PRE_COMMIT_RUN: "test_pre_commit_hook_from_the_repository_url_at_a_commit",
}
RUN_BY_CI = {"pip install -e '.[test]' && pytest"}

COMMAND = re.compile(r"^(?:- run: )?((?:python3? -m )?pipx? (?:install|wheel|uninstall)\s+\S.*|pre-commit\s+\S.*)$")
FENCE = re.compile(r"^```[\w-]*\n(.*?)^```", re.M | re.S)
SPAN = re.compile(r"`([^`\n]+)`")


def doc_commands() -> dict[str, list[str]]:
    """Every pip / pipx / pre-commit command in the docs -> where it is written."""
    found: dict[str, list[str]] = {}
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        blocks = [m.group(1) for m in FENCE.finditer(text)]
        lines = [line for block in blocks for line in block.splitlines()]
        lines += SPAN.findall(FENCE.sub("", text))
        for line in lines:
            line = re.sub(r"\s{2,}#.*$", "", line).strip()
            m = COMMAND.match(line)
            if m:
                found.setdefault(m.group(1), []).append(str(path.relative_to(REPO)))
    return found


def pre_commit_blocks() -> list[str]:
    """The .pre-commit-config.yaml snippets of the docs (fenced YAML with a `rev:`)."""
    out = []
    for path in DOCS:
        for m in FENCE.finditer(path.read_text(encoding="utf-8")):
            if re.search(r"^\s*rev:", m.group(1), re.M) and "repo:" in m.group(1):
                out.append(m.group(1))
    return out


def test_docs_give_only_commands_that_are_run() -> None:
    found = doc_commands()
    unknown = {cmd: where for cmd, where in found.items() if cmd not in RUN_HERE and cmd not in RUN_BY_CI}
    assert not unknown, f"install commands no test runs (add them to RUN_HERE and run them): {unknown}"
    stale = sorted(set(RUN_HERE) - set(found))
    assert not stale, f"commands run here that no doc gives any more: {stale}"
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    for cmd in RUN_BY_CI:
        assert cmd in found, cmd
        assert cmd in ci, f".ci/run does not run {cmd!r} verbatim"
    source = Path(__file__).read_text(encoding="utf-8")
    for test in set(RUN_HERE.values()):
        assert f"def {test}(" in source, test
    # The one pre-commit snippet the hook test runs.
    assert len(set(pre_commit_blocks())) == 1, pre_commit_blocks()


def test_a_bare_package_name_is_not_an_install_command() -> None:
    """No index has msprof-lsp: `pip install msprof-lsp` must not come back into the docs."""
    bare = [cmd for cmd in doc_commands() if re.search(r"install\s+msprof-lsp\s*$", cmd)]
    assert bare == []
    assert re.search(r"install\s+msprof-lsp\b(?!\s*@)", " ".join(doc_commands())) is None


# ---- the installs ------------------------------------------------------------------------------


def _run(cmd: str | list[str], cwd: Path, env: dict[str, str], timeout: int = 900) -> subprocess.CompletedProcess[str]:
    args = ["bash", "-c", cmd] if isinstance(cmd, str) else cmd
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return done


def _ok(done: subprocess.CompletedProcess[str], what: str) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"{what} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PIP_USER")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A clone of this repository's HEAD (what a user clones) and HEAD's sha."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip(f"{REPO} is not a git checkout: the install tests install a commit of it")
    target = tmp_path_factory.mktemp("clone") / "msprof-lsp"
    _ok(_run(["git", "clone", "--quiet", str(REPO), str(target)], REPO, _env()), "git clone")
    return target, head.stdout.strip()


@pytest.fixture(scope="module")
def wheel(clone: tuple[Path, str]) -> Path:
    """The wheel built by the docs' own command, in the clone's dist/ (reused by every test)."""
    path, _ = clone
    venv = path.parent / "build-venv"
    _ok(_run([sys.executable, "-m", "venv", str(venv)], path, _env()), "python -m venv")
    _ok(_run(BUILD_WHEEL, path, _env(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")), BUILD_WHEEL)
    built = sorted((path / "dist").glob("*.whl"))
    assert [w.name for w in built] == [WHEEL]
    return built[0]


def _substitute(cmd: str, clone: tuple[Path, str]) -> str:
    path, sha = clone
    # file://localhost/...: pip's requirement parser wants a host in a git+file URL; git takes it.
    return cmd.replace(REPO_URL, f"file://localhost{path.as_posix()}").replace("COMMIT_SHA", sha)


def _installed(python: Path, env: dict[str, str]) -> str:
    """Where the environment's msprof_lsp comes from and its version, isolated from any cwd."""
    code = "import importlib.metadata as m, msprof_lsp.server as s; print(m.version('msprof-lsp'), s.__file__)"
    return _ok(_run([str(python), "-I", "-c", code], python.parent, env), "import msprof_lsp.server").stdout.strip()


@pytest.mark.install
def test_pip_install_from_a_clone_a_wheel_and_the_repository_url(clone: tuple[Path, str], wheel: Path) -> None:
    path, _ = clone
    venv = path.parent / "venv"
    _ok(_run([sys.executable, "-m", "venv", str(venv)], path, _env()), "python -m venv")
    env = _env(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", VIRTUAL_ENV=str(venv))
    python = venv / "bin" / "python"
    site = str(venv / "lib")

    # The README's quick start: exit 1 = findings at warning level, on the bundled samples.
    done = _run(QUICK_START, path, env)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "NPU103" in done.stdout and "samples/cnn_classifier/model.py" in done.stdout
    version, origin = _installed(python, env).split(" ", 1)
    assert version == VERSION and origin.startswith(site), origin

    for cmd in (PIP_FROM_CLONE, PIP_WHEEL, PIP_GIT):
        _ok(_run([str(python), "-m", "pip", "uninstall", "--yes", "msprof-lsp"], path, env), "pip uninstall")
        assert _run([str(python), "-I", "-c", "import msprof_lsp.server"], venv, env).returncode != 0
        _ok(_run(_substitute(cmd, clone), path, env), cmd)
        version, origin = _installed(python, env).split(" ", 1)
        assert version == VERSION and origin.startswith(site), (cmd, origin)
    done = _ok(_run([str(venv / "bin" / "msprof-lsp"), "--version"], venv, env), "msprof-lsp --version")
    assert VERSION in done.stdout


@pytest.mark.install
def test_pipx_install_of_the_clone_and_of_the_wheel(clone: tuple[Path, str], wheel: Path, tmp_path: Path) -> None:
    pytest.importorskip("pipx", reason="pipx is in the test extra: pip install -e '.[test]'")
    path, _ = clone
    shim = tmp_path / "shim"
    shim.mkdir()
    # `pipx` as the docs type it: this Python's pipx module.
    (shim / "pipx").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m pipx "$@"\n', encoding="utf-8")
    (shim / "pipx").chmod(0o755)
    bin_dir = tmp_path / "bin"
    env = _env(
        PATH=f"{shim}{os.pathsep}{os.environ['PATH']}",
        PIPX_HOME=str(tmp_path / "pipx-home"),
        PIPX_BIN_DIR=str(bin_dir),
        PIPX_MAN_DIR=str(tmp_path / "man"),
    )
    for cmd in (PIPX_CLONE, PIPX_WHEEL):
        _ok(_run(cmd, path, env), cmd)
        done = _ok(_run([str(bin_dir / "msprof-lsp"), "--version"], tmp_path, env), "msprof-lsp --version")
        assert VERSION in done.stdout
        _ok(_run("pipx uninstall msprof-lsp", path, env), "pipx uninstall")
        assert not (bin_dir / "msprof-lsp").exists()


@pytest.mark.install
def test_pre_commit_hook_from_the_repository_url_at_a_commit(clone: tuple[Path, str], tmp_path: Path) -> None:
    pytest.importorskip("pre_commit", reason="pre-commit is in the test extra: pip install -e '.[test]'")
    (config,) = set(pre_commit_blocks())
    project = tmp_path / "project"
    sample = REPO / "samples" / "cnn_classifier"
    project.mkdir()
    for source in sample.glob("*.py"):
        shutil.copy2(source, project / source.name)
    shutil.copytree(sample / "npu_profile", project / "prof")
    (project / ".pre-commit-config.yaml").write_text(_substitute(config, clone), encoding="utf-8")
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "pre-commit").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m pre_commit "$@"\n', encoding="utf-8")
    (shim / "pre-commit").chmod(0o755)
    env = _env(
        PATH=f"{shim}{os.pathsep}{os.environ['PATH']}",
        PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"),
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
    )
    _ok(_run("git init --quiet . && git add -A", project, env), "git init")
    done = _run(PRE_COMMIT_RUN, project, env)
    # The snippet fails the commit on warnings: the sample has them (exit 1 from msprof-lsp).
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"msprof-lsp \(profile-guided hints\)\.+Failed", done.stdout), done.stdout[-3000:]
    assert "- exit code: 1" in done.stdout
    assert "model.py" in done.stdout and "NPU103" in done.stdout
