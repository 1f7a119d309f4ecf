"""Workspace modules never shadow the product's imports.

The VS Code client starts the server with the workspace folder as cwd. A repository holding
``numpy.py``, ``pandas.py``, ``libcst.py``, ``tomllib.py`` or a ``msprof_lsp/`` folder must not get
them imported: each module here writes a marker file when imported, and the server is started with
the client's exact command line (PYTHON_FLAGS from vscode-client/src/constants.ts, through
``server_command``), for an LSP session and for ``--check``; no marker may appear. A control run
without the flags shows the markers do appear when the cwd is on sys.path.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import lsp_support as S
from tests.conftest import client_python_flags, server_command

# Third-party and standard-library names the server imports after start-up, and the product itself.
SHADOWS = (
    "numpy.py", "pandas.py", "libcst.py", "tomllib.py", "msgspec.py", "attrs.py", "cattrs.py", "json.py",
    "csv.py", "gzip.py", "sqlite3/__init__.py", "difflib.py", "pygls/__init__.py", "lsprotocol/__init__.py",
    "typing_extensions.py", "msprof_lsp/__init__.py", "msprof_lsp/server/__init__.py",
    "msprof_lsp/server/__main__.py",
)


def hostile_workspace(tmp: Path) -> tuple[Path, Path]:
    ws = S.cnn_workspace(tmp / "ws")
    markers = tmp / "markers"
    markers.mkdir()
    for rel in SHADOWS:
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        marker = markers / rel.replace("/", "_")
        path.write_text(f"open({str(marker)!r}, 'w').close()\n", encoding="utf-8")
    (ws / "pyproject.toml").write_text('[project]\nname = "ws"\n\n[tool.msprof-lsp]\nmin-share = 0.0\n', encoding="utf-8")
    return ws, markers


def test_client_flags_isolate_the_interpreter() -> None:
    assert client_python_flags() == ["-I"]


def test_control_without_the_flags_the_workspace_runs(tmp_path: Path) -> None:
    """The attack is real: plain ``python -m`` from the workspace imports its msprof_lsp/."""
    ws, markers = hostile_workspace(tmp_path)
    subprocess.run([sys.executable, "-m", "msprof_lsp.server", "--version"], cwd=ws, capture_output=True, timeout=120)
    assert (markers / "msprof_lsp___init__.py").exists()


def test_lsp_session_imports_nothing_from_the_workspace(tmp_path: Path) -> None:
    ws, markers = hostile_workspace(tmp_path)
    model = ws / "model.py"

    def then(send, received):  # noqa: ANN001, ANN202
        S.open_when_loaded(send, received, model)

    # vscode-languageclient appends --stdio to the client's command (vscode-client/test/client.test.ts).
    frames, errs = S.raw_session(server_command("--stdio"), ws, tmp_path, then, cwd=ws,
                                 init={"cacheDir": str(tmp_path / "cache")})
    init = next(f for f in frames if f.get("id") == 1)["result"]
    assert init["serverInfo"]["name"] == "msprof-lsp"
    published = [f for f in frames if f.get("method") == "textDocument/publishDiagnostics"
                 and f["params"]["uri"] == model.as_uri()]
    assert any(d["code"].startswith("NPU") for f in published for d in f["params"]["diagnostics"])
    assert sorted(p.name for p in markers.iterdir()) == [], errs.decode(errors="replace")[-2000:]


def test_check_imports_nothing_from_the_workspace(tmp_path: Path) -> None:
    ws, markers = hostile_workspace(tmp_path)
    commands = [server_command("--check", ".", "--format", "json", "--cache-dir", str(tmp_path / "cache"))]
    script = Path(sys.executable).with_name("msprof-lsp")  # the console script CI runs
    if script.is_file():
        commands.append([str(script), "--check", ".", "--format", "json", "--no-cache"])
    for command in commands:
        proc = subprocess.run(command, cwd=ws, capture_output=True, text=True, timeout=300)
        assert proc.returncode in (0, 1), proc.stderr
        assert json.loads(proc.stdout)["findings"], command
        assert sorted(p.name for p in markers.iterdir()) == [], command


@pytest.mark.parametrize("name", ["numpy.py", "msprof_lsp/__init__.py"])
def test_shadow_files_are_real_python(tmp_path: Path, name: str) -> None:
    """The planted modules do write their marker when imported (the checks above can fail)."""
    ws, markers = hostile_workspace(tmp_path)
    module = name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    subprocess.run([sys.executable, "-S", "-c", f"import sys; sys.path.insert(0, '.'); import {module}"],
                   cwd=ws, capture_output=True, timeout=60)
    assert (markers / name.replace("/", "_")).exists()
