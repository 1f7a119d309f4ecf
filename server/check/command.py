"""``msprof-lsp --check``: analyse headless, render a report, return the exit status.

Exit status: 0 nothing at or above --fail-on; 1 findings at or above it (or a step-time regression
beyond --fail-on-regression); 2 the run itself failed — one line on stderr, never a traceback.
"""

from __future__ import annotations

import gc
import io
import json
import os
import sys
from pathlib import Path
from typing import TextIO

from msprof_lsp.hints.finding import Severity
from msprof_lsp.hints.fixes.profiling import HOW_TO_RECORD
from msprof_lsp.mapping.errors import NoProfileFound, ProfileError
from msprof_lsp.mapping.profile.jobs import Job
from msprof_lsp.mapping.profile.locations import Progress

from ..analysis.check_run import CheckFailed, RunHooks, RunRequest, check_run
from ..analysis.run import UnreadableJob
from ..cli import CheckArgs, UsageError, check_codes, version
from . import fixing
from .progress import ProgressLine
from .report import github, html, sarif, text
from ..analysis.views.result import CheckRun
from ..analysis.views.rows import Report, report
from ..escape import json_text, visible
from ..analysis.settings import Layer, Settings, find_pyproject, resolve


def settings_for(path: Path, args: CheckArgs, warn: TextIO) -> Settings:
    """The core's resolver: defaults -> nearest pyproject.toml [tool.msprof-lsp] at or above
    ``path`` (never a write location; the paths it names to read lie inside the checked path or
    the pyproject's folder) -> command-line flags."""
    flags: dict[str, object] = {}
    if args.select is not None:
        flags["select"] = args.select
    if args.ignore is not None:
        flags["ignore"] = args.ignore
    if args.rank is not None:
        flags["rank"] = args.rank
    if args.ranks is not None:
        flags["ranks"] = args.ranks
    if args.scheduler is not None:
        flags["scheduler"] = args.scheduler
    if args.path_map:
        flags["pathMappings"] = [f"{r}={l}" for r, l in args.path_map]
    if args.cache_dir is not None:
        flags["cacheDir"] = args.cache_dir
    settings, warnings = resolve(path, workspace_roots=None, layers=[Layer("command line", flags)], base_dir=Path.cwd())
    for w in warnings:
        print(f"msprof-lsp: warning: {visible(w)}", file=warn)
    pyproject = find_pyproject(path.resolve())
    for key, flag in (("select", args.select), ("ignore", args.ignore)):
        if flag is None:  # the flag's own codes were checked with the arguments
            check_codes(getattr(settings, key), f"{pyproject} [tool.msprof-lsp] {key}")
    return settings


def _say_jobs(jobs: list[Job], base: Path, warn: TextIO | None) -> None:
    """One line per job when a folder holds several: each is analysed (and reported) on its own."""
    if len(jobs) < 2 or warn is None:
        return
    for i, job in enumerate(jobs, 1):
        print(visible(f"msprof-lsp: job {i} of {len(jobs)} under {base}: {job.describe(base)}"), file=warn)


def request_of(args: CheckArgs, cwd: Path | None = None) -> RunRequest:
    """The core's run request of the command line (report paths relative to ``cwd``, default the
    current directory)."""
    return RunRequest(cwd=cwd or Path.cwd(), tool_version=version(), paths=tuple(Path(p) for p in args.paths),
                      profile=Path(args.profile) if args.profile else None,
                      baseline=Path(args.baseline) if args.baseline else None, use_cache=not args.no_cache,
                      critical_path=args.format == "json")  # only the JSON document prints it


def collect(args: CheckArgs, progress: Progress, warn: TextIO) -> CheckRun:
    """``--check``'s run: the core's ``check_run`` with the command line's settings, the jobs
    said on ``warn`` (unless --quiet) and each unreadable job's one line."""
    say = None if args.quiet else warn

    def say_unreadable(bad: UnreadableJob) -> None:
        # the same one line (naming the file) a fatal error gets; the exit status is 2 as for it
        print(visible(f"msprof-lsp: error: {bad.error}"), file=warn)

    hooks = RunHooks(progress=progress, on_jobs=lambda found, base: _say_jobs(found, base, say),
                     on_unreadable=say_unreadable)
    return check_run(request_of(args), lambda path: settings_for(path, args, warn), hooks)


def exit_status(run: CheckRun, args: CheckArgs, view: Report | None = None) -> int:
    """``view``: the run's ``Report`` view model as the report printed it (built here when the
    regression check needs it and nothing was printed from it)."""
    if run.unreadable:  # an input could not be read (docs/cli.md "Exit status"); the rest is reported
        return 2
    if args.fail_on != "never":
        floor = Severity(args.fail_on).rank
        if any(f.severity.rank >= floor for f in run.findings):
            return 1
    if args.fail_on_regression is not None:  # on the baseline view the report prints, never the raw comparison
        pct = args.fail_on_regression
        view = view if view is not None else report(run)
        if any(p.baseline is not None and p.baseline.regressed_beyond(pct) for p in view.profiles):
            return 1
    return 0


def render(run: CheckRun, view: Report, args: CheckArgs, out: TextIO) -> str:
    """The report of ``run`` in ``args.format``, every format from ``view`` (``report(run)``)."""
    # JSON and SARIF keep names as data (json_text only spells the controls as \u escapes)
    if args.format == "json":
        return json_text(json.dumps(view.as_dict(), indent=2, ensure_ascii=False)) + "\n"
    if args.format == "sarif":
        return json_text(json.dumps(sarif.render_document(view), indent=2, ensure_ascii=False)) + "\n"
    if args.format == "github":
        return github.render_report(view)
    if args.format == "html":
        return html.render(run, view)
    if args.format == "concise":
        return text.render_concise_report(view)
    use_color = args.color == "always" or (
        args.color == "auto" and args.output is None and out.isatty() and "NO_COLOR" not in os.environ
    )
    return text.render_report(view, color=use_color)


_imports_frozen = False


def _freeze_imports() -> None:
    """Once per process, move what exists before the first run (the imports' modules, classes and
    functions: ~80,000 objects that live as long as the process) out of the cyclic collector's
    scans (``gc.freeze``, what the NPU230 fix does before a training loop): a full collection
    during a run walked them all, 0.04-0.06 s of a 0.8 s warm run on a 100 MiB trace."""
    global _imports_frozen
    if not _imports_frozen:
        gc.freeze()
        _imports_frozen = True


def run_check(args: CheckArgs, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    _freeze_imports()
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    bar = ProgressLine(stderr) if (not args.quiet and stderr.isatty()) else None
    progress = bar if bar is not None else (lambda message, fraction: None)
    try:
        run = collect(args, progress, stderr)
        if args.diff:
            return _diff(run, args, stdout, stderr)
        if args.fix and _fix(run, args, stderr):
            run = collect(args, progress, io.StringIO())  # the fixed files' report and status; the job lines were said
        view = report(run)
        printed = render(run, view, args, stdout)
    except (ProfileError, CheckFailed, UsageError) as exc:
        if bar:
            bar.clear()
        hint = f"; {HOW_TO_RECORD}" if isinstance(exc, NoProfileFound) else ""
        print(f"msprof-lsp: error: {visible(exc)}{hint}", file=stderr)  # names a file: may hold controls
        return 2
    finally:
        if bar:
            bar.clear()
    if args.output:
        try:
            Path(args.output).write_text(printed, encoding="utf-8")
        except OSError as exc:
            print(visible(f"msprof-lsp: error: {args.output}: cannot write: {exc.strerror}"), file=stderr)
            return 2
    elif not (args.quiet and not run.findings and args.format in QUIET_WHEN_CLEAN):
        stdout.write(printed)
        stdout.flush()
    return exit_status(run, args, view)  # the rows just printed decide, not a second build of them


QUIET_WHEN_CLEAN = ("text", "concise", "github")
"""Formats for people and annotations: with -q a run without findings prints nothing (ruff's
-q); a document format (json, sarif, html) is always written, its readers need one."""


def _fix_roots(args: CheckArgs) -> list[Path]:
    """Where fixes may be written: the checked PATHs (the current directory by default)."""
    return [Path(p) for p in args.paths] or [Path.cwd()]


def _diff(run: CheckRun, args: CheckArgs, stdout: TextIO, stderr: TextIO) -> int:
    """``--diff``: the fixes ``--fix`` would write, as one unified diff on stdout; nothing written,
    so every finding remains for the exit status."""
    plan = fixing.plan(run, _fix_roots(args), args.unsafe_fixes)
    stdout.write(fixing.diff(plan, run.cwd))
    stdout.flush()
    _say(fixing.summary(plan, wrote=False), args, stderr)
    return exit_status(run, args)


def _fix(run: CheckRun, args: CheckArgs, stderr: TextIO) -> bool:
    """``--fix``: write the fixes; True when a file changed."""
    plan = fixing.plan(run, _fix_roots(args), args.unsafe_fixes)
    written = fixing.write(plan)
    _say(fixing.summary(plan, wrote=True), args, stderr)
    return bool(written)


def _say(lines: list[str], args: CheckArgs, stderr: TextIO) -> None:
    if not args.quiet:
        for line in lines:
            print(visible(f"msprof-lsp: {line}"), file=stderr)
