"""A stand-in language server for the client's end-to-end test (pygls 2), not the product.

It speaks the msprof-lsp protocol the client relies on (server/protocol.py): it records the
initializationOptions and its workspace/configuration answers in $MSPROF_TEST_RECORD, sends one
msprof-lsp/profileStatus, and answers msprof-lsp.lineHeat / msprof-lsp.showHotspots with data
described by the test.
"""

from __future__ import annotations

import json
import os

from lsprotocol import types as t
from pygls.lsp.server import LanguageServer

RECORD = os.environ["MSPROF_TEST_RECORD"]
MODEL = os.environ["MSPROF_TEST_MODEL"]  # absolute path of the test's model.py

server = LanguageServer("msprof-lsp-test-double", "0")
record: dict = {}


def save() -> None:
    with open(RECORD + ".tmp", "w", encoding="utf-8") as f:
        json.dump(record, f)
    os.replace(RECORD + ".tmp", RECORD)


@server.feature(t.INITIALIZE)
def initialize(ls: LanguageServer, params: t.InitializeParams) -> None:
    record["initializationOptions"] = params.initialization_options


@server.feature(t.INITIALIZED)
async def initialized(ls: LanguageServer, params: t.InitializedParams) -> None:
    answers = await ls.workspace_configuration_async(
        t.ConfigurationParams(
            items=[
                t.ConfigurationItem(section="msprof-lsp"),
                t.ConfigurationItem(section="msprof-lsp.minShare"),
                t.ConfigurationItem(section="msprof-lsp.rank"),
            ]
        )
    )
    record["configuration"] = answers
    save()
    ls.protocol.notify(
        "msprof-lsp/profileStatus",
        {"state": "loaded", "kind": "torch_npu", "path": "/prof/run_ascend_pt", "rank": 1, "ranks": [0, 1],
         "steps": 5, "stepTimeUs": 50000, "mappedShare": 0.9, "message": ""},
    )


@server.feature(t.WORKSPACE_DID_CHANGE_CONFIGURATION)
def did_change_configuration(ls: LanguageServer, params: t.DidChangeConfigurationParams) -> None:
    record.setdefault("didChangeConfiguration", []).append(params.settings)
    save()


@server.command("msprof-lsp.lineHeat")
def line_heat(ls: LanguageServer, uri: str) -> list:  # pygls 2 passes command arguments positionally
    record.setdefault("lineHeat", []).append([uri])
    save()
    return [
        {"line": 0, "share": 0.2, "perStepUs": 10000, "label": "MatMulV2"},
        {"line": 2, "share": 0.03, "perStepUs": 1500, "label": ""},
    ]


@server.command("msprof-lsp.showHotspots")
def show_hotspots(ls: LanguageServer) -> dict:
    return {"hotspots": [{"path": MODEL, "uri": "file://" + MODEL, "line": 1, "end_line": 1, "device_time_us": 50000,
                          "share": 0.2, "calls": 5, "ops": [{"name": "MatMulV2", "type": "MatMulV2", "core": "AI_CORE",
                                                             "time_us": 50000, "count": 5}]}]}


@server.command("msprof-lsp.selectProfile")
def select_profile(ls: LanguageServer, path, rank=None) -> None:
    record.setdefault("selectProfile", []).append([path, rank])
    save()


@server.command("msprof-lsp.setBaseline")
def set_baseline(ls: LanguageServer, path) -> None:
    record.setdefault("setBaseline", []).append([path])
    save()


@server.command("msprof-lsp.adoptNewProfile")
def adopt_new_profile(ls: LanguageServer) -> dict:
    record.setdefault("adoptNewProfile", []).append([])
    save()
    return {"current": "/prof/run_ascend_pt"}


@server.command("msprof-lsp.reloadProfile")
def reload_profile(ls: LanguageServer) -> None:
    return None


if __name__ == "__main__":
    server.start_io()
