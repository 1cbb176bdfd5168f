"""Networks of the OTDD neural map (paper appendix, "Implementation details of OTDD map").

The paper parameterises the pushforward feature map ``G`` by a UNet for *NIST
images and by a residual MLP for 2-D mixtures, and the critic ``f`` by a
ResNet (images) or a residual MLP (vectors). This module holds small versions
of each, sized for CPU training at 32x32:

* :class:`ResidualMLP` — ``in -> hidden -> (residual blocks) -> out``.
* :class:`VectorGenerator` / :class:`UNetGenerator` — ``G(x, y) = x + r(x, y)``
  with the last layer of ``r`` initialised to zero, so ``G`` starts as the
  identity map exactly (the paper pre-trains ``G`` to the identity; a zero
  residual gets there without a pre-training stage). ``y`` enters as a one-hot
  vector (MLP) or as one-hot planes (UNet).
* :class:`VectorCritic` / :class:`ConvCritic` — the scalar potential ``f(x)``
  (feature-only, as in the appendix's simplified loss).

:func:`build_networks` picks the pair from the data (UNet when the samples are
images of at least :data:`MIN_UNET_SIZE` pixels a side) and records the choice
as plain parameters, so a checkpoint can rebuild the same modules; given a
:class:`torch.Generator` it draws the initial weights from it
(:func:`geoviz.nn.init.build_seeded`), never from torch's global random state.

These networks are specific to the map (label-conditioned, identity at
initialisation), so they live here rather than in :mod:`geoviz.nn`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from geoviz.errors import GeovizError
from geoviz.nn.init import build_seeded

__all__ = [
    "MIN_UNET_SIZE",
    "Architecture",
    "ConvCritic",
    "ResidualMLP",
    "UNetGenerator",
    "VectorCritic",
    "VectorGenerator",
    "build_networks",
]

#: Smallest image side that gets the UNet (two 2x downsamplings and the
#: critic's three poolings leave at least 1x1).
MIN_UNET_SIZE = 8

Architecture = Literal["auto", "unet", "mlp"]


class ResidualMLP(nn.Module):
    """``Linear(in, h) -> n_blocks x [h + Linear(SiLU(Linear(SiLU(h))))] -> SiLU -> Linear(h, out)``."""

    def __init__(self, in_dim: int, out_dim: int, hidden: int = 128, n_blocks: int = 3):
        super().__init__()
        self.inp = nn.Linear(in_dim, hidden)
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden)
            )
            for _ in range(n_blocks)
        )
        self.out = nn.Linear(hidden, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = h + block(h)
        out: torch.Tensor = self.out(F.silu(h))
        return out


def _zero(layer: nn.Module) -> nn.Module:
    for p in layer.parameters():
        nn.init.zeros_(p)
    return layer


class VectorGenerator(nn.Module):
    """``G(x, y) = x + ResidualMLP([x, onehot(y)])`` for ``(B, D)`` features; identity at init."""

    def __init__(self, n_features: int, n_classes: int, hidden: int = 128, n_blocks: int = 3):
        super().__init__()
        self.n_classes = n_classes
        self.body = ResidualMLP(n_features + n_classes, n_features, hidden, n_blocks)
        self.start_at_identity()

    def start_at_identity(self) -> None:
        """Zero the residual's last layer, so that ``G(x, y) = x`` (after any re-initialisation)."""
        _zero(self.body.out)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        onehot = F.one_hot(y, self.n_classes).to(x.dtype)
        step: torch.Tensor = self.body(torch.cat([x, onehot], dim=1))
        return x + step


class VectorCritic(nn.Module):
    """Potential ``f(x)``: a :class:`ResidualMLP` with one output, ``(B, D) -> (B,)``."""

    def __init__(self, n_features: int, hidden: int = 128, n_blocks: int = 3):
        super().__init__()
        self.body = ResidualMLP(n_features, 1, hidden, n_blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.body(x)
        return out.squeeze(1)


class UNetGenerator(nn.Module):
    """A lean two-level UNet (Ronneberger et al. 2015): ``G(x, y) = x + UNet(x, y)``.

    Widths ``w, 2w, 4w`` at full, half and quarter resolution (strided 3x3
    convolutions down, nearest upsampling + 3x3 convolutions up, skip
    connections by concatenation, SiLU, no normalisation so that ``G`` maps
    each sample on its own). The target label enters as a learned embedding
    added at the quarter-resolution bottleneck. Sides that are not multiples
    of 4 are padded (replicate) and cropped back. Sized for CPU training:
    about 0.1 GFLOP per 32x32 sample at ``w = 8``.

    Parameters
    ----------
    image_shape
        ``(C, H, W)`` of the samples (features are their flattening).
    n_classes
        ``C_Q``, the number of target classes.
    width
        ``w``.
    """

    def __init__(self, image_shape: tuple[int, int, int], n_classes: int, width: int = 8):
        super().__init__()
        c, h, w = (int(v) for v in image_shape)
        self.image_shape = (c, h, w)
        self.n_classes = n_classes
        self.inp = nn.Conv2d(c, width, 3, padding=1)
        self.down1 = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.enc1 = nn.Conv2d(2 * width, 2 * width, 3, padding=1)
        self.down2 = nn.Conv2d(2 * width, 4 * width, 3, stride=2, padding=1)
        self.label = nn.Embedding(n_classes, 4 * width)
        self.mid = nn.Conv2d(4 * width, 4 * width, 3, padding=1)
        self.up2 = nn.Conv2d(4 * width, 2 * width, 3, padding=1)
        self.dec2 = nn.Conv2d(4 * width, 2 * width, 3, padding=1)
        self.up1 = nn.Conv2d(2 * width, width, 3, padding=1)
        self.dec1 = nn.Conv2d(2 * width, width, 3, padding=1)
        self.out = nn.Conv2d(width, c, 1)
        self.start_at_identity()

    def start_at_identity(self) -> None:
        """Zero the last convolution, so that ``G(x, y) = x`` (after any re-initialisation)."""
        _zero(self.out)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        c, h, w = self.image_shape
        img = x.reshape(x.shape[0], c, h, w)
        ph, pw = (-h) % 4, (-w) % 4
        if ph or pw:
            img = F.pad(img, (0, pw, 0, ph), mode="replicate")
        e0 = F.silu(self.inp(img))
        e1 = F.silu(self.enc1(F.silu(self.down1(e0))))
        mid = F.silu(self.down2(e1)) + self.label(y)[:, :, None, None]
        mid = F.silu(self.mid(mid))
        d2 = F.silu(self.up2(F.interpolate(mid, scale_factor=2.0, mode="nearest")))
        d2 = F.silu(self.dec2(torch.cat([d2, e1], dim=1)))
        d1 = F.silu(self.up1(F.interpolate(d2, scale_factor=2.0, mode="nearest")))
        d1 = F.silu(self.dec1(torch.cat([d1, e0], dim=1)))
        res: torch.Tensor = self.out(d1)[:, :, :h, :w]
        return x + res.reshape(x.shape[0], -1)


class _ResBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.conv2(F.silu(self.conv1(F.silu(x))))
        skip: torch.Tensor = self.skip(x)
        return skip + h


class ConvCritic(nn.Module):
    """ResNet-style potential ``f(x)`` for images (after WGAN-QC's critic, smaller).

    ``3x3 conv (w) -> pool -> res block (w) -> pool -> res block (2w) -> pool ->
    res block (4w) -> global mean -> Linear -> scalar``; ``(B, C*H*W) -> (B,)``.
    No normalisation layers, so ``f`` is a plain function of one sample.
    """

    def __init__(self, image_shape: tuple[int, int, int], width: int = 8):
        super().__init__()
        c, h, w = (int(v) for v in image_shape)
        self.image_shape = (c, h, w)
        self.inp = nn.Conv2d(c, width, 3, padding=1)
        self.block1 = _ResBlock(width, width)
        self.block2 = _ResBlock(width, 2 * width)
        self.block3 = _ResBlock(2 * width, 4 * width)
        self.head = nn.Linear(4 * width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        img = x.reshape(x.shape[0], *self.image_shape)
        h = self.block1(F.avg_pool2d(self.inp(img), 2))
        h = self.block2(F.avg_pool2d(h, 2))
        h = self.block3(F.avg_pool2d(h, 2))
        out: torch.Tensor = self.head(F.silu(h).mean(dim=(2, 3)))
        return out.squeeze(1)


def choose_architecture(
    image_shape: tuple[int, int, int] | None, architecture: Architecture = "auto"
) -> Literal["unet", "mlp"]:
    """``"unet"`` for images with both sides ``>= MIN_UNET_SIZE`` (or when asked), else ``"mlp"``."""
    if architecture not in ("auto", "unet", "mlp"):
        raise GeovizError(f"architecture must be 'auto', 'unet' or 'mlp', got {architecture!r}")
    fits = image_shape is not None and min(image_shape[1], image_shape[2]) >= MIN_UNET_SIZE
    if architecture == "unet" and not fits:
        raise GeovizError(
            f"the UNet map needs images at least {MIN_UNET_SIZE}x{MIN_UNET_SIZE}, "
            f"got {'vectors' if image_shape is None else image_shape}; use architecture='mlp'"
        )
    if architecture == "auto":
        return "unet" if fits else "mlp"
    return architecture


def build_networks(
    spec: dict[str, Any], generator: torch.Generator | None = None
) -> tuple[nn.Module, nn.Module]:
    """``(G, f)`` from a plain spec (``kind``, ``n_features``, ``n_classes``,
    ``image_shape``, ``width``/``hidden``, ``n_blocks``).

    ``generator`` draws the initial weights, ``G``'s first (PyTorch's default
    initialisation, then ``G``'s last layer zeroed); ``None``: torch's global
    random state, as ``torch.nn`` layers do.
    """
    kind = spec["kind"]
    make_g: Callable[[], UNetGenerator | VectorGenerator]
    make_f: Callable[[], nn.Module]
    if kind == "unet":
        c, h, w = (int(v) for v in spec["image_shape"])
        n_classes, width = int(spec["n_classes"]), int(spec["width"])

        def make_g() -> UNetGenerator | VectorGenerator:
            return UNetGenerator((c, h, w), n_classes, width)

        def make_f() -> nn.Module:
            return ConvCritic((c, h, w), width)
    elif kind == "mlp":
        d, hidden, blocks = int(spec["n_features"]), int(spec["hidden"]), int(spec["n_blocks"])
        n_classes = int(spec["n_classes"])

        def make_g() -> UNetGenerator | VectorGenerator:
            return VectorGenerator(d, n_classes, hidden, blocks)

        def make_f() -> nn.Module:
            return VectorCritic(d, hidden, blocks)
    else:
        raise GeovizError(f"unknown network kind {kind!r}")
    if generator is None:
        return make_g(), make_f()
    g_net = build_seeded(make_g, generator)
    g_net.start_at_identity()
    return g_net, build_seeded(make_f, generator)
