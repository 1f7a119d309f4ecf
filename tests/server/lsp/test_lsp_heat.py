"""Seeing the heat: code lens, hover, inlay hints, the lineHeat / showOperators / showHotspots
commands, settings that switch them, and a baseline profile's before/after figures.

Expected figures come from the sample's run description (tests.synth truth), not the server.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import attrs
import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

import lsp_support as S

pytestmark = pytest.mark.asyncio(loop_scope="module")
NUMBER = re.compile(r"([\d,]+(?:\.\d+)?) (µs|ms)/step")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return S.cnn_workspace(tmp_path_factory.mktemp("heat") / "ws")


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=S.SERVER_COMMAND), params=S.PROFILES)
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    root = request.getfixturevalue("workspace")
    lsp_client.options = S.init_options(root.parent)
    await S.open_session(lsp_client, request.param, root, lsp_client.options)
    lsp_client.truth = S.cnn_truth(S.status_value(lsp_client.status, "rank"))
    lsp_client.doc = S.Doc(lsp_client, root / "model.py")
    await S.wait_diagnostics(lsp_client, request.param, lsp_client.doc.uri, lambda d: len(d) == 5)
    yield
    await lsp_client.shutdown_session()


def per_step_us(text: str) -> float:
    value, unit = NUMBER.search(text).groups()
    v = float(value.replace(",", ""))
    return v * 1000 if unit == "ms" else v


def line_figures(client: LanguageClient) -> dict[int, tuple[float, float]]:
    """1-based model.py line -> (µs per step, share) from the run description."""
    t = client.truth
    steps, step_ns = len(t.steps), t.mean_step_time_ns
    return {line: (ns / steps / 1000, ns / steps / step_ns) for (f, line), ns in t.kernel_ns_by_line.items()
            if Path(f).name == "model.py"}


async def command(client: LanguageClient, name: str, *args):  # noqa: ANN002, ANN201
    return await client.workspace_execute_command_async(types.ExecuteCommandParams(command=name, arguments=list(args)))


async def set_settings(client: LanguageClient, changes: dict) -> None:
    """VS Code answers workspace/configuration; Neovim 0.7 has none and pushes the settings (the
    whole client layer, so the initial options go along)."""
    values = {**client.options, **changes}
    if client.profile == "visual-studio-code":
        client.set_configuration(values, section="msprof-lsp")
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    else:
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"msprof-lsp": values}))
    await asyncio.sleep(0.3)


async def lenses(client: LanguageClient) -> list[types.CodeLens]:
    """The heat lenses (the "Start here" ones have their own test, test_lsp_start_here.py)."""
    got = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(client.doc.uri)))
    return [x for x in got if not x.command.title.startswith("Start here (#")]


async def test_code_lens_over_hot_lines_and_functions(client: LanguageClient) -> None:
    figures = line_figures(client)
    hot = {line: f for line, f in figures.items() if f[1] >= 0.01}  # the minShare default
    text = client.doc.text.split("\n")
    defs = [i for i, line in enumerate(text) if line.strip().startswith("def forward(")]
    got = {lens.range.start.line: lens for lens in await lenses(client)}
    assert set(got) == {line - 1 for line in hot} | set(defs)
    for line, (us, share) in hot.items():
        lens = got[line - 1]
        assert lens.command.command == "msprof-lsp.showOperators"
        assert list(lens.command.arguments) == [client.doc.uri, line - 1]
        assert f"{share * 100:.1f}% of step" in lens.command.title
        assert per_step_us(lens.command.title) == pytest.approx(us, rel=0.005)
    conv_def = got[defs[0]].command.title  # ConvBlock.forward is its one hot line
    assert conv_def.startswith("ConvBlock.forward · ") and f"{hot[defs[0] + 2][1] * 100:.1f}%" in conv_def


async def test_hover_table_on_a_hot_line(client: LanguageClient) -> None:
    t = client.truth
    steps = len(t.steps)
    line = S.line_of(client.doc.text, "return self.pool(F.relu(self.bn(self.conv(x))))")
    hover = await client.text_document_hover_async(
        types.HoverParams(types.TextDocumentIdentifier(client.doc.uri), types.Position(line - 1, 20)))
    assert hover.contents.kind == types.MarkupKind.Markdown  # both clients take Markdown
    md = hover.contents.value
    assert "| operator | type | core | count | µs/step | share | shapes |" in md
    rows = [r.split(" | ") for r in md.splitlines() if r.startswith("| ") and "---" not in r][1:]
    conv = next(r for r in rows if r[1] == "Conv2D")  # only the conv blocks launch Conv2D
    assert float(conv[4].replace(",", "")) == pytest.approx(t.kernel_ns_by_type["Conv2D"] / steps / 1000, abs=0.06)
    assert int(conv[3]) == t.kernel_count_by_type["Conv2D"]
    assert conv[2] == "AI\\_CORE"  # profile text is Markdown-escaped (renders as AI_CORE)
    # its time on the critical path next to its total: "<total>/step, <on path> on the critical path"
    head = md.splitlines()[0]
    on = re.search(r"/step, ([\d,.]+) (µs|ms) on the critical path", head)
    assert on is not None, head
    on_us = float(on.group(1).replace(",", "")) * (1000 if on.group(2) == "ms" else 1)
    assert 0 <= on_us <= per_step_us(head) + 0.05
    assert re.search(r"Critical path: [\d.]+% of this line's own time is on it; (host|sync|bandwidth|compute)-bound", md)
    # a line without device time has no hover
    assert await client.text_document_hover_async(
        types.HoverParams(types.TextDocumentIdentifier(client.doc.uri), types.Position(0, 0))) is None


async def test_line_heat_operators_and_hotspots(client: LanguageClient) -> None:
    figures = line_figures(client)
    entries = await command(client, "msprof-lsp.lineHeat", client.doc.uri)
    got = {e["line"] + 1: e for e in entries}
    assert set(got) == {line for line, (us, share) in figures.items() if share > 0}
    for line, e in got.items():
        assert e["share"] == pytest.approx(figures[line][1], abs=1e-5)
        assert e["perStepUs"] == pytest.approx(figures[line][0], rel=1e-3)
        assert e["label"]
    t, steps = client.truth, len(client.truth.steps)
    conv_line = S.line_of(client.doc.text, "return self.pool(F.relu(self.bn(self.conv(x))))")
    ops = (await command(client, "msprof-lsp.showOperators", client.doc.uri, conv_line - 1))["ops"]
    conv = next(o for o in ops if o["type"] == "Conv2D")
    assert conv["time_us"] == pytest.approx(t.kernel_ns_by_type["Conv2D"] / steps / 1000, abs=1e-3)
    assert conv["count"] == t.kernel_count_by_type["Conv2D"]
    hot = (await command(client, "msprof-lsp.showHotspots"))["hotspots"]
    first = hot[0]
    assert first["path"] == str(client.root / "model.py") and first["uri"] == client.doc.uri
    assert first["line"] == conv_line and first["share"] <= figures[conv_line][1]
    assert all(h["share"] >= n["share"] for h, n in zip(hot, hot[1:]))


async def test_commands_take_unpacked_arguments(client: LanguageClient) -> None:
    from pygls.exceptions import JsonRpcException

    with pytest.raises(JsonRpcException, match="argument 1 must be a document URI"):
        await command(client, "msprof-lsp.lineHeat", 42)
    with pytest.raises(JsonRpcException, match="missing argument 2"):
        await command(client, "msprof-lsp.showOperators", client.doc.uri)
    assert (await command(client, "msprof-lsp.showOperators", client.doc.uri, 0))["ops"] == []


async def test_inlay_hints_follow_the_setting(client: LanguageClient) -> None:
    provider = client.seen["init"][0].capabilities.inlay_hint_provider
    if client.profile != "visual-studio-code":
        assert provider is None  # Neovim 0.7 has no inlay hints: not advertised
        return
    assert provider is not None
    whole = types.Range(types.Position(0, 0), types.Position(len(client.doc.text.split("\n")), 0))
    params = types.InlayHintParams(types.TextDocumentIdentifier(client.doc.uri), whole)
    assert not await client.text_document_inlay_hint_async(params)  # off by default
    await set_settings(client, {"inlayHints": True})
    try:
        await S.wait_until(lambda: client.seen["inlay_refresh"], 10, "an inlay hint refresh")
        hints = await client.text_document_inlay_hint_async(params)
        figures = {line: f for line, f in line_figures(client).items() if f[1] >= 0.01}
        lines = client.doc.text.split("\n")
        assert {h.position.line + 1 for h in hints} == set(figures)
        for h in hints:
            us, share = figures[h.position.line + 1]
            assert h.position.character == S.utf16_col(lines[h.position.line], len(lines[h.position.line]))
            assert h.label.startswith(f"{share * 100:.1f}% · ")
    finally:
        await set_settings(client, {})


async def test_code_lens_setting_and_rule_selection(client: LanguageClient) -> None:
    await set_settings(client, {"codeLens": False, "select": [S.HOT]})
    try:
        assert not await lenses(client)
        diags = await S.wait_diagnostics(client, client.profile, client.doc.uri,
                                         lambda d: {str(x.code) for x in d} == {S.HOT}, what="only HOT")
        assert len(diags) == 2
        if client.profile == "visual-studio-code":
            assert client.seen["code_lens_refresh"]
    finally:
        await set_settings(client, {})
    assert await lenses(client)
    await S.wait_diagnostics(client, client.profile, client.doc.uri, lambda d: len(d) == 5, what="all back")


async def test_baseline_before_and_after(client: LanguageClient, tmp_path_factory: pytest.TempPathFactory) -> None:
    from tests.synth.sample_runs import CnnKnobs, cnn_runs
    from tests.synth.write_text import write_torch_npu_text

    rank = S.status_value(client.status, "rank")
    slow = {"conv_us": (84.0, 110.0)}  # the baseline run: convolutions twice as slow
    base_dir = tmp_path_factory.mktemp("baseline")
    root = write_torch_npu_text(cnn_runs(S.SAMPLES / "cnn_classifier", CnnKnobs(**slow))[rank], base_dir)
    before_t = S.cnn_truth(rank, **slow)
    line = S.line_of(client.doc.text, "return self.pool(F.relu(self.bn(self.conv(x))))")
    before = before_t.kernel_ns_by_line[next(k for k in before_t.kernel_ns_by_line if k[1] == line and k[0].endswith("model.py"))]
    before_us = before / len(before_t.steps) / 1000
    after_us = line_figures(client)[line][0]
    result = await command(client, "msprof-lsp.setBaseline", str(root))
    try:
        assert result["baseline"] == str(root) and result["changes"] >= 1
        lens = next(x for x in await lenses(client) if x.range.start.line == line - 1)
        change = re.search(r"([\d,.]+) µs → ([\d,.]+) µs/step \(([−+])(\d+)%\)", lens.command.title)
        assert change, lens.command.title
        assert float(change.group(1).replace(",", "")) == pytest.approx(before_us, rel=0.005)
        assert float(change.group(2).replace(",", "")) == pytest.approx(after_us, rel=0.005)
        assert change.group(3) == "−" and int(change.group(4)) == round(abs(after_us / before_us - 1) * 100)
        hover = await client.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(client.doc.uri), types.Position(line - 1, 20)))
        assert "Baseline: " in hover.contents.value
        # per finding: the hot-line finding on the conv line got faster; the ReLU -> Dropout pairs did not change
        diags = await S.wait_diagnostics(client, client.profile, client.doc.uri,
                                         lambda ds: ds and all((d.data or {}).get("state") for d in ds),
                                         what="diagnostics with their baseline state")
        states = {(str(d.code), d.range.start.line + 1): d for d in diags}
        hot = states[(S.HOT, line)]
        assert hot.data["state"] == "improved" and "(improved since the baseline: " in hot.message
        figures = re.search(r"([\d,.]+) µs → ([\d,.]+) µs/step\)$", hot.message)
        assert float(figures.group(1).replace(",", "")) > float(figures.group(2).replace(",", ""))
        assert {d.data["state"] for (code, _), d in states.items() if code == S.PAIR} == {"persisting"}
        # the counts cover every file of the job (train.py too): one improved, the rest unchanged
        assert result["findings"]["improved"] == 1 and set(result["findings"]) == {"improved", "persisting"}
        assert sum(result["findings"].values()) >= len(diags)
    finally:
        cleared = await command(client, "msprof-lsp.setBaseline", None)
    assert cleared["baseline"] is None
    lens = next(x for x in await lenses(client) if x.range.start.line == line - 1)
    assert "→" not in lens.command.title


async def test_baseline_findings_gone_now_are_resolved_hints(client: LanguageClient, tmp_path_factory: pytest.TempPathFactory) -> None:
    from tests.synth.sample_runs import CnnKnobs, cnn_runs
    from tests.synth.write_text import write_torch_npu_text

    rank = S.status_value(client.status, "rank")
    slow = {"fc_mm_us": 400.0}  # the baseline run: fc layers slow enough to be hot lines
    root = write_torch_npu_text(cnn_runs(S.SAMPLES / "cnn_classifier", CnnKnobs(**slow))[rank],
                                tmp_path_factory.mktemp("slow_fc"))
    before = S.truth_shares(S.cnn_truth(rank, **slow))
    now = S.truth_shares(client.truth)
    gone = {line for (name, line), share in before.items()
            if name == "model.py" and share >= 0.05 and now.get((name, line), 0.0) < 0.05}
    assert gone  # the run description makes some lines hot only in the baseline
    result = await command(client, "msprof-lsp.setBaseline", str(root))
    try:
        assert result["findings"].get("resolved", 0) >= len(gone)
        diags = await S.wait_diagnostics(client, client.profile, client.doc.uri,
                                         lambda ds: any((d.data or {}).get("state") == "resolved" for d in ds),
                                         what="resolved baseline findings")
        resolved = [d for d in diags if d.data["state"] == "resolved"]
        assert {d.range.start.line + 1 for d in resolved if d.code == S.HOT} == gone  # once each, where the code is
        for d in resolved:
            assert d.severity == types.DiagnosticSeverity.Hint and d.message.startswith("resolved since the baseline: ")
            assert d.data["finding"] == -1 and d.data.get("fixes", 0) == 0 and "→ —/step: " in d.message  # 0 is left out
        d = resolved[0]
        actions = await client.text_document_code_action_async(types.CodeActionParams(
            types.TextDocumentIdentifier(client.doc.uri), d.range, types.CodeActionContext(
                diagnostics=[d], only=[types.CodeActionKind.QuickFix.value])))
        assert not actions  # no fix and nothing to silence for what is gone
    finally:
        await command(client, "msprof-lsp.setBaseline", None)


# -- a client that negotiates UTF-8 and reads only plain text ---------------------------------------


def _utf8_plain_caps() -> types.ClientCapabilities:
    caps = client_capabilities("neovim@v0.7")
    caps.general = types.GeneralClientCapabilities(position_encodings=[types.PositionEncodingKind.Utf8])
    caps.text_document.hover = attrs.evolve(caps.text_document.hover, content_format=[types.MarkupKind.PlainText])
    return caps


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=S.SERVER_COMMAND))
async def utf8_client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    root = S.cnn_workspace(request.getfixturevalue("tmp_path_factory").mktemp("utf8") / "ws")
    lsp_client.seen = await S.start_session(lsp_client, _utf8_plain_caps(), root, S.init_options(root.parent))
    lsp_client.root = root
    await S.wait_loaded(lsp_client.seen)
    yield
    await lsp_client.shutdown_session()


async def test_utf8_positions_and_plain_text_hover(utf8_client: LanguageClient) -> None:
    client = utf8_client
    assert client.seen["init"][0].capabilities.position_encoding == types.PositionEncodingKind.Utf8
    doc = S.Doc(client, client.root / "model.py")
    line = S.line_of(doc.text, "x = self.drop(self.act(")
    # the test's edit helper counts UTF-16; inserting at an ASCII column is the same in UTF-8
    doc.edit(line - 1, 8, line - 1, 8, 'tag = "中文😋"; ')
    text_line = doc.text.split("\n")[line - 1]
    start_cp = text_line.index("self.drop(")
    start_utf8 = len(text_line[:start_cp].encode("utf-8"))
    assert start_utf8 == start_cp + 2 * 2 + 3  # two 3-byte Chinese characters, one 4-byte emoji
    await S.wait_until(lambda: any(d.code == S.PAIR and d.range.start == types.Position(line - 1, start_utf8)
                                   for d in client.diagnostics.get(doc.uri, [])), 20, "a UTF-8 range")
    conv = S.line_of(doc.text, "return self.pool(")
    hover = await client.text_document_hover_async(
        types.HoverParams(types.TextDocumentIdentifier(doc.uri), types.Position(conv - 1, 20)))
    assert hover.contents.kind == types.MarkupKind.PlainText
    header = next(r for r in hover.contents.value.splitlines() if r.startswith("operator"))
    assert re.match(r"operator +type +core +count +µs/step +share +shapes$", header)
    assert "|" not in hover.contents.value


async def test_report_model_command(client: LanguageClient) -> None:
    """msprof-lsp.reportModel: the model the "Show profile" view draws, for the loaded job --
    the hot line first, one breakdown bar per step of the run description, paths under ``base``."""
    model = await command(client, "msprof-lsp.reportModel")
    assert model["base"] == str(client.root) and len(model["jobs"]) == 1
    job = model["jobs"][0]
    conv_line = S.line_of(client.doc.text, "return self.pool(F.relu(self.bn(self.conv(x))))")
    assert (job["hotspots"][0]["path"], job["hotspots"][0]["line"]) == ("model.py", conv_line)
    rank = S.status_value(client.status, "rank")
    own = [b for b in job["breakdown"] if b["rank"] == (rank if rank is not None else -1)]
    assert len(own) == len(client.truth.steps)
    sources = {(s["path"], s["line"]) for s in job["timeline"]["sources"]}
    assert ("model.py", conv_line) in sources  # the conv kernels on the timeline link to their line
    assert any(fix["diff"].startswith("--- a/") for f in job["findings"] for fix in f["fixes"])
