"""A two-tower recommender with one EmbeddingBag per sparse feature in a ModuleList: a model of
the no-stack zoo (tests/nostack/zoo.py describes its profiled run; the tests parse this file,
never run it).

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

FEATURES = 3
ROWS = 50000
DIM = 64
BAG = 8
DENSE = 13


class Tower(nn.Module):
    def __init__(self, fin: int, hidden: int = 256) -> None:
        super().__init__()
        self.fc1 = nn.Linear(fin, hidden)
        self.fc2 = nn.Linear(hidden, DIM)

    def forward(self, x):
        x = F.dropout(F.relu(self.fc1(x)), p=0.1, training=self.training)
        return self.fc2(x)


class TwoTower(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bags = nn.ModuleList([nn.EmbeddingBag(ROWS, DIM, mode="sum") for _ in range(FEATURES)])
        self.user = Tower(FEATURES * DIM)
        self.item = Tower(DENSE)

    def forward(self, ids, offsets, dense):
        pooled = [bag(ids[i], offsets[i]) for i, bag in enumerate(self.bags)]
        u = self.user(torch.cat(pooled, dim=1))
        v = self.item(dense)
        return (u * v).sum(-1)


def batches(batch_size: int, steps: int):
    for _ in range(steps):
        ids = torch.randint(0, ROWS, (FEATURES, batch_size * BAG))
        offsets = torch.arange(0, batch_size * BAG, BAG).repeat(FEATURES, 1)
        yield ids, offsets, torch.randn(batch_size, DENSE), torch.randint(0, 2, (batch_size,)).float()


def train(args) -> None:
    model = TwoTower().to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step, (ids, offsets, dense, clicks) in enumerate(batches(args.batch_size, args.steps)):
        ids, offsets = ids.to(DEVICE), offsets.to(DEVICE)
        dense, clicks = dense.to(DEVICE), clicks.to(DEVICE)
        logits = model(ids, offsets, dense)
        loss = F.binary_cross_entropy_with_logits(logits, clicks)
        ctr = torch.sigmoid(logits).double().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} loss {loss.item():.4f} ctr {ctr:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5)
    train(parser.parse_args())


if __name__ == "__main__":
    main()
