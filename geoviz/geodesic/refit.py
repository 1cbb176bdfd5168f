"""The refit bootstrap: ``Q`` and every ``P_i`` resampled, the maps fitted again (issue 23).

The Q-resampling bootstrap (:func:`geoviz.geodesic.uncertainty.bootstrap_q`) keeps the maps
``T_i`` fixed, so it cannot see their own sampling noise or bias. Here replicate ``b`` draws
``Q`` and each ``P_i`` again with replacement (``numpy.random.default_rng([seed, b])``, the
same sizes as the fit), refits the maps with the fit's settings and recomputes ``W_i``,
``W_ij`` and ``a_hat`` (paper Def. 2, eq. (hat_a)). Each replicate is one task of
:func:`geoviz.tasks.run_tasks`: Ray tasks (a local cluster by default, a cluster by
``address``) or one after another. Every refitted map is cached on disk by the fingerprints
of its resampled datasets, so an interrupted run resumes where it stopped.

With a feature space, the replicates resample the datasets' vectors in that fitted space
(the encoder is not retrained: its sampling noise is not part of the interval).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from geoviz import limits
from geoviz.backend import DiskCache, get_cache
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import GeovizError
from geoviz.geodesic.config import GeodesicConfig
from geoviz.geodesic.pipeline import fit_geodesic
from geoviz.geodesic.result import GeodesicResult
from geoviz.geodesic.uncertainty import (
    DEFAULT_LEVEL,
    GeodesicBootstrap,
    check_replicates,
)
from geoviz.tasks import Backend, run_tasks

__all__ = ["bootstrap_refit", "refit_replicate", "resample"]

#: one replicate's numbers: W_i (m,), W_ij (m, m), a_hat (m,)
Replicate = tuple[np.ndarray, np.ndarray, np.ndarray]


def resample(ds: LabeledDataset, rng: np.random.Generator) -> LabeledDataset:
    """``ds`` drawn again with replacement (same size), classes kept.

    A draw that loses all but one class is drawn again (at most 100 times), since a
    labelled dataset needs two classes.
    """
    n = ds.n_samples
    for _ in range(100):
        idx = rng.integers(0, n, size=n)
        if int(np.unique(ds.labels.numpy()[idx]).size) >= 2:
            return ds.subset(idx)
    raise GeovizError(f"{ds.name}: resamples keep only one class; it has too few samples")


def refit_replicate(
    b: int,
    *,
    target: LabeledDataset,
    references: Sequence[LabeledDataset],
    config: GeodesicConfig,
    seed: int,
    cache: DiskCache | None,
) -> Replicate:
    """Replicate ``b``: resample ``Q`` and each ``P_i``, refit, return ``(W_i, W_ij, a_hat)``."""
    rng = np.random.default_rng([seed, b])
    q = resample(target, rng)
    refs = [resample(ref, rng) for ref in references]
    fit = fit_geodesic(q, refs, config=config, cache=cache)
    return fit.w_to_target, fit.w_between, fit.a_hat


def bootstrap_refit(
    result: GeodesicResult,
    replicates: int = 50,
    *,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    backend: Backend = "auto",
    address: str | None = None,
    cache: DiskCache | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> GeodesicBootstrap:
    """Refit bootstrap of a fitted projection (see the module docstring).

    Parameters
    ----------
    result
        The fit whose datasets and settings are resampled.
    replicates
        ``B`` refits (each one costs about one fit of the maps).
    seed
        Seed of the resampling: replicate ``b`` uses ``default_rng([seed, b])``.
    level
        Nominal coverage of the intervals.
    backend, address
        :func:`geoviz.tasks.run_tasks` options: ``"auto"`` (Ray when installed),
        ``"ray"``, ``"sequential"``; a Ray cluster address (``None``: a local cluster).
    cache
        Where the refitted maps are cached (default :func:`geoviz.backend.get_cache`).
    progress
        ``progress(done, total)`` after each finished replicate.

    Raises
    ------
    GeovizError
        Neural maps (a refit would retrain networks: use Q-resampling), ``B`` out of range;
        with Ray, a malformed ``address`` or a cluster that does not answer within the
        bounded wait of :func:`geoviz.tasks.probe_ray_address` (``backend="auto"`` runs
        the refits in this process instead, with a warning).
    """
    b_count = check_replicates(replicates, "refit replicates")
    seed = limits.check_int(seed, "bootstrap seed", 0, limits.MAX_SEED)
    if result.config.method != "barycentric":
        raise GeovizError(
            "refit bootstraps are for barycentric maps; a neural map would be retrained per "
            "replicate (use the Q-resampling bootstrap)"
        )
    target, refs = result.target, result.references
    if result.feature_space is not None:
        target = result.feature_space.transform(target)
        refs = tuple(result.feature_space.transform(ref) for ref in refs)
    config = replace(result.config, features="pixels")
    task = functools.partial(
        refit_replicate,
        target=target,
        references=refs,
        config=config,
        seed=seed,
        cache=cache if cache is not None else get_cache(),
    )
    out = run_tasks(task, list(range(b_count)), backend=backend, address=address, progress=progress)
    w_t = np.stack([r[0] for r in out])
    w_b = np.stack([r[1] for r in out])
    hats = np.stack([r[2] for r in out])
    return GeodesicBootstrap(
        method="refit",
        seed=seed,
        n_samples=target.n_samples,
        w_to_target=np.asarray(result.w_to_target, dtype=np.float64),
        w_between=np.asarray(result.w_between, dtype=np.float64),
        a_hat=np.asarray(result.a_hat, dtype=np.float64),
        w_to_target_replicates=w_t,
        w_between_replicates=w_b,
        a_hat_replicates=hats,
        level=level,
    )
