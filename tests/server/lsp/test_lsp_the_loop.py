"""The whole loop through the language server, for real with torch on the CPU: record a profile
with the record action's block, fix the DataLoader finding with its code action, record again after
``msprof-lsp.adoptNewProfile``, and see the finding resolved (or improved) with the measured
numbers per finding and per line, the same as ``--check --baseline`` writes.

The workspace is the CNN sample's model and data with its training loop as a user without a
profiler writes it, guarding its torch_npu import as a script that runs on the Ascend box and on a
laptop does (tests/loop's GUARDED_TRAIN: the sample's own train.py already records with
``--profile-dir``, so the record action rightly declines there), loading ``BlurredImages``: the
record action's block must record with torch.profiler here, where torch_npu is not installed. its
per-item blur runs on the loading thread, so the single-process DataLoader stalls the step on a
CPU too. NPU108 (host syncs) is not part of the CPU loop: it covers Ascend and CUDA profiles only,
since a CPU ``.item()`` waits for no device.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

import lsp_support as S
from tests.conftest import server_command

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loop"))
from test_record_profile import GUARDED_TRAIN  # noqa: E402  (the CNN sample's loop without a profiler)
from gauge import run_gauged  # noqa: E402

import numpy as np  # noqa: E402

from msprof_lsp.hints import profile_query as pq  # noqa: E402
from msprof_lsp.hints.fixes.profiling import PROFILE_ENV, PROFILE_FOLDER, SKIP_FIRST  # noqa: E402
from msprof_lsp.hints.rules.dataloader import fetch_scopes  # noqa: E402
from msprof_lsp.mapping.profile.load import load_location, locate  # noqa: E402

pytest.importorskip("torch")
pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.torch]
STEPS = SKIP_FIRST + 6  # skipped, wait 1, warm up 1, record 3, one to spare
FAST_POLL = {**os.environ, "MSPROF_LSP_POLL_INTERVAL": "0.3"}
# the training thread's core plus the workers' share: they blur ~6 ms of a ~13 ms step
FREE_CORES = 1.5
# The ops outside the fetch are the same before and after (checked); their recorded time may move by
# this much before the step difference stops being the fix's: this machine's speed moves by +-30 %
# within a minute (a fixed pure-Python loop: 198-360 ms; docs/savings.md "The CPU loop").
DRIFT = 0.10
FIGURES = re.compile(r"([\d,.]+ (?:µs|ms)|—) → ([\d,.]+ (?:µs|ms)|—)/step")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return S.train_workspace(tmp_path_factory.mktemp("loop") / "ws", GUARDED_TRAIN.replace("SyntheticImages", "BlurredImages"))


# Neovim 0.7 has no dynamic file-watch registration: the server polls, as it does for such clients
@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=server_command(), server_env=FAST_POLL))
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    root = request.getfixturevalue("workspace")
    options = S.init_options(root.parent, only_test_rules=False, select=["NPU104"])
    await S.open_session(lsp_client, "neovim@v0.7", root, options)
    yield
    await lsp_client.shutdown_session()


def _record(root: Path) -> float | None:
    """Record STEPS steps; returns the cores the rest of the machine kept busy meanwhile (None: unknown).

    The recording's own CPU (the script and its DataLoader workers, which it joins, so they roll into
    RUSAGE_CHILDREN) is taken out of the machine's busy time: what remains is other load."""
    env = {**os.environ, PROFILE_ENV: "1", "OMP_NUM_THREADS": "1"}
    out, other = run_gauged([sys.executable, "train.py", str(STEPS)], root, env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return other


def _traces(root: Path) -> list[Path]:
    return sorted((root / PROFILE_FOLDER).glob("*.pt.trace.json*"), key=lambda p: p.stat().st_mtime_ns)


async def _apply(client: LanguageClient, doc: S.Doc, action: types.CodeAction) -> None:
    """Apply the action's edit to the buffer and save it (the script runs from disk)."""
    if action.edit is None:
        action = await client.code_action_resolve_async(action)
    edits, _ = S.edits_for(action.edit, doc.uri)
    doc.replace_all(S.apply_text_edits(doc.text, edits))
    doc.path.write_text(doc.text, encoding="utf-8")


async def _actions(client: LanguageClient, doc: S.Doc, rng: types.Range, diags: list[types.Diagnostic],
                   only: list[str]) -> list[types.CodeAction]:
    got = await client.text_document_code_action_async(types.CodeActionParams(
        types.TextDocumentIdentifier(doc.uri), rng, types.CodeActionContext(diagnostics=diags, only=only)))
    return [a for a in got or [] if isinstance(a, types.CodeAction)]


def _ops_per_step(trace: Path) -> tuple[float, float, float]:
    """Host ops per step outside and inside the DataLoader fetch scopes (NPU104's evidence rows), and
    the step's recorded time outside the fetch scopes (µs per step)."""
    profile = load_location(locate(trace), use_cache=False)
    starts = profile.host_ops["start_ns"].to_numpy(np.int64)
    scopes = fetch_scopes(profile)
    fetch = pq.descendants(profile, scopes)
    inside = pq.in_steps(profile, starts)
    steps = len(profile.steps)
    fetch_ns = float(profile.host_ops["dur_ns"].to_numpy(np.int64)[scopes].sum())
    rest_us = (sum(s.dur_ns for s in profile.steps) - fetch_ns) / steps / 1000
    return float((inside & ~fetch).sum()) / steps, float((inside & fetch).sum()) / steps, rest_us


def _us(text: str) -> float | None:
    if text == "—":
        return None
    value, unit = text.split()
    return float(value.replace(",", "")) * (1000 if unit == "ms" else 1)


def _loaded(client: LanguageClient, not_path: str | None = None) -> object | None:
    for s in reversed(client.seen["status"]):
        if S.status_value(s, "state") == "loaded":
            return s if S.status_value(s, "path") != not_path else None
    return None


async def test_record_fix_rerecord_and_compare(client: LanguageClient) -> None:
    root = client.root
    assert S.status_value(client.status, "state") == "none"
    doc = S.Doc(client, root / "train.py")

    # 1. no profile: the record action on the training loop, applied and saved; the first run
    loop0 = S.line_of(doc.text, "loss.backward()") - 1
    pos = types.Position(loop0, 8)
    (record,) = await _actions(client, doc, types.Range(pos, pos), [], [types.CodeActionKind.RefactorRewrite.value])
    await _apply(client, doc, record)
    assert PROFILE_ENV in doc.text and "    if torch_npu is not None:\n" in doc.text  # both profilers, one block
    assert importlib.util.find_spec("torch_npu") is None  # the CPU recording runs without torch_npu
    load = [await asyncio.to_thread(_record, root)]  # the client keeps answering the server meanwhile
    (first,) = _traces(root)
    await S.wait_until(lambda: _loaded(client), 240, "the first recording loaded")

    # 2. the DataLoader finding, fixed with its code action
    def npu104(ds: list[types.Diagnostic]) -> list[types.Diagnostic]:
        return [d for d in ds if d.code == "NPU104"]

    diags = await S.wait_diagnostics(client, client.profile, doc.uri, lambda d: npu104(d), 120, what="NPU104")
    (stall,) = npu104(diags)
    assert "single process" in stall.message and (stall.data or {}).get("state", "") == ""  # no baseline yet
    fixes = await _actions(client, doc, stall.range, [stall], [types.CodeActionKind.QuickFix.value])
    (workers,) = [a for a in fixes if "workers into pinned memory" in a.title]
    await _apply(client, doc, workers)
    assert "num_workers=" in doc.text and "pin_memory=True" in doc.text

    # 3. a recording starts: the next new profile becomes current, this one the baseline
    adopted = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="msprof-lsp.adoptNewProfile", arguments=[]))
    assert Path(adopted["current"]) == first.resolve()
    load.append(await asyncio.to_thread(_record, root))
    second = next(p for p in _traces(root) if p != first)
    await S.wait_until(lambda: _loaded(client, not_path=adopted["current"]), 240, "the second recording loaded")
    diags = await S.wait_diagnostics(
        client, client.profile, doc.uri,
        lambda ds: any((d.data or {}).get("state") in ("resolved", "improved") for d in npu104(ds)), 120,
        what="NPU104 compared with the baseline")

    # 4. the same comparison headless: --check --baseline (JSON), the producer-independent side
    out = subprocess.run(
        [sys.executable, "-m", "msprof_lsp.server", "--check", str(root), "--profile", str(second),
         "--baseline", str(first), "--select", "NPU104", "--format", "json", "--fail-on", "never",
         "--cache-dir", str(root.parent / "cache")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    report = document["baseline"]
    (change,) = [c for c in report["findings"] if c["code"] == "NPU104"]
    assert change["state"] in ("resolved", "improved")
    assert change["before"]["device_time_us"] > (change["after"] or {}).get("device_time_us", 0.0)

    (shown,) = [d for d in npu104(diags) if d.data["state"] == change["state"]]
    before, after = FIGURES.search(shown.message).groups()
    assert _us(before) == pytest.approx(change["before"]["device_time_us"], rel=0.01)
    assert (_us(after) is None) == (change["after"] is None)
    if change["state"] == "resolved":
        assert shown.severity == types.DiagnosticSeverity.Hint and shown.message.startswith("resolved since")
        assert shown.data["finding"] == -1 and shown.data.get("fixes", 0) == 0
    else:  # the workers are still too slow: recorded with them, so not "fixed since this profile"
        assert _us(after) == pytest.approx(change["after"]["device_time_us"], rel=0.01)
        assert "worker processes" in shown.message and "fixed in the source" not in shown.message

    # 5. per line: the blur ran on the training process and now runs in the workers, so a line of
    # BlurredImages.__getitem__ lost time; its lens shows --check's figures. (Not "the line that lost
    # the most": two real CPU recordings on a loaded machine can also move a conv line by more.)
    data = S.Doc(client, root / "data.py")
    blur = range(S.line_of(data.text, "class BlurredImages"), len(data.text.splitlines()) + 1)
    in_blur = [c for c in report["changes"] if c["path"].endswith("data.py") and c["line"] in blur]
    assert in_blur, report["changes"]
    (line, *_) = sorted(in_blur, key=lambda c: c["after_us"] - c["before_us"])
    assert line["after_us"] < line["before_us"], line
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(data.uri)))
    (lens,) = [x for x in lenses if x.range.start.line == line["line"] - 1]
    lb, la = FIGURES.search(lens.command.title).groups()
    assert _us(lb) == pytest.approx(line["before_us"], rel=0.01)
    assert _us(la) == pytest.approx(line["after_us"], rel=0.01, abs=0.1)
    print(f"NPU104 {change['state']}: {shown.message!r}; data.py:{line['line']}: {lens.command.title!r}")

    # 6. what the model removes is what the fix removed: the fetch's subtree leaves the training
    # thread and every other host op of the step stays (the same count per step before and after).
    # This holds whatever the machine's load; the recorded times below do not.
    kept, fetched, rest = zip(*(_ops_per_step(p) for p in (first, second)))
    assert kept[0] == kept[1] > 0 and fetched[1] < fetched[0] / 10, (kept, fetched)

    # 7. the estimate made before the fix against what the fix really saved: the recorded step before
    # minus after. The estimate is the fetch's recorded host time, moved to worker processes, less
    # receiving the batch from them; the rest of the step is the same ops (above). Two things leave
    # no truth to check the model against, and the test then says so with the figures instead of
    # passing or failing on the machine: the rest of the machine holding the cores the workers need
    # (a 2-core CI box running two test workers: the blur only moves to processes that compete with
    # the training thread, saving 0.35x and -1.9 ms), and the machine's speed moving between the two
    # recordings (the same ops outside the fetch taking more than DRIFT longer or shorter: -20 % to
    # +13 % in six quiet runs here, which moved the step difference by up to 1.3 ms). The check is a
    # factor of three either way, so a model that is off by more than that, or a fix that saves
    # nothing on a machine with room for its workers, still fails. The 35 % bar is measured where the
    # drift can be averaged out: benchmarks/loop_npu104.py records before and after interleaved.
    est = subprocess.run(
        [sys.executable, "-m", "msprof_lsp.server", "--check", str(root), "--profile", str(first),
         "--select", "NPU104", "--format", "json", "--fail-on", "never", "--cache-dir", str(root.parent / "cache")],
        capture_output=True, text=True, timeout=300)
    assert est.returncode == 0, est.stderr
    (before_fix,) = [f for f in json.loads(est.stdout)["findings"] if f["code"] == "NPU104"]
    saving = before_fix["saving"]
    assert saving["us_per_step"] is not None and 0 < saving["low_us"] <= saving["us_per_step"] <= saving["high_us"]
    step_before, step_after = report["step_time_us"], report["current_step_time_us"]
    measured = step_before - step_after
    cores = os.cpu_count() or 1
    other = None if None in load else max(load)
    figures = (f"NPU104 estimate before the fix {saving['us_per_step']:.0f} µs/step "
               f"({saving['low_us']:.0f}-{saving['high_us']:.0f}); recorded step {step_before:.0f} -> {step_after:.0f} µs: "
               f"saved {measured:.0f} µs/step; other load during the recordings "
               + ("unknown" if other is None else f"{other:.2f} of {cores} cores")
               + f"; the same ops outside the fetch {rest[0]:.0f} -> {rest[1]:.0f} µs/step")
    print(figures)
    if other is None or cores - other < FREE_CORES:
        pytest.skip(f"no core free for the DataLoader workers during the recordings, so no truth for the estimate: {figures}")
    if abs(rest[1] / rest[0] - 1) > DRIFT:
        pytest.skip(f"the machine's speed moved between the recordings, so no truth for the estimate: {figures}")
    assert measured > 0 and 1 / 3 <= measured / saving["us_per_step"] <= 3.0, figures
    data.close()
    doc.close()
