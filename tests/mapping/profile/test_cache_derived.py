"""Derived values kept with the profile cache (mapping.cache.store_derived, Profile.derived.memo
with ``persist``): a warm run reads the critical paths, the replay's step models and the op
tokens the first run computed,
equal to a fresh computation; another entry's, another build's or a damaged file is never used."""

from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import struct
from pathlib import Path

import msgspec
import numpy as np
import pytest

from msprof_lsp.hints import profile_query as pq
from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.mapping.profile import cache
from msprof_lsp.mapping.profile.load import load_location, locate
from msprof_lsp.mapping.profile.model import Derived, Persist, Profile
from msprof_lsp.mapping.source import critical_path as cp_mod
from msprof_lsp.mapping.source import replay
from msprof_lsp.mapping.source.critical_path import step_paths

SAMPLE = Path(__file__).resolve().parents[3] / "samples" / "tiny_transformer" / "npu_profile"


@pytest.fixture
def copy(tmp_path: Path):
    """A copy of the sample's export (its files may change) and a cache folder."""
    root = tmp_path / "npu_profile"
    shutil.copytree(SAMPLE, root)
    return locate(root), tmp_path / "cache"


def _analysed(loc, cache_dir: Path) -> Profile:
    """A load through the cache, then what an analysis derives (paths, step models, tokens), then the store."""
    profile = load_location(loc, cache_dir=cache_dir)
    step_paths(profile)
    replay.replay_base(profile)
    ctx = RuleContext(profile, None, None, RuleConfig())
    pq.host_tokens(ctx)
    pq.kernel_tokens(ctx)
    cache.store_derived(loc, profile, cache_dir)
    return profile


def _computations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count the real computations of the persisted values."""
    calls: list[str] = []
    for mod, name in ((cp_mod, "_step_paths"), (replay, "_replay_base"), (pq, "_host_tokens"), (pq, "_kernel_tokens")):
        real = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda *a, _real=real, _name=name, **k: (calls.append(_name), _real(*a, **k))[1])
    return calls


def _same_paths(a, b) -> None:
    assert [(s.step, s.total_ns, s.span_ns, s.segments, s.late_launches) for s in a.steps] == \
        [(s.step, s.total_ns, s.span_ns, s.segments, s.late_launches) for s in b.steps]
    for x, y in zip(a.steps, b.steps):
        for field in ("kernels", "host_ops", "host_self_ns"):
            assert np.array_equal(getattr(x, field), getattr(y, field))
    assert (a.notes, a.unavailable) == (b.notes, b.unavailable)


def _same_tokens(a: pq.Tokens, b: pq.Tokens) -> None:
    assert np.array_equal(a.rows, b.rows) and a.names == b.names and a.text == b.text
    assert np.array_equal(a.starts, b.starts)


def test_a_warm_load_reads_the_values_the_first_run_computed(copy, monkeypatch: pytest.MonkeyPatch) -> None:
    loc, cache_dir = copy
    _analysed(loc, cache_dir)
    fresh = load_location(loc, use_cache=False)
    calls = _computations(monkeypatch)
    warm = load_location(loc, cache_dir=cache_dir)
    ctx = RuleContext(warm, None, None, RuleConfig())
    paths, host, kern = step_paths(warm), pq.host_tokens(ctx), pq.kernel_tokens(ctx)
    models = replay.replay_base(warm)
    assert calls == []  # decoded from the file, not computed
    assert paths.steps and len(host.rows) and len(kern.rows) and models.steps
    change = replay.WhatIf(fresh.kernels.index.to_numpy()[::3], np.full(len(fresh.kernels.index[::3]), 0.5))
    assert replay.what_if(warm, change) == replay.what_if(fresh, change)
    assert [m.base_ns for m in models.steps] == [m.base_ns for m in replay.replay_base(fresh).steps]
    fresh_ctx = RuleContext(fresh, None, None, RuleConfig())
    _same_paths(paths, cp_mod._step_paths(fresh, cp_mod.MAX_STEPS))
    _same_tokens(host, pq._host_tokens(fresh))
    _same_tokens(kern, pq._kernel_tokens(fresh))
    assert pq.host_tokens(fresh_ctx).find(pq.pattern_regex("linear")) == host.find(pq.pattern_regex("linear"))
    assert not cache.store_derived(loc, warm, cache_dir)  # nothing new to write


def test_no_cache_run_and_replaced_fields_are_not_stored(copy, monkeypatch: pytest.MonkeyPatch) -> None:
    loc, cache_dir = copy
    uncached = load_location(loc, use_cache=False)
    step_paths(uncached)
    assert not cache.store_derived(loc, uncached, cache_dir)  # no entry to go with
    profile = load_location(loc, cache_dir=cache_dir)
    profile.steps = profile.steps[:1]  # no longer the entry's profile
    step_paths(profile)
    assert not cache.store_derived(loc, profile, cache_dir)
    assert not os.path.exists(_derived(loc, cache_dir))


def _derived(loc, cache_dir: Path) -> Path:
    entry = cache.entry_path(loc, cache_dir)
    return entry.with_name(entry.stem + cache.DERIVED_SUFFIX)


def test_values_of_a_replaced_entry_or_another_build_are_not_used(copy, monkeypatch: pytest.MonkeyPatch) -> None:
    loc, cache_dir = copy
    _analysed(loc, cache_dir)
    calls = _computations(monkeypatch)
    monkeypatch.setattr(cache, "_derived_code", lambda: "another build")
    step_paths(load_location(loc, cache_dir=cache_dir))
    assert calls == ["_step_paths"]
    monkeypatch.undo()
    # An input changes: the entry is rebuilt, and the values of the old one go with it.
    trace = Path(loc.path) / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    os.utime(trace, ns=(trace.stat().st_atime_ns, trace.stat().st_mtime_ns + 10**9))
    load_location(loc, cache_dir=cache_dir)
    assert not _derived(loc, cache_dir).exists()


def test_a_code_change_invalidates_the_entry(copy, monkeypatch: pytest.MonkeyPatch) -> None:
    loc, cache_dir = copy
    load_location(loc, cache_dir=cache_dir)
    assert cache.load(loc, cache_dir).profile is not None
    monkeypatch.setattr(cache, "code_version", lambda *packages: "edited")
    assert cache.load(loc, cache_dir).profile is None  # stale: rebuilt without a notice



def test_the_code_digest_follows_every_source_file(tmp_path: Path) -> None:
    (tmp_path / "mapping" / "profile").mkdir(parents=True)
    (tmp_path / "hints").mkdir()
    reader = tmp_path / "mapping" / "profile" / "reader.py"
    reader.write_text("X = 1\n")
    (tmp_path / "hints" / "rule.py").write_text("Y = 1\n")
    before = cache.source_digest(tmp_path, ("mapping",))
    assert cache.source_digest(tmp_path, ("mapping", "hints")) != before
    reader.write_text("X = 2\n")
    assert cache.source_digest(tmp_path, ("mapping",)) != before
    reader.write_text("X = 1\n")
    assert cache.source_digest(tmp_path, ("mapping",)) == before
    assert cache.code_version("mapping") == cache.source_digest(Path(cache.__file__).resolve().parents[2], ("mapping",))


class _Boom:
    def __reduce__(self):
        return (os.mkdir, ("/nonexistent-derived-marker",))


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "planted pickle", "link", "folder"])
def test_a_bad_derived_file_is_removed_and_the_values_computed(damage: str, copy, monkeypatch, tmp_path) -> None:
    loc, cache_dir = copy
    _analysed(loc, cache_dir)
    path = _derived(loc, cache_dir)
    good = path.read_bytes()
    path.unlink()
    if damage == "flipped byte":
        path.write_bytes(good[:-7] + bytes([good[-7] ^ 0x40]) + good[-6:])
    elif damage == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "planted pickle":
        path.write_bytes(pickle.dumps(_Boom()))
    elif damage == "link":
        (tmp_path / "elsewhere").write_bytes(good)
        path.symlink_to(tmp_path / "elsewhere")
    else:
        path.mkdir()
    calls = _computations(monkeypatch)
    warm = load_location(loc, cache_dir=cache_dir)
    assert warm.derived.entry is not None and not warm.issues  # the entry itself is still a hit
    assert damage == "folder" or not os.path.lexists(path)  # removed (a link: the link, not its target)
    assert (tmp_path / "elsewhere").exists() == (damage == "link")
    step_paths(warm)
    assert calls == ["_step_paths"]
    assert cache.store_derived(loc, warm, cache_dir) == (damage != "folder")


def test_a_forged_file_with_valid_digests_cannot_give_bad_rows(copy, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whoever can write the cache folder can compute the digest: a value whose typed decoding
    fails (row bytes not a whole number of int64) is computed again instead."""
    loc, cache_dir = copy
    profile = _analysed(loc, cache_dir)
    assert profile.derived.entry is not None
    forged = {name: b"\x93\x00" for name in profile.derived.stored}  # a msgpack array, not the record
    body = cache._ENCODER.encode(cache._DerivedFile(cache.package_version(), cache._derived_code(),
                                                    profile.derived.entry, forged))
    head = struct.pack("<8sII32s", cache.DERIVED_MAGIC, cache.CACHE_FORMAT, len(body), cache._digest(body))
    _derived(loc, cache_dir).write_bytes(head + body)
    calls = _computations(monkeypatch)
    warm = load_location(loc, cache_dir=cache_dir)
    assert warm.derived.stored  # read: the file itself is well-formed
    step_paths(warm)
    pq.host_tokens(RuleContext(warm, None, None, RuleConfig()))
    assert calls == ["_step_paths", "_host_tokens"]


def test_fields_are_every_profile_field_but_derived() -> None:
    names = [f.name for f in dataclasses.fields(Profile) if f.name != "derived"]
    p = Profile.__new__(Profile)
    for i, name in enumerate(names):
        object.__setattr__(p, name, (i,))  # a distinct object per field
    assert [x[0] for x in p.fields()] == list(range(len(names)))


def test_memo_decodes_only_for_the_entrys_fields() -> None:
    d = Derived()
    a, b = object(), object()
    d.stored_for, d.stored = (a,), {"v": b"7"}
    how = Persist(lambda v: str(v).encode(), lambda raw: int(raw))
    assert d.memo("v", (a,), lambda: 1, how) == 7 and d.to_store() == {}
    assert d.memo("v", (b,), lambda: 2, how) == 2 and d.to_store() == {}  # not the entry's: never stored
    d.stored = {"w": b"not a number"}
    assert d.memo("w", (a,), lambda: 3, how) == 3 and d.to_store() == {"w": b"3"}


def test_the_token_searches_travel_with_the_tokens(copy) -> None:
    """The fused-API search's matches per pattern are stored with the tokens: a warm run finds
    them without searching, the same ranges; forged ranges are refused (the tokens computed again)."""
    loc, cache_dir = copy
    profile = load_location(loc, cache_dir=cache_dir)
    ctx = RuleContext(profile, None, None, RuleConfig())
    regex = pq.pattern_regex("linear")
    want = pq.host_tokens(ctx).find(regex)
    assert want
    assert cache.store_derived(loc, profile, cache_dir)
    warm = load_location(loc, cache_dir=cache_dir)
    toks = pq.host_tokens(RuleContext(warm, None, None, RuleConfig()))
    assert toks.found[(regex.pattern, regex.flags)] == want  # so find answers without searching
    assert toks.find(regex) == want
    # two threads: linear, relu | linear (token 2 is the break)
    two = pq._tokens(np.arange(3), np.array(["linear", "relu", "linear"], dtype=object), np.array([0, 0, 1]))
    assert two.find(regex) == [(0, 1), (3, 4)]
    rec = pq._TOKENS_DECODER.decode(pq.TOKENS_PERSIST.encode(two))
    assert pq.TOKENS_PERSIST.decode(pq.TOKENS_PERSIST.encode(two)).found == two.found
    n = len(rec.names)
    for bad in ([0], [1, 1], [0, n + 1], [0, 2, 1, 3], [-1, 1], [1, 3]):
        forged = msgspec.structs.replace(rec, found=[(regex.pattern, regex.flags, np.asarray(bad, "<i8").tobytes())])
        with pytest.raises(ValueError):
            pq.TOKENS_PERSIST.decode(msgspec.msgpack.encode(forged))
