"""Multi-rank loading: process pool vs one-after-another, measured in the same run.

Generates N rank DB exports (the DB tables, via the tests' DB builder) of a chosen size,
then loads them twice without the cache -- sequentially in this process, and through
``mapping.cluster``'s process pool -- and prints both times and the speed-up ratio. The ratio is
bounded by the cores the machine really has free; on a shared 2-core box expect well under 2.

    python benchmarks/bench_ranks.py --ranks 4 --kernels 100000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "readers"))

from npu_db_builder import DbBuilder  # noqa: E402

from msprof_lsp.mapping.profile.cluster import _load_ranks, load_ranks_sequential  # noqa: E402
from msprof_lsp.mapping.profile.discover import discover  # noqa: E402

US = 1_000
T0 = 1_736_000_000_000_000_000
FRAMES = [
    "/usr/local/python3.9/site-packages/torch/nn/modules/linear.py(114): forward",
    "/home/ma-user/work/model.py({line}): forward",
    "/home/ma-user/work/train.py(41): <module>",
]


def write_rank(root: Path, rank: int, kernels: int) -> Path:
    b = DbBuilder()
    pid, tid = 1000 + rank, 2000 + rank
    conn = 0
    t = T0
    steps = 4
    per_step = max(kernels // (2 * steps), 1)
    for step in range(steps):
        s0 = t
        for i in range(per_step):
            conn += 2
            frames = [f.format(line=20 + i % 50) for f in FRAMES]
            b.api("aten::linear", t, t + 40 * US, pid=pid, tid=tid, frames=frames if i < 50 else None)
            b.api("aclnnMm", t + 5 * US, t + 30 * US, pid=pid, tid=tid, connections=[conn - 1, conn])
            for c, (name, typ) in enumerate((("aclnnMm_MatMulCommon_MatMulV2", "MatMulV2"),
                                             ("aclnnMm_TransData_TransData", "TransData"))):
                g = b.task(t + 50 * US + c * 20 * US, t + 60 * US + c * 20 * US, connection=conn - 1 + c,
                           task_type="KERNEL_AICORE", task_id=i)
                b.compute_info(g, name=name, op_type=typ, core="AI_CORE", shapes="128,256;256,512",
                               dtypes="DT_BF16;DT_BF16", formats="ND;ND")
            t += 100 * US + rank * US
        b.rows["STEP_TIME"].append((step + 1, s0, t))
        b.api(f"ProfilerStep#{step + 1}", s0, t, pid=pid, tid=tid)
    out = root / f"bench_{rank}_2025010100000000{rank % 10}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    return b.write(out / f"ascend_pytorch_profiler_{rank}.db")


def _spin(n: int) -> int:
    x = 0
    for i in range(n):
        x += i
    return x


def cpu_probe(workers: int, n: int = 10_000_000) -> float:
    """Speed-up of pure-Python CPU work spread over ``workers`` processes: the most any pool can
    gain on this machine right now (a shared box has fewer free cores than os.cpu_count())."""
    from concurrent.futures import ProcessPoolExecutor

    t = time.perf_counter()
    for _ in range(workers):
        _spin(n)
    seq = time.perf_counter() - t
    with ProcessPoolExecutor(workers) as ex:
        list(ex.map(_spin, [n] * workers))  # start the workers
        t = time.perf_counter()
        list(ex.map(_spin, [n] * workers))
        par = time.perf_counter() - t
    return seq / par


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--kernels", type=int, default=50_000, help="device kernels per rank")
    ap.add_argument("--out", type=Path, default=None, help="where to write the ranks (default: a temp dir)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench_ranks_") as tmp:
        root = args.out or Path(tmp)
        t = time.perf_counter()
        for r in range(args.ranks):
            write_rank(root, r, args.kernels)
        print(f"generated {args.ranks} ranks x {args.kernels} kernels in {time.perf_counter() - t:.1f} s "
              f"({sum(p.stat().st_size for p in root.rglob('*.db')) / 1e6:.0f} MB)")
        locations = discover([root])
        assert len(locations) == args.ranks, locations

        t = time.perf_counter()
        seq = load_ranks_sequential(locations, use_cache=False)
        t_seq = time.perf_counter() - t

        t = time.perf_counter()
        pooled, failures = _load_ranks(locations, use_cache=False, cache_dir=None, progress=lambda m, f: None)
        t_pool = time.perf_counter() - t
        assert not failures and sorted(pooled) == sorted(seq)
        assert all(len(pooled[r].kernels) == len(seq[r].kernels) for r in seq)

    workers = min(os.cpu_count() or 1, args.ranks)
    print(f"cpu probe         : {cpu_probe(workers):.2f}x speed-up for pure CPU work on {workers} processes "
          "(the ceiling here)")
    print(f"sequential load   : {t_seq:7.2f} s (baseline)")
    print(f"process pool ({workers:>2}) : {t_pool:7.2f} s  ratio {t_pool / t_seq:.2f}x of sequential, "
          f"speed-up {t_seq / t_pool:.2f}x")


if __name__ == "__main__":
    main()
