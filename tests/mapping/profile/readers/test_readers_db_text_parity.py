"""One workload, two exports: the text export and the DB export must read back to the same model.

The run description comes from tests/synth (the project's spec-exact writers); each export is read
by its own reader, and both are compared with each other and with the description's ground truth.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from msprof_lsp.mapping.profile.locations import ProfileLocation, no_progress
from msprof_lsp.mapping.profile.model import ProfileKind
from msprof_lsp.mapping.profile.readers import torch_npu, torch_npu_db
from tests.synth import truth, write_torch_npu_db, write_torch_npu_text
from tests.synth.examples import small_run


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("parity")
    run = small_run(steps=3, world_size=2, rank=1)
    root = write_torch_npu_text(run, tmp / "text")
    db = write_torch_npu_db(run, tmp / "db")
    text = torch_npu.read(ProfileLocation(ProfileKind.TORCH_NPU, root, 1), no_progress)
    dbp = torch_npu_db.read(ProfileLocation(ProfileKind.TORCH_NPU_DB, db, 1), no_progress)
    return run, text, dbp


def _op_kernels(p):
    k = p.kernels
    return k[k["name"].astype(str) != "MEMCPY_ASYNC"]


def _per_type(p) -> dict[str, int]:
    k = _op_kernels(p)
    return {t: int(v) for t, v in k.groupby(k["type"].astype(str))["dur_ns"].sum().items()}


def test_same_kernel_totals_per_type(both) -> None:
    run, text, db = both
    expected = dict(truth(run).kernel_ns_by_type)
    assert _per_type(db) == expected
    assert _per_type(text) == expected
    # Runtime copies: same total on both sides (and in the description).
    memcpy = truth(run).memcpy_ns
    for p in (text, db):
        k = p.kernels
        assert int(k[k["name"].astype(str) == "MEMCPY_ASYNC"]["dur_ns"].sum()) == memcpy


def test_same_frames_and_links_per_kernel(both) -> None:
    _, text, db = both

    def by_kernel(p) -> dict[tuple[str, int], tuple]:
        k = p.kernels
        return {
            (str(n), int(s)): (str(link), bool(bwd), tuple(f.raw for f in p.stack_of(int(st))))
            for n, s, link, bwd, st in zip(k["name"], k["start_ns"], k["link"], k["backward"], k["stack"])
        }

    t, d = by_kernel(text), by_kernel(db)
    assert t.keys() == d.keys()
    assert t == d
    assert any(frames for _, _, frames in d.values())  # the comparison covers real stacks


def test_same_device_time_per_user_line(both) -> None:
    run, text, db = both
    expected = dict(truth(run).kernel_ns_by_line)

    def per_line(p) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        k = _op_kernels(p)
        for st, dur in zip(k["stack"], k["dur_ns"]):
            for f in p.stack_of(int(st)):
                if f.file and "site-packages" not in f.file:
                    out[(f.file, f.line)] = out.get((f.file, f.line), 0) + int(dur)
                    break
        return out

    assert per_line(db) == expected
    assert per_line(text) == expected


def test_same_steps_and_step_time(both) -> None:
    run, text, db = both
    assert [(s.id, s.start_ns, s.end_ns) for s in db.steps] == [(s.id, s.start_ns, s.end_ns) for s in text.steps]
    assert db.step_time() == text.step_time()
    # StepTraceTime holds µs with 3 decimals: exact in ns.
    assert db.step_time()[0] == truth(run).mean_step_time_ns


def test_db_rank_and_files(both) -> None:
    _, _, db = both
    assert db.meta.rank == 1
    assert any(Path(f).name == "analysis.db" for f in db.meta.files)
