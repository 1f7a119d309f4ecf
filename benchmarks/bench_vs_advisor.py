"""``msprof-lsp --check --no-cache`` against ``msprof-analyze advisor all`` on the same job.

    python benchmarks/bench_vs_advisor.py                 # 5 steps of a 900-call model, ~38 MB
    python benchmarks/bench_vs_advisor.py --job sample    # the tiny_transformer sample, 5 steps
    python benchmarks/bench_vs_advisor.py --venv /tmp/advisor-venv   # keep (and reuse) the venv
    python benchmarks/bench_vs_advisor.py --baseline-rev 8a03ff1 --rounds 3   # ours before/after too

Jobs (both tools read the same ``*_ascend_pt`` folder; msprof-lsp also maps it to the sources):

* ``large`` (default): the sources and torch_npu result of ``benchmarks/gen_large_trace.py`` with
  ``--layers`` layer calls per step (900: a 38 MB trace_view.json for 5 steps, the size of export
  a real multi-layer model writes; ~3.6 k kernels and ~8 k host ops per step);
* ``sample``: the tiny_transformer sample (its model.py and train.py) with a torch_npu text export
  of ``--steps`` steps written by the spec-exact writers (tests/synth, the run description of
  samples/make_npu_profiles.py): 9 MB for 5 steps.

Both commands run with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` removed from their
environment) and one untimed run of ours first, as an installed tool runs: pip compiles the
advisor's modules when it installs them. The advisor is pip-installed into a throwaway venv (a temporary folder
unless ``--venv`` names one to keep); when it cannot be installed the script says so and still
measures our side.

Each tool runs as a whole command in a fresh process (interpreter start and imports included, as a
user runs it), alternating, ``--rounds`` times; the best wall time of each is compared, and the CPU
seconds (user + sys of the process and its children) are printed beside it because the shared
development machine's load moves wall time from run to run. Printed ratio: advisor / msprof-lsp.
With ``--baseline-rev`` an earlier revision of msprof-lsp (``git archive``, imported instead of
the editable install) runs in the same rounds, and its ratio and current / baseline are printed
too (best and median of the rounds).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.synth.sample_runs import TransformerKnobs, transformer_run  # noqa: E402
from tests.synth.write_text import write_torch_npu_text  # noqa: E402

SAMPLE = REPO / "samples" / "tiny_transformer"
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _common import archive, install_advisor  # noqa: E402

# Runs msprof-lsp from an archived revision: python -c LAUNCH TREE ARGS...
LAUNCH = ("import sys; sys.path.insert(0, {here!r}); from _common import use_tree; use_tree(sys.argv[1]); "
          "from msprof_lsp.server.__main__ import main; raise SystemExit(main(sys.argv[2:]))")


@dataclasses.dataclass(frozen=True, slots=True)
class Timed:
    wall_s: float
    cpu_s: float


def make_sample_job(folder: Path, steps: int) -> Path:
    """The sample's sources plus a ``steps``-step export under ``npu_profile``; the ``*_ascend_pt`` root."""
    folder.mkdir(parents=True)
    for name in ("model.py", "train.py"):
        shutil.copy(SAMPLE / name, folder / name)
    run = transformer_run(folder, dataclasses.replace(TransformerKnobs(), steps=steps))
    return write_torch_npu_text(run, folder / "npu_profile")


def make_large_job(folder: Path, steps: int, layers: int) -> Path:
    from gen_large_trace import generate, write_sources

    write_sources(folder)
    return generate(folder / "prof", 0, layers=layers, steps=steps)


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(argv: list[str], cwd: Path, ok: tuple[int, ...]) -> Timed:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=ENV)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in ok:
        raise SystemExit(f"{argv[0]} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timed(wall, cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", choices=("large", "sample"), default="large")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--layers", type=int, default=900, help="layer calls per step of the large job")
    ap.add_argument("--advisor-version", default="26.2.0")
    ap.add_argument("--venv", type=Path, help="keep the advisor's venv here (default: a temporary folder)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--baseline-rev", help="also run this git revision of msprof-lsp in the same rounds")
    args = ap.parse_args()
    rounds = max(1, min(args.rounds, 5))

    with tempfile.TemporaryDirectory(prefix="msprof-bench-advisor-") as tmp_name:
        tmp = Path(tmp_name)
        job = tmp / "job"
        steps = max(1, args.steps)
        if args.job == "sample":
            root = make_sample_job(job, steps)
            what = f"tiny_transformer sources + {steps}-step torch_npu text export"
        else:
            root = make_large_job(job, steps, max(1, args.layers))
            what = f"gen_large_trace sources + {steps} steps of {args.layers} layer calls"
        size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        trace = root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
        print(f"job: {what}: {size / 1e6:.1f} MB, trace_view.json {trace.stat().st_size / 1e6:.1f} MB")
        exe, how = install_advisor(args.venv or tmp / "advisor-venv", args.advisor_version)
        if exe is None:
            print(f"msprof-analyze advisor: NOT MEASURED, it could not be installed here ({how})")
        else:
            print(f"msprof-analyze {args.advisor_version}: {how} in {exe.parent.parent}")

        check_args = ["--check", "--no-cache", "--quiet", str(job)]
        commands = {"msprof-lsp": [sys.executable, "-m", "msprof_lsp.server", *check_args]}
        if args.baseline_rev:
            tree = str(archive(args.baseline_rev, tmp / "baseline"))
            commands[f"msprof-lsp {args.baseline_rev}"] = [sys.executable, "-c", LAUNCH.format(here=str(HERE)), tree,
                                                          *check_args]
        for cmd in commands.values():
            timed(cmd, job, ok=(0, 1))  # writes our bytecode; not counted
        ours: dict[str, list[Timed]] = {name: [] for name in commands}
        theirs: list[Timed] = []
        for i in range(rounds):
            for name, cmd in commands.items():
                ours[name].append(timed(cmd, job, ok=(0, 1)))
            if exe is not None:
                out = tmp / f"advisor-out-{i}"
                out.mkdir()
                theirs.append(timed([str(exe), "advisor", "all", "-d", str(root), "-o", str(out), "--force"],
                                    tmp, ok=(0,)))
                if not list(out.glob("mstt_advisor_*.html")):
                    raise SystemExit("the advisor ran but wrote no report: its time would not be a real analysis")
        report(ours, theirs, rounds)


def _best(runs: list[Timed]) -> Timed:
    return min(runs, key=lambda t: t.wall_s)


def _median(runs: list[Timed]) -> Timed:
    return Timed(statistics.median(t.wall_s for t in runs), statistics.median(t.cpu_s for t in runs))


def report(ours: dict[str, list[Timed]], theirs: list[Timed], rounds: int) -> None:
    rows = {f"{name} --check --no-cache": runs for name, runs in ours.items()}
    if theirs:
        rows["msprof-analyze advisor all"] = theirs
    print(f"\n{'command':44s} {'best wall s':>11s} {'CPU s':>7s} {'median wall s':>14s} {'CPU s':>7s}  ({rounds} rounds)")
    for name, runs in rows.items():
        b, m = _best(runs), _median(runs)
        print(f"{name:44s} {b.wall_s:11.2f} {b.cpu_s:7.2f} {m.wall_s:14.2f} {m.cpu_s:7.2f}")
    names = list(ours)
    if theirs:
        for name in names:
            for how, pick in (("best", _best), ("median", _median)):
                a, o = pick(theirs), pick(ours[name])
                print(f"advisor / {name} ({how}): {a.wall_s / o.wall_s:.1f}x wall, {a.cpu_s / o.cpu_s:.1f}x CPU")
    if len(names) == 2:
        now, was = _median(ours[names[0]]), _median(ours[names[1]])
        print(f"{names[0]} / {names[1]} (median): {now.wall_s / was.wall_s:.2f}x wall, {now.cpu_s / was.cpu_s:.2f}x CPU")

if __name__ == "__main__":
    main()
