"""One training job written out in every form a profile comes in, to measure mapping without stacks.

A ``Job`` is a run description (``tests.synth.Run``) of one of the harness models
(tests/nostack/models, written for this purpose and shared with nothing else) plus the problems
of the rule catalog planted in it, each at the line whose call produces it (found by its text in
the parsed source, never by a number written here). ``write_forms`` writes the same run as

* ``stack``   -- torch_npu text export, ``with_stack=True`` (the reference form);
* ``nostack`` -- the same export with ``with_stack=False``;
* ``level0``  -- a Level0 text export without stacks (short kernel_details, no CANN API events);
* ``db``      -- the torch_npu DB export without PYTORCH_CALLCHAINS;
* ``msprof``  -- the msprof CLI ``PROF_*`` folder of an eager job: no Python process, and no
  step markers (msprof writes step_trace_*.csv in graph mode only).

Frames carry the training host's paths (``/home/ma-user/work/<job>/<file>``); an analysis maps them
to a local copy of the model with ``--path-map``.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.synth import library as L
from tests.synth.run import CommLaunch, Gap, Launch, OpSpec, ProfilerConfig, Run, StepItem, StepSpec, UserCall, us
from tests.synth.sample_runs import BN_FWD, DDP, EMBED_FWD, F_CROSS_ENTROPY, REMOTE_ROOT, SourceIndex, Stack, mod
from tests.synth.write_db import write_torch_npu_db
from tests.synth.write_msprof import write_msprof_cli
from tests.synth.write_text import write_torch_npu_text

MODELS = Path(__file__).resolve().parent / "models"


class Form(str, enum.Enum):
    STACK = "stack"
    NOSTACK = "nostack"
    LEVEL0 = "level0"
    DB = "db"
    MSPROF = "msprof"


NO_STACK_FORMS = (Form.NOSTACK, Form.LEVEL0, Form.DB, Form.MSPROF)


@dataclass(frozen=True, slots=True)
class Planted:
    """A problem put into the job on purpose: the rule code that should report it, at ``line``."""

    code: str
    line: int
    text: str  # the source line's call, for messages


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    script: Path  # the model script (one file: model and training loop)
    run: Run
    planted: tuple[Planted, ...]
    steps: int  # training iterations in the capture

    @property
    def remote_dir(self) -> str:
        return f"{REMOTE_ROOT}/{self.name}"

    def workspace(self, parent: Path) -> Path:
        """A local copy of the job's source, as the user would have it checked out."""
        root = parent / "src" / self.name
        root.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.script, root / self.script.name)
        return root


def _config(steps: int, *, with_stack: bool = True, level: str = "Level1") -> ProfilerConfig:
    schedule = (("wait", 1), ("active", steps), ("warmup", 1), ("repeat", 1), ("skip_first", 0))
    return ProfilerConfig(with_stack=with_stack, record_shapes=True, level=level, task_queue=True, schedule=schedule)


def write_forms(job: Job, out: Path, forms: tuple[Form, ...] = tuple(Form)) -> dict[Form, Path]:
    """Each form of the job's run under ``out/<form>/``; returns the profile path per form."""
    paths: dict[Form, Path] = {}
    for form in forms:
        d = out / form.value
        d.mkdir(parents=True, exist_ok=True)
        cfg = job.run.config
        if form is Form.STACK:
            paths[form] = write_torch_npu_text(job.run, d)
        elif form is Form.NOSTACK:
            paths[form] = write_torch_npu_text(_with(job.run, dataclasses.replace(cfg, with_stack=False)), d)
        elif form is Form.LEVEL0:
            paths[form] = write_torch_npu_text(
                _with(job.run, dataclasses.replace(cfg, with_stack=False, level="Level0")), d)
        elif form is Form.DB:
            db_cfg = dataclasses.replace(cfg, with_stack=False, export_type=("db",))
            paths[form] = write_torch_npu_db(_with(job.run, db_cfg), d)
        else:
            paths[form] = write_msprof_cli(job.run, d, step_trace=False)
    return paths


def _with(run: Run, config: ProfilerConfig) -> Run:
    return dataclasses.replace(run, config=config)


def _planted(src: SourceIndex, *pairs: tuple[str, str, str | None]) -> tuple[Planted, ...]:
    """(code, line text, function or None for module level) -> Planted at that line."""
    out = []
    for code, text, func in pairs:
        line = src.line(text, func) if func else src.line(text)
        out.append(Planted(code, line, text))
    return tuple(out)


# -- patch_classifier: conv net under DDP ------------------------------------------------------------------


def patch_classifier(steps: int = 5, *, batch: int = 64, warmup_step: bool = False) -> Job:
    """The image classifier's run: ``steps`` iterations (``warmup_step``: the first one also
    compiles its convolutions and converts fc1's weight format, as a first iteration does)."""
    script = MODELS / "patch_classifier.py"
    src = SourceIndex(script, f"{REMOTE_ROOT}/patch_classifier/{script.name}")
    b = batch

    def loop(text: str) -> Stack:
        return (src.frame(text, "train", active=True), src.frame("train(parser.parse_args())", "main", active=True),
                src.module_frame("main()"))

    model_line = "loss = criterion(model(x), y)"

    def fwd(text: str) -> Stack:
        return (src.frame(text, "PatchClassifier.forward"),) + mod("PatchClassifier", 0) + DDP + \
            mod("DistributedDataParallel", 0) + loop(model_line)

    def step_items(first: bool) -> tuple[StepItem, ...]:
        stem_line = "return self.pool(F.relu(self.bn(self.conv(x))))"
        stem_site = (src.frame(stem_line, "Stem.forward"),) + mod("Stem", 0) + fwd("x = self.stem(x)")
        x0, w0, c0, p0 = (b, 3, 32, 32), (32, 3, 3, 3), (b, 32, 32, 32), (b, 32, 16, 16)
        conv0 = L.conv2d(x0, w0, c0, conv_us=60.0, trans_us=70.0, compile=first)
        w1, c1, p1 = (64, 32, 3, 3), (b, 64, 16, 16), (b, 64, 8, 8)
        conv1 = L.conv2d(p0, w1, c1, conv_us=90.0, trans_us=40.0, compile=first)
        head_line = "x = self.drop(self.act(self.fc1(x)))"
        head_site = (src.frame(head_line, "Head.forward"),) + mod("Head", 0) + fwd("return self.head(x)")
        # the first iteration also converts fc1's weight to the private format (4 more TransData)
        fc1 = L.linear(b, 4096, 512, mm_us=55.0, transdata=6 if first else 2, transdata_us=45.0)
        fc2 = L.linear(b, 512, 1000, mm_us=140.0)
        h = (b, 512)
        loss = L.cross_entropy(b, 1000, dur_us=9.0)
        items: list[StepItem] = [
            UserCall(L.DATALOADER_NEXT + loop("for step, (x, y) in enumerate(loader):"),
                     (Launch(L.dataloader(13.0, batch=b, sample_shape=(3, 32, 32)).op),), label="dataloader"),
            UserCall(loop("x, y = x.to(DEVICE), y.to(DEVICE)"),
                     (L.to_device(x0, nbytes=b * 3 * 32 * 32 * 4, copy_us=40.0),
                      L.to_device((b,), nbytes=b * 8, copy_us=2.0)), label="to_device"),
            UserCall(stem_site, (
                Launch(conv0.op, conv0.frames + mod("Conv2d", 0)),
                Launch(L.batch_norm(c0, dur_us=14.0).op, BN_FWD + mod("BatchNorm2d", 0)),
                L.relu(c0, dur_us=20.0, frames=L.F_RELU),
                Launch(L.max_pool2d(c0, p0, dur_us=11.0).op, L.POOL_FWD + mod("MaxPool2d", 0)),
            ), label="stem"),
            UserCall(fwd("x = F.max_pool2d(self.mix(x), 2)"), (
                Launch(conv1.op, conv1.frames + mod("Conv2d", 1)),
                Launch(L.max_pool2d(c1, p1, dur_us=9.0).op, L.POOL_FWD[:1]),
            ), label="mix"),
            UserCall(fwd("x = torch.flatten(x, 1)"), (L.view("aten::flatten", p1),), label="flatten"),
            UserCall(head_site, (
                Launch(fc1.op, fc1.frames + mod("Linear", 0)),
                Launch(L.relu(h, dur_us=6.0).op, L.RELU_FWD + mod("ReLU", 0)),
                Launch(L.dropout(h, 0.2, genmask_us=12.0, domask_us=10.0, mask_stream=3).op,
                       L.DROPOUT_FWD + mod("Dropout", 0)),
            ), label="head.fc1", gap_ns=us(40)),
            UserCall((src.frame("return self.fc2(x)", "Head.forward"),) + mod("Head", 0) + fwd("return self.head(x)"),
                     (Launch(fc2.op, fc2.frames + mod("Linear", 1)),), label="head.fc2"),
            UserCall(loss.frames + mod("CrossEntropyLoss", 0) + loop(model_line), (Launch(loss.op),), label="loss"),
            UserCall(loop("spread = y.double().std()"), (L.aicpu_cast((b,), dur_us=260.0),), label="spread"),
            UserCall(L.BACKWARD + loop("loss.backward()"), (Launch(L.grad_seed().op),), label="backward",
                     backward=True, comm=(CommLaunch(L.allreduce(16.9, dur_us=2600.0)),)),
            UserCall(loop("torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)"),
                     L.clip_grad_norm(PATCH_PARAMS, norm_us=2.4), label="clip_grad_norm_", wait_comm=True),
            UserCall(loop("optimizer.step()"), (L.adamw_step(PATCH_PARAMS, kernel_us=2.8),), label="optimizer.step"),
            UserCall(loop("optimizer.zero_grad()"), (L.zero_grad_to_none("AdamW"),), label="zero_grad"),
            UserCall(loop('print(f"step {step} loss {loss.item():.4f} label spread {spread:.1f}")'), (L.item(),),
                     label="loss.item"),
            Gap(us(70)),
        ]
        return tuple(items)

    run = Run(steps=_steps(step_items, steps, warmup_step), config=_config(steps), world_size=2, rank=0, device=0,
              hostname="ma-node-7", pid=2718281, start_ns=1_764_547_200_000_000_000,
              user_metadata={"generated_by": "tests/nostack/jobs.py"})
    planted = _planted(
        src,
        ("NPU104", "for step, (x, y) in enumerate(loader):", "train"),
        ("NPU103", "return self.pool(F.relu(self.bn(self.conv(x))))", "Stem.forward"),
        ("NPU103", "x = F.max_pool2d(self.mix(x), 2)", "PatchClassifier.forward"),
        ("NPU103", "x = self.drop(self.act(self.fc1(x)))", "Head.forward"),
        ("NPU101", "x = self.drop(self.act(self.fc1(x)))", "Head.forward"),
        ("NPU201", "spread = y.double().std()", "train"),
        ("NPU102", "loss.backward()", "train"),
        ("NPU221", "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)", "train"),
        ("NPU220", "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)", "train"),
        ("NPU108", 'print(f"step {step} loss {loss.item():.4f} label spread {spread:.1f}")', "train"),
    )
    return Job("patch_classifier", script, run, planted, steps)


PATCH_PARAMS = ((32, 3, 3, 3), (32,), (32,), (32,), (64, 32, 3, 3), (64,), (512, 4096), (512,), (1000, 512), (1000,))


def _steps(items: Callable[[bool], tuple[StepItem, ...]], n: int, warmup_step: bool) -> list[StepSpec]:
    first, rest = items(warmup_step), items(False)
    return [StepSpec(1 + i, first if i == 0 else rest) for i in range(n)]


# -- char_lm: decoder-only language model ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LMShape:
    """The sizes of char_lm's run: the script's own ``LMConfig`` defaults (read from its source, so
    the run cannot drift from the script), and the batch."""

    vocab: int
    dim: int
    heads: int
    ffn: int
    layers: int
    seq: int
    batch: int = 32

    @classmethod
    def of(cls, script: Path) -> LMShape:
        tree = ast.parse(script.read_text(encoding="utf-8"))
        [config] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LMConfig"]
        values = {a.target.id: ast.literal_eval(a.value) for a in config.body
                  if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name) and a.value is not None}
        return cls(**values)


def char_lm(steps: int = 5, *, warmup_step: bool = False) -> Job:
    """The language model's run (``warmup_step``: the first iteration copies its batch in more pieces)."""
    script = MODELS / "char_lm.py"
    src = SourceIndex(script, f"{REMOTE_ROOT}/char_lm/{script.name}")
    c = LMShape.of(script)
    b, s, d, nh = c.batch, c.seq, c.dim, c.heads
    t, hd = b * s, d // nh
    x3, xh, sc = (b, s, d), (b, nh, s, hd), (b, nh, s, s)

    def loop(text: str) -> Stack:
        return (src.frame(text, "main", active=True), src.module_frame("main()"))

    def at(text: str, func: str, inner: Stack = ()) -> Stack:
        return inner + (src.frame(text, func),)

    model_site = mod("CharLM", 0) + loop("logits = model(tokens)")

    def ew(aten: str, api: str, typ: str, shape, autograd: str, n: int = 2, dur: float = 22.0) -> Launch:
        bwd = L.backward_of(aten, api, typ, shape, dur_us=dur, n_inputs=n)
        return L.elementwise(aten, api, typ, shape, dur_us=dur, n_inputs=n, autograd=autograd, bwd=bwd)

    def rms(k: int, site: Stack) -> UserCall:
        line = at("return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight",
                  "RMSNorm.forward")
        return UserCall(line + mod("RMSNorm", k) + site, (
            ew("aten::pow", "aclnnPowTensorScalar", "Pow", x3, "PowBackward0", n=1),
            ew("aten::mean", "aclnnMean", "ReduceMean", (b, s, 1), "MeanBackward1", n=1),
            ew("aten::add", "aclnnAdds", "Add", (b, s, 1), "AddBackward0", n=1),
            ew("aten::rsqrt", "aclnnRsqrt", "Rsqrt", (b, s, 1), "RsqrtBackward0", n=1),
            ew("aten::mul", "aclnnMul", "Mul", x3, "MulBackward0"),
            ew("aten::mul", "aclnnMul", "Mul", x3, "MulBackward0"),
        ), label=f"rmsnorm{k}")

    def step_items(first: bool) -> tuple[StepItem, ...]:
        items: list[StepItem] = [
            UserCall(loop("tokens, targets = tokens.to(DEVICE), targets.to(DEVICE)"),
                     (L.to_device((b, s), nbytes=b * s * 8, copy_us=7.0),
                      L.to_device((b, s), nbytes=b * s * 8, copy_us=7.0))
                     # warm-up: the first iteration's copies are pageable, staged through two more
                     + ((L.to_device((b, s), nbytes=b * s * 8, copy_us=9.0),) * 2 if first else ()),
                     label="to_device"),
        ]
        emb = L.embedding(t, c.vocab, d, dur_us=40.0)
        fwd = "CharLM.forward"
        items.append(UserCall(at("x = self.tok(tokens)", fwd) + model_site,
                              (Launch(emb.op, EMBED_FWD + mod("Embedding", 0)),), label="embed"))
        norm_k = 0
        for layer in range(c.layers):
            blk = mod("Block", layer) + at("x = block(x, mask)", fwd) + model_site
            attn_line, ffn_line = "x = x + self.attn(self.norm1(x), mask)", "return x + self.ffn(self.norm2(x))"
            items.append(rms(norm_k, at(attn_line, "Block.forward") + blk))
            norm_k += 1
            attn = mod("SelfAttention", layer) + at(attn_line, "Block.forward") + blk
            a_fwd = "SelfAttention.forward"
            qkv = L.linear_nd(t, d, 3 * d, mm_us=70.0)
            items.append(UserCall(
                at("q, k, v = self.qkv(x).view(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)", a_fwd)
                + attn, (
                    Launch(qkv.op, qkv.frames + mod("Linear", 4 * layer)),
                    L.no_kernel("aten::view", inputs=((t, 3 * d), ()), autograd="ViewBackward0"),
                    L.no_kernel("aten::permute", inputs=((b, s, 3, nh, hd), ()), autograd="PermuteBackward0"),
                ), label=f"block{layer}.qkv"))
            items.append(UserCall(at("scores = q @ k.transpose(-2, -1) * self.scale", a_fwd) + attn, (
                L.no_kernel("aten::transpose", inputs=(xh, (), ()), autograd="TransposeBackward0"),
                L.matmul(xh, (b, nh, hd, s), sc, dur_us=90.0),
                ew("aten::mul", "aclnnMuls", "Muls", sc, "MulBackward0"),
            ), label=f"block{layer}.scores"))
            items.append(UserCall(at("attn = F.softmax(scores + mask, dim=-1)", a_fwd) + attn, (
                ew("aten::add", "aclnnAdd", "Add", sc, "AddBackward0"),
                L.softmax(sc, dur_us=120.0),
            ), label=f"block{layer}.softmax"))
            items.append(UserCall(at("y = (attn @ v).transpose(1, 2).contiguous().view(b, s, d)", a_fwd) + attn, (
                L.matmul(sc, xh, xh, dur_us=90.0),
                L.no_kernel("aten::transpose", inputs=(xh, (), ()), autograd="TransposeBackward0"),
                L.contiguous(xh, (b, s, nh, hd), dur_us=70.0),
                L.no_kernel("aten::view", inputs=((b, s, nh, hd), ()), autograd="ViewBackward0"),
            ), label=f"block{layer}.merge_heads"))
            out = L.linear_nd(t, d, d, mm_us=30.0)
            items.append(UserCall(at("return self.out(y)", a_fwd) + attn,
                                  (Launch(out.op, out.frames + mod("Linear", 4 * layer + 1)),), label=f"block{layer}.out"))
            items.append(UserCall(at(attn_line, "Block.forward") + blk,
                                  (ew("aten::add", "aclnnAdd", "Add", x3, "AddBackward0"),), label=f"block{layer}.res1"))
            items.append(rms(norm_k, at(ffn_line, "Block.forward") + blk))
            norm_k += 1
            ffn = mod("FeedForward", layer) + at(ffn_line, "Block.forward") + blk
            f_fwd, h = "FeedForward.forward", (b, s, c.ffn)
            gate_up, down = L.linear_nd(t, d, 2 * c.ffn, mm_us=60.0), L.linear_nd(t, c.ffn, d, mm_us=35.0)
            items.append(UserCall(at("gate, up = self.gate_up(x).chunk(2, dim=-1)", f_fwd) + ffn, (
                Launch(gate_up.op, gate_up.frames + mod("Linear", 4 * layer + 2)),
                L.no_kernel("aten::chunk", inputs=((b, s, 2 * c.ffn), (), ()),
                            children=(OpSpec("aten::split", 3000, autograd="SplitBackward0",
                                             backward=(OpSpec("aten::cat", 3000),)),)),
            ), label=f"block{layer}.gate_up"))
            items.append(UserCall(at("return self.down(F.silu(gate) * up)", f_fwd) + ffn, (
                L.elementwise("aten::silu", "aclnnSilu", "Swish", h, dur_us=60.0, n_inputs=1, autograd="SiluBackward0",
                              frames=L.F_SILU,
                              bwd=L.backward_of("aten::silu", "aclnnSilu", "Swish", h, dur_us=60.0, n_inputs=1)),
                ew("aten::mul", "aclnnMul", "Mul", h, "MulBackward0", dur=60.0),
                Launch(down.op, down.frames + mod("Linear", 4 * layer + 3)),
            ), label=f"block{layer}.ffn"))
            items.append(UserCall(at(ffn_line, "Block.forward") + blk,
                                  (ew("aten::add", "aclnnAdd", "Add", x3, "AddBackward0"),), label=f"block{layer}.res2"))
        head_site = at("return self.lm_head(self.norm(x))", fwd) + model_site
        items.append(rms(norm_k, head_site))
        head = L.linear_nd(t, d, c.vocab, mm_us=900.0, matmul_type="MatMulV3")
        items.append(UserCall(head_site, (Launch(head.op, head.frames + mod("Linear", 4 * c.layers)),), label="lm_head"))
        loss = L.cross_entropy(t, c.vocab, dur_us=300.0, frames=F_CROSS_ENTROPY)
        items.append(UserCall(loop("loss = F.cross_entropy(logits.view(-1, cfg.vocab), targets.reshape(-1))"), (
            L.no_kernel("aten::view", inputs=((b, s, c.vocab), ()), autograd="ViewBackward0"),
            L.no_kernel("aten::reshape", inputs=((b, s), ())),
            loss,
        ), label="loss"))
        params = _lm_params(c)
        items += [
            UserCall(L.BACKWARD + loop("loss.backward()"), (Launch(L.grad_seed().op),), label="backward", backward=True),
            UserCall(loop("optimizer.step()"), (L.adamw_step(params, kernel_us=2.6),), label="optimizer.step"),
            UserCall(loop("optimizer.zero_grad(set_to_none=True)"), (L.zero_grad_to_none("AdamW"),), label="zero_grad"),
            UserCall(loop('print(f"step {step} loss {loss.item():.4f}")'), (L.item(),), label="loss.item"),
            Gap(us(90)),
        ]
        return tuple(items)

    run = Run(steps=_steps(step_items, steps, warmup_step), config=_config(steps), world_size=1, rank=0, device=0,
              hostname="ma-node-8", pid=3141592, start_ns=1_764_550_800_000_000_000,
              user_metadata={"generated_by": "tests/nostack/jobs.py"})
    planted = _planted(
        src,
        ("NPU210", "return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight", "RMSNorm.forward"),
        ("NPU211", "gate, up = self.gate_up(x).chunk(2, dim=-1)", "FeedForward.forward"),
        ("NPU215", "y = (attn @ v).transpose(1, 2).contiguous().view(b, s, d)", "SelfAttention.forward"),
        ("NPU213", "scores = q @ k.transpose(-2, -1) * self.scale", "SelfAttention.forward"),
        ("NPU106", "return self.lm_head(self.norm(x))", "CharLM.forward"),
        ("NPU220", "optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)", "main"),
        ("NPU108", 'print(f"step {step} loss {loss.item():.4f}")', "main"),
    )
    return Job("char_lm", script, run, planted, steps)


def _lm_params(c: LMShape) -> tuple:
    per_block = ((c.dim,), (3 * c.dim, c.dim), (c.dim, c.dim), (c.dim,), (2 * c.ffn, c.dim), (c.dim, c.ffn))
    return ((c.vocab, c.dim),) + per_block * c.layers + ((c.dim,), (c.vocab, c.dim))


JOBS: dict[str, Callable[..., Job]] = {"patch_classifier": patch_classifier, "char_lm": char_lm}
