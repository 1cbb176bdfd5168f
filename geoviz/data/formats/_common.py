"""Helpers shared by the format readers of :mod:`geoviz.data.formats`.

Not a file format itself: turning decoded arrays into a
:class:`~geoviz.data.dataset.LabeledDataset` (feature flattening, pixel
scaling to ``[0, 1]``, label encoding to ``0..C-1``), reading bytes with
transparent gzip (RFC 1952) handling, and the file-name and directory
utilities (hidden entries, split names) that several formats use.

Only regular files are opened (:mod:`geoviz.files`: a FIFO or a device such as
``/dev/zero`` is refused before ``open``). Sizes are checked before anything large is
allocated: a file's size before it is read (:func:`_read_raw`), gzip output while it is
decompressed (:func:`_maybe_gunzip`), and declared array shapes through
:func:`_check_dataset_memory`, all against the process's real memory limit
(:mod:`geoviz.memory`).
"""

from __future__ import annotations

import gzip
import io
import os
import re
import stat
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np

from geoviz import files, memory
from geoviz.backend import digest_bytes
from geoviz.data.dataset import ImageShape, LabeledDataset
from geoviz.errors import DatasetError, DatasetFormatError, GeovizError
from geoviz.memory import check_bytes
from geoviz.vocabulary import Split

_TRAIN_TOKENS = frozenset({"train", "training"})
_TEST_TOKENS = frozenset({"test", "testing", "t10k"})

_T = TypeVar("_T")
PathLike = str | os.PathLike[str]


# ============================================================== names and directories
def _hidden(name: str) -> bool:
    return name.startswith(".") or name == "__MACOSX"


def _visible(d: Path) -> list[Path]:
    try:
        return sorted(p for p in d.iterdir() if not _hidden(p.name))
    except OSError as exc:
        raise DatasetError(f"cannot list directory: {exc.strerror or exc}", d) from exc


class OutsideRootError(DatasetError):
    """A dataset folder holds a symbolic link that leads outside the folder it must stay in."""


def check_confined(path: Path, root: Path, *, max_entries: int = 1_000_000) -> int:
    """Check that nothing a loader can reach from ``path`` leaves ``root``.

    Walks ``path`` (a file or folder inside ``root``) the way the loaders do, following
    symbolic links, and resolves every link met on the way, at any depth, relative or
    absolute, to a file or to a folder: each must resolve inside ``root``. Folders reached
    through a link are walked too (once each), so a link to a sibling folder inside
    ``root`` that itself holds a link out is found. Links that resolve nowhere (dangling)
    are ignored, as the loaders skip them.

    Parameters
    ----------
    path
        What is about to be loaded.
    root
        The folder it must not leave (resolved here).
    max_entries
        Most directory entries walked; a larger tree is refused (bounded work per request).

    Returns
    -------
    int
        Entries walked.

    Raises
    ------
    OutsideRootError
        ``path`` itself or a link below it resolves outside ``root``. The message names
        neither the link nor its target.
    DatasetError
        The tree has more than ``max_entries`` entries.
    """
    root = root.resolve()
    outside = OutsideRootError("the dataset links to files outside its data folder")
    try:
        start = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise outside from None
    if not start.is_relative_to(root):
        raise outside
    if not start.is_dir():
        return 1
    seen = {start}
    stack = [start]
    walked = 0
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue  # unreadable: the loaders skip it too
        for entry in entries:
            walked += 1
            if walked > max_entries:
                raise DatasetError(
                    f"the dataset folder has more than {max_entries:,} entries; "
                    "serve a smaller folder or an archive"
                )
            try:
                if entry.is_symlink():
                    real = Path(entry.path).resolve(strict=True)
                    if not real.is_relative_to(root):
                        raise outside
                    if real.is_dir() and real not in seen:
                        seen.add(real)
                        stack.append(real)
                elif entry.is_dir(follow_symlinks=False):
                    real = Path(entry.path)
                    if real not in seen:
                        seen.add(real)
                        stack.append(real)
            except (FileNotFoundError, RuntimeError):
                continue  # a dangling link or a loop of links: nothing to read there
            except OSError:
                continue
    return walked


#: hex characters of a dataset path's stamp (:func:`path_stamp`)
STAMP_LENGTH = 24


def _status_record(rel: str, st: os.stat_result | None) -> bytes:
    """One line of a stamp: where below the path, and what :func:`os.stat` says is there."""
    if st is None:  # missing or unreadable: a state of its own
        return f"{rel}\0?\n".encode("utf-8", "surrogateescape")
    fields = (
        stat.S_IFMT(st.st_mode),
        st.st_dev,
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
    )
    return f"{rel}\0{':'.join(map(str, fields))}\n".encode("utf-8", "surrogateescape")


def _status_records(path: Path, max_entries: int | None) -> Iterator[bytes]:
    """The records of ``path`` and, for a folder, of every entry below it (sorted names,
    links followed as the loaders follow them, each real folder once)."""
    try:
        top = os.stat(path)
    except OSError:
        yield _status_record("", None)
        return
    yield _status_record("", top)
    if not stat.S_ISDIR(top.st_mode):
        return
    seen = {(top.st_dev, top.st_ino)}
    stack = [(path, "")]
    walked = 0
    while stack:
        folder, rel = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            yield _status_record(f"{rel}/", None)
            continue
        for entry in entries:
            walked += 1
            if max_entries is not None and walked > max_entries:
                raise DatasetError(
                    f"the dataset folder has more than {max_entries:,} entries; "
                    "serve a smaller folder or an archive",
                    path,
                )
            name = f"{rel}/{entry.name}"
            try:
                st: os.stat_result | None = entry.stat()  # follows links; opens nothing
            except OSError:
                st = None
            yield _status_record(name, st)
            if st is None or not stat.S_ISDIR(st.st_mode):
                continue
            real = (st.st_dev, st.st_ino)
            if real not in seen:  # each real folder once: links may loop
                seen.add(real)
                stack.append((Path(entry.path), name))


def path_stamp(path: PathLike, *, max_entries: int | None = None) -> str:
    """The identity of a dataset file or folder as it is now, read with :func:`os.stat` only.

    A hex digest (:data:`STAMP_LENGTH` characters) of the file's type, device, inode, size,
    modification and change times (nanoseconds); for a folder, of those of the folder and of
    every entry below it. A file replaced by another (of any size, renamed over it or
    rewritten in place, even with its old modification time put back), turned into junk, a
    FIFO or a device, or removed gets another stamp, so every cache keyed by the stamp
    computes again and the loader says what is wrong with the new file. Nothing is opened:
    a FIFO cannot block, and the cost is one ``stat`` per entry (a file: one).

    Parameters
    ----------
    path
        The dataset's file or folder (links followed).
    max_entries
        Most entries of a folder walked (``None``: all).

    Raises
    ------
    DatasetError
        A folder with more than ``max_entries`` entries.
    """
    return digest_bytes(_status_records(Path(path), max_entries), length=STAMP_LENGTH)


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
def _file_error(p: Path) -> files.ErrorFactory:
    return lambda problem: DatasetError(problem, p)


def _check_file(p: Path) -> int:
    """Check, before opening it, that ``p`` is a regular file (not a directory, a FIFO that
    would block, or a device such as ``/dev/zero`` that never ends); its size."""
    return files.check_regular_file(p, error=_file_error(p))


def _read_raw(p: Path) -> bytes:
    """The bytes of the regular file ``p``, after checking that they fit in memory."""
    return files.read_regular_file(p, what=f"reading {p}", error=_file_error(p))


@contextmanager
def _open_file(p: Path) -> Iterator[IO[bytes]]:
    """``p`` open for reading, once it is known to be a regular file."""
    with files.open_regular_file(p, error=_file_error(p)) as fh:
        yield fh


#: gzip data is decompressed in chunks of this size, so that its growth can be checked
_GUNZIP_CHUNK = 16 * 2**20


def _is_gzip(raw: bytes, source: str | Path) -> bool:
    """Whether ``raw`` is gzip data; a ``.gz`` name on anything else is an error."""
    if raw[:2] == b"\x1f\x8b":
        return True
    if str(source).lower().endswith(".gz"):
        raise DatasetFormatError("named .gz but is not gzip data (bad gzip header)", source)
    return False


def _gunzip_head(raw: bytes, source: str | Path, n_bytes: int) -> bytes:
    """The first (up to) ``n_bytes`` of the decompressed gzip data ``raw``."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as gz:
            return gz.read(n_bytes)
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetFormatError(f"corrupt or truncated gzip data ({exc})", source) from exc


def _maybe_gunzip(
    raw: bytes, source: str | Path, *, max_bytes: int | None = None, max_reason: str = ""
) -> bytes:
    """Decompress gzip data (by magic bytes or a ``.gz`` name), else return as is.

    The output is decompressed in chunks and never grows past what memory allows (a
    :class:`~geoviz.errors.ResourceError` for a gzip bomb) nor past ``max_bytes`` when
    the caller knows the size (a :class:`~geoviz.errors.DatasetFormatError` starting with
    ``max_reason``).
    """
    if not _is_gzip(raw, source):
        return raw
    found = memory.memory_limit()  # the room before decompressing: the output doubles when joined
    out = io.BytesIO()
    total = 0
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as gz:
            while chunk := gz.read(_GUNZIP_CHUNK):
                total += len(chunk)
                if max_bytes is not None and total > max_bytes:
                    raise DatasetFormatError(
                        f"{max_reason or 'corrupt file'}: the gzip data expands to more than "
                        f"{max_bytes:,} bytes",
                        source,
                    )
                check_bytes(2 * total, f"decompressing {source}", at_least=True, limit=found)
                out.write(chunk)
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetFormatError(f"corrupt or truncated gzip data ({exc})", source) from exc
    return out.getvalue()


def _check_dataset_memory(
    raw_bytes: int, n_feature_values: int, n_labels: int, what: str, *, at_least: bool = False
) -> None:
    """Refuse a dataset whose arrays would not fit in memory, before reading them.

    Counts the arrays as stored (``raw_bytes``), the float32 features and twice their
    size in temporaries, and the int64 label codes with one temporary. The factor 3 on
    the features is measured: building the :class:`~geoviz.data.dataset.LabeledDataset`
    checks them with ``torch.isfinite``, whose temporaries peak at 1.7 times the
    features (120,000 28x28 images: 94 MB stored, 376 MB of features, 1.08 GB peak).
    """
    check_bytes(raw_bytes + 3 * 4 * n_feature_values + 2 * 8 * n_labels, what, at_least=at_least)


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
    if kind in "iu":  # scaled in place: one float32 array, not two
        if arr.dtype == np.uint16:
            out = arr.astype(np.float32)
            out /= np.float32(65535)
            return out
        lo, hi = int(arr.min()), int(arr.max())
        if lo >= 0 and hi <= 255:
            out = arr.astype(np.float32)
            out /= np.float32(255)
            return out
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
        out = arr.astype(np.float32)
        out /= np.float32(255)
        return out
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


@contextmanager
def rebased_errors(tmp: Path, label: str) -> Iterator[None]:
    """Re-raise errors raised below ``tmp`` naming ``label/<inside>``, not the folder ``tmp``.

    Used for an extracted archive (``tmp`` is its temporary folder, ``label`` the upload's
    name) and for a server's data folder (``tmp`` the folder, ``label`` its public name), so
    that no message a visitor reads names a path of the server.

    Dataset errors keep their type and source; any other :class:`GeovizError` (a
    :class:`ResourceError` while decoding, say) keeps its type with the message rebased;
    an ``OSError`` reading the extracted files becomes a :class:`DatasetError` of the
    archive.
    """
    prefixes = sorted({str(tmp), str(tmp.resolve())}, key=len, reverse=True)

    def rebase(text: str) -> str:
        for pre in prefixes:
            text = text.replace(pre + os.sep, label + "/").replace(pre, label)
        return text

    try:
        yield
    except DatasetError as err:
        source = label if err.source is None else rebase(err.source)
        raise type(err)(rebase(err.problem), source) from err
    except GeovizError as err:
        try:
            rebased = type(err)(rebase(str(err)))
        except Exception:  # a subclass with another signature: keep its message
            rebased = GeovizError(rebase(str(err)))
        raise rebased from err
    except OSError as err:
        raise DatasetError(
            f"cannot read the extracted archive: {rebase(err.strerror or str(err))}", label
        ) from err
