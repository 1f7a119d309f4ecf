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


# -- the models stored with the cache entry (replay.PERSIST) ------------------------------------

CHANGES = [
    WhatIf(np.array([0]), np.array([0.0])),
    WhatIf(np.array([0, 1]), np.array([0.5, 0.25])),
    WhatIf(host_ops=np.array([0, 1]), host_op_factors=np.array([0.5, 0.0])),
    WhatIf(removed_syncs=np.array([0, 1, 2, 3])),
]


def _from_store(make, raw: bytes) -> Profile:
    """A fresh profile whose cache entry holds ``raw`` as its replay models (what a warm load gives)."""
    from msprof_lsp.mapping.source import replay

    p = make()
    p.derived.stored_for = p.fields()
    p.derived.stored = {f"replay/{replay.MAX_STEPS}": raw}
    return p


def _sample() -> Profile:
    return load_location(locate(REPO / "samples/tiny_transformer/npu_profile"), use_cache=False)


@pytest.mark.parametrize("make", [_device_bound, _sample], ids=["hand-built", "tiny_transformer"])
def test_stored_models_give_the_same_savings(make, monkeypatch):
    """A warm run decodes the step models instead of building them: every field and every
    change's replay is what the models just built give."""
    from msprof_lsp.mapping.source import replay

    p = make()
    built = replay_base(p)
    want = [what_if(p, c) for c in CHANGES]
    raw = replay.PERSIST.encode(built)
    monkeypatch.setattr(replay, "_replay_base", lambda *a: pytest.fail("built, not decoded"))
    warm = _from_store(make, raw)
    got = replay_base(warm)
    assert (got.unavailable, got.notes, got.residual_ns) == (built.unavailable, built.notes, built.residual_ns)
    for a, b in zip(built.steps, got.steps, strict=True):
        for name in a.__slots__:
            x, y = getattr(a, name), getattr(b, name)
            assert (x.dtype == y.dtype and np.array_equal(x, y)) if isinstance(x, np.ndarray) else x == y, name
    assert [what_if(warm, c) for c in CHANGES] == want
    assert warm.derived.to_store() == {}  # read, so nothing to write back


def _forged(raw: bytes, **fields) -> bytes:
    """``raw`` with its first step's record fields replaced."""
    import msgspec

    from msprof_lsp.mapping.source import replay

    rec = replay._BASE_DECODER.decode(raw)
    first = msgspec.structs.replace(rec.steps[0], **fields)
    return msgspec.msgpack.encode(msgspec.structs.replace(rec, steps=[first, *rec.steps[1:]]))


def _i8(*values: int) -> bytes:
    return np.asarray(values, "<i8").tobytes()


DAMAGE = {
    "truncated": lambda raw, m: raw[: len(raw) // 2],
    "not msgpack": lambda raw, m: b"\x80\x05not a record",
    "another record": lambda raw, m: b"\x93\x00\x00\x00",
    "short array": lambda raw, m: _forged(raw, chain_w=_i8(*m.chain_w[:-1])),
    "ragged array": lambda raw, m: _forged(raw, fixed=_i8(*m.fixed) + b"\x00"),
    "edge out of range": lambda raw, m: _forged(raw, x_src=_i8(*m.x_src[:-1], len(m.rec))),
    "negative edge": lambda raw, m: _forged(raw, x_dst=_i8(-1, *m.x_dst[1:])),
    "edges unsorted": lambda raw, m: _forged(raw, x_dst=_i8(*m.x_dst[::-1])),
    "chain code": lambda raw, m: _forged(raw, chain=bytes([9]) + m.chain[1:].astype("i1").tobytes()),
    "no first head": lambda raw, m: _forged(raw, head=bytes(len(m.rec))),
    "host points": lambda raw, m: _forged(raw, n_host=m.n_host + 1),
    "time out of range": lambda raw, m: _forged(raw, rec=_i8(1 << 41, *m.rec[1:])),
    "latency out of range": lambda raw, m: _forged(raw, x_w=_i8(-(1 << 41), *m.x_w[1:])),
    "row below -1": lambda raw, m: _forged(raw, chain_kernel=_i8(-2, *m.chain_kernel[1:])),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_stored_model_is_refused_and_built_again(damage, monkeypatch):
    """The stored models come from a cache file (untrusted: anyone who can write the cache folder
    can forge one with valid digests): anything the replay could not have built is refused, the
    models are built again (and written back), and the savings are right."""
    from msprof_lsp.mapping.source import replay

    built = replay_base(_device_bound())
    want = [what_if(_device_bound(), c) for c in CHANGES]
    bad = DAMAGE[damage](replay.PERSIST.encode(built), built.steps[0])
    with pytest.raises(Exception):
        replay.PERSIST.decode(bad)
    calls = []
    real = replay._replay_base
    monkeypatch.setattr(replay, "_replay_base", lambda *a: (calls.append(1), real(*a))[1])
    warm = _from_store(_device_bound, bad)
    assert [what_if(warm, c) for c in CHANGES] == want
    assert calls == [1] and list(warm.derived.to_store()) == [f"replay/{replay.MAX_STEPS}"]
