"""Benchmark: the seed-named rules (NPU101-NPU109) on a large profile, against loading it.

    python benchmarks/bench_seed_rules.py --mb 200            # generate a profile, then measure
    python benchmarks/bench_seed_rules.py PATH/TO/x_ascend_pt # measure an existing torch_npu result

The rules run once per analysis (and again when the editor re-checks), so they must stay small
next to the load the user already waits for. Prints the cold load (the baseline, measured in the
same run), the attribution, and each rule's ``check`` as a ratio to that load.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile", nargs="?", type=Path, help="an existing *_ascend_pt folder")
    ap.add_argument("--mb", type=float, default=200.0, help="size of the generated trace_view.json (MiB)")
    args = ap.parse_args()

    from msprof_lsp.hints.config import RuleConfig
    from msprof_lsp.hints.context import RuleContext
    from msprof_lsp.hints.registry import rules_matching
    from msprof_lsp.mapping.source.attribute import attribute
    from msprof_lsp.mapping.profile.load import load_location, locate
    from msprof_lsp.mapping.source.workspace import SourceWorkspace

    with tempfile.TemporaryDirectory() as tmp:
        root = args.profile
        if root is None:
            from gen_large_trace import generate

            t = time.perf_counter()
            root = generate(Path(tmp), args.mb)
            print(f"generated {root.name} in {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        profile = load_location(locate(root), use_cache=False)
        load_s = time.perf_counter() - t
        print(f"{len(profile.kernels):,} kernels, {len(profile.host_ops):,} host ops, "
              f"{len(profile.host_events):,} runtime events")
        rows = [("load (baseline)", load_s)]
        ws = SourceWorkspace([Path(tmp) / "no-sources"])
        t = time.perf_counter()
        att = attribute(profile, ws)
        rows.append(("attribute", time.perf_counter() - t))
        ctx = RuleContext(profile, att, ws, RuleConfig(min_share=0.0))
        total = 0.0
        for r in rules_matching(["NPU1"]):
            t = time.perf_counter()
            n = len(list(r.check(ctx)))
            dt = time.perf_counter() - t
            total += dt
            rows.append((f"{r.code} {r.name} ({n} findings)", dt))
        rows.append(("all seed rules", total))
    for name, sec in rows:
        print(f"{name:<45} {sec * 1000:9.1f} ms  {sec / load_s:6.3f}x")


if __name__ == "__main__":
    main()
