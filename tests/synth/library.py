"""Builders for the host op trees and kernels common PyTorch calls produce on Ascend.

Each builder returns an ``OpSpec`` (or a ``Launch`` with the torch library frames between the user
line and the op) whose structure follows torch_npu: the outermost aten op, the aten ops it
dispatches to, the dispatch scope (``aclnnAddmm`` / acl_op ``Conv2D``) and the kernels that scope
launches; the op that creates the autograd node names it and carries its backward ops.

Durations are µs in the signatures (readable descriptions) and ns inside the specs.
Shapes are tuples of dims per tensor: ``((8, 512), (512, 512))``.
"""

from __future__ import annotations

from collections.abc import Sequence

from .run import (
    AI_CORE,
    AI_CPU,
    AI_VECTOR_CORE,
    COMMUNICATION,
    DSA_SQE,
    CannSpec,
    CommInfo,
    Frame,
    KernelSpec,
    Launch,
    OpSpec,
    StackEntry,
    us,
)

Shape = Sequence[int]
Shapes = Sequence[Shape]

SITE_PACKAGES = "/usr/local/python3.9/lib/python3.9/site-packages"


def lib(rel: str, line: int, func: str, def_line: int = -1) -> Frame:
    """A frame inside an installed package: ``lib("torch/nn/modules/linear.py", 125, "forward")``."""
    return Frame(f"{SITE_PACKAGES}/{rel}", line, func, def_line)


# Library frames as torch 2.x has them (line = the executing line inside the library function).
LINEAR_FWD = (lib("torch/nn/modules/linear.py", 125, "forward", 124),)
RELU_FWD = (lib("torch/nn/functional.py", 1704, "relu", 1681), lib("torch/nn/modules/activation.py", 133, "forward", 132))
DROPOUT_FWD = (lib("torch/nn/functional.py", 1425, "dropout", 1399), lib("torch/nn/modules/dropout.py", 70, "forward", 69))
F_RELU = (lib("torch/nn/functional.py", 1704, "relu", 1681),)
F_DROPOUT = (lib("torch/nn/functional.py", 1425, "dropout", 1399),)
F_SOFTMAX = (lib("torch/nn/functional.py", 2140, "softmax", 2091),)
F_SILU = (lib("torch/nn/functional.py", 2380, "silu", 2358),)
CONV_FWD = (lib("torch/nn/modules/conv.py", 549, "_conv_forward", 537), lib("torch/nn/modules/conv.py", 554, "forward", 553))
POOL_FWD = (lib("torch/_jit_internal.py", 624, "fn", 618), lib("torch/nn/modules/pooling.py", 213, "forward", 212))
LOSS_FWD = (lib("torch/nn/functional.py", 3494, "cross_entropy", 3424), lib("torch/nn/modules/loss.py", 1295, "forward", 1294))
DATALOADER_NEXT = (lib("torch/utils/data/dataloader.py", 708, "__next__", 701),)
COLLATE = (lib("torch/utils/data/_utils/collate.py", 277, "collate_tensor_fn", 260),)
OPTIM_WRAPPER = (lib("torch/optim/optimizer.py", 487, "wrapper", 461),)
ADAMW_FUSED = (lib("torch/optim/adam.py", 876, "_fused_adam", 802), lib("torch/optim/adam.py", 970, "adam", 903))
ADAMW_SINGLE = (lib("torch/optim/adamw.py", 439, "_single_tensor_adamw", 366), lib("torch/optim/adamw.py", 215, "step", 180))
ZERO_GRAD = (lib("torch/_compile.py", 32, "inner", 24),)
DDP_FWD = (lib("torch/nn/parallel/distributed.py", 1636, "forward", 1629),)
BACKWARD = (lib("torch/autograd/__init__.py", 347, "backward", 249), lib("torch/_tensor.py", 581, "backward", 520))


def _dims(shapes: Shapes) -> str:
    return ";".join(",".join(str(d) for d in s) for s in shapes)


def _dtypes(n: int, dtype: str) -> str:
    return ";".join([dtype] * n)


def kernel(name: str, op_type: str, core: str, dur_us: float, *, inputs: Shapes = (), outputs: Shapes = (),
           dtype: str = "DT_BF16", fmt: str = "ND", stream: int = -1, block_dim: int = 8,
           pmu: dict[str, float] | None = None, **kw) -> KernelSpec:
    """A kernel with op_summary-style shape/dtype/format cells derived from ``inputs``/``outputs``."""
    return KernelSpec(
        name=name,
        type=op_type,
        core=core,
        dur_ns=us(dur_us),
        stream=stream,
        block_dim=block_dim,
        input_shapes=_dims(inputs),
        input_dtypes=_dtypes(len(inputs), dtype) if inputs else "",
        input_formats=_dtypes(len(inputs), fmt) if inputs else "",
        output_shapes=_dims(outputs),
        output_dtypes=_dtypes(len(outputs), dtype) if outputs else "",
        output_formats=_dtypes(len(outputs), fmt) if outputs else "",
        pmu=tuple(sorted((pmu or {}).items())),
        **kw,
    )


def aclnn(api: str, impl: str, op_type: str, core: str, dur_us: float, **kw) -> KernelSpec:
    """aclnn-path kernel: ``<aclnnApi>_<KernelImpl>_<OpType>``."""
    return kernel(f"{api}_{impl}_{op_type}", op_type, core, dur_us, **kw)


def scope(api: str, *kernels: KernelSpec, self_us: float = 6.0, **kw) -> OpSpec:
    """A torch_npu dispatch scope (``aclnnMm``, ``Conv2D``) launching ``kernels``."""
    return OpSpec(api, self_ns=us(self_us), kernels=tuple(kernels), **kw)


def op(name: str, *children: OpSpec, self_us: float = 8.0, inputs: Shapes = (), types: str | None = None,
       **kw) -> OpSpec:
    """An aten (or other framework) op with children; ``inputs`` fill Input Dims / Input type."""
    dims = _dims(inputs)
    if types is None:
        types = ";".join(["c10::BFloat16"] * len(inputs))
    return OpSpec(name, self_ns=us(self_us), children=tuple(children), input_dims=dims, input_types=types, **kw)


# -- layers -----------------------------------------------------------------------------------------


def linear(tokens: int, fin: int, fout: int, *, mm_us: float, transdata: int = 0, transdata_us: float = 3.0,
           dtype: str = "DT_BF16", bias: bool = True, bwd_scale: float = 2.0, frames: tuple[StackEntry, ...] = LINEAR_FWD,
           matmul_type: str = "MatMulV2") -> Launch:
    """``nn.Linear`` on a 2-D input: aten::linear > aten::t + aten::addmm > aclnnAddmm.

    ``transdata`` TransData kernels run around the MatMul (private-format weights, NPU103)."""
    x, w, out = (tokens, fin), (fout, fin), (tokens, fout)
    impl = "MatMulV3Common" if matmul_type == "MatMulV3" else "MatMulCommon"
    aux = [aclnn("aclnnAddmm", "TransData", "TransData", AI_VECTOR_CORE, transdata_us, inputs=(w,), outputs=(w,),
                 dtype=dtype, fmt="FRACTAL_NZ") for _ in range(transdata)]
    mm = aclnn("aclnnAddmm", impl, matmul_type, AI_CORE, mm_us, inputs=(x, (fin, fout)), outputs=(out,), dtype=dtype,
               block_dim=20)
    addmm_kernels = [*aux[: transdata // 2 + transdata % 2], mm, *aux[transdata // 2 + transdata % 2:]]
    if bias:
        addmm_kernels.append(aclnn("aclnnAddmm", "AxpyAiCore", "Axpy", AI_VECTOR_CORE, max(mm_us * 0.05, 1.2),
                                   inputs=(out, (fout,)), outputs=(out,), dtype=dtype))
    bwd_mm = lambda i: scope("aclnnMm", aclnn("aclnnMm", impl, matmul_type, AI_CORE, mm_us * bwd_scale / 2,  # noqa: E731
                                              inputs=((tokens, fout), (fout, fin)) if i == 0 else ((fout, tokens), x),
                                              outputs=(x,) if i == 0 else (w,), dtype=dtype, block_dim=20))
    backward = (
        op("aten::t", op("aten::transpose", op("aten::as_strided", self_us=2)), self_us=3),
        op("aten::mm", bwd_mm(0), self_us=6, inputs=((tokens, fout), (fout, fin))),
        op("aten::t", op("aten::transpose", op("aten::as_strided", self_us=2)), self_us=3),
        op("aten::mm", bwd_mm(1), self_us=6, inputs=((fout, tokens), x)),
    ) + ((op("aten::sum", scope("aclnnReduceSum", aclnn("aclnnReduceSum", "ReduceSumAiCore", "ReduceSum",
                                                          AI_VECTOR_CORE, max(mm_us * 0.05, 1.5),
                                                          inputs=(out,), outputs=((fout,),), dtype=dtype))),) if bias else ())
    t = op("aten::t", op("aten::transpose", op("aten::as_strided", self_us=2), self_us=3), self_us=4,
           inputs=(w,), autograd="TBackward0", backward=(op("aten::t", self_us=3),))
    addmm = op("aten::addmm", scope("aclnnAddmm", *addmm_kernels), self_us=12,
               inputs=((fout,), x, (fin, fout), (), ()), types="c10::BFloat16;c10::BFloat16;c10::BFloat16;Scalar;Scalar",
               autograd="AddmmBackward0", backward=backward)
    root = op("aten::linear", t, addmm, self_us=6, inputs=(x, w, (fout,)))
    return Launch(root, frames)


def relu(shape: Shape, *, dur_us: float, bwd_us: float | None = None, frames: tuple[StackEntry, ...] = RELU_FWD,
         dtype: str = "DT_BF16") -> Launch:
    k = aclnn("aclnnRelu", "Relu", "Relu", AI_VECTOR_CORE, dur_us, inputs=(shape,), outputs=(shape,), dtype=dtype)
    kb = aclnn("aclnnThresholdBackward", "ReluGrad", "ReluGrad", AI_VECTOR_CORE, bwd_us or dur_us * 1.2,
               inputs=(shape, shape), outputs=(shape,), dtype=dtype)
    bwd = (op("aten::threshold_backward", scope("aclnnThresholdBackward", kb), inputs=(shape, shape, ())),)
    root = op("aten::relu", scope("aclnnRelu", k), self_us=10, inputs=(shape,), autograd="ReluBackward0", backward=bwd)
    return Launch(root, frames)


def dropout(shape: Shape, p: float, *, genmask_us: float, domask_us: float, mask_stream: int = -1,
            frames: tuple[StackEntry, ...] = DROPOUT_FWD, dtype: str = "DT_BF16", dsa: bool = False) -> Launch:
    """``nn.Dropout`` in training: aten::dropout > npu::_npu_dropout > mask generation + DoMask.

    ``dsa=True`` uses the acl_op-era DSA mask generator (``DSAStatelessGenBitMask`` on DSA_SQE)."""
    n = 1
    for d in shape:
        n *= d
    mask = ((n + 127) // 128 * 16,)
    if dsa:
        gen = kernel("StatelessDropOutGenMask{n}/DSASTATELESSGENBITMASK", "DSAStatelessGenBitMask", DSA_SQE,
                     genmask_us, inputs=((len(shape),), (), (), ()), outputs=(mask,), dtype="INT64", stream=mask_stream,
                     block_dim=0)
        gen_scope = scope("StatelessDropOutGenMask", gen)
    else:
        gen = aclnn("aclnnDropoutGenMaskV2", "DropOutGenMaskV4", "DropOutGenMaskV4", AI_VECTOR_CORE, genmask_us,
                    inputs=((len(shape),), (), (), ()), outputs=(mask,), dtype="DT_UINT8", stream=mask_stream)
        gen_scope = scope("aclnnDropoutGenMaskV2", gen)
    do = aclnn("aclnnDropoutDoMask", "DropOutDoMask", "DropOutDoMask", AI_VECTOR_CORE, domask_us,
               inputs=(shape, mask, ()), outputs=(shape,), dtype=dtype)
    do_b = aclnn("aclnnDropoutDoMask", "DropOutDoMask", "DropOutDoMask", AI_VECTOR_CORE, domask_us,
                 inputs=(shape, mask, ()), outputs=(shape,), dtype=dtype)
    bwd = (op("npu::npu_dropout_backward", scope("aclnnDropoutDoMask", do_b), inputs=(shape, mask, ())),)
    inner = op("npu::_npu_dropout", gen_scope, scope("aclnnDropoutDoMask", do), self_us=14, inputs=(shape, ()),
               types="c10::BFloat16;double", autograd="NpuDropoutBackward0", backward=bwd)
    root = op("aten::dropout", inner, self_us=6, inputs=(shape, (), ()), types="c10::BFloat16;double;bool",
              concrete_inputs=("", str(p), "True"))
    return Launch(root, frames)


def conv2d(x: Shape, w: Shape, out: Shape, *, conv_us: float, trans_us: float = 4.0, compile: bool = False,
           acl_op: bool = True, bwd_scale: float = 2.0, frames: tuple[StackEntry, ...] = CONV_FWD,
           dtype: str = "FLOAT16") -> Launch:
    """``nn.Conv2d``: aten::conv2d > aten::convolution > aten::_convolution > Conv2D (acl_op) with
    ``trans_Cast_<n>``, ``trans_TransData_<n>`` and ``Conv2D<n>``, or aclnnConvolution."""
    if acl_op:
        ks = (kernel("trans_Cast_{n}", "Cast", AI_VECTOR_CORE, trans_us / 2, inputs=(w,), outputs=(w,), dtype="FLOAT"),
              kernel("trans_TransData_{n}", "TransData", AI_VECTOR_CORE, trans_us, inputs=(x,), outputs=(x,),
                     dtype=dtype, fmt="NC1HWC0"),
              kernel("Conv2D{n}", "Conv2D", AI_CORE, conv_us, inputs=(x, w), outputs=(out,), dtype=dtype,
                     fmt="NC1HWC0", block_dim=24))
        sc = scope("Conv2D", *ks, self_us=10, compile=compile)
        kb = (kernel("trans_TransData_{n}", "TransData", AI_VECTOR_CORE, trans_us, inputs=(out,), outputs=(out,),
                     dtype=dtype, fmt="NC1HWC0"),
              kernel("Conv2DBackpropInput{n}", "Conv2DBackpropInput", AI_CORE, conv_us * bwd_scale / 2,
                     inputs=(x, w, out), outputs=(x,), dtype=dtype, fmt="NC1HWC0", block_dim=24),
              kernel("Conv2DBackpropFilter{n}", "Conv2DBackpropFilter", AI_CORE, conv_us * bwd_scale / 2,
                     inputs=(x, w, out), outputs=(w,), dtype=dtype, fmt="FRACTAL_Z", block_dim=24))
        bsc = (scope("Conv2DBackpropInput", kb[0], kb[1], self_us=8), scope("Conv2DBackpropFilter", kb[2], self_us=8))
    else:
        ks = (aclnn("aclnnConvolution", "TransData", "TransData", AI_VECTOR_CORE, trans_us, inputs=(x,), outputs=(x,),
                    dtype=dtype, fmt="NC1HWC0"),
              aclnn("aclnnConvolution", "Conv2D", "Conv2D", AI_CORE, conv_us, inputs=(x, w), outputs=(out,),
                    dtype=dtype, fmt="NC1HWC0", block_dim=24))
        sc = scope("aclnnConvolution", *ks)
        kb = (aclnn("aclnnConvolutionBackward", "Conv2DBackpropInput", "Conv2DBackpropInput", AI_CORE,
                    conv_us * bwd_scale / 2, inputs=(x, w, out), outputs=(x,), dtype=dtype),
              aclnn("aclnnConvolutionBackward", "Conv2DBackpropFilter", "Conv2DBackpropFilter", AI_CORE,
                    conv_us * bwd_scale / 2, inputs=(x, w, out), outputs=(w,), dtype=dtype))
        bsc = (scope("aclnnConvolutionBackward", *kb),)
    bwd = (op("aten::convolution_backward", *bsc, inputs=(out, x, w)),)
    conv = op("aten::convolution", op("aten::_convolution", sc, self_us=10, inputs=(x, w, (w[0],))), self_us=12,
              inputs=(x, w, (w[0],)), autograd="ConvolutionBackward0", backward=bwd)
    return Launch(op("aten::conv2d", conv, self_us=8, inputs=(x, w, (w[0],))), frames)


def max_pool2d(x: Shape, out: Shape, *, dur_us: float, frames: tuple[StackEntry, ...] = POOL_FWD) -> Launch:
    k = kernel("MaxPoolWithArgmaxV1{n}", "MaxPoolWithArgmaxV1", AI_CORE, dur_us, inputs=(x,), outputs=(out, out),
               dtype="FLOAT16", fmt="NC1HWC0")
    kb = kernel("MaxPoolGradWithArgmaxV1{n}", "MaxPoolGradWithArgmaxV1", AI_CORE, dur_us * 1.5,
                inputs=(x, out, out), outputs=(x,), dtype="FLOAT16", fmt="NC1HWC0")
    bwd = (op("aten::max_pool2d_with_indices_backward", scope("MaxPoolGradWithArgmaxV1", kb), inputs=(out, x)),)
    inner = op("aten::max_pool2d_with_indices", scope("MaxPoolWithArgmaxV1", k), inputs=(x,),
               autograd="MaxPool2DWithIndicesBackward0", backward=bwd)
    return Launch(op("aten::max_pool2d", inner, self_us=5, inputs=(x,)), frames)


def view(name: str = "aten::view", shape: Shape = ()) -> Launch:
    """A shape-only op (no kernels): aten::view / aten::flatten > aten::view."""
    if name == "aten::flatten":
        return Launch(op("aten::flatten", op("aten::view", self_us=3, inputs=(shape, ())), self_us=4, inputs=(shape,)))
    return Launch(op(name, self_us=4, inputs=(shape, ())))


def cross_entropy(tokens: int, classes: int, *, dur_us: float, frames: tuple[StackEntry, ...] = LOSS_FWD) -> Launch:
    logits = (tokens, classes)
    ls = aclnn("aclnnLogSoftmax", "LogSoftmaxV2", "LogSoftmaxV2", AI_VECTOR_CORE, dur_us, inputs=(logits,),
               outputs=(logits,), dtype="FLOAT")
    nll = aclnn("aclnnNLLLoss", "NLLLoss", "NLLLoss", AI_VECTOR_CORE, dur_us * 0.6, inputs=(logits, (tokens,)),
                outputs=((), ()), dtype="FLOAT")
    ls_b = aclnn("aclnnLogSoftmaxBackward", "LogSoftmaxGrad", "LogSoftmaxGrad", AI_VECTOR_CORE, dur_us,
                 inputs=(logits, logits), outputs=(logits,), dtype="FLOAT")
    nll_b = aclnn("aclnnNLLLossBackward", "NLLLossGrad", "NLLLossGrad", AI_VECTOR_CORE, dur_us * 0.6,
                  inputs=((), logits, (tokens,)), outputs=(logits,), dtype="FLOAT")
    log_softmax = op("aten::log_softmax", op("aten::_log_softmax", scope("aclnnLogSoftmax", ls), inputs=(logits, (), ()),
                                             autograd="LogSoftmaxBackward0",
                                             backward=(op("aten::_log_softmax_backward_data",
                                                          scope("aclnnLogSoftmaxBackward", ls_b)),)),
                     inputs=(logits, (), ()))
    nll_loss = op("aten::nll_loss_nd", op("aten::nll_loss", op("aten::nll_loss_forward", scope("aclnnNLLLoss", nll),
                                                               autograd="NllLossBackward0",
                                                               backward=(op("aten::nll_loss_backward",
                                                                            scope("aclnnNLLLossBackward", nll_b)),))))
    return Launch(op("aten::cross_entropy_loss", log_softmax, nll_loss, self_us=10, inputs=(logits, (tokens,))), frames)


def to_device(shape: Shape, *, nbytes: int, copy_us: float, self_us: float = 60.0) -> Launch:
    """``x.to(device)``: aten::to > aten::_to_copy > aten::copy_ launching an H2D MEMCPY_ASYNC."""
    k = KernelSpec("MEMCPY_ASYNC", "MEMCPY_ASYNC", "N/A", us(copy_us), memcpy_bytes=nbytes)
    copy = OpSpec("aten::copy_", self_ns=us(self_us), kernels=(k,), input_dims=_dims((shape, shape, ())),
                  input_types="float;float;bool")
    to_copy = op("aten::_to_copy", op("aten::empty_strided", self_us=10), copy, self_us=10, inputs=(shape,),
                 types="float")
    return Launch(op("aten::to", to_copy, self_us=8, inputs=(shape, (), (), ()), types="float;None;None;bool"))


def item(frames: tuple[StackEntry, ...] = ()) -> Launch:
    """``t.item()``: aten::item > aten::_local_scalar_dense, blocking until the device drains."""
    inner = OpSpec("aten::_local_scalar_dense", self_ns=us(4), input_dims="", input_types="float", sync=True)
    return Launch(op("aten::item", inner, self_us=6, inputs=((),), types="float"), frames)


def synchronize() -> Launch:
    """``torch.npu.synchronize()`` (no aten op, just the runtime call)."""
    return Launch(OpSpec("npu::synchronize", self_ns=us(4), sync=True))


def dataloader(ms: float, *, batch: int, sample_shape: Shape, workers: int = 0) -> Launch:
    """``next(iter(loader))``: the DataLoader record_function label with the collate ops inside."""
    it = "_SingleProcessDataLoaderIter" if workers == 0 else "_MultiProcessingDataLoaderIter"
    stack = op("aten::stack", op("aten::cat", self_us=40, inputs=tuple((1, *sample_shape) for _ in range(2))),
               self_us=20, frames=COLLATE)
    stack_y = op("aten::stack", op("aten::cat", self_us=8), self_us=6, frames=COLLATE)
    total = us(ms * 1000)
    body = stack.self_ns + 40_000 + stack_y.self_ns + 8000 + 5000
    return Launch(OpSpec(f"enumerate(DataLoader)#{it}.__next__", self_ns=max(total - body, 1000),
                         children=(stack, stack_y)), DATALOADER_NEXT)


def adamw_step(params: Sequence[Shape], *, kernel_us: float, fused: bool = False, name: str = "AdamW") -> Launch:
    """``optimizer.step()``: ``Optimizer.step#AdamW.step`` with the single-tensor update per parameter
    (mul_, lerp-as-add_, addcmul_, sqrt, div, add_, addcdiv_), or ``fused=True`` (``fused_adamw``)."""
    if fused:
        return Launch(OpSpec(f"Optimizer.step#{name}.step", self_ns=us(40), children=fused_adamw(params, kernel_us)),
                      OPTIM_WRAPPER)
    children: list[OpSpec] = []
    for shape in params:
        seq = (("aten::mul_", "aclnnInplaceMuls", "Muls"), ("aten::add_", "aclnnInplaceAdd", "Add"),
               ("aten::mul_", "aclnnInplaceMuls", "Muls"), ("aten::addcmul_", "aclnnInplaceAddcmul", "Addcmul"),
               ("aten::sqrt", "aclnnSqrt", "Sqrt"), ("aten::div", "aclnnDivs", "RealDiv"),
               ("aten::add_", "aclnnInplaceAdds", "Add"), ("aten::addcdiv_", "aclnnInplaceAddcdiv", "Addcdiv"))
        for aten, api, typ in seq:
            impl = f"{typ}AiCore"
            k = aclnn(api, impl, typ, AI_VECTOR_CORE, kernel_us, inputs=(shape, shape), outputs=(shape,),
                      dtype="FLOAT")
            children.append(op(aten, scope(api, k, self_us=4), self_us=7, inputs=(shape, shape), types="float;float",
                               frames=ADAMW_SINGLE))
    return Launch(OpSpec(f"Optimizer.step#{name}.step", self_ns=us(40), children=tuple(children)), OPTIM_WRAPPER)


def fused_adamw(params: Sequence[Shape], kernel_us: float) -> tuple[OpSpec, ...]:
    """``fused=True`` as torch_npu runs it: torch's ``_fused_adam`` adds 1 to every step counter
    with one ``_foreach_add_``, then ``aten::_fused_adamw_``, which op-plugin
    (FusedAdamWKernelNpuOpApi.cpp) runs as a loop over the parameters: ``state_steps[i].sub(1)``
    and one ``aclnnApplyAdamWV2`` each. ApplyAdamWV2 moves 7 tensors (reads param, m, v, grad;
    writes param, m, v) where the unfused update's 8 kernels move 3 each: at the same rate, 7/3
    of one unfused kernel's time (the generator's choice); the scalar kernels take 1.6 µs, as the
    clip's do."""
    n = len(params)
    steps = aclnn("aclnnForeachAddScalarV2", "ForeachAddScalar", "ForeachAddScalar", AI_VECTOR_CORE, 2.0,
                  inputs=((),) * n, outputs=((),) * n, dtype="FLOAT")
    inner: list[OpSpec] = []
    for shape in params:
        sub = aclnn("aclnnSubs", "SubAiCore", "Sub", AI_VECTOR_CORE, 1.6, inputs=((),), outputs=((),), dtype="FLOAT")
        inner.append(op("aten::sub", scope("aclnnSubs", sub), inputs=((), ()), types="float;Scalar"))
        k = aclnn("aclnnApplyAdamWV2", "ApplyAdamWV2", "ApplyAdamWV2", AI_VECTOR_CORE, kernel_us * 7 / 3,
                  inputs=(shape,) * 4, outputs=(shape,) * 3, dtype="FLOAT")
        inner.append(scope("aclnnApplyAdamWV2", k))
    return (op("aten::_foreach_add_", scope("aclnnForeachAddScalarV2", steps), inputs=((),) * n, frames=ADAMW_FUSED),
            op("aten::_fused_adamw_", *inner, inputs=(params[0],) * 4, frames=ADAMW_FUSED))


def zero_grad(params: Sequence[Shape], *, kernel_us: float = 1.5, name: str = "AdamW") -> Launch:
    children = tuple(op("aten::zero_", scope("aclnnInplaceZero", aclnn("aclnnInplaceZero", "ZerosLikeAiCore", "ZerosLike",
                                                                        AI_VECTOR_CORE, kernel_us, inputs=(s,),
                                                                        outputs=(s,), dtype="FLOAT")),
                        inputs=(s,), types="float") for s in params)
    return Launch(OpSpec(f"Optimizer.zero_grad#{name}.zero_grad", self_ns=us(20), children=children), ZERO_GRAD)


def grad_seed() -> Launch:
    """What ``loss.backward()`` runs on the calling thread: the ones_like grad seed."""
    k = aclnn("aclnnInplaceOne", "OnesLikeAiCore", "OnesLike", AI_VECTOR_CORE, 1.3, inputs=((),), outputs=((),),
              dtype="FLOAT")
    return Launch(op("aten::ones_like", scope("aclnnInplaceOne", k), inputs=((),), types="float"), BACKWARD)


def allreduce(size_mb: float, *, dur_us: float, link: str = "HCCS", transit_share: float = 0.8,
              wait_share: float = 0.1, core: str = COMMUNICATION, packet_mb: float | None = None) -> OpSpec:
    """A DDP bucket all-reduce of ``size_mb`` (10^6 B) of gradients: ``c10d::allreduce_`` launching
    ``hcom_allReduce__<n>_0_1`` on the comm stream."""
    k = KernelSpec("hcom_allReduce__{n}_0_1", "hcom_allReduce_", core, us(dur_us), block_dim=0,
                   comm=CommInfo(size_mb=size_mb, link=link, transit_share=transit_share, wait_share=wait_share,
                                 packet_mb=packet_mb))
    return OpSpec("c10d::allreduce_", self_ns=us(30), kernels=(k,))


def compile_event(api: str = "AscendCL@aclopCompileAndExecute", dur_us: float = 400.0) -> CannSpec:
    return CannSpec(api, us(dur_us))


# -- elementwise and transformer pieces ----------------------------------------------------------------


def elementwise(aten: str, api: str, op_type: str, shape: Shape, *, dur_us: float, n_inputs: int = 2,
                autograd: str = "", bwd: tuple[OpSpec, ...] = (), core: str = AI_VECTOR_CORE,
                frames: tuple[StackEntry, ...] = (), dtype: str = "DT_BF16", scalar: bool = False) -> Launch:
    """One aten op launching one kernel (``aten::mul`` > ``aclnnMul`` > ``aclnnMul_MulAiCore_Mul``)."""
    ins: tuple = (shape,) * n_inputs
    k = aclnn(api, f"{op_type}AiCore", op_type, core, dur_us, inputs=ins, outputs=(shape,), dtype=dtype)
    dims = ins if not scalar else (shape, ())
    return Launch(op(aten, scope(api, k), inputs=dims, autograd=autograd, backward=bwd), frames)


def backward_of(aten: str, api: str, op_type: str, shape: Shape, *, dur_us: float, n_inputs: int = 2,
                core: str = AI_VECTOR_CORE) -> tuple[OpSpec, ...]:
    k = aclnn(api, f"{op_type}AiCore", op_type, core, dur_us, inputs=(shape,) * n_inputs, outputs=(shape,))
    return (op(aten, scope(api, k), inputs=(shape,) * n_inputs),)


def contiguous(x: Shape, out: Shape, *, dur_us: float) -> Launch:
    """``t.contiguous()`` of a permuted/transposed view ``x`` laid out as ``out``: aten::contiguous >
    aten::clone > aten::copy_ > aclnnInplaceCopy (a Transpose kernel on the vector core, NPU215)."""
    copy = kernel("aclnnInplaceCopy_TransposeAiCore_Transpose", "Transpose", AI_VECTOR_CORE, dur_us,
                  inputs=(x,), outputs=(out,))
    return Launch(OpSpec("aten::contiguous", 3000, children=(
        op("aten::clone", op("aten::empty_like", self_us=3),
           op("aten::copy_", scope("aclnnInplaceCopy", copy), inputs=(out, x, ())),
           inputs=(x,), autograd="CloneBackward0", backward=(op("aten::clone", self_us=3),)),)))


def matmul(a: Shape, b: Shape, out: Shape, *, dur_us: float, batched: bool = True, frames: tuple[StackEntry, ...] = (),
           dtype: str = "DT_BF16") -> Launch:
    """``a @ b``: aten::matmul > aten::bmm > aclnnBatchMatMul (BatchMatMulV2), or aten::mm > aclnnMm."""
    if batched:
        k = aclnn("aclnnBatchMatMul", "BatchMatMulV2Common", "BatchMatMulV2", AI_CORE, dur_us, inputs=(a, b),
                  outputs=(out,), dtype=dtype, block_dim=20)
        kb = tuple(aclnn("aclnnBatchMatMul", "BatchMatMulV2Common", "BatchMatMulV2", AI_CORE, dur_us, inputs=(out, b),
                         outputs=(a,), dtype=dtype, block_dim=20) for _ in range(2))
        inner = op("aten::bmm", scope("aclnnBatchMatMul", k), inputs=(a, b), autograd="BmmBackward0",
                   backward=tuple(op("aten::bmm", scope("aclnnBatchMatMul", x)) for x in kb))
    else:
        k = aclnn("aclnnMm", "MatMulV3Common", "MatMulV3", AI_CORE, dur_us, inputs=(a, b), outputs=(out,), dtype=dtype,
                  block_dim=20)
        kb = tuple(aclnn("aclnnMm", "MatMulV3Common", "MatMulV3", AI_CORE, dur_us, inputs=(out, b), outputs=(a,),
                         dtype=dtype, block_dim=20) for _ in range(2))
        inner = op("aten::mm", scope("aclnnMm", k), inputs=(a, b), autograd="MmBackward0",
                   backward=tuple(op("aten::mm", scope("aclnnMm", x)) for x in kb))
    return Launch(op("aten::matmul", inner, inputs=(a, b)), frames)


def softmax(shape: Shape, *, dur_us: float, frames: tuple[StackEntry, ...] = F_SOFTMAX) -> Launch:
    k = aclnn("aclnnSoftmax", "SoftmaxV2", "SoftmaxV2", AI_VECTOR_CORE, dur_us, inputs=(shape,), outputs=(shape,))
    kb = aclnn("aclnnSoftmaxBackward", "SoftmaxGrad", "SoftmaxGrad", AI_VECTOR_CORE, dur_us * 1.2,
               inputs=(shape, shape), outputs=(shape,))
    inner = op("aten::_softmax", scope("aclnnSoftmax", k), inputs=(shape, (), ()), autograd="SoftmaxBackward0",
               backward=(op("aten::_softmax_backward_data", scope("aclnnSoftmaxBackward", kb)),))
    return Launch(op("aten::softmax", inner, inputs=(shape, (), ())), frames)


def masked_fill(shape: Shape, mask: Shape, *, dur_us: float, inplace: bool = False, copy_us: float = 2.0,
                frames: tuple[StackEntry, ...] = ()) -> Launch:
    """``x.masked_fill(mask, v)`` with a bool ``mask``: aten::masked_fill > aten::clone (the copy
    the out-of-place op fills) + aten::masked_fill_ > aclnnInplaceMaskedFillScalar (MaskedFill);
    ``inplace``: ``x.masked_fill_(mask, v)``, the aten::masked_fill_ alone. The backward fills the
    gradient with 0 where masked: one MaskedFill. The clone's kernel type (ViewCopy) is [inferred]."""
    fill = aclnn("aclnnInplaceMaskedFillScalar", "MaskedFillAiCore", "MaskedFill", AI_VECTOR_CORE, dur_us,
                 inputs=(shape, mask, ()), outputs=(shape,))
    fill_b = aclnn("aclnnInplaceMaskedFillScalar", "MaskedFillAiCore", "MaskedFill", AI_VECTOR_CORE, dur_us,
                   inputs=(shape, mask, ()), outputs=(shape,))
    types = ";".join(["c10::BFloat16", "bool", "Scalar"])
    back = (op("aten::masked_fill_", scope("aclnnInplaceMaskedFillScalar", fill_b), inputs=(shape, mask, ()),
               types=types),)
    inner = op("aten::masked_fill_", scope("aclnnInplaceMaskedFillScalar", fill), inputs=(shape, mask, ()), types=types,
               **({"autograd": "MaskedFillBackward0", "backward": back} if inplace else {}))
    if inplace:
        return Launch(inner, frames)
    copy = aclnn("aclnnInplaceCopy", "ViewCopy", "ViewCopy", AI_VECTOR_CORE, copy_us, inputs=(shape,), outputs=(shape,))
    clone = op("aten::clone", op("aten::empty_like", self_us=3), op("aten::copy_", scope("aclnnInplaceCopy", copy),
                                                                   inputs=(shape, shape, ())), inputs=(shape,))
    return Launch(op("aten::masked_fill", clone, inner, inputs=(shape, mask, ()), types=types,
                     autograd="MaskedFillBackward0", backward=back), frames)


def embedding(tokens: int, vocab: int, dim: int, *, dur_us: float, frames: tuple[StackEntry, ...] = ()) -> Launch:
    k = aclnn("aclnnEmbedding", "GatherV2", "GatherV2", AI_VECTOR_CORE, dur_us, inputs=((vocab, dim), (tokens,)),
              outputs=((tokens, dim),))
    kb = aclnn("aclnnEmbeddingDenseBackward", "UnsortedSegmentSum", "UnsortedSegmentSum", AI_VECTOR_CORE, dur_us * 3,
               inputs=((tokens, dim), (tokens,)), outputs=((vocab, dim),))
    inner = op("aten::embedding", scope("aclnnEmbedding", k), inputs=((vocab, dim), (tokens,)),
               autograd="EmbeddingBackward0",
               backward=(op("aten::embedding_backward", op("aten::embedding_dense_backward",
                                                              scope("aclnnEmbeddingDenseBackward", kb))),))
    return Launch(inner, frames)


def aicpu_cast(shape: Shape, *, dur_us: float, frames: tuple[StackEntry, ...] = ()) -> Launch:
    """A dtype cast that falls back to AI CPU (``aclnnCast_CastAiCpu_Cast``, NPU201)."""
    k = aclnn("aclnnCast", "CastAiCpu", "Cast", AI_CPU, dur_us, inputs=(shape,), outputs=(shape,), dtype="DT_DOUBLE")
    to_copy = op("aten::_to_copy", op("npu::_npu_dtype_cast", scope("aclnnCast", k)), inputs=(shape,))
    return Launch(op("aten::to", to_copy, inputs=(shape, (), (), ())), frames)


def linear_nd(tokens: int, fin: int, fout: int, *, mm_us: float, dtype: str = "DT_BF16", bwd_scale: float = 2.0,
              matmul_type: str = "MatMulV2", core: str = AI_CORE, pmu: dict[str, float] | None = None,
              frames: tuple[StackEntry, ...] = LINEAR_FWD) -> Launch:
    """``nn.Linear(bias=False)`` on a 3-D input: aten::linear > aten::t + aten::matmul > aten::view,
    aten::mm > aclnnMm, aten::_unsafe_view (the input is folded to 2-D)."""
    x, w, out = (tokens, fin), (fout, fin), (tokens, fout)
    impl = "MatMulV3Common" if matmul_type == "MatMulV3" else "MatMulCommon"
    mm = aclnn("aclnnMm", impl, matmul_type, core, mm_us, inputs=(x, (fin, fout)), outputs=(out,), dtype=dtype,
               block_dim=20, pmu=pmu)
    bwd = tuple(
        op("aten::mm", scope("aclnnMm", aclnn("aclnnMm", impl, matmul_type, core, mm_us * bwd_scale / 2,
                                                 inputs=ins, outputs=(o,), dtype=dtype, block_dim=20, pmu=pmu)),
           inputs=ins)
        for ins, o in ((((tokens, fout), (fout, fin)), x), (((fout, tokens), x), w)))
    matmul = op("aten::matmul", op("aten::view", self_us=3), op("aten::mm", scope("aclnnMm", mm), inputs=(x, (fin, fout)),
                                                                 autograd="MmBackward0", backward=bwd),
                op("aten::_unsafe_view", self_us=3), self_us=8, inputs=((tokens, fin), (fin, fout)))
    t = op("aten::t", op("aten::transpose", op("aten::as_strided", self_us=2), self_us=3), self_us=4, inputs=(w,),
           autograd="TBackward0", backward=(op("aten::t", self_us=3),))
    return Launch(op("aten::linear", t, matmul, self_us=6, inputs=(x, w)), frames)


def batch_norm(shape: Shape, *, dur_us: float, frames: tuple[StackEntry, ...] = ()) -> Launch:
    """``nn.BatchNorm2d`` in training: reduce + update kernels, BNTrainingUpdateGrad/ReduceGrad backward."""
    c = (shape[1],)
    ks = (aclnn("aclnnBatchNorm", "BNTrainingReduce", "BNTrainingReduce", AI_VECTOR_CORE, dur_us * 0.4,
                inputs=(shape,), outputs=(c, c), dtype="FLOAT16", fmt="NC1HWC0"),
          aclnn("aclnnBatchNorm", "BNTrainingUpdate", "BNTrainingUpdate", AI_VECTOR_CORE, dur_us * 0.6,
                inputs=(shape, c, c, c, c, c, c), outputs=(shape, c, c, c, c), dtype="FLOAT16", fmt="NC1HWC0"))
    kb = (aclnn("aclnnBatchNormBackward", "BNTrainingUpdateGrad", "BNTrainingUpdateGrad", AI_VECTOR_CORE, dur_us * 0.5,
                inputs=(shape, shape, c, c), outputs=(c, c), dtype="FLOAT16", fmt="NC1HWC0"),
          aclnn("aclnnBatchNormBackward", "BNTrainingReduceGrad", "BNTrainingReduceGrad", AI_VECTOR_CORE,
                dur_us * 0.7, inputs=(shape, shape, c, c, c, c, c), outputs=(shape,), dtype="FLOAT16", fmt="NC1HWC0"))
    native = op("aten::native_batch_norm", scope("aclnnBatchNorm", *ks), inputs=(shape, c, c, c, c, (), (), ()),
                autograd="NativeBatchNormBackward0",
                backward=(op("aten::native_batch_norm_backward", scope("aclnnBatchNormBackward", *kb)),))
    inner = op("aten::_batch_norm_impl_index", native, inputs=(shape, c, c, c, c, (), (), (), ()))
    return Launch(op("aten::batch_norm", inner, inputs=(shape, c, c, c, c, (), (), (), ())), frames)


def sgd_step(params: Sequence[Shape], *, kernel_us: float, name: str = "SGD") -> Launch:
    """``optimizer.step()`` of single-tensor SGD with momentum: per parameter mul_, add_, add_."""
    children = []
    for shape in params:
        for aten, api, typ in (("aten::mul_", "aclnnInplaceMuls", "Muls"), ("aten::add_", "aclnnInplaceAdd", "Add"),
                               ("aten::add_", "aclnnInplaceAdd", "Axpy")):
            k = aclnn(api, f"{typ}AiCore", typ, AI_VECTOR_CORE, kernel_us, inputs=(shape, shape), outputs=(shape,),
                      dtype="FLOAT")
            children.append(op(aten, scope(api, k, self_us=4), self_us=7, inputs=(shape, shape), types="float;float",
                               frames=(lib("torch/optim/sgd.py", 309, "_single_tensor_sgd", 271),
                                       lib("torch/optim/sgd.py", 126, "step", 100))))
    return Launch(OpSpec(f"Optimizer.step#{name}.step", self_ns=us(40), children=tuple(children)), OPTIM_WRAPPER)


def sgd_foreach_step(params: Sequence[Shape], *, kernel_us: float, per_tensor_us: float, name: str = "SGD") -> Launch:
    """``optimizer.step()`` of multi-tensor (foreach) SGD with momentum and weight decay, as the real
    torch_npu 2.1 AlexNet job records it: ``_foreach_add`` (weight decay), ``_foreach_mul_`` and
    ``_foreach_add_`` (momentum), ``_foreach_add_`` (the update), each one ``Foreach*`` kernel over
    every parameter, each with one ``aten::result_type`` per tensor on the host."""
    dims = tuple(params)
    steps = (("aten::_foreach_add", "aclnnForeachAddListV2", "ForeachAddList", 293, 2),
             ("aten::_foreach_mul_", "aclnnForeachMulScalarV2", "ForeachMulScalar", 307, 1),
             ("aten::_foreach_add_", "aclnnForeachAddListV2", "ForeachAddList", 308, 2),
             ("aten::_foreach_add_", "aclnnForeachAddListV2", "ForeachAddList", 320, 2))
    children = []
    for aten, api, typ, line, lists in steps:
        k = aclnn(api, api.removeprefix("aclnn"), typ, AI_VECTOR_CORE, kernel_us, inputs=dims * lists, outputs=dims,
                  dtype="FLOAT")
        per_tensor = tuple(OpSpec("aten::result_type", self_ns=us(per_tensor_us)) for _ in params)
        children.append(op(aten, *per_tensor, scope(api, k, self_us=4), self_us=7, inputs=dims * lists,
                           types=";".join(["float"] * len(dims) * lists),
                           frames=(lib("torch/optim/sgd.py", line, "_multi_tensor_sgd", 266),
                                   lib("torch/optim/sgd.py", 220, "sgd", 185), lib("torch/optim/sgd.py", 75, "step", 55))))
    return Launch(OpSpec(f"Optimizer.step#{name}.step", self_ns=us(40), children=tuple(children)), OPTIM_WRAPPER)


def zero_grad_to_none(name: str) -> Launch:
    """``optimizer.zero_grad()`` with ``set_to_none=True`` (the default): the label, no kernels."""
    return Launch(OpSpec(f"Optimizer.zero_grad#{name}.zero_grad", self_ns=us(25)), ZERO_GRAD)


def clip_grad_norm(params: Sequence[Shape], *, norm_us: float, frames: tuple[StackEntry, ...] = ()) -> tuple[Launch, ...]:
    """``clip_grad_norm_`` without foreach: a norm per gradient (LpNormReduceV2/LpNormUpdateV2),
    stack + total norm, then ``add-reciprocal-mul`` and one ``mul_`` per gradient (NPU221)."""
    clip = lambda line, func, d: lib("torch/nn/utils/clip_grad.py", line, func, d)  # noqa: E731
    norm_frames = (clip(61, "_get_total_norm", 31), clip(138, "clip_grad_norm_", 98)) + tuple(frames)
    scale_frames = (clip(172, "_clip_grads_with_norm_", 143), clip(139, "clip_grad_norm_", 98)) + tuple(frames)
    out: list[Launch] = []
    for shape in params:
        ks = (aclnn("aclnnLinalgVectorNorm", "LpNormReduceV2", "LpNormReduceV2", AI_VECTOR_CORE, norm_us,
                    inputs=(shape,), outputs=((),), dtype="FLOAT"),
              aclnn("aclnnLinalgVectorNorm", "LpNormUpdateV2", "LpNormUpdateV2", AI_VECTOR_CORE, norm_us / 2,
                    inputs=((),), outputs=((),), dtype="FLOAT"))
        out.append(Launch(op("aten::linalg_vector_norm", scope("aclnnLinalgVectorNorm", *ks), inputs=(shape, (), (), ()),
                             types="float;Scalar;None;bool"), norm_frames))
    n = len(params)
    stack_k = aclnn("aclnnStack", "ConcatD", "ConcatD", AI_VECTOR_CORE, 2.0, inputs=((),) * n, outputs=((n,),),
                    dtype="FLOAT")
    out.append(Launch(op("aten::stack", op("aten::cat", scope("aclnnStack", stack_k))), norm_frames))
    total = (aclnn("aclnnLinalgVectorNorm", "LpNormReduceV2", "LpNormReduceV2", AI_VECTOR_CORE, 2.0, inputs=((n,),),
                   outputs=((),), dtype="FLOAT"),)
    out.append(Launch(op("aten::linalg_vector_norm", scope("aclnnLinalgVectorNorm", *total)), norm_frames))
    for aten, api, typ in (("aten::add", "aclnnAdds", "Add"), ("aten::reciprocal", "aclnnReciprocal", "Reciprocal"),
                           ("aten::mul", "aclnnMuls", "Muls"), ("aten::clamp", "aclnnClamp", "ClipByValue")):
        k = aclnn(api, f"{typ}AiCore", typ, AI_VECTOR_CORE, 1.6, inputs=((),), outputs=((),), dtype="FLOAT")
        out.append(Launch(op(aten, scope(api, k), inputs=((), ())), scale_frames))
    for shape in params:
        k = aclnn("aclnnInplaceMul", "MulAiCore", "Mul", AI_VECTOR_CORE, norm_us, inputs=(shape, ()), outputs=(shape,),
                  dtype="FLOAT")
        out.append(Launch(op("aten::mul_", scope("aclnnInplaceMul", k), inputs=(shape, ())), scale_frames))
    return tuple(out)


def clip_grad_norm_foreach(params: Sequence[Shape], *, norm_us: float,
                           frames: tuple[StackEntry, ...] = ()) -> tuple[Launch, ...]:
    """``clip_grad_norm_(..., foreach=True)``: one multi-tensor norm over every gradient, the total
    norm and ``add-reciprocal-mul-clamp`` as in ``clip_grad_norm``, one multi-tensor ``mul_``.
    Each multi-tensor kernel takes 4x a per-tensor kernel's time (the generator's choice, as for
    the fused AdamW)."""
    clip = lambda line, func, d: lib("torch/nn/utils/clip_grad.py", line, func, d)  # noqa: E731
    norm_frames = (clip(61, "_get_total_norm", 31), clip(138, "clip_grad_norm_", 98)) + tuple(frames)
    scale_frames = (clip(172, "_clip_grads_with_norm_", 143), clip(139, "clip_grad_norm_", 98)) + tuple(frames)
    n = len(params)
    norms = aclnn("aclnnForeachNorm", "ForeachNorm", "ForeachNorm", AI_VECTOR_CORE, 4 * norm_us,
                  inputs=tuple(params), outputs=((),) * n, dtype="FLOAT")
    out = [Launch(op("aten::_foreach_norm", scope("aclnnForeachNorm", norms)), norm_frames)]
    per_tensor = clip_grad_norm(params, norm_us=norm_us, frames=frames)
    out += per_tensor[n:n + 6]  # stack, the total norm, add, reciprocal, mul, clamp
    mul = aclnn("aclnnForeachMulScalar", "ForeachMulScalar", "ForeachMulScalar", AI_VECTOR_CORE, 4 * norm_us,
                inputs=tuple(params), outputs=tuple(params), dtype="FLOAT")
    out.append(Launch(op("aten::_foreach_mul_", scope("aclnnForeachMulScalar", mul)), scale_frames))
    return tuple(out)


def no_kernel(name: str, *, inputs: Shapes = (), autograd: str = "", children: tuple[OpSpec, ...] = (),
              frames: tuple[StackEntry, ...] = ()) -> Launch:
    """A view/shape op without kernels (aten::view, aten::transpose, aten::chunk ...)."""
    return Launch(op(name, *children, self_us=4, inputs=inputs, autograd=autograd,
                     backward=(op(name, self_us=3),) if autograd else ()), frames)
