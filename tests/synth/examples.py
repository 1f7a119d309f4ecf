"""Ready-made run descriptions for tests: one small training step that touches every feature.

``small_run()`` is a 2-layer CNN head trained with DDP + AdamW on ``/home/ma-user/work/demo``:
DataLoader, H2D copies, acl_op Conv2D with online compile, max-pool, Linear (with TransData),
ReLU -> Dropout (mask generation on a second stream), cross entropy, backward with a DDP
all-reduce, non-fused AdamW, ``loss.item()``, a GC pause and a host gap.
"""

from __future__ import annotations

from dataclasses import replace

from . import library as L
from .run import Frame, GcPause, Gap, ModuleFrame, ProfilerConfig, RepeatedSteps, Run, StepItem, UserCall, us
from .run import CommLaunch

ROOT = "/home/ma-user/work/demo"
MODEL = f"{ROOT}/model.py"
TRAIN = f"{ROOT}/train.py"


def _site(model_line: int, func: str = "forward", def_line: int = 20, module: str = "Net") -> tuple:
    """model.py line -> the full user stack (model forward <- DDP <- train loop <- <module>)."""
    return (
        Frame(MODEL, model_line, func, def_line),
        ModuleFrame(module, 0),
        *L.DDP_FWD,
        Frame(TRAIN, 41, "train", 30),
        Frame(TRAIN, 60, "<module>"),
    )


def _train_site(line: int) -> tuple:
    return (Frame(TRAIN, line, "train", 30), Frame(TRAIN, 60, "<module>"))


PARAMS = ((16, 3, 3, 3), (16,), (64, 1024), (64,), (10, 64), (10,))


def small_step(*, batch: int = 32, with_gc: bool = True, compile: bool = True) -> tuple[StepItem, ...]:
    x = (batch, 3, 16, 16)
    c_out = (batch, 16, 16, 16)
    p_out = (batch, 16, 8, 8)
    h = (batch, 64)
    items: list[StepItem] = [
        UserCall(_train_site(38), (L.dataloader(12.0, batch=batch, sample_shape=(3, 16, 16)),), label="dataloader"),
        UserCall(_train_site(39), (L.to_device(x, nbytes=batch * 3 * 16 * 16 * 4, copy_us=40.0),), label="h2d"),
        UserCall(_site(22), (L.conv2d(x, (16, 3, 3, 3), c_out, conv_us=60.0, compile=compile),), label="conv"),
        UserCall(_site(23), (L.max_pool2d(c_out, p_out, dur_us=12.0),), label="pool"),
        UserCall(_site(24), (L.view("aten::flatten", p_out),), label="flatten"),
        UserCall(_site(25), (L.linear(batch, 1024, 64, mm_us=30.0, transdata=2),), label="fc1"),
        UserCall(_site(26), (L.relu(h, dur_us=3.0), L.dropout(h, 0.3, genmask_us=4.0, domask_us=3.5, mask_stream=3)),
                 label="relu_dropout"),
        UserCall(_site(27), (L.linear(batch, 64, 10, mm_us=8.0),), label="fc2"),
        UserCall(_train_site(42), (L.cross_entropy(batch, 10, dur_us=5.0),), label="loss"),
        UserCall(_train_site(43), (L.grad_seed(),), label="backward", backward=True,
                 comm=(CommLaunch(L.allreduce(0.27, dur_us=900.0), after_nodes=-1),)),
        UserCall(_train_site(44), (L.adamw_step(PARAMS, kernel_us=2.0),), label="optimizer", wait_comm=True),
        UserCall(_train_site(45), (L.zero_grad(PARAMS),), label="zero_grad"),
        UserCall(_train_site(46), (L.item(),), label="item"),
        Gap(us(150)),
    ]
    if with_gc:
        items.append(GcPause(us(1800)))
    return tuple(items)


def small_run(*, steps: int = 2, world_size: int = 2, rank: int = 0, config: ProfilerConfig | None = None,
              **kw) -> Run:
    templates = [small_step(compile=True), small_step(compile=False, with_gc=False)]
    cfg = config or ProfilerConfig(gc_detect_threshold=1.0)
    run = Run(steps=RepeatedSteps(templates, steps), config=cfg, rank=rank, world_size=world_size, device=rank,
              pid=2894371 + 17 * rank, **kw)
    return run


def with_config(run: Run, **changes) -> Run:
    return replace(run, config=replace(run.config, **changes))
