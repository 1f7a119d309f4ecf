"""NPU220 fused-optimizer and NPU221 fused-grad-clip: the real 2024 trace and 2023 kernel table
(figures from the json/csv modules), the tiny_transformer sample (anchors and fixes on the
lines found in its source), the Kineto CPU trace, and built profiles for the boundaries."""

from __future__ import annotations

import csv
import json
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import shared_fixture
from seedkit import applied as applied_seed
from rulekit import LIB, ProfileBuilder, applied, findings, frame, line_of, only

from msprof_lsp.hints.config import RuleConfig, Thresholds
from msprof_lsp.mapping.profile.load import load_location, locate
from msprof_lsp.mapping.profile.locations import ProfileLocation
from msprof_lsp.mapping.profile.model import Backend, Profile, ProfileKind, ProfileMeta
from msprof_lsp.mapping.profile.readers.ascend_csv import read_kernel_table
from msprof_lsp.mapping.profile.readers.torch_npu import read
from msprof_lsp.mapping.spans import Confidence

TRACE_2024 = "Ascend-msprof-analyze/test/ut/advisor/timeline_advice/trace_view.json"
KERNELS_2023 = "Ascend-msprof-analyze/test/ut/advisor/advisor_backend/compute_advice/kernel_details.csv"
REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "samples" / "tiny_transformer"


def _ts(e: dict) -> Decimal:
    return Decimal(str(e["ts"]))


def test_real_2024_adam_step():
    path = shared_fixture(TRACE_2024)
    ev = json.loads(path.read_text(encoding="utf-8"))
    (step,) = [e for e in ev if e.get("name") == "Optimizer.step#Adam.step"]
    (pstep,) = [e for e in ev if e.get("name", "").startswith("ProfilerStep#")]
    t0, t1 = _ts(step), _ts(step) + Decimal(str(step["dur"]))
    items = [e for e in ev if e.get("name") == "aten::item" and e.get("ph") == "X"]
    inside = [e for e in items if e["tid"] == step["tid"] and t0 <= _ts(e) and _ts(e) + Decimal(str(e["dur"])) <= t1]
    assert (len(inside), len(items)) == (40, 45)
    # no step_trace_time.csv: the step is the ProfilerStep range; the catalog's 17.1 %
    assert round(100 * step["dur"] / pstep["dur"], 1) == 17.1

    (f,) = only(findings(read(ProfileLocation(ProfileKind.TORCH_NPU, path)), ["NPU220"]), "NPU220")
    assert f.evidence["optimizer"] == "Adam"
    assert f.evidence["step_time_us"] == round(step["dur"], 1) == 2410.8
    assert (f.evidence["item_in_step"], f.evidence["item_total"]) == (40, 45)
    assert f.time_per_step_us == pytest.approx(step["dur"], abs=1e-3)
    assert f.share == pytest.approx(step["dur"] / pstep["dur"], rel=1e-9)
    assert "2,411 µs/step (17.1% of the wall step)" in f.message
    assert "40 of 45 aten::item inside" in f.message and "NpuFusedAdam" in f.message
    assert f.span is None and f.fixes == []


def test_real_2023_kernels_apply_adamw_and_lp_norms():
    path = shared_fixture(KERNELS_2023)
    with open(path, newline="", encoding="utf-8") as fh:
        types = [r["Type"] for r in csv.DictReader(fh)]
    profile = Profile(ProfileMeta(ProfileKind.TORCH_NPU, str(path)), kernels=read_kernel_table(path).to_frame())
    fs = findings(profile, ["NPU22"])
    (opt,) = only(fs, "NPU220")
    assert opt.evidence["apply_kernels"] == types.count("ApplyAdamW") == 28
    assert opt.confidence is Confidence.INFERRED and "28 ApplyAdamW kernels" in opt.message
    (clip,) = only(fs, "NPU221")
    assert clip.evidence["norm_kernels"] == {"LpNormReduceV2": types.count("LpNormReduceV2"), "LpNormUpdateV2": types.count("LpNormUpdateV2")}
    assert clip.evidence["norm_kernels"] == {"LpNormReduceV2": 28, "LpNormUpdateV2": 28}


def _tiny_npu():
    roots = sorted((TINY / "npu_profile").glob("*_ascend_pt"))
    return load_location(locate(roots[0]), use_cache=False)


def test_tiny_transformer_adamw_anchor_and_fixes():
    train = (TINY / "train.py").read_text(encoding="utf-8")
    fs = findings(_tiny_npu(), ["NPU22"], [TINY], config=RuleConfig())
    (opt,) = only(fs, "NPU220")
    assert opt.span.path.endswith("train.py") and opt.span.line == line_of(train, "optimizer = torch.optim.AdamW(")
    assert [r.span.line for r in opt.related] == [line_of(train, "optimizer.step()")]
    a, b = opt.fixes
    assert "torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1, fused=True)" in applied(train, a)
    new_b = applied(train, b)
    assert "torch_npu.optim.NpuFusedAdamW(model.parameters(), lr=args.lr, weight_decay=0.1)" in new_b


def test_tiny_transformer_fused_adamw_saving_follows_torch_npus_per_parameter_loop():
    """fused=True on torch_npu: op-plugin's ``_fused_adamw_`` launches an ApplyAdamWV2 and a
    step-counter Sub per parameter after torch's one ``_foreach_add_`` of the step counters. The
    sample's unfused step: 19 parameters (its least frequent kernel type, Addcdiv, once each), 152
    kernels; fused: 2 x 19 + 1 = 39 (the model before: one kernel per type, 8 of 152)."""
    from msprof_lsp.hints.finding import Target

    profile = _tiny_npu()
    (opt,) = only(findings(profile, ["NPU220"], [TINY]), "NPU220")
    (kernels,) = [c for c in opt.effect.changes if c.target is Target.KERNELS]
    steps = profile.num_steps
    assert len(kernels.rows) == 152 * steps and opt.evidence["kernel_types"]["Addcdiv"] == 19 * steps
    assert kernels.factor == pytest.approx((38 * steps + steps) / (152 * steps)) and kernels.worst == pytest.approx(0.5 + 0.5 * kernels.factor)
    assert "an ApplyAdamWV2 and a step-counter kernel per parameter" in opt.effect.basis


def test_tiny_transformer_grad_clip():
    train = (TINY / "train.py").read_text(encoding="utf-8")
    (clip,) = only(findings(_tiny_npu(), ["NPU221"], [TINY]), "NPU221")
    assert clip.span.line == line_of(train, "torch.nn.utils.clip_grad_norm_(")
    assert clip.evidence["sequence"] == "add-reciprocal-mul"
    assert "foreach=True" in applied(train, clip.fixes[0])


def test_kineto_cpu_adamw_fused_only():
    traces = sorted((TINY / "kineto").glob("*.pt.trace.json.gz"))
    profile = load_location(locate(traces[0]), use_cache=False)
    train = (TINY / "train.py").read_text(encoding="utf-8")
    fs = findings(profile, ["NPU22"], [TINY])
    (opt,) = only(fs, "NPU220")
    assert opt.span.line == line_of(train, "optimizer = torch.optim.AdamW(")
    assert [fx.title for fx in opt.fixes] == ["Use the fused AdamW kernel: fused=True (review)"]
    assert "NpuFused" not in opt.message and "foreach" not in opt.message
    assert not only(fs, "NPU221")  # CPU: no foreach clip advice (the trace already uses _foreach_norm)



def test_kineto_cpu_adamw_saving_keeps_the_fused_kernels_memory_pass():
    """The committed CPU trace: fused=True still moves each parameter's state once (7 accesses per
    element for AdamW, the 19 parameters' 8.6 M elements), at the rate of the step's in-place ops
    moving >= 1 MiB; the step scope's own Python stays. The op count ratio (13 op names per step, 1,178
    ops over 2 steps, the model before) charged 98 % of the step; the fused step re-recorded on the CPU kept
    13-25 % of its ops' time (docs/savings.md "The CPU loop: every rule on the samples")."""
    from msprof_lsp.hints.finding import Target

    traces = sorted((TINY / "kineto").glob("*.pt.trace.json.gz"))
    profile = load_location(locate(traces[0]), use_cache=False)
    (opt,) = only(findings(profile, ["NPU220"], [TINY]), "NPU220")
    (change,) = opt.effect.changes
    scopes = {i for i, n in enumerate(profile.host_ops["name"].astype(str)) if n == "Optimizer.step#AdamW.step"}
    assert change.target is Target.HOST_OPS and scopes and not scopes & set(change.rows)
    assert "7 accesses per element, 19 parameters, 228 MiB" in opt.effect.basis
    # the high end: one op per op name and step call (13 names, 2 recorded steps, 1,178 ops)
    assert len(scopes) == 2 and change.best == pytest.approx(13 * 2 / 1178) and 0.05 < change.factor < 0.5
    assert change.worst == pytest.approx(0.5 + 0.5 * change.factor)


SGD_SRC = '''import torch


def main(model, loader):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x in loader:
        model(x).sum().backward()
        opt.step()
'''


def _cpu_sgd_profile(tmp_path: Path, big: bool) -> Profile:
    """A CPU step of single-tensor SGD with momentum over two parameters, (512, 1024) (or (16, 16)
    when not ``big``) and (16,): per parameter ``buf.mul_``, ``buf.add_(grad)``, ``param.add_(buf)``."""
    src = tmp_path / "train.py"
    src.write_text(SGD_SRC)
    b = ProfileBuilder(backend=Backend.CPU, kind=ProfileKind.KINETO)
    b.op("Optimizer.step#SGD.step", 1000, 600, cat="user_annotation", stack=[frame(src, line_of(SGD_SRC, "opt.step()"), "main")])
    t = 1050
    for dims, durs in ((("512,1024" if big else "16,16"), (100, 150, 150)), ("16", (10, 10, 10))):
        for name, ins, dur in (("aten::mul_", f"{dims};", durs[0]), ("aten::add_", f"{dims};{dims};", durs[1]),
                               ("aten::add_", f"{dims};{dims};", durs[2])):
            b.op(name, t, dur, input_dims=ins, input_types="float;float;Scalar" if ins.count(";") == 2 else "float;double")
            t += dur + 5
    return b.build()


def test_cpu_sgd_saving_moves_the_state_once_at_the_in_place_rate(tmp_path):
    """fused=True on the host: reads the gradient, reads and writes the parameter and the momentum
    buffer once (5 accesses per element) at the rate the in-place ops >= 1 MiB moved memory: the
    big parameter's three ops moved 4 + 6 + 6 MiB in 400 µs. The scope's own time (600 µs less the
    ops' 430) stays, so the scope is not among the rows."""
    from msprof_lsp.hints.finding import Target

    (f,) = only(findings(_cpu_sgd_profile(tmp_path, True), ["NPU220"], [tmp_path]), "NPU220")
    (change,) = f.effect.changes
    mib = 2**20
    fused_us = 5 * (512 * 1024 + 16) * 4 / (16 * mib / 400)
    assert change.target is Target.HOST_OPS and len(change.rows) == 6 and 0 not in change.rows
    assert change.factor == pytest.approx(fused_us / 430) and change.best == pytest.approx(2 / 6)
    assert "5 accesses per element, 2 parameters" in f.effect.basis
    assert f.saving is not None and f.saving.us_per_step == pytest.approx(430 - fused_us, abs=1)


def test_cpu_sgd_of_small_parameters_keeps_the_op_count_ratio(tmp_path):
    """No in-place op moves 1 MiB: dispatch, not memory, is what the per-tensor loop costs, and the
    op count ratio (op names / ops, over the scope's subtree) stays the model."""
    (f,) = only(findings(_cpu_sgd_profile(tmp_path, False), ["NPU220"], [tmp_path]), "NPU220")
    (change,) = f.effect.changes
    assert "one op per op name: its host time at 2/6" in f.effect.basis and 0 in change.rows


OPT_SRC = '''import torch


def main(model, loader):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for x in loader:
        model(x).sum().backward()
        opt.step()
'''


def _step_profile(tmp_path: Path, inner: list[str]) -> tuple[Profile, Path]:
    src = tmp_path / "train.py"
    src.write_text(OPT_SRC)
    b = ProfileBuilder()
    st = b.op("Optimizer.step#AdamW.step", 1000, 900, stack=[frame(f"{LIB}/torch/optim/optimizer.py", 487, "wrapper"), frame(src, line_of(OPT_SRC, "opt.step()"), "main")])
    for i, name in enumerate(inner):
        op = b.op(name, 1010 + 100 * i, 80)
        sc = b.op("aclnnX", 1020 + 100 * i, 40)
        b.kernel("aclnnX_X_X", 1030 + 100 * i, 20, op=sc, type="X")
    del st
    return b.build(), src


def test_per_parameter_step_fires_with_binding_anchor(tmp_path):
    profile, src = _step_profile(tmp_path, ["aten::add_", "aten::mul_", "aten::addcdiv_"])
    (f,) = only(findings(profile, ["NPU220"], [tmp_path]), "NPU220")
    assert f.span.line == line_of(OPT_SRC, "opt = torch.optim.AdamW(") and f.confidence is Confidence.STACK
    assert f.time_per_step_us == pytest.approx(900) and f.evidence["kernels"] == 3
    assert "fused=True" in applied(OPT_SRC, f.fixes[0])


def test_fused_step_is_quiet(tmp_path):
    profile, _ = _step_profile(tmp_path, ["aten::_fused_adamw_"])
    assert not only(findings(profile, ["NPU220"], [tmp_path]), "NPU220")


def test_foreach_step_is_quiet_off_ascend(tmp_path):
    """CUDA and CPU: the multi-tensor path is torch's own fast default; only Ascend has NpuFused*."""
    src = tmp_path / "train.py"
    src.write_text(OPT_SRC)
    b = ProfileBuilder(backend=Backend.CUDA, kind=ProfileKind.KINETO)
    b.op("Optimizer.step#AdamW.step", 1000, 900, stack=[frame(src, line_of(OPT_SRC, "opt.step()"), "main")])
    op = b.op("aten::_foreach_add_", 1010, 80)
    b.kernel("multi_tensor_apply_kernel", 1030, 20, op=op, core="GPU")
    assert not only(findings(b.build(), ["NPU220"], [tmp_path]), "NPU220")


# -- multi-tensor (_foreach_) SGD on Ascend: the host dispatch, not the kernels ------------------

ALEXNET = "Ascend-msinsight/{}/level1/rank0_ascend_pt"
RECORDED_SCRIPT = "/home/z30057886/imagenet_script"


def _foreach_run(per_tensor_us: float):
    from seedkit import L, UserCall, item_call, loop, step_run

    params = ((64, 1024), (64,), (64, 64), (64,))
    step = UserCall(loop("optimizer.step()"), (L.sgd_foreach_step(params, kernel_us=30.0, per_tensor_us=per_tensor_us),),
                    label="optimizer")
    return step_run([step, item_call()])


def _foreach_figures(a) -> tuple[float, float]:  # noqa: ANN001 - seedkit.Analysed
    """(host µs of the step scope, device µs of its Foreach kernels) from the written files."""
    from seedkit import ns

    steps = [ns(str(e["dur"])) for e in a.trace() if e.get("name") == "Optimizer.step#SGD.step"]
    kernels = [r for r in a.kernel_rows() if r["Type"].startswith("Foreach")]
    assert len(kernels) == 4 * len(steps) == 8
    return sum(steps) / len(steps) / 1000, sum(ns(r["Duration(us)"]) for r in kernels) / len(steps) / 1000


def test_foreach_sgd_fires_at_the_ratio_and_not_just_below(tmp_path):
    from seedkit import TRAIN, analyse

    a = analyse(_foreach_run(per_tensor_us=20.0), tmp_path, min_share=0.0)
    host, device = _foreach_figures(a)
    ratio = host / device
    assert ratio > 2  # 4 x 4 result_type of 20 µs against 4 kernels of 30 µs
    (f,) = a.run("NPU220", min_share=0.0, thresholds=Thresholds(foreach_host_ratio=ratio - 1e-6))
    assert f.span.line == TRAIN.line("optimizer = torch.optim.SGD(") and f.span.path.endswith("train.py")
    assert [r.span.line for r in f.related] == [TRAIN.line("optimizer.step()")]
    assert f.evidence["path"] == "multi-tensor" and (f.evidence["foreach_ops"], f.evidence["kernels"]) == (8, 8)
    assert (f.evidence["foreach_ops_per_step"], f.evidence["kernels_per_step"]) == (4, 4)
    assert f.evidence["host_device_ratio"] == round(ratio, 2)
    assert f.time_per_step_us == pytest.approx(host, abs=1e-3)
    assert f.message.startswith(f"Multi-tensor SGD host-bound: 4 _foreach_ kernels, {host:,.0f} µs/step")
    assert f"{device:,.0f} µs on the device, host {ratio:.1f}× that" in f.message
    assert "NpuFusedSGD" in f.message
    # NpuFusedSGD first (the affinity API), fused=True its alternative: one group
    npu, fused = f.fixes
    assert npu.title.startswith("Use torch_npu.optim.NpuFusedSGD") and "fused=True" in fused.title
    assert npu.group and npu.group == fused.group
    _, new = applied_seed(f, "NpuFusedSGD")
    assert "torch_npu.optim.NpuFusedSGD(model.parameters(), lr=0.1)" in new
    assert not a.run("NPU220", min_share=0.0, thresholds=Thresholds(foreach_host_ratio=ratio + 1e-6))


def test_foreach_sgd_default_threshold(tmp_path):
    """Below the default ratio (2): the device time is what the update costs, no finding."""
    from seedkit import analyse

    a = analyse(_foreach_run(per_tensor_us=0.5), tmp_path, min_share=0.0)
    host, device = _foreach_figures(a)
    assert host / device < Thresholds().foreach_host_ratio == 2
    assert not a.run("NPU220", min_share=0.0)


@pytest.mark.parametrize("form", ["text", "db"])
def test_real_alexnet_foreach_sgd(form):
    """The real AlexNet job: SGD runs multi-tensor (_multi_tensor_sgd); the advisor names
    torch_npu.optim.NpuFusedSGD for it. Figures from the trace / the DB with json and sqlite."""
    from msprof_lsp.mapping.profile.cluster import load_profile

    root = shared_fixture(ALEXNET.format(form))
    profile = load_profile([root], use_cache=False).profile
    (f,) = only(findings(profile, ["NPU220"]), "NPU220")
    host, device = _alexnet_figures(root, form)
    assert f.evidence["step_time_us"] == pytest.approx(host, abs=0.05)
    assert f.evidence["device_time_us_per_step"] == pytest.approx(device, abs=0.05)
    assert f.evidence["host_device_ratio"] == round(host / device, 2) == 4.64  # 10.5 ms host, 2.26 ms device
    assert (f.evidence["foreach_ops"], f.evidence["kernels"]) == (4, 4)
    assert "torch_npu.optim.NpuFusedSGD" in f.message
    assert f.span is None and f.fixes == []  # the job's main.py is not public


def _alexnet_figures(root: Path, form: str) -> tuple[float, float]:
    if form == "text":
        out = root / "ASCEND_PROFILER_OUTPUT"
        ev = json.loads((out / "trace_view.json").read_text(encoding="utf-8"))
        (host,) = [e["dur"] for e in ev if e.get("name") == "Optimizer.step#SGD.step"]
        with open(out / "kernel_details.csv", newline="", encoding="utf-8") as fh:
            device = sum(float(r["Duration(us)"]) for r in csv.DictReader(fh) if r["Type"].startswith("Foreach"))
        return float(host), device
    import sqlite3

    (db,) = (root / "ASCEND_PROFILER_OUTPUT").glob("ascend_pytorch_profiler_*.db")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (host,) = con.execute("SELECT (endNs - startNs) / 1000.0 FROM PYTORCH_API JOIN STRING_IDS ON name = id "
                              "WHERE value = 'Optimizer.step#SGD.step'").fetchone()
        (device,) = con.execute("SELECT SUM(endNs - startNs) / 1000.0 FROM TASK JOIN COMPUTE_TASK_INFO USING (globalTaskId) "
                                "JOIN STRING_IDS ON opType = id WHERE value LIKE 'Foreach%'").fetchone()
    finally:
        con.close()
    return host, device


def _imagenet_main() -> str:
    """A main.py whose lines are where the AlexNet job's stacks put them: main_worker calls train
    on line 282, train calls optimizer.zero_grad() on 364 and optimizer.step() on 366."""
    head = [
        "import torch",
        "import torchvision.models as models",
        "",
        "",
        "def main_worker(gpu, ngpus_per_node, args):",
        "    model = models.alexnet()",
        "    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=args.momentum, weight_decay=args.weight_decay)",
    ]
    lines = head + [""] * (281 - len(head)) + ["    train(args.loader, model, args.criterion, optimizer, 0, gpu, args)", "", "",
                                               "def train(train_loader, model, criterion, optimizer, epoch, device, args):",
                                               "    for i, (images, target) in enumerate(train_loader):",
                                               "        loss = criterion(model(images), target)"]
    lines += [""] * (363 - len(lines)) + ["        optimizer.zero_grad()", "        loss.backward()", "        optimizer.step()"]
    text = "\n".join(lines) + "\n"
    assert (line_of(text, "train(args.loader"), line_of(text, "zero_grad()"), line_of(text, "optimizer.step()")) == (282, 364, 366)
    return text


def test_real_alexnet_foreach_sgd_on_the_optimizer_line(tmp_path):
    """With a main.py at the recorded lines: the finding is on the SGD construction (related: the
    step call), NpuFusedSGD first with its import, fused=True the alternative."""
    from msprof_lsp.mapping.profile.cluster import load_profile
    from msprof_lsp.mapping.source.workspace import SourceWorkspace
    from msprof_lsp.hints.context import RuleContext
    from msprof_lsp.hints.engine import run_rules
    from msprof_lsp.hints.registry import rules_matching
    from msprof_lsp.mapping.source.attribute import attribute

    src = tmp_path / "imagenet_script"
    src.mkdir()
    text = _imagenet_main()
    (src / "main.py").write_text(text, encoding="utf-8")
    profile = load_profile([shared_fixture(ALEXNET.format("text"))], use_cache=False).profile
    ws = SourceWorkspace([src], path_mappings=[(RECORDED_SCRIPT, str(src))])
    ctx = RuleContext(profile, attribute(profile, ws), ws, RuleConfig())
    (f,) = only(run_rules(ctx, rules_matching(["NPU220"])), "NPU220")
    assert f.span.path == str((src / "main.py").resolve()) and f.span.line == line_of(text, "optimizer = torch.optim.SGD(")
    assert [r.span.line for r in f.related] == [366]
    assert f.severity.name == "WARNING"  # 6.7 % of the 156 ms ProfilerStep: a warning from 5 %
    npu, fused = f.fixes
    new = applied(text, npu)
    assert "optimizer = torch_npu.optim.NpuFusedSGD(model.parameters(), args.lr, momentum=args.momentum, weight_decay=args.weight_decay)" in new
    # the script imports no torch_npu: the guarded import, the NpuFused one behind the test, SGD in the else
    assert "\nimport torch_npu" not in new and "try:\n    import torch_npu" in new and "    torch_npu = None\n" in new
    branch = new[new.index("if torch_npu is not None:"):]
    assert branch.index("NpuFusedSGD(") < branch.index("else:") < branch.index("optimizer = torch.optim.SGD(")
    compile(new, "main.py", "exec")
    assert "fused=True" in applied(text, fused)


@pytest.mark.parametrize(("per_step", "fires"), [(1, False), (2, True)])
def test_kernel_only_apply_kernels_per_step(per_step, fires):
    b = ProfileBuilder(steps=2)
    for s in range(2):
        for i in range(per_step):
            b.kernel(f"ApplyAdamW{s}{i}", s * 10_000 + 100 + 50 * i, 30, type="ApplyAdamW")
    assert bool(only(findings(b.build(), ["NPU220"]), "NPU220")) is fires


# single-tensor AdamW as eager aclnn kernels, per parameter (no Apply kernel): weight decay,
# exp_avg, exp_avg_sq, then the update the rule recognises (Addcmul-Sqrt-RealDiv-Adds-Addcdiv)
ADAMW_PARAM = ("Muls", "Add", "Muls", "Addcmul", "Sqrt", "RealDiv", "Adds", "Addcdiv")


def _eager_adam_profile(params: int) -> tuple[Profile, list[float]]:
    b = ProfileBuilder(kind=ProfileKind.MSPROF, steps=2)
    core = []
    for s in range(2):
        t = s * 10_000 + 100
        for p in range(params):
            for j, typ in enumerate(ADAMW_PARAM):
                dur = 2.0 + j + 0.5 * p
                b.kernel(f"aclnn{typ}_{typ}AiCore_{typ}", t, dur, type=typ, core="AI_VECTOR_CORE")
                if j >= 3:
                    core.append(dur)
                t += 20
    return b.build(), core


@pytest.mark.parametrize(("params", "fires"), [(1, False), (3, True)])
def test_kernel_only_eager_adamw_update_per_parameter(tmp_path, params, fires):
    """msprof CLI form of a single-tensor AdamW: the per-parameter update kernels, anchored on the
    workspace's one AdamW construction; one update per step is a fused optimizer's, no finding."""
    (tmp_path / "train.py").write_text(OPT_SRC)
    profile, core = _eager_adam_profile(params)
    fs = only(findings(profile, ["NPU220"], [tmp_path]), "NPU220")
    assert bool(fs) is fires
    if fires:
        [f] = fs
        assert f.span.line == line_of(OPT_SRC, "opt = torch.optim.AdamW(") and f.confidence is Confidence.INFERRED
        assert f.evidence["update_sequences"] == 2 * params and f.evidence["kernels"] == len(core)
        assert f.time_per_step_us == pytest.approx(sum(core) / 2)
        assert "fused=True" in applied(OPT_SRC, f.fixes[0])


def test_kernel_only_eager_adam_update_without_a_single_construction_is_silent(tmp_path):
    """Adam and AdamW both constructed: the kernels do not say which one ran, so no finding."""
    both = OPT_SRC.replace(
        "    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n",
        "    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n    other = torch.optim.Adam(model.parameters())\n")
    assert both != OPT_SRC
    (tmp_path / "train.py").write_text(both)
    assert not only(findings(_eager_adam_profile(3)[0], ["NPU220"], [tmp_path]), "NPU220")


CLIP_SRC = '''import torch


def step(model):
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
'''


def _clip_profile(tmp_path: Path, norms: list[str], backend=Backend.CUDA):
    src = tmp_path / "clip.py"
    src.write_text(CLIP_SRC)
    stack = [frame(f"{LIB}/torch/nn/utils/clip_grad.py", 30, "clip_grad_norm_"), frame(src, line_of(CLIP_SRC, "clip_grad_norm_("), "step")]
    b = ProfileBuilder(backend=backend, kind=ProfileKind.KINETO if backend is not Backend.ASCEND else ProfileKind.TORCH_NPU)
    t = 100
    durs = {}
    for name in [*norms, "aten::stack", "aten::linalg_vector_norm", "aten::add", "aten::reciprocal", "aten::mul"]:
        op = b.op(name, t, 40, stack=stack)
        b.kernel(f"k_{name}_{t}", t + 5, 10 + t / 100, op=op, core="GPU")
        durs[t] = (name, 10 + t / 100)
        t += 50
    return b.build(), durs


def test_cuda_per_tensor_clip_fires(tmp_path):
    profile, durs = _clip_profile(tmp_path, ["aten::linalg_vector_norm"] * 3)
    (f,) = only(findings(profile, ["NPU221"], [tmp_path]), "NPU221")
    assert f.evidence["per_tensor_norm_ops"] == 4  # three per-tensor norms + the norm of the stacked norms
    matched = sum(d for n, d in durs.values() if n in ("aten::add", "aten::reciprocal", "aten::mul"))
    assert f.time_per_step_us == pytest.approx(matched)
    assert f.span.line == line_of(CLIP_SRC, "clip_grad_norm_(")
    assert "foreach=True" in applied(CLIP_SRC, f.fixes[0])


def test_cuda_foreach_clip_is_quiet(tmp_path):
    profile, _ = _clip_profile(tmp_path, ["aten::_foreach_norm"])
    assert not only(findings(profile, ["NPU221"], [tmp_path]), "NPU221")


@pytest.mark.parametrize(("per_step", "fires"), [(1, False), (2, True)])
def test_ascend_lp_norm_kernels_per_step(per_step, fires):
    b = ProfileBuilder()
    for i in range(per_step):
        b.kernel(f"LpNormReduceV2{i}", 100 + 40 * i, 12, type="LpNormReduceV2", core="AI_VECTOR_CORE")
    assert bool(only(findings(b.build(), ["NPU221"]), "NPU221")) is fires


def test_kernel_only_clip_counts_the_coefficient_kernels_with_the_norms(tmp_path):
    """msprof CLI form: per-tensor norms, then max_norm / (total + eps) as Adds-Reciprocal-Muls
    kernels; the finding's time is those kernels and the norms (the host form counts the same ops),
    anchored on the workspace's clip_grad_norm_ call."""
    (tmp_path / "clip.py").write_text(CLIP_SRC)
    b = ProfileBuilder(kind=ProfileKind.MSPROF)
    t, durs = 100, []
    for typ in ("LpNormReduceV2", "LpNormUpdateV2", "LpNormReduceV2", "LpNormUpdateV2", "Adds", "Reciprocal", "Muls",
                "Mul", "Mul"):
        d = 3.0 + len(durs)
        b.kernel(f"aclnn{typ}_{typ}", t, d, type=typ, core="AI_VECTOR_CORE")
        durs.append((typ, d))
        t += 20
    [f] = only(findings(b.build(), ["NPU221"], [tmp_path]), "NPU221")
    counted = sum(d for typ, d in durs if typ.startswith("LpNorm") or typ in ("Adds", "Reciprocal", "Muls"))
    assert f.time_per_step_us == pytest.approx(counted)
    assert f.evidence["coefficient_kernel_matches"] == 1 and f.confidence is Confidence.INFERRED
    assert f.span.line == line_of(CLIP_SRC, "clip_grad_norm_(")
