"""The analysis state of an editor session, driven from ONE worker thread.

Loading, re-anchoring after edits, rule runs and the baseline all mutate the source workspace and
the attribution, so they are serialised on a single-thread executor (loading.py submits the jobs);
the event loop only ever reads the immutable :class:`Snapshot` each job returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from msprof_lsp.mapping.attribute import attribute, reanchor
from msprof_lsp.mapping.cluster import LoadResult
from msprof_lsp.mapping.compare import compare
from msprof_lsp.mapping.discover import WHAT_WE_LOOK_FOR
from msprof_lsp.mapping.errors import NoProfileFound
from msprof_lsp.mapping.heat import Attribution
from msprof_lsp.mapping.locations import Progress, no_progress
from msprof_lsp.mapping.workspace import SourceWorkspace

from .. import pipeline
from ..settings import Settings
from .snapshot import ProfileInfo, Snapshot
from .targets import JobChoice, choose_job, find_jobs


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


@dataclass(slots=True)
class _Baseline:
    path: str
    loaded: LoadResult
    attribution: Attribution


class Engine:
    """Owns the loaded profile, the source workspace and the attribution of one session."""

    def __init__(self) -> None:
        self.generation = 0
        self.settings = Settings()
        self.loaded: LoadResult | None = None
        self.workspace: SourceWorkspace | None = None
        self.attribution: Attribution | None = None
        self.baseline: _Baseline | None = None
        self.jobs: list[JobChoice] = []
        self.job: JobChoice | None = None
        self._texts: dict[str, str] = {}

    # -- whole loads -----------------------------------------------------------------------------

    def discover(self, folders: Sequence[Path]) -> list[JobChoice]:
        self.jobs = find_jobs(folders)
        return self.jobs

    def load(self, req: LoadRequest, progress: Progress = no_progress) -> Snapshot:
        """Load the requested (or chosen) profile and analyse it; raises ProfileError."""
        settings = req.settings
        progress("Looking for profiles", None)
        if req.explicit is not None:
            job = None
            paths = [req.explicit]
            roots = list(req.folders) or [req.explicit if req.explicit.is_dir() else req.explicit.parent]
        else:
            jobs = self.discover(req.folders)
            job = choose_job(jobs, req.open_paths)
            if job is None:
                where = ", ".join(str(f) for f in req.folders) or "the workspace"
                raise NoProfileFound(where, f"no profile found (looked for {WHAT_WE_LOOK_FOR})")
            paths = [job.folder]
            roots = [job.source_root]
        load_settings = replace(settings, rank=req.rank) if req.rank is not None else settings
        loaded = pipeline.load(paths, load_settings, use_cache=req.use_cache, progress=progress)
        workspace = pipeline.build_workspace(roots, settings)
        for path, text in req.open_texts.items():
            workspace.set_text(path, text)
        progress("Mapping device time to source lines", None)
        attribution = attribute(loaded.profile, workspace)
        # commit only once everything succeeded: a failed reload keeps the previous analysis
        self.loaded, self.workspace, self.attribution, self.job = loaded, workspace, attribution, job
        self.settings = settings
        self._texts = {}
        self.baseline = None
        if req.baseline is not None:
            progress("Loading the baseline profile", None)
            self._load_baseline(req.baseline, load_settings, req.use_cache)
        progress("Running rules", None)
        return self.snapshot()

    def _load_baseline(self, path: Path, settings: Settings, use_cache: bool) -> None:
        assert self.workspace is not None
        loaded = pipeline.load([path], settings, use_cache=use_cache)
        self.baseline = _Baseline(str(path), loaded, attribute(loaded.profile, self.workspace))

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
                self.baseline.attribution = reanchor(self.baseline.attribution, path)
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

    def snapshot(self) -> Snapshot:
        assert self.loaded is not None and self.attribution is not None and self.workspace is not None
        self.generation += 1
        profile = self.loaded.profile
        heat = self.attribution.heat
        findings = pipeline.findings_for(profile, self.attribution, self.workspace, self.settings)
        snap = Snapshot(generation=self.generation, settings=self.settings, num_steps=max(heat.num_steps, 1))
        wanted: set[str] = set()
        for f in findings:
            if f.span is None:
                snap.profile_findings.append(f)
                continue
            snap.findings.setdefault(f.span.path, []).append(f)
            wanted.add(f.span.path)
            wanted.update(r.span.path for r in f.related)
            wanted.update(e.path for fix in f.fixes for e in fix.edits if e.path)
        for lh in heat.lines:
            snap.lines.setdefault(lh.path, []).append(lh)
        for fh in heat.functions:
            snap.functions.setdefault(fh.path, []).append(fh)
        for sh in heat.spans:
            snap.spans.setdefault(sh.site.span.path, []).append(sh)
        snap.hotspots = list(heat.spans)
        wanted.update(snap.lines)
        wanted.update(snap.functions)
        if self.baseline is not None:
            b = self.baseline
            snap.comparison = compare(b.path, b.loaded.profile, b.attribution.heat, profile, heat)
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
        )
        return snap
