"""How to get integer columns out of a profiler DB fastest: candidates measured in one run.

A TASK-shaped table (8 integer columns, epoch-ns times) of ``--rows`` rows is written to a temp
file, then read back to numpy int64 columns by each candidate; times print as ratios to the plain
``cursor.fetchall()`` baseline. Every candidate's result is checked equal to the baseline's.

    python benchmarks/bench_db_fetch.py --rows 1000000
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

COLS = ["startNs", "endNs", "deviceId", "connectionId", "globalTaskId", "taskType", "streamId", "taskId"]


def write(path: Path, rows: int) -> None:
    con = sqlite3.connect(path)
    con.execute(f"CREATE TABLE TASK ({', '.join(c + ' INTEGER' for c in COLS)})")
    base = 1_736_000_000_000_000_000
    con.executemany(
        "INSERT INTO TASK VALUES (?,?,?,?,?,?,?,?)",
        ((base + i * 1000, base + i * 1000 + 500, 0, i, i, 3, 2, i % 65535) for i in range(rows)),
    )
    con.commit()
    con.close()


def fetchall(con: sqlite3.Connection) -> list[np.ndarray]:
    rows = con.execute(f"SELECT {', '.join(COLS)} FROM TASK").fetchall()
    return [np.fromiter(c, dtype=np.int64, count=len(rows)) for c in zip(*rows)]


def read_sql(con: sqlite3.Connection) -> list[np.ndarray]:
    df = pd.read_sql_query(f"SELECT {', '.join(COLS)} FROM TASK", con)
    return [df[c].to_numpy(dtype=np.int64) for c in COLS]


def group_concat(con: sqlite3.Connection) -> list[np.ndarray]:
    """What mapping.readers.sqlite_db does (one chunk here)."""
    outer = ", ".join(f"group_concat(c{i}, ' ')" for i in range(len(COLS)))
    inner = ", ".join(f"COALESCE(CAST({c} AS INTEGER), -1) AS c{i}" for i, c in enumerate(COLS))
    row = con.execute(f"SELECT {outer} FROM (SELECT {inner} FROM TASK ORDER BY rowid)").fetchone()
    return [np.fromstring(t, dtype=np.int64, sep=" ") for t in row]


def duckdb_scan(path: Path) -> list[np.ndarray] | None:
    try:
        import duckdb

        con = duckdb.connect()
        con.execute("LOAD sqlite")
    except Exception as exc:  # noqa: BLE001 - the extension is downloaded on demand; offline it fails
        print(f"duckdb sqlite_scan : unavailable ({type(exc).__name__}: needs the sqlite extension download)")
        return None
    t = con.execute(f"SELECT {', '.join(COLS)} FROM sqlite_scan('{path}', 'TASK')").fetchnumpy()
    return [np.asarray(t[c], dtype=np.int64) for c in COLS]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "task.db"
        write(path, args.rows)
        con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        t = time.perf_counter()
        base = fetchall(con)
        t_base = time.perf_counter() - t
        print(f"{args.rows} rows x {len(COLS)} int columns")
        print(f"fetchall + fromiter : {t_base:6.2f} s  1.00x (baseline)")
        for name, fn in (("pandas.read_sql    ", read_sql), ("group_concat+numpy ", group_concat)):
            t = time.perf_counter()
            got = fn(con)
            dt = time.perf_counter() - t
            assert all((a == b).all() for a, b in zip(base, got)), name
            print(f"{name} : {dt:6.2f} s  {dt / t_base:.2f}x")
        t = time.perf_counter()
        got = duckdb_scan(path)
        if got is not None:
            dt = time.perf_counter() - t
            print(f"duckdb sqlite_scan  : {dt:6.2f} s  {dt / t_base:.2f}x")


if __name__ == "__main__":
    main()
