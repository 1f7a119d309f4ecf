"""Fix expansion of a ``--check``: CPU per offer and parses per file, against an earlier revision.

    python benchmarks/bench_expand.py                              # the tiny_transformer sample
    python benchmarks/bench_expand.py --project DIR --profile DIR  # another job (sources, profile)
    python benchmarks/bench_expand.py --baseline-rev 8a03ff1 --repeat 5

Each measurement is a fresh process (this script in its child mode) that loads the profile
without the cache, attributes it, runs the rules without expanding their offers, imports
libcst.codemod (which the current code imports only when a fix adds an import), and then times
``hints.fixes.offers.expand`` alone: what ``--check`` pays for its quick fixes. The revisions run
interleaved, ``--repeat`` rounds; medians are compared. Printed: findings, offers, parses, CPU and
wall seconds of the expansion, CPU milliseconds per offer, and current / baseline.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _common import REPO, archive, use_tree  # noqa: E402

SAMPLE = REPO / "samples" / "tiny_transformer"


def child(tree: str, project: Path, profile: Path) -> None:
    if tree != "-":
        use_tree(tree)
    import libcst.codemod.visitors  # noqa: F401 - imported before the clock by both revisions

    from msprof_lsp.hints.context import RuleContext
    from msprof_lsp.hints.engine import run_rules
    from msprof_lsp.hints.fixes import offers
    from msprof_lsp.mapping.source.attribute import attribute
    from msprof_lsp.server.analysis import run as pipeline
    from msprof_lsp.server.analysis.settings import Settings

    assert tree == "-" or offers.__file__.startswith(tree)
    settings = Settings()
    loaded = pipeline.load([profile], settings, use_cache=False)
    ws = pipeline.build_workspace([project], settings)
    ctx = RuleContext(loaded.profile, attribute(loaded.profile, ws), ws, settings.rule_config(), cluster=loaded.cluster)
    findings = run_rules(ctx, fixes=False)
    n = sum(len(f.offers) for f in findings)
    cpu, t = time.process_time(), time.perf_counter()
    sources = offers.expand(findings, ctx.source_text)
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    parses = sources.parsed  # files parsed for the offers (one each)
    print(f"{len(findings)} {n} {parses} {cpu:.6f} {wall:.6f}")


def run(tree: str, project: Path, profile: Path) -> tuple[int, int, int, float, float]:
    proc = subprocess.run([sys.executable, __file__, "--child", tree, str(project), str(profile)],
                          capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    f, n, p, cpu, wall = proc.stdout.strip().splitlines()[-1].split()
    return int(f), int(n), int(p), float(cpu), float(wall)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, default=SAMPLE)
    ap.add_argument("--profile", type=Path, default=SAMPLE / "npu_profile")
    ap.add_argument("--baseline-rev", help="also measure this git revision (interleaved)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), Path(args.child[2]))
        return
    with tempfile.TemporaryDirectory(prefix="msprof-bench-expand-") as tmp:
        revs = [("current", "-")]
        if args.baseline_rev:
            revs.append((f"baseline {args.baseline_rev}", str(archive(args.baseline_rev, Path(tmp)))))
        rows: dict[str, list[tuple[int, int, int, float, float]]] = {name: [] for name, _ in revs}
        for _ in range(max(1, args.repeat)):
            for name, tree in revs:
                rows[name].append(run(tree, args.project.resolve(), args.profile.resolve()))
    print(f"{'revision':22s} {'findings':>8s} {'offers':>6s} {'parses':>6s} {'CPU s':>7s} {'wall s':>7s} {'CPU ms/offer':>12s}"
          f"   (medians of {max(1, args.repeat)})")
    med: dict[str, float] = {}
    for name, runs in rows.items():
        f, n, p = runs[0][:3]
        cpu, wall = statistics.median(r[3] for r in runs), statistics.median(r[4] for r in runs)
        med[name] = cpu
        print(f"{name:22s} {f:8d} {n:6d} {p:6d} {cpu:7.3f} {wall:7.3f} {1000 * cpu / max(n, 1):12.1f}")
    if len(med) == 2:
        (a, x), (b, y) = med.items()
        print(f"{a} / {b}: {x / y:.2f}x CPU")


if __name__ == "__main__":
    main()
