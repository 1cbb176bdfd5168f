"""One transfer-learning task and one method run on it (paper Sec. 5.2, Table 1).

A :class:`TransferTask` is the few-shot setting of the paper's *NIST
experiments: a target domain with ``k`` labelled samples per class (the rest
pseudo-labelled by kNN, paper Fig. "Convex combination in dataset space"),
its test split, and ``m`` labelled pretraining datasets ``P_i``.
:func:`run_method` runs one row of Table 1 on it:

* ``"otdd"`` — "OTDD barycentric projection": pretrain on
  ``P_a = (sum_i a_i T_i)#Q`` (:meth:`GeodesicResult.interpolate
  <geoviz.geodesic.result.GeodesicResult.interpolate>`, default ``a = a_hat``),
  fine-tune on the ``k``-shot target, test;
* ``"otdd_neural"`` — "OTDD neural map": the same with a geodesic whose maps
  are neural OTDD maps (``GeodesicConfig(method="neural")``, paper eq. (max-min));
* ``"mixup"`` — "Mixup with weights a_hat": the same with random pairs
  (:func:`~geoviz.transfer.baselines.mixup_pretraining_set`);
* ``"fewshot"`` — "Train on few-shot dataset" (no pretraining);
* ``"1nn"`` — "1-NN on few-shot dataset".

The geodesic is fitted by the caller with
:func:`geoviz.geodesic.pipeline.fit_geodesic` on ``task.target_train`` (the
pseudo-labelled pool) and ``task.references``; it depends on the task's seed
(the choice of labelled samples), so fit one per task.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np

from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.data.preprocess import few_shot
from geoviz.data.pseudo_labels import PseudoLabelMethod
from geoviz.errors import DatasetError, GeovizError
from geoviz.geodesic.weights import check_weights
from geoviz.nn.training import (
    DeviceLike,
    ProgressCallback,
    TransferPreset,
    evaluate,
    finetune,
    get_preset,
    pretrain,
    train_from_scratch,
)
from geoviz.transfer.baselines import mixup_pretraining_set, one_nn_accuracy

if TYPE_CHECKING:
    from geoviz.geodesic.result import GeodesicResult

__all__ = ["METHODS", "Method", "MethodResult", "TransferTask", "make_task", "run_method"]

Method = Literal["otdd", "otdd_neural", "mixup", "fewshot", "1nn"]

#: Every :data:`Method`, in the row order of the paper's Table 1.
METHODS: tuple[Method, ...] = get_args(Method)

#: The map method of the geodesic that each OTDD column pretrains on.
_MAP_METHOD_OF: dict[Method, str] = {"otdd": "barycentric", "otdd_neural": "neural"}


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


@dataclass(frozen=True, eq=False)
class TransferTask:
    """A ``k``-shot transfer task (paper Sec. 5.2, "Setup").

    Attributes
    ----------
    target_train
        The target pool ``Q`` the OTDD maps are computed from: every training
        sample, ``k`` per class with their true label and the others with a
        kNN pseudo-label (:func:`geoviz.data.preprocess.few_shot`).
    target_fewshot
        The ``k`` labelled samples per class, with their true labels: the
        fine-tuning set, and the training set of the ``"fewshot"`` and ``"1nn"``
        baselines.
    target_test
        The target's test split (accuracy is measured here).
    references
        The ``m >= 1`` pretraining datasets ``P_i``, in the target's feature space.
    k
        Labelled samples per class.
    seed
        Seed of the choice of labelled samples.
    """

    target_train: LabeledDataset
    target_fewshot: LabeledDataset
    target_test: LabeledDataset
    references: tuple[LabeledDataset, ...]
    k: int
    seed: int

    def __post_init__(self) -> None:
        for name in ("target_train", "target_fewshot", "target_test"):
            value = getattr(self, name)
            if not isinstance(value, LabeledDataset):
                raise DatasetError(
                    f"TransferTask.{name} must be a LabeledDataset, got {type(value).__name__}"
                )
        refs = (
            (self.references,)
            if isinstance(self.references, LabeledDataset)
            else tuple(self.references)
        )
        if not refs:
            raise DatasetError("a transfer task needs at least one reference (pretraining) dataset")
        for i, ref in enumerate(refs):
            if not isinstance(ref, LabeledDataset):
                raise DatasetError(
                    f"reference {i} must be a LabeledDataset, got {type(ref).__name__}"
                )
        object.__setattr__(self, "references", refs)
        if not _is_int(self.k) or self.k < 1:
            raise DatasetError(
                f"k (labelled samples per class) must be a positive integer, got {self.k!r}"
            )
        if not _is_int(self.seed):
            raise GeovizError(f"seed must be an integer, got {self.seed!r}")
        object.__setattr__(self, "k", int(self.k))
        object.__setattr__(self, "seed", int(self.seed))
        train, shot, test = self.target_train, self.target_fewshot, self.target_test
        for other in (shot, test):
            if other.classes != train.classes:
                raise DatasetError(
                    f"{other.name!r} has classes {list(other.classes)} but the target pool has "
                    f"{list(train.classes)}: train and test splits must share one class list"
                )
        dims = {ds.name: ds.n_features for ds in (train, shot, test, *refs)}
        if len(set(dims.values())) != 1:
            detail = ", ".join(f"{name}: D={d}" for name, d in dims.items())
            raise DatasetError(
                f"target and references must share one feature space, got {detail}; bring them "
                "to one size with geoviz.data.preprocess.harmonize"
            )

    @property
    def m(self) -> int:
        """Number of references."""
        return len(self.references)

    def summary(self) -> dict[str, Any]:
        """Plain-Python description (names, sizes, k, seed)."""
        return {
            "target": self.target_train.name,
            "n_target_train": self.target_train.n_samples,
            "n_fewshot": self.target_fewshot.n_samples,
            "n_test": self.target_test.n_samples,
            "references": [ref.name for ref in self.references],
            "k": self.k,
            "seed": self.seed,
        }


def make_task(
    target_train: LabeledDataset,
    target_test: LabeledDataset,
    references: Sequence[LabeledDataset],
    k: int,
    *,
    seed: int,
    n_neighbors: int = 1,
    pseudo_labels: PseudoLabelMethod = "spread",
) -> TransferTask:
    """Build the ``k``-shot task of paper Sec. 5.2 from a target's two splits.

    ``k`` samples per class of ``target_train`` are chosen at random (seeded)
    to be labelled; the others get pseudo-labels
    (:func:`geoviz.data.preprocess.few_shot`: label spreading by default).

    Parameters
    ----------
    target_train
        The target's training split (true labels; only the ``k`` per class
        chosen ones are kept as labels).
    target_test
        The target's test split.
    references
        The pretraining datasets.
    k
        Labelled samples per class, ``1 <= k <=`` smallest class size.
    seed
        Seed of the choice of labelled samples.
    n_neighbors
        Neighbours of the pseudo-labelling kNN classifier.
    pseudo_labels
        ``"spread"`` (label spreading on the target's kNN graph) or ``"knn"``
        (:data:`geoviz.data.pseudo_labels.PseudoLabelMethod`).

    Returns
    -------
    TransferTask

    Raises
    ------
    DatasetError
        ``k`` out of range, bad ``n_neighbors``, mismatched classes or feature dimensions.
    """
    if not isinstance(target_train, LabeledDataset):
        raise DatasetError(
            f"the target training split must be a LabeledDataset, got {type(target_train).__name__}"
        )
    if not _is_int(seed):
        raise GeovizError(f"seed must be an integer, got {seed!r}")
    shot = few_shot(target_train, k, seed=int(seed), n_neighbors=n_neighbors, method=pseudo_labels)
    fewshot = target_train.subset(shot.labelled_indices, name=f"{target_train.name}[{k}-shot]")
    return TransferTask(
        target_train=shot.dataset,
        target_fewshot=fewshot,
        target_test=target_test,
        references=tuple(references),
        k=int(k),
        seed=int(seed),
    )


@dataclass(frozen=True)
class MethodResult:
    """Outcome of one :func:`run_method` call (one cell of the paper's Table 1).

    Attributes
    ----------
    method
        The :data:`Method`.
    seed
        Training seed.
    accuracy
        Test accuracy in ``[0, 1]``.
    weights
        The interpolation weights ``a`` of the pretraining set (``"otdd"``,
        ``"mixup"``), else ``None``.
    seconds
        Wall-clock time of the run (building the pretraining set, training,
        evaluation; not the geodesic fit).
    n_pretrain
        Samples of the pretraining set (0 for ``"fewshot"`` and ``"1nn"``).
    """

    method: Method
    seed: int
    accuracy: float
    weights: tuple[float, ...] | None
    seconds: float
    n_pretrain: int

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return {
            "method": self.method,
            "seed": self.seed,
            "accuracy": self.accuracy,
            "weights": None if self.weights is None else list(self.weights),
            "seconds": self.seconds,
            "n_pretrain": self.n_pretrain,
        }


def _resolve_weights(
    method: str, task: TransferTask, geodesic: GeodesicResult | None, weights: Any
) -> np.ndarray:
    if geodesic is not None and geodesic.m != task.m:
        raise GeovizError(
            f"the geodesic was fitted on {geodesic.m} references but the task has {task.m}"
        )
    if weights is None:
        if geodesic is None:
            raise GeovizError(
                f"method {method!r} needs weights or a fitted geodesic (whose a_hat is used)"
            )
        weights = geodesic.a_hat
    return check_weights(weights, task.m)


def run_method(
    task: TransferTask,
    method: Method,
    *,
    geodesic: GeodesicResult | None = None,
    weights: np.ndarray | None = None,
    preset: TransferPreset | str,
    seed: int,
    device: DeviceLike = None,
    progress: ProgressCallback | None = None,
) -> MethodResult:
    """Run one method of the paper's Table 1 on ``task`` and measure its test accuracy.

    Parameters
    ----------
    task
        The few-shot task (:func:`make_task`).
    method
        ``"otdd"``: pretrain on ``geodesic.interpolate(weights)`` (``P_a``),
        fine-tune on ``task.target_fewshot``, evaluate on ``task.target_test``.
        ``"otdd_neural"``: the same, ``geodesic`` fitted with neural maps.
        ``"mixup"``: the same with the Mixup set of the same weights
        (random pairs, :func:`~geoviz.transfer.baselines.mixup_pretraining_set`).
        ``"fewshot"``: train from scratch on ``task.target_fewshot`` for
        ``preset.finetune.iterations``. ``"1nn"``: 1-nearest-neighbour on
        ``task.target_fewshot`` (no training).
    geodesic
        The fit of :func:`~geoviz.geodesic.pipeline.fit_geodesic` on
        ``task.target_train`` and ``task.references``; required by ``"otdd"``,
        and by ``"mixup"`` when ``weights`` is ``None``.
    weights
        ``(m,)`` interpolation weights on the simplex; ``None``: ``geodesic.a_hat``.
    preset
        Training budgets, a :class:`~geoviz.nn.training.TransferPreset`
        or a name in :data:`~geoviz.nn.training.PRESETS`.
    seed
        Seed of the Mixup pairs, the initial weights and the batch order of
        pretraining and fine-tuning.
    device
        ``None``: :func:`geoviz.backend.get_device` (CUDA when present).
    progress
        Optional ``progress(stage, fraction)``; ``fraction`` is the overall
        progress of this run in ``[0, 1]``, non-decreasing, ending at 1.0.

    Returns
    -------
    MethodResult

    Raises
    ------
    GeovizError
        Unknown method or preset, a missing geodesic, a geodesic fitted on
        another number of references.
    WeightsError
        ``weights`` off the simplex or of the wrong length.
    DatasetError
        The geodesic's samples are not in the target's feature space.
    """
    if method not in METHODS:
        raise GeovizError(f"unknown transfer method {method!r}: choose one of {', '.join(METHODS)}")
    if not isinstance(task, TransferTask):
        raise GeovizError(f"run_method needs a TransferTask, got {type(task).__name__}")
    preset = get_preset(preset)
    if not _is_int(seed):
        raise GeovizError(f"seed must be an integer, got {seed!r}")
    seed = int(seed)

    def report(stage: str, fraction: float) -> None:
        if progress is not None:
            progress(stage, float(min(max(fraction, 0.0), 1.0)))

    start = time.perf_counter()
    if method == "1nn":
        accuracy = one_nn_accuracy(task.target_fewshot, task.target_test)
        report("1nn", 1.0)
        return MethodResult("1nn", seed, accuracy, None, time.perf_counter() - start, 0)

    if method == "fewshot":
        model = train_from_scratch(
            task.target_fewshot, preset.finetune, seed=seed, device=device, progress=report
        )
        accuracy = evaluate(model, task.target_test, device=device)
        report("train", 1.0)
        return MethodResult("fewshot", seed, accuracy, None, time.perf_counter() - start, 0)

    # "otdd" / "otdd_neural" / "mixup": build the pretraining set, pretrain, fine-tune, evaluate
    a, pretrain_set = _pretraining_set(task, method, geodesic, weights, seed)
    accuracy = _pretrain_finetune_evaluate(pretrain_set, task, preset, seed, device, report)
    return MethodResult(
        method,
        seed,
        accuracy,
        tuple(float(w) for w in a),
        time.perf_counter() - start,
        pretrain_set.n_samples,
    )


def _pretraining_set(
    task: TransferTask,
    method: Method,
    geodesic: GeodesicResult | None,
    weights: np.ndarray | None,
    seed: int,
) -> tuple[np.ndarray, SoftLabeledDataset]:
    """The weights ``a`` and the pretraining set of ``"otdd"``, ``"otdd_neural"`` (``P_a``
    of a geodesic fitted with the method's maps) or ``"mixup"``, in the target's features."""
    if method in ("otdd", "otdd_neural"):
        wanted = _MAP_METHOD_OF[method]
        if geodesic is None:
            raise GeovizError(
                f"method {method!r} needs the fitted geodesic, with {wanted} maps "
                f"(geoviz.geodesic.fit_geodesic with GeodesicConfig(method={wanted!r}))"
            )
        if geodesic.method != wanted:
            raise GeovizError(
                f"method {method!r} needs a geodesic fitted with {wanted} maps, got one fitted "
                f"with {geodesic.method} maps"
            )
    a = _resolve_weights(method, task, geodesic, weights)
    if method in ("otdd", "otdd_neural"):
        assert geodesic is not None
        pretrain_set = geodesic.interpolate(a, seed=seed)
    else:
        pretrain_set = mixup_pretraining_set(task.target_train, task.references, a, seed=seed)
    d = int(pretrain_set.features.shape[1])
    if d != task.target_fewshot.n_features:
        raise DatasetError(
            f"the {method} pretraining set has {d} features but the target has "
            f"{task.target_fewshot.n_features}; fit the geodesic on the task's harmonised data"
        )
    return a, pretrain_set


def _pretrain_finetune_evaluate(
    pretrain_set: SoftLabeledDataset,
    task: TransferTask,
    preset: TransferPreset,
    seed: int,
    device: DeviceLike,
    report: ProgressCallback,
) -> float:
    """Pretrain on ``pretrain_set``, fine-tune on the few-shot target, return the test
    accuracy; ``report`` gets the overall progress, split by the two stages' iterations."""
    share = preset.pretrain.iterations / (preset.pretrain.iterations + preset.finetune.iterations)
    model = pretrain(
        pretrain_set,
        preset.pretrain,
        seed=seed,
        device=device,
        progress=lambda stage, f: report(stage, share * f),
    )
    model = finetune(
        model,
        task.target_fewshot,
        preset.finetune,
        seed=seed,
        device=device,
        progress=lambda stage, f: report(stage, share + (1.0 - share) * f),
    )
    return evaluate(model, task.target_test, device=device)
