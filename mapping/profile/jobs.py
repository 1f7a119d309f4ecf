"""Group discovered profiles into jobs, and find the source folder that belongs to each job.

A job is one run of one program: the ranks it wrote, nothing else. A folder such as ``samples/``
or a test-data tree holds profiles of several unrelated jobs, and a training folder often holds
several runs of the same script; ranks of different jobs must never be compared as one cluster.
Grouping, from one discovery walk (:func:`discover_jobs`):

1. by the folder holding each run (``tensorboard_trace_handler(dir)`` writes every rank there;
   the reader says which folder or file is a run's own, ``Reader.run_root``) and by producer
   (torch_npu runs, msprof ``PROF_*`` runs and Kineto traces are separate jobs; a reader may join
   another's, ``Reader.same_job_as``: torch_npu text and DB exports);
2. by file-name pattern where the reader says names tell jobs apart (``Reader.job_by_name``:
   Kineto; digits aside, ``sampled_rank-0.json.gz`` and ``sampled_rank-1.json.gz`` are one job,
   ``train.1.pt.trace.json`` and ``eval.2.pt.trace.json`` are two);
3. into runs: ordered by start (the timestamp in the name, else the newest input file), a rank
   seen again starts the next run (``node_7_<day 1>_ascend_pt`` and ``node_9_<day 2>_ascend_pt``
   both rank 0: two runs, two jobs);
4. one-rank jobs in sibling per-rank folders (``prof/rank0/…``, ``prof/rank1/…``: same folder-name
   pattern, same producer, distinct ranks) are one job.

Within a job the newest run per rank is kept and unranked profiles are dropped beside ranked
ones (``discover.select_newest``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from msprof_lsp.mapping.profile.discover import DEFAULT_MAX_DEPTH, find_candidates, select_newest
from msprof_lsp.mapping.profile.locations import ProfileLocation
from msprof_lsp.mapping.profile.readers.protocol import Candidate, Listings, is_file
from msprof_lsp.mapping.profile.readers.registry import reader_for

_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True, slots=True)
class Job:
    folder: Path  # the folder the job's profiles were found in (per-rank folders: their parent)
    locations: tuple[ProfileLocation, ...]  # the ranks to load, sorted by rank (unranked first)
    runs_found: tuple[ProfileLocation, ...] = field(default=())  # every profile of the job
    # The job's folder and the folders above it that discovery listed (resolved), each with whether
    # it holds a .py file: finding the source root lists none of them again.
    python_folders: tuple[tuple[Path, bool], ...] = field(default=(), compare=False, repr=False)

    def source_root(self, boundary: Path) -> Path:
        """The source folder this job's frames resolve against (see :func:`source_root_for`)."""
        return source_root_for(self.folder, boundary, dict(self.python_folders))

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted({loc.kind.value for loc in self.locations}))

    @property
    def detail(self) -> int:
        """What the job's profiles carry (``Reader.detail``: Ascend exports more than a Kineto trace)."""
        return max((reader_for(loc.kind, loc.path).detail for loc in self.locations), default=0)

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted({loc.rank for loc in self.locations if loc.rank is not None}))

    def describe(self, base: Path | None = None) -> str:
        """One line: where, which producer, how many ranks (``trace_filter: kineto, 2 ranks (0, 1)``)."""
        where = str(self.folder)
        if base is not None:
            base = base.absolute() if self.folder.is_absolute() else base  # discovery's folders are absolute
            try:
                where = str(self.folder.relative_to(base)) if self.folder != base else "."
            except ValueError:
                pass
        ranks = self.ranks
        if not ranks:
            what = f"{len(self.locations)} profile" + ("s" if len(self.locations) != 1 else "") + " without rank"
        elif len(ranks) == 1:
            what = f"1 rank ({ranks[0]})"
        else:
            what = f"{len(ranks)} ranks ({', '.join(map(str, ranks))})"
        if len(self.locations) == 1:
            where = f"{where} [{self.locations[0].path.name}]"
        return f"{where}: {'+'.join(self.kinds)}, {what}"


def discover_jobs(paths: Sequence[Path], *, max_depth: int = DEFAULT_MAX_DEPTH) -> list[Job]:
    """Every job under ``paths`` (one walk), sorted by folder."""
    listings = Listings()
    jobs = group_candidates(find_candidates(paths, max_depth=max_depth, listings=listings))
    return [replace(job, python_folders=_python_folders(job.folder, listings)) for job in jobs]


def _python_folders(folder: Path, listings: Listings) -> tuple[tuple[Path, bool], ...]:
    out: list[tuple[Path, bool]] = []
    for d in (folder, *folder.parents):
        entries = listings.made(d)
        if entries is None:  # above the walked paths
            break
        out.append((d.resolve(), any(Path(e.name).suffix == ".py" and is_file(e) for e in entries)))
    return tuple(out)


def group_candidates(candidates: Sequence[Candidate]) -> list[Job]:
    by_home: dict[tuple[Path, str, str], list[Candidate]] = {}
    for cand in candidates:
        loc = cand.location
        home = reader_for(loc.kind, loc.path).run_root(loc).parent
        by_home.setdefault((home, _family(loc), _name_pattern(loc)), []).append(cand)

    groups: list[tuple[Path, list[Candidate]]] = []
    for (home, _, _), cands in by_home.items():
        groups.extend((home, run) for run in _parsed_runs(_split_runs(cands)))
    groups = _merge_rank_folders(groups)

    jobs = [
        Job(folder, tuple(select_newest(cands)), tuple(c.location for c in cands)) for folder, cands in groups
    ]
    return sorted(jobs, key=lambda j: (str(j.folder), [str(loc.path) for loc in j.locations]))


def _family(loc: ProfileLocation) -> str:
    return reader_for(loc.kind, loc.path).family.value


def _name_pattern(loc: ProfileLocation) -> str:
    # Only where the reader says file names tell jobs apart: torch_npu and msprof name runs
    # <host>_<pid>_<time> / PROF_<n>_<time>_<random letters>, so one run's ranks differ beyond digits.
    if not reader_for(loc.kind, loc.path).job_by_name:
        return ""
    return _DIGITS.sub("#", loc.path.name)


def _start(cand: Candidate) -> tuple[float, float, str]:
    return (float(cand.name_ts), cand.location.mtime, str(cand.location.path))


def _split_runs(cands: list[Candidate]) -> list[list[Candidate]]:
    runs: list[list[Candidate]] = []
    seen: set[int | None] = set()
    for cand in sorted(cands, key=_start):
        if not runs or cand.location.rank in seen:
            runs.append([])
            seen = set()
        runs[-1].append(cand)
        seen.add(cand.location.rank)
    return runs


def _merge_rank_folders(groups: list[tuple[Path, list[Candidate]]]) -> list[tuple[Path, list[Candidate]]]:
    """``prof/rank0/x_ascend_pt`` + ``prof/rank1/y_ascend_pt``: one job in ``prof`` (per run, when
    each rank folder holds several runs)."""
    singles: dict[tuple[Path, str, str, str], list[int]] = {}
    for i, (home, cands) in enumerate(groups):
        if len(cands) == 1 and cands[0].location.rank is not None:
            loc = cands[0].location
            key = (home.parent, _DIGITS.sub("#", home.name), _family(loc), _name_pattern(loc))
            singles.setdefault(key, []).append(i)
    merged: set[int] = set()
    out: list[tuple[Path, list[Candidate]]] = []
    for (parent, _, _, _), idx in singles.items():
        if len({groups[i][0] for i in idx}) < 2:
            continue  # runs of one folder stay apart
        group_of = {id(groups[i][1][0]): i for i in idx}
        for run in _split_runs([groups[i][1][0] for i in idx]):
            if len(run) > 1:
                out.append((parent, run))
                merged.update(group_of[id(c)] for c in run)
    out.extend(g for i, g in enumerate(groups) if i not in merged)
    return out


def _parsed_runs(runs: list[list[Candidate]]) -> list[list[Candidate]]:
    # A run whose results were never parsed (raw data only) is no job beside parsed ones.
    parsed = [run for run in runs if any(c.has_output for c in run)]
    return parsed or runs


def source_root_for(profile_path: Path, boundary: Path, known: Mapping[Path, bool] | None = None) -> Path:
    """The nearest folder at or above the profile (not above ``boundary``) holding Python files.

    Kineto traces record prefix-stripped paths (``model.py``); resolving them against the job's
    own folder first keeps two samples' ``model.py`` apart. ``known``: whether a (resolved) folder
    holds one, where discovery already listed it.
    """
    boundary = boundary.resolve()
    here = profile_path.resolve()
    here = here if here.is_dir() else here.parent
    for d in (here, *here.parents):
        held = known.get(d) if known else None
        if held is None:
            try:
                held = any(p.suffix == ".py" for p in d.iterdir() if p.is_file())
            except OSError:
                held = False
        if held:
            return d
        if d == boundary or boundary not in d.parents:
            break
    return boundary if boundary.is_dir() else boundary.parent
