"""Every rank's findings (``--ranks all``): the per-rank analysis run on each rank of a job, in the
local rank pool or on a Dask cluster (``--scheduler``), and the findings grouped across ranks.

The per-rank work is :func:`analyse_rank`, a function of one rank's folder, the source roots and
the settings: it loads that rank, maps it to the source and runs the rules (cluster rules need
the whole job and run once, on the analysed rank), and hands back a :class:`RankResult` as
msgpack bytes. No Profile crosses a process, and the parent decodes the bytes with a typed
decoder, never an unpickler. Identical findings (one rule at one place) of many ranks become one
:class:`RankGroup`: "NPU103 on 1,020 of 1,024 ranks, 3.1-3.4 ms/step; worst rank 713".
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import as_completed
from dataclasses import dataclass
from pathlib import Path

import msgspec

from msprof_lsp.hints.finding import Severity
from msprof_lsp.mapping.children import isolated_children
from msprof_lsp.mapping.errors import ProfileError
from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.profile.cluster import rank_pool
from msprof_lsp.mapping.profile.load import load_location
from msprof_lsp.mapping.profile.locations import ProfileLocation, Progress, no_progress
from msprof_lsp.mapping.profile.model import ProfileKind
from msprof_lsp.mapping.source.attribute import attribute

from .settings import Settings


class RankFinding(msgspec.Struct, frozen=True):
    """One finding of one rank, as plain data (what a worker hands back)."""

    code: str
    name: str
    severity: str
    message: str
    path: str | None  # None: a profile-level finding
    line: int | None
    time_per_step_us: float
    share: float


class RankResult(msgspec.Struct):
    rank: int
    findings: list[RankFinding] = []
    error: str = ""  # one line naming the file: why this rank could not be analysed


_RESULT = msgspec.msgpack.Decoder(RankResult)


def analyse_rank(kind: str, folder: str, rank: int, roots: Sequence[str], settings: Settings,
                 use_cache: bool, cache_dir: str | None) -> bytes:
    """Worker (a pool process or a Dask worker): one rank's findings as msgpack. ``folder`` is the
    rank's profile root, absolute, as the worker sees it; the rank's errors come back as text."""
    from .run import build_workspace, findings_for  # run imports this module

    location = ProfileLocation(ProfileKind(kind), Path(folder), rank)
    try:
        profile = load_location(location, use_cache=use_cache, cache_dir=None if cache_dir is None else Path(cache_dir))
        workspace = build_workspace([Path(r) for r in roots], settings)
        found = findings_for(profile, attribute(profile, workspace), workspace, settings, fixes=False)
    except ProfileError as exc:
        return msgspec.msgpack.encode(RankResult(rank, error=str(exc)))
    except Exception as exc:  # noqa: BLE001 - a bug: this rank is named with it, the others still count
        where = safe_io.file_of(exc) or folder
        return msgspec.msgpack.encode(RankResult(rank, error=f"{where}: {type(exc).__name__}: {exc}"))
    return msgspec.msgpack.encode(RankResult(rank, [
        RankFinding(f.code, f.name, f.severity.value, f.message, f.span.path if f.span else None,
                    f.span.line if f.span else None, f.time_per_step_us, f.share) for f in found]))


@dataclass(frozen=True, slots=True)
class RankGroup:
    """One rule at one place on several ranks: the ranks, the range of its time per step over
    them, and the worst rank (the most time; its message is the one shown)."""

    code: str
    name: str
    severity: Severity  # the highest over the ranks
    path: str | None
    line: int | None
    message: str
    ranks: tuple[int, ...]
    low_us: float
    high_us: float
    worst_rank: int


@dataclass(frozen=True, slots=True)
class AllRanks:
    """``--ranks all`` for one job: the groups (most ranks first), the ranks analysed, and the
    ranks that could not be (rank, one line)."""

    groups: tuple[RankGroup, ...]
    analysed: tuple[int, ...]
    failed: tuple[tuple[int, str], ...]
    engine: str  # where it ran: "process pool (2 processes)" or "dask tcp://host:8786"

    @property
    def total(self) -> int:
        return len(self.analysed) + len(self.failed)


def subject(message: str) -> str:
    """What a finding is about, as its message names it before the first ": " ("aten::item" of
    "aten::item: 27 syncs, ..."), digits dropped: a rule may report two things at one place."""
    head, sep, _rest = message.partition(": ")
    return re.sub(r"[\d.,]+", "#", head) if sep else ""


def group_findings(results: Iterable[RankResult]) -> list[RankGroup]:
    """Identical findings -- one code at one (path, line) about one :func:`subject` -- of all
    ranks as one group each."""
    by_key: dict[tuple[str, str | None, int | None, str], list[tuple[int, RankFinding]]] = {}
    for res in results:
        for f in res.findings:
            by_key.setdefault((f.code, f.path, f.line, subject(f.message)), []).append((res.rank, f))
    groups = []
    for (code, path, line, _subject), seen in by_key.items():
        times = [f.time_per_step_us for _r, f in seen]
        worst_rank, worst = max(seen, key=lambda rf: (rf[1].time_per_step_us, -rf[0]))
        groups.append(RankGroup(
            code=code, name=worst.name, severity=max((Severity(f.severity) for _r, f in seen), key=lambda s: s.rank),
            path=path, line=line, message=worst.message, ranks=tuple(sorted({r for r, _f in seen})),
            low_us=min(times), high_us=max(times), worst_rank=worst_rank))
    groups.sort(key=lambda g: (-len(g.ranks), -g.high_us, g.code, g.path or "", g.line or 0))
    return groups


def analyse_all(locations: Sequence[ProfileLocation], roots: Sequence[Path], settings: Settings, *,
                use_cache: bool, cache_dir: Path | None, progress: Progress = no_progress) -> AllRanks:
    """Run :func:`analyse_rank` on every rank of ``locations``: on the Dask cluster of
    ``settings.scheduler`` when set, else in the local rank pool."""
    calls = [(loc.kind.value, str(Path(loc.path).absolute()), loc.rank) for loc in locations if loc.rank is not None]
    common = ([str(Path(r).absolute()) for r in roots], settings, use_cache,
              None if cache_dir is None else str(cache_dir.absolute()))
    if settings.scheduler:
        engine, payloads = f"dask {settings.scheduler}", _on_dask(settings.scheduler, calls, common)
    else:
        workers = max(1, min(os.cpu_count() or 1, len(calls)))
        engine, payloads = f"process pool ({workers} processes)", _in_pool(workers, calls, common)
    results: list[RankResult] = []
    for payload in payloads:
        results.append(_RESULT.decode(payload))
        progress(f"Analysed {len(results)}/{len(calls)} ranks ({engine})", len(results) / max(len(calls), 1))
    results.sort(key=lambda r: r.rank)
    return AllRanks(groups=tuple(group_findings(r for r in results if not r.error)),
                    analysed=tuple(r.rank for r in results if not r.error),
                    failed=tuple((r.rank, r.error) for r in results if r.error), engine=engine)


Call = tuple[str, str, int]


def _in_pool(workers: int, calls: list[Call], common: tuple) -> Iterator[bytes]:
    with rank_pool(workers) as pool:
        with isolated_children():
            pending = [pool.submit(analyse_rank, *call, *common) for call in calls]
        for fut in as_completed(pending):
            yield fut.result()


DASK_TIMEOUT_S = 30
"""How long to wait for the Dask scheduler to answer before the run fails."""


def _on_dask(address: str, calls: list[Call], common: tuple) -> Iterator[bytes]:
    """The same calls on a Dask cluster: each worker reads its ranks from the paths given (the
    shared storage must be mounted at the same paths) and returns only msgpack bytes."""
    client_of = _dask_client()
    try:
        # What comes back is bytes, which Dask carries without pickle; refusing pickle here
        # keeps "the product never unpickles" true of what a worker sends.
        client = client_of(address, timeout=DASK_TIMEOUT_S, deserializers=["dask", "msgpack"])
    except (OSError, TimeoutError, ValueError) as exc:  # refused, no answer, not an address
        raise ProfileError(address, f"cannot reach the Dask scheduler: {exc}") from None
    with client:
        from distributed import as_completed as dask_completed

        futures = [client.submit(analyse_rank, *call, *common, pure=False) for call in calls]
        for fut in dask_completed(futures):
            try:
                payload = fut.result()
            except Exception as exc:  # noqa: BLE001 - a worker without the package, or one that died
                raise ProfileError(address, f"a Dask worker failed: {type(exc).__name__}: {exc}") from None
            yield payload


def _dask_client() -> Callable[..., object]:
    try:
        from distributed import Client
    except ImportError:
        raise ProfileError("--scheduler", "needs Dask: pip install 'msprof-lsp[dask]'") from None
    return Client
