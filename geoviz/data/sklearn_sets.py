"""Tiny datasets that ship with scikit-learn (no download needed).

* ``digits``: 1797 handwritten digits, 8x8 pixels with values 0..16, returned
  as float32 in ``[0, 1]`` (value / 16) with ``image_shape = (1, 8, 8)``.
* ``iris`` (150 x 4) and ``wine`` (178 x 13): vector datasets. Their columns
  have very different scales (wine's proline is ~1000, its hue ~1), which
  would let one column dominate the squared-Euclidean OT cost; by default
  (``standardize=True``) every column is z-scored with the mean and standard
  deviation of the **train** split, applied to both splits. Pass
  ``standardize=False`` for the raw measurements.

scikit-learn has no train/test split for these, so geoviz makes a fixed,
stratified one: ``test_fraction = 0.2`` of each dataset (rounded up), chosen
with ``sklearn.model_selection.train_test_split(random_state=0)``; the split
never depends on the caller's seed, so "train" and "test" never overlap.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from geoviz.data.dataset import ImageShape, LabeledDataset
from geoviz.errors import DatasetError, UnknownDatasetError
from geoviz.vocabulary import Split

TEST_FRACTION = 0.2
SPLIT_SEED = 0


@dataclass(frozen=True)
class SklearnSpec:
    """Static description of a scikit-learn dataset (for the registry)."""

    name: str
    title: str
    n_samples: int
    n_features: int
    n_classes: int
    image_shape: ImageShape | None
    description: str

    @property
    def n_test(self) -> int:
        return int(np.ceil(self.n_samples * TEST_FRACTION))

    @property
    def n_train(self) -> int:
        return self.n_samples - self.n_test


SKLEARN: dict[str, SklearnSpec] = {
    spec.name: spec
    for spec in (
        SklearnSpec(
            "digits",
            "Digits 8x8 (scikit-learn)",
            1797,
            64,
            10,
            (1, 8, 8),
            "UCI optical handwritten digits, 8x8 pixels scaled to [0, 1].",
        ),
        SklearnSpec(
            "iris",
            "Iris (scikit-learn)",
            150,
            4,
            3,
            None,
            "Fisher's iris flowers: 4 measurements, 3 species; columns standardised by default.",
        ),
        SklearnSpec(
            "wine",
            "Wine (scikit-learn)",
            178,
            13,
            3,
            None,
            "UCI wine recognition: 13 chemical measurements, 3 cultivars; columns standardised by default.",
        ),
    )
}

SKLEARN_NAMES: tuple[str, ...] = tuple(SKLEARN)


@cache
def _raw(name: str) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    from sklearn import datasets

    loader = {
        "digits": datasets.load_digits,
        "iris": datasets.load_iris,
        "wine": datasets.load_wine,
    }[name]
    bunch = loader()
    x = np.asarray(bunch.data, dtype=np.float64)
    y = np.asarray(bunch.target, dtype=np.int64)
    classes = tuple(str(c) for c in bunch.target_names)
    return x, y, classes


@cache
def _split_indices(name: str) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split

    _x, y, _c = _raw(name)
    idx = np.arange(len(y))
    train, test = train_test_split(
        idx, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=y, shuffle=True
    )
    return np.sort(train), np.sort(test)


def load_sklearn(name: str, split: Split = "train", *, standardize: bool = True) -> LabeledDataset:
    """Load a scikit-learn toy dataset.

    Parameters
    ----------
    name
        ``"digits"``, ``"iris"`` or ``"wine"``.
    split
        ``"train"`` (80 %) or ``"test"`` (20 %), fixed and stratified.
    standardize
        For the vector datasets (iris, wine): z-score each column with the
        train split's mean and standard deviation. Ignored for ``digits``,
        whose pixels are always divided by 16.

    Returns
    -------
    LabeledDataset
        Class names from scikit-learn's ``target_names`` (``"0"``..``"9"``,
        ``"setosa"``..., ``"class_0"``...).
    """
    if not isinstance(name, str) or name not in SKLEARN:  # a list from a link is unhashable
        raise UnknownDatasetError(
            f"no scikit-learn dataset {name!r}; available: {', '.join(SKLEARN_NAMES)}"
        )
    if split not in ("train", "test"):
        raise DatasetError(f"split must be 'train' or 'test', got {split!r}", f"sklearn:{name}")
    spec = SKLEARN[name]
    x, y, classes = _raw(name)
    train_idx, test_idx = _split_indices(name)
    idx = train_idx if split == "train" else test_idx
    features = x[idx]
    if spec.image_shape is not None:
        features = features / 16.0
    elif standardize:
        mean = x[train_idx].mean(axis=0)
        std = x[train_idx].std(axis=0)
        features = (features - mean) / np.where(std > 0, std, 1.0)
    return LabeledDataset(
        features=features.astype(np.float32),
        labels=y[idx],
        classes=classes,
        name=name,
        image_shape=spec.image_shape,
        source=f"sklearn:{name} [{split}]",
    )
