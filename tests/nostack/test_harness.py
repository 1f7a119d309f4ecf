"""The no-stack harness itself: each job's planted problems are what the stack form reports, and
every form of the job loads. (The scores per form are printed by benchmarks/bench_nostack_recall.py.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.nostack.jobs import Form, JOBS, Job, NO_STACK_FORMS, write_forms
from tests.nostack.score import FormResult, check_every_form, planted_keys, score


@pytest.fixture(scope="module", params=sorted(JOBS))
def checked(request, tmp_path_factory) -> tuple[Job, dict[Form, FormResult]]:
    job = JOBS[request.param]()
    return job, check_every_form(job, tmp_path_factory.mktemp(job.name))


def test_planted_lines_are_the_calls_named(checked) -> None:
    job, _ = checked
    lines = job.script.read_text(encoding="utf-8").splitlines()
    ast.parse("\n".join(lines))  # a real script
    for p in job.planted:
        assert p.text in lines[p.line - 1]


def test_stack_form_reports_every_planted_problem(checked) -> None:
    job, results = checked
    ref = results[Form.STACK]
    assert ref.status != 2, ref.stderr
    assert sorted(planted_keys(job) - ref.findings) == []
    assert ref.steps == job.steps
    assert {ref.confidence[k] for k in planted_keys(job)} == {"stack"}


def test_every_form_loads_and_scores_in_range(checked) -> None:
    job, results = checked
    ref = results[Form.STACK]
    for form in NO_STACK_FORMS:
        r = results[form]
        assert r.status != 2, f"{form.value}: {r.stderr}"
        s = score(ref, r)
        for value in (s.recall, s.precision):
            assert value is None or 0.0 <= value <= 1.0
        # without stacks nothing may claim a captured stack
        assert "stack" not in r.confidence.values(), form.value
        # the step count is right in every form; only the msprof CLI form has no markers
        assert r.steps == job.steps, form.value
        assert (r.steps_source == "markers") is (form is not Form.MSPROF), (form.value, r.steps_source)


def test_msprof_form_has_no_step_markers(checked, tmp_path: Path) -> None:
    job, _ = checked
    [root] = write_forms(job, tmp_path, (Form.MSPROF,)).values()
    assert not list(root.rglob("step_trace_*.csv"))
    assert list(root.rglob("op_summary_*.csv"))
