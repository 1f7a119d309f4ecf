"""Every fix the catalog offers on the samples, applied and run.

The samples' four profiles (each sample's generated torch_npu profile and recorded CPU Kineto
trace), analysed at minShare 0 so that every finding counts, offer the fixes in ``OFFERED``. Each
one is applied to a copy of its sample; the fixed module is imported and run in a fresh
interpreter with the torch_npu stand-in (``run_fixed.py``: ``import torch_npu`` registers the
``npu`` compile backend and ``torch.npu`` only then): a model fix runs an eval forward pass that
must equal the unfixed model's (same seed, same weights), a training-script fix runs three
training steps whose losses must equal the unfixed run's, except for the fixes in
``CHANGES_NUMERICS``, which say why and are checked for completing with finite losses instead.
Every copy also runs where torch_npu is not installed (its import raises ImportError: a CPU laptop,
CI), as the samples themselves do: there every fix runs to completion, a safe fix gives the unfixed
run's numbers, and so does every fix that put its NPU code behind ``if torch_npu is not None:``
(the original code is the ``else``).
A catalog fix offered on no sample must be in ``NOT_ON_SAMPLES`` with the reason, checked
against the samples' sources.
"""

from __future__ import annotations

import ast
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from msprof_lsp.hints.fixes import CATALOG, apply_edits, apply_fixes, offer, transform_of
from msprof_lsp.hints.fixes.result import FixResult, where
from msprof_lsp.hints.registry import all_rules
from msprof_lsp.hints.rules.environment import EnvRule
from msprof_lsp.server.analysis.run import analyse_paths
from msprof_lsp.server.analysis.settings import Settings

SAMPLES = Path(__file__).resolve().parents[3] / "samples"
RUNNER = Path(__file__).resolve().parent / "run_fixed.py"
SOURCES = ("model.py", "train.py", "data.py")
STEPS = 3

pytestmark = pytest.mark.skipif(not (SAMPLES / "cnn_classifier" / "model.py").exists(), reason="samples/ not in this checkout")

Key = tuple[str, str, str, str, str, str]  # sample, profile kind, code, fix id, file, anchor line (start)

CNN_SEQ, CNN_MOD, CNN_FN = "nn.ReLU(),", "x = self.drop(self.act(self.fc1(x)))", "x = F.dropout(F.relu(self.fc2(x)), p=se"
CNN_IMPORT = 'import torch_npu  # noqa: F401  (registers'
CNN_SGD, CNN_LOADER, CNN_LOOP = "optimizer = torch.optim.SGD(model.param", "loader = DataLoader(dataset, batch_size", "for step, (x, y) in enumerate(loader):"
TINY_ADAMW, TINY_LOADER = "optimizer = torch.optim.AdamW(model.para", "loader = DataLoader(dataset, batch_size"
PRINT_LOSS = 'print(f"step {step} loss {loss.item():.4f'


def _pairs(sample: str, kind: str, *rows: tuple[str, str, str, str]) -> set[Key]:
    return {(sample, kind, *r) for r in rows}


# offered on both CNN profiles (the compile fix's backend differs: inductor for Kineto, npu)
CNN_BOTH = (
    *[("NPU101", fx, "model.py", site) for site in (CNN_SEQ, CNN_MOD, CNN_FN)
      for fx in ("relu_dropout.compile_pair", "relu_dropout.inplace_relu")],
    ("NPU220", "optimizer.fused_optimizer", "train.py", CNN_SGD),
    ("NPU104", "dataloader.tune_dataloader", "train.py", CNN_LOADER),
    ("NPU104", "dataloader.non_blocking_copies", "train.py", CNN_LOOP),
)

OFFERED: set[Key] = (
    _pairs("cnn_classifier", "kineto", *CNN_BOTH)
    | _pairs("cnn_classifier", "torch_npu", *CNN_BOTH,
             ("NPU103", "npu_switches.disable_internal_format", "train.py", CNN_IMPORT),
             ("NPU107", "npu_switches.disable_jit_compile", "train.py", CNN_IMPORT),
             ("NPU220", "optimizer.npu_fused_optimizer", "train.py", CNN_SGD),
             ("NPU102", "grad_accum.accumulate_gradients", "train.py", "loss.backward()"),
             # the synchronize() is its own cause (its fix changes the sync calls, the DataLoader's
             # the fetch): NPU108 keeps it (hints.consolidate.charged_alike)
             ("NPU108", "host_sync.remove_synchronize", "train.py", "torch.npu.synchronize()  # make the per-st"),
             ("NPU108", "host_sync.defer_loss_item", "train.py", PRINT_LOSS))
    | _pairs("tiny_transformer", "kineto",
             ("NPU213", "fused_api.attention", "model.py", "out = attn @ v"),
             ("NPU220", "optimizer.fused_optimizer", "train.py", TINY_ADAMW))
    | _pairs("tiny_transformer", "torch_npu",
             ("NPU210", "fused_api.rms_norm", "model.py", "return x * torch.rsqrt(x.pow(2).mean(-1, k"),
             ("NPU212", "fused_api.rotary_mul", "model.py", "q = q * cos + rotate_half(q) * sin"),
             ("NPU212", "fused_api.rotary_mul", "model.py", "k = k * cos + rotate_half(k) * sin"),
             ("NPU215", "fused_api.confusion_transpose", "model.py", "out = out.permute(0, 2, 1, 3).contiguous()"),
             ("NPU211", "fused_api.swiglu", "model.py", "return self.w_out(F.silu(a) * b)"),
             ("NPU107", "npu_switches.disable_jit_compile", "train.py", CNN_IMPORT),
             ("NPU220", "optimizer.fused_optimizer", "train.py", TINY_ADAMW),
             ("NPU220", "optimizer.npu_fused_optimizer", "train.py", TINY_ADAMW),
             ("NPU104", "dataloader.tune_dataloader", "train.py", TINY_LOADER),
             ("NPU104", "dataloader.non_blocking_copies", "train.py", "for step, (tokens, targets) in enumerate("),
             ("NPU221", "optimizer.fused_grad_clip", "train.py", "torch.nn.utils.clip_grad_norm_(model.param"),
             ("NPU108", "host_sync.defer_loss_item", "train.py", PRINT_LOSS))
)

# Catalog fixes no sample offers, with why, and the check of that reason: ``("source", regex)``:
# the regex matches no sample source (model.py, train.py, data.py); ``("finding", code)``: the rule
# reports nothing on any of the four profiles (at minShare 0).
NOT_ON_SAMPLES: dict[str, tuple[str, tuple[str, str]]] = {
    "relu_dropout.drop_zero_dropout": ("no dropout with a literal p=0 in the samples", ("source", r"[Dd]ropout\((p=)?0(\.0*)?[,)]")),
    "empty_cache.remove_empty_cache": ("the samples never call empty_cache()", ("source", r"empty_cache\(")),
    "aicpu.double_to_float": ("no AI_CPU kernels in the samples' profiles", ("finding", "NPU201")),
    "aicpu.masked_fill": ("no AI_CPU kernels in the samples' profiles", ("finding", "NPU201")),
    "aicpu.index_select": ("no AI_CPU kernels in the samples' profiles", ("finding", "NPU201")),
    "fused_api.fast_gelu": ("the samples use SiLU and ReLU, no GELU", ("source", r"gelu|GELU")),
    "fused_api.scaled_masked_softmax": ("the attention adds a float mask (NPU213's pattern), no masked_fill before softmax", ("source", r"masked_fill")),
    "fused_api.add_layer_norm": ("the samples use RMSNorm and BatchNorm, no LayerNorm", ("source", r"layer_norm|LayerNorm")),
    "gc_freeze.freeze_before_loop": ("the samples' profiles record no GC pause", ("finding", "NPU230")),
    "env_vars.set_env_value": ("the scripts set none of NPU241-247's variables (the fix edits only such a statement)",
                               ("source", "|".join(v for r in all_rules() if isinstance(r, EnvRule) for v in r.variables))),
    "inference.eval_before_loop": ("the samples train; no inference loop", ("finding", "NPU250")),
    "inference.inference_mode": ("the samples train; no inference loop", ("finding", "NPU250")),
}

# Training-script fixes whose numbers legitimately differ from the unfixed run.
CHANGES_NUMERICS: dict[str, str] = {
    "grad_accum.accumulate_gradients": "steps the optimizer every 4 micro-batches (fewer updates, same data)",
}
# Same numbers, fewer log lines: of the first steps only step 0 is printed.
LOGS_LESS: dict[str, str] = {"host_sync.defer_loss_item": "logs the loss every 100 steps instead of every step"}


def _sample_sources() -> str:
    return "\n".join((SAMPLES / s / n).read_text(encoding="utf-8") for s in ("cnn_classifier", "tiny_transformer")
                     for n in SOURCES if (SAMPLES / s / n).exists())


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[Key, tuple[Path, FixResult]], set[str]]:
    """Every offer of every finding on the four profiles, expanded one by one (as the engine does),
    and the codes found."""
    cache = tmp_path_factory.mktemp("cache")
    out: dict[Key, tuple[Path, FixResult]] = {}
    codes: set[str] = set()
    for sample in ("cnn_classifier", "tiny_transformer"):
        for a in analyse_paths([SAMPLES / sample], Settings(min_share=0.0, cache_dir=str(cache))):
            kind = a.profile.meta.kind.value
            codes |= {f.code for f in a.findings}
            for f in a.findings:
                chosen: set[str] = set()
                for o in f.offers:
                    if o.choice and o.choice in chosen:
                        continue
                    path = Path(o.path)
                    text = path.read_text(encoding="utf-8")
                    options = dict(o.options) | ({"construct": o.construct} if o.construct is not None else {})
                    res = offer(transform_of(o.fix), text, o.anchor, path=o.path, **options)
                    if res is None:
                        continue
                    chosen.add(o.choice)
                    line = text.splitlines()[where(o.anchor).line - 1].strip()
                    key = next((k for k in OFFERED if k[:5] == (sample, kind, f.code, o.fix, path.name) and line.startswith(k[5])),
                               (sample, kind, f.code, o.fix, path.name, line))
                    out.setdefault(key, (path, res))
    return out, codes


@pytest.fixture(scope="module")
def offers(analysed) -> dict[Key, tuple[Path, FixResult]]:
    return analysed[0]


def test_the_samples_offer_exactly_these_fixes(offers):
    assert set(offers) - OFFERED == set(), "new offers: add them to OFFERED"
    assert OFFERED - set(offers) == set(), "offers gone"


def test_every_catalog_fix_is_exercised_on_a_sample_or_excused(analysed):
    catalog = {s.id for s in CATALOG}
    offered = {k[3] for k in OFFERED}
    assert catalog - offered == set(NOT_ON_SAMPLES), "a catalog fix no sample offers needs a reason in NOT_ON_SAMPLES"
    assert not offered & set(NOT_ON_SAMPLES)
    assert set(CHANGES_NUMERICS) | set(LOGS_LESS) <= offered
    sources = _sample_sources()
    for fix, (reason, (kind, what)) in NOT_ON_SAMPLES.items():
        holds = not re.search(what, sources) if kind == "source" else what not in analysed[1]
        assert reason and holds, f"{fix}: {reason!r} no longer holds"


def _copy(sample: str, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for name in SOURCES:
        if (SAMPLES / sample / name).exists():
            shutil.copy2(SAMPLES / sample / name, dst / name)
    return dst


def _mode(key: Key) -> str:
    return "forward" if key[4] == "model.py" else "train"


PATHS = ("stand-in", "no-torch_npu")  # torch_npu importable (the stand-in), or not installed


@pytest.fixture(scope="module")
def runs(offers, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[Key | tuple[str, str], Path]]:
    """Per path: every offered fix applied to its own copy of the sample, plus an unfixed copy per
    sample and mode; the copies of one sample, mode and path run in one interpreter (``run_fixed.py``)."""
    return {p: _run_copies(offers, tmp_path_factory.mktemp(f"runs-{p}"), without_npu=p == "no-torch_npu") for p in PATHS}


def _run_copies(offers, base: Path, *, without_npu: bool) -> dict[Key | tuple[str, str], Path]:
    dirs: dict[Key | tuple[str, str], Path] = {}
    groups: dict[tuple[str, str], list[Path]] = {}
    for sample in ("cnn_classifier", "tiny_transformer"):
        for mode in ("forward", "train"):
            dirs[(sample, mode)] = ref = _copy(sample, base / f"ref-{sample}-{mode}")
            groups[(sample, mode)] = [ref]
    for i, key in enumerate(sorted(k for k in offers if k in OFFERED)):
        path, res = offers[key]
        dirs[key] = work = _copy(key[0], base / f"fix{i:02d}")
        (work / key[4]).write_text(res.new_source, encoding="utf-8")
        groups[(key[0], _mode(key))].append(work)
    for (_sample, mode), works in groups.items():
        args = (["--no-npu"] if without_npu else []) + ([mode, str(STEPS)] if mode == "train" else [mode])
        proc = subprocess.run([sys.executable, str(RUNNER), *args, *map(str, works)], capture_output=True, text=True,
                              timeout=1200)
        assert proc.returncode == 0, proc.stderr[-3000:]
    return dirs


def _result(work: Path):  # noqa: ANN202 - (ndarray, keys) | {step: loss}
    err = work / "error.txt"
    assert not err.exists(), err.read_text(encoding="utf-8")[-3000:]
    if (work / "out.npy").exists():
        return np.load(work / "out.npy"), (work / "keys.txt").read_text(encoding="utf-8")
    text = (work / "stdout.txt").read_text(encoding="utf-8")
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^step (\d+) loss (\S+)$", text, re.M)}


@pytest.mark.parametrize("key", sorted(OFFERED), ids=lambda k: f"{k[0]}-{k[1]}-{k[2]}-{k[3]}-{k[5][:24]}")
def test_fix_applied_imported_and_run(key, offers, runs):
    path, res = offers[key]
    assert apply_edits(path.read_text(encoding="utf-8"), list(res.edits)) == res.new_source
    ast.parse(res.new_source)
    fix = key[3]
    got, ref = _result(runs["stand-in"][key]), _result(runs["stand-in"][(key[0], _mode(key))])
    if _mode(key) == "forward":
        (out, keys), (ref_out, ref_keys) = got, ref
        assert keys == ref_keys  # the same state_dict keys: checkpoints still load
        assert out.shape == ref_out.shape and np.isfinite(out).all()
        np.testing.assert_allclose(out, ref_out, atol=1e-4, rtol=1e-4)
        return
    assert sorted(ref) == list(range(STEPS))
    if fix in CHANGES_NUMERICS:
        assert sorted(got) == list(range(STEPS)) and all(math.isfinite(x) for x in got.values())
        return
    assert sorted(got) == ([0] if fix in LOGS_LESS else list(range(STEPS)))
    # the same training numbers (printed with 4 decimals; the fused kernels round alike)
    np.testing.assert_allclose([got[s] for s in sorted(got)], [ref[s] for s in sorted(got)], atol=2e-4)


@pytest.mark.parametrize("key", sorted(OFFERED), ids=lambda k: f"{k[0]}-{k[1]}-{k[2]}-{k[3]}-{k[5][:24]}")
def test_fix_runs_where_torch_npu_is_not_installed(key, offers, runs):
    """The samples run on a CPU without torch_npu; every fix keeps that path: it runs to completion,
    and a safe fix, or one whose NPU code is behind ``if torch_npu is not None:``, gives the unfixed
    run's numbers there."""
    _path, res = offers[key]
    assert "\nimport torch_npu" not in res.new_source  # never a bare import at top level
    got, ref = _result(runs["no-torch_npu"][key]), _result(runs["no-torch_npu"][(key[0], _mode(key))])
    same = res.safe or "torch_npu is not None:" in res.new_source
    if _mode(key) == "forward":
        (out, keys), (ref_out, ref_keys) = got, ref
        assert keys == ref_keys and out.shape == ref_out.shape and np.isfinite(out).all()
        if same:
            np.testing.assert_array_equal(out, ref_out)
        return
    assert sorted(ref) == list(range(STEPS))
    assert all(math.isfinite(x) for x in got.values())
    assert sorted(got) == ([0] if key[3] in LOGS_LESS else list(range(STEPS)))  # ran to completion
    if same:
        assert got == {s: ref[s] for s in got}


@pytest.mark.parametrize("sample", ["cnn_classifier", "tiny_transformer"])
def test_both_optimizer_alternatives_from_a_sample_finding_apply_one(sample, offers):
    """fused=True and NpuFused<Name> of one NPU220 finding are one group: applied together the
    second is refused, never NpuFusedSGD(..., fused=True)."""
    (fused_key,) = [k for k in offers if k[:4] == (sample, "torch_npu", "NPU220", "optimizer.fused_optimizer")]
    (npu_key,) = [k for k in offers if k[:4] == (sample, "torch_npu", "NPU220", "optimizer.npu_fused_optimizer")]
    path, fused = offers[fused_key]
    _, npu = offers[npu_key]
    assert fused.fix.group and fused.fix.group == npu.fix.group
    for first, second in ((fused.fix, npu.fix), (npu.fix, fused.fix)):
        done = apply_fixes(path.read_text(encoding="utf-8"), [first, second], path=str(path))
        assert done.applied == (first,) and [d.fix for d in done.declined] == [second]
        assert "an alternative to" in done.declined[0].reason
        assert not ("NpuFused" in done.source and "fused=True" in done.source)
