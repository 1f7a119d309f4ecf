"""The step replay (mapping/source/replay.py): hand-built steps with known answers, the unchanged
replay against the recording on the samples and the real fixtures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from msprof_lsp.mapping.profile.load import load_location, locate
from msprof_lsp.mapping.profile.model import (
    HOST_EVENT_SCHEMA, HOST_OP_SCHEMA, KERNEL_SCHEMA, Profile, ProfileKind, ProfileMeta, Step, make_table,
)
from msprof_lsp.mapping.source.replay import WhatIf, replay_base, what_if

REPO = Path(__file__).resolve().parents[3]


def _profile(host_ops: dict, kernels: dict, events: dict | None = None) -> Profile:
    meta = ProfileMeta(ProfileKind.KINETO, "/nowhere")
    p = Profile(meta=meta, host_ops=make_table(HOST_OP_SCHEMA, host_ops), kernels=make_table(KERNEL_SCHEMA, kernels))
    if events:
        p.host_events = make_table(HOST_EVENT_SCHEMA, events)
    p.steps = [Step(0, 0, 1000)]
    return p


def _device_bound() -> Profile:
    """Host: A [0, 100) launches K1 ([50, 450) on stream 7); B [100, 150) launches K2 ([450, 850),
    queued behind K1); cudaDeviceSynchronize [150, 860) waits for K2. Recorded: 860."""
    return _profile(
        {"name": ["A", "B"], "start_ns": [0, 100], "dur_ns": [100, 50], "pid": [1, 1], "tid": [1, 1]},
        {"name": ["k1", "k2"], "core": ["GPU", "GPU"], "start_ns": [50, 450], "dur_ns": [400, 400],
         "stream": [7, 7], "device": [0, 0], "step": [0, 0], "host_op": [0, 1]},
        {"name": ["cudaLaunchKernel", "cudaDeviceSynchronize"], "cat": ["cuda_runtime"] * 2,
         "start_ns": [40, 150], "dur_ns": [10, 710], "pid": [1, 1], "tid": [1, 1]},
    )


def _saved(p: Profile, change: WhatIf) -> int:
    (s,) = what_if(p, change)
    return s.saving_ns


def test_unchanged_replay_reproduces_the_hand_built_step():
    base = replay_base(_device_bound())
    (m,) = base.steps
    assert m.recorded_ns == m.base_ns == 860
    assert base.residual_ns == 0


def test_removing_an_on_path_kernel_saves_up_to_its_duration():
    """Without K1, K2 starts once B has launched it (150; the smallest launch delay seen is 0) and
    ends at 550; the sync returns 10 ns later: 560, so 300 of K1's 400 ns are saved (B's launch
    bounds the rest)."""
    p = _device_bound()
    assert _saved(p, WhatIf(np.array([0]), np.array([0.0]))) == 300
    # half as long: K2 starts at 250 (K1's end), ends at 650, the sync returns at 660
    assert _saved(p, WhatIf(np.array([0]), np.array([0.5]))) == 200


def test_removing_an_off_path_kernel_saves_nothing():
    """Tiny kernels behind slow host ops: the host sets the step; its kernels are off the path."""
    p = _profile(
        {"name": ["A", "B"], "start_ns": [0, 300], "dur_ns": [300, 300], "pid": [1, 1], "tid": [1, 1]},
        {"name": ["k1", "k2"], "core": ["GPU", "GPU"], "start_ns": [100, 400], "dur_ns": [20, 20],
         "stream": [7, 7], "device": [0, 0], "step": [0, 0], "host_op": [0, 1]},
    )
    assert _saved(p, WhatIf(np.array([0, 1]), np.array([0.0, 0.0]))) == 0
    # the host op's own time is the step: removing half of A's saves 150
    assert _saved(p, WhatIf(host_ops=np.array([0]), host_op_factors=np.array([0.5]))) == 150


def test_a_removed_sync_lets_the_host_run_ahead():
    """Without the sync the host is done at 150; the step is then the device's: its last end (850)
    less its idle lead at the start (50), 800 -- the next step's host work overlaps the tail."""
    p = _device_bound()
    assert _saved(p, WhatIf(removed_syncs=np.array([1]))) == 60
    assert _saved(p, WhatIf(removed_syncs=np.array([0]))) == 0  # the launch call is not a sync


@pytest.mark.parametrize("profile", [
    "samples/cnn_classifier/npu_profile/ma-node-0_3185260_20250731080000000_ascend_pt",
    "samples/tiny_transformer/npu_profile/ma-node-1_4021733_20250731090000000_ascend_pt",
])
def test_unchanged_replay_reproduces_the_samples(profile):
    p = load_location(locate(REPO / profile), use_cache=False)
    base = replay_base(p)
    assert base.unavailable is None and base.steps
    assert base.residual_ns == 0
    # and the replayed step is the recorded ProfilerStep (the host waits for the device at its syncs)
    for m, step in zip(base.steps, p.steps):
        assert m.base_ns == step.dur_ns


REAL = [
    "HolisticTraceAnalysis/trace_diff/control/control.json.gz",  # CUDA, 6 steps
    "Ascend-msinsight/text/level1/rank0_ascend_pt",  # torch_npu text export
    "Ascend-msinsight/db/level1/rank0_ascend_pt",  # torch_npu DB export
]


@pytest.mark.parametrize("name", REAL)
def test_unchanged_replay_reproduces_real_fixtures(name):
    """Real captures: the unchanged replay lands on every recorded time, so the residual is 0 ns
    (a step whose graph has a cycle is left out and named in the notes, never replayed wrong)."""
    from tests.conftest import shared_fixture

    p = load_location(locate(shared_fixture(name)), use_cache=False)
    base = replay_base(p)
    assert base.unavailable is None and base.steps and not base.notes
    assert base.residual_ns == 0
    assert all(m.base_ns > 0 for m in base.steps)


def test_the_ordered_pass_gives_the_same_times(monkeypatch):
    """Past VECTOR_ROUNDS the relaxation falls back to one pass in topological order: same
    answers (the device-bound step, with and without a change)."""
    from msprof_lsp.mapping.source import replay

    p = _device_bound()
    want = [_saved(p, WhatIf(np.array([0]), np.array([0.0]))), _saved(p, WhatIf(removed_syncs=np.array([1])))]
    monkeypatch.setattr(replay, "VECTOR_ROUNDS", 0)
    p = _device_bound()  # a fresh profile: nothing memoised
    base = replay_base(p)
    assert base.residual_ns == 0 and base.steps[0].base_ns == 860
    assert [_saved(p, WhatIf(np.array([0]), np.array([0.0]))), _saved(p, WhatIf(removed_syncs=np.array([1])))] == want
