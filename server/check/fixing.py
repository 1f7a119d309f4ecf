"""Headless fixes with ruff's conventions: ``--fix`` writes the safe fixes, ``--unsafe-fixes``
adds the review ones, ``--diff`` prints what ``--fix`` would write and writes nothing.

The fixes are the findings' own, expanded once by the check (``hints.fixes.offers``) and applied
per file by the one applier the editor's tests use (``hints.fixes.apply_fixes``): alternatives of
one construct give their first, an edit that overlaps one already taken is skipped and counted.
A file is written only when it lies, symlinks resolved, inside a checked PATH, is a regular file,
still holds the text the fixes were computed on, and decodes strictly (undecodable bytes are never
rewritten); it keeps its encoding, its byte-order mark and its line endings.
"""

from __future__ import annotations

import dataclasses
import io
import contextlib
import os
import tempfile
import stat
import tokenize
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from msprof_lsp.hints.consolidate import saving_order
from msprof_lsp.hints.finding import Finding, Fix
from msprof_lsp.hints.fixes import apply_fixes
from msprof_lsp.mapping.errors import ProfileError
from msprof_lsp.mapping.profile import safe_io

from ..analysis.diff import unified_diff
from ..analysis.views.document import rel_path
from ..analysis.views.result import CheckRun


@dataclass(frozen=True, slots=True)
class FileFix:
    """One file's fixes applied to its text (nothing written yet)."""

    path: str  # absolute, symlinks resolved
    old: str
    new: str
    encoding: str
    fixes: int  # fixes applied to this file


@dataclass(slots=True)
class FixPlan:
    files: list[FileFix] = field(default_factory=list)
    fixed: list[Finding] = field(default_factory=list)  # findings with a fix applied in every file it edits
    skipped: int = 0  # fixes left out: they overlap a fix already taken in their file
    review_left: int = 0  # review fixes left out without --unsafe-fixes
    refused: list[str] = field(default_factory=list)  # "path: why", a file not written


@dataclass(frozen=True, slots=True)
class _Chosen:
    finding: Finding
    fix: Fix
    text_of: Callable[[str], str | None]


def choose(run: CheckRun, unsafe: bool) -> tuple[list[_Chosen], int]:
    """The fixes to apply, biggest saving first (it wins an overlap), one per group of
    alternatives; and how many review fixes ``unsafe`` False left out. A finding whose fix is
    already in the source offers only a new recording: that is no fix to write."""
    pairs = [(f, job.source_text) for job in run.jobs for f in job.findings if job.source_text is not None]
    chosen: list[_Chosen] = []
    groups: set[str] = set()
    review_left = 0
    for i in saving_order([f for f, _ in pairs]):
        finding, text_of = pairs[i]
        if "fixed_in_source" in finding.evidence:
            continue
        for fix in finding.fixes:
            if not fix.edits or (fix.group and fix.group in groups):
                continue
            if not fix.safe and not unsafe:
                review_left += 1
                continue
            if fix.group:
                groups.add(fix.group)
            chosen.append(_Chosen(finding, fix, text_of))
    return chosen, review_left


def plan(run: CheckRun, roots: Iterable[Path], unsafe: bool) -> FixPlan:
    """Apply the chosen fixes per file, in memory. A fix that edits several files is kept only
    where every part of it applies (it is dropped and the files are planned again otherwise)."""
    chosen, review_left = choose(run, unsafe)
    real_roots = [Path(r).resolve() for r in roots]
    dropped: set[int] = set()
    while True:
        out = FixPlan(review_left=review_left)
        failed = _plan_files([c for c in chosen if id(c.fix) not in dropped], real_roots, out)
        if not failed:
            return out
        dropped |= failed


def _plan_files(chosen: list[_Chosen], roots: list[Path], out: FixPlan) -> set[int]:
    """Fill ``out``; return the ids of multi-file fixes that did not apply in one of their files."""
    by_file: dict[str, list[tuple[_Chosen, Fix]]] = {}
    for c in chosen:
        for path in dict.fromkeys(e.path for e in c.fix.edits):
            part = dataclasses.replace(c.fix, edits=tuple(e for e in c.fix.edits if e.path == path))
            by_file.setdefault(path, []).append((c, part))
    done: dict[int, bool] = {}  # id(fix) -> applied in every file so far
    for path, parts in sorted(by_file.items()):
        text_of = parts[0][0].text_of
        read = _readable(path, roots, text_of(path))
        if isinstance(read, str):
            out.refused.append(f"{path}: {read}")
            for c, _ in parts:
                done[id(c.fix)] = False
            continue
        real, old, encoding = read
        result = apply_fixes(old, [part for _, part in parts], path)
        applied = {id(p) for p in result.applied}
        out.skipped += len(result.declined)
        for c, part in parts:
            done[id(c.fix)] = done.get(id(c.fix), True) and id(part) in applied
        if result.source != old:
            distinct = {p.edits for p in result.applied}  # one fix offered by two jobs' copies of a finding counts once
            out.files.append(FileFix(str(real), old, result.source, encoding, len(distinct)))
    failed = {id(c.fix) for c in chosen if not done[id(c.fix)] and len({e.path for e in c.fix.edits}) > 1}
    fixed = {id(c.finding): c.finding for c in chosen if done[id(c.fix)]}
    out.fixed = list(fixed.values())
    return failed


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def _readable(path: str, roots: list[Path], analysed: str | None) -> tuple[Path, str, str] | str:
    """(the file with symlinks resolved, its text, its encoding) when fixes may be written to it,
    else why not."""
    try:
        real = Path(path).resolve()
    except (OSError, RuntimeError):
        return "cannot be resolved; not written"
    if not _inside(real, roots):
        return "outside the checked paths (symlinks resolved); not written"
    try:
        data = safe_io.read_bytes(real, safe_io.LIMITS.source_bytes)
    except ProfileError as exc:
        return f"{exc.message}; not written"
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return "does not decode in its declared encoding; not written"
    if text != analysed:
        return "changed since it was analysed; not written (run the check again)"
    return real, text, encoding


def write(plan: FixPlan) -> list[FileFix]:
    """Write each planned file (atomically; no symlink followed, a regular file only); the files
    written. A file that cannot be written goes to ``plan.refused``."""
    written = []
    for f in plan.files:
        try:
            data = f.new.encode(f.encoding)
        except UnicodeEncodeError:
            plan.refused.append(f"{f.path}: the fixed text cannot be written in the file's encoding {f.encoding}; not written")
            continue
        try:
            _write_regular(f.path, data)
        except OSError as exc:
            plan.refused.append(f"{f.path}: cannot write: {exc.strerror or exc}")
            continue
        written.append(f)
    return written


def _write_regular(path: str, data: bytes) -> None:
    """Replace the regular file ``path`` with ``data`` atomically: written to a temporary file
    beside it (its mode kept), flushed, then renamed over it -- a full disk or a crash leaves the
    old file whole, never a truncated one. The rename replaces the name itself, so a symlink
    planted there since the check is replaced, never followed."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(0, "not a regular file")
    fd, tmp = tempfile.mkstemp(prefix=".msprof-lsp-fix-", dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, stat.S_IMODE(st.st_mode))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def diff(plan: FixPlan, cwd: Path) -> str:
    """What ``--fix`` would write, as one unified diff (paths relative to ``cwd``)."""
    return "".join(unified_diff(f.old, f.new, rel_path(f.path, cwd)) for f in plan.files)


def summary(plan: FixPlan, *, wrote: bool) -> list[str]:
    """The lines for stderr: what was (or would be) fixed, skipped, refused, left for review."""
    n_fixes = sum(f.fixes for f in plan.files)
    verb = "fixed" if wrote else "would fix"
    lines = [f"{verb} {_n(len(plan.fixed), 'finding')} ({_n(n_fixes, 'fix')}) in {_n(len(plan.files), 'file')}"
             if plan.files else "no fix to apply"]
    if plan.skipped:
        lines.append(f"{_n(plan.skipped, 'fix')} skipped: {'it overlaps' if plan.skipped == 1 else 'they overlap'} "
                     "a fix applied in the same file")
    if plan.review_left:
        lines.append(f"{_n(plan.review_left, 'review fix')} not applied (add --unsafe-fixes)")
    lines += plan.refused
    return lines


def _n(count: int, word: str) -> str:
    plural = word + ("es" if word.endswith("x") else "s")
    return f"{count:,} {word if count == 1 else plural}"
