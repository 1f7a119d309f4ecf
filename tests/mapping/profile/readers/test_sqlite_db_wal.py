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


# -- a pending -wal: nothing beside the profile changes, the pending rows are still read -----------

import hashlib  # noqa: E402 - the section's own imports
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import urllib.parse  # noqa: E402

import pytest  # noqa: E402

from msprof_lsp.mapping.errors import ProfileError  # noqa: E402
from msprof_lsp.mapping.profile import safe_io  # noqa: E402
from msprof_lsp.mapping.profile.readers import sqlite_db  # noqa: E402


def _folder_state(folder: Path) -> dict[str, tuple[int, int, str]]:
    """Every file's size, mtime and content hash: what "nothing was written here" means."""
    return {
        p.name: (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(folder.iterdir())
    }


_writes: list[tuple[str, str]] | None = None


def _audit(event: str, args: tuple) -> None:
    """Python-level writes (open for writing, sqlite connections) while a test watches."""
    if _writes is None:
        return
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        mode, flags = args[1], args[2]
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        if writing:
            _writes.append(("open", os.fsdecode(args[0])))
    elif event == "sqlite3.connect":  # a URI: the file it names
        target = os.fsdecode(args[0])
        if target.startswith("file:"):
            target = urllib.parse.unquote(urllib.parse.urlsplit(target).path)
        _writes.append(("connect", target))


sys.addaudithook(_audit)


def _pending(tmp_path: Path, *, live: bool) -> tuple[Path, sqlite3.Connection | None]:
    """A WAL db with one committed row only in its -wal: with the writer still open (it holds the
    -shm beside the file) or as a crashed profiler leaves it (db and -wal, no -shm)."""
    work = tmp_path / "writer"
    work.mkdir()
    db = work / "ascend_pytorch_profiler_0.db"
    _wal_db(db)
    writer = sqlite3.connect(db)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("INSERT INTO STRING_IDS VALUES (3, 'c')")
    writer.commit()
    assert (work / (db.name + "-wal")).stat().st_size > 0
    if live:
        return db, writer
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    for name in (db.name, db.name + "-wal"):
        shutil.copyfile(work / name, crashed / name)
    writer.close()
    return crashed / db.name, None


@pytest.mark.parametrize("live", [True, False], ids=["writer-open", "crashed"])
def test_pending_wal_writes_nothing_beside_the_profile(tmp_path: Path, live: bool) -> None:
    global _writes
    db, writer = _pending(tmp_path, live=live)
    before = _folder_state(db.parent)
    _writes = []
    try:
        with SqliteDb(db) as con:
            private = con._private
            assert private is not None and private.is_dir()
            rows = con.query("SELECT count(*) FROM STRING_IDS")[0][0]
            assert con.resolve([3])[0] == "c"  # the row that lives only in the log
        writes = _writes
        after = _folder_state(db.parent)  # before the writer closes (closing it checkpoints)
    finally:
        _writes = None
        if writer is not None:
            writer.close()
    assert rows == 3
    assert after == before
    assert not private.exists(), "the private copy is removed when the database is closed"
    assert writes, "the audit hook saw the copy being written"
    for kind, where in writes:
        assert Path(where).resolve().is_relative_to(private.resolve()), (kind, where)
    assert str(db.parent) not in "".join(w for _, w in writes)


def test_live_writer_folder_is_unchanged_while_it_is_read(tmp_path: Path) -> None:
    # The writer's -shm beside the profile: a plain read-only open would take read marks in it.
    db, writer = _pending(tmp_path, live=True)
    assert writer is not None
    try:
        before = _folder_state(db.parent)
        assert db.name + "-shm" in before
        with SqliteDb(db) as con:
            con.query("SELECT * FROM STRING_IDS")
            during = _folder_state(db.parent)
        assert during == before and _folder_state(db.parent) == before
    finally:
        writer.close()


def test_settled_wal_is_opened_in_place_without_a_copy(tmp_path: Path) -> None:
    db = tmp_path / "settled.db"
    _wal_db(db)
    with SqliteDb(db) as con:
        assert con._private is None


def test_a_file_that_keeps_changing_while_copied_is_refused(tmp_path: Path, monkeypatch) -> None:
    db, _ = _pending(tmp_path, live=False)
    ticks = iter(range(1_000_000))
    monkeypatch.setattr(sqlite_db, "_stamp", lambda _p: (next(ticks), 0))
    # A private temp dir: a reader in another test (or xdist worker) may copy a WAL meanwhile.
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
    folders_before = set(Path(tempfile.gettempdir()).glob("msprof-lsp-wal-*"))
    assert Path(tempfile.gettempdir()) == private_tmp
    with pytest.raises(ProfileError) as exc:
        SqliteDb(db)
    assert str(db) in str(exc.value) and "still being written" in str(exc.value)
    assert set(Path(tempfile.gettempdir()).glob("msprof-lsp-wal-*")) == folders_before, "the copy is removed"


def test_the_copy_is_bounded_by_the_size_limit(tmp_path: Path) -> None:
    db, _ = _pending(tmp_path, live=False)
    small = safe_io.Limits(wal_copy_bytes=db.stat().st_size + 10)  # the db fits, db + wal does not
    dest = tmp_path / "private"
    dest.mkdir()
    with pytest.raises(safe_io.LimitExceeded) as exc:
        sqlite_db._private_copy(db, dest, small)
    assert str(db) + "-wal" in str(exc.value)


def test_real_db_export_with_a_pending_wal(tmp_path: Path) -> None:
    src = shared_fixture(REAL_DB)
    work = tmp_path / "w"
    work.mkdir()
    db = work / src.name
    shutil.copyfile(src, db)
    writer = sqlite3.connect(db)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    (count,) = writer.execute("SELECT count(*) FROM TASK").fetchone()
    writer.execute("INSERT INTO TASK SELECT * FROM TASK LIMIT 1")
    writer.commit()
    try:
        before = _folder_state(work)
        with SqliteDb(db) as con:
            assert con.query("SELECT count(*) FROM TASK")[0][0] == count + 1
        assert _folder_state(work) == before
    finally:
        writer.close()


def test_the_cache_key_covers_the_pending_wal(tmp_path: Path) -> None:
    # The profiler appends to the -wal, not the .db: a key on the .db alone would serve old rows.
    from msprof_lsp.mapping.profile import cache
    from msprof_lsp.mapping.profile.locations import ProfileLocation
    from msprof_lsp.mapping.profile.model import ProfileKind

    db, writer = _pending(tmp_path, live=True)
    assert writer is not None
    try:
        location = ProfileLocation(ProfileKind.TORCH_NPU_DB, db)
        before = cache.fingerprint(location)
        assert any(s.path.endswith(".db-wal") for s in before)
        writer.execute("INSERT INTO STRING_IDS VALUES (4, 'd')")
        writer.commit()
        assert cache.fingerprint(location) != before
    finally:
        writer.close()


def test_no_room_for_the_copy_is_one_error_naming_the_file(tmp_path: Path, monkeypatch) -> None:
    db, _ = _pending(tmp_path, live=False)

    def full(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sqlite_db, "_copy_bounded", full)
    with pytest.raises(ProfileError) as exc:
        SqliteDb(db)
    assert str(exc.value).startswith(str(db)) and "No space left on device" in str(exc.value)
    monkeypatch.setattr(tempfile, "mkdtemp", full)
    with pytest.raises(ProfileError):
        SqliteDb(db)


def _tree_state(root: Path) -> dict[str, tuple[int, int, str]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_check_on_a_db_export_with_a_pending_wal_writes_nothing_beside_it(tmp_path: Path, monkeypatch, capsys) -> None:
    # The real torch_npu DB export as a crashed profiler leaves it: the .db and a non-empty -wal.
    from msprof_lsp.server.__main__ import main

    src = shared_fixture(REAL_DB).parents[1]
    run = tmp_path / "ws" / src.name
    shutil.copytree(src, run, ignore=shutil.ignore_patterns("*-shm", "*-wal"))
    db = run / "ASCEND_PROFILER_OUTPUT" / Path(REAL_DB).name
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    shutil.copyfile(db, scratch / db.name)
    writer = sqlite3.connect(scratch / db.name)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("INSERT INTO TASK SELECT * FROM TASK LIMIT 1")
    writer.commit()
    for name in (db.name, db.name + "-wal"):
        shutil.copyfile(scratch / name, db.parent / name)
    writer.close()
    before = _tree_state(run)
    assert before[f"ASCEND_PROFILER_OUTPUT/{db.name}-wal"][0] > 0
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    code = main(["--check", str(run), "--format", "json", "--fail-on", "never"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert _tree_state(run) == before


def test_a_link_to_a_db_with_a_pending_wal(tmp_path: Path) -> None:
    # SQLite opens the link's target, whose log lies beside the target, not beside the link.
    db, _ = _pending(tmp_path, live=False)
    link = tmp_path / "elsewhere" / "linked.db"
    link.parent.mkdir()
    link.symlink_to(db)
    before = _folder_state(db.parent)
    with SqliteDb(link) as con:
        assert con._private is not None
        assert con.query("SELECT count(*) FROM STRING_IDS")[0][0] == 3
    assert _folder_state(db.parent) == before and [p.name for p in link.parent.iterdir()] == ["linked.db"]
