"""Run descriptions of the two samples (samples/cnn_classifier, samples/tiny_transformer).

Every frame points at a real line of the sample's source, found by searching the call text in the
parsed file (``SourceIndex``), never by a line number written here; the paths are the ones a
training host would record (``/home/ma-user/work/<sample>/model.py``). The timings are knobs (one
dataclass per sample) chosen so the generated profiles show the seed problems;
``samples/make_npu_profiles.py`` writes them, tests/synth/test_synth_samples.py checks them.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from pathlib import Path

from . import library as L
from .library import lib
from .run import (
    DEFAULT_ENV,
    CommLaunch,
    Frame,
    Gap,
    Launch,
    ModuleFrame,
    OpSpec,
    ProfilerConfig,
    RepeatedSteps,
    Run,
    StackEntry,
    StepItem,
    UserCall,
    us,
)

REMOTE_ROOT = "/home/ma-user/work"
Stack = tuple[StackEntry, ...]


class SourceIndex:
    """Lines and ``def`` lines of one sample file, looked up by their text."""

    def __init__(self, local: Path, remote: str) -> None:
        self.path = local
        self.remote = remote
        text = local.read_text(encoding="utf-8")
        self.lines = text.splitlines()
        self.funcs: dict[str, tuple[int, int]] = {}
        self._index(ast.parse(text), "")

    def _index(self, node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    self.funcs[name] = (child.lineno, child.end_lineno or child.lineno)
                self._index(child, name + ".")

    def def_line(self, qualname: str) -> int:
        if qualname not in self.funcs:
            raise LookupError(f"{self.path}: no function {qualname!r}")
        return self.funcs[qualname][0]

    def line(self, text: str, within: str | None = None, *, exact: bool = False) -> int:
        """1-based line holding ``text`` (inside function ``within``; ``exact``: the whole stripped line)."""
        lo, hi = self.funcs[within] if within else (1, len(self.lines))
        hits = [i for i in range(lo, hi + 1)
                if (self.lines[i - 1].strip() == text if exact else text in self.lines[i - 1])]
        if within is None and exact:  # module level: not inside any function
            hits = [i for i in hits if not any(a <= i <= b for a, b in self.funcs.values())]
        if len(hits) != 1:
            raise LookupError(f"{self.path}: {text!r} found on lines {hits}, expected exactly one")
        return hits[0]

    def frame(self, text: str, func: str, *, active: bool = False) -> Frame:
        """The frame of the line holding ``text`` in ``func`` (``active``: running when tracing began,
        so Kineto shows the current line, not the def line)."""
        return Frame(self.remote, self.line(text, func), func.rsplit(".", 1)[-1], -1 if active else self.def_line(func))

    def module_frame(self, text: str) -> Frame:
        return Frame(self.remote, self.line(text, exact=True), "<module>")


def mod(cls: str, k: int) -> Stack:
    """Entering module ``cls`` instance ``k``: the nn.Module entry and torch's call frames."""
    return (ModuleFrame(cls, k), lib("torch/nn/modules/module.py", 1747, "_call_impl", 1741),
            lib("torch/nn/modules/module.py", 1736, "_wrapped_call_impl", 1734))


SEQUENTIAL = (lib("torch/nn/modules/container.py", 250, "forward", 248),)
DDP = (lib("torch/nn/parallel/distributed.py", 1455, "_run_ddp_forward", 1446),
       lib("torch/nn/parallel/distributed.py", 1636, "forward", 1629))
BN_FWD = (lib("torch/nn/functional.py", 2822, "batch_norm", 2785),
          lib("torch/nn/modules/batchnorm.py", 193, "forward", 150))
EMBED_FWD = (lib("torch/nn/functional.py", 2551, "embedding", 2451), lib("torch/nn/modules/sparse.py", 190, "forward", 189))
F_CROSS_ENTROPY = (lib("torch/nn/functional.py", 3494, "cross_entropy", 3424),)


def _config(active: int) -> ProfilerConfig:
    """What the sample's profiler would be configured with on an NPU (the capture advice)."""
    schedule = (("wait", 1), ("active", active), ("warmup", 1), ("repeat", 1), ("skip_first", 0))
    return ProfilerConfig(with_stack=True, record_shapes=True, level="Level1",
                          aic_metrics="ACL_AICORE_PIPE_UTILIZATION", task_queue=True, schedule=schedule)


# -- CNN classifier ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CnnKnobs:
    """What the generated CNN profile shows; µs unless named otherwise."""

    batch: int = 32
    steps: int = 2
    ranks: int = 2
    dataloader_ms: tuple[float, ...] = (12.5, 14.0)  # per rank: NPU104 (> 10 ms/step)
    h2d_us: float = 30.0
    conv_us: tuple[float, float] = (42.0, 55.0)
    transdata_us: float = 45.0  # trans_TransData per conv, NPU103 (> 5 % of the step with the Linear's)
    bn_us: float = 12.0
    relu_us: float = 8.0  # the ReLU -> Dropout kernels all < 50 us: NPU101
    genmask_us: float = 14.0
    domask_us: float = 12.0
    pool_us: float = 9.0
    embed_mm_us: float = 40.0
    linear_transdata: int = 2  # TransData kernels around the embed block's MatMul, NPU103
    linear_transdata_us: float = 16.0
    fc_mm_us: float = 11.0
    head_gap_us: float = 60.0  # host time before each head line (Python between statements)
    allreduce_us: float = 1500.0  # one DDP bucket after backward on a slow link: NPU102, and the sync after it (NPU108)
    sgd_kernel_us: float = 2.2
    gap_us: float = 60.0  # logging between steps


class CnnSources:
    def __init__(self, sample_dir: Path) -> None:
        self.model = SourceIndex(sample_dir / "model.py", f"{REMOTE_ROOT}/cnn_classifier/model.py")
        self.train = SourceIndex(sample_dir / "train.py", f"{REMOTE_ROOT}/cnn_classifier/train.py")

    def loop(self, text: str) -> Stack:
        """A line of the training loop, with the frames above it."""
        t = self.train
        return (t.frame(text, "train", active=True), t.frame("train(parser.parse_args())", "main", active=True),
                t.module_frame("main()"))

    def forward(self, text: str) -> Stack:
        """A line of CNNClassifier.forward called through DDP from the training loop."""
        m = self.model
        return ((m.frame(text, "CNNClassifier.forward"),) + mod("CNNClassifier", 0) + DDP
                + mod("DistributedDataParallel", 0) + self.loop("loss = criterion(model(x), y)"))


CNN_PARAMS = ((16, 3, 3, 3), (16,), (16,), (32, 16, 3, 3), (32,), (32,), (256, 2048), (256,), (128, 256), (128,),
              (64, 128), (64,), (10, 64), (10,))
# DDP's one bucket (all 571,482 fp32 gradients fit under its 25 MB cap): 2,285,928 B
CNN_GRAD_MB = sum(math.prod(p) for p in CNN_PARAMS) * 4 / 1e6


def _cnn_forward(src: CnnSources, k: CnnKnobs) -> list[StepItem]:
    m, b = src.model, k.batch
    items: list[StepItem] = []
    feats = src.forward("x = self.features(x)")
    shapes = (((b, 3, 32, 32), (16, 3, 3, 3), (b, 16, 32, 32), (b, 16, 16, 16)),
              ((b, 16, 16, 16), (32, 16, 3, 3), (b, 32, 16, 16), (b, 32, 8, 8)))
    for i, (x, w, c, p) in enumerate(shapes):
        site = ((m.frame("return self.pool(F.relu(self.bn(self.conv(x))))", "ConvBlock.forward"),) + mod("ConvBlock", i)
                + SEQUENTIAL + mod("Sequential", 0) + feats)
        conv = L.conv2d(x, w, c, conv_us=k.conv_us[i], trans_us=k.transdata_us)
        launches = (
            Launch(conv.op, conv.frames + mod("Conv2d", i)),
            Launch(L.batch_norm(c, dur_us=k.bn_us).op, BN_FWD + mod("BatchNorm2d", i)),
            L.relu(c, dur_us=k.relu_us * 4, frames=L.F_RELU),
            Launch(L.max_pool2d(c, p, dur_us=k.pool_us).op, L.POOL_FWD + mod("MaxPool2d", i)),
        )
        items.append(UserCall(site, launches, label=f"features.{i}"))
    items.append(UserCall(src.forward("x = torch.flatten(x, 1)"), (L.view("aten::flatten", (b, 32, 8, 8)),),
                          label="flatten"))
    h = (b, 256)
    embed = L.linear(b, 2048, 256, mm_us=k.embed_mm_us, transdata=k.linear_transdata,
                     transdata_us=k.linear_transdata_us)
    items.append(UserCall(SEQUENTIAL + mod("Sequential", 1) + src.forward("x = self.embed(x)"), (
        Launch(embed.op, embed.frames + mod("Linear", 0)),
        Launch(L.relu(h, dur_us=k.relu_us).op, L.RELU_FWD + mod("ReLU", 0)),
        Launch(L.dropout(h, 0.2, genmask_us=k.genmask_us, domask_us=k.domask_us, mask_stream=3).op,
               L.DROPOUT_FWD + mod("Dropout", 0)),
    ), label="embed", gap_ns=us(k.head_gap_us)))
    h = (b, 128)
    fc1 = L.linear(b, 256, 128, mm_us=k.fc_mm_us)  # short: the ReLU -> Dropout after it waits on the host
    items.append(UserCall(src.forward("x = self.drop(self.act(self.fc1(x)))"), (
        Launch(fc1.op, fc1.frames + mod("Linear", 1)),
        Launch(L.relu(h, dur_us=k.relu_us).op, L.RELU_FWD + mod("ReLU", 1)),
        Launch(L.dropout(h, 0.3, genmask_us=k.genmask_us, domask_us=k.domask_us, mask_stream=3).op,
               L.DROPOUT_FWD + mod("Dropout", 1)),
    ), label="fc1.act.drop", gap_ns=us(k.head_gap_us)))
    h = (b, 64)
    fc2 = L.linear(b, 128, 64, mm_us=k.fc_mm_us * 0.8)
    items.append(UserCall(src.forward("x = F.dropout(F.relu(self.fc2(x)), p=self.dropout, training=self.training)"), (
        Launch(fc2.op, fc2.frames + mod("Linear", 2)),
        L.relu(h, dur_us=k.relu_us, frames=L.F_RELU),
        L.dropout(h, 0.1, genmask_us=k.genmask_us, domask_us=k.domask_us, mask_stream=3, frames=L.F_DROPOUT),
    ), label="fc2.relu.dropout", gap_ns=us(k.head_gap_us)))
    cls = L.linear(b, 64, 10, mm_us=k.fc_mm_us * 0.6)
    items.append(UserCall(src.forward("return self.classifier(x)"), (Launch(cls.op, cls.frames + mod("Linear", 3)),),
                          label="classifier"))
    loss = L.cross_entropy(b, 10, dur_us=6.0)
    items.append(UserCall(loss.frames + mod("CrossEntropyLoss", 0) + src.loop("loss = criterion(model(x), y)"),
                          (Launch(loss.op),), label="loss"))
    return items


def cnn_runs(sample_dir: Path, knobs: CnnKnobs | None = None) -> list[Run]:
    """One Run per rank of the CNN sample under DDP."""
    k = knobs or CnnKnobs()
    src = CnnSources(sample_dir)
    runs = []
    for rank in range(k.ranks):
        dl_ms = k.dataloader_ms[rank % len(k.dataloader_ms)]
        loop_line = "for step, (x, y) in enumerate(loader):"
        items: list[StepItem] = [
            UserCall(L.DATALOADER_NEXT + src.loop(loop_line),
                     (Launch(L.dataloader(dl_ms, batch=k.batch, sample_shape=(3, 32, 32)).op),), label="dataloader"),
            UserCall(src.loop("x, y = x.to(device), y.to(device)"),
                     (L.to_device((k.batch, 3, 32, 32), nbytes=k.batch * 3 * 32 * 32 * 4, copy_us=k.h2d_us),
                      L.to_device((k.batch,), nbytes=k.batch * 8, copy_us=2.0)), label="to_device"),
            *_cnn_forward(src, k),
            UserCall(L.BACKWARD + src.loop("loss.backward()"), (Launch(L.grad_seed().op),), label="backward",
                     backward=True, comm=(CommLaunch(L.allreduce(CNN_GRAD_MB, dur_us=k.allreduce_us)),)),
            UserCall(src.loop("optimizer.step()"), (L.sgd_step(CNN_PARAMS, kernel_us=k.sgd_kernel_us),),
                     label="optimizer.step", wait_comm=True),
            UserCall(src.loop("optimizer.zero_grad()"), (L.zero_grad_to_none("SGD"),), label="zero_grad"),
            UserCall(src.loop("torch.npu.synchronize()"), sync_api="AscendCL@aclrtSynchronizeDevice",
                     label="synchronize"),
            UserCall(src.loop('print(f"step {step} loss {loss.item():.4f}")'), (L.item(),), label="loss.item"),
            Gap(us(k.gap_us)),
        ]
        runs.append(Run(
            steps=RepeatedSteps([tuple(items)], k.steps, first=2),
            config=_config(k.steps),
            rank=rank,
            world_size=k.ranks,
            device=rank,
            hostname="ma-node-0",
            pid=3185260 + 211 * rank,
            start_ns=1_753_948_800_000_000_000 + 137_000 * rank,
            env={**DEFAULT_ENV, "PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:512"},
            user_metadata={"generated_by": "samples/make_npu_profiles.py"},
        ))
    return runs


# -- tiny transformer ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransformerKnobs:
    """What the generated transformer profile shows; µs unless named otherwise."""

    batch: int = 32  # as if run with --batch-size 32: the lm_head matmul moves > 100 MB (NPU106)
    seq: int = 64
    steps: int = 1  # one step keeps the committed profile under 2 MB
    dataloader_ms: float = 11.0
    proj_mm_us: float = 9.0
    mlp_mm_us: float = 14.0
    lm_head_mm_us: float = 410.0  # 2048 x 128 x 32003, N not a multiple of 256
    lm_head_pmu: dict[str, float] = field(default_factory=lambda: {"aic_mac_ratio": 0.41, "aic_mte2_ratio": 0.96})
    elementwise_us: float = 4.0  # the RMSNorm / rotary / SwiGLU pieces, one kernel each (NPU210-212)
    attn_bmm_us: float = 12.0
    softmax_us: float = 9.0
    dropout_us: float = 6.0
    copy_us: float = 8.0  # permute().contiguous() (NPU215)
    embed_us: float = 15.0
    adamw_kernel_us: float = 2.6  # eight kernels per parameter: unfused AdamW (NPU220)
    clip_norm_us: float = 2.2
    gap_us: float = 80.0
    linear_type: str = "MatMulV2"  # the blocks' Linear kernels (the lm_head's is MatMulV3)
    cube_dtype: str = "DT_BF16"  # the Linear and attention GEMMs' dtype (DT_FLOAT: no autocast, NPU222)


class TransformerSources:
    def __init__(self, sample_dir: Path) -> None:
        self.model = SourceIndex(sample_dir / "model.py", f"{REMOTE_ROOT}/tiny_transformer/model.py")
        self.train = SourceIndex(sample_dir / "train.py", f"{REMOTE_ROOT}/tiny_transformer/train.py")

    def loop(self, text: str) -> Stack:
        t = self.train
        return (t.frame(text, "main", active=True), t.module_frame("main()"))


def _tf_params(vocab: int, dim: int, hidden: int, layers: int) -> tuple:
    per_block = ((dim,), (dim, dim), (dim, dim), (dim, dim), (dim, dim), (dim,), (2 * hidden, dim), (dim, hidden))
    return ((vocab, dim),) + per_block * layers + ((dim,), (vocab, dim))


def transformer_run(sample_dir: Path, knobs: TransformerKnobs | None = None) -> Run:
    k = knobs or TransformerKnobs()
    src = TransformerSources(sample_dir)
    m = src.model
    cfg_vocab, dim, heads, hidden, layers = 32003, 128, 4, 256, 2
    for name, val in (("vocab_size", cfg_vocab), ("dim", dim), ("n_heads", heads), ("hidden_dim", hidden),
                      ("n_layers", layers)):
        m.line(f"{name}: int = {val}")  # the sample's Config still says so (LookupError otherwise)
    b, s = k.batch, k.seq
    t, hd = b * s, dim // heads
    x3, xh = (b, s, dim), (b, heads, s, hd)
    sc = (b, heads, s, s)
    ew = k.elementwise_us
    cube = dict(matmul_type=k.linear_type, dtype=k.cube_dtype)

    def e(aten: str, api: str, typ: str, shape, frames: Stack = (), autograd: str = "", n: int = 2) -> Launch:
        bwd = L.backward_of(aten, api, typ, shape, dur_us=ew, n_inputs=n) if autograd else ()
        return L.elementwise(aten, api, typ, shape, dur_us=ew, n_inputs=n, autograd=autograd, bwd=bwd, frames=frames)

    model_site = mod("TinyTransformer", 0) + src.loop("logits = model(tokens)")

    def fwd(text: str, func: str, inner: Stack = ()) -> Stack:
        return inner + (m.frame(text, func),)

    items: list[StepItem] = [
        UserCall(L.DATALOADER_NEXT + src.loop("for step, (tokens, targets) in enumerate(loader):"),
                 (Launch(L.dataloader(k.dataloader_ms, batch=b, sample_shape=(s,)).op),), label="dataloader"),
        UserCall(src.loop("tokens, targets = tokens.to(device), targets.to(device)"),
                 (L.to_device((b, s), nbytes=b * s * 8, copy_us=6.0), L.to_device((b, s), nbytes=b * s * 8, copy_us=6.0)),
                 label="to_device"),
    ]
    tf_fwd = "TinyTransformer.forward"
    emb = L.embedding(t, cfg_vocab, dim, dur_us=k.embed_us)
    items.append(UserCall(fwd("x = self.embed(tokens)", tf_fwd) + model_site,
                          (Launch(emb.op, EMBED_FWD + mod("Embedding", 0)),), label="embed"))

    def rms(norm_k: int, site: Stack, label: str) -> UserCall:
        """RMSNorm.forward: pow, mean, add, rsqrt, mul, mul on one line (NPU210)."""
        line = fwd("return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight", "RMSNorm.forward")
        return UserCall(line + mod("RMSNorm", norm_k) + site, (
            e("aten::pow", "aclnnPowTensorScalar", "Pow", x3, autograd="PowBackward0", n=1),
            e("aten::mean", "aclnnMean", "ReduceMean", (b, s, 1), autograd="MeanBackward1", n=1),
            e("aten::add", "aclnnAdds", "Add", (b, s, 1), autograd="AddBackward0", n=1),
            e("aten::rsqrt", "aclnnRsqrt", "Rsqrt", (b, s, 1), autograd="RsqrtBackward0", n=1),
            e("aten::mul", "aclnnMul", "Mul", x3, autograd="MulBackward0"),
            e("aten::mul", "aclnnMul", "Mul", x3, autograd="MulBackward0"),
        ), label=label)

    norm_k = 0
    for layer in range(layers):
        block_site = fwd("x = block(x, cos, sin, mask)", tf_fwd) + model_site
        b_fwd = "Block.forward"
        attn_line = "x = x + self.drop(self.attn(self.attn_norm(x), cos, sin, mask))"
        mlp_line = "x = x + self.drop(self.mlp(self.mlp_norm(x)))"
        blk = mod("Block", layer) + block_site
        items.append(rms(norm_k, fwd(attn_line, b_fwd) + blk, f"block{layer}.attn_norm"))
        norm_k += 1
        attn = mod("Attention", layer) + fwd(attn_line, b_fwd) + blk
        a_fwd = "Attention.forward"
        for i, name in enumerate(("q", "k", "v")):
            text = f"{name} = self.w{name}(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)"
            lin = L.linear_nd(t, dim, dim, mm_us=k.proj_mm_us, **cube)
            items.append(UserCall(fwd(text, a_fwd) + attn, (
                Launch(lin.op, lin.frames + mod("Linear", 4 * layer + i + 2 * layer)),
                L.no_kernel("aten::view", inputs=((t, dim), ()), autograd="ViewBackward0"),
                L.no_kernel("aten::transpose", inputs=((b, s, heads, hd), (), ()), autograd="TransposeBackward0"),
            ), label=f"block{layer}.{name}"))
        for name in ("q", "k"):
            text = f"{name} = {name} * cos + rotate_half({name}) * sin"
            rot = (m.frame("x1, x2 = x.chunk(2, dim=-1)", "rotate_half"),)
            rot2 = (m.frame("return torch.cat((-x2, x1), dim=-1)", "rotate_half"),)
            site = fwd(text, a_fwd) + attn
            items.append(UserCall(site, (
                e("aten::mul", "aclnnMul", "Mul", xh, autograd="MulBackward0"),
                L.no_kernel("aten::chunk", inputs=(xh, (), ()), frames=rot,
                            children=(OpSpec("aten::split", 3000, children=(OpSpec("aten::narrow", 2000),
                                                                           OpSpec("aten::narrow", 2000))),)),
                e("aten::neg", "aclnnNeg", "Neg", (b, heads, s, hd // 2), frames=rot2, autograd="NegBackward0", n=1),
                e("aten::cat", "aclnnCat", "ConcatD", xh, frames=rot2, autograd="CatBackward0"),
                e("aten::mul", "aclnnMul", "Mul", xh, autograd="MulBackward0"),
                e("aten::add", "aclnnAdd", "Add", xh, autograd="AddBackward0"),
            ), label=f"block{layer}.rotary_{name}"))
        site = fwd("scores = q @ k.transpose(-2, -1) * self.scale", a_fwd) + attn
        items.append(UserCall(site, (
            L.no_kernel("aten::transpose", inputs=(xh, (), ()), autograd="TransposeBackward0"),
            L.matmul(xh, (b, heads, hd, s), sc, dur_us=k.attn_bmm_us, dtype=k.cube_dtype),
            e("aten::mul", "aclnnMuls", "Muls", sc, autograd="MulBackward0"),
        ), label=f"block{layer}.scores"))
        items.append(UserCall(fwd("scores = scores + mask", a_fwd) + attn,
                              (e("aten::add", "aclnnAdd", "Add", sc, autograd="AddBackward0"),),
                              label=f"block{layer}.mask"))
        items.append(UserCall(fwd("attn = F.softmax(scores, dim=-1)", a_fwd) + attn,
                              (L.softmax(sc, dur_us=k.softmax_us),), label=f"block{layer}.softmax"))
        drop = L.dropout(sc, 0.1, genmask_us=k.dropout_us, domask_us=k.dropout_us, mask_stream=3)
        items.append(UserCall(fwd("attn = self.attn_drop(attn)", a_fwd) + attn,
                              (Launch(drop.op, drop.frames + mod("Dropout", 2 * layer)),), label=f"block{layer}.attn_drop"))
        items.append(UserCall(fwd("out = attn @ v", a_fwd) + attn,
                              (L.matmul(sc, xh, xh, dur_us=k.attn_bmm_us, dtype=k.cube_dtype),), label=f"block{layer}.pv"))
        items.append(UserCall(fwd("out = out.permute(0, 2, 1, 3).contiguous().view(b, s, h)", a_fwd) + attn, (
            L.no_kernel("aten::permute", inputs=(xh, ()), autograd="PermuteBackward0"),
            L.contiguous(xh, (b, s, heads, hd), dur_us=k.copy_us),
            L.no_kernel("aten::view", inputs=((b, s, heads, hd), ()), autograd="ViewBackward0"),
        ), label=f"block{layer}.merge_heads"))
        wo = L.linear_nd(t, dim, dim, mm_us=k.proj_mm_us, **cube)
        items.append(UserCall(fwd("return self.wo(out)", a_fwd) + attn,
                              (Launch(wo.op, wo.frames + mod("Linear", 6 * layer + 3)),), label=f"block{layer}.wo"))
        bdrop = L.dropout(x3, 0.1, genmask_us=k.dropout_us / 2, domask_us=k.dropout_us / 2, mask_stream=3)
        items.append(UserCall(fwd(attn_line, b_fwd) + blk, (
            Launch(bdrop.op, bdrop.frames + mod("Dropout", 2 * layer + 1)),
            e("aten::add", "aclnnAdd", "Add", x3, autograd="AddBackward0"),
        ), label=f"block{layer}.residual1"))
        items.append(rms(norm_k, fwd(mlp_line, b_fwd) + blk, f"block{layer}.mlp_norm"))
        norm_k += 1
        mlp = mod("SwiGLU", layer) + fwd(mlp_line, b_fwd) + blk
        w_in = L.linear_nd(t, dim, 2 * hidden, mm_us=k.mlp_mm_us, **cube)
        items.append(UserCall(fwd("x = self.w_in(x)", "SwiGLU.forward") + mlp,
                              (Launch(w_in.op, w_in.frames + mod("Linear", 6 * layer + 4)),), label=f"block{layer}.w_in"))
        items.append(UserCall(fwd("a, b = x.chunk(2, dim=-1)", "SwiGLU.forward") + mlp, (
            L.no_kernel("aten::chunk", inputs=((b, s, 2 * hidden), (), ()),
                        children=(OpSpec("aten::split", 3000, autograd="SplitBackward0",
                                         backward=(OpSpec("aten::cat", 3000),)),)),), label=f"block{layer}.chunk"))
        w_out = L.linear_nd(t, hidden, dim, mm_us=k.mlp_mm_us, **cube)
        items.append(UserCall(fwd("return self.w_out(F.silu(a) * b)", "SwiGLU.forward") + mlp, (
            e("aten::silu", "aclnnSilu", "Swish", (b, s, hidden), frames=L.F_SILU, autograd="SiluBackward0", n=1),
            e("aten::mul", "aclnnMul", "Mul", (b, s, hidden), autograd="MulBackward0"),
            Launch(w_out.op, w_out.frames + mod("Linear", 6 * layer + 5)),
        ), label=f"block{layer}.swiglu"))
        items.append(UserCall(fwd(mlp_line, b_fwd) + blk, (
            Launch(bdrop.op, bdrop.frames + mod("Dropout", 2 * layer + 1)),
            e("aten::add", "aclnnAdd", "Add", x3, autograd="AddBackward0"),
        ), label=f"block{layer}.residual2"))
    head_site = fwd("return self.lm_head(self.norm(x))", tf_fwd) + model_site
    items.append(rms(norm_k, head_site, "norm"))
    head = L.linear_nd(t, dim, cfg_vocab, mm_us=k.lm_head_mm_us, matmul_type="MatMulV3", pmu=k.lm_head_pmu,
                       dtype=k.cube_dtype)
    items.append(UserCall(head_site, (Launch(head.op, head.frames + mod("Linear", 6 * layers)),), label="lm_head"))
    loss = L.cross_entropy(t, cfg_vocab, dur_us=120.0, frames=F_CROSS_ENTROPY)
    items.append(UserCall(src.loop("loss = F.cross_entropy(logits.view(-1, cfg.vocab_size), targets.view(-1))"), (
        L.no_kernel("aten::view", inputs=((b, s, cfg_vocab), ()), autograd="ViewBackward0"),
        L.no_kernel("aten::view", inputs=((b, s), ())),
        loss,
    ), label="loss"))
    params = _tf_params(cfg_vocab, dim, hidden, layers)
    items += [
        UserCall(L.BACKWARD + src.loop("loss.backward()"), (Launch(L.grad_seed().op),), label="backward", backward=True),
        UserCall(src.loop("torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)"),
                 L.clip_grad_norm(params, norm_us=k.clip_norm_us), label="clip_grad_norm_"),
        UserCall(src.loop("optimizer.step()"), (L.adamw_step(params, kernel_us=k.adamw_kernel_us),),
                 label="optimizer.step"),
        UserCall(src.loop("optimizer.zero_grad(set_to_none=True)"), (L.zero_grad_to_none("AdamW"),), label="zero_grad"),
        UserCall(src.loop('print(f"step {step} loss {loss.item():.4f}")'), (L.item(),), label="loss.item"),
        Gap(us(k.gap_us)),
    ]
    return Run(
        steps=RepeatedSteps([tuple(items)], k.steps, first=2),
        config=_config(k.steps),
        rank=0,
        world_size=1,
        device=0,
        hostname="ma-node-1",
        pid=4021733,
        start_ns=1_753_952_400_000_000_000,
        user_metadata={"generated_by": "samples/make_npu_profiles.py"},
    )

