"""Benchmark: the cost of the NPU2xx/NPU9xx rule families on a large generated profile.

Generates a spec-exact torch_npu result with ``gen_large_trace.generate`` (``--mb`` of
trace_view.json), loads and attributes it once, then times, on that same Profile:

* ``attribute``              -- mapping.attribute over the profile: the baseline every ratio is
                                printed against (the pass every analysis already pays);
* ``outermost.numpy``        -- ``profile_query.outermost_framework_ops``: aten ops not nested in
                                another, outside backward, by array passes over ``host_ops.parent``;
* ``outermost.python``       -- the same mask by walking each op's parent chain in Python (the
                                obvious alternative, kept here to justify the numpy form);
* ``rules.<family>``         -- ``run_rules`` for one family on a fresh RuleContext (its caches
                                cold): NPU201, NPU21 (the eight fused-API codes share one token
                                string), NPU22, NPU230, NPU24, NPU250, NPU9.

Usage::

    python benchmarks/bench_catalog_rules.py [--mb 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import best  # noqa: E402
from gen_large_trace import generate  # noqa: E402

from msprof_lsp.hints.config import RuleConfig  # noqa: E402
from msprof_lsp.hints.context import RuleContext  # noqa: E402
from msprof_lsp.hints.engine import run_rules  # noqa: E402
from msprof_lsp.hints.registry import rules_matching  # noqa: E402
from msprof_lsp.hints import profile_query as pq  # noqa: E402
from msprof_lsp.mapping.source.attribute import attribute  # noqa: E402
from msprof_lsp.mapping.profile.load import load_location, locate  # noqa: E402
from msprof_lsp.mapping.source.workspace import SourceWorkspace  # noqa: E402

FAMILIES = ("NPU201", "NPU21", "NPU22", "NPU230", "NPU24", "NPU250", "NPU9")


def outermost_python(profile) -> np.ndarray:  # noqa: ANN001
    h = profile.host_ops
    names = h["name"].astype(str).tolist()
    parent = h["parent"].to_numpy(np.int64).tolist()
    fw = [n.startswith(("aten::", "npu::")) for n in names]
    bwd = [pq.is_backward_node(n) for n in names]
    out = np.zeros(len(names), dtype=bool)
    for i in range(len(names)):
        if not fw[i]:
            continue
        p, ok = parent[i], True
        while p >= 0:
            if fw[p] or bwd[p]:
                ok = False
                break
            p = parent[p]
        out[i] = ok
    return out & pq.in_steps(profile, h["start_ns"].to_numpy(np.int64))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=50.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = generate(Path(tmp), args.mb)
        profile = load_location(locate(root), use_cache=False)
        ws = SourceWorkspace([Path(tmp)])
        print(f"profile: {len(profile.host_ops):,} host ops, {len(profile.kernels):,} kernels, {len(profile.stacks):,} stacks")
        att = attribute(profile, ws)
        base = best(lambda: attribute(profile, SourceWorkspace([Path(tmp)])), args.repeat)
        rows = [("attribute", base)]
        assert (pq.outermost_framework_ops(profile) == outermost_python(profile)).all()
        rows.append(("outermost.numpy", best(lambda: pq.outermost_framework_ops(profile), args.repeat)))
        rows.append(("outermost.python", best(lambda: outermost_python(profile), 1)))
        for fam in FAMILIES:
            chosen = rules_matching([fam])
            rows.append((f"rules.{fam}", best(lambda: run_rules(RuleContext(profile, att, ws, RuleConfig()), chosen), args.repeat)))
        print(f"{'step':<22}{'seconds':>10}{'x attribute':>14}")
        for name, sec in rows:
            print(f"{name:<22}{sec:>10.3f}{sec / base:>14.2f}")


if __name__ == "__main__":
    main()
