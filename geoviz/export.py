"""Writers and readers for synthetic soft-labelled datasets, with a checksummed manifest.

A :class:`~geoviz.data.dataset.SoftLabeledDataset` (e.g. a point ``P_a`` of a
generalized geodesic, paper Sec. 3.2-3.3) is exported in one of four formats:

``"npz"``
    One ``.npz`` file readable with ``np.load(path)`` (``allow_pickle=False``
    works: there are no object arrays). Keys: ``features`` float32 ``(N, D)``,
    ``soft_labels`` float32 ``(N, K)``, ``labels`` int64 ``(N,)`` (hard labels, see below),
    ``class_names`` unicode ``(K,)``, ``image_shape`` int64 ``(3,)`` = ``(C, H, W)``
    or ``(0,)`` for vectors, ``images`` uint8 ``(N, H, W)`` (one channel) or
    ``(N, H, W, C)`` for image data only (re-quantised, see below),
    ``metadata_json`` and ``manifest_json`` (0-d unicode arrays holding JSON).
    Lossless.
``"pt"``
    One file loadable with ``torch.load(path, weights_only=True)``: a dict with
    tensors ``features``, ``soft_labels``, ``labels`` and plain Python values
    ``class_names`` (list of str), ``image_shape`` (list or ``None``), ``name``,
    ``metadata`` and ``manifest`` (dicts). Lossless.
``"parquet"``
    One Parquet file (one row per sample) with columns ``image`` (a struct
    ``{"bytes": PNG bytes, "path": "<index>.png"}``, the layout of the Hugging
    Face ``datasets`` ``Image`` feature) for image data, or ``features``
    (``list<float32>``) for vectors; ``label`` (int64 hard label) and
    ``soft_labels`` (``list<float32>``). Schema metadata: ``class_names``
    (JSON list), ``geoviz_manifest`` (JSON) and ``huggingface`` (feature types,
    so ``datasets.load_dataset("parquet", data_files=...)`` decodes ``image``
    as an ``Image`` and ``label`` as a ``ClassLabel``). Lossless for vectors,
    lossy (uint8) for images (PNG).
``"imagefolder"``
    A directory, or a ``.zip`` of the same tree, with one PNG per sample under
    ``<hard-label class name made safe for file systems>/<index>.png``,
    ``labels.csv`` (columns ``file_name`` then one column per class name with
    the soft label, written with full float32 precision) and ``manifest.json``.
    Image data only; lossy (uint8) (PNG).

Hard labels (``labels``, ``label``, ImageFolder class folders) are derived
from the soft labels by a rule (:func:`hard_labels_from_soft`,
:func:`dataset_hard_labels`): ``"block-sample"`` (default) draws, per sample,
a reference block ``i`` with probability ``a_i`` (seeded) and takes the
argmax within it, so each reference's share of hard labels matches the
weights; ``"argmax"`` takes the argmax over all concatenated, ``a``-scaled
classes, which over-represents references with large weights. The manifest
records the rule, the seed and the per-reference shares (``hard_labels``);
manifests without it (older exports) used ``"argmax"`` (:func:`load_hard_labels`).

PNG-based formats are lossy: features are clipped to ``[0, 1]`` and rounded to
multiples of ``1/255`` (``uint8 = round(255 * x)``; read back as ``uint8 / 255``
in float32), so features are recovered to within ``1/510`` when they lie in
``[0, 1]``, and exactly when they already are multiples of ``1/255``. Values
outside ``[0, 1]`` are clipped with a warning. The manifest records the
maximum error (``quantization.max_abs_error``) and ``fidelity``
(``"lossless"`` or ``"lossy (uint8)"``). Soft labels, class names,
image shape and metadata always round-trip exactly.

Every export writes a manifest beside the data: ``out/synth.npz`` comes with
``out/synth.manifest.json``; an ImageFolder directory holds its own
``manifest.json`` (a zip holds one inside and also gets a sidecar). The
manifest records the generator and its version, the format, the creation time
(UTC), sizes, class names, the dataset's fingerprint (``fingerprint``) and
that of what :func:`load_export` reads back (``export_fingerprint``, different
only for lossy formats), the full dataset metadata (``metadata``), the
interpolation ``weights`` and the datasets involved with their fingerprints
(``datasets``), and the sha256 of every file written (``files``). Provenance
is taken from the metadata keys ``datasets`` (list of ``{"name", "fingerprint",
"role"}``), ``target`` and ``references`` (dicts with ``name``/``fingerprint``
or plain names), ``target_name``/``target_fingerprint`` and
``reference_names``/``reference_fingerprints``, and ``weights``.

Writes are atomic: everything goes to hidden temporary files in the target
directory that are renamed into place at the end; a failure removes them and
restores anything being replaced. Existing output is never overwritten
silently (:class:`~geoviz.errors.ExportError` unless ``overwrite=True``).
"""

from __future__ import annotations

import contextlib
import csv
import errno
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import unicodedata
import warnings
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Literal, get_args

import numpy as np
import torch

from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetFormatError, ExportError, ExportExistsError

ExportFormat = Literal["npz", "pt", "imagefolder", "parquet"]
FORMATS: tuple[str, ...] = get_args(ExportFormat)

#: Version of the manifest layout written by this module.
MANIFEST_VERSION = 1
MANIFEST_NAME = "manifest.json"
LABELS_NAME = "labels.csv"

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
_PNG_MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}
_DESCRIPTIONS = {
    "npz": "npz — NumPy archive (features, soft_labels, labels, class_names), lossless",
    "pt": "pt — torch.load(weights_only=True) dict of tensors, lossless",
    "imagefolder": "ImageFolder zip — class/idx.png + labels.csv + manifest.json, lossy (uint8)",
    "parquet": "Parquet — one row per sample, Hugging Face datasets compatible",
}
_WINDOWS_RESERVED = frozenset(
    {"CON", "PRN", "AUX", "NUL"}
    | {f"COM{i}" for i in range(1, 10)}
    | {f"LPT{i}" for i in range(1, 10)}
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

    format: ExportFormat
    paths: tuple[Path, ...]
    manifest: dict[str, Any]

    @property
    def data_path(self) -> Path:
        return self.paths[0]

    @property
    def manifest_path(self) -> Path:
        return self.paths[-1]


# =========================================================================== helpers


def _as_soft(ds: SoftLabeledDataset | LabeledDataset) -> SoftLabeledDataset:
    """Accept a hard-labelled dataset too (one-hot labels, names ``"name/class"``)."""
    if isinstance(ds, SoftLabeledDataset):
        return ds
    if isinstance(ds, LabeledDataset):
        return SoftLabeledDataset(
            features=ds.features,
            soft_labels=ds.one_hot(),
            class_names=tuple(f"{ds.name}/{c}" for c in ds.classes),
            name=ds.name,
            image_shape=ds.image_shape,
            metadata={
                "datasets": [{"role": "dataset", "name": ds.name, "fingerprint": ds.fingerprint}],
                "source": ds.source,
            },
        )
    raise ExportError(
        f"can only export a SoftLabeledDataset or LabeledDataset, got {type(ds).__name__}"
    )


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


def sidecar_manifest_path(path: str | Path) -> Path:
    """Where the manifest of a single-file export lives: ``out/synth.npz`` -> ``out/synth.manifest.json``."""
    path = Path(path)
    return path.with_name(f"{path.stem if path.suffix else path.name}.manifest.json")


def safe_name(name: str, fallback: str = "item", max_bytes: int = 100) -> str:
    """A file/folder name derived from ``name`` that is safe on Linux, macOS and Windows.

    Letters and digits (any script, NFC-normalised) and ``-_.+`` are kept;
    everything else (``/``, ``\\``, ``:``, spaces, quotes, control characters...)
    becomes ``_``; runs of ``_`` collapse; leading/trailing dots, underscores and
    spaces are dropped (no hidden files, no ``..``); Windows device names get a
    ``_`` prefix; the result is at most ``max_bytes`` UTF-8 bytes. Empty results
    give ``fallback``. Distinct names can map to the same result: see
    :func:`class_folder_names` for a collision-free mapping.
    """
    text = unicodedata.normalize("NFC", str(name))
    text = "".join(ch if (ch.isalnum() or ch in "-_.+") else "_" for ch in text)
    text = re.sub(r"_+", "_", text).strip("._ ")
    while len(text.encode("utf-8")) > max_bytes:
        text = text[:-1].rstrip("._ ")
    if not text:
        text = fallback
    if text.split(".")[0].upper() in _WINDOWS_RESERVED:
        text = f"_{text}"
    return text


def class_folder_names(class_names: tuple[str, ...] | list[str]) -> list[str]:
    """One distinct, file-system-safe folder name per class (case-insensitively distinct).

    Collisions after :func:`safe_name` (``"a/b"`` and ``"a_b"``, ``"A"`` and
    ``"a"``) are resolved by appending ``_<class index>``, in class order, so the
    mapping is deterministic. Names never clash with ``labels.csv`` or
    ``manifest.json``.
    """
    used = {LABELS_NAME.casefold(), MANIFEST_NAME.casefold()}
    folders: list[str] = []
    for k, name in enumerate(class_names):
        candidate = safe_name(name, fallback=f"class_{k}")
        while candidate.casefold() in used:
            candidate = f"{candidate}_{k}"
        used.add(candidate.casefold())
        folders.append(candidate)
    return folders


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_entry(data: bytes) -> dict[str, Any]:
    return {"sha256": _sha256(data), "bytes": len(data)}


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _version() -> str:
    from geoviz import __version__

    return __version__


# =========================================================================== provenance


def _dataset_entry(entry: Any, role: str, fingerprint: Any = None) -> dict[str, Any] | None:
    if isinstance(entry, Mapping):
        out = {"role": str(entry.get("role", role)), "name": entry.get("name")}
        out["fingerprint"] = entry.get("fingerprint", fingerprint)
        return out
    if isinstance(entry, str):
        return {"role": role, "name": entry, "fingerprint": fingerprint}
    return None


def _provenance(metadata: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Datasets (role, name, fingerprint) named in the metadata (keys in the module docstring)."""
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


# =========================================================================== hard labels

#: How a hard label is derived from a soft label over concatenated reference blocks.
HardLabelRule = Literal["argmax", "block-sample"]
HARD_LABEL_RULES: tuple[str, ...] = get_args(HardLabelRule)
DEFAULT_HARD_LABEL_RULE: HardLabelRule = "block-sample"
#: What readers assume when a manifest predates hard-label rules (those exports used argmax).
LEGACY_HARD_LABEL_RULE: HardLabelRule = "argmax"


def check_hard_label_rule(rule: Any) -> HardLabelRule:
    """``rule`` if it is one of :data:`HARD_LABEL_RULES`, else :class:`~geoviz.errors.ExportError`."""
    if not isinstance(rule, str) or rule not in HARD_LABEL_RULES:
        raise ExportError(
            f"unknown hard-label rule {rule!r}: use one of {', '.join(map(repr, HARD_LABEL_RULES))}"
        )
    return rule  # type: ignore[return-value]


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or int(seed) < 0:
        raise ExportError(f"hard-label seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def hard_labels_from_soft(
    soft_labels: np.ndarray | torch.Tensor,
    blocks: Any,
    *,
    rule: HardLabelRule = DEFAULT_HARD_LABEL_RULE,
    weights: Any = None,
    seed: int = 0,
) -> np.ndarray:
    """Hard labels from soft labels over the concatenated classes of ``m`` references.

    The soft label of ``P_a`` is ``[a_1 y_1 | ... | a_m y_m]`` (block ``i``
    scaled by ``a_i``), so its argmax favours references with large weights
    far beyond their share ``a_i``. ``"block-sample"`` keeps each reference's
    share of hard labels equal to ``a_i`` in expectation.

    Parameters
    ----------
    soft_labels
        ``(N, K)`` non-negative soft labels.
    blocks
        ``m`` column selections (slices, e.g.
        :attr:`~geoviz.geodesic.pipeline.GeodesicResult.block_slices`, or
        integer index sequences): the classes of each reference.
    rule
        ``"argmax"``: argmax over all ``K`` columns (ignores ``blocks``,
        ``weights`` and ``seed``). ``"block-sample"``: for each sample draw a
        block ``i`` with probability ``weights[i]`` (normalised), or, when
        ``weights`` is ``None``, with probability equal to the sample's
        soft-label mass in block ``i`` (which is ``a_i`` for ``P_a``); then
        take the argmax within that block.
    weights
        ``(m,)`` non-negative block probabilities (the weights ``a`` of
        ``P_a``), or ``None``.
    seed
        Seed of the block draws; the result is a deterministic function of
        ``(soft_labels, blocks, rule, weights, seed)``.

    Returns
    -------
    numpy.ndarray
        ``(N,)`` int64 column indices into the ``K`` classes.

    Raises
    ------
    ExportError
        Unknown ``rule`` (a :class:`~geoviz.errors.GeovizError`), bad shapes,
        blocks or weights.
    """
    rule = check_hard_label_rule(rule)
    if isinstance(soft_labels, torch.Tensor):
        soft_labels = soft_labels.detach().cpu().numpy()
    soft = np.asarray(soft_labels, dtype=np.float64)
    if soft.ndim != 2 or soft.shape[1] == 0:
        raise ExportError(f"soft labels must have shape (N, K) with K >= 1, got {soft.shape}")
    n, k = soft.shape
    if rule == "argmax":
        return soft.argmax(axis=1).astype(np.int64)
    seed = _check_seed(seed)
    cols: list[np.ndarray] = []
    for b in blocks:
        c = np.arange(k)[b] if isinstance(b, slice) else np.asarray(b, dtype=np.int64).reshape(-1)
        if c.size == 0 or c.min() < 0 or c.max() >= k:
            raise ExportError(f"label block {b!r} selects no columns or columns outside 0..{k - 1}")
        cols.append(c)
    if not cols:
        raise ExportError("block-sample needs at least one label block")
    m = len(cols)
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
        if w.shape != (m,) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise ExportError(
                f"block weights must be {m} non-negative finite numbers with a positive sum, "
                f"got {np.asarray(weights).tolist()}"
            )
        probs = np.broadcast_to(w / w.sum(), (n, m))
    else:
        probs = np.stack([soft[:, c].clip(min=0).sum(axis=1) for c in cols], axis=1)
        empty = probs.sum(axis=1) <= 0
        probs[empty] = 1.0  # no mass anywhere: any block
        probs = probs / probs.sum(axis=1, keepdims=True)
    rng = np.random.default_rng(seed)
    u = rng.random(n)
    cum = np.cumsum(probs, axis=1)
    choice = np.minimum((u[:, None] >= cum).sum(axis=1), m - 1)
    out = np.empty(n, dtype=np.int64)
    for j, c in enumerate(cols):
        rows = np.flatnonzero(choice == j)
        if rows.size:
            out[rows] = c[soft[np.ix_(rows, c)].argmax(axis=1)]
    return out


def _names(entries: Any) -> list[str]:
    if not isinstance(entries, list):
        return []
    names = []
    for e in entries:
        name = e.get("name") if isinstance(e, Mapping) else e
        if isinstance(name, str):
            names.append(name)
    return names


def label_blocks(
    class_names: tuple[str, ...] | list[str], references: Any = None
) -> list[tuple[str, np.ndarray]]:
    """Reference blocks of a concatenated label space: ``(name, column indices)``.

    Class names are ``"<dataset>/<class>"``. When every column starts with
    exactly one of the ``references`` names (plain names or dicts with a
    ``"name"``, as in :attr:`SoftLabeledDataset.metadata`), those are the
    blocks, in that order; otherwise columns are grouped by the text before
    their first ``/`` (names without ``/`` form the block ``""``), in order of
    first appearance.
    """
    names = [str(c) for c in class_names]
    refs = _names(references)
    if refs:
        owner = [[r for r in refs if c.startswith(f"{r}/")] for c in names]
        if all(len(o) == 1 for o in owner):
            blocks = [
                (r, np.array([k for k, o in enumerate(owner) if o[0] == r], dtype=np.int64))
                for r in refs
            ]
            return [(r, c) for r, c in blocks if c.size]
    groups: dict[str, list[int]] = {}
    for k, c in enumerate(names):
        groups.setdefault(c.split("/", 1)[0] if "/" in c else "", []).append(k)
    return [(g, np.array(cols, dtype=np.int64)) for g, cols in groups.items()]


def dataset_hard_labels(
    ds: SoftLabeledDataset | LabeledDataset,
    rule: HardLabelRule = DEFAULT_HARD_LABEL_RULE,
    seed: int = 0,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Hard labels of ``ds`` by :func:`hard_labels_from_soft` and their manifest entry.

    Blocks come from :func:`label_blocks` (``metadata["references"]``); the
    block probabilities are ``metadata["weights"]`` when it has one entry per
    block, else each sample's soft-label mass per block.

    Returns
    -------
    labels, info
        ``(N,)`` int64 labels, and ``{"rule", "seed", "probabilities"
        ("weights" or "block mass"), "blocks": [{"name", "weight", "count",
        "share"}]}`` where ``weight`` is ``a_i`` (or the mean block mass) and
        ``share`` the fraction of hard labels in the block.
    """
    soft_ds = _as_soft(ds)
    rule = check_hard_label_rule(rule)
    seed = _check_seed(seed)
    soft = soft_ds.soft_labels.numpy()
    blocks = label_blocks(soft_ds.class_names, soft_ds.metadata.get("references"))
    weights = soft_ds.metadata.get("weights")
    known = (
        isinstance(weights, list)
        and len(weights) == len(blocks)
        and all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights)
    )
    labels = hard_labels_from_soft(
        soft,
        [c for _, c in blocks],
        rule=rule,
        weights=weights if known else None,
        seed=seed,
    )
    n = max(len(labels), 1)
    entries = []
    for j, (name, cols) in enumerate(blocks):
        count = int(np.isin(labels, cols).sum())
        weight = float(weights[j]) if known else float(soft[:, cols].sum() / n)
        entries.append({"name": name, "weight": weight, "count": count, "share": count / n})
    info = {
        "rule": rule,
        "seed": seed if rule == "block-sample" else None,
        "probabilities": "weights" if known else "block mass",
        "blocks": entries,
    }
    return labels, info


# =========================================================================== images


@dataclass(frozen=True)
class _Quantised:
    images: np.ndarray  # (N, H, W) or (N, H, W, C) uint8
    features: np.ndarray  # (N, D) float32: what a reader recovers (uint8 / 255)
    max_abs_error: float
    n_clipped: int


def _quantise(ds: SoftLabeledDataset) -> _Quantised:
    """uint8 images of an image dataset: ``round(255 * clip(x, 0, 1))``, channel-last."""
    assert ds.image_shape is not None
    c, h, w = ds.image_shape
    x = ds.features.numpy()
    scaled = x.astype(np.float64) * 255.0
    n_clipped = int(np.count_nonzero((scaled < -0.5) | (scaled > 255.5)))
    q = np.clip(np.rint(scaled), 0, 255).astype(np.uint8)
    recovered = q.astype(np.float32) / np.float32(255)
    images = q.reshape(-1, c, h, w).transpose(0, 2, 3, 1)
    if c == 1:
        images = images[..., 0]
    return _Quantised(
        images=np.ascontiguousarray(images),
        features=recovered,
        max_abs_error=float(np.abs(recovered - x).max()),
        n_clipped=n_clipped,
    )


def _encode_png(image: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


def _decode_png(data: bytes, channels: int | None, where: str) -> np.ndarray:
    """PNG bytes -> uint8 ``(C, H, W)``; ``channels`` forces the mode (None: keep L/LA/RGB/RGBA)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            if channels is None:
                channels = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}.get(img.mode, 3)
            arr = np.asarray(img.convert(_PNG_MODES[channels]), dtype=np.uint8)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        raise DatasetFormatError(f"not a readable PNG image: {err}", where) from err
    return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)


def _png_payload(ds: SoftLabeledDataset, fmt: str) -> tuple[list[bytes], _Quantised]:
    if ds.image_shape is None:
        raise ExportError(
            f"format {fmt!r} stores images, but dataset {ds.name!r} holds vectors "
            f"(no image_shape); use 'npz', 'pt' or 'parquet'"
        )
    if ds.image_shape[0] not in _PNG_MODES:
        raise ExportError(
            f"format {fmt!r} writes PNG images, which need 1-4 channels; dataset {ds.name!r} has "
            f"image_shape {ds.image_shape}; use 'npz' or 'pt'"
        )
    quant = _quantise(ds)
    if quant.n_clipped:
        warnings.warn(
            f"{quant.n_clipped} feature value(s) of {ds.name!r} lie outside [0, 1] and were clipped "
            f"when writing PNG images (max error {quant.max_abs_error:.4g}); use 'npz' or 'pt' "
            "to keep exact features",
            UserWarning,
            stacklevel=4,
        )
    return [_encode_png(img) for img in quant.images], quant


def _lossy_dataset(ds: SoftLabeledDataset, quant: _Quantised) -> SoftLabeledDataset:
    return SoftLabeledDataset(
        features=torch.from_numpy(quant.features),
        soft_labels=ds.soft_labels,
        class_names=ds.class_names,
        name=ds.name,
        image_shape=ds.image_shape,
        metadata=ds.metadata,
    )


# =========================================================================== manifest


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
        "weights": meta.get("weights"),
        "hard_labels": hard,
        "metadata": meta,
    }
    return manifest


# =========================================================================== serialisers


def _npz_bytes(ds: SoftLabeledDataset, manifest: dict[str, Any], labels: np.ndarray) -> bytes:
    arrays: dict[str, np.ndarray] = {
        "features": ds.features.numpy(),
        "soft_labels": ds.soft_labels.numpy(),
        "labels": labels.astype(np.int64),
        "class_names": np.array(list(ds.class_names), dtype=np.str_)
        if ds.class_names
        else np.zeros(0, dtype="<U1"),
        "image_shape": np.array(list(ds.image_shape or ()), dtype=np.int64),
        "metadata_json": np.array(json.dumps(ds.metadata, ensure_ascii=False)),
        "manifest_json": np.array(json.dumps(manifest, ensure_ascii=False)),
    }
    if ds.image_shape is not None:
        arrays["images"] = _quantise(ds).images
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def _pt_bytes(ds: SoftLabeledDataset, manifest: dict[str, Any], labels: np.ndarray) -> bytes:
    obj = {
        "features": ds.features.clone(),
        "soft_labels": ds.soft_labels.clone(),
        "labels": torch.from_numpy(labels.astype(np.int64)),
        "class_names": list(ds.class_names),
        "image_shape": list(ds.image_shape) if ds.image_shape else None,
        "name": ds.name,
        "metadata": ds.metadata,
        "manifest": manifest,
    }
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _list_array(matrix: np.ndarray):
    """``(N, K)`` float32 -> Arrow ``list<float32>`` with N rows."""
    import pyarrow as pa

    n, k = matrix.shape
    offsets = pa.array(np.arange(0, (n + 1) * k, k, dtype=np.int32)[: n + 1])
    return pa.ListArray.from_arrays(
        offsets, pa.array(np.ascontiguousarray(matrix, np.float32).reshape(-1))
    )


def _parquet_bytes(
    ds: SoftLabeledDataset, manifest: dict[str, Any], labels: np.ndarray, pngs: list[bytes] | None
) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns: dict[str, Any] = {}
    hf_features: dict[str, Any] = {}
    if pngs is not None:
        width = len(str(max(ds.n_samples - 1, 0)))
        columns["image"] = pa.StructArray.from_arrays(
            [
                pa.array(pngs, type=pa.binary()),
                pa.array([f"{i:0{width}d}.png" for i in range(len(pngs))]),
            ],
            names=["bytes", "path"],
        )
        hf_features["image"] = {"_type": "Image"}
    else:
        columns["features"] = _list_array(ds.features.numpy())
    columns["label"] = pa.array(labels.astype(np.int64), type=pa.int64())
    columns["soft_labels"] = _list_array(ds.soft_labels.numpy())
    if len(set(ds.class_names)) == len(ds.class_names):
        hf_features["label"] = {"_type": "ClassLabel", "names": list(ds.class_names)}
    table = pa.table(columns).replace_schema_metadata(
        {
            "class_names": json.dumps(list(ds.class_names), ensure_ascii=False),
            "geoviz_manifest": json.dumps(manifest, ensure_ascii=False),
            "huggingface": json.dumps({"info": {"features": hf_features}}, ensure_ascii=False),
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


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


@dataclass(frozen=True)
class _Built:
    """An export in memory: ``files`` (relative path -> bytes) and the base manifest."""

    files: dict[str, bytes]
    manifest: dict[str, Any]


def _build(
    ds: SoftLabeledDataset,
    fmt: ExportFormat,
    filename: str,
    created: str,
    rule: HardLabelRule,
    seed: int,
) -> _Built:
    """Serialise ``ds``; single-file formats embed the manifest (without checksums)."""
    labels, hard = dataset_hard_labels(ds, rule, seed)
    if fmt == "npz":
        manifest = _base_manifest(ds, fmt, created, hard)
        return _Built({filename: _npz_bytes(ds, manifest, labels)}, manifest)
    if fmt == "pt":
        manifest = _base_manifest(ds, fmt, created, hard)
        return _Built({filename: _pt_bytes(ds, manifest, labels)}, manifest)
    if fmt == "parquet":
        pngs, quant = _png_payload(ds, fmt) if ds.image_shape is not None else (None, None)
        manifest = _base_manifest(ds, fmt, created, hard, quant)
        return _Built({filename: _parquet_bytes(ds, manifest, labels, pngs)}, manifest)
    pngs, quant = _png_payload(ds, fmt)
    manifest = _base_manifest(ds, fmt, created, hard, quant)
    return _Built(_imagefolder_files(ds, pngs, labels), manifest)


def _with_inner_manifest(built: _Built) -> dict[str, bytes]:
    files = dict(built.files)
    manifest = {**built.manifest, "files": {rel: _file_entry(data) for rel, data in files.items()}}
    files[MANIFEST_NAME] = _json_bytes(manifest)
    return files


# =========================================================================== atomic writes


def _temp_sibling(path: Path, tag: str) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(6)}.{tag}")


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def _write_bytes(path: Path, data: bytes, *, sync: bool = False) -> None:
    with open(path, "xb") as fh:  # default permissions (umask), unlike mkstemp's 0600
        fh.write(data)
        if sync:
            fh.flush()
            os.fsync(fh.fileno())


def _write_temp(target: Path, content: bytes | Mapping[str, bytes]) -> Path:
    tmp = _temp_sibling(target, "tmp")
    if isinstance(content, (bytes, bytearray)):
        _write_bytes(tmp, bytes(content), sync=True)
        return tmp
    os.mkdir(tmp)
    try:
        for rel, data in content.items():
            parts = PurePosixPath(rel).parts
            if not parts or PurePosixPath(rel).is_absolute() or ".." in parts:
                raise ExportError(f"refusing to write unsafe member path {rel!r}")
            dest = tmp.joinpath(*parts)
            dest.parent.mkdir(parents=True, exist_ok=True)
            _write_bytes(dest, data)
    except BaseException:
        _remove(tmp)
        raise
    return tmp


def _place(tmp: Path, target: Path) -> None:
    """Move ``tmp`` to ``target`` without clobbering anything that appeared meanwhile."""
    if tmp.is_dir():
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, "already exists", str(target))
        os.rename(tmp, target)
        return
    try:
        os.link(tmp, target)  # atomic and fails if target exists
    except FileExistsError:
        raise
    except OSError:  # hard links unsupported here (some network/FAT file systems)
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, "already exists", str(target)) from None
        os.replace(tmp, target)
        return
    os.unlink(tmp)


def _is_geoviz_export_dir(path: Path) -> bool:
    if not any(path.iterdir()):
        return True
    try:
        manifest = json.loads((path / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("generator") == "geoviz"


def _atomic_write(entries: list[tuple[Path, bytes | Mapping[str, bytes]]], overwrite: bool) -> None:
    """Write every entry (file bytes or a directory tree) all-or-nothing.

    All targets must share one parent directory (created if missing).
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
    parent = entries[0][0].parent
    created_dirs: list[Path] = []
    probe = parent
    while not probe.exists():
        created_dirs.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    temps: list[Path] = []
    placed: list[Path] = []
    backups: list[tuple[Path, Path]] = []
    current = parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        for target, content in entries:
            current = target
            temps.append(_write_temp(target, content))
        for (target, _), tmp in zip(entries, temps, strict=True):
            current = target
            if os.path.lexists(target):  # overwrite=True, checked above
                backup = _temp_sibling(target, "old")
                os.replace(target, backup)
                backups.append((target, backup))
            _place(tmp, target)
            placed.append(target)
    except BaseException as err:
        for target in reversed(placed):
            with contextlib.suppress(OSError):
                _remove(target)
        for target, backup in reversed(backups):
            with contextlib.suppress(OSError):
                os.replace(backup, target)
        for tmp in temps:
            with contextlib.suppress(OSError):
                _remove(tmp)
        for folder in created_dirs:  # innermost first
            with contextlib.suppress(OSError):
                folder.rmdir()
        if isinstance(err, FileExistsError):
            raise ExportExistsError(
                f"{current} already exists; pass overwrite=True to replace it"
            ) from err
        if isinstance(err, OSError):
            raise ExportError(f"could not write {current}: {err.strerror or err}") from err
        raise
    for _, backup in backups:
        with contextlib.suppress(OSError):
            _remove(backup)


# =========================================================================== public API: write


def export_dataset(
    ds: SoftLabeledDataset | LabeledDataset,
    path: str | Path,
    *,
    format: ExportFormat | None = None,
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
        One of ``"npz"``, ``"pt"``, ``"imagefolder"``, ``"parquet"``; inferred
        from ``path`` when ``None``. A known suffix must agree with it.
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
    """
    soft = _as_soft(ds)
    rule = check_hard_label_rule(hard_label_rule)
    seed = _check_seed(hard_label_seed)
    path = Path(path)
    fmt, container = _resolve_target(path, format)
    created = _now_utc()
    built = _build(soft, fmt, path.name, created, rule, seed)
    if container == "dir":
        files = _with_inner_manifest(built)
        _atomic_write([(path, files)], overwrite)
        manifest = json.loads(files[MANIFEST_NAME])
        return ExportResult(fmt, (path, path / MANIFEST_NAME), manifest)
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
    return ExportResult(fmt, (path, sidecar), manifest)


#: Short alias: ``export(ds, "out/synth.npz")``.
export = export_dataset


def export_bytes(
    ds: SoftLabeledDataset | LabeledDataset,
    format: ExportFormat,
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
    fmt = _check_format(format)
    rule = check_hard_label_rule(hard_label_rule)
    seed = _check_seed(hard_label_seed)
    filename = safe_name(soft.name, fallback="synthetic") + _EXTENSION[fmt]
    created = _now_utc()
    built = _build(soft, fmt, filename, created, rule, seed)
    if fmt == "imagefolder":
        data = _zip_bytes(_with_inner_manifest(built), created)
    else:
        data = built.files[filename]
    return data, filename, _MIME[fmt]


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


# =========================================================================== public API: read


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


def _dataset(
    features: np.ndarray | torch.Tensor,
    soft: np.ndarray | torch.Tensor,
    class_names: list[str],
    image_shape: Any,
    name: Any,
    metadata: Any,
    where: Path,
) -> SoftLabeledDataset:
    from geoviz.errors import DatasetError

    try:
        return SoftLabeledDataset(
            features=features,
            soft_labels=soft,
            class_names=tuple(str(c) for c in class_names),
            name=str(name) if name is not None else where.stem,
            image_shape=tuple(int(s) for s in image_shape) if image_shape else None,
            metadata=metadata if isinstance(metadata, dict) else {},
        )
    except DatasetError as err:
        raise DatasetFormatError(err.problem, where) from err


def _load_npz(path: Path) -> SoftLabeledDataset:
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = {"features", "soft_labels", "class_names"} - set(data.files)
            if missing:
                raise DatasetFormatError(f"npz export lacks key(s) {sorted(missing)}", path)
            manifest = (
                json.loads(str(data["manifest_json"])) if "manifest_json" in data.files else {}
            )
            metadata = (
                json.loads(str(data["metadata_json"])) if "metadata_json" in data.files else {}
            )
            shape = data["image_shape"].tolist() if "image_shape" in data.files else []
            return _dataset(
                data["features"],
                data["soft_labels"],
                [str(c) for c in data["class_names"]],
                shape,
                manifest.get("name"),
                metadata,
                path,
            )
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        if isinstance(err, DatasetFormatError):
            raise
        raise DatasetFormatError(f"corrupt npz export: {err}", path) from err


def _load_pt(path: Path) -> SoftLabeledDataset:
    try:
        obj = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:  # unpickling errors come in many types
        raise DatasetFormatError(f"corrupt or unsafe .pt export: {err}", path) from err
    if not isinstance(obj, dict) or not {"features", "soft_labels", "class_names"} <= set(obj):
        raise DatasetFormatError(
            "a .pt export must be a dict with features, soft_labels, class_names", path
        )
    return _dataset(
        obj["features"],
        obj["soft_labels"],
        list(obj["class_names"]),
        obj.get("image_shape"),
        obj.get("name"),
        obj.get("metadata"),
        path,
    )


def _list_column(table: Any, column: str, path: Path) -> np.ndarray:
    import pyarrow as pa

    col = table.column(column).combine_chunks()
    if col.null_count:
        raise DatasetFormatError(f"column {column!r} has missing values", path)
    if pa.types.is_fixed_size_list(col.type):
        width = col.type.list_size
    else:
        lengths = np.diff(np.asarray(col.offsets))
        if lengths.size and (lengths != lengths[0]).any():
            raise DatasetFormatError(f"rows of column {column!r} have different lengths", path)
        width = int(lengths[0]) if lengths.size else 0
    flat = np.array(col.flatten().to_numpy(zero_copy_only=False), dtype=np.float32, copy=True)
    return flat.reshape(len(col), width)


def _load_parquet(path: Path) -> SoftLabeledDataset:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as err:
        raise DatasetFormatError(f"corrupt Parquet export: {err}", path) from err
    meta = table.schema.metadata or {}
    manifest = json.loads(meta[b"geoviz_manifest"]) if b"geoviz_manifest" in meta else {}
    if b"class_names" in meta:
        class_names = json.loads(meta[b"class_names"])
    elif "class_names" in manifest:
        class_names = manifest["class_names"]
    else:
        raise DatasetFormatError("Parquet export has no class_names schema metadata", path)
    if "soft_labels" not in table.column_names:
        raise DatasetFormatError("Parquet export has no 'soft_labels' column", path)
    soft = _list_column(table, "soft_labels", path)
    image_shape = manifest.get("image_shape")
    if "image" in table.column_names:
        cells = table.column("image").to_pylist()
        channels = int(image_shape[0]) if image_shape else None
        images = [
            _decode_png(cell["bytes"], channels, f"{path} row {i}") for i, cell in enumerate(cells)
        ]
        features, shape = _stack_images(images, image_shape, path)
        image_shape = shape
    elif "features" in table.column_names:
        features = _list_column(table, "features", path)
    else:
        raise DatasetFormatError(
            "Parquet export has neither an 'image' nor a 'features' column", path
        )
    return _dataset(
        features,
        soft,
        class_names,
        image_shape,
        manifest.get("name"),
        manifest.get("metadata"),
        path,
    )


def _stack_images(
    images: list[np.ndarray], image_shape: Any, where: Path
) -> tuple[np.ndarray, list[int]]:
    """uint8 ``(C, H, W)`` images -> float32 features ``uint8 / 255`` and the shape."""
    if not images:
        raise DatasetFormatError("export holds no images", where)
    shape = list(images[0].shape)
    if image_shape and list(image_shape) != shape:
        raise DatasetFormatError(
            f"images have shape {shape}, manifest says {list(image_shape)}", where
        )
    if any(list(img.shape) != shape for img in images):
        raise DatasetFormatError("images have different sizes", where)
    stacked = np.stack(images).reshape(len(images), -1)
    return stacked.astype(np.float32) / np.float32(255), shape


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
        try:
            return target.read_bytes()
        except FileNotFoundError:
            return None

    yield read_dir


def _load_imagefolder(path: Path, container: str) -> SoftLabeledDataset:
    with _imagefolder_reader(path, container) as read:
        return _read_imagefolder(read, path)


def _read_imagefolder(read: Any, where: Path) -> SoftLabeledDataset:
    raw_manifest = read(MANIFEST_NAME)
    manifest = json.loads(raw_manifest) if raw_manifest is not None else {}
    labels = read(LABELS_NAME)
    if labels is None:
        raise DatasetFormatError(f"no {LABELS_NAME} found", where)
    rows = list(csv.reader(io.StringIO(labels.decode("utf-8"))))
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


def load_export(path: str | Path, *, verify: bool = False) -> SoftLabeledDataset:
    """Read any export of this module back into a :class:`SoftLabeledDataset`.

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
    path = Path(path)
    if not path.exists():
        raise DatasetFormatError("no such file or directory", path)
    if verify:
        verify_manifest(path)
    fmt, container = _sniff_format(path)
    if fmt == "npz":
        return _load_npz(path)
    if fmt == "pt":
        return _load_pt(path)
    if fmt == "parquet":
        return _load_parquet(path)
    return _load_imagefolder(path, container)


def _legacy_hard_label_info(manifest: Mapping[str, Any]) -> dict[str, Any]:
    info = manifest.get("hard_labels")
    if isinstance(info, Mapping) and info.get("rule") in HARD_LABEL_RULES:
        return dict(info)
    # manifests written before hard-label rules existed: those labels were the argmax
    return {"rule": LEGACY_HARD_LABEL_RULE, "seed": None, "legacy": True}


def _imagefolder_hard_labels(path: Path, container: str) -> tuple[np.ndarray, dict[str, Any]]:
    def parse(read: Any) -> tuple[np.ndarray, dict[str, Any]]:
        raw = read(MANIFEST_NAME)
        manifest = json.loads(raw) if raw is not None else {}
        labels = read(LABELS_NAME)
        if labels is None:
            raise DatasetFormatError(f"no {LABELS_NAME} found", path)
        rows = list(csv.reader(io.StringIO(labels.decode("utf-8"))))
        if not rows or len(rows[0]) < 2:
            raise DatasetFormatError(f"{LABELS_NAME} has no label columns", path)
        class_names = manifest.get("class_names", rows[0][1:])
        index = {f: k for k, f in enumerate(class_folder_names(class_names))}
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


def load_hard_labels(path: str | Path) -> tuple[np.ndarray, dict[str, Any]]:
    """The hard labels stored in an export and how they were derived.

    Parameters
    ----------
    path
        Any export of this module (as for :func:`load_export`).

    Returns
    -------
    labels, info
        ``(N,)`` int64 class indices (``labels``/``label`` columns, or the
        ImageFolder class folders), and the manifest's ``hard_labels`` entry
        (``rule``, ``seed``, per-reference ``blocks`` shares). Manifests
        written before hard-label rules existed give
        ``{"rule": "argmax", "seed": None, "legacy": True}``.

    Raises
    ------
    DatasetFormatError
        Missing, corrupt or foreign files.
    """
    path = Path(path)
    if not path.exists():
        raise DatasetFormatError("no such file or directory", path)
    fmt, container = _sniff_format(path)
    if fmt == "imagefolder":
        labels, manifest = _imagefolder_hard_labels(path, container)
        return labels, _legacy_hard_label_info(manifest)
    try:
        manifest = _embedded_manifest(path) or {}
    except ExportError as err:
        raise DatasetFormatError(str(err), path) from err
    try:
        if fmt == "npz":
            with np.load(path, allow_pickle=False) as data:
                labels = data["labels"] if "labels" in data.files else None
        elif fmt == "pt":
            obj = torch.load(path, weights_only=True, map_location="cpu")
            labels = obj.get("labels") if isinstance(obj, dict) else None
            labels = None if labels is None else labels.numpy()
        else:
            import pyarrow.parquet as pq

            table = pq.read_table(path, columns=None)
            labels = table.column("label").to_numpy() if "label" in table.column_names else None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise DatasetFormatError(f"corrupt export: {err}", path) from err
    if labels is None:
        raise DatasetFormatError("export stores no hard labels", path)
    return np.asarray(labels, dtype=np.int64), _legacy_hard_label_info(manifest)


# =========================================================================== public API: verify


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise ExportError(f"{path}: manifest not found") from err
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


def _embedded_manifest(path: Path) -> dict[str, Any] | None:
    fmt, _ = _sniff_format(path)
    try:
        if fmt == "npz":
            with np.load(path, allow_pickle=False) as data:
                return (
                    json.loads(str(data["manifest_json"]))
                    if "manifest_json" in data.files
                    else None
                )
        if fmt == "pt":
            obj = torch.load(path, weights_only=True, map_location="cpu")
            return obj.get("manifest") if isinstance(obj, dict) else None
        if fmt == "parquet":
            import pyarrow.parquet as pq

            meta = pq.read_schema(path).metadata or {}
            return json.loads(meta[b"geoviz_manifest"]) if b"geoviz_manifest" in meta else None
    except Exception as err:  # any parse failure of a file claiming to be an export
        raise ExportError(f"{path}: corrupt export: {err}") from err
    return None


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
            if zipfile.is_zipfile(data_path) and _sniff_format(data_path) == ("imagefolder", "zip"):
                _verify_zip(data_path)
        return
    if data_paths is None:
        raise ExportError(f"{manifest_path}: manifest not found")
    if _sniff_format(path) == ("imagefolder", "zip"):
        if not _verify_zip(path):
            raise ExportError(
                f"{path}: no manifest (neither {manifest_path.name} nor one inside the zip)"
            )
        return
    embedded = _embedded_manifest(path)
    if not embedded or "export_fingerprint" not in embedded:
        raise ExportError(f"{path}: no manifest ({manifest_path.name} missing and none embedded)")
    try:
        found = load_export(path).fingerprint
    except DatasetFormatError as err:
        raise ExportError(f"{path}: corrupt export: {err.problem}") from err
    if found != embedded["export_fingerprint"]:
        raise ExportError(
            f"{path}: content fingerprint {found} does not match {embedded['export_fingerprint']} "
            "in the embedded manifest; the file was modified"
        )


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


__all__ = [
    "DEFAULT_HARD_LABEL_RULE",
    "FORMATS",
    "HARD_LABEL_RULES",
    "MANIFEST_VERSION",
    "ExportFormat",
    "ExportResult",
    "HardLabelRule",
    "check_hard_label_rule",
    "class_folder_names",
    "dataset_hard_labels",
    "export",
    "export_bytes",
    "export_dataset",
    "format_description",
    "hard_labels_from_soft",
    "label_blocks",
    "load_export",
    "load_hard_labels",
    "load_snippet",
    "safe_name",
    "sidecar_manifest_path",
    "verify_manifest",
]
