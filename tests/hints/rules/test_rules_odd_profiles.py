"""The NPU2xx/NPU9xx rules on odd but legal profiles: nothing recorded, kernels only, host ops only,
ops without times or steps, unknown backends' data, a workspace file that does not parse. They
must produce findings or nothing -- never a crash notice from the engine."""

from __future__ import annotations

import pytest
from rulekit import ProfileBuilder, findings, frame

from msprof_lsp.mapping.profile.model import Backend, Profile, ProfileKind, ProfileMeta, Step

CODES = ["NPU2", "NPU9"]


def _no_crash(fs) -> None:
    assert not [f for f in fs if f.evidence.get("notice") == "rule-error"], [f.message for f in fs]


@pytest.mark.parametrize("backend", list(Backend))
def test_empty_profiles(backend):
    for kind in ProfileKind:
        _no_crash(findings(Profile(ProfileMeta(kind, "/p", backend=backend)), CODES))
        _no_crash(findings(Profile(ProfileMeta(kind, "/p", backend=backend, level="Level0", env={"HCCL_ALGO": "x"}),
                               steps=[Step(1, 0, 10)]), CODES))


def test_kernels_without_types_steps_or_links():
    b = ProfileBuilder(steps=1)
    for i in range(5):
        b.kernel(f"k{i}", -50 + 20 * i, 0, core="AI_CPU" if i % 2 else "", type="")
    p = b.build()
    p.steps = []
    _no_crash(findings(p, CODES))


def test_host_ops_only_with_untimed_rows(tmp_path):
    (tmp_path / "bad.py").write_text("def f(:\n    pass\n")  # a file that does not parse
    b = ProfileBuilder()
    for name in ("Optimizer.step#AdamW.step", "aten::add", "aten::reciprocal", "aten::mul", "aten::gelu", "aten::dropout",
                 "autograd::engine::evaluate_function: X", "aten::item"):
        b.op(name, -1, 0, stack=[frame(tmp_path / "bad.py", 1, "f")], concrete_inputs="not json")
    p = b.build()
    p.host_ops.loc[:, "start_ns"] = -1
    _no_crash(findings(p, CODES, [tmp_path]))


def test_stacks_into_missing_and_library_files(tmp_path):
    b = ProfileBuilder(collection_end_ns=1)
    op = b.op("aten::gelu", 10, 20, stack=[frame("/nowhere/x.py", 3, "f"), frame("<frozen runpy>", 1, "<module>")])
    sc = b.op("aclnnGelu", 12, 10)
    b.kernel("aclnnGelu_Gelu_Gelu", 14, 5000, op=sc, type="Gelu")
    del op
    _no_crash(findings(b.build(), CODES, [tmp_path]))
