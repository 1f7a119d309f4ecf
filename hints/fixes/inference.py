"""NPU250 dropout-in-inference fixes.

* ``eval_before_loop`` (safe when the model variable is known): ``model.eval()`` as the statement
  right before the inference loop, so dropout (and batch-norm statistics) switch to inference
  behaviour. The model is the one name called in the loop body that is visibly a model: built
  from an ``nn.Module`` subclass of this file or a ``torch.nn`` class, loaded with
  ``load_state_dict``/``.to(...)``, or named ``model``/``net``.
* ``inference_mode`` (review): the loop wrapped in ``with torch.inference_mode():`` — tensors made
  inside cannot be used by autograd later.

Neither is offered for a loop that calls ``.backward()``.
"""

from __future__ import annotations

import libcst as cst

from . import cst_tools as ct
from .cst_tools import Source
from .result import Anchor, FixResult, Text, anchor_path, decline


def _module_classes(src: Source) -> set[str]:
    out = set()
    for cls in src.walk(cst.ClassDef, hint="class"):
        for base in cls.bases:
            if src.api_suffix(base.value, "nn.Module", "torch.nn.Module") or ct.dotted(base.value) in ("nn.Module", "Module"):
                out.add(cls.name.value)
    return out


def _is_model_name(src: Source, name: str, classes: set[str]) -> bool:
    if name.rsplit(".", 1)[-1].lower() in ("model", "net", "network", "module") or name.lower().endswith("model"):
        return True
    for a in src.walk(cst.Assign, hint=name.rsplit(".", 1)[-1]):
        if any(ct.dotted(t.target) == name for t in a.targets) and isinstance(a.value, cst.Call):
            callee = ct.dotted(a.value.func) or ""
            if callee.rsplit(".", 1)[-1] in classes or any(q.startswith("torch.nn.") for q in src.qnames(a.value.func)):
                return True
    for c in src.walk(cst.Call, hint=name.rsplit(".", 1)[-1]):
        if isinstance(c.func, cst.Attribute) and ct.dotted(c.func.value) == name and c.func.attr.value in ("load_state_dict", "parameters"):
            return True
    return False


def _loop_and_model(source: Text, anchor: Anchor, why: list[str] | None) -> tuple[Source, cst.For | cst.While, str] | None:
    """The parsed file, the inference loop at the anchor and the one model it calls (both fixes
    start from these)."""
    found = ct.loops_at(source, anchor, why)
    if found is None:
        return None
    src, loops = found
    loop = loops[-1]  # the outermost loop: eval() must come before all of it
    if any(isinstance(c.func, cst.Attribute) and c.func.attr.value == "backward" for c in src.within(loop, cst.Call)):
        return decline(why, "the loop calls backward(): this is training, not inference")
    classes = _module_classes(src)
    called = {ct.dotted(c.func) for c in src.within(loop.body, cst.Call)} - {None}
    models = sorted(n for n in called if _is_model_name(src, n, classes))  # type: ignore[arg-type]
    if len(models) != 1:
        return decline(why, "the model called in the loop is not known" if not models else f"several models called: {models}")
    return src, loop, models[0]


def _preceding(src: Source, loop: cst.CSTNode) -> list[cst.BaseStatement]:
    block = src.block_of(loop)  # type: ignore[arg-type]
    if block is None:
        return []
    i = ct.statement_index(block, loop)  # type: ignore[arg-type]
    return list(block.body[:i])


def eval_before_loop(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    found = _loop_and_model(source, anchor, why)
    if found is None:
        return None
    src, loop, model = found
    for s in _preceding(src, loop):
        if f"{model}.eval()" in ct.code(s) or f"{model}.train(False)" in ct.code(s):
            return decline(why, f"{model}.eval() is already called before the loop")
    if src.block_of(loop) is None:  # type: ignore[arg-type]
        return decline(why, "the loop is not a plain statement of a block")
    return src.fixed(
        {loop: ct.insert_before(loop, ct.stmt(f"{model}.eval()"))},
        f"Call {model}.eval() before the inference loop",
        safe=True,
        path=anchor_path(anchor, path),
        notes=("dropout becomes the identity and batch-norm uses its running statistics",),
    )


def inference_mode(source: Text, anchor: Anchor, *, path: str | None = None, why: list[str] | None = None) -> FixResult | None:
    found = _loop_and_model(source, anchor, why)
    if found is None:
        return None
    src, loop, _model = found
    for p in src.ancestors(loop):
        if isinstance(p, cst.With) and any("inference_mode" in ct.code(i.item) or "no_grad" in ct.code(i.item) for i in p.items):
            return decline(why, "the loop already runs without autograd")
    torch = ct.binds_module(src.module, "torch")
    if torch is None:
        return decline(why, "torch is not imported as a module here")
    w = ct.stmt(f"with {torch}.inference_mode():\n    pass")
    wrapped = w.with_changes(body=cst.IndentedBlock(body=[loop.with_changes(leading_lines=())]), leading_lines=loop.leading_lines)  # type: ignore[union-attr]
    return src.fixed(
        {loop: wrapped},
        "Run the inference loop under torch.inference_mode()",
        safe=False,
        path=anchor_path(anchor, path),
        notes=("tensors created inside cannot be used by autograd afterwards",),
    )
