"""A 2-D embedding of several datasets, fitted once and reused for new points.

The app shows ``Q``, every ``P_i`` and the interpolation ``P_a`` in one
picture. Fitting UMAP takes seconds, so it is fitted once per scenario on a
subsample of ``Q`` and the references (after a PCA to ``pca_dims``
dimensions), and each new ``P_a`` is placed with :meth:`Embedding.transform`.
If umap-learn is missing or fails, a PCA projection is used instead and
:attr:`Embedding.note` says so.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError

__all__ = ["Embedding", "auto_method", "fit_embedding", "warm_up_umap"]

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
    """

    method: Literal["umap", "pca"]
    note: str | None
    names: tuple[str, ...]
    points: dict[str, np.ndarray]
    indices: dict[str, np.ndarray]
    fit_seconds: float
    _pca: Any = field(repr=False, default=None)
    _umap: Any = field(repr=False, default=None)
    _train: Any = field(repr=False, default=None)

    @property
    def axis_titles(self) -> tuple[str, str]:
        return ("UMAP 1", "UMAP 2") if self.method == "umap" else ("PC 1", "PC 2")

    def transform(
        self, data: LabeledDataset | SoftLabeledDataset | np.ndarray | torch.Tensor
    ) -> np.ndarray:
        """Place new points ``(n, D)`` (same feature space) into the embedding -> ``(n, 2)``."""
        x = _features(data)
        if x.ndim != 2:
            raise DatasetError(f"expected (n, D) features, got shape {x.shape}")
        z = self._pca.transform(x)
        if self._umap is None:
            return np.asarray(z[:, :2], dtype=np.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if self._train is not None:  # fitted on precomputed distances
                from sklearn.metrics import pairwise_distances

                return np.asarray(
                    self._umap.transform(pairwise_distances(z, self._train)), dtype=np.float64
                )
            return np.asarray(self._umap.transform(z), dtype=np.float64)


def auto_method() -> Literal["umap", "pca"]:
    """What ``method="auto"`` means: ``"pca"`` when ``GEOVIZ_EMBEDDING=pca``, else ``"umap"``."""
    return "pca" if os.environ.get("GEOVIZ_EMBEDDING", "").strip().lower() == "pca" else "umap"


def warm_up_umap() -> float | None:
    """Compile UMAP's numba kernels on a tiny problem; returns the seconds spent.

    The first UMAP fit in a process spends ~7 s (2 cores) compiling; the fit
    itself takes under a second for a few thousand points. Calling this
    ahead of time (the app does it in a background thread while the user is
    on its first page) makes the first :func:`fit_embedding` fast. Runs the
    same code path as :func:`fit_embedding` (precomputed distances, then one
    ``transform``). Returns ``None`` when umap-learn cannot be imported.
    """
    start = time.perf_counter()
    try:
        import umap
        from sklearn.metrics import pairwise_distances
    except Exception:  # the embedding falls back to PCA then; nothing to warm up
        return None
    z = np.random.default_rng(0).normal(size=(60, 5)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reducer = umap.UMAP(
            n_neighbors=15, min_dist=0.2, random_state=0, metric="precomputed", n_epochs=10
        )
        reducer.fit_transform(pairwise_distances(z))
        reducer.transform(pairwise_distances(z[:8], z))
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
    if names is None:
        names = []
        for ds in datasets:
            base = getattr(ds, "name", "dataset")
            name, k = base, 2
            while name in names:
                name, k = f"{base}#{k}", k + 1
            names.append(name)
    names = tuple(str(n) for n in names)
    if len(names) != len(feats) or len(set(names)) != len(names):
        raise DatasetError("fit_embedding needs one unique name per dataset")

    rng = np.random.default_rng(seed)
    indices = {}
    chunks = []
    for name, f in zip(names, feats, strict=True):
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
    train = None
    note = None
    coords = z[:, :2] if z.shape[1] >= 2 else np.column_stack([z[:, 0], np.zeros(len(z))])
    if wanted == "umap":
        try:
            import umap
            from sklearn.metrics import pairwise_distances

            # Up to a few thousand points UMAP computes exact neighbours, and its
            # transform then calls a numba metric from Python once per pair (~2 s for
            # 500 x 2000). Precomputed Euclidean distances give the same neighbours
            # with numpy speed (~0.3 s per transform).
            precomputed = z.shape[0] <= _PRECOMPUTED_MAX
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                reducer = umap.UMAP(
                    n_components=2,
                    n_neighbors=int(max(2, min(n_neighbors, x.shape[0] - 1))),
                    min_dist=0.2,
                    random_state=seed,
                    transform_seed=seed,
                    metric="precomputed" if precomputed else "euclidean",
                    n_epochs=_UMAP_EPOCHS,
                )
                coords = reducer.fit_transform(pairwise_distances(z) if precomputed else z)
                train = z if precomputed else None
                # compile UMAP's transform now (numba JIT, seconds) so that placing
                # the first P_a later takes as long as any other
                probe = z[: min(len(z), 8)]
                reducer.transform(pairwise_distances(probe, z) if precomputed else probe)
        except Exception as err:  # any failure of the optional UMAP path -> PCA
            reducer = None
            train = None
            note = f"UMAP failed ({type(err).__name__}: {err}); showing a PCA projection instead."
    else:
        note = "PCA projection (UMAP disabled)." if method == "auto" else None

    points = {}
    offset = 0
    for name in names:
        n = len(indices[name])
        points[name] = np.asarray(coords[offset : offset + n], dtype=np.float64)
        offset += n
    return Embedding(
        method="umap" if reducer is not None else "pca",
        note=note,
        names=names,
        points=points,
        indices=indices,
        fit_seconds=time.perf_counter() - start,
        _pca=pca,
        _umap=reducer,
        _train=train,
    )
