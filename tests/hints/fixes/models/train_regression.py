"""Linear regression trainer (训练脚本): argparse, optional DDP, AMP, a scheduler and clipping."""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset


class Regressor(nn.Module):
    def __init__(self, d_in: int = 6) -> None:
        super().__init__()
        self.linear = nn.Linear(d_in, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).squeeze(-1)


def make_loader(n: int, batch_size: int) -> DataLoader:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(n, 6, generator=g)
    y = x.sum(-1) + 0.1 * torch.randn(n, generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=False)
    return loader


def train(model: nn.Module, loader: DataLoader, optimizer: torch.optim.Optimizer, criterion) -> float:
    model.train()
    last = 0.0
    for x, y in loader:
        optimizer.zero_grad()  # 梯度清零
        pred = model(x)
        loss = criterion(pred, y)
        loss.backward()
        optimizer.step()
        last = loss.item()
    return last


def train_amp(model, loader, optimizer, scheduler, scaler, criterion):
    for epoch in range(1):
        for i, (x, y) in enumerate(loader):
            with torch.autocast("cpu", enabled=False):
                loss = criterion(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=100.0)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)


def train_ddp(rank_model, loader, optimizer, criterion, steps):
    model = DistributedDataParallel(rank_model)
    data = iter(loader)
    for it in range(steps):
        x, y = next(data)
        loss = criterion(model(x), y) * 1.0 + 0.0
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    model = Regressor()
    loader = make_loader(64, args.batch_size)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    train(model, loader, opt, nn.MSELoss())


if __name__ == "__main__":
    main()
