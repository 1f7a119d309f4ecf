"""The user's source files as the mapping sees them: editor buffers over disk files, cached
indexes, which profile frames are the user's, and where a profile path lives locally.

Profiles are often recorded on another machine (``/home/ma-user/work/proj/model.py``) or with
prefix-stripped paths (Kineto: ``model.py``, ``torch/nn/functional.py``). ``resolve`` tries the
configured prefix mappings first, then the longest path-suffix match against the workspace's
``.py`` files (an index built once per workspace scan).

A profile is untrusted input: its paths may point anywhere (``../outside/model.py``, ``/etc/...``).
``contains`` is the one confinement check: every local file the mapping hands out, and every
disk read of a source file, is under the workspace roots once symlinks are resolved.
"""

from __future__ import annotations

import enum
import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.profile.frames import Frame
from msprof_lsp.mapping.source.source_index import SourceIndex, SourceSyntaxError, SourceTooComplex

# Path fragments of code that is not the user's (matched on "/"-separated, lower-cased paths with a
# leading "/", so Kineto's relative "torch/nn/functional.py" matches "/torch/").
LIBRARY_MARKERS: tuple[str, ...] = (
    "/site-packages/",
    "/dist-packages/",
    "/torch/",
    "/torch_npu/",
    "/lib/python2",
    "/lib/python3",
    "/lib64/python3",
)
# Top-level packages of the framework itself: every op passes through them, so they are never the
# user's code and never the "library line" a finding names.
FRAMEWORK_PACKAGES = frozenset({"torch", "torch_npu"})
_INSTALLED_RE = re.compile(r"/(?:site|dist)-packages/")


class FrameKind(enum.Enum):
    """Whose code a recorded frame runs, judged from its path alone."""

    USER = "user"  # the user's own code
    LIBRARY = "library"  # an installed package (site-packages, dist-packages) other than the framework
    FRAMEWORK = "framework"  # torch, torch_npu, the standard library
    THIRD_PARTY = "third_party"  # under a configured thirdPartyRoots fragment
    SYNTHETIC = "synthetic"  # <frozen ...>, <string>, built-ins, nn.Module entries


def package_path(path: str) -> str:
    """The path of an installed file inside its environment (``torchvision/models/alexnet.py`` for
    ``/home/u/.local/lib/python3.9/site-packages/torchvision/models/alexnet.py``); the path itself
    when it is not under site-packages/dist-packages."""
    p = "/" + _norm(path).lstrip("/")
    last = None
    for last in _INSTALLED_RE.finditer(p.lower()):
        pass
    return p[last.end():] if last is not None else p.lstrip("/")


def library_label(frame: Frame) -> str:
    """``torchvision/models/alexnet.py:48 (forward)``: how messages name a library line."""
    return f"{package_path(frame.file)}:{frame.line} ({frame.func})"


# Directories never searched for user files.
_SKIP_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "dist-packages"})
MAX_FILES = 50_000


def _norm(path: str) -> str:
    return path.strip().replace("\\", "/")


def _is_windows_path(p: str) -> bool:
    return len(p) > 2 and p[1] == ":" and p[0].isalpha()


@dataclass(slots=True)
class _Entry:
    digest: bytes = b""
    index: SourceIndex | None = None  # last good index
    error: SourceSyntaxError | None = None  # error of the newest text, None when it parsed
    stat: tuple[int, int] | None = None  # (mtime_ns, size) of the disk file behind ``digest``


class SourceWorkspace:
    """Source files under ``roots`` plus open editor buffers.

    ``path_mappings``: (remote prefix, local prefix) pairs, tried before suffix matching.
    ``third_party_roots``: extra path fragments whose frames are skipped like site-packages.
    """

    def __init__(
        self,
        roots: Sequence[Path | str],
        *,
        path_mappings: Sequence[tuple[str, str]] = (),
        third_party_roots: Sequence[str] = (),
    ) -> None:
        self.roots: list[Path] = [Path(r).expanduser().resolve() for r in roots]
        self.path_mappings: list[tuple[str, str]] = sorted(
            ((_norm(r), str(Path(loc).expanduser())) for r, loc in path_mappings if r),
            key=lambda m: -len(m[0]),
        )
        self.third_party_roots: tuple[str, ...] = tuple(_norm(r).lower() for r in third_party_roots if r.strip())
        self._root_prefixes = [_norm(str(r)).lower().rstrip("/") + "/" for r in self.roots]
        self._root_dirs = [str(r).rstrip(os.sep) + os.sep for r in self.roots]
        self._root_files = frozenset(str(r) for r in self.roots)
        self._keys: dict[str, str] = {}
        self._overlays: dict[str, str] = {}
        self._overlay_digest: dict[str, bytes] = {}  # hashed once per set_text
        self._entries: dict[str, _Entry] = {}
        # lower-cased basename -> (path parts innermost first, path)
        self._by_name: dict[str, list[tuple[tuple[str, ...], str]]] | None = None
        self._files: list[str] | None = None
        self._files_seen: set[str] = set()
        self._resolved: dict[str, str | None] = {}
        self._unmapped: dict[str, str] = {}  # profile path -> reason, in first-seen order
        self._reported: set[str] = set()
        self.truncated = False  # the file scan stopped at MAX_FILES

    # -- texts and indexes ---------------------------------------------------------------------

    def key(self, path: Path | str) -> str:
        """The absolute, resolved path string files are known by (cached: it is asked a lot)."""
        raw = str(path)
        hit = self._keys.get(raw)
        if hit is None:
            hit = self._keys[raw] = str(Path(raw).expanduser().resolve())
        return hit

    def set_text(self, path: Path | str, text: str) -> None:
        """Use an editor buffer instead of the disk file (also for files not saved yet)."""
        key = self.key(path)
        new_file = key not in self._overlays and not os.path.exists(key)
        self._overlays[key] = text
        self._overlay_digest.pop(key, None)
        if new_file and self._by_name is not None and key.endswith(".py") and self.contains(key):
            self._add_file(key)
            self._resolved.clear()

    def drop_text(self, path: Path | str) -> None:
        """The buffer was closed: fall back to the disk file."""
        self._overlays.pop(self.key(path), None)
        self._overlay_digest.pop(self.key(path), None)

    def text(self, path: Path | str) -> str | None:
        """Buffer text, else the disk file decoded per PEP 263 (None if unreadable)."""
        key = self.key(path)
        if key in self._overlays:
            return self._overlays[key]
        if not self.contains(key):
            return None  # never read a file outside the workspace, whoever names it
        return _read_source(key)

    def index(self, path: Path | str) -> SourceIndex | None:
        """The file's index, rebuilt when its content changed (cached by content hash).

        On a syntax error the last good index is returned (None if there never was one) and the
        error is kept for :meth:`error`.
        """
        key = self.key(path)
        entry = self._entries.setdefault(key, _Entry())
        stat = None
        if key not in self._overlays:
            if not self.contains(key):
                return None
            try:
                st = os.stat(key)
                stat = (st.st_mtime_ns, st.st_size)
            except OSError:
                return entry.index
            if entry.stat == stat and entry.digest:
                return entry.index
        if key in self._overlays and key in self._overlay_digest and entry.digest == self._overlay_digest[key]:
            return entry.index
        text = self.text(key)
        if text is None:
            if stat is not None and stat[1] > safe_io.LIMITS.source_bytes:
                # refused unread: say so, so the unattributed-time notice names the file and limit
                rejected = safe_io.SourceRejected(safe_io.Limit.SOURCE_SIZE, 1,
                                                  f"{stat[1]:,} bytes, at most {safe_io.LIMITS.source_bytes:,}")
                entry.error = SourceTooComplex(key, 1, 0, rejected.message())
            return entry.index
        digest = _digest(text)
        if key in self._overlays:
            self._overlay_digest[key] = digest
        if digest == entry.digest:
            entry.stat = stat
            return entry.index
        entry.digest = digest
        entry.stat = stat
        try:
            entry.index = SourceIndex.build(key, text, previous=entry.index)
            entry.error = None
        except SourceSyntaxError as e:
            entry.error = e
        return entry.index

    def adopt(self, index: SourceIndex) -> None:
        """Take an index the caller built from the current text of its file (avoids a rebuild)."""
        key = self.key(index.path)
        entry = self._entries.setdefault(key, _Entry())
        if key not in self._overlays and self.text(key) != index.text:
            self._overlays[key] = index.text  # built from an unsaved text: serve that text
        entry.digest = _digest(index.text)
        if key in self._overlays:
            self._overlay_digest[key] = entry.digest
        entry.index = index
        entry.error = None
        entry.stat = None

    def error(self, path: Path | str) -> SourceSyntaxError | None:
        """The syntax error of the newest text of ``path`` (None when it parsed)."""
        entry = self._entries.get(self.key(path))
        return entry.error if entry else None

    # -- which frames are the user's -----------------------------------------------------------

    def frame_kind(self, frame: Frame) -> FrameKind:
        """Whose code ``frame`` runs, by its recorded path (see :class:`FrameKind`)."""
        if frame.opaque or not frame.file:
            return FrameKind.SYNTHETIC
        f = _norm(frame.file)
        if f.startswith("<") or f.endswith(">"):
            return FrameKind.SYNTHETIC  # <frozen ...>, <string>, <built-in ...>, <stdin>, <ipython-input>
        low = self._inner_path(f)
        if any(r in low for r in self.third_party_roots):
            return FrameKind.THIRD_PARTY
        if not any(m in low for m in LIBRARY_MARKERS):
            return FrameKind.USER
        installed = None
        for installed in _INSTALLED_RE.finditer(low):
            pass
        if installed is None:
            return FrameKind.FRAMEWORK  # the standard library, or torch outside an environment
        top = low[installed.end():].split("/", 1)[0]
        return FrameKind.FRAMEWORK if top in FRAMEWORK_PACKAGES else FrameKind.LIBRARY

    def _inner_path(self, path: str) -> str:
        """Lower-cased "/"-path with a leading "/", relative to the root that holds it: markers in
        the workspace's own root path (a project under ~/src/torch/) do not count."""
        low = _norm(path).lower()
        if not low.startswith("/"):
            low = "/" + low
        for root in self._root_prefixes:
            if low.startswith(root):
                return "/" + low[len(root):]
        return low

    def is_user_frame(self, frame: Frame) -> bool:
        """True for the user's own code by path: False for library, stdlib, synthetic and opaque
        frames and configured third-party roots (see :meth:`frame_file` for what maps)."""
        return self.frame_kind(frame) is FrameKind.USER

    def frame_file(self, frame: Frame) -> str | None:
        """The workspace file ``frame`` runs in, when it is user code for mapping, else None.

        The user's frames resolve by :meth:`resolve`. A library frame (site-packages) counts when
        its file is a workspace file: by a path mapping, or because the package's own path
        (``torchvision/models/alexnet.py``) is found whole in the workspace. The framework (torch,
        torch_npu, the standard library), synthetic frames and third-party roots never do.
        """
        kind = self.frame_kind(frame)
        if kind is FrameKind.USER:
            hit = self.resolve(frame.file)
            return str(hit) if hit is not None else None
        if kind is not FrameKind.LIBRARY:
            return None
        key = "\0lib\0" + frame.file
        if key not in self._resolved:
            self._resolved[key] = self._resolve_library(frame.file)
        return self._resolved[key]

    def _resolve_library(self, profile_path: str) -> str | None:
        p = _norm(profile_path)
        files = self._file_set()
        hits = [local for local in self._mapped(p) if local in files]
        tail = [x for x in package_path(p).split("/") if x and x != "."]
        if not hits and tail:
            hits = [hit] if (hit := self._suffix_match("/".join(tail), min_score=len(tail))) else []
        # a vendored copy under a thirdPartyRoots folder is not the user's code either
        return next((h for h in hits if not any(r in self._inner_path(h) for r in self.third_party_roots)), None)

    # -- confinement ---------------------------------------------------------------------------

    def contains(self, path: Path | str) -> bool:
        """True when ``path`` (symlinks resolved) is a workspace root or lies under one.

        The one check that keeps source reads, findings, hotspots and edits inside the workspace,
        whatever paths a profile or a path mapping names.
        """
        try:
            key = self.key(path)
        except (OSError, RuntimeError, ValueError):
            return False
        return any(key == r or key.startswith(r) for r in self._root_dirs) or key in self._root_files

    # -- profile path -> local file ------------------------------------------------------------

    def resolve(self, profile_path: str) -> Path | None:
        """Local file for a path recorded in a profile, or None."""
        if profile_path in self._resolved:
            hit = self._resolved[profile_path]
            return Path(hit) if hit else None
        hit = self._resolve(profile_path)
        self._resolved[profile_path] = hit
        return Path(hit) if hit else None

    def _exists(self, p: str) -> str | None:
        try:
            key = self.key(p)
        except (OSError, RuntimeError):
            return None
        if not self.contains(key):
            return None
        if key in self._overlays or os.path.isfile(key):
            return key
        return None

    def _resolve(self, profile_path: str) -> str | None:
        p = _norm(profile_path)
        if not p:
            return None
        for hit in self._mapped(p):
            return hit
        absolute = p.startswith("/") or _is_windows_path(p)
        if absolute and not _is_windows_path(p):
            hit = self._exists(p)
            if hit:
                return hit
        elif not absolute:
            for root in self.roots:
                hit = self._exists(str(root / p))
                if hit:
                    return hit
        return self._suffix_match(p)

    def _mapped(self, p: str) -> list[str]:
        """Existing workspace files the path mappings turn ``p`` into, longest remote prefix first."""
        out = []
        for remote, local in self.path_mappings:
            r = remote.rstrip("/")
            if p == r or p.startswith(r + "/"):
                hit = self._exists(os.path.join(local, p[len(r):].lstrip("/")))
                if hit:
                    out.append(hit)
        return out

    def _suffix_match(self, p: str, min_score: int = 1) -> str | None:
        if self._by_name is None:
            self._scan()
        assert self._by_name is not None
        fold = _is_windows_path(p)  # Windows paths compare case-insensitively
        parts = [x for x in p.split("/") if x and x != "."]
        if not parts:
            return None
        cands = self._by_name.get(parts[-1].lower())
        if not cands:
            return None
        want = [x.lower() for x in reversed(parts)] if fold else list(reversed(parts))
        best, best_score, tie = None, 0, False
        for rparts, local in cands:
            score = 0
            for a, b in zip(want, rparts):
                if a != (b.lower() if fold else b):
                    break
                score += 1
            if score > best_score:
                best, best_score, tie = local, score, False
            elif score == best_score and score:
                tie = True
        if best is None or tie or best_score < min_score:
            return None  # nothing, two local files match equally well, or too short a match
        return best

    def _scan(self) -> None:
        self._by_name = {}
        self._files = []
        self._files_seen = set()
        count = 0
        for root in self.roots:
            if root.is_file():
                if root.suffix == ".py":
                    self._add_file(str(root))
                continue
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = [
                    d for d in dirnames
                    if not d.startswith(".") and d not in _SKIP_DIRS
                    and not os.path.exists(os.path.join(dirpath, d, "pyvenv.cfg"))
                ]
                dirnames.sort()
                for fn in sorted(filenames):
                    if fn.endswith(".py"):
                        path = os.path.join(dirpath, fn)
                        if os.path.islink(path):
                            path = os.path.realpath(path)
                            if not self.contains(path):
                                continue  # a link out of the workspace is not a workspace file
                        if not safe_io.is_regular(path):
                            continue  # a FIFO or a device named *.py is never read
                        self._add_file(path)
                        count += 1
                        if count >= MAX_FILES:
                            self.truncated = True
                            return
        for key in self._overlays:
            if key.endswith(".py") and self.contains(key):
                self._add_file(key)

    def _add_file(self, path: str) -> None:
        assert self._by_name is not None and self._files is not None
        if path in self._files_seen:
            return
        self._files_seen.add(path)
        parts = Path(path).parts
        self._by_name.setdefault(parts[-1].lower(), []).append((tuple(reversed(parts)), path))
        self._files.append(path)

    def refresh(self) -> None:
        """Forget the file scan and path resolutions (files were added, removed or renamed)."""
        self._by_name = None
        self._files = None
        self._resolved.clear()
        self._keys.clear()

    def _file_set(self) -> set[str]:
        if self._files is None:
            self._scan()
        return self._files_seen

    def python_files(self) -> list[str]:
        """Every ``.py`` file of the workspace (absolute paths), scanned once."""
        if self._files is None:
            self._scan()
        assert self._files is not None
        return list(self._files)

    # -- frames that map to nothing ------------------------------------------------------------

    def note_unmapped(self, profile_path: str, reason: str = "no local file matches") -> None:
        self._unmapped.setdefault(profile_path, reason)

    @property
    def unmapped(self) -> list[str]:
        """Profile paths of user frames that resolved to no local file, each once, first seen first."""
        return list(self._unmapped)

    def unmapped_reason(self, profile_path: str) -> str:
        return self._unmapped.get(profile_path, "")

    def take_new_unmapped(self) -> list[str]:
        """Unmapped paths not handed out before (so a log names each file once)."""
        new = [p for p in self._unmapped if p not in self._reported]
        self._reported.update(new)
        return new


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _read_source(path: str) -> str | None:
    return safe_io.read_source_text(path)
