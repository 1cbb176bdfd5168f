"""Seeded synthetic labelled point clouds in 2-D and 3-D.

* :func:`chessboard_gmm` — the paper's 16-component Gaussian mixture on a 4x4
  grid (appendix "OTDD neural map visualization", Fig. ``fig:chess``; the same
  example as Fig. 5 of Asadulaev et al. 2022). Four classes, each owning four
  components laid out like the squares of one colour on a chess board. Two
  copies whose class *names* are permuted over the same component patterns
  have identical class-conditional distributions up to relabelling, so the
  optimal OTDD map between them is the identity on features with relabelled
  classes and has zero transport cost (label-to-label W2 distance 0); this is
  the closed-form check the appendix describes.
* :func:`gaussian_mixture` — one anisotropic Gaussian per class in 2-D or 3-D,
  class means evenly spread on a circle/sphere.

Both are deterministic functions of their arguments: the ``"train"`` and
``"test"`` splits are independent draws (different random streams derived from
``seed``) from the same mixture.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from geoviz import limits
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import DatasetError
from geoviz.vocabulary import Split

CHESSBOARD_CLASSES: tuple[str, ...] = ("A", "B", "C", "D")

_SPLIT_STREAM = {"train": 1, "test": 2}


def _stream(seed: int, split: str, source: str) -> np.random.Generator:
    if split not in _SPLIT_STREAM:
        raise DatasetError(f"split must be 'train' or 'test', got {split!r}", source)
    return np.random.default_rng([int(seed), _SPLIT_STREAM[split]])


def _class_names(
    class_names: Sequence[str] | None, n: int, default: Sequence[str], source: str
) -> tuple[str, ...]:
    names = tuple(default) if class_names is None else tuple(str(c) for c in class_names)
    if len(names) != n:
        raise DatasetError(f"class_names needs {n} names, got {len(names)}: {names}", source)
    if len(set(names)) != n:
        raise DatasetError(f"class_names must be unique, got {names}", source)
    return names


def _positive_int(
    value: object, what: str, source: str, minimum: int = 1, maximum: int | None = None
) -> int:
    """``value`` as an int in ``[minimum, maximum]``, else a :class:`DatasetError`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise DatasetError(f"{what} must be an integer >= {minimum}, got {value!r}", source)
    if maximum is not None and value > maximum:
        raise DatasetError(
            f"{what} must be at most {maximum:,}, got {int(value):,} (a synthetic dataset "
            f"holds at most {limits.MAX_SYNTHETIC_SAMPLES:,} samples)",
            source,
        )
    return int(value)


def _seed(value: object, source: str) -> int:
    """A seed in ``[0, MAX_SEED]`` (numpy refuses negative seeds with its own error)."""
    try:
        return limits.check_int(value, "seed", 0, limits.MAX_SEED, error=DatasetError)
    except DatasetError as err:
        raise DatasetError(err.problem, source) from None


def _positive_float(value: object, what: str, source: str) -> float:
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        out = float("nan")
    if not np.isfinite(out) or out <= 0:
        raise DatasetError(f"{what} must be a positive number, got {value!r}", source)
    return out


def chessboard_pattern(permutation: Sequence[int] | None = None) -> np.ndarray:
    """``(4, 4)`` class index of each grid cell (row 0 at the top).

    Cell ``(i, j)`` belongs to pattern ``2 * (i % 2) + (j % 2)``; each pattern
    is four cells two apart in both directions, like one colour of a chess
    board. ``permutation[p]`` is the class index given to pattern ``p``
    (identity by default).
    """
    perm = np.arange(4) if permutation is None else np.asarray(permutation)
    if perm.shape != (4,) or sorted(perm.tolist()) != [0, 1, 2, 3]:
        raise DatasetError(
            f"permutation must be a permutation of 0, 1, 2, 3, got {permutation!r}", "chessboard"
        )
    rows, cols = np.indices((4, 4))
    return perm[2 * (rows % 2) + (cols % 2)].astype(np.int64)


def chessboard_centers(spacing: float = 2.0) -> np.ndarray:
    """``(4, 4, 2)`` component means: a 4x4 grid centred on 0, ``spacing`` apart."""
    offsets = (np.arange(4) - 1.5) * spacing
    xs = np.broadcast_to(offsets[None, :], (4, 4))
    ys = np.broadcast_to(-offsets[:, None], (4, 4))
    return np.stack([xs, ys], axis=-1)


def chessboard_gmm(
    n_per_component: int = 100,
    *,
    std: float = 0.25,
    spacing: float = 2.0,
    class_names: Sequence[str] | None = None,
    permutation: Sequence[int] | None = None,
    seed: int = 0,
    split: Split = "train",
    name: str = "chessboard",
) -> LabeledDataset:
    """The 2-D chess-board mixture of 16 isotropic Gaussians, 4 classes x 4 components.

    Parameters
    ----------
    n_per_component
        Samples drawn from each of the 16 components (``N = 16 * n_per_component``),
        at most ``geoviz.limits.MAX_SYNTHETIC_SAMPLES // 16``.
    std
        Standard deviation of every component (isotropic).
    spacing
        Distance between neighbouring component means.
    class_names
        Four class names (default ``("A", "B", "C", "D")``).
    permutation
        Which chess-board pattern each class name owns: pattern ``p`` (see
        :func:`chessboard_pattern`) gets label ``permutation[p]``. Two datasets
        differing only in ``permutation`` have the same features for the same
        seed and a zero-cost OTDD map between them.
    seed, split
        The samples are a deterministic function of ``(seed, split)``; ``seed`` in
        ``[0, geoviz.limits.MAX_SEED]``.
    name
        Dataset name.

    Returns
    -------
    LabeledDataset
        ``(16 * n_per_component, 2)`` features, ordered component by component
        (row-major over the grid).
    """
    n = _positive_int(
        n_per_component, "n_per_component", name, maximum=limits.MAX_SYNTHETIC_SAMPLES // 16
    )
    seed = _seed(seed, name)
    std = _positive_float(std, "std", name)
    spacing = _positive_float(spacing, "spacing", name)
    names = _class_names(class_names, 4, CHESSBOARD_CLASSES, name)
    pattern = chessboard_pattern(permutation)
    rng = _stream(seed, split, name)
    centers = chessboard_centers(spacing).reshape(16, 2)
    noise = rng.standard_normal((16, n, 2)) * std
    features = (centers[:, None, :] + noise).reshape(16 * n, 2)
    labels = np.repeat(pattern.reshape(16), n)
    return LabeledDataset(
        features=features.astype(np.float32),
        labels=labels,
        classes=names,
        name=name,
        image_shape=None,
        source=f"synthetic:{name} [{split}] seed={seed}",
    )


def _random_rotation(rng: np.random.Generator, dim: int) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((dim, dim)))
    q = q * np.sign(np.diag(r))[None, :]
    if np.linalg.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


def _spread_directions(n: int, dim: int) -> np.ndarray:
    """``n`` unit vectors evenly spread on the circle (dim 2) or sphere (dim 3)."""
    if dim == 2:
        angles = 2 * np.pi * np.arange(n) / n
        return np.stack([np.cos(angles), np.sin(angles)], axis=1)
    if n == 2:
        return np.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])
    # Fibonacci sphere
    i = np.arange(n) + 0.5
    z = 1 - 2 * i / n
    rho = np.sqrt(1 - z**2)
    phi = np.pi * (3 - np.sqrt(5)) * i
    return np.stack([rho * np.cos(phi), rho * np.sin(phi), z], axis=1)


def gaussian_mixture(
    n_classes: int = 4,
    dim: Literal[2, 3] = 2,
    n_per_class: int = 200,
    spread: float = 3.0,
    seed: int = 0,
    *,
    std: float = 0.7,
    anisotropy: float = 0.5,
    class_names: Sequence[str] | None = None,
    split: Split = "train",
    name: str | None = None,
) -> LabeledDataset:
    """One random anisotropic Gaussian per class in 2-D or 3-D.

    Class means are ``spread`` times unit vectors evenly spaced on the circle
    (2-D) or a Fibonacci sphere (3-D), rotated by a random rotation. Each class
    covariance is ``R diag(s**2) R^T`` with a random rotation ``R`` and axis
    standard deviations ``s`` uniform in ``[anisotropy * std, std]``. The
    mixture (means, covariances) depends on ``seed`` only; the samples on
    ``(seed, split)``.

    Parameters
    ----------
    n_classes
        Number of classes, ``2 <= n_classes <= geoviz.limits.MAX_CLASSES``.
    dim
        2 or 3.
    n_per_class
        Samples per class (``N = n_classes * n_per_class``, at most
        :data:`geoviz.limits.MAX_SYNTHETIC_SAMPLES`; checked before anything is drawn).
    spread
        Distance of each class mean from the origin.
    seed
        Seed of the mixture and the samples, in ``[0, geoviz.limits.MAX_SEED]``.
    std
        Largest axis standard deviation of a class.
    anisotropy
        Ratio (0, 1] of the smallest to the largest axis standard deviation.
    class_names
        ``n_classes`` names (default ``"0"``, ``"1"``, ...).
    split
        ``"train"`` or ``"test"``: independent draws from the same mixture.
    name
        Dataset name (default ``"gmm2d"`` / ``"gmm3d"``).

    Returns
    -------
    LabeledDataset
        ``(n_classes * n_per_class, dim)`` features, ordered class by class.
    """
    name = name or f"gmm{dim}d"
    if dim not in (2, 3) or isinstance(dim, bool):
        raise DatasetError(f"dim must be 2 or 3, got {dim!r}", name)
    k = _positive_int(n_classes, "n_classes", name, minimum=2, maximum=limits.MAX_CLASSES)
    n = _positive_int(n_per_class, "n_per_class", name, maximum=limits.MAX_SYNTHETIC_SAMPLES)
    if k * n > limits.MAX_SYNTHETIC_SAMPLES:
        raise DatasetError(
            f"n_classes x n_per_class = {k:,} x {n:,} = {k * n:,} samples, more than the "
            f"{limits.MAX_SYNTHETIC_SAMPLES:,} a synthetic dataset may hold",
            name,
        )
    seed = _seed(seed, name)
    spread = _positive_float(spread, "spread", name)
    std = _positive_float(std, "std", name)
    anisotropy = _positive_float(anisotropy, "anisotropy", name)
    if anisotropy > 1:
        raise DatasetError(f"anisotropy must lie in (0, 1], got {anisotropy}", name)
    names = _class_names(class_names, k, [str(i) for i in range(k)], name)

    structure = np.random.default_rng([int(seed), 0])
    means = spread * _spread_directions(k, dim) @ _random_rotation(structure, dim).T
    factors = []
    for _ in range(k):
        rot = _random_rotation(structure, dim)
        scales = structure.uniform(anisotropy * std, std, size=dim)
        factors.append(rot * scales[None, :])  # cov = (R S)(R S)^T

    rng = _stream(seed, split, name)
    blocks = [means[c] + rng.standard_normal((n, dim)) @ factors[c].T for c in range(k)]
    return LabeledDataset(
        features=np.concatenate(blocks).astype(np.float32),
        labels=np.repeat(np.arange(k), n),
        classes=names,
        name=name,
        image_shape=None,
        source=f"synthetic:{name} [{split}] seed={seed}",
    )
