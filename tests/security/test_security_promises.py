"""docs/security.md promises, checked under an audit hook (tests/security/audited_run.py): the product opens
no network socket and writes nowhere but its cache directory and the file it was asked to write,
in ``--check`` and in a language-server session."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, client_python_flags
from tests.synth import write_torch_npu_text
from tests.synth.sample_runs import cnn_runs

AUDIT = REPO / "tests" / "security" / "audited_run.py"
sys.path.append(str(REPO / "tests" / "server" / "lsp"))  # lsp_support, as the tests there import it
import lsp_support as S  # noqa: E402


def audited(report: Path, allowed: list[Path], *args: str) -> list[str]:
    return [sys.executable, *client_python_flags(), "-B", str(AUDIT), str(report), *map(str, allowed), "--", *args]


def workspace(tmp: Path) -> Path:
    ws = S.cnn_workspace(tmp / "ws", profile=False)
    for run in cnn_runs(ws):  # two ranks: the process pool runs too
        write_torch_npu_text(run, ws / "profiles")
    (ws / "pyproject.toml").write_text('[tool.msprof-lsp]\ncache-dir = "../planted"\n', encoding="utf-8")
    return ws


def read_report(report: Path) -> dict:
    assert report.is_file(), "the audited run wrote no report"
    return json.loads(report.read_text(encoding="utf-8"))


def assert_promises(data: dict) -> None:
    bad_sockets = [s for s in data["sockets"] if not s["allowed"]]
    bad_writes = [w for w in data["writes"] if not w["allowed"]]
    assert bad_sockets == [] and bad_writes == []


@pytest.mark.parametrize("single_rank", [False, True])
def test_check_opens_no_network_socket_and_writes_only_cache_and_output(tmp_path: Path, single_rank: bool) -> None:
    ws = workspace(tmp_path)
    cache, out, report = tmp_path / "cache", tmp_path / "report.json", tmp_path / "audit.json"
    args = ["--check", str(ws), "--format", "json", "--output", str(out), "--cache-dir", str(cache)]
    if single_rank:  # the in-process load: the code pool workers run, audited here
        args += ["--profile", str(sorted((ws / "profiles").iterdir())[0])]
    proc = subprocess.run(audited(report, [cache, out], *args), cwd=ws, capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(out.read_text(encoding="utf-8"))["findings"]
    data = read_report(report)
    assert_promises(data)
    # The hook sees what it checks: the output written here, and the cache where this process
    # loads (pool workers are processes of their own; the single-rank run loads in-process).
    assert any(w["path"] == str(out) for w in data["writes"])
    if single_rank:
        assert any(str(w["path"]).startswith(str(cache)) for w in data["writes"])
    assert not (tmp_path / "planted").exists()


def test_lsp_session_opens_no_network_socket_and_writes_only_the_cache(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    cache, report = tmp_path / "cache", tmp_path / "audit.json"
    model = ws / "model.py"

    def then(send, received):  # noqa: ANN001, ANN202
        S.open_when_loaded(send, received, model)
        line = next(i for i, t in enumerate(model.read_text().splitlines()) if "self.conv(x)" in t)
        send({"jsonrpc": "2.0", "id": 2, "method": "textDocument/codeAction", "params": {
            "textDocument": {"uri": model.as_uri()},
            "range": {"start": {"line": line, "character": 0}, "end": {"line": line + 1, "character": 0}},
            "context": {"diagnostics": []}}})
        S.wait_bytes(received, b'"id": 2')

    frames, errs = S.raw_session(audited(report, [cache], "--stdio"), ws, tmp_path, then, cwd=ws,
                                 init={"cacheDir": str(cache)})
    assert any(f.get("id") == 2 for f in frames)
    data = read_report(report)
    assert_promises(data)
    assert any(s["event"] == "socket.__new__" for s in data["sockets"]), "asyncio's socketpair was not seen"
    assert not (tmp_path / "planted").exists()
