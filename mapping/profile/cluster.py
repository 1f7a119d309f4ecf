"""Load what the user pointed at: discover, load every rank (in parallel), pick the rank to analyse.

A multi-rank job leaves one profile per rank. Each rank is loaded independently in a process pool
and comes back encoded by mapping.codec (the pool's own pickling then carries only a bytearray and
strings, and the parent decodes the profile through the same validated codec as the cache), a
ClusterSummary compares the
ranks (step time, communication that compute did not hide), and the requested rank -- else the
slowest, the one holding the job back -- is the profile the rules analyse.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path

import msgspec
import numpy as np

from msprof_lsp.mapping.children import isolated_children
from msprof_lsp.mapping.profile import cache, codec, comm_time, safe_io
from msprof_lsp.mapping.profile.discover import require_found
from msprof_lsp.mapping.errors import Issue, ProfileError
from msprof_lsp.mapping.numbers import float_of, int64_of
from msprof_lsp.mapping.profile.cache import default_cache_dir
from msprof_lsp.mapping.profile.jobs import discover_jobs
from msprof_lsp.mapping.profile.load import load_location
from msprof_lsp.mapping.profile.readers.registry import reader_for
from msprof_lsp.mapping.profile.locations import ProfileLocation, Progress, no_progress
from msprof_lsp.mapping.profile.model import ClusterSummary, CommLink, CommOp, Profile, RankSummary
from msprof_lsp.mapping.profile.timemodel import TaskClass, collective_mask, exclusive_ns, is_class, profile_breakdown



@dataclass(slots=True)
class LoadResult:
    profile: Profile  # the analysed rank
    location: ProfileLocation  # where it came from
    cluster: ClusterSummary | None  # None for a single-rank profile
    locations: list[ProfileLocation]  # every rank found (newest run per rank)


def load_profile(
    paths: Sequence[Path],
    *,
    rank: int | None = None,
    use_cache: bool = True,
    cache_dir: Path | None = None,
    progress: Progress = no_progress,
) -> LoadResult:
    """Discover the one job under ``paths`` (the cwd when empty) and load the rank to analyse.

    Raises NoProfileFound when nothing is there, ProfileError when ``paths`` hold several jobs
    (naming them: ranks of different jobs are never one cluster), for an unknown ``rank``, or when
    no rank can be read at all. See :func:`load_job` for the rest.
    """
    given = [Path(p) for p in paths] or [Path.cwd()]
    where = given[0] if len(given) == 1 else Path(os.pathsep.join(str(p) for p in given))
    progress("Looking for profiles", None)
    jobs = require_found(discover_jobs(given), where, given)
    if len(jobs) > 1:
        base = given[0] if len(given) == 1 and given[0].is_dir() else None
        listed = "; ".join(job.describe(base) for job in jobs)
        raise ProfileError(where, f"holds {len(jobs)} separate jobs, point at one of them: {listed}")
    return load_job(jobs[0].locations, where, rank=rank, use_cache=use_cache, cache_dir=cache_dir,
                    progress=progress)


def load_job(
    locations: Sequence[ProfileLocation],
    where: Path,
    *,
    rank: int | None = None,
    use_cache: bool = True,
    cache_dir: Path | None = None,
    progress: Progress = no_progress,
) -> LoadResult:
    """Load one job's ranks (``Job.locations``, as discovery chose them) without walking again.

    A rank that fails to load while others succeed is left out of the summary and named in the
    analysed profile's issues; ``where`` names the job in errors.
    """
    locations = list(require_found(locations, where))
    ranked = [loc for loc in locations if loc.rank is not None]
    if rank is not None and ranked and not any(loc.rank == rank for loc in locations):
        available = ", ".join(str(loc.rank) for loc in ranked) or "none (the profile has no rank information)"
        raise ProfileError(where, f"rank {rank} not found; available ranks: {available}")

    if len(locations) == 1:  # one rank (or a profile without rank information)
        loc = locations[0]
        profile = load_location(loc, use_cache=use_cache, cache_dir=cache_dir, progress=progress)
        return LoadResult(profile, loc, None, locations)

    # Resolve the cache folder here: pool workers come from a forkserver started earlier, with
    # the environment (XDG_CACHE_HOME) of that moment, not of this call.
    if use_cache and cache_dir is None:
        cache_dir = default_cache_dir()
    # Summary first: every rank's cluster figures from its small summary files (cached per rank);
    # only ranks without them are loaded whole, and then only the analysed rank.
    summaries = read_summaries(locations, use_cache=use_cache, cache_dir=cache_dir, progress=progress)
    whole = [loc for loc in locations if loc.rank not in summaries]
    profiles, failures = (_load_ranks(whole, use_cache=use_cache, cache_dir=cache_dir, progress=progress)
                          if whole else ({}, []))
    by_rank = {loc.rank: loc for loc in locations if loc.rank is not None}
    summaries.update((r, rank_summary_of(r, p, str(by_rank[r].path) if r in by_rank else p.meta.path))
                     for r, p in profiles.items())
    if not summaries:
        loc, err = failures[0]
        raise err
    if rank is not None and rank not in summaries:
        raise next(err for loc, err in failures if loc.rank == rank)
    summary = cluster_of(summaries, rank)
    profile = _load_analysed(summary, rank is not None, by_rank, profiles, failures,
                             use_cache=use_cache, cache_dir=cache_dir, progress=progress)
    location = by_rank[summary.analysed_rank]
    for loc, err in failures:
        profile.issues.append(Issue(err.path, f"rank {loc.rank} left out of the cluster summary: {err.message}",
                                    err.line))
    return LoadResult(profile, location, summary, locations)


# ---------------------------------------------------------------------------------------------
# Loading ranks


def _load_analysed(summary: ClusterSummary, requested: bool, by_rank: dict[int, ProfileLocation],
                   profiles: dict[int, Profile], failures: list[tuple[ProfileLocation, ProfileError]], *,
                   use_cache: bool, cache_dir: Path | None, progress: Progress) -> Profile:
    """The analysed rank's whole Profile. When that rank cannot be loaded and the user did not ask
    for it, the next slowest rank with device data is analysed instead (``summary`` updated, the
    failure appended to ``failures``); a requested rank's error is raised."""
    order = [summary.analysed_rank] + [
        s.rank for s in sorted(summary.ranks, key=lambda s: (-s.step_time_ns, s.rank))
        if s.rank != summary.analysed_rank and s.device_data and not requested]
    for r in order:
        if r != order[0]:
            summary.analysed_rank = r
            summary.analysed_why = f"the next slowest rank with device tasks (rank {order[0]} cannot be read)"
        if r in profiles:
            return profiles[r]
        progress(f"Loading rank {r} (the rank analysed)", None)
        try:
            profile = load_location(by_rank[r], use_cache=use_cache, cache_dir=cache_dir, progress=progress)
        except ProfileError as exc:
            if requested or r == order[-1]:
                raise
            failures.append((by_rank[r], exc))
            continue
        return profile
    raise AssertionError("unreachable: order is never empty")


SUMMARY_CHUNK = 64
"""Ranks per pool task when summaries are read in worker processes: a rank's summary takes
milliseconds, so one task per rank would cost more in hand-offs than it reads."""
_SUMMARIES = msgspec.msgpack.Decoder(list[tuple[int, RankSummary]])


def read_summaries(locations: Sequence[ProfileLocation], *, use_cache: bool, cache_dir: Path | None,
                   progress: Progress = no_progress, workers: int | None = None) -> dict[int, RankSummary]:
    """Each rank's cluster figures from its summary files alone (its reader's ``summary``), from
    the rank summary cache where the files are unchanged; ranks whose reader has no summary, or
    whose summary files give no step time, are left out (the caller loads them whole). More than
    one chunk of ranks is read in the rank pool, in chunks, each handing back typed msgpack."""
    todo = [replace(loc, path=Path(loc.path).absolute()) for loc in locations
            if loc.rank is not None and reader_for(loc.kind, loc.path).summary is not None]
    if not todo:
        return {}
    n = len(todo)
    cache_dir = None if cache_dir is None else cache_dir.absolute()
    workers = workers or max(1, min(os.cpu_count() or 1, -(-n // SUMMARY_CHUNK)))
    progress(f"Reading {n} ranks' summary files ({workers} processes)", 0.0)
    if workers == 1:
        return dict(_summaries(todo, use_cache, cache_dir))
    out: dict[int, RankSummary] = {}
    with rank_pool(workers) as pool:
        with isolated_children():
            pending = [pool.submit(_summaries_encoded, todo[i:i + SUMMARY_CHUNK], use_cache, cache_dir)
                       for i in range(0, n, SUMMARY_CHUNK)]
        for fut in pending:
            out.update(_SUMMARIES.decode(fut.result()))
            progress(f"Read {len(out)}/{n} ranks' summary files", len(out) / n)
    return out


def _summaries(locations: list[ProfileLocation], use_cache: bool, cache_dir: Path | None) -> list[tuple[int, RankSummary]]:
    out = []
    for loc in locations:
        assert loc.rank is not None
        hit = cache.load_summary(loc, cache_dir) if use_cache else None
        if hit is None:
            started = time.time_ns()
            try:
                read = reader_for(loc.kind, loc.path).summary(loc)  # type: ignore[misc]
            except ProfileError:
                continue  # loaded whole: its error is reported the way a load's is
            if read is None:
                continue
            hit = rank_summary_of(loc.rank, read.profile, str(loc.path), read.device_data)
            if use_cache:
                cache.store_summary(loc, hit, read.files, started, cache_dir)
        out.append((loc.rank, hit))
    return out


def _summaries_encoded(locations: list[ProfileLocation], use_cache: bool, cache_dir: Path | None) -> bytes:
    """Worker: a chunk of ranks' summaries as msgpack (decoded by a typed decoder, never unpickled)."""
    return msgspec.msgpack.encode(_summaries(locations, use_cache, cache_dir))


def rank_pool(workers: int) -> ProcessPoolExecutor:
    # The pool's constructor makes semaphores (which start the resource tracker) and submit()
    # starts the forkserver and the workers: all of them isolated and outside the workspace
    # (mapping.children); the workers get absolute paths only.
    with isolated_children():
        return ProcessPoolExecutor(max_workers=workers, mp_context=_pool_context())


def _load_one(
    location: ProfileLocation, use_cache: bool, cache_dir: Path | None
) -> tuple[bytearray | None, tuple[str, str, int | None] | None]:
    """Worker: one rank's Profile as codec bytes, or its ProfileError as plain values (exceptions
    with custom constructors do not survive pickling)."""
    try:
        profile = load_location(location, use_cache=use_cache, cache_dir=cache_dir)
    except ProfileError as exc:
        return None, (exc.path, exc.message, exc.line)
    except Exception as exc:  # noqa: BLE001 - a bug: re-raised in the parent, naming this rank's file
        raise RankCrashed(safe_io.file_of(exc) or str(location.path), f"{type(exc).__name__}: {exc}") from None
    try:
        return bytearray().join(codec.encode(profile)), None
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as exc:  # OverflowError: an int past int64
        return None, (str(location.path), f"cannot hand the loaded rank back: {exc}", None)


class RankCrashed(Exception):
    """An unexpected exception in a rank worker, carried to the parent with the file it was
    reading (the worker's thread-local record of it does not cross the process boundary), so
    the one-line report still names that rank's file."""

    def __init__(self, path: str, text: str) -> None:
        super().__init__(path, text)
        self.msprof_file = path  # what safe_io.file_of reads
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __reduce__(self):  # pickled by the pool: rebuild from both fields
        return (RankCrashed, (self.msprof_file, self.text))


def _pool_context() -> multiprocessing.context.BaseContext:
    # The language server runs threads; fork()ing a threaded process can deadlock a child, so
    # use forkserver where the platform has it (a clean server process forks the workers).
    # The server imports the readers once (load imports every one through the registry), so each
    # worker starts with pandas/numpy loaded.
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["msprof_lsp.mapping.profile.load"])
        return ctx
    return multiprocessing.get_context("spawn")


def _load_ranks(
    locations: list[ProfileLocation],
    *,
    use_cache: bool,
    cache_dir: Path | None,
    progress: Progress,
    workers: int | None = None,
) -> tuple[dict[int, Profile], list[tuple[ProfileLocation, ProfileError]]]:
    n = len(locations)
    workers = workers or max(1, min(os.cpu_count() or 1, n))
    profiles: dict[int, Profile] = {}
    failures: list[tuple[ProfileLocation, ProfileError]] = []
    progress(f"Loading {n} ranks ({workers} processes)", 0.0)
    with rank_pool(workers) as pool:
        with isolated_children():
            pending: dict[Future, ProfileLocation] = {
                pool.submit(_load_one, replace(loc, path=Path(loc.path).absolute()), use_cache,
                            None if cache_dir is None else cache_dir.absolute()): loc
                for loc in locations
            }
        done_count = 0
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                loc = pending.pop(fut)
                done_count += 1
                payload, error = fut.result()
                if payload is not None:
                    profiles[loc.rank] = codec.decode(payload)  # type: ignore[index]
                    progress(f"Rank {loc.rank} loaded ({done_count}/{n})", done_count / n)
                else:
                    assert error is not None
                    failures.append((loc, ProfileError(error[0], error[1], error[2])))
                    progress(f"Rank {loc.rank} failed ({done_count}/{n}): {error[1]}", done_count / n)
    failures.sort(key=lambda f: f[0].rank if f[0].rank is not None else -1)
    return profiles, failures


def load_ranks_sequential(
    locations: list[ProfileLocation], *, use_cache: bool = True, cache_dir: Path | None = None
) -> dict[int, Profile]:
    """The same loads one after another in this process (tests that count file system calls use it)."""
    return {
        loc.rank: load_location(loc, use_cache=use_cache, cache_dir=cache_dir)  # type: ignore[misc]
        for loc in locations
    }


# ---------------------------------------------------------------------------------------------
# Cluster summary


def summarize(
    profiles: dict[int, Profile], locations: dict[int, ProfileLocation], rank: int | None = None
) -> ClusterSummary:
    """The cluster summary of fully loaded ranks (see :func:`cluster_of`)."""
    return cluster_of({r: rank_summary_of(r, p, str(locations[r].path) if r in locations else p.meta.path)
                       for r, p in profiles.items()}, rank)


def cluster_of(summaries: dict[int, RankSummary], rank: int | None = None) -> ClusterSummary:
    """Per-rank figures in rank order; the slowest rank; the analysed one (``rank`` when given,
    else :func:`pick_rank`) and why."""
    ranks = [summaries[r] for r in sorted(summaries)]
    slowest = max(ranks, key=lambda s: (s.step_time_ns, -s.rank)).rank
    if rank is not None:
        return ClusterSummary(ranks, slowest, rank, f"rank {rank} was asked for")
    analysed, why = pick_rank(ranks)
    return ClusterSummary(ranks, slowest, analysed, why)


def pick_rank(ranks: list[RankSummary]) -> tuple[int, str]:
    """The rank to analyse and why: the slowest of the ranks that kept device data -- the kernel
    rules need it, and a rank trimmed to step_trace_time.csv and communication.json (the others'
    step times differ by a fraction of a percent in a synchronous job) would be analysed with
    none -- else the slowest rank."""
    slowest = max(ranks, key=lambda s: (s.step_time_ns, -s.rank))
    with_tasks = [r for r in ranks if r.device_data]
    if not with_tasks:
        return slowest.rank, "the slowest rank (no rank holds device tasks)"
    pick = max(with_tasks, key=lambda s: (s.step_time_ns, -s.rank))
    if pick.rank == slowest.rank:
        return pick.rank, "the slowest rank"
    without = ", ".join(str(r.rank) for r in ranks if not r.device_data)
    return pick.rank, f"the slowest rank with device tasks (none in rank{'s' if ',' in without else ''} {without})"


def rank_summary_of(r: int, p: Profile, where: str, device_data: bool | None = None) -> RankSummary:
    """One rank's cluster figures from its Profile (whole, or read from its summary files: then
    ``device_data`` says whether the rank kept its trace)."""
    try:
        return _rank_summary(r, p, where, device_data)
    except Exception as exc:
        # A bug, computed in this process from a rank the workers read: the one-line report
        # names that rank's profile, not whichever file this thread opened last.
        raise safe_io.mark(exc, where)


def _rank_summary(r: int, p: Profile, where: str, device_data: bool | None = None) -> RankSummary:
    step_ns = float(p.step_time_ns)
    comm_ns = comm_not_overlapped_per_step(p)
    breakdown = profile_breakdown(p)
    computing, free = breakdown.mean("computing_ns"), breakdown.mean("free_ns")
    grad = comm_time.split(p.comm_ops, frozenset({comm_time.CommRole.GRADIENT}))
    stage = comm_time.pipeline_stage(p.meta.parallel_groups)
    return RankSummary(
        rank=r,
        path=where,
        step_time_ns=step_ns,
        comm_not_overlapped_ns=comm_ns,
        comm_share=comm_ns / step_ns if step_ns > 0 else 0.0,
        computing_ns=-1.0 if computing is None else float(computing),
        free_ns=-1.0 if free is None else float(free),
        breakdown=breakdown,
        link_totals=link_transfers(p.comm_ops),
        links=comm_links(p, r),
        comm_wait_ns=-1.0 if grad is None else grad.wait_ns,
        device_data=len(p.kernels) > 0 if device_data is None else device_data,
        pipeline_stage=-1 if stage is None else stage,
    )


_TOTAL_KEY = "-total@"  # "allreduce-total@<group>": the op type's sum over its ops (top1/middle/... are ranks)


def comm_links(profile: Profile, rank: int | None = None) -> list[CommLink]:
    """The src -> dst links of the profile's communication_matrix.json (or DB CommAnalyzerMatrix):
    Transit Time and Size of every ``<type>-total@<group>`` entry, summed over steps, op types and
    groups. Each rank writes the links it sends on; with ``rank`` given, links from other ranks
    (none in real files) are left out, so merging the ranks' lists counts each link once."""
    sums: dict[tuple[int, int], list[float]] = {}
    steps = 0
    for step in profile.comm_matrix.values():
        if not isinstance(step, dict):
            continue
        steps += 1
        for kind in step.values():
            if not isinstance(kind, dict):
                continue
            for op, links in kind.items():
                if _TOTAL_KEY not in str(op) or not isinstance(links, dict):
                    continue
                for key, fig in links.items():
                    text_src, _, text_dst = str(key).partition("-")
                    src, dst = int64_of(text_src), int64_of(text_dst)  # "²-1" or 30 digits: no link
                    if src is None or dst is None or src < 0 or dst < 0 or not isinstance(fig, dict):
                        continue
                    if rank is not None and src != rank:
                        continue
                    acc = sums.setdefault((src, dst), [0.0, 0.0])
                    acc[0] += _number(fig.get("Transit Time(ms)"))
                    acc[1] += _number(fig.get("Transit Size(MB)"))
    return [CommLink(src=s, dst=d, transit_ms=t, size_mb=m, steps=steps) for (s, d), (t, m) in sorted(sums.items())]


def _number(value: object) -> float:
    v = float_of(value)  # 10**400 or "²" count as nothing, not an OverflowError in the summary
    return v if v is not None and v > 0 else 0.0


def comm_not_overlapped_per_step(profile: Profile) -> float:
    """Communication time per step that no computation overlapped, in ns.

    From step_trace_time / StepTraceTime when present (average over steps of the slowest device),
    else from the Overlap Analysis lane, else computed from the kernels: time covered by
    communication kernels and by no compute kernel, divided by the number of steps.
    """
    rows = [b for b in profile.step_breakdown if b.step_time_ns > 0]
    if rows:
        per_step: dict[int, int] = {}
        for b in rows:
            per_step[b.step] = max(per_step.get(b.step, 0), b.comm_not_overlapped_ns)
        return sum(per_step.values()) / len(per_step)
    steps = max(profile.num_steps, 1)
    ov = profile.overlap
    if len(ov):
        lane = ov["lane"].astype(str)
        total = int(ov.loc[lane == "Communication(Not Overlapped)", "dur_ns"].sum())
        return total / steps
    k = profile.kernels_in_steps()
    if not len(k):
        return 0.0
    is_comm = collective_mask(k)
    if not is_comm.any():
        return 0.0
    work = is_class(k, TaskClass.COMPUTE)
    start = k["start_ns"].to_numpy(dtype=np.int64)
    end = start + k["dur_ns"].to_numpy(dtype=np.int64)
    return exclusive_ns(start[is_comm], end[is_comm], start[work], end[work]) / steps


LINK_GROUPS = {"SDMA": "SDMA", "RDMA": "RDMA"}  # communication.json's SDMA entry already sums HCCS, PCIE, SIO


def link_transfers(ops: Sequence[CommOp]) -> dict[str, tuple[float, float]]:
    """(MB, ms) per link group over the ops: Transit Size / Transit Time of their bandwidth info.
    Groups that moved nothing are left out."""
    out: dict[str, list[float]] = {}
    for op in ops:
        for link, group in LINK_GROUPS.items():
            info = op.bandwidth.get(link)
            if not isinstance(info, dict):
                continue
            mb, ms = float_of(info.get("Transit Size(MB)", 0) or 0), float_of(info.get("Transit Time(ms)", 0) or 0)
            if mb is None or ms is None:  # NaN, 1e999, a 400-digit int: the link is not counted
                continue
            e = out.setdefault(group, [0.0, 0.0])
            e[0] += mb
            e[1] += ms
    return {g: (mb, ms) for g, (mb, ms) in out.items() if mb > 0 and ms > 0}
