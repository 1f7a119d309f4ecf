"""SARIF 2.1.0 output that GitHub code scanning accepts (lsp-notes).

Stable ``ruleId``s, repo-relative URIs under ``%SRCROOT%``, code-point columns, fingerprints that
survive line moves (rule + file + the anchored source text + occurrence), fixes as SARIF
``fixes``, and GitHub's caps (at most 5,000 results kept per run, most severe first).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from msprof_lsp.hints.finding import Finding, Severity
from msprof_lsp.hints.registry import all_rules
from msprof_lsp.hints.verify import FindingState, line_text

from ...protocol import rule_doc_url
from ...analysis.views import document
from ...analysis.views.result import CheckRun

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
MAX_RESULTS = 5000
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note", Severity.HINT: "note"}
# SARIF 2.1.0's baselineState values for our finding states (docs/cli.md)
BASELINE_STATE = {FindingState.NEW: "new", FindingState.PERSISTING: "unchanged", FindingState.IMPROVED: "updated",
                  FindingState.REGRESSED: "updated", FindingState.RESOLVED: "absent"}
_DEFAULT_LEVEL = {None: "warning", Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note", Severity.HINT: "note"}


def fingerprints(findings: list[Finding], cwd: Path) -> list[str]:
    """Per finding, a hash of rule, file, the anchored line's text and its occurrence number."""
    cache: dict[str, list[str]] = {}
    seen: dict[tuple[str, str, str], int] = {}
    out = []
    for f in findings:
        path = document.rel_path(f.span.path, cwd) if f.span else ""
        text = line_text(f.span.path, f.span.line, cache) if f.span else f.message
        key = (f.code, path, text)
        n = seen.get(key, 0)
        seen[key] = n + 1
        out.append(hashlib.sha256(f"{f.code}\0{path}\0{text}\0{n}".encode()).hexdigest()[:32])
    return out


def _region(line: int, col: int, end_line: int, end_col: int) -> dict[str, int]:
    return {"startLine": line, "startColumn": col + 1, "endLine": end_line, "endColumn": end_col + 1}


def _result(f: Finding, rule_index: dict[str, int], cwd: Path, fp: str, state: FindingState | None = None) -> dict[str, Any]:
    r: dict[str, Any] = {
        "ruleId": f.code,
        "level": _LEVEL[f.severity],
        "message": {"text": f.message},
        "partialFingerprints": {"msprofFinding/v1": fp},
        "properties": {
            "share": round(f.share, 6),
            "deviceTimeUs": round(f.time_per_step_us, 3),
            "confidence": f.confidence.value,
        },
    }
    if state is not None:
        r["baselineState"] = BASELINE_STATE[state]
    if f.code in rule_index:
        r["ruleIndex"] = rule_index[f.code]
    if f.span:
        s = f.span
        r["locations"] = [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": document.rel_path(s.path, cwd), "uriBaseId": "%SRCROOT%"},
                    "region": _region(s.line, s.col, s.end_line, s.end_col),
                }
            }
        ]
    if f.related:
        r["relatedLocations"] = [
            {
                "id": i,
                "message": {"text": rel.message},
                "physicalLocation": {
                    "artifactLocation": {"uri": document.rel_path(rel.span.path, cwd), "uriBaseId": "%SRCROOT%"},
                    "region": _region(rel.span.line, rel.span.col, rel.span.end_line, rel.span.end_col),
                },
            }
            for i, rel in enumerate(f.related)
        ]
    if f.fixes:
        r["fixes"] = []
        for fix in f.fixes:
            by_file: dict[str, list[dict[str, Any]]] = {}
            for e in fix.edits:
                by_file.setdefault(document.rel_path(e.path, cwd), []).append(
                    {"deletedRegion": _region(e.line, e.col, e.end_line, e.end_col), "insertedContent": {"text": e.new_text}}
                )
            r["fixes"].append(
                {
                    "description": {"text": document.fix_label(fix)},
                    **({"properties": {"group": fix.group}} if fix.group else {}),
                    "artifactChanges": [
                        {"artifactLocation": {"uri": uri, "uriBaseId": "%SRCROOT%"}, "replacements": reps}
                        for uri, reps in by_file.items()
                    ],
                }
            )
    return r


def render_document(run: CheckRun) -> dict[str, Any]:
    rules = sorted(all_rules(), key=lambda r: r.code)
    rule_index = {r.code: i for i, r in enumerate(rules)}
    findings = sorted(run.findings, key=lambda f: (-f.severity.rank, -f.share, f.sort_key()))
    truncated = len(findings) > MAX_RESULTS
    findings = findings[:MAX_RESULTS]
    states = {id(c.after): c.state for j in run.jobs for c in j.finding_changes if c.after is not None}
    compared = any(j.comparison is not None for j in run.jobs)
    # a baseline's finding that is gone is a result too ("absent"), after the current ones
    gone = [c.before for j in run.jobs for c in j.finding_changes if c.state is FindingState.RESOLVED and c.before]
    gone = gone[: max(MAX_RESULTS - len(findings), 0)]
    fps = fingerprints(findings, run.cwd)
    results = [_result(f, rule_index, run.cwd, fp, states.get(id(f), FindingState.NEW) if compared else None)
               for f, fp in zip(findings, fps)]
    results += [_result(f, rule_index, run.cwd, fp, FindingState.RESOLVED) for f, fp in zip(gone, fingerprints(gone, run.cwd))]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "msprof-lsp",
                        "version": run.tool_version,
                        "semanticVersion": run.tool_version,
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
                "originalUriBaseIds": {"%SRCROOT%": {"uri": run.cwd.resolve().as_uri() + "/"}},
                "results": results,
                "properties": {"truncated": truncated, "profiles": [document.rel_path(j.profile.meta.path, run.cwd) for j in run.jobs]},
            }
        ],
    }
