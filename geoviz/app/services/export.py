"""Export page: ``P_a`` as bytes for the browser or as files in the server's export folder."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from geoviz.app.services.caches import store
from geoviz.backend import digest_bytes
from geoviz.data.dataset import SoftLabeledDataset
from geoviz.errors import ExportError
from geoviz.export import (
    ExportFormat,
    ExportResult,
    HardLabelRule,
    export_bytes,
    export_dataset,
    format_spec,
    safe_name,
)

if TYPE_CHECKING:
    from geoviz.geodesic.uncertainty import GeodesicBootstrap


def with_intervals(
    ds: SoftLabeledDataset, bootstrap: GeodesicBootstrap | None
) -> SoftLabeledDataset:
    """``ds`` whose manifest will carry ``bootstrap``'s intervals, as the CLI's does.

    The ``uncertainty`` entry of the metadata is :meth:`GeodesicBootstrap.manifest
    <geoviz.geodesic.uncertainty.GeodesicBootstrap.manifest>` (what ``geoviz project
    --bootstrap R --out ...`` writes), and :func:`geoviz.export.manifest` copies it into the
    manifest. The app passes the explorer's bootstrap
    (:func:`~geoviz.app.services.geodesic.explorer_bootstrap`): the very intervals the
    Geodesic page showed. ``None`` (no bootstrap, or it failed): ``ds`` unchanged.
    """
    if bootstrap is None:
        return ds
    return dataclasses.replace(ds, metadata={**ds.metadata, "uncertainty": bootstrap.manifest()})


def _uncertainty_key(ds: SoftLabeledDataset) -> str:
    """The manifest's intervals as part of the export's cache key (the fingerprint covers
    features and labels only: the same ``P_a`` with and without intervals differ)."""
    block: Any = ds.metadata.get("uncertainty")
    text = json.dumps(block, sort_keys=True, default=str)
    return digest_bytes([text.encode()], length=16)


def export_payload(
    ds: SoftLabeledDataset, fmt: ExportFormat, rule: HardLabelRule = "block-sample", seed: int = 0
) -> tuple[bytes, str, str]:
    """``(bytes, file name, MIME type)`` of ``ds`` in ``fmt`` with hard labels by ``rule``
    (:func:`geoviz.export.export_bytes`). Cached by the dataset's fingerprint and name,
    the format, the rule and the seed."""
    return store().get_or_compute(
        _export_key(ds, fmt, rule, seed),
        lambda: export_bytes(ds, fmt, hard_label_rule=rule, hard_label_seed=seed),
        tier="derived",
    )


def _export_key(ds: SoftLabeledDataset, fmt: str, rule: str, seed: int) -> tuple[Hashable, ...]:
    return ("export", ds.fingerprint, ds.name, fmt, rule, int(seed), _uncertainty_key(ds))


def export_ready(ds: SoftLabeledDataset, fmt: ExportFormat, rule: HardLabelRule, seed: int) -> bool:
    """Whether :func:`export_payload` has these bytes in memory already (no work done)."""
    return _export_key(ds, fmt, rule, seed) in store()


def export_folder(root: Path, subfolder: str = "") -> Path:
    """The folder of a server-side export: ``root`` or one sanitised sub-folder of it.

    ``subfolder`` is what a visitor typed: reduced to one safe name
    (:func:`geoviz.export.safe_name`; ``/``, ``..`` and ``~`` cannot survive it), created
    inside ``root`` if missing, and the resolved folder must still be inside ``root`` (a
    symlink planted there cannot lead out). Nothing is created anywhere else.

    Raises
    ------
    ExportError
        The folder would be outside ``root``, or ``root`` is not a folder.
    """
    base = Path(root).resolve()
    if not base.is_dir():
        raise ExportError("the server's export folder does not exist; ask its operator")
    text = str(subfolder).strip()
    folder = base / safe_name(text, fallback="exports") if text else base
    if folder != base and not folder.is_symlink():
        folder.mkdir(exist_ok=True)  # one level, inside root: base exists
    if not folder.resolve().is_relative_to(base) or not folder.is_dir():
        raise ExportError(f"{folder.name!r} is not a folder inside the server's export folder")
    return folder.resolve()


def save_export(
    ds: SoftLabeledDataset,
    root: Path,
    fmt: ExportFormat,
    *,
    subfolder: str = "",
    overwrite: bool,
    rule: HardLabelRule,
    seed: int,
) -> ExportResult:
    """Write ``ds`` as ``<safe name>.<ext>`` into :func:`export_folder` ``(root, subfolder)``
    with :func:`geoviz.export.export_dataset`.

    ``root`` is the operator's ``GEOVIZ_EXPORT_ROOT`` (:attr:`AppSettings.export_root`);
    without one the app offers only the browser download.

    Raises
    ------
    ExportExistsError
        The file exists and ``overwrite`` is false (nothing is written).
    GeovizError, OSError
        Invalid input, or the folder cannot be written.
    """
    ext = format_spec(fmt).extension
    target = export_folder(root, subfolder) / (safe_name(ds.name, fallback="synthetic") + ext)
    return export_dataset(
        ds, target, format=fmt, overwrite=overwrite, hard_label_rule=rule, hard_label_seed=seed
    )
