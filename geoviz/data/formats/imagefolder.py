"""Folders of image files, one sub-folder per class.

The ``root/<class>/<image>`` layout of ``torchvision.datasets.ImageFolder``:
class names are the sorted sub-folder names, images (png, jpg, jpeg, bmp, gif,
webp; read with Pillow) may sit in nested folders below their class folder.
All images must have one size; grey images give one channel, any colour image
makes the whole set RGB. The image reader here also serves the MNIST-M layout
(:mod:`geoviz.data.formats.mnistm`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from geoviz.data.dataset import ImageShape, LabeledDataset
from geoviz.data.formats._common import _hidden, _make, _visible
from geoviz.errors import DatasetFormatError

#: File extensions read as images in ImageFolder and MNIST-M layouts (lower case).
IMAGE_EXTENSIONS: tuple[str, ...] = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")


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
