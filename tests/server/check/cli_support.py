"""Helpers for the --check tests: a copy of a sample with generated profiles, and a runner."""

from __future__ import annotations

import io
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from msprof_lsp.server.__main__ import main
from tests.synth import write_torch_npu_text
from tests.synth.sample_runs import CnnKnobs, cnn_runs

REPO = Path(__file__).resolve().parents[3]
CNN_SAMPLE = REPO / "samples" / "cnn_classifier"


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_cli(argv: list[str], capsys) -> Result:
    code = main(argv)
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def fits_80_columns(out: str) -> bool:
    """Every line fits 80 columns, or holds one word (a path or code the report never breaks)."""
    return all(len(line) <= 80 or len(line.split()) == 1 for line in out.splitlines())


def copy_sample_sources(dest: Path) -> Path:
    """The CNN sample's Python files (not its committed profiles) in ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in CNN_SAMPLE.glob("*.py"):
        shutil.copy2(f, dest / f.name)
    return dest


def write_cnn_profiles(sample_dir: Path, out_dir: Path, knobs: CnnKnobs | None = None) -> list[Path]:
    """Generated torch_npu profiles (one per rank) whose stacks point at ``sample_dir``'s lines."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return [write_torch_npu_text(run, out_dir) for run in cnn_runs(sample_dir, knobs)]


def single_rank(knobs: CnnKnobs | None = None) -> CnnKnobs:
    return replace(knobs or CnnKnobs(), ranks=1)


__all__ = ["isolated_cache", "Result", "run_cli", "fits_80_columns", "copy_sample_sources", "write_cnn_profiles", "single_rank", "CnnKnobs", "io"]


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """Keep the profile cache of CLI tests out of the user's ~/.cache (import into a test module)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    monkeypatch.delenv("MSPROF_LSP_DEBUG", raising=False)
