"""The zoo itself (tests/nostack/zoo.py): every model is a real script, each planted problem is on
the line its text names, the stack form of each job reports every planted problem with its
stack, and the split names every zoo model once. (The scores per form are printed by
benchmarks/zoo.py; tests/nostack/test_zoo_scores.py holds the floors.)"""

from __future__ import annotations

import ast

import pytest

from tests.nostack.jobs import Form, write_forms
from tests.nostack.score import check_form, planted_keys
from tests.nostack.zoo import ZOO
from tests.nostack.zoo_split import HELD_OUT, TUNING

NEW = sorted(set(ZOO) - {"patch_classifier", "char_lm"})  # those two: tests/nostack/test_harness.py


def test_split_names_every_zoo_model_once_five_and_five() -> None:
    assert sorted(TUNING + HELD_OUT) == sorted(ZOO)
    assert len(TUNING) == len(HELD_OUT) == 5


@pytest.mark.parametrize("name", NEW)
def test_planted_lines_are_the_calls_named(name: str) -> None:
    job = ZOO[name]()
    lines = job.script.read_text(encoding="utf-8").splitlines()
    ast.parse("\n".join(lines))
    assert len(job.planted) >= 4
    for p in job.planted:
        assert p.text in lines[p.line - 1], (p.code, p.line)


@pytest.mark.parametrize("name", NEW)
def test_stack_form_reports_every_planted_problem(name: str, tmp_path) -> None:
    job = ZOO[name]()
    [path] = write_forms(job, tmp_path / "p", (Form.STACK,)).values()
    ref = check_form(job, path, job.workspace(tmp_path), Form.STACK)
    assert ref.status != 2, ref.stderr
    assert sorted(planted_keys(job) - ref.findings) == []
    assert ref.steps == job.steps
    assert {ref.confidence[k] for k in planted_keys(job)} == {"stack"}
