"""The model: `make_model(config)` is the one place to put yours.

The example is a small convolutional classifier for 8x8 images. It has BatchNorm and Dropout on
purpose: both behave differently in train and eval mode, so a forgotten `model.eval()` changes
results, and the tests can check that evaluation gets it right. Build every layer inside
`make_model`: train.py seeds torch's generator just before calling it, so the initial weights are
a function of the seed.
"""

from __future__ import annotations

import torch
from torch import nn

from .config import Config
from .data import IMAGE_SIZE, NUM_CLASSES


def make_model(config: Config) -> nn.Module:
    return Net(NUM_CLASSES, width=config.width, dropout=config.dropout)


class Net(nn.Module):
    def __init__(self, num_classes: int = NUM_CLASSES, width: int = 16, dropout: float = 0.25) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, kernel_size=3, padding=1),
            nn.BatchNorm2d(width),  # running statistics update in train mode only
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, kernel_size=3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(),
            nn.MaxPool2d(2),  # 8x8 -> 4x4
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Dropout(dropout),  # draws from torch's generator in train mode, identity in eval
            nn.Linear(2 * width * (IMAGE_SIZE // 2) ** 2, 128),
            nn.ReLU(),
            nn.Linear(128, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))
