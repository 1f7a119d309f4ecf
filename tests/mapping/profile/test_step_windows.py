"""The one definition of a profile's step windows (mapping/profile/step_windows.windows), which
the rules, the critical path and the HTML report's timeline all read: its steps, else one window
per kernel Step Id, else the capture span."""

from __future__ import annotations

from msprof_lsp.mapping.profile.model import KERNEL_SCHEMA, Profile, ProfileKind, ProfileMeta, Step, make_table
from msprof_lsp.mapping.profile.step_windows import windows

US = 1000


def _profile(rows: list[tuple[int, int, int]], steps: list[Step] | None = None) -> Profile:
    """Kernels as (step id, start µs, duration µs); a start of -1: untimed."""
    cols: dict[str, list] = {c: [] for c in ("name", "core", "type", "start_ns", "dur_ns", "step", "stream", "device")}
    for step, start, dur in rows:
        for key, value in (("name", "MatMul"), ("core", "AI_CORE"), ("type", "MatMul"),
                           ("start_ns", start * US if start >= 0 else -1), ("dur_ns", dur * US), ("step", step),
                           ("stream", 2), ("device", 0)):
            cols[key].append(value)
    return Profile(meta=ProfileMeta(kind=ProfileKind.TORCH_NPU, path="/p"),
                   kernels=make_table(KERNEL_SCHEMA, cols, len(rows)), steps=steps or [])


def test_steps_are_the_windows_in_start_order():
    p = _profile([(-1, 0, 10)], steps=[Step(5, 200 * US, 300 * US), Step(4, 0, 100 * US)])
    assert [(w.id, w.start_ns) for w in windows(p)] == [(4, 0), (5, 200 * US)]


def test_step_ids_without_ranges_give_one_disjoint_window_each():
    """A torch_npu export whose kernel_details carry Step Id but whose trace has no ProfilerStep:
    one window per id, named by it (the id the critical path selects a step's kernels by)."""
    p = _profile([
        (8, 100, 50), (8, 120, 60),  # step 8: 100 .. 180
        (7, 10, 40), (7, -1, 5),  # step 7: 10 .. 50 (the untimed kernel left out)
        (9, 170, 30),  # step 9 starts while step 8 runs: opens at 180
        (6, 20, 5),  # inside step 7's window: no window of its own
        (-1, 500, 10),  # outside every step
    ])
    assert [(w.id, w.start_ns // US, w.end_ns // US) for w in windows(p)] == [(7, 10, 50), (8, 100, 180), (9, 180, 200)]


def test_without_steps_or_ids_the_capture_is_the_one_window():
    p = _profile([(-1, 30, 10), (-1, -1, 99), (-1, 5, 10)])
    assert [(w.id, w.start_ns // US, w.end_ns // US) for w in windows(p)] == [(0, 5, 40)]
