"""Single-tensor Adam update kernels found by their types (mapping.source.optimizer_anchor)."""

from __future__ import annotations

from msprof_lsp.mapping.source.optimizer_anchor import ADAM_UPDATE_TYPES, MAX_LEAD, adam_update_pattern, update_rows

W, B = "512,4096;512,4096", "512;512"
ONE = [("Muls", W), ("Add", W), ("Muls", W), ("Addcmul", W), ("Sqrt", W), ("RealDiv", W), ("Add", W), ("Addcdiv", W)]


def test_each_parameters_update_with_its_leading_elementwise_kernels() -> None:
    # a backward Mul of another tensor, then two parameters' updates, then a forward Relu
    seq = [("Mul", "64,512;64,512")] + ONE + [(t, B) for t, _ in ONE] + [("Relu", "64,512")]
    rows = update_rows([t for t, _ in seq], [s for _, s in seq])
    assert rows == list(range(1, 17))  # not the Mul of another shape, not the Relu


def test_leading_kernels_are_bounded_and_need_the_signature() -> None:
    seq = [("Muls", W)] * 6 + ONE[3:]
    rows = update_rows([t for t, _ in seq], [s for _, s in seq])
    assert rows == list(range(6 - MAX_LEAD, 6 + len(ADAM_UPDATE_TYPES)))
    no_addcdiv = [t for t, _ in ONE[:-1]] + ["Mul"]
    assert update_rows(no_addcdiv, [W] * len(no_addcdiv)) == []


def test_pattern_text_is_npu220s() -> None:
    assert adam_update_pattern() == "Addcmul-Sqrt-(RealDiv|Div|Divs)-(Add|Adds)-Addcdiv"
