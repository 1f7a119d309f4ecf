"""NPU106 cube-shape-alignment: MatMul inner axes against cubeAlign (from cubeMinBytes of input +
output) and FlashAttention head dims against faAlign; the 2025 kernel fixture."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from conftest import shared_fixture
from seedkit import L, Launch, UserCall, analyse, backward, fwd, span_text, step_run

from msprof_lsp.hints.config import RuleConfig, Thresholds
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.registry import rule
from msprof_lsp.mapping.profile.model import KERNEL_SCHEMA, Profile, ProfileKind, ProfileMeta, make_table
from msprof_lsp.mapping.profile.readers.ascend_csv import read_kernel_table

KD_2025 = "Ascend-msprof-analyze/test/ut/advisor/compute_advice/data/kernel_details.csv"
BYTES = {"DT_BF16": 2, "FLOAT": 4, "FLOAT16": 2}
MIB100 = 100 * 1024 * 1024


def _shapes(text: str):
    return [tuple(int(d) for d in s.split(",")) if s else None for s in text.strip('"').split(";")] if text.strip('"') else []


def _nbytes(shapes, dtypes):
    total = 0
    for s, t in zip(shapes, dtypes.split(";")):
        if s:
            n = 1
            for d in s:
                n *= d
            total += n * BYTES.get(t, 2)
    return total


def _expected(rows, align=256):
    """Rows the advisor's rule flags, by (Type, Input Shapes): MatMul >= 100 MiB with a last dim of
    an input not a multiple of 256; FlashAttention with a q/k/v last dim not a multiple of 128."""
    out = {}
    for r in rows:
        ins = _shapes(r["Input Shapes"])
        if "matmul" in r["Type"].lower():
            size = _nbytes(ins, r["Input Data Types"]) + _nbytes(_shapes(r["Output Shapes"]), r["Output Data Types"])
            bad = size >= MIB100 and any(s and s[-1] % align for s in ins[:2])
        elif r["Type"].startswith("FlashAttentionScore"):
            bad = any(s and s[-1] % 128 for s in ins[:3])
        else:
            bad = False
        if bad:
            key = (r["Type"], r["Input Shapes"].strip('"'))
            out[key] = out.get(key, 0) + 1
    return out


def test_2025_fixture_unaligned_matmul_and_flash_attention():
    path = shared_fixture(KD_2025)
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    expected = _expected(rows)
    assert expected == {("MatMulV3", "8192,15365;8192,4096"): 4,
                        ("FlashAttentionScore", "4096,2,511;4096,2,512;4096,2,512;;;;4096,4096;;;;;"): 1}
    big = next(r for r in rows if r["Input Shapes"].strip('"') == "8192,15365;8192,4096")
    assert _nbytes(_shapes(big["Input Shapes"]), big["Input Data Types"]) + 1536 * 4096 * 2 == 331_431_936  # ~331 MB
    prof = Profile(ProfileMeta(ProfileKind.TORCH_NPU, str(path)), kernels=read_kernel_table(path).to_frame())
    found = list(rule("NPU106").check(RuleContext(prof, None, None, RuleConfig())))
    got = {(s["op_type"], s["input_shapes"]): s["kernels"] for f in found for s in f.evidence["shapes"]}
    assert got == expected
    mm = next(f for f in found if f.evidence["shapes"][0]["op_type"] == "MatMulV3")
    assert "inner axis 15365 is not a multiple of 256. Pad 15365 up to 15616 (+251, +1.63 % params); mask the padding." in mm.message
    assert mm.evidence["pad_to"] == {"15365": 15616} and "15360" not in mm.message  # never rounded down
    fa = next(f for f in found if f.evidence["shapes"][0]["op_type"] == "FlashAttentionScore")
    assert "head dim 511 is not a multiple of 128" in fa.message
    # 81920,4096;8192,512 moves more than 100 MiB but is aligned: not reported
    assert not any("81920,4096;8192,512" in f.message for f in found)
    assert all(f.fixes == [] and f.offers == [] for f in found)  # manual: never auto-edited


def _run(tokens: int, fout: int):
    head = L.linear_nd(tokens, 256, fout, mm_us=300.0, matmul_type="MatMulV3")
    return step_run([UserCall(fwd("return self.head(h), c"), (Launch(head.op, head.frames),), label="head"), backward()])


def test_anchor_related_literal_and_the_byte_limit(tmp_path):
    # bf16 (t,256) @ (256,15365) -> (t,15365): 2 * (15621 t + 256 * 15365) bytes; 100 MiB from t = 3105
    at, below = 3105, 3104
    assert 2 * (15621 * at + 256 * 15365) >= MIB100 > 2 * (15621 * below + 256 * 15365)
    a = analyse(_run(at, 15365), tmp_path / "at")
    flagged = _expected(a.kernel_rows())
    [f] = a.run("NPU106", min_share=0.0)
    assert {(s["op_type"], s["input_shapes"]): s["kernels"] for s in f.evidence["shapes"]} == flagged
    assert span_text(f.span) == "self.head(h)"
    dims = {s[-1] for (_, shapes) in flagged for s in _shapes(shapes)[:2] if s and s[-1] % 256}
    assert set(f.evidence["unaligned"]) == dims and 15365 in dims  # backward: the token count too
    # related information: the literal 15365 in the source (the vocab size default)
    assert [span_text(r.span) for r in f.related] == ["15365"]
    assert "vocab: int = 15365" in open(f.related[0].span.path, encoding="utf-8").read()
    b = analyse(_run(below, 15365), tmp_path / "below")
    assert _expected(b.kernel_rows()) == {} and b.run("NPU106", min_share=0.0) == []


def test_aligned_vocab_is_not_reported(tmp_path):
    a = analyse(_run(4096, 15360), tmp_path)
    assert _expected(a.kernel_rows()) == {}
    assert a.run("NPU106", min_share=0.0) == []


def test_the_alignment_setting_is_read(tmp_path):
    a = analyse(_run(4096, 15616), tmp_path)  # 61 x 256: aligned to 256, not to 512
    assert a.run("NPU106", min_share=0.0) == []
    flagged = _expected(a.kernel_rows(), align=512)
    [f] = a.run("NPU106", min_share=0.0, thresholds=Thresholds(cube_align=512))
    assert {(s["op_type"], s["input_shapes"]): s["kernels"] for s in f.evidence["shapes"]} == flagged
    # the 256-wide axis (d_model) is not a multiple of 512 either, but padding would double it
    assert set(f.evidence["unaligned"]) == {256, 15616} and f.evidence["pad_to"] == {"15616": 15872}
    assert "256" in f.evidence["not_padded"] and "100%" in f.evidence["not_padded"]["256"]
    assert "inner axis 15616 is not a multiple of 512. Pad 15616 up to 15872 (+256, +1.64 % params); mask the padding." in f.message


@pytest.mark.parametrize(("dim", "align", "up", "ok"), [
    (4095, 256, 4096, True), (32003, 256, 32256, True), (128, 256, 256, False), (3841, 256, 4096, True),
    (1800, 256, 2048, False), (511, 128, 512, True), (100, 256, 256, False),
])
def test_padding_rounds_up_and_only_where_it_is_cheap(dim, align, up, ok):
    """Never down (4095 -> 3840 would drop vocabulary), never doubling (d_model 128 -> 256)."""
    from msprof_lsp.hints.rules.shapes import pad_up, paddable
    assert pad_up(dim, align) == up and paddable(dim, align) is ok


@pytest.mark.parametrize(("dim", "align", "says"), [
    (4095, 256, "+1, +0.02 % params"),
    (32003, 256, "+253, +0.79 % params"),
    (511, 128, "+1, +0.20 % params"),
])
def test_the_advice_says_what_the_padding_costs(dim, align, says):
    from msprof_lsp.hints.rules.shapes import pad_cost
    assert pad_cost(dim, align) == says


def test_tiny_transformer_sample_pads_the_vocabulary_not_d_model():
    """The sample's lm_head MatMulV3 2048,128;128,32003: 32003 is padded up to 32256; d_model 128,
    also not a multiple of 256, is not doubled."""
    from msprof_lsp.mapping.profile.cluster import load_profile
    root = Path(__file__).resolve().parents[3] / "samples" / "tiny_transformer" / "npu_profile"
    prof = load_profile([next(root.glob("*_ascend_pt"))], use_cache=False).profile
    found = list(rule("NPU106").check(RuleContext(prof, None, None, RuleConfig())))  # no source: one per shape
    assert found and all(f.evidence["pad_to"] == {"32003": 32256} for f in found)
    (fwd,) = [f for f in found if f.evidence["shapes"][0]["input_shapes"] == "2048,128;128,32003"]
    assert fwd.message.endswith("inner axis 32003 is not a multiple of 256. Pad 32003 up to 32256 (+253, +0.79 % params); mask the padding.")
    assert set(fwd.evidence["not_padded"]) == {"128"} and "32000" not in fwd.message


# -- the saving model: the rate of aligned GEMMs of comparable work (docs/savings.md, NPU106 row) -----------

LM_FWD = ("8192,128;128,32003", "8192,32003")  # the lm_head: 67.1 GFLOP, 32003 an inner axis
LM_DW = ("32003,8192;8192,128", "32003,128")  # its weight gradient: the same work, 32003 along M
SMALL = ("8192,128;128,512", "8192,512")  # 1.07 GFLOP: 62x less work


def _gemm_profile(*kernels: tuple[tuple[str, str], float, str]) -> Profile:
    """MatMulV3 kernels ((input shapes, output shape), µs, dtype), one step."""
    cols: dict[str, list] = {c: [] for c in ("name", "type", "core", "start_ns", "dur_ns", "input_shapes",
                                              "input_dtypes", "input_formats", "output_shapes", "output_dtypes")}
    t = 0
    for (ins, out), us, dtype in kernels:
        for c, v in (("name", "MatMulV3"), ("type", "MatMulV3"), ("core", "AI_CORE"), ("start_ns", t),
                     ("dur_ns", int(us * 1000)), ("input_shapes", ins), ("input_dtypes", f"{dtype};{dtype}"),
                     ("input_formats", "ND;ND"), ("output_shapes", out), ("output_dtypes", dtype)):
            cols[c].append(v)
        t += int(us * 1000) + 1000
    return Profile(ProfileMeta(ProfileKind.TORCH_NPU, "/gemms"), kernels=make_table(KERNEL_SCHEMA, cols))


def _lm_effect(*kernels):
    found = list(rule("NPU106").check(RuleContext(_gemm_profile(*kernels), None, None, RuleConfig())))
    (f,) = [f for f in found if f.evidence["shapes"][0]["input_shapes"] == LM_FWD[0]]
    return f.effect


def test_the_rate_comes_from_an_aligned_gemm_of_comparable_work():
    """The lm_head's own weight gradient does the same FLOPs with aligned inner axes (32003 is its M;
    its 128 is one the padding keeps too): the misaligned GEMM at its rate. The small GEMMs' lower
    rate is not used."""
    e = _lm_effect((LM_FWD, 669.0, "DT_BF16"), (LM_DW, 336.0, "DT_BF16"), (SMALL, 8.5, "DT_BF16"))
    assert not e.unknown
    (c,) = e.changes
    assert c.factor == pytest.approx(336.0 / 669.0, rel=1e-6) and c.best == c.factor
    assert c.worst == pytest.approx(0.5 + 0.5 * c.factor)
    assert "within 4x their FLOPs and bytes" in e.basis


def test_a_slower_comparable_gemm_means_no_gain():
    e = _lm_effect((LM_FWD, 669.0, "DT_BF16"), (LM_DW, 700.0, "DT_BF16"))
    (c,) = e.changes
    assert c.factor == c.best == c.worst == 1.0


@pytest.mark.parametrize("others", [
    [(SMALL, 8.5, "DT_BF16")],  # aligned, but 62x less work: a lower rate that says nothing of the lm_head's
    [(("8192,32003;32003,128", "8192,128"), 660.0, "DT_BF16")],  # comparable, but misaligned in the padded dim
    [(LM_DW, 336.0, "DT_FLOAT")],  # comparable and aligned, another dtype
    [(("4096,4096;4096,2048", "4096,2048"), 336.0, "DT_BF16")],  # comparable FLOPs, 8x fewer bytes
    [(("32003,8192;8192,100", "32003,100"), 300.0, "DT_BF16")],  # its 100 the lm_head does not keep unaligned
])
def test_without_an_aligned_gemm_of_comparable_work_the_saving_is_an_ab_test(others):
    e = _lm_effect((LM_FWD, 669.0, "DT_BF16"), *others)
    assert not e.changes
    assert e.unknown == ("A/B test: the profile has no aligned MatMulV3 GEMM within 4x the FLOPs and bytes of "
                         "8192,128;128,32003 to take the rate from (a GEMM's rate depends on its size)")


def test_one_finding_rates_what_it_can_and_says_what_it_cannot():
    """A finding's GEMMs (one call site: forward and backward) each by their own references: the
    weight gradient, whose inner axes the padding leaves, is unchanged; a GEMM with no reference is
    kept as recorded and named in the basis, not priced by a GEMM of other work."""
    from msprof_lsp.hints.rules.shapes import _at_aligned_rate, _gemms

    other = ("4096,4095;4095,4096", "4096,4096")  # 137 GFLOP, 4095 padded: no reference of its work
    ctx = RuleContext(_gemm_profile((LM_FWD, 669.0, "DT_BF16"), (LM_DW, 336.0, "DT_BF16"), (other, 900.0, "DT_BF16")),
                      None, None, RuleConfig())
    e = _at_aligned_rate(ctx, [0, 1, 2], _gemms(ctx))
    assert [c.rows for c in e.changes] == [(0,)] and e.changes[0].factor == pytest.approx(336.0 / 669.0, rel=1e-6)
    assert e.basis.endswith("; MatMulV3 4096,4095;4095,4096 as recorded (nothing to rate it by) "
                            "(low end: half the gain)")
