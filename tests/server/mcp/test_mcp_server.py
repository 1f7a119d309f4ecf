"""``msprof-lsp mcp`` driven by the MCP SDK's own client over stdio (docs/agents.md): the tools
and their schemas, each tool on the samples, a proposed diff applied and imported, no file
written during the session, error results for bad input with the session going on."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import pytest

import msprof_lsp
from tests.server.check.cli_support import isolated_cache  # noqa: F401 - autouse fixture
from tests.server.check.cli_support import CnnKnobs, copy_sample_sources, single_rank, write_cnn_profiles
from conftest import REPO
from msprof_lsp.server.api.workspace_run import Request, RunCache

mcp = pytest.importorskip("mcp")
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

SAMPLE = REPO / "samples" / "cnn_classifier"
TOOLS = {"analyse": {"workspace"}, "explain_line": {"workspace", "path", "line"},
         "propose_fix": {"workspace", "finding_id"}, "compare": {"workspace", "profile", "baseline"},
         "profiler_snippet": {"kind"}}


@asynccontextmanager
async def session(tmp_path: Path):
    """The server as an agent's client starts it: the console script's module, on stdio."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg-cache"), "PATH": os.environ.get("PATH", "")}
    params = StdioServerParameters(command=sys.executable, args=["-m", "msprof_lsp.server", "mcp"], env=env,
                                   cwd=str(tmp_path))
    with open(tmp_path / "server-stderr.log", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            yield s


async def call(s: ClientSession, tool: str, **arguments) -> dict:
    result = await s.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.structured_content


async def error(s: ClientSession, tool: str, *, one_line: bool = True, **arguments) -> str:
    """The error result's text: one line from our tools (the SDK's schema check writes several)."""
    result = await s.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    (text,) = [c.text for c in result.content]
    assert "Traceback" not in text and ("\n" not in text or not one_line)
    return text


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(SAMPLE, ws)
    return ws


async def test_tools_and_their_schemas(tmp_path):
    async with session(tmp_path) as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
    assert set(tools) == set(TOOLS)
    for name, required in TOOLS.items():
        schema = tools[name].input_schema
        assert set(schema["required"]) == required and required <= set(schema["properties"])
        assert tools[name].description and tools[name].annotations.read_only_hint
        if name != "profiler_snippet":
            assert "path_map" in schema["properties"]
    assert tools["profiler_snippet"].input_schema["properties"]["kind"]["enum"] == ["npu", "cuda", "cpu"]


async def test_a_session_on_the_sample(tmp_path, workspace):
    before = snapshot(workspace)
    ws = str(workspace)
    async with session(tmp_path) as s:
        got = await call(s, "analyse", workspace=ws, profile="npu_profile")
        # a bad request is an error result naming the cause, and the session goes on
        assert "outside the workspace" in await error(s, "explain_line", workspace=ws, path="/etc/passwd", line=1)
        assert "outside the workspace" in await error(s, "analyse", workspace=ws, profile="../..")
        assert "absolute" in await error(s, "analyse", workspace="samples")
        assert "no such file" in await error(s, "analyse", workspace=ws, profile="nowhere")
        assert "path_map" in await error(s, "analyse", workspace=ws, path_map=["no equals sign"])
        assert "out of range" in await error(s, "explain_line", workspace=ws, path="model.py", line=10_000)
        assert "no finding" in await error(s, "propose_fix", workspace=ws, finding_id="NPU999:model.py:1")
        assert "kind" in await error(s, "profiler_snippet", kind="tpu", one_line=False)
        (tmp_path / "empty").mkdir()
        assert "profiler_snippet" in await error(s, "analyse", workspace=str(tmp_path / "empty"))
        line = await call(s, "explain_line", workspace=ws, path="model.py", line=25, profile="npu_profile")
        fix = await call(s, "propose_fix", workspace=ws, finding_id="NPU104:train.py:95", profile="npu_profile")
        inplace = await call(s, "propose_fix", workspace=ws, finding_id="NPU101:model.py:34", profile="npu_profile")
        snippets = {k: await call(s, "profiler_snippet", kind=k) for k in ("npu", "cuda", "cpu")}
    assert snapshot(workspace) == before  # the server wrote nothing into the workspace

    # the same core as --check and the API: the same findings with the same figures
    api = msprof_lsp.analyse(workspace, profile="npu_profile")
    assert [(f["id"], f["share"], f["saving_us_per_step"]) for f in got["findings"]] == [
        (f.id, f.share, f.saving_us_per_step) for f in api.findings]
    assert got["start_here"] == [f.id for f in api.start_here] and got["start_here"]
    summary = got["summary"]
    assert (summary["kind"], summary["ranks"], summary["steps"]) == ("torch_npu", [0, 1], 2)
    assert summary["step_time_us"] == api.report["profile"]["step_time_us"]
    assert summary["breakdown"]["step_us"] == api.report["profile"]["breakdown"]["mean"]["step_us"]
    for f in got["findings"]:
        assert {"id", "code", "path", "line", "severity", "message", "share", "saving_us_per_step"} <= set(f)
    # planted: TransData around the convolutions of model.py:25, a single-process DataLoader at train.py:95
    ids = {f["id"] for f in got["findings"]}
    assert {"NPU103:model.py:25", "NPU104:train.py:95"} <= ids

    hot = api.hotspots[(api.hotspots["path"] == "model.py") & (api.hotspots["line"] == 25)]
    assert line["time_us_per_step"] == pytest.approx(hot["time_us_per_step"].sum(), abs=1e-2) and line["time_us_per_step"] > 0
    assert "self.conv(x)" in line["text"] and line["profiles"][0]["operators"] and line["profiles"][0]["kernels"]
    assert "NPU103" in {f["code"] for f in line["findings"]}

    # the torch.compile(backend="npu") fusion needs torch_npu to import; its alternative runs anywhere
    assert "torch.compile" in inplace["title"]
    inplace = next(x for x in inplace["alternatives"] if "in-place" in x["title"])
    for proposed, module in ((fix, "train"), (inplace, "model")):
        assert proposed["diff"].startswith("--- a/") and isinstance(proposed["safe"], bool)
        applied = tmp_path / f"applied-{module}"
        shutil.copytree(workspace, applied)
        subprocess.run(["git", "apply", "-"], input=proposed["diff"], text=True, cwd=applied, check=True)
        assert snapshot(applied) != before
        subprocess.run([sys.executable, "-c", f"import {module}"], cwd=applied, check=True)  # the result imports
    for kind, snip in snippets.items():
        compile(snip["snippet"], f"<{kind} snippet>", "exec")
    assert "torch_npu.profiler" in snippets["npu"]["snippet"] and "torch_npu" not in snippets["cpu"]["snippet"]


async def test_compare_gives_each_finding_its_state(tmp_path):
    """Baseline: a slow single-process DataLoader and a long all-reduce; new run: the DataLoader wait
    gone, the all-reduce halved (the profiles tests/server/check/test_check_verify.py compares too)."""
    proj = tmp_path / "proj"
    src = copy_sample_sources(proj / "cnn_classifier")
    old = single_rank(CnnKnobs(transdata_us=0.5, linear_transdata=0))
    new = replace(old, dataloader_ms=(0.05,), allreduce_us=700.0)
    write_cnn_profiles(src, proj / "old", old)
    write_cnn_profiles(src, proj / "new", new)
    baseline = next((proj / "old").glob("*_ascend_pt")).relative_to(proj)
    async with session(tmp_path) as s:
        got = await call(s, "compare", workspace=str(proj), profile="new", baseline=str(baseline))
        assert "outside the workspace" in await error(s, "compare", workspace=str(proj), profile="new",
                                                       baseline=str(SAMPLE / "npu_profile"))
    states = {f["code"]: f["state"] for f in got["findings"]}
    assert states["NPU104"] == "resolved" and states["NPU102"] == "improved"
    assert got["step_time_us"]["after"] < got["step_time_us"]["before"]
    loader = next(f for f in got["findings"] if f["code"] == "NPU104")
    assert loader["after"] is None and loader["before"]["device_time_us"] > 10_000
    assert json.dumps(got)  # plain JSON for the agent


def test_the_analysis_is_kept_until_a_file_it_read_changes(workspace):
    cache = RunCache()
    request = Request(workspace=str(workspace), profile="npu_profile")
    first, _ = cache.get(request)
    assert cache.get(request)[0] is first and cache.loads == 1
    model = workspace / "model.py"
    model.write_text(model.read_text(encoding="utf-8") + "\n# edited by the agent\n", encoding="utf-8")
    assert cache.get(request)[0] is not first and cache.loads == 2


def test_the_subcommand_says_what_it_needs(monkeypatch, capsys):
    from msprof_lsp.server.__main__ import main

    assert main(["mcp", "--help"]) == 0 and "explain_line" in capsys.readouterr().out
    assert main(["mcp", "--stdio"]) == 2 and "mcp takes no arguments" in capsys.readouterr().err
    for name in [m for m in sys.modules if m == "mcp" or m.startswith("mcp.")]:
        monkeypatch.setitem(sys.modules, name, None)  # the optional extra not installed
    monkeypatch.delitem(sys.modules, "msprof_lsp.server.mcp.app", raising=False)
    assert main(["mcp"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "msprof-lsp[mcp]" in err
