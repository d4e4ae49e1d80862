"""Inception-V3 (Szegedy et al., "Rethinking the Inception Architecture", CVPR 2016).

The layer plan follows the paper's Table 1 with the 35x35 / 17x17 / 8x8 modules of its
Figures 5-7, batch-normalised convolutions (BN-auxiliary variant, Sec. 7) and the
auxiliary classifier on the 17x17 grid (Sec. 4). Channel widths are those of the
reference implementation released with the paper; with 1000 classes the model has
27,161,264 parameters (the commonly published count, checked in tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class InceptionConfig:
    batch_size: int
    image_size: int
    num_classes: int = 1000
    aux_logits: bool = True
    width: float = 1.0  # channel multiplier; 1.0 is the paper's model

    @staticmethod
    def default() -> InceptionConfig:
        # Batch 32 per GPU at 299x299: the per-replica batch of the paper's training runs
        # and the Inception-V3 setting of the hierarchical planner (Mirhoseini et al. 2018).
        return InceptionConfig(batch_size=32, image_size=299)

    @staticmethod
    def small() -> InceptionConfig:
        # Same layers (the aux head needs the full 299x299 input to see a 17x17 grid),
        # 1/8 of the channels and batch 2 (batch norm needs 2 on the aux head's 1x1 map).
        return InceptionConfig(batch_size=2, image_size=299, num_classes=10, width=0.125)


class ConvBN(nn.Sequential):
    """Convolution without bias, batch norm (eps 1e-3), ReLU."""

    def __init__(self, cin: int, cout: int, kernel: int | tuple[int, int], **kw: Any) -> None:
        super().__init__(
            nn.Conv2d(cin, cout, kernel, bias=False, **kw),
            nn.BatchNorm2d(cout, eps=0.001),
            nn.ReLU(),
        )


class Mixed35(nn.Module):
    """35x35 module (Fig. 5): 1x1 | 1x1-5x5 | 1x1-3x3-3x3 | avgpool-1x1."""

    def __init__(self, cin: int, pool: int, c: int) -> None:
        super().__init__()
        self.b1 = ConvBN(cin, 2 * c, 1)
        self.b5 = nn.Sequential(ConvBN(cin, 3 * c // 2, 1), ConvBN(3 * c // 2, 2 * c, 5, padding=2))
        self.b3 = nn.Sequential(
            ConvBN(cin, 2 * c, 1),
            ConvBN(2 * c, 3 * c, 3, padding=1),
            ConvBN(3 * c, 3 * c, 3, padding=1),
        )
        self.pool = nn.Sequential(nn.AvgPool2d(3, 1, 1), ConvBN(cin, pool, 1))

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.b1(x), self.b5(x), self.b3(x), self.pool(x)], 1)


class Reduce35(nn.Module):
    """35x35 -> 17x17 grid reduction (Fig. 10)."""

    def __init__(self, cin: int, c: int) -> None:
        super().__init__()
        self.b3 = ConvBN(cin, 12 * c, 3, stride=2)
        self.b33 = nn.Sequential(
            ConvBN(cin, 2 * c, 1),
            ConvBN(2 * c, 3 * c, 3, padding=1),
            ConvBN(3 * c, 3 * c, 3, stride=2),
        )
        self.pool = nn.MaxPool2d(3, 2)

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.b3(x), self.b33(x), self.pool(x)], 1)


class Mixed17(nn.Module):
    """17x17 module (Fig. 6) with factorised 1x7 / 7x1 convolutions of width `c7`."""

    def __init__(self, cin: int, c7: int, out: int) -> None:
        super().__init__()
        h, v = {"padding": (0, 3)}, {"padding": (3, 0)}
        self.b1 = ConvBN(cin, out, 1)
        self.b7 = nn.Sequential(
            ConvBN(cin, c7, 1), ConvBN(c7, c7, (1, 7), **h), ConvBN(c7, out, (7, 1), **v)
        )
        self.b77 = nn.Sequential(
            ConvBN(cin, c7, 1),
            ConvBN(c7, c7, (7, 1), **v),
            ConvBN(c7, c7, (1, 7), **h),
            ConvBN(c7, c7, (7, 1), **v),
            ConvBN(c7, out, (1, 7), **h),
        )
        self.pool = nn.Sequential(nn.AvgPool2d(3, 1, 1), ConvBN(cin, out, 1))

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.b1(x), self.b7(x), self.b77(x), self.pool(x)], 1)


class Reduce17(nn.Module):
    """17x17 -> 8x8 grid reduction."""

    def __init__(self, cin: int, c: int) -> None:
        super().__init__()
        self.b3 = nn.Sequential(ConvBN(cin, 6 * c, 1), ConvBN(6 * c, 10 * c, 3, stride=2))
        self.b7 = nn.Sequential(
            ConvBN(cin, 6 * c, 1),
            ConvBN(6 * c, 6 * c, (1, 7), padding=(0, 3)),
            ConvBN(6 * c, 6 * c, (7, 1), padding=(3, 0)),
            ConvBN(6 * c, 6 * c, 3, stride=2),
        )
        self.pool = nn.MaxPool2d(3, 2)

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.b3(x), self.b7(x), self.pool(x)], 1)


class Mixed8(nn.Module):
    """8x8 module (Fig. 7) with expanded 1x3 / 3x1 filter banks."""

    def __init__(self, cin: int, c: int) -> None:
        super().__init__()
        self.b1 = ConvBN(cin, 10 * c, 1)
        self.b3 = ConvBN(cin, 12 * c, 1)
        self.b3a = ConvBN(12 * c, 12 * c, (1, 3), padding=(0, 1))
        self.b3b = ConvBN(12 * c, 12 * c, (3, 1), padding=(1, 0))
        self.b33 = nn.Sequential(ConvBN(cin, 14 * c, 1), ConvBN(14 * c, 12 * c, 3, padding=1))
        self.b33a = ConvBN(12 * c, 12 * c, (1, 3), padding=(0, 1))
        self.b33b = ConvBN(12 * c, 12 * c, (3, 1), padding=(1, 0))
        self.pool = nn.Sequential(nn.AvgPool2d(3, 1, 1), ConvBN(cin, 6 * c, 1))

    def forward(self, x: Tensor) -> Tensor:
        b3, b33 = self.b3(x), self.b33(x)
        return torch.cat(
            [self.b1(x), self.b3a(b3), self.b3b(b3), self.b33a(b33), self.b33b(b33), self.pool(x)],
            1,
        )


class AuxHead(nn.Module):
    """Auxiliary classifier on the 17x17 grid (Sec. 4)."""

    def __init__(self, cin: int, c: int, num_classes: int) -> None:
        super().__init__()
        self.pool = nn.AvgPool2d(5, 3)
        self.conv0 = ConvBN(cin, 4 * c, 1)
        self.conv1 = ConvBN(4 * c, 24 * c, 5)
        self.fc = nn.Linear(24 * c, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv1(self.conv0(self.pool(x)))
        logits: Tensor = self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))
        return logits


class InceptionV3(nn.Module):
    def __init__(
        self, num_classes: int = 1000, aux_logits: bool = True, width: float = 1.0
    ) -> None:
        super().__init__()
        c = max(2, round(32 * width))  # base width: 32 channels in the paper's model

        def w(ch: int) -> int:
            return max(2, round(ch * width))

        self.stem = nn.Sequential(
            ConvBN(3, w(32), 3, stride=2),
            ConvBN(w(32), w(32), 3),
            ConvBN(w(32), w(64), 3, padding=1),
            nn.MaxPool2d(3, 2),
            ConvBN(w(64), w(80), 1),
            ConvBN(w(80), w(192), 3),
            nn.MaxPool2d(3, 2),
        )
        c35 = [w(192), 7 * c + c, 7 * c + 2 * c, 7 * c + 2 * c]  # pool widths 32, 64, 64
        self.mixed_5b = Mixed35(c35[0], c, c)
        self.mixed_5c = Mixed35(c35[1], 2 * c, c)
        self.mixed_5d = Mixed35(c35[2], 2 * c, c)
        self.mixed_6a = Reduce35(c35[3], c)
        c17 = 12 * c + 3 * c + c35[3]  # 768
        out17 = 6 * c  # 192
        self.mixed_6b = Mixed17(c17, 4 * c, out17)
        self.mixed_6c = Mixed17(4 * out17, 5 * c, out17)
        self.mixed_6d = Mixed17(4 * out17, 5 * c, out17)
        self.mixed_6e = Mixed17(4 * out17, 6 * c, out17)
        self.aux = AuxHead(4 * out17, c, num_classes) if aux_logits else None
        self.mixed_7a = Reduce17(4 * out17, c)
        c8 = 10 * c + 6 * c + 4 * out17  # 1280
        self.mixed_7b = Mixed8(c8, c)
        self.mixed_7c = Mixed8(10 * c + 4 * 12 * c + 6 * c, c)
        self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(10 * c + 4 * 12 * c + 6 * c, num_classes)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor | None]:
        x = self.stem(x)
        x = self.mixed_6a(self.mixed_5d(self.mixed_5c(self.mixed_5b(x))))
        x = self.mixed_6e(self.mixed_6d(self.mixed_6c(self.mixed_6b(x))))
        aux = self.aux(x) if self.aux is not None else None
        x = self.mixed_7c(self.mixed_7b(self.mixed_7a(x)))
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(self.dropout(x)), aux


def inception_loss(outputs: tuple[Tensor, Tensor | None], target: Tensor) -> Tensor:
    """Cross-entropy on the main head plus 0.4x the auxiliary head's (Sec. 4, as released)."""
    logits, aux = outputs
    loss = nn.functional.cross_entropy(logits, target)
    if aux is not None:
        loss = loss + 0.4 * nn.functional.cross_entropy(aux, target)
    return loss


def build(config: InceptionConfig) -> tuple[nn.Module, tuple[Tensor, ...], Tensor, object]:
    model = InceptionV3(config.num_classes, config.aux_logits, config.width)
    images = torch.randn(config.batch_size, 3, config.image_size, config.image_size)
    target = torch.randint(0, config.num_classes, (config.batch_size,))
    return model, (images,), target, inception_loss
