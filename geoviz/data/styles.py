"""Styles of grey glyphs: one renderer for the encoder's training and for test targets.

A *style* turns grey glyphs ``(N, 1, S, S)`` (ink 1 on a 0 background, values in ``[0, 1]``)
into RGB images ``(N, 3, S, S)`` in ``[0, 1]`` that keep the glyph's identity and change all
else. The pretrained encoder (:mod:`geoviz.features.encoder`) is trained on some styles and
tested on the others (``benchmarks/bench_styles.py``: leave one *family* of styles out), so a
style held out of training is, to that encoder, a style it never saw. Every style draws its
randomness from a :class:`torch.Generator`: the same seed gives the same images. The styles
stand in for what the paper's Sec. 5.1 and 5.3 targets differ by (MNIST-M's photo blends,
natural-image appearance); none uses a target's labels.

The families (:data:`FAMILIES`) group styles made the same way; one family is not a
variation of another:

========== =========== ===========================================================================
family     style       what it does to a glyph
========== =========== ===========================================================================
plain      outline     only the glyph's contour (dilated glyph minus glyph) drawn in a colour on
                       a plain colour background, or the glyph inverted: dark strokes on light
plain      stroke      other stroke widths: the glyph thinned (its strokes' core) or thickened
                       (one or two dilations), painted in a colour on a plain colour background
plain      noise       strong per-pixel colour noise on the background and on the strokes
field      gradient    two random colours mixed by a smooth random field; the glyph painted in a
                       third colour, or blended by ``|background - glyph|``
field      colormap    random colour maps (3-4 stops, piecewise linear), one for the background
                       (through fractal noise) and another of the opposite brightness for the
                       strokes (through a smooth field); each channel inverted with p = 0.3
photo      photo       MNIST-M's recipe: ``|patch - glyph|`` on random crops of scikit-learn's
                       two sample photos (random position, scale, flip and per-channel gain)
photo      photo_fill  a photo crop (blurred by up to 1.5 px) as background, the strokes filled
                       with another crop brightened or darkened away from it, half of them with a
                       rim of the other tone
pattern    texture     random-colour stripes of random angle and frequency mixed with blobs; the
                       glyph painted in a colour far from the background's brightness
pattern    procedural  procedural textures (rotated checker board, dot grid, Worley cells or
                       fractal noise at a random scale), one through a colour map for the
                       background and another for the strokes, of opposite brightness
pattern    halftone    the strokes shown only through a screen of dots or scan lines of period
                       2-3 px (an LED sign, a halftone print), half of them with a glow
relief     emboss      no colour difference of note: the glyph is a height map lit from a random
                       direction (shading of its blurred gradient) on a surface of one colour,
                       the raised part slightly lighter or darker
distortion degraded    faded ink on a plain background, resolution lost (down to half, scaled
                       back), Gaussian blur (up to 1.4 px), sensor noise, JPEG at quality 8-37
distortion elastic     stroke morphology and geometry: eroded, kept or dilated, then an affine
                       (shear, anisotropic scale, up to 15 degrees) and elastic warp, on a colour
                       map background, in a colour of opposite brightness
========== =========== ===========================================================================
"""

from __future__ import annotations

import functools
import io
import math
from typing import Literal, get_args

import numpy as np
import torch
import torch.nn.functional as F

from geoviz.errors import GeovizError

__all__ = ["FAMILIES", "STYLES", "Style", "family_of", "render", "render_mixed"]

Style = Literal[
    "gradient",
    "photo",
    "texture",
    "outline",
    "stroke",
    "noise",
    "colormap",
    "photo_fill",
    "procedural",
    "halftone",
    "emboss",
    "degraded",
    "elastic",
]

#: every style, in a stable order (the first six are those of issue 33): the Literal's own
#: list, so the two cannot drift apart
STYLES: tuple[Style, ...] = get_args(Style)

#: styles grouped by what makes them: the families are not variations of one another, so
#: holding a whole family out of training (``benchmarks/bench_styles.py``) leaves the encoder
#: nothing like it
FAMILIES: dict[str, tuple[Style, ...]] = {
    "plain": ("outline", "stroke", "noise"),
    "field": ("gradient", "colormap"),
    "photo": ("photo", "photo_fill"),
    "pattern": ("texture", "procedural", "halftone"),
    "relief": ("emboss",),
    "distortion": ("degraded", "elastic"),
}


def family_of(style: Style) -> str:
    """The family of :data:`FAMILIES` that ``style`` belongs to."""
    return next(name for name, members in FAMILIES.items() if style in members)


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
    patches = _photo_crops(gen, n, s)
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


def _palette(gen: torch.Generator, n: int, bright: torch.Tensor | None = None) -> torch.Tensor:
    """A random colour map per image: 3 or 4 RGB stops ``(N, 4, 3)`` (the last repeated when
    3). ``bright`` ``(N,)`` bool: stops drawn in the light half of the cube, else the dark
    half; ``None``: anywhere."""
    stops = _rand(gen, n, 4, 3)
    if bright is not None:
        stops = torch.where(bright.view(n, 1, 1), 0.6 + 0.4 * stops, 0.4 * stops)
    three = _rand(gen, n) < 0.5
    stops[three, 3] = stops[three, 2]
    return stops


def _apply_palette(field: torch.Tensor, stops: torch.Tensor) -> torch.Tensor:
    """``field`` ``(N, 1, S, S)`` in ``[0, 1]`` through piecewise-linear colour maps
    ``stops`` ``(N, K, 3)``: ``(N, 3, S, S)``."""
    k = stops.shape[1]
    pos = field.clamp(0, 1) * (k - 1)
    out = torch.zeros(field.shape[0], 3, *field.shape[2:])
    for j in range(k):
        weight = (1 - (pos - j).abs()).clamp_min(0)  # hat functions: they sum to 1
        out = out + weight * stops[:, j, :, None, None]
    return out


def _fbm(gen: torch.Generator, n: int, s: int) -> torch.Tensor:
    """Fractal value noise ``(N, 1, S, S)``: smooth fields of 2, 4, 8 and 16 cells, halved in
    amplitude per octave, stretched to ``[0, 1]`` per image."""
    field = sum(_smooth_field(gen, n, s, cells) / (2**o) for o, cells in enumerate((2, 4, 8, 16)))
    assert isinstance(field, torch.Tensor)
    low = field.amin(dim=(2, 3), keepdim=True)
    high = field.amax(dim=(2, 3), keepdim=True)
    return (field - low) / (high - low).clamp_min(1e-6)


def _procedural(gen: torch.Generator, n: int, s: int) -> torch.Tensor:
    """One procedural texture per image ``(N, 1, S, S)`` in ``[0, 1]``: a rotated checker
    board, a grid of dots, Worley cells (distance to the nearest of 6-12 random seeds) or
    fractal noise, at a random scale."""
    axis = torch.arange(s, dtype=torch.float32) / s
    yy, xx = torch.meshgrid(axis, axis, indexing="ij")
    angle = _rand(gen, n, 1, 1) * math.pi
    freq = 1.5 + 4.5 * _rand(gen, n, 1, 1)
    u = torch.cos(angle) * xx + torch.sin(angle) * yy
    v = -torch.sin(angle) * xx + torch.cos(angle) * yy
    arg_u, arg_v = 2 * math.pi * freq * u, 2 * math.pi * freq * v
    soft = 2.0 + 6.0 * _rand(gen, n, 1, 1)
    checker = torch.sigmoid(soft * torch.sin(arg_u) * torch.sin(arg_v) * 4)
    dots = (torch.cos(arg_u) * torch.cos(arg_v)).clamp_min(0) ** 2
    seeds = _rand(gen, n, 12, 2)
    dist = (
        (xx[None, None] - seeds[..., 0, None, None]) ** 2
        + (yy[None, None] - seeds[..., 1, None, None]) ** 2
    ).sqrt()
    count = torch.randint(6, 13, (n,), generator=gen)
    dist = torch.where(
        torch.arange(12)[None, :, None, None] < count[:, None, None, None], dist, 9.0
    )
    cells = dist.amin(dim=1)
    cells = cells / cells.amax(dim=(1, 2), keepdim=True).clamp_min(1e-6)
    noise = _fbm(gen, n, s)[:, 0]
    kind = torch.randint(0, 4, (n, 1, 1), generator=gen)
    field = torch.where(
        kind == 0, checker, torch.where(kind == 1, dots, torch.where(kind == 2, cells, noise))
    )
    return field[:, None]


def _gaussian_blur(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """``x`` ``(N, C, S, S)`` blurred with a Gaussian of ``sigma`` ``(N,)`` pixels per image
    (a separable 7-tap kernel; ``sigma`` below 0.1 leaves the image as it is)."""
    n, c, s, _ = x.shape
    taps = torch.arange(-3, 4, dtype=torch.float32)
    kernel = torch.exp(-(taps[None] ** 2) / (2 * sigma.clamp_min(0.1)[:, None] ** 2))
    kernel = (kernel / kernel.sum(dim=1, keepdim=True)).repeat_interleave(c, dim=0)
    flat = F.pad(x.reshape(1, n * c, s, s), (3, 3, 3, 3), mode="replicate")
    flat = F.conv2d(flat, kernel[:, None, None, :], groups=n * c)
    flat = F.conv2d(flat, kernel[:, None, :, None], groups=n * c)
    return flat.reshape(n, c, s, s)


def _jpeg(x: torch.Tensor, quality: torch.Tensor) -> torch.Tensor:
    """``x`` ``(N, 3, S, S)`` through JPEG (Pillow, 4:2:0 chroma) at ``quality`` ``(N,)``."""
    from PIL import Image

    out = torch.empty_like(x)
    pixels = (x.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    for k in range(len(x)):
        buffer = io.BytesIO()
        Image.fromarray(pixels[k]).save(buffer, format="JPEG", quality=int(quality[k]))
        buffer.seek(0)
        decoded = np.asarray(Image.open(buffer).convert("RGB"), dtype=np.float32) / 255.0
        out[k] = torch.from_numpy(decoded).permute(2, 0, 1)
    return out


def _erode(ink: torch.Tensor) -> torch.Tensor:
    """One erosion (3x3 minimum) where it keeps 40 % of the ink, else the strokes' core: an
    erosion alone erases the one- and two-pixel strokes of small digits."""
    eroded = -F.max_pool2d(-ink, 3, stride=1, padding=1)
    kept = eroded.sum(dim=(1, 2, 3), keepdim=True) >= 0.4 * ink.sum(dim=(1, 2, 3), keepdim=True)
    return torch.where(kept, eroded, ((ink - 0.6) / 0.4).clamp(0, 1))


def _warp(ink: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Elastic and affine distortion: a smooth random displacement (up to about 1.5 pixels at
    32x32) on top of a random shear, rotation (up to 15 degrees) and anisotropic scale."""
    n, _, s, _ = ink.shape
    angle = (_rand(gen, n) - 0.5) * (math.pi * 30 / 180)
    shear = (_rand(gen, n) - 0.5) * 0.4
    sx, sy = 0.9 + 0.2 * _rand(gen, n), 0.9 + 0.2 * _rand(gen, n)
    cos, sin = torch.cos(angle), torch.sin(angle)
    a = torch.stack(
        [torch.stack([cos / sx, (-sin + shear) / sx], 1), torch.stack([sin / sy, cos / sy], 1)], 1
    )
    theta = torch.cat([a, torch.zeros(n, 2, 1)], dim=2)
    grid = F.affine_grid(theta, [n, 1, s, s], align_corners=False)
    alpha = 0.04 + 0.06 * _rand(gen, n, 1, 1, 1)
    shift = (torch.cat([_smooth_field(gen, n, s, 5), _smooth_field(gen, n, s, 5)], 1) - 0.5) * 2
    grid = grid + (alpha * shift).permute(0, 2, 3, 1)
    return F.grid_sample(ink, grid, padding_mode="zeros", align_corners=False)


def _photo_crops(gen: torch.Generator, n: int, s: int) -> torch.Tensor:
    """``n`` random crops ``(N, 3, S, S)`` of scikit-learn's sample photos (position, scale,
    flip)."""
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
    return patches


def _colormap(ink: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    n, _, s, _ = ink.shape
    dark_ground = _rand(gen, n) < 0.5
    ground = _apply_palette(_fbm(gen, n, s), _palette(gen, n, bright=~dark_ground))
    paint = _apply_palette(_smooth_field(gen, n, s, 3), _palette(gen, n, bright=dark_ground))
    out = ground * (1 - ink) + paint * ink
    flip = (_rand(gen, n, 3, 1, 1) < 0.3).to(ink.dtype)  # per-channel inversion
    return flip * (1 - out) + (1 - flip) * out


def _photo_fill(ink: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    n, _, s, _ = ink.shape
    ground = _gaussian_blur(_photo_crops(gen, n, s), 1.5 * _rand(gen, n))
    fill = _photo_crops(gen, n, s)
    dark = ground.mean(dim=(1, 2, 3)).view(n, 1, 1, 1) < 0.5
    fill = torch.where(dark, 0.55 + 0.45 * fill, 0.45 * fill)
    rim = (_dilate(ink) - ink).clamp(0, 1) * (_rand(gen, n, 1, 1, 1) < 0.5).to(ink.dtype)
    shade = torch.where(dark, torch.zeros(()), torch.ones(()))  # a rim of the other tone
    out = ground * (1 - ink) + fill * ink
    return out * (1 - rim) + shade * rim


def _procedural_style(ink: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    n, _, s, _ = ink.shape
    dark_ground = _rand(gen, n) < 0.5
    ground = _apply_palette(_procedural(gen, n, s), _palette(gen, n, bright=~dark_ground))
    fill = _apply_palette(_procedural(gen, n, s), _palette(gen, n, bright=dark_ground))
    return ground * (1 - ink) + fill * ink


def _halftone(ink: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    n, _, s, _ = ink.shape
    yy, xx = torch.meshgrid(torch.arange(s), torch.arange(s), indexing="ij")
    period = torch.randint(2, 4, (n, 1, 1), generator=gen)
    dots = ((yy % period) < period - 1) & ((xx % period) < period - 1)
    lines = (yy % period) < period - 1
    screen = torch.where(_rand(gen, n, 1, 1) < 0.5, dots, lines).to(ink.dtype)[:, None]
    lit = ink * screen
    glow = _gaussian_blur(lit, 0.4 + 0.8 * _rand(gen, n))
    lit = torch.where(_rand(gen, n, 1, 1, 1) < 0.5, (lit + 0.6 * glow).clamp(0, 1), lit)
    ground = _rand(gen, n, 3, 1, 1).expand(-1, -1, s, s) * 0.5
    faint = 0.08 * screen * _rand(gen, n, 1, 1, 1)  # the unlit cells of the screen
    paint = _contrasting(gen, ground)
    return (ground + faint) * (1 - lit) + paint * lit


def _emboss(ink: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    n = ink.shape[0]
    height = _gaussian_blur(ink, 0.7 + 0.8 * _rand(gen, n))
    dy = F.pad(height[:, :, 2:] - height[:, :, :-2], (0, 0, 1, 1)) / 2
    dx = F.pad(height[:, :, :, 2:] - height[:, :, :, :-2], (1, 1)) / 2
    light = _rand(gen, n, 1, 1, 1) * 2 * math.pi
    strength = 1.5 + 2.0 * _rand(gen, n, 1, 1, 1)
    shade = (strength * (torch.cos(light) * dx + torch.sin(light) * dy)).clamp(-0.5, 0.5)
    surface = 0.25 + 0.5 * _rand(gen, n, 3, 1, 1)
    raised = surface + (0.08 + 0.17 * _rand(gen, n, 1, 1, 1)) * torch.where(
        _rand(gen, n, 1, 1, 1) < 0.5, 1.0, -1.0
    )
    relief = surface * (1 - ink) + raised * ink
    return relief + shade * (0.6 + 0.4 * surface)


def _degraded(ink: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    n, _, s, _ = ink.shape
    ground = _rand(gen, n, 3, 1, 1)
    paint = _contrasting(gen, ground.expand(-1, -1, s, s))
    contrast = 0.35 + 0.45 * _rand(gen, n, 1, 1, 1)
    paint = ground + contrast * (paint - ground)  # faded ink
    out = ground * (1 - ink) + paint * ink
    small = int(torch.randint(s // 2, s + 1, (1,), generator=gen))
    if small < s:  # resolution lost, then scaled back
        out = F.interpolate(
            F.interpolate(out, size=(small, small), mode="area"),
            size=(s, s),
            mode="bilinear",
            align_corners=False,
        )
    out = _gaussian_blur(out, 1.4 * _rand(gen, n))
    out = out + (0.02 + 0.08 * _rand(gen, n, 1, 1, 1)) * torch.randn(n, 3, s, s, generator=gen)
    return _jpeg(out, 8 + (30 * _rand(gen, n)).long())


def _elastic(ink: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    n, _, s, _ = ink.shape
    choice = torch.randint(0, 3, (n, 1, 1, 1), generator=gen)
    width = torch.where(choice == 0, _erode(ink), torch.where(choice == 1, ink, _dilate(ink)))
    shape = _warp(width, gen).clamp(0, 1)
    dark_ground = _rand(gen, n) < 0.5
    ground = _apply_palette(_smooth_field(gen, n, s, 2), _palette(gen, n, bright=~dark_ground))
    paint = _palette(gen, n, bright=dark_ground)[:, 0, :, None, None]
    return ground * (1 - shape) + paint * shape


_RENDERERS = {
    "gradient": _gradient,
    "photo": _photo,
    "texture": _texture,
    "outline": _outline,
    "stroke": _stroke,
    "noise": _noise,
    "colormap": _colormap,
    "photo_fill": _photo_fill,
    "procedural": _procedural_style,
    "halftone": _halftone,
    "emboss": _emboss,
    "degraded": _degraded,
    "elastic": _elastic,
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
