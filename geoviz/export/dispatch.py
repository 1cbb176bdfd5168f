"""Entry points: :func:`export_dataset`, :func:`export_bytes`, :func:`load_export`.

They build the manifest, call the writer or reader of the format module and
write atomically (:func:`geoviz.atomic.atomic_write_many`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geoviz.atomic import AtomicWriteError, Content, atomic_write_many
from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import ExportError, ExportExistsError
from geoviz.export.datasets import _as_soft
from geoviz.export.formats import ExportFormat
from geoviz.export.hard_labels import (
    DEFAULT_HARD_LABEL_RULE,
    HardLabelRule,
    _check_seed,
    check_hard_label_rule,
    dataset_hard_labels,
)
from geoviz.export.imagefolder import _zip_bytes
from geoviz.export.manifest import (
    _file_entry,
    _is_geoviz_export_dir,
    _json_bytes,
    _now_utc,
    verify_manifest,
)
from geoviz.export.names import MANIFEST_NAME, safe_name, sidecar_manifest_path
from geoviz.export.registry import (
    BuiltExport,
    ExportFormatSpec,
    existing,
    export_formats,
    format_spec,
    read_export,
    resolve_target,
)


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_dataset` wrote.

    Attributes
    ----------
    format
        The export format.
    paths
        Every path written: the data (file, directory or zip) first, the
        manifest last.
    manifest
        The manifest as written (a plain JSON-able dict).
    """

    format: str
    paths: tuple[Path, ...]
    manifest: dict[str, Any]

    @property
    def data_path(self) -> Path:
        return self.paths[0]

    @property
    def manifest_path(self) -> Path:
        return self.paths[-1]


def _build(
    ds: SoftLabeledDataset,
    spec: ExportFormatSpec,
    filename: str,
    created: str,
    rule: HardLabelRule,
    seed: int,
) -> BuiltExport:
    """Serialise ``ds`` with the format's writer; single-file formats embed the manifest
    (without checksums)."""
    if spec.images_only and ds.image_shape is None:
        raise ExportError(
            f"format {spec.name!r} holds images only and {ds.name!r} holds vectors: "
            f"use one of {', '.join(export_formats(images=False))}"
        )
    labels, hard = dataset_hard_labels(ds, rule, seed)
    return spec.build(ds, filename, created, labels, hard)


def _with_inner_manifest(built: BuiltExport) -> dict[str, bytes]:
    files = dict(built.files)
    manifest = {**built.manifest, "files": {rel: _file_entry(data) for rel, data in files.items()}}
    files[MANIFEST_NAME] = _json_bytes(manifest)
    return files


def _atomic_write(entries: list[tuple[Path, Content]], overwrite: bool) -> None:
    """Write every entry (file bytes or a directory tree) all-or-nothing.

    All targets must share one parent directory (created if missing). Refuses
    existing output unless ``overwrite``, and never replaces a non-empty
    directory that is not a geoviz export; the writing itself is
    :func:`geoviz.atomic.atomic_write_many`.
    """
    for target, _ in entries:
        if os.path.lexists(target):
            if not overwrite:
                hint = (
                    " (the manifest of an export with the same stem: choose another name)"
                    if target.name.endswith(".manifest.json")
                    else ""
                )
                raise ExportExistsError(
                    f"{target} already exists{hint}; pass overwrite=True to replace it"
                )
            if target.is_dir() and not target.is_symlink() and not _is_geoviz_export_dir(target):
                raise ExportError(
                    f"refusing to replace directory {target}: it is not empty and not a geoviz export"
                )
    try:
        atomic_write_many(entries, overwrite=overwrite)
    except AtomicWriteError as err:
        cause = err.cause
        if isinstance(cause, FileExistsError):
            raise ExportExistsError(
                f"{err.path} already exists; pass overwrite=True to replace it"
            ) from cause
        raise ExportError(f"could not write {err.path}: {cause.strerror or cause}") from cause
    except ValueError as err:  # an unsafe member path
        raise ExportError(str(err)) from err


def export_dataset(
    ds: SoftLabeledDataset | LabeledDataset,
    path: str | Path,
    *,
    format: ExportFormat | str | None = None,
    overwrite: bool = False,
    hard_label_rule: HardLabelRule = DEFAULT_HARD_LABEL_RULE,
    hard_label_seed: int = 0,
) -> ExportResult:
    """Write ``ds`` to ``path`` with a checksummed manifest, atomically.

    Parameters
    ----------
    ds
        The dataset; a :class:`LabeledDataset` is exported with one-hot soft
        labels over ``"name/class"``.
    path
        ``*.npz``, ``*.pt``, ``*.parquet``, ``*.zip`` (ImageFolder zip) or a
        directory (ImageFolder).
    format
        A registered format (:func:`~geoviz.export.registry.export_formats`: the built-in
        ``"npz"``, ``"pt"``, ``"imagefolder"``, ``"parquet"``, and any other registered);
        inferred from ``path`` when ``None``. A known suffix must agree with it.
    overwrite
        Replace existing output. Otherwise an existing data file, manifest or
        directory raises :class:`~geoviz.errors.ExportError` naming it. A
        non-empty directory that is not a geoviz export is never replaced.
    hard_label_rule, hard_label_seed
        How the hard labels (``labels``/``label`` columns, ImageFolder class
        folders) are derived from the soft labels: see
        :func:`dataset_hard_labels`. ``"block-sample"`` (default) gives each
        reference a share of hard labels matching its weight ``a_i``;
        ``"argmax"`` is the argmax over all classes (the earlier behaviour,
        which over-represents large weights). Recorded in the manifest
        (``hard_labels``).

    Returns
    -------
    ExportResult
        Paths written (data first, manifest last) and the manifest.

    Raises
    ------
    ExportError
        Existing output, unknown/mismatched format, unknown hard-label rule,
        vectors to an image format, or an I/O failure (nothing is left behind).

    Examples
    --------
    A small soft-labelled dataset written as ``.npz`` with its manifest, and read back
    exactly (the manifest's checksums verified):

    >>> import torch
    >>> from geoviz.data.dataset import SoftLabeledDataset
    >>> from geoviz.export import export_dataset, load_export
    >>> ds = SoftLabeledDataset(
    ...     features=torch.tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]),
    ...     soft_labels=torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]),
    ...     class_names=("mnist/0", "usps/0"),
    ...     name="P_a(0.5,0.5)",
    ... )
    >>> result = export_dataset(ds, "out/synth.npz")
    >>> result.format, [p.name for p in result.paths], result.manifest["fidelity"]
    ('npz', ['synth.npz', 'synth.manifest.json'], 'lossless')
    >>> back = load_export("out/synth.npz", verify=True)
    >>> torch.equal(back.features, ds.features), torch.equal(back.soft_labels, ds.soft_labels)
    (True, True)
    >>> back.class_names, back.name
    (('mnist/0', 'usps/0'), 'P_a(0.5,0.5)')

    Existing output is never replaced silently:

    >>> export_dataset(ds, "out/synth.npz")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    geoviz.errors.ExportExistsError: ...synth.npz already exists; pass overwrite=True to replace it
    """
    soft = _as_soft(ds)
    rule = check_hard_label_rule(hard_label_rule)
    seed = _check_seed(hard_label_seed)
    path = Path(path)
    spec, container = resolve_target(path, format)
    created = _now_utc()
    built = _build(soft, spec, path.name, created, rule, seed)
    if container == "dir":
        files = _with_inner_manifest(built)
        _atomic_write([(path, files)], overwrite)
        manifest = json.loads(files[MANIFEST_NAME])
        return ExportResult(spec.name, (path, path / MANIFEST_NAME), manifest)
    data = (
        _zip_bytes(_with_inner_manifest(built), created)
        if container == "zip"
        else built.files[path.name]
    )
    manifest = {**built.manifest, "files": {path.name: _file_entry(data)}}
    if container == "zip":
        manifest["container"] = "zip"
    sidecar = sidecar_manifest_path(path)
    _atomic_write([(path, data), (sidecar, _json_bytes(manifest))], overwrite)
    return ExportResult(spec.name, (path, sidecar), manifest)


#: Short alias: ``export(ds, "out/synth.npz")``.
export = export_dataset


def export_bytes(
    ds: SoftLabeledDataset | LabeledDataset,
    format: ExportFormat | str,
    *,
    hard_label_rule: HardLabelRule = DEFAULT_HARD_LABEL_RULE,
    hard_label_seed: int = 0,
) -> tuple[bytes, str, str]:
    """Serialise ``ds`` in memory for a download button.

    ``hard_label_rule`` and ``hard_label_seed`` are as for :func:`export_dataset`.

    Returns
    -------
    data, filename, mime
        ``imagefolder`` gives a zip with ``manifest.json`` (checksums of every
        member) inside; ``npz``/``pt``/``parquet`` give the single file with the
        manifest embedded (``manifest_json`` key, ``manifest`` entry, schema
        metadata ``geoviz_manifest``; no file checksums, but its
        ``export_fingerprint`` lets :func:`verify_manifest` check the content).
        The filename is derived from ``ds.name``.
    """
    soft = _as_soft(ds)
    spec = format_spec(format)
    rule = check_hard_label_rule(hard_label_rule)
    seed = _check_seed(hard_label_seed)
    filename = safe_name(soft.name, fallback="synthetic") + spec.extension
    created = _now_utc()
    built = _build(soft, spec, filename, created, rule, seed)
    data = _zip_bytes(_with_inner_manifest(built), created) if spec.tree else built.files[filename]
    return data, filename, spec.mime


def load_export(path: str | Path, *, verify: bool = False) -> SoftLabeledDataset:
    """Read any export of :mod:`geoviz.export` back into a :class:`SoftLabeledDataset`.

    Features are exact for npz/pt/Parquet vectors and ``uint8 / 255`` for the
    PNG-based formats; soft labels, class names, image shape, name and
    metadata are exact. The format is taken from the suffix, else sniffed.

    Parameters
    ----------
    path
        A file (``.npz``, ``.pt``, ``.parquet``, ``.zip``) or ImageFolder directory.
    verify
        Check the manifest checksums first (:func:`verify_manifest`).

    Raises
    ------
    DatasetFormatError
        Missing, corrupt or foreign files.
    """
    path = existing(path)
    if verify:
        verify_manifest(path)
    return read_export(path)
