"""Every real Kineto fixture, read by the product and counted here independently.

The reference figures come from a few lines of gzip + json of this module's own (no product
reader): device events by category (both spellings: the 2021 schema's ``Kernel`` / ``Memcpy`` /
``Memset`` and the current ``kernel`` / ``gpu_memcpy`` / ``gpu_memset``), their summed durations,
the ``ProfilerStep#N`` spans, and the capture span. The figures are also stated here, so a test
fails if either the file or the counting changes. The product's figures compared: its kernel
table, its steps, and the ``--check --format json`` profile object.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from msprof_lsp.mapping.profile.locations import ProfileLocation
from msprof_lsp.mapping.profile.model import Backend, ProfileKind
from msprof_lsp.mapping.profile.readers.kineto import read
from msprof_lsp.server.__main__ import main
from tests.conftest import shared_fixture

DEVICE_CATS = {
    "Kernel": "kernel", "kernel": "kernel",
    "Memcpy": "memcpy", "gpu_memcpy": "memcpy",
    "Memset": "memset", "gpu_memset": "memset",
}
STEP = re.compile(r"ProfilerStep#(\d+)")


@dataclass(frozen=True)
class Figures:
    counts: dict[str, int]  # kernel / memcpy / memset events
    device_us: int  # their summed durations
    steps: list[tuple[int, int, int]]  # (N, ts, dur) of each ProfilerStep#N, µs
    capture_us: int  # first start to last end over the timed (numeric pid) complete events
    nccl_us: int = 0  # summed durations of the NCCL kernels among them (communication, not device work)


@dataclass(frozen=True)
class Case:
    relative: str
    expected: Figures


CASES = {
    "tb_plugin_resnet50": Case(
        "pytorch-kineto-tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
        Figures({"kernel": 8772, "memcpy": 12, "memset": 312}, 603_558,
                [(5, 1623142623460172, 176078), (6, 1623142623636318, 173992),
                 (7, 1623142623810379, 176918), (8, 1623142623987366, 181259),
                 (9, 1623142624168693, 176468), (10, 1623142624345228, 164261)], 1_065_658),
    ),
    "hta_alexnet_no_steps": Case(
        "HolisticTraceAnalysis/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
        Figures({"kernel": 79, "memcpy": 16, "memset": 3}, 66_203, [], 43_425_365),
    ),
    "hta_control": Case(
        "HolisticTraceAnalysis/trace_diff/control/control.json.gz",
        Figures({"kernel": 8568, "memcpy": 228, "memset": 654}, 501_567,
                [(1009, 1661203462598772, 75473), (1010, 1661203462674288, 76940),
                 (1011, 1661203462751272, 76212), (1012, 1661203462827528, 76727),
                 (1013, 1661203462904298, 78473), (1014, 1661203462982823, 81120)], 465_275, 163_535),
    ),
    "hta_sampled_rank0": Case(
        "HolisticTraceAnalysis/trace_filter/sampled_rank-0.json.gz",
        Figures({"kernel": 1154, "memcpy": 40, "memset": 10}, 607_844,
                [(551, 1682725898079292, 607312), (552, 1682725898686653, 622928)], 1_230_289, 396_199),
    ),
    "hta_sampled_rank1": Case(
        "HolisticTraceAnalysis/trace_filter/sampled_rank-1.json.gz",
        Figures({"kernel": 1104, "memcpy": 40, "memset": 10}, 667_530,
                [(551, 1682725898079484, 607904), (552, 1682725898687438, 630639)], 1_238_593, 379_053),
    ),
}


def independent(path: Path) -> Figures:
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    complete = [e for e in events if e.get("ph") == "X"]
    counts: Counter[str] = Counter()
    device = nccl = 0.0
    for e in complete:
        kind = DEVICE_CATS.get(e.get("cat"))
        if kind:
            counts[kind] += 1
            device += e["dur"]
            if kind == "kernel" and "nccl" in str(e.get("name", "")).lower():
                nccl += e["dur"]
    steps = sorted(
        (int(m.group(1)), int(e["ts"]), int(e["dur"]))
        for e in complete if (m := STEP.fullmatch(str(e.get("name", ""))))
    )
    # The profiler's own rows ("Spans"/"Traces" pids) are not part of the capture.
    timed = [e for e in complete if str(e.get("pid")).isdigit()]
    capture = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed)
    return Figures(dict(counts), int(device), steps, int(capture), int(nccl))


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    c = CASES[request.param]
    path = shared_fixture(c.relative)
    return c, path, read(ProfileLocation(ProfileKind.KINETO, path))


def test_the_independent_count_gives_the_stated_figures(case):
    c, path, _ = case
    assert independent(path) == c.expected


def test_device_events_and_their_time(case):
    c, _, profile = case
    k = profile.kernels
    cores = Counter(k["core"])
    # NCCL kernels are GPU kernels too; the model files them as COMMUNICATION
    assert cores["GPU"] + cores["COMMUNICATION"] == c.expected.counts["kernel"]
    assert cores["MEMCPY"] == c.expected.counts["memcpy"]
    assert cores["MEMSET"] == c.expected.counts["memset"]
    assert int(k["dur_ns"].sum()) == c.expected.device_us * 1000
    assert profile.meta.backend is Backend.CUDA
    # every device event is linked to the op that launched it (External id / correlation)
    assert (k["host_op"] >= 0).all()


def test_steps(case):
    c, _, profile = case
    if c.expected.steps:
        got = [(s.id, s.start_ns, s.dur_ns) for s in profile.steps]
        assert got == [(n, ts * 1000, dur * 1000) for n, ts, dur in c.expected.steps]
        assert not profile.meta.steps_from_capture
        assert not [i for i in profile.issues if "step markers" in i.message]
    else:
        # no markers: one step, the measured span of the capture, said in one notice
        assert profile.meta.steps_from_capture
        assert [s.dur_ns for s in profile.steps] == [c.expected.capture_us * 1000]
        notes = [i.message for i in profile.issues if "step markers" in i.message]
        assert notes == ["no step markers (ProfilerStep#N) and no repeating launch sequence: the capture's "
                         "measured span, first event to last, 43,425.4 ms, is used as the one step"]
    # all timestamps here are whole µs (JSON integers): exact, so no precision notice
    assert not [i for i in profile.issues if "float64" in i.message]


def check_json(capsys, profile_path: Path, workspace: Path) -> dict:
    code = main(["--check", str(workspace), "--profile", str(profile_path), "--no-cache", "--format", "json"])
    out = capsys.readouterr().out
    assert code in (0, 1)
    return json.loads(out)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


def test_check_reports_steps_and_device_time_per_step(case, capsys, tmp_path):
    c, path, _ = case
    doc = check_json(capsys, path, tmp_path)
    prof = doc["profile"]
    steps = max(len(c.expected.steps), 1)
    assert prof["backend"] == "cuda" and prof["kind"] == "kineto"
    assert prof["steps"] == steps
    # device time is device work: kernels, copies and sets, not NCCL collectives (docs/numbers.md)
    assert prof["device_time_us"] == pytest.approx((c.expected.device_us - c.expected.nccl_us) / steps, rel=0.01)
    if c.expected.steps:
        mean = sum(d for _, _, d in c.expected.steps) / steps
        assert (prof["step_time_source"], prof["step_time_us"]) == ("ProfilerStep", pytest.approx(mean, abs=0.001))
    else:
        assert (prof["step_time_source"], prof["step_time_us"]) == ("capture span", c.expected.capture_us)
    for f in doc["findings"]:
        assert 0.0 <= f["share"] <= 1.0, (f["code"], f["message"])
    assert sum(h["share"] for h in doc["hotspots"]) <= 1.0 + 1e-9


def test_alexnet_says_it_has_no_steps_and_no_share_exceeds_one(capsys, tmp_path):
    path = shared_fixture(CASES["hta_alexnet_no_steps"].relative)
    doc = check_json(capsys, path, tmp_path)
    notes = [i for i in doc["profile"]["issues"] if "step markers" in i]
    assert len(notes) == 1
    by_code = {f["code"]: f for f in doc["findings"]}
    # NPU108 measured inside the one window (it said 232.3 % of step before), NPU105 against it
    sync = by_code["NPU108"]
    assert sync["evidence"]["host_us_per_step"] <= sync["evidence"]["wall_step_us"]
    if "NPU105" in by_code:
        idle = by_code["NPU105"]["evidence"]
        assert idle["free_us_per_step"] + idle["computing_us_per_step"] <= idle["step_us"]
    else:  # the device idle is the sync's: one finding per cause (hints.consolidate), NPU105 its related entry
        assert "NPU105" in sync["evidence"]["same_cause"]
        folded = next(x for x in sync["evidence"]["same_cause_findings"] if x["code"] == "NPU105")
        assert 0 < folded["share"] <= 1 and folded["share_of"] == "device-step"
        assert f"({folded['share'] * 100:.1f}% of the device step)" in folded["message"]
    for f in doc["findings"]:
        assert 0.0 <= f["share"] <= 1.0, (f["code"], f["message"])


def forward_device_us_by_script_line(path: Path) -> Counter[int]:
    """Independent forward attribution of the tb_plugin trace: each device event's launching op by
    ``external id``, that op's ``Call stack`` (or, without one, that of the innermost op around it
    on its thread), the line of the script's frame in it. Ops of the autograd thread carry no
    script frame and are left out (the product reaches them through the backward links)."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    ops = [e for e in events if e.get("cat") == "Operator"]
    by_ext = {e["args"]["External id"]: e for e in ops}
    with_stack: dict[str, list[dict]] = {}
    for e in ops:
        if e["args"].get("Call stack"):
            with_stack.setdefault(e["tid"], []).append(e)

    def stack(op: dict) -> str:
        if op["args"].get("Call stack"):
            return op["args"]["Call stack"]
        around = [o for o in with_stack.get(op["tid"], [])
                  if o["ts"] <= op["ts"] and op["ts"] + op["dur"] <= o["ts"] + o["dur"]]
        return min(around, key=lambda o: o["dur"])["args"]["Call stack"] if around else ""

    per_line: Counter[int] = Counter()
    for e in events:
        if e.get("cat") in ("Kernel", "Memcpy", "Memset"):
            m = re.search(r"resnet50_profiler_api\.py\((\d+)\)", stack(by_ext[e["args"]["external id"]]))
            if m:
                per_line[int(m.group(1))] += e["dur"]
    return per_line


def test_tb_plugin_hot_ops_map_to_the_profiled_script(capsys):
    c = CASES["tb_plugin_resnet50"]
    path = shared_fixture(c.relative)
    workspace = shared_fixture("pytorch-kineto-tb_plugin/workspace")
    expected = forward_device_us_by_script_line(path)
    # stated: model(inputs) 46, the two .to(device) copies 44, optimizer.step() 51, zero_grad() 49,
    # criterion 47 (µs over the six steps)
    assert expected == {46: 196_469, 44: 11_492, 51: 7_883, 49: 1_026, 47: 60, 50: 6}
    doc = check_json(capsys, path, workspace)
    assert doc["profile"]["has_call_stacks"] is True
    forward: Counter[int] = Counter()
    lines: dict[int, set[str]] = {}
    for h in doc["hotspots"]:
        assert h["path"].endswith("workspace/resnet50_profiler_api.py")
        forward[h["line"]] += h["forward_us"]
        lines.setdefault(h["line"], set()).add(h["code"])
    for line, total_us in expected.items():
        assert forward[line] == pytest.approx(total_us / 6, rel=1e-3), line
    assert lines[46] == {"outputs = model(inputs)"}
    assert lines[51] == {"optimizer.step()"} and lines[49] == {"optimizer.zero_grad()"}
    # with the backward kernels (linked to their forward ops) most of the device time is mapped
    assert doc["profile"]["mapped_share"] > 0.9


def test_hta_rank_folder_is_one_two_rank_job(capsys, tmp_path):
    folder = shared_fixture("HolisticTraceAnalysis/trace_filter")
    doc = check_json(capsys, folder, tmp_path)
    prof = doc["profile"]
    assert prof["ranks"] == [0, 1]
    mean = {r: sum(d for _, _, d in CASES[f"hta_sampled_rank{r}"].expected.steps) / 2 for r in (0, 1)}
    cluster = {r["rank"]: r["step_time_us"] for r in prof["cluster"]["ranks"]}
    assert cluster == {0: pytest.approx(mean[0], abs=0.001), 1: pytest.approx(mean[1], abs=0.001)}
    # the slowest rank (1: 619,271.5 µs per step) is the one analysed
    assert (prof["rank"], prof["cluster"]["slowest_rank"]) == (1, 1)


def float64_tensor_kernels(path: Path) -> int:
    """Device events launched by an op with a float64 *tensor* input (a ``double`` type with dims;
    Python float arguments are typed double too, with no dims)."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    ext = set()
    for e in events:
        a = e.get("args") or {}
        if e.get("cat") in ("cpu_op", "Operator") and any(
                str(t).lower() == "double" and d for t, d in zip(a.get("Input type", []), a.get("Input Dims", []))):
            ext.add(a["External id"])
    return sum(1 for e in events if DEVICE_CATS.get(e.get("cat"))
               and (e["args"].get("External id") or e["args"].get("external id")) in ext)


def test_float64_kernels_only_where_a_float64_tensor_launched_them(case, capsys, tmp_path):
    # None of the real traces runs a float64 kernel: their double-typed inputs are scalars
    # (SGD momentum, batch-norm eps) or CPU-side [1] tensors that launch nothing on the GPU.
    c, path, _ = case
    assert float64_tensor_kernels(path) == 0
    doc = check_json(capsys, path, tmp_path)
    assert "NPU201" not in {f["code"] for f in doc["findings"]}
