"""benchmarks/gen_large_trace.py writes what the load benchmark claims to measure: a spec-exact
result whose every kernel links (checked here against the json/csv modules, not the product)."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path

from msprof_lsp.mapping.profile.load import load_location, locate

GEN = Path(__file__).resolve().parents[2] / "benchmarks" / "gen_large_trace.py"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_large_trace", GEN)
    gen = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = gen  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(gen)
    finally:
        sys.modules.pop(spec.name, None)
    return gen


def test_generated_result_is_valid_and_fully_linked(tmp_path: Path) -> None:
    gen = _generator()
    root = gen.generate(tmp_path, 0.3, layers=8)
    out = root / "ASCEND_PROFILER_OUTPUT"
    events = json.loads((out / "trace_view.json").read_text(encoding="utf-8"))
    hw = {e["pid"] for e in events if e["ph"] == "M" and e.get("args", {}).get("name") == "Ascend Hardware"}
    kernels = [e for e in events if e["ph"] == "X" and e["pid"] in hw]
    flows = Counter((e["name"], e["ph"]) for e in events if e["ph"] in "sf")
    assert flows[("torch_to_npu", "s")] == flows[("torch_to_npu", "f")] == len(kernels) > 0
    with open(out / "kernel_details.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(kernels) and all(r["Start Time(us)"].endswith("\t") for r in rows)
    assert (out / "trace_view.json").read_bytes().count(b"\\r\\n") > 0  # ";\r\n"-joined stacks

    prof = load_location(locate(root), use_cache=False)
    assert not prof.issues, prof.issues
    assert len(prof.kernels) == len(kernels) == prof.meta.extra["kernel_details_matched"]
    links = Counter(prof.kernels["link"].astype(str))
    steps = {e["name"] for e in events if e["name"].startswith("ProfilerStep#")}
    assert set(links) == {"stack", "backward"} and len(prof.steps) == len(steps)
    # every backward kernel resolved to a forward op whose ancestor carries the stack
    bwd = prof.kernels[prof.kernels["backward"]]
    assert (bwd["fwd_op"] >= 0).all() and (bwd["stack"] >= 0).all()


def test_written_sources_take_every_kernel_to_its_layer_call(tmp_path: Path) -> None:
    """What bench_large / bench_vs_advisor check is a mapped job: each unit's kernels land on
    its own line of the written model.py (41-44), and ``steps=`` writes exactly that many steps."""
    from msprof_lsp.mapping.source.attribute import attribute
    from msprof_lsp.mapping.source.workspace import SourceWorkspace

    gen = _generator()
    gen.write_sources(tmp_path)
    root = gen.generate(tmp_path / "prof", 0, layers=8, steps=2)
    prof = load_location(locate(root), use_cache=False)
    assert len(prof.steps) == 2
    heat = attribute(prof, SourceWorkspace([tmp_path])).heat
    model = str((tmp_path / "model.py").resolve())
    lines = {h.line for h in heat.lines if h.path == model and h.device_ns > 0}
    assert lines == {u.line for u in gen.UNITS}, lines
    assert heat.mapped_share == 1.0  # every kernel carries a stack into the written files
