"""Small synthetic datasets shared by several test modules (imported as a plain module:
``tests/`` is on ``sys.path`` under pytest's default import mode, as for ``conftest.py``)."""

from __future__ import annotations

import numpy as np

from geoviz.data.dataset import LabeledDataset


def bars(n: int, seed: int, size: int = 16) -> LabeledDataset:
    """``1 x size x size`` images: a horizontal (class 0) or vertical (class 1) bright bar on
    noise; any image classifier separates them in a few steps."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 2
    img = 0.2 * rng.random((n, size, size))
    pos = rng.integers(2, size - 2, size=n)
    for i in range(n):
        if labels[i] == 0:
            img[i, pos[i] - 1 : pos[i] + 1, :] = 1.0
        else:
            img[i, :, pos[i] - 1 : pos[i] + 1] = 1.0
    return LabeledDataset(
        features=img.reshape(n, -1),
        labels=labels,
        classes=("horizontal", "vertical"),
        image_shape=(1, size, size),
    )


def ring_blobs(n: int, seed: int, n_classes: int, name: str, shift: float = 0.0) -> LabeledDataset:
    """2-D float32 Gaussian blobs (sd 0.5) centred on a radius-3 ring, one per class,
    translated by ``shift``; classes ``c0, c1, ...``."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % n_classes
    centres = 3.0 * np.stack([np.cos(np.arange(n_classes)), np.sin(np.arange(n_classes))], 1)
    x = centres[y] + shift + 0.5 * rng.normal(size=(n, 2))
    return LabeledDataset(
        x.astype(np.float32), y, tuple(f"c{k}" for k in range(n_classes)), name=name
    )
