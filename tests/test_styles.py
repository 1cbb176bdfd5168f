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
