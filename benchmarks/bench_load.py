"""Load benchmark for trace_view.json: candidate decoders and the product, on the same file.

    python benchmarks/bench_load.py --mb 500            # generate a profile, then measure
    python benchmarks/bench_load.py PATH/TO/x_ascend_pt # measure an existing torch_npu result

Every measurement runs in its own process, started through a small wrapper process whose only
child it is, so ``getrusage(RUSAGE_CHILDREN).ru_maxrss`` in the wrapper is that measurement's peak
RSS alone. Times are wall-clock of the operation only (imports excluded). Ratios are printed
against ``orjson.loads`` of the whole file measured in the same run (the baseline), and the cached
load against the cold load. Needs the ``bench`` extra (orjson, ijson); duckdb is optional.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


# ---------------------------------------------------------------------------------------------
# Measurements (run in the grandchild process)


def _trace_of(root: Path) -> Path:
    return root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json" if root.is_dir() else root


def m_orjson(root: Path) -> dict:
    import orjson

    path = _trace_of(root)
    t = time.perf_counter()
    events = orjson.loads(path.read_bytes())
    return {"seconds": time.perf_counter() - t, "events": len(events)}


def m_orjson_nogc(root: Path) -> dict:
    import gc

    gc.disable()
    return m_orjson(root)


def m_msgspec_untyped(root: Path) -> dict:
    import msgspec

    path = _trace_of(root)
    t = time.perf_counter()
    events = msgspec.json.decode(path.read_bytes())
    return {"seconds": time.perf_counter() - t, "events": len(events)}


def m_msgspec_typed(root: Path) -> dict:
    import msgspec

    from msprof_lsp.mapping.profile.readers.trace_json import TORCH_NPU_ARGS, _event_types

    event_t = _event_types(TORCH_NPU_ARGS)[0]
    path = _trace_of(root)
    t = time.perf_counter()
    events = msgspec.json.decode(path.read_bytes(), type=list[event_t])
    return {"seconds": time.perf_counter() - t, "events": len(events)}


def m_ijson(root: Path) -> dict:
    import ijson

    path = _trace_of(root)
    t = time.perf_counter()
    n = 0
    with open(path, "rb") as f:
        for _ in ijson.items(f, "item", use_float=True):
            n += 1
    return {"seconds": time.perf_counter() - t, "events": n, "backend": ijson.backend}


def m_duckdb(root: Path) -> dict:
    import duckdb

    path = _trace_of(root)
    con = duckdb.connect()
    con.execute("SET threads TO 2")
    t = time.perf_counter()
    table = con.sql(
        "SELECT ph, name, cat, pid::VARCHAR AS pid, tid::VARCHAR AS tid, ts::VARCHAR AS ts, dur, "
        "id::VARCHAR AS id, args FROM read_json(?, format='array', maximum_object_size=104857600, "
        "columns={ph: 'VARCHAR', name: 'VARCHAR', cat: 'VARCHAR', pid: 'JSON', tid: 'JSON', ts: 'JSON', "
        "dur: 'DOUBLE', id: 'JSON', args: 'JSON'})",
        params=[str(path)],
    ).to_arrow_table()
    return {"seconds": time.perf_counter() - t, "events": table.num_rows}


def m_duckdb_fields(root: Path) -> dict:
    """DuckDB doing the product decoder's job: the needed args as columns, exact ns from the ts
    text, strings dictionary-encoded into int codes (what TraceEvents holds). No error handling."""
    import duckdb
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    path = _trace_of(root)
    con = duckdb.connect()
    con.execute("SET threads TO 2")
    args = ", ".join(
        f"TRY_CAST(args->>'{key}' AS BIGINT) AS \"a:{key}\"" if kind == "int" else f"args->>'{key}' AS \"a:{key}\""
        for key, kind in _torch_npu_args().items()
    )
    t = time.perf_counter()
    table = con.sql(
        "SELECT ph, name, cat, TRY_CAST(pid->>'$' AS BIGINT) AS pid, TRY_CAST(tid->>'$' AS BIGINT) AS tid, "
        "CASE WHEN regexp_full_match(ts->>'$', '[0-9]+\\.[0-9]{3}') THEN CAST(replace(ts->>'$', '.', '') AS BIGINT) "
        "END AS ts_ns, CAST(round(dur * 1000) AS BIGINT) AS dur_ns, TRY_CAST(id->>'$' AS BIGINT) AS id, "
        f"{args} FROM read_json(?, format='array', maximum_object_size=104857600, "
        "columns={ph: 'VARCHAR', name: 'VARCHAR', cat: 'VARCHAR', pid: 'JSON', tid: 'JSON', ts: 'JSON', "
        "dur: 'DOUBLE', id: 'JSON', args: 'JSON'})",
        params=[str(path)],
    ).to_arrow_table()
    index: dict[str, int] = {}
    columns = {}
    for name, col in zip(table.column_names, table.columns):
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            enc = pc.dictionary_encode(col).combine_chunks()
            ids = np.array([index.setdefault(v, len(index)) for v in enc.dictionary.to_pylist()] + [-1], dtype=np.int32)
            codes = enc.indices.fill_null(len(ids) - 1).to_numpy()
            columns[name] = ids[codes]
        else:
            columns[name] = col.fill_null(-1).to_numpy()
    return {"seconds": time.perf_counter() - t, "events": table.num_rows}


def _torch_npu_args() -> dict:
    from msprof_lsp.mapping.profile.readers.trace_json import TORCH_NPU_ARGS

    return TORCH_NPU_ARGS


def m_chunked(root: Path) -> dict:
    from msprof_lsp.mapping.profile.readers.trace_json import read_trace_events

    path = _trace_of(root)
    t = time.perf_counter()
    events = read_trace_events(path)
    return {"seconds": time.perf_counter() - t, "events": len(events)}


def _location(root: Path):  # noqa: ANN202
    from msprof_lsp.mapping.profile.load import locate

    return locate(root)


def m_cold(root: Path) -> dict:
    from msprof_lsp.mapping.profile.load import load_location

    loc = _location(root)
    t = time.perf_counter()
    profile = load_location(loc, use_cache=False)
    return {
        "seconds": time.perf_counter() - t,
        "kernels": len(profile.kernels),
        "host_ops": len(profile.host_ops),
        "links": profile.kernels["link"].value_counts().to_dict(),
    }


def m_fill_cache(root: Path, cache_dir: Path) -> dict:
    from msprof_lsp.mapping.profile import cache
    from msprof_lsp.mapping.profile.load import load_location

    loc = _location(root)
    t = time.perf_counter()
    load_location(loc, cache_dir=cache_dir)
    return {"seconds": time.perf_counter() - t, "entry_bytes": cache.entry_path(loc, cache_dir).stat().st_size}


def m_cached(root: Path, cache_dir: Path) -> dict:
    from msprof_lsp.mapping.profile import load as load_mod

    loc = _location(root)

    def no_read(*_a, **_k):  # a cache hit must not read the profile
        raise AssertionError("cache miss: the reader ran")

    load_mod._reader = lambda _loc: no_read  # type: ignore[assignment]
    t = time.perf_counter()
    profile = load_mod.load_location(loc, cache_dir=cache_dir)
    return {"seconds": time.perf_counter() - t, "kernels": len(profile.kernels)}


MEASURES = {
    "orjson.loads": m_orjson,
    "orjson.loads, gc off": m_orjson_nogc,
    "msgspec untyped, whole file": m_msgspec_untyped,
    "msgspec typed, whole file": m_msgspec_typed,
    "ijson yajl2_c items": m_ijson,
    "duckdb read_json -> arrow": m_duckdb,
    "duckdb read_json -> product columns": m_duckdb_fields,
    "chunked msgspec -> columns (product decoder)": m_chunked,
    "product cold load (no cache)": m_cold,
    "fill cache": m_fill_cache,
    "product cached load": m_cached,
}


# ---------------------------------------------------------------------------------------------
# Process plumbing


def _measure_main(name: str, root: Path, cache_dir: Path | None) -> None:
    fn = MEASURES[name]
    result = fn(root, cache_dir) if fn in (m_fill_cache, m_cached) else fn(root)
    print(json.dumps(result))


def _wrap_main(name: str, root: Path, cache_dir: Path | None, timeout: float) -> None:
    cmd = [sys.executable, __file__, "--measure", name, str(root)]
    if cache_dir is not None:
        cmd += ["--cache-dir", str(cache_dir)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        out = proc.stdout.strip().splitlines()
        result = json.loads(out[-1]) if proc.returncode == 0 and out else {"error": proc.stderr.strip()[-300:]}
    except subprocess.TimeoutExpired:
        result = {"error": f"timed out after {timeout:.0f} s"}
    # ru_maxrss is KiB on Linux; this wrapper has had exactly one child
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps(result))


def run(name: str, root: Path, cache_dir: Path | None, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--wrap", name, str(root), "--timeout", str(timeout)]
    if cache_dir is not None:
        cmd += ["--cache-dir", str(cache_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": proc.stderr.strip()[-300:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", nargs="?", type=Path, help="a *_ascend_pt root or a trace_view.json")
    ap.add_argument("--mb", type=float, default=500.0, help="size to generate when no path is given")
    ap.add_argument("--skip", default="", help="comma-separated measurement names to skip")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    ap.add_argument("--wrap", help=argparse.SUPPRESS)
    ap.add_argument("--cache-dir", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        _measure_main(args.measure, args.path, args.cache_dir)
        return
    if args.wrap:
        _wrap_main(args.wrap, args.path, args.cache_dir, args.timeout)
        return

    with tempfile.TemporaryDirectory(prefix="msprof-bench-") as tmp:
        root = args.path
        if root is None:
            sys.path.insert(0, str(HERE))
            from gen_large_trace import generate

            t = time.perf_counter()
            root = generate(Path(tmp), args.mb)
            print(f"generated {root.name} in {time.perf_counter() - t:.1f} s")
        trace = _trace_of(root)
        print(f"trace: {trace} ({trace.stat().st_size / (1 << 20):.1f} MiB)")
        cache_dir = Path(tmp) / "cache"
        skip = {s.strip() for s in args.skip.split(",") if s.strip()}
        results: dict[str, dict] = {}
        for name in MEASURES:
            if name in skip:
                continue
            results[name] = r = run(name, root, cache_dir if name in ("fill cache", "product cached load") else None, args.timeout)
            print(f"  measured {name}: {r}", flush=True)
        base = results.get("orjson.loads", {}).get("seconds")
        cold = results.get("product cold load (no cache)", {}).get("seconds")
        print()
        print(f"{'measurement':46s} {'seconds':>9s} {'ratio':>9s} {'peak RSS MB':>12s}")
        for name, r in results.items():
            if "error" in r:
                print(f"{name:46s} {'error':>9s} {'':>9s} {r.get('peak_rss_mb', 0):12.0f}  {r['error'][:80]}")
                continue
            sec = r["seconds"]
            if name == "product cached load" and cold:
                ratio = f"{sec / cold:.3f}xc"  # against the cold load
            elif base and name != "fill cache":
                ratio = f"{sec / base:.2f}x"
            else:
                ratio = ""
            print(f"{name:46s} {sec:9.2f} {ratio:>9s} {r['peak_rss_mb']:12.0f}")
        print("\nratios: x = against orjson.loads (gc on, the baseline); xc = against the product cold load")
        if base and cold:
            cached = results.get("product cached load", {}).get("seconds")
            print(f"targets: cold <= 3x orjson: {cold / base:.2f}x; cached <= 0.1x cold: "
                  f"{(cached / cold) if cached else float('nan'):.3f}; peak RSS cold <= 2048 MB: "
                  f"{results['product cold load (no cache)']['peak_rss_mb']:.0f} MB")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
