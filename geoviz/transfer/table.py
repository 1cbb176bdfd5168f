"""Table 1 of the paper for one task: every transfer method, every seed.

Paper Sec. 5 (transfer learning on *NIST, Table 1): pretrain on ``P_a`` built
with the OTDD maps at ``a = a_hat`` and fine-tune on the ``k``-shot target,
against Mixup with the same weights, training on the few-shot set alone and
1-NN on the few-shot set. Each ``(method, seed)`` pair is one independent,
deterministic run (:func:`geoviz.transfer.experiment.run_method`), executed
with :func:`geoviz.tasks.run_tasks` (Ray tasks or sequentially, the
same numbers either way).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from geoviz.errors import GeovizError
from geoviz.geodesic.weights import check_weights
from geoviz.tasks import Backend, run_tasks
from geoviz.transfer.experiment import Method, MethodResult, TransferTask, run_method

if TYPE_CHECKING:
    import pandas as pd

    from geoviz.geodesic.result import GeodesicResult
    from geoviz.nn.training import TransferPreset

__all__ = ["ALL_METHODS", "METHODS", "METHOD_TITLES", "MethodComparison", "compare_methods"]

#: the paper's Table 1 columns that need no neural map, in its order (the
#: default of :func:`compare_methods`; add ``"otdd_neural"`` with a neural geodesic)
METHODS: tuple[Method, ...] = ("otdd", "mixup", "fewshot", "1nn")

#: every column of the paper's Table 1, in its order
ALL_METHODS: tuple[Method, ...] = ("otdd", "otdd_neural", "mixup", "fewshot", "1nn")

#: how each method is named in tables and figures
METHOD_TITLES: dict[str, str] = {
    "otdd": "OTDD barycentric, pretrain on P_a",
    "otdd_neural": "OTDD neural map, pretrain on P_a",
    "mixup": "Mixup with the same a",
    "fewshot": "train on the few-shot set",
    "1nn": "1-NN on the few-shot set",
}


@dataclass(frozen=True)
class MethodComparison:
    """Accuracy of every method and seed on one task.

    Attributes
    ----------
    results
        One :class:`~geoviz.transfer.experiment.MethodResult` per
        ``(method, seed)``, methods in the order asked for, seeds inner.
    weights
        The weights ``a`` of ``P_a`` (and of Mixup), e.g. ``a_hat``; ``()``
        when there was neither a geodesic nor ``weights`` (only ``"fewshot"``
        and ``"1nn"`` ran, which use none). ``"otdd_neural"`` runs use the
        neural geodesic's own ``a_hat`` (in their :class:`MethodResult`).
    preset
        Name of the training preset.
    k
        Labelled target samples per class.
    """

    results: tuple[MethodResult, ...]
    weights: tuple[float, ...]
    preset: str
    k: int

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.method for r in self.results))

    def accuracies(self, method: str) -> np.ndarray:
        """``(n_seeds,)`` test accuracies of ``method`` in ``[0, 1]``."""
        return np.asarray([r.accuracy for r in self.results if r.method == method], dtype=float)

    def summary(self) -> list[dict[str, Any]]:
        """One row per method: ``method``, ``title``, ``mean``, ``std`` (sample standard
        deviation over seeds, ddof 1; 0 for one seed), ``n_seeds``, ``accuracies`` (in %)."""
        rows = []
        for method in self.methods:
            acc = 100.0 * self.accuracies(method)
            rows.append(
                {
                    "method": method,
                    "title": METHOD_TITLES.get(method, method),
                    "mean": float(acc.mean()),
                    "std": float(acc.std(ddof=1)) if acc.size > 1 else 0.0,
                    "n_seeds": int(acc.size),
                    "accuracies": [float(a) for a in acc],
                }
            )
        return rows

    def to_frame(self) -> pd.DataFrame:
        """The summary as a ``pandas.DataFrame`` (accuracies in %, unrounded)."""
        import pandas as pd

        return pd.DataFrame(self.summary())

    def display_frame(self) -> pd.DataFrame:
        """The summary as a table shows it: one row per method, its title, the mean and std
        over the seeds and each seed's accuracy, all in % **rounded to one decimal at
        display** (``100 * 0.398`` is ``39.800000000000004`` in floating point, and was
        printed so; the numbers of :meth:`summary` are kept exact).

        >>> from geoviz.transfer.experiment import MethodResult
        >>> comp = MethodComparison(
        ...     results=tuple(MethodResult("fewshot", s, a, None, 1.0, 0)
        ...                   for s, a in ((0, 0.398), (1, 0.4))),
        ...     weights=(), preset="tiny", k=5)
        >>> comp.display_frame().iloc[0].to_dict()  # doctest: +NORMALIZE_WHITESPACE
        {'method': 'train on the few-shot set', 'mean accuracy (%)': 39.9, 'std (pp)': 0.1,
         'seeds': 2, 'accuracy per seed (%)': '39.8, 40.0'}
        """
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "method": row["title"],
                    "mean accuracy (%)": round(row["mean"], 1),
                    "std (pp)": round(row["std"], 1),
                    "seeds": row["n_seeds"],
                    "accuracy per seed (%)": ", ".join(f"{a:.1f}" for a in row["accuracies"]),
                }
                for row in self.summary()
            ]
        )


def _one(
    item: tuple[Method, int],
    *,
    task: TransferTask,
    geodesic: GeodesicResult | None,
    weights: np.ndarray | None,
    preset: TransferPreset | str,
    neural_geodesic: GeodesicResult | None = None,
    neural_weights: np.ndarray | None = None,
) -> MethodResult:
    method, seed = item
    if method == "otdd_neural":
        return run_method(
            task,
            method,
            geodesic=neural_geodesic,
            weights=neural_weights,
            preset=preset,
            seed=int(seed),
        )
    needs_maps = method in ("otdd", "mixup")
    return run_method(
        task,
        method,
        geodesic=geodesic if needs_maps else None,
        weights=weights if needs_maps else None,
        preset=preset,
        seed=int(seed),
    )


def compare_methods(
    task: TransferTask,
    geodesic: GeodesicResult | None,
    *,
    seeds: Sequence[int],
    preset: TransferPreset | str,
    methods: Sequence[Method] = METHODS,
    weights: np.ndarray | None = None,
    backend: Backend = "auto",
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    neural_geodesic: GeodesicResult | None = None,
) -> MethodComparison:
    """Run every ``method`` for every seed on ``task`` (paper Table 1, one row).

    Parameters
    ----------
    task
        Target splits, few-shot set and references
        (:func:`~geoviz.transfer.experiment.make_task`).
    geodesic
        The generalized geodesic fitted on ``task.target_train`` (its maps
        build ``P_a``; its ``a_hat`` is the default ``weights``). ``None`` is
        enough for ``"fewshot"`` and ``"1nn"``, and for ``"mixup"`` with
        ``weights``; ``"otdd"`` needs it.
    seeds
        Training seeds; each ``(method, seed)`` is one run.
    preset
        A :data:`~geoviz.nn.training.PRESETS` name or preset.
    methods
        Any of ``"otdd"``, ``"otdd_neural"``, ``"mixup"``, ``"fewshot"``, ``"1nn"``.
    weights
        ``(m,)`` weights on the simplex; ``None`` = ``geodesic.a_hat``
        (required for ``"mixup"`` without a geodesic).
    backend, address
        :func:`~geoviz.tasks.run_tasks` options (Ray or sequential).
    progress
        ``progress(done, total)`` after each finished run.
    neural_geodesic
        The same geodesic fitted with neural maps (``GeodesicConfig(method="neural")``),
        needed by ``"otdd_neural"``; that method pretrains on its ``P_a`` at
        ``weights`` when given, else at its own ``a_hat``.

    Raises
    ------
    GeovizError
        No seeds or methods, an unknown method, ``"otdd"`` without a
        geodesic, or ``"mixup"`` with neither a geodesic nor ``weights``.
    """
    seeds = [int(s) for s in seeds]
    methods = list(methods)
    if not seeds or not methods:
        raise GeovizError("compare_methods needs at least one seed and one method")
    unknown = [m for m in methods if m not in ALL_METHODS]
    if unknown:
        raise GeovizError(f"unknown transfer method(s) {unknown}; choose from {list(ALL_METHODS)}")
    if "otdd_neural" in methods and neural_geodesic is None:
        raise GeovizError(
            "method 'otdd_neural' needs the geodesic fitted with neural maps "
            "(fit_geodesic with GeodesicConfig(method='neural')): pass neural_geodesic="
        )
    if geodesic is None:
        if "otdd" in methods:
            raise GeovizError(
                "method 'otdd' needs the fitted geodesic (geoviz.geodesic.fit_geodesic): "
                "its maps build P_a"
            )
        if weights is None and "mixup" in methods:
            raise GeovizError(
                "method 'mixup' needs weights or a fitted geodesic (whose a_hat is used)"
            )
    if weights is not None:
        # checked here, before any task (or Ray) starts: each task would refuse them alone
        a = check_weights(weights, task.m)
    else:
        a = np.asarray([] if geodesic is None else geodesic.a_hat, dtype=float)
    neural_a = None
    if neural_geodesic is not None:
        neural_a = (
            np.asarray(weights, dtype=float) if weights is not None else neural_geodesic.a_hat
        )
    fn = functools.partial(
        _one,
        task=task,
        geodesic=geodesic,
        weights=a,
        preset=preset,
        neural_geodesic=neural_geodesic,
        neural_weights=neural_a,
    )
    items = [(m, s) for m in methods for s in seeds]
    results = run_tasks(fn, items, backend=backend, address=address, progress=progress)
    name = preset if isinstance(preset, str) else preset.name
    return MethodComparison(
        results=tuple(results), weights=tuple(float(x) for x in a), preset=name, k=int(task.k)
    )
