"""The released MNIST-M layout: an image folder next to a labels text file.

MNIST-M (Ganin & Lempitsky, "Unsupervised Domain Adaptation by
Backpropagation", ICML 2015) is distributed as ``mnist_m_train/`` (PNG images)
next to ``mnist_m_train_labels.txt`` whose lines read ``"00000000.png 5"``
(likewise ``mnist_m_test``). Images are read as in
:mod:`geoviz.data.formats.imagefolder`; labels are integers.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from geoviz.data.dataset import LabeledDataset
from geoviz.data.formats._common import (
    Split,
    _dir_name,
    _encode_labels,
    _make,
    _pick_by_split,
    _read_raw,
    _visible,
)
from geoviz.data.formats.imagefolder import _read_images
from geoviz.errors import DatasetError, DatasetFormatError


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
        text = _read_raw(txt).decode("utf-8")
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
