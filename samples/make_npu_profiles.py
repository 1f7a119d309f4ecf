"""Write the samples' generated Ascend NPU profiles (torch_npu text exports).

    python samples/make_npu_profiles.py            # rewrite samples/<sample>/npu_profile/
    python samples/make_npu_profiles.py --check    # exit 1 if the committed files are stale

No public torch_npu profile with call stacks exists, so these profiles are GENERATED, not
recorded: each sample's run description (tests/synth/sample_runs.py) lists what one training step
of the sample does on an NPU -- the host ops each source line issues, the kernels they launch, the
backward pass, the DDP all-reduce, the optimizer -- with stacks that point at the sample's real
lines (found by searching the call text in the parsed source, as paths of a training host:
/home/ma-user/work/<sample>/...). tests/synth lays that description out in time and writes it
exactly as torch_npu.profiler's text export (ascend-formats.md). The timings are knobs
(CnnKnobs, TransformerKnobs) chosen so the profiles show the problems the hints look for.

Deterministic: the same sources and knobs give byte-identical files, so re-running after editing
a sample only moves the stacks to the new lines.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

SAMPLES = Path(__file__).resolve().parent
REPO = SAMPLES.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.synth.sample_runs import CnnKnobs, TransformerKnobs, cnn_runs, transformer_run  # noqa: E402
from tests.synth.truth import truth  # noqa: E402
from tests.synth.write_text import write_torch_npu_text  # noqa: E402

GENERATED_MD = """\
# Generated NPU profile — not a recording

The `*_ascend_pt` folder{s} here {are} **generated**, not captured on an Ascend NPU. No public
torch_npu profile with call stacks exists, so this one is written by

    python samples/make_npu_profiles.py

from the run description `{describer}` in `tests/synth/sample_runs.py` (knobs: `{knobs}`), using
the spec-exact writers in `tests/synth/` (torch_npu.profiler text export as described in
`ascend-formats.md`: `trace_view.json`, `kernel_details.csv`, `operator_details.csv`,
`step_trace_time.csv`, statistics{comm}).

What the description says the job did ({ranks}, profiler `Level1`, `with_stack=True`,
`record_shapes=True`, PipeUtilization PMU, task queue on; recorded step{plural} {steps} as with
`schedule(wait=1, warmup=1, active={active})`):

{summary}

Every `Call stack` frame points at a real line of this sample (the generator finds each line by
searching its call text in the parsed source), written as a training host records it:
`/home/ma-user/work/{sample}/...`; map it to your checkout with
`--path-map /home/ma-user/work/{sample}={sample_dir}` or let suffix matching find the files.
The timings are chosen, not measured: they are sized to show the problems below, not to
predict how fast this model runs.

| figure (per step, rank 0) | value |
|---|---|
{table}
"""


def _fmt_us(ns: float) -> str:
    return f"{ns / 1000:,.1f} µs"


def _table(run) -> str:
    t = truth(run)
    n = len(t.steps)
    step = t.mean_step_time_ns
    rows = [
        ("step time (Computing + Comm. not overlapped + Free)", _fmt_us(step)),
        ("ProfilerStep duration (host)", _fmt_us(sum(s.host_dur_ns for s in t.steps) / n)),
        ("Computing", _fmt_us(sum(s.computing_ns for s in t.steps) / n)),
        ("Communication not overlapped", f"{_fmt_us(sum(s.comm_not_overlapped_ns for s in t.steps) / n)} "
                                         f"({t.comm_not_overlapped_share:.1%})"),
        ("Free", _fmt_us(sum(s.free_ns for s in t.steps) / n)),
        ("device kernels", f"{t.kernel_count // n}"),
        ("TransData kernels", f"{_fmt_us(t.kernel_ns_by_type['TransData'] / n)} "
                              f"({t.kernel_ns_by_type['TransData'] / n / step:.1%} of step)"),
    ]
    return "\n".join(f"| {a} | {b} |" for a, b in rows)


SUMMARIES = {
    "cnn_classifier": """\
* ReLU → Dropout three times (the `nn.Sequential` embed block, `self.drop(self.act(self.fc1(x)))`,
  `F.dropout(F.relu(self.fc2(x)), ...)`): Relu, mask generation (second stream) and DropOutDoMask
  kernels, each well under 50 µs; after the short fc1/fc2 matmuls the device waits on their
  launches (mean Wait Time over 5 µs: dispatch-bound) (NPU101);
* one DDP bucket all-reduce (`hcom_allReduce_`, a slow link) after the backward pass that nothing
  overlaps, over a third of the step (NPU102);
* `trans_TransData_*` around every Conv2D and `aclnnAddmm_TransData_TransData` around the embed
  block's Linear, over 5 % of the step (NPU103);
* `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` over 10 ms per step, the slower on
  rank 1 (NPU104);
* `torch.npu.synchronize()` (`AscendCL@aclrtSynchronizeDevice`), which waits for that all-reduce
  and the optimizer's kernels, and `loss.item()` (`aten::item` with
  `AscendCL@aclrtSynchronizeStream`) every step (NPU108);
* single-tensor SGD with momentum: three small kernels per parameter.""",
    "tiny_transformer": """\
* RMSNorm written out (`pow-mean-add-rsqrt-mul-mul`, NPU210), SwiGLU via `chunk-silu-mul` (NPU211),
  rotary `mul-chunk-neg-cat-mul-add` (NPU212), attention
  `matmul-mul-add-softmax-dropout-matmul` (NPU213), `permute-contiguous-view` (NPU215);
* the `lm_head` MatMulV3 of `2048,128;128,32003` (bf16, > 100 MB in and out) whose N is not a
  multiple of 256, with `aic_mte2_ratio` 0.96 (NPU106) — as if run with `--batch-size 32`;
* unfused AdamW: `Optimizer.step#AdamW.step` with eight kernels per parameter (NPU220) and
  `clip_grad_norm_` per tensor with `add-reciprocal-mul` (NPU221);
* `loss.item()` every step (NPU108), a single-process DataLoader over 10 ms per step (NPU104).""",
}


def build(out_root: Path) -> list[Path]:
    """Write both samples' profiles under ``out_root/<sample>/npu_profile``; return the files."""
    written: list[Path] = []
    jobs = (
        ("cnn_classifier", "cnn_runs", "CnnKnobs", cnn_runs(SAMPLES / "cnn_classifier", CnnKnobs())),
        ("tiny_transformer", "transformer_run", "TransformerKnobs",
         [transformer_run(SAMPLES / "tiny_transformer", TransformerKnobs())]),
    )
    for sample, describer, knobs, runs in jobs:
        dest = out_root / sample / "npu_profile"
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        for run in runs:
            write_torch_npu_text(run, dest)
        ranks = f"{len(runs)} ranks under DDP" if len(runs) > 1 else "1 rank"
        steps = ", ".join(str(s.number) for s in runs[0].steps)
        text = GENERATED_MD.format(
            s="s" if len(runs) > 1 else "", are="are" if len(runs) > 1 else "is", describer=describer, knobs=knobs,
            comm=", `communication.json`, `communication_matrix.json`" if len(runs) > 1 else "", ranks=ranks,
            steps=steps, plural="s" if len(runs[0].steps) > 1 else "", active=len(runs[0].steps), summary=SUMMARIES[sample], sample=sample, sample_dir=f"samples/{sample}",
            table=_table(runs[0]))
        (dest / "GENERATED.md").write_text(text, encoding="utf-8")
        written += sorted(p for p in dest.rglob("*") if p.is_file())
    return written


def _same_tree(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    return not mismatch and not errors and all(_same_tree(a / d, b / d) for d in cmp.common_dirs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    args = parser.parse_args(argv)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            build(Path(tmp))
            stale = [s for s in ("cnn_classifier", "tiny_transformer")
                     if not (SAMPLES / s / "npu_profile").is_dir()
                     or not _same_tree(Path(tmp) / s / "npu_profile", SAMPLES / s / "npu_profile")]
        for s in stale:
            print(f"samples/{s}/npu_profile is stale: run python samples/make_npu_profiles.py", file=sys.stderr)
        return 1 if stale else 0
    for path in build(SAMPLES):
        print(f"{path.relative_to(REPO)}  {path.stat().st_size:,} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
