"""IDX files, the format of MNIST and its family (Fashion-MNIST, KMNIST, EMNIST).

The format is specified on the MNIST database page (LeCun, Cortes & Burges,
"The MNIST database of handwritten digits"): a big-endian magic number
``0x0000TTkk`` (``TT`` the dtype code, ``kk`` the number of dimensions), ``kk``
big-endian uint32 sizes, then the values in C order. Images files
(``*-images-idx3-ubyte``, magic ``0x00000803``) and labels files
(``*-labels-idx1-ubyte``, magic ``0x00000801``) come in pairs; either may be
gzipped. This module reads pairs from disk and from uploads, and reads, encodes
and writes single IDX files.

The header's dimensions are checked against this process's memory before any data is
decompressed or converted (:func:`geoviz.memory.check_bytes`), and gzip data is never
decompressed past the size its header declares, so a small ``.gz`` declaring or
expanding to gigabytes is refused with a sentence, not a ``MemoryError``.
"""

from __future__ import annotations

import gzip
import math
import re
import struct
from pathlib import Path
from typing import Literal

import numpy as np

from geoviz.atomic import NotReplaceableError, atomic_write_bytes, check_replaceable
from geoviz.data.dataset import LabeledDataset
from geoviz.data.formats._common import (
    PathLike,
    Split,
    _check_dataset_memory,
    _dir_name,
    _encode_labels,
    _features_from_array,
    _gunzip_head,
    _is_gzip,
    _make,
    _maybe_gunzip,
    _open_file,
    _pick_by_split,
    _read_raw,
    _visible,
)
from geoviz.errors import DatasetError, DatasetFormatError, ExportError
from geoviz.memory import memory_guard

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


# ============================================================== public API
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
    img_arr, img_magic = _decode_idx_bytes(_idx_data(bytes(images), images_name), images_name)
    lab_arr, lab_magic = _decode_idx_bytes(_idx_data(bytes(labels), labels_name), labels_name)
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
    arr, _ = _decode_idx_bytes(_idx_file_data(p), p)
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
    arr, _ = _decode_idx_bytes(_idx_data(bytes(data), source), source)
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
    try:
        check_replaceable(p)  # never a device or a FIFO, even with overwrite
    except NotReplaceableError as err:
        raise ExportError(str(err)) from None
    if p.exists() and not overwrite:
        raise ExportError(f"{p}: file exists (pass overwrite=True to replace it)")
    payload = encode_idx(array)
    if p.name.lower().endswith(".gz"):
        payload = gzip.compress(payload, mtime=0)
    try:
        atomic_write_bytes(p, payload, overwrite=overwrite)
    except NotReplaceableError as err:
        raise ExportError(str(err)) from None
    except FileExistsError:
        raise ExportError(f"{p}: file exists (pass overwrite=True to replace it)") from None
    return p


# ============================================================== decoding and pairing
#: the longest IDX header: the magic number and 255 dimension sizes
_IDX_MAX_HEADER = 4 + 4 * 255


def _idx_header(head: bytes, source: str | Path) -> tuple[tuple[int, ...], np.dtype, int, int]:
    """Dimensions, dtype, header length and magic number from the first bytes of IDX data."""
    if len(head) < 4:
        raise DatasetFormatError(
            f"truncated IDX file: {len(head)} bytes, the magic number alone needs 4", source
        )
    z0, z1, code, ndim = head[0], head[1], head[2], head[3]
    magic = int.from_bytes(head[:4], "big")
    if z0 != 0 or z1 != 0 or code not in _IDX_DTYPES or ndim == 0:
        raise DatasetFormatError(
            f"not an IDX file: wrong magic number 0x{magic:08X} (expected 0x{_IDX_IMAGES_MAGIC:08X} "
            f"for images or 0x{_IDX_LABELS_MAGIC:08X} for labels; dtype codes 0x08, 0x09, 0x0B-0x0E)",
            source,
        )
    header = 4 + 4 * ndim
    if len(head) < header:
        raise DatasetFormatError(
            f"truncated IDX file: header declares {ndim} dimensions ({header} bytes) but the file "
            f"has {len(head)} bytes",
            source,
        )
    dims = struct.unpack(f">{ndim}I", head[4:header])
    return dims, _IDX_DTYPES[code], header, magic


def _check_idx_memory(
    dims: tuple[int, ...], dtype: np.dtype, source: str | Path, *, stored: bool
) -> None:
    """Refuse IDX data whose dataset would not fit in memory (``stored``: the data itself
    is still to be allocated, as when it is gzipped)."""
    count = math.prod(dims)
    images = len(dims) > 1
    _check_dataset_memory(
        count * dtype.itemsize if stored else 0,
        count if images else 0,
        0 if images else count,
        f"loading {source} (IDX dimensions {dims} of {dtype.name})",
    )


def _idx_data(raw: bytes, source: str | Path) -> bytes:
    """IDX bytes, gunzipped if gzip data; a gzipped file's declared dimensions are checked
    against memory before anything is decompressed, and decompression stops past them."""
    if not _is_gzip(raw, source):
        return raw
    dims, dtype, header, _ = _idx_header(_gunzip_head(raw, source, _IDX_MAX_HEADER), source)
    _check_idx_memory(dims, dtype, source, stored=True)
    need = header + math.prod(dims) * dtype.itemsize
    return _maybe_gunzip(
        raw,
        source,
        max_bytes=need,
        max_reason=f"corrupt IDX file: dimensions {dims} declare {need:,} bytes with the header",
    )


def check_idx_head(head: bytes, source: str | Path) -> None:
    """Check the dimensions an uncompressed IDX file declares in its first bytes
    (``head``, up to :data:`_IDX_MAX_HEADER` of them) against memory, before reading it.

    Used for IDX files on disk and for IDX members of a zip archive before extraction;
    anything that is not a well-formed IDX header is left to the full decoder.
    """
    try:
        dims, dtype, _, _ = _idx_header(head, source)
    except DatasetFormatError:  # reported, with the whole file at hand, by the decoder
        return
    _check_idx_memory(dims, dtype, source, stored=True)


def _idx_file_data(p: Path) -> bytes:
    """An IDX file's bytes (gunzipped), its declared dimensions checked before the read."""
    try:
        with _open_file(p) as fh:
            head = fh.read(_IDX_MAX_HEADER)
    except OSError as exc:
        raise DatasetError(f"cannot read file: {exc.strerror or exc}", p) from exc
    if head[:2] != b"\x1f\x8b":  # gzip data is checked by _idx_data before decompressing
        check_idx_head(head, p)
    return _idx_data(_read_raw(p), p)


def _decode_idx_bytes(data: bytes, source: str | Path) -> tuple[np.ndarray, int]:
    """Parse IDX bytes; returns the array (native byte order) and the magic number."""
    dims, dtype, header, magic = _idx_header(data[:_IDX_MAX_HEADER], source)
    need = math.prod(dims) * dtype.itemsize
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
    _check_idx_memory(dims, dtype, source, stored=False)
    arr = np.frombuffer(data, dtype=dtype, count=math.prod(dims), offset=header).reshape(dims)
    with memory_guard(f"loading {source}"):
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
    with memory_guard(f"loading {source}"):
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
            arr, _ = _decode_idx_bytes(_idx_file_data(p), p)
            role = "labels" if arr.ndim == 1 else "images"
        partner = _idx_partner(p, role)
        images, labels = (p, partner) if role == "images" else (partner, p)
        default_name = _idx_name(images.name, p.parent)
    img_arr, img_magic = _decode_idx_bytes(_idx_file_data(images), images)
    lab_arr, lab_magic = _decode_idx_bytes(_idx_file_data(labels), labels)
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
