"""The real torch_npu results in ../shared/fixtures after step inference, checked against a
workspace of unrelated code (the harness models): markers are kept where the producer wrote
them, nothing is inferred where nothing repeats, and no device time lands on a line of code the
profile did not come from. (The fixtures hold no msprof CLI PROF_* folder; their Level0 and
stack-less captures are the verl and advisor ones.)"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import shared_fixture
from tests.nostack.jobs import MODELS

from msprof_lsp.server.check.command import run_check
from msprof_lsp.server.cli import CheckArgs

# fixture, producer's step count (step_trace_time.csv rows / ProfilerStep#N events), steps_source
CASES = (
    ("Ascend-msinsight/text/level1/rank0_ascend_pt", 1, "markers"),
    ("Ascend-msinsight/db/level1/rank0_ascend_pt", 1, "markers"),
    ("Ascend-msprof-analyze/test/ut/advisor/timeline_advice/trace_view.json", 1, "markers"),  # no stacks
    ("verl-project-rl-insight/data/recipe/memory_data/20260526_085155_ascend_pt", 1, "capture span"),  # Level0
    ("verl-project-rl-insight/data/recipe/mstx_data/mstx_profile/agent_loop_rollout_replica_0/xxx_ascend_pt", 1,
     "capture span"),  # Overlap Analysis lanes only
)


@pytest.fixture(scope="module")
def unrelated_workspace(tmp_path_factory) -> Path:
    ws = tmp_path_factory.mktemp("ws")
    for model in MODELS.glob("*.py"):
        shutil.copyfile(model, ws / model.name)
    return ws


@pytest.mark.parametrize(("relative", "steps", "source"), CASES, ids=[c[0].split("/")[0] + ":" + c[0].rsplit("/", 1)[-1]
                                                                         for c in CASES])
def test_real_profile_loads_keeps_its_steps_and_maps_nothing_here(relative, steps, source,
                                                                   unrelated_workspace) -> None:
    path = shared_fixture(relative)
    out, err = io.StringIO(), io.StringIO()
    status = run_check(CheckArgs(paths=[str(unrelated_workspace)], profile=str(path), format="json", fail_on="never",
                                 no_cache=True), stdout=out, stderr=err)
    assert status == 0, err.getvalue()
    doc = json.loads(out.getvalue())
    prof = doc["profile"]
    assert (prof["steps"], prof["steps_source"]) == (steps, source)
    assert not [i for i in prof["issues"] if "steps inferred" in i]
    # no kernel reached the unrelated scripts: no hotspot, nothing mapped, no stack-anchored finding
    assert doc["hotspots"] == [] and prof["mapped_share"] == 0
    assert not [f for f in doc["findings"] if f["confidence"] == "stack" and f.get("line")]
