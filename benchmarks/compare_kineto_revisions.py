"""Kineto reader: the Profile of every trace given, current code against a baseline revision.

    python benchmarks/compare_kineto_revisions.py [--baseline-rev 0350d32] [--chunk-bytes N] PATH_OR_DIR...

Each directory is searched for ``*.json`` / ``*.json.gz`` (``trace_view.json`` excepted). Every
file is read by the whole Kineto reader in a fresh process per revision (the baseline from a
``git archive`` into a temporary folder, as bench_kineto_memory.py does), and the results are
compared by content: each table's columns, dtypes and a hash of every value
(``pandas.util.hash_pandas_object``), the stacks, steps, modules, meta and issues, or the one-line
error. ``--chunk-bytes`` reads with the current code in blocks of that size instead of 4 MiB
(small blocks put many cuts into every real trace). Exits 1 when any file differs. Written for
issue 22 item 5 (the columnar batch decode).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_kineto_memory import _use_tree, archive  # noqa: E402

BASELINE_REV = "0350d32"  # before traceEvents was decoded in batches straight into columns


def _fingerprint(value) -> object:
    import pandas as pd

    if isinstance(value, pd.DataFrame):
        digest = hashlib.sha256(pd.util.hash_pandas_object(value, index=True, categorize=True).to_numpy().tobytes())
        return {"columns": list(value.columns), "dtypes": [str(t) for t in value.dtypes],
                "rows": len(value), "sha256": digest.hexdigest()}
    return repr(value)


def child(tree: str, paths: list[str]) -> None:
    chunk = None
    if tree.startswith("current:"):  # not "-:N", which argparse takes for an option
        tree, chunk = "-", int(tree.split(":", 1)[1])
    if tree != "-":
        _use_tree(tree)
    from msprof_lsp.mapping.errors import ProfileError
    from msprof_lsp.mapping.profile.locations import ProfileLocation
    from msprof_lsp.mapping.profile.model import ProfileKind
    from msprof_lsp.mapping.profile.readers import kineto, kineto_json

    if chunk:
        kineto_json.CHUNK_BYTES = chunk
    assert tree == "-" or kineto.__file__.startswith(tree), kineto.__file__
    out = {}
    for path in paths:
        try:
            p = kineto.read(ProfileLocation(ProfileKind.KINETO, Path(path)))
        except ProfileError as exc:
            out[path] = {"error": str(exc)}
            continue
        out[path] = {
            name: _fingerprint(getattr(p, name))
            for name in ("kernels", "host_ops", "modules", "host_events", "stacks", "steps", "issues")
        }
        out[path]["meta"] = repr(p.meta)
    json.dump(out, sys.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", type=Path)
    ap.add_argument("--baseline-rev", default=BASELINE_REV)
    ap.add_argument("--chunk-bytes", type=int, default=0)
    ap.add_argument("--child", nargs="+", metavar="TREE PATH")
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1:])
        return 0
    files: list[str] = []
    for p in args.paths:
        found = [p] if p.is_file() else sorted(
            f for pattern in ("*.json", "*.json.gz") for f in p.rglob(pattern) if f.name != "trace_view.json"
        )
        files += [str(f) for f in found]
    with tempfile.TemporaryDirectory(prefix="kineto_cmp_") as tmp:
        tree = str(archive(args.baseline_rev, Path(tmp)))
        results = []
        for where in (tree, f"current:{args.chunk_bytes}" if args.chunk_bytes else "-"):
            proc = subprocess.run([sys.executable, __file__, "--child", where, *files], capture_output=True, text=True)
            if proc.returncode:
                print(proc.stderr, file=sys.stderr)
                return 2
            results.append(json.loads(proc.stdout))
    old, new = results
    differ = 0
    for f in files:
        same = old[f] == new[f]
        differ += not same
        got = new[f]
        what = "error" if "error" in got else f"{got['host_ops']['rows']} ops, {got['kernels']['rows']} kernels"
        print(f"{'same' if same else 'DIFFERENT':9} {what:28} {f}")
        if not same:
            for key in sorted(set(old[f]) | set(new[f])):
                if old[f].get(key) != new[f].get(key):
                    print(f"    {key}: {str(old[f].get(key))[:300]}\n -> {str(new[f].get(key))[:300]}")
    print(f"{len(files)} file(s), {differ} different")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
