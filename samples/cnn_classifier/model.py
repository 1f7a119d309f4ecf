"""A small CNN image classifier.

The head is written the way many projects write it, which is what the profile hints look at:
ReLU followed by Dropout three times (as modules called in a row, as functional calls, and as
an ``nn.Sequential`` block), each pair a candidate for fusion.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvBlock(nn.Module):
    """conv -> batch norm -> relu -> 2x2 max pool."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(out_channels)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(F.relu(self.bn(self.conv(x))))


class CNNClassifier(nn.Module):
    def __init__(self, num_classes: int = 10, dropout: float = 0.1) -> None:
        super().__init__()
        self.features = nn.Sequential(ConvBlock(3, 16), ConvBlock(16, 32))
        self.embed = nn.Sequential(
            nn.Linear(32 * 8 * 8, 256),
            nn.ReLU(),
            nn.Dropout(0.2),
        )
        self.fc1 = nn.Linear(256, 128)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(0.3)
        self.fc2 = nn.Linear(128, 64)
        self.classifier = nn.Linear(64, num_classes)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = torch.flatten(x, 1)
        x = self.embed(x)
        x = self.drop(self.act(self.fc1(x)))
        x = F.dropout(F.relu(self.fc2(x)), p=self.dropout, training=self.training)
        return self.classifier(x)
