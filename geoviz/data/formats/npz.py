"""NumPy ``.npz`` archives of features and labels.

An ``.npz`` is a zip archive of ``.npy`` arrays (the NumPy file format, NEP 1).
Arrays are read with ``allow_pickle=False``, so object arrays are refused and
nothing is ever unpickled. The feature/label arrays are found by key
conventions (``x/y``, ``images/labels``, ..., and the per-split keys of
Keras's ``mnist.npz``, ``x_train``/``y_train``/``x_test``/``y_test``); an
optional ``classes``/``class_names`` key names the classes.

Nothing is allocated from what a file merely declares: the ``.npy`` headers of the
members to be read (shape, dtype) are parsed first, and the archive is refused when the
declared arrays exceed the archive cap (the caller's ``limit``:
:data:`geoviz.data.formats.MAX_UNCOMPRESSED_BYTES`, as for ``.zip`` uploads), would not fit in this process's memory
(:func:`geoviz.memory.check_bytes`), or are larger than their zip members can hold (a
forged header). A 570-byte file declaring a ``(10**12, 10)`` array is thus refused in
microseconds, before any read.
"""

from __future__ import annotations

import math
import re
import zipfile
import zlib
from typing import IO, Any, NamedTuple

import numpy as np
from numpy.lib import format as npy_format

from geoviz.data.dataset import LabeledDataset
from geoviz.data.formats._common import (
    Split,
    _check_dataset_memory,
    _encode_labels,
    _features_from_array,
    _label_str,
    _make,
)
from geoviz.errors import DatasetFormatError
from geoviz.memory import format_bytes, memory_guard

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


def load_npz(fh: IO[bytes], *, split: Split, name: str, source: str, limit: int) -> LabeledDataset:
    """The dataset in the ``.npz`` archive ``fh``; its declared arrays together at most
    ``limit`` bytes (the archive cap, :data:`geoviz.data.formats.MAX_UNCOMPRESSED_BYTES`)."""
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
        class_key = next((ck for ck in _NPZ_CLASS_KEYS if ck in keys), None)
        wanted = [k for k in (x_key, y_key, class_key) if k is not None]
        headers = {k: _npy_header(npz, k, source) for k in wanted}
        _check_declared(headers, x_key, y_key, source, limit)
        with memory_guard(f"loading {source}"):
            x = _npz_get(npz, x_key, source)
            y = _npz_get(npz, y_key, source)
            class_names = None
            if class_key is not None:
                cls = _npz_get(npz, class_key, source)
                if cls.ndim != 1:
                    raise DatasetFormatError(
                        f"key {class_key!r} must be a 1-D array of class names, got shape "
                        f"{cls.shape}",
                        source,
                    )
                class_names = [_label_str(c, source) for c in cls.tolist()]
    if x.ndim == 0 or y.ndim == 0:
        raise DatasetFormatError(
            f"keys {x_key!r}/{y_key!r} must be arrays with one row per sample", source
        )
    if x.shape[0] != y.shape[0]:
        raise DatasetFormatError(
            f"{x_key!r} holds {x.shape[0]} samples but {y_key!r} holds {y.shape[0]} labels: counts must match",
            source,
        )
    with memory_guard(f"loading {source}"):
        features, shape = _features_from_array(x, source, what=f"array {x_key!r}")
        del x
        codes, classes = _encode_labels(y, source, class_names)
    return _make(features, codes, classes, name=name, image_shape=shape, source=source)


class _NpyHeader(NamedTuple):
    """What a ``.npy`` member of an archive declares, read without reading its data."""

    shape: tuple[int, ...]
    dtype: np.dtype
    data_bytes: int  # shape x itemsize
    member_bytes: int  # the uncompressed size the zip directory declares for the member
    header_bytes: int  # magic + header, before the data


def _npy_header(npz: Any, key: str, source: str) -> _NpyHeader:
    """Parse the ``.npy`` header of archive member ``key`` (only the first bytes are read)."""
    zf: zipfile.ZipFile = npz.zip
    member = f"{key}.npy" if f"{key}.npy" in set(zf.namelist()) else key
    try:
        info = zf.getinfo(member)
        with zf.open(info) as fp:
            magic = fp.read(len(npy_format.MAGIC_PREFIX))
            if magic != npy_format.MAGIC_PREFIX:
                raise DatasetFormatError(
                    f"archive member {member!r} is not a .npy array (no NumPy magic bytes)",
                    source,
                )
            fp.seek(0)
            version = npy_format.read_magic(fp)
            if version == (1, 0):
                shape, _fortran, dtype = npy_format.read_array_header_1_0(fp)
            elif version in ((2, 0), (3, 0)):  # 3.0 differs only in the header's text encoding
                shape, _fortran, dtype = npy_format.read_array_header_2_0(fp)
            else:
                raise DatasetFormatError(
                    f"array {key!r} has unsupported .npy format version {version}", source
                )
            header_bytes = fp.tell()
    except DatasetFormatError:
        raise
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, zlib.error, KeyError) as exc:
        raise DatasetFormatError(
            f"array {key!r} has a corrupt .npy header ({type(exc).__name__})", source
        ) from exc
    if dtype.hasobject:
        raise DatasetFormatError(
            f"array {key!r} is stored as Python objects, which would need unpickling; refusing "
            "(untrusted pickles can run code) — save it with a numeric or string dtype",
            source,
        )
    count = math.prod(int(s) for s in shape)
    return _NpyHeader(
        shape=tuple(int(s) for s in shape),
        dtype=dtype,
        data_bytes=count * dtype.itemsize,
        member_bytes=int(info.file_size),
        header_bytes=int(header_bytes),
    )


def _check_declared(
    headers: dict[str, _NpyHeader], x_key: str, y_key: str, source: str, cap: int
) -> None:
    """Refuse arrays whose declared size exceeds the archive ``cap``, memory or their member."""
    total = sum(h.data_bytes for h in headers.values())
    described = ", ".join(
        f"{k!r} {h.shape} {h.dtype.name} ({format_bytes(h.data_bytes)})" for k, h in headers.items()
    )
    if total > cap:
        raise DatasetFormatError(
            f"the arrays to read declare {format_bytes(total)} ({described}), more than the "
            f"limit of {format_bytes(cap)} for one archive",
            source,
        )
    x, y = headers[x_key], headers[y_key]
    n_values = math.prod(x.shape)
    n_labels = y.shape[0] if y.shape else 1
    _check_dataset_memory(total, n_values, n_labels, f"loading {source} ({described})")
    for key, h in headers.items():
        if h.header_bytes + h.data_bytes > h.member_bytes:
            raise DatasetFormatError(
                f"array {key!r} declares shape {h.shape} of {h.dtype.name} "
                f"({h.data_bytes:,} bytes) but its archive member holds only "
                f"{max(0, h.member_bytes - h.header_bytes):,} bytes of data: the file is "
                "corrupt or truncated",
                source,
            )


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
