"""Mutation fuzzing of the readers (shared by tests/fuzz and benchmarks/fuzz.py).

A *family* is one reader entry point with its seed inputs: a real fixture or a sample copied to a
scratch folder, and the files of it that get mutated. A *case* is (family, file, mutation, seed).
Each case runs in a forked child with a memory cap and a time limit, so a hang or a crash is
counted instead of taking the run down; the child reports how the load ended:

- ``load``: the reader returned a Profile that passes basic invariants;
- ``error``: the product's own ProfileError, whose message names a file;
- ``internal``: any other exception, or a ProfileError that names no file, or a broken invariant;
- ``hang``: the time limit passed; ``crash``: the child died (a signal, the memory cap).
"""

from __future__ import annotations

import gzip
import os
import pickle
import random
import resource
import select
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO.parent / "shared" / "fixtures"
OUTCOMES = ("load", "error", "internal", "hang", "crash")

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


_DIGITS = (b"9" * 400, b"1e308", b"-1e308", b"-1", b"0", b"NaN", b"Infinity", b"1" * 5000, b"18446744073709551616",
           # issue 22: int64 + 1 as text, "²" (isdigit() yes, int() no), Arabic-Indic 3, inf as text
           b"9223372036854775808", "\u00b2".encode(), "\u0663".encode(), b"1e999")


def numbers(data: bytes, rnd: random.Random) -> bytes:
    import re

    runs = [m.span() for m in re.finditer(rb"\d+(?:\.\d+)?", data[:2_000_000])]
    if not runs:
        return data + rnd.choice(_DIGITS)
    out = bytearray(data)
    for a, b in sorted(rnd.sample(runs, min(len(runs), rnd.choice((1, 3, 20)))), reverse=True):
        out[a:b] = rnd.choice(_DIGITS)
    return bytes(out)


def nesting(data: bytes, rnd: random.Random) -> bytes:
    depth = rnd.choice((100, 1_000, 50_000))
    open_, close = (b"[", b"]") if rnd.random() < 0.5 else (b'{"a":', b"}")
    i = rnd.randrange(len(data) + 1)
    return data[:i] + open_ * depth + b"1" + close * depth + data[i:]


MUTATIONS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "truncation": truncate, "byte damage": damage, "encoding": encoding, "structure": structure,
    "numbers": numbers, "nesting": nesting,
}
SPECIAL = ("fifo", "dev-zero", "directory", "empty")
KINDS = (*MUTATIONS, "special")


def apply(target: Path, kind: str, rnd: random.Random) -> None:
    """Mutate ``target`` in place (a special file replaces it). A gzip file gets its content
    mutated and compressed again, mostly: damage to the compressed bytes only tests zlib."""
    if kind != "special":
        data = target.read_bytes()
        if data[:2] == b"\x1f\x8b" and rnd.random() < 0.8:
            target.write_bytes(gzip.compress(MUTATIONS[kind](gzip.decompress(data), rnd), 1))
        else:
            target.write_bytes(MUTATIONS[kind](data, rnd))
        return
    how = rnd.choice(SPECIAL)
    target.unlink()
    if how == "fifo" and hasattr(os, "mkfifo"):
        os.mkfifo(target)
    elif how == "dev-zero" and os.path.exists("/dev/zero"):
        target.symlink_to("/dev/zero")
    elif how == "directory":
        target.mkdir()
    else:
        target.write_bytes(b"")


# -- families ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class Family:
    name: str
    source: Path  # a folder or file copied per case
    files: tuple[str, ...]  # relative to the copy: what gets mutated ("" = the copy itself)
    run: Callable[[Path], object]  # the copy -> result (raises ProfileError on clean failure)
    skip: str = ""  # why the family cannot run here ("" = it can)


def _load(kind_name: str) -> Callable[[Path], object]:
    def run(copy: Path) -> object:
        from msprof_lsp.mapping.profile.load import load_location
        from msprof_lsp.mapping.profile.locations import ProfileLocation
        from msprof_lsp.mapping.profile.model import ProfileKind

        kind = ProfileKind(kind_name)
        path = copy
        if kind is ProfileKind.TORCH_NPU_DB:
            path = next(copy.glob("ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler*.db"), copy)
        return load_location(ProfileLocation(kind, path), use_cache=False)

    return run


def _source(copy: Path) -> object:
    from msprof_lsp.hints.fixes import cst_tools
    from msprof_lsp.mapping.source.workspace import SourceWorkspace

    ws = SourceWorkspace([copy.parent])
    index = ws.index(str(copy))
    text = ws.text(str(copy))
    if text is not None:
        cst_tools.parse(text)
    return index if index is not None else ws.error(str(copy)) or "unreadable"


def _msprof_seed(scratch: Path) -> Path:
    import sys

    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))
    from tests.synth import write_msprof_cli
    from tests.synth.examples import small_run

    done = scratch / "msprof-seed"
    if not done.exists():
        write_msprof_cli(small_run(), done)
    return next(done.glob("PROF_*"))


def warm() -> None:
    """Import what the readers use before forking, so each case pays only for its own work."""
    import msprof_lsp.hints.fixes.cst_tools  # noqa: F401
    import msprof_lsp.mapping.profile.load  # noqa: F401
    import msprof_lsp.mapping.profile.readers.ascend_csv  # noqa: F401
    import msprof_lsp.mapping.profile.readers.trace_json  # noqa: F401
    import msprof_lsp.mapping.profile.readers.registry  # noqa: F401 - every reader module
    import msprof_lsp.mapping.source.workspace  # noqa: F401


def families(scratch: Path) -> list[Family]:
    """The reader families with their seeds; ``scratch`` holds generated seeds (msprof)."""
    warm()
    npu_sample = next((REPO / "samples/tiny_transformer/npu_profile").glob("*_ascend_pt"))
    out = [
        Family("torch_npu text (sample)", npu_sample,
               ("ASCEND_PROFILER_OUTPUT/trace_view.json", "ASCEND_PROFILER_OUTPUT/kernel_details.csv",
                "ASCEND_PROFILER_OUTPUT/step_trace_time.csv", "ASCEND_PROFILER_OUTPUT/operator_details.csv",
                "profiler_info_0.json", "profiler_metadata.json"), _load("torch_npu")),
        Family("kineto (sample)", REPO / "samples/cnn_classifier/kineto/cnn_classifier.1795984064980515888.pt.trace.json.gz",
               ("",), _load("kineto")),
        Family("source (sample)", REPO / "samples/tiny_transformer/model.py", ("",), _source),
    ]
    fx = FIXTURES
    real = [
        Family("torch_npu text (real)", fx / "Ascend-msprof-analyze/test/ut/advisor/timeline_advice", ("trace_view.json",),
               lambda copy: __import__("msprof_lsp.mapping.profile.readers.trace_json", fromlist=["x"]).read_trace_events(copy / "trace_view.json")),
        Family("torch_npu csv (real)", fx / "Ascend-msprof-analyze/test/ut/advisor/compute_advice/data", ("kernel_details.csv",),
               lambda copy: __import__("msprof_lsp.mapping.profile.readers.ascend_csv", fromlist=["x"]).read_kernel_table(copy / "kernel_details.csv")),
        Family("torch_npu DB (real)", fx / "Ascend-msinsight/db/level1/rank1_ascend_pt",
               ("ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_1.db", "ASCEND_PROFILER_OUTPUT/analysis.db", "profiler_info_1.json"),
               _load("torch_npu_db")),
        Family("kineto (real)", fx / "HolisticTraceAnalysis/trace_filter/sampled_rank-1.json.gz", ("",), _load("kineto")),
        Family("source (real)", fx / "pytorch-kineto-tb_plugin/workspace/resnet50_profiler_api.py", ("",), _source),
    ]
    for f in real:
        if not f.source.exists():
            f.skip = f"real fixture {f.source} not found (../shared is absent)"
    out += real
    try:
        out.append(Family("msprof CLI (synthetic)", _msprof_seed(scratch), _msprof_files(_msprof_seed(scratch)), _load("msprof")))
    except Exception as exc:  # noqa: BLE001 - the family is reported as skipped, with why
        out.append(Family("msprof CLI (synthetic)", scratch, ("",), _load("msprof"), skip=f"no msprof seed: {exc}"))
    return out


def _msprof_files(root: Path) -> tuple[str, ...]:
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    return tuple(f for f in files if f.endswith((".json", ".csv", ".db")))[:12]


# -- running one case ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Outcome:
    kind: str  # one of OUTCOMES
    detail: str = ""
    seconds: float = 0.0
    max_rss_kb: int = 0


def check_result(result: object) -> str:
    """'' when a loaded result passes the basic invariants, else what is wrong."""
    from msprof_lsp.mapping.profile.model import Profile

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


def _child(family: Family, copy: Path, mem_bytes: int, wfd: int) -> None:
    import faulthandler

    faulthandler.disable()  # a crash is the parent's finding, not a dump on the test's stderr
    try:
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
    except (ValueError, OSError):
        pass
    from msprof_lsp.mapping.errors import ProfileError

    try:
        result = family.run(copy)
        bad = check_result(result)
        msg = ("internal", f"invariant: {bad}") if bad else ("load", "")
    except ProfileError as exc:
        named = bool(exc.path) and exc.path in str(exc)
        msg = ("error", str(exc)[:300]) if named else ("internal", f"ProfileError without a file: {exc}")
    except BaseException as exc:  # noqa: BLE001 - every other exception is what the fuzzer hunts
        import traceback

        tb = traceback.extract_tb(exc.__traceback__)[-1]
        msg = ("internal", f"{type(exc).__name__}: {str(exc)[:200]} at {tb.filename}:{tb.lineno}")
    os.write(wfd, pickle.dumps(msg))
    os._exit(0)


def run_case(family: Family, work: Path, kind: str, target: str, seed: int, *,
             timeout_s: float = 30.0, mem_bytes: int = 3 << 30) -> Outcome:
    """Copy the family's seed into ``work``, mutate ``target``, load it in a child process."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    copy = work / family.source.name
    if family.source.is_dir():
        shutil.copytree(family.source, copy)
    else:
        shutil.copy2(family.source, copy)
    for p in [copy, *copy.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)  # fixtures are read-only
    apply(copy / target if target else copy, kind, random.Random(seed))
    rfd, wfd = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        _child(family, copy, mem_bytes, wfd)
    os.close(wfd)
    data = b""
    deadline = start + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            _, _, usage = os.wait4(pid, 0)
            os.close(rfd)
            return Outcome("hang", f"no result after {timeout_s:.0f} s", timeout_s, usage.ru_maxrss)
        ready, _, _ = select.select([rfd], [], [], left)
        if ready:
            chunk = os.read(rfd, 1 << 16)
            if not chunk:
                break
            data += chunk
    os.close(rfd)
    _, status, usage = os.wait4(pid, 0)
    seconds = time.monotonic() - start
    if not data:
        why = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
        return Outcome("crash", why, seconds, usage.ru_maxrss)
    kind_out, detail = pickle.loads(data)
    return Outcome(kind_out, detail, seconds, usage.ru_maxrss)


@dataclass(slots=True)
class Tally:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    max_rss_kb: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, case: str, out: Outcome) -> None:
        self.counts[out.kind] += 1
        self.max_rss_kb = max(self.max_rss_kb, out.max_rss_kb)
        if out.kind in ("internal", "hang", "crash") and len(self.examples) < 5:
            self.examples.append(f"{case}: {out.kind}: {out.detail}")
