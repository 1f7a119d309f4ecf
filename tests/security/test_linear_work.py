"""Work grows linearly with the input, and memory is bounded before buffering (issue 22, item 5).

No wall-time thresholds: each scaling test counts work -- Python line events inside the critical
path module (``sys.settrace``) plus the segments its per-line pass touches (a list that counts
what is read from it, slices included) -- for n and 4n hostile rows, and asserts the count grew
within a constant factor of 4x. The quadratic versions grow 16x. The gzip tests configure a small
decompressed-size limit and count the bytes the reader inflated before it refused.
"""

from __future__ import annotations

import gzip
import json
import sys
import tracemalloc
import zlib
from collections.abc import Callable

import numpy as np
import pytest

from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.profile.model import (
    HOST_EVENT_SCHEMA,
    HOST_OP_SCHEMA,
    KERNEL_SCHEMA,
    Profile,
    ProfileKind,
    ProfileMeta,
    Step,
    make_table,
)
from msprof_lsp.mapping.source import critical_path as cp_mod
from msprof_lsp.mapping.source.critical_path import critical_path, step_paths
from msprof_lsp.mapping.source.heat import Attribution, LineHeat, Site, SourceHeat
from msprof_lsp.mapping.spans import Confidence, Span

# ---------------------------------------------------------------------------------------------
# Hostile profiles of n rows (benchmarks/bench_critical_path.py times the same cases)


def _profile(host_ops: dict, kernels: dict, events: dict | None = None, end_ns: int = 0) -> Profile:
    p = Profile(meta=ProfileMeta(ProfileKind.TORCH_NPU, "/nowhere"), host_ops=make_table(HOST_OP_SCHEMA, host_ops),
                kernels=make_table(KERNEL_SCHEMA, kernels))
    if events:
        p.host_events = make_table(HOST_EVENT_SCHEMA, events)
    p.steps = [Step(1, 0, end_ns)]
    return p


def unmatched_tasks(n: int) -> Profile:
    """One linked kernel, then ``n`` device tasks whose connection id matched no host op (as extra
    DB TASK rows give): one stream, a gap before each, so the path is 2n segments of task and wait."""
    starts = [30] + [100 + 20 * i for i in range(n)]
    return _profile(
        {"name": ["ProfilerStep#1", "aten::mm"], "start_ns": [0, 10], "dur_ns": [25, 10],
         "pid": [1, 1], "tid": [1, 1]},
        {"name": ["gemm"] + ["task"] * n, "core": ["AI_CORE"] * (n + 1), "start_ns": starts,
         "dur_ns": [10] * (n + 1), "stream": [7] * (n + 1), "device": [0] * (n + 1), "step": [1] * (n + 1),
         "host_op": [1] + [-1] * n},
        end_ns=200 + 20 * n,
    )


def event_tasks(n: int) -> Profile:
    """Stream 2 records one event; stream 1 then records ``n`` events of its own, each followed by
    an EVENT_WAIT: every wait's source is the one record of stream 2, behind all of stream 1's."""
    names = ["gemm", "EVENT_RECORD"] + ["EVENT_RECORD", "EVENT_WAIT"] * n
    starts = [20, 40] + [s for i in range(n) for s in (100 + 20 * i, 110 + 20 * i)]
    m = len(names)
    return _profile(
        {"name": ["ProfilerStep#1", "aten::mm"], "start_ns": [0, 10], "dur_ns": [25, 5],
         "pid": [1, 1], "tid": [1, 1]},
        {"name": names, "core": ["AI_CORE"] + [""] * (m - 1), "start_ns": starts, "dur_ns": [5] * m,
         "stream": [7, 2] + [1] * (2 * n), "device": [0] * m, "step": [1] * m, "host_op": [1] + [-1] * (m - 1)},
        end_ns=200 + 20 * n,
    )


def thread_launches(n: int) -> Profile:
    """``n`` host threads, each with one op that launches one kernel."""
    return _profile(
        {"name": ["ProfilerStep#1"] + ["aten::add"] * n, "start_ns": [0] + [10 + i for i in range(n)],
         "dur_ns": [20 * n + 100] + [5] * n, "pid": [1] * (n + 1), "tid": [0] + list(range(1, n + 1))},
        {"name": ["add"] * n, "core": ["AI_CORE"] * n, "start_ns": [20 + 10 * i for i in range(n)],
         "dur_ns": [5] * n, "stream": [7] * n, "device": [0] * n, "step": [1] * n, "host_op": list(range(1, n + 1))},
        end_ns=20 * n + 200,
    )


def overlapping_ops(n: int) -> Profile:
    """``n`` host ops on one thread that overlap without nesting (each ends after the next began,
    first ended first), plus runtime calls inside them; one linked kernel."""
    return _profile(
        {"name": ["ProfilerStep#1"] + ["op"] * n, "start_ns": [0] + [10 + 2 * i for i in range(n)],
         "dur_ns": [10 * n + 100] + [3 * n] * n, "pid": [1] * (n + 1), "tid": [1] * (n + 1)},
        {"name": ["k"], "core": ["AI_CORE"], "start_ns": [20], "dur_ns": [5], "stream": [7], "device": [0],
         "step": [1], "host_op": [1]},
        {"name": ["aclrtSynchronizeStream"] * n, "cat": ["runtime"] * n, "start_ns": [11 + 2 * i for i in range(n)],
         "dur_ns": [1] * n, "pid": [1] * n, "tid": [1] * n},
        end_ns=10 * n + 200,
    )


def attribution(p: Profile) -> Attribution:
    """Every kernel and host op on one source line."""
    sites = [Site(Span("/w/m.py", 3, 0, 3, 5), Confidence.STACK, "f", "a()")]
    heat = SourceHeat(1.0, 1, [], [LineHeat("/w/m.py", 3, 1, 1.0, 1.0)], [], 1, 1, 0)
    return Attribution(sites, np.zeros(len(p.kernels), np.int64), np.zeros(len(p.host_ops), np.int64), heat)


# ---------------------------------------------------------------------------------------------
# Counting work


class CountingList(list):
    """A list that counts the items read from it: by index, by slice, by iteration."""

    reads = 0

    def __getitem__(self, key):  # noqa: ANN001, ANN204
        got = super().__getitem__(key)
        CountingList.reads += len(got) if isinstance(key, slice) else 1
        return got

    def __iter__(self):  # noqa: ANN204
        CountingList.reads += len(self)
        return super().__iter__()


def line_events(fn: Callable[[], object]) -> int:
    """Python lines executed inside mapping/source/critical_path.py while ``fn`` runs."""
    target = cp_mod.__file__
    count = 0

    def local(frame, event, arg):  # noqa: ANN001, ANN202
        nonlocal count
        if event == "line":
            count += 1
        return local

    def calls(frame, event, arg):  # noqa: ANN001, ANN202
        return local if frame.f_code.co_filename == target else None

    old = sys.gettrace()
    sys.settrace(calls)
    try:
        fn()
    finally:
        sys.settrace(old)
    return count


def path_work(p: Profile) -> int:
    """Work of the step graphs and paths, then of the per-line pass over the path's segments."""
    work = line_events(lambda: step_paths(p))
    for sp in step_paths(p).steps:
        sp.segments = CountingList(sp.segments)
    CountingList.reads = 0
    work += line_events(lambda: critical_path(p, attribution(p)))
    return work + CountingList.reads


def growth(build: Callable[[int], Profile], n: int) -> float:
    return path_work(build(4 * n)) / path_work(build(n))


@pytest.mark.parametrize("build", [unmatched_tasks, event_tasks, thread_launches, overlapping_ops])
def test_critical_path_work_grows_linearly(build):
    p = build(300)
    cp = critical_path(p, attribution(p))
    assert cp.unavailable is None and cp.steps and cp.lines
    # 4x the rows: 4x the work, give or take the sorts' log factor; quadratic work would be 16x
    assert growth(build, 300) < 6


def test_unmatched_tasks_path_is_all_of_them():
    """The scaling case is a real path: every unlinked task is on it, with the gap before it."""
    cp = critical_path(unmatched_tasks(50), None)
    kernels = [s.kernel for s in cp.steps[0].segments if s.kernel >= 0]
    assert kernels[-50:] == list(range(1, 51))


def test_event_waits_find_the_other_streams_record():
    """Each EVENT_WAIT of stream 1 waits for stream 2's record, the latest record of another
    stream of its device, however many of its own stream's records come between."""
    p = event_tasks(20)
    g, _ = cp_mod.step_graph(p, p.steps[0])
    event = g.dep == cp_mod._DEPS.index(cp_mod.Dependency.EVENT)
    # the record's end node is the source of each event edge: all the same node, one per wait
    assert event.sum() == 20
    assert len(set(g.src[event].tolist())) == 1
    rec_node = int(g.src[event][0])
    assert g.time[rec_node] == 45  # stream 2's record ends at 40 + 5


# ---------------------------------------------------------------------------------------------
# gzip: the limits are checked while inflating, into one buffer


def _text(n: int, seed: int = 7) -> bytes:
    """``n`` bytes of JSON-like event lines that compress about 5x, as traces do (far under the
    200:1 ratio rule): a fixed template with random digits in its numbers."""
    line = np.frombuffer(b'{"ph": "X", "cat": "kernel", "ts": 000000, "dur": 00},\n', dtype=np.uint8)
    holes = np.flatnonzero(line == ord("0"))
    rows = -(-n // len(line))
    block = np.tile(line, (rows, 1))
    block[:, holes] = np.random.default_rng(seed).integers(0, 10, (rows, len(holes)), dtype=np.uint8) + ord("0")
    return block.tobytes()[:n]


class _Counting:
    """Wraps a zlib decompressor and counts every byte it inflates."""

    inflated = 0

    def __init__(self, inner) -> None:  # noqa: ANN001
        self._inner = inner

    def decompress(self, data, max_length=0):  # noqa: ANN001, ANN201
        out = self._inner.decompress(data, max_length)
        _Counting.inflated += len(out)
        return out

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._inner, name)


@pytest.fixture
def count_inflated(monkeypatch):
    real = zlib.decompressobj
    monkeypatch.setattr(zlib, "decompressobj", lambda *a, **k: _Counting(real(*a, **k)))
    _Counting.inflated = 0
    return _Counting


def test_gzip_bomb_refused_as_the_limit_is_crossed(tmp_path, count_inflated):
    """A gzip inflating to 3x the (configured) decompressed-size limit is refused with the limit
    and the file named, having inflated one byte past the limit, and never holding more than
    the limit and one chunk."""
    limit = 8 * safe_io.MiB
    path = tmp_path / "bomb.pt.trace.json.gz"
    path.write_bytes(gzip.compress(_text(3 * limit), 1))
    small = safe_io.Limits(whole_file_bytes=limit)
    tracemalloc.start()
    try:
        with pytest.raises(safe_io.LimitExceeded) as err:
            safe_io.read_maybe_gzip(path, small)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert err.value.limit is safe_io.Limit.INFLATED_SIZE
    assert str(path) in str(err.value) and "decompressed size" in str(err.value)
    assert count_inflated.inflated <= limit + 1  # the old reader went on to the end of a 4 MiB block
    assert peak <= limit + 2 * safe_io.INFLATE_CHUNK + safe_io.MiB


def test_gzip_ratio_rule_while_inflating(tmp_path, count_inflated):
    """Past the ratio floor, output more than 200x the input read so far is refused at once."""
    path = tmp_path / "zeros.json.gz"
    path.write_bytes(gzip.compress(b" " * (40 * safe_io.MiB), 9))
    small = safe_io.Limits(ratio_floor_bytes=4 * safe_io.MiB)
    with pytest.raises(safe_io.LimitExceeded) as err:
        safe_io.read_maybe_gzip(path, small)
    assert err.value.limit is safe_io.Limit.INFLATE_RATIO and str(path) in str(err.value)
    assert count_inflated.inflated <= small.ratio_floor_bytes + safe_io.INFLATE_CHUNK


def test_gzip_inflates_into_one_buffer(tmp_path):
    """A trace inflates into one buffer sized from the gzip trailer: no list of chunks joined, no
    final copy (the old reader held a growing bytearray and then its bytes copy: twice the size)."""
    text = _text(24 * safe_io.MiB)
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text, 1))
    tracemalloc.start()
    try:
        data = safe_io.read_maybe_gzip(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert data == text
    assert peak <= len(text) + 3 * safe_io.INFLATE_CHUNK + safe_io.MiB  # the chunk, zlib's own blocks, input


def test_gzip_members_padding_truncation_and_damage(tmp_path):
    """Concatenated members inflate to the concatenation (zero padding between them is allowed);
    a cut stream and a wrong checksum are refused naming the file."""
    a, b = _text(100_000, 1), _text(300_000, 2)
    path = tmp_path / "m.json.gz"
    path.write_bytes(gzip.compress(a) + b"\0" * 16 + gzip.compress(b))
    assert safe_io.read_maybe_gzip(path) == a + b
    whole = gzip.compress(a)
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(safe_io.ProfileError, match="ends early") as err:
        safe_io.read_maybe_gzip(path)
    assert str(path) in str(err.value)
    damaged = bytearray(whole)
    damaged[-6] ^= 0xFF  # the CRC-32 in the trailer
    path.write_bytes(bytes(damaged))
    with pytest.raises(safe_io.ProfileError, match="corrupt gzip data"):
        safe_io.read_maybe_gzip(path)
    path.write_bytes(whole + b"garbage")
    with pytest.raises(safe_io.ProfileError, match="corrupt gzip data"):
        safe_io.read_maybe_gzip(path)


def test_plain_file_read_into_one_buffer(tmp_path):
    text = _text(1_000_000)
    path = tmp_path / "t.json"
    path.write_bytes(text)
    assert safe_io.read_maybe_gzip(path) == text
    with pytest.raises(safe_io.LimitExceeded) as err:
        safe_io.read_maybe_gzip(path, safe_io.Limits(whole_file_bytes=999_999))
    assert err.value.limit is safe_io.Limit.FILE_SIZE


# ---------------------------------------------------------------------------------------------
# Kineto: the JSON text is not held while the profile is built


def test_kineto_buffer_released_before_the_tables_are_built(tmp_path):
    """The decoder's undecoded arg lists are views into the whole JSON text; once the events are
    bucketed none is left, so the text's buffer is free while the tables are built (a bytearray
    with a view into it cannot be resized: that is the check)."""
    from msprof_lsp.mapping.profile.readers import kineto
    from msprof_lsp.mapping.profile.readers.kineto_json import decode

    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0,
          "args": {"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"], "Concrete Inputs": ["", ""]}}
    flow = {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "id": 1, "pid": 1, "tid": 1, "ts": 1.0,
            "args": {"Input Dims": [[1]]}}
    data = bytearray(b'{"traceEvents": [' + b",".join([json.dumps(op).encode()] * 50 + [json.dumps(flow).encode()])
                     + b"]}")
    trace = decode(tmp_path / "t.json", data)
    buckets = kineto._Buckets(trace.batches)
    assert len(buckets.host) == 50 and len(buckets.flows) == 1
    trace.batches = ()
    data.extend(b" ")  # BufferError while any event still viewed the text
    assert buckets.host.col("dims")[:1] == ["2,3;3,4"]


def test_event_sources_match_the_scan_back_they_replace():
    """On random record/wait mixes (few devices, streams and end times, so ties abound), the
    sorted lookup picks what scanning back from the latest record not after each wait picked."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        end = rng.integers(0, 12, n)
        dev, stream = rng.integers(0, 3, n), rng.integers(0, 3, n)
        is_rec = rng.random(n) < 0.5
        rec, waits = np.flatnonzero(is_rec), np.flatnonzero(~is_rec)
        if not len(rec) or not len(waits):
            continue
        o = np.argsort(end[rec], kind="stable")
        rec_sorted, rec_end = rec[o].tolist(), end[rec][o]
        want = []
        for r in waits.tolist():
            j = int(np.searchsorted(rec_end, end[r], side="right")) - 1
            while j >= 0 and (dev[rec_sorted[j]] != dev[r] or stream[rec_sorted[j]] == stream[r]):
                j -= 1
            if j >= 0:
                want.append((rec_sorted[j], r))
        src, dst = cp_mod._event_sources(rec, waits, end, dev, stream)
        assert list(zip(src.tolist(), dst.tolist())) == want


def test_count_le_is_a_search_in_each_block():
    rng = np.random.default_rng(5)
    major = np.sort(rng.integers(0, 6, 300))
    minor = np.concatenate([np.sort(rng.integers(0, 50, int((major == m).sum()))) for m in range(6)])
    q_major, q_minor = rng.integers(0, 7, 500), rng.integers(-1, 52, 500)
    first = np.searchsorted(major, np.arange(8))
    want = [int(first[a] + np.searchsorted(minor[first[a]:first[a + 1]], b, side="right"))
            for a, b in zip(q_major.tolist(), q_minor.tolist())]
    assert cp_mod._count_le(major, minor, q_major, q_minor).tolist() == want


def test_kineto_reader_peak_is_a_small_multiple_of_a_trace_of_small_events(tmp_path, monkeypatch):
    """Events of ~90 bytes used to cost ~630 bytes and 12 objects each while the whole trace was
    held decoded (peak 7.4x the file here); decoded a block at a time straight into columns, the
    peak is the text, the columns and the tables (3.9x here). Blocks are made small so the test's
    trace spans many, as a real one spans many of the default 4 MiB."""
    from msprof_lsp.mapping.profile.locations import ProfileLocation
    from msprof_lsp.mapping.profile.model import ProfileKind
    from msprof_lsp.mapping.profile.readers import kineto, kineto_json

    events = []
    for i in range(45_000):
        t = 3 * i
        if i % 3 == 2:
            events.append({"ph": "X", "cat": "kernel", "name": "k_add", "pid": 0, "tid": 7, "ts": t + 0.5, "dur": 1,
                           "args": {"correlation": i}})
        else:
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::add" if i % 2 else "aten::mul", "pid": 1,
                           "tid": 2, "ts": t + 0.25, "dur": 1.5})
    path = tmp_path / "small_events.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 1 << 60}, separators=(",", ":")))
    del events
    size = path.stat().st_size
    assert size / 45_000 < 100
    monkeypatch.setattr(kineto_json, "CHUNK_BYTES", 256 * 1024)
    tracemalloc.start()
    try:
        profile = kineto.read(ProfileLocation(ProfileKind.KINETO, path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(profile.host_ops) == 30_000 and len(profile.kernels) == 15_000
    assert peak <= 5 * size, f"peak {peak / size:.1f}x the file"


def test_kineto_block_cut_inside_a_long_string_grows_geometrically(tmp_path, monkeypatch):
    """A string full of "},{" offers a false cut every 3 bytes; a block cut inside it cannot parse
    and grows. Grown cut by cut, a 1 MiB string meant ~350,000 decodes of a growing block
    (quadratic: a hang); doubled, a few dozen cuts in all, and the events are read."""
    from msprof_lsp.mapping.profile.readers import kineto_json

    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0}
    long = dict(op, args={"Call stack": "},{" * 350_000})
    text = json.dumps({"traceEvents": [op] * 200 + [long] + [op] * 200}).encode()
    cuts = 0
    real_cut = kineto_json._cut_after

    def counting(inner, pos):
        nonlocal cuts
        cuts += 1
        return real_cut(inner, pos)

    monkeypatch.setattr(kineto_json, "_cut_after", counting)
    monkeypatch.setattr(kineto_json, "CHUNK_BYTES", 1000)
    blocks = list(kineto_json.decode(tmp_path / "t.json", bytearray(text)).batches)
    assert sum(map(len, blocks)) == 401
    assert cuts <= 200, cuts  # ~40 blocks of 1000 bytes, plus ~11 doublings for the long event


def test_db_integer_columns_read_in_chunks_of_rows_not_of_the_rowid_range(tmp_path, monkeypatch):
    """A rowid of -2^63 beside one of 2^63-1 made the chunked integer read walk the rowid range:
    2^63 / chunk queries, a hang in the fuzz campaign. Now the work follows the rows."""
    import sqlite3

    from msprof_lsp.mapping.profile.readers import sqlite_db

    path = tmp_path / "x.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE T (id INTEGER PRIMARY KEY, v INTEGER)")
    con.executemany("INSERT INTO T VALUES (?, ?)", [(-(2 ** 63), 1), (0, 2), (2 ** 63 - 1, 3)]
                    + [(i, i) for i in range(10, 20)])
    con.commit()
    con.close()
    monkeypatch.setattr(sqlite_db, "INT_CHUNK_ROWS", 4)
    db = sqlite_db.SqliteDb(path)
    queries = []
    real = db.query

    def counted(sql, params=()):
        queries.append(sql)
        assert len(queries) < 50, "the read walks the rowid range, not the rows"  # fail, never hang
        return real(sql, params)

    monkeypatch.setattr(db, "query", counted)
    frame = db.frame("T", {"id": (("id",), "int"), "v": (("v",), "int")})
    assert frame["v"].tolist() == [1, 2, *range(10, 20), 3]  # rowid order
    assert frame["id"].tolist()[0] == -(2 ** 63) and frame["id"].tolist()[-1] == 2 ** 63 - 1
    assert len(queries) <= 2 + -(-13 // 4)  # the catalogue query, the bounds, one per 4 rows
