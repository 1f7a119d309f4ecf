"""Every child process the product starts runs isolated, whichever way the product was started.

A repository with stdlib-shadowing names at its root (``multiprocessing/``, ``concurrent/``,
``json.py``, ``numpy.py``, ...; each writes a marker file when imported) and a 2-rank profile (so
the rank-loading pool, its forkserver and multiprocessing's resource tracker all start). ``--check .``
run from inside it by the console script CI and pre-commit use, by ``python -m msprof_lsp.server``
without ``-I``, and an LSP session started by the console script (the Neovim/Helix/Emacs snippets):
no marker may appear. A control runs the same check with the isolation switched off and shows the
markers do appear, so these tests can fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from msprof_lsp.mapping import children

sys.path.insert(0, str(Path(__file__).parents[1] / "server" / "lsp"))
import lsp_support as S  # noqa: E402
from tests.mapping.profile.test_cluster import write_rank  # noqa: E402

SCRIPT = Path(sys.executable).with_name("msprof-lsp")  # the console script CI runs
# Modules a child interpreter (resource tracker, forkserver, workers) or the product imports after
# start-up. Not `runpy` (Python 3.10 imports it from the cwd for `python -m` before any product
# code runs) nor `msprof_lsp/` (the same): see docs/security.md.
SHADOWS = (
    "multiprocessing/__init__.py", "concurrent/__init__.py", "concurrent/futures/__init__.py", "json.py",
    "numpy.py", "pandas.py", "msgspec.py", "pickle.py", "signal.py", "selectors.py", "struct.py",
    "threading.py", "typing.py", "sysconfig.py", "tempfile.py", "pathlib.py", "subprocess.py", "__future__.py",
    "sqlite3/__init__.py", "zipfile.py",
)


def hostile_repo(tmp: Path) -> tuple[Path, Path]:
    ws = tmp / "repo"
    markers = tmp / "markers"
    markers.mkdir(parents=True)
    for rank in (0, 1):
        write_rank(ws / "prof", rank)
    for rel in SHADOWS:
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"open({str(markers / rel.replace('/', '_'))!r}, 'w').close()\n", encoding="utf-8")
    return ws, markers


def planted(markers: Path) -> list[str]:
    return sorted(p.name for p in markers.iterdir())


def assert_two_rank_check(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    profile = json.loads(proc.stdout)["profile"]
    assert profile["ranks"] == [0, 1] and profile["cluster"], profile  # the pool did load both ranks
    assert not any("left out" in issue for issue in profile["issues"]), profile["issues"]


CHECK = ("--check", ".", "--format", "json", "--no-cache")


@pytest.mark.skipif(not SCRIPT.is_file(), reason="no console script beside this interpreter")
def test_check_by_the_console_script_runs_no_repository_code(tmp_path: Path) -> None:
    ws, markers = hostile_repo(tmp_path)
    proc = subprocess.run([str(SCRIPT), *CHECK], cwd=ws, capture_output=True, text=True, timeout=300)
    assert_two_rank_check(proc)
    assert planted(markers) == []


def test_check_by_python_m_without_isolation_runs_no_repository_code(tmp_path: Path) -> None:
    ws, markers = hostile_repo(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "msprof_lsp.server", *CHECK], cwd=ws, capture_output=True,
                          text=True, timeout=300)
    assert_two_rank_check(proc)
    assert planted(markers) == []


@pytest.mark.skipif(not SCRIPT.is_file(), reason="no console script beside this interpreter")
def test_lsp_session_by_the_console_script_runs_no_repository_code(tmp_path: Path) -> None:
    ws, markers = hostile_repo(tmp_path)

    def then(send, received):  # noqa: ANN001, ANN202
        S.wait_bytes(received, b'"state": "loaded"', timeout=180)

    frames, errs = S.raw_session([str(SCRIPT), "--stdio"], ws, tmp_path, then, cwd=ws,
                                 init={"cacheDir": str(tmp_path / "cache")})
    loaded = [f["params"] for f in frames if f.get("method") == "msprof-lsp/profileStatus"
              and f["params"]["state"] == "loaded"]
    assert loaded and loaded[-1]["ranks"] == [0, 1], errs.decode(errors="replace")[-2000:]
    assert planted(markers) == [], errs.decode(errors="replace")[-2000:]


CONTROL = textwrap.dedent("""
    import contextlib, sys
    from msprof_lsp.mapping import children
    from msprof_lsp.mapping.profile import cluster
    children.install = lambda: None               # the interpreter flags as they come (no -I)
    cluster.isolated_children = contextlib.nullcontext  # and the cwd as it is (the repository)
    from msprof_lsp.server.__main__ import main
    if __name__ == "__main__":  # workers run this file again as __mp_main__
        sys.exit(main(sys.argv[1:]))
""")


def test_control_without_the_isolation_the_repository_runs(tmp_path: Path) -> None:
    """The attack is real: the same check with children started the way multiprocessing starts
    them by default (from a script outside the repository, like the console script) imports the
    repository's ``multiprocessing/`` in the resource tracker."""
    ws, markers = hostile_repo(tmp_path)
    control = tmp_path / "control" / "run.py"
    control.parent.mkdir()
    control.write_text(CONTROL, encoding="utf-8")
    subprocess.run([sys.executable, str(control), *CHECK], cwd=ws, capture_output=True, text=True, timeout=300)
    assert "multiprocessing___init__.py" in planted(markers)


def test_every_multiprocessing_child_gets_minus_I_and_a_safe_cwd(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The one place every multiprocessing child is exec'd (``util.spawnv_passfds``, CPython 3.10
    to 3.13: tracker, forkserver, spawned workers) adds ``-I`` and runs from the stdlib folder."""
    import multiprocessing.util as util

    children.install()
    assert util.spawnv_passfds is children._isolated_spawnv_passfds
    seen: list[tuple[list[str], str]] = []
    monkeypatch.setattr(children, "_ORIGINAL_SPAWNV_PASSFDS",
                        lambda path, args, fds: seen.append((list(args), os.getcwd())) or 4242)
    monkeypatch.chdir(tmp_path)
    assert util.spawnv_passfds("/py", ["/py", "-B", "-c", "pass", "--multiprocessing-fork"], ()) == 4242
    assert util.spawnv_passfds("/py", ["/py", "-I", "-c", "x", "-I"], ()) == 4242
    assert seen == [(["/py", "-I", "-B", "-c", "pass", "--multiprocessing-fork"], children.SAFE_CWD),
                    (["/py", "-I", "-c", "x", "-I"], children.SAFE_CWD)]
    assert Path.cwd() == tmp_path  # and back
    children.install()  # idempotent: never wraps itself
    assert util.spawnv_passfds is children._isolated_spawnv_passfds


AUDIT = textwrap.dedent("""
    import atexit, sys
    seen = []
    ROUTES = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
              "os.forkpty", "pty.spawn", "os.startfile")
    from msprof_lsp.server.__main__ import main
    if __name__ == "__main__":  # workers run this file again as __mp_main__
        sys.addaudithook(lambda event, args: seen.append((event, repr(args)[:200])) if event in ROUTES else None)
        atexit.register(lambda: print("AUDIT", seen, file=sys.stderr, flush=True))
        sys.exit(main(sys.argv[1:]))
""")


def test_no_child_process_by_any_other_route(tmp_path: Path) -> None:
    """Besides multiprocessing's (above), the check starts nothing: no subprocess (git, pip, uname,
    a compiler for ctypes), no exec, spawn, fork or system() -- audited in the running process."""
    ws, markers = hostile_repo(tmp_path)
    audit = tmp_path / "audit" / "run.py"
    audit.parent.mkdir()
    audit.write_text(AUDIT, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(audit), *CHECK], cwd=ws, capture_output=True, text=True, timeout=300)
    assert_two_rank_check(proc)
    assert "AUDIT []" in proc.stderr, proc.stderr[-2000:]
    assert planted(markers) == []


POOL = textwrap.dedent("""
    import multiprocessing, os, sys
    from concurrent.futures import ProcessPoolExecutor
    from msprof_lsp.mapping import children

    def where(_):
        return os.getcwd(), sys.flags.isolated

    if __name__ == "__main__":
        children.install()  # as main() does
        with children.isolated_children():
            pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context(sys.argv[1]))
        with pool:
            with children.isolated_children():
                futures = [pool.submit(where, i) for i in range(2)]
            print(sorted({f.result() for f in futures}), os.getcwd() == sys.argv[2])
""")


@pytest.mark.parametrize("method", [m for m in ("forkserver", "spawn") if m in __import__("multiprocessing").get_all_start_methods()])
def test_pool_workers_run_isolated_from_the_stdlib_folder(tmp_path: Path, method: str) -> None:
    """forkserver (Linux) and spawn (macOS, Windows): each worker runs under ``-I`` from the stdlib
    folder, the workspace's ``multiprocessing/`` and ``concurrent/`` unseen, and the parent gets its
    cwd back."""
    ws, markers = hostile_repo(tmp_path)
    driver = tmp_path / "driver" / "pool.py"
    driver.parent.mkdir()
    driver.write_text(POOL, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(driver), method, str(ws)], cwd=ws, capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.strip() == f"{[(children.SAFE_CWD, 1)]} True", proc.stderr[-2000:]
    assert planted(markers) == []


def test_lsp_session_starts_no_child_process_by_any_other_route(tmp_path: Path) -> None:
    """The same audit over a language-server session that loads the 2-rank profile."""
    ws, markers = hostile_repo(tmp_path)
    audit = tmp_path / "audit" / "run.py"
    audit.parent.mkdir()
    audit.write_text(AUDIT, encoding="utf-8")

    def then(send, received):  # noqa: ANN001, ANN202
        S.wait_bytes(received, b'"state": "loaded"', timeout=180)

    frames, errs = S.raw_session([sys.executable, str(audit), "--stdio"], ws, tmp_path, then, cwd=ws,
                                 init={"cacheDir": str(tmp_path / "cache")})
    assert any(f.get("method") == "msprof-lsp/profileStatus" and f["params"]["ranks"] == [0, 1] for f in frames)
    assert "AUDIT []" in errs.decode(errors="replace"), errs.decode(errors="replace")[-2000:]
    assert planted(markers) == []


# Where the product may touch process creation at all: the home for isolated starts, and the pool
# that starts its children inside it.
PROCESS_MODULES = {"subprocess", "multiprocessing", "concurrent.futures.process", "pty", "pexpect"}
PROCESS_CALLS = {"system", "popen", "fork", "forkpty", "execv", "execve", "execvp", "execvpe", "execl", "execle",
                 "execlp", "execlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "spawnl", "spawnle", "spawnlp",
                 "spawnlpe", "posix_spawn", "posix_spawnp", "startfile"}
ALLOWED = {"mapping/children.py", "mapping/profile/cluster.py"}


def test_process_starts_live_only_in_the_isolated_home() -> None:
    """A static guard: no product module but mapping/children.py and the pool (which starts its
    children inside ``isolated_children()``) imports a process-starting module, ProcessPoolExecutor,
    or calls ``os.system``/``exec*``/``spawn*``/``fork``."""
    import ast

    repo = Path(__file__).parents[2]
    offenders: list[str] = []
    for folder in ("mapping", "hints", "server"):
        for path in sorted((repo / folder).rglob("*.py")):
            rel = path.relative_to(repo).as_posix()
            if rel in ALLOWED:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), rel)):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                if any(n in PROCESS_MODULES or n.split(".")[0] in PROCESS_MODULES or n.endswith("ProcessPoolExecutor")
                       for n in names):
                    offenders.append(f"{rel}:{node.lineno} imports {names}")
                if (isinstance(node, ast.Attribute) and node.attr in PROCESS_CALLS
                        and isinstance(node.value, ast.Name) and node.value.id == "os"):
                    offenders.append(f"{rel}:{node.lineno} os.{node.attr}")
    assert offenders == []
    # Around the pool's constructor and each batch of submits (they start the workers): in
    # cluster.py the summaries' and the whole loads'; in ranks.py the per-rank analyses' (--ranks all).
    for rel, n in (("mapping/profile/cluster.py", 3), ("server/analysis/ranks.py", 1)):
        text = (repo / rel).read_text(encoding="utf-8")
        assert text.count("with isolated_children():") == n, rel
