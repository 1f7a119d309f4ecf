"""Source-index and attribution speed, as ratios to baselines measured in the same run.

    python benchmarks/bench_source_index.py [--lines 3000] [--kernels 1000000] [--repeat 3]

Prints, for a generated model file of ``--lines`` lines:
* ``libcst.parse_module`` alone (the baseline, 1.00x);
* libcst metadata the index could have used instead (PositionProvider, + QualifiedNameProvider);
* ``SourceIndex.build`` cold (every chunk parsed), whole-file (one parse), and after a one-line
  edit with the previous index (what a keystroke costs);
* re-anchoring an attribution after an edit (workspace re-index + ``Attributor.update_file``);
and for a generated linked profile of ``--kernels`` kernels over that file:
* ``attribute()`` against a bare pandas group-by of the kernel durations per stack.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from _common import best

import libcst
from libcst.metadata import MetadataWrapper, PositionProvider, QualifiedNameProvider

from msprof_lsp.mapping.source.attribute import Attributor
from msprof_lsp.mapping.profile.frames import StackTable
from msprof_lsp.mapping.profile.model import HOST_OP_SCHEMA, KERNEL_SCHEMA, Profile, ProfileKind, ProfileMeta, Step, make_table
from msprof_lsp.mapping.source.source_index import SourceIndex
from msprof_lsp.mapping.source.workspace import SourceWorkspace

BLOCK = '''

class Block{k}(nn.Module):
    """Block {k}: 中文说明 😋."""

    def __init__(self, d):
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(4 * d, d)
        self.seq = nn.Sequential(
            nn.Linear(d, d),
            nn.ReLU(),
            nn.Dropout(0.2),
        )

    def forward(self, x):
        y = self.drop(self.act(self.fc1(x)))
        y = F.dropout(F.relu(self.fc2(y)), p=0.1, training=self.training)
        z = torch.matmul(y, y.transpose(-1, -2)) @ y
        for _ in range(2):
            z = z + self.seq(z).float().to(torch.float16)
        return z.softmax(-1)
'''


def model_source(lines: int) -> str:
    out = ["import torch", "import torch.nn.functional as F", "from torch import nn", ""]
    text = "\n".join(out)
    k = 0
    while text.count("\n") < lines:
        text += BLOCK.format(k=k)
        k += 1
    return text


def profile_for(index: SourceIndex, n_kernels: int, remote: str) -> Profile:
    """A linked Ascend-style profile: one aten op + dispatch scope per call of every forward,
    kernels spread over them, steps of equal length."""
    table = StackTable()
    ops = [c for c in index.calls if c.function.endswith(".forward") and not c.operator]
    names = {"relu": "aten::relu", "dropout": "aten::dropout", "matmul": "aten::matmul",
             "softmax": "aten::softmax", "to": "aten::to", "float": "aten::to", "transpose": "aten::transpose"}
    rows_name, rows_parent, rows_stack, rows_start, rows_dur = ["ProfilerStep#1"], [-1], [-1], [0], [10**12]
    launch = []
    for i, c in enumerate(ops):
        name = names.get(c.name, "aten::linear" if c.self_attr in ("fc1", "fc2") else "aten::add")
        sid = table.intern_text(f"{remote}({c.span.line}): forward;\r\n"
                                "/usr/lib/python3.9/site-packages/torch/nn/modules/module.py(1747): _call_impl;\r\n"
                                f"{remote}(9999): <module>")
        rows_name += [name, "aclnn" + name.split("::")[1].title()]
        rows_parent += [0, len(rows_name) - 2]
        rows_stack += [sid, -1]
        rows_start += [1000 * i, 1000 * i + 1]
        rows_dur += [500, 400]
        launch.append(len(rows_name) - 1)
    host = make_table(HOST_OP_SCHEMA, {"name": rows_name, "parent": rows_parent, "stack": rows_stack,
                                       "start_ns": rows_start, "dur_ns": rows_dur}, len(rows_name))
    rng = np.random.default_rng(0)
    which = rng.integers(0, len(launch), n_kernels)
    host_op = np.asarray(launch, dtype=np.int64)[which]
    kernels = make_table(KERNEL_SCHEMA, {
        "name": np.where(which % 2 == 0, "aclnnMm_MatMulCommon_MatMulV2", "aclnnRelu_Relu_Relu"),
        "type": np.where(which % 2 == 0, "MatMulV2", "Relu"),
        "core": np.full(n_kernels, "AI_CORE"),
        "start_ns": np.arange(n_kernels, dtype=np.int64) * 10,
        "dur_ns": rng.integers(1, 100, n_kernels),
        "host_op": host_op,
        "stack": host.loc[host_op - 1, "stack"].to_numpy(),
        "step": np.arange(n_kernels) * 10 // (n_kernels * 10 // 4 + 1) + 1,
        "link": np.full(n_kernels, "stack"),
    }, n_kernels)
    steps = [Step(i + 1, 0, 1) for i in range(4)]
    return Profile(ProfileMeta(ProfileKind.TORCH_NPU, "/bench"), kernels=kernels, host_ops=host,
                   stacks=list(table.stacks), steps=steps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=3000)
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)

    src = model_source(args.lines)
    n_lines = src.count("\n")
    base = best(lambda: libcst.parse_module(src), args.repeat)
    print(f"model file: {n_lines} lines, {len(src):,} characters")
    print(f"{'libcst.parse_module (baseline)':52s} {base * 1000:8.1f} ms   1.00x")

    def row(label: str, seconds: float) -> None:
        print(f"{label:52s} {seconds * 1000:8.1f} ms {seconds / base:6.2f}x")

    row("parse + PositionProvider", best(
        lambda: MetadataWrapper(libcst.parse_module(src), unsafe_skip_copy=True).resolve(PositionProvider), 1))
    row("parse + PositionProvider + QualifiedNameProvider", best(
        lambda: MetadataWrapper(libcst.parse_module(src), unsafe_skip_copy=True).resolve_many(
            [PositionProvider, QualifiedNameProvider]), 1))
    row("SourceIndex.build, one whole-file parse", best(
        lambda: SourceIndex.build("/bench/model.py", src, chunked=False), 1))
    cold = SourceIndex.build("/bench/model.py", src)
    row("SourceIndex.build, cold (chunked)", best(lambda: SourceIndex.build("/bench/model.py", src), args.repeat))
    lines = src.split("\n")
    mid = len(lines) // 2
    edited = "\n".join(lines[:mid] + ["# an inserted comment line"] + lines[mid:])
    row("SourceIndex.build after a one-line edit (keystroke)", best(
        lambda: SourceIndex.build("/bench/model.py", edited, previous=cold), args.repeat))

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.py"
        path.write_text(src, encoding="utf-8")
        ws = SourceWorkspace([tmp])
        remote = "/home/ma-user/work/model.py"
        small = profile_for(ws.index(path), 20_000, remote)
        att = Attributor(small, ws)
        sites = len(att.attribution.sites)

        def keystroke() -> None:
            ws.set_text(path, edited)
            att.update_file(path)
            ws.set_text(path, src)
            att.update_file(path)

        t = best(keystroke, args.repeat) / 2
        row(f"re-index + update_file after an edit ({sites} sites)", t)

        prof = profile_for(ws.index(path), args.kernels, remote)
        kb = best(lambda: prof.kernels.groupby("stack")["dur_ns"].sum(), args.repeat)
        ka = best(lambda: Attributor(prof, ws), 1)
        print()
        print(f"profile: {args.kernels:,} kernels, {len(prof.host_ops):,} host ops, {len(prof.stacks):,} stacks")
        print(f"{'kernels.groupby(stack).dur.sum() (baseline)':52s} {kb * 1000:8.1f} ms   1.00x")
        print(f"{'attribute() (all stages, cold index cache)':52s} {ka * 1000:8.1f} ms {ka / kb:6.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
