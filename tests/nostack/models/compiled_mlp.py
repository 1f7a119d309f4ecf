"""A regression model whose feature mixer is a ``torch.compile``'d function: a model of the
no-stack zoo (tests/nostack/zoo.py describes its profiled run; the tests parse this file, never
run it).

Runs on an NPU with torch_npu, else on the CPU so it stays a real script.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

try:
    import torch_npu  # noqa: F401

    DEVICE = "npu"
except ImportError:
    DEVICE = "cpu"

INPUTS = 96
HIDDEN = 1000
OUTPUTS = 8


@torch.compile(dynamic=False)
def mix(x, scale):
    return torch.tanh(x) * scale + x


class Regressor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(INPUTS, HIDDEN)
        self.scale = nn.Parameter(torch.ones(HIDDEN))
        self.hidden = nn.Linear(HIDDEN, HIDDEN)
        self.drop = nn.Dropout(0.1)
        self.out = nn.Linear(HIDDEN, OUTPUTS)

    def forward(self, x):
        x = mix(self.inp(x), self.scale)
        x = self.drop(F.relu(self.hidden(x)))
        return self.out(x)


def train(args) -> None:
    x = torch.randn(args.batch_size * args.steps, INPUTS)
    y = torch.randn(args.batch_size * args.steps, OUTPUTS)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
    model = Regressor().to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step, (x, y) in enumerate(loader):
        x, y = x.to(DEVICE), y.to(DEVICE)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} loss {loss.item():.4f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--steps", type=int, default=5)
    train(parser.parse_args())


if __name__ == "__main__":
    main()
