"""A decoder whose blocks run under gradient checkpointing: a model of the no-stack zoo
(tests/nostack/zoo.py describes its profiled run; the tests parse this file, never run it).

Runs on an NPU with torch_npu, else on the CPU so it stays a real script.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

try:
    import torch_npu  # noqa: F401

    DEVICE = "npu"
except ImportError:
    DEVICE = "cpu"

VOCAB = 4096
DIM = 320
HEADS = 5
LAYERS = 2
SEQ = 192


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + 1e-6))


class DecoderLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = RMSNorm(DIM)
        self.wqkv = nn.Linear(DIM, 3 * DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.wqkv(self.norm(x)).view(b, s, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) / (d // HEADS) ** 0.5
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).contiguous().view(b, s, d)
        return x + self.wo(ctx)


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList([DecoderLayer() for _ in range(LAYERS)])
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = checkpoint(layer, h, use_reentrant=False)
        return self.head(h)


def batches(batch_size: int, steps: int):
    for _ in range(steps):
        data = torch.randint(0, VOCAB, (batch_size, SEQ + 1))
        yield data[:, :-1], data[:, 1:]


def train(args) -> None:
    model = Decoder().to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
    for step, (tokens, targets) in enumerate(batches(args.batch_size, args.steps)):
        tokens, targets = tokens.to(DEVICE), targets.to(DEVICE)
        loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} loss {loss.item():.4f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=5)
    train(parser.parse_args())


if __name__ == "__main__":
    main()
