"""The manifest of an export (provenance, fidelity, sha256 of every file) and its check."""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from geoviz import __version__
from geoviz.data.dataset import SoftLabeledDataset
from geoviz.errors import DatasetFormatError, ExportError, GeovizError
from geoviz.export.names import MANIFEST_NAME, sidecar_manifest_path
from geoviz.export.png import _lossy_dataset, _Quantised
from geoviz.export.registry import embedded_manifest, read_export, sniff_format
from geoviz.files import read_regular_file

#: the largest ``manifest.json`` read back (one of 60,000 samples' hard labels is ~1 MB)
MAX_MANIFEST_BYTES = 256 * 1024**2

#: Version of the manifest layout written by :mod:`geoviz.export`.
MANIFEST_VERSION = 1


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_entry(data: bytes) -> dict[str, Any]:
    return {"sha256": _sha256(data), "bytes": len(data)}


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _version() -> str:
    return __version__


def _dataset_entry(entry: Any, role: str, fingerprint: Any = None) -> dict[str, Any] | None:
    if isinstance(entry, Mapping):
        out = {"role": str(entry.get("role", role)), "name": entry.get("name")}
        out["fingerprint"] = entry.get("fingerprint", fingerprint)
        return out
    if isinstance(entry, str):
        return {"role": role, "name": entry, "fingerprint": fingerprint}
    return None


def _provenance(metadata: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Datasets (role, name, fingerprint) named in the metadata (keys in the :mod:`geoviz.export` docstring)."""
    found: list[dict[str, Any]] = []
    listed = metadata.get("datasets")
    if isinstance(listed, list):
        found.extend(e for e in (_dataset_entry(x, "dataset") for x in listed) if e)
    target = metadata.get("target", metadata.get("target_name"))
    if target is not None:
        entry = _dataset_entry(target, "target", metadata.get("target_fingerprint"))
        if entry:
            found.append(entry)
    refs = metadata.get("references", metadata.get("reference_names"))
    fps = metadata.get("reference_fingerprints")
    if isinstance(refs, list):
        for i, ref in enumerate(refs):
            fp = fps[i] if isinstance(fps, list) and i < len(fps) else None
            entry = _dataset_entry(ref, "reference", fp)
            if entry:
                found.append(entry)
    return found


def _weights(metadata: Mapping[str, Any]) -> Any:
    """The interpolation weights keyed by reference name (``{"mnist": 0.5, ...}``) when the
    metadata names one distinct reference per weight; otherwise as the metadata has them."""
    weights = metadata.get("weights")
    names = [e["name"] for e in _provenance(metadata) if e["role"] == "reference"]
    if (
        isinstance(weights, list)
        and len(weights) == len(names)
        and all(isinstance(n, str) for n in names)
        and len(set(names)) == len(names)
    ):
        return dict(zip(names, weights, strict=True))
    return weights


def _base_manifest(
    ds: SoftLabeledDataset,
    fmt: str,
    created: str,
    hard: dict[str, Any],
    quant: _Quantised | None = None,
) -> dict[str, Any]:
    """Manifest without ``files`` (those are added once the bytes are known)."""
    meta = ds.metadata
    manifest: dict[str, Any] = {
        "generator": "geoviz",
        "geoviz_version": _version(),
        "manifest_version": MANIFEST_VERSION,
        "format": fmt,
        "created": created,
        "name": ds.name,
        "n_samples": ds.n_samples,
        "n_features": int(ds.features.shape[1]),
        "n_classes": len(ds.class_names),
        "image_shape": list(ds.image_shape) if ds.image_shape else None,
        "class_names": list(ds.class_names),
        "fingerprint": ds.fingerprint,
        "export_fingerprint": ds.fingerprint
        if quant is None
        else _lossy_dataset(ds, quant).fingerprint,
        "lossless": quant is None,
        "fidelity": "lossless" if quant is None else "lossy (uint8)",
        "quantization": None
        if quant is None
        else {
            "dtype": "uint8",
            "encode": "round(255 * clip(x, 0, 1))",
            "decode": "uint8 / 255 (float32)",
            "max_abs_error": quant.max_abs_error,
            "n_clipped": quant.n_clipped,
        },
        "datasets": _provenance(meta),
        "weights": _weights(meta),
        "uncertainty": meta.get("uncertainty"),
        "hard_labels": hard,
        "metadata": meta,
    }
    return manifest


def _is_geoviz_export_dir(path: Path) -> bool:
    if not any(path.iterdir()):
        return True
    try:
        raw = read_regular_file(path / MANIFEST_NAME, max_bytes=MAX_MANIFEST_BYTES)
        manifest = json.loads(raw.decode("utf-8"))
    except (GeovizError, OSError, ValueError):  # missing, not a regular file, not JSON
        return False
    return isinstance(manifest, dict) and manifest.get("generator") == "geoviz"


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        if not path.exists():
            raise ExportError(f"{path}: manifest not found")
        raw = read_regular_file(  # a FIFO or /dev/zero named manifest.json is refused
            path,
            max_bytes=MAX_MANIFEST_BYTES,
            error=lambda problem: ExportError(f"{path}: unreadable manifest: {problem}"),
        )
        manifest = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError) as err:
        raise ExportError(f"{path}: unreadable manifest: {err}") from err
    if (
        not isinstance(manifest, dict)
        or not isinstance(manifest.get("files"), dict)
        or not manifest["files"]
    ):
        raise ExportError(f"{path}: manifest lists no files to verify")
    return manifest


def _check_entry(label: str, data: bytes | None, entry: Any, manifest_name: str) -> None:
    if data is None:
        raise ExportError(f"{label}: listed in {manifest_name} but missing")
    expected = entry.get("sha256") if isinstance(entry, dict) else entry
    found = _sha256(data)
    if found != expected:
        raise ExportError(
            f"{label}: sha256 {found} does not match {expected} in {manifest_name}; "
            "the file was modified or corrupted"
        )


def _verify_tree(manifest: dict[str, Any], read: Any, where: str, manifest_name: str) -> None:
    for rel, entry in manifest["files"].items():
        parts = PurePosixPath(rel).parts
        if not parts or ".." in parts or PurePosixPath(rel).is_absolute():
            raise ExportError(f"{manifest_name}: unsafe path {rel!r}")
        _check_entry(f"{where}/{rel}", read(rel), entry, manifest_name)


def _verify_zip(path: Path) -> bool:
    """Check the members of an ImageFolder zip against its inner manifest (False: none)."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            if MANIFEST_NAME not in names:
                return False
            try:
                manifest = json.loads(zf.read(MANIFEST_NAME))
            except ValueError as err:
                raise ExportError(f"{path}/{MANIFEST_NAME}: unreadable manifest: {err}") from err
            if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
                raise ExportError(f"{path}/{MANIFEST_NAME}: manifest lists no files to verify")
            _verify_tree(
                manifest,
                lambda rel: zf.read(rel) if rel in names else None,
                str(path),
                f"{path}/{MANIFEST_NAME}",
            )
    except (OSError, zipfile.BadZipFile) as err:
        raise ExportError(f"{path}: corrupt zip archive: {err}") from err
    return True


def verify_manifest(path: str | Path) -> None:
    """Check every file of an export against the sha256 sums in its manifest.

    Parameters
    ----------
    path
        The data file (its sidecar ``<stem>.manifest.json`` is used), an
        ImageFolder directory (``manifest.json`` inside), an ImageFolder zip
        (sidecar if present, and always the ``manifest.json`` inside), or a
        manifest file. For a single file without a sidecar (e.g. from
        :func:`export_bytes`) the content is checked against the embedded
        manifest's ``export_fingerprint`` instead.

    Raises
    ------
    ExportError
        A file is missing, differs from its checksum, or no manifest exists.
    """
    path = Path(path)
    if path.is_dir():
        manifest_path = path / MANIFEST_NAME
        manifest = _read_manifest(manifest_path)
        root = path.resolve()
        _verify_tree(manifest, lambda rel: _read_or_none(root / rel), str(path), str(manifest_path))
        return
    if path.name.endswith(".json"):
        manifest_path, data_paths = path, None
    else:
        manifest_path, data_paths = sidecar_manifest_path(path), [path]
        if not path.exists():
            raise ExportError(f"{path}: no such export")
    if manifest_path.exists():
        manifest = _read_manifest(manifest_path)
        root = manifest_path.parent
        _verify_tree(manifest, lambda rel: _read_or_none(root / rel), str(root), str(manifest_path))
        if data_paths is None:
            data_paths = [root / rel for rel in manifest["files"]]
        for data_path in data_paths:
            if zipfile.is_zipfile(data_path) and _is_zipped_tree(data_path):
                _verify_zip(data_path)
        return
    if data_paths is None:
        raise ExportError(f"{manifest_path}: manifest not found")
    if _is_zipped_tree(path):
        if not _verify_zip(path):
            raise ExportError(
                f"{path}: no manifest (neither {manifest_path.name} nor one inside the zip)"
            )
        return
    embedded = embedded_manifest(path)
    if not embedded or "export_fingerprint" not in embedded:
        raise ExportError(f"{path}: no manifest ({manifest_path.name} missing and none embedded)")
    try:
        found = read_export(path).fingerprint
    except DatasetFormatError as err:
        raise ExportError(f"{path}: corrupt export: {err.problem}") from err
    if found != embedded["export_fingerprint"]:
        raise ExportError(
            f"{path}: content fingerprint {found} does not match {embedded['export_fingerprint']} "
            "in the embedded manifest; the file was modified"
        )


def _read_or_none(path: Path) -> bytes | None:
    if not path.is_file():  # missing, a folder, a FIFO or a device: not an exported file
        return None
    return read_regular_file(
        path, error=lambda problem: ExportError(f"{path}: unreadable export file: {problem}")
    )


def _is_zipped_tree(path: Path) -> bool:
    """Whether ``path`` is a tree format written as a ``.zip`` (its manifest inside)."""
    spec, container = sniff_format(path)
    return spec.tree and container == "zip"
