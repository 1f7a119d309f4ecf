"""NPU104 DataLoader/non_blocking, NPU108 host syncs and NPU109 empty_cache fixes."""

from __future__ import annotations

import inspect

import pytest
import torch

from fixkit import check_fix, line_of, load, model_source
from msprof_lsp.hints.fixes import dataloader, empty_cache, host_sync

ENTRY = model_source("ascend_finetune.py")


# -- NPU104 -------------------------------------------------------------------------------------


def test_positional_table_matches_torch():
    params = list(inspect.signature(torch.utils.data.DataLoader.__init__).parameters)[1:]
    assert tuple(params[: len(dataloader.POSITIONAL)]) == dataloader.POSITIONAL


def test_dataloader_zero_workers_replaced_and_options_added():
    ln = line_of(ENTRY, "loader = DataLoader(RandomImages(), batch_size")
    res = dataloader.tune_dataloader(ENTRY, ln, workers=4)
    new = check_fix(ENTRY, res, allowed_lines={ln}, safe=False)
    assert (
        "    loader = DataLoader(RandomImages(), batch_size=args.batch_size, shuffle=True, num_workers=4, "
        "pin_memory=True, persistent_workers=True, prefetch_factor=2)\n"
    ) in new
    assert dataloader.tune_dataloader(new, ln) is None
    # anchored on the `for ... in loader` line (a stack frame) it finds the same construction
    res2 = dataloader.tune_dataloader(ENTRY, line_of(ENTRY, "for step, (images, labels) in enumerate(loader)"))
    assert res2 is not None and res2.new_source == new


def test_dataloader_keeps_user_arguments_and_skips_worker_options_for_unknown_count():
    src = "from torch.utils.data import DataLoader\n\n\ndef make(ds, n):\n    return DataLoader(\n        ds,\n        batch_size=8,\n        num_workers=n,  # from the CLI\n    )\n"
    res = dataloader.tune_dataloader(src, 5)
    new = check_fix(src, res, allowed_lines={8, 9})
    assert new.endswith("        num_workers=n,  # from the CLI\n        pin_memory=True,\n    )\n")
    assert "persistent_workers" not in new  # n may be 0: torch would raise


def test_tuned_loader_runs_with_workers_and_yields_the_same_batches():
    src = '''import torch
from torch.utils.data import DataLoader, TensorDataset

DATA = TensorDataset(torch.arange(40.0).reshape(20, 2), torch.arange(20))


def make():
    return DataLoader(DATA, batch_size=4, shuffle=False)
'''
    new = check_fix(src, dataloader.tune_dataloader(src, 8, workers=2), allowed_lines={8})
    ref = list(load(src, "dl_ref")["make"]())
    loader = load(new, "dl_new")["make"]()
    assert loader.num_workers == 2 and loader.pin_memory and loader.persistent_workers and loader.prefetch_factor == 2
    got = list(loader)
    assert len(got) == len(ref)
    for (a, b), (c, d) in zip(ref, got):
        assert torch.equal(a, c) and torch.equal(b, d)


def test_non_blocking_only_for_batch_copies():
    ln = line_of(ENTRY, "for step, (images, labels) in enumerate(loader)")
    res = dataloader.non_blocking_copies(ENTRY, ln)
    images, labels = line_of(ENTRY, "images = images.to(device)"), line_of(ENTRY, "labels = labels.to(device)")
    built = line_of(ENTRY, "loader = DataLoader(RandomImages(), batch_size")
    new = check_fix(ENTRY, res, allowed_lines={images, labels, built}, safe=False)
    assert "images = images.to(device, non_blocking=True)" in new and "labels = labels.to(device, non_blocking=True)" in new
    # a non-blocking copy from pageable memory is synchronous: the loader pins its batches too
    assert "pin_memory=True" in new.splitlines()[built - 1] and "pinned memory" in res.title
    assert "model = build_model().to(device)\n" in new
    assert dataloader.non_blocking_copies(new, ln) is None
    src = "def f(loader, dev):\n    for x, y in loader:\n        a = x.to(torch.float16)\n        b = y.to('cpu')\n"
    why: list[str] = []
    assert dataloader.non_blocking_copies(src, 2, why=why) is None and why


def test_non_blocking_needs_a_loader_it_can_pin():
    pinned = ("import torch\nfrom torch.utils.data import DataLoader\n\n\ndef train(ds, dev):\n"
              "    loader = DataLoader(ds, batch_size=4, pin_memory=True)\n    for x, y in loader:\n        x = x.to(dev)\n")
    res = dataloader.non_blocking_copies(pinned, 7)
    new = check_fix(pinned, res, allowed_lines={8}, safe=False)  # already pinned: only the copy changes
    assert "x = x.to(dev, non_blocking=True)" in new and res.title == "Copy batches to the device with non_blocking=True (review)"
    elsewhere = "def train(loader, dev):\n    for x, y in loader:\n        x = x.to(dev)\n"  # built in another file
    why: list[str] = []
    assert dataloader.non_blocking_copies(elsewhere, 2, why=why) is None and "pinned memory" in why[-1]
    unknown = pinned.replace("pin_memory=True", "pin_memory=args.pin")
    why = []
    assert dataloader.non_blocking_copies(unknown, 7, why=why) is None and "pin_memory" in why[-1]


# -- NPU108 -------------------------------------------------------------------------------------


def test_running_loss_item_becomes_detach():
    ln = line_of(ENTRY, "running_loss += loss.item()")
    res = host_sync.defer_loss_item(ENTRY, ln)
    new = check_fix(ENTRY, res, allowed_lines={ln}, safe=False)
    assert "        running_loss += loss.detach()\n" in new
    assert host_sync.defer_loss_item(new, ln) is None


def test_per_step_print_goes_under_a_step_guard():
    ln = line_of(ENTRY, 'print(f"step {step} loss')
    res = host_sync.defer_loss_item(ENTRY, ln, every=50)
    new = check_fix(ENTRY, res, allowed_lines={ln}, safe=False)
    assert '        if step % 50 == 0:\n            print(f"step {step} loss {loss.item():.4f}")\n' in new
    why: list[str] = []
    assert host_sync.defer_loss_item(new, ln + 1, why=why) is None and "conditional" in why[0]


def test_deferred_item_runs_and_reports_the_same_sum(capsys):
    src = '''import torch


def fit(model, batches, opt):
    total = 0.0
    for i, (x, y) in enumerate(batches):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
        print("loss", loss.item())
    return total / len(batches)
'''
    new = host_sync.defer_loss_item(src, 11).new_source
    new = host_sync.defer_loss_item(new, line_of(new, 'print("loss"'), every=2).new_source
    torch.manual_seed(0)
    batches = [(torch.randn(4, 3), torch.randn(4, 1)) for _ in range(5)]
    results = []
    for text, name in ((src, "sync_ref"), (new, "sync_new")):
        torch.manual_seed(1)
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        results.append(load(text, name)["fit"](model, batches, opt))
    assert isinstance(results[1], torch.Tensor) and not results[1].requires_grad
    assert float(results[1]) == pytest.approx(results[0], rel=1e-6)
    out = capsys.readouterr().out
    assert out.count("loss") == 5 + 3  # every step before, steps 0, 2, 4 after


def test_synchronize_removed_but_kept_when_timing():
    ln = line_of(ENTRY, "        torch.npu.synchronize()")
    res = host_sync.remove_synchronize(ENTRY, ln)
    new = check_fix(ENTRY, res, allowed_lines={ln}, safe=False)
    assert new.count("torch.npu.synchronize()") == 1  # the one in evaluate() stays
    why: list[str] = []
    ln_eval = line_of(new, "        torch.npu.synchronize()")
    assert host_sync.remove_synchronize(new, ln_eval, why=why) is None and "timing" in why[0]


# -- NPU109 -------------------------------------------------------------------------------------


def test_empty_cache_removed_in_loop_only():
    ln = line_of(ENTRY, "torch.npu.empty_cache()")
    res = empty_cache.remove_empty_cache(ENTRY, ln)
    new = check_fix(ENTRY, res, allowed_lines={ln}, safe=True)
    assert "empty_cache" not in new and len(new.splitlines()) == len(ENTRY.splitlines())
    assert new.splitlines()[ln - 1] == "        # 释放缓存"  # the user's comment stays, on its own line
    src = "import torch\n\ndef setup():\n    torch.cuda.empty_cache()\n"
    why: list[str] = []
    assert empty_cache.remove_empty_cache(src, 4, why=why) is None and "not inside a loop" in why[0]
    only = "import torch\nfor _ in range(3):\n    # 每步清理\n    torch.cuda.empty_cache()\n"
    new2 = check_fix(only, empty_cache.remove_empty_cache(only, 4), allowed_lines={4})
    assert new2 == "import torch\nfor _ in range(3):\n    # 每步清理\n    pass\n"
    load(new2, "empty_only")
