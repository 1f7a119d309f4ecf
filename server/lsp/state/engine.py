"""The analysis state of an editor session, driven from ONE worker thread.

Loading, re-anchoring after edits, rule runs and the baseline all mutate the source workspace and
the attribution, so they are serialised on a single-thread executor (loading.py submits the work);
the event loop only ever reads the immutable :class:`Snapshot` each call returns.

An :class:`Engine` is one training job (its profile, source workspace, attribution). A
:class:`Session` holds every job of the workspace that an open file belongs to: loaded lazily
(the first time one of its files is opened) and kept; each file's diagnostics, heat and text come
from the job that owns it (targets.owner), merged into one snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from msprof_lsp.hints.line_counters import OpCounters, line_counters
from msprof_lsp.mapping.source.attribute import attribute, reanchor
from msprof_lsp.mapping.profile.cluster import LoadResult
from msprof_lsp.mapping.source.critical_path import critical_path, step_paths
from msprof_lsp.mapping.errors import ProfileError
from msprof_lsp.mapping.source.heat import Attribution
from msprof_lsp.mapping.profile.locations import Progress, no_progress
from msprof_lsp.mapping.source.workspace import SourceWorkspace
from msprof_lsp.hints.verify import FindingChange, FindingState

from ...analysis import run
from ...analysis.baseline import Baseline, against_baseline, load_baseline
from ...analysis.settings import Settings
from ...analysis.check_run import job_report
from ...analysis.views.model import ReportModel, report_model
from ...analysis.views.result import CheckRun
from .snapshot import ProfileInfo, Snapshot, merge
from .targets import JobChoice, choose_job, discovered, owner


@dataclass(slots=True)
class LoadRequest:
    folders: list[Path]  # workspace folders (discovery roots, source roots for an explicit profile)
    settings: Settings
    explicit: Path | None = None  # selectProfile / the profile setting, resolved
    rank: int | None = None  # selectProfile's rank (wins over settings.rank)
    open_texts: dict[str, str] = field(default_factory=dict)  # buffers to analyse instead of disk
    open_paths: list[str] = field(default_factory=list)  # newest opened last (picks the job)
    baseline: Path | None = None
    use_cache: bool = True
    chosen: JobChoice | None = None  # the job to load (Session), instead of discovering one


class Engine:
    """Owns the loaded profile, the source workspace and the attribution of one session."""

    def __init__(self) -> None:
        self.generation = 0
        self.settings = Settings()
        self.loaded: LoadResult | None = None
        self.workspace: SourceWorkspace | None = None
        self.attribution: Attribution | None = None
        self.baseline: Baseline | None = None
        self.jobs: list[JobChoice] = []
        self.job: JobChoice | None = None
        self._texts: dict[str, str] = {}
        # the counter tables of one attribution (and threshold), kept until either changes

    # -- whole loads -----------------------------------------------------------------------------

    def discover(self, folders: Sequence[Path]) -> list[JobChoice]:
        """Every job under ``folders``; NoProfileFound when there is none."""
        self.jobs = discovered(folders)
        return self.jobs

    def load(self, req: LoadRequest, progress: Progress = no_progress) -> Snapshot:
        """Load the requested (or chosen) profile and analyse it; raises ProfileError."""
        settings = req.settings
        progress("Looking for profiles", None)
        load_settings = replace(settings, rank=req.rank) if req.rank is not None else settings
        if req.explicit is not None:
            job = None
            roots = list(req.folders) or [req.explicit if req.explicit.is_dir() else req.explicit.parent]
            loaded = run.load([req.explicit], load_settings, use_cache=req.use_cache, progress=progress)
        else:
            job = req.chosen or choose_job(self.discover(req.folders), req.open_paths)
            roots = [job.source_root]
            loaded = run.load_found_job(job.job, load_settings, use_cache=req.use_cache, progress=progress)
        workspace = run.build_workspace(roots, settings)
        for path, text in req.open_texts.items():
            workspace.set_text(path, text)
        progress("Mapping device time to source lines", None)
        attribution = attribute(loaded.profile, workspace)
        progress("Finding the critical path of the steps", None)
        step_paths(loaded.profile)  # once per load, kept with the profile: edits only re-attribute it
        # commit only once everything succeeded: a failed reload keeps the previous analysis
        self.loaded, self.workspace, self.attribution, self.job = loaded, workspace, attribution, job
        self.settings = settings
        self._texts = {}
        self.baseline = None
        if req.baseline is not None:
            progress("Loading the baseline profile", None)
            self._load_baseline(req.baseline, load_settings, req.use_cache)
        progress("Running rules", None)
        snap = self.snapshot()
        if req.use_cache:  # what the load and the first rule run derived from the profile alone
            run.keep_derived(loaded, load_settings)
        return snap

    def _load_baseline(self, path: Path, settings: Settings, use_cache: bool) -> None:
        assert self.workspace is not None
        self.baseline = load_baseline(path, self.workspace, settings, use_cache=use_cache)

    def set_baseline(self, path: Path | None, use_cache: bool = True) -> Snapshot | None:
        """Compare against another profile (None: stop comparing). Raises ProfileError."""
        if self.attribution is None:
            return None
        if path is None:
            self.baseline = None
        else:
            self._load_baseline(path, self.settings, use_cache)
        return self.snapshot()

    # -- per edit ----------------------------------------------------------------------------

    def update(self, texts: dict[str, str | None]) -> Snapshot | None:
        """Buffers changed (text) or closed (None): re-anchor those files, re-run the rules.

        Returns None (keep the current snapshot) while an edited file does not parse: the
        attribution still points into its last good text, which the current snapshot holds.
        """
        ws = self.workspace
        if ws is None or self.attribution is None:
            return None
        for path, text in texts.items():
            if text is None:
                ws.drop_text(path)
            else:
                ws.set_text(path, text)
        broken = False
        for path in texts:
            ws.index(path)
            if ws.error(path) is not None:
                broken = True
                continue
            self.attribution = reanchor(self.attribution, path)
            if self.baseline is not None:
                self.baseline.reanchor(path)
            self._texts.pop(ws.key(path), None)
        if broken:
            return None
        return self.snapshot()

    def reconfigure(self, settings: Settings) -> Snapshot | None:
        """Rule settings changed (select, ignore, severity, thresholds): re-run the rules only."""
        self.settings = settings
        if self.attribution is None:
            return None
        return self.snapshot()

    # -- the read-only view -------------------------------------------------------------------

    def _text(self, path: str) -> str | None:
        hit = self._texts.get(path)
        if hit is None and self.workspace is not None:
            hit = self.workspace.text(path)
            if hit is not None:
                self._texts[path] = hit
        return hit

    def report_model(self, tool_version: str) -> ReportModel | None:
        """The report model of the loaded job (the "Show profile" view), fixes expanded; paths
        relative to the first workspace root, which ``base`` names. None when nothing is loaded."""
        if self.loaded is None or self.attribution is None or self.workspace is None:
            return None
        profile = self.loaded.profile
        findings = run.findings_for(profile, self.attribution, self.workspace, self.settings, fixes=True,
                                          cluster=self.loaded.cluster)
        base = self.workspace.roots[0] if self.workspace.roots else Path.cwd()
        job = job_report(run.Analysis(self.loaded, self.workspace, self.attribution, findings))
        return report_model(CheckRun(jobs=[job], cwd=base, tool_version=tool_version), base=str(base))

    def _line_counters(self) -> dict[str, dict[int, list[OpCounters]]]:
        assert self.loaded is not None and self.attribution is not None
        return line_counters(self.loaded.profile, self.attribution, self.settings.rule_config().thresholds)

    def snapshot(self) -> Snapshot:
        assert self.loaded is not None and self.attribution is not None and self.workspace is not None
        self.generation += 1
        profile = self.loaded.profile
        heat = self.attribution.heat
        # fix offers stay unexpanded: code actions expand them (fixes_on_demand), typing never parses
        findings = run.findings_for(profile, self.attribution, self.workspace, self.settings, fixes=False,
                                          cluster=self.loaded.cluster)
        snap = Snapshot(generation=self.generation, settings=self.settings, num_steps=max(heat.num_steps, 1))
        wanted: set[str] = set()
        states: dict[int, FindingChange] = {}
        against = None
        if self.baseline is not None:
            # the one baseline flow --check uses (both sides' cluster rules, the analysed texts)
            against = against_baseline(self.baseline, self.loaded, self.attribution, findings, self.workspace,
                                       self.settings)
            snap.finding_changes = against.changes
            states = {id(c.after): c for c in snap.finding_changes if c.after is not None}
            for c in snap.finding_changes:
                if c.state is FindingState.RESOLVED and c.finding.span is not None:
                    snap.resolved.setdefault(c.finding.span.path, []).append(c)
                    wanted.add(c.finding.span.path)
        for f in findings:
            if f.span is None:
                snap.profile_findings.append(f)
                continue
            snap.findings.setdefault(f.span.path, []).append(f)
            if states:
                snap.states.setdefault(f.span.path, []).append(states[id(f)])
            wanted.add(f.span.path)
            wanted.update(r.span.path for r in f.related)
            wanted.update(o.path for o in f.offers)
            wanted.update(e.path for fix in f.fixes for e in fix.edits if e.path)
        for lh in heat.lines:
            snap.lines.setdefault(lh.path, []).append(lh)
        snap.counters = self._line_counters()
        cp = critical_path(profile, self.attribution)  # the paths are the load's; lines follow the edits
        for lp in cp.lines:
            snap.path_lines.setdefault(lp.path, {})[lp.line] = lp
        for fh in heat.functions:
            snap.functions.setdefault(fh.path, []).append(fh)
        for sh in heat.spans:
            snap.spans.setdefault(sh.site.span.path, []).append(sh)
        snap.hotspots = list(heat.spans)
        wanted.update(snap.lines)
        wanted.update(snap.functions)
        if against is not None:
            snap.comparison = against.comparison
            for c in snap.comparison.lines:
                snap.changes.setdefault(c.path, {})[c.line] = c
                wanted.add(c.path)
        for path in wanted:
            text = self._text(path)
            if text is not None:
                snap.texts[path] = text
        meta = profile.meta
        snap.info = ProfileInfo(
            kind=meta.kind.value,
            path=str(meta.path),
            rank=meta.rank,
            ranks=tuple(sorted({loc.rank for loc in self.loaded.locations if loc.rank is not None})),
            steps=heat.num_steps,
            step_time_us=heat.step_time_ns / 1000,
            mapped_share=heat.mapped_share,
            has_call_stacks=profile.has_call_stacks,
            complete=meta.complete,
            issues=tuple(str(i) for i in profile.issues),
            unmapped_files=tuple(heat.unmapped_files),
            notes=tuple(heat.notes),
            critical_path_unavailable=cp.unavailable,
        )
        return snap


class Session:
    """Every held job of the editor session; the primary one (the newest opened file's) names the
    status. Same calls as :class:`Engine`, each returning the merged snapshot."""

    def __init__(self) -> None:
        self.generation = 0
        self.jobs: list[JobChoice] = []  # every job discovered in the workspace
        self.engines: dict[Path, Engine] = {}  # held jobs by folder (one, keyed by path, when explicit)
        self.snaps: dict[Path, Snapshot] = {}
        self.job: JobChoice | None = None  # the primary job (None: an explicit profile)
        self._primary: Path | None = None
        self._fresh: list[Snapshot] = []
        self.problems: list[str] = []  # jobs that failed to load while others did
        self._explicit = False  # an explicit profile: no jobs

    @property
    def attribution(self) -> Attribution | None:
        engine = self.primary()
        return engine.attribution if engine is not None else None

    def held(self) -> list[JobChoice]:
        return [j for j in self.jobs if j.folder in self.engines]

    def load(self, req: LoadRequest, progress: Progress = no_progress) -> Snapshot:
        """(Re)load: the explicit profile alone, or the jobs that own an open file (at least the
        chosen one) plus every job held before. Raises ProfileError; a failed load keeps the
        previous analysis."""
        if req.explicit is not None:
            engine = Engine()
            snap = engine.load(req, progress)
            self.engines, self.snaps = {req.explicit: engine}, {req.explicit: snap}
            self.job, self._primary, self.jobs, self._fresh = None, req.explicit, [], [snap]
            self._explicit = True
            return self.merged()
        jobs = discovered(req.folders)
        primary = choose_job(jobs, req.open_paths)
        wanted = [primary]
        for path in req.open_paths:
            job = owner(path, jobs)
            if job is not None and job not in wanted:
                wanted.append(job)
        wanted += [j for j in jobs if j.folder in self.engines and j not in wanted]
        engines: dict[Path, Engine] = {}
        snaps: dict[Path, Snapshot] = {}
        problems: list[str] = []
        failure: ProfileError | None = None
        for job in wanted:
            engine = Engine()
            try:
                snaps[job.folder] = engine.load(replace(req, explicit=None, chosen=job), progress)
            except ProfileError as exc:
                # a job with a broken profile: its files go without, the other jobs are served
                failure = failure or exc
                problems.append(f"cannot read the profile in {job.folder}: {exc}")
                continue
            engines[job.folder] = engine
        self.jobs, self._explicit = jobs, False  # a later open can still load another job
        if not engines:
            assert failure is not None
            raise failure  # nothing loaded: the previous analysis stays
        if primary.folder not in engines:
            primary = next(j for j in wanted if j.folder in engines)
        self.engines, self.snaps, self.problems = engines, snaps, problems
        self.job, self._primary, self._fresh = primary, primary.folder, list(snaps.values())
        return self.merged()

    def ensure(self, path: str, req: LoadRequest, progress: Progress = no_progress) -> Snapshot | None:
        """The file's job is held (loaded now if it was not) and becomes the primary one; None
        when nothing changed. Raises ProfileError."""
        job = owner(path, self.jobs)
        if job is None or self._explicit:
            return None
        if job.folder not in self.engines:
            engine = Engine()
            snap = self.snaps[job.folder] = engine.load(replace(req, explicit=None, chosen=job), progress)
            self.engines[job.folder] = engine
            self._fresh.append(snap)
        elif job == self.job:
            return None
        self.job, self._primary = job, job.folder
        return self.merged()

    def take_fresh(self) -> list[ProfileInfo]:
        """The profiles loaded since the last call (what the log announces)."""
        fresh, self._fresh = self._fresh, []
        return [s.info for s in fresh if s.info is not None]

    def _each(self, call: Callable[[Engine], Snapshot | None]) -> Snapshot | None:
        changed = False
        for folder, engine in self.engines.items():
            snap = call(engine)
            if snap is not None:
                self.snaps[folder] = snap
                changed = True
        return self.merged() if changed else None

    def update(self, texts: dict[str, str | None]) -> Snapshot | None:
        def one(engine: Engine) -> Snapshot | None:
            mine = {p: t for p, t in texts.items() if engine.job is None or engine.job.contains(p)}
            return engine.update(mine) if mine else None

        return self._each(one)

    def reconfigure(self, settings: Settings) -> Snapshot | None:
        return self._each(lambda engine: engine.reconfigure(settings))

    def primary(self) -> Engine | None:
        """The primary job's engine (None: nothing loaded)."""
        return self.engines.get(self._primary) if self._primary is not None else None

    def set_baseline(self, path: Path | None, use_cache: bool = True) -> Snapshot | None:
        """The baseline compares against the primary job."""
        engine = self.primary()
        if engine is None:
            return None
        snap = engine.set_baseline(path, use_cache)
        if snap is None:
            return None
        self.snaps[self._primary] = snap  # type: ignore[index]
        return self.merged()

    def merged(self) -> Snapshot:
        self.generation += 1
        assert self._primary is not None
        by_folder = {j.folder: j for j in self.jobs}
        order = [self._primary] + [f for f in self.snaps if f != self._primary]
        held = self.held()
        return merge(self.generation, [(by_folder.get(f), self.snaps[f]) for f in order], lambda p: owner(p, held))
