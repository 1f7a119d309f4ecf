"""``msprof-analyze advisor all`` beside ``msprof-lsp --check`` on every Ascend profile we have:
which advisor problem class each profile shows, which of our rules fired on it, and whether they match.

    python benchmarks/compare_advisor.py                         # venv kept at /tmp/advisor-venv
    python benchmarks/compare_advisor.py --venv DIR --markdown   # the table as docs/rules/README.md shows it

Profiles: the real torch_npu exports under ``../shared/fixtures`` (Ascend-msinsight text and DB,
Ascend-msprof-analyze's advisor test inputs, verl's Level0 metadata), the samples' committed
``npu_profile`` folders, and the tiny_transformer sample's run written by the spec-exact writers
as a DB export and as an msprof CLI ``PROF_*`` result (no public msprof CLI result exists).
Each profile is copied to a temporary folder first, so neither tool can write into the fixtures.

The advisor runs with ``-l en --agent``: 26.2.0 then prints one JSON object on stdout whose
``message.problems`` table (headers ``category, description, suggestion, ...``) is the summary
sheet of the xlsx it also writes; that table is what is parsed (``parse_agent_output``).
Ours runs twice with ``--format json``: with the default settings, and with ``minShare = 0`` (a
``pyproject.toml`` in a temporary copy of the sources), to tell "not detected" from "detected but
under minShare" -- the advisor reports every problem whatever its share.

``CATEGORIES`` maps each advisor category to our rule codes (the one place that mapping lives);
a category we deliberately do not match carries the reason, listed in docs/rules/README.md
("Advisor parity"). "Overall Summary" is not a problem class: it is matched by comparing the
advisor's Computing and Uncovered Communication totals with ours (``SUMMARY_FIGURES``, within
``SUMMARY_TOLERANCE``). Exit status 1 when an
advisor category with data has no match and no listed exception.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
for p in (REPO, HERE):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from _common import install_advisor  # noqa: E402

FIXTURES = REPO.parent / "shared" / "fixtures"
SAMPLES = REPO / "samples"
ADVISOR_VERSION = "26.2.0"
SUMMARY = "Overall Summary"
SUMMARY_TOLERANCE = 0.005  # the same producer figures, rounded to 1 µs by the advisor; 0.5 % (at least 1 µs)


class Match(enum.Enum):
    YES = "yes"
    UNDER_MIN_SHARE = "yes, under minShare"
    NO = "NO"
    EXCEPTION = "exception"
    UNMAPPED = "NO (unmapped category)"


@dataclasses.dataclass(frozen=True, slots=True)
class Category:
    """An advisor problem class (its English ``category`` text) and the rules that detect it here."""

    advisor: str
    codes: tuple[str, ...]
    exception: str = ""  # why no rule matches it; non-empty exactly when we do not match it


def _codes(*spans: str) -> tuple[str, ...]:
    """``"NPU241-NPU247"`` style ranges and single codes, expanded."""
    out: list[str] = []
    for s in spans:
        lo, _, hi = s.partition("-")
        if not hi:
            out.append(lo)
            continue
        out += [f"NPU{n}" for n in range(int(lo[3:]), int(hi[3:]) + 1)]
    return tuple(out)


CATEGORIES: tuple[Category, ...] = (
    Category(SUMMARY, ()),  # matched by the step time, not by a rule
    Category("Environment Variable Issues", _codes("NPU241-NPU247")),
    Category("Byte Alignment Analysis", _codes("NPU203")),
    Category("Packet Analysis", _codes("NPU204")),
    Category("Operator No Bound Issues", _codes("NPU202")),
    Category("Operator Dynamic Shape Issues", _codes("NPU107")),
    Category("Operator Dispatch Issues", _codes("NPU107")),
    Category("AICPU Issues", _codes("NPU201")),
    Category("Affinity API Issues", _codes("NPU210-NPU217", "NPU220", "NPU221")),
    Category("Fusible Operator Analysis", _codes("NPU101", "NPU210-NPU217")),
    Category("Fusion Issues", _codes("NPU210-NPU217")),
    Category("Slow Dataloader Issues", _codes("NPU104")),
    Category("GC Analysis", _codes("NPU230")),
    Category("Conjectured GC Analysis", _codes("NPU230")),
    Category("Synchronize Stream Issues", _codes("NPU108")),
    Category("Memory Operator Issues", _codes("NPU109")),
    Category("Vector Operator Perf Analysis", _codes("NPU206")),
    Category("Cube Operator Perf Analysis", _codes("NPU206")),
    Category("FA Operator Perf Analysis", _codes("NPU206")),
    Category("Block Dim Issues", _codes("NPU209")),
    Category("AI Core Frequency Issues", _codes("NPU218")),
    Category("Bandwidth Contention Analysis", _codes("NPU219")),
    Category("SyncBatchNorm Issues", (), "no rule yet: SyncBatchNorm is a model choice, not a line-level fix; not seen in any profile we have"),
    Category("Communication Retransmission Analysis", (), "a cluster-network fault (RDMA retransmits), not a property of the training code"),
)
BY_NAME = {c.advisor: c for c in CATEGORIES}


@dataclasses.dataclass(frozen=True, slots=True)
class AdvisorProblem:
    category: str
    description: str


class AdvisorOutputError(ValueError):
    pass


def parse_agent_output(stdout: str) -> list[AdvisorProblem]:
    """The ``problems`` rows of ``advisor all --agent``'s JSON (the last line that starts with
    ``{"status"``; banners and progress bars precede it). An empty list when the advisor found
    nothing to say; AdvisorOutputError when it failed or printed no such object."""
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.lstrip().startswith('{"status"')), None)
    if line is None:
        raise AdvisorOutputError("no --agent JSON object on stdout")
    doc = json.loads(line)
    if doc.get("status") != "success":
        raise AdvisorOutputError(f"advisor status {doc.get('status')!r}: {str(doc.get('message'))[:200]}")
    message = doc.get("message")
    if not isinstance(message, dict):
        return []
    table = message.get("problems") or {}
    headers = table.get("headers") or []
    if not headers:
        return []
    try:
        ci, di = headers.index("category"), headers.index("description")
    except ValueError as exc:
        raise AdvisorOutputError(f"problems table without category/description headers: {headers}") from exc
    return [AdvisorProblem(str(row[ci]), str(row[di])) for row in table.get("data") or []]


E2E = re.compile(r"E2E Time is ([0-9.]+)\s*ms")
# The advisor's summary figures are totals over the capture; its Free (and so its E2E) is measured
# on the timeline, gaps between steps included, so only these two are the same quantity as ours.
SUMMARY_FIGURES = (
    ("Computing", re.compile(r"Computing Time is ([0-9.]+)\s*ms"), "computing_us"),
    ("Uncovered Communication", re.compile(r"Uncovered Communication Time is ([0-9.]+)\s*ms"),
     "communication_not_overlapped_us"),
)


@dataclasses.dataclass(frozen=True, slots=True)
class Job:
    name: str
    profile: Path  # the run root both tools read
    sources: Path | None  # the sources ours maps to (None: no workspace)


def fixture_jobs() -> list[Job]:
    ms = FIXTURES / "Ascend-msinsight"
    ana = FIXTURES / "Ascend-msprof-analyze" / "test" / "ut" / "advisor"
    verl = FIXTURES / "verl-project-rl-insight" / "data" / "recipe"
    jobs = []
    for form in ("text", "db"):
        for rank in (0, 1):
            jobs.append(Job(f"msinsight {form} rank{rank}", ms / form / "level1" / f"rank{rank}_ascend_pt", ms / "workspace"))
    jobs += [
        Job("msprof-analyze timeline_advice", ana / "timeline_advice", None),
        Job("msprof-analyze compute_advice", ana / "compute_advice" / "data", None),
        Job("verl memory_data (Level0)", verl / "memory_data" / "20260526_085155_ascend_pt", None),
    ]
    return [j for j in jobs if j.profile.is_dir()]


def sample_jobs(tmp: Path) -> list[Job]:
    jobs = []
    for sample in ("cnn_classifier", "tiny_transformer"):
        for root in sorted((SAMPLES / sample / "npu_profile").glob("*_ascend_pt"))[:1]:
            jobs.append(Job(f"sample {sample} text", root, SAMPLES / sample))
    from tests.synth.sample_runs import transformer_run
    from tests.synth.write_db import write_torch_npu_db
    from tests.synth.write_msprof import write_msprof_cli

    src = SAMPLES / "tiny_transformer"
    run = transformer_run(src)
    jobs.append(Job("sample tiny_transformer db", write_torch_npu_db(run, tmp / "gen-db"), src))
    jobs.append(Job("sample tiny_transformer msprof", write_msprof_cli(run, tmp / "gen-msprof"), src))
    return jobs


@dataclasses.dataclass(slots=True)
class Row:
    job: str
    category: str
    advisor_says: str
    fired: list[str]
    match: Match
    note: str = ""


def run_advisor(exe: Path, profile: Path, out: Path) -> list[AdvisorProblem]:
    out.mkdir(parents=True)
    argv = [str(exe), "advisor", "all", "-d", str(profile), "-o", str(out), "--force", "-l", "en", "--agent"]
    if profile.name.startswith("PROF_"):
        argv += ["-pt", "msprof"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=out)
    if proc.returncode:
        raise AdvisorOutputError(f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    return parse_agent_output(proc.stdout)


class OursFailed(Exception):
    pass


def run_ours(profile: Path, sources: Path, min_share_zero: bool) -> dict:
    """``--check --format json`` on ``profile``; OursFailed with its one-line error (exit 2)."""
    if min_share_zero:
        (sources / "pyproject.toml").write_text("[tool.msprof-lsp]\nminShare = 0\n", encoding="utf-8")
    argv = [sys.executable, "-m", "msprof_lsp.server", "--check", "--format", "json", "--no-cache", "--quiet",
            "--fail-on", "never", "--profile", str(profile), str(sources)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=sources)
    if proc.returncode:
        raise OursFailed(proc.stderr.strip().splitlines()[-1][:200] if proc.stderr.strip() else f"exit {proc.returncode}")
    return json.loads(proc.stdout)


def _codes_of(report: dict) -> set[str]:
    """The codes that fired: each finding's, and those folded into it as the same cause
    (``evidence.same_cause``, docs/rules/README.md "One finding per cause")."""
    return {c for f in report.get("findings", []) for c in (f["code"], *f.get("evidence", {}).get("same_cause", []))}


def _capture_us(report: dict, key: str) -> float | None:
    """``key`` of our step breakdown summed over the profiled steps (µs), None without one."""
    profiles = report.get("profiles") or []
    steps = ((profiles[0].get("breakdown") or {}).get("steps") or []) if profiles else []
    return sum(float(s[key]) for s in steps) if steps else None


def summary_row(job: str, p: AdvisorProblem, report: dict) -> Row:
    """The advisor's Computing and Uncovered Communication totals against ours (within
    ``SUMMARY_TOLERANCE`` each); its E2E is shown, not compared."""
    says = " ".join(p.description.split())[:90]
    shown, ok = [], True
    for label, pattern, key in SUMMARY_FIGURES:
        m, ours = pattern.search(p.description), _capture_us(report, key)
        if m is None or ours is None:
            return Row(job, SUMMARY, says, [], Match.NO, f"no {label} figure to compare")
        theirs = float(m.group(1)) * 1000
        ok = ok and abs(theirs - ours) <= max(SUMMARY_TOLERANCE * theirs, 1.0)
        shown.append(f"{label.split()[0].lower()} {ours / 1000:,.3f} ms")
    e2e = E2E.search(p.description)
    note = f"advisor E2E {e2e.group(1)} ms: its free time is measured on the timeline, not compared" if e2e else ""
    return Row(job, SUMMARY, says, shown, Match.YES if ok else Match.NO, note)


def compare(job: str, problems: Sequence[AdvisorProblem], default: dict, everything: dict) -> list[Row]:
    """One row per advisor problem of ``job``: what fired of the mapped codes, and the verdict."""
    fired, under = _codes_of(default), _codes_of(everything)
    rows = []
    for p in problems:
        says = " ".join(p.description.split())[:90]
        cat = BY_NAME.get(p.category)
        if cat is None:
            rows.append(Row(job, p.category, says, [], Match.UNMAPPED))
        elif cat.advisor == SUMMARY:
            rows.append(summary_row(job, p, default))
        elif cat.exception:
            rows.append(Row(job, cat.advisor, says, sorted(under & set(cat.codes)), Match.EXCEPTION, cat.exception))
        else:
            hit = sorted(fired & set(cat.codes))
            low = sorted((under - fired) & set(cat.codes))
            verdict = Match.YES if hit else Match.UNDER_MIN_SHARE if low else Match.NO
            rows.append(Row(job, cat.advisor, says, hit or low, verdict))
    return rows


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.db-shm", "*.db-wal", "__pycache__"))
    return dst


def check_job(exe: Path, job: Job, tmp: Path) -> list[Row]:
    work = tmp / re.sub(r"\W+", "_", job.name)
    work.mkdir()
    profile = _copy(job.profile, work / "profile" / job.profile.name)
    try:
        problems = run_advisor(exe, profile, work / "advisor-out")
    except (AdvisorOutputError, subprocess.TimeoutExpired) as exc:
        return [Row(job.name, "(advisor failed)", str(exc)[:90], [], Match.EXCEPTION, "the advisor could not read it")]
    sources = work / "sources"
    if job.sources is not None:
        shutil.copytree(job.sources, sources, ignore=shutil.ignore_patterns("npu_profile", "kineto", "__pycache__", "*.pyc"))
    else:
        sources.mkdir()
    try:
        default = run_ours(profile, sources, False)
        everything = run_ours(profile, sources, True)
    except OursFailed as exc:
        if problems:
            return [Row(job.name, p.category, " ".join(p.description.split())[:90], [], Match.NO,
                        f"msprof-lsp did not read it: {exc}") for p in problems]
        return [Row(job.name, "(no problem reported)", "", [], Match.YES, f"msprof-lsp did not read it: {exc}")]
    if not problems:
        return [Row(job.name, "(no problem reported)", "", sorted(_codes_of(default)), Match.YES)]
    return compare(job.name, problems, default, everything)


def text_table(rows: Sequence[Row]) -> str:
    head = ("profile", "advisor category", "advisor says", "our rule(s)", "match")
    body = [(r.job, r.category, r.advisor_says[:48], ", ".join(r.fired) or "-", r.match.value) for r in rows]
    widths = [max(len(x[i]) for x in (head, *body)) for i in range(5)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in (head, *body))


def markdown_table(rows: Sequence[Row]) -> str:
    out = ["| profile | advisor category | advisor says | our rule(s) fired | match |", "|---|---|---|---|---|"]
    for r in rows:
        says = r.advisor_says.replace("|", "\\|")
        out.append(f"| {r.job} | {r.category} | {says} | {', '.join(r.fired) or '—'} | {r.match.value} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", type=Path, default=Path("/tmp/advisor-venv"), help="the advisor's venv (made when missing)")
    ap.add_argument("--advisor-version", default=ADVISOR_VERSION)
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    ap.add_argument("--only", default="", help="run only the jobs whose name contains this text")
    args = ap.parse_args()
    exe, how = install_advisor(args.venv, args.advisor_version)
    if exe is None:
        print(f"msprof-analyze {args.advisor_version} could not be installed here ({how}): nothing to compare")
        return 2
    print(f"msprof-analyze {args.advisor_version}: {how} in {args.venv}")
    if not FIXTURES.is_dir():
        print(f"note: {FIXTURES} is absent: only the samples are compared")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="msprof-compare-advisor-") as tmp_name:
        tmp = Path(tmp_name)
        for job in [*fixture_jobs(), *sample_jobs(tmp)]:
            if args.only and args.only not in job.name:
                continue
            print(f"... {job.name}", file=sys.stderr, flush=True)
            rows += check_job(exe, job, tmp)
    print(markdown_table(rows) if args.markdown else text_table(rows))
    failed = [r for r in rows if r.match in (Match.NO, Match.UNMAPPED)]
    print(f"\n{len(rows)} rows: {sum(r.match in (Match.YES, Match.UNDER_MIN_SHARE) for r in rows)} matched, "
          f"{sum(r.match is Match.EXCEPTION for r in rows)} listed exceptions, {len(failed)} unmatched")
    for r in rows:
        if r.note:
            print(f"  {r.match.value}: {r.job} / {r.category}: {r.note}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
