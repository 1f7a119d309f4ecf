"""Long fuzz campaigns over the readers (the test suite runs a small derandomized set).

    python benchmarks/fuzz.py --minutes 10 [--seed 1] [--family kineto] [--timeout 60]

Cases are drawn at random per family (round robin): a seed input, a file of it, a mutation kind
(truncation, byte damage, encoding, structure, numbers, nesting, special files) and a seed. Each
runs in a forked child with a 3 GiB address-space cap and a time limit (tests/fuzz/fuzzkit.py).
Prints per family: cases, clean loads, clean errors, internal errors, hangs, crashes, peak RSS of
a child, and the first few failing cases (each reproducible from its seed).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzz import fuzzkit  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--family", default="", help="only families whose name contains this")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as a hang")
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="msprof-fuzz-") as tmp:
        scratch = Path(tmp)
        fams = [f for f in fuzzkit.families(scratch) if args.family in f.name]
        for f in fams:
            if f.skip:
                print(f"skipped {f.name}: {f.skip}")
        fams = [f for f in fams if not f.skip]
        tallies = {f.name: fuzzkit.Tally() for f in fams}
        end = time.monotonic() + args.minutes * 60
        i = 0
        while fams and time.monotonic() < end:
            f = fams[i % len(fams)]
            kind = rnd.choice(fuzzkit.KINDS)
            target = rnd.choice(f.files)
            seed = rnd.randrange(1 << 32)
            out = fuzzkit.run_case(f, scratch / "case", kind, target, seed, timeout_s=args.timeout)
            tallies[f.name].add(f"{target or f.source.name} / {kind} / seed {seed}", out)
            i += 1
    heads = ("family", "cases", "loads", "errors", "internal", "hangs", "crashes", "peak RSS")
    print(f"{heads[0]:26s}" + "".join(f"{h:>10s}" for h in heads[1:]))
    total = fuzzkit.Tally()
    for name, t in tallies.items():
        c = t.counts
        cases = sum(c.values())
        print(f"{name:26s}{cases:10d}{c['load']:10d}{c['error']:10d}{c['internal']:10d}{c['hang']:10d}"
              f"{c['crash']:10d}{t.max_rss_kb / 1024:8.0f} MB")
        for k, v in c.items():
            total.counts[k] += v
        total.max_rss_kb = max(total.max_rss_kb, t.max_rss_kb)
        total.examples += t.examples
    c = total.counts
    print(f"{'all':26s}{sum(c.values()):10d}{c['load']:10d}{c['error']:10d}{c['internal']:10d}{c['hang']:10d}"
          f"{c['crash']:10d}{total.max_rss_kb / 1024:8.0f} MB")
    for e in total.examples:
        print("  " + e)
    return 1 if c["internal"] or c["hang"] or c["crash"] else 0


if __name__ == "__main__":
    sys.exit(main())
