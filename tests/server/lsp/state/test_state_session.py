"""The session state the request handlers read: values derived from a snapshot live on that
snapshot (a reload never serves one computed from the previous analysis, whoever installs it),
and the document store keeps line maps and history, never a copy of the buffer's text."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

from lsprotocol import types
from pygls.workspace import Workspace

from msprof_lsp.server.lsp import diagnostics
from msprof_lsp.server.lsp.app import MsprofLanguageServer
from msprof_lsp.server.lsp.capabilities import ClientCaps
from msprof_lsp.server.lsp.heat_view import file_heat
from msprof_lsp.server.lsp.state.documents import DocumentStore, OpenDocument
from msprof_lsp.server.lsp.state.engine import Engine, LoadRequest
from msprof_lsp.server.analysis.settings import Settings

REPO = Path(__file__).resolve().parents[4]
SAMPLE = REPO / "samples" / "cnn_classifier"  # the generated torch_npu profile beside its code


def _server() -> MsprofLanguageServer:
    ls = MsprofLanguageServer()
    ls.caps = ClientCaps(pull_diagnostics=True)  # a pull client: installing a snapshot publishes nothing
    return ls


def test_a_reload_never_serves_a_value_derived_from_the_previous_snapshot():
    engine = Engine()
    first = engine.load(LoadRequest(folders=[SAMPLE], settings=Settings(), use_cache=False))
    path = str((SAMPLE / "model.py").resolve())
    assert first.findings.get(path) and first.lines.get(path), "the sample's model.py is hot and has findings"
    ls = _server()
    ls.loader.apply(first)
    view, diags = diagnostics.compute(ls, path)
    heat = file_heat(ls, path, by_path=True)
    assert diags and heat is not None and heat.lines
    assert diagnostics.compute(ls, path)[1] is diags and file_heat(ls, path, by_path=True) is heat  # kept

    # a reload with every rule ignored: the same heat, no findings
    quiet = engine.reconfigure(replace(Settings(), ignore=("NPU",)))
    assert quiet is not None and not quiet.findings
    ls.loader.apply(quiet)
    assert diagnostics.compute(ls, path)[1] == []
    again = file_heat(ls, path, by_path=True)
    assert again is not heat and again.info is quiet.info

    # the worst case for a cache keyed by generation: a snapshot with the SAME generation and other
    # contents, installed without Loader.apply (nobody clears anything)
    hottest = max(quiet.lines[path], key=lambda lh: lh.per_step_ns)
    text = "# one more line\n" + quiet.texts[path]
    same_generation = replace(quiet, lines={**quiet.lines, path: [lh for lh in quiet.lines[path] if lh is not hottest]},
                              texts={**quiet.texts, path: text})
    assert same_generation.generation == quiet.generation
    ls.snapshot = same_generation
    now = file_heat(ls, path, by_path=True)
    assert now is not None and hottest.line not in now.lines and hottest.line in again.lines
    assert now.view.lines[0] == "# one more line"  # the analysed lines of the new text, not the old
    assert ls.snapshot.analysed_lines(path) == text.split("\n")


def _walk(value, seen):
    """Every str reachable from a document's fields (containers and plain objects included)."""
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(k, seen)
            yield from _walk(v, seen)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _walk(v, seen)
    elif hasattr(value, "__slots__") and not callable(value):
        for name in value.__slots__:
            yield from _walk(getattr(value, name, None), seen)


def test_the_document_store_holds_no_copy_of_the_text(tmp_path):
    uri = (tmp_path / "train.py").as_uri()
    text = "import torch\n\n\ndef step(model, batch):\n    loss = model(batch).sum()\n    loss.backward()\n"
    ws = Workspace(None)  # what pygls keeps, and applies every didChange to
    ws.put_text_document(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
    store = DocumentStore(lambda u: ws.get_text_document(u).source)
    doc = store.open(uri, 1)
    doc.rebase(1, text)  # analysed as it is

    edit = types.TextDocumentContentChangePartial(
        range=types.Range(types.Position(0, 0), types.Position(0, 0)), text="import os\n")
    ws.update_text_document(types.VersionedTextDocumentIdentifier(uri=uri, version=2), edit)
    doc.update(2)
    assert doc.text == ws.get_text_document(uri).source == "import os\n" + text  # read from the workspace
    assert doc.linemap is not None and doc.linemap.line(4) == 5  # the def moved down one line

    held = [s for f in fields(OpenDocument) if f.name != "source" for s in _walk(getattr(doc, f.name), set())]
    held += list(_walk(store._docs, set())) + list(_walk(store._by_path, set()))
    body = [line for line in doc.lines if line.strip()]
    assert not [s for s in held if any(line in s for line in body)], held
    assert doc.keys and all(isinstance(k, int) for k in doc.keys)  # fingerprints, one per line


def test_documents_by_path_follow_open_and_close():
    """Two URIs of one file (a symlinked folder, another spelling): by path, the oldest open one."""
    texts = {"file:///w/a.py": "x = 1\n", "file:///w/./a.py": "x = 1\n"}
    store = DocumentStore(texts.__getitem__)
    first = store.open("file:///w/a.py", 1)
    second = store.open("file:///w/./a.py", 1)
    assert first.path == second.path and store.by_path(first.path) is first  # type: ignore[arg-type]
    store.close("file:///w/a.py")
    assert store.by_path(first.path) is second  # type: ignore[arg-type]
    store.close("file:///w/./a.py")
    assert store.by_path(first.path) is None  # type: ignore[arg-type]


def test_buffer_text_is_the_workspace_document_never_the_file_on_disk(tmp_path):
    on_disk = tmp_path / "train.py"
    on_disk.write_text("on_disk = 1\n", encoding="utf-8")
    ls = _server()
    list(ls.protocol.lsp_initialize(types.InitializeParams(capabilities=types.ClientCapabilities(),
                                                           root_uri=tmp_path.as_uri())))  # pygls' own workspace set-up
    uri = on_disk.as_uri()
    assert ls.buffer_text(uri) == ""  # not open: no buffer, and the file is not read
    ls.workspace.put_text_document(types.TextDocumentItem(uri=uri, language_id="python", version=1, text="in_editor = 2\n"))
    doc = ls.documents.open(uri, 1)
    assert doc.text == "in_editor = 2\n" and doc.lines == ["in_editor = 2", ""]
