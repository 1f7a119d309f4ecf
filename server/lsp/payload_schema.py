"""Write the TypeScript interfaces of the payloads the server sends the VS Code client.

The structs of the payload modules below (attrs classes, dataclasses or msgspec structs, and the
enums their fields use) are read field by field and rendered as TypeScript, so the client never
keeps a hand-written copy of a payload's shape (tests/server/lsp/test_payload_schema.py fails when the
file is out of date). A struct of a new payload module is picked up by adding the module's name to
``MODULES``. Run from a source checkout:

    python -m msprof_lsp.server.lsp.payload_schema [--check]
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import importlib
import json
import sys
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import msgspec

ROOT = Path(__file__).resolve().parents[2]  # the checkout: server/lsp/ sits two levels down
OUTPUT = Path("vscode-client") / "src" / "generated" / "payloads.ts"
PACKAGE = "msprof_lsp.server.lsp"  # not __name__: that is __main__ under -m
# status_payload: the custom notifications; payloads: the fix payloads of Diagnostic.data and
# CodeAction.data (read when present).
MODULES = ("status_payload", "payloads")
COMMAND = f"python -m {PACKAGE}.payload_schema"
# The HTML report's model, which the TypeScript renderer draws (and the LSP command returns).
REPORT_MODULE = "msprof_lsp.server.analysis.views.model"
REPORT_OUTPUT = Path("vscode-client") / "src" / "generated" / "report.ts"


@dataclasses.dataclass(frozen=True, slots=True)
class Field:
    name: str  # as it is on the wire
    ts_type: str
    optional: bool  # may be left out (lsprotocol's converter omits an attrs field at its default)


def _camel(name: str) -> str:
    """lsprotocol's converter renames every attrs field this way (``step_time_us`` -> ``stepTimeUs``)."""
    name = name[:-1] if name.endswith("_") else name
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and (attrs.has(tp) or dataclasses.is_dataclass(tp) or issubclass(tp, msgspec.Struct))


def struct_fields(cls: type) -> list[Field]:
    """The wire fields of one struct, in declaration order."""
    hints = typing.get_type_hints(cls)
    if attrs.has(cls):
        return [Field(_camel(a.name), ts_type(hints[a.name]), a.default is not attrs.NOTHING) for a in attrs.fields(cls)]
    if dataclasses.is_dataclass(cls):
        return [Field(f.name, ts_type(hints[f.name]), False) for f in dataclasses.fields(cls)]
    info = msgspec.structs.fields(cls)
    omit = cls.__struct_config__.omit_defaults
    return [Field(f.encode_name, ts_type(hints[f.name]), omit and f.required is False) for f in info]


def _literal(value: Any) -> str:
    return json.dumps(value.value if isinstance(value, enum.Enum) else value, ensure_ascii=False)


def ts_type(tp: Any) -> str:
    """The TypeScript type of a field annotation; a type with no JSON meaning is an error."""
    if tp is type(None) or tp is None:
        return "null"
    if tp is Any or tp is object:
        return "unknown"
    if tp is bool:
        return "boolean"
    if tp in (int, float):
        return "number"
    if tp is str:
        return "string"
    if isinstance(tp, type) and issubclass(tp, enum.Enum) or is_struct(tp):
        return tp.__name__
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return " | ".join(_literal(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(ts_type(a) for a in args)
    if origin is tuple and args and args[-1] is not Ellipsis:
        return "[" + ", ".join(ts_type(a) for a in args) + "]"
    if isinstance(origin, type) and issubclass(origin, Mapping):
        return f"Record<string, {ts_type(args[1]) if args else 'unknown'}>"
    if isinstance(origin, type) and issubclass(origin, (Sequence, set, frozenset)) and origin is not str:
        item = ts_type(args[0]) if args else "unknown"
        return f"({item})[]" if "|" in item else f"{item}[]"
    raise TypeError(f"no TypeScript type for {tp!r}")


def payload_modules() -> Iterator[types.ModuleType]:
    here = Path(__file__).resolve().parent
    for name in MODULES:
        if (here / f"{name}.py").is_file():
            yield importlib.import_module(f"{PACKAGE}.{name}")


def _declared(module: types.ModuleType) -> list[type]:
    """Structs and enums the module defines (not those it imports), in source order."""
    return [v for v in vars(module).values()
            if isinstance(v, type) and v.__module__ == module.__name__
            and (is_struct(v) or issubclass(v, enum.Enum))]


def _doc(cls: type) -> list[str]:
    text = (cls.__doc__ or "").strip()
    if not text or text.startswith(f"{cls.__name__}(") or text == "An enumeration.":  # generated ones
        return []
    return ["/** " + " ".join(text.split()).replace("*/", "* /") + " */"]


def render() -> str:
    modules = list(payload_modules())
    return _render(modules, ", ".join(f"server/lsp/{m.__name__.rpartition('.')[2]}.py" for m in modules))


def render_report() -> str:
    return _render([importlib.import_module(REPORT_MODULE)], "server/analysis/views/model.py")


def _render(modules: list[types.ModuleType], sources: str) -> str:
    out = [f"// Generated by {COMMAND} from {sources}.", "// Do not edit: change the structs there and run the command again.", ""]
    for module in modules:
        for cls in _declared(module):
            out += _doc(cls)
            if issubclass(cls, enum.Enum):
                values = [_literal(m) for m in cls]
                out.append(f"export type {cls.__name__} = {' | '.join(values)};")
                out.append(f"export const {cls.__name__}Values: readonly {cls.__name__}[] = [{', '.join(values)}];")
            else:
                out.append(f"export interface {cls.__name__} {{")
                out += [f"  {f.name}{'?' if f.optional else ''}: {f.ts_type};" for f in struct_fields(cls)]
                out.append("}")
            out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the generated file is out of date")
    parser.add_argument("--root", type=Path, default=ROOT, help="the source checkout (default: this one)")
    args = parser.parse_args(argv)
    status = 0
    for output, new in ((OUTPUT, render()), (REPORT_OUTPUT, render_report())):
        target = args.root / output
        old = target.read_text(encoding="utf-8") if target.is_file() else None
        if args.check:
            if old != new:
                # stderr, never print(): nothing in server/lsp/ writes to stdout (the JSON-RPC stream)
                sys.stderr.write(f"{target}: the payload interfaces differ from the structs; run {COMMAND}\n")
                status = 1
        elif old != new:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(new, encoding="utf-8")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
