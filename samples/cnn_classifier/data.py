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


class BlurredImages(SyntheticImages):
    """The same images through a per-item augmentation done in ``__getitem__``, as torchvision
    transforms are: a separable Gaussian blur of random strength, ``passes`` times. It runs on the
    loading thread, so with ``num_workers=0`` every step waits for it: the DataLoader stall
    (NPU104) shows on a CPU-only run too, where no device waits."""

    def __init__(self, *args: object, passes: int = 2, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.passes = passes

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, label = super().__getitem__(index)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + index + 1)
        sigma = 0.5 + float(torch.rand((), generator=gen))
        taps = torch.exp(-(torch.arange(-3, 4, dtype=image.dtype) ** 2) / (2 * sigma**2))
        taps = (taps / taps.sum()).tolist()
        for _ in range(self.passes):
            for dim in (1, 2):  # rows, then columns, with the edges repeated
                edge = [image.narrow(dim, 0, 1)] * 3 + [image] + [image.narrow(dim, image.size(dim) - 1, 1)] * 3
                padded = torch.cat(edge, dim)
                image = sum(w * padded.narrow(dim, k, image.size(dim)) for k, w in enumerate(taps))
        return image, label
