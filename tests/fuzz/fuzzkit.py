"""Mutation fuzzing of everything a user can point the product at (shared by tests/fuzz and
benchmarks/fuzz.py).

A *family* is one kind of input with its seed: a real fixture, a sample or a generated profile,
copied to a scratch folder per case, the files of it that get mutated, and the product entry that
reads it -- for profiles, settings and source the ``--check`` pipeline itself, in-process
(``run_check``: discovery, the rank pool of a multi-rank job, attribution, the rules, the JSON
report). A *case* is (family, file, mutation kind, seed); it is reproducible from those four.

Each case runs in a forked child (its own process group, an address-space cap, a time limit): the
child copies the seed, mutates it, runs the entry and reports how it ended:

- ``load``: the entry finished (exit 0/1, a report that parses, loaded profiles pass invariants);
- ``error``: the product's own clean failure (exit 2 / ProfileError) whose message names a file
  of the case;
- ``refused``: such a failure where the docs promise the file is dropped with a notice and the
  rest loads: an optional file (docs/limits.md), or any file of one rank of a multi-rank job (that
  rank is left out of the cluster summary);
- ``internal``: any other exception, an error line naming no file, a broken invariant;
- ``hang``: the time limit passed; ``crash``: the child died (a signal, the memory cap).
"""

from __future__ import annotations

import gzip
import io
import logging
import os
import pickle
import random
import re
import resource
import select
import shutil
import signal
import sqlite3
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO.parent / "shared" / "fixtures"
OUTCOMES = ("load", "error", "refused", "internal", "hang", "crash")
BAD_OUTCOMES = ("refused", "internal", "hang", "crash")
MEM_CAP = 3 << 30  # per case (address space; inherited by the rank pool's workers)

# -- mutations: (data, rng) -> data ---------------------------------------------------------------


def truncate(data: bytes, rnd: random.Random) -> bytes:
    return data[: rnd.randrange(len(data) + 1)]


def damage(data: bytes, rnd: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rnd.choice((1, 4, 64))):
        if b:
            b[rnd.randrange(len(b))] = rnd.randrange(256)
    return bytes(b)


def encoding(data: bytes, rnd: random.Random) -> bytes:
    text = data.decode("utf-8", "replace")
    how = rnd.randrange(5)
    if how == 0:
        return text.encode("utf-16")
    if how == 1:
        return b"\xef\xbb\xbf" + data
    if how == 2:
        return text.encode("gb18030", "replace")
    if how == 3:
        i = rnd.randrange(len(data) + 1)
        return data[:i] + b"\xff\xfe\xc3" + data[i:]  # invalid UTF-8 in the middle
    return data.replace(b"\n", b"\r\n")


def structure(data: bytes, rnd: random.Random) -> bytes:
    n = len(data)
    if n < 2:
        return data * 2
    a, b = sorted(rnd.randrange(n + 1) for _ in range(2))
    how = rnd.randrange(3)
    if how == 0:
        return data[:a] + data[b:]  # a slice deleted
    if how == 1:
        return data[:b] + data[a:b] + data[b:]  # a slice repeated (duplicated events, rows)
    c = rnd.randrange(n + 1)
    return data[:c] + data[a:b] + data[c:]  # a slice copied elsewhere


_NUMBER = re.compile(rb"\d+(?:\.\d+)?")


def _replace_numbers(data: bytes, rnd: random.Random, choices: tuple[bytes, ...]) -> bytes:
    runs = [m.span() for m in _NUMBER.finditer(data[:2_000_000])]
    if not runs:
        return data + rnd.choice(choices)
    out = bytearray(data)
    for a, b in sorted(rnd.sample(runs, min(len(runs), rnd.choice((1, 3, 20)))), reverse=True):
        out[a:b] = rnd.choice(choices)
    return bytes(out)


_DIGITS = (b"9" * 400, b"1e308", b"-1e308", b"-1", b"0", b"NaN", b"Infinity", b"1" * 5000, b"18446744073709551616",
           # issue 22: int64 + 1 as text, "²" (isdigit() yes, int() no), Arabic-Indic 3, inf as text
           b"9223372036854775808", "\u00b2".encode(), "\u0663".encode(), b"1e999")


def numbers(data: bytes, rnd: random.Random) -> bytes:
    return _replace_numbers(data, rnd, _DIGITS)


# Integers just past int64/uint64, as numbers and as strings (JSON producers quote ids and sizes).
_BIG = (b"9223372036854775808", b"-9223372036854775809", b"18446744073709551616", b"99999999999999999999",
        b'"9999999999999999999"', b'"18446744073709551616"', b'"-9223372036854775809"', b"1" + b"0" * 400,
        b'"' + b"9" * 400 + b'"', b"1e400", b"-0", b"0x10")


def big_numbers(data: bytes, rnd: random.Random) -> bytes:
    return _replace_numbers(data, rnd, _BIG)


# What str.isdigit() accepts and int() may or may not: superscripts, Arabic-Indic, fullwidth,
# NKo, mathematical digits, numerals that are no digits at all.
_UNICODE = tuple(s.encode() for s in ("²", "٣", "١٢٣", "３", "߁", "𝟗", "Ⅻ", "½", "⁹⁹⁹", "٠٫٥", '"²"', '"٣"'))


def unicode_digits(data: bytes, rnd: random.Random) -> bytes:
    return _replace_numbers(data, rnd, _UNICODE)


_DEVICE = re.compile(rb"(?i)\b(npu|cuda|gpu|device)(:|_)\d+")
_DEVICE_NAMES = (b"NPU:" + b"9" * 20, b"NPU:18446744073709551616", b"NPU:-1", b"NPU:\xc2\xb2", b"NPU:", b"cuda:" + b"9" * 20,
                 b"NPU:" + b"1" * 400)


def device_names(data: bytes, rnd: random.Random) -> bytes:
    """``NPU:<20 digits>`` and friends where a device is named (operator_memory.csv, memory_record.csv,
    Kineto ``device``); elsewhere a device-sized number past int64."""
    runs = [m.span() for m in _DEVICE.finditer(data[:2_000_000])]
    if not runs:
        return _replace_numbers(data, rnd, (b"9" * 20, b'"NPU:' + b"9" * 20 + b'"'))
    out = bytearray(data)
    for a, b in sorted(rnd.sample(runs, min(len(runs), rnd.choice((1, 3, 50)))), reverse=True):
        out[a:b] = rnd.choice(_DEVICE_NAMES)
    return bytes(out)


def nesting(data: bytes, rnd: random.Random) -> bytes:
    depth = rnd.choice((100, 1_000, 50_000))
    open_, close = (b"[", b"]") if rnd.random() < 0.5 else (b'{"a":', b"}")
    i = rnd.randrange(len(data) + 1)
    return data[:i] + open_ * depth + b"1" + close * depth + data[i:]


HUGE_STRING = 17 << 20  # just past the 16 MiB string and cell limits (docs/limits.md)


def bomb(data: bytes, rnd: random.Random) -> bytes:
    """Bombs that fit in the bytes themselves (a gzip bomb, a sparse file and DB rows are made
    by :func:`apply`): a string or cell past the size limit, whitespace, a line repeated."""
    how = rnd.randrange(3)
    if how == 0:  # one huge string / cell: after a quote, a comma or anywhere
        anchors = [m.end() for m in re.finditer(rb'["\',]', data[:1_000_000])]
        i = rnd.choice(anchors) if anchors else rnd.randrange(len(data) + 1)
        return data[:i] + b"x" * HUGE_STRING + data[i:]
    if how == 1:  # a run of whitespace (compresses 1000x; legal between JSON tokens)
        i = data.find(b"[") + 1 or rnd.randrange(len(data) + 1)
        return data[:i] + b" " * HUGE_STRING + data[i:]
    lines = data.splitlines(keepends=True)
    if len(lines) < 2:
        return data + b"\n" * (1 << 20)
    k = rnd.randrange(1, len(lines))
    reps = min(200_000, (8 << 20) // max(1, len(lines[k])))  # ~8 MiB of one row / event line
    return b"".join(lines[:k]) + lines[k] * reps + b"".join(lines[k:])


MUTATIONS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "truncation": truncate, "byte damage": damage, "encoding": encoding, "structure": structure,
    "numbers": numbers, "big numbers": big_numbers, "unicode digits": unicode_digits,
    "device names": device_names, "nesting": nesting, "bombs": bomb,
}
SPECIAL = ("fifo", "dev-zero", "directory", "empty")
KINDS = (*MUTATIONS, "special")


# -- bombs that need more than bytes ---------------------------------------------------------------


def gzip_bomb(prefix: bytes, block: bytes, count: int, suffix: bytes) -> bytes:
    """A gzip member inflating to ``prefix + block * count + suffix`` without ever holding it:
    after a full flush deflate starts afresh, so one compressed block repeats verbatim. 1 GiB of a
    short-period block costs about 1 MB on disk."""
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = co.compress(prefix) + co.flush(zlib.Z_FULL_FLUSH)
    one = co.compress(block) + co.flush(zlib.Z_FULL_FLUSH)
    tail = co.compress(suffix) + co.flush()
    crc = zlib.crc32(prefix)
    for _ in range(count):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(suffix, crc)
    size = (len(prefix) + len(block) * count + len(suffix)) & 0xFFFFFFFF
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + head + one * count + tail + struct.pack("<II", crc, size)


def _gzip_bomb_for(text: bytes, rnd: random.Random) -> bytes:
    """A trace bomb that stays valid JSON: whitespace after the first ``[``, or one event of the
    trace repeated, to 80 MiB .. 5 GiB inflated (under 6 MB on disk)."""
    i = text.find(b"[") + 1
    inflated = rnd.choice((80 << 20, 1 << 30, 5 << 30))
    if rnd.random() < 0.5:
        block = b" " * (1 << 20)
    else:
        m = re.search(rb"\{[^{}]{20,2000}\}", text)
        event = (m.group(0) if m else b'{"ph":"X","name":"a","ts":1,"dur":1,"pid":1,"tid":1}') + b","
        block = event * max(1, (1 << 20) // len(event))
    return gzip_bomb(text[:i], block, inflated // len(block), text[i:])


def sparse_bomb(target: Path, rnd: random.Random) -> None:
    """The file grows to just past 1 GiB or 4 GiB of NULs, sparse: nothing of it is on disk."""
    size = rnd.choice(((1 << 30) + 1, (4 << 30) + 1))
    with open(target, "r+b") as f:
        f.truncate(size)


_DB_VALUES: tuple[object, ...] = (2**63 - 1, -(2**63), 2**62 + 1, -1, 0, 1e308, float("inf"), float("nan"),
                                  "9999999999999999999", "²", "٣", "NPU:" + "9" * 20, "x" * 5000, b"\x00\xff", None, "")


def db_mutation(target: Path, kind: str, rnd: random.Random) -> None:
    """Mutations through SQL (byte damage mostly just gives 'not a database'): out-of-range and
    odd-typed values in random cells, or -- for ``bombs`` -- one table's rows duplicated to ~50,000
    (linear work is the promise, docs/limits.md)."""
    con = sqlite3.connect(target, isolation_level=None)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        if not tables:
            return
        table = rnd.choice(tables)
        q = '"' + table.replace('"', '""') + '"'
        if kind == "bombs":
            n = con.execute(f"SELECT count(*) FROM {q}").fetchone()[0]
            if n:
                con.execute("BEGIN")
                try:
                    for _ in range(min(12, (50_000 // n).bit_length())):  # doubling
                        con.execute(f"INSERT INTO {q} SELECT * FROM {q}")
                except sqlite3.DatabaseError:  # a unique key: this table cannot hold duplicates
                    con.execute("ROLLBACK")
                else:
                    con.execute("COMMIT")
            return
        cols = [r[1] for r in con.execute(f"PRAGMA table_info({q})")]
        if not cols:
            return
        for _ in range(rnd.choice((1, 3, 20))):
            col = '"' + rnd.choice(cols).replace('"', '""') + '"'
            value = rnd.choice(_DB_VALUES)
            where = "" if rnd.random() < 0.3 else f" WHERE rowid IN (SELECT rowid FROM {q} ORDER BY random() LIMIT 1)"
            try:
                con.execute(f"UPDATE {q} SET {col} = ?{where}", (value,))
            except sqlite3.DatabaseError:
                pass  # a constraint: this cell keeps its value
    finally:
        con.close()


_DB_KINDS = ("numbers", "big numbers", "unicode digits", "device names", "bombs")
_SQLITE = b"SQLite format 3\x00"


def apply(target: Path, kind: str, rnd: random.Random) -> None:
    """Mutate ``target`` in place (a special file replaces it). A gzip file gets its content
    mutated and compressed again, mostly: damage to the compressed bytes only tests zlib."""
    if kind == "none":  # the seed as is (every seed must load: tests/fuzz)
        return
    if kind == "special":
        how = rnd.choice(SPECIAL)
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()
        if how == "fifo" and hasattr(os, "mkfifo"):
            os.mkfifo(target)
        elif how == "dev-zero" and os.path.exists("/dev/zero"):
            target.symlink_to("/dev/zero")
        elif how == "directory":
            target.mkdir()
        else:
            target.write_bytes(b"")
        return
    data = target.read_bytes()
    if data[:16] == _SQLITE and kind in _DB_KINDS and rnd.random() < 0.8:
        for extra in (target.with_name(target.name + "-wal"), target.with_name(target.name + "-shm")):
            extra.unlink(missing_ok=True)  # a fixture's empty WAL would otherwise hide the change
        db_mutation(target, kind, rnd)
        return
    if kind == "bombs" and rnd.random() < 0.3:
        sparse_bomb(target, rnd)
        return
    if data[:2] == b"\x1f\x8b" and rnd.random() < 0.8:
        text = gzip.decompress(data)
        if kind == "bombs":
            target.write_bytes(_gzip_bomb_for(text, rnd))
        else:
            target.write_bytes(gzip.compress(MUTATIONS[kind](text, rnd), 1))
        return
    target.write_bytes(MUTATIONS[kind](data, rnd))


# -- entries: how a family's copy is read -------------------------------------------------------------


@dataclass(slots=True)
class CheckResult:
    """What ``--check`` did with a case, in-process."""

    status: int
    stdout: str
    stderr: str
    profiles: list[object] = field(default_factory=list)  # every LoadResult.profile, for the invariants
    logged: list[str] = field(default_factory=list)  # ERROR records of the product's loggers (a rule that failed)


class _ErrorRecords(logging.Handler):
    """The product's ERROR records during one case: the engine logs a rule or a saving model that
    raised and goes on, so the run still exits 0 or 1; the campaign counts it as internal."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def check(rel: str = "") -> Callable[[Path], object]:
    """The ``--check`` pipeline on ``copy/rel`` (JSON report, no cache, never failing on findings)."""

    def run(copy: Path) -> object:
        from msprof_lsp.server.analysis import run as analysis_run
        from msprof_lsp.server.check.command import run_check
        from msprof_lsp.server.cli import CheckArgs

        seen: list[object] = []
        real_load = analysis_run.load_found_job

        def load_found_job(*a, **kw):  # the profiles the rules see, for check_result
            loaded = real_load(*a, **kw)
            seen.append(loaded.profile)
            return loaded

        analysis_run.load_found_job = load_found_job
        out, err = io.StringIO(), io.StringIO()
        args = CheckArgs(paths=[str(copy / rel if rel else copy)], format="json", fail_on="never", no_cache=True,
                         quiet=True, color="never")
        errors = _ErrorRecords()
        product = logging.getLogger("msprof_lsp")
        product.addHandler(errors)
        try:
            status = run_check(args, stdout=out, stderr=err)
        finally:
            product.removeHandler(errors)
        return CheckResult(status, out.getvalue(), err.getvalue(), seen, errors.lines)

    return run


def _load(kind_name: str) -> Callable[[Path], object]:
    """One reader through load_location (for seeds that are not a whole profile)."""

    def run(copy: Path) -> object:
        from msprof_lsp.mapping.profile.load import load_location
        from msprof_lsp.mapping.profile.locations import ProfileLocation
        from msprof_lsp.mapping.profile.model import ProfileKind

        return load_location(ProfileLocation(ProfileKind(kind_name), copy), use_cache=False)

    return run


def _kernel_table(copy: Path) -> object:
    from msprof_lsp.mapping.profile.readers.ascend_csv import read_kernel_table

    return read_kernel_table(copy / "kernel_details.csv")


def _source(copy: Path) -> object:
    from msprof_lsp.hints.fixes import cst_tools
    from msprof_lsp.mapping.source.workspace import SourceWorkspace

    ws = SourceWorkspace([copy.parent])
    index = ws.index(str(copy))
    text = ws.text(str(copy))
    if text is not None:
        cst_tools.parse(text)
    return index if index is not None else ws.error(str(copy)) or "unreadable"


# -- families ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class Family:
    name: str
    source: Path  # a folder or file copied per case
    files: tuple[str, ...]  # relative to the copy: what gets mutated ("" = the copy itself)
    run: Callable[[Path], object]  # the copy -> result (CheckResult, Profile, ...; raises on failure)
    skip: str = ""  # why the family cannot run here ("" = it can)
    optional: tuple[str, ...] = ()  # name patterns of files whose damage must not stop the run


# docs/limits.md: "an optional file (a CSV table, profiler_info.json) is dropped with a notice".
OPTIONAL = ("profiler_info*.json", "profiler_metadata.json", "communication.json", "communication_matrix.json",
            "operator_memory.csv", "memory_record.csv", "npu_module_mem.csv", "op_statistic*.csv", "api_statistic*.csv",
            "l2_cache.csv", "operator_details.csv", "communication_statistic*.csv")
ANY_FILE = ("*",)


def warm() -> None:
    """Import what the entries use before forking, so each case pays only for its own work."""
    import msprof_lsp.hints.fixes.cst_tools  # noqa: F401
    import msprof_lsp.mapping.profile.load  # noqa: F401
    import msprof_lsp.mapping.profile.readers.ascend_csv  # noqa: F401
    import msprof_lsp.mapping.profile.readers.registry  # noqa: F401 - every reader module
    import msprof_lsp.mapping.profile.readers.trace_json  # noqa: F401
    import msprof_lsp.mapping.source.workspace  # noqa: F401
    import msprof_lsp.server.check.command  # noqa: F401
    import msprof_lsp.server.analysis.run  # noqa: F401


def _synth() -> object:
    import sys

    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))
    import tests.synth as synth
    from tests.synth.examples import small_run

    return synth, small_run


def _files(root: Path, under: str = "", suffixes: tuple[str, ...] = (".json", ".csv", ".db", ".gz", ".py", ".toml"),
           limit: int = 16) -> tuple[str, ...]:
    base = root / under if under else root
    found = sorted(str(p.relative_to(root)) for p in base.rglob("*") if p.is_file() and p.name.endswith(suffixes))
    return tuple(found[:limit])


_PYPROJECT = """\
[project]
name = "fuzzed"

[tool.msprof-lsp]
profile = "npu_profile"
select = ["NPU1", "NPU2", "NPU9"]
ignore = ["NPU9"]
min-share = 0.01
rank = 0
path-mappings = ["/remote/prefix=.", {{ remote = "/r2", local = "." }}]
baseline = ""
third-party-roots = ["site-packages", "dist-packages"]
compile-backend = "auto"
code-lens = true
inlay-hints = false

[tool.msprof-lsp.severity]
NPU1 = "warning"
NPU201 = "error"
"""


def _seeds(scratch: Path) -> dict[str, Path]:
    """Generated seeds (built once per scratch folder): msprof CLI text and DB, plain-JSON Kineto,
    a workspace with a pyproject, a synthetic 2-rank torch_npu DB job."""
    out: dict[str, Path] = {}
    synth, small_run = _synth()
    done = scratch / "msprof-seed"
    if not done.exists():
        synth.write_msprof_cli(small_run(), done)  # type: ignore[attr-defined]
    out["msprof"] = next(done.glob("PROF_*"))
    db = FIXTURES / "Ascend-msinsight/db/level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"
    prof_db = scratch / "msprof-db-seed" / "PROF_000001_20250102030600000_FUZZDB"
    if db.exists() and not prof_db.exists():
        (prof_db / "device_0" / "data").mkdir(parents=True)
        shutil.copyfile(db, prof_db / "msprof_20250102030600.db")  # --type=db: beside the raw data
    out["msprof db"] = prof_db
    old = FIXTURES / "pytorch-kineto-tb_plugin-2021q1/resnet50_profiler_api_num_workers_0/worker0.pt.trace.json.gz"
    plain = scratch / "kineto-json-seed" / "worker0.pt.trace.json"
    if old.exists() and not plain.exists():
        plain.parent.mkdir(parents=True)
        plain.write_bytes(gzip.decompress(old.read_bytes()))
    out["kineto json"] = plain
    ws = scratch / "settings-seed"
    if not ws.exists():
        shutil.copytree(REPO / "samples/tiny_transformer", ws, ignore=shutil.ignore_patterns("kineto", "__pycache__"))
        (ws / "pyproject.toml").write_text(_PYPROJECT.format())
    out["settings"] = ws
    ranks = scratch / "synth-db-ranks"
    if not ranks.exists():
        for r in (0, 1):
            synth.write_torch_npu_db(small_run(rank=r), ranks)  # type: ignore[attr-defined]
    out["db ranks"] = ranks
    return out


def families(scratch: Path) -> list[Family]:
    """Every family with its seed; ``scratch`` holds the generated seeds."""
    warm()
    fx = FIXTURES
    tiny = REPO / "samples/tiny_transformer"
    npu_sample = next((tiny / "npu_profile").glob("*_ascend_pt"))
    cnn_ranks = REPO / "samples/cnn_classifier/npu_profile"
    cnn_rank1 = next(p for p in cnn_ranks.glob("*_ascend_pt") if (p / "profiler_info_1.json").exists())
    text0 = fx / "Ascend-msinsight/text/level1/rank0_ascend_pt"
    out = [
        # -- torch_npu text export, every file including the optional ones
        Family("torch_npu text (sample)", npu_sample, (), check(), optional=OPTIONAL),
        Family("torch_npu text (real)", text0, (), check(), optional=OPTIONAL),
        Family("torch_npu text mstx (real)", fx / "verl-project-rl-insight/data/recipe/mstx_data/mstx_profile/agent_loop_rollout_replica_0/xxx_ascend_pt", (), check(), optional=OPTIONAL),
        Family("torch_npu memory-only (real)", fx / "verl-project-rl-insight/data/recipe/memory_data/20260526_085155_ascend_pt", (), check(), optional=("profiler_info*.json", "profiler_metadata.json")),
        Family("torch_npu csv reader (real)", fx / "Ascend-msprof-analyze/test/ut/advisor/compute_advice/data", ("kernel_details.csv",), _kernel_table),
        # -- torch_npu DB export
        Family("torch_npu DB (real)", fx / "Ascend-msinsight/db/level1/rank1_ascend_pt", (), check(), optional=OPTIONAL),
        # -- msprof CLI PROF_*
        Family("msprof CLI text (synthetic)", scratch / "msprof", (), check(), optional=OPTIONAL),
        Family("msprof CLI DB (real tables)", scratch / "msprof db", (), check()),
        # -- Kineto: new and old schema, json.gz and json
        Family("kineto gz (sample)", REPO / "samples/cnn_classifier/kineto/cnn_classifier.1795984064980515888.pt.trace.json.gz", ("",), check()),
        Family("kineto gz HTA (real)", fx / "HolisticTraceAnalysis/trace_filter/sampled_rank-1.json.gz", ("",), check()),
        Family("kineto gz HTA critical path (real)", fx / "HolisticTraceAnalysis/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz", ("",), check()),
        Family("kineto gz tb_plugin (real)", fx / "pytorch-kineto-tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz", ("",), check()),
        Family("kineto gz old schema (real)", fx / "pytorch-kineto-tb_plugin-2021q1/resnet50_autograd_api_num_workers_0/worker0.pt.trace.json.gz", ("",), check()),
        Family("kineto json old schema (real)", scratch / "kineto json", ("",), check()),
        # -- multi-rank jobs: one rank's file mutated, the whole job checked (the rank pool included)
        Family("multi-rank torch_npu text (sample)", cnn_ranks, (), check(), optional=ANY_FILE),
        Family("multi-rank torch_npu text (real)", fx / "Ascend-msinsight/text/level1", (), check(), optional=ANY_FILE),
        Family("multi-rank torch_npu DB (real)", fx / "Ascend-msinsight/db/level1", (), check(), optional=ANY_FILE),
        Family("multi-rank level2 text+DB (real)", fx / "Ascend-msinsight-st-level2/level2", (), check(), optional=ANY_FILE),
        Family("multi-rank torch_npu DB (synthetic)", scratch / "db ranks", (), check(), optional=ANY_FILE),
        Family("multi-rank kineto (real)", fx / "HolisticTraceAnalysis/trace_filter", ("sampled_rank-0.json.gz",), check(), optional=ANY_FILE),
        # -- settings and source
        # A setting may legitimately stop the run (a rank or profile path that is not there): errors
        # are clean outcomes here; internal errors and hangs (a 1 GiB or 100,000-deep pyproject) are not.
        Family("settings pyproject", scratch / "settings", ("pyproject.toml",), check()),
        Family("source via --check (sample)", tiny, ("model.py", "train.py"), check(), optional=ANY_FILE),
        Family("source (real)", fx / "pytorch-kineto-tb_plugin/workspace/resnet50_profiler_api.py", ("",), _source),
    ]
    try:
        seeds = _seeds(scratch)
    except Exception as exc:  # noqa: BLE001 - the generated families are reported as skipped, with why
        seeds, why = {}, f"no generated seed: {type(exc).__name__}: {exc}"
    else:
        why = ""
    for f in out:
        key = str(f.source.relative_to(scratch)) if f.source.is_relative_to(scratch) else None
        if key is not None:
            f.source = seeds.get(key, f.source)
            if key not in seeds or not f.source.exists():
                f.skip = why or f"generated seed {key!r} missing (needs the real fixtures)"
                continue
        if not f.source.exists():
            f.skip = f"fixture {f.source} not found (../shared is absent)"
            continue
        if not f.files:
            one_rank = {"multi-rank torch_npu text (sample)": cnn_rank1.name, "multi-rank torch_npu text (real)": "rank1_ascend_pt",
                        "multi-rank torch_npu DB (real)": "rank1_ascend_pt", "multi-rank level2 text+DB (real)": "rank_1_ascend_pt",
                        "multi-rank torch_npu DB (synthetic)": next((p.name for p in sorted(f.source.iterdir()) if p.is_dir()), "")}
            f.files = _files(f.source, one_rank.get(f.name, ""))
            if f.name.startswith("multi-rank level2"):  # rank 0 holds the text files: fuzz those too
                f.files += _files(f.source, "rank_0_ascend_pt", (".csv", ".json"), 8)
    return out


# -- running cases -------------------------------------------------------------------------------------


@dataclass(slots=True)
class Outcome:
    kind: str  # one of OUTCOMES
    detail: str = ""
    seconds: float = 0.0
    max_rss_kb: int = 0


def check_result(result: object, work: Path) -> str:
    """'' when a result passes the basic invariants, else what is wrong."""
    from msprof_lsp.mapping.profile.model import Profile

    if isinstance(result, CheckResult):
        if result.status == 2:
            line = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ""
            if "internal error" in line:
                return line[:300]
            if str(work) not in line and "/dev/zero" not in line:  # a special case's link is named by its target
                return f"error naming no file of the case: {line[:300]!r}"
            return ""
        if result.status not in (0, 1):
            return f"exit status {result.status}"
        if result.logged:
            return f"internal error logged: {result.logged[0][:300]}"
        if not result.profiles:
            return "a report without a loaded profile"
        import json

        try:
            json.loads(result.stdout)
        except ValueError as exc:
            return f"the JSON report does not parse: {exc}"
        for p in result.profiles:
            if bad := check_result(p, work):
                return bad
        return ""
    if isinstance(result, Profile):
        k = result.kernels
        if len(k) and "dur_ns" in k and (k["dur_ns"].to_numpy() < 0).any():
            return "a kernel with a negative duration"
        for s in result.steps:
            if s.end_ns < s.start_ns:
                return f"step {s} ends before it starts"
        for issue in result.issues:
            if not issue.path:
                return f"an issue without a file: {issue}"
    return ""


def _where(exc: BaseException) -> str:
    """The deepest frame in the product, and the last frame if that is elsewhere."""
    import traceback

    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return ""
    ours = [f for f in tb if "msprof_lsp" in f.filename or str(REPO) in f.filename and "/tests/" not in f.filename]
    last = tb[-1]
    at = f"{Path(last.filename).name}:{last.lineno}"
    if ours and ours[-1] is not last:
        at = f"{Path(ours[-1].filename).name}:{ours[-1].lineno} ({ours[-1].name}) > {at}"
    return at


def _stop_pool_servers() -> None:
    """Stop the forkserver a multi-rank case started and reap it, so its workers' peak memory is
    counted in ours (ru_maxrss of waited-for children)."""
    try:
        from multiprocessing import forkserver

        fs = forkserver._forkserver  # noqa: SLF001 - no public way to stop it
        if getattr(fs, "_forkserver_pid", None) is not None:
            fs._stop()  # noqa: SLF001
    except Exception:  # noqa: BLE001 - accounting only
        pass


def _prepare(family: Family, work: Path, kind: str, target: str, seed: int) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    copy = work / family.source.name
    if family.source.is_dir():
        shutil.copytree(family.source, copy, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        shutil.copy2(family.source, copy)
    for p in [copy, *copy.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)  # fixtures are read-only
    apply(copy / target if target else copy, kind, random.Random(seed))
    return copy


def _refused_or_error(family: Family, target: str) -> str:
    import fnmatch

    name = Path(target).name if target else family.source.name
    return "refused" if any(fnmatch.fnmatch(name, p) for p in family.optional) else "error"


def _forget_the_parents_pool_helpers() -> None:
    """A forked case inherits the parent's multiprocessing forkserver and resource tracker (a
    pytest process that ran a multi-rank load has both). They are not this child's children, so a
    pool here would fail in waitpid (ChildProcessError); each case starts its own, as a fresh
    ``--check`` does. Harness-only: the product never forks."""
    import sys

    if sys.platform == "win32":
        return
    from multiprocessing import forkserver, resource_tracker

    for helper in (forkserver._forkserver, resource_tracker._resource_tracker):  # noqa: SLF001
        for fd in (getattr(helper, "_forkserver_alive_fd", None), getattr(helper, "_fd", None)):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        helper.__init__()  # type: ignore[misc] - back to "not started"


def _child(family: Family, work: Path, kind: str, target: str, seed: int, mem_bytes: int, wfd: int) -> None:
    import faulthandler

    os.setpgid(0, 0)  # the parent ends the case's whole group (a pool's forkserver and workers)
    faulthandler.disable()  # a crash is the parent's finding, not a dump on the test's stderr
    _forget_the_parents_pool_helpers()
    try:
        copy = _prepare(family, work, kind, target, seed)
    except BaseException as exc:  # noqa: BLE001 - a harness fault, not a product one
        os.write(wfd, pickle.dumps(("internal", f"harness: cannot prepare the case: {type(exc).__name__}: {exc}", 0)))
        os._exit(0)
    os.chdir(work)  # --check resolves against the cwd, as in a shell in the workspace
    try:
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
    except (ValueError, OSError):
        pass
    from msprof_lsp.mapping.errors import ProfileError

    try:
        result = family.run(copy)
        bad = check_result(result, work)
        if bad:
            msg = ("internal", bad)
        elif isinstance(result, CheckResult) and result.status == 2:  # --check's own one-line error
            msg = (_refused_or_error(family, target), result.stderr.strip().splitlines()[-1][:300])
        else:
            msg = ("load", "")
    except ProfileError as exc:
        named = bool(exc.path) and exc.path in str(exc)
        msg = (_refused_or_error(family, target), str(exc)[:300]) if named else ("internal", f"ProfileError without a file: {exc}")
    except BaseException as exc:  # noqa: BLE001 - every other exception is what the fuzzer hunts
        msg = ("internal", f"{type(exc).__name__}: {str(exc)[:200]} at {_where(exc)}")
    _stop_pool_servers()
    rss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    os.write(wfd, pickle.dumps((*msg, rss)))
    os._exit(0)


@dataclass(slots=True)
class Case:
    family: Family
    kind: str
    target: str
    seed: int

    def label(self) -> str:
        return f"{self.target or self.family.source.name} / {self.kind} / seed {self.seed}"


class Running:
    """One case's forked child: its result pipe, deadline and the bytes read so far."""

    def __init__(self, case: Case, work: Path, timeout_s: float, mem_bytes: int) -> None:
        self.case, self.work, self.timeout_s = case, work, timeout_s
        if work.exists():
            shutil.rmtree(work)
        rfd, wfd = os.pipe()
        self.start = time.monotonic()
        self.deadline = self.start + timeout_s
        pid = os.fork()
        if pid == 0:
            os.close(rfd)
            try:
                _child(case.family, work, case.kind, case.target, case.seed, mem_bytes, wfd)
            finally:
                os._exit(3)
        os.close(wfd)
        try:
            os.setpgid(pid, pid)  # both sides set it: no race with a kill before the child ran
        except OSError:
            pass
        self.pid, self.rfd, self.data = pid, rfd, b""

    def fileno(self) -> int:
        return self.rfd

    def read(self) -> bool:
        """Read what is there; True at end of file (the child is done)."""
        chunk = os.read(self.rfd, 1 << 16)
        self.data += chunk
        return not chunk

    def finish(self, *, timed_out: bool = False, keep: bool = False) -> Outcome:
        try:
            os.killpg(self.pid, signal.SIGKILL)  # the child is still a zombie at worst: no pid reuse
        except OSError:
            pass
        _, status, usage = os.wait4(self.pid, 0)
        os.close(self.rfd)
        seconds = time.monotonic() - self.start
        if not keep:
            shutil.rmtree(self.work, ignore_errors=True)
        if timed_out:
            return Outcome("hang", f"no result after {self.timeout_s:.0f} s", seconds, usage.ru_maxrss)
        if not self.data:
            why = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
            return Outcome("crash", why, seconds, usage.ru_maxrss)
        kind, detail, rss = pickle.loads(self.data)
        return Outcome(kind, detail, seconds, max(usage.ru_maxrss, rss))


def run_case(family: Family, work: Path, kind: str, target: str, seed: int, *,
             timeout_s: float = 30.0, mem_bytes: int = MEM_CAP, keep: bool = False) -> Outcome:
    """One case in a forked child, waited for (``keep``: leave the mutated copy in ``work``)."""
    r = Running(Case(family, kind, target, seed), work, timeout_s, mem_bytes)
    while True:
        left = r.deadline - time.monotonic()
        if left <= 0:
            return r.finish(timed_out=True, keep=keep)
        ready, _, _ = select.select([r], [], [], left)
        if ready and r.read():
            return r.finish(keep=keep)


def run_many(cases: Iterable[Case], work: Path, jobs: int, *, timeout_s: float = 60.0,
             mem_bytes: int = MEM_CAP) -> Iterator[tuple[Case, Outcome]]:
    """Run ``cases`` with up to ``jobs`` children at once (each with its own folder, memory cap and
    time limit); yields each case with its outcome as it ends."""
    todo = iter(cases)
    free = [work / f"slot{j}" for j in range(max(1, jobs))]
    running: list[tuple[Running, Path]] = []
    try:
        yield from _run_loop(todo, free, running, timeout_s, mem_bytes)
    finally:  # an interrupted run ends its children's process groups too
        for r, _ in running:
            r.finish(timed_out=True)


def _run_loop(todo: Iterator[Case], free: list[Path], running: list[tuple[Running, Path]], timeout_s: float,
              mem_bytes: int) -> Iterator[tuple[Case, Outcome]]:
    exhausted = False
    while running or not exhausted:
        while free and not exhausted:
            case = next(todo, None)
            if case is None:
                exhausted = True
                break
            slot = free.pop()
            running.append((Running(case, slot, timeout_s, mem_bytes), slot))
        if not running:
            break
        now = time.monotonic()
        wait_s = max(0.0, min(r.deadline for r, _ in running) - now)
        ready, _, _ = select.select([r for r, _ in running], [], [], wait_s)
        now = time.monotonic()
        for r, slot in list(running):
            done, timed_out = False, False
            if r in ready and r.read():
                done = True
            elif now >= r.deadline:
                done, timed_out = True, True
            if done:
                running.remove((r, slot))
                free.append(slot)
                yield r.case, r.finish(timed_out=timed_out)


@dataclass(slots=True)
class Tally:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    max_rss_kb: int = 0
    seconds: float = 0.0
    examples: list[tuple[Case, Outcome]] = field(default_factory=list)

    def add(self, case: Case, out: Outcome, keep: int = 5) -> None:
        self.counts[out.kind] += 1
        self.max_rss_kb = max(self.max_rss_kb, out.max_rss_kb)
        self.seconds += out.seconds
        if out.kind in BAD_OUTCOMES and len(self.examples) < keep:
            self.examples.append((case, out))
