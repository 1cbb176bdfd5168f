"""Image grids of dataset samples as single tiled plotly images.

One image trace of a mosaic (encoded once as PNG) is much lighter for the
browser than one subplot per sample, and keeps a grid of 40 images with
captions responsive in the app.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import torch

from geoviz.errors import DatasetError
from geoviz.viz.literal import plotly_markup, plotly_name

__all__ = [
    "as_display_images",
    "example_indices",
    "image_grid",
    "mapped_samples_grid",
    "sample_captions",
    "soft_label_captions",
    "tile_images",
]


def as_display_images(
    features: torch.Tensor | np.ndarray, image_shape: Sequence[int]
) -> np.ndarray:
    """Flattened image features -> ``(N, H, W)`` grey or ``(N, H, W, 3)`` RGB in ``[0, 1]``.

    Features are expected in ``[0, 1]`` (the loaders' convention); interpolated
    images that leave the range slightly are clipped, and data on another scale
    (e.g. standardised) is min-max rescaled as a whole so contrasts survive.

    Parameters
    ----------
    features
        ``(N, C*H*W)`` values.
    image_shape
        ``(C, H, W)`` with ``C`` 1 or 3.
    """
    x = (
        features.detach().cpu().numpy()
        if isinstance(features, torch.Tensor)
        else np.asarray(features)
    )
    x = np.asarray(x, dtype=np.float32)
    if len(image_shape) != 3:
        raise DatasetError(f"image_shape must be (C, H, W), got {tuple(image_shape)}")
    c, h, w = (int(s) for s in image_shape)
    if x.ndim != 2 or x.shape[1] != c * h * w:
        raise DatasetError(f"features of shape {x.shape} do not hold images of shape {(c, h, w)}")
    lo, hi = (float(x.min()), float(x.max())) if x.size else (0.0, 1.0)
    if lo < -0.1 or hi > 1.1:
        x = (x - lo) / max(hi - lo, 1e-12)
    x = np.clip(x, 0.0, 1.0).reshape(-1, c, h, w)
    if c == 1:
        return x[:, 0]
    if c == 3:
        return np.transpose(x, (0, 2, 3, 1))
    # other channel counts: show the mean
    mean: np.ndarray = x.mean(axis=1)
    return mean


def tile_images(
    images: np.ndarray,
    ncols: int,
    *,
    pad: int = 2,
    caption_pad: int = 0,
    fill: float = 1.0,
    caption_below: bool = False,
) -> np.ndarray:
    """Arrange ``(N, H, W[, 3])`` images into one mosaic, row-major.

    ``pad`` pixels of ``fill`` separate tiles; ``caption_pad`` extra pixels
    above each row (below it with ``caption_below``) leave room for captions.
    Returns ``(R*(H+pad+caption_pad), ncols*(W+pad)[, 3])``.
    """
    imgs = np.asarray(images, dtype=np.float32)
    if imgs.ndim not in (3, 4) or imgs.shape[0] == 0:
        raise DatasetError(f"need a non-empty stack of images, got shape {imgs.shape}")
    n, h, w = imgs.shape[:3]
    ncols = max(1, min(int(ncols), n))
    nrows = int(np.ceil(n / ncols))
    cell_h, cell_w = h + pad + caption_pad, w + pad
    shape = (nrows * cell_h, ncols * cell_w, *imgs.shape[3:])
    mosaic = np.full(shape, fill, dtype=np.float32)
    for k in range(n):
        r, c = divmod(k, ncols)
        y0 = r * cell_h + (0 if caption_below else caption_pad)
        x0 = c * cell_w
        mosaic[y0 : y0 + h, x0 : x0 + w] = imgs[k]
    return mosaic


def image_grid(
    images: np.ndarray,
    captions: Sequence[str] | None = None,
    *,
    ncols: int = 8,
    title: str | None = None,
    column_titles: Sequence[str] | None = None,
    caption_size: int = 11,
    tile_px: int = 84,
    captions_below: bool = False,
) -> go.Figure:
    """Tiled image grid with one caption above (or below) each image.

    Parameters
    ----------
    images
        ``(N, H, W)`` grey or ``(N, H, W, 3)`` RGB in ``[0, 1]`` (see
        :func:`as_display_images`).
    captions
        ``N`` short Plotly texts (label, soft-label summary...; ``<br>`` breaks a line):
        names in them escaped, as :func:`sample_captions` and
        :func:`soft_label_captions` do.
    ncols
        Images per row.
    title
        Plotly text (names in it escaped by the caller).
    column_titles
        Optional ``ncols`` headers drawn above the first row (e.g. ``Q``,
        ``T_1(x)``, ...), Plotly text like ``captions``.
    tile_px
        Approximate on-screen size of one tile, sets the figure height.
    captions_below
        Put each caption under its image instead of above it.
    """
    imgs = np.asarray(images, dtype=np.float32)
    if imgs.ndim not in (3, 4) or imgs.shape[0] == 0:
        raise DatasetError(f"need a non-empty stack of images, got shape {imgs.shape}")
    if captions is not None and len(captions) != imgs.shape[0]:
        raise DatasetError(f"{imgs.shape[0]} images but {len(captions)} captions")
    n, h, w = imgs.shape[:3]
    ncols = max(1, min(int(ncols), n))
    nrows = int(np.ceil(n / ncols))
    pad = max(1, h // 14)
    lines = (
        max((str(c).count("<br>") + 1 for c in captions), default=1) if captions is not None else 0
    )
    caption_pad = max(4, round(h * 0.45 * lines)) if captions is not None else 0
    mosaic = tile_images(
        imgs, ncols, pad=pad, caption_pad=caption_pad, fill=1.0, caption_below=captions_below
    )
    img8 = (mosaic * 255).round().astype(np.uint8)
    # one PNG image trace (what px.imshow(binary_string=True) builds, without its overhead)
    fig = go.Figure(go.Image(source=png_data_uri(img8), hoverinfo="skip"))
    cell_h, cell_w = h + pad + caption_pad, w + pad
    annotations = []
    if captions is not None:
        for k, text in enumerate(captions):
            r, c = divmod(k, ncols)
            annotations.append(
                {
                    "x": c * cell_w + w / 2,
                    "y": r * cell_h
                    + (h + caption_pad * 0.5 if captions_below else caption_pad * 0.55),
                    "text": plotly_markup(text),
                    "showarrow": False,
                    "font": {"size": caption_size, "color": "#222"},
                    "xanchor": "center",
                    "yanchor": "middle",
                }
            )
    fig.update_layout(annotations=annotations)
    top = 40 if title else 10
    if column_titles is not None:
        for c, text in enumerate(list(column_titles)[:ncols]):
            fig.add_annotation(
                x=c * cell_w + w / 2,
                y=0,
                yref="y",
                yshift=14,
                text=f"<b>{plotly_markup(text)}</b>",
                showarrow=False,
                font={"size": caption_size + 2},
                yanchor="bottom",
            )
        top += 18 * max(str(t).count("<br>") + 1 for t in column_titles) + 12
    scale = tile_px / max(w, 1)
    height = int(nrows * cell_h * scale) + top + 10
    fig.update_layout(
        # title pinned to the top edge so it never meets the column headers below it
        title={
            "text": plotly_markup(title),
            "yref": "container",
            "y": 1.0,
            "yanchor": "top",
            "pad": {"t": 10},
        }
        if title
        else None,
        height=max(height, 120),
        margin={"l": 5, "r": 5, "t": top, "b": 5},
        xaxis={"visible": False},
        yaxis={"visible": False},
        coloraxis_showscale=False,
        dragmode=False,
    )
    return fig


def png_data_uri(image: np.ndarray) -> str:
    """``data:image/png;base64,...`` of a ``(H, W)`` grey or ``(H, W, 3)`` RGB uint8 image.

    Fast zlib level: the picture is sent to the browser once per rerun, where
    encoding time counts and a few kB more do not.
    """
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image)).save(buf, format="PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _short(name: str, width: int) -> str:
    """``name`` cut to ``width`` characters and escaped for Plotly (cut first: an entity is
    never cut in two)."""
    return plotly_name(name if len(name) <= width else name[: width - 1] + "…")


def sample_captions(
    labels: np.ndarray | torch.Tensor, classes: Sequence[str], width: int = 12
) -> list[str]:
    """Hard labels -> class-name captions (Plotly text: the names escaped, for
    :func:`image_grid`)."""
    y = labels.numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    return [_short(str(classes[int(k)]), width) for k in y]


def soft_label_captions(
    soft_labels: np.ndarray | torch.Tensor,
    class_names: Sequence[str],
    *,
    width: int = 14,
    strip_prefix: bool = False,
    two_lines: bool = False,
) -> list[str]:
    """``"usps/3 .62"``: top class of each soft label with its mass.

    ``two_lines`` puts a ``"dataset/"`` prefix on its own line
    (``"fashion_mnist<br>Bag .62"``) so long names stay readable under a tile. Plotly
    text for :func:`image_grid`: the names escaped.
    """
    s = (
        soft_labels.detach().cpu().numpy()
        if isinstance(soft_labels, torch.Tensor)
        else np.asarray(soft_labels)
    )
    top = s.argmax(axis=1)
    out = []
    for row, k in zip(s, top, strict=True):
        name = str(class_names[int(k)])
        mass = f"{row[k]:.2f}".replace("0.", ".", 1)
        if "/" in name and (strip_prefix or two_lines):
            prefix, name = name.split("/", 1)
            if two_lines and not strip_prefix:
                out.append(f"{_short(prefix, width)}<br>{_short(name, width - 4)} {mass}")
                continue
        out.append(f"{_short(name, width)} {mass}")
    return out


def mapped_samples_grid(
    target_images: np.ndarray,
    target_captions: Sequence[str],
    mapped: Sequence[tuple[str, np.ndarray, Sequence[str]]],
    *,
    title: str | None = None,
    tile_px: int = 110,
) -> go.Figure:
    """Rows = target samples ``x``; columns = ``x`` then ``T_i(x)`` for each reference.

    Parameters
    ----------
    target_images
        ``(n, H, W[, 3])`` the chosen samples of ``Q``.
    target_captions
        ``n`` captions (their labels).
    mapped
        For each reference: ``(column title, (n, H, W[, 3]) images, n captions)``.

    Titles and captions are Plotly text (:func:`image_grid`).
    """
    n = int(np.asarray(target_images).shape[0])
    columns = [("Q sample<br>x", np.asarray(target_images), list(target_captions))]
    columns += [(t, np.asarray(im), list(c)) for t, im, c in mapped]
    for t, im, c in columns:
        if im.shape[0] != n or len(c) != n:
            raise DatasetError(f"column {t!r}: expected {n} images and captions")
    shapes = {im.shape[1:] for _, im, _ in columns}
    if len(shapes) > 1:
        raise DatasetError(f"all images must share one shape, got {sorted(shapes)}")
    ncols = len(columns)
    stack = np.stack([columns[c][1][r] for r in range(n) for c in range(ncols)])
    caps = [columns[c][2][r] for r in range(n) for c in range(ncols)]
    return image_grid(
        stack,
        caps,
        ncols=ncols,
        title=title,
        column_titles=[t for t, _, _ in columns],
        tile_px=tile_px,
    )


def example_indices(labels: np.ndarray | torch.Tensor, n: int, seed: int = 0) -> np.ndarray:
    """``n`` sample indices for a display, spread over the classes.

    Round robin over the present classes (in label order), a seeded random
    sample within each class, so that ``n >= C`` shows every class and
    ``n < C`` shows ``n`` different classes. Returns indices in display
    order (class by class within each round).
    """
    y = labels.numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    n = int(min(max(n, 0), y.shape[0]))
    rng = np.random.default_rng(seed)
    pools = [list(rng.permutation(np.flatnonzero(y == c))) for c in np.unique(y)]
    out: list[int] = []
    while len(out) < n:
        for pool in pools:
            if pool and len(out) < n:
                out.append(int(pool.pop()))
    return np.asarray(out, dtype=np.int64)
