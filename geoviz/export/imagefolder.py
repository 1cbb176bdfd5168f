"""The ``imagefolder`` format: ``class/index.png`` + ``labels.csv``, as a folder or a zip.

Writer, reader, and the hard labels given by the class folders.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import zipfile
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from geoviz.data.dataset import SoftLabeledDataset
from geoviz.errors import DatasetFormatError
from geoviz.export.datasets import _dataset
from geoviz.export.manifest import _base_manifest
from geoviz.export.names import LABELS_NAME, MANIFEST_NAME, class_folder_names
from geoviz.export.png import _decode_png, _png_payload, _stack_images
from geoviz.export.registry import BuiltExport, ExportFormatSpec
from geoviz.files import read_regular_file


def _imagefolder_files(
    ds: SoftLabeledDataset, pngs: list[bytes], labels: np.ndarray
) -> dict[str, bytes]:
    """PNGs under ``<hard-label class folder>/<index>.png`` plus ``labels.csv`` (no manifest)."""
    folders = class_folder_names(ds.class_names)
    width = len(str(max(ds.n_samples - 1, 0)))
    hard = labels.tolist()
    soft = ds.soft_labels.numpy()
    files: dict[str, bytes] = {}
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["file_name", *ds.class_names])
    for i, png in enumerate(pngs):
        rel = f"{folders[hard[i]]}/{i:0{width}d}.png"
        files[rel] = png
        # repr of the float64 value of each float32 is exact and parses back exactly
        writer.writerow([rel, *(repr(float(v)) for v in soft[i])])
    files[LABELS_NAME] = text.getvalue().encode("utf-8")
    return files


def _zip_bytes(files: Mapping[str, bytes], created: str) -> bytes:
    stamp = datetime.fromisoformat(created.replace("Z", "+00:00")).timetuple()[:6]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for rel, data in files.items():
            info = zipfile.ZipInfo(rel, date_time=stamp)
            info.compress_type = (
                zipfile.ZIP_STORED if rel.endswith(".png") else zipfile.ZIP_DEFLATED
            )
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    return buf.getvalue()


@contextlib.contextmanager
def _imagefolder_reader(path: Path, container: str) -> Iterator[Callable[[str], bytes | None]]:
    """``read(rel) -> bytes | None`` for the files of an ImageFolder export (folder or zip).

    A zip may hold the export under one top folder (the shortest path to a
    ``labels.csv`` decides); in a folder, paths that leave it are refused.
    """
    if container == "zip":
        try:
            zf = zipfile.ZipFile(path)
        except (OSError, zipfile.BadZipFile) as err:
            raise DatasetFormatError(f"corrupt zip archive: {err}", path) from err
        with zf:
            names = set(zf.namelist())
            candidates = sorted((n for n in names if n.rsplit("/", 1)[-1] == LABELS_NAME), key=len)
            if not candidates:
                raise DatasetFormatError(f"zip has no {LABELS_NAME}", path)
            prefix = candidates[0][: -len(LABELS_NAME)]

            def read(rel: str) -> bytes | None:
                member = prefix + rel
                return zf.read(member) if member in names else None

            yield read
        return
    root = path.resolve()

    def read_dir(rel: str) -> bytes | None:
        target = (root / rel).resolve()
        if root not in target.parents:
            raise DatasetFormatError(
                f"{LABELS_NAME} names a file outside the folder: {rel!r}", path
            )
        if not target.exists():
            return None
        return read_regular_file(  # a FIFO or a device in an image's place is refused
            target, error=lambda problem: DatasetFormatError(f"{rel}: {problem}", path)
        )

    yield read_dir


def _load_imagefolder(path: Path, container: str) -> SoftLabeledDataset:
    with _imagefolder_reader(path, container) as read:
        return _read_imagefolder(read, path)


def _manifest_and_rows(read: Any, where: Path) -> tuple[dict[str, Any], list[list[str]]]:
    """The manifest (``{}`` when absent) and the rows of ``labels.csv`` of an ImageFolder export."""
    raw_manifest = read(MANIFEST_NAME)
    manifest = json.loads(raw_manifest) if raw_manifest is not None else {}
    labels = read(LABELS_NAME)
    if labels is None:
        raise DatasetFormatError(f"no {LABELS_NAME} found", where)
    return manifest, list(csv.reader(io.StringIO(labels.decode("utf-8"))))


def _read_imagefolder(read: Any, where: Path) -> SoftLabeledDataset:
    manifest, rows = _manifest_and_rows(read, where)
    if len(rows) < 2 or len(rows[0]) < 2:
        raise DatasetFormatError(f"{LABELS_NAME} has no samples or no label columns", where)
    header, body = rows[0], rows[1:]
    class_names = manifest.get("class_names", header[1:])
    if len(class_names) != len(header) - 1:
        raise DatasetFormatError(
            f"{LABELS_NAME} has {len(header) - 1} label columns but the manifest lists "
            f"{len(class_names)} class names",
            where,
        )
    image_shape = manifest.get("image_shape")
    channels = int(image_shape[0]) if image_shape else None
    images, soft = [], []
    for line, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise DatasetFormatError(
                f"{LABELS_NAME} line {line} has {len(row)} fields, expected {len(header)}", where
            )
        data = read(row[0])
        if data is None:
            raise DatasetFormatError(
                f"{LABELS_NAME} line {line} names missing image {row[0]!r}", where
            )
        images.append(_decode_png(data, channels, f"{where}/{row[0]}"))
        try:
            soft.append([float(v) for v in row[1:]])
        except ValueError as err:
            raise DatasetFormatError(f"{LABELS_NAME} line {line}: {err}", where) from err
    features, shape = _stack_images(images, image_shape, where)
    return _dataset(
        features,
        np.asarray(soft, dtype=np.float32),
        class_names,
        shape,
        manifest.get("name"),
        manifest.get("metadata"),
        where,
    )


def _imagefolder_hard_labels(path: Path, container: str) -> tuple[np.ndarray, dict[str, Any]]:
    def parse(read: Any) -> tuple[np.ndarray, dict[str, Any]]:
        manifest, rows = _manifest_and_rows(read, path)
        if not rows or len(rows[0]) < 2:
            raise DatasetFormatError(f"{LABELS_NAME} has no label columns", path)
        class_names = manifest.get("class_names", rows[0][1:])
        folders = manifest.get("class_folders")
        if not (
            isinstance(folders, list)
            and len(folders) == len(class_names)
            and all(isinstance(f, str) for f in folders)
        ):  # an export written before the folders were recorded: derive them as its writer did
            folders = class_folder_names(class_names)
        index = {f: k for k, f in enumerate(folders)}
        out = []
        for line, row in enumerate(rows[1:], start=2):
            folder = PurePosixPath(row[0]).parts[0] if row and row[0] else ""
            if folder not in index:
                raise DatasetFormatError(
                    f"{LABELS_NAME} line {line}: {row[0]!r} is not under a class folder", path
                )
            out.append(index[folder])
        return np.asarray(out, dtype=np.int64), manifest

    try:
        with _imagefolder_reader(path, container) as read:
            return parse(read)
    except (OSError, zipfile.BadZipFile) as err:
        what = "corrupt zip archive" if container == "zip" else "unreadable ImageFolder"
        raise DatasetFormatError(f"{what}: {err}", path) from err


def _build_imagefolder(
    ds: SoftLabeledDataset, filename: str, created: str, labels: np.ndarray, hard: dict[str, Any]
) -> BuiltExport:
    pngs, quant = _png_payload(ds, "imagefolder")
    manifest = _base_manifest(ds, "imagefolder", created, hard, quant)
    # the folder of each class, in class order: names are made safe (Windows devices such as
    # COM¹ get a "_" prefix, clashes a "_<index>" suffix), so a reader need not re-derive them
    manifest["class_folders"] = class_folder_names(ds.class_names)
    return BuiltExport(_imagefolder_files(ds, pngs, labels), manifest)


def _imagefolder_snippet(filename: str) -> str:
    name = json.dumps(str(filename), ensure_ascii=False)
    source = "data_files" if str(filename).lower().endswith(".zip") else "data_dir"
    return f'from datasets import load_dataset; ds = load_dataset("imagefolder", {source}={name}, split="train")'


#: the ``imagefolder`` format (registered by :mod:`geoviz.export.formats`)
SPEC = ExportFormatSpec(
    name="imagefolder",
    extension=".zip",
    description="ImageFolder zip — class/idx.png + labels.csv + manifest.json, lossy (uint8)",
    mime="application/zip",
    build=_build_imagefolder,
    read=_load_imagefolder,
    tree=True,
    images_only=True,
    sniff=lambda _head, names: (
        names is not None and any(n.rsplit("/", 1)[-1] == LABELS_NAME for n in names)
    ),
    hard_labels=_imagefolder_hard_labels,
    snippet=_imagefolder_snippet,
)
