"""Floors of mapping without stacks on the zoo (tests/nostack/zoo.py), both halves: recall and
precision per model and form as measured after the zoo's mapping changes (docs/mapping-zoo.md
has the table, benchmarks/zoo.py prints it). Since checkpoint calls are inlined and AI_CPU ops
keyed to their calls every held-out model meets the targets (the Level0 misses are NPU107, which
that form has no data for); a floor is kept at the measured figure so a change that moves it
shows. In every form
the step count and the step time are the stack form's (msprof CLI: inferred steps, within 1 %)."""

from __future__ import annotations

import pytest

from tests.nostack.jobs import Form, NO_STACK_FORMS
from tests.nostack.score import check_every_form, score
from tests.nostack.zoo import ZOO

# model: (recall %, precision %) per form in NO_STACK_FORMS order (no stacks, Level0, DB, msprof CLI)
FLOORS: dict[str, tuple[tuple[int, int], ...]] = {
    "patch_classifier": ((100, 100), (85, 100), (85, 100), (85, 100)),
    "char_lm": ((100, 100), (89, 100), (100, 100), (89, 100)),  # NPU216 folded into NPU213 (docs/mapping-zoo.md)
    "resnet_ddp": ((100, 100), (78, 100), (78, 100), (78, 100)),
    "gru_tagger": ((100, 100), (83, 100), (100, 100), (100, 100)),
    "recsys_towers": ((100, 100), (86, 100), (100, 100), (86, 100)),
    "vit_classifier": ((100, 100), (89, 100), (100, 100), (78, 100)),
    "moe_lm": ((100, 100), (83, 100), (100, 100), (83, 100)),
    "custom_fn_mlp": ((100, 100), (88, 100), (100, 100), (100, 100)),
    "ckpt_transformer": ((100, 100), (80, 100), (100, 100), (100, 100)),
    "compiled_mlp": ((100, 100), (88, 100), (100, 100), (100, 100)),
}
NEW = sorted(set(ZOO) - {"patch_classifier", "char_lm"})  # those two: tests/nostack/test_anchoring_recall.py


@pytest.mark.parametrize("name", NEW)
def test_zoo_model_keeps_its_floors_steps_and_step_time(name: str, tmp_path) -> None:
    job = ZOO[name]()
    results = check_every_form(job, tmp_path)
    ref = results[Form.STACK]
    for form, (recall, precision) in zip(NO_STACK_FORMS, FLOORS[name]):
        got = results[form]
        assert got.status != 2, got.stderr
        s = score(ref, got)
        assert s.recall is not None and s.recall * 100 >= recall - 0.5, (form.value, sorted(ref.findings - got.findings))
        assert s.precision is not None and s.precision * 100 >= precision - 0.5, (form.value,
                                                                                 sorted(got.findings - ref.findings))
        assert got.steps == job.steps, (form.value, got.steps_source)
        assert abs(got.step_time_us - ref.step_time_us) <= 0.01 * ref.step_time_us, form.value
