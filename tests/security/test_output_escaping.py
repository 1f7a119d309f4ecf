"""Output is escaped: profile- and workspace-derived text (op and kernel names, paths from call
stacks, messages, load notes) carrying terminal escapes, other C0/C1 controls, bidi overrides, a
forged GitHub workflow command, Markdown or HTML reaches no terminal, annotation or hover as
such. Controls are shown as ``\\x1b``-style text; Markdown and HTML are written literally.

Built from a copy of the CNN sample whose kernel types are replaced by hostile names (end to
end), and from hand-built findings (every field of every human writer)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from msprof_lsp.hints.finding import Finding, Fix, Severity, TextEdit
from msprof_lsp.mapping.errors import Issue
from msprof_lsp.mapping.profile.model import Profile, ProfileKind, ProfileMeta
from msprof_lsp.mapping.source.heat import OpHeat, SourceHeat
from msprof_lsp.mapping.spans import Confidence, Span
from msprof_lsp.server.__main__ import main
from msprof_lsp.server.check.progress import ProgressLine
from msprof_lsp.server.check.report import github, html, text
from msprof_lsp.server.analysis.views.result import CheckRun, JobReport
from msprof_lsp.server.escape import markdown, visible
from msprof_lsp.server.lsp import hover
from msprof_lsp.hints.line_counters import OpCounters
from msprof_lsp.mapping.source.critical_path import LinePath
from msprof_lsp.mapping.source.heat import LineHeat
from msprof_lsp.server.lsp.heat_view import FileHeat, HotLine

from tests.synth.hostile_text import HOSTILE, KINDS, hostile_cnn_workspace, live_markdown, raw_controls


# -- the functions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_visible_shows_every_control(kind: str) -> None:
    out = visible(KINDS[kind])
    assert raw_controls(out) == [] and "\n" not in out
    assert visible(out) == out, "idempotent: a second boundary changes nothing"


def test_visible_spelling() -> None:
    assert visible("a\x1b]0;t\x07b") == "a\\x1b]0;t\\x07b"
    assert visible("\u202eabc") == "\\u202eabc"
    assert visible("x\udcff") == "x\\udcff"  # a lone surrogate (undecodable file name) cannot be encoded
    assert visible("aclnnMatMul_中文 😋 x\u00a0y") == "aclnnMatMul_中文 😋 x\u00a0y"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_markdown_is_literal(kind: str) -> None:
    md = markdown(KINDS[kind])
    assert raw_controls(md) == [] and "\n" not in md
    assert live_markdown(md) == []


# -- the --check writers on hand-built findings -------------------------------------------------------


@pytest.fixture()
def hostile_run(tmp_path: Path) -> CheckRun:
    src = tmp_path / f"pkg{KINDS['bidi-override']}" / "model.py"
    src.parent.mkdir()
    src.write_text("x = 1\n", encoding="utf-8")
    span = Span(str(src), 1, 0, 1, 5)
    findings = [
        Finding(code="NPU101", name="relu-dropout-fusion", severity=Severity.WARNING,
                message=f"{HOSTILE}: 3 kernels, 412 µs/step", span=span, share=0.04, time_per_step_us=412.0,
                confidence=Confidence.STACK,
                fixes=[Fix(f"Replace {HOSTILE}", False, (TextEdit(str(src), 1, 0, 1, 5, "y = 1"),))]),
        Finding(code="NPU243", name="env", severity=Severity.INFO, message=f"profile note {HOSTILE}", span=None),
    ]
    meta = ProfileMeta(kind=ProfileKind.TORCH_NPU, path=str(tmp_path / f"prof{KINDS['osc-set-title']}_ascend_pt"), rank=0)
    profile = Profile(meta=meta)
    profile.issues.append(Issue(str(tmp_path / f"kernel{KINDS['csi-clear-screen']}.csv"), f"row skipped: {HOSTILE}"))
    heat = SourceHeat(step_time_ns=8_583_000, num_steps=2, spans=[], lines=[], functions=[], total_device_ns=0,
                      attributed_ns=0, unattributed_ns=0)
    return CheckRun(jobs=[JobReport(profile=profile, heat=heat, findings=findings, ranks=[0])], cwd=tmp_path,
                    tool_version="0.1.0")


@pytest.mark.parametrize("colour", [False, True], ids=["color-never", "color-always"])
def test_text_output_has_no_raw_controls(hostile_run: CheckRun, colour: bool) -> None:
    out = text.render(hostile_run, color=colour)
    assert raw_controls(out, colour=colour) == []
    assert "\\x1b]0;pwned\\x07" in out and "\\u202egnp.exe" in out  # shown, not dropped
    assert "kernel\\x1b[2J" in out  # the load note's file name


def test_concise_output_is_one_line_per_finding(hostile_run: CheckRun) -> None:
    out = text.render_concise(hostile_run)
    assert raw_controls(out) == []
    assert len(out.splitlines()) == 2
    assert all(not line.startswith("::") for line in out.splitlines())


def test_github_output_injects_no_workflow_command(hostile_run: CheckRun) -> None:
    out = github.render(hostile_run)
    assert raw_controls(out) == []
    lines = out.splitlines()
    assert len(lines) == 2, lines  # one annotation per finding, no line of the profile's own
    for line in lines:
        assert re.match(r"^::(warning|notice) [^:]*::", line), line
        # no profile text can start a line: every CR/LF is GitHub's %0D/%0A or our \x0a text
        assert "\r" not in line
    assert "\\x0a::error file=a.py" in out


def test_stderr_messages_show_controls(tmp_path: Path, capsys) -> None:
    # a --check path that does not exist: the error names it, controls shown
    code = main(["--check", str(tmp_path / f"nope{KINDS['osc-set-title']}")])
    err = capsys.readouterr().err
    assert code == 2 and raw_controls(err) == [] and "nope\\x1b]0;pwned" in err


def test_progress_line_shows_controls() -> None:
    class Sink:
        data = ""

        def write(self, s: str) -> None:
            self.data += s

        def flush(self) -> None:
            pass

    sink = Sink()
    ProgressLine(sink)(f"reading {HOSTILE}", 0.0)
    assert raw_controls(sink.data.replace("\r", "")) == []


def test_html_report_holds_no_live_markup(hostile_run: CheckRun) -> None:
    page = html.render(hostile_run)
    start = page.index('<script type="application/json"')
    end = page.index("</script>", start)
    model_text = page[page.index(">", start) + 1:end]
    assert "<" not in model_text, "no tag can open inside the model element"
    assert any(HOSTILE in v for v in _strings(json.loads(model_text))), "the model carries the text as data"
    outside = page[:start] + page[end:]
    assert "evil.example" not in outside.split("<title>")[0]
    title = outside[outside.index("<title>"):outside.index("</title>")]
    assert "<img" not in title and raw_controls(title) == []


def _strings(node: object):  # noqa: ANN201 - every string in a decoded JSON document
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)


# -- --check end to end on a hostile copy of the CNN sample ---------------------------------------------


@pytest.fixture(scope="module")
def hostile_sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hostile_cnn_workspace(tmp_path_factory.mktemp("hostile") / "ws")


@pytest.fixture()
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("MSPROF_LSP_DEBUG", raising=False)


@pytest.mark.parametrize("fmt", ["text", "concise", "github", "html", "json", "sarif"])
def test_check_on_a_hostile_profile(hostile_sample: Path, fmt: str, capsys, monkeypatch, _cache) -> None:
    monkeypatch.chdir(hostile_sample)
    code = main(["--check", ".", "--format", fmt, "--color", "never", "--fail-on", "never"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert raw_controls(out) == [] and raw_controls(err) == []
    if fmt == "github":
        assert all(line.startswith("::") for line in out.splitlines())
    if fmt == "text":
        assert "TD\\x1b]0;t\\x07\\x1b[2J ×" in out, "the hostile type is in the hotspots, shown escaped"
    if fmt == "json":  # structured: the names are data, quoted by the encoder, and they did load
        assert HOSTILE in set(_strings(json.loads(out))) or any(HOSTILE in v for v in _strings(json.loads(out)))
    if fmt == "html":
        assert "<img src=https" not in out


# -- hover Markdown ------------------------------------------------------------------------------------


def _hostile_line() -> tuple[FileHeat, HotLine]:
    ops = [OpHeat(name=HOSTILE, type=KINDS["markdown-image"], core=KINDS["html-tag"], count=2, total_ns=400_000,
                  shapes=(KINDS["markdown-link"], "32,64|128"))]
    counters = [OpCounters(KINDS["autolink"], HOSTILE, "AI_CORE", KINDS["markdown-link"], False, 1, 213_000,
                           (("vec", 0.5), ("mac", 0.2)), "memory-bound")]
    path = LinePath(path="m.py", line=3, total_per_step_ns=200_000, on_path_per_step_ns=100_000,
                    host_on_path_per_step_ns=0, waits=[(HOSTILE, 5_000.0)])
    hot = HotLine(3, LineHeat("m.py", 3, 400_000, 200_000, 0.2, ops=ops), None, counters, path)
    return FileHeat(view=None, lines={3: hot}, functions=[], num_steps=2), hot


@pytest.mark.parametrize("kind", ["markdown", "plain"])
def test_hover_has_no_live_link_image_or_html(kind: str) -> None:
    # the pieces hover() puts together, each with the escape of the client's format
    heat, hot = _hostile_line()
    esc = markdown if kind == "markdown" else visible
    render = hover._markdown if kind == "markdown" else hover._plain
    value = render(hover._headline(hot, heat, 3, esc), hover._rows(None, heat, 3, esc), [hover.path_text(hot, esc)],
                   hover._counter_table(hot, esc))
    assert raw_controls(value) == []
    if kind == "plain":
        assert "\\x1b]0;pwned\\x07" in value
        return
    lines = value.splitlines()
    width = 0
    for i, line in enumerate(lines):
        if line.startswith("| "):
            cells = re.split(r"(?<!\\)\|", line)[1:-1]
            if i + 1 < len(lines) and lines[i + 1].startswith("|---"):
                width = len(cells)  # a table's header
            assert len(cells) == width, line  # no cell boundary came from a name
            for cell in cells:
                assert live_markdown(cell) == [], cell
        elif line.startswith("Critical path"):
            assert live_markdown(line) == [], line
    assert "evil\\.example" in value  # shown, as text


# -- the language server's messages --------------------------------------------------------------------


class _Recorder:
    """Stands in for the server: records what it would send in window/showMessage and logMessage."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def window_log_message(self, params) -> None:  # noqa: ANN001
        self.sent.append(params.message)

    def window_show_message(self, params) -> None:  # noqa: ANN001
        self.sent.append(params.message)


def test_settings_warnings_and_internal_errors_show_controls() -> None:
    from msprof_lsp.server.lsp import configuration, guard

    ls = _Recorder()
    configuration.warn(ls, [f"pyproject.toml: select: unknown code {HOSTILE!s}"])  # a value quoted from the file
    guard.report(ls, "textDocument/hover", ValueError(f"bad name {HOSTILE}"))
    assert len(ls.sent) == 3
    assert raw_controls("\n".join(ls.sent)) == []
    assert all("\\x1b]0;pwned\\x07" in m for m in ls.sent)


def test_lsp_load_progress_shows_controls() -> None:
    import asyncio

    from msprof_lsp.server.lsp.progress import LoadProgress

    class Progress:
        def __init__(self) -> None:
            self.sent: list[str] = []
            self.tokens: dict[str, object] = {}

        def report(self, token, value) -> None:  # noqa: ANN001
            self.sent.append(value.message)

        def end(self, token, value) -> None:  # noqa: ANN001
            self.sent.append(value.message)

    class Server:
        work_done_progress = Progress()

    async def run() -> list[str]:
        p = LoadProgress(Server(), "loading")
        p.token = "t"  # as after begin() on a client that takes progress
        p._report(f"reading {HOSTILE}", 0.5)
        p.end(f"loaded {HOSTILE}")
        return Server.work_done_progress.sent

    sent = asyncio.run(run())
    assert len(sent) == 2 and raw_controls("\n".join(sent)) == []
