"""The samples' generated NPU profiles: up to date, pointing at real lines, showing the seed problems.

Expectations are read straight from the committed files (json / csv) and the sample sources
(ast), independently of the generator.
"""

from __future__ import annotations

import ast
import csv
import importlib.util
import json
import re
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest

from tests.synth.sample_runs import SourceIndex

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"
REMOTE = "/home/ma-user/work/"
FRAME_RE = re.compile(r"^(?P<file>.*)\((?P<line>\d+)\): (?P<func>.*)$")


def ns(text: str) -> int:
    return int(Decimal(text.strip()) * 1000)


def roots(sample: str) -> list[Path]:
    return sorted((SAMPLES / sample / "npu_profile").glob("*_ascend_pt"))


def load_trace(root: Path) -> list[dict]:
    return json.loads((root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text(encoding="utf-8"))


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def functions(path: Path) -> dict[str, list[tuple[int, int]]]:
    """Function name -> (first, last) line ranges, from the sample's own AST."""
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name].append((node.lineno, node.end_lineno))
    return out


def test_committed_profiles_are_up_to_date():
    spec = importlib.util.spec_from_file_location("make_npu_profiles", SAMPLES / "make_npu_profiles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0, "run: python samples/make_npu_profiles.py"


@pytest.mark.parametrize("sample,ranks", [("cnn_classifier", 2), ("tiny_transformer", 1)])
def test_layout_size_and_marker(sample, ranks):
    found = roots(sample)
    assert len(found) == ranks
    assert sorted(p.name for r in found for p in r.glob("profiler_info_*.json")) == [
        f"profiler_info_{i}.json" for i in range(ranks)]
    for r in found:
        assert (r / "ASCEND_PROFILER_OUTPUT" / "analyse.done").exists()
    size = sum(p.stat().st_size for p in (SAMPLES / sample / "npu_profile").rglob("*") if p.is_file())
    assert size < 2 * 1024 * 1024
    text = (SAMPLES / sample / "npu_profile" / "GENERATED.md").read_text(encoding="utf-8")
    assert "generated" in text and "python samples/make_npu_profiles.py" in text


@pytest.mark.parametrize("sample", ["cnn_classifier", "tiny_transformer"])
def test_every_workspace_frame_points_at_a_real_line(sample):
    checked = 0
    for root in roots(sample):
        stacks = {e["args"]["Call stack"] for e in load_trace(root) if "Call stack" in e.get("args", {})}
        for stack in stacks:
            for frame in stack.split(";\r\n"):
                m = FRAME_RE.match(frame)
                assert m, frame
                if not m["file"].startswith(REMOTE):
                    assert "site-packages/" in m["file"]
                    continue
                rel = m["file"][len(REMOTE):]
                assert rel.split("/")[0] == sample
                local = SAMPLES / rel
                line, func = int(m["line"]), m["func"]
                source = local.read_text(encoding="utf-8").splitlines()
                assert source[line - 1].strip(), frame  # a real, non-empty line
                if func == "<module>":
                    assert not any(a <= line <= b for spans in functions(local).values() for a, b in spans)
                else:
                    assert any(a < line <= b for a, b in functions(local)[func]), frame
                checked += 1
    assert checked > 50


def _innermost_user_line(op: dict) -> tuple[str, str]:
    for frame in op["args"]["Call stack"].split(";\r\n"):
        m = FRAME_RE.match(frame)
        if m["file"].startswith(REMOTE):
            path = SAMPLES / m["file"][len(REMOTE):]
            return path.name, path.read_text(encoding="utf-8").splitlines()[int(m["line"]) - 1]
    raise AssertionError("no user frame")


def test_cnn_stacks_anchor_the_relu_dropout_lines():
    trace = load_trace(roots("cnn_classifier")[0])
    lines = defaultdict(set)
    for e in trace:
        if e.get("cat") == "cpu_op" and e["name"] in ("aten::relu", "aten::dropout") and "Call stack" in e["args"]:
            lines[e["name"]].add(_innermost_user_line(e)[1].strip())
    for snippet in ("x = self.drop(self.act(self.fc1(x)))", "x = F.dropout(F.relu(self.fc2(x))", "x = self.embed(x)"):
        assert any(snippet in text for text in lines["aten::dropout"]), snippet
    assert any("self.drop(self.act(" in t for t in lines["aten::relu"])


def _step_ranges(trace):
    return {int(e["name"].split("#")[1]): (ns(e["ts"]), ns(e["ts"]) + round(e["dur"] * 1000))
            for e in trace if e.get("cat") == "cpu_op" and e["name"].startswith("ProfilerStep#")}


def test_cnn_shows_the_seed_problems():
    for root in roots("cnn_classifier"):
        out = root / "ASCEND_PROFILER_OUTPUT"
        steps = read_csv(out / "step_trace_time.csv")
        kernels = read_csv(out / "kernel_details.csv")
        trace = load_trace(root)
        assert len(steps) == 2
        for row in steps:
            stage = ns(row["Stage"])
            assert stage == ns(row["Computing"]) + ns(row["Communication(Not Overlapped)"]) + ns(row["Free"])
            share = ns(row["Communication(Not Overlapped)"]) / stage
            assert 0.3 <= share <= 0.45, share  # NPU102: HCCL not overlapped over a third of the step
            step_kernels = [k for k in kernels if k["Step Id"] == row["Step"]]
            transdata = sum(ns(k["Duration(us)"]) for k in step_kernels if k["Type"] == "TransData")
            assert transdata / stage >= 0.05  # NPU103
            pair = [k for k in step_kernels if k["Type"] in ("Relu", "DropOutGenMaskV4", "DropOutDoMask")]
            assert len(pair) >= 9 and all(ns(k["Duration(us)"]) < 50_000 for k in pair)  # NPU101
        ranges = _step_ranges(trace)
        loaders = [e for e in trace if e.get("name", "").startswith("enumerate(DataLoader)#")]
        assert len(loaders) == len(ranges) and all(e["dur"] > 10_000 for e in loaders)  # NPU104, µs
        items = [e for e in trace if e.get("name") == "aten::item"]
        syncs = [e for e in trace if e.get("name") == "AscendCL@aclrtSynchronizeStream"]
        dev_syncs = [e for e in trace if e.get("name") == "AscendCL@aclrtSynchronizeDevice"]
        assert len(items) == len(syncs) == len(dev_syncs) == len(ranges)  # NPU108
        hcom = [k for k in kernels if k["Type"] == "hcom_allReduce_"]
        assert len(hcom) == 2 and all(k["Accelerator Core"] == "COMMUNICATION" for k in hcom)
        assert json.loads((out / "communication_matrix.json").read_text())


def _outermost_aten_sequence(trace) -> str:
    """NPU21x: aten ops not nested in the previously kept aten op, in ts order, joined by '-'."""
    ops = sorted((e for e in trace if e.get("cat") == "cpu_op" and e["name"].startswith("aten::")
                  and "Call stack" in e["args"]), key=lambda e: ns(e["ts"]))
    kept, end = [], -1
    for e in ops:
        start = ns(e["ts"])
        if start >= end:
            kept.append(e["name"][len("aten::"):])
            end = start + round(e["dur"] * 1000)
    return "-".join(kept)


def test_transformer_shows_the_seed_problems():
    (root,) = roots("tiny_transformer")
    out = root / "ASCEND_PROFILER_OUTPUT"
    trace = load_trace(root)
    seq = _outermost_aten_sequence(trace)
    patterns = {
        "NPU210": r"(pow-){0,1}(mean-){0,1}(add-){0,1}rsqrt-mul",
        "NPU211": r"(slice|chunk)-silu-mul",
        "NPU212": r"chunk-neg-cat-(mul-){0,2}add",
        "NPU213": r"matmul-(mul-){0,1}(masked_fill_-){0,1}(add-){0,1}softmax-(dropout-){0,1}matmul",
        "NPU215": r"(permute|transpose)-(contiguous-){0,1}(reshape|view)",
        "NPU221": r"add-reciprocal-mul",
    }
    for code, pattern in patterns.items():
        assert re.search(pattern, seq), code
    mm = [k for k in read_csv(out / "kernel_details.csv") if k["Type"] == "MatMulV3"]
    shapes = {k["Input Shapes"].strip('"') for k in mm}
    big = [s for s in shapes if s.split(";")[1].split(",")[1] == "32003"]
    assert big and int(big[0].split(";")[1].split(",")[1]) % 256  # NPU106: N not a multiple of 256
    names = {e["name"] for e in trace if e.get("cat") == "cpu_op"}
    assert "Optimizer.step#AdamW.step" in names and "aten::_fused_adamw_" not in names  # NPU220
    assert "aten::item" in names


def test_source_index_finds_unique_lines_only():
    idx = SourceIndex(SAMPLES / "cnn_classifier" / "model.py", "/remote/model.py")
    line = idx.line("self.drop(self.act(", "CNNClassifier.forward")
    assert "self.drop(self.act(self.fc1(x)))" in idx.lines[line - 1]
    with pytest.raises(LookupError):
        idx.line("nn.Linear(")  # several lines
    with pytest.raises(LookupError):
        idx.line("no such call")
    assert idx.frame("self.drop(self.act(", "CNNClassifier.forward").def_line == idx.def_line("CNNClassifier.forward")


def test_cnn_fc1_relu_dropout_is_dispatch_bound():
    """hint-rules NPU101: the kernels of `self.drop(self.act(self.fc1(x)))` each < 50 µs, and the
    device waits on their launches (mean Wait Time >= 5 µs)."""
    root = roots("cnn_classifier")[0]
    trace = load_trace(root)
    ops = [e for e in trace if e.get("cat") == "cpu_op"]
    anchors = [e for e in ops if e["name"] in ("aten::relu", "aten::dropout") and "Call stack" in e["args"]
               and "self.drop(self.act(self.fc1(x)))" in _innermost_user_line(e)[1]]
    assert len(anchors) == 4  # relu + dropout, two steps
    spans = [(e["tid"], ns(e["ts"]), ns(e["ts"]) + round(e["dur"] * 1000)) for e in anchors]
    starts = {(e["tid"], e["ts"]) for e in ops
              if any(t == e["tid"] and a <= ns(e["ts"]) < b for t, a, b in spans)}
    kernel_ts = {e["id"] for e in trace if e.get("name") == "torch_to_npu" and e["ph"] == "s"
                 and (e["tid"], e["ts"]) in starts}
    rows = [r for r in read_csv(root / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
            if ns(r["Start Time(us)"]) in kernel_ts]
    assert sorted({r["Type"] for r in rows}) == ["DropOutDoMask", "DropOutGenMaskV4", "Relu"] and len(rows) == 6
    assert all(ns(r["Duration(us)"]) < 50_000 for r in rows)
    assert sum(ns(r["Wait Time(us)"]) for r in rows) / len(rows) >= 5_000
