"""NPU103/NPU107 global switches, NPU241-247 environment edits and NPU230 gc.freeze()."""

from __future__ import annotations

import gc

import pytest

import npu_standin
from fixkit import check_fix, line_of, load, model_source
from msprof_lsp.hints.fixes import env_vars, gc_freeze, npu_switches

ENTRY = model_source("ascend_finetune.py")


def test_internal_format_inserted_after_import_torch_npu_and_runs():
    res = npu_switches.disable_internal_format(ENTRY)
    new = check_fix(ENTRY, res, allowed_lines=set(), safe=False)  # pure insertion
    imp = line_of(new, "import torch_npu  # noqa")
    assert new.splitlines()[imp] == "torch_npu.npu.config.allow_internal_format = False"
    assert "A/B test" in res.title
    assert npu_switches.disable_internal_format(new) is None  # idempotent
    stub = npu_standin.make()
    src = new.split("\n\nclass RandomImages")[0]  # the module prologue: imports and switches
    load(src, "entry_prologue", torch_npu=stub)
    assert stub.npu.config.allow_internal_format is False


def test_internal_format_existing_true_is_flipped_not_duplicated():
    src = "import torch\nimport torch_npu\n\ntorch.npu.config.allow_internal_format = True  # 打开\n"
    res = npu_switches.disable_internal_format(src)
    new = check_fix(src, res, allowed_lines={4})
    assert new == "import torch\nimport torch_npu\n\ntorch.npu.config.allow_internal_format = False  # 打开\n"
    assert npu_switches.disable_internal_format(new) is None


def test_internal_format_adds_a_guarded_import_torch_npu_after_import_torch():
    """Never a bare import: the script keeps running where torch_npu is not installed, and the
    switch runs only where the import succeeded."""
    src = '"""doc"""\nimport os\nimport torch\nfrom torch import nn\n\nmodel = nn.Linear(2, 2)\n'
    res = npu_switches.disable_internal_format(src)
    new = check_fix(src, res, allowed_lines=set())
    assert new == ('"""doc"""\nimport os\nimport torch\ntry:\n    import torch_npu  # (the NPU path; None where torch_npu is not installed)\n'
                   '    torch_npu.npu.config.allow_internal_format = False\nexcept ImportError:\n    torch_npu = None\n'
                   'from torch import nn\n\nmodel = nn.Linear(2, 2)\n')
    exec(compile(new, "<fixed>", "exec"), {})  # noqa: S102 - runs without torch_npu (none in this venv)
    why: list[str] = []
    assert npu_switches.disable_internal_format("import numpy\n", why=why) is None and "import torch" in why[0]


def test_alias_and_try_import():
    src = "import torch\ntry:\n    import torch_npu as tnpu\nexcept ImportError:\n    tnpu = None\n"
    new = check_fix(src, npu_switches.disable_internal_format(src), allowed_lines=set())
    assert "    import torch_npu as tnpu\n    tnpu.npu.config.allow_internal_format = False\nexcept ImportError:" in new


def test_jit_compile_true_flipped_safely_and_runs():
    ln = line_of(ENTRY, "set_compile_mode(jit_compile=True)")
    res = npu_switches.disable_jit_compile(ENTRY, ln)
    new = check_fix(ENTRY, res, allowed_lines={ln}, safe=True)
    assert "torch_npu.npu.set_compile_mode(jit_compile=False)" in new
    assert npu_switches.disable_jit_compile(new, ln) is None
    stub = npu_standin.make()
    load(new.split("\n\nclass RandomImages")[0], "entry_jit", torch_npu=stub)
    assert stub.npu.compile_calls == [{"jit_compile": False}]


def test_jit_compile_inserted_as_review_when_absent():
    src = "import torch\nimport torch_npu\n\nx = 1\n"
    res = npu_switches.disable_jit_compile(src)
    new = check_fix(src, res, allowed_lines=set(), safe=False)
    assert new == "import torch\nimport torch_npu\ntorch_npu.npu.set_compile_mode(jit_compile=False)\n\nx = 1\n"
    assert npu_switches.disable_jit_compile(new) is None


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("ASCEND_LAUNCH_BLOCKING", None, None),  # unset: the statement goes
        ("PYTORCH_NPU_ALLOC_CONF", env_vars.merge_setting("expandable_segments:True"),
         'os.environ.setdefault("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True,max_split_size_mb:2048")'),
        ("HCCL_ALGO", None, None),
    ],
)
def test_env_values_edited_in_place(name, value, expected):
    ln = line_of(ENTRY, name)
    res = env_vars.set_env_value(ENTRY, ln, name=name, value=value)
    new = check_fix(ENTRY, res, allowed_lines={ln}, safe=False)
    if expected is None:
        assert name not in new and len(new.splitlines()) == len(ENTRY.splitlines()) - 1
    else:
        assert expected in new
        assert env_vars.set_env_value(new, ln, name=name, value=value) is None  # idempotent


def test_merge_setting_keeps_other_items():
    merge = env_vars.merge_setting("expandable_segments:True")
    assert merge(None) == "expandable_segments:True"
    assert merge("expandable_segments:False,max_split_size_mb:64") == "expandable_segments:True,max_split_size_mb:64"
    assert merge("garbage_collection_threshold:0.6,expandable_segments:True") == "garbage_collection_threshold:0.6,expandable_segments:True"


def test_env_not_set_in_file_gives_no_edit():
    why: list[str] = []
    assert env_vars.set_env_value(ENTRY, 1, name="ACLNN_CACHE_LIMIT", value="100000", why=why) is None
    assert "not set" in why[0]
    src = "import os\nos.environ['ACLNN_CACHE_LIMIT'] = '100'\n"
    new = check_fix(src, env_vars.set_env_value(src, 2, name="ACLNN_CACHE_LIMIT", value="100000"), allowed_lines={2})
    assert new == "import os\nos.environ['ACLNN_CACHE_LIMIT'] = '100000'\n"


def test_gc_freeze_before_epoch_loop_and_runs():
    src = '''"""Trainer."""
import os
import torch


def fit(model, batches, epochs: int):
    model.train()
    # 训练循环
    for epoch in range(epochs):
        for x in batches:
            model(x).sum().backward()
    return model
'''
    res = gc_freeze.freeze_before_loop(src, line_of(src, "model(x).sum()"))
    new = check_fix(src, res, allowed_lines=set())
    assert "import os\nimport gc\nimport torch\n" in new
    assert "    model.train()\n    # 训练循环\n    gc.freeze()" in new
    assert gc_freeze.freeze_before_loop(new, line_of(new, "model(x).sum()")) is None
    import torch

    ns = load(new, "gc_fit")
    try:
        ns["fit"](torch.nn.Linear(2, 1), [torch.ones(1, 2)], 1)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
