"""Shared pieces of the end-to-end language-server tests: server command, client capability
profiles, sample workspaces, and small client-side helpers (apply edits, wait for diagnostics).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities

from tests.conftest import client_python_flags

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SAMPLES = REPO / "samples"

# The plumbing tests run the real server entry point with the test rules of lsp_rules.py registered
# (serve_with_test_rules.py) and select only them: their findings are fixed by the tests' own
# description, while the catalog's rules are tuned on their own branches. test_lsp_catalog.py runs
# the plain `python -m msprof_lsp.server` with the catalog (NPU101 on the sample's pairs).
SERVER_COMMAND = [sys.executable, *client_python_flags(), str(HERE / "serve_with_test_rules.py")]
PAIR = "TST101"  # ReLU -> Dropout on one line (NPU101's trigger)
HOT = "TST102"  # a line with >= 5 % of the step, with a safe fix
PROFILE_NOTE = "TST900"  # a profile-level finding

PROFILES = ("visual-studio-code", "neovim@v0.7")


def vscode_capabilities() -> types.ClientCapabilities:
    """The pytest-lsp VS Code 1.65 snapshot, brought up to what VS Code sends today."""
    caps = client_capabilities("visual-studio-code")
    td, ws = caps.text_document, caps.workspace
    assert td is not None and ws is not None
    td.diagnostic = types.DiagnosticClientCapabilities(dynamic_registration=False, related_document_support=False)
    ws.diagnostics = types.DiagnosticWorkspaceClientCapabilities(refresh_support=True)
    assert td.code_action is not None
    td.code_action.resolve_support = types.ClientCodeActionResolveOptions(properties=["edit"])
    td.code_action.data_support = True
    td.inlay_hint = types.InlayHintClientCapabilities(dynamic_registration=False)
    ws.inlay_hint = types.InlayHintWorkspaceClientCapabilities(refresh_support=True)
    ws.code_lens = types.CodeLensWorkspaceClientCapabilities(refresh_support=True)
    caps.window = attrs.evolve(caps.window, work_done_progress=True) if caps.window else types.WindowClientCapabilities(work_done_progress=True)
    general = caps.general or types.GeneralClientCapabilities()
    caps.general = attrs.evolve(general, position_encodings=[types.PositionEncodingKind.Utf16])
    return caps


def capabilities(profile: str) -> types.ClientCapabilities:
    return vscode_capabilities() if profile == "visual-studio-code" else client_capabilities(profile)


def is_pull(profile: str) -> bool:
    return profile == "visual-studio-code"


# -- workspaces ------------------------------------------------------------------------------------


def cnn_workspace(dst: Path, *, profile: bool = True) -> Path:
    """A copy of samples/cnn_classifier (sources + its generated torch_npu profile)."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("model.py", "train.py", "data.py"):
        shutil.copy2(SAMPLES / "cnn_classifier" / name, dst / name)
    if profile:
        shutil.copytree(SAMPLES / "cnn_classifier" / "npu_profile", dst / "npu_profile")
    return dst


def train_workspace(dst: Path, train: str) -> Path:
    """The CNN sample's model and data with a training script of the test's own, no profile."""
    dst.mkdir(parents=True)
    for name in ("model.py", "data.py"):
        shutil.copy2(SAMPLES / "cnn_classifier" / name, dst / name)
    (dst / "train.py").write_text(train, encoding="utf-8")
    return dst


def init_options(tmp: Path, *, only_test_rules: bool = True, **extra: Any) -> dict[str, Any]:
    """A private cache, and only the test rules: the catalog's rules (when they land on main) would
    add their own findings to the expected sets."""
    select = {"select": ["TST"]} if only_test_rules else {}
    return {"cacheDir": str(tmp / "cache"), **select, **extra}


def register_client_handlers(client: LanguageClient) -> dict[str, list[Any]]:
    """Client-side handlers pytest-lsp lacks (registerCapability, applyEdit, refreshes)."""
    seen: dict[str, list[Any]] = {"register": [], "apply_edit": [], "code_lens_refresh": [], "inlay_refresh": [],
                                  "status": [], "analysed": []}

    @client.feature(types.CLIENT_REGISTER_CAPABILITY)
    def _register(params: types.RegistrationParams) -> None:
        seen["register"].append(params)

    @client.feature(types.WORKSPACE_APPLY_EDIT)
    def _apply(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
        seen["apply_edit"].append(params)
        return types.ApplyWorkspaceEditResult(applied=True)

    @client.feature(types.WORKSPACE_CODE_LENS_REFRESH)
    def _lens(params: None) -> None:
        seen["code_lens_refresh"].append(params)

    @client.feature(types.WORKSPACE_INLAY_HINT_REFRESH)
    def _inlay(params: None) -> None:
        seen["inlay_refresh"].append(params)

    @client.feature("msprof-lsp/profileStatus")
    def _status(params: Any) -> None:
        seen["status"].append(params)

    @client.feature("msprof-lsp/analysed")
    def _analysed(params: Any) -> None:
        seen["analysed"].append(params)

    return seen


async def start_session(client: LanguageClient, profile: str | types.ClientCapabilities, root: Path, options: dict[str, Any]) -> dict[str, list[Any]]:
    seen = register_client_handlers(client)
    seen["init"] = [await client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities(profile) if isinstance(profile, str) else profile,
            root_uri=root.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
            initialization_options=options,
        )
    )]
    return seen


def status_value(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


async def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.05)


async def open_session(client: LanguageClient, profile: str, root: Path, options: dict[str, Any]) -> None:
    """Start a session as client ``profile`` on ``root`` and wait for the profile to load; the
    client keeps ``seen``, ``profile``, ``root`` and the final ``status`` for the tests."""
    client.seen = await start_session(client, profile, root, options)
    client.profile, client.root = profile, root
    client.status = await wait_loaded(client.seen)


async def wait_loaded(seen: dict[str, list[Any]], count: int = 1, timeout: float = 60.0) -> Any:
    """Wait for the ``count``-th profileStatus that is final (loaded/error/none)."""
    def final() -> list[Any]:
        return [s for s in seen["status"] if status_value(s, "state") in ("loaded", "error", "none")]

    await wait_until(lambda: len(final()) >= count, timeout, f"profile status #{count}")
    return final()[count - 1]


async def wait_analysed(client: LanguageClient, doc: Doc, timeout: float = 60.0) -> None:
    """Wait for the server's word that an analysis saw ``doc`` as it is now (version and text):
    its diagnostics are then published (push) or answered (pull) from that analysis."""
    def seen() -> bool:
        return any(status_value(d, "uri") == doc.uri and status_value(d, "version") == doc.version
                   for n in client.seen["analysed"] for d in status_value(n, "documents") or [])

    await wait_until(seen, timeout, f"the analysis of {doc.path.name} version {doc.version}")


# -- documents ------------------------------------------------------------------------------------


class Doc:
    """A document the test client has open, with its text and version."""

    def __init__(self, client: LanguageClient, path: Path, text: str | None = None) -> None:
        self.client = client
        self.path = path
        self.uri = path.as_uri()
        self.text = path.read_text(encoding="utf-8") if text is None else text
        self.version = 1
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(types.TextDocumentItem(self.uri, "python", self.version, self.text))
        )

    def replace_all(self, text: str) -> None:
        """A full-document change (as some clients send)."""
        self.version += 1
        self.text = text
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=self.uri, version=self.version),
            [types.TextDocumentContentChangeWholeDocument(text=text)],
        ))

    def edit(self, line0: int, char: int, end_line0: int, end_char: int, new_text: str) -> None:
        """An incremental change (positions in UTF-16 units, as the clients here negotiate)."""
        self.version += 1
        self.text = apply_text_edits(self.text, [types.TextEdit(
            types.Range(types.Position(line0, char), types.Position(end_line0, end_char)), new_text)])
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=self.uri, version=self.version),
            [types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(line0, char), types.Position(end_line0, end_char)), text=new_text)],
        ))

    def close(self) -> None:
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(self.uri)))


def _offset(text: str, pos: types.Position) -> int:
    """Offset of an LSP position (UTF-16 units) in ``text`` (independent of the server's code)."""
    lines = text.split("\n")
    offset = sum(len(lines[i]) + 1 for i in range(min(pos.line, len(lines))))
    if pos.line >= len(lines):
        return len(text)
    line = lines[pos.line]
    units = 0
    for i, ch in enumerate(line):
        if units >= pos.character:
            return offset + i
        units += 2 if ord(ch) > 0xFFFF else 1
    return offset + len(line)


def apply_text_edits(text: str, edits: Sequence[types.TextEdit]) -> str:
    spans = sorted(((_offset(text, e.range.start), _offset(text, e.range.end), e.new_text) for e in edits), reverse=True)
    for a, b, new in spans:
        text = text[:a] + new + text[b:]
    return text


def edits_for(edit: types.WorkspaceEdit, uri: str) -> tuple[list[types.TextEdit], int | None]:
    """The text edits of one file in a WorkspaceEdit (documentChanges or changes), with the version."""
    if edit.document_changes:
        out: list[types.TextEdit] = []
        version = None
        for dc in edit.document_changes:
            assert isinstance(dc, types.TextDocumentEdit)
            if dc.text_document.uri == uri:
                out.extend(dc.edits)  # type: ignore[arg-type]
                version = dc.text_document.version
        return out, version
    return list((edit.changes or {}).get(uri, [])), None


def utf16_col(line: str, codepoint_col: int) -> int:
    return sum(2 if ord(ch) > 0xFFFF else 1 for ch in line[:codepoint_col])


def call_range(text: str, line_no: int, needle: str) -> tuple[int, int, int, int]:
    """(line0, start, end_line0, end) in code points of the call starting with ``needle`` on 1-based
    ``line_no``: from the needle to its matching closing parenthesis (computed from the text)."""
    lines = text.split("\n")
    line = lines[line_no - 1]
    start = line.index(needle)
    depth = 0
    for i in range(start, len(line)):
        if line[i] == "(":
            depth += 1
        elif line[i] == ")":
            depth -= 1
            if depth == 0:
                return line_no - 1, start, line_no - 1, i + 1
    raise AssertionError(f"no closing parenthesis for {needle!r} on line {line_no}")


def line_of(text: str, needle: str) -> int:
    """1-based line of the only line containing ``needle``."""
    hits = [i + 1 for i, line in enumerate(text.split("\n")) if needle in line]
    assert len(hits) == 1, f"{needle!r} found on lines {hits}"
    return hits[0]


# -- expectations on the CNN sample (computed from its source text and its run description) ------


def cnn_truth(rank: int, **knobs: Any):  # noqa: ANN201
    """The run description's ground truth (tests.synth) for one rank of the CNN sample."""
    from tests.synth import truth
    from tests.synth.sample_runs import CnnKnobs, cnn_runs

    return truth(cnn_runs(SAMPLES / "cnn_classifier", CnnKnobs(**knobs))[rank])


def cnn_truth_shares(rank: int) -> dict[tuple[str, int], float]:
    """Share of step time per (file name, line) from the sample's run description (tests.synth),
    not from the server's mapping code."""
    return truth_shares(cnn_truth(rank))


# The calls the ReLU -> Dropout rule must flag in cnn_classifier/model.py: the dropout call of each
# pair (hint-rules NPU101 anchors on it). `self.embed` is nn.Sequential(Linear, ReLU, Dropout): its
# ReLU and dropout kernels are launched from library frames inside that call, so they land on it.
PAIR_CALLS = (("x = self.embed(x)", "self.embed("), ("x = self.drop(self.act(", "self.drop("),
              ("x = F.dropout(F.relu(", "F.dropout("))
# Where the ReLU of each pair is (relatedInformation), None when it is inside the same call.
PAIR_RELU = {"self.embed(": None, "self.drop(": "self.act(", "F.dropout(": "F.relu("}
# The heaviest call on each hot line (the hot-line rule anchors there): conv kernels dominate the
# conv block's line (CnnKnobs: conv 42/55 µs + TransData 26 µs vs BN 12, pool 9, ReLU 5).
# With slow fc layers (test_lsp_reload) the matmul of each head line dominates it.
HOT_CALLS = {"return self.pool(F.relu(self.bn(self.conv(x))))": "self.conv(", "x = self.embed(x)": "self.embed(",
             "x = self.drop(self.act(self.fc1(x)))": "self.fc1(",
             "x = F.dropout(F.relu(self.fc2(x)), p=self.dropout, training=self.training)": "self.fc2(",
             "return self.classifier(x)": "self.classifier("}


def hot_model_lines(text: str, shares: dict[tuple[str, int], float]) -> list[str]:
    """Contents of the model.py lines with >= 5 % of the step (the hot-line rule's threshold)."""
    lines = text.split("\n")
    return [lines[line - 1].strip() for (name, line), share in shares.items() if name == "model.py" and share >= 0.05]


def truth_shares(t) -> dict[tuple[str, int], float]:  # noqa: ANN001
    """Share of step time per (file name, line) of a run description's ground truth."""
    steps = len(t.steps)
    return {(Path(f).name, line): ns / steps / t.mean_step_time_ns for (f, line), ns in t.kernel_ns_by_line.items()}


def to_utf16(text: str, rng: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    lines = text.split("\n")
    l0, c0, l1, c1 = rng
    return l0, utf16_col(lines[l0], c0), l1, utf16_col(lines[l1], c1)


def expected_cnn(text: str, hot_lines: Sequence[str]) -> set[tuple[str, int, int, int, int]]:
    """(code, line0, start, end_line0, end) in UTF-16 units of every diagnostic on model.py."""
    out = set()
    for needle, call in PAIR_CALLS:
        out.add((PAIR, *to_utf16(text, call_range(text, line_of(text, needle), call))))
    for content in hot_lines:
        out.add((HOT, *to_utf16(text, call_range(text, line_of(text, content), HOT_CALLS[content]))))
    return out


def keyed(diags: Sequence[types.Diagnostic]) -> set[tuple[str, int, int, int, int]]:
    return {(str(d.code), d.range.start.line, d.range.start.character, d.range.end.line, d.range.end.character)
            for d in diags}


async def diagnostics_now(client: LanguageClient, profile: str, uri: str) -> list[types.Diagnostic]:
    if is_pull(profile):
        report = await client.text_document_diagnostic_async(
            types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri)))
        assert report.kind == "full"
        return list(report.items)
    return list(client.diagnostics.get(uri, []))


async def wait_diagnostics(client: LanguageClient, profile: str, uri: str,
                           predicate: Callable[[list[types.Diagnostic]], bool], timeout: float = 20.0,
                           what: str = "diagnostics") -> list[types.Diagnostic]:
    deadline = time.monotonic() + timeout
    last: list[types.Diagnostic] = []
    while True:
        last = await diagnostics_now(client, profile, uri)
        if predicate(last):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last: {sorted(keyed(last))}")
        await asyncio.sleep(0.05)


# -- raw stdio (no client library between the test and the bytes) --------------------------------


def frame(message: dict[str, Any]) -> bytes:
    import json

    body = json.dumps(message).encode("utf-8")
    return f"Content-Length: {len(body)}\r\n\r\n".encode("ascii") + body


def parse_frames(data: bytes, *, partial: bool = False) -> list[dict[str, Any]]:
    """Every JSON-RPC frame in ``data``; raises if any byte is not part of a well-formed frame
    (``partial``: an unfinished last frame is left out, as while the server is still writing)."""
    import json

    out = []
    i = 0
    while i < len(data):
        end = data.find(b"\r\n\r\n", i)
        if end < 0 and partial:
            break
        assert end >= 0, f"a header without an end at byte {i}"
        headers = data[i:end].decode("ascii").split("\r\n")
        length = None
        for h in headers:
            name, _, value = h.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
            else:
                assert name.strip().lower() == "content-type", f"unexpected header line {h!r}"
        assert length is not None, f"frame without Content-Length at byte {i}"
        body = data[end + 4:end + 4 + length]
        if len(body) < length and partial:
            break
        assert len(body) == length, "truncated frame"
        out.append(json.loads(body.decode("utf-8")))
        i = end + 4 + length
    return out


class FrameCapture:
    """The transport writer of an in-process server: keeps every frame it writes."""

    def __init__(self) -> None:
        self.out: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.out.append(data)

    def close(self) -> None:
        pass

    def messages(self) -> list[Any]:
        return parse_frames(b"".join(self.out))

    def take(self) -> list[Any]:
        """The bodies written since the last take."""
        bodies = self.messages()
        self.out.clear()
        return bodies


def end_session(server: "RawServer", rid: int = 999) -> None:
    """shutdown is answered and exit ends the process with status 0, with no traceback on stderr."""
    server.send({"jsonrpc": "2.0", "id": rid, "method": "shutdown"})
    assert server.response(rid, 10).get("result", "missing") is None
    server.send({"jsonrpc": "2.0", "method": "exit"})
    assert server.finish(20) == 0
    assert b"Traceback" not in server.stderr, server.stderr.decode(errors="replace")[-3000:]


class RawServer:
    """The server process driven over raw stdio: bytes in, parsed frames out, every wait bounded."""

    def __init__(self, command: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        self.proc = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env={**os.environ, **(env or {})}, cwd=cwd)
        self._out: list[bytes] = []
        self._err: list[bytes] = []
        self._readers = [
            threading.Thread(target=lambda: self._out.extend(iter(lambda: self.proc.stdout.read1(65536), b"")),
                             daemon=True),
            threading.Thread(target=lambda: self._err.extend(iter(lambda: self.proc.stderr.read1(65536), b"")),
                             daemon=True),
        ]
        for t in self._readers:
            t.start()

    def send(self, message: dict[str, Any]) -> None:
        self.send_bytes(frame(message))

    def send_bytes(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def initialize(self, root: Path, options: dict[str, Any] | None = None, *, rid: int | str = "init",
                   wait: bool = True) -> dict[str, Any] | None:
        self.send({"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": {
            "processId": os.getpid(), "rootUri": root.as_uri(), "capabilities": {},
            "initializationOptions": options or {}}})
        self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        return self.response(rid) if wait else None

    @property
    def output(self) -> bytes:
        return b"".join(self._out)

    @property
    def stderr(self) -> bytes:
        return b"".join(self._err)

    def frames(self) -> list[dict[str, Any]]:
        """The messages received (a batch answer, a JSON array, is in ``bodies`` only)."""
        return [f for f in self.bodies() if isinstance(f, dict)]

    def bodies(self) -> list[Any]:
        return parse_frames(self.output, partial=True)

    def wait(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 20.0, what: str = "a frame") -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            exited = self.proc.poll() is not None
            if exited:  # everything it wrote is read once the readers end
                for t in self._readers:
                    t.join(5)
            hit = next((f for f in self.frames() if predicate(f)), None)
            if hit is not None:
                return hit
            if exited or time.monotonic() > deadline:
                raise AssertionError(f"no {what} from the server within {timeout:.0f} s "
                                     f"(exit {self.proc.poll()}); stderr: {self.stderr[-2000:]!r}")
            time.sleep(0.02)

    def response(self, rid: int | str, timeout: float = 20.0) -> dict[str, Any]:
        return self.wait(lambda f: f.get("id") == rid and "method" not in f, timeout, f"response to {rid!r}")

    def logs(self) -> list[str]:
        return [f["params"]["message"] for f in self.frames() if f.get("method") == "window/logMessage"]

    def finish(self, timeout: float = 20.0) -> int:
        """Wait for the process to end (it must end by itself); returns its exit code."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"the server did not exit within {timeout:.0f} s; stderr: {self.stderr[-2000:]!r}")
        for t in self._readers:
            t.join(10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def raw_session(
    command: list[str], root: Path, tmp: Path, then, *, cwd: Path | None = None, init: dict[str, Any] | None = None  # noqa: ANN001
) -> tuple[list[dict], bytes]:
    """Run one stdio session: initialize, initialized, ``then(send, received)``, shutdown, exit."""
    server = RawServer(command, cwd=cwd)
    try:
        server.initialize(root, init_options(tmp) if init is None else init, rid=1, wait=False)
        then(server.send, lambda: server.output)
        server.send({"jsonrpc": "2.0", "id": 99, "method": "shutdown"})
        server.send({"jsonrpc": "2.0", "method": "exit"})
        assert server.finish(30) == 0
    finally:
        server.kill()
    return parse_frames(server.output), server.stderr


def wait_bytes(received, needle: bytes, timeout: float = 60) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while needle not in received():
        assert time.monotonic() < deadline, f"no {needle!r} from the server"
        time.sleep(0.05)


def open_when_loaded(send, received, path: Path, timeout: float = 180) -> None:  # noqa: ANN001
    """In a raw session: wait for the profile, open ``path``, wait for a catalog (NPU) diagnostic."""
    wait_bytes(received, b'"state": "loaded"', timeout=timeout)
    send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": path.as_uri(), "languageId": "python", "version": 1, "text": path.read_text()}}})
    wait_bytes(received, b'"code": "NPU', timeout=timeout)
