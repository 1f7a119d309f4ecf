"""Record a profile where there is none: the profiling block the record action inserts, applied
to a training script like the CNN sample's, run for real with torch on the CPU, and the trace it
writes found and read by the product's discovery and loader."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from msprof_lsp.hints.fixes import fix_id, transform_of
from msprof_lsp.hints.fixes.edits import apply_edits
from msprof_lsp.hints.fixes.profiling import (
    PROFILE_ENV, PROFILE_FOLDER, SKIP_FIRST, Flavour, insert_profiler, loop_lines, snippet, training_loops,
)
from msprof_lsp.mapping.source.source_index import SourceIndex

ROOT = Path(__file__).resolve().parents[2]
CNN = ROOT / "samples" / "cnn_classifier"

# The CNN sample's training loop without its own profiler and DDP, so it runs in a test on the CPU.
TRAIN = '''"""Train the CNN classifier on synthetic images."""

from __future__ import annotations

import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from data import SyntheticImages
from model import CNNClassifier


def train(steps: int) -> None:
    torch.manual_seed(0)
    loader = DataLoader(SyntheticImages(length=steps * 4, seed=0), batch_size=4, shuffle=True)
    model = CNNClassifier()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model.train()
    # one pass over the data
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    train(int(sys.argv[1]))
'''


# The same script as one that runs on the Ascend box and on a laptop's CPU writes it: the torch_npu
# import guarded, the name None where it is not installed.
GUARDED_TRAIN = TRAIN.replace(
    "import torch.nn as nn\n",
    "import torch.nn as nn\n\ntry:\n    import torch_npu  # noqa: F401  (registers the npu device)\nexcept ImportError:\n    torch_npu = None\n",
)


def _line(text: str, needle: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


def _apply(text: str, line: int, path: str = "train.py") -> str:
    res = insert_profiler(text, line, path=path)
    assert res is not None
    assert apply_edits(text, res.edits) == res.new_source
    ast.parse(res.new_source)
    return res.new_source


def test_block_for_a_cpu_script_keeps_the_rest_and_is_idempotent():
    new = _apply(TRAIN, _line(TRAIN, "loss.backward()"))
    # what was there stays, in order: the block only adds lines and indents the loop one level
    added = [ln for ln in new.splitlines() if ln.strip()]
    for ln in TRAIN.splitlines():
        if ln.strip():
            assert any(a == ln or a == "    " + ln for a in added), ln
    assert "# one pass over the data\n    msprof_profiler = contextlib.nullcontext()" in new
    assert "import sys\nimport contextlib\nimport os\n" in new  # after the last stdlib import
    assert "torch.profiler.ProfilerActivity.CPU]," in new and "CUDA" not in new and "torch_npu" not in new
    assert "schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1, skip_first=10)" in new
    for flag in ("with_stack=True", "record_shapes=True", "with_modules=True"):
        assert flag in new
    assert "with msprof_profiler as prof:\n        for step, (x, y) in enumerate(loader):" in new
    assert new.index("prof.step()") > new.index('print(f"step {step}')  # the end of each iteration
    # a second application offers nothing, and the action is no longer offered on the loop
    why: list[str] = []
    assert insert_profiler(new, _line(new, "loss.backward()"), path="train.py", why=why) is None
    assert why == ["the script already records a profile"]
    assert loop_lines(new) == [] and loop_lines(TRAIN) == [(_line(TRAIN, "for step"), _line(TRAIN, "print(f"))]


def test_npu_script_gets_torch_npu_profiler_with_level1_and_pipe_utilization():
    text = TRAIN.replace("import torch.nn as nn\n", "import torch.nn as nn\ntry:\n    import torch_npu\nexcept ImportError:\n    pass\n")
    new = _apply(text, _line(text, "for step"))
    assert "activities=[torch_npu.profiler.ProfilerActivity.CPU, torch_npu.profiler.ProfilerActivity.NPU]" in new
    assert "profiler_level=torch_npu.profiler.ProfilerLevel.Level1" in new
    assert "aic_metrics=torch_npu.profiler.AiCMetrics.PipeUtilization" in new
    assert "experimental_config=torch_npu.profiler._ExperimentalConfig(" in new
    assert "on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(" in new
    assert new.count("import torch_npu") == 1  # the guarded import stays the only one


def test_guarded_script_gets_one_block_with_both_profilers():
    new = _apply(GUARDED_TRAIN, _line(GUARDED_TRAIN, "loss.backward()"))
    npu_at, cpu_at = new.index("torch_npu.profiler.profile("), new.index("torch.profiler.profile(")
    test_at = new.index("    if torch_npu is not None:\n")
    assert new.count(PROFILE_ENV) == 1 and test_at < npu_at < new.index("    else:") < cpu_at
    assert "activities=[torch.profiler.ProfilerActivity.CPU]," in new  # no CUDA mention: the CPU only
    assert new.count("import torch_npu") == 1 and new.count("torch_npu = None") == 1


def test_guard_without_none_gets_it_in_its_handler():
    text = GUARDED_TRAIN.replace("    torch_npu = None\n", "    HAS_NPU = False\n")
    new = _apply(text, _line(text, "loss.backward()"))
    assert "except ImportError:\n    HAS_NPU = False\n    torch_npu = None\n" in new
    assert "    if torch_npu is not None:\n" in new


def test_cuda_script_adds_cuda_only_where_available():
    text = TRAIN.replace("model = CNNClassifier()", "model = CNNClassifier().to(\"cuda\" if torch.cuda.is_available() else \"cpu\")")
    new = _apply(text, _line(text, "optimizer.step()"))
    assert "[torch.profiler.ProfilerActivity.CUDA] if torch.cuda.is_available() else []" in new


def test_nested_loops_profile_once_and_step_per_batch():
    text = TRAIN.replace("    for step, (x, y) in enumerate(loader):\n", "    for epoch in range(2):\n     for step, (x, y) in enumerate(loader):\n")
    text = "\n".join(("    " + ln[4:] if ln.startswith("        ") and i > _line(text, "for step") - 1 and ln.strip() else ln)
                     for i, ln in enumerate(text.splitlines())) + "\n"
    ast.parse(text)
    new = _apply(text, _line(text, "optimizer.step()"))
    assert "with msprof_profiler as prof:\n        for epoch in range(2):" in new
    step_line = next(ln for ln in new.splitlines() if "prof.step()" in ln)
    print_line = next(ln for ln in new.splitlines() if 'print(f"step' in ln)
    assert len(step_line) - len(step_line.lstrip()) == len(print_line) - len(print_line.lstrip()) + 4  # inside `if`


@pytest.mark.parametrize("text, reason", [
    ("x = 1\n", "no training loop"),
    (TRAIN.replace("        optimizer.zero_grad()\n", "        optimizer.zero_grad()\n        if step > 100:\n            continue\n"),
     "continue"),
])
def test_declines_with_a_reason(text, reason):
    why: list[str] = []
    assert insert_profiler(text, 1, path="t.py", why=why) is None
    assert reason in why[0]


def test_sample_that_already_profiles_gets_no_block():
    text = (CNN / "train.py").read_text(encoding="utf-8")
    why: list[str] = []
    assert insert_profiler(text, _line(text, "loss.backward()"), path="train.py", why=why) is None
    assert why == ["the script already records a profile"]


def test_the_training_loop_finder_is_the_rules_one():
    index = SourceIndex.build("train.py", TRAIN)
    assert [lp.header.line for lp in training_loops(index)] == [_line(TRAIN, "for step")]
    assert transform_of(fix_id(insert_profiler)) is insert_profiler


@pytest.mark.parametrize("flavour", list(Flavour))
def test_snippet_parses_and_names_the_variable(flavour):
    text = snippet(flavour)
    ast.parse(text)
    assert PROFILE_ENV in text and "prof.step()" in text and PROFILE_FOLDER in text
    assert ("torch_npu.profiler.profile(" in text) is (flavour is Flavour.NPU)


RECORDING_STEPS = SKIP_FIRST + 6  # skipped, wait 1, warm up 1, record 3, one to spare


def _run(script: Path, env_on: bool, steps: int) -> None:
    env = {k: v for k, v in os.environ.items() if k != PROFILE_ENV}
    if env_on:
        env[PROFILE_ENV] = "1"
    out = subprocess.run([sys.executable, str(script), str(steps)], cwd=script.parent, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("loss") == steps


def test_cpu_block_runs_with_torch_and_the_trace_is_found_and_read(tmp_path):
    pytest.importorskip("torch")
    for name in ("model.py", "data.py"):
        shutil.copy(CNN / name, tmp_path / name)
    script = tmp_path / "train.py"
    script.write_text(_apply(TRAIN, _line(TRAIN, "loss.backward()")), encoding="utf-8")
    _run(script, env_on=False, steps=2)
    assert not (tmp_path / PROFILE_FOLDER).exists()  # off unless the variable is set
    _run(script, env_on=True, steps=RECORDING_STEPS)
    traces = list((tmp_path / PROFILE_FOLDER).glob("*.pt.trace.json*"))
    assert len(traces) == 1  # repeat=1: one trace however long the run

    from msprof_lsp.server.analysis.run import find_jobs, load_found_job
    from msprof_lsp.server.analysis.settings import Settings

    jobs = find_jobs([tmp_path])
    assert [Path(loc.path).resolve() for j in jobs for loc in j.locations] == [traces[0].resolve()]
    loaded = load_found_job(jobs[0], Settings(), use_cache=False)
    assert len(loaded.profile.steps) == 3  # active=3 ProfilerSteps
    # and --check reads it and maps it to the script's lines
    out = subprocess.run([sys.executable, "-m", "msprof_lsp.server", "--check", str(tmp_path), "--no-cache", "-q",
                          "--fail-on", "never"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "3 steps" in out.stdout and PROFILE_FOLDER in out.stdout


def test_guarded_block_records_on_the_cpu_without_torch_npu_and_runs_with_it(tmp_path):
    """The guarded script's block on a machine without torch_npu (this one: the import fails)
    records with torch.profiler; with the torch_npu stand-in importable and the variable unset the
    script runs as before (nothing recorded)."""
    pytest.importorskip("torch")
    import importlib.util

    assert importlib.util.find_spec("torch_npu") is None  # the CPU path: no torch_npu here
    for name in ("model.py", "data.py"):
        shutil.copy(CNN / name, tmp_path / name)
    script = tmp_path / "train.py"
    script.write_text(_apply(GUARDED_TRAIN, _line(GUARDED_TRAIN, "loss.backward()")), encoding="utf-8")
    _run(script, env_on=True, steps=RECORDING_STEPS)
    assert len(list((tmp_path / PROFILE_FOLDER).glob("*.pt.trace.json*"))) == 1
    shutil.rmtree(tmp_path / PROFILE_FOLDER)
    standin = Path(__file__).resolve().parents[1] / "hints" / "fixes"
    code = ("import sys, runpy; sys.path.insert(0, sys.argv[1]); import npu_standin\n"
            "with npu_standin.importable():\n    sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')\n")
    env = {k: v for k, v in os.environ.items() if k != PROFILE_ENV}
    out = subprocess.run([sys.executable, "-c", code, str(standin), str(script), "2"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("loss") == 2 and not (tmp_path / PROFILE_FOLDER).exists()


@pytest.mark.parametrize("flag, flavour", [([], Flavour.NPU), (["--npu"], Flavour.NPU), (["--cuda"], Flavour.CUDA),
                                           (["--cpu"], Flavour.CPU)])
def test_print_profiler_snippet(flag, flavour, capsys):
    from msprof_lsp.server.__main__ import main

    assert main(["--print-profiler-snippet", *flag]) == 0
    assert capsys.readouterr().out == snippet(flavour)


@pytest.mark.parametrize("argv, says", [(["--cpu"], "--cpu needs --print-profiler-snippet"),
                                        (["--print-profiler-snippet", "--npu", "--cpu"], "not allowed with argument"),
                                        (["--check", "--print-profiler-snippet"], "does not go with --check")])
def test_print_profiler_snippet_usage_errors(argv, says, capsys):
    from msprof_lsp.server.__main__ import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


def test_no_profile_line_of_check_says_how_to_record(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN, encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "msprof_lsp.server", "--check", str(tmp_path), "-q"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    line, = out.stderr.splitlines()
    assert "no profile found" in line and "Record a profile of this training loop" in line
    assert "msprof-lsp --print-profiler-snippet [--npu|--cuda|--cpu]" in line and PROFILE_ENV in line
