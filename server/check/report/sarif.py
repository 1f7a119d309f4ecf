"""SARIF 2.1.0 output that GitHub code scanning accepts (lsp-notes).

Stable ``ruleId``s, repo-relative URIs under ``%SRCROOT%``, code-point columns, fingerprints that
survive line moves (rule + file + the anchored source text + occurrence), fixes as SARIF
``fixes``, and GitHub's caps (at most 5,000 results kept per run, most severe first).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any

from msprof_lsp.hints.finding import Severity
from msprof_lsp.hints.registry import all_rules
from msprof_lsp.hints.verify import FindingState, line_text

from ...protocol import rule_doc_url
from ...analysis.views.rows import FindingRow, Report

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
MAX_RESULTS = 5000
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note", Severity.HINT: "note"}
# SARIF 2.1.0's baselineState values for our finding states (docs/cli.md)
BASELINE_STATE = {FindingState.NEW: "new", FindingState.PERSISTING: "unchanged", FindingState.IMPROVED: "updated",
                  FindingState.REGRESSED: "updated", FindingState.RESOLVED: "absent"}
_DEFAULT_LEVEL = {None: "warning", Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note", Severity.HINT: "note"}


def fingerprints(rows: Sequence[FindingRow], view: Report) -> list[str]:
    """Per finding, a hash of rule, file, the anchored line's text and its occurrence number."""
    cache: dict[str, list[str]] = {}
    seen: dict[tuple[str, str, str], int] = {}
    out = []
    for f in rows:
        path = f.path or ""
        # the row's path is relative to the cwd; joined lexically, as relpath made it
        text = line_text(os.path.normpath(os.path.join(view.cwd, f.path)), f.line, cache) \
            if f.path is not None and f.line is not None else f.message
        key = (f.code, path, text)
        n = seen.get(key, 0)
        seen[key] = n + 1
        out.append(hashlib.sha256(f"{f.code}\0{path}\0{text}\0{n}".encode()).hexdigest()[:32])
    return out


def _region(line: int, column: int, end_line: int, end_column: int) -> dict[str, int]:
    return {"startLine": line, "startColumn": column, "endLine": end_line, "endColumn": end_column}


def _artifact(path: str) -> dict[str, str]:
    return {"uri": path, "uriBaseId": "%SRCROOT%"}


def _result(f: FindingRow, rule_index: dict[str, int], fp: str) -> dict[str, Any]:
    r: dict[str, Any] = {
        "ruleId": f.code,
        "level": _LEVEL[f.severity],
        "message": {"text": f.message},
        "partialFingerprints": {"msprofFinding/v1": fp},
        "properties": {"share": f.share, "deviceTimeUs": f.device_time_us, "confidence": f.confidence},
    }
    if f.state is not None:
        r["baselineState"] = BASELINE_STATE[f.state]
    if f.code in rule_index:
        r["ruleIndex"] = rule_index[f.code]
    if f.path is not None:
        region = _region(f.line, f.column, f.end_line, f.end_column)  # type: ignore[arg-type] # placed: all set
        r["locations"] = [{"physicalLocation": {"artifactLocation": _artifact(f.path), "region": region}}]
    if f.related:
        r["relatedLocations"] = [
            {"id": i, "message": {"text": rel.message},
             "physicalLocation": {"artifactLocation": _artifact(rel.path),
                                  "region": _region(rel.line, rel.column, rel.end_line, rel.end_column)}}
            for i, rel in enumerate(f.related)
        ]
    if f.fixes:
        r["fixes"] = []
        for fix in f.fixes:
            by_file: dict[str, list[dict[str, Any]]] = {}
            for e in fix.edits:
                by_file.setdefault(e.path, []).append(
                    {"deletedRegion": _region(e.line, e.column, e.end_line, e.end_column),
                     "insertedContent": {"text": e.new_text}})
            r["fixes"].append(
                {
                    "description": {"text": fix.label},
                    **({"properties": {"group": fix.group}} if fix.group else {}),
                    "artifactChanges": [{"artifactLocation": _artifact(uri), "replacements": reps}
                                        for uri, reps in by_file.items()],
                }
            )
    return r


def render_document(view: Report) -> dict[str, Any]:
    rules = sorted(all_rules(), key=lambda r: r.code)
    rule_index = {r.code: i for i, r in enumerate(rules)}
    by_place = view.by_place()
    # most severe first, then the biggest share; by place among equals
    order = sorted(range(len(by_place)), key=lambda i: (-by_place[i].severity.rank, -by_place[i].share, i))
    findings = [by_place[i] for i in order]
    truncated = len(findings) > MAX_RESULTS
    findings = findings[:MAX_RESULTS]
    # a baseline's finding that is gone is a result too ("absent"), after the current ones
    gone = list(view.resolved[: max(MAX_RESULTS - len(findings), 0)])
    results = [_result(f, rule_index, fp) for f, fp in zip(findings, fingerprints(findings, view))]
    results += [_result(f, rule_index, fp) for f, fp in zip(gone, fingerprints(gone, view))]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "msprof-lsp",
                        "version": view.tool_version,
                        "semanticVersion": view.tool_version,
                        "informationUri": rule_doc_url(None),
                        "rules": [
                            {
                                "id": rule.code,
                                "name": rule.name,
                                "shortDescription": {"text": rule.summary},
                                "fullDescription": {"text": rule.rationale},
                                "helpUri": rule_doc_url(rule.code),
                                "help": {"text": f"{rule.summary} See {rule_doc_url(rule.code)}"},
                                "defaultConfiguration": {"level": _DEFAULT_LEVEL.get(rule.default_severity, "warning")},
                            }
                            for rule in rules
                        ],
                    }
                },
                "columnKind": "unicodeCodePoints",
                "originalUriBaseIds": {"%SRCROOT%": {"uri": view.cwd.resolve().as_uri() + "/"}},
                "results": results,
                "properties": {"truncated": truncated, "profiles": [p.path for p in view.profiles]},
            }
        ],
    }
