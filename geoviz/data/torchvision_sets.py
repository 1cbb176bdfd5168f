"""Full-size image datasets downloaded with torchvision (optional dependency).

Names (registry prefix ``"torchvision:"``): ``mnist``, ``emnist_letters``,
``fashion_mnist``, ``kmnist``, ``usps`` — the *NIST datasets of the paper's
experiments (Sec. 5). Files go to ``<cache dir>/torchvision``
(:func:`geoviz.backend.default_cache_dir`, i.e. ``$GEOVIZ_CACHE_DIR`` or
``~/.cache/geoviz``); pass ``root=`` to use another folder.

All are returned like the bundled samples: float32 pixels in ``[0, 1]``,
``image_shape = (1, H, W)``, class names as in the bundled files. EMNIST
letters are stored transposed in the original files; they are transposed back
so that letters are upright like MNIST digits, and labels ``1..26`` become
``0..25`` named ``a``..``z``.

When torchvision is missing or a download fails,
:class:`~geoviz.errors.DownloadUnavailableError` says what to install and
which files to put where for offline use.
"""

from __future__ import annotations

import importlib.util
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from geoviz.backend import default_cache_dir
from geoviz.data.bundled import BUNDLED_NAMES
from geoviz.data.dataset import ImageShape, LabeledDataset
from geoviz.errors import DatasetError, DownloadUnavailableError, UnknownDatasetError
from geoviz.vocabulary import Split

_DIGITS = tuple(str(i) for i in range(10))


@dataclass(frozen=True)
class TorchvisionSpec:
    """How to get one dataset from torchvision, and what it holds."""

    name: str
    title: str
    tv_class: str
    n_train: int
    n_test: int
    classes: tuple[str, ...]
    image_shape: ImageShape
    offline_files: str
    description: str

    @property
    def n_classes(self) -> int:
        return len(self.classes)


_MNIST_FILES = "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (gunzipped)"

TORCHVISION: dict[str, TorchvisionSpec] = {
    spec.name: spec
    for spec in (
        TorchvisionSpec(
            "mnist",
            "MNIST (full, download)",
            "MNIST",
            60000,
            10000,
            _DIGITS,
            (1, 28, 28),
            f"<root>/MNIST/raw/: {_MNIST_FILES}",
            "Handwritten digits 0-9 (CC BY-SA 3.0), full 60k/10k split.",
        ),
        TorchvisionSpec(
            "emnist_letters",
            "EMNIST letters (full, download)",
            "EMNIST",
            124800,
            20800,
            tuple(string.ascii_lowercase),
            (1, 28, 28),
            "<root>/EMNIST/raw/: emnist-letters-train-images-idx3-ubyte, emnist-letters-train-labels-idx1-ubyte, "
            "emnist-letters-test-images-idx3-ubyte, emnist-letters-test-labels-idx1-ubyte (from NIST's gzip.zip, gunzipped)",
            "Handwritten letters a-z (upper and lower case merged), 26 classes.",
        ),
        TorchvisionSpec(
            "fashion_mnist",
            "Fashion-MNIST (full, download)",
            "FashionMNIST",
            60000,
            10000,
            (
                "T-shirt/top",
                "Trouser",
                "Pullover",
                "Dress",
                "Coat",
                "Sandal",
                "Shirt",
                "Sneaker",
                "Bag",
                "Ankle boot",
            ),
            (1, 28, 28),
            f"<root>/FashionMNIST/raw/: {_MNIST_FILES}",
            "Zalando article images, 10 clothing classes (MIT), full 60k/10k split.",
        ),
        TorchvisionSpec(
            "kmnist",
            "Kuzushiji-MNIST (full, download)",
            "KMNIST",
            60000,
            10000,
            ("o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo"),
            (1, 28, 28),
            f"<root>/KMNIST/raw/: {_MNIST_FILES}",
            "Cursive Japanese hiragana, 10 classes (CC BY-SA 4.0), full 60k/10k split.",
        ),
        TorchvisionSpec(
            "usps",
            "USPS (full, download)",
            "USPS",
            7291,
            2007,
            _DIGITS,
            (1, 16, 16),
            "<root>/: usps.bz2 and usps.t.bz2 (LIBSVM multiclass files)",
            "Handwritten zip-code digits 0-9 at 16x16, standard 7291/2007 split.",
        ),
    )
}

TORCHVISION_NAMES: tuple[str, ...] = tuple(TORCHVISION)


def torchvision_root() -> Path:
    """Default download folder: ``<geoviz cache dir>/torchvision``."""
    return default_cache_dir() / "torchvision"


def offline_instructions(name: str, root: Path | str | None = None) -> str:
    """How to make ``name`` available without network access."""
    spec = TORCHVISION[name]
    root = Path(root) if root is not None else torchvision_root()
    files = spec.offline_files.replace("<root>", str(root))
    text = (
        f"For offline use, copy the original files into {files}; torchvision then reads them "
        "without downloading. Without torchvision, geoviz can load such files directly with "
        "geoviz.data.formats.load_path(<folder or file>) (CLI: geoviz show <path>)"
    )
    if name in BUNDLED_NAMES:
        text += f", or use the bundled offline sample {name!r}"
    return text + "."


def torchvision_installed() -> bool:
    """Whether ``import torchvision`` can work in this process (looked up, not imported)."""
    try:
        return importlib.util.find_spec("torchvision") is not None
    except (ImportError, ValueError):  # a broken or stubbed-out installation
        return False


def unavailable_reason(name: str) -> str | None:
    """Why the torchvision dataset ``name`` cannot be loaded in this process, or ``None``.

    Only what can be told without a download: a missing torchvision. A dataset whose
    files are not yet under the root still needs the network on its first load; that
    load's :class:`~geoviz.errors.DownloadUnavailableError` says so.
    """
    if name not in TORCHVISION:
        return None
    if not torchvision_installed():
        return "it needs torchvision, which is not installed here (`pip install torchvision`)"
    return None


def _to_numpy(values: Any) -> np.ndarray:
    if hasattr(values, "numpy") and not isinstance(values, np.ndarray):
        return values.detach().cpu().numpy() if hasattr(values, "detach") else values.numpy()
    return np.asarray(values)


def load_torchvision(
    name: str,
    split: Split = "train",
    *,
    root: Path | str | None = None,
    download: bool = True,
) -> LabeledDataset:
    """Load a full dataset through torchvision (downloading it if needed).

    Parameters
    ----------
    name
        One of :data:`TORCHVISION_NAMES`.
    split
        ``"train"`` or ``"test"``.
    root
        Download folder (default :func:`torchvision_root`).
    download
        Let torchvision download missing files.

    Returns
    -------
    LabeledDataset
        ``(N, H*W)`` float32 in ``[0, 1]``, ``image_shape = (1, H, W)``.

    Raises
    ------
    DownloadUnavailableError
        torchvision is not installed, or the files are missing and cannot be
        downloaded; the message tells how to fix it.
    """
    if name not in TORCHVISION:
        raise UnknownDatasetError(
            f"no torchvision dataset {name!r}; available: {', '.join(TORCHVISION_NAMES)}"
        )
    if split not in ("train", "test"):
        raise DatasetError(f"split must be 'train' or 'test', got {split!r}", f"torchvision:{name}")
    spec = TORCHVISION[name]
    root_path = Path(root).expanduser() if root is not None else torchvision_root()
    try:
        from torchvision import datasets as tv_datasets
    except ImportError as err:
        raise DownloadUnavailableError(
            f"dataset 'torchvision:{name}' needs torchvision, which is not installed: run "
            f"`pip install torchvision` (or `pip install geoviz[vision]`). "
            + offline_instructions(name, root_path)
        ) from err

    kwargs: dict[str, Any] = {"train": split == "train", "download": download}
    if name == "emnist_letters":
        kwargs["split"] = "letters"
    try:
        root_path.mkdir(parents=True, exist_ok=True)
        tv = getattr(tv_datasets, spec.tv_class)(str(root_path), **kwargs)
        images = _to_numpy(tv.data)
        targets = _to_numpy(tv.targets).astype(np.int64)
    except Exception as err:  # network, checksum, missing files, permissions...
        raise DownloadUnavailableError(
            f"could not get 'torchvision:{name}' ({split}) into {root_path}: {err}. "
            "Check the network connection, or work offline. "
            + offline_instructions(name, root_path)
        ) from err

    images = np.asarray(images)
    source = f"torchvision:{name} [{split}] {root_path}"
    if images.ndim != 3:
        raise DatasetError(
            f"expected N x H x W images from torchvision, got shape {images.shape}", source
        )
    if name == "emnist_letters":
        images = images.transpose(0, 2, 1)
        targets = targets - 1
    n, h, w = images.shape
    features = images.reshape(n, h * w).astype(np.float32)
    if images.dtype == np.uint8:
        features /= np.float32(255.0)
    return LabeledDataset(
        features=np.clip(features, 0.0, 1.0),
        labels=targets,
        classes=spec.classes,
        name=name,
        image_shape=(1, h, w),
        source=source,
    )
