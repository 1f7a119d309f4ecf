"""A small decoder-only language model: the second model of the no-stack mapping harness
(tests/nostack/jobs.py describes its profiled run; the tests parse this file, never run it).

Runs on an NPU with torch_npu, else on the CPU, so it stays a real script.
"""

import argparse
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import torch_npu  # noqa: F401

    DEVICE = "npu"
except ImportError:
    DEVICE = "cpu"


@dataclass
class LMConfig:
    vocab: int = 8003
    dim: int = 256
    heads: int = 4
    ffn: int = 688
    layers: int = 2
    seq: int = 256


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SelfAttention(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.head_dim = cfg.dim // cfg.heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.out = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) * self.scale
        attn = F.softmax(scores + mask, dim=-1)
        y = (attn @ v).transpose(1, 2).contiguous().view(b, s, d)
        return self.out(y)


class FeedForward(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.gate_up = nn.Linear(cfg.dim, 2 * cfg.ffn, bias=False)
        self.down = nn.Linear(cfg.ffn, cfg.dim, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.norm1 = RMSNorm(cfg.dim)
        self.attn = SelfAttention(cfg)
        self.norm2 = RMSNorm(cfg.dim)
        self.ffn = FeedForward(cfg)

    def forward(self, x, mask):
        x = x + self.attn(self.norm1(x), mask)
        return x + self.ffn(self.norm2(x))


class CharLM(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.layers)])
        self.norm = RMSNorm(cfg.dim)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, tokens):
        s = tokens.shape[1]
        mask = torch.full((s, s), float("-inf"), device=tokens.device).triu(1)
        x = self.tok(tokens)
        for block in self.blocks:
            x = block(x, mask)
        return self.lm_head(self.norm(x))


def batches(cfg: LMConfig, batch_size: int, steps: int):
    for _ in range(steps):
        data = torch.randint(0, cfg.vocab, (batch_size, cfg.seq + 1))
        yield data[:, :-1], data[:, 1:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    cfg = LMConfig()
    model = CharLM(cfg).to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for step, (tokens, targets) in enumerate(batches(cfg, args.batch_size, args.steps)):
        tokens, targets = tokens.to(DEVICE), targets.to(DEVICE)
        logits = model(tokens)
        loss = F.cross_entropy(logits.view(-1, cfg.vocab), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
