"""Colour targets built offline: digits composited on photo patches (MNIST-M's recipe).

MNIST-M (Ganin & Lempitsky 2015; the paper's Sec. 5.1 uses it as a reference) blends each
MNIST digit into a random patch of a colour photo by the absolute difference
``|patch - digit|`` per channel: the digit's strokes invert the photo's colours, the
background is the photo. Its photos (BSDS500) are not available offline, so
:func:`photo_digits` uses the two photos scikit-learn ships
(:func:`sklearn.datasets.load_sample_images`: ``china.jpg`` and ``flower.jpg``, 427 x 640
RGB, licence CC BY 2.0 per scikit-learn's documentation), with random crops, flips, scales
and colour shifts per sample, so the backgrounds differ from one digit to the next.

:func:`textured_digits` is a second colour target of another kind: coloured digits on
seeded procedural textures (stripes and blobs of random colours), with no photo at all.

Both are deterministic given the seed, keep the labels and class names of the digits they
start from, and return RGB image datasets (``image_shape = (3, size, size)``, values in
``[0, 1]``). Pixel distance on them is mostly background: the point of a feature space
(:mod:`geoviz.features`).
"""

from __future__ import annotations

import numpy as np
import torch

from geoviz import limits, memory
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import DatasetError

__all__ = ["photo_digits", "sample_photos", "textured_digits"]


def sample_photos() -> list[np.ndarray]:
    """scikit-learn's two sample photos as ``(H, W, 3)`` float32 arrays in ``[0, 1]``."""
    from sklearn.datasets import load_sample_images

    return [np.asarray(img, dtype=np.float32) / 255.0 for img in load_sample_images().images]


def _grey_digits(ds: LabeledDataset, size: int) -> np.ndarray:
    """``(N, size, size)`` grey digits in ``[0, 1]`` (resized, antialiased)."""
    if ds.image_shape is None:
        raise DatasetError("colour targets are built from image datasets", ds.source or ds.name)
    size = limits.check_int(
        size, "size", limits.MIN_IMAGE_SIZE, limits.MAX_IMAGE_SIZE, error=DatasetError
    )
    memory.check_bytes(ds.n_samples * 3 * size * size * 4 * 3, "building a colour target")
    c, h, w = ds.image_shape
    images = ds.features.reshape(-1, c, h, w)
    if c == 3:
        images = images.mean(dim=1, keepdim=True)
    if (h, w) != (size, size):
        images = torch.nn.functional.interpolate(
            images, size=(size, size), mode="bilinear", antialias=True, align_corners=False
        )
    return images[:, 0].clamp(0.0, 1.0).numpy()


def _as_dataset(ds: LabeledDataset, rgb: np.ndarray, name: str) -> LabeledDataset:
    n, size = rgb.shape[0], rgb.shape[-1]
    return LabeledDataset(
        features=np.ascontiguousarray(rgb.reshape(n, -1), dtype=np.float32),
        labels=ds.labels,
        classes=ds.classes,
        name=name,
        image_shape=(3, size, size),
        source=f"{name} built from {ds.name}",
    )


def photo_digits(
    ds: LabeledDataset, *, size: int = 32, seed: int = 0, name: str | None = None
) -> LabeledDataset:
    """MNIST-M-style colour digits: ``|patch - digit|`` on random photo patches.

    Parameters
    ----------
    ds
        Grey (or RGB, averaged) image dataset of digits, values in ``[0, 1]``.
    size
        Side of the output images, pixels.
    seed
        Seed of the patches (photo, position, scale, flip, colour shift) of every sample.
    name
        Dataset name; default ``"<ds.name>_m"``.

    Returns
    -------
    LabeledDataset
        ``image_shape = (3, size, size)``, the labels and classes of ``ds``.
    """
    digits = _grey_digits(ds, size)
    photos = sample_photos()
    rng = np.random.default_rng(seed)
    out = np.empty((len(digits), 3, size, size), dtype=np.float32)
    for k, digit in enumerate(digits):
        photo = photos[int(rng.integers(len(photos)))]
        side = int(rng.integers(size, 4 * size + 1))  # crops of 1x to 4x the output size
        top = int(rng.integers(0, photo.shape[0] - side + 1))
        left = int(rng.integers(0, photo.shape[1] - side + 1))
        crop = torch.from_numpy(np.ascontiguousarray(photo[top : top + side, left : left + side]))
        patch = torch.nn.functional.interpolate(
            crop.permute(2, 0, 1)[None], size=(size, size), mode="bilinear", antialias=True
        )[0].numpy()
        if rng.random() < 0.5:
            patch = patch[:, :, ::-1]
        # a per-channel colour shift, so two crops of one photo differ in colour too
        patch = np.clip(patch * rng.uniform(0.6, 1.2, size=(3, 1, 1)), 0.0, 1.0)
        out[k] = np.abs(patch - digit[None])
    return _as_dataset(ds, out, name or f"{ds.name}_m")


def textured_digits(
    ds: LabeledDataset, *, size: int = 32, seed: int = 0, name: str | None = None
) -> LabeledDataset:
    """Coloured digits on procedural textures: random-colour stripes and smooth blobs.

    Each sample gets a background mixing two random colours along a random stripe pattern
    and a low-frequency noise field, and its digit is painted in a third random colour with
    the digit's grey level as opacity. No photo is used.

    Parameters
    ----------
    ds, size, seed
        As in :func:`photo_digits`.
    name
        Dataset name; default ``"<ds.name>_tex"``.
    """
    digits = _grey_digits(ds, size)
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    out = np.empty((len(digits), 3, size, size), dtype=np.float32)
    for k, digit in enumerate(digits):
        c1, c2 = rng.random((2, 3, 1, 1)).astype(np.float32)
        # ink far from the background's brightness, so the digit stays visible
        bright = float((c1 + c2).mean()) / 2 < 0.5
        ink = (rng.random((3, 1, 1)) * 0.35 + (0.65 if bright else 0.0)).astype(np.float32)
        angle = rng.uniform(0, np.pi)
        freq = rng.uniform(2.0, 8.0)
        stripes = 0.5 + 0.5 * np.sin(
            2 * np.pi * freq * (np.cos(angle) * xx + np.sin(angle) * yy) + rng.uniform(0, 6.3)
        )
        coarse = rng.random((4, 4)).astype(np.float32)
        blob = torch.nn.functional.interpolate(
            torch.from_numpy(coarse)[None, None], size=(size, size), mode="bicubic"
        )[0, 0].numpy()
        mix = np.clip(0.6 * stripes + 0.4 * blob, 0.0, 1.0)[None]
        background = c1 * mix + c2 * (1 - mix)
        alpha = digit[None]
        out[k] = np.clip(background * (1 - alpha) + ink * alpha, 0.0, 1.0)
    return _as_dataset(ds, out, name or f"{ds.name}_tex")
