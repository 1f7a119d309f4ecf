"""Record a profile where there is none: a profiling block around the training loop.

``insert_profiler`` wraps the training loop (the loop whose body calls ``.backward()`` and
``.step()``: the rules' training-loop finder) in a profiler that is off unless the
``MSPROF_LSP_PROFILE`` environment variable is set: unset, the block is a
``contextlib.nullcontext()`` and committing it changes nothing. A script that imports torch_npu
unconditionally gets ``torch_npu.profiler`` with CPU+NPU activities, Level1 and PipeUtilization; a
script that imports nothing of it gets ``torch.profiler`` with the CPU, plus CUDA when the script
mentions CUDA and the machine has it; a script that guards the import (``npu_access``) gets both in
one block, ``if torch_npu is not None:`` the first, else the second, so recording works on every
machine the script runs on.
The trace goes to ``msprof_profiles/`` beside the script, a folder inside the workspace, which the
language server watches for new profiles. ``prof.step()`` ends each iteration of the innermost
training loop. ``snippet`` prints the same block for a loop of your own.
"""

from __future__ import annotations

import enum
import re

import libcst as cst

from msprof_lsp.mapping.source.source_index import LoopInfo, SourceIndex, SourceSyntaxError

from . import cst_tools as ct
from .npu_access import NpuImport, npu_access, optional_npu
from .result import Anchor, FixResult, Text, anchor_path, decline, result, text_of, where

PROFILE_ENV = "MSPROF_LSP_PROFILE"
"""Set (to anything non-empty) to record; unset, the inserted block does nothing."""
PROFILE_FOLDER = "msprof_profiles"
"""Where the trace is written, beside the script (the language server watches the workspace)."""
ACTIVE_STEPS = 3
SKIP_FIRST = 10
"""Steps run before the schedule starts: torch_npu's schedule documentation recommends skipping the
first 10, and a DataLoader with workers is still filling its prefetch queue then (10-16 steps of
the CNN loop on a 2-core machine: docs/savings.md "The CPU loop"), so a profile recorded after the
NPU104 fix would time the ramp instead of the fix."""
TITLE = "Record a profile of this training loop (off unless MSPROF_LSP_PROFILE is set)"
HOW_TO_RECORD = (
    f"to record one, use the code action \"{TITLE}\" on the training loop, or paste the block "
    f"`msprof-lsp --print-profiler-snippet [--npu|--cuda|--cpu]` prints, and run the script with {PROFILE_ENV}=1"
)
"""What the no-profile messages (LSP and --check) add."""


class Flavour(enum.Enum):
    NPU = "npu"  # torch_npu.profiler, CPU + NPU
    CUDA = "cuda"  # torch.profiler, CPU + CUDA when available
    CPU = "cpu"  # torch.profiler, CPU only


_ACTIVITIES = {
    Flavour.NPU: "[torch_npu.profiler.ProfilerActivity.CPU, torch_npu.profiler.ProfilerActivity.NPU]",
    Flavour.CUDA: ("[torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] "
                   "if torch.cuda.is_available() else [])"),
    Flavour.CPU: "[torch.profiler.ProfilerActivity.CPU]",
}


def _profile_call(flavour: Flavour, name: str, active: int, indent: str, npu: str = "torch_npu") -> str:
    """``name = <profiler>.profile(...)`` at ``indent``."""
    mod = f"{npu}.profiler" if flavour is Flavour.NPU else "torch.profiler"
    activities = _ACTIVITIES[flavour].replace("torch_npu.", f"{npu}.")
    extra = ""
    if flavour is Flavour.NPU:
        extra = (
            f"    experimental_config={mod}._ExperimentalConfig(\n"
            f"        profiler_level={mod}.ProfilerLevel.Level1,\n"
            f"        aic_metrics={mod}.AiCMetrics.PipeUtilization,\n"
            "    ),\n"
        )
    body = (
        f"    activities={activities},\n"
        f"    schedule={mod}.schedule(wait=1, warmup=1, active={active}, repeat=1, skip_first={SKIP_FIRST}),\n"
        "    with_stack=True,\n"
        "    record_shapes=True,\n"
        "    with_modules=True,\n"
        f"{extra}"
        f"    on_trace_ready={mod}.tensorboard_trace_handler(\n"
        f"        os.path.join(os.path.dirname(os.path.abspath(__file__)), \"{PROFILE_FOLDER}\")\n"
        "    ),\n"
        ")\n"
    )
    return f"{indent}{name} = {mod}.profile(\n" + "".join(indent + ln + "\n" for ln in body.splitlines())


def setup_code(flavour: Flavour, name: str = "msprof_profiler", active: int = ACTIVE_STEPS, *,
               npu: str = "torch_npu", fallback: Flavour | None = None) -> str:
    """The statements that make the profiler (or a no-op context) bound to ``name``. With
    ``fallback`` (a script that guards its torch_npu import): ``flavour``'s profiler where ``npu``
    is not None, ``fallback``'s where it is."""
    head = (
        f"{name} = contextlib.nullcontext()\n"
        f"if os.environ.get(\"{PROFILE_ENV}\"):  # set it to record a profile (msprof-lsp)\n"
    )
    if fallback is None:
        return head + _profile_call(flavour, name, active, "    ", npu)
    return (
        head
        + f"    if {npu} is not None:\n"
        + _profile_call(flavour, name, active, "        ", npu)
        + "    else:  # torch_npu is not installed here: torch.profiler\n"
        + _profile_call(fallback, name, active, "        ", npu)
    )


def step_code(prof: str) -> str:
    return f"if {prof} is not None:\n    {prof}.step()  # one profiler step per iteration (msprof-lsp)\n"


def snippet(flavour: Flavour) -> str:
    """The block as a printable snippet around a placeholder loop (``--print-profiler-snippet``)."""
    imports = "import contextlib\nimport os\n\n" + ("import torch_npu\n" if flavour is Flavour.NPU else "import torch\n")
    loop = (
        "with msprof_profiler as prof:\n"
        "    for batch in loader:  # your training loop\n"
        "        ...  # forward, loss.backward(), optimizer.step()\n"
        + "".join("        " + ln + "\n" for ln in step_code("prof").splitlines())
    )
    return f"{imports}\n{setup_code(flavour)}{loop}"


def training_loops(index: SourceIndex) -> list[LoopInfo]:
    """The file's training loops, by the rules' one definition of a training loop."""
    from msprof_lsp.hints.source_query import training_loops as found  # late: the queries import the fixes

    return found(index)


def torch_flavour(text: str) -> Flavour:
    """The torch.profiler flavour: a mention of CUDA is enough, since the CUDA activity is only
    added where torch.cuda.is_available()."""
    return Flavour.CUDA if re.search(r"\bcuda\b", text) else Flavour.CPU


_PROFILERS = ("torch.profiler.profile", "torch_npu.profiler.profile", "torch.autograd.profiler.profile")


def _already_profiled(index: SourceIndex) -> bool:
    return PROFILE_ENV in index.text or any(c.qualname in _PROFILERS for c in index.calls)


def _chosen_loops(index: SourceIndex, line: int) -> tuple[LoopInfo, LoopInfo] | None:
    """(outermost, innermost) training loop around ``line``, else the file's last outermost one
    (a finding's anchor outside the loop, e.g. on the DataLoader)."""
    loops = training_loops(index)
    if not loops:
        return None
    around = [lp for lp in loops if lp.span.line <= line <= lp.span.end_line]
    if around:
        outer = min(around, key=lambda lp: lp.span.line)
    else:
        outers = [lp for lp in loops if not any(o is not lp and o.span.line <= lp.span.line <= o.span.end_line for o in loops)]
        outer = max(outers, key=lambda lp: lp.span.line)
    inside = [lp for lp in loops if outer.span.line <= lp.span.line <= outer.span.end_line]
    inner = max(inside, key=lambda lp: lp.span.line)
    return outer, inner


def _node_at(src: ct.Source, loop: LoopInfo) -> cst.For | cst.While | None:
    kind = cst.For if loop.kind == "for" else cst.While
    hits = [n for n in src.at(where(loop.header.line), kind) if src.lines(n)[0] == loop.header.line]  # type: ignore[arg-type]
    return hits[-1] if hits else None


def _continues(src: ct.Source, loop: cst.For | cst.While) -> bool:
    """A ``continue`` of this loop (not of a nested one) would skip the step at the end."""
    for node in src.within(loop.body, cst.Continue):
        owner = next((a for a in src.ancestors(node) if isinstance(a, (cst.For, cst.While))), None)
        if owner is loop:
            return True
    return False


def loop_lines(text: str, path: str = "") -> list[tuple[int, int]]:
    """(first, last) line of each outermost training loop without a profiler yet: where the
    record action is offered. Cheap before parsing: a file without both calls has none."""
    if ".backward(" not in text or ".step(" not in text or PROFILE_ENV in text:
        return []
    try:
        index = SourceIndex.build(path, text)
    except SourceSyntaxError:
        return []
    if _already_profiled(index):
        return []
    loops = training_loops(index)
    return [(lp.span.line, lp.span.end_line) for lp in loops
            if not any(o is not lp and o.span.line <= lp.span.line <= o.span.end_line for o in loops)]


def insert_profiler(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    src = ct.parse(source)
    if src is None:
        return decline(why, "the file does not parse")
    file = anchor_path(anchor, path)
    try:
        index = SourceIndex.build(file, text_of(source))
    except SourceSyntaxError:
        return decline(why, "the file does not parse")
    if _already_profiled(index):
        return decline(why, "the script already records a profile")
    chosen = _chosen_loops(index, where(anchor).line)
    if chosen is None:
        return decline(why, "no training loop (a loop calling .backward() and .step()) in this file")
    outer = _node_at(src, chosen[0])
    inner = _node_at(src, chosen[1])
    if outer is None or inner is None or src.block_of(outer) is None:
        return decline(why, "the training loop is not a plain statement of a block")
    if _continues(src, inner):
        return decline(why, "the loop body has a continue, which would skip the profiler step")
    if not isinstance(inner.body, cst.IndentedBlock):
        return decline(why, "the loop body is on the header line")
    # how the file gets torch_npu: every path it imports it (NPU), on some (both, one block), none
    access = npu_access(src.module)
    flavour = Flavour.NPU if access.how is not NpuImport.NONE else torch_flavour(index.text)
    fallback = torch_flavour(index.text) if access.how is NpuImport.GUARDED else None
    name = ct.fresh_name(src.module, "msprof_profiler")
    prof = ct.fresh_name(src.module, "prof")
    setup = list(cst.parse_module(setup_code(flavour, name, npu=access.name, fallback=fallback)).body)
    stepped = inner.with_changes(body=inner.body.with_changes(body=[*inner.body.body, *cst.parse_module(step_code(prof)).body]))
    if inner is outer:
        loop: cst.BaseStatement = stepped
    else:
        loop = ct.rewrite(outer, {inner: stepped})
    wrapped = cst.With(
        items=[cst.WithItem(cst.Name(name), asname=cst.AsName(cst.Name(prof)))],
        body=cst.IndentedBlock(body=[loop.with_changes(leading_lines=())]),
        leading_lines=(),
    )
    first, *rest = setup
    replacement = cst.FlattenSentinel([first.with_changes(leading_lines=outer.leading_lines), *rest, wrapped])
    module = src.rewrite({outer: replacement})
    module = ct.add_stdlib_import(module, "contextlib")
    module = ct.add_stdlib_import(module, "os")
    if (flavour is not Flavour.NPU or fallback is not None) and ct.binds_module(module, "torch") != "torch":
        module = ct.add_import_after(module, "torch", "torch")
    if fallback is not None:
        module = optional_npu(module)[1]  # the test above needs torch_npu = None where the import failed
    return result(
        source,
        module.code,
        TITLE,
        safe=False,
        path=file,
        notes=(f"run with {PROFILE_ENV}=1; the trace goes to {PROFILE_FOLDER}/ beside the script",),
    )

