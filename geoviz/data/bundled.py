"""Small real image datasets shipped with geoviz, usable offline.

``assets/nist/<name>.npz`` holds a stratified, seeded subset (2000 train + 500
test images) of MNIST, Fashion-MNIST, KMNIST and USPS, made by
``scripts/make_assets.py``; sources and licences are in ``assets/README.md``.
These are the *NIST datasets of the paper's experiments (Sec. 5), small
enough to run OTDD on a laptop.

Each file holds ``x_train`` (uint8, N x H x W), ``y_train`` (int64),
``x_test``, ``y_test`` and ``classes`` (str). Images are returned as float32
in ``[0, 1]`` (value / 255) with ``image_shape = (1, H, W)``.

The assets folder is ``<repository root>/assets``; set the environment variable
``GEOVIZ_ASSETS_DIR`` to use another folder with the same layout.
"""

from __future__ import annotations

import os
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geoviz.backend import runtime_settings
from geoviz.data.dataset import ImageShape, LabeledDataset
from geoviz.errors import DatasetError, DatasetFormatError, UnknownDatasetError
from geoviz.site import site_dir
from geoviz.vocabulary import Split


@dataclass(frozen=True)
class BundledSpec:
    """What a bundled file is expected to hold (used by the registry without loading it)."""

    name: str
    title: str
    n_train: int
    n_test: int
    n_classes: int
    image_shape: ImageShape
    description: str


BUNDLED: dict[str, BundledSpec] = {
    spec.name: spec
    for spec in (
        BundledSpec(
            "mnist",
            "MNIST (bundled sample)",
            2000,
            500,
            10,
            (1, 28, 28),
            "Handwritten digits 0-9 (LeCun, Cortes, Burges; CC BY-SA 3.0); stratified sample.",
        ),
        BundledSpec(
            "fashion_mnist",
            "Fashion-MNIST (bundled sample)",
            2000,
            500,
            10,
            (1, 28, 28),
            "Zalando article images, 10 clothing classes (MIT); stratified sample.",
        ),
        BundledSpec(
            "kmnist",
            "Kuzushiji-MNIST (bundled sample)",
            2000,
            500,
            10,
            (1, 28, 28),
            "Cursive Japanese hiragana, 10 classes (CODH; CC BY-SA 4.0); stratified sample.",
        ),
        BundledSpec(
            "usps",
            "USPS (bundled sample)",
            2000,
            500,
            10,
            (1, 16, 16),
            "Handwritten zip-code digits 0-9 at 16x16; stratified sample.",
        ),
    )
}

BUNDLED_NAMES: tuple[str, ...] = tuple(BUNDLED)

_KEYS = ("x_train", "y_train", "x_test", "y_test", "classes")


def assets_dir() -> Path:
    """The assets folder: ``$GEOVIZ_ASSETS_DIR`` if set, else ``assets/`` of the install
    (:func:`geoviz.site.site_dir`: inside the wheel, or the checkout's top level).

    The variable is read by the entry point, or by :func:`geoviz.backend.runtime_settings`
    when none configured the process (:attr:`~geoviz.backend.RuntimeSettings.assets_dir`).
    """
    configured = runtime_settings().assets_dir
    return configured if configured is not None else site_dir() / "assets"


def bundled_path(name: str) -> Path:
    """Path of the ``.npz`` file of bundled dataset ``name``."""
    if name not in BUNDLED:
        raise UnknownDatasetError(
            f"no bundled dataset {name!r}; bundled ones are: {', '.join(BUNDLED_NAMES)}"
        )
    return assets_dir() / "nist" / f"{name}.npz"


def missing_reason(name: str) -> str | None:
    """Why the file of bundled dataset ``name`` cannot be read in this install, or ``None``.

    Told by :func:`os.stat` alone (nothing is opened): the file is absent (an install
    without the assets) or not a regular file. The reason is a clause naming the file and
    the remedy: ``"the bundled file /.../nist/mnist.npz is missing from this install: reinstall
    geoviz, or set GEOVIZ_ASSETS_DIR ..."``.
    """
    path = bundled_path(name)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        state = "is missing from this install"
    else:
        if stat.S_ISREG(mode):
            return None
        state = "is not a regular file"
    return (
        f"the bundled file {path} {state}: reinstall geoviz, or set GEOVIZ_ASSETS_DIR to a folder "
        "holding nist/<name>.npz"
    )


def load_bundled(name: str, split: Split = "train") -> LabeledDataset:
    """Load a bundled sample.

    Parameters
    ----------
    name
        One of :data:`BUNDLED_NAMES` (``"mnist"``, ``"fashion_mnist"``,
        ``"kmnist"``, ``"usps"``).
    split
        ``"train"`` (2000 images) or ``"test"`` (500 images).

    Returns
    -------
    LabeledDataset
        features ``(N, H*W)`` float32 in ``[0, 1]``, ``image_shape = (1, H, W)``,
        class names from the file's ``classes`` key.

    Raises
    ------
    UnknownDatasetError
        ``name`` is not bundled.
    DatasetError
        The file is missing or ``split`` is invalid.
    DatasetFormatError
        The file lacks a key or is corrupt.
    """
    path = bundled_path(name)
    if split not in ("train", "test"):
        raise DatasetError(f"split must be 'train' or 'test', got {split!r}", path)
    if not path.is_file():
        raise DatasetError(
            "bundled dataset file not found; reinstall geoviz, or set GEOVIZ_ASSETS_DIR to "
            "the folder holding nist/<name>.npz (in a checkout: scripts/make_assets.py makes it)",
            path,
        )
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = [k for k in _KEYS if k not in data.files]
            if missing:
                raise DatasetFormatError(f"missing key(s) {', '.join(missing)}", path)
            x = data[f"x_{split}"]
            y = data[f"y_{split}"]
            classes = tuple(str(c) for c in data["classes"])
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        if isinstance(err, DatasetError):
            raise
        raise DatasetFormatError(f"cannot read bundled file: {err}", path) from err
    if x.ndim != 3 or x.dtype != np.uint8:
        raise DatasetFormatError(
            f"x_{split} must be uint8 of shape N x H x W, got {x.dtype} {x.shape}", path
        )
    n, h, w = x.shape
    features = x.reshape(n, h * w).astype(np.float32) / np.float32(255.0)
    return LabeledDataset(
        features=features,
        labels=y,
        classes=classes,
        name=name,
        image_shape=(1, h, w),
        source=f"{path} [{split}]",
    )
