"""A tiny LLaMA-style decoder block (小型解码器) written the way model repos write it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Config:
    dim: int = 32
    n_heads: int = 4
    hidden: int = 64
    eps: float = 1e-6
    dropout: float = 0.0


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return q * cos + rotate_half(q) * sin


class Attention(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.out = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.attn_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q = apply_rotary(q, cos, sin)
        k = apply_rotary(k, cos, sin)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(causal, float("-inf"))  # 因果掩码
        probs = F.softmax(scores, dim=-1)
        probs = self.attn_drop(probs)
        ctx = probs @ v
        ctx = ctx.permute(0, 2, 1, 3).contiguous().view(b, s, d)
        return self.out(ctx)


class SwiGLU(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.w12 = nn.Linear(cfg.dim, 2 * cfg.hidden, bias=False)
        self.w3 = nn.Linear(cfg.hidden, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.w12(x)
        a, b = h.chunk(2, dim=-1)
        return self.w3(F.silu(a) * b)


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.eps)
        self.attn = Attention(cfg)
        self.mlp = SwiGLU(cfg)
        self.post_norm = nn.LayerNorm(cfg.dim)
        self.gelu_proj = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x, cos, sin, causal):
        r = self.attn(self.attn_norm(x), cos, sin, causal)
        h = x + r
        y = self.post_norm(h)
        y = F.gelu(self.gelu_proj(y))
        return h + self.mlp(y)


def scaled_scores(x: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    return F.softmax((x * scale).masked_fill(mask, float("-inf")), dim=-1)


def rope_tables(s: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    freqs = torch.outer(torch.arange(s).float(), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[None, None], emb.sin()[None, None]
