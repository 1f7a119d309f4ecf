"""NPU241-NPU247 environment: the real profiler_metadata.json (NPU243/244/245 only), the real DB
export's META_DATA (the same three), each condition at its boundary, a synth DB export without
profiler_metadata.json at the ACLNN_CACHE_LIMIT boundary, anchors on os.environ statements (with the
edit applied) or on the entry script."""

from __future__ import annotations

import json

import pytest
from conftest import shared_fixture
from rulekit import applied, findings, line_of

from msprof_lsp.hints.finding import Severity
from msprof_lsp.mapping.profile.model import Backend, Profile, ProfileKind, ProfileMeta
from msprof_lsp.mapping.profile.readers.ascend_json import read_profiler_metadata
from msprof_lsp.mapping.spans import Span

METADATA = "verl-project-rl-insight/data/recipe/memory_data/20260526_085155_ascend_pt/profiler_metadata.json"
UNSET = {k: "" for k in ("ASCEND_GLOBAL_LOG_LEVEL", "HCCL_RDMA_TC", "HCCL_RDMA_SL", "ACLNN_CACHE_LIMIT", "HOST_CACHE_CAPACITY",
                         "ASCEND_ENHANCE_ENABLE", "PYTORCH_NPU_ALLOC_CONF", "ASCEND_LAUNCH_BLOCKING", "HCCL_ALGO")}
# a setting that makes each "unset fires" rule quiet, so one variable can be tested alone
QUIET = {"ACLNN_CACHE_LIMIT": "100000", "HOST_CACHE_CAPACITY": "20", "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}


def _profile(env: dict[str, str], backend: Backend = Backend.ASCEND) -> Profile:
    return Profile(ProfileMeta(ProfileKind.TORCH_NPU, "/prof", backend=backend, env=dict(env)))


def test_real_metadata_fires_243_244_245_only():
    path = shared_fixture(METADATA)
    env = json.loads(path.read_text(encoding="utf-8"))["ENV_VARIABLES"]
    meta = ProfileMeta(ProfileKind.TORCH_NPU, str(path.parent))
    assert read_profiler_metadata(path, meta) == []
    fs = findings(Profile(meta), ["NPU24"])
    assert sorted(f.code for f in fs) == ["NPU243", "NPU244", "NPU245"]
    assert all(f.severity is Severity.INFO and f.span is None for f in fs)
    by = {f.code: f for f in fs}
    assert by["NPU245"].evidence["value"] == env["PYTORCH_NPU_ALLOC_CONF"] == "max_split_size_mb:2048"
    assert "PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:2048" in by["NPU245"].message
    assert by["NPU243"].evidence["unset"] and env["ACLNN_CACHE_LIMIT"] == ""


@pytest.mark.parametrize(("var", "value", "code", "fires"), [
    ("ASCEND_GLOBAL_LOG_LEVEL", "", "NPU241", False),
    ("ASCEND_GLOBAL_LOG_LEVEL", "3", "NPU241", False),
    ("ASCEND_GLOBAL_LOG_LEVEL", "1", "NPU241", True),
    ("HCCL_RDMA_TC", "132", "NPU242", True),
    ("HCCL_RDMA_SL", "4", "NPU242", True),
    ("ACLNN_CACHE_LIMIT", "10000", "NPU243", False),
    ("ACLNN_CACHE_LIMIT", "9999", "NPU243", True),
    ("ACLNN_CACHE_LIMIT", "", "NPU243", True),
    ("HOST_CACHE_CAPACITY", "0", "NPU244", True),
    ("HOST_CACHE_CAPACITY", "1", "NPU244", False),
    ("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:False", "NPU245", True),
    ("PYTORCH_NPU_ALLOC_CONF", "max_split_size_mb:512,expandable_segments:True", "NPU245", False),
    ("ASCEND_LAUNCH_BLOCKING", "0", "NPU246", False),
    ("ASCEND_LAUNCH_BLOCKING", "1", "NPU246", True),
    ("HCCL_ALGO", "level0:NA;level1:ring", "NPU247", True),
])
def test_each_condition_at_its_boundary(var, value, code, fires):
    env = {**UNSET, **QUIET, var: value}
    fs = findings(_profile(env), ["NPU24"])
    assert [f.code for f in fs] == ([code] if fires else [])


def test_real_db_export_meta_data_fires_243_244_245():
    from msprof_lsp.mapping.profile.locations import ProfileLocation, no_progress
    from msprof_lsp.mapping.profile.readers import torch_npu_db

    root = shared_fixture("Ascend-msinsight/db/level1/rank0_ascend_pt")
    profile = torch_npu_db.read(ProfileLocation(ProfileKind.TORCH_NPU_DB, root, 0), no_progress)
    fs = findings(profile, ["NPU24"])
    assert sorted(f.code for f in fs) == ["NPU243", "NPU244", "NPU245"]
    assert {f.evidence["source"] for f in fs} == {"META_DATA ENV_VARIABLES"}
    assert all(f.evidence["unset"] for f in fs)


@pytest.mark.parametrize(("limit", "fires"), [("10000", False), ("9999", True)])
def test_synth_db_export_env_from_meta_data_at_the_boundary(tmp_path, limit, fires):
    from dataclasses import replace

    from msprof_lsp.mapping.profile.locations import ProfileLocation, no_progress
    from msprof_lsp.mapping.profile.readers import torch_npu_db
    from tests.synth import write_torch_npu_db
    from tests.synth.examples import small_run

    run = small_run(steps=1, world_size=1)
    run = replace(run, env={**UNSET, **QUIET, "ACLNN_CACHE_LIMIT": limit})
    root = write_torch_npu_db(run, tmp_path, metadata_json=False)
    assert not (root / "profiler_metadata.json").exists()
    profile = torch_npu_db.read(ProfileLocation(ProfileKind.TORCH_NPU_DB, root, 0), no_progress)
    fs = findings(profile, ["NPU24"])
    assert [f.code for f in fs] == (["NPU243"] if fires else [])
    if fires:
        assert fs[0].evidence["source"] == "META_DATA ENV_VARIABLES" and fs[0].evidence["value"] == "9999"


def test_no_metadata_and_kineto_give_nothing():
    assert not findings(_profile({}), ["NPU24"])
    assert not findings(_profile(UNSET, Backend.CUDA), ["NPU24"])


SCRIPT = '''import os

os.environ["PYTORCH_NPU_ALLOC_CONF"] = "max_split_size_mb:2048"
os.environ.setdefault("ASCEND_LAUNCH_BLOCKING", "1")
os.putenv("ASCEND_GLOBAL_LOG_LEVEL", "1")

import torch
import torch_npu

os.environ["HCCL_ALGO"] = "level0:NA;level1:ring"


def main():
    pass


if __name__ == "__main__":
    main()
'''


def test_statement_anchors_and_edits(tmp_path):
    src = tmp_path / "train.py"
    src.write_text(SCRIPT)
    env = {**UNSET, **QUIET, "PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:2048", "ASCEND_LAUNCH_BLOCKING": "1",
           "ASCEND_GLOBAL_LOG_LEVEL": "1", "HCCL_ALGO": "level0:NA;level1:ring"}
    fs = {f.code: f for f in findings(_profile(env), ["NPU24"], [tmp_path])}
    assert set(fs) == {"NPU241", "NPU245", "NPU246", "NPU247"}
    f245 = fs["NPU245"]
    assert f245.span.line == line_of(SCRIPT, 'os.environ["PYTORCH_NPU_ALLOC_CONF"]')
    assert 'os.environ["PYTORCH_NPU_ALLOC_CONF"] = "expandable_segments:True,max_split_size_mb:2048"' in applied(SCRIPT, f245.fixes[0])
    new246 = applied(SCRIPT, fs["NPU246"].fixes[0])
    assert "ASCEND_LAUNCH_BLOCKING" not in new246
    assert 'os.putenv("ASCEND_GLOBAL_LOG_LEVEL", "3")' in applied(SCRIPT, fs["NPU241"].fixes[0])
    f247 = fs["NPU247"]
    assert f247.span.line == line_of(SCRIPT, 'os.environ["HCCL_ALGO"]')
    assert "import torch_npu" in f247.evidence["note"]  # set too late to matter
    assert all(f.severity is Severity.INFO for f in fs.values())


def test_without_a_setter_the_entry_script_line_1(tmp_path):
    (tmp_path / "model.py").write_text("import torch\n\n\nclass Net(torch.nn.Module):\n    pass\n")
    entry = tmp_path / "run.py"
    entry.write_text('import torch\nimport torch_npu\n\nif __name__ == "__main__":\n    print(torch.ones(1))\n')
    (f,) = findings(_profile({**UNSET, **QUIET, "ACLNN_CACHE_LIMIT": ""}), ["NPU24"], [tmp_path])
    assert f.span == Span(str(entry), 1, 0, 1, 0)
    assert f.fixes == [] and "launcher" in f.evidence["anchor"]
