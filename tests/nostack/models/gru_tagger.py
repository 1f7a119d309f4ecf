"""A GRU sequence tagger with gradient clipping: a model of the no-stack zoo
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

VOCAB = 20000
TAGS = 17
EMBED = 128
HIDDEN = 256
SEQ = 64


class Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMBED)
        self.rnn = nn.GRU(EMBED, HIDDEN, batch_first=True)
        self.proj = nn.Linear(HIDDEN, HIDDEN)
        self.drop = nn.Dropout(0.3)
        self.out = nn.Linear(HIDDEN, TAGS)

    def forward(self, tokens):
        h, _ = self.rnn(self.embed(tokens))
        h = self.drop(F.relu(self.proj(h)))
        return self.out(h)


def train(args) -> None:
    tokens = torch.randint(0, VOCAB, (args.batch_size * args.steps, SEQ))
    tags = torch.randint(0, TAGS, (args.batch_size * args.steps, SEQ))
    loader = DataLoader(TensorDataset(tokens, tags), batch_size=args.batch_size)
    model = Tagger().to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step, (tokens, tags) in enumerate(loader):
        tokens, tags = tokens.to(DEVICE), tags.to(DEVICE)
        scores = model(tokens)
        loss = F.cross_entropy(scores.reshape(-1, TAGS), tags.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} loss {loss.item():.4f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    train(parser.parse_args())


if __name__ == "__main__":
    main()
