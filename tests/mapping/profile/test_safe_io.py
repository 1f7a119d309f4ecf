"""safe_io's stat helpers answer False, never raise, for names the file system refuses."""

from __future__ import annotations

import os
from pathlib import Path

from msprof_lsp.mapping.profile.safe_io import is_folder, is_regular


def test_is_folder_and_is_regular_tell_the_kinds_apart(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    os.mkfifo(tmp_path / "pipe")
    assert is_folder(tmp_path) and not is_regular(tmp_path)
    assert is_regular(tmp_path / "f") and not is_folder(tmp_path / "f")
    assert not is_folder(tmp_path / "pipe") and not is_regular(tmp_path / "pipe")
    assert not is_folder(tmp_path / "absent") and not is_regular(tmp_path / "absent")


def test_a_name_too_long_to_stat_is_no_folder(tmp_path: Path) -> None:
    """ENAMETOOLONG (a repository's ``profile`` setting of 5,000 characters): Path.is_dir raises
    on Python 3.11, these say False."""
    long = tmp_path / ("[" * 5000)
    assert not is_folder(long) and not is_regular(long)
    assert not is_folder("bad\0name")
