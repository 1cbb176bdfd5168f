"""A 2-D embedding of several datasets, fitted once and reused for new points.

The app shows ``Q``, every ``P_i`` and the interpolation ``P_a`` in one
picture. Fitting UMAP takes seconds, so it is fitted once per scenario on a
subsample of ``Q`` and the references (after a PCA to ``pca_dims``
dimensions), persisted (:meth:`Embedding.to_payload`), and each new ``P_a``
is placed with :meth:`Embedding.place` (UMAP's neighbour initialisation, in
milliseconds) or :meth:`Embedding.transform` (the full UMAP transform).
If umap-learn is missing or fails, a PCA projection is used instead and
:attr:`Embedding.note` says so.
"""

from __future__ import annotations

import importlib
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
from numpy.typing import ArrayLike, DTypeLike, NDArray

from geoviz.backend import Payload, runtime_settings
from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError

if TYPE_CHECKING:
    import umap

__all__ = ["Embedding", "auto_method", "fit_embedding", "warm_up_umap"]

#: neighbours used by :meth:`Embedding.place` (UMAP's default ``n_neighbors``)
PLACE_NEIGHBOURS = 15

EmbeddingMethod = Literal["auto", "umap", "pca"]

#: Up to this many fitted points UMAP runs on a precomputed distance matrix.
_PRECOMPUTED_MAX = 8000

#: UMAP optimisation epochs for the fit (UMAP's own default for large data; its
#: default of 500 for small data triples the fit time for no visible change here).
#: ``transform`` runs a third of them for every new set of points.
_UMAP_EPOCHS = 200


def _features(ds: LabeledDataset | SoftLabeledDataset | np.ndarray | torch.Tensor) -> np.ndarray:
    x = ds.features if isinstance(ds, (LabeledDataset, SoftLabeledDataset)) else ds
    arr = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    return np.ascontiguousarray(arr, dtype=np.float32)


@dataclass
class Embedding:
    """A fitted 2-D embedding.

    Attributes
    ----------
    method
        ``"umap"`` or ``"pca"`` (the fallback, or when asked for).
    note
        Why the fallback was used, or ``None``.
    names
        Datasets the embedding was fitted on, in order.
    points
        ``name -> (n_i, 2)`` coordinates of the fitted subsample of each dataset.
    indices
        ``name -> (n_i,)`` row indices of that subsample in the dataset.
    fit_seconds
        Wall time of the fit.

    The fit itself (set by :func:`fit_embedding` and :meth:`from_payload`): the PCA's
    ``(D,)`` mean and ``(pca_dims, D)`` components, the fitted points ``(n, pca_dims)``
    in PCA space, and the UMAP reducer (``None`` for PCA and after :meth:`from_payload`).
    """

    method: Literal["umap", "pca"]
    note: str | None
    names: tuple[str, ...]
    points: dict[str, np.ndarray]
    indices: dict[str, np.ndarray]
    fit_seconds: float
    _pca: tuple[NDArray[np.float32], NDArray[np.float32]] | None = field(repr=False, default=None)
    _umap: umap.UMAP | None = field(repr=False, default=None)
    _train: NDArray[np.float32] | None = field(repr=False, default=None)

    @property
    def axis_titles(self) -> tuple[str, str]:
        """The plot's axis titles: ``("UMAP 1", "UMAP 2")`` or ``("PC 1", "PC 2")``."""
        return ("UMAP 1", "UMAP 2") if self.method == "umap" else ("PC 1", "PC 2")

    def _fitted_pca(self) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """The PCA's ``(D,)`` mean and ``(pca_dims, D)`` components."""
        if self._pca is None:
            raise DatasetError("this embedding holds no fit: use fit_embedding or from_payload")
        return self._pca

    def _fitted_points(self) -> NDArray[np.float32]:
        """The fitted points ``(n, pca_dims)`` in PCA space."""
        if self._train is None:
            raise DatasetError("this embedding holds no fit: use fit_embedding or from_payload")
        return self._train

    def _reduced(
        self, data: LabeledDataset | SoftLabeledDataset | np.ndarray | torch.Tensor
    ) -> np.ndarray:
        x = _features(data)
        if x.ndim != 2:
            raise DatasetError(f"expected (n, D) features, got shape {x.shape}")
        mean, components = self._fitted_pca()
        if x.shape[1] != mean.shape[0]:
            raise DatasetError(
                f"features have {x.shape[1]} dimensions, the embedding was fitted on {mean.shape[0]}"
            )
        reduced: np.ndarray = (x - mean) @ components.T
        return reduced

    def transform(
        self, data: LabeledDataset | SoftLabeledDataset | np.ndarray | torch.Tensor
    ) -> np.ndarray:
        """Place new points ``(n, D)`` (same feature space) into the embedding -> ``(n, 2)``.

        UMAP: ``umap.UMAP.transform`` (its neighbour initialisation followed by
        a third of the fit's optimisation epochs; needs the fitted reducer, so
        not available on an embedding restored with :meth:`from_payload`).
        PCA: the first two principal components.
        """
        z = self._reduced(data)
        if self.method == "pca":
            return _first_two(z)
        if self._umap is None:
            raise DatasetError(
                "this UMAP embedding was restored from disk without its reducer; use place()"
            )
        from sklearn.metrics import pairwise_distances

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if self._umap.metric == "precomputed":
                z = pairwise_distances(z, self._fitted_points())
            return np.asarray(self._umap.transform(z), dtype=np.float64)

    def place(
        self,
        data: LabeledDataset | SoftLabeledDataset | np.ndarray | torch.Tensor,
        n_neighbors: int = PLACE_NEIGHBOURS,
    ) -> np.ndarray:
        """Place new points by their nearest fitted points -> ``(n, 2)``, in milliseconds.

        UMAP: each new point goes to the weighted mean of the embedding
        coordinates of its ``n_neighbors`` nearest fitted points (Euclidean, in
        the PCA space the embedding was fitted in), with UMAP's fuzzy-set
        weights ``exp(-(d - rho) / sigma)`` (``rho`` the nearest distance,
        ``sigma`` the mean gap to it). This is UMAP's own initialisation of
        :meth:`transform` without the optimisation epochs that follow: a new
        point between two clusters stays between them, and no numba code runs
        (so a restored embedding places points right after a restart).
        PCA: exact, as :meth:`transform`.
        """
        z = self._reduced(data)
        if self.method == "pca":
            return _first_two(z)
        train = self._fitted_points()
        coords = np.concatenate([self.points[n] for n in self.names])
        k = int(min(max(1, n_neighbors), train.shape[0]))
        # squared distances by the expansion (n x n_train floats; n_train is a few thousand)
        d2 = (z * z).sum(1)[:, None] - 2.0 * z @ train.T + (train * train).sum(1)[None, :]
        nearest = np.argpartition(d2, k - 1, axis=1)[:, :k]
        d = np.sqrt(np.maximum(np.take_along_axis(d2, nearest, axis=1), 0.0))
        rho = d.min(axis=1, keepdims=True)
        sigma = np.maximum((d - rho).mean(axis=1, keepdims=True), 1e-12)
        w = np.exp(-(d - rho) / sigma)
        w /= w.sum(axis=1, keepdims=True)
        placed: np.ndarray = np.einsum("nk,nkc->nc", w, coords[nearest])
        return placed

    def to_payload(self) -> Payload:
        """Arrays and plain values to persist the embedding (e.g. in :class:`geoviz.backend.DiskCache`).

        Holds the coordinates, subsample indices, the PCA and the fitted points
        in PCA space: enough for :meth:`place` and, for PCA, :meth:`transform`
        (the UMAP reducer itself is not stored: the disk cache loads no pickles).

        Returns
        -------
        geoviz.backend.Payload
            ``method``, ``note`` (``""`` for none), ``names``, ``points`` and ``indices``
            (one ``(n_i, 2)`` / ``(n_i,)`` array per name), ``fit_seconds``, ``pca_mean``
            ``(D,)``, ``pca_components`` ``(pca_dims, D)``, ``train`` ``(n, pca_dims)``.
        """
        mean, components = self._fitted_pca()
        return {
            "method": self.method,
            "note": self.note or "",
            "names": list(self.names),
            "points": [self.points[n] for n in self.names],
            "indices": [np.asarray(self.indices[n], dtype=np.int64) for n in self.names],
            "fit_seconds": float(self.fit_seconds),
            "pca_mean": mean,
            "pca_components": components,
            "train": self._fitted_points(),
        }

    @classmethod
    def from_payload(cls, payload: Payload) -> Embedding:
        """Inverse of :meth:`to_payload` (arrays may come back as tensors)."""

        def arr(x: ArrayLike | torch.Tensor, dtype: DTypeLike = np.float64) -> np.ndarray:
            x = x.numpy() if isinstance(x, torch.Tensor) else x
            return np.asarray(x, dtype=dtype)

        names = tuple(str(n) for n in payload["names"])
        return cls(
            method=payload["method"],
            note=payload["note"] or None,
            names=names,
            points={n: arr(p) for n, p in zip(names, payload["points"], strict=True)},
            indices={n: arr(i, np.int64) for n, i in zip(names, payload["indices"], strict=True)},
            fit_seconds=float(payload["fit_seconds"]),
            _pca=(arr(payload["pca_mean"], np.float32), arr(payload["pca_components"], np.float32)),
            _train=arr(payload["train"], np.float32),
        )


def _first_two(z: np.ndarray) -> np.ndarray:
    out = z[:, :2] if z.shape[1] >= 2 else np.column_stack([z[:, 0], np.zeros(len(z))])
    return np.asarray(out, dtype=np.float64)


def auto_method() -> Literal["umap", "pca"]:
    """What ``method="auto"`` means: ``"pca"`` when ``GEOVIZ_EMBEDDING=pca``, else ``"umap"``
    (:attr:`geoviz.backend.RuntimeSettings.embedding`, read at the entry point)."""
    return runtime_settings().embedding


def _cache_numba_kernels(prefix: str = "umap") -> int:
    """Turn on numba's on-disk cache for the compiled functions of ``prefix``'s modules.

    umap-learn compiles most of its kernels without ``cache=True``, so every new
    server process spent ~8 s (2 cores) compiling them before its first fit.
    With the cache on, the first fit after installing writes the machine code next
    to umap's sources (numba's ``__pycache__``, or its user-wide cache dir when that
    is read-only) and later processes load it in milliseconds. Numba keys each entry
    by the source file's stamp and the argument types, so an upgraded umap-learn
    recompiles. Returns how many functions were switched.
    """
    import sys

    try:
        from numba.core.registry import CPUDispatcher
    except Exception:  # numba missing: nothing to cache
        return 0
    switched = 0
    for name, module in list(sys.modules.items()):
        if module is None or not (name == prefix or name.startswith(prefix + ".")):
            continue
        for value in list(vars(module).values()):
            if (
                isinstance(value, CPUDispatcher)
                and getattr(value, "__module__", "").startswith(prefix)
                and type(getattr(value, "_cache", None)).__name__ == "NullCache"
            ):
                try:
                    value.enable_caching()
                except Exception:  # e.g. a function numba cannot locate on disk
                    continue
                switched += 1
    return switched


def _import_umap() -> ModuleType:
    """``import umap`` with its numba kernels cached on disk (:func:`_cache_numba_kernels`)."""
    umap = importlib.import_module("umap")  # typed ModuleType (umap-learn ships no types)
    _cache_numba_kernels("umap")
    return umap


def warm_up_umap() -> float | None:
    """Compile UMAP's numba kernels on a tiny problem; returns the seconds spent.

    The first UMAP fit after installing spends ~8 s (2 cores) compiling (later
    processes load the kernels from numba's disk cache, :func:`_cache_numba_kernels`);
    the fit itself takes under a second for a few thousand points. Calling this
    ahead of time (the app does it in a background thread while the user is
    on its first page) makes the first :func:`fit_embedding` fast. Runs the
    same code path as :func:`fit_embedding` (precomputed distances; the app
    places new points with :meth:`Embedding.place`, so ``transform`` is not
    compiled). Returns ``None`` when umap-learn cannot be imported.
    """
    start = time.perf_counter()
    try:
        from sklearn.metrics import pairwise_distances

        umap = _import_umap()
    except Exception:  # the embedding falls back to PCA then; nothing to warm up
        return None
    z = np.random.default_rng(0).normal(size=(60, 5)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reducer = umap.UMAP(
            n_neighbors=15, min_dist=0.2, random_state=0, metric="precomputed", n_epochs=10
        )
        reducer.fit_transform(pairwise_distances(z))
    return time.perf_counter() - start


def fit_embedding(
    datasets: Sequence[LabeledDataset | SoftLabeledDataset],
    *,
    names: Sequence[str] | None = None,
    max_per_dataset: int = 500,
    method: EmbeddingMethod = "auto",
    pca_dims: int = 50,
    n_neighbors: int = 15,
    seed: int = 0,
) -> Embedding:
    """Fit a 2-D embedding on (subsamples of) ``datasets``.

    Parameters
    ----------
    datasets
        Datasets in one feature space (same ``D``), e.g. ``[Q, P_1, ..., P_m]``
        after :func:`geoviz.data.preprocess.harmonize`.
    names
        Keys of :attr:`Embedding.points`; default the datasets' names
        (duplicates get a ``#k`` suffix).
    max_per_dataset
        Rows drawn (uniformly, seeded) from each dataset for the fit.
    method
        ``"umap"``, ``"pca"``, or ``"auto"`` (UMAP unless the environment
        variable ``GEOVIZ_EMBEDDING=pca``).
    pca_dims
        PCA dimensions fed to UMAP (speeds it up on images, removes noise).
    n_neighbors
        UMAP neighbourhood size.
    seed
        Subsampling and UMAP seed.
    """
    if not datasets:
        raise DatasetError("fit_embedding needs at least one dataset")
    feats = [_features(ds) for ds in datasets]
    dims = {f.shape[1] for f in feats}
    if len(dims) != 1:
        raise DatasetError(
            f"datasets live in different feature spaces (D = {sorted(dims)}); harmonize them first"
        )
    keys = _dataset_names(datasets) if names is None else tuple(str(n) for n in names)
    if len(keys) != len(feats) or len(set(keys)) != len(keys):
        raise DatasetError("fit_embedding needs one unique name per dataset")

    rng = np.random.default_rng(seed)
    indices = {}
    chunks = []
    for name, f in zip(keys, feats, strict=True):
        n = f.shape[0]
        idx = np.sort(rng.choice(n, size=min(n, int(max_per_dataset)), replace=False))
        indices[name] = idx
        chunks.append(f[idx])
    x = np.concatenate(chunks)
    start = time.perf_counter()

    from sklearn.decomposition import PCA

    k = int(min(pca_dims, x.shape[1], x.shape[0] - 1))
    pca = PCA(n_components=max(k, 2) if x.shape[1] >= 2 else 1, random_state=seed)
    z = pca.fit_transform(x)

    wanted = auto_method() if method == "auto" else method
    if wanted not in ("umap", "pca"):
        raise DatasetError(f"embedding method must be 'auto', 'umap' or 'pca', got {method!r}")

    reducer = None
    note = None
    coords = _first_two(z)
    if wanted == "umap":
        try:
            reducer, coords = _fit_umap(z, n_neighbors, seed)
        except Exception as err:  # any failure of the optional UMAP path -> PCA
            reducer = None
            note = f"UMAP failed ({type(err).__name__}: {err}); showing a PCA projection instead."
    else:
        note = "PCA projection (UMAP disabled)." if method == "auto" else None

    points = {}
    offset = 0
    for name in keys:
        n = len(indices[name])
        points[name] = np.asarray(coords[offset : offset + n], dtype=np.float64)
        offset += n
    return Embedding(
        method="umap" if reducer is not None else "pca",
        note=note,
        names=keys,
        points=points,
        indices=indices,
        fit_seconds=time.perf_counter() - start,
        _pca=(
            np.asarray(pca.mean_, dtype=np.float32),
            np.asarray(pca.components_, dtype=np.float32),
        ),
        _umap=reducer,
        _train=np.asarray(z, dtype=np.float32),
    )


def _dataset_names(datasets: Sequence[LabeledDataset | SoftLabeledDataset]) -> tuple[str, ...]:
    """The datasets' names in order, a repeated one suffixed ``#2``, ``#3``, ..."""
    names: list[str] = []
    for ds in datasets:
        base = getattr(ds, "name", "dataset")
        name, k = base, 2
        while name in names:
            name, k = f"{base}#{k}", k + 1
        names.append(name)
    return tuple(str(n) for n in names)


def _fit_umap(z: np.ndarray, n_neighbors: int, seed: int) -> tuple[umap.UMAP, np.ndarray]:
    """A 2-D UMAP fitted on the PCA coordinates ``z`` ``(n, pca_dims)``: the reducer and
    ``(n, 2)`` coordinates. Raises whatever umap-learn raises (the caller falls back to PCA).
    """
    from sklearn.metrics import pairwise_distances

    umap = _import_umap()
    # Up to a few thousand points UMAP computes exact neighbours, and its
    # transform then calls a numba metric from Python once per pair (~2 s for
    # 500 x 2000). Precomputed Euclidean distances give the same neighbours
    # with numpy speed (~0.3 s per transform).
    precomputed = z.shape[0] <= _PRECOMPUTED_MAX
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reducer = umap.UMAP(
            n_components=2,
            n_neighbors=int(max(2, min(n_neighbors, z.shape[0] - 1))),
            min_dist=0.2,
            random_state=seed,
            transform_seed=seed,
            metric="precomputed" if precomputed else "euclidean",
            n_epochs=_UMAP_EPOCHS,
        )
        coords = reducer.fit_transform(pairwise_distances(z) if precomputed else z)
    return reducer, coords
