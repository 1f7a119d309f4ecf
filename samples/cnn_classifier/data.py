"""Synthetic 32x32 RGB images whose class is readable from the picture, so the loss goes down."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class SyntheticImages(Dataset):
    """``length`` images of class ``i % num_classes``: noise plus a class-dependent bright band.

    Every item is generated from its index with its own seeded generator, so the data set is the
    same on every run and every rank without storing anything.
    """

    def __init__(self, length: int = 512, num_classes: int = 10, seed: int = 0) -> None:
        self.length = length
        self.num_classes = num_classes
        self.seed = seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        label = index % self.num_classes
        image = torch.randn(3, 32, 32, generator=gen) * 0.5
        row = label * 3  # the band's position encodes the class
        image[:, row : row + 2, :] += 2.0
        return image, torch.tensor(label)
