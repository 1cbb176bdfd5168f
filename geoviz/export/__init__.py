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
interpolation ``weights`` (keyed by reference name, ``{"mnist": 0.5, ...}``, when the
metadata names one reference per weight) and the datasets involved with their fingerprints
(``datasets``), and the sha256 of every file written (``files``). Provenance
is taken from the metadata keys ``datasets`` (list of ``{"name", "fingerprint",
"role"}``), ``target`` and ``references`` (dicts with ``name``/``fingerprint``
or plain names), ``target_name``/``target_fingerprint`` and
``reference_names``/``reference_fingerprints``, and ``weights``.

Writes are atomic (:mod:`geoviz.atomic`): everything goes to hidden temporary
files in the target directory that are renamed into place at the end; a
failure removes them and restores anything being replaced. Existing output is
never overwritten silently (:class:`~geoviz.errors.ExportError` unless
``overwrite=True``).

Modules: :mod:`~geoviz.export.dispatch` (:func:`export_dataset`,
:func:`export_bytes`, :func:`load_export`), :mod:`~geoviz.export.registry` (one
:class:`ExportFormatSpec` per format: writer, reader, sniffing, description; the CLI and
the app offer what is registered), :mod:`~geoviz.export.formats` (the built-in four,
registered), one module per format with its writer, reader and spec (:mod:`~geoviz.export.npz`, :mod:`~geoviz.export.pt`,
:mod:`~geoviz.export.parquet`, :mod:`~geoviz.export.imagefolder`),
:mod:`~geoviz.export.png` (uint8 quantisation, PNG codec),
:mod:`~geoviz.export.manifest` (contents, :func:`verify_manifest`),
:mod:`~geoviz.export.hard_labels` and :mod:`~geoviz.export.names` (file
names). Import the public API from :mod:`geoviz.export` itself.
"""

from __future__ import annotations

from geoviz.export.dispatch import (
    ExportResult,
    export,
    export_bytes,
    export_dataset,
    load_export,
)
from geoviz.export.formats import ExportFormat, format_description, load_snippet
from geoviz.export.hard_labels import (
    DEFAULT_HARD_LABEL_RULE,
    HARD_LABEL_RULES,
    LEGACY_HARD_LABEL_RULE,  # noqa: F401 (importable as before, not in __all__)
    HardLabelRule,
    check_hard_label_rule,
    dataset_hard_labels,
    hard_labels_from_soft,
    label_blocks,
    load_hard_labels,
)
from geoviz.export.manifest import MANIFEST_VERSION, verify_manifest
from geoviz.export.names import (
    LABELS_NAME,  # noqa: F401 (importable as before, not in __all__)
    MANIFEST_NAME,  # noqa: F401 (importable as before, not in __all__)
    class_folder_names,
    safe_name,
    sidecar_manifest_path,
)
from geoviz.export.registry import (
    BuiltExport,
    ExportFormatSpec,
    export_formats,
    format_spec,
    register_format,
    unregister_format,
)

__all__ = [
    "DEFAULT_HARD_LABEL_RULE",
    "HARD_LABEL_RULES",
    "MANIFEST_VERSION",
    "BuiltExport",
    "ExportFormat",
    "ExportFormatSpec",
    "ExportResult",
    "HardLabelRule",
    "check_hard_label_rule",
    "class_folder_names",
    "dataset_hard_labels",
    "export",
    "export_bytes",
    "export_dataset",
    "export_formats",
    "format_description",
    "format_spec",
    "hard_labels_from_soft",
    "label_blocks",
    "load_export",
    "load_hard_labels",
    "load_snippet",
    "register_format",
    "safe_name",
    "sidecar_manifest_path",
    "unregister_format",
    "verify_manifest",
]
