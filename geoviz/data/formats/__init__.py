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

Sizes
-----
What a file declares is checked before it is allocated: npz ``.npy`` headers
(shape x itemsize, against the archive cap, this process's memory and the member's
real size), IDX dimensions (before a file is read, a gzip stream decompressed or a
zip extracted), image headers (at most
:data:`~geoviz.data.formats.imagefolder.MAX_DECODE_SIDE` pixels a side, all pixels
together against memory), zip members' declared sizes (against the cap, the free
disk and memory) and CSV cells. A request that does not fit raises
:class:`~geoviz.errors.ResourceError` naming the size, the limit and its source
(:mod:`geoviz.memory`); an allocation that fails anyway is turned into one too. An
ImageFolder walk follows symlinked folders but visits each real folder once.

Modules
-------
This package splits the formats into one module each (:mod:`.idx`,
:mod:`.npz`, :mod:`.tabular` for CSV, :mod:`.imagefolder`, :mod:`.mnistm`),
with zip extraction in :mod:`.archive` and the shared array/label helpers in
:mod:`._common`; this module holds the public API and the dispatcher that
detects a path's format and hands it to the right module.
"""

from __future__ import annotations

import io
from pathlib import Path, PurePosixPath
from typing import IO, Literal, get_args

from geoviz.data.dataset import LabeledDataset
from geoviz.data.formats._common import (
    STAMP_LENGTH,
    OutsideRootError,
    Split,
    _check_file,
    _dir_name,
    _open_file,
    _read_raw,
    _visible,
    check_confined,
    path_stamp,
    rebased_errors,
)
from geoviz.data.formats._common import PathLike as PathLike
from geoviz.data.formats.archive import MAX_UNCOMPRESSED_BYTES, MAX_ZIP_MEMBERS, _extracted_zip
from geoviz.data.formats.idx import (
    _IDX_NAME_RE,
    _idx_files,
    _load_idx_path,
    decode_idx,
    encode_idx,
    load_upload_pair,
    read_idx,
    save_idx,
)
from geoviz.data.formats.imagefolder import IMAGE_EXTENSIONS, _image_class_dirs, _load_imagefolder
from geoviz.data.formats.mnistm import _load_mnistm_path, _mnistm_pairs, _mnistm_sibling_labels
from geoviz.data.formats.npz import load_npz
from geoviz.data.formats.tabular import LABEL_COLUMN_NAMES as LABEL_COLUMN_NAMES
from geoviz.data.formats.tabular import _load_csv
from geoviz.errors import DatasetError, DatasetFormatError

__all__ = [
    "IMAGE_EXTENSIONS",
    "MAX_UNCOMPRESSED_BYTES",
    "STAMP_LENGTH",
    "Kind",
    "OutsideRootError",
    "Split",
    "check_confined",
    "decode_idx",
    "encode_idx",
    "load_path",
    "load_upload",
    "load_upload_pair",
    "path_stamp",
    "read_idx",
    "rebased_errors",
    "save_idx",
]

Kind = Literal["auto", "idx", "npz", "imagefolder", "mnistm", "csv"]

_SPLIT_DIRS = {"train": ("train", "training"), "test": ("test", "testing")}

_SUPPORTED = (
    "expected a .npz, .csv, IDX (*-images-idx3-ubyte[.gz] with *-labels-idx1-ubyte[.gz]), "
    "an MNIST-M labels .txt, a .zip of an ImageFolder or MNIST-M folder, or a directory"
)


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
    if not p.is_dir():
        _check_file(p)  # a FIFO would block and /dev/zero never end: refused before opening
    source = str(p)
    if p.is_file() and _file_kind(p.name) == "zip":
        with _open_file(p) as fh:  # the file that was checked, not what the path is now
            return _load_zip(
                fh, label=source, split=split, kind=kind, name=name, label_column=label_column
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
        return load_npz(
            io.BytesIO(data),
            split=split,
            name=default_name,
            source=label,
            limit=MAX_UNCOMPRESSED_BYTES,  # read at call time, as for a zip
        )
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
            return load_npz(
                fh,
                split=split,
                name=name or _strip_ext(p.name),
                source=source,
                limit=MAX_UNCOMPRESSED_BYTES,
            )
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


def _split_subdir(d: Path, split: Split) -> Path | None:
    for cand in _SPLIT_DIRS[split]:
        for sub in _visible(d):
            if sub.is_dir() and sub.name.lower() == cand:
                return sub
    return None


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
    # the limits are read here, at call time, so that they can be changed on this module
    with _extracted_zip(
        file, label, limit=MAX_UNCOMPRESSED_BYTES, max_members=MAX_ZIP_MEMBERS
    ) as root:
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
