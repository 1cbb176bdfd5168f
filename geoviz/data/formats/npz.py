"""NumPy ``.npz`` archives of features and labels.

An ``.npz`` is a zip archive of ``.npy`` arrays (the NumPy file format, NEP 1).
Arrays are read with ``allow_pickle=False``, so object arrays are refused and
nothing is ever unpickled. The feature/label arrays are found by key
conventions (``x/y``, ``images/labels``, ..., and the per-split keys of
Keras's ``mnist.npz``, ``x_train``/``y_train``/``x_test``/``y_test``); an
optional ``classes``/``class_names`` key names the classes.
"""

from __future__ import annotations

import re
import zipfile
import zlib
from typing import IO, Any

import numpy as np

from geoviz.data.dataset import LabeledDataset
from geoviz.data.formats._common import (
    Split,
    _encode_labels,
    _features_from_array,
    _label_str,
    _make,
)
from geoviz.errors import DatasetFormatError

_NPZ_PAIRS: tuple[tuple[str, str], ...] = (
    ("x", "y"),
    ("X", "Y"),
    ("X", "y"),
    ("images", "labels"),
    ("features", "labels"),
    ("data", "labels"),
    ("data", "target"),
)
_NPZ_SPLIT_KEY_RE = re.compile(r"^(?:[xXyY]_(?:train|test)|(?:train|test)_(?:images|labels))$")
_NPZ_CLASS_KEYS = ("classes", "class_names")


def _load_npz(fh: IO[bytes], *, split: Split, name: str, source: str) -> LabeledDataset:
    head = fh.read(6)
    fh.seek(0)
    if head.startswith(b"\x93NUMPY"):
        raise DatasetFormatError(
            "is a single .npy array, not an .npz archive holding features and labels", source
        )
    if not head.startswith(b"PK"):
        raise DatasetFormatError(
            "not an .npz archive (no zip signature): the file is corrupt", source
        )
    try:
        npz = np.load(fh, allow_pickle=False)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, zlib.error) as exc:
        raise DatasetFormatError(f"corrupt or truncated .npz archive ({exc})", source) from exc
    with npz:
        keys = list(npz.files)
        x_key, y_key = _npz_keys(keys, split, source)
        x = _npz_get(npz, x_key, source)
        y = _npz_get(npz, y_key, source)
        class_names = None
        for ck in _NPZ_CLASS_KEYS:
            if ck in keys:
                cls = _npz_get(npz, ck, source)
                if cls.ndim != 1:
                    raise DatasetFormatError(
                        f"key {ck!r} must be a 1-D array of class names, got shape {cls.shape}",
                        source,
                    )
                class_names = [_label_str(c, source) for c in cls.tolist()]
                break
    if x.ndim == 0 or y.ndim == 0:
        raise DatasetFormatError(
            f"keys {x_key!r}/{y_key!r} must be arrays with one row per sample", source
        )
    if x.shape[0] != y.shape[0]:
        raise DatasetFormatError(
            f"{x_key!r} holds {x.shape[0]} samples but {y_key!r} holds {y.shape[0]} labels: counts must match",
            source,
        )
    features, shape = _features_from_array(x, source, what=f"array {x_key!r}")
    codes, classes = _encode_labels(y, source, class_names)
    return _make(features, codes, classes, name=name, image_shape=shape, source=source)


def _npz_keys(keys: list[str], split: Split, source: str) -> tuple[str, str]:
    keyset = set(keys)
    if any(_NPZ_SPLIT_KEY_RE.match(k) for k in keys):
        for xk, yk in (
            (f"x_{split}", f"y_{split}"),
            (f"X_{split}", f"y_{split}"),
            (f"X_{split}", f"Y_{split}"),
            (f"{split}_images", f"{split}_labels"),
        ):
            if xk in keyset and yk in keyset:
                return xk, yk
        raise DatasetFormatError(
            f"has per-split keys {sorted(keys)} but no x_{split}/y_{split} pair for split {split!r}",
            source,
        )
    for xk, yk in _NPZ_PAIRS:
        if xk in keyset and yk in keyset:
            return xk, yk
    raise DatasetFormatError(
        f"no known feature/label keys in .npz (found {sorted(keys)}); expected x/y, X/Y, "
        "images/labels, features/labels, data/labels or x_train/y_train/x_test/y_test",
        source,
    )


def _npz_get(npz: Any, key: str, source: str) -> np.ndarray:
    try:
        return np.asarray(npz[key])
    except ValueError as exc:
        if "pickle" in str(exc) or "Object arrays" in str(exc):
            raise DatasetFormatError(
                f"array {key!r} is stored as Python objects, which would need unpickling; refusing "
                "(untrusted pickles can run code) — save it with a numeric or string dtype",
                source,
            ) from exc
        raise DatasetFormatError(f"array {key!r} is corrupt ({exc})", source) from exc
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, KeyError) as exc:
        raise DatasetFormatError(f"array {key!r} is corrupt or truncated ({exc})", source) from exc
