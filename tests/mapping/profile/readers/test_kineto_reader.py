"""Kineto reader on REAL traces: recorded at test time from the samples, and the committed ones.

Expected figures come from the test's own reading of the files (the json module with exact
decimals) and of the sample sources (ast), never from the reader.
"""

from __future__ import annotations

import ast
import gzip
import json
import subprocess
import sys
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from msprof_lsp.mapping.profile.locations import ProfileLocation
from msprof_lsp.mapping.profile.model import Backend, ProfileKind
from msprof_lsp.mapping.profile.readers.kineto import read

REPO = Path(__file__).resolve().parents[4]
SAMPLES = REPO / "samples"
HOST_CATS = ("cpu_op", "user_annotation")


def load_json(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f, parse_float=Decimal)


def ns(doc: dict, ts: Decimal) -> int:
    """Epoch ns of a relative µs value, in exact decimal arithmetic."""
    return doc["baseTimeNanoseconds"] + int(ts * 1000)


def read_path(path: Path):
    return read(ProfileLocation(ProfileKind.KINETO, path))


def host_events(doc: dict) -> list[dict]:
    return [
        e for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in HOST_CATS and isinstance(e.get("pid"), int)
    ]


def def_line(source: Path, cls: str, func: str = "forward") -> int:
    tree = ast.parse(source.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == func:
                    return item.lineno
    raise AssertionError(f"{cls}.{func} not in {source}")


def line_of(source: Path, text: str) -> int:
    lines = [i for i, line in enumerate(source.read_text().splitlines(), 1) if text in line]
    assert len(lines) == 1, f"{text!r} occurs {len(lines)} times in {source}"
    return lines[0]


def raw_frames(profile, stack_id: int) -> list[str]:
    return [f.raw for f in profile.stack_of(stack_id)]


# ---------------------------------------------------------------------------------------------
# Traces recorded now, from the samples


def _record(out: Path, *extra: str) -> dict[str, Path]:
    subprocess.run(
        [sys.executable, str(SAMPLES / "record_kineto.py"), "--out-dir", str(out), *extra],
        check=True,
        capture_output=True,
    )
    traces = {}
    for sample in ("cnn_classifier", "tiny_transformer"):
        found = sorted((out / sample).glob("*.pt.trace.json.gz"))
        assert len(found) == 1, found
        traces[sample] = found[0]
    return traces


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict[str, Path]:
    pytest.importorskip("torch", reason="recording a trace needs torch")
    return _record(tmp_path_factory.mktemp("kineto"))


@pytest.fixture(scope="module")
def recorded_verbose(tmp_path_factory) -> dict[str, Path]:
    pytest.importorskip("torch", reason="recording a trace needs torch")
    return _record(tmp_path_factory.mktemp("kineto_verbose"), "--call-stacks")



@pytest.mark.torch
@pytest.mark.parametrize("sample", ["cnn_classifier", "tiny_transformer"])
def test_recorded_steps_are_the_profiled_steps(recorded, sample):
    path = recorded[sample]
    doc = load_json(path)
    expected = sorted(
        (int(e["name"].split("#")[1]), ns(doc, e["ts"]), ns(doc, e["ts"] + e["dur"]))
        for e in host_events(doc)
        if e["name"].startswith("ProfilerStep#")
    )
    # schedule(wait=1, warmup=1, active=2) over 4 steps records steps 2 and 3.
    assert [s[0] for s in expected] == [2, 3]
    profile = read_path(path)
    assert [(s.id, s.start_ns, s.end_ns) for s in profile.steps] == expected
    assert profile.meta.kind is ProfileKind.KINETO
    assert profile.meta.backend is Backend.CPU
    assert profile.issues == []
    assert profile.step_time() == (sum(e - s for _, s, e in expected) / 2, "ProfilerStep")


@pytest.mark.torch
def test_recorded_cnn_ops(recorded):
    path = recorded["cnn_classifier"]
    doc = load_json(path)
    counts = Counter(e["name"] for e in host_events(doc))
    profile = read_path(path)
    got = Counter(profile.host_ops["name"].astype(str))
    assert got == counts
    for name in (
        "aten::relu",
        "aten::clamp_min",
        "aten::dropout",
        "aten::linear",
        "aten::item",
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
        "Optimizer.step#SGD.step",
    ):
        assert got[name] > 0, name
    # DDP over gloo: one process of one, as the trace's distributedInfo says.
    dist = doc["distributedInfo"]
    assert (profile.meta.rank, profile.meta.world_size) == (dist["rank"], dist["world_size"]) == (0, 1)


@pytest.mark.torch
def test_recorded_transformer_ops(recorded):
    path = recorded["tiny_transformer"]
    counts = Counter(e["name"] for e in host_events(load_json(path)))
    got = Counter(read_path(path).host_ops["name"].astype(str))
    assert got == counts
    for name in ("aten::softmax", "aten::rsqrt", "aten::silu", "aten::dropout", "aten::item",
                 "Optimizer.step#AdamW.step",
                 "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"):
        assert got[name] > 0, name


@pytest.mark.torch
def test_recorded_cnn_frames_point_at_the_sample_lines(recorded):
    model_py = SAMPLES / "cnn_classifier" / "model.py"
    train_py = SAMPLES / "cnn_classifier" / "train.py"
    classifier_forward = f"model.py({def_line(model_py, 'CNNClassifier')}): forward"
    block_forward = f"model.py({def_line(model_py, 'ConvBlock')}): forward"
    # train() was already running when tracing began: its frame shows the executing line.
    train_frame = f"train.py({line_of(train_py, 'profiling.step()')}): train"

    profile = read_path(recorded["cnn_classifier"])
    ops, modules = profile.host_ops, profile.modules
    relus = ops[ops["name"] == "aten::relu"]
    seen = Counter()
    for _, op in relus.iterrows():
        frames = raw_frames(profile, op["stack"])
        assert train_frame in frames
        assert frames[-1].endswith(": <module>")
        user = [f for f in frames if f.startswith("model.py(")]
        if op["module"] >= 0 and modules.iloc[op["module"]]["cls"] == "ReLU":
            k = int(modules.iloc[op["module"]]["k"])
            # nn.ReLU modules numbered in first-call order: the one inside self.embed
            # (nn.Sequential) runs first, then self.act.
            assert frames[frames.index(f"nn.Module: ReLU_{k}") + 1].startswith(
                "torch/nn/modules/container.py(" if k == 0 else "model.py("
            )
            assert user[0] == classifier_forward
            seen[f"ReLU_{k}"] += 1
        elif block_forward in frames:
            # F.relu in ConvBlock.forward: the enclosing module is the ConvBlock.
            assert modules.iloc[op["module"]]["cls"] == "ConvBlock"
            assert user[0] == block_forward
            seen["ConvBlock"] += 1
        else:
            # F.relu(self.fc2(x)) in CNNClassifier.forward: no nn.ReLU module around it.
            assert frames[1].startswith("torch/nn/functional.py(") and frames[2] == classifier_forward
            assert modules.iloc[op["module"]]["cls"] == "CNNClassifier"
            seen["F.relu"] += 1
    # two profiled steps: 2 ConvBlocks, ReLU_0, ReLU_1 and one F.relu per forward
    assert seen == {"ConvBlock": 4, "ReLU_0": 2, "ReLU_1": 2, "F.relu": 2}
    # the sample assigns that second ReLU to self.act and calls it in forward
    source = model_py.read_text()
    assert "self.act = nn.ReLU()" in source and "self.drop(self.act(self.fc1(x)))" in source


@pytest.mark.torch
def test_recorded_modules_table_matches_the_module_events(recorded):
    path = recorded["cnn_classifier"]
    doc = load_json(path)
    module_events = [
        e for e in doc["traceEvents"]
        if e.get("cat") == "python_function" and e["name"].startswith("nn.Module: ")
    ]
    profile = read_path(path)
    expected = Counter(e["name"].removeprefix("nn.Module: ") for e in module_events)
    got = Counter(f"{c}_{k}" for c, k in zip(profile.modules["cls"], profile.modules["k"]))
    assert got == expected
    # the DDP wrapper encloses the classifier, which encloses its Sequential blocks
    mods = profile.modules
    top = mods[mods["cls"] == "CNNClassifier"]
    assert len(top) == 2
    for row in top.itertuples():
        assert mods.iloc[row.parent]["cls"] == "DistributedDataParallel"


@pytest.mark.torch
def test_recorded_backward_ops_link_to_their_forward_op(recorded):
    path = recorded["cnn_classifier"]
    doc = load_json(path)
    ops_at = {(e["pid"], e["tid"], e["ts"]): e for e in host_events(doc)}
    flows = [e for e in doc["traceEvents"] if e.get("cat") == "fwdbwd"]
    src = {f["id"]: ops_at[(f["pid"], f["tid"], f["ts"])] for f in flows if f["ph"] == "s"}
    pairs = {
        (ns(doc, ops_at[(f["pid"], f["tid"], f["ts"])]["ts"]), ns(doc, src[f["id"]]["ts"]))
        for f in flows if f["ph"] == "f"
    }
    profile = read_path(path)
    ops = profile.host_ops
    linked = ops[ops["fwd_op"] >= 0]
    got = {(int(r.start_ns), int(ops.iloc[r.fwd_op]["start_ns"])) for r in linked.itertuples()}
    assert got == pairs and len(pairs) == len(flows) // 2
    relu_bwd = linked[linked["name"] == "ReluBackward0"]
    assert len(relu_bwd) and set(ops.iloc[relu_bwd["fwd_op"]]["name"]) == {"aten::relu"}


@pytest.mark.torch
def test_recorded_shapes_and_concrete_inputs(recorded):
    path = recorded["cnn_classifier"]
    doc = load_json(path)
    first = next(e for e in host_events(doc) if e["name"] == "aten::dropout")
    profile = read_path(path)
    ops = profile.host_ops
    row = ops[(ops["name"] == "aten::dropout") & (ops["start_ns"] == ns(doc, first["ts"]))].iloc[0]
    dims = first["args"]["Input Dims"]
    assert row["input_dims"] == ";".join(",".join(str(d) for d in t) for t in dims)
    assert row["input_types"] == ";".join(first["args"]["Input type"])
    assert json.loads(row["concrete_inputs"]) == first["args"]["Concrete Inputs"]
    # the embed block's nn.Dropout(0.2), in training mode
    assert json.loads(row["concrete_inputs"])[1:] == ["0.20000000000000001", "True"]
    assert row["seq"] == first["args"]["Sequence number"]
    assert row["fwd_thread"] == first["args"]["Fwd thread id"] == 0
    assert profile.meta.extra["frame_lines"] == "def"
    assert profile.meta.extra["stack_source"] == "python_function"


@pytest.mark.torch
def test_recorded_ops_nest_inside_steps(recorded):
    profile = read_path(recorded["tiny_transformer"])
    ops = profile.host_ops
    opt = ops[ops["name"] == "Optimizer.step#AdamW.step"]
    assert len(opt) == 2
    for row in opt.itertuples():
        chain = [ops.iloc[i]["name"] for i in profile.host_op_chain(row.Index)]
        assert chain[-1].startswith("ProfilerStep#")
        assert row.start_ns >= ops.iloc[row.parent]["start_ns"]


# ---------------------------------------------------------------------------------------------
# The verbose "Call stack" variant


def _call_stack_frames(text: str) -> list[str]:
    return [p.strip() for p in text.split(";") if p.strip()]


@pytest.mark.torch
@pytest.mark.parametrize("sample", ["cnn_classifier", "tiny_transformer"])
def test_verbose_call_stack_is_used(recorded_verbose, sample):
    path = recorded_verbose[sample]
    doc = load_json(path)
    with_stack = [e for e in host_events(doc) if e.get("args", {}).get("Call stack")]
    assert with_stack, "verbose mode should record Call stack"
    profile = read_path(path)
    assert profile.meta.extra["stack_source"] == "call_stack"
    ops = profile.host_ops
    key = {(int(s), str(n)): int(st) for s, n, st in zip(ops["start_ns"], ops["name"], ops["stack"])}
    for e in with_stack:
        sid = key[(ns(doc, e["ts"]), e["name"])]
        assert raw_frames(profile, sid) == _call_stack_frames(e["args"]["Call stack"])


@pytest.mark.torch
@pytest.mark.parametrize("sample", ["cnn_classifier", "tiny_transformer"])
def test_rebuilt_stacks_equal_the_recorded_call_stacks(recorded_verbose, sample, tmp_path):
    """Strip the Call stack args: the python_function reconstruction must give, for every
    cpu_op, exactly the stack torch itself recorded."""
    path = recorded_verbose[sample]
    doc = json.loads(gzip.decompress(path.read_bytes()))
    truth = {}
    for e in doc["traceEvents"]:
        args = e.get("args") or {}
        if e.get("cat") == "cpu_op" and "Call stack" in args:
            truth[(e["tid"], e["ts"], e["name"])] = _call_stack_frames(args.pop("Call stack"))
        elif "Call stack" in args:
            args.pop("Call stack")
    stripped = tmp_path / "stripped.pt.trace.json"
    stripped.write_text(json.dumps(doc))
    profile = read_path(stripped)
    assert profile.meta.extra["stack_source"] == "python_function"
    base = doc["baseTimeNanoseconds"]
    ops = profile.host_ops
    got = {
        (int(t), int(s), str(n)): raw_frames(profile, int(st))
        for t, s, n, st, c in zip(ops["tid"], ops["start_ns"], ops["name"], ops["stack"], ops["cat"])
        if c == "cpu_op"
    }
    assert len(truth) > 1000
    for (tid, ts, name), frames in truth.items():
        key = (tid, base + int(Decimal(repr(ts)) * 1000), name)
        assert got[key] == frames, name


# ---------------------------------------------------------------------------------------------
# The committed sample traces


def committed() -> list[Path]:
    return sorted(SAMPLES.glob("*/kineto/*.pt.trace.json.gz"))


def test_committed_traces_exist_and_are_small():
    paths = committed()
    assert {p.parent.parent.name for p in paths} == {"cnn_classifier", "tiny_transformer"}
    assert len(paths) == 2
    for p in paths:
        assert p.stat().st_size < 2_000_000


@pytest.mark.parametrize("path", committed(), ids=lambda p: p.parent.parent.name)
def test_committed_trace_agrees_with_json_reading(path):
    doc = load_json(path)
    events = doc["traceEvents"]
    hosts = host_events(doc)
    profile = read_path(path)
    assert profile.issues == []
    assert len(profile.host_ops) == len(hosts)
    assert Counter(profile.host_ops["cat"].astype(str)) == Counter(e["cat"] for e in hosts)
    steps = {int(e["name"].split("#")[1]): int((e["dur"] * 1000)) for e in hosts
             if e["name"].startswith("ProfilerStep#")}
    assert {s.id: s.dur_ns for s in profile.steps} == steps
    assert int(profile.host_ops["dur_ns"].sum()) == sum(int(e["dur"] * 1000) for e in hosts)
    assert int(profile.host_ops["start_ns"].min()) == min(ns(doc, e["ts"]) for e in hosts)
    modules = [e for e in events if e.get("cat") == "python_function" and e["name"].startswith("nn.Module: ")]
    assert len(profile.modules) == len(modules)
    assert int((profile.host_ops["fwd_op"] >= 0).sum()) == sum(
        1 for e in events if e.get("cat") == "fwdbwd" and e["ph"] == "f"
    )
    # CPU-only capture: no device activity
    assert len(profile.kernels) == 0 and len(profile.host_events) == 0
    assert profile.meta.extra["stack_source"] == "python_function"
    # every op on the Python thread has a stack ending at the script's <module>
    main_tid = next(e["tid"] for e in hosts if e["name"].startswith("ProfilerStep#"))
    ops = profile.host_ops
    on_main = ops[ops["tid"] == main_tid]
    assert (on_main["stack"] >= 0).all()
    assert {raw_frames(profile, s)[-1].split("(")[0] for s in set(on_main["stack"])} == {"train.py"}


def test_reader_does_not_import_torch():
    code = (
        "import sys; import msprof_lsp.mapping.profile.readers.kineto as k; "
        "assert 'torch' not in sys.modules, 'the product must not import torch'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def def_line_of_function(source: Path, func: str) -> int:
    tree = ast.parse(source.read_text())
    found = [n.lineno for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func]
    assert len(found) == 1
    return found[0]


@pytest.mark.torch
def test_recorded_transformer_frames_point_at_the_sample_lines(recorded):
    model_py = SAMPLES / "tiny_transformer" / "model.py"
    profile = read_path(recorded["tiny_transformer"])
    ops, mods = profile.host_ops, profile.modules

    def user_frames(name: str) -> set[str]:
        """The innermost model.py frame of every op called ``name``."""
        out = set()
        for sid in ops[ops["name"] == name]["stack"]:
            user = [f for f in raw_frames(profile, sid) if f.startswith("model.py(")]
            if user:
                out.add(user[0])
        return out

    attention = f"model.py({def_line(model_py, 'Attention')}): forward"
    assert user_frames("aten::softmax") == {attention}
    assert user_frames("aten::rsqrt") == {f"model.py({def_line(model_py, 'RMSNorm')}): forward"}
    assert user_frames("aten::silu") == {f"model.py({def_line(model_py, 'SwiGLU')}): forward"}
    # rotate_half is a plain function: its cat/neg ops sit under its own def line
    assert f"model.py({def_line_of_function(model_py, 'rotate_half')}): rotate_half" in user_frames("aten::neg")
    # 2 layers x 2 RMSNorm + the final one, numbered in first-call order; each called once a step
    norms = Counter(k for c, k in zip(mods["cls"], mods["k"]) if c == "RMSNorm")
    assert norms == {0: 2, 1: 2, 2: 2, 3: 2, 4: 2}
    source = model_py.read_text()
    assert source.count("RMSNorm(cfg.dim, cfg.norm_eps)") == 3 and "n_layers: int = 2" in source


def test_committed_trace_through_locate_and_the_cache(tmp_path):
    from msprof_lsp.mapping.profile.load import load_location, locate

    path = committed()[0]
    location = locate(path)
    assert location.kind is ProfileKind.KINETO
    fresh = load_location(location, cache_dir=tmp_path)
    cached = load_location(location, cache_dir=tmp_path)
    assert len(list(tmp_path.iterdir())) == 1
    assert cached.host_ops.equals(fresh.host_ops) and cached.modules.equals(fresh.modules)
    assert cached.stacks == fresh.stacks and cached.steps == fresh.steps
    assert cached.meta.extra["frame_lines"] == "def"
