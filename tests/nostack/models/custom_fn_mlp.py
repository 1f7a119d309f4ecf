"""An MLP whose activation is a custom ``torch.autograd.Function``: a model of the no-stack zoo
(tests/nostack/zoo.py describes its profiled run; the tests parse this file, never run it).

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

FEATURES = 784
HIDDEN = 1024
CLASSES = 10


class ClippedSquare(torch.autograd.Function):
    """relu(x)**2 with the gradient clipped, as some sparse-activation papers train."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.relu(x).pow(2)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (2 * torch.relu(x)).clamp(max=4.0)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(FEATURES, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        self.fc3 = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        x = ClippedSquare.apply(self.fc1(x))
        x = F.dropout(F.relu(self.fc2(x)), p=0.5, training=self.training)
        return self.fc3(x)


def train(args) -> None:
    data = torch.randn(args.batch_size * args.steps, FEATURES)
    labels = torch.randint(0, CLASSES, (args.batch_size * args.steps,))
    loader = DataLoader(TensorDataset(data, labels), batch_size=args.batch_size, shuffle=True)
    model = MLP().to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step, (x, y) in enumerate(loader):
        x, y = x.to(DEVICE), y.to(DEVICE)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        margin = logits.double().max(1).values.mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} loss {loss.item():.4f} margin {margin:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5)
    train(parser.parse_args())


if __name__ == "__main__":
    main()
