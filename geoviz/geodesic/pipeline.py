"""End-to-end projection of a target dataset onto the generalized geodesic of references.

:func:`fit_geodesic` runs the two steps of the paper (Sec. 3):

1. an OTDD barycentric map ``T_i`` from the target ``Q`` to every reference
   ``P_i`` (Sec. 3.1, eq. (bary_map); :class:`geoviz.maps.barycentric.BarycentricMap`);
2. the (2,Q)-dataset distances of Def. 2 between the mapped datasets and to
   ``Q``, the objective ``W^2(P_a, Q)`` of eq. (ds_eq) and its minimiser
   ``a_hat`` of eq. (hat_a) (:mod:`geoviz.geodesic.distances`).

The result, :class:`GeodesicResult`, keeps the ``m`` mapped copies of the target
so any point ``P_a = (sum_i a_i T_i)#Q`` (Sec. 3.2-3.3) or McCann
interpolation can be sampled instantly.

Sharpness of the maps: every map also reports how many reference points a
mapped point averages (``effective_neighbours``, the median plan-row
perplexity; 1 is a one-to-one map, ``N_P`` the mean image), how sure its soft
labels are (``label_confidence``) and, per target point, its largest plan
weights (``neighbour_index`` / ``neighbour_weight``). The relative ``epsilon``
of :class:`~geoviz.ot.otdd_cost.OTDDConfig` (``eps_abs = epsilon * mean(C)``,
default :data:`~geoviz.vocabulary.DEFAULT_EPSILON`) sets that trade-off: larger
epsilon blurs the maps (:attr:`GeodesicResult.blurry`).

Caching: every map (keyed by the target and reference fingerprints and the
OTDD configuration, by :class:`~geoviz.maps.barycentric.BarycentricMap`) and
every reference-reference label-distance matrix is stored in the on-disk cache
(:func:`geoviz.backend.get_cache` or the ``cache`` argument), so a second call
with the same inputs solves no coupling; adding a reference only fits the new map.

Layout, as :mod:`geoviz.ot` splits the OTDD: :class:`GeodesicConfig` and the feature-space
helpers are in :mod:`geoviz.geodesic.config`, :class:`GeodesicResult` in
:mod:`geoviz.geodesic.result`; this module fits (:func:`fit_geodesic`, its stages and its
cache); import the configuration and the result from their own modules.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from geoviz import limits
from geoviz.backend import ArraySpec, DiskCache, get_cache
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import DatasetError, GeovizError
from geoviz.features import FeatureSpace, FittedFeatures, SpaceChoice
from geoviz.geodesic.config import (
    GeodesicConfig,
    check_space_allows,
    space_of,
)
from geoviz.geodesic.distances import TwoQDistances, optimal_weights, two_q_distances
from geoviz.geodesic.labels import label_space
from geoviz.geodesic.result import GeodesicResult
from geoviz.maps.base import FittedMap
from geoviz.maps.methods import map_estimator, map_method_label
from geoviz.memory import memory_budget_bytes
from geoviz.ot.labels import label_distances
from geoviz.ot.otdd_cost import OTDDConfig
from geoviz.tasks import resolve_backend, run_in_threads

__all__ = [
    "Progress",
    "fit_geodesic",
    "fit_in_space",
    "lift_through_plan",
]

Progress = Callable[[str, float], None]

#: Bumped when the cached payload of this module changes meaning.
PIPELINE_CACHE_VERSION = 2
_LABEL_NAMESPACE = "geodesic_label_distances"
#: share of the progress bar for the maps; the label pairs take 90 % of the rest, the
#: (2,Q) distances and ``a_hat`` the last 10 %
_MAP_SHARE = 0.85


# --------------------------------------------------------------------------- inputs


def _validate_inputs(
    target: Any, references: Any
) -> tuple[LabeledDataset, tuple[LabeledDataset, ...]]:
    if not isinstance(target, LabeledDataset):
        raise DatasetError(f"the target must be a LabeledDataset, got {type(target).__name__}")
    if isinstance(references, LabeledDataset):
        raise DatasetError(
            "references must be a sequence of at least 2 datasets, got a single dataset "
            f"({references.name!r})"
        )
    refs = tuple(references)
    limits.check_reference_count(len(refs), error=DatasetError)
    for k, ref in enumerate(refs):
        if not isinstance(ref, LabeledDataset):
            raise DatasetError(f"reference {k} must be a LabeledDataset, got {type(ref).__name__}")
    bad = [ref for ref in refs if ref.n_features != target.n_features]
    if bad:
        detail = ", ".join(f"{ref.name!r} has {ref.n_features}" for ref in bad)
        raise DatasetError(
            f"all datasets must have the same feature dimension: target {target.name!r} has "
            f"{target.n_features} features per sample but {detail}; bring them to one size with "
            f"geoviz.data.preprocess.harmonize"
        )
    return target, refs


# ---------------------------------------------------- parts: the maps and the reference pairs


_MAP_STAGES = {
    "labels": (0.0, 0.1),
    "sinkhorn": (0.1, 0.9),
    "debias": (0.9, 1.0),
    # neural maps: label distances, the classifier l, the optional warm start, the max-min training
    "classifier": (0.1, 0.3),
    "warm start": (0.3, 0.4),
    "adversarial": (0.4, 1.0),
    "done": (1.0, 1.0),
}


def _labels_between(
    a: LabeledDataset, b: LabeledDataset, otdd_cfg: OTDDConfig, cache: DiskCache
) -> torch.Tensor:
    """Class-conditional label distances ``(C_a, C_b)`` float64, cached per unordered pair."""
    # label_distances(a, b) == label_distances(b, a).T (per-class subsamples do not
    # depend on the other dataset): one cache entry per unordered pair
    if a.fingerprint > b.fingerprint:
        return _labels_between(b, a, otdd_cfg, cache).T
    params = {
        "v": PIPELINE_CACHE_VERSION,
        "a": a.fingerprint,
        "b": b.fingerprint,
        "method": otdd_cfg.label_method,
        "max_per_class": otdd_cfg.max_per_class,
        "seed": int(otdd_cfg.seed),
    }
    payload = cache.get_or_compute(
        _LABEL_NAMESPACE,
        params,
        lambda: {
            "distances": label_distances(
                a,
                b,
                method=otdd_cfg.label_method,
                max_per_class=otdd_cfg.max_per_class,
                seed=int(otdd_cfg.seed),
                device=otdd_cfg.device,
            )
        },
        expect={"distances": ArraySpec((a.n_classes, b.n_classes), finite=False)},
    )
    distances: torch.Tensor = payload["distances"]
    return distances.to(torch.float64)


class _PartsProgress:
    """Overall progress of the maps and label pairs, which may run on several threads.

    The maps take ``map_share`` of the bar (each ``1/m`` of it, split by its own stages,
    :data:`_MAP_STAGES`), the pairs 90 % of the rest; the stage text is the latest any part
    reported.
    """

    def __init__(
        self, m: int, n_pairs: int, map_share: float, report: Callable[[str, float], None]
    ) -> None:
        self._lock = threading.Lock()
        self._maps = [0.0] * m
        self._pairs_done = 0
        self._n_pairs = n_pairs
        self._map_share = map_share
        self._report = report

    def _fraction(self) -> float:
        maps = self._map_share * sum(self._maps) / len(self._maps)
        return maps + (1 - self._map_share) * 0.9 * self._pairs_done / max(self._n_pairs, 1)

    def map_stage(self, k: int, stage: str, sub: str | None, fraction: float) -> None:
        # "sinkhorn: batch 3/6" is a part of the "sinkhorn" stage
        lo, hi = _MAP_STAGES.get((sub or "").split(":")[0], (0.0, 1.0))
        within = lo + (hi - lo) * min(max(float(fraction), 0.0), 1.0)
        with self._lock:
            self._maps[k] = max(self._maps[k], within)
            text = stage if sub is None or sub == "done" else f"{stage} ({sub})"
            self._report(text, self._fraction())

    def pair_started(self, stage: str) -> None:
        with self._lock:
            self._report(stage, self._fraction())

    def pair_done(self) -> None:
        with self._lock:
            self._pairs_done += 1
            self._report(f"label distances ({self._pairs_done}/{self._n_pairs})", self._fraction())


#: working memory of one barycentric map per target-reference sample pair, bytes: the dense
#: cost, the kernel or plan, and the returned coupling (float64), with room for temporaries
_MAP_BYTES_PER_PAIR = 4 * 8


def _part_workers(
    workers: int,
    n_parts: int,
    n_target: int,
    refs: Sequence[LabeledDataset],
    otdd_cfg: OTDDConfig | None = None,
) -> int:
    """Threads for the maps and pairs: ``workers``, at most one per part, and no more maps
    at once than the memory budget holds (each holds its own ``N_Q x N_P`` matrices).

    Batches that run as Ray tasks hold nothing that large in this process: every map then
    submits its batches at once, so each (reference, batch) pair is a task of its own."""
    if (
        otdd_cfg is not None
        and otdd_cfg.batch_size is not None
        and resolve_backend(otdd_cfg.backend) == "ray"
    ):
        return n_parts
    used = max(1, min(int(workers), n_parts))
    budget = memory_budget_bytes()
    if used > 1 and budget is not None:
        largest = max(n_target * ref.n_samples for ref in refs) * _MAP_BYTES_PER_PAIR
        used = max(1, min(used, budget // max(largest, 1)))
    return used


# --------------------------------------------------------------------------- stages


def _never_back(progress: Progress | None) -> Progress:
    """``progress`` as the fit reports to it: the overall fraction never goes back, whatever
    the inner solvers report, and stays in ``[0, 1]``."""
    reached = [0.0]

    def report(stage: str, fraction: float) -> None:
        reached[0] = max(reached[0], min(float(fraction), 1.0))
        if progress is not None:
            progress(stage, reached[0])

    return report


def _into_feature_space(
    space: FeatureSpace,
    config: GeodesicConfig,
    target: LabeledDataset,
    refs: tuple[LabeledDataset, ...],
    report: Progress,
) -> tuple[FittedFeatures | None, LabeledDataset, tuple[LabeledDataset, ...]]:
    """The space fitted on the union of ``target`` and ``refs``, and the datasets in it
    (paper Sec. 5.3); pixel space fits nothing and returns the datasets as they are.

    Returns
    -------
    fitted : FittedFeatures or None
        ``None`` for pixel space.
    target, refs
        The datasets' features in that space (the same objects in pixel space).
    """
    if not isinstance(space, FeatureSpace):
        raise GeovizError(f"features must be a FeatureSpace, got {type(space).__name__}")
    if space.name == "pixels":
        return None, target, refs
    check_space_allows(config.method, space.name)  # a user's space given beside config
    report(f"feature space {space.name}", 0.0)
    fitted = space.fit([target, *refs], lambda stage, f: report(f"{space.name}: {stage}", 0.3 * f))
    encoding = _EncodingProgress(space.name, [target, *refs], report)
    into = [fitted.transform(ds, progress=encoding.of(k)) for k, ds in enumerate((target, *refs))]
    return fitted, into[0], tuple(into[1:])


#: seconds between two "encoding N/M images" reports (the network's chunks are quicker)
_ENCODING_REPORT_SECONDS = 0.25


class _EncodingProgress:
    """``"<space>: encoding N/M images"`` over all the datasets a space encodes (the fit's
    feature stage, the first 30 % of its bar), at most every :data:`_ENCODING_REPORT_SECONDS`
    and once at each dataset's end (features read from the cache report nothing)."""

    def __init__(self, name: str, datasets: Sequence[LabeledDataset], report: Progress) -> None:
        self.name, self.report = name, report
        sizes = [ds.n_samples for ds in datasets]
        self.offsets = [sum(sizes[:k]) for k in range(len(sizes))]
        self.total = max(sum(sizes), 1)
        self.shown = -math.inf

    def of(self, k: int) -> Callable[[int, int], None]:
        def images(done: int, n: int) -> None:
            now = time.perf_counter()
            if done < n and now - self.shown < _ENCODING_REPORT_SECONDS:
                return
            self.shown = now
            count = self.offsets[k] + done
            self.report(
                f"{self.name}: encoding {count:,}/{self.total:,} images", 0.3 * count / self.total
            )

        return images


def _fit_maps(
    target: LabeledDataset,
    refs: tuple[LabeledDataset, ...],
    names: tuple[str, ...],
    config: GeodesicConfig,
    cache: DiskCache,
    report: Progress,
    workers: int,
) -> tuple[list[FittedMap[Any]], dict[tuple[int, int], torch.Tensor]]:
    """The OTDD maps ``T_i: Q -> P_i`` (paper Sec. 3.1) and the label distances between
    references.

    Both are independent parts, run one after another or on ``workers`` threads
    (:func:`_part_workers`); the maps first, as they are the long parts, so the pairs fill
    the gaps at the end.

    Returns
    -------
    maps : list of FittedMap
        ``m`` fitted maps, ``maps[i]: target -> refs[i]``.
    between : dict
        ``(i, j) -> (C_i, C_j)`` float64 class-conditional label distances, ``i < j``.
    """
    m = len(refs)
    otdd_cfg = config.otdd
    estimator = map_estimator(config.method, otdd_cfg, config.neural, cache)
    kind = map_method_label(config.method)
    pairs = [(i, j) for i in range(m) for j in range(i + 1, m)]
    progress_of_parts = _PartsProgress(m, len(pairs), _MAP_SHARE, report)

    def run_part(part: tuple[str, int]) -> Any:
        what, k = part
        if what == "map":
            stage = f"{kind} {k + 1}/{m}: {target.name} -> {names[k]}"
            progress_of_parts.map_stage(k, stage, None, 0.0)
            fitted = estimator.fit(
                target,
                refs[k],
                lambda sub, fraction: progress_of_parts.map_stage(k, stage, sub, fraction),
            )
            progress_of_parts.map_stage(k, stage, "done", 1.0)
            return fitted
        i, j = pairs[k]
        progress_of_parts.pair_started(f"label distances {names[i]} <-> {names[j]}")
        between_ij = _labels_between(refs[i], refs[j], otdd_cfg, cache)
        progress_of_parts.pair_done()
        return between_ij

    parts = [("map", k) for k in range(m)] + [("pair", k) for k in range(len(pairs))]
    workers_used = _part_workers(workers, len(parts), target.n_samples, refs, otdd_cfg)
    outputs = run_in_threads(run_part, parts, workers_used)
    maps: list[FittedMap[Any]] = outputs[:m]
    between: dict[tuple[int, int], torch.Tensor] = dict(zip(pairs, outputs[m:], strict=True))
    return maps, between


def _dataset_distances(
    target: LabeledDataset,
    refs: tuple[LabeledDataset, ...],
    maps: Sequence[FittedMap[Any]],
    between: dict[tuple[int, int], torch.Tensor],
    otdd_cfg: OTDDConfig,
) -> TwoQDistances:
    """The (2,Q) distances of Def. 2 between the maps' pushforwards and to ``Q``
    (:func:`~geoviz.geodesic.distances.two_q_distances`), with the maps' weights
    ``lambda_x``, ``lambda_y`` and label distances.

    The label distances ``(C_Q, C_i)`` to the target are the maps' own (same datasets,
    method and seed as :func:`_labels_between`), checked for shape.
    """
    to_target = [fitted.label_cost_.to(torch.float64) for fitted in maps]
    for lab, ref in zip(to_target, refs, strict=True):
        if tuple(lab.shape) != (target.n_classes, ref.n_classes):
            raise GeovizError(
                f"the map {target.name!r} -> {ref.name!r} has label distances of shape "
                f"{tuple(lab.shape)}, expected {(target.n_classes, ref.n_classes)}"
            )
    return two_q_distances(
        target.features,
        target.labels,
        [fitted.mapped_features_ for fitted in maps],
        [fitted.soft_labels_ for fitted in maps],
        to_target,
        between,
        lambda_x=float(otdd_cfg.lambda_x),
        lambda_y=float(otdd_cfg.lambda_y),
    )


def lift_through_plan(fitted: FittedMap[Any], reference_images: torch.Tensor) -> torch.Tensor:
    """The references' own images under a plan computed in a feature space.

    ``T_i(x_n) = sum_j w_nj X_j / sum_j w_nj`` over the plan's largest entries of row ``n``
    (:class:`~geoviz.maps.base.PlanNeighbours`, :data:`geoviz.ot.otdd.N_NEIGHBOURS` per row),
    with ``X_j`` the reference's images: the barycentric projection (paper eq. (bary_map))
    of the images instead of the features. At the sharp default epsilon a row has about
    two effective neighbours, so its largest entries hold nearly all its mass and the
    mapped image is a blend of a few real reference images.

    Returns
    -------
    torch.Tensor
        ``(N_Q, D_images)`` float32.

    Raises
    ------
    GeovizError
        The map has no plan (a neural map).
    """
    plan = fitted.plan_neighbours()
    if plan is None:
        raise GeovizError(
            "this map keeps no plan, so its images cannot come back from a feature space"
        )
    weight = plan.weight.clamp_min(0.0) * (plan.index >= 0)
    weight = weight / weight.sum(dim=1, keepdim=True).clamp_min(1e-30)
    index = plan.index.clamp_min(0)
    images = reference_images.to(torch.float32)
    out = torch.zeros(index.shape[0], images.shape[1], dtype=torch.float32)
    for j in range(index.shape[1]):
        out += weight[:, j : j + 1] * images[index[:, j]]
    return out


# --------------------------------------------------------------------------- the fit


def fit_geodesic(
    target: LabeledDataset,
    references: Sequence[LabeledDataset],
    config: GeodesicConfig | None = None,
    *,
    progress: Progress | None = None,
    cache: DiskCache | None = None,
    workers: int = 1,
    space_choice: SpaceChoice | None = None,
) -> GeodesicResult:
    """Project ``target`` onto the generalized geodesic of ``references`` (paper Sec. 3).

    The datasets are used as given (a :class:`~geoviz.geodesic.spec.GeodesicSpec` draws
    the subsamples when it loads them). With a feature space (``config.features`` other
    than ``"pixels"``; a model of one's own is a spec's ``features_model``, fitted by
    :func:`~geoviz.geodesic.spec.fit_spec`), the space is fitted on the union of the
    target and references, and
    every cost, coupling, map diagnostic, (2,Q) distance and ``a_hat`` lives in it (paper
    Sec. 5.3); ``P_a``'s images come back through the couplings
    (:func:`lift_through_plan`), so the result's datasets and mapped features stay images.

    Parameters
    ----------
    target
        ``Q`` (``N_Q`` samples, ``D`` features).
    references
        ``m >= 2`` datasets ``P_i`` with the same ``D`` (use
        :func:`geoviz.data.preprocess.harmonize` first for images of different sizes).
    config
        :class:`GeodesicConfig` (default settings when ``None``).
    progress
        Optional ``progress(stage, fraction)`` callback; ``fraction`` is the
        overall progress in ``[0, 1]`` and reaches 1.0 at the end.
    cache
        Where maps and label distances are cached; default :func:`get_cache`.
    workers
        Threads for the independent parts: the ``m`` maps and the ``m(m-1)/2`` label
        distances between references (:func:`geoviz.tasks.run_in_threads`; fewer when the
        memory budget cannot hold that many maps at once). ``1`` (default) runs them one
        after another. The values do not depend on it; each part still uses torch's own
        threads, so ``workers`` above ``cores / torch.get_num_threads()`` mostly pays off
        on a machine whose cores would otherwise idle in the single-threaded parts (the
        label distances' LAPACK calls, the solver's small steps).
    space_choice
        With ``config.features="auto"``, the choice already made for these datasets, used
        as it is: a few-shot target's, made on its labelled points
        (:func:`~geoviz.geodesic.spec.load_spec_datasets`), never again on its pseudo-labels.

    Returns
    -------
    GeodesicResult

    Raises
    ------
    DatasetError
        Fewer than 2 or more than :data:`geoviz.limits.MAX_REFERENCES` references
        (refused before anything is fitted), non-dataset inputs, different feature
        dimensions.
    GeovizError
        Invalid configuration (e.g. ``epsilon <= 0``).
    """
    return fit_in_space(
        target,
        references,
        config,
        None,
        progress=progress,
        cache=cache,
        workers=workers,
        space_choice=space_choice,
    )


def fit_in_space(
    target: LabeledDataset,
    references: Sequence[LabeledDataset],
    config: GeodesicConfig | None,
    space: FeatureSpace | None,
    *,
    progress: Progress | None = None,
    cache: DiskCache | None = None,
    workers: int = 1,
    space_choice: SpaceChoice | None = None,
) -> GeodesicResult:
    """:func:`fit_geodesic` in ``space``, a feature space in hand (a spec's
    ``features_model``, :func:`~geoviz.geodesic.spec.fit_spec`), or in the one
    ``config.features`` names when ``None``. Other parameters as :func:`fit_geodesic`'s.
    """
    config = GeodesicConfig() if config is None else config
    if not isinstance(config, GeodesicConfig):
        raise GeovizError(f"config must be a GeodesicConfig, got {type(config).__name__}")
    target, refs = _validate_inputs(target, references)
    cache = get_cache() if cache is None else cache
    report = _never_back(progress)
    images = (target, refs)
    choice: SpaceChoice | None = None
    if space is None:
        space, choice = space_of(config, cache, [target, *refs], choice=space_choice)
    fitted_space, target, refs = _into_feature_space(space, config, target, refs, report)
    labels_space = label_space(refs)

    # 1. one OTDD map T_i: Q -> P_i per reference (Sec. 3.1), and the label distances
    #    between references that the (2,Q) distances need
    maps, between = _fit_maps(
        target, refs, labels_space.dataset_names, config, cache, report, workers
    )
    # 2. the (2,Q) distances W_i, W_ij (Def. 2)
    report("(2,Q) distances and a_hat", _MAP_SHARE + (1 - _MAP_SHARE) * 0.9)
    dist = _dataset_distances(target, refs, maps, between, config.otdd)
    # 3. a_hat: the minimiser of W^2(P_a, Q) (ds_eq) on the simplex, a QP (hat_a)
    a_hat = optimal_weights(dist.w_to_target, dist.w_between, solver=config.qp_solver)
    lifted = None
    if fitted_space is not None:
        lifted = tuple(
            lift_through_plan(fitted, ref.features)
            for fitted, ref in zip(maps, images[1], strict=True)
        )
    result = GeodesicResult(
        target=images[0],
        references=images[1],
        config=config,
        maps=tuple(maps),
        distances=dist,
        a_hat=a_hat,
        label_space=labels_space,
        feature_space=fitted_space,
        mapped_images=lifted,
        space_choice=choice,
    )
    report("done", 1.0)
    return result
