"""Hard labels from soft labels over concatenated reference blocks, and those an export stores."""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import torch

from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetFormatError, ExportError
from geoviz.export.datasets import _as_soft
from geoviz.export.registry import embedded_manifest, existing, sniff_format

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
        :attr:`~geoviz.geodesic.result.GeodesicResult.block_slices`, or
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
        argmax: np.ndarray = soft.argmax(axis=1).astype(np.int64)
        return argmax
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
    u = np.asarray(rng.random(n), dtype=np.float64)
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
        weight = (
            float(weights[j]) if known and weights is not None else float(soft[:, cols].sum() / n)
        )
        entries.append({"name": name, "weight": weight, "count": count, "share": count / n})
    info = {
        "rule": rule,
        "seed": seed if rule == "block-sample" else None,
        "probabilities": "weights" if known else "block mass",
        "blocks": entries,
    }
    return labels, info


def _legacy_hard_label_info(manifest: Mapping[str, Any]) -> dict[str, Any]:
    info = manifest.get("hard_labels")
    if isinstance(info, Mapping) and info.get("rule") in HARD_LABEL_RULES:
        return dict(info)
    # manifests written before hard-label rules existed: those labels were the argmax
    return {"rule": LEGACY_HARD_LABEL_RULE, "seed": None, "legacy": True}


def load_hard_labels(path: str | Path) -> tuple[np.ndarray, dict[str, Any]]:
    """The hard labels stored in an export and how they were derived.

    Parameters
    ----------
    path
        Any export of :mod:`geoviz.export` (as for :func:`load_export`).

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
    path = existing(path)
    spec, container = sniff_format(path)
    if spec.hard_labels is None:
        raise DatasetFormatError(f"{spec.name} exports store no hard labels", path)
    try:
        labels, manifest = spec.hard_labels(path, container)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        if isinstance(err, DatasetFormatError):
            raise
        raise DatasetFormatError(f"corrupt export: {err}", path) from err
    if manifest is None:
        try:
            manifest = embedded_manifest(path) or {}
        except ExportError as err:
            raise DatasetFormatError(str(err), path) from err
    if labels is None:
        raise DatasetFormatError("export stores no hard labels", path)
    return np.asarray(labels, dtype=np.int64), _legacy_hard_label_info(manifest)
