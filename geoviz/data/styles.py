"""Colour styles of grey glyphs: one renderer for the encoder's training and for test targets.

A *style* turns grey glyphs ``(N, 1, S, S)`` (ink 1 on a 0 background, values in ``[0, 1]``)
into RGB images ``(N, 3, S, S)`` in ``[0, 1]`` that keep the glyph's shape and change all else.
The pretrained encoder (:mod:`geoviz.features.encoder`) is trained on some styles and tested
on the others (``benchmarks/bench_styles.py``: leave one style out), so a style held out of
training is, to that encoder, a style it never saw. Every style draws its randomness from a
:class:`torch.Generator`: the same seed gives the same images.

========== ==================================================================================
style      what it does to a glyph
========== ==================================================================================
gradient   two random colours mixed by a smooth random field; the glyph painted in a third
           colour, or blended by ``|background - glyph|``
photo      MNIST-M's recipe: ``|patch - glyph|`` on random crops of scikit-learn's two sample
           photos (random position, scale, flip and per-channel gain)
texture    random-colour stripes of random angle and frequency mixed with blobs; the glyph
           painted in a colour far from the background's brightness
outline    only the glyph's contour (dilated glyph minus glyph) drawn in a colour on a plain
           colour background, or the glyph inverted: dark strokes on a light background
stroke     other stroke widths: the glyph thinned (its strokes' core) or thickened (one or
           two dilations), painted in a colour on a plain colour background
noise      strong per-pixel colour noise on the background and on the strokes, random colours
========== ==================================================================================
"""

from __future__ import annotations

import functools
import math
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from geoviz.errors import GeovizError

__all__ = ["STYLES", "Style", "render", "render_mixed"]

Style = Literal["gradient", "photo", "texture", "outline", "stroke", "noise"]

#: every style, in a stable order
STYLES: tuple[Style, ...] = ("gradient", "photo", "texture", "outline", "stroke", "noise")


def _rand(gen: torch.Generator, *size: int) -> torch.Tensor:
    return torch.rand(*size, generator=gen)


@functools.lru_cache(maxsize=1)
def _photos() -> tuple[torch.Tensor, ...]:
    """scikit-learn's sample photos as ``(3, H, W)`` float32 tensors in ``[0, 1]``."""
    from sklearn.datasets import load_sample_images

    return tuple(
        torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1).contiguous()
        for img in load_sample_images().images
    )


def _smooth_field(gen: torch.Generator, n: int, s: int, cells: int = 4) -> torch.Tensor:
    coarse = _rand(gen, n, 1, cells, cells)
    return F.interpolate(coarse, size=(s, s), mode="bicubic", align_corners=False).clamp(0, 1)


def _dilate(ink: torch.Tensor, times: int = 1) -> torch.Tensor:
    for _ in range(times):
        ink = F.max_pool2d(ink, 3, stride=1, padding=1)
    return ink


def _contrasting(gen: torch.Generator, background: torch.Tensor) -> torch.Tensor:
    """A random colour ``(N, 3, 1, 1)`` far from each background's mean brightness."""
    n = background.shape[0]
    dark = background.mean(dim=(1, 2, 3)).view(n, 1, 1, 1) < 0.5
    base = _rand(gen, n, 3, 1, 1) * 0.35
    return torch.where(dark, base + 0.65, base)


def _gradient(ink: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    n, _, s, _ = ink.shape
    c1, c2, paint = _rand(gen, n, 3, 1, 1), _rand(gen, n, 3, 1, 1), _rand(gen, n, 3, 1, 1)
    field = _smooth_field(gen, n, s)
    background = c1 * field + c2 * (1 - field)
    blended = background * (1 - ink) + paint * ink
    difference = (background - ink).abs()
    use_difference = (_rand(gen, n, 1, 1, 1) < 0.5).to(ink.dtype)
    return use_difference * difference + (1 - use_difference) * blended


def _photo(ink: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    n, _, s, _ = ink.shape
    photos = _photos()
    patches = torch.empty(n, 3, s, s)
    for k in range(n):
        photo = photos[int(torch.randint(len(photos), (1,), generator=gen))]
        _, h, w = photo.shape
        side = int(torch.randint(s, min(4 * s, h, w) + 1, (1,), generator=gen))
        top = int(torch.randint(0, h - side + 1, (1,), generator=gen))
        left = int(torch.randint(0, w - side + 1, (1,), generator=gen))
        crop = photo[None, :, top : top + side, left : left + side]
        patch = F.interpolate(crop, size=(s, s), mode="bilinear", antialias=side > s)[0]
        if float(_rand(gen, 1)) < 0.5:
            patch = patch.flip(-1)
        patches[k] = patch
    patches = (patches * (0.6 + 0.6 * _rand(gen, n, 3, 1, 1))).clamp(0, 1)
    return (patches.to(ink.device) - ink).abs()


def _texture(ink: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    n, _, s, _ = ink.shape
    axis = torch.arange(s, dtype=torch.float32) / s
    yy, xx = torch.meshgrid(axis, axis, indexing="ij")
    angle = _rand(gen, n, 1, 1) * math.pi
    freq = 2.0 + 6.0 * _rand(gen, n, 1, 1)
    phase = _rand(gen, n, 1, 1) * 2 * math.pi
    stripes = 0.5 + 0.5 * torch.sin(
        2 * math.pi * freq * (torch.cos(angle) * xx + torch.sin(angle) * yy) + phase
    )
    mix = (0.6 * stripes[:, None] + 0.4 * _smooth_field(gen, n, s)).clamp(0, 1)
    c1, c2 = _rand(gen, n, 3, 1, 1), _rand(gen, n, 3, 1, 1)
    background = c1 * mix + c2 * (1 - mix)
    paint = _contrasting(gen, background)
    return background * (1 - ink) + paint * ink


def _outline(ink: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    n = ink.shape[0]
    background = _rand(gen, n, 3, 1, 1).expand(-1, -1, *ink.shape[2:])
    paint = _contrasting(gen, background)
    contour = (_dilate(ink) - ink).clamp(0, 1)
    outlined = background * (1 - contour) + paint * contour
    light = 0.7 + 0.3 * _rand(gen, n, 3, 1, 1)
    dark = 0.3 * _rand(gen, n, 3, 1, 1)
    inverted = light * (1 - ink) + dark * ink
    use_inverted = (_rand(gen, n, 1, 1, 1) < 0.5).to(ink.dtype)
    return use_inverted * inverted + (1 - use_inverted) * outlined


def _stroke(ink: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    n = ink.shape[0]
    choice = torch.randint(0, 3, (n,), generator=gen)
    # thin: the strokes' core only (their antialiased rims dropped); an erosion would erase
    # the one- and two-pixel strokes of 28x28 digits
    thin = ((ink - 0.6) / 0.4).clamp(0, 1)
    thick, thicker = _dilate(ink), _dilate(ink, 2)
    width = torch.where(
        choice.view(n, 1, 1, 1) == 0,
        thin,
        torch.where(choice.view(n, 1, 1, 1) == 1, thick, thicker),
    )
    background = _rand(gen, n, 3, 1, 1).expand(-1, -1, *ink.shape[2:])
    paint = _contrasting(gen, background)
    return background * (1 - width) + paint * width


def _noise(ink: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    n, _, s, _ = ink.shape
    background = _rand(gen, n, 3, 1, 1)
    paint = _contrasting(gen, background.expand(-1, -1, s, s))
    clean = background * (1 - ink) + paint * ink
    sigma = 0.1 + 0.15 * _rand(gen, n, 1, 1, 1)
    return clean + sigma * torch.randn(n, 3, s, s, generator=gen)


_RENDERERS = {
    "gradient": _gradient,
    "photo": _photo,
    "texture": _texture,
    "outline": _outline,
    "stroke": _stroke,
    "noise": _noise,
}


def render(ink: torch.Tensor, style: Style, gen: torch.Generator) -> torch.Tensor:
    """Grey glyphs ``(N, 1, S, S)`` in ``style``: RGB ``(N, 3, S, S)`` in ``[0, 1]``.

    Randomness comes from ``gen`` (a CPU generator); the output is on ``ink``'s device.

    Raises
    ------
    GeovizError
        An unknown style, or ``ink`` not ``(N, 1, S, S)``.
    """
    if style not in _RENDERERS:
        raise GeovizError(f"unknown style {str(style)[:40]!r}: use one of {', '.join(STYLES)}")
    if ink.ndim != 4 or ink.shape[1] != 1:
        raise GeovizError(f"styles take grey glyphs (N, 1, S, S), got {tuple(ink.shape)}")
    device = ink.device
    out = _RENDERERS[style](ink.detach().to("cpu", torch.float32).clamp(0, 1), gen)
    return out.clamp(0.0, 1.0).to(device)


def render_mixed(
    ink: torch.Tensor, styles: tuple[Style, ...], gen: torch.Generator
) -> torch.Tensor:
    """Each glyph of ``ink`` in one of ``styles``, drawn uniformly: ``(N, 3, S, S)``."""
    if not styles:
        raise GeovizError("render_mixed needs at least one style")
    n = ink.shape[0]
    pick = torch.randint(0, len(styles), (n,), generator=gen)
    out = torch.empty(n, 3, *ink.shape[2:], device=ink.device)
    for k, style in enumerate(styles):
        idx = torch.nonzero(pick == k).flatten()
        if len(idx):
            out[idx.to(ink.device)] = render(ink[idx.to(ink.device)], style, gen)
    return out
