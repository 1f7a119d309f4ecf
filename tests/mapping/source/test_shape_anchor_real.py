"""Shape and sequence anchoring on real torch_npu data: the stacks and module events of the
Ascend-msinsight AlexNet capture are removed, and every kernel the stackless anchoring places
must land on the line the recorded stacks gave (no wrong anchor); every forward kernel the stacks
map is placed (the nn.Sequential elements are positions of the flattened forward), and
every backward one too: 144 of 144 (before: 132; the ReLU/Dropout gradients after the loss and
the avgpool/maxpool gradients were left, the classifier's gradient matmuls taken for forward uses
and a pooling op's several kernels for several calls)."""

from __future__ import annotations

import dataclasses

from conftest import shared_fixture

from msprof_lsp.mapping.source.attribute import attribute
from msprof_lsp.mapping.profile.discover import discover
from msprof_lsp.mapping.profile.load import load_location
from msprof_lsp.mapping.spans import Confidence
from msprof_lsp.mapping.source.workspace import SourceWorkspace


def test_stackless_anchors_on_real_alexnet_agree_with_its_stacks():
    folder = shared_fixture("Ascend-msinsight/text/level1/rank0_ascend_pt")
    source = shared_fixture("Ascend-msinsight/workspace")
    (loc,) = discover([folder])
    p = load_location(loc, use_cache=False)
    with_stacks = attribute(p, SourceWorkspace([source]))
    kernels = p.kernels.copy()
    kernels["stack"] = -1
    host = p.host_ops.copy()
    host["stack"] = -1
    host["module"] = -1
    bare = dataclasses.replace(p, kernels=kernels, host_ops=host, modules=p.modules.iloc[:0], stacks=[])
    stackless = attribute(bare, SourceWorkspace([source]))
    by_shape = agreed = 0
    matmul_rows = set(p.kernels.index[p.kernels["type"].astype(str).str.startswith("MatMul")])
    for i in range(len(p.kernels)):
        site = stackless.site_of_kernel(i)
        if site is None:
            continue
        assert site.confidence is Confidence.INFERRED
        ref = with_stacks.site_of_kernel(i)
        if ref is not None:
            assert (ref.span.path, ref.span.line) == (site.span.path, site.span.line), (i, ref.note, site.note)
            agreed += 1
        if "by shape" in site.note:
            by_shape += 1
    mapped = [i for i in range(len(p.kernels)) if with_stacks.site_of_kernel(i) is not None]
    forward = [i for i in mapped if not bool(p.kernels["backward"].iloc[i])]
    assert forward and all(stackless.site_of_kernel(i) is not None for i in forward)
    assert agreed == len(mapped), (agreed, len(mapped))
    # every forward and backward matmul of the three classifier layers is found by its shape
    assert matmul_rows and all(stackless.site_of_kernel(i) is not None for i in matmul_rows)
    assert by_shape >= len(matmul_rows) and agreed >= by_shape
