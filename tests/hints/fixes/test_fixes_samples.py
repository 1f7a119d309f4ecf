"""The fixes applied to the repository's own samples/ (the code `msprof-lsp --check samples` reports
on): they apply, parse, and the fixed models/scripts compute the same results with torch."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import npu_standin
from fixkit import check_fix, line_of, load
from msprof_lsp.hints.fixes import dataloader, fused_api, grad_accum, relu_dropout

SAMPLES = Path(__file__).resolve().parents[3] / "samples"
CNN_MODEL = SAMPLES / "cnn_classifier" / "model.py"
CNN_TRAIN = SAMPLES / "cnn_classifier" / "train.py"
TINY_MODEL = SAMPLES / "tiny_transformer" / "model.py"

pytestmark = pytest.mark.skipif(not CNN_MODEL.exists(), reason="samples/ not in this checkout")


@pytest.fixture
def eager_compile(monkeypatch):
    """torch.compile as the identity: the inductor path itself is covered in test_fix_relu_dropout;
    here the rewritten model structure is what is checked, without recompiling per shape."""
    seen: list[str] = []

    def fake(fn, backend="inductor", **_):
        seen.append(backend)
        return fn

    monkeypatch.setattr(torch, "compile", fake)
    return seen


def test_cnn_sample_relu_dropout_sites(eager_compile):
    text = CNN_MODEL.read_text(encoding="utf-8")
    new = text
    for needle in ("x = self.drop(self.act(self.fc1(x)))", "x = F.dropout(F.relu(self.fc2(x))", "x = self.embed(x)"):
        ln = line_of(new, needle)
        res = relu_dropout.compile_pair(new, ln, backend="inductor")
        allowed = {ln} | ({line_of(new, "nn.ReLU(),"), line_of(new, "nn.Dropout(0.2),")} if "embed" in needle else set())
        new = check_fix(new, res, allowed_lines=allowed, safe=False)
    ln = line_of(new, "return self.pool(F.relu(self.bn(")
    new = check_fix(new, relu_dropout.inplace_relu(new, ln), allowed_lines={ln})
    assert "return self.pool(F.relu(self.bn(self.conv(x)), inplace=True))" in new
    torch.manual_seed(0)
    ref = load(text, "cnn_sample_ref")["CNNClassifier"]()
    fixed = load(new, "cnn_sample_fixed")["CNNClassifier"]()
    assert eager_compile == ["inductor"]  # one helper for all three sites
    fixed.load_state_dict(ref.state_dict(), strict=True)
    x = torch.randn(4, 3, 32, 32)
    ref.eval()
    fixed.eval()
    with torch.no_grad():
        assert torch.allclose(ref(x), fixed(x), atol=1e-5)


def test_cnn_sample_training_script_runs_with_accumulation_and_workers(tmp_path):
    text = CNN_TRAIN.read_text(encoding="utf-8")
    res = grad_accum.accumulate_gradients(text, line_of(text, "loss.backward()"), accum_steps=2)
    loop = set(range(line_of(text, "for step, (x, y) in enumerate(loader):"), line_of(text, "profiling.step()") + 1))
    new = check_fix(text, res, allowed_lines=loop)
    assert "with (contextlib.nullcontext() if sync_now else model.no_sync()):" in new
    assert "profiling.step()" in new.split("if sync_now:")[1]  # the profiler step stays per micro-batch
    ln = line_of(new, "loader = DataLoader(dataset")
    new = check_fix(new, dataloader.tune_dataloader(new, ln, workers=2), allowed_lines={ln})
    work = tmp_path / "cnn"
    shutil.copytree(CNN_TRAIN.parent, work, ignore=shutil.ignore_patterns("kineto", "__pycache__"))
    (work / "train.py").write_text(new, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "train.py", "--steps", "6", "--batch-size", "4", "--device", "cpu"],
        cwd=work, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "step 5 loss" in proc.stdout


def test_cnn_sample_waits_at_a_barrier_before_destroying_its_group():
    """A run whose only gradient sync is its last step (``--steps 1``; the accumulation fix run for
    fewer steps than ACCUM_STEPS, as test_fixes_every_offer runs it, 3 of 4) could hang at the end
    of train(): the DDP group's first all-reduce was still held by a gloo worker thread; its work
    keeps a Python object (the autograd context), so freeing it needs the GIL, while the main
    thread, freeing the DDP model, held the GIL and joined that thread (py-spy: ``~ProcessGroupGloo``
    -> ``thread::join`` against ``~AsyncAllreduceWork`` -> ``gil_scoped_acquire``). Forty one-step
    runs in one interpreter deadlocked in six of six tries, none of six with the barrier. A race
    can hide on a given machine, so this pins the teardown order that avoids it: a barrier (the
    main thread waits without the GIL, the workers finish their work), then the group is
    destroyed; the next test runs the case."""
    tree = ast.parse(CNN_TRAIN.read_text(encoding="utf-8"))
    (train,) = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "train"]
    calls = [ast.unparse(s.value) for s in train.body[-2:] if isinstance(s, ast.Expr)]
    assert calls == ["dist.barrier()", "dist.destroy_process_group()"]


ONE_STEP_RUNS = 20


def test_cnn_sample_one_step_runs_end(tmp_path):
    """The same case run: one-step runs of the sample one after another in one interpreter, as
    run_fixed.py runs its copies. Without the barrier twenty of them deadlocked in every try on an
    idle 2-core machine (about 4 s with it); under heavy load the race shows less often. A deadlock
    ends in the timeout."""
    work = tmp_path / "cnn"
    work.mkdir()
    for name in ("model.py", "data.py", "train.py"):
        shutil.copy2(CNN_TRAIN.parent / name, work / name)
    runner = Path(__file__).resolve().parent / "run_fixed.py"
    try:
        subprocess.run([sys.executable, str(runner), "--no-npu", "train", "1", *[str(work)] * ONE_STEP_RUNS],
                       capture_output=True, text=True, timeout=240, check=True)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{ONE_STEP_RUNS} one-step runs of the CNN sample did not end: the DDP teardown deadlocked")
    assert not (work / "error.txt").exists(), (work / "error.txt").read_text(encoding="utf-8")[-2000:]
    assert "step 0 loss" in (work / "stdout.txt").read_text(encoding="utf-8")


def test_tiny_transformer_sample_fused_swaps(monkeypatch):
    text = TINY_MODEL.read_text(encoding="utf-8")
    new = text
    steps = [
        (fused_api.rms_norm, "return x * torch.rsqrt("),
        (fused_api.rotary_mul, "q = q * cos + rotate_half(q) * sin"),
        (fused_api.rotary_mul, "k = k * cos + rotate_half(k) * sin"),
        (fused_api.swiglu, "return self.w_out(F.silu(a) * b)"),
        (fused_api.confusion_transpose, "out = out.permute(0, 2, 1, 3)"),
    ]
    for fn, needle in steps:
        res = fn(new, line_of(new, needle))
        assert res is not None, fn.__name__
        new = res.new_source
    why: list[str] = []
    assert fused_api.attention(new, line_of(new, "out = attn @ v"), backend="ascend", why=why) is None
    assert "additive float mask" in why[0]
    res = fused_api.attention(new, line_of(new, "out = attn @ v"), backend="cpu")
    new = res.new_source
    assert "out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.attn_drop.p if self.training else 0.0, scale=self.scale)" in new
    ns_ref = load(text, "tiny_ref")
    ns_new = load(new, "tiny_fixed", torch_npu=npu_standin.make())
    cfg = ns_ref["Config"](vocab_size=97, dim=32, n_heads=4, n_layers=2, hidden_dim=64, max_seq_len=16)
    torch.manual_seed(0)
    ref = ns_ref["TinyTransformer"](cfg)
    fixed = ns_new["TinyTransformer"](ns_new["Config"](**cfg.__dict__))
    fixed.load_state_dict(ref.state_dict(), strict=True)
    ref.eval()
    fixed.eval()
    tokens = torch.randint(0, 97, (2, 16))
    with torch.no_grad():
        assert torch.allclose(ref(tokens), fixed(tokens), atol=1e-4)
