"""Shape and sequence anchoring measured on the harness jobs: the forms that keep host ops
(text export without stacks, Level0, DB export without call chains) must find at least 80 % of
the stack form's (code, line) findings, with at least 90 % of their own on the right line, and
name the stack form's top hotspot line; the msprof CLI form (no host ops) names it too, counts the
steps, finds at least 75 % of the stack form's findings (measured: 85 % and 89 %) with at least
90 % of its own on the right line (measured: 100 %), and has no finding on a wrong line for a
code the stack form reports."""

from __future__ import annotations

import pytest

from tests.nostack.jobs import Form
from tests.nostack.score import score
from tests.nostack.test_harness import checked  # noqa: F401 - the harness's fixture: every form of each job, checked

HOST_FORMS = (Form.NOSTACK, Form.LEVEL0, Form.DB)


@pytest.mark.parametrize("form", HOST_FORMS, ids=lambda f: f.value)
def test_forms_with_host_ops_recall_the_stack_forms_findings(checked, form) -> None:
    job, results = checked
    ref, got = results[Form.STACK], results[form]
    s = score(ref, got)
    missing = sorted(ref.findings - got.findings)
    assert s.recall is not None and s.recall >= 0.8, (form.value, missing)
    assert s.precision is not None and s.precision >= 0.9, (form.value, sorted(got.findings - ref.findings))
    assert s.same_top_hotspot, (ref.top_hotspot, got.top_hotspot)
    assert set(got.confidence.values()) <= {"module", "inferred"}


def test_msprof_form_names_the_top_hotspot_and_puts_no_finding_on_a_wrong_line(checked) -> None:
    job, results = checked
    ref, got = results[Form.STACK], results[Form.MSPROF]
    s = score(ref, got)
    assert s.same_top_hotspot, (ref.top_hotspot, got.top_hotspot)
    assert got.steps == job.steps, got.steps_source
    assert s.recall is not None and s.recall >= 0.75, sorted(ref.findings - got.findings)
    assert s.precision is not None and s.precision >= 0.9, sorted(got.findings - ref.findings)
    ref_codes = {code for code, _, _ in ref.findings}
    wrong = sorted(k for k in got.findings - ref.findings if k[0] in ref_codes)
    assert not wrong
