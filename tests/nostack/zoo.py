"""The zoo: ten training jobs of different model families, for mapping without stacks.

Each job is a model script (tests/nostack/models) with problems of the rule catalog planted at
known lines (found by their text in the parsed script), described as a run
(``tests.synth.Run``) that ``jobs.write_forms`` writes in every form. The split into a tuning
half and a held-out half is in tests/nostack/zoo_split.py and was fixed before the mapping was
changed for the zoo; ``benchmarks/zoo.py`` scores both halves.

Families: patch_classifier (conv net under DDP) and char_lm (decoder-only LM) are the harness's
first two jobs (tests/nostack/jobs.py); the others are here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tests.synth import library as L
from tests.synth.run import AI_CORE, CommLaunch, Launch, OpSpec, Run, StepItem, UserCall, us
from tests.synth.sample_runs import BN_FWD, DDP, EMBED_FWD, F_CROSS_ENTROPY

from .jobs import JOBS as HARNESS_JOBS
from .jobs import MODELS, Job, Planted, _config, _steps
from .zoo_parts import Script, aicpu, data_wait, ew, layer_norm, loop_tail, module, one, rms_norm, to_device


def _run(steps: list, n: int, *, pid: int, world: int = 1) -> Run:
    return Run(steps=steps, config=_config(n), world_size=world, rank=0, device=0, hostname="ma-node-9", pid=pid,
               start_ns=1_764_554_400_000_000_000, user_metadata={"generated_by": "tests/nostack/zoo.py"})


def _planted(s: Script, *pairs: tuple[str, str, str]) -> tuple[Planted, ...]:
    return tuple(Planted(code, s.line(text, func), text) for code, text, func in pairs)


# -- resnet_ddp: residual CNN, DDP with two buckets -------------------------------------------------------


def resnet_ddp(steps: int = 5, *, warmup_step: bool = False) -> Job:
    s = Script(MODELS / "resnet_ddp.py")
    b, w = 32, 64
    act = (b, w, 32, 32)
    model_line = "logits = model(images)"

    def fwd(text: str) -> tuple:
        return s.at(text, "ResNetSmall.forward", module("ResNetSmall", 0, DDP + module(
            "DistributedDataParallel", 0, s.loop(model_line))))

    def conv(k: int, x, wt, out, conv_us: float, trans_us: float, first: bool) -> Launch:
        c = L.conv2d(x, wt, out, conv_us=conv_us, trans_us=trans_us, compile=first)
        return Launch(c.op, c.frames + module("Conv2d", k, ()))

    def bn(k: int) -> Launch:
        n = L.batch_norm(act, dur_us=16.0)
        return Launch(n.op, BN_FWD + module("BatchNorm2d", k, ()))

    def items(first: bool) -> tuple[StepItem, ...]:
        stem = "x = F.relu(self.bn(self.stem(x)))"
        out: list[StepItem] = [
            data_wait(s, "for step, (images, labels) in enumerate(loader):", 14.0, b, (3, 32, 32)),
            to_device(s, "images, labels = images.to(DEVICE), labels.to(DEVICE)", (b, 3, 32, 32), (b,)),
            UserCall(fwd(stem), (conv(0, (b, 3, 32, 32), (w, 3, 3, 3), act, 70.0, 110.0, first), bn(0),
                                 L.relu(act, dur_us=14.0, frames=L.F_RELU)), label="stem"),
        ]
        for k in range(2):
            blk = module("BasicBlock", k, fwd("x = block(x)"))
            at = lambda text: s.at(text, "BasicBlock.forward", blk)  # noqa: E731
            out += [
                UserCall(at("out = F.relu(self.bn1(self.conv1(x)))"), (
                    conv(1 + 2 * k, act, (w, w, 3, 3), act, 95.0, 6.0, first), bn(1 + 2 * k),
                    L.relu(act, dur_us=14.0, frames=L.F_RELU)), label=f"block{k}.a"),
                UserCall(at("out = self.bn2(self.conv2(out))"), (
                    conv(2 + 2 * k, act, (w, w, 3, 3), act, 95.0, 6.0, first), bn(2 + 2 * k)), label=f"block{k}.b"),
                UserCall(at("return F.relu(out + x)"), (ew("aten::add", "aclnnAdd", "Add", act, 12.0),
                                                         L.relu(act, dur_us=14.0, frames=L.F_RELU)), label=f"block{k}.c"),
            ]
        fc = L.linear(b, w, 100, mm_us=9.0)
        out += [
            UserCall(fwd("x = F.adaptive_avg_pool2d(x, 1).flatten(1)"), (
                one("aten::adaptive_avg_pool2d", "aclnnAdaptiveAvgPool2d", "ReduceMean", (act,), ((b, w, 1, 1),), 8.0),
                L.view("aten::flatten", (b, w, 1, 1))), label="pool"),
            UserCall(fwd("return self.fc(x)"), (Launch(fc.op, fc.frames + module("Linear", 0, ())),), label="fc"),
            UserCall(s.loop("loss = F.cross_entropy(logits, labels)"),
                     (L.cross_entropy(b, 100, dur_us=8.0, frames=F_CROSS_ENTROPY),), label="loss"),
            UserCall(s.loop("hits = (logits.argmax(1) == labels).double().sum()"), (
                one("aten::argmax", "aclnnArgMax", "ArgMaxV2", ((b, 100),), ((b,),), 4.0, grad=None),
                one("aten::eq", "aclnnEqTensor", "Equal", ((b,), (b,)), ((b,),), 2.0, grad=None),
                L.aicpu_cast((b,), dur_us=240.0),
                one("aten::sum", "aclnnReduceSum", "ReduceSum", ((b,),), ((),), 2.0, grad=None, dtype="DT_DOUBLE")),
                label="hits"),
        ]
        params = RESNET_PARAMS
        buckets = (CommLaunch(L.allreduce(0.3, dur_us=2600.0), after_nodes=12),
                   CommLaunch(L.allreduce(0.2, dur_us=2200.0)))
        out += loop_tail(s, params, print_line='print(f"step {step} loss {loss.item():.3f} acc {hits / len(labels):.3f}")',
                         comm=buckets)
        return tuple(out)

    planted = _planted(
        s,
        ("NPU104", "for step, (images, labels) in enumerate(loader):", "train"),
        ("NPU103", "x = F.relu(self.bn(self.stem(x)))", "ResNetSmall.forward"),
        ("NPU201", "hits = (logits.argmax(1) == labels).double().sum()", "train"),
        ("NPU102", "loss.backward()", "train"),
        ("NPU220", "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)", "train"),
        ("NPU108", 'print(f"step {step} loss {loss.item():.3f} acc {hits / len(labels):.3f}")', "train"),
    )
    return Job("resnet_ddp", s.src.path, _run(_steps(items, steps, warmup_step), steps, pid=4100, world=2),
               planted, steps)


RESNET_PARAMS = ((64, 3, 3, 3), (64,), (64,)) + ((64, 64, 3, 3), (64,), (64,)) * 4 + ((100, 64), (100,))


# -- gru_tagger: GRU sequence tagger with clipping -----------------------------------------------------------


def gru_tagger(steps: int = 5, *, warmup_step: bool = False) -> Job:
    s = Script(MODELS / "gru_tagger.py")
    b, seq, e, h, tags, vocab = 32, 64, 128, 256, 17, 20000
    t = b * seq

    def fwd(text: str) -> tuple:
        return s.at(text, "Tagger.forward", module("Tagger", 0, s.loop("scores = model(tokens)")))

    def gru() -> Launch:
        x, wi, wh, y = (b, seq, e), (3 * h, e), (3 * h, h), (b, seq, h)
        trans = [L.aclnn("aclnnGRU", "TransData", "TransData", "AI_VECTOR_CORE", 60.0, inputs=(w,), outputs=(w,),
                         fmt="FRACTAL_NZ") for w in (wi, wh)]
        k = L.aclnn("aclnnGRU", "DynamicGRUV2", "DynamicGRUV2", AI_CORE, 420.0, inputs=(x, wi, wh), outputs=(y, (1, b, h)))
        kb = L.aclnn("aclnnGRUBackward", "DynamicGRUV2Grad", "DynamicGRUV2Grad", AI_CORE, 700.0, inputs=(x, wi, wh, y),
                     outputs=(x, wi, wh))
        bwd = (L.op("npu::npu_gru_backward", L.scope("aclnnGRUBackward", kb), inputs=(x, wi, wh, y)),)
        root = L.op("aten::gru", L.op("npu::npu_gru", L.scope("aclnnGRU", *trans, k), inputs=(x, wi, wh),
                                      autograd="NpuGruBackward0", backward=bwd), inputs=(x, (b, 1, h)))
        return Launch(root, (L.lib("torch/nn/modules/rnn.py", 1393, "forward", 1300),) + module("GRU", 0, ()))

    def items(first: bool) -> tuple[StepItem, ...]:
        emb = L.embedding(t, vocab, e, dur_us=30.0)
        proj, outl = L.linear_nd(t, h, h, mm_us=40.0), L.linear_nd(t, h, tags, mm_us=25.0)
        hs = (b, seq, h)
        out: list[StepItem] = [
            data_wait(s, "for step, (tokens, tags) in enumerate(loader):", 0.6, b, (seq,)),
            to_device(s, "tokens, tags = tokens.to(DEVICE), tags.to(DEVICE)", (b, seq), (b, seq), copy_us=6.0),
            UserCall(fwd("h, _ = self.rnn(self.embed(tokens))"), (
                Launch(emb.op, EMBED_FWD + module("Embedding", 0, ())), gru()), label="rnn"),
            UserCall(fwd("h = self.drop(F.relu(self.proj(h)))"), (
                Launch(proj.op, proj.frames + module("Linear", 0, ())),
                Launch(L.relu(hs, dur_us=20.0).op, L.F_RELU),
                Launch(L.dropout(hs, 0.3, genmask_us=22.0, domask_us=20.0).op, L.DROPOUT_FWD + module("Dropout", 0, ()))),
                label="proj"),
            UserCall(fwd("return self.out(h)"), (Launch(outl.op, outl.frames + module("Linear", 1, ())),), label="out"),
            UserCall(s.loop("loss = F.cross_entropy(scores.reshape(-1, TAGS), tags.reshape(-1))"), (
                L.no_kernel("aten::reshape", inputs=((b, seq, tags), ())), L.no_kernel("aten::reshape", inputs=((b, seq), ())),
                L.cross_entropy(t, tags, dur_us=20.0, frames=F_CROSS_ENTROPY)), label="loss"),
        ]
        out += loop_tail(s, GRU_PARAMS, print_line='print(f"step {step} loss {loss.item():.4f}")',
                         clip="torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)", adam_us=40.0)
        return tuple(out)

    planted = _planted(
        s,
        ("NPU104", "for step, (tokens, tags) in enumerate(loader):", "train"),
        ("NPU101", "h = self.drop(F.relu(self.proj(h)))", "Tagger.forward"),
        ("NPU221", "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)", "train"),
        ("NPU220", "optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)", "train"),
        ("NPU108", 'print(f"step {step} loss {loss.item():.4f}")', "train"),
    )
    return Job("gru_tagger", s.src.path, _run(_steps(items, steps, warmup_step), steps, pid=4200), planted, steps)


# gru_tagger's parameters: the embedding (vocab x embed), the GRU's weight_ih, weight_hh and biases (3 x hidden
# rows), proj, out (tests/synth/savings_cases.py fuses its optimizer and clip with them)
GRU_PARAMS = ((20000, 128), (768, 128), (768, 256), (768,), (768,), (256, 256), (256,), (17, 256), (17,))


# -- recsys_towers: EmbeddingBags in a ModuleList, two towers ------------------------------------------------


def recsys_towers(steps: int = 5, *, warmup_step: bool = False) -> Job:
    s = Script(MODELS / "recsys_towers.py")
    b, nf, rows, d, bag, dense = 256, 3, 50000, 64, 8, 13

    def fwd(text: str) -> tuple:
        return s.at(text, "TwoTower.forward", module("TwoTower", 0, s.loop("logits = model(ids, offsets, dense)")))

    def tower(k: int, line: str, fin: int) -> tuple[UserCall, ...]:
        site = module("Tower", k, fwd(line))
        fc1, fc2 = L.linear(b, fin, 256, mm_us=14.0), L.linear(b, 256, d, mm_us=8.0)
        hs = (b, 256)
        return (
            UserCall(s.at("x = F.dropout(F.relu(self.fc1(x)), p=0.1, training=self.training)", "Tower.forward", site), (
                Launch(fc1.op, fc1.frames + module("Linear", 2 * k, ())),
                Launch(L.relu(hs, dur_us=5.0).op, L.F_RELU),
                Launch(L.dropout(hs, 0.1, genmask_us=6.0, domask_us=5.0).op, L.F_DROPOUT)), label=f"tower{k}.fc1"),
            UserCall(s.at("return self.fc2(x)", "Tower.forward", site),
                     (Launch(fc2.op, fc2.frames + module("Linear", 2 * k + 1, ())),), label=f"tower{k}.fc2"),
        )

    def items(first: bool) -> tuple[StepItem, ...]:
        ids, offs = (nf, b * bag), (nf, b)
        bags = []
        for i in range(nf):
            k = L.aclnn("aclnnEmbeddingBag", "EmbeddingBagAiCpu", "EmbeddingBag", "AI_CPU", 180.0,
                        inputs=((rows, d), (b * bag,), (b,)), outputs=((b, d),), dtype="DT_FLOAT")
            kb = L.aclnn("aclnnEmbeddingBagBackward", "EmbeddingBagGradAiCore", "UnsortedSegmentSum", "AI_VECTOR_CORE",
                         90.0, inputs=((b, d), (b * bag,)), outputs=((rows, d),), dtype="DT_FLOAT")
            bwd = (L.op("aten::_embedding_bag_backward", L.scope("aclnnEmbeddingBagBackward", kb)),)
            root = L.op("aten::embedding_bag", L.op("aten::_embedding_bag", L.scope("aclnnEmbeddingBag", k),
                                                     inputs=((rows, d), (b * bag,), (b,)), types="float;long;long",
                                                     autograd="EmbeddingBagBackward0", backward=bwd))
            bags.append(Launch(root, (L.lib("torch/nn/modules/sparse.py", 390, "forward", 389),)
                               + module("EmbeddingBag", i, ())))
        out: list[StepItem] = [
            to_device(s, "ids, offsets = ids.to(DEVICE), offsets.to(DEVICE)", ids, offs, copy_us=8.0),
            to_device(s, "dense, clicks = dense.to(DEVICE), clicks.to(DEVICE)", (b, dense), (b,), copy_us=5.0),
            UserCall(fwd("pooled = [bag(ids[i], offsets[i]) for i, bag in enumerate(self.bags)]"), tuple(bags),
                     label="bags"),
            UserCall(fwd("u = self.user(torch.cat(pooled, dim=1))"), (
                one("aten::cat", "aclnnCat", "ConcatD", ((b, d),) * nf, ((b, nf * d),), 6.0, grad="SplitV"),),
                label="cat"),
            *tower(0, "u = self.user(torch.cat(pooled, dim=1))", nf * d),
            *tower(1, "v = self.item(dense)", dense),
            UserCall(fwd("return (u * v).sum(-1)"), (ew("aten::mul", "aclnnMul", "Mul", (b, d), 4.0),
                                                     one("aten::sum", "aclnnReduceSum", "ReduceSum", ((b, d),), ((b,),),
                                                         3.0, grad="BroadcastTo")), label="dot"),
            UserCall(s.loop("loss = F.binary_cross_entropy_with_logits(logits, clicks)"), (
                one("aten::binary_cross_entropy_with_logits", "aclnnBinaryCrossEntropyWithLogits",
                    "SigmoidCrossEntropyWithLogitsV2", ((b,), (b,)), ((),), 6.0,
                    grad="SigmoidCrossEntropyWithLogitsGradV2"),), label="loss"),
            UserCall(s.loop("ctr = torch.sigmoid(logits).double().mean()"), (
                one("aten::sigmoid", "aclnnSigmoid", "Sigmoid", ((b,),), ((b,),), 3.0, grad=None),
                L.aicpu_cast((b,), dur_us=200.0),
                one("aten::mean", "aclnnMean", "ReduceMean", ((b,),), ((),), 2.0, grad=None, dtype="DT_DOUBLE")),
                label="ctr"),
        ]
        params = ((rows, d),) * nf + ((256, nf * d), (256,), (d, 256), (d,), (256, dense), (256,), (d, 256), (d,))
        out += loop_tail(s, params, print_line='print(f"step {step} loss {loss.item():.4f} ctr {ctr:.3f}")')
        return tuple(out)

    planted = _planted(
        s,
        ("NPU201", "pooled = [bag(ids[i], offsets[i]) for i, bag in enumerate(self.bags)]", "TwoTower.forward"),
        ("NPU201", "ctr = torch.sigmoid(logits).double().mean()", "train"),
        ("NPU101", "x = F.dropout(F.relu(self.fc1(x)), p=0.1, training=self.training)", "Tower.forward"),
        ("NPU220", "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)", "train"),
        ("NPU108", 'print(f"step {step} loss {loss.item():.4f} ctr {ctr:.3f}")', "train"),
    )
    return Job("recsys_towers", s.src.path, _run(_steps(items, steps, warmup_step), steps, pid=4300), planted, steps)


# -- vit_classifier: vision transformer (held out) ----------------------------------------------------------


def vit_classifier(steps: int = 5, *, warmup_step: bool = False) -> Job:
    s = Script(MODELS / "vit_classifier.py")
    b, img, p, d, nh, depth, classes = 32, 64, 8, 192, 3, 2, 1000
    n, hd = (img // p) ** 2, d // 3
    t = b * n
    x3, xh, sc = (b, n, d), (b, nh, n, hd), (b, nh, n, n)

    def fwd(text: str) -> tuple:
        return s.at(text, "ViT.forward", module("ViT", 0, s.loop("loss = F.cross_entropy(model(images), labels, "
                                                                     "label_smoothing=0.1)")))

    def lin(k: int, fin: int, fout: int, us_: float) -> Launch:
        m = L.linear(t, fin, fout, mm_us=us_)
        return Launch(m.op, m.frames + module("Linear", k, ()))

    def items(first: bool) -> tuple[StepItem, ...]:
        conv = L.conv2d((b, 3, img, img), (d, 3, p, p), (b, d, img // p, img // p), conv_us=60.0, trans_us=20.0,
                        compile=first)
        out: list[StepItem] = [
            data_wait(s, "for step, (images, labels) in enumerate(loader):", 16.0, b, (3, img, img)),
            to_device(s, "images, labels = images.to(DEVICE), labels.to(DEVICE)", (b, 3, img, img), (b,)),
            UserCall(fwd("x = self.patch(images).flatten(2).transpose(1, 2) + self.pos"), (
                Launch(conv.op, conv.frames + module("Conv2d", 0, ())),
                L.no_kernel("aten::flatten", inputs=((b, d, img // p, img // p),)),
                L.no_kernel("aten::transpose", inputs=((b, d, n), (), ())),
                ew("aten::add", "aclnnAdd", "Add", x3, 10.0)), label="patch"),
        ]
        for k in range(depth):
            blk = module("EncoderBlock", k, fwd("x = blk(x)"))
            res1 = "x = x + self.attn(self.norm1(x))"
            attn = module("Attention", k, s.at(res1, "EncoderBlock.forward", blk))
            a = lambda text: s.at(text, "Attention.forward", attn)  # noqa: E731
            out += [
                UserCall(s.at(res1, "EncoderBlock.forward", blk), (layer_norm(x3, frames=module("LayerNorm", 3 * k, ())),),
                         label=f"b{k}.norm1"),
                UserCall(a("q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)"),
                         (lin(4 * k, d, 3 * d, 50.0), L.no_kernel("aten::reshape", inputs=((b, n, 3 * d), ())),
                          L.no_kernel("aten::permute", inputs=((b, n, 3, nh, hd), ()))), label=f"b{k}.qkv"),
                UserCall(a("attn = (q @ k.transpose(-2, -1)) * self.scale"), (
                    L.no_kernel("aten::transpose", inputs=(xh, (), ())),
                    L.matmul(xh, (b, nh, hd, n), sc, dur_us=40.0),
                    ew("aten::mul", "aclnnMuls", "Muls", sc, 12.0)), label=f"b{k}.scores"),
                UserCall(a("attn = attn.softmax(dim=-1)"), (L.softmax(sc, dur_us=30.0, frames=()),), label=f"b{k}.softmax"),
                UserCall(a("x = (attn @ v).transpose(1, 2).contiguous().reshape(b, n, c)"), (
                    L.matmul(sc, xh, xh, dur_us=40.0), L.no_kernel("aten::transpose", inputs=(xh, (), ())),
                    L.contiguous(xh, (b, n, nh, hd), dur_us=45.0),
                    L.no_kernel("aten::reshape", inputs=((b, n, nh, hd), ()))), label=f"b{k}.merge"),
                UserCall(a("return self.proj(x)"), (lin(4 * k + 1, d, d, 20.0),), label=f"b{k}.proj"),
                UserCall(s.at(res1, "EncoderBlock.forward", blk), (ew("aten::add", "aclnnAdd", "Add", x3, 10.0),),
                         label=f"b{k}.res1"),
            ]
            mlp = "return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))"
            out.append(UserCall(s.at(mlp, "EncoderBlock.forward", blk), (
                layer_norm(x3, frames=module("LayerNorm", 3 * k + 1, ())),
                lin(4 * k + 2, d, 4 * d, 60.0),
                one("aten::gelu", "aclnnGelu", "Gelu", ((b, n, 4 * d),), ((b, n, 4 * d),), 55.0, grad="GeluGrad"),
                lin(4 * k + 3, 4 * d, d, 60.0),
                ew("aten::add", "aclnnAdd", "Add", x3, 10.0)), label=f"b{k}.mlp"))
        head = L.linear(b, d, classes, mm_us=30.0)
        out += [
            UserCall(fwd("return self.head(self.norm(x).mean(1))"), (
                layer_norm(x3, frames=module("LayerNorm", 3 * depth, ())),
                one("aten::mean", "aclnnMean", "ReduceMean", (x3,), ((b, d),), 6.0, grad="BroadcastTo"),
                Launch(head.op, head.frames + module("Linear", 4 * depth, ()))), label="head"),
            UserCall(s.loop("loss = F.cross_entropy(model(images), labels, label_smoothing=0.1)"),
                     (L.cross_entropy(b, classes, dur_us=12.0, frames=F_CROSS_ENTROPY),), label="loss"),
        ]
        params = ((d, 3, p, p), (d,), (1, n, d)) + ((d,), (d,), (3 * d, d), (3 * d,), (d, d), (d,), (d,), (d,),
                                                  (4 * d, d), (4 * d,), (d, 4 * d), (d,)) * depth + \
            ((d,), (d,), (classes, d), (classes,))
        out += loop_tail(s, params, print_line='print(f"step {step} loss {loss.item():.4f}")', adam_us=20.0)
        return tuple(out)

    planted = _planted(
        s,
        ("NPU104", "for step, (images, labels) in enumerate(loader):", "train"),
        ("NPU213", "attn = (q @ k.transpose(-2, -1)) * self.scale", "Attention.forward"),
        ("NPU215", "x = (attn @ v).transpose(1, 2).contiguous().reshape(b, n, c)", "Attention.forward"),
        ("NPU220", "optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.05)", "train"),
        ("NPU108", 'print(f"step {step} loss {loss.item():.4f}")', "train"),
    )
    return Job("vit_classifier", s.src.path, _run(_steps(items, steps, warmup_step), steps, pid=5100), planted, steps)


# -- moe_lm: routed mixture of experts (held out) -----------------------------------------------------------


def moe_lm(steps: int = 5, *, warmup_step: bool = False) -> Job:
    s = Script(MODELS / "moe_lm.py")
    b, seq, d, ne, ffn, vocab = 16, 128, 256, 2, 512, 6007
    t = b * seq
    x3 = (b, seq, d)
    model_line = "logits, counts = model(tokens)"

    def lm(text: str) -> tuple:
        return s.at(text, "MoELM.forward", module("MoELM", 0, s.loop(model_line)))

    moe_site = module("MoE", 0, lm("y, counts = self.moe(self.norm(x))"))

    def m(text: str) -> tuple:
        return s.at(text, "MoE.forward", moe_site)

    def items(first: bool) -> tuple[StepItem, ...]:
        emb = L.embedding(t, vocab, d, dur_us=35.0)
        router = L.linear_nd(t, d, ne, mm_us=12.0)
        out: list[StepItem] = [
            to_device(s, "tokens, targets = tokens.to(DEVICE), targets.to(DEVICE)", (b, seq), (b, seq), copy_us=7.0),
            UserCall(lm("x = self.embed(tokens)"), (Launch(emb.op, EMBED_FWD + module("Embedding", 0, ())),),
                     label="embed"),
            UserCall(s.at("return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)",
                          "RMSNorm.forward", module("RMSNorm", 0, lm("y, counts = self.moe(self.norm(x))"))),
                     rms_norm(x3, 24.0), label="rmsnorm"),
            UserCall(m("weights, chosen = F.softmax(self.router(x), dim=-1).max(dim=-1)"), (
                Launch(router.op, router.frames + module("Linear", 0, ())),
                L.softmax((b, seq, ne), dur_us=8.0),
                one("aten::max", "aclnnMaxDim", "ArgMaxWithValue", ((b, seq, ne),), ((b, seq), (b, seq)), 7.0,
                    grad="ScatterElements")), label="route"),
            UserCall(m("counts = torch.bincount(chosen.flatten(), minlength=EXPERTS)"), (
                L.no_kernel("aten::flatten", inputs=((b, seq),)),
                aicpu("aten::bincount", "aclnnBincount", "Bincount", ((t,),), ((ne,),), 320.0)), label="bincount"),
            UserCall(m("out = torch.zeros_like(x)"), (
                one("aten::zeros_like", "aclnnInplaceZero", "ZerosLike", (x3,), (x3,), 6.0, grad=None),), label="zeros"),
        ]
        for e in range(ne):
            exp = module("Expert", e, m("out = out + expert(x) * (chosen == e).unsqueeze(-1)"))
            w13, w2 = L.linear_nd(t, d, 2 * ffn, mm_us=70.0), L.linear_nd(t, ffn, d, mm_us=40.0)
            h = (b, seq, ffn)
            out += [
                UserCall(s.at("gate, up = self.w13(x).chunk(2, dim=-1)", "Expert.forward", exp), (
                    Launch(w13.op, w13.frames + module("Linear", 1 + 2 * e, ())),
                    L.no_kernel("aten::chunk", inputs=((b, seq, 2 * ffn), (), ()),
                                children=(OpSpec("aten::split", 3000, autograd="SplitBackward0",
                                                 backward=(OpSpec("aten::cat", 3000),)),))), label=f"e{e}.w13"),
                UserCall(s.at("return self.w2(F.silu(gate) * up)", "Expert.forward", exp), (
                    L.elementwise("aten::silu", "aclnnSilu", "Swish", h, dur_us=40.0, n_inputs=1,
                                  autograd="SiluBackward0", frames=L.F_SILU,
                                  bwd=L.backward_of("aten::silu", "aclnnSilu", "Swish", h, dur_us=40.0, n_inputs=1)),
                    ew("aten::mul", "aclnnMul", "Mul", h, 40.0),
                    Launch(w2.op, w2.frames + module("Linear", 2 + 2 * e, ()))), label=f"e{e}.w2"),
                UserCall(m("out = out + expert(x) * (chosen == e).unsqueeze(-1)"), (
                    one("aten::eq", "aclnnEqScalar", "Equal", ((b, seq),), ((b, seq),), 3.0, grad=None),
                    ew("aten::mul", "aclnnMul", "Mul", x3, 14.0), ew("aten::add", "aclnnAdd", "Add", x3, 14.0)),
                    label=f"e{e}.combine"),
            ]
        head = L.linear_nd(t, d, vocab, mm_us=700.0, matmul_type="MatMulV3")
        out += [
            UserCall(m("return out * weights.unsqueeze(-1), counts"), (ew("aten::mul", "aclnnMul", "Mul", x3, 14.0),),
                     label="weigh"),
            UserCall(lm("return self.lm_head(x + y), counts"), (
                ew("aten::add", "aclnnAdd", "Add", x3, 14.0),
                Launch(head.op, head.frames + module("Linear", 1 + 2 * ne, ()))), label="lm_head"),
            UserCall(s.loop("loss = F.cross_entropy(logits.view(-1, VOCAB), targets.reshape(-1))"), (
                L.no_kernel("aten::view", inputs=((b, seq, vocab), ())), L.no_kernel("aten::reshape", inputs=((b, seq), ())),
                L.cross_entropy(t, vocab, dur_us=240.0, frames=F_CROSS_ENTROPY)), label="loss"),
        ]
        params = ((vocab, d), (d,), (ne, d)) + ((2 * ffn, d), (d, ffn)) * ne + ((vocab, d),)
        out += loop_tail(s, params, print_line='print(f"step {step} loss {loss.item():.4f} load {counts.tolist()}")',
                         zero_line="optimizer.zero_grad(set_to_none=True)", syncs=2, adam_us=60.0)
        return tuple(out)

    planted = _planted(
        s,
        ("NPU210", "return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)", "RMSNorm.forward"),
        ("NPU201", "counts = torch.bincount(chosen.flatten(), minlength=EXPERTS)", "MoE.forward"),
        ("NPU220", "optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)", "train"),
        ("NPU108", 'print(f"step {step} loss {loss.item():.4f} load {counts.tolist()}")', "train"),
    )
    return Job("moe_lm", s.src.path, _run(_steps(items, steps, warmup_step), steps, pid=5200), planted, steps)


# -- custom_fn_mlp: a custom autograd.Function (held out) --------------------------------------------------


def custom_fn_mlp(steps: int = 5, *, warmup_step: bool = False) -> Job:
    s = Script(MODELS / "custom_fn_mlp.py")
    b, fin, hid, classes = 128, 784, 1024, 10
    hs = (b, hid)

    def fwd(text: str) -> tuple:
        return s.at(text, "MLP.forward", module("MLP", 0, s.loop("logits = model(x)")))

    def vec(aten: str, api: str, typ: str, dur: float, **kw) -> OpSpec:
        return L.op(aten, L.scope(api, L.aclnn(api, f"{typ}AiCore", typ, "AI_VECTOR_CORE", dur, inputs=(hs,),
                                                outputs=(hs,))), inputs=(hs,), **kw)

    def clipped_square() -> tuple[Launch, ...]:
        # the Function's own backward: relu, 2*, clamp, grad * (ClippedSquareBackward on the backward thread)
        bwd = (vec("aten::relu", "aclnnRelu", "Relu", 9.0), vec("aten::mul", "aclnnMuls", "Muls", 9.0),
               vec("aten::clamp", "aclnnClamp", "ClipByValue", 9.0), vec("aten::mul", "aclnnMul", "Mul", 9.0))
        inner = (L.lib("torch/autograd/function.py", 575, "apply", 553),)
        return (Launch(vec("aten::relu", "aclnnRelu", "Relu", 9.0), inner),
                Launch(vec("aten::pow", "aclnnPowTensorScalar", "Pow", 11.0, autograd="ClippedSquareBackward",
                           backward=bwd), inner))

    def items(first: bool) -> tuple[StepItem, ...]:
        fc1 = L.linear(b, fin, hid, mm_us=60.0, transdata=2, transdata_us=70.0)
        fc2, fc3 = L.linear(b, hid, hid, mm_us=70.0), L.linear(b, hid, classes, mm_us=8.0)
        apply_line = "x = ClippedSquare.apply(self.fc1(x))"
        out: list[StepItem] = [
            data_wait(s, "for step, (x, y) in enumerate(loader):", 12.0, b, (fin,)),
            to_device(s, "x, y = x.to(DEVICE), y.to(DEVICE)", (b, fin), (b,)),
            UserCall(fwd(apply_line), (Launch(fc1.op, fc1.frames + module("Linear", 0, ())),), label="fc1"),
            UserCall(s.at("return torch.relu(x).pow(2)", "ClippedSquare.forward", fwd(apply_line)), clipped_square(),
                     label="clipped_square"),
            UserCall(fwd("x = F.dropout(F.relu(self.fc2(x)), p=0.5, training=self.training)"), (
                Launch(fc2.op, fc2.frames + module("Linear", 1, ())), Launch(L.relu(hs, dur_us=20.0).op, L.F_RELU),
                Launch(L.dropout(hs, 0.5, genmask_us=22.0, domask_us=20.0).op, L.F_DROPOUT)), label="fc2"),
            UserCall(fwd("return self.fc3(x)"), (Launch(fc3.op, fc3.frames + module("Linear", 2, ())),), label="fc3"),
            UserCall(s.loop("loss = F.cross_entropy(logits, y)"),
                     (L.cross_entropy(b, classes, dur_us=6.0, frames=F_CROSS_ENTROPY),), label="loss"),
            UserCall(s.loop("margin = logits.double().max(1).values.mean()"), (
                L.aicpu_cast((b, classes), dur_us=260.0),
                one("aten::max", "aclnnMaxDim", "ArgMaxWithValue", ((b, classes),), ((b,), (b,)), 3.0, grad=None,
                    dtype="DT_DOUBLE"),
                one("aten::mean", "aclnnMean", "ReduceMean", ((b,),), ((),), 2.0, grad=None, dtype="DT_DOUBLE")),
                label="margin"),
        ]
        params = ((hid, fin), (hid,), (hid, hid), (hid,), (classes, hid), (classes,))
        out += loop_tail(s, params, print_line='print(f"step {step} loss {loss.item():.4f} margin {margin:.2f}")',
                         adam_us=80.0)
        return tuple(out)

    planted = _planted(
        s,
        ("NPU104", "for step, (x, y) in enumerate(loader):", "train"),
        ("NPU103", "x = ClippedSquare.apply(self.fc1(x))", "MLP.forward"),
        ("NPU101", "x = F.dropout(F.relu(self.fc2(x)), p=0.5, training=self.training)", "MLP.forward"),
        ("NPU201", "margin = logits.double().max(1).values.mean()", "train"),
        ("NPU220", "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)", "train"),
        ("NPU108", 'print(f"step {step} loss {loss.item():.4f} margin {margin:.2f}")', "train"),
    )
    return Job("custom_fn_mlp", s.src.path, _run(_steps(items, steps, warmup_step), steps, pid=5300), planted, steps)


# -- ckpt_transformer: blocks under gradient checkpointing (held out) ---------------------------------------


def _recompute(launches: tuple[Launch, ...]) -> tuple[OpSpec, ...]:
    """The forward of a checkpointed block run again at the start of its backward: the same
    kernels, under ops without autograd nodes."""
    return tuple(OpSpec(x.op.name, 3000, children=tuple(c for c in x.op.walk() if c.is_dispatch_scope))
                 for x in launches)


def ckpt_transformer(steps: int = 5, *, warmup_step: bool = False) -> Job:
    s = Script(MODELS / "ckpt_transformer.py")
    b, seq, d, nh, layers, vocab = 16, 192, 320, 5, 2, 4096
    t, hd = b * seq, d // nh
    x3, xh, sc = (b, seq, d), (b, nh, seq, hd), (b, nh, seq, seq)
    model_line = "loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())"
    ckpt = (L.lib("torch/utils/checkpoint.py", 1521, "checkpoint", 1373), L.lib("torch/_compile.py", 32, "inner", 24))

    def dec(text: str) -> tuple:
        return s.at(text, "Decoder.forward", module("Decoder", 0, s.loop(model_line)))

    def layer(k: int) -> list[StepItem]:
        site = module("DecoderLayer", k, ckpt + dec("h = checkpoint(layer, h, use_reentrant=False)"))
        at = lambda text: s.at(text, "DecoderLayer.forward", site)  # noqa: E731
        norm = module("RMSNorm", k, at("q, k, v = self.wqkv(self.norm(x)).view(b, s, 3, HEADS, d // HEADS)"
                                       ".permute(2, 0, 3, 1, 4)"))
        rms = rms_norm(x3, 22.0)
        wqkv, wo = L.linear_nd(t, d, 3 * d, mm_us=80.0), L.linear_nd(t, d, d, mm_us=30.0)
        calls = [
            UserCall(s.at("variance = x.pow(2).mean(-1, keepdim=True)", "RMSNorm.forward", norm), rms[:2], label="var"),
            UserCall(s.at("return self.weight * (x * torch.rsqrt(variance + 1e-6))", "RMSNorm.forward", norm), rms[2:],
                     label="rms"),
            UserCall(at("q, k, v = self.wqkv(self.norm(x)).view(b, s, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)"), (
                Launch(wqkv.op, wqkv.frames + module("Linear", 2 * k, ())),
                L.no_kernel("aten::view", inputs=((b, seq, 3 * d), ())),
                L.no_kernel("aten::permute", inputs=((b, seq, 3, nh, hd), ()))), label="qkv"),
            UserCall(at("scores = torch.matmul(q, k.transpose(-1, -2)) / (d // HEADS) ** 0.5"), (
                L.no_kernel("aten::transpose", inputs=(xh, (), ())), L.matmul(xh, (b, nh, hd, seq), sc, dur_us=70.0),
                ew("aten::div", "aclnnDivs", "RealDiv", sc, 20.0)), label="scores"),
            UserCall(at("probs = torch.softmax(scores, dim=-1)"), (L.softmax(sc, dur_us=60.0, frames=()),), label="probs"),
            UserCall(at("ctx = torch.matmul(probs, v).transpose(1, 2).contiguous().view(b, s, d)"), (
                L.matmul(sc, xh, xh, dur_us=70.0), L.no_kernel("aten::transpose", inputs=(xh, (), ())),
                L.contiguous(xh, (b, seq, nh, hd), dur_us=60.0), L.no_kernel("aten::view", inputs=((b, seq, nh, hd), ()))),
                label="ctx"),
        ]
        fwd_launches = tuple(x for c in calls for x in c.launches)
        add = ew("aten::add", "aclnnAdd", "Add", x3, 12.0)
        # the residual add is the block's last autograd node: its backward runs first, after the recompute
        add = Launch(dataclasses.replace(add.op, backward=_recompute(fwd_launches) + add.op.backward), add.frames)
        calls.append(UserCall(at("return x + self.wo(ctx)"), (
            Launch(wo.op, wo.frames + module("Linear", 2 * k + 1, ())), add), label="out"))
        return calls

    def items(first: bool) -> tuple[StepItem, ...]:
        emb = L.embedding(t, vocab, d, dur_us=30.0)
        head = L.linear_nd(t, d, vocab, mm_us=500.0, matmul_type="MatMulV3")
        out: list[StepItem] = [
            to_device(s, "tokens, targets = tokens.to(DEVICE), targets.to(DEVICE)", (b, seq), (b, seq), copy_us=6.0),
            UserCall(dec("h = self.embed(tokens)"), (Launch(emb.op, EMBED_FWD + module("Embedding", 0, ())),),
                     label="embed"),
        ]
        for k in range(layers):
            out += layer(k)
        out += [
            UserCall(dec("return self.head(h)"), (Launch(head.op, head.frames + module("Linear", 2 * layers, ())),),
                     label="head"),
            UserCall(s.loop(model_line), (L.no_kernel("aten::flatten", inputs=((b, seq, vocab),)),
                                          L.cross_entropy(t, vocab, dur_us=200.0, frames=F_CROSS_ENTROPY)), label="loss"),
        ]
        params = ((vocab, d),) + ((d,), (3 * d, d), (d, d)) * layers + ((vocab, d),)
        out += loop_tail(s, params, print_line='print(f"step {step} loss {loss.item():.4f}")', adam_us=60.0)
        return tuple(out)

    planted = _planted(
        s,
        ("NPU210", "variance = x.pow(2).mean(-1, keepdim=True)", "RMSNorm.forward"),
        ("NPU215", "ctx = torch.matmul(probs, v).transpose(1, 2).contiguous().view(b, s, d)", "DecoderLayer.forward"),
        ("NPU220", "optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)", "train"),
        ("NPU108", 'print(f"step {step} loss {loss.item():.4f}")', "train"),
    )
    return Job("ckpt_transformer", s.src.path, _run(_steps(items, steps, warmup_step), steps, pid=5400), planted, steps)


# -- compiled_mlp: a torch.compile'd function (held out) ----------------------------------------------------


def compiled_mlp(steps: int = 5, *, warmup_step: bool = False) -> Job:
    s = Script(MODELS / "compiled_mlp.py")
    b, fin, hid, fout = 512, 96, 1000, 8
    hs = (b, hid)
    dynamo = (L.lib("torch/_dynamo/eval_frame.py", 574, "_fn", 550),)

    def fwd(text: str) -> tuple:
        return s.at(text, "Regressor.forward", module("Regressor", 0, s.loop("loss = F.mse_loss(model(x), y)")))

    def compiled_region() -> Launch:
        ks = (L.aclnn("GeGraph0", "TanhAiCore", "Tanh", "AI_VECTOR_CORE", 30.0, inputs=(hs,), outputs=(hs,)),
              L.aclnn("GeGraph0", "MulAddAiCore", "FusedMulAdd", "AI_VECTOR_CORE", 30.0, inputs=(hs, (hid,), hs),
                      outputs=(hs,)))
        kb = L.aclnn("GeGraph1", "TanhGradAiCore", "TanhGrad", "AI_VECTOR_CORE", 45.0, inputs=(hs, hs), outputs=(hs,))
        fn = L.op("CompiledFunction", L.scope("GeGraph0", *ks), inputs=(hs, (hid,)), autograd="CompiledFunctionBackward",
                  backward=(L.op("CompiledFunctionBackward", L.scope("GeGraph1", kb)),))
        return Launch(OpSpec("Torch-Compiled Region: 0/0", us(30), children=(fn,)), dynamo)

    def items(first: bool) -> tuple[StepItem, ...]:
        inp = L.linear(b, fin, hid, mm_us=20.0)
        hidden = L.linear(b, hid, hid, mm_us=90.0, transdata=2, transdata_us=60.0)
        outl = L.linear(b, hid, fout, mm_us=10.0)
        out: list[StepItem] = [
            data_wait(s, "for step, (x, y) in enumerate(loader):", 11.0, b, (fin,)),
            to_device(s, "x, y = x.to(DEVICE), y.to(DEVICE)", (b, fin), (b, fout)),
            UserCall(fwd("x = mix(self.inp(x), self.scale)"), (Launch(inp.op, inp.frames + module("Linear", 0, ())),
                                                                compiled_region()), label="mix"),
            UserCall(fwd("x = self.drop(F.relu(self.hidden(x)))"), (
                Launch(hidden.op, hidden.frames + module("Linear", 1, ())),
                Launch(L.relu(hs, dur_us=10.0).op, L.F_RELU),
                Launch(L.dropout(hs, 0.1, genmask_us=10.0, domask_us=9.0).op, L.DROPOUT_FWD + module("Dropout", 0, ()))),
                label="hidden"),
            UserCall(fwd("return self.out(x)"), (Launch(outl.op, outl.frames + module("Linear", 2, ())),), label="out"),
            UserCall(s.loop("loss = F.mse_loss(model(x), y)"), (
                one("aten::mse_loss", "aclnnMseLoss", "MseLoss", ((b, fout), (b, fout)), ((),), 5.0, grad="MseLossGrad"),),
                label="loss"),
        ]
        out += loop_tail(s, COMPILED_PARAMS, print_line='print(f"step {step} loss {loss.item():.4f}")',
                         clip="torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)", adam_us=60.0)
        return tuple(out)

    planted = _planted(
        s,
        ("NPU104", "for step, (x, y) in enumerate(loader):", "train"),
        ("NPU103", "x = self.drop(F.relu(self.hidden(x)))", "Regressor.forward"),
        ("NPU101", "x = self.drop(F.relu(self.hidden(x)))", "Regressor.forward"),
        ("NPU221", "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)", "train"),
        ("NPU220", "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)", "train"),
        ("NPU108", 'print(f"step {step} loss {loss.item():.4f}")', "train"),
    )
    return Job("compiled_mlp", s.src.path, _run(_steps(items, steps, warmup_step), steps, pid=5500), planted, steps)


# compiled_mlp's parameters: inp (weight, bias), scale, hidden, out (tests/synth/savings_cases.py fuses its clip and
# optimizer with them)
COMPILED_PARAMS = ((1000, 96), (1000,), (1000,), (1000, 1000), (1000,), (8, 1000), (8,))


ZOO: dict[str, Callable[..., Job]] = {
    **HARNESS_JOBS, "resnet_ddp": resnet_ddp, "gru_tagger": gru_tagger, "recsys_towers": recsys_towers,
    "vit_classifier": vit_classifier, "moe_lm": moe_lm, "custom_fn_mlp": custom_fn_mlp,
    "ckpt_transformer": ckpt_transformer, "compiled_mlp": compiled_mlp,
}
