"""The check run's own checks of the paths it is given, before any analysis."""

from __future__ import annotations

from pathlib import Path

import pytest

from msprof_lsp.server.analysis.check_run import CheckFailed, RunRequest, check_run
from msprof_lsp.server.analysis.settings import Settings


def _settings(_path: Path) -> Settings:
    raise AssertionError("the run stops at the path check, before any settings are read")


@pytest.mark.parametrize("field", ["paths", "profile"])
def test_a_name_too_long_to_stat_is_one_clear_line(tmp_path: Path, field: str) -> None:
    """ENAMETOOLONG: one CheckFailed naming the path, not an OSError out of ``Path.exists``. (The
    campaign of seed 30 found it through a repository's ``baseline`` setting, the same check after
    the analysis: its replay is in tests/fuzz/test_fuzz_readers.py.)"""
    long = tmp_path / ("[" * 5000)
    request = RunRequest(cwd=tmp_path, tool_version="0", paths=(long,) if field == "paths" else (),
                         profile=long if field == "profile" else None)
    with pytest.raises(CheckFailed, match="cannot be opened: File name too long"):
        check_run(request, _settings)


def test_a_missing_path_says_so(tmp_path: Path) -> None:
    with pytest.raises(CheckFailed, match=r"no such file or directory \(--profile\)"):
        check_run(RunRequest(cwd=tmp_path, tool_version="0", profile=tmp_path / "absent"), _settings)
