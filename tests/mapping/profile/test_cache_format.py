"""mapping.codec / mapping.cache format: every profile kind round-trips exactly; bad entries are
discarded with one notice and rebuilt; nothing in the product unpickles."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import re
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from msprof_lsp.mapping.profile import cache, codec
from msprof_lsp.mapping.profile.discover import find_all
from msprof_lsp.mapping.profile.frames import Frame
from msprof_lsp.mapping.profile.load import load_location
from msprof_lsp.mapping.profile.model import Profile, ProfileKind
from msprof_lsp.mapping.profile.timemodel import BreakdownSource, profile_breakdown
from tests.conftest import FIXTURES, REPO
from tests.synth import write_kineto, write_msprof_cli, write_torch_npu_db, write_torch_npu_text
from tests.synth.examples import small_run


def assert_same_profile(a: Profile, b: Profile) -> None:
    """Field by field, dtypes and categories included (DataFrame.equals would accept less)."""
    for f in dataclasses.fields(Profile):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "derived":  # a memo, on one side or both: what it gives must be the same
            assert profile_breakdown(a) == profile_breakdown(b), f.name
            continue
        if isinstance(x, pd.DataFrame) or isinstance(y, pd.DataFrame):
            assert isinstance(x, pd.DataFrame) and isinstance(y, pd.DataFrame), f.name
            pd.testing.assert_frame_equal(x, y, check_exact=True, check_categorical=True, obj=f.name)
            assert list(x.dtypes.astype(str)) == list(y.dtypes.astype(str)), f.name
            for col in x.columns:
                if isinstance(x[col].dtype, pd.CategoricalDtype):
                    assert x[col].cat.categories.equals(y[col].cat.categories), (f.name, col)
                    assert x[col].cat.categories.dtype == y[col].cat.categories.dtype, (f.name, col)
        else:
            assert x == y, f.name
            assert type(x) is type(y), f.name
    assert all(type(s) is tuple and all(type(fr) is Frame for fr in s) for s in b.stacks)
    assert type(b.meta.export_type) is tuple


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True)
    return p


def _synth_roots(tmp: Path) -> dict[str, Path]:
    run = small_run(steps=2)
    return {
        "text": write_torch_npu_text(run, tmp / "text"),
        "db": write_torch_npu_db(run, tmp / "db"),
        "msprof": write_msprof_cli(run, tmp / "msprof"),
        "kineto": write_kineto(run, _mkdir(tmp / "kineto") / "k.pt.trace.json", device="cuda"),
    }


@pytest.fixture(scope="module")
def synth_roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _synth_roots(tmp_path_factory.mktemp("synth"))


EXPECTED_KIND = {
    "text": ProfileKind.TORCH_NPU,
    "db": ProfileKind.TORCH_NPU_DB,
    "msprof": ProfileKind.MSPROF,
    "kineto": ProfileKind.KINETO,
}


def _round_trip(root: Path, cache_dir: Path) -> tuple[Profile, Profile]:
    (loc,) = [loc for loc in find_all([root])][:1]
    cold = load_location(loc, cache_dir=cache_dir)
    assert cache.entry_path(loc, cache_dir).is_file(), "the profile was not cached"
    warm = cache.load(loc, cache_dir)
    assert warm.discarded is None and warm.profile is not None
    return cold, warm.profile


@pytest.mark.parametrize("kind", sorted(EXPECTED_KIND))
def test_synthetic_profiles_round_trip_exactly(kind: str, synth_roots, tmp_path: Path) -> None:
    root = synth_roots[kind]
    (loc,) = find_all([root])[:1]
    assert loc.kind is EXPECTED_KIND[kind]
    cold, warm = _round_trip(root, tmp_path)
    assert len(cold.kernels) > 0
    assert_same_profile(cold, warm)


@pytest.mark.parametrize(
    "sample",
    [
        "cnn_classifier/npu_profile/ma-node-0_3185260_20250731080000000_ascend_pt",
        "tiny_transformer/npu_profile/ma-node-1_4021733_20250731090000000_ascend_pt",
        "cnn_classifier/kineto",
        "tiny_transformer/kineto",
    ],
)
def test_samples_round_trip_exactly(sample: str, tmp_path: Path) -> None:
    cold, warm = _round_trip(REPO / "samples" / sample, tmp_path)
    assert cold.stacks, "the samples carry call stacks"
    assert_same_profile(cold, warm)


REAL = [
    "Ascend-msinsight/text",
    "Ascend-msinsight/db",
    "pytorch-kineto-tb_plugin/resnet50_num_workers_0",
]


@pytest.mark.shared
@pytest.mark.parametrize("rel", REAL)
def test_real_fixtures_round_trip_exactly(rel: str, fixtures_dir: Path, tmp_path: Path) -> None:
    locations = find_all([fixtures_dir / rel])
    assert locations, f"no profile under {rel}"
    for loc in locations[:3]:
        cold = load_location(loc, cache_dir=tmp_path)
        warm = cache.load(loc, tmp_path)
        assert warm.discarded is None and warm.profile is not None, loc.path
        assert_same_profile(cold, warm.profile)


def test_codec_covers_every_profile_field() -> None:
    assert codec.COVERED_FIELDS == {f.name for f in dataclasses.fields(Profile)}


def test_decoded_tables_take_in_place_writes(synth_roots, tmp_path: Path) -> None:
    """Columns are views into the read buffer: they must be aligned and writable like a read's."""
    _, warm = _round_trip(synth_roots["text"], tmp_path)
    k = warm.kernels
    assert k["start_ns"].array._ndarray.flags.aligned
    k.loc[0, "start_ns"] = 7
    k.loc[1, "name"] = k["name"].iloc[0]
    assert k["start_ns"].iloc[0] == 7 and k["name"].iloc[1] == k["name"].iloc[0]


# -- bad entries ---------------------------------------------------------------------------------------------


@pytest.fixture
def entry(synth_roots, tmp_path: Path):
    (loc,) = find_all([synth_roots["text"]])[:1]
    load_location(loc, cache_dir=tmp_path)
    return loc, tmp_path, cache.entry_path(loc, tmp_path)


def test_entry_carries_the_breakdown_so_a_warm_load_does_not_recompute_it(entry) -> None:
    loc, cache_dir, _ = entry
    fresh = profile_breakdown(load_location(loc, use_cache=False))
    hit = cache.load(loc, cache_dir).profile
    assert hit is not None and hit.derived.breakdown == fresh and fresh.steps
    assert profile_breakdown(hit) is hit.derived.breakdown  # taken from the entry, not recomputed
    # A field replaced after loading makes the memo stale: without the producer's step rows the
    # breakdown is computed again, from the tasks.
    assert fresh.source is BreakdownSource.STEP_TRACE_TIME
    hit.step_breakdown = []
    assert profile_breakdown(hit).source is BreakdownSource.TASKS


class _Boom:
    def __reduce__(self):
        return (os.mkdir, (str(MARKER_DIR),))


MARKER_DIR = Path("/nonexistent-placeholder")


def _planted_pickle(marker: Path) -> bytes:
    global MARKER_DIR
    MARKER_DIR = marker
    return pickle.dumps(_Boom())


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1:]


def _damaged(good: bytes, kind: str, marker: Path) -> bytes:
    magic, fmt, head_len = struct.unpack_from("<8sII32s", good)[:3]
    payload_at = 48 + head_len
    if kind == "empty":
        return b""
    if kind == "truncated":
        return good[: len(good) // 2]
    if kind == "trailing":
        return good + b"\0"
    if kind == "flipped payload byte":
        return _flip(good, payload_at + (len(good) - payload_at) // 2)
    if kind == "flipped header byte":
        return _flip(good, 48 + head_len // 2)
    if kind == "wrong format":
        return good[:8] + struct.pack("<I", fmt + 1) + good[12:]
    if kind == "flipped header digest":
        return _flip(good, 20)
    if kind == "planted pickle":
        return _planted_pickle(marker)
    if kind == "pickle behind our magic":
        # A forger who knows the layout: our preamble, then a pickle as header and payload.
        blob = _planted_pickle(marker)
        return struct.pack("<8sII32s", magic, fmt, len(blob), hashlib.sha256(blob).digest()) + blob + blob
    raise AssertionError(kind)


DAMAGE = ["empty", "truncated", "trailing", "flipped payload byte", "flipped header byte", "flipped header digest",
          "wrong format",
          "planted pickle", "pickle behind our magic"]


@pytest.mark.parametrize("kind", DAMAGE)
def test_bad_entry_is_discarded_with_one_notice_and_rebuilt(kind: str, entry, tmp_path: Path) -> None:
    loc, cache_dir, path = entry
    good = path.read_bytes()
    marker = tmp_path / "pwned"
    path.write_bytes(_damaged(good, kind, marker))
    profile = load_location(loc, cache_dir=cache_dir)
    notices = [i for i in profile.issues if "cache entry" in i.message]
    assert len(notices) == 1, profile.issues
    assert notices[0].path == str(path) and "discarded and rebuilt" in notices[0].message
    assert not marker.exists()
    # Rebuilt: the next load is a clean hit, with no notice.
    again = cache.load(loc, cache_dir)
    assert again.discarded is None and again.profile is not None
    assert not [i for i in again.profile.issues if "cache entry" in i.message]
    assert_same_profile(again.profile, load_location(loc, use_cache=False))


def test_forged_checksum_cannot_smuggle_an_object_dtype(entry) -> None:
    """Even with a valid digest, a buffer can only become a numeric array."""
    loc, cache_dir, path = entry
    good = path.read_bytes()
    _, _, head_len = struct.unpack_from("<8sII32s", good)[:3]
    payload = bytearray(good[48 + head_len:])
    i = payload.find(b"<i8")
    assert i > 0
    payload[i:i + 3] = b"|O8"  # numpy's object dtype, same length in the msgpack string
    assert np.dtype("|O8").kind == "O"
    with pytest.raises(codec.CodecError, match="cannot come from a buffer"):
        codec.decode(payload)


def test_forged_entry_with_valid_digests_and_deep_nesting(entry) -> None:
    """A forger can compute the digests; a decoder limit (msgspec's RecursionError) is still only a
    discarded entry."""
    import msgspec

    loc, cache_dir, path = entry
    profile = load_location(loc, use_cache=False)
    marker = "\x00deep-goes-here\x00"
    profile.meta.extra["deep"] = marker
    pieces = codec.encode(profile)
    head = bytes(pieces[1]).replace(msgspec.msgpack.encode(marker), b"\x91" * 100_000 + b"\xc0")
    forged = [memoryview(struct.pack("<Q", len(head))), memoryview(head),
              memoryview(bytes(-(8 + len(head)) % codec.ALIGN)), *pieces[3:]]
    assert cache.write_entry(path, loc, cache.fingerprint(loc), forged)
    rebuilt = load_location(loc, cache_dir=cache_dir)
    notices = [i for i in rebuilt.issues if "cache entry" in i.message]
    assert len(notices) == 1 and "manifest" in notices[0].message
    assert cache.load(loc, cache_dir).discarded is None


def test_a_link_at_the_entry_name_is_not_followed(entry, tmp_path: Path) -> None:
    loc, cache_dir, path = entry
    target = tmp_path / "elsewhere.bin"
    target.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(target)
    lookup = cache.load(loc, cache_dir)
    assert lookup.profile is None and lookup.discarded is not None
    assert target.exists() and not path.is_symlink()


def test_stale_entry_is_rebuilt_without_a_notice(entry) -> None:
    loc, cache_dir, path = entry
    trace = Path(loc.path) / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    st = trace.stat()
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    lookup = cache.load(loc, cache_dir)
    assert lookup.profile is None and lookup.discarded is None
    profile = load_location(loc, cache_dir=cache_dir)
    assert not [i for i in profile.issues if "cache entry" in i.message]


def test_header_digest_is_sha256_of_the_payload(entry) -> None:
    import msgspec

    loc, cache_dir, path = entry
    good = path.read_bytes()
    _, _, head_len = struct.unpack_from("<8sII32s", good)[:3]
    header = msgspec.msgpack.decode(good[48:48 + head_len])
    payload = good[48 + head_len:]
    assert header["payload_size"] == len(payload)
    assert header["payload_digest"] == hashlib.sha256(payload).digest()
    assert good[16:48] == hashlib.sha256(good[48:48 + head_len]).digest()


# -- no pickle in the product ----------------------------------------------------------------------------------


def test_no_pickle_in_the_product() -> None:
    pattern = re.compile(r"^\s*(import\s+(c?pickle|dill|shelve|marshal)\b|from\s+(c?pickle|dill|shelve|marshal)\s+import)", re.M)
    offenders = []
    for package in ("mapping", "hints", "server"):
        for py in (REPO / package).rglob("*.py"):
            text = py.read_text(encoding="utf-8")
            if pattern.search(text) or "pd.read_pickle" in text or "allow_pickle=True" in text:
                offenders.append(str(py.relative_to(REPO)))
    assert offenders == []
