"""The two immutable dataset types every part of geoviz exchanges.

* :class:`LabeledDataset` — hard-labelled data (a target Q or a reference P_i).
* :class:`SoftLabeledDataset` — data with soft labels over a concatenated label
  space, as produced by OTDD maps and generalized-geodesic interpolation
  (paper Sec. 3.2, "Convex combination in dataset space"); this is what export
  writes.

Both hold features as a float32 CPU tensor of shape ``(N, D)``; image sets keep
their original ``(C, H, W)`` shape in ``image_shape`` so that
``features.reshape(N, *image_shape)`` gives the images back. Pixel features are
in ``[0, 1]`` unless a loader documents otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np
import torch

from geoviz.backend import digest_bytes
from geoviz.errors import DatasetError

ImageShape = tuple[int, int, int]


def _as_feature_tensor(values: Any, source: str | None) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        tensor = values
    else:
        try:
            arr = np.asarray(values)
            if arr.dtype.kind == "O":  # e.g. numbers from a pandas object column
                arr = arr.astype(np.float64)
        except (TypeError, ValueError) as err:  # ragged lists, non-numeric objects
            raise DatasetError(f"features must be a numeric (N, D) array: {err}", source) from err
        if arr.dtype.kind not in "biufc":
            raise DatasetError(f"features must be real numbers, got dtype {arr.dtype}", source)
        if not arr.flags.writeable:  # torch cannot share read-only memory (mmap, broadcast views)
            arr = arr.copy()
        tensor = torch.as_tensor(arr)
    if tensor.is_complex() or tensor.dtype == torch.bool:
        raise DatasetError(f"features must be real numbers, got dtype {tensor.dtype}", source)
    return tensor.detach().to(device="cpu", dtype=torch.float32).contiguous()


def _check_features(features: torch.Tensor, image_shape: ImageShape | None, source: str | None):
    if features.ndim != 2:
        raise DatasetError(
            f"features must be a 2-D array (N samples x D features), got shape {tuple(features.shape)}",
            source,
        )
    if features.shape[0] == 0:
        raise DatasetError("dataset is empty (0 samples)", source)
    if features.shape[1] == 0:
        raise DatasetError("samples have 0 features", source)
    if not bool(torch.isfinite(features).all()):
        bad = int((~torch.isfinite(features)).any(dim=1).sum())
        raise DatasetError(f"features contain NaN or infinite values in {bad} sample(s)", source)
    if image_shape is not None:
        if len(image_shape) != 3 or any(int(s) <= 0 for s in image_shape):
            raise DatasetError(
                f"image_shape must be (C, H, W) with positive sizes, got {image_shape}", source
            )
        if int(np.prod(image_shape)) != features.shape[1]:
            raise DatasetError(
                f"image_shape {tuple(image_shape)} has {int(np.prod(image_shape))} values but "
                f"each sample has {features.shape[1]} features",
                source,
            )


def _hash_tensors(*parts: Any) -> str:
    """:func:`geoviz.backend.digest_bytes` of each part, then a zero byte: a tensor as its
    dtype, shape and raw bytes, anything else as sorted-key JSON (``str()`` of the rest)."""
    return digest_bytes(_tensor_bytes(part) for part in parts)


def _tensor_bytes(part: Any) -> bytes:
    if isinstance(part, torch.Tensor):
        arr = part.detach().cpu().contiguous().numpy()
        return str(arr.dtype).encode() + str(arr.shape).encode() + arr.tobytes() + b"\x00"
    return json.dumps(part, sort_keys=True, default=str).encode() + b"\x00"


def _json_default(obj: Any) -> Any:
    """JSON fallback for metadata: arrays/tensors -> lists, numpy scalars -> numbers, else str."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().tolist()
    if isinstance(obj, (np.ndarray, np.generic)):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=str)
    return str(obj)


@dataclass(frozen=True, eq=False)
class LabeledDataset:
    """A labelled dataset ``{(x_n, y_n)}``: features ``(N, D)`` and labels in ``0..C-1``.

    Instances are immutable and validated on construction: an empty dataset,
    NaN/inf features, non-integer or out-of-range labels, fewer than two
    classes present, or an ``image_shape`` that does not match ``D`` all raise
    :class:`~geoviz.errors.DatasetError` naming ``source``.

    Parameters
    ----------
    features
        ``(N, D)`` values; converted to a float32 CPU tensor.
    labels
        ``(N,)`` integer class indices into ``classes``; converted to int64.
    classes
        Class names, ``C`` of them (``C >= 2``). Classes may be absent from a
        subsample, but at least two distinct labels must occur.
    name
        Display name (e.g. ``"mnist"``); used to prefix class names in
        concatenated label spaces (``"mnist/3"``).
    image_shape
        ``(C, H, W)`` when the features are flattened images, else ``None``.
    source
        Where the data came from (file path, registry name); used in error
        messages and export provenance only, not in the fingerprint.
    """

    features: torch.Tensor
    labels: torch.Tensor
    classes: tuple[str, ...]
    name: str = "dataset"
    image_shape: ImageShape | None = None
    source: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        src = self.source or self.name
        feats = _as_feature_tensor(self.features, src)
        if feats.ndim == 1:
            feats = feats[:, None]
        image_shape = None if self.image_shape is None else tuple(int(s) for s in self.image_shape)
        _check_features(feats, image_shape, src)

        raw_labels = self.labels
        labels_np = (
            raw_labels.detach().cpu().numpy()
            if isinstance(raw_labels, torch.Tensor)
            else np.asarray(raw_labels)
        )
        if labels_np.ndim != 1:
            raise DatasetError(f"labels must be a 1-D array, got shape {labels_np.shape}", src)
        if labels_np.shape[0] != feats.shape[0]:
            raise DatasetError(
                f"{feats.shape[0]} samples but {labels_np.shape[0]} labels: counts must match", src
            )
        if labels_np.dtype.kind == "f":
            if not np.all(np.isfinite(labels_np)) or not np.all(labels_np == np.round(labels_np)):
                raise DatasetError("labels must be integers (found non-integer values)", src)
        elif labels_np.dtype.kind not in "iu":
            raise DatasetError(f"labels must be integers, got dtype {labels_np.dtype}", src)
        labels = torch.from_numpy(labels_np.astype(np.int64, copy=True))

        classes = tuple(str(c) for c in self.classes)
        if len(classes) < 2:
            raise DatasetError(f"a dataset needs at least 2 classes, got {len(classes)}", src)
        if len(set(classes)) != len(classes):
            raise DatasetError("class names must be unique", src)
        lo, hi = int(labels.min()), int(labels.max())
        if lo < 0 or hi >= len(classes):
            raise DatasetError(
                f"labels must lie in 0..{len(classes) - 1}, found range {lo}..{hi}", src
            )
        if int(torch.unique(labels).numel()) < 2:
            raise DatasetError(
                f"only one class ({classes[lo]!r}) occurs; OT between labelled datasets needs at least 2",
                src,
            )

        object.__setattr__(self, "features", feats)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "classes", classes)
        object.__setattr__(self, "image_shape", image_shape)
        # Tensors are shared with the caller (no copy of a 60000x784 set); the
        # fingerprint is cached, so callers must not edit them in place afterwards.

    # ------------------------------------------------------------------ sizes
    @property
    def n_samples(self) -> int:
        return int(self.features.shape[0])

    def __len__(self) -> int:
        return self.n_samples

    @property
    def n_features(self) -> int:
        return int(self.features.shape[1])

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    @property
    def is_image(self) -> bool:
        return self.image_shape is not None

    @property
    def is_grey(self) -> bool:
        """Grey images: one channel, or channels that are all equal (grey images repeated to
        RGB by :func:`~geoviz.data.preprocess.harmonize`); ``False`` for vectors."""
        if self.image_shape is None:
            return False
        if self.image_shape[0] == 1 or self.n_samples == 0:
            return True
        pixels = self.features.reshape(self.n_samples, self.image_shape[0], -1)
        return bool(torch.equal(pixels.amax(dim=1), pixels.amin(dim=1)))

    # ------------------------------------------------------------------ derived
    @cached_property
    def fingerprint(self) -> str:
        """sha256 (hex) of features, labels, classes and image shape.

        Stable across runs and machines (it hashes raw little-endian bytes, not
        Python object ids); changing any pixel, label or class name changes it.
        """
        return _hash_tensors(
            self.features, self.labels, list(self.classes), list(self.image_shape or ())
        )

    def class_counts(self) -> np.ndarray:
        """``(C,)`` number of samples per class."""
        return np.bincount(self.labels.numpy(), minlength=self.n_classes)

    def one_hot(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``(N, C)`` one-hot label matrix."""
        return torch.nn.functional.one_hot(self.labels, self.n_classes).to(dtype)

    def images(self) -> torch.Tensor:
        """``(N, C, H, W)`` view of the features; only for image datasets."""
        if self.image_shape is None:
            raise DatasetError("this dataset holds vectors, not images", self.source or self.name)
        return self.features.reshape(self.n_samples, *self.image_shape)

    def subset(
        self, indices: Sequence[int] | np.ndarray | torch.Tensor, name: str | None = None
    ) -> LabeledDataset:
        """A new dataset with the rows ``indices`` (class list unchanged)."""
        idx_np = (
            indices.detach().cpu().numpy()
            if isinstance(indices, torch.Tensor)
            else np.asarray(indices)
        )
        if idx_np.dtype == np.bool_:  # a boolean mask selects rows, it is not a list of 0/1 indices
            if idx_np.shape != (self.n_samples,):
                raise DatasetError(
                    f"boolean mask has shape {idx_np.shape}, expected ({self.n_samples},)",
                    self.source or self.name,
                )
            idx_np = np.flatnonzero(idx_np)
        idx = torch.as_tensor(idx_np.astype(np.int64, copy=False).reshape(-1), dtype=torch.long)
        return replace(
            self, features=self.features[idx], labels=self.labels[idx], name=name or self.name
        )

    def with_features(
        self,
        features: torch.Tensor | np.ndarray,
        image_shape: ImageShape | None = None,
        name: str | None = None,
    ) -> LabeledDataset:
        """Same labels, new features (e.g. after resizing or a feature extractor)."""
        return replace(self, features=features, image_shape=image_shape, name=name or self.name)

    def summary(self) -> dict[str, Any]:
        """Plain-Python description for CLIs, manifests and the app."""
        return {
            "name": self.name,
            "n_samples": self.n_samples,
            "n_features": self.n_features,
            "n_classes": self.n_classes,
            "classes": list(self.classes),
            "image_shape": list(self.image_shape) if self.image_shape else None,
            "class_counts": self.class_counts().tolist(),
            "fingerprint": self.fingerprint,
            "source": self.source,
        }

    def __repr__(self) -> str:
        shape = f", image_shape={self.image_shape}" if self.image_shape else ""
        return (
            f"LabeledDataset(name={self.name!r}, n_samples={self.n_samples}, "
            f"n_features={self.n_features}, n_classes={self.n_classes}{shape})"
        )


@dataclass(frozen=True, eq=False)
class SoftLabeledDataset:
    """Features with soft labels over a concatenated label space.

    This is the output type of OTDD maps and of generalized-geodesic
    interpolation ``P_a = (sum_i a_i T_i)#Q`` (paper Sec. 3.2-3.3), and the
    input of :mod:`geoviz.export`.

    Parameters
    ----------
    features
        ``(N, D)`` float32 features (flattened images when ``image_shape`` is set).
    soft_labels
        ``(N, K)`` non-negative rows summing to 1 over ``class_names``.
    class_names
        ``K`` names, prefixed by their dataset: ``"fashion_mnist/Sneaker"``.
    name
        Display name, e.g. ``"P_a(0.5,0.3,0.2)"``.
    image_shape
        ``(C, H, W)`` or ``None``.
    metadata
        JSON-serialisable provenance: weights, reference names and
        fingerprints, parameters. Copied on construction.
    """

    features: torch.Tensor
    soft_labels: torch.Tensor
    class_names: tuple[str, ...]
    name: str = "synthetic"
    image_shape: ImageShape | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        feats = _as_feature_tensor(self.features, self.name)
        image_shape = None if self.image_shape is None else tuple(int(s) for s in self.image_shape)
        _check_features(feats, image_shape, self.name)
        soft = _as_feature_tensor(self.soft_labels, self.name)
        names = tuple(str(c) for c in self.class_names)
        if soft.ndim != 2 or soft.shape[0] != feats.shape[0]:
            raise DatasetError(
                f"soft_labels must have shape ({feats.shape[0]}, K), got {tuple(soft.shape)}",
                self.name,
            )
        if soft.shape[1] != len(names):
            raise DatasetError(
                f"{soft.shape[1]} soft-label columns but {len(names)} class names", self.name
            )
        if not bool(torch.isfinite(soft).all()) or bool((soft < -1e-6).any()):
            raise DatasetError("soft labels must be finite and non-negative", self.name)
        sums = soft.sum(dim=1)
        if not bool(torch.allclose(sums, torch.ones_like(sums), atol=1e-3)):
            raise DatasetError(
                f"soft-label rows must sum to 1 (found sums in [{float(sums.min()):.4f}, {float(sums.max()):.4f}])",
                self.name,
            )
        object.__setattr__(self, "features", feats)
        object.__setattr__(self, "soft_labels", soft.clamp_min(0.0))
        object.__setattr__(self, "class_names", names)
        object.__setattr__(self, "image_shape", image_shape)
        object.__setattr__(
            self,
            "metadata",
            json.loads(json.dumps(dict(self.metadata or {}), default=_json_default)),
        )

    @property
    def n_samples(self) -> int:
        return int(self.features.shape[0])

    def __len__(self) -> int:
        return self.n_samples

    @property
    def hard_labels(self) -> torch.Tensor:
        """``(N,)`` argmax class index of each soft label."""
        return self.soft_labels.argmax(dim=1)

    def images(self) -> torch.Tensor:
        if self.image_shape is None:
            raise DatasetError("this dataset holds vectors, not images", self.name)
        return self.features.reshape(self.n_samples, *self.image_shape)

    @cached_property
    def fingerprint(self) -> str:
        return _hash_tensors(
            self.features, self.soft_labels, list(self.class_names), list(self.image_shape or ())
        )

    def __repr__(self) -> str:
        return (
            f"SoftLabeledDataset(name={self.name!r}, n_samples={self.n_samples}, "
            f"n_features={self.features.shape[1]}, n_labels={len(self.class_names)})"
        )
