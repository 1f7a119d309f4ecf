"""The savings cases' device model (tests/synth/device_model.py) and the fixes that change kernel
times through it (tests/synth/fixes.py): what the truths of NPU106, NPU214, NPU217 and NPU222 rest on."""

from __future__ import annotations

from tests.synth import fixes as fx
from tests.synth import library as L
from tests.synth.device_model import DEVICE
from tests.synth.run import AI_CORE, AI_VECTOR_CORE, RepeatedSteps, Run, UserCall


def _mm(m: int, k: int, n: int, dtype: str = "DT_BF16"):
    return L.kernel("mm", "MatMulV3", AI_CORE, 1.0, inputs=((m, k), (k, n)), outputs=((m, n),), dtype=dtype)


def _ns(k) -> int:
    ns = DEVICE.kernel_dur_ns(k)
    assert ns is not None
    return ns


def test_an_unaligned_gemm_is_slower_than_the_padded_one_with_more_work():
    # 32003 bf16 = 64,006 B rows: split bursts; 32256 = 1,008 x 64 B
    assert _ns(_mm(2048, 128, 32003)) > 1.8 * _ns(_mm(2048, 128, 32256)) - DEVICE.kernel_ns


def test_small_gemms_reach_a_lower_rate_and_fp32_computes_at_a_quarter():
    def rate(m, k, n, dtype="DT_BF16"):
        return 2 * m * k * n / _ns(_mm(m, k, n, dtype))
    assert rate(2048, 128, 128) < 0.1 * rate(8192, 8192, 8192)
    big32, big16 = _ns(_mm(8192, 8192, 8192, "DT_FLOAT")), _ns(_mm(8192, 8192, 8192))
    assert 3.9 < big32 / big16 < 4.1  # compute-bound: the fp32 share of the cube rate


def test_vector_kernels_stream_whatever_their_rows():
    def vec(n):
        return L.kernel("add", "Add", AI_VECTOR_CORE, 1.0, inputs=((4096, n),), outputs=((4096, n),))
    assert abs(_ns(vec(32003)) / _ns(vec(32256)) - 32003 / 32256) < 0.01
    assert DEVICE.kernel_dur_ns(L.kernel("x", "Add", AI_VECTOR_CORE, 1.0)) is None  # no shapes: its time stays


def _run(*launches) -> Run:
    return Run(steps=RepeatedSteps([(UserCall((), tuple(launches), label="x"),)], 1))


def _kernels(run: Run):
    return [k for it in run.steps[0].items for la in it.launches for op in la.op.walk()
            for k in op.kernels + tuple(kk for b in op.backward for o in b.walk() for kk in o.kernels)]


def test_autocast_casts_the_operands_and_runs_the_gemm_in_bf16():
    run = fx.timed(_run(L.linear_nd(2048, 512, 512, mm_us=1.0, dtype="DT_FLOAT")))
    after = fx.timed(fx.autocast(run))
    types = [(k.type, k.input_dtypes) for k in _kernels(after)]
    assert types.count(("Cast", "DT_FLOAT")) == 2  # the forward's two operands
    assert types.count(("Cast", "DT_BF16")) == 2  # each backward GEMM's gradient back to fp32
    assert all(d == "DT_BF16;DT_BF16" for t, d in types if t == "MatMulV2")
    mm = lambda r: sum(k.dur_ns for k in _kernels(r) if k.type == "MatMulV2")  # noqa: E731
    assert mm(after) < mm(run) / 2


def test_resized_and_fused_pairs_change_the_description():
    add = L.elementwise("aten::add", "aclnnAdd", "Add", (8, 32003), dur_us=1.0)
    ln = L.elementwise("aten::layer_norm", "aclnnLayerNorm", "LayerNormV4", (8, 32003), dur_us=1.0, n_inputs=1)
    run = fx.resized(_run(add, ln), 32003, 32256)
    assert {k.input_shapes for k in _kernels(run)} == {"8,32256;8,32256", "8,32256"}
    fused = fx.fused_pairs(run, "aten::add", "aten::layer_norm", lambda _add, _ln: L.elementwise(
        "npu::npu_add_layer_norm", "aclnnAddLayerNorm", "AddLayerNorm", (8, 32256), dur_us=1.0))
    assert [la.op.name for la in fused.steps[0].items[0].launches] == ["npu::npu_add_layer_norm"]
