"""Rules registered by the test launcher (serve_with_test_rules.py) for the server's plumbing tests.

They are genuine rules over the real attribution -- real numbers, real spans, and where they apply
the real NPU101 fix transforms of hints.fixes -- with behaviour fixed here, so the end-to-end
expectations do not move when the catalog's rules are tuned (test_lsp_catalog.py covers those).

* TST101 relu-dropout-pair: a line whose heat holds both ReLU and dropout kernels (hint-rules
  NPU101); anchored on the dropout span; offers the fixes of hints.fixes.relu_dropout (review; the
  p=0 one is safe), expanded when code actions are asked for; the ReLU span as related information.
* TST102 hot-line: a line with >= 5 % of the step; one safe fix that inserts a comment line above
  the statement (a harmless edit, so fixAll has safe fixes to apply on the samples).
* TST900 profile-notes: one profile-level finding (no line), which the server must show as a
  message. It also prints to stdout, which must never reach the JSON-RPC stream.
"""

from __future__ import annotations

import sys

from msprof_lsp.hints.finding import Related, Severity, TextEdit, Fix
from msprof_lsp.hints.fixes import make_offer, relu_dropout
from msprof_lsp.hints.registry import Rule, declare

HOT_SHARE = 0.05


def _is_relu(op) -> bool:  # noqa: ANN001
    return op.type.startswith("Relu")


def _is_dropout(op) -> bool:  # noqa: ANN001
    return op.type.startswith("DropOut")


@declare("TST101", "relu-dropout-pair")
class ReluDropoutPair(Rule):
    """Test double of NPU101: ReLU and dropout kernels launched from one line.

    Small elementwise kernels back to back are dispatch-bound; see NPU101.
    """

    def check(self, ctx):  # noqa: ANN001, ANN201
        heat = ctx.attribution.heat if ctx.attribution else None
        if heat is None:
            return
        by_line: dict[tuple[str, int], list] = {}
        for sh in heat.spans:
            by_line.setdefault((sh.site.span.path, sh.site.span.line), []).append(sh)
        for (path, _line), spans in sorted(by_line.items()):
            relu = [s for s in spans if any(_is_relu(o) for o in s.ops)]
            drop = [s for s in spans if any(_is_dropout(o) for o in s.ops)]
            if not relu or not drop:
                continue
            ops = [o for s in spans for o in s.ops if _is_relu(o) or _is_dropout(o)]
            total = sum(o.total_ns for o in ops)
            anchor = max(drop, key=lambda s: s.device_ns).site.span
            relu_span = max(relu, key=lambda s: s.device_ns).site.span
            fixes = [make_offer(make, path, anchor)
                     for make in (relu_dropout.compile_pair, relu_dropout.inplace_relu, relu_dropout.drop_zero_dropout)]
            related = [Related(relu_span, "the ReLU feeding this dropout")] if relu_span != anchor else []
            message = ctx.message(
                "ReLU→Dropout", total_ns=total, count=sum(o.count for o in ops) // ctx.num_steps, unit="kernels",
                diagnosis="dispatch-bound", fix="Compile the pair or use inplace ReLU",
            )
            yield ctx.finding(self, span=anchor, message=message, total_ns=total, fixes=fixes, related=related,
                              evidence={"ops": sorted({o.type for o in ops})})


@declare("TST102", "hot-line")
class HotLine(Rule):
    """Test rule: a line with at least 5 % of the step time.

    Exercises safe fixes and fixAll in the language-server tests.
    """

    def check(self, ctx):  # noqa: ANN001, ANN201
        heat = ctx.attribution.heat if ctx.attribution else None
        if heat is None:
            return
        for lh in heat.lines:
            if lh.share < HOT_SHARE:
                continue
            spans = [s for s in heat.spans if s.site.span.path == lh.path and s.site.span.line == lh.line]
            span = max(spans, key=lambda s: s.device_ns).site.span
            text = ctx.source_text(lh.path) or ""
            lines = text.splitlines()
            line_text = lines[lh.line - 1] if lh.line <= len(lines) else ""
            indent = line_text[: len(line_text) - len(line_text.lstrip())]
            top = lh.ops[0].type if lh.ops else "host"
            fix = Fix("Mark the hot line with a comment", True,
                      (TextEdit(lh.path, lh.line, 0, lh.line, 0, f"{indent}# hot: {top}\n"),))
            message = ctx.message("Hot line", total_ns=lh.device_ns, diagnosis=f"{top} dominates",
                                  fix="Look at the operators in the hover")
            yield ctx.finding(self, span=span, message=message, total_ns=lh.device_ns, fixes=[fix])


@declare("TST900", "profile-notes", default_severity=Severity.INFO)
class ProfileNotes(Rule):
    """Test rule: one profile-level note.

    Profile-level findings are shown as a message, not on a line.
    """

    def check(self, ctx):  # noqa: ANN001, ANN201
        print("TST900: this line goes to stdout and must not reach the JSON-RPC stream")
        sys.stdout.flush()
        steps = ctx.num_steps
        yield ctx.finding(self, span=None, message=f"Profile notes: {steps} profiled steps.")
