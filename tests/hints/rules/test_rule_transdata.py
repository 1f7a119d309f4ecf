"""NPU103 transdata-format: TransData (+ paired Cast) around Cube ops against transdataMinPercent,
anchored on the user's Conv call, the global switch after ``import torch_npu``."""

from __future__ import annotations

import pytest
from seedkit import CALL_IMPL, L, Launch, UserCall, analyse, applied, backward, fwd, optimizer_step, pct, span_text, step_run
from tests.synth import truth
from tests.synth.run import Gap, us

from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.engine import run_rules
from msprof_lsp.hints.registry import rule
from msprof_lsp.mapping.profile.model import Profile, ProfileKind, ProfileMeta
from msprof_lsp.mapping.profile.readers.ascend_csv import read_kernel_table
from msprof_lsp.mapping.spans import Confidence

X, W, OUT = (32, 3, 16, 16), (16, 3, 3, 3), (32, 16, 16, 16)


def _run(trans_us: float):
    conv = L.conv2d(X, W, OUT, conv_us=80.0, trans_us=trans_us)
    lin = L.linear(32, 1024, 64, mm_us=60.0)
    items = [
        UserCall(fwd("c = self.conv(img)"), (Launch(conv.op, conv.frames + CALL_IMPL),), label="conv"),
        UserCall(fwd("x = self.drop(self.act(self.fc1(x)))"), (Launch(lin.op, lin.frames + CALL_IMPL),), label="fc1"),
        backward(),
        optimizer_step(False),
        Gap(us(400)),
    ]
    return step_run(items, jitter_ns=0)  # exact durations: the description is the expectation


def _transdata_share(trans_us: float) -> tuple[float, float]:
    """(per-step ns, share): forward Cast (trans/2) + TransData, backward TransData, per step."""
    t = truth(_run(trans_us))
    per_step = us(trans_us) * 2 + us(trans_us / 2)
    assert t.kernel_ns_by_type["TransData"] == us(trans_us) * 2 * len(t.steps)
    return per_step, per_step / t.mean_step_time_ns


def test_fires_on_the_conv_call_with_the_numbers(tmp_path):
    per_step, share = _transdata_share(20.0)
    a = analyse(_run(20.0), tmp_path)
    [f] = a.run("NPU103")
    assert span_text(f.span) == "self.conv(img)" and f.confidence is Confidence.STACK
    assert f.time_per_step_us == pytest.approx(per_step / 1000)
    assert f.share == pytest.approx(share)
    assert f.message.startswith("TransData: 2 kernels, ")
    assert f"({pct(share)} of the device step), with 1 Cast, around Conv2D: format conversions around Cube ops." in f.message
    assert f.evidence["private_formats"] == ["NC1HWC0"]
    assert f.evidence["transdata_us_per_step"] == pytest.approx(2 * 20.0)
    assert f.evidence["cast_us_per_step"] == pytest.approx(10.0)
    # the global switch: related information and the fix at train.py's `import torch_npu`
    assert [span_text(r.span) for r in f.related] == ["import torch_npu"]
    path, new = applied(f, "allow_internal_format")
    assert path.endswith("train.py")
    assert "import torch_npu\ntorch_npu.npu.config.allow_internal_format = False\n" in new
    assert "input_format" not in new  # never the non-existent argument


def test_just_below_transdata_min_percent(tmp_path):
    prev = None
    for tenth in range(5, 400):
        trans = tenth / 10
        if _transdata_share(trans)[1] >= 0.01:
            break
        prev = trans
    assert prev is not None and _transdata_share(prev)[1] < 0.01 <= _transdata_share(trans)[1]
    assert analyse(_run(prev), tmp_path / "below").run("NPU103", min_share=0.0) == []
    assert len(analyse(_run(trans), tmp_path / "at").run("NPU103", min_share=0.0)) == 1


def test_kernel_only_pairs_by_neighbour(tmp_path):
    a = analyse(_run(20.0), tmp_path)
    table = read_kernel_table(a.root / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    prof = Profile(ProfileMeta(ProfileKind.TORCH_NPU, str(a.root)), kernels=table.to_frame())
    [f] = run_rules(RuleContext(prof, None, None, RuleConfig()), [rule("NPU103")])
    rows = a.kernel_rows()
    # a TransData with a Cube kernel within two rows on its stream
    cube = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "MatMulV2")
    paired = 0
    for i, r in enumerate(rows):
        if r["Type"] == "TransData":
            near = [x for x in rows[max(0, i - 2): i + 3] if x is not r and x["Stream ID"] == r["Stream ID"]]
            paired += any(x["Type"] in cube for x in near)
    assert sum(e["count"] for e in f.evidence["transdata"]) == paired == 2 * 2
    assert f.evidence["evidence"] == "kernel order" and f.span is None


def test_no_transdata_no_finding(tmp_path):
    lin = L.linear(32, 1024, 64, mm_us=60.0)
    run = step_run([UserCall(fwd("x = self.drop(self.act(self.fc1(x)))"), (Launch(lin.op, lin.frames),)), backward()])
    assert analyse(run, tmp_path).run("NPU103", min_share=0.0) == []


@pytest.mark.parametrize("seed", range(25))
def test_kernels_group_by_call_as_row_by_row(seed: int):
    """``_by_call`` works per distinct site; it gives what reading the kernels row by row gives:
    groups in order of their first row (TransData rows first), rows in order, the lowest-rank site
    of each span (the first of equals), the kernels without a site one group."""
    import types

    import numpy as np

    from msprof_lsp.mapping.source.heat import Site
    from msprof_lsp.mapping.spans import Span

    from msprof_lsp.hints.rules.transdata import _by_call

    rng = np.random.default_rng(seed)
    spans = [Span("/m.py", line, 0, line, 9) for line in (3, 5, 8)]
    sites = [Site(spans[int(rng.integers(0, 3))], list(Confidence)[int(rng.integers(0, 3))], "f", "c") for _ in range(6)]
    att = types.SimpleNamespace(kernel_site=rng.integers(-1, len(sites), 40), sites=sites)
    rows, casts = rng.permutation(45)[:int(rng.integers(0, 20))], rng.permutation(45)[:int(rng.integers(0, 12))]

    groups: dict[object, tuple[list[int], list[int]]] = {}
    best: dict[object, object] = {}
    for bucket, items in ((0, rows), (1, casts)):
        for r in items:
            i = int(att.kernel_site[r]) if r < len(att.kernel_site) else -1
            site = sites[i] if i >= 0 else None
            key = site.span if site is not None else None
            groups.setdefault(key, ([], []))[bucket].append(int(r))
            old = best.get(key)
            if old is None or (site is not None and site.confidence.rank < old.confidence.rank):
                best[key] = site
    want = [(best[k], t, c) for k, (t, c) in groups.items()]
    got = _by_call(att, rows, casts)
    assert [(s, t.tolist(), c.tolist()) for s, t, c in got] == want
    alone = [(s, t.tolist(), c.tolist()) for s, t, c in _by_call(None, rows, casts)]  # no attribution
    assert alone == ([(None, rows.tolist(), casts.tolist())] if len(rows) or len(casts) else [])
