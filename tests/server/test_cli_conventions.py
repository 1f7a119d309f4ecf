"""The command line's conventions (ruff's and pytest's): subcommands, -V, rule codes checked with
the nearest known ones, options checked before any analysis, ``rule CODE``, and a bare start on
a terminal that says what it is. None of these analyses a profile: each folder here has none, so
an error about the profile would mean the option was checked too late."""

from __future__ import annotations

import os
import pty
import select
import subprocess

import pytest

from tests.server.check.cli_support import isolated_cache  # noqa: F401 - autouse fixture
from tests.server.check.cli_support import REPO, run_cli
from msprof_lsp.hints.fixes import fixes_for
from msprof_lsp.hints.registry import all_rules
from msprof_lsp.hints.savings import UNMODELLED
from msprof_lsp.server.cli import version
from msprof_lsp.server.commands import LSP_ON_A_TERMINAL
from tests.conftest import server_command


@pytest.fixture
def empty(tmp_path, monkeypatch):
    """A workspace with a script and no profile: the current directory."""
    (tmp_path / "train.py").write_text("print('hi')\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version(flag, capsys):
    r = run_cli([flag], capsys)
    assert (r.code, r.out) == (0, f"msprof-lsp {version()}\n")


@pytest.mark.parametrize("argv, needle", [
    (["check", ".", "--select", "NPU999"], "unknown rule code 'NPU999' in --select; did you mean NPU"),
    (["check", ".", "--ignore", "NPU1O4"], "unknown rule code 'NPU1O4' in --ignore; did you mean "),
    (["--check", ".", "--select", "npu104"], "unknown rule code 'npu104' in --select; did you mean NPU104"),
    (["check", ".", "--output", "no/such/folder/report.json"], "the folder no/such/folder does not exist"),
    (["check", ".", "--output", "."], "is a folder"),
    (["check", ".", "--unsafe-fixes"], "--unsafe-fixes needs --fix or --diff"),
    (["check", ".", "--diff", "--fix"], "give one of them"),
    (["check", ".", "--diff", "--format", "json"], "--diff prints a diff on stdout"),
    (["check", ".", "--format", "xml"], "invalid choice"),
    (["--fix"], "--fix needs the check command"),
    (["chek", "."], "unknown command 'chek' (commands: check, server, rule, mcp); did you mean check?"),
    (["server", "--port", "1"], "unrecognized arguments: --port 1"),
])
def test_bad_options_exit_2_before_any_analysis(empty, capsys, argv, needle):
    r = run_cli(argv, capsys)
    assert r.code == 2 and r.out == ""
    line = _line(r.err)
    assert needle in line and "no profile found" not in line
    if "NPU1O4" in argv:
        assert "NPU104" in line.split("did you mean")[1]  # the letter O for a zero


def test_a_misspelt_code_in_pyproject_exits_2_naming_the_file(empty, capsys):
    (empty / "pyproject.toml").write_text('[tool.msprof-lsp]\nignore = ["NPU10"]\nselect = ["NPU2200"]\n', encoding="utf-8")
    r = run_cli(["check", "."], capsys)
    assert r.code == 2
    line = _line(r.err)
    assert f"unknown rule code 'NPU2200' in {empty / 'pyproject.toml'} [tool.msprof-lsp] select" in line
    assert "NPU220" in line.split("did you mean")[1] and "no profile found" not in line


def test_known_codes_and_prefixes_pass_and_check_is_the_check_flag(empty, capsys):
    argv = [".", "--select", "NPU1,NPU220", "--ignore", "NPU9"]
    sub, flag = run_cli(["check", *argv], capsys), run_cli(["--check", *argv], capsys)
    assert sub.code == flag.code == 2  # got as far as discovery: no profile here
    assert sub.err == flag.err and "no profile found" in _line(sub.err)


def test_rule_explains_a_rule_from_the_registry_the_catalog_and_the_savings_model(capsys):
    r = run_cli(["rule", "NPU104"], capsys)
    assert r.code == 0
    out = " ".join(r.out.split())
    assert r.out.startswith("NPU104 dataloader-input\n")
    assert "What it detects:" in r.out and "Why it costs time:" in r.out
    assert "the change: DataLoader workers" in out  # docs/savings.md's row of NPU104
    for spec in fixes_for("NPU104"):
        assert f"{spec.safety.value}: {spec.summary} ({spec.id})" in out
    env = run_cli(["rule", "npu244"], capsys)
    assert f"none: {UNMODELLED['NPU244']}" in " ".join(env.out.split())
    assert "Needs: the environment variables recorded with the profile" in env.out  # the declared data
    fused = run_cli(["rule", "NPU213"], capsys)  # a row for a range of codes (NPU210–NPU217)
    assert "the fused torch_npu API" in fused.out


def test_rule_lists_every_rule_and_refuses_an_unknown_code(capsys):
    listing = run_cli(["rule"], capsys)
    assert [line.split()[0] for line in listing.out.splitlines()] == [r.code for r in all_rules()]
    bad = run_cli(["rule", "NPU10"], capsys)
    assert bad.code == 2 and "unknown rule code 'NPU10'; did you mean NPU10" in _line(bad.err)


def test_a_bare_start_on_a_terminal_says_it_is_a_language_server(tmp_path):
    master, slave = pty.openpty()
    proc = subprocess.Popen(server_command(), stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    os.close(slave)
    try:
        ready, _, _ = select.select([proc.stderr], [], [], 120)
        assert ready, "nothing on stderr"
        assert proc.stderr.readline().decode().rstrip("\n") == LSP_ON_A_TERMINAL
    finally:
        proc.kill()
        proc.wait(timeout=60)
        os.close(master)


def test_every_option_and_command_is_in_docs_cli():
    from msprof_lsp.server.cli import build_parser
    from msprof_lsp.server.commands import SUBCOMMANDS

    doc = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    options = {o for a in build_parser()._actions for o in a.option_strings if o not in ("-h", "--help")}
    assert not {o for o in options if f"`{o}" not in doc}
    assert not {name for name in SUBCOMMANDS if f"msprof-lsp {name}" not in doc}
