"""The committed sample traces (real torch recordings of samples/, read by the Kineto reader)
attribute to the samples' code: every op is placed in the function its frame names, ops that
entered a sub-module land on a call of an attribute (or nn.Sequential element) of that class.

Expectations come from the profile's own frames and the source text, not from the mapping."""

from __future__ import annotations

from pathlib import Path

import pytest

from msprof_lsp.mapping.source.attribute import attribute
from msprof_lsp.mapping.source.source_index import SourceIndex
from msprof_lsp.mapping.spans import Confidence
from msprof_lsp.mapping.source.workspace import SourceWorkspace

REPO = Path(__file__).resolve().parents[3]


def sample_traces() -> list[Path]:
    return sorted((REPO / "samples").glob("*/kineto/*.pt.trace.json*"))


@pytest.mark.parametrize("trace", sample_traces(), ids=lambda p: p.parent.parent.name)
def test_sample_trace_ops_land_on_their_calls(trace):
    load = pytest.importorskip("msprof_lsp.mapping.profile.load")
    profile = load.load_location(load.locate(trace), use_cache=False)
    root = trace.parent.parent
    ws = SourceWorkspace([root])
    a = attribute(profile, ws)
    assert a.heat.time_source == "host" and a.heat.total_device_ns > 0
    assert a.heat.mapped_share > 0.9  # the samples are all user code or torch
    assert a.heat.unmapped_files == []

    indexes = {p.name: SourceIndex.build(str(p), p.read_text(encoding="utf-8")) for p in root.glob("*.py")}
    h = profile.host_ops
    checked_modules = 0
    for row in range(len(h)):
        sid = int(h["stack"].iat[row])
        site = a.site_of_op(row)
        if sid < 0 or site is None or site.frame is None:
            continue
        frames = profile.stacks[sid]
        if site.frame not in frames:
            continue  # a backward op, placed through its forward op's stack
        user = frames.index(site.frame)
        frame = frames[user]
        index = indexes[Path(frame.file).name]
        # the site is in the function the frame names (def line, or the running function)
        fn = index.functions.get(site.function) or index.functions.get(site.function.replace("__init__", "forward"))
        assert fn is not None and fn.name in (frame.func, "__init__"), (frame, site)
        assert site.confidence is Confidence.MODULE
        mods = [f.module for f in frames[:user] if f.module is not None]
        if not mods or site.kind == "function":
            continue
        cls = mods[-1][0]  # the module called from the user's function
        if site.kind == "element":
            container = mods[-1][0]
            element_cls = mods[-2][0] if len(mods) > 1 else ""
            assert container in ("Sequential", "ModuleList") and site.call_text.startswith(
                ("nn.", "torch.nn.")) and element_cls in site.call_text, (frames, site)
        else:
            call = next(c for c in index.calls_in(site.function) if c.span == site.span)
            if call.self_attr or call.loop_attr:
                attr = index.module_attr(call.cls, call.self_attr or call.loop_attr)
                assert attr is not None and (attr.class_name == cls or cls in
                                             {e.class_name for e in attr.elements}), (frames, site)
            else:  # a local module: criterion = nn.CrossEntropyLoss(); criterion(out, y)
                binding = index.binding_for(call.function, call.callee)
                assert binding is not None and binding.ctor.rsplit(".", 1)[-1] == cls, (frames, site)
        checked_modules += 1
    assert checked_modules > 0
