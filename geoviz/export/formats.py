"""The format table and which format a path holds.

Names, suffixes, MIME types, descriptions and load snippets of the four
formats; sniffing a path's format; the per-format readers behind
:func:`~geoviz.export.load_export` and the embedded manifests.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, get_args

from geoviz.data.dataset import SoftLabeledDataset
from geoviz.errors import DatasetFormatError, ExportError
from geoviz.export.imagefolder import _load_imagefolder
from geoviz.export.names import LABELS_NAME
from geoviz.export.npz import _load_npz, _npz_manifest
from geoviz.export.parquet import _load_parquet, _parquet_manifest
from geoviz.export.pt import _load_pt, _pt_manifest

ExportFormat = Literal["npz", "pt", "imagefolder", "parquet"]
FORMATS: tuple[str, ...] = get_args(ExportFormat)

_SUFFIX_FORMAT = {
    ".npz": "npz",
    ".pt": "pt",
    ".pth": "pt",
    ".parquet": "parquet",
    ".zip": "imagefolder",
}
_EXTENSION = {"npz": ".npz", "pt": ".pt", "parquet": ".parquet", "imagefolder": ".zip"}
_MIME = {
    "npz": "application/octet-stream",
    "pt": "application/octet-stream",
    "parquet": "application/vnd.apache.parquet",
    "imagefolder": "application/zip",
}
_DESCRIPTIONS = {
    "npz": "npz — NumPy archive (features, soft_labels, labels, class_names), lossless",
    "pt": "pt — torch.load(weights_only=True) dict of tensors, lossless",
    "imagefolder": "ImageFolder zip — class/idx.png + labels.csv + manifest.json, lossy (uint8)",
    "parquet": "Parquet — one row per sample, Hugging Face datasets compatible",
}


def _check_format(fmt: str) -> ExportFormat:
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")
    return fmt  # type: ignore[return-value]


def _resolve_target(
    path: Path, fmt: str | None
) -> tuple[ExportFormat, Literal["file", "dir", "zip"]]:
    """Format and container for ``path`` (format inferred from the suffix when ``None``)."""
    suffix = path.suffix.lower()
    inferred = _SUFFIX_FORMAT.get(suffix)
    if fmt is None:
        if inferred is not None:
            fmt = inferred
        elif suffix == "" or path.is_dir():
            fmt = "imagefolder"
        else:
            raise ExportError(
                f"{path}: cannot infer the export format from suffix {suffix!r}; use .npz, .pt, "
                ".parquet, .zip or a directory, or pass format="
            )
    fmt = _check_format(fmt)
    if inferred is not None and inferred != fmt:
        raise ExportError(f"{path}: suffix {suffix!r} does not match format {fmt!r}")
    if fmt == "imagefolder":
        return fmt, "zip" if suffix == ".zip" else "dir"
    return fmt, "file"


def format_description(fmt: str, *, images: bool = True) -> str:
    """One line describing export format ``fmt`` for users, with its fidelity.

    ``images`` says whether the dataset holds images: Parquet stores those as
    uint8 PNGs (``"lossy (uint8)"``) and vectors as float32 (lossless).
    """
    fmt = _check_format(fmt)
    text = _DESCRIPTIONS[fmt]
    if fmt == "parquet":
        text += ", lossy (uint8) for images" if images else ", lossless for vectors"
    return text


def load_snippet(format: ExportFormat, filename: str) -> str:
    """One line of Python that loads an exported file (numpy, torch or HF ``datasets``)."""
    fmt = _check_format(format)
    name = json.dumps(str(filename), ensure_ascii=False)
    if fmt == "npz":
        return f'import numpy as np; d = np.load({name}); X, Y = d["features"], d["soft_labels"]'
    if fmt == "pt":
        return (
            f"import torch; d = torch.load({name}, weights_only=True); "
            'X, Y = d["features"], d["soft_labels"]'
        )
    if fmt == "parquet":
        return f'from datasets import load_dataset; ds = load_dataset("parquet", data_files={name}, split="train")'
    source = "data_files" if str(filename).lower().endswith(".zip") else "data_dir"
    return f'from datasets import load_dataset; ds = load_dataset("imagefolder", {source}={name}, split="train")'


def _sniff_format(path: Path) -> tuple[ExportFormat, Literal["file", "dir", "zip"]]:
    if path.is_dir():
        return "imagefolder", "dir"
    suffix = path.suffix.lower()
    if suffix in _SUFFIX_FORMAT:
        fmt = _SUFFIX_FORMAT[suffix]
        return fmt, "zip" if fmt == "imagefolder" else "file"  # type: ignore[return-value]
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError as err:
        raise DatasetFormatError(f"cannot read export: {err.strerror or err}", path) from err
    if head == b"PAR1":
        return "parquet", "file"
    if head.startswith(b"PK"):
        try:
            with zipfile.ZipFile(path) as zf:
                names = zf.namelist()
        except zipfile.BadZipFile as err:
            raise DatasetFormatError(f"corrupt zip archive: {err}", path) from err
        if "features.npy" in names:
            return "npz", "file"
        if any(n.endswith("data.pkl") for n in names):
            return "pt", "file"
        if any(n.rsplit("/", 1)[-1] == LABELS_NAME for n in names):
            return "imagefolder", "zip"
    raise DatasetFormatError("not a geoviz export (npz, pt, parquet, ImageFolder dir or zip)", path)


#: Readers of the single-file formats (ImageFolder also needs its container).
_FILE_LOADERS: dict[str, Callable[[Path], SoftLabeledDataset]] = {
    "npz": _load_npz,
    "pt": _load_pt,
    "parquet": _load_parquet,
}

#: The manifest embedded in a single-file export, or ``None``.
_EMBEDDED_MANIFEST: dict[str, Callable[[Path], dict[str, Any] | None]] = {
    "npz": _npz_manifest,
    "pt": _pt_manifest,
    "parquet": _parquet_manifest,
}


def _existing(path: str | Path) -> Path:
    """``path`` as a :class:`~pathlib.Path`; :class:`DatasetFormatError` when nothing is there."""
    path = Path(path)
    if not path.exists():
        raise DatasetFormatError("no such file or directory", path)
    return path


def _read_export(path: Path) -> SoftLabeledDataset:
    """Read the export at ``path`` (which exists) with the reader of its format."""
    fmt, container = _sniff_format(path)
    if fmt == "imagefolder":
        return _load_imagefolder(path, container)
    return _FILE_LOADERS[fmt](path)


def _embedded_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest inside a single-file export (npz, pt, Parquet), or ``None``."""
    fmt, _ = _sniff_format(path)
    read = _EMBEDDED_MANIFEST.get(fmt)
    if read is None:
        return None
    try:
        return read(path)
    except Exception as err:  # any parse failure of a file claiming to be an export
        raise ExportError(f"{path}: corrupt export: {err}") from err
