"""The payloads the server sends the VS Code client are typed structs, and the client's
TypeScript interfaces are generated from them (``python -m msprof_lsp.server.lsp.payload_schema``):
the checked-in file is what the generator writes, its field names are the keys lsprotocol's
converter really puts on the wire, and the client imports it instead of declaring the shapes."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import attrs
import msgspec
import pytest

from msprof_lsp.server.lsp import payload_schema
from msprof_lsp.server.lsp.state.snapshot import ProfileInfo
from msprof_lsp.server.lsp.status_payload import Analysed, AnalysedDocument, ProfileState, ProfileStatus, to_json

REPO = Path(__file__).resolve().parents[3]
GENERATED = REPO / payload_schema.OUTPUT


def _interface(name: str) -> dict[str, str]:
    """``field -> type`` of one generated interface (``?`` kept on the field name)."""
    body = re.search(rf"export interface {name} \{{\n(.*?)\n\}}", GENERATED.read_text(encoding="utf-8"), re.S)
    assert body, f"no interface {name} in {GENERATED}"
    return dict(line.strip().rstrip(";").split(": ", 1) for line in body.group(1).splitlines())


def test_the_generated_file_is_current_and_check_catches_drift(tmp_path: Path, capsys) -> None:
    assert GENERATED.read_text(encoding="utf-8") == payload_schema.render(), \
        f"run {payload_schema.COMMAND} to update {payload_schema.OUTPUT}"
    assert payload_schema.main(["--check"]) == 0
    copy = tmp_path / payload_schema.OUTPUT
    copy.parent.mkdir(parents=True)
    shutil.copy(GENERATED, copy)
    copy.write_text(copy.read_text(encoding="utf-8").replace("  stepTimeUs: number | null;\n", ""), encoding="utf-8")
    assert payload_schema.main(["--check", "--root", str(tmp_path)]) == 1
    assert "payload_schema" in capsys.readouterr().err
    assert payload_schema.main(["--root", str(tmp_path)]) == 0  # rewrites it
    assert copy.read_text(encoding="utf-8") == GENERATED.read_text(encoding="utf-8")


def test_generated_names_are_the_keys_on_the_wire() -> None:
    from msprof_lsp.hints.finding import Finding, Saving, Severity
    from msprof_lsp.mapping.spans import Span

    info = ProfileInfo(kind="torch_npu", path="/p/x_ascend_pt", rank=0, ranks=(0, 1), steps=2,
                       step_time_us=2568.91234, mapped_share=0.6123456789, has_call_stacks=True, complete=True)
    loaded = to_json(ProfileStatus.of(ProfileState.LOADED, info))
    assert loaded == {"state": "loaded", "kind": "torch_npu", "path": "/p/x_ascend_pt", "rank": 0, "ranks": [0, 1],
                      "steps": 2, "stepTimeUs": 2568.912, "mappedShare": 0.612346, "message": "",
                      "topCode": "", "topSavingUs": None, "headline": ""}
    top = Finding("NPU104", "dataloader-input", Severity.WARNING, "m", Span("/w/train.py", 102, 0, 102, 9),
                  share=0.5, saving=Saving(2100.0, 1500.0, 3000.0, "fetch prefetched by workers"))
    first = to_json(ProfileStatus.of(ProfileState.LOADED, info, top=top))
    assert (first["topCode"], first["topSavingUs"]) == ("NPU104", 2100.0)
    assert first["headline"] == "Start here: saves 2,100 µs/step (1,500 µs–3,000 µs) · NPU104 dataloader-input · train.py:102"
    none = to_json(ProfileStatus.of(ProfileState.NONE, info, path="/chosen", message="no profile found"))
    assert none["rank"] is None and none["kind"] == "" and none["path"] == "/chosen" and none["ranks"] == []
    assert list(_interface("ProfileStatus")) == list(loaded) == list(none)  # every key, every time
    analysed = to_json(Analysed(7, [AnalysedDocument("file:///w/a.py", 3)]))
    assert analysed == {"generation": 7, "documents": [{"uri": "file:///w/a.py", "version": 3}]}
    assert list(_interface("Analysed")) == list(analysed)
    assert list(_interface("AnalysedDocument")) == list(analysed["documents"][0])
    states = re.search(r"export type ProfileState = (.*);", GENERATED.read_text(encoding="utf-8"))
    assert states and states.group(1) == " | ".join(f'"{s.value}"' for s in ProfileState)


@attrs.define
class WithDefault:
    code_points: int
    note_: str = ""  # left out at its default by the converter: optional


@dataclasses.dataclass
class Plain:
    snake_name: list[int | None]
    pairs: tuple[str, int]
    table: dict[str, WithDefault]


class Renamed(msgspec.Struct, rename="camel", omit_defaults=True):
    first_line: int
    rest: tuple[str, ...] = ()


def test_fields_are_read_from_attrs_dataclasses_and_msgspec_structs() -> None:
    as_ts = {cls.__name__: [(f.name, f.ts_type, f.optional) for f in payload_schema.struct_fields(cls)]
             for cls in (WithDefault, Plain, Renamed)}
    assert as_ts == {
        "WithDefault": [("codePoints", "number", False), ("note", "string", True)],
        "Plain": [("snake_name", "(number | null)[]", False), ("pairs", "[string, number]", False),
                  ("table", "Record<string, WithDefault>", False)],
        "Renamed": [("firstLine", "number", False), ("rest", "string[]", True)],
    }
    from msprof_lsp.server.lsp.status_payload import CONVERTER

    assert list(CONVERTER.unstructure(WithDefault(1, "x"))) == ["codePoints", "note"]  # the rename the generator assumes
    with pytest.raises(TypeError, match="no TypeScript type"):
        payload_schema.ts_type(bytes)


def test_the_client_reads_the_status_through_the_generated_types() -> None:
    status_ts = (REPO / "vscode-client" / "src" / "status.ts").read_text(encoding="utf-8")
    assert 'from "./generated/payloads"' in status_ts
    assert not re.search(r"interface ProfileStatus\b|type ProfileState\s*=", status_ts), "a hand-written copy of the shape"
