"""Folders of image files, one sub-folder per class.

The ``root/<class>/<image>`` layout of ``torchvision.datasets.ImageFolder``:
class names are the sorted sub-folder names, images (png, jpg, jpeg, bmp, gif,
webp; read with Pillow) may sit in nested folders below their class folder.
All images must have one size; grey images give one channel, any colour image
makes the whole set RGB. The image reader here also serves the MNIST-M layout
(:mod:`geoviz.data.formats.mnistm`).

Nothing is decoded before every image's header has been read: an image wider or taller
than :data:`MAX_DECODE_SIDE` pixels is refused, and the pixels of all images together
are checked against this process's memory (:func:`geoviz.memory.check_bytes`). A folder
walk visits each real folder once: a symlinked folder that leads back into the walk (a
loop) or to an ancestor is not followed again.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from geoviz import files
from geoviz.data.dataset import ImageShape, LabeledDataset
from geoviz.data.formats._common import _check_dataset_memory, _hidden, _make, _visible
from geoviz.errors import DatasetFormatError
from geoviz.memory import memory_guard

#: File extensions read as images in ImageFolder and MNIST-M layouts (lower case).
IMAGE_EXTENSIONS: tuple[str, ...] = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
#: Largest width or height (pixels) of an image that will be decoded. Far above what the
#: interpolation uses (images are resized to at most ``geoviz.limits.MAX_IMAGE_SIZE``),
#: and small enough that one image (4096 x 4096 RGB, 48 MiB) cannot take the memory.
MAX_DECODE_SIDE = 4096

# Pillow modes read as one channel, and those decoded to float32 rather than uint8
_GREY_MODES = frozenset({"1", "L", "LA", "La", "I", "F"})
_FLOAT_MODES = frozenset({"I", "F"})


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


def _read_image(f: Path, root: Path) -> np.ndarray:
    """One image -> ``(H, W)`` (grey) or ``(H, W, 3)`` array, uint8 or float32 in [0, 1]."""
    from PIL import Image

    try:
        with open_image_file(f, root) as fh, Image.open(fh) as im:
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


def open_image_file(f: Path, root: Path) -> contextlib.AbstractContextManager[BinaryIO]:
    """``f`` open for reading once it is known to be a regular file: an image name on a FIFO
    or a device (``a.png`` linked to ``/dev/zero``) is refused before it is opened."""
    return files.open_regular_file(
        f,
        error=lambda problem: DatasetFormatError(
            f"cannot read image {_rel(f, root)}: {problem}", f
        ),
    )


def _rel(f: Path, root: Path) -> str:
    try:
        return f.relative_to(root).as_posix()
    except ValueError:
        return str(f)


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: PNG colour type -> the Pillow mode the image opens as (grey: see _png_header)
_PNG_MODES = {2: "RGB", 3: "P", 4: "LA", 6: "RGBA"}


def _png_header(head: bytes) -> tuple[int, int, str] | None:
    """Width, height and Pillow mode from a PNG's first 26 bytes (its IHDR chunk), or
    None when ``head`` is not that; the full decoder still validates the file."""
    if len(head) < 26 or head[:8] != _PNG_SIGNATURE or head[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", head[16:24])
    bit_depth, colour_type = head[24], head[25]
    if colour_type == 0:
        mode = {1: "1", 16: "I;16"}.get(bit_depth, "L")
    elif colour_type in _PNG_MODES:
        mode = _PNG_MODES[colour_type]
    else:
        return None
    return width, height, mode


def _image_header(f: Path, root: Path) -> tuple[int, int, str]:
    """Width, height and Pillow mode of one image, from its header (no pixels decoded).

    PNG headers are parsed directly (four times faster than opening the file with
    Pillow, which matters for tens of thousands of small images); other formats are
    opened lazily with Pillow.
    """
    from PIL import Image

    try:
        with open_image_file(f, root) as fh:
            header = _png_header(fh.read(26))
            if header is None:
                fh.seek(0)
                with Image.open(fh) as im:
                    header = (int(im.size[0]), int(im.size[1]), str(im.mode))
    except DatasetFormatError:
        raise
    except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError, DecompressionBombError
        raise DatasetFormatError(f"cannot read image {_rel(f, root)} ({exc})", f) from exc
    width, height, mode = header
    if width > MAX_DECODE_SIDE or height > MAX_DECODE_SIDE:
        raise DatasetFormatError(
            f"image {_rel(f, root)} is {width}x{height} pixels, larger than "
            f"{MAX_DECODE_SIDE}x{MAX_DECODE_SIDE} (the largest image geoviz decodes); "
            "resize the images first",
            f,
        )
    return width, height, mode


def _check_images_memory(files: Sequence[Path], root: Path) -> None:
    """Read every header; refuse images too large to decode or to hold together."""
    decoded = 0
    pixels = 0
    colour = False
    for f in files:
        width, height, mode = _image_header(f, root)
        grey = mode in _GREY_MODES or mode.startswith("I;16")
        wide = mode in _FLOAT_MODES or mode.startswith("I;16")
        colour = colour or not grey
        decoded += width * height * (1 if grey else 3) * (4 if wide else 1)
        pixels += width * height
    _check_dataset_memory(
        decoded,
        pixels * (3 if colour else 1),
        len(files),
        f"decoding the {len(files):,} images of {root} ({pixels:,} pixels)",
    )


def _read_images(files: Sequence[Path], root: Path) -> tuple[np.ndarray, ImageShape]:
    """Images of one size -> ``(N, C*H*W)`` float32 in [0, 1] and ``(C, H, W)``.

    Greyscale images give ``C = 1``; if any image has colour, every image is
    read as RGB (``C = 3``, grey replicated). The headers are checked first
    (:func:`_check_images_memory`); the pixels then go straight into one float32 array.
    """
    _check_images_memory(files, root)
    with memory_guard(f"decoding the {len(files):,} images of {root}"):
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
        ((width, height),) = sizes
        channels = 3 if any(a.ndim == 3 for a in arrays) else 1
        out = np.empty((len(arrays), channels, height, width), dtype=np.float32)
        arrays.reverse()  # popped in file order, so each decoded image is freed once copied
        for i in range(len(out)):
            a = arrays.pop()
            if a.dtype == np.uint8:
                values = a.astype(np.float32)
                values /= np.float32(255)
            else:
                values = a
            # (H, W) grey (broadcast over the channels) or (H, W, 3) colour -> (C, H, W)
            out[i] = values if values.ndim == 2 else values.transpose(2, 0, 1)
    shape = (channels, height, width)
    return out.reshape(len(out), -1), shape


def _image_files(cdir: Path) -> list[Path]:
    """Image files below ``cdir`` (nested folders too), in ``os.walk`` order.

    Symlinked folders are followed, but each real folder is visited once, and a link to
    ``cdir`` itself or to one of its ancestors is not followed at all: a symlink loop
    neither repeats samples nor makes the walk run on.
    """
    base_real = Path(os.path.realpath(cdir))
    seen: set[Path] = set()
    listed: list[tuple[str, list[str]]] = []
    stack = [str(cdir)]
    while stack:
        folder = stack.pop()
        real = Path(os.path.realpath(folder))
        if real in seen or (real != base_real and base_real.is_relative_to(real)):
            continue
        seen.add(real)
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:  # unreadable folder: skipped, as os.walk does
            continue
        names: list[str] = []
        for entry in entries:
            if _hidden(entry.name):
                continue
            try:
                is_dir = entry.is_dir()  # follows a symlink
            except OSError:
                is_dir = False
            if is_dir:
                stack.append(entry.path)
            elif _is_image_name(entry.name):
                names.append(entry.name)
        listed.append((folder, sorted(names)))
    listed.sort(key=lambda item: item[0])
    return [Path(folder) / name for folder, names in listed for name in names]


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
        found = _image_files(root / cname)
        if not found:
            empty.append(cname)
        files.extend(found)
        codes.extend([ci] * len(found))
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
