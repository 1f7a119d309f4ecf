"""A bounded, derandomized fuzz run over every reader family (benchmarks/fuzz.py runs long ones).

Property: each mutated input either loads (and passes basic invariants) or raises the product's
ProfileError naming a file — never another exception, never a hang, never a dead process."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import fuzzkit

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "win32",
                                reason="the fuzz cases run in forked children")

EXAMPLES = 8  # per family: the whole module stays near a minute on a busy two-core machine


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    return {f.name: f for f in fuzzkit.families(tmp_path_factory.mktemp("fuzz-seeds"))}


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz-work")


NAMES = ["torch_npu text (sample)", "kineto (sample)", "source (sample)", "torch_npu text (real)",
         "torch_npu csv (real)", "torch_npu DB (real)", "kineto (real)", "source (real)", "msprof CLI (synthetic)"]


@pytest.mark.parametrize("name", NAMES)
def test_mutated_inputs_load_or_fail_cleanly(families, work, name):
    family = families[name]
    if family.skip:
        pytest.skip(family.skip)

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(kind=st.sampled_from(fuzzkit.KINDS), target=st.sampled_from(family.files),
           seed=st.integers(0, 2**32 - 1))
    def case(kind: str, target: str, seed: int) -> None:
        out = fuzzkit.run_case(family, work / "case", kind, target, seed, timeout_s=60)
        assert out.kind in ("load", "error"), f"{name} / {target} / {kind} / seed {seed}: {out.kind}: {out.detail}"

    case()


def test_the_harness_sees_internal_errors_hangs_and_crashes(work):
    """The property cannot pass by accident: a broken reader is reported as such."""
    seed = work / "seed.txt"
    seed.write_text("x")

    def boom(_: Path) -> object:
        raise IndexError("list index out of range")

    def stuck(_: Path) -> object:
        import time

        time.sleep(30)

    def dies(_: Path) -> object:
        os.kill(os.getpid(), 11)

    for run, expected in ((boom, "internal"), (stuck, "hang"), (dies, "crash")):
        family = fuzzkit.Family("probe", seed, ("",), run)
        assert fuzzkit.run_case(family, work / "probe", "truncation", "", 1, timeout_s=3).kind == expected


# Cases long runs of benchmarks/fuzz.py found (each was an internal error before its fix).
FOUND = [
    ("torch_npu text (sample)", "numbers", "ASCEND_PROFILER_OUTPUT/kernel_details.csv", 521844312),  # negative duration
    ("torch_npu csv (real)", "numbers", "kernel_details.csv", 3964771417),  # a 5,000-digit time cell
    ("msprof CLI (synthetic)", "numbers", "host/info.json", 2190361058),  # int(inf) of a 400-digit value
    ("kineto (real)", "numbers", "", 3055143488),  # an int past int64 in Input Dims
    ("kineto (real)", "encoding", "", 3277108649),  # bad UTF-8 in an arg list
]


@pytest.mark.parametrize("name,kind,target,seed", FOUND)
def test_cases_found_by_long_runs(families, work, name, kind, target, seed):
    family = families[name]
    if family.skip:
        pytest.skip(family.skip)
    out = fuzzkit.run_case(family, work / "found", kind, target, seed, timeout_s=60)
    assert out.kind in ("load", "error"), out.detail
