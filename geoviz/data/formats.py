"""Load labelled datasets from standard files on disk and from uploaded bytes.

Every loader returns a :class:`~geoviz.data.dataset.LabeledDataset`: image sets
as flattened float32 pixels in ``[0, 1]`` with ``image_shape=(C, H, W)``,
vector sets (CSV, 2-D arrays) unchanged with ``image_shape=None``; labels are
``0..C-1`` indices into ``classes``.

Supported formats
-----------------
``idx``
    The MNIST family's IDX files (``train-images-idx3-ubyte[.gz]`` +
    ``train-labels-idx1-ubyte[.gz]``, also ``*.idx3-ubyte`` naming); gzip is
    handled transparently. Give the images file, the labels file or the folder
    holding the pairs; ``split`` picks ``train-*`` or ``t10k-*``/``test-*``.
``npz``
    NumPy archives, read with ``allow_pickle=False`` (never unpickled). Key
    conventions: ``x/y``, ``X/Y``, ``X/y``, ``images/labels``,
    ``features/labels``, ``data/labels``, ``data/target`` and the split keys
    ``x_train/y_train/x_test/y_test`` (Keras ``mnist.npz``). Optional
    ``classes``/``class_names`` key with the class names.
``imagefolder``
    ``root/<class>/<image>`` (png, jpg, jpeg, bmp, gif, webp) as in
    ``torchvision.datasets.ImageFolder``: class names are the sorted folder
    names. Also ``root/train/<class>/...`` + ``root/test/<class>/...``.
``mnistm``
    The released MNIST-M layout: ``mnist_m_train/`` (PNGs) next to
    ``mnist_m_train_labels.txt`` with lines ``"00000000.png 5"``.
``csv``
    One row per sample, a header row, a label column and numeric feature
    columns.

Uploads (:func:`load_upload`) accept the same single-file formats as bytes,
plus a ``.zip`` holding an ImageFolder or MNIST-M folder (extracted safely:
absolute and ``..`` members are refused, the uncompressed size is capped at
:data:`MAX_UNCOMPRESSED_BYTES`); IDX pairs come through
:func:`load_upload_pair`.

Label encoding
--------------
Unless class names are given (ImageFolder folders, an npz ``classes`` key),
the sorted unique label values become classes ``0..C-1`` and their string
forms the class names: labels ``{3, 7}`` give ``classes=("3", "7")``. Two
splits of one dataset therefore share indices only when both contain every
class (true of all standard benchmarks).

Every problem with the input raises :class:`~geoviz.errors.DatasetFormatError`
(the file cannot be parsed) or :class:`~geoviz.errors.DatasetError` (it parses
but is not a usable labelled dataset), with the offending file in the message.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO, Any, Literal, TypeVar, get_args

import numpy as np

from geoviz.data.dataset import ImageShape, LabeledDataset
from geoviz.errors import DatasetError, DatasetFormatError, ExportError

__all__ = [
    "IMAGE_EXTENSIONS",
    "MAX_UNCOMPRESSED_BYTES",
    "Kind",
    "Split",
    "decode_idx",
    "encode_idx",
    "load_path",
    "load_upload",
    "load_upload_pair",
    "read_idx",
    "save_idx",
]

Split = Literal["train", "test"]
Kind = Literal["auto", "idx", "npz", "imagefolder", "mnistm", "csv"]

#: Largest total uncompressed size of a zip archive that will be extracted.
MAX_UNCOMPRESSED_BYTES: int = 2 * 1024**3
#: Largest number of members of a zip archive that will be extracted.
MAX_ZIP_MEMBERS: int = 500_000
#: File extensions read as images in ImageFolder and MNIST-M layouts (lower case).
IMAGE_EXTENSIONS: tuple[str, ...] = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
#: Column names taken as the label column of a CSV, in order of preference.
LABEL_COLUMN_NAMES: tuple[str, ...] = ("label", "labels", "class", "target", "y")

_TRAIN_TOKENS = frozenset({"train", "training"})
_TEST_TOKENS = frozenset({"test", "testing", "t10k"})
_SPLIT_DIRS = {"train": ("train", "training"), "test": ("test", "testing")}

# IDX dtype codes (third byte of the magic number) and their big-endian dtypes.
_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_IDX_CODES: dict[str, int] = {
    "u1": 0x08,
    "i1": 0x09,
    "i2": 0x0B,
    "i4": 0x0C,
    "f4": 0x0D,
    "f8": 0x0E,
}
_IDX_IMAGES_MAGIC = 0x00000803
_IDX_LABELS_MAGIC = 0x00000801
_IDX_NAME_RE = re.compile(r"(?:idx([1-4])-ubyte|\.idx([1-4]))$", re.IGNORECASE)

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

_SUPPORTED = (
    "expected a .npz, .csv, IDX (*-images-idx3-ubyte[.gz] with *-labels-idx1-ubyte[.gz]), "
    "an MNIST-M labels .txt, a .zip of an ImageFolder or MNIST-M folder, or a directory"
)

_T = TypeVar("_T")
PathLike = str | os.PathLike[str]


# ============================================================== public API
def load_path(
    path: PathLike,
    *,
    split: Split = "train",
    kind: Kind | None = "auto",
    name: str | None = None,
    label_column: str | None = None,
) -> LabeledDataset:
    """Load a labelled dataset from a file or directory on disk.

    Parameters
    ----------
    path
        A file (``.npz``, ``.csv``, IDX images or labels file, MNIST-M labels
        ``.txt``, ``.zip``) or a directory (ImageFolder root, MNIST-M folder,
        folder holding IDX pairs, or one with ``train/`` and ``test/``
        sub-folders of one of these).
    split
        Which split to read where the input holds both (IDX folders, MNIST-M,
        Keras-style npz, ``train/``/``test/`` sub-folders); ignored otherwise.
    kind
        ``"auto"`` (or ``None``) detects the format from names and contents;
        any other value forces that format.
    name
        Display name of the dataset; by default derived from the path
        (``"emnist-letters"`` for ``emnist-letters-train-images-idx3-ubyte``,
        the folder name for an ImageFolder, the file stem otherwise).
    label_column
        CSV only: the label column; by default the first column named one of
        :data:`LABEL_COLUMN_NAMES` (case-insensitive), else the last column.

    Returns
    -------
    LabeledDataset
        ``features`` ``(N, D)`` float32 (pixels in ``[0, 1]``, ``D = C*H*W``
        for images), ``labels`` ``(N,)`` in ``0..C-1``, ``source=str(path)``.

    Raises
    ------
    DatasetError
        The path does not exist, or the data is not a usable labelled dataset
        (empty, one class, NaN/inf features).
    DatasetFormatError
        The format is unknown or the file is truncated, corrupt or inconsistent.
    """
    split = _check_split(split)
    kind = _check_kind(kind)
    p = Path(path)
    if not p.exists():
        raise DatasetError("path does not exist", p)
    source = str(p)
    if p.is_file() and _file_kind(p.name) == "zip":
        return _load_zip(
            p, label=source, split=split, kind=kind, name=name, label_column=label_column
        )
    if kind == "auto":
        if p.is_dir():
            return _load_dir_auto(
                p, split=split, name=name, label_column=label_column, source=source
            )
        detected = _file_kind(p.name)
        if detected is None or detected == "zip":
            raise DatasetFormatError(f"unsupported file type {_suffix(p.name)!r}: {_SUPPORTED}", p)
        kind = detected
    return _load_kind(p, kind, split=split, name=name, label_column=label_column, source=source)


def load_upload(
    data: bytes,
    filename: str,
    *,
    split: Split = "train",
    name: str | None = None,
    label_column: str | None = None,
) -> LabeledDataset:
    """Load a labelled dataset from the bytes of an uploaded file.

    Parameters
    ----------
    data
        The file contents.
    filename
        The upload's name; its extension selects the format (``.npz``,
        ``.csv``/``.csv.gz``, ``.zip`` of an ImageFolder or MNIST-M folder,
        possibly nested one folder deep) and it names the source in errors.
    split, name, label_column
        As in :func:`load_path`; ``name`` defaults to the file stem.

    Returns
    -------
    LabeledDataset
        With ``source=filename``.

    Raises
    ------
    DatasetError, DatasetFormatError
        As :func:`load_path`; also for an IDX file (use
        :func:`load_upload_pair`) and unsafe or oversized zip archives.
    """
    split = _check_split(split)
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DatasetError(f"upload data must be bytes, got {type(data).__name__}", filename)
    data = bytes(data)
    label = str(filename)
    kind = _file_kind(Path(label).name)
    default_name = name or _strip_ext(Path(label).name)
    if kind == "npz":
        return _load_npz(io.BytesIO(data), split=split, name=default_name, source=label)
    if kind == "csv":
        return _load_csv(data, name=default_name, label_column=label_column, source=label)
    if kind == "zip":
        return _load_zip(
            io.BytesIO(data),
            label=label,
            split=split,
            kind="auto",
            name=name,
            label_column=label_column,
        )
    if kind == "idx":
        raise DatasetFormatError(
            "an IDX file holds only the images or only the labels: upload the images file "
            "and the labels file together (load_upload_pair)",
            label,
        )
    if kind == "mnistm":
        raise DatasetFormatError(
            "an MNIST-M labels file needs its image folder: upload a .zip of the folder "
            "holding both the labels .txt and the images",
            label,
        )
    raise DatasetFormatError(
        f"unsupported file type {_suffix(label)!r}: expected .npz, .csv, or a .zip of an "
        "ImageFolder / MNIST-M folder (IDX pairs: load_upload_pair)",
        label,
    )


def load_upload_pair(
    images: bytes,
    labels: bytes,
    images_name: str,
    labels_name: str,
    *,
    name: str | None = None,
) -> LabeledDataset:
    """Load an uploaded IDX pair (each plain or gzipped).

    Parameters
    ----------
    images, labels
        Contents of the images file (``(N, H, W)`` IDX, magic ``0x00000803``
        for uint8) and of the labels file (``(N,)``, magic ``0x00000801``).
        If they are given the other way round (the "images" decode to one
        dimension and the "labels" to several) they are swapped.
    images_name, labels_name
        Upload names, used in messages; the dataset's source is ``images_name``.
    name
        Display name; defaults to the images name without split and IDX parts.

    Returns
    -------
    LabeledDataset
        Images scaled to ``[0, 1]`` with ``image_shape=(1, H, W)``.
    """
    img_arr, img_magic = _decode_idx_bytes(_maybe_gunzip(bytes(images), images_name), images_name)
    lab_arr, lab_magic = _decode_idx_bytes(_maybe_gunzip(bytes(labels), labels_name), labels_name)
    if img_arr.ndim == 1 and lab_arr.ndim > 1:
        img_arr, lab_arr = lab_arr, img_arr
        img_magic, lab_magic = lab_magic, img_magic
        images_name, labels_name = labels_name, images_name
    return _idx_dataset(
        img_arr,
        img_magic,
        lab_arr,
        lab_magic,
        images_src=images_name,
        labels_src=labels_name,
        name=name or _idx_name(Path(images_name).name, None),
        source=images_name,
    )


def read_idx(path: PathLike) -> np.ndarray:
    """Read one IDX file (plain or gzipped) into an array of its shape and dtype.

    Parameters
    ----------
    path
        The file.

    Returns
    -------
    numpy.ndarray
        Shape as stored (``(N, H, W)`` images, ``(N,)`` labels), native byte
        order, dtype one of uint8, int8, int16, int32, float32, float64.
    """
    p = Path(path)
    arr, _ = _decode_idx_bytes(_read_bytes(p), p)
    return arr if arr.flags.writeable else arr.copy()


def decode_idx(data: bytes, source: str = "<bytes>") -> np.ndarray:
    """Decode IDX bytes (plain or gzipped); see :func:`read_idx`.

    Parameters
    ----------
    data
        File contents.
    source
        Name used in error messages.
    """
    arr, _ = _decode_idx_bytes(_maybe_gunzip(bytes(data), source), source)
    return arr if arr.flags.writeable else arr.copy()


def encode_idx(array: np.ndarray) -> bytes:
    """Encode an array as IDX bytes (big-endian, uncompressed).

    Parameters
    ----------
    array
        ``(d_1, ..., d_k)`` array, ``1 <= k <= 255``, of dtype uint8, int8,
        int16, int32, float32 or float64.

    Returns
    -------
    bytes
        Magic ``0x0000TTkk`` (``TT`` the dtype code), ``k`` big-endian uint32
        sizes, then the values in C order.
    """
    arr = np.asarray(array)
    key = f"{arr.dtype.kind}{arr.dtype.itemsize}"
    if key not in _IDX_CODES:
        raise ExportError(
            f"IDX cannot store dtype {arr.dtype}; use uint8, int8, int16, int32, float32 or float64"
        )
    if not 1 <= arr.ndim <= 255:
        raise ExportError(f"IDX needs 1 to 255 dimensions, got {arr.ndim}")
    if any(s >= 2**32 for s in arr.shape):
        raise ExportError(f"IDX dimension sizes must be below 2**32, got {arr.shape}")
    code = _IDX_CODES[key]
    header = bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return header + np.ascontiguousarray(arr, dtype=_IDX_DTYPES[code]).tobytes()


def save_idx(path: PathLike, array: np.ndarray, *, overwrite: bool = False) -> Path:
    """Write an array as an IDX file, gzipped when ``path`` ends in ``.gz``.

    Parameters
    ----------
    path
        Target file, e.g. ``train-images-idx3-ubyte.gz``.
    array
        See :func:`encode_idx`: ``(N, H, W)`` uint8 images or ``(N,)`` uint8 labels
        give the standard MNIST magic numbers ``0x00000803`` / ``0x00000801``.
    overwrite
        Replace an existing file; by default that raises :class:`ExportError`.

    Returns
    -------
    pathlib.Path
        The written path.
    """
    p = Path(path)
    if p.exists() and not overwrite:
        raise ExportError(f"{p}: file exists (pass overwrite=True to replace it)")
    payload = encode_idx(array)
    if p.name.lower().endswith(".gz"):
        payload = gzip.compress(payload, mtime=0)
    p.write_bytes(payload)
    return p


# ============================================================== dispatch
def _check_split(split: str) -> Split:
    if split not in get_args(Split):
        raise DatasetError(f"split must be 'train' or 'test', got {split!r}")
    return split  # type: ignore[return-value]


def _check_kind(kind: str | None) -> Kind:
    if kind is None:
        return "auto"
    if kind not in get_args(Kind):
        raise DatasetError(f"kind must be one of {', '.join(get_args(Kind))}, got {kind!r}")
    return kind  # type: ignore[return-value]


def _suffix(filename: str) -> str:
    suffixes = PurePosixPath(filename.replace("\\", "/")).suffixes
    return (
        "".join(suffixes[-2:])
        if suffixes and suffixes[-1].lower() == ".gz"
        else "".join(suffixes[-1:])
    )


def _strip_ext(filename: str) -> str:
    low = filename.lower()
    for ext in (".csv.gz", ".npz", ".csv", ".zip", ".txt", ".gz"):
        if low.endswith(ext):
            return filename[: -len(ext)] or filename
    return filename


def _file_kind(filename: str) -> str | None:
    """Format of a file from its name: npz, csv, zip, idx, mnistm (labels .txt) or None."""
    low = filename.lower()
    if low.endswith(".npz"):
        return "npz"
    if low.endswith((".csv", ".csv.gz")):
        return "csv"
    if low.endswith(".zip"):
        return "zip"
    if low.endswith(".txt"):
        return "mnistm"
    base = low[:-3] if low.endswith(".gz") else low
    if _IDX_NAME_RE.search(base):
        return "idx"
    return None


def _load_kind(
    p: Path, kind: Kind, *, split: Split, name: str | None, label_column: str | None, source: str
) -> LabeledDataset:
    if kind == "idx":
        return _load_idx_path(p, split=split, name=name, source=source)
    if kind == "mnistm":
        return _load_mnistm_path(p, split=split, name=name, source=source)
    if kind == "imagefolder":
        if not p.is_dir():
            raise DatasetFormatError("an ImageFolder must be a directory of class sub-folders", p)
        root = p
        if not _image_class_dirs(p) and (sub := _split_subdir(p, split)) is not None:
            root = sub
        return _load_imagefolder(root, name=name or _dir_name(p), source=source)
    if p.is_dir():
        raise DatasetFormatError(f"expected a {kind} file, got a directory", p)
    if kind == "npz":
        with _open_file(p) as fh:
            return _load_npz(fh, split=split, name=name or _strip_ext(p.name), source=source)
    if kind == "csv":
        return _load_csv(
            _read_raw(p),
            name=name or _strip_ext(p.name),
            label_column=label_column,
            source=source,
        )
    raise AssertionError(kind)  # pragma: no cover - _check_kind guards


def _load_dir_auto(
    d: Path, *, split: Split, name: str | None, label_column: str | None, source: str
) -> LabeledDataset:
    kind = _detect_dir(d)
    if kind is not None:
        return _load_kind(d, kind, split=split, name=name, label_column=label_column, source=source)
    # root/train/<dataset>, root/test/<dataset>; torchvision's root/raw/<IDX files>
    for sub in (_split_subdir(d, split), d / "raw"):
        if sub is not None and sub.is_dir() and _detect_dir(sub) is not None:
            return _load_dir_auto(
                sub,
                split=split,
                name=name or _dir_name(d),
                label_column=label_column,
                source=source,
            )
    singles = [f for f in _visible(d) if f.is_file() and _file_kind(f.name) in ("npz", "csv")]
    if len(singles) == 1:
        f = singles[0]
        single_kind: Kind = "npz" if _file_kind(f.name) == "npz" else "csv"
        return _load_kind(
            f, single_kind, split=split, name=name, label_column=label_column, source=source
        )
    raise DatasetFormatError(
        "cannot tell the dataset format of this directory: expected class sub-folders of images "
        "(ImageFolder), an IDX images/labels pair, an MNIST-M labels .txt next to its image "
        "folder, or train/ and test/ (or torchvision's raw/) sub-folders of one of these",
        d,
    )


def _detect_dir(d: Path) -> Kind | None:
    if _mnistm_sibling_labels(d) is not None or _mnistm_pairs(d):
        return "mnistm"
    if _idx_files(d):
        return "idx"
    if _image_class_dirs(d):
        return "imagefolder"
    return None


def _hidden(name: str) -> bool:
    return name.startswith(".") or name == "__MACOSX"


def _visible(d: Path) -> list[Path]:
    try:
        return sorted(p for p in d.iterdir() if not _hidden(p.name))
    except OSError as exc:
        raise DatasetError(f"cannot list directory: {exc.strerror or exc}", d) from exc


def _is_image_name(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS) and not _hidden(name)


def _image_class_dirs(d: Path) -> list[Path]:
    """Sub-folders of ``d`` that directly contain at least one image file."""
    out = []
    for sub in _visible(d):
        if sub.is_dir():
            try:
                with os.scandir(sub) as it:
                    if any(e.is_file() and _is_image_name(e.name) for e in it):
                        out.append(sub)
            except OSError:
                continue
    return out


def _split_subdir(d: Path, split: Split) -> Path | None:
    for cand in _SPLIT_DIRS[split]:
        for sub in _visible(d):
            if sub.is_dir() and sub.name.lower() == cand:
                return sub
    return None


def _dir_name(d: Path) -> str:
    d = d.resolve() if d.name in ("", ".", "..") else d
    if d.name.lower() == "raw" and d.parent.name:
        return d.parent.name
    return d.name or "dataset"


def _tokens(name: str) -> set[str]:
    return set(re.split(r"[^a-z0-9]+", name.lower()))


def _pick_by_split(
    items: Sequence[_T], names: Sequence[str], split: Split, what: str, where: Path
) -> _T:
    """The one item whose name says ``split``; else the only one naming no split."""
    want, other = (
        (_TRAIN_TOKENS, _TEST_TOKENS) if split == "train" else (_TEST_TOKENS, _TRAIN_TOKENS)
    )
    hits = [i for i, n in zip(items, names, strict=True) if _tokens(n) & want]
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        raise DatasetFormatError(f"several {what} for split {split!r}: {sorted(names)}", where)
    neutral = [i for i, n in zip(items, names, strict=True) if not _tokens(n) & (want | other)]
    if len(neutral) == 1:
        return neutral[0]
    raise DatasetFormatError(f"no {what} for split {split!r} (found {sorted(names)})", where)


# ============================================================== byte helpers
def _read_raw(p: Path) -> bytes:
    try:
        return p.read_bytes()
    except OSError as exc:
        raise DatasetError(f"cannot read file: {exc.strerror or exc}", p) from exc


def _read_bytes(p: Path) -> bytes:
    """File contents, gunzipped when gzip data (see :func:`_maybe_gunzip`)."""
    return _maybe_gunzip(_read_raw(p), p)


@contextmanager
def _open_file(p: Path) -> Iterator[IO[bytes]]:
    try:
        fh = open(p, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise DatasetError(f"cannot read file: {exc.strerror or exc}", p) from exc
    with fh:
        yield fh


def _maybe_gunzip(raw: bytes, source: str | Path) -> bytes:
    """Decompress gzip data (by magic bytes or a ``.gz`` name), else return as is."""
    named_gz = str(source).lower().endswith(".gz")
    if raw[:2] != b"\x1f\x8b":
        if named_gz:
            raise DatasetFormatError("named .gz but is not gzip data (bad gzip header)", source)
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetFormatError(f"corrupt or truncated gzip data ({exc})", source) from exc


# ============================================================== IDX
def _decode_idx_bytes(data: bytes, source: str | Path) -> tuple[np.ndarray, int]:
    """Parse IDX bytes; returns the array (native byte order) and the magic number."""
    if len(data) < 4:
        raise DatasetFormatError(
            f"truncated IDX file: {len(data)} bytes, the magic number alone needs 4", source
        )
    z0, z1, code, ndim = data[0], data[1], data[2], data[3]
    magic = int.from_bytes(data[:4], "big")
    if z0 != 0 or z1 != 0 or code not in _IDX_DTYPES or ndim == 0:
        raise DatasetFormatError(
            f"not an IDX file: wrong magic number 0x{magic:08X} (expected 0x{_IDX_IMAGES_MAGIC:08X} "
            f"for images or 0x{_IDX_LABELS_MAGIC:08X} for labels; dtype codes 0x08, 0x09, 0x0B-0x0E)",
            source,
        )
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DatasetFormatError(
            f"truncated IDX file: header declares {ndim} dimensions ({header} bytes) but the file "
            f"has {len(data)} bytes",
            source,
        )
    dims = struct.unpack(f">{ndim}I", data[4:header])
    dtype = _IDX_DTYPES[code]
    count = 1
    for s in dims:
        count *= s
    need = count * dtype.itemsize
    have = len(data) - header
    if have < need:
        raise DatasetFormatError(
            f"truncated IDX file: dimensions {dims} need {need} bytes of {dtype.name} data "
            f"but only {have} follow the header",
            source,
        )
    if have > need:
        raise DatasetFormatError(
            f"corrupt IDX file: {have - need} unexpected bytes after the {need} bytes of data "
            f"declared by dimensions {dims}",
            source,
        )
    arr = np.frombuffer(data, dtype=dtype, count=count, offset=header).reshape(dims)
    return arr.astype(dtype.newbyteorder("="), copy=False), magic


def _idx_dataset(
    img_arr: np.ndarray,
    img_magic: int,
    lab_arr: np.ndarray,
    lab_magic: int,
    *,
    images_src: str | Path,
    labels_src: str | Path,
    name: str,
    source: str,
) -> LabeledDataset:
    if img_arr.ndim < 2:
        raise DatasetFormatError(
            f"expected an IDX images file (magic 0x{_IDX_IMAGES_MAGIC:08X}: 3 dimensions) but found "
            f"magic 0x{img_magic:08X} ({img_arr.ndim} dimension) — is this the labels file?",
            images_src,
        )
    if lab_arr.ndim != 1:
        raise DatasetFormatError(
            f"expected an IDX labels file (magic 0x{_IDX_LABELS_MAGIC:08X}: 1 dimension) but found "
            f"magic 0x{lab_magic:08X} ({lab_arr.ndim} dimensions) — is this an images file?",
            labels_src,
        )
    if img_arr.shape[0] != lab_arr.shape[0]:
        raise DatasetFormatError(
            f"{Path(str(images_src)).name} holds {img_arr.shape[0]} images but "
            f"{Path(str(labels_src)).name} holds {lab_arr.shape[0]} labels: counts must match",
            images_src,
        )
    features, shape = _features_from_array(img_arr, images_src, what="images")
    codes, classes = _encode_labels(lab_arr, labels_src)
    return _make(features, codes, classes, name=name, image_shape=shape, source=source)


def _idx_role(filename: str) -> Literal["images", "labels"] | None:
    base = filename.lower()
    base = base[:-3] if base.endswith(".gz") else base
    m = _IDX_NAME_RE.search(base)
    if m is None:
        return None
    return "labels" if (m.group(1) or m.group(2)) == "1" else "images"


def _idx_key(filename: str) -> str:
    base = filename.lower()
    base = base[:-3] if base.endswith(".gz") else base
    base = re.sub(r"images?|labels?", "*", base)
    return re.sub(r"idx[1-4]", "idx", base)


def _idx_files(d: Path) -> list[Path]:
    return [f for f in _visible(d) if f.is_file() and _idx_role(f.name) is not None]


def _idx_pairs(d: Path) -> dict[str, dict[str, Path]]:
    """Complete images/labels pairs in ``d`` keyed by their common name pattern."""
    groups: dict[str, dict[str, list[Path]]] = {}
    for f in _idx_files(d):
        role = _idx_role(f.name)
        groups.setdefault(_idx_key(f.name), {}).setdefault(role, []).append(f)  # type: ignore[arg-type]
    pairs = {}
    for key, roles in groups.items():
        if "images" in roles and "labels" in roles:
            # prefer the uncompressed copy when both exist
            pick = {
                r: sorted(fs, key=lambda f: f.name.lower().endswith(".gz"))[0]
                for r, fs in roles.items()
            }
            pairs[key] = pick
    return pairs


def _load_idx_path(p: Path, *, split: Split, name: str | None, source: str) -> LabeledDataset:
    if p.is_dir():
        pairs = _idx_pairs(p)
        if not pairs:
            raise DatasetFormatError(
                "no IDX images/labels pair found (expected e.g. train-images-idx3-ubyte[.gz] "
                "with train-labels-idx1-ubyte[.gz])",
                p,
            )
        keys = sorted(pairs)
        key = _pick_by_split(keys, keys, split, "IDX pairs", p)
        images, labels = pairs[key]["images"], pairs[key]["labels"]
        default_name = _idx_name(images.name, p)
    else:
        role = _idx_role(p.name)
        if role is None:  # forced kind="idx" on an unusual name: decode to tell
            arr, _ = _decode_idx_bytes(_read_bytes(p), p)
            role = "labels" if arr.ndim == 1 else "images"
        partner = _idx_partner(p, role)
        images, labels = (p, partner) if role == "images" else (partner, p)
        default_name = _idx_name(images.name, p.parent)
    img_arr, img_magic = _decode_idx_bytes(_read_bytes(images), images)
    lab_arr, lab_magic = _decode_idx_bytes(_read_bytes(labels), labels)
    return _idx_dataset(
        img_arr,
        img_magic,
        lab_arr,
        lab_magic,
        images_src=images,
        labels_src=labels,
        name=name or default_name,
        source=source,
    )


def _idx_partner(p: Path, role: Literal["images", "labels"]) -> Path:
    key = _idx_key(p.name)
    want = "labels" if role == "images" else "images"
    cands = [
        f for f in _idx_files(p.parent) if _idx_role(f.name) == want and _idx_key(f.name) == key
    ]
    if not cands:
        base = p.name[:-3] if p.name.lower().endswith(".gz") else p.name
        if role == "images":
            expect = re.sub(
                r"idx[34]", "idx1", re.sub(r"images", "labels", base, flags=re.I), flags=re.I
            )
        else:
            expect = re.sub(
                r"idx1", "idx3", re.sub(r"labels", "images", base, flags=re.I), flags=re.I
            )
        raise DatasetFormatError(
            f"no matching IDX {want} file next to it (looked for {expect}[.gz] in {p.parent})", p
        )
    same_gz = [f for f in cands if f.name.lower().endswith(".gz") == p.name.lower().endswith(".gz")]
    return (same_gz or cands)[0]


def _idx_name(images_name: str, folder: Path | None) -> str:
    base = images_name[:-3] if images_name.lower().endswith(".gz") else images_name
    stem = re.sub(
        r"[-_.]?(?:train|training|t10k|test|testing)?[-_.]?images?[-_.]idx[2-4][-_.]ubyte$|\.idx[2-4]$",
        "",
        base,
        flags=re.I,
    ).strip("-_.")
    if stem:
        return stem
    return _dir_name(folder) if folder is not None else "idx"


# ============================================================== arrays -> dataset
def _make(
    features: np.ndarray,
    codes: np.ndarray,
    classes: tuple[str, ...],
    *,
    name: str,
    image_shape: ImageShape | None,
    source: str,
) -> LabeledDataset:
    present = np.unique(codes)
    if present.size == 1:
        raise DatasetError(
            f"only one class ({classes[int(present[0])]!r}) occurs; a labelled dataset for OT "
            "needs at least 2",
            source,
        )
    return LabeledDataset(
        features=features,
        labels=codes,
        classes=classes,
        name=name,
        image_shape=image_shape,
        source=source,
    )


def _features_from_array(
    arr: np.ndarray, source: str | Path, *, what: str = "features"
) -> tuple[np.ndarray, ImageShape | None]:
    """``(N, ...)`` array -> ``(N, D)`` float32 features and the image shape.

    1-D and 2-D arrays are vector features, cast to float32 unchanged;
    ``(N, H, W)``, ``(N, H, W, C)`` and ``(N, C, H, W)`` arrays (``C <= 4``)
    are images, scaled to ``[0, 1]`` by :func:`_scale_pixels`.
    """
    arr = np.asarray(arr)
    if arr.dtype.kind not in "biuf":
        raise DatasetFormatError(f"{what} must be numbers, got dtype {arr.dtype}", source)
    if arr.ndim == 0:
        raise DatasetFormatError(f"{what} is a scalar, expected an (N, ...) array", source)
    n = arr.shape[0]
    if n == 0:
        raise DatasetError("dataset is empty (0 samples)", source)
    if arr.ndim <= 2:
        return arr.reshape(n, -1).astype(np.float32), None
    if arr.ndim == 3:
        imgs = arr[:, None]
    elif arr.ndim == 4:
        first, last = arr.shape[1], arr.shape[3]
        if last <= 4:  # (N, H, W, C): the NumPy / PIL / Keras convention, also when ambiguous
            imgs = np.ascontiguousarray(arr.transpose(0, 3, 1, 2))
        elif first <= 4:  # (N, C, H, W)
            imgs = arr
        else:
            raise DatasetFormatError(
                f"cannot tell the channel axis of {what} with shape {arr.shape}: expected "
                "(N, H, W), (N, H, W, C) or (N, C, H, W) with C <= 4",
                source,
            )
    else:
        raise DatasetFormatError(
            f"{what} has {arr.ndim} dimensions {arr.shape}; expected (N, D), (N, H, W), "
            "(N, H, W, C) or (N, C, H, W)",
            source,
        )
    imgs = _scale_pixels(imgs, source, what=what)
    shape = (int(imgs.shape[1]), int(imgs.shape[2]), int(imgs.shape[3]))
    return imgs.reshape(n, -1), shape


def _scale_pixels(arr: np.ndarray, source: str | Path, *, what: str = "images") -> np.ndarray:
    """Pixel array -> float32 in ``[0, 1]``.

    uint8 (and other integer arrays within 0..255) are divided by 255, uint16
    by 65535; floats within ``[0, 1]`` are kept, floats within ``[0, 255]`` are
    read as 8-bit intensities and divided by 255. Anything else is refused.
    """
    kind = arr.dtype.kind
    if kind == "b":
        return arr.astype(np.float32)
    if arr.size == 0:
        return arr.astype(np.float32)
    if kind in "iu":
        if arr.dtype == np.uint16:
            return arr.astype(np.float32) / np.float32(65535)
        lo, hi = int(arr.min()), int(arr.max())
        if lo >= 0 and hi <= 255:
            return arr.astype(np.float32) / np.float32(255)
        raise DatasetFormatError(
            f"{what}: integer pixel values range {lo}..{hi}; expected 0..255 (or a uint16 array)",
            source,
        )
    finite = np.isfinite(arr)
    if not finite.all():
        bad = int((~finite).reshape(arr.shape[0], -1).any(axis=1).sum())
        raise DatasetError(f"{what} contain NaN or infinite values in {bad} sample(s)", source)
    lo_f, hi_f = float(arr.min()), float(arr.max())
    if lo_f >= 0.0 and hi_f <= 1.0:
        return arr.astype(np.float32)
    if lo_f >= 0.0 and hi_f <= 255.0:
        return arr.astype(np.float32) / np.float32(255)
    raise DatasetFormatError(
        f"{what}: image-shaped float values range [{lo_f:g}, {hi_f:g}]; expected pixels in [0, 1] "
        "or [0, 255] (store arbitrary features as a 2-D (N, D) array)",
        source,
    )


def _encode_labels(
    raw: Any, source: str | Path, class_names: Sequence[str] | None = None
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Labels of any integer/string/one-hot form -> ``(N,)`` int64 codes and class names.

    Without ``class_names`` the sorted unique values become classes
    ``0..C-1`` named by their string form. With ``class_names`` integer labels
    must already lie in ``0..len(class_names)-1`` and string labels must be
    among the names.
    """
    arr = np.asarray(raw)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim == 2:
        return _decode_one_hot(arr, source, class_names)
    if arr.ndim != 1:
        raise DatasetFormatError(
            f"labels must be a 1-D array or a one-hot matrix, got shape {arr.shape}", source
        )
    kind = arr.dtype.kind
    if kind == "b":
        arr = arr.astype(np.int64)
        kind = "i"
    if kind == "f":
        finite = np.isfinite(arr)
        if not finite.all():
            i = int(np.flatnonzero(~finite)[0])
            raise DatasetFormatError(
                f"labels contain missing/NaN or infinite values (first at index {i})", source
            )
        frac = arr != np.round(arr)
        if frac.any():
            i = int(np.flatnonzero(frac)[0])
            raise DatasetFormatError(
                f"labels must be integers or strings; found non-integer value {arr[i].item()!r} at index {i}",
                source,
            )
        arr = arr.astype(np.int64)
        kind = "i"
    if kind in "iu":
        values = arr.astype(np.int64)
        if class_names is not None:
            names = tuple(str(c) for c in class_names)
            if values.size and (values.min() < 0 or values.max() >= len(names)):
                raise DatasetFormatError(
                    f"labels range {values.min()}..{values.max()} but {len(names)} class names are given",
                    source,
                )
            return values, names
        uniq, codes = np.unique(values, return_inverse=True)
        return codes.astype(np.int64).reshape(-1), tuple(str(int(u)) for u in uniq)
    if kind in "USO":
        strs = np.array([_label_str(v, source) for v in arr.tolist()], dtype=object)
        if class_names is not None:
            names = tuple(str(c) for c in class_names)
            index = {c: i for i, c in enumerate(names)}
            missing = sorted({s for s in strs if s not in index})
            if missing:
                raise DatasetFormatError(
                    f"labels {missing[:5]} are not among the class names {list(names)}", source
                )
            return np.array([index[s] for s in strs], dtype=np.int64), names
        uniq, codes = np.unique(strs.astype(str), return_inverse=True)
        return codes.astype(np.int64).reshape(-1), tuple(str(u) for u in uniq)
    raise DatasetFormatError(f"labels must be integers or strings, got dtype {arr.dtype}", source)


def _label_str(value: Any, source: str | Path) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        raise DatasetFormatError("labels contain missing values", source)
    return str(value)


def _decode_one_hot(
    arr: np.ndarray, source: str | Path, class_names: Sequence[str] | None
) -> tuple[np.ndarray, tuple[str, ...]]:
    if arr.dtype.kind not in "biuf":
        raise DatasetFormatError(
            f"2-D labels must be a numeric one-hot matrix, got dtype {arr.dtype}", source
        )
    ok = bool(np.isin(arr, (0, 1)).all()) and bool((arr.sum(axis=1) == 1).all())
    if not ok:
        raise DatasetFormatError(
            f"labels have shape {arr.shape} but are not one-hot (each row must be 0s and a single 1)",
            source,
        )
    n_cls = arr.shape[1]
    if class_names is not None and len(class_names) != n_cls:
        raise DatasetFormatError(
            f"one-hot labels have {n_cls} columns but {len(class_names)} class names are given",
            source,
        )
    names = (
        tuple(str(c) for c in class_names)
        if class_names is not None
        else tuple(str(i) for i in range(n_cls))
    )
    return arr.argmax(axis=1).astype(np.int64), names


# ============================================================== npz
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


# ============================================================== CSV
def _load_csv(data: bytes, *, name: str, label_column: str | None, source: str) -> LabeledDataset:
    import pandas as pd

    data = _maybe_gunzip(data, source)
    if not data.strip():
        raise DatasetError("dataset is empty (the CSV file has no content)", source)
    try:
        df = pd.read_csv(io.BytesIO(data), low_memory=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
        raise DatasetFormatError(f"cannot parse CSV ({exc})", source) from exc
    columns = [str(c) for c in df.columns]
    df.columns = columns
    if label_column is not None:
        if label_column not in columns:
            raise DatasetFormatError(
                f"label column {label_column!r} not found (columns: {columns})", source
            )
        lab_col = label_column
    else:
        lowered = {c.lower(): c for c in reversed(columns)}
        lab_col = next((lowered[n] for n in LABEL_COLUMN_NAMES if n in lowered), columns[-1])
    feat_cols = [c for c in columns if c != lab_col]
    if not feat_cols:
        raise DatasetFormatError(f"no feature columns besides the label column {lab_col!r}", source)
    if len(df) == 0:
        raise DatasetError("dataset is empty (the CSV has a header but no rows)", source)
    for c in feat_cols:
        col = df[c]
        if not pd.api.types.is_numeric_dtype(col) or pd.api.types.is_complex_dtype(col):
            bad = pd.to_numeric(col, errors="coerce").isna() & col.notna()
            row = int(np.flatnonzero(bad.to_numpy())[0]) if bad.any() else 0
            raise DatasetFormatError(
                f"column {c!r} is not numeric (e.g. {col.iloc[row]!r} on line {row + 2}); every "
                f"column except the label column {lab_col!r} must hold numbers",
                source,
            )
    features = df[feat_cols].to_numpy(dtype=np.float64)
    finite = np.isfinite(features)
    if not finite.all():
        r, c = (int(v[0]) for v in np.nonzero(~finite))
        what = "missing or NaN" if np.isnan(features[r, c]) else "infinite"
        n_bad = int((~finite).any(axis=1).sum())
        raise DatasetError(
            f"features contain NaN or infinite values in {n_bad} sample(s): {what} value in column "
            f"{feat_cols[c]!r} on line {r + 2}",
            source,
        )
    labels = df[lab_col]
    if labels.isna().any():
        r = int(np.flatnonzero(labels.isna().to_numpy())[0])
        raise DatasetFormatError(f"label column {lab_col!r} is empty on line {r + 2}", source)
    raw = labels.to_numpy()
    if raw.dtype == object:
        raw = np.array([str(v) for v in raw], dtype=str)
    codes, classes = _encode_labels(raw, source)
    return _make(
        features.astype(np.float32), codes, classes, name=name, image_shape=None, source=source
    )


# ============================================================== images
def _read_image(f: Path, root: Path) -> np.ndarray:
    """One image -> ``(H, W)`` (grey) or ``(H, W, 3)`` array, uint8 or float32 in [0, 1]."""
    from PIL import Image

    try:
        with Image.open(f) as im:
            im.load()
            mode = im.mode
            if mode == "L":
                return np.array(im, dtype=np.uint8)
            if mode in ("1", "LA", "La"):
                return np.array(im.convert("L"), dtype=np.uint8)
            if mode.startswith("I;16"):
                return np.array(im, dtype=np.float32) / np.float32(65535)
            if mode in ("I", "F"):
                arr = np.array(im, dtype=np.float64)
                hi = 65535.0 if mode == "I" else 1.0
                if not np.isfinite(arr).all() or arr.min() < 0 or arr.max() > hi:
                    raise DatasetFormatError(
                        f"{mode}-mode pixel values outside [0, {hi:g}] are not supported", f
                    )
                return (arr / hi).astype(np.float32)
            if mode in ("P", "PA"):
                rgb = np.array(im.convert("RGBA").convert("RGB"), dtype=np.uint8)
                if (rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all():
                    return np.ascontiguousarray(rgb[..., 0])  # grey palette
                return rgb
            if mode == "RGB":
                return np.array(im, dtype=np.uint8)
            return np.array(im.convert("RGB"), dtype=np.uint8)
    except DatasetFormatError:
        raise
    except MemoryError:
        raise
    except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError, zlib.error...
        raise DatasetFormatError(f"cannot read image {_rel(f, root)} ({exc})", f) from exc


def _rel(f: Path, root: Path) -> str:
    try:
        return f.relative_to(root).as_posix()
    except ValueError:
        return str(f)


def _read_images(files: Sequence[Path], root: Path) -> tuple[np.ndarray, ImageShape]:
    """Images of one size -> ``(N, C*H*W)`` float32 in [0, 1] and ``(C, H, W)``.

    Greyscale images give ``C = 1``; if any image has colour, every image is
    read as RGB (``C = 3``, grey replicated).
    """
    arrays: list[np.ndarray] = []
    sizes: dict[tuple[int, int], Path] = {}
    for f in files:
        a = _read_image(f, root)
        sizes.setdefault((int(a.shape[1]), int(a.shape[0])), f)
        arrays.append(a)
    if len(sizes) > 1:
        listing = ", ".join(
            f"{w}x{h} (e.g. {_rel(f, root)})" for (w, h), f in sorted(sizes.items())
        )
        raise DatasetFormatError(
            f"images have different sizes: {listing}; resize them to one size first", root
        )
    if any(a.ndim == 3 for a in arrays):
        arrays = [np.repeat(a[..., None], 3, axis=2) if a.ndim == 2 else a for a in arrays]
    if any(a.dtype != np.uint8 for a in arrays):
        arrays = [
            a.astype(np.float32) / np.float32(255) if a.dtype == np.uint8 else a for a in arrays
        ]
        stack = np.stack(arrays)
    else:
        stack = np.stack(arrays).astype(np.float32) / np.float32(255)
    # (N, H, W) grey or (N, H, W, 3) colour -> (N, C, H, W)
    stack = stack[:, None] if stack.ndim == 3 else np.ascontiguousarray(stack.transpose(0, 3, 1, 2))
    shape = (int(stack.shape[1]), int(stack.shape[2]), int(stack.shape[3]))
    return stack.reshape(stack.shape[0], -1), shape


def _load_imagefolder(root: Path, *, name: str, source: str) -> LabeledDataset:
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not _hidden(e.name))
    if not classes:
        raise DatasetFormatError(
            "no class sub-folders found: an ImageFolder is <root>/<class name>/<image files>", root
        )
    files: list[Path] = []
    codes: list[int] = []
    empty: list[str] = []
    for ci, cname in enumerate(classes):
        cdir = root / cname
        n_before = len(files)
        for dirpath, _, fnames in sorted(os.walk(cdir, followlinks=True)):
            rel_parts = Path(dirpath).relative_to(cdir).parts
            if any(_hidden(part) for part in rel_parts):
                continue
            for fname in sorted(fnames):
                if _is_image_name(fname):
                    files.append(Path(dirpath) / fname)
                    codes.append(ci)
        if len(files) == n_before:
            empty.append(cname)
    if empty:
        raise DatasetFormatError(
            f"class folder(s) {empty} contain no images (supported: {', '.join(IMAGE_EXTENSIONS)})",
            root,
        )
    features, shape = _read_images(files, root)
    return _make(
        features,
        np.asarray(codes, dtype=np.int64),
        tuple(classes),
        name=name,
        image_shape=shape,
        source=source,
    )


# ============================================================== MNIST-M
def _mnistm_sibling_labels(d: Path) -> Path | None:
    """``d/../<d.name>_labels.txt`` when ``d`` is an MNIST-M image folder."""
    if not d.is_dir() or not d.name:
        return None
    cand = d.parent / f"{d.name}_labels.txt"
    return cand if cand.is_file() else None


def _mnistm_pairs(d: Path) -> list[tuple[Path, Path]]:
    """(labels txt, image folder) pairs directly inside ``d``."""
    out = []
    for f in _visible(d):
        if f.is_file() and f.name.lower().endswith("_labels.txt"):
            folder = d / f.name[: -len("_labels.txt")]
            if folder.is_dir():
                out.append((f, folder))
    return out


def _load_mnistm_path(p: Path, *, split: Split, name: str | None, source: str) -> LabeledDataset:
    if p.is_file():
        txt = p
        stem = p.name[: -len("_labels.txt")] if p.name.lower().endswith("_labels.txt") else p.stem
        folder = p.parent / stem
        if not folder.is_dir():
            raise DatasetFormatError(
                f"the MNIST-M image folder {stem}/ was not found next to it", p
            )
        default_name = _dir_name(p.parent) if p.parent.name else stem
    elif (sib := _mnistm_sibling_labels(p)) is not None:
        txt, folder = sib, p
        default_name = p.name
    else:
        pairs = _mnistm_pairs(p)
        if not pairs:
            raise DatasetFormatError(
                "no MNIST-M layout found (expected <name>_labels.txt next to an image folder <name>/)",
                p,
            )
        txt, folder = _pick_by_split(
            pairs, [t.name for t, _ in pairs], split, "MNIST-M labels files", p
        )
        default_name = _dir_name(p)
    return _load_mnistm(txt, folder, name=name or default_name, source=source)


def _load_mnistm(txt: Path, folder: Path, *, name: str, source: str) -> LabeledDataset:
    try:
        text = txt.read_bytes().decode("utf-8")
    except OSError as exc:
        raise DatasetError(f"cannot read file: {exc.strerror or exc}", txt) from exc
    except UnicodeDecodeError as exc:
        raise DatasetFormatError(f"labels file is not UTF-8 text ({exc})", txt) from exc
    folder_resolved = folder.resolve()
    files: list[Path] = []
    labels: list[int] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = re.match(r"^(.*?)[\s,]+(\S+)$", s)
        if m is None:
            raise DatasetFormatError(
                f"line {lineno}: expected '<image file> <label>', got {s!r}", txt
            )
        fname, lab = m.group(1).strip(), m.group(2)
        try:
            labels.append(int(lab))
        except ValueError:
            raise DatasetFormatError(
                f"line {lineno}: label {lab!r} is not an integer", txt
            ) from None
        f = folder / fname
        if not f.resolve().is_relative_to(folder_resolved):
            raise DatasetFormatError(
                f"line {lineno}: image path {fname!r} leaves the image folder", txt
            )
        if not f.is_file():
            raise DatasetFormatError(
                f"line {lineno}: image {fname!r} not found in {folder.name}/", txt
            )
        files.append(f)
    if not files:
        raise DatasetError("dataset is empty (the labels file lists no images)", txt)
    features, shape = _read_images(files, folder)
    codes, classes = _encode_labels(np.asarray(labels, dtype=np.int64), txt)
    return _make(features, codes, classes, name=name, image_shape=shape, source=source)


# ============================================================== zip
def _load_zip(
    file: Path | IO[bytes],
    *,
    label: str,
    split: Split,
    kind: Kind,
    name: str | None,
    label_column: str | None,
) -> LabeledDataset:
    """Extract an archive to a temporary folder and load the dataset inside it.

    The dataset may sit at the archive root or inside one top-level folder
    (``myset/<class>/...``); errors name ``label/<member>``.
    """
    if kind in ("npz", "csv"):
        raise DatasetFormatError(f"a .zip cannot be read as kind {kind!r}", label)
    default_name = name or _strip_ext(PurePosixPath(label.replace("\\", "/")).name)
    with tempfile.TemporaryDirectory(prefix="geoviz-zip-") as tmp:
        root = Path(tmp)
        _extract_zip(file, root, label)
        with _rebase_errors(root, label):
            entries = _visible(root)
            if not entries:
                raise DatasetError("dataset is empty (the zip archive holds no files)", label)
            if len(entries) == 1 and entries[0].is_dir() and _detect_dir(root) is None:
                root = entries[0]  # nested one level: myset/<class>/...
            if kind == "auto":
                return _load_dir_auto(
                    root, split=split, name=default_name, label_column=label_column, source=label
                )
            return _load_kind(
                root, kind, split=split, name=default_name, label_column=label_column, source=label
            )


def _extract_zip(file: Path | IO[bytes], dest: Path, label: str) -> None:
    """Extract ``file`` into ``dest``, refusing zip-slip members and oversized archives."""
    limit = MAX_UNCOMPRESSED_BYTES
    try:
        zf = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
        raise DatasetFormatError(f"not a valid zip archive ({exc})", label) from exc
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_ZIP_MEMBERS:
            raise DatasetFormatError(
                f"zip archive has {len(infos)} members, more than the limit of {MAX_ZIP_MEMBERS}",
                label,
            )
        plan: list[tuple[zipfile.ZipInfo, tuple[str, ...]]] = []
        total = 0
        for info in infos:
            member = info.filename.replace("\\", "/")
            pure = PurePosixPath(member)
            if member.startswith("/") or re.match(r"^[A-Za-z]:", member) or ".." in pure.parts:
                raise DatasetFormatError(
                    f"refusing unsafe zip member {info.filename!r}: absolute path or '..' "
                    "would write outside the extraction folder (zip-slip)",
                    label,
                )
            parts = tuple(p for p in pure.parts if p not in ("", "."))
            if not parts or any(_hidden(p) for p in parts):
                continue  # __MACOSX/, .DS_Store and other hidden entries
            if info.flag_bits & 0x1:
                raise DatasetFormatError(f"zip member {info.filename!r} is encrypted", label)
            total += info.file_size
            if total > limit:
                raise DatasetFormatError(
                    f"zip archive expands to more than {_fmt_bytes(limit)} (the limit for uploads); "
                    "upload a smaller dataset or load it from disk",
                    label,
                )
            plan.append((info, parts))
        dest_resolved = dest.resolve()
        written = 0
        for info, parts in plan:
            target = dest.joinpath(*parts)
            if not target.resolve().is_relative_to(dest_resolved):
                raise DatasetFormatError(
                    f"refusing unsafe zip member {info.filename!r} (zip-slip)", label
                )
            try:
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as out:
                    while chunk := src.read(1 << 20):
                        written += len(chunk)
                        if written > limit:
                            raise DatasetFormatError(
                                f"zip archive expands to more than {_fmt_bytes(limit)} (the limit for uploads)",
                                label,
                            )
                        out.write(chunk)
            except DatasetFormatError:
                raise
            except (
                zipfile.BadZipFile,
                zlib.error,
                EOFError,
                OSError,
                NotImplementedError,
                RuntimeError,
            ) as exc:
                raise DatasetFormatError(
                    f"cannot extract zip member {info.filename!r} ({exc})", label
                ) from exc


def _fmt_bytes(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}" if unit == "bytes" else f"{n:.3g} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} bytes"  # pragma: no cover


@contextmanager
def _rebase_errors(tmp: Path, label: str) -> Iterator[None]:
    """Re-raise dataset errors from an extracted archive naming ``label/<member>``, not the temp dir."""
    try:
        yield
    except DatasetError as err:
        prefixes = sorted({str(tmp), str(tmp.resolve())}, key=len, reverse=True)

        def rebase(text: str) -> str:
            for pre in prefixes:
                text = text.replace(pre + os.sep, label + "/").replace(pre, label)
            return text

        source = label if err.source is None else rebase(err.source)
        raise type(err)(rebase(err.problem), source) from err
