"""Scoring a no-stack form of a job against its stack form, through the product's own contract:
``msprof-lsp --check --format json`` run in process on each form.

* a finding counts by ``(code, file, line)``; profile-quality notices (NPU9xx), the environment
  rules (NPU24x: read from profiler_metadata.json, anchored at line 1 whatever the mapping) and
  findings without a line are left out: they describe the capture, not the mapping;
* **recall** -- share of the stack form's findings that the form reports on the same line;
* **precision** -- share of the form's findings that are on the stack form's line for that code
  (a finding the stack form does not make at all counts as wrong);
* the top hotspot line and the number of steps are the document's ``hotspots[0]`` and
  ``profile.steps`` (with ``profile.steps_source``: markers, or how they were inferred).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from msprof_lsp.server.check.command import run_check
from msprof_lsp.server.cli import CheckArgs

from .jobs import Form, Job, write_forms

Key = tuple[str, str, int]  # (code, file name, line)
SAME_CAUSE = re.compile(r"^same cause, (\S+) ")
UNSCORED = ("NPU9", "NPU24", "NPU251", "NPU209")  # NPU251 needs recorded stacks; NPU209 needs the core count only msprof info.json writes


@dataclass(frozen=True, slots=True)
class FormResult:
    form: Form
    findings: frozenset[Key]
    confidence: dict[Key, str]
    top_hotspot: tuple[str, int] | None
    steps: int | None
    steps_source: str | None
    status: int
    stderr: str
    step_time_us: float | None = None  # the report's profile.step_time_us


def check_form(job: Job, profile: Path, workspace: Path, form: Form) -> FormResult:
    """``--check`` of ``workspace`` with ``--profile`` ``profile``, the job's remote folder mapped
    onto the workspace (default settings, as a user runs it)."""
    out, err = io.StringIO(), io.StringIO()
    args = CheckArgs(paths=[str(workspace)], profile=str(profile), format="json", fail_on="never", no_cache=True,
                     path_map=[(job.remote_dir, str(workspace))], quiet=True)
    status = run_check(args, stdout=out, stderr=err)
    if status == 2:
        return FormResult(form, frozenset(), {}, None, None, None, status, err.getvalue())
    doc = json.loads(out.getvalue())
    findings: set[Key] = set()
    confidence: dict[Key, str] = {}
    for f in doc["findings"]:
        # a finding folded into another as the same cause (hints.consolidate) is still found, at its
        # own line: its related entry "same cause, <CODE> …"
        folded = [(m.group(1), r) for r in f.get("related", []) if (m := SAME_CAUSE.match(r["message"]))]
        for code, where in [(f["code"], f), *folded]:
            if code.startswith(UNSCORED) or not where.get("line") or not where.get("path"):
                continue
            key = (code, _name(where["path"]), int(where["line"]))
            findings.add(key)
            confidence.setdefault(key, f.get("confidence", ""))
    hot = doc.get("hotspots") or []
    top = (_name(hot[0]["path"]), int(hot[0]["line"])) if hot else None
    prof = doc["profile"]
    return FormResult(form, frozenset(findings), confidence, top, prof.get("steps"), prof.get("steps_source"), status,
                      err.getvalue(), prof.get("step_time_us"))


def _name(path: str) -> str:
    return os.path.basename(path.replace("\\", "/"))


@dataclass(frozen=True, slots=True)
class Score:
    recall: float | None  # None: the reference has no findings
    precision: float | None  # None: the form has no findings
    same_top_hotspot: bool


def score(reference: FormResult, result: FormResult) -> Score:
    ref, got = reference.findings, result.findings
    hit = ref & got
    recall = len(hit) / len(ref) if ref else None
    precision = len(hit) / len(got) if got else None
    return Score(recall, precision, reference.top_hotspot is not None and reference.top_hotspot == result.top_hotspot)


# codes a form cannot make whatever the mapping does: the data is not in it (communication analysis:
# the text export only; the CANN layer that shows online compiles: not at Level0)
FORM_LACKS: dict[Form, tuple[str, ...]] = {
    Form.LEVEL0: ("NPU107", "NPU203", "NPU204"), Form.DB: ("NPU203", "NPU204"), Form.MSPROF: ("NPU203", "NPU204"),
}


def mapping_score(reference: FormResult, result: FormResult) -> Score:
    """``score`` without the reference findings the form has no data for (``FORM_LACKS``)."""
    lacks = FORM_LACKS.get(result.form, ())
    kept = frozenset(k for k in reference.findings if k[0] not in lacks)
    return score(dataclasses.replace(reference, findings=kept), result)


def check_every_form(job: Job, out: Path) -> dict[Form, FormResult]:
    """Write ``job``'s profile in every form under ``out`` and check each against its workspace."""
    paths = write_forms(job, out / "profiles")
    ws = job.workspace(out)
    return {form: check_form(job, path, ws, form) for form, path in paths.items()}


def planted_keys(job: Job) -> frozenset[Key]:
    return frozenset((p.code, job.script.name, p.line) for p in job.planted)
