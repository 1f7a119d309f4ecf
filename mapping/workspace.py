"""The user's source files as the mapping sees them: editor buffers over disk files, cached
indexes, which profile frames are the user's, and where a profile path lives locally.

Profiles are often recorded on another machine (``/home/ma-user/work/proj/model.py``) or with
prefix-stripped paths (Kineto: ``model.py``, ``torch/nn/functional.py``). ``resolve`` tries the
configured prefix mappings first, then the longest path-suffix match against the workspace's
``.py`` files (an index built once per workspace scan).
"""

from __future__ import annotations

import hashlib
import io
import os
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .frames import Frame
from .source_index import SourceIndex, SourceSyntaxError

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
        self._keys: dict[str, str] = {}
        self._overlays: dict[str, str] = {}
        self._overlay_digest: dict[str, bytes] = {}  # hashed once per set_text
        self._entries: dict[str, _Entry] = {}
        # lower-cased basename -> (path parts innermost first, path)
        self._by_name: dict[str, list[tuple[tuple[str, ...], str]]] | None = None
        self._files: list[str] | None = None
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
        if new_file and self._by_name is not None and key.endswith(".py"):
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

    def is_user_frame(self, frame: Frame) -> bool:
        """False for library, stdlib, synthetic and opaque frames and configured third-party roots."""
        if frame.opaque or not frame.file:
            return False
        f = _norm(frame.file)
        if f.startswith("<") or f.endswith(">"):
            return False  # <frozen ...>, <string>, <built-in ...>, <stdin>, <ipython-input>
        low = f.lower()
        if not low.startswith("/"):
            low = "/" + low
        # Markers inside the workspace's own root path (a project under ~/src/torch/) do not count.
        for root in self._root_prefixes:
            if low.startswith(root):
                low = "/" + low[len(root):]
                break
        if any(m in low for m in LIBRARY_MARKERS):
            return False
        return not any(r in low for r in self.third_party_roots)

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
        if key in self._overlays or os.path.isfile(key):
            return key
        return None

    def _resolve(self, profile_path: str) -> str | None:
        p = _norm(profile_path)
        if not p:
            return None
        for remote, local in self.path_mappings:
            r = remote.rstrip("/")
            if p == r or p.startswith(r + "/"):
                hit = self._exists(os.path.join(local, p[len(r):].lstrip("/")))
                if hit:
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

    def _suffix_match(self, p: str) -> str | None:
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
        if best is None or tie:
            return None  # nothing, or two local files match equally well
        return best

    def _scan(self) -> None:
        self._by_name = {}
        self._files = []
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
                        self._add_file(os.path.join(dirpath, fn))
                        count += 1
                        if count >= MAX_FILES:
                            self.truncated = True
                            return
        for key in self._overlays:
            if key.endswith(".py") and key not in self._files:
                self._add_file(key)

    def _add_file(self, path: str) -> None:
        assert self._by_name is not None and self._files is not None
        parts = Path(path).parts
        self._by_name.setdefault(parts[-1].lower(), []).append((tuple(reversed(parts)), path))
        self._files.append(path)

    def refresh(self) -> None:
        """Forget the file scan and path resolutions (files were added, removed or renamed)."""
        self._by_name = None
        self._files = None
        self._resolved.clear()
        self._keys.clear()

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
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        try:
            return data.decode("utf-8", "replace")
        except Exception:  # pragma: no cover - decode with "replace" does not raise
            return None
