"""A language model with a top-1 routed mixture-of-experts layer: a model of the no-stack zoo
(tests/nostack/zoo.py describes its profiled run; the tests parse this file, never run it).

Runs on an NPU with torch_npu, else on the CPU so it stays a real script.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import torch_npu  # noqa: F401

    DEVICE = "npu"
except ImportError:
    DEVICE = "cpu"

VOCAB = 6007
DIM = 256
EXPERTS = 2
FFN = 512
SEQ = 128


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class Expert(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w13 = nn.Linear(DIM, 2 * FFN, bias=False)
        self.w2 = nn.Linear(FFN, DIM, bias=False)

    def forward(self, x):
        gate, up = self.w13(x).chunk(2, dim=-1)
        return self.w2(F.silu(gate) * up)


class MoE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(DIM, EXPERTS, bias=False)
        self.experts = nn.ModuleList([Expert() for _ in range(EXPERTS)])

    def forward(self, x):
        weights, chosen = F.softmax(self.router(x), dim=-1).max(dim=-1)
        counts = torch.bincount(chosen.flatten(), minlength=EXPERTS)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            out = out + expert(x) * (chosen == e).unsqueeze(-1)
        return out * weights.unsqueeze(-1), counts


class MoELM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.norm = RMSNorm(DIM)
        self.moe = MoE()
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        y, counts = self.moe(self.norm(x))
        return self.lm_head(x + y), counts


def batches(batch_size: int, steps: int):
    for _ in range(steps):
        data = torch.randint(0, VOCAB, (batch_size, SEQ + 1))
        yield data[:, :-1], data[:, 1:]


def train(args) -> None:
    model = MoELM().to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for step, (tokens, targets) in enumerate(batches(args.batch_size, args.steps)):
        tokens, targets = tokens.to(DEVICE), targets.to(DEVICE)
        logits, counts = model(tokens)
        loss = F.cross_entropy(logits.view(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f} load {counts.tolist()}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=5)
    train(parser.parse_args())


if __name__ == "__main__":
    main()
