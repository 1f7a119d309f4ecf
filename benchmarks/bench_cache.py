"""Cache format benchmark: candidate on-disk formats for a loaded profile, on the same profile.

    python benchmarks/bench_cache.py --mb 100            # generate a torch_npu result, then measure
    python benchmarks/bench_cache.py PATH/TO/x_ascend_pt # measure an existing profile

Loads the profile once cold (the product's readers, no cache), then writes and reads it back with
every candidate, best of ``--repeat`` runs each, and prints write time, load time and size as
ratios against pickle (the format the cache used before, measured in the same run), and the
product's warm load (``load_location`` on a filled cache: stamps, checksums, decoding) against the
cold load. Candidates:

* ``pickle``: protocol 5, the Profile object as is (baseline; runs code when read, so not usable);
* ``msgpack + buffers`` (the product, mapping.codec): typed msgpack manifest, numeric columns and
  category codes as raw aligned buffers, decoded as zero-copy views; checksummed by the cache;
* ``npz + msgpack``: numeric columns and codes in an uncompressed ``.npz`` (``allow_pickle=False``),
  strings and records in msgpack;
* ``msgpack only``: every column as a msgpack list (numbers and strings alike).

The last two share the product's manifest for everything but the tables, so only the table
strategy differs.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import os
import pickle  # the baseline only; the product never imports it
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import best  # noqa: E402

from msprof_lsp.mapping.profile import cache, codec  # noqa: E402
from msprof_lsp.mapping.profile.discover import find_all  # noqa: E402
from msprof_lsp.mapping.profile.load import load_location  # noqa: E402
from msprof_lsp.mapping.profile.model import Profile  # noqa: E402


# ---------------------------------------------------------------------------------------------
# Candidates: write(profile, path) and read(path) -> Profile


def pickle_write(profile: Profile, path: Path) -> None:
    with open(path, "wb") as f:
        pickle.dump(profile, f, protocol=5)


def pickle_read(path: Path) -> Profile:
    with open(path, "rb") as f:
        return pickle.load(f)


def _without_tables(profile: Profile) -> Profile:
    empty = {name: getattr(profile, name).iloc[:0] for name in codec.TABLE_FIELDS[:5]}
    return dataclasses.replace(profile, **empty, api_statistic=None, op_memory=None, memory_record=None)


def _tables(profile: Profile) -> dict[str, pd.DataFrame]:
    return {n: getattr(profile, n) for n in codec.TABLE_FIELDS if getattr(profile, n) is not None}


def _split(frame: pd.DataFrame) -> tuple[dict[str, np.ndarray], dict]:
    """Numeric columns and category codes as arrays; strings and dtypes as a msgpack-able dict."""
    arrays: dict[str, np.ndarray] = {}
    spec: dict = {"columns": []}
    for i, col in enumerate(frame.columns):
        s = frame[col]
        if isinstance(s.dtype, pd.CategoricalDtype):
            arrays[f"c{i}"] = np.asarray(s.cat.codes)
            spec["columns"].append([col, "cat", s.cat.categories.tolist(), str(s.cat.categories.dtype)])
        elif isinstance(s.dtype, np.dtype) and s.dtype.kind in "biuf":
            arrays[f"c{i}"] = s.to_numpy()
            spec["columns"].append([col, "num", None, None])
        else:
            spec["columns"].append([col, "obj", s.tolist(), str(s.dtype)])
    return arrays, spec


def _join(arrays, spec: dict) -> pd.DataFrame:
    data = {}
    for i, (col, kind, values, dtype) in enumerate(spec["columns"]):
        if kind == "cat":
            data[col] = pd.Categorical.from_codes(arrays[f"c{i}"], categories=pd.Index(values, dtype=dtype))
        elif kind == "num":
            data[col] = arrays[f"c{i}"]
        else:
            data[col] = pd.array(values, dtype=dtype) if dtype != "object" else np.array(values, dtype=object)
    return pd.DataFrame(data)


def npz_write(profile: Profile, path: Path) -> None:
    arrays: dict[str, np.ndarray] = {}
    specs = {}
    for name, frame in _tables(profile).items():
        a, spec = _split(frame)
        arrays.update({f"{name}/{k}": v for k, v in a.items()})
        specs[name] = spec
    rest = codec.encode_bytes(_without_tables(profile))
    buf = io.BytesIO()
    np.savez(buf, **arrays, allow_pickle=False)
    with open(path, "wb") as f:
        head = msgspec.msgpack.encode({"specs": specs, "rest": rest})
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        f.write(buf.getbuffer())


def npz_read(path: Path) -> Profile:
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        head = msgspec.msgpack.decode(f.read(n))
        z = np.load(io.BytesIO(f.read()), allow_pickle=False)
        profile = codec.decode(bytearray(head["rest"]))
        tables = {}
        for name, spec in head["specs"].items():
            arrays = {k.split("/", 1)[1]: z[k] for k in z.files if k.startswith(name + "/")}
            tables[name] = _join(arrays, spec)
    return dataclasses.replace(profile, **tables)


def msgpack_write(profile: Profile, path: Path) -> None:
    tables = {}
    for name, frame in _tables(profile).items():
        a, spec = _split(frame)
        tables[name] = {"spec": spec, "arrays": {k: v.tolist() for k, v in a.items()}}
    with open(path, "wb") as f:
        f.write(msgspec.msgpack.encode({"tables": tables, "rest": codec.encode_bytes(_without_tables(profile))}))


def msgpack_read(path: Path) -> Profile:
    doc = msgspec.msgpack.decode(path.read_bytes())
    profile = codec.decode(bytearray(doc["rest"]))
    tables = {name: _join({k: np.asarray(v) for k, v in t["arrays"].items()}, t["spec"]) for name, t in doc["tables"].items()}
    return dataclasses.replace(profile, **tables)


# ---------------------------------------------------------------------------------------------


def _same(a: Profile, b: Profile) -> bool:
    return all(getattr(a, n).equals(getattr(b, n)) for n in codec.TABLE_FIELDS[:5]) and a.stacks == b.stacks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", nargs="?", type=Path, help="a profile (any kind the product reads)")
    ap.add_argument("--mb", type=float, default=100.0, help="trace size to generate when no path is given")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    repeat = max(1, min(args.repeat, 10))

    with tempfile.TemporaryDirectory(prefix="msprof-bench-cache-") as tmp_name:
        tmp = Path(tmp_name)
        root = args.path
        if root is None:
            from gen_large_trace import generate

            root = generate(tmp / "profile", args.mb)
        loc = find_all([root])[0]
        size_mb = sum(p.stat().st_size for p in cache.input_files(loc)) / 1e6
        t = time.perf_counter()
        profile = load_location(loc, use_cache=False)
        cold = time.perf_counter() - t
        print(f"profile: {loc.kind.value} {loc.path} ({size_mb:.0f} MB of input files)")
        print(f"  {len(profile.kernels):,} kernels, {len(profile.host_ops):,} host ops, "
              f"{len(profile.host_events):,} host events, {len(profile.stacks):,} stacks")
        print(f"cold load (readers, no cache): {cold:.2f} s")

        rows = []
        candidates = {
            "pickle (baseline)": (pickle_write, pickle_read),
            "npz + msgpack": (npz_write, npz_read),
            "msgpack only": (msgpack_write, msgpack_read),
        }
        for name, (write, read) in candidates.items():
            path = tmp / f"{name.split()[0]}.entry"
            w = best(lambda: write(profile, path), repeat)
            r = best(lambda: read(path), repeat)
            assert _same(profile, read(path)), name
            rows.append((name, w, r, path.stat().st_size))

        cache_dir = tmp / "cache"
        stamps = cache.fingerprint(loc)
        w = best(lambda: cache.store(loc, profile, stamps, cache_dir), repeat)
        entry = cache.entry_path(loc, cache_dir)
        r = best(lambda: cache.load(loc, cache_dir), repeat)
        hit = cache.load(loc, cache_dir)
        assert hit.profile is not None and _same(profile, hit.profile)
        rows.append(("msgpack + buffers (product, with checks)", w, r, entry.stat().st_size))
        warm = best(lambda: load_location(loc, cache_dir=cache_dir), repeat)

        base_w, base_r, base_s = rows[0][1:]
        print()
        print(f"{'candidate':42s} {'write s':>8s} {'ratio':>7s} {'load s':>8s} {'ratio':>7s} {'size MB':>8s} {'ratio':>7s}")
        for name, w, r, s in rows:
            print(f"{name:42s} {w:8.3f} {w / base_w:6.2f}x {r:8.3f} {r / base_r:6.2f}x {s / 1e6:8.1f} {s / base_s:6.2f}x")
        print()
        payload = codec.encode_bytes(profile)
        for algo in ("blake2b", "sha256"):
            secs = best(lambda: hashlib.new(algo, payload).digest(), repeat)
            print(f"checksum {algo:8s} over the {len(payload) / 1e6:.1f} MB payload: {secs:.3f} s ({len(payload) / secs / 1e6:.0f} MB/s)")
        print(f"product warm load (load_location, cache hit): {warm:.3f} s = {warm / cold:.3f}x the cold load")


if __name__ == "__main__":
    main()
