"""The feature-space contract: fit on the union of Q and the references, transform each.

Paper Sec. 5.3: for natural images the OTDD maps are computed in an embedding (an MAE
there), not on raw pixels. A :class:`FeatureSpace` is the estimator of such an embedding;
fitting it on the union of the datasets of a geodesic problem gives a frozen
:class:`FittedFeatures`, which

* maps each dataset to vectors (:meth:`FittedFeatures.transform`: same labels, classes,
  name and source; ``image_shape=None`` unless the space is the identity);
* has a stable :attr:`~FittedFeatures.name` (``"pixels"``, ``"pca50"``, ``"encoder"``,
  ``"model:<name>"``) and a :attr:`~FittedFeatures.digest`: sha256 of the space's
  parameters, the fingerprints of the datasets it was fitted on and, for networks, of their
  weights. Fitting the same space on the same data twice gives the same digest; cache keys
  and export manifests carry it.

The OTDD couplings are computed on the transformed datasets; the images of ``P_a`` come
back through the couplings (:mod:`geoviz.geodesic.pipeline`): the barycentric projection
of the references' own images under each plan.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from geoviz.backend import ArraySpec, DiskCache, digest, digest_bytes
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import DatasetError, GeovizError

__all__ = [
    "FeatureSpace",
    "FittedFeatures",
    "ImagesDone",
    "Progress",
    "check_feature_output",
    "last_error_line",
]

#: ``progress(stage, fraction in [0, 1])``
Progress = Callable[[str, float], None]
#: ``progress(done, total)``: samples of one dataset encoded so far (:meth:`FittedFeatures.transform`)
ImagesDone = Callable[[int, int], None]


def _same_kind(datasets: Sequence[LabeledDataset]) -> list[LabeledDataset]:
    datasets = list(datasets)
    if not datasets:
        raise DatasetError("a feature space is fitted on at least one dataset")
    if not all(isinstance(ds, LabeledDataset) for ds in datasets):
        raise DatasetError("a feature space is fitted on LabeledDataset objects")
    dims = {ds.n_features for ds in datasets}
    if len(dims) > 1:
        detail = ", ".join(f"{ds.name}: D={ds.n_features}" for ds in datasets)
        raise DatasetError(
            f"a feature space is fitted on datasets of one shape; got {detail} (harmonize first)"
        )
    return datasets


def _features_fingerprint(ds: LabeledDataset) -> str:
    """sha256 of a dataset's features and image shape (not its labels)."""
    x = ds.features.detach().cpu().contiguous()
    shape = str(list(ds.image_shape or ())).encode()
    return digest_bytes([str(tuple(x.shape)).encode(), shape, x.numpy().tobytes()])


_NAMES_ITS_TYPE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit):")


def last_error_line(err: BaseException, limit: int = 200) -> str:
    """The last non-empty line of ``str(err)``, at most ``limit`` characters.

    A TorchScript error is a many-line traceback of the scripted code with the cause on its
    last line (``builtins.RuntimeError: ...``); its first ``limit`` characters would show
    only the traceback's heading. The line is prefixed with the exception's type unless it
    starts with one.
    """
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    line = line.removeprefix("builtins.")
    if not _NAMES_ITS_TYPE.match(line):  # "RuntimeError: ..." already says what it is
        line = f"{type(err).__name__}: {line}" if line else type(err).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def check_feature_output(out: Any, n: int, what: str) -> torch.Tensor:
    """The ``(n, d)`` float32 CPU tensor of a model's output, or a clear error.

    Accepts a tensor or a NumPy array of real numbers, ``(n, d)`` or any ``(n, ...)`` shape
    (``(n, d, 1, 1)`` of a pooled convolution, ``(n, C, H, W)`` images), flattened after the
    batch axis; ``(n,)`` and scalars are refused.

    Raises
    ------
    GeovizError
        Not a tensor or array, complex or non-numeric values, another number of rows,
        another rank, no features, or NaN/inf values.
    """
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        out = out[0]  # models that return (features, extras)
    if isinstance(out, np.ndarray):
        if out.dtype.kind not in "biuf":  # complex, object, strings: nothing torch reads as real
            kind = "complex" if out.dtype.kind == "c" else f"{out.dtype} (not numbers)"
            raise GeovizError(
                f"{what} returned an array of {kind} values; features must be real numbers"
            )
        out = torch.from_numpy(np.ascontiguousarray(out))
    if not isinstance(out, torch.Tensor):
        raise GeovizError(f"{what} returned {type(out).__name__}, not a tensor of features")
    if out.is_complex():
        # converting would drop the imaginary part: the costs would be silently wrong
        raise GeovizError(
            f"{what} returned complex features ({out.dtype}); features must be real numbers: "
            "return the real part, the magnitude or both as real features"
        )
    if out.layout != torch.strided or out.is_quantized or out.is_meta:
        raise GeovizError(
            f"{what} returned a {out.layout} tensor; return a dense tensor of real numbers"
        )
    if out.ndim < 2 or out.shape[0] != n:
        raise GeovizError(
            f"{what} returned shape {tuple(out.shape)} for {n} inputs; expected ({n}, d)"
        )
    flat = out.detach().reshape(n, -1).to("cpu", torch.float32)
    if flat.shape[1] == 0:
        raise GeovizError(f"{what} returned no features (shape {tuple(out.shape)})")
    if not torch.isfinite(flat).all():
        bad = int((~torch.isfinite(flat)).any(dim=1).sum())
        raise GeovizError(f"{what} returned NaN or infinite features for {bad} of {n} inputs")
    return flat


def _offset(progress: ImagesDone, start: int, total: int) -> Callable[[int], None]:
    """``progress(start + done, total)`` for an ``encode`` reporting ``done`` in its batch."""
    return lambda done: progress(start + int(done), total)


@dataclass(frozen=True, eq=False)
class FittedFeatures:
    """A feature space fitted on some datasets: a map ``(N, D) -> (N, d)``.

    Attributes
    ----------
    name
        Stable name of the space (``"pixels"``, ``"pca50"``, ``"encoder"``, ``"model:x"``).
    digest
        sha256 hex of the space's parameters, the fitted-on data and weights.
    dim
        ``d``, features per sample (``None`` for the identity: ``d = D``).
    encode
        ``(N, D) float32 -> (N, d) float32``, batched by the caller; ``None`` for the identity.
    info
        JSON-able facts for manifests and tables (training time, losses, parameters).
    batch_size
        Rows given to ``encode`` at a time.
    cache
        Where :meth:`transform` keeps each dataset's features (namespace
        ``feature_vectors``, keyed by :attr:`digest` and the dataset's pixels), so a
        second run on the same data does not run the network again; ``None`` for none.
        Spaces whose transform is cheap (pixels, PCA) leave it ``None``.
    """

    name: str
    digest: str
    dim: int | None
    encode: Callable[[torch.Tensor], torch.Tensor] | None = field(repr=False, default=None)
    info: dict[str, Any] = field(default_factory=dict)
    batch_size: int = 1024
    cache: DiskCache | None = field(default=None, repr=False)

    @property
    def is_identity(self) -> bool:
        """``True`` for pixel space: datasets are used as they are."""
        return self.encode is None

    def transform(
        self, ds: LabeledDataset, *, progress: ImagesDone | None = None
    ) -> LabeledDataset:
        """``ds`` in this space: ``(N, d)`` features, same labels, classes, name and source.

        ``progress(done, ds.n_samples)`` is called as the network encodes ``ds``: after each
        of its batches, and within one from an ``encode`` whose ``reports_progress`` is true
        (called with ``progress=``, the count done in the batch: the shipped encoders' chunk
        loops); never for features read from the cache.

        Raises
        ------
        GeovizError
            The encoder's output has the wrong shape or holds NaN/inf.
        """
        if self.encode is None:
            return ds
        if self.cache is None:
            z = self._encode_all(ds, progress)
        else:
            # labels never change the features: key on the pixels only
            key = {"space": self.digest, "data": _features_fingerprint(ds)}
            # checked on read: a damaged entry is recomputed, not blamed on the dataset's file
            payload = self.cache.get_or_compute(
                "feature_vectors",
                key,
                lambda: {"features": self._encode_all(ds, progress)},
                expect={"features": ArraySpec((ds.n_samples, self.dim))},
            )
            z = payload["features"]
        return ds.with_features(z, image_shape=None)

    def _encode_all(self, ds: LabeledDataset, progress: ImagesDone | None = None) -> torch.Tensor:
        encode = self.encode
        if encode is None:
            return ds.features
        within = progress is not None and getattr(encode, "reports_progress", False)
        chunks = []
        dim = self.dim
        n_batches = -(-ds.n_samples // self.batch_size)
        with torch.no_grad():
            for index, start in enumerate(range(0, ds.n_samples, self.batch_size)):
                x = ds.features[start : start + self.batch_size]
                where = (
                    f"batch {index + 1} of {n_batches} (samples {start:,}-"
                    f"{start + x.shape[0] - 1:,} of {ds.name})"
                )
                try:
                    if within and progress is not None:
                        counted: Any = encode  # its __call__ takes progress= (reports_progress)
                        out = counted(x, progress=_offset(progress, start, ds.n_samples))
                    else:
                        out = encode(x)
                    z = check_feature_output(out, x.shape[0], f"feature space {self.name}")
                except GeovizError as err:
                    # the same error class (a ResourceError stays one), told where it happened
                    err.args = (f"{err} in {where}",)
                    raise
                if dim is not None and z.shape[1] != dim:
                    raise GeovizError(
                        f"feature space {self.name} gave {z.shape[1]:,} features per sample in "
                        f"{where}, and {dim:,} before; a feature model must give the same "
                        "number for every batch"
                    )
                dim = int(z.shape[1])
                chunks.append(z)
                if progress is not None:
                    progress(start + x.shape[0], ds.n_samples)
        return torch.cat(chunks, dim=0)

    def manifest(self) -> dict[str, Any]:
        """What an export's manifest records of the space."""
        return {"name": self.name, "digest": self.digest, "dim": self.dim, **self.info}


class FeatureSpace(ABC):
    """Estimator of a feature space (scikit-learn style: parameters in ``__init__``,
    never mutated; :meth:`fit` returns a new :class:`FittedFeatures`)."""

    #: stable name, part of cache keys and manifests
    name: str = "space"

    def uses_labels(self, index: int) -> bool:
        """Whether fitting reads the labels of ``datasets[index]`` (``0`` is Q). A dataset
        whose labels are not read enters the digest by its features only, so Q with true
        labels and Q with pseudo-labels give the same fitted space (and cache entry)."""
        return False

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """JSON-able parameters that, with the data, determine the fitted space."""

    @abstractmethod
    def _fit(
        self, datasets: list[LabeledDataset], digest_: str, progress: Progress | None
    ) -> FittedFeatures:
        """Fit on ``datasets`` (already checked); ``digest_`` is the fitted space's digest."""

    def fit(
        self, datasets: Sequence[LabeledDataset], progress: Progress | None = None
    ) -> FittedFeatures:
        """Fit on the union of ``datasets`` (Q and the references).

        Raises
        ------
        DatasetError
            No datasets, or datasets of different shapes.
        """
        checked = _same_kind(datasets)
        return self._fit(checked, self._digest_of(checked), progress)

    def _digest_of(self, datasets: Sequence[LabeledDataset]) -> str:
        """The digest a fit on ``datasets`` gets (parameters, data, labels it reads)."""
        return digest(
            {
                "space": self.name,
                "params": self.params(),
                "data": [
                    ds.fingerprint if self.uses_labels(i) else _features_fingerprint(ds)
                    for i, ds in enumerate(datasets)
                ],
            }
        )

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"
