"""Kineto reader peak memory and time, plain and gzipped, against an earlier revision in the same run.

    python benchmarks/bench_kineto_memory.py [--mb 60] [--small-events] [--no-gzip] [--baseline-rev 0350d32]

Generates a trace of about ``--mb`` MB the way bench_kineto_decode.py does (the committed
tiny_transformer sample repeated: ~300 bytes an event), or with ``--small-events`` one of ~93-byte
events (CPU ops and kernels with a correlation, the shape of the 14x case in issue 22), gzips a
copy, and reads each file with the whole Kineto reader in a fresh process (peak RSS is per
process), once with the current code and once with the
baseline revision's (``git archive`` into a temporary folder, imported instead of the editable
install). Prints seconds, peak RSS, the peak less the interpreter's and the imports' (the reader's
own), both as multiples of the JSON text's size, and the ratios current / baseline.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ChildFailed, archive, report_usage, use_tree

REPO = Path(__file__).resolve().parents[1]
# 5b23080: before the reader freed the JSON text early and gzip inflated in place (issue 22);
# 0350d32: before traceEvents was decoded in blocks straight into columns (issue 22 item 5)
BASELINE_REV = "0350d32"


def child(tree: str, path: str) -> None:
    if tree != "-":
        use_tree(tree)
    import resource

    from msprof_lsp.mapping.profile.locations import ProfileLocation
    from msprof_lsp.mapping.profile.model import ProfileKind
    from msprof_lsp.mapping.profile.readers import kineto

    assert tree == "-" or kineto.__file__.startswith(tree), kineto.__file__
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    kineto.read(ProfileLocation(ProfileKind.KINETO, Path(path)))
    seconds = time.perf_counter() - t
    print(f"imports {base}")
    report_usage(seconds)


def measure(tree: str, path: Path) -> tuple[float, float, float]:
    """(seconds, peak MiB, peak less the imports' MiB) of one read in a fresh process."""
    proc = subprocess.run([sys.executable, __file__, "--child", tree, str(path)], capture_output=True, text=True)
    if proc.returncode:
        raise ChildFailed(proc.stderr)
    lines = proc.stdout.strip().splitlines()
    imports = int(next(line for line in lines if line.startswith("imports ")).split()[1]) / 1024
    secs, _cpu, rss = lines[-1].split()
    return float(secs), int(rss) / 1024, int(rss) / 1024 - imports


def generate_small(path: Path, target_mb: float) -> int:
    """~93-byte events: two CPU ops, then a kernel with its correlation, repeated."""
    n = int(target_mb * 2**20 / 93)
    with path.open("w") as f:
        f.write('{"baseTimeNanoseconds":1700000000000000000,"traceEvents":[')
        for i in range(n):
            t = 3 * i
            if i % 3 == 2:
                e = (f'{{"ph":"X","cat":"kernel","name":"k_add","pid":0,"tid":7,"ts":{t}.5,"dur":1,'
                     f'"args":{{"correlation":{i}}}}}')
            else:
                e = (f'{{"ph":"X","cat":"cpu_op","name":"aten::{"add" if i % 2 else "mul"}","pid":1,"tid":2,'
                     f'"ts":{t}.25,"dur":1.5}}')
            f.write(e if i == 0 else "," + e)
        f.write("]}")
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=60.0)
    ap.add_argument("--baseline-rev", default=BASELINE_REV)
    ap.add_argument("--small-events", action="store_true")
    ap.add_argument("--no-gzip", action="store_true")
    ap.add_argument("--child", nargs=2, metavar=("TREE", "PATH"))
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return 0
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_kineto_decode import generate

    with tempfile.TemporaryDirectory(prefix="kineto_mem_") as tmp:
        d = Path(tmp)
        plain = d / "big.pt.trace.json"
        n = generate_small(plain, args.mb) if args.small_events else generate(plain, args.mb)
        gz = d / "big_gz.pt.trace.json.gz"
        if not args.no_gzip:
            with plain.open("rb") as a, gzip.open(gz, "wb", 6) as b:
                shutil.copyfileobj(a, b)
        text_mib = plain.stat().st_size / 2**20
        tree = str(archive(args.baseline_rev, d))
        gz_mib = f"{gz.stat().st_size / 2**20:.0f} MiB gzipped" if gz.exists() else "not gzipped"
        print(f"trace: {text_mib:.0f} MiB of JSON ({gz_mib}), {n:,} events, {text_mib * 2**20 / n:.0f} bytes each")
        print(f"{'file':6} {'code':9} {'seconds':>8} {'peak MiB':>9} {'reader MiB':>11} {'x text':>7}")
        for label, path in (("plain", plain), ("gzip", gz))[: 1 if args.no_gzip else 2]:
            rows = {}
            for code, where in (("baseline", tree), ("current", "-")):
                rows[code] = measure(where, path)
                s, peak, own = rows[code]
                print(f"{label:6} {code:9} {s:8.2f} {peak:9.0f} {own:11.0f} {own / text_mib:6.1f}x")
            (s0, p0, o0), (s1, p1, o1) = rows["baseline"], rows["current"]
            print(f"{label:6} current/baseline: time {s1 / s0:.2f}, peak {p1 / p0:.2f}, reader's own {o1 / o0:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
