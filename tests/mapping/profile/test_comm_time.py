"""mapping.profile.comm_time: the Transit / Wait / Idle split of communication ops, their roles,
the late rank, and per-link time scaled into the op's Transit (docs/numbers.md)."""

from __future__ import annotations

import pytest

from msprof_lsp.mapping.profile import comm_time
from msprof_lsp.mapping.profile.comm_time import CommPart, CommRole
from msprof_lsp.mapping.profile.model import CommOp

MS = 1_000_000


def _op(name: str, elapse_ms: float, transit_ms: float, wait_ms: float, idle_ms: float = -1, *, step: int = 1,
        kind: str = "collective", rank: int = -1, links: dict | None = None) -> CommOp:
    idle = -1 if idle_ms < 0 else round(idle_ms * MS)
    return CommOp(name, "g", step, kind, 0, round(elapse_ms * MS), round(transit_ms * MS), round(wait_ms * MS), 0,
                  idle, links or {}, rank)


@pytest.mark.parametrize(("name", "kind", "expected"), [
    ("hcom_allReduce__586_0_1", "collective", CommRole.GRADIENT),
    ("hcom_reduceScatter__1_0_1", "collective", CommRole.GRADIENT),
    ("hcom_allGather__1_0_1", "collective", CommRole.GRADIENT),
    ("hcom_batchSendRecv__1_0_1", "p2p", CommRole.PIPELINE),
    ("hcom_send__1_0_1", "collective", CommRole.PIPELINE),
    ("hcom_receive__1_0_1", "collective", CommRole.PIPELINE),
    ("hcom_broadcast__1_0_1", "collective", CommRole.OTHER),
])
def test_roles(name, kind, expected):
    assert comm_time.role(_op(name, 1, 0, 0, kind=kind)) is expected


def test_split_per_step_and_idle_from_the_rest():
    ops = [_op("hcom_allReduce__1", 10, 2, 3, step=1), _op("hcom_allReduce__2", 6, 4, 1, 1, step=2),
           _op("hcom_batchSendRecv__3", 50, 0, 50, 0, kind="p2p", step=1)]
    s = comm_time.split(ops, frozenset({CommRole.GRADIENT}))
    assert s is not None and s.steps == 2 and s.ops == 2
    # the first op has no Idle figure: 10 - 2 - 3 = 5 ms
    assert (s.elapse_ns, s.transit_ns, s.wait_ns, s.idle_ns) == (8 * MS, 3 * MS, 2 * MS, 3 * MS)
    assert s.largest is CommPart.TRANSFER and not s.transfer_bound  # 3 of 8 ms
    assert comm_time.split(ops).elapse_ns == 33 * MS  # every role
    assert comm_time.split(ops, frozenset({CommRole.OTHER})) is None


def test_transfer_bound_at_half_the_elapse():
    assert comm_time.split([_op("hcom_allReduce__1", 10, 5, 5, 0)]).transfer_bound
    assert not comm_time.split([_op("hcom_allReduce__1", 10, 4.999, 5.001, 0)]).transfer_bound


def test_late_rank_waits_least_and_only_when_others_wait_twice_as_long():
    assert comm_time.late_rank({0: 5.9, 1: 0.2}, 0) == 1
    assert comm_time.late_rank({0: 0.2, 1: 5.9}, 0) is None  # rank 0 is the late one itself
    assert comm_time.late_rank({0: 1.9, 1: 1.0}, 0) is None  # under 2x: nobody is called late
    assert comm_time.late_rank({0: 2.0, 1: 1.0, 2: 3.0}, 0) == 1
    assert comm_time.late_rank({0: 5.0}, 0) is None


def test_link_time_is_scaled_into_the_transit_never_up():
    dist = {"HCCS": {"Size Distribution": {"2.0": [3, 6.0], "20.0": [1, 6.0]}}}
    assert comm_time.wall_factor(_op("hcom_allReduce__1", 20, 3, 0, links=dist)) == pytest.approx(3 / 12)
    assert comm_time.wall_factor(_op("hcom_allReduce__1", 20, 15, 0, links=dist)) == 1.0
    assert comm_time.wall_factor(_op("hcom_allReduce__1", 20, 0, 0, links=dist)) == 1.0  # no Transit figure
    bad = {"HCCS": {"Size Distribution": {"2.0": [3, "nan"], "x": "y"}}}
    assert comm_time.wall_factor(_op("hcom_allReduce__1", 20, 3, 0, links=bad)) == 1.0
