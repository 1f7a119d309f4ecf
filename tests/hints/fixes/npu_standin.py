"""A stand-in for the torch_npu APIs the fixes emit, written from their documented signatures
and semantics (torch_npu 2.14.0) so fixed code can run on CPU in tests.

It only exists in tests: the product never imports torch or torch_npu.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Iterator

import torch
import torch.nn.functional as F


def _rms_norm(self, gamma, epsilon=1e-06):
    rstd = torch.rsqrt(self.pow(2).mean(-1, keepdim=True) + epsilon)
    return self * rstd * gamma, rstd


def _swiglu(self, dim=-1):
    a, b = self.chunk(2, dim=dim)
    return F.silu(a) * b


def _rotary_mul(input, r1, r2, rotary_mode="half", rotate=None):
    assert rotary_mode == "half"
    x1, x2 = torch.chunk(input, 2, -1)
    return r1 * input + r2 * torch.cat((-x2, x1), dim=-1)


def _fusion_attention(query, key, value, head_num, input_layout, *, pse=None, padding_mask=None, atten_mask=None,
                      scale=1.0, keep_prob=1.0, pre_tockens=2147483647, next_tockens=2147483647, inner_precise=0,
                      prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0,
                      gen_mask_parallel=True, sync=False, softmax_layout=""):
    assert input_layout == "BNSD" and query.shape[1] == head_num
    scores = query @ key.transpose(-2, -1) * scale
    if atten_mask is not None:
        scores = scores.masked_fill(atten_mask, float("-inf"))  # True = masked out
    probs = torch.softmax(scores, dim=-1)
    if keep_prob < 1.0:
        probs = F.dropout(probs, p=1 - keep_prob)
    out = probs @ value
    return out, None, None, None


def _confusion_transpose(self, perm, shape, transpose_first):
    if transpose_first:
        return self.permute(*perm).contiguous().reshape(shape)
    return self.reshape(shape).permute(*perm)


def _scaled_masked_softmax(x, mask, scale=1.0, fixed_triu_mask=False):
    return torch.softmax((x * scale).masked_fill(mask, float("-inf")), dim=-1)


def _add_layer_norm(x1, x2, gamma, beta, epsilon=1e-5, additional_output=False):
    x = x1 + x2
    y = F.layer_norm(x, gamma.shape, gamma, beta, epsilon)
    mean = x.mean(-1, keepdim=True)
    rstd = torch.rsqrt(x.var(-1, keepdim=True, unbiased=False) + epsilon)
    return y, mean, rstd, (x if additional_output else torch.empty(0))


class _FusedMixin:
    def clip_grad_norm_fused_(self, max_norm, norm_type=2):
        params = [p for g in self.param_groups for p in g["params"]]
        return torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)


class NpuFusedAdamW(_FusedMixin, torch.optim.AdamW):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)


class NpuFusedAdam(_FusedMixin, torch.optim.Adam):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)


class NpuFusedSGD(_FusedMixin, torch.optim.SGD):
    def __init__(self, params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False):
        super().__init__(params, lr, momentum, dampening, weight_decay, nesterov)


def make() -> types.ModuleType:
    m = types.ModuleType("torch_npu")
    calls: list[dict] = []
    config = types.SimpleNamespace(allow_internal_format=True)

    def set_compile_mode(*, jit_compile):
        calls.append({"jit_compile": jit_compile})

    # a machine without an NPU: the scripts' `torch.npu.is_available()` says so, as on a CPU host
    m.npu = types.SimpleNamespace(config=config, set_compile_mode=set_compile_mode, compile_calls=calls,
                                  is_available=lambda: False, synchronize=lambda: None)
    m.npu_rms_norm = _rms_norm
    m.npu_swiglu = _swiglu
    m.npu_rotary_mul = _rotary_mul
    m.npu_fusion_attention = _fusion_attention
    m.npu_confusion_transpose = _confusion_transpose
    m.npu_scaled_masked_softmax = _scaled_masked_softmax
    m.npu_add_layer_norm = _add_layer_norm
    m.optim = types.SimpleNamespace(NpuFusedAdamW=NpuFusedAdamW, NpuFusedAdam=NpuFusedAdam, NpuFusedSGD=NpuFusedSGD)
    return m


def _eager_npu_backend(gm, example_inputs):  # noqa: ANN001, ARG001 - the torch.compile backend protocol
    """What torch_npu's "npu" backend does without torchair: run the captured graph eagerly."""
    return gm.forward


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes ``import torch_npu`` load the stand-in and, like the real package, register the
    ``npu`` backend of ``torch.compile`` and ``torch.npu`` as side effects of that import (and only then)."""

    def __init__(self) -> None:
        self.registered: list[str] = []
        self.patched_torch = False

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001, ANN201, ARG002
        if fullname != "torch_npu":
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):  # noqa: ANN001, ANN201, ARG002
        return make()

    def exec_module(self, module) -> None:  # noqa: ANN001, ARG002
        from torch._dynamo.backends import registry

        if "npu" not in registry.list_backends(exclude_tags=()):
            registry.register_backend(_eager_npu_backend, name="npu")
            self.registered.append("npu")
        if not hasattr(torch, "npu"):
            torch.npu = module.npu
            self.patched_torch = True


@contextlib.contextmanager
def importable() -> Iterator[list[str]]:
    """``import torch_npu`` works inside the block; yields the backends its import registered."""
    from torch._dynamo.backends import registry

    finder = _Finder()
    saved = sys.modules.pop("torch_npu", None)
    sys.meta_path.insert(0, finder)
    try:
        yield finder.registered
    finally:
        sys.meta_path.remove(finder)
        sys.modules.pop("torch_npu", None)
        if saved is not None:
            sys.modules["torch_npu"] = saved
        if finder.patched_torch:
            del torch.npu
        for name in finder.registered:
            registry._COMPILER_FNS.pop(name, None)
            registry._BACKENDS.pop(name, None)
        torch._dynamo.reset()
