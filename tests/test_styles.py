"""Colour styles of grey glyphs (geoviz.data.styles): deterministic, in range, glyph kept."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from geoviz.data.registry import load_dataset
from geoviz.data.styles import STYLES, render, render_mixed
from geoviz.errors import GeovizError


@pytest.fixture(scope="module")
def ink() -> torch.Tensor:
    ds = load_dataset("mnist", split="test")
    return ds.features[:24].reshape(-1, 1, 28, 28)


@pytest.mark.parametrize("style", STYLES)
def test_style_is_rgb_in_range_and_seeded(ink: torch.Tensor, style: str) -> None:
    a = render(ink, style, torch.Generator().manual_seed(3))
    b = render(ink, style, torch.Generator().manual_seed(3))
    c = render(ink, style, torch.Generator().manual_seed(4))
    assert a.shape == (len(ink), 3, 28, 28)
    assert float(a.min()) >= 0.0 and float(a.max()) <= 1.0
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


@pytest.mark.parametrize("style", STYLES)
def test_style_keeps_the_glyph_visible(ink: torch.Tensor, style: str) -> None:
    """Near the strokes the colours differ from those far from them, in almost every image.

    Independent of how a style paints: the glyph's neighbourhood (the strokes dilated by one
    pixel) against the pixels at least three pixels away from any stroke.
    """
    out = render(ink, style, torch.Generator().manual_seed(0))
    near = F.max_pool2d(ink, 3, stride=1, padding=1) > 0.5
    far = F.max_pool2d(ink, 7, stride=1, padding=3) < 0.05
    visible = 0
    for k in range(len(ink)):
        inside = out[k][:, near[k, 0]].mean(dim=1)
        outside = out[k][:, far[k, 0]].mean(dim=1)
        visible += int(float((inside - outside).abs().max()) > 0.04)
    assert visible >= 0.9 * len(ink), f"{style}: glyph visible in {visible}/{len(ink)}"


def test_render_mixed_draws_every_style(ink: torch.Tensor) -> None:
    many = ink.repeat(8, 1, 1, 1)
    gen = torch.Generator().manual_seed(1)
    out = render_mixed(many, STYLES, gen)
    assert out.shape == (len(many), 3, 28, 28)
    one = render_mixed(many[:4], ("outline",), torch.Generator().manual_seed(1))
    assert torch.isfinite(one).all()


def test_bad_style_and_shape_refused(ink: torch.Tensor) -> None:
    with pytest.raises(GeovizError, match="unknown style"):
        render(ink, "sepia", torch.Generator())  # type: ignore[arg-type]
    with pytest.raises(GeovizError, match="grey glyphs"):
        render(ink.expand(-1, 3, -1, -1), "photo", torch.Generator())
    with pytest.raises(GeovizError, match="at least one style"):
        render_mixed(ink, (), torch.Generator())


def test_families_partition_the_styles() -> None:
    from geoviz.data.styles import FAMILIES, family_of

    members = [s for group in FAMILIES.values() for s in group]
    assert sorted(members) == sorted(STYLES) and len(members) == len(set(members))
    assert len(STYLES) >= 8 and len(FAMILIES) >= 4
    assert family_of("photo_fill") == family_of("photo") == "photo"


def test_colour_map_passes_through_its_stops() -> None:
    """The piecewise-linear colour map gives its first stop at 0, its last at 1, and the
    average of two neighbouring stops half-way between them."""
    from geoviz.data.styles import _apply_palette

    stops = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]])
    field = torch.tensor([0.0, 0.25, 0.5, 1.0]).view(1, 1, 1, 4)
    out = _apply_palette(field, stops)[0, :, 0].T  # (4 positions, RGB)
    expected = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    assert torch.allclose(out, expected, atol=1e-6)


def test_blur_keeps_flat_images_and_spreads_a_point() -> None:
    from geoviz.data.styles import _gaussian_blur

    flat = torch.full((2, 3, 9, 9), 0.3)
    assert torch.allclose(_gaussian_blur(flat, torch.tensor([0.5, 1.5])), flat, atol=1e-6)
    point = torch.zeros(2, 1, 9, 9)
    point[:, :, 4, 4] = 1.0
    out = _gaussian_blur(point, torch.tensor([0.05, 1.0]))
    assert torch.allclose(out[0], point[0], atol=1e-6)  # below 0.1 px: unchanged
    assert abs(float(out[1].sum()) - 1.0) < 1e-5 and float(out[1, 0, 4, 4]) < 0.2
    # a Gaussian of sigma 1: the neighbour's weight over the centre's is exp(-1/2) per axis
    assert (
        abs(float(out[1, 0, 4, 5] / out[1, 0, 4, 4]) - float(torch.exp(torch.tensor(-0.5)))) < 1e-4
    )


def test_degraded_style_is_jpeg_compressed(ink: torch.Tensor) -> None:
    """Its last step decodes a JPEG: every value is an 8-bit level (the blur and noise
    before it are not)."""
    out = render(ink, "degraded", torch.Generator().manual_seed(5))
    levels = out * 255
    assert torch.allclose(levels, levels.round(), atol=1e-3)  # 8-bit values, as decoded
