"""Reading a WAL-mode SQLite export writes nothing beside it (torch_npu writes its DB export in WAL
mode; a plain read-only open would create ``-wal`` and ``-shm`` files next to the user's profile)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from msprof_lsp.mapping.profile.readers.sqlite_db import SqliteDb
from tests.conftest import shared_fixture

REAL_DB = "Ascend-msinsight/db/level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"


def _wal_db(path: Path) -> None:
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE STRING_IDS (id INTEGER, value TEXT)")
    con.executemany("INSERT INTO STRING_IDS VALUES (?, ?)", [(1, "a"), (2, "b")])
    con.commit()
    con.close()  # the last connection checkpoints and removes -wal and -shm


def _beside(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p != path)


def test_settled_wal_db_is_read_without_files_beside_it(tmp_path: Path) -> None:
    db = tmp_path / "ascend_pytorch_profiler_0.db"
    _wal_db(db)
    assert db.read_bytes()[18:20] == b"\x02\x02" and _beside(db) == []
    with SqliteDb(db) as con:
        assert "STRING_IDS" in con.tables
    assert _beside(db) == []


def test_pending_wal_is_still_read(tmp_path: Path) -> None:
    # A profiler still writing: committed rows live in the -wal file only; they must be seen.
    db = tmp_path / "live.db"
    _wal_db(db)
    writer = sqlite3.connect(db)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("INSERT INTO STRING_IDS VALUES (3, 'c')")
    writer.commit()
    assert (tmp_path / "live.db-wal").stat().st_size > 0
    with SqliteDb(db) as con:
        assert "STRING_IDS" in con.tables
        rows = con._con.execute("SELECT count(*) FROM STRING_IDS").fetchone()[0]
    writer.close()
    assert rows == 3


def test_real_db_export_is_read_without_files_beside_it(tmp_path: Path) -> None:
    src = shared_fixture(REAL_DB)  # skips with a reason where ../shared is absent
    db = tmp_path / src.name
    shutil.copyfile(src, db)
    with SqliteDb(db) as con:
        assert "TASK" in con.tables
    assert _beside(db) == []
