"""Kineto trace decoding: candidates side by side on one large generated trace.

    python benchmarks/bench_kineto_decode.py            # ~200 MB of JSON
    python benchmarks/bench_kineto_decode.py --mb 50

The trace is the committed tiny_transformer sample trace repeated (times shifted, ids offset)
until it reaches the requested size, so the event mix is that of a real capture. Each
candidate runs in its own process (peak RSS is per process) and does the same work: decode,
then one pass reading the fields the reader uses (cat, name, ts, dur, pid, tid, External id,
Python parent id). Ratios are against the stdlib json module measured in the same run; the
last row is the whole reader (decode + linking + tables) for scale. ``orjson-nogc`` turns the
cyclic garbage collector off during the decode: with it on, the millions of fresh dicts
trigger collection after collection, which costs orjson more than the parse itself.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

from _common import ChildFailed, measure_child, report_usage

REPO = Path(__file__).resolve().parents[1]
SAMPLE = next((REPO / "samples" / "tiny_transformer" / "kineto").glob("*.pt.trace.json.gz"))


def generate(path: Path, target_mb: float) -> int:
    doc = json.loads(gzip.decompress(SAMPLE.read_bytes()))
    events = [e for e in doc["traceEvents"] if isinstance(e.get("pid"), int)]
    span = max(e["ts"] + e.get("dur", 0) for e in events) - min(e["ts"] for e in events) + 1
    one_copy = len(json.dumps(events))
    copies = max(1, int(target_mb * 1e6 / one_copy))
    with path.open("w") as f:
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        f.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        first = True
        for c in range(copies):
            shift, off = c * span, c * 10_000_000
            for e in events:
                e2 = dict(e)
                e2["ts"] = round(e["ts"] + shift, 3)
                if "id" in e2:
                    e2["id"] = e2["id"] + off
                args = e2.get("args")
                if args:
                    args = dict(args)
                    for key in ("External id", "Python id", "Python parent id"):
                        if isinstance(args.get(key), int):
                            args[key] += off
                    e2["args"] = args
                f.write(("" if first else ",\n") + json.dumps(e2))
                first = False
        f.write("\n]}\n")
    return copies * len(events)


def walk_dicts(events) -> int:
    n = 0
    for e in events:
        a = e.get("args") or {}
        n += len(e.get("cat", "")) + len(e.get("name", ""))
        _ = (e.get("ts"), e.get("dur"), e.get("pid"), e.get("tid"), a.get("External id"), a.get("Python parent id"))
    return n


def run_one(name: str, path: Path) -> float:
    t0 = time.perf_counter()
    if name == "json":
        walk_dicts(json.loads(path.read_bytes())["traceEvents"])
    elif name in ("orjson", "orjson-nogc"):
        import gc

        import orjson

        if name == "orjson-nogc":
            gc.disable()  # millions of new dicts otherwise trigger the cyclic GC over and over
        walk_dicts(orjson.loads(path.read_bytes())["traceEvents"])
    elif name == "ijson":
        import ijson

        with path.open("rb") as f:
            walk_dicts(ijson.items(f, "traceEvents.item", use_float=True))
    elif name == "msgspec":
        from msprof_lsp.mapping.profile.readers.kineto_json import decode

        trace = decode(path, path.read_bytes())
        n = 0
        for batch in trace.batches:  # decoded a block at a time (issue 22 item 5)
            for e in batch:
                a = e.args
                n += len(e.cat) + len(e.name)
                _ = (e.ts, e.dur, e.pid, e.tid, a.external_id if a else -1, a.python_parent_id if a else None)
    elif name == "reader":
        from msprof_lsp.mapping.profile.locations import ProfileLocation
        from msprof_lsp.mapping.profile.model import ProfileKind
        from msprof_lsp.mapping.profile.readers.kineto import read

        read(ProfileLocation(ProfileKind.KINETO, path))
    else:
        raise SystemExit(f"unknown candidate {name}")
    return time.perf_counter() - t0


def measure(name: str, path: Path) -> tuple[float, float]:
    """(seconds, peak RSS MiB) of one candidate in a fresh process."""
    try:
        use = measure_child([__file__, "--run-one", name, str(path)])
    except ChildFailed as exc:
        sys.stderr.write(exc.stderr)
        raise SystemExit(f"{name} failed") from None
    return use.seconds, use.peak_rss_mib


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=200.0)
    parser.add_argument("--run-one", nargs=2, metavar=("CANDIDATE", "PATH"))
    parser.add_argument("--candidates", default="json,orjson,orjson-nogc,ijson,msgspec,reader")
    args = parser.parse_args()
    if args.run_one:
        report_usage(run_one(args.run_one[0], Path(args.run_one[1])))
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.pt.trace.json"
        n = generate(path, args.mb)
        size_mb = path.stat().st_size / 1e6
        print(f"trace: {size_mb:.0f} MB, {n:,} events (from {SAMPLE.name})")
        rows = [(c, *measure(c, path)) for c in args.candidates.split(",")]
    base = next((s for c, s, _ in rows if c == "json"), rows[0][1])
    print(f"{'candidate':<10} {'seconds':>8} {'MB/s':>7} {'vs json':>8} {'peak RSS MiB':>13}")
    for c, s, rss in rows:
        print(f"{c:<10} {s:>8.2f} {size_mb / s:>7.0f} {base / s:>7.2f}x {rss:>13.0f}")


if __name__ == "__main__":
    main()
