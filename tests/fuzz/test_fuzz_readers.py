"""A bounded, derandomized fuzz run over every input family (benchmarks/fuzz.py runs long ones).

Property: each mutated input either goes through the product's entry (``--check`` in-process for
profiles, settings and source) or ends in the product's own error naming a file of the case --
never another exception, never a hang, never a dead process. The cases below are fixed (family x
three mutation kinds, rotated so that every kind is met), so a failure is reproducible as is."""

from __future__ import annotations

import gzip
import os
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fuzz import fuzzkit

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "win32",
                                reason="the fuzz cases run in forked children")

NAMES = [
    "torch_npu text (sample)", "torch_npu text (real)", "torch_npu text mstx (real)", "torch_npu memory-only (real)",
    "torch_npu csv reader (real)", "torch_npu DB (real)", "msprof CLI text (synthetic)", "msprof CLI DB (real tables)",
    "kineto gz (sample)", "kineto gz HTA (real)", "kineto gz HTA critical path (real)", "kineto gz tb_plugin (real)",
    "kineto gz old schema (real)", "kineto json old schema (real)", "multi-rank torch_npu text (sample)",
    "multi-rank torch_npu text (real)", "multi-rank torch_npu DB (real)", "multi-rank level2 text+DB (real)",
    "multi-rank torch_npu DB (synthetic)", "multi-rank kineto (real)", "settings pyproject",
    "source via --check (sample)", "source (real)",
]
PER_FAMILY = 2  # cases per family (and the seed as is): a few seconds of CPU per family
# Bombs are left to benchmarks/fuzz.py: a gigabyte bomb against a reader that buffers first takes
# the whole time limit; the harness's bomb builders are tested below instead.
SMALL_KINDS = [k for k in fuzzkit.KINDS if k != "bombs"]


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    return {f.name: f for f in fuzzkit.families(tmp_path_factory.mktemp("fuzz-seeds"))}


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz-work")


def test_every_family_is_covered_here(families):
    assert sorted(families) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_mutated_inputs_load_or_fail_cleanly(families, work, name):
    family = families[name]
    if family.skip:
        pytest.skip(family.skip)
    # The seed itself loads: a family whose seed the product refuses fuzzes nothing but that error.
    out = fuzzkit.run_case(family, work / "case", "none", family.files[0], 0, timeout_s=60)
    assert out.kind == "load", f"{name}: the unmutated seed: {out.kind}: {out.detail}"
    i = NAMES.index(name)
    rnd = random.Random(i)
    failures = []
    for j in range(PER_FAMILY):
        kind = SMALL_KINDS[(i * PER_FAMILY + j) % len(SMALL_KINDS)]
        target = family.files[(i + j) % len(family.files)]
        seed = rnd.randrange(1 << 32)
        out = fuzzkit.run_case(family, work / "case", kind, target, seed, timeout_s=60)
        if out.kind not in ("load", "error"):
            failures.append(f"{name} / {target} / {kind} / seed {seed}: {out.kind}: {out.detail}")
    assert not failures, "\n".join(failures)


def test_a_case_forked_from_a_process_that_has_a_forkserver_starts_its_own(families, work):
    """In the full suite, earlier tests load multi-rank jobs in the pytest process, which then holds
    a forkserver; each forked case inherited it and failed in waitpid (ChildProcessError)."""
    import multiprocessing
    from multiprocessing import forkserver

    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("no forkserver on this platform")
    family = families["multi-rank torch_npu DB (synthetic)"]
    if family.skip:
        pytest.skip(family.skip)
    forkserver.ensure_running()  # as after an in-process multi-rank load
    out = fuzzkit.run_case(family, work / "case", "none", family.files[0], 0, timeout_s=120)
    assert out.kind == "load", out.detail


# -- the harness itself --------------------------------------------------------------------------


def _probe(work: Path, run, optional: tuple[str, ...] = ()) -> fuzzkit.Outcome:
    seed = work / "seed.txt"
    seed.write_text("x")
    family = fuzzkit.Family("probe", seed, ("",), run, optional=optional)
    return fuzzkit.run_case(family, work / "probe", "truncation", "", 1, timeout_s=3)


def test_the_harness_sees_internal_errors_hangs_and_crashes(work):
    """The property cannot pass by accident: a broken entry is reported as such."""

    def boom(_: Path) -> object:
        raise IndexError("list index out of range")

    def stuck(_: Path) -> object:
        time.sleep(30)

    def dies(_: Path) -> object:
        os.kill(os.getpid(), 11)

    def unnamed(_: Path) -> object:  # --check's exit 2 with a line that names no file of the case
        return fuzzkit.CheckResult(2, "", "msprof-lsp: error: something went wrong\n")

    def internal_line(copy: Path) -> object:
        return fuzzkit.CheckResult(2, "", f"msprof-lsp: internal error while reading {copy}: KeyError: 'x'\n")

    def bad_report(_: Path) -> object:
        return fuzzkit.CheckResult(0, "{not json", "")

    def rule_failed(_: Path) -> object:  # the engine logs a rule that raised and goes on: exit 0
        return fuzzkit.CheckResult(0, "{}", "", [], ["rule NPU102 (grad-accumulation) failed: OverflowError: x"])

    def named(copy: Path) -> object:
        return fuzzkit.CheckResult(2, "", f"msprof-lsp: warning: x\nmsprof-lsp: error: {copy}: no profile found\n")

    for run, expected in ((boom, "internal"), (stuck, "hang"), (dies, "crash"), (unnamed, "internal"),
                          (internal_line, "internal"), (bad_report, "internal"), (rule_failed, "internal"),
                          (named, "error")):
        assert _probe(work, run).kind == expected, run.__name__
    # the same clean error on a file the docs promise to drop with a notice
    assert _probe(work, named, optional=("seed.*",)).kind == "refused"
    assert _probe(work, named, optional=("other.*",)).kind == "error"


def test_a_hang_takes_its_whole_process_group_with_it(work):
    """A hung case's helpers (a rank pool's forkserver and workers) end with it."""
    pidfile = work / "grandchild.pid"

    def spawns_and_hangs(_: Path) -> object:
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        pidfile.write_text(str(p.pid))
        time.sleep(60)

    assert _probe(work, spawns_and_hangs).kind == "hang"
    pid = int(pidfile.read_text())
    time.sleep(0.2)
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():  # dead, awaiting its new parent's wait (a zombie), or gone altogether
        assert stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    else:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_parallel_runs_give_the_same_outcomes_as_one_at_a_time(families, work):
    family = families["torch_npu csv reader (real)"]
    if family.skip:
        pytest.skip(family.skip)
    cases = [fuzzkit.Case(family, kind, "kernel_details.csv", 7) for kind in ("truncation", "numbers", "special", "encoding")]
    one = {c.kind: o.kind for c, o in fuzzkit.run_many(cases, work / "one", 1)}
    two = {c.kind: o.kind for c, o in fuzzkit.run_many(cases, work / "two", 2)}
    assert one == two and len(one) == 4
    assert not any((work / "two").glob("slot*/*"))  # each case's copy is removed after it


def test_gzip_bomb_inflates_to_what_it_says_and_stays_small():
    block = b" " * (1 << 20)
    bomb = fuzzkit.gzip_bomb(b'{"traceEvents": [', block, 64, b"]}")
    assert len(bomb) < 200_000  # 64 MiB inflated
    assert gzip.decompress(bomb) == b'{"traceEvents": [' + block * 64 + b"]}"  # CRC and size are right


def test_sparse_bomb_takes_no_disk(tmp_path):
    f = tmp_path / "trace_view.json"
    f.write_bytes(b"[]")
    fuzzkit.sparse_bomb(f, random.Random(0))
    st = f.stat()
    assert st.st_size > 1 << 30 and st.st_blocks * 512 < 1 << 20


def test_number_kinds_write_what_the_campaign_found():
    data = b'{"pid": 12, "tid": 34, "size": 56, "device": "NPU:0"}'
    big = {fuzzkit.big_numbers(data, random.Random(s)) for s in range(40)}
    assert any(b"18446744073709551616" in d or b"9223372036854775808" in d for d in big)
    uni = {fuzzkit.unicode_digits(data, random.Random(s)) for s in range(40)}
    assert any("²".encode() in d for d in uni) and any("٣".encode() in d for d in uni)
    dev = {fuzzkit.device_names(data, random.Random(s)) for s in range(40)}
    assert any(b"NPU:" + b"9" * 20 in d for d in dev)


def test_db_mutations_change_cells_and_multiply_rows(tmp_path):
    db = tmp_path / "x.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE TASK (startNs INTEGER, name TEXT)")
    con.executemany("INSERT INTO TASK VALUES (?, ?)", [(i, "a") for i in range(100)])
    con.commit()
    con.close()
    fuzzkit.apply(db, "bombs", random.Random(1))  # 0.8 of DB bombs go through SQL; seed 1 is one
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM TASK").fetchone()[0] >= 25_600
    before = db.read_bytes()
    fuzzkit.db_mutation(db, "big numbers", random.Random(2))
    assert db.read_bytes() != before


def test_replay_reruns_a_printed_case(families, capsys):
    sys.path.insert(0, str(fuzzkit.REPO))
    from benchmarks import fuzz

    family = families["torch_npu csv reader (real)"]
    if family.skip:
        pytest.skip(family.skip)
    case = fuzzkit.Case(family, "numbers", "kernel_details.csv", 3964771417)
    line = fuzz.replay_command(case)
    import shlex

    argv = shlex.split(line)[2:]  # after "python benchmarks/fuzz.py"
    assert fuzz.main(argv) == 0
    assert "torch_npu csv reader (real): kernel_details.csv / numbers / seed 3964771417: " in capsys.readouterr().out


@pytest.mark.skipif(not fuzzkit.FIXTURES.is_dir(), reason="the csv reader family reads ../shared/fixtures")
def test_campaign_prints_peak_memory_per_family(capsys):
    sys.path.insert(0, str(fuzzkit.REPO))
    from benchmarks import fuzz

    status = fuzz.main(["--cases", "3", "--jobs", "2", "--family", "csv reader"])
    out = capsys.readouterr().out
    assert "peak RSS" in out and "torch_npu csv reader (real)" in out and "3 cases in" in out
    assert status in (0, 1)


# Cases long runs of benchmarks/fuzz.py found (each was an internal error before its fix).
FOUND = [
    ("torch_npu csv reader (real)", "numbers", "kernel_details.csv", 3964771417),  # a 5,000-digit time cell
    ("msprof CLI text (synthetic)", "numbers", "host/info.json", 2190361058),  # int(inf) of a 400-digit value
    ("kineto gz HTA (real)", "numbers", "", 3055143488),  # an int past int64 in Input Dims
    ("kineto gz HTA (real)", "encoding", "", 3277108649),  # bad UTF-8 in an arg list
    # issue 22's campaign on the merged fixes (each internal or refused before):
    ("multi-rank torch_npu DB (real)", "numbers", "rank1_ascend_pt/profiler_info_1.json", 3428884937),  # codec overflow
    ("torch_npu text (real)", "device names", "ASCEND_PROFILER_OUTPUT/memory_record.csv", 2435985552),  # NPU:<20 digits>
    ("kineto gz HTA (real)", "big numbers", "", 2662782419),  # past int64
    ("torch_npu DB (real)", "unicode digits", "ASCEND_PROFILER_OUTPUT/analysis.db", 2381134998),  # int(inf)
    ("msprof CLI DB (real tables)", "device names", "msprof_20250102030600.db", 2104593779),  # "²" in a cell
    ("settings pyproject", "numbers", "pyproject.toml", 1852206616),  # a 5,000-digit integer in TOML
    ("torch_npu DB (real)", "truncation", "profiler_info_1.json", 930847394),  # optional file stopped the run
    ("torch_npu text (sample)", "numbers", "ASCEND_PROFILER_OUTPUT/trace_view.json", 1956904949),  # 5,000-digit frame line
    ("multi-rank torch_npu DB (real)", "numbers", "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_1.db",
     3812294419),  # a hang: a rowid of ±2^63 and a read that walked the rowid range
    # the 20,000-case campaign, seed 26: an exponent Decimal refuses (InvalidOperation)
    ("multi-rank level2 text+DB (real)", "big numbers", "rank_1_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json",
     198136578),
    ("torch_npu DB (real)", "big numbers", "ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_1.db", 3766273911),  # a BLOB cell
    ("multi-rank torch_npu DB (synthetic)", "numbers", "train-node-0_2894371_20250109091251000_ascend_pt/profiler_info_0.json",
     3057402100),  # a 400-digit _gc_detect_threshold
    ("settings pyproject", "nesting", "pyproject.toml", 1918809061),  # a profile path too long to stat (seed 29)
    ("settings pyproject", "nesting", "pyproject.toml", 2221777633),  # a baseline path too long to stat (seed 30)
]


@pytest.mark.parametrize("name,kind,target,seed", FOUND)
def test_cases_found_by_long_runs(families, work, name, kind, target, seed):
    family = families[name]
    if family.skip:
        pytest.skip(family.skip)
    assert target in family.files
    out = fuzzkit.run_case(family, work / "found", kind, target, seed, timeout_s=60)
    assert out.kind in ("load", "error"), out.detail


def test_row_bombs_skip_a_table_with_a_unique_key(tmp_path):
    """A harness fault once: doubling ENUM_MODULE broke its primary key and the case was counted
    as internal before the product ever ran."""
    db = tmp_path / "x.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE ENUM_MODULE (id INTEGER PRIMARY KEY, name TEXT)")
        con.executemany("INSERT INTO ENUM_MODULE VALUES (?, ?)", [(i, "m") for i in range(10)])
    con.close()
    fuzzkit.db_mutation(db, "bombs", random.Random(0))  # does not raise
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM ENUM_MODULE").fetchone()[0] == 10
    con.close()
