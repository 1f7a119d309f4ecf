"""Fuzz campaigns over every input family (the test suite runs a small derandomized set).

    python benchmarks/fuzz.py --cases 20000 [--jobs N] [--seed 1] [--family kineto] [--timeout 60]
    python benchmarks/fuzz.py --minutes 10 ...
    python benchmarks/fuzz.py --replay FAMILY TARGET KIND SEED [--keep DIR]
    python benchmarks/fuzz.py --list

Cases are drawn per family in turn (round robin) from one seeded generator, so a campaign's case
list does not depend on --jobs: a seed input, a file of it, a mutation kind (truncation, byte
damage, encoding, structure, numbers, big numbers, unicode digits, device names, nesting, bombs,
special files) and a seed. Each runs in a forked child with a 3 GiB address-space cap and a time
limit, through the product's real entry (``--check`` in-process for profiles, settings and source;
tests/fuzz/fuzzkit.py). Prints per family: cases, clean loads, clean errors, internal errors,
hangs, crashes (``refused``: a clean error where the docs promise the file is dropped and the
rest loads -- an optional file, or one rank of a multi-rank job), the peak RSS of one case (its rank pool included) and the mean seconds per case,
then the first failing cases of each family, each with the command line that replays it.
Exit status 1 when any case was refused or ended in an internal error, a hang or a crash.
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzz import fuzzkit  # noqa: E402


def replay_command(case: fuzzkit.Case) -> str:
    return " ".join(["python benchmarks/fuzz.py --replay",
                     *(shlex.quote(x) for x in (case.family.name, case.target, case.kind, str(case.seed)))])


def draw(fams: list[fuzzkit.Family], rnd: random.Random, *, cases: int | None, end: float | None):
    """The campaign's cases, round robin over the families (one generator: same list for any --jobs)."""
    i = 0
    while (cases is None or i < cases) and (end is None or time.monotonic() < end):
        f = fams[i % len(fams)]
        kind = rnd.choice(fuzzkit.KINDS)
        target = rnd.choice(f.files)
        yield fuzzkit.Case(f, kind, target, rnd.randrange(1 << 32))
        i += 1


def table(tallies: dict[str, fuzzkit.Tally], out=None) -> fuzzkit.Tally:
    out = out or sys.stdout
    heads = ("cases", "loads", "errors", "refused", "internal", "hangs", "crashes", "peak RSS", "s/case")
    width = max([len(n) for n in tallies] + [6]) + 2
    print(f"{'family':{width}s}" + "".join(f"{h:>10s}" for h in heads), file=out)
    total = fuzzkit.Tally()

    def row(name: str, t: fuzzkit.Tally) -> None:
        c = t.counts
        n = sum(c.values())
        print(f"{name:{width}s}{n:10d}{c['load']:10d}{c['error']:10d}{c['refused']:10d}{c['internal']:10d}{c['hang']:10d}"
              f"{c['crash']:10d}{t.max_rss_kb / 1024:7.0f} MB{t.seconds / max(1, n):10.2f}", file=out)

    for name, t in tallies.items():
        row(name, t)
        for k, v in t.counts.items():
            total.counts[k] += v
        total.max_rss_kb = max(total.max_rss_kb, t.max_rss_kb)
        total.seconds += t.seconds
        total.examples += t.examples
    row("all", total)
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--minutes", type=float, default=None, help="run for this long (default: 10 unless --cases)")
    size.add_argument("--cases", type=int, default=None, help="run this many cases")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="cases at once (default: CPU count)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--family", default="", help="only families whose name contains this")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as a hang")
    ap.add_argument("--examples", type=int, default=3, help="failing cases listed per family")
    ap.add_argument("--replay", nargs=4, metavar=("FAMILY", "TARGET", "KIND", "SEED"), help="run one case again")
    ap.add_argument("--keep", type=Path, help="with --replay: leave the mutated input in this folder")
    ap.add_argument("--list", action="store_true", help="list the families and their files")
    args = ap.parse_args(argv)
    if args.keep and not args.replay:
        ap.error("--keep goes with --replay")
    with tempfile.TemporaryDirectory(prefix="msprof-fuzz-") as tmp:
        scratch = Path(tmp)
        all_fams = fuzzkit.families(scratch)
        if args.list:
            for f in all_fams:
                print(f"{f.name}: {f.source}" + (f" (skipped: {f.skip})" if f.skip else ""))
                for t in f.files:
                    print(f"    {t or '(the file itself)'}")
            print("kinds: " + ", ".join(fuzzkit.KINDS))
            return 0
        if args.replay:
            return replay(all_fams, args, scratch)
        fams = [f for f in all_fams if args.family in f.name]
        for f in fams:
            if f.skip:
                print(f"skipped {f.name}: {f.skip}")
        fams = [f for f in fams if not f.skip]
        if not fams:
            print("no family to run")
            return 2
        minutes = args.minutes if args.minutes is not None else (None if args.cases is not None else 10.0)
        end = time.monotonic() + minutes * 60 if minutes is not None else None
        tallies = {f.name: fuzzkit.Tally() for f in fams}
        started = time.monotonic()
        cases = draw(fams, random.Random(args.seed), cases=args.cases, end=end)
        done, bad = 0, 0

        def stop(signum, frame):  # SIGTERM (a background run ignores Ctrl-C): the table of what ran
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, stop)
        try:
            for case, out in fuzzkit.run_many(cases, scratch / "cases", args.jobs, timeout_s=args.timeout):
                tallies[case.family.name].add(case, out, keep=args.examples)
                done += 1
                if out.kind in fuzzkit.BAD_OUTCOMES:
                    bad += 1
                    print(f"[{done}] {case.family.name}: {case.label()}: {out.kind}: {out.detail}\n    {replay_command(case)}",
                          file=sys.stderr, flush=True)
                elif done % 100 == 0:
                    print(f"[{done}] {bad} failing so far", file=sys.stderr, flush=True)
        except KeyboardInterrupt:  # Ctrl-C / SIGTERM: the table of what ran (running cases end with their groups)
            print("interrupted", file=sys.stderr)
        wall = time.monotonic() - started
    total = table(tallies)
    n = sum(total.counts.values())
    print(f"{n} cases in {wall:.0f} s with {args.jobs} jobs ({n / max(wall, 1e-9) * 60:.0f} cases/min), seed {args.seed}")
    for case, out in total.examples:
        print(f"  {case.family.name}: {case.label()}: {out.kind}: {out.detail}")
        print(f"    {replay_command(case)}")
    c = total.counts
    return 1 if any(c[k] for k in fuzzkit.BAD_OUTCOMES) else 0


def replay(fams: list[fuzzkit.Family], args: argparse.Namespace, scratch: Path) -> int:
    name, target, kind, seed = args.replay
    family = next((f for f in fams if f.name == name), None)
    if family is None:
        print(f"no family {name!r}; --list shows them")
        return 2
    if family.skip:
        print(f"{name}: skipped here: {family.skip}")
        return 2
    if kind not in fuzzkit.KINDS or target not in family.files:
        print(f"no case {target!r} / {kind!r} in {name!r}; --list shows the files, kinds: {', '.join(fuzzkit.KINDS)}")
        return 2
    work = args.keep.resolve() if args.keep else scratch / "replay"
    out = fuzzkit.run_case(family, work, kind, target, int(seed), timeout_s=args.timeout, keep=bool(args.keep))
    print(f"{name}: {target or family.source.name} / {kind} / seed {seed}: {out.kind} in {out.seconds:.1f} s, "
          f"peak RSS {out.max_rss_kb / 1024:.0f} MB")
    if out.detail:
        print(f"  {out.detail}")
    if args.keep:
        print(f"  the mutated input: {work / family.source.name}")
    return 1 if out.kind in fuzzkit.BAD_OUTCOMES else 0


if __name__ == "__main__":
    sys.exit(main())
