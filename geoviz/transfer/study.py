"""The simplex study: ``W^2(P_a, Q)`` against fine-tuned accuracy over a weight grid.

Paper Sec. 5.1, Figs. "ternary" / "corr" and appendix Table "w_stat":
discretise the simplex (``simplex_grid(m, R)``; the paper's 36 points for
``m = 3`` are ``R = 7``), pre-train a classifier on every ``P_a``, fine-tune it
on the few-shot target ``Q`` and correlate its test accuracy with the objective
``W^2(P_a, Q)`` of eq. (ds_eq). The paper finds a negative correlation for most
targets.

:func:`run_grid` runs one :func:`~geoviz.transfer.experiment.run_method` per
(grid point, seed), each one task of :func:`~geoviz.tasks.run_tasks`
(Ray or sequential: the same results); with ``checkpoint_dir`` every finished
run is stored at once (:mod:`geoviz.transfer.checkpoints`). The result, a
:class:`GridStudy`, carries its :class:`StudyStatistics` (:func:`study_statistics`):
Pearson and Spearman ``r`` with their p-values and a bootstrap interval over the
seeds, and the paper's table of ``W^2(P_a, Q)`` beside the accuracy gain (those
statistics live in :mod:`geoviz.transfer.study_stats`). The
figure is :func:`geoviz.viz.study_figure.correlation_figure`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from geoviz.errors import GeovizError
from geoviz.geodesic.distances import simplex_grid
from geoviz.nn.training import TransferPreset
from geoviz.tasks import Backend, run_tasks
from geoviz.transfer.checkpoints import (
    CheckpointStore,
    checkpoint_key,
    preset_spec,
    result_record,
    study_scenario,
)
from geoviz.transfer.experiment import run_method

# the statistics live in their own module; their names stay importable from here
from geoviz.transfer.study_stats import (
    GridPoint,
    StudyStatistics,
    correlations,
    finite_or_none,
    study_statistics,
)

__all__ = [
    "GridStudy",
    "run_grid",
]


# --------------------------------------------------------------------------- results


def _float_or_nan(x: Any) -> float:
    return float("nan") if x is None else float(x)


@dataclass(frozen=True)
class GridStudy:
    """Result of :func:`run_grid`.

    Attributes
    ----------
    points
        One :class:`GridPoint` per grid row, in ``simplex_grid`` order.
    pearson, spearman
        Correlation between ``objective`` and ``mean_accuracy`` over the
        points; ``nan`` when undefined (then :attr:`note` says why).
    preset
        Name of the training preset.
    k
        Few-shot samples per class of the target.
    seeds
        The training seeds.
    resolution
        Grid resolution ``R`` (weights are multiples of ``1/R``).
    method
        The transfer method trained on every ``P_a`` (``"otdd"`` by default).
    reference_names
        The ``m`` reference names (vertex ``i`` is ``reference_names[i]``).
    note
        Why a correlation is ``nan``; empty otherwise.
    n_computed, n_loaded
        Runs trained by this call, and runs read from checkpoints.
    a_hat
        The geodesic's ``a_hat`` (eq. (hat_a)) when known, for
        :attr:`StudyStatistics.accuracy_at_a_hat`.
    """

    points: tuple[GridPoint, ...]
    pearson: float
    spearman: float
    preset: str
    k: int
    seeds: tuple[int, ...]
    resolution: int
    method: str = "otdd"
    reference_names: tuple[str, ...] = ()
    note: str = ""
    n_computed: int = 0
    n_loaded: int = 0
    a_hat: tuple[float, ...] | None = None

    @functools.cached_property
    def statistics(self) -> StudyStatistics:
        """The :class:`StudyStatistics` of the points (computed once, from the points)."""
        return study_statistics(self.points, self.a_hat)

    @property
    def weights(self) -> np.ndarray:
        """``(K, m)`` grid weights."""
        return np.array([p.weights for p in self.points], dtype=float)

    @property
    def objectives(self) -> np.ndarray:
        """``(K,)`` ``W^2(P_a, Q)``."""
        return np.array([p.objective for p in self.points], dtype=float)

    @property
    def mean_accuracies(self) -> np.ndarray:
        """``(K,)`` mean accuracy over the seeds."""
        return np.array([p.mean_accuracy for p in self.points], dtype=float)

    def vertex_names(self) -> list[str]:
        """The name of every simplex vertex: :attr:`reference_names`, else ``P1 .. Pm``."""
        m = len(self.points[0].weights) if self.points else len(self.reference_names)
        if len(self.reference_names) == m:
            return list(self.reference_names)
        return [f"P{i + 1}" for i in range(m)]

    def to_frame(self) -> Any:
        """A pandas DataFrame, one row per point.

        Columns: ``index``, ``a_<reference>`` (one per reference),
        ``objective``, ``accuracy_mean``, ``accuracy_std``,
        ``accuracy_seed<s>`` (one per seed) and ``seconds``.
        """
        import pandas as pd

        names = self.vertex_names()
        rows = []
        for p in self.points:
            row: dict[str, Any] = {"index": p.index}
            row.update({f"a_{n}": w for n, w in zip(names, p.weights, strict=True)})
            row["objective"] = p.objective
            row["accuracy_mean"] = p.mean_accuracy
            row["accuracy_std"] = p.std_accuracy
            row.update(
                {f"accuracy_seed{s}": a for s, a in zip(self.seeds, p.accuracies, strict=True)}
            )
            row["seconds"] = p.seconds
            rows.append(row)
        columns = [
            "index",
            *(f"a_{n}" for n in names),
            "objective",
            "accuracy_mean",
            "accuracy_std",
            *(f"accuracy_seed{s}" for s in self.seeds),
            "seconds",
        ]
        return pd.DataFrame(rows, columns=columns)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able content (``nan`` correlations become ``None``), with the
        :attr:`statistics` under ``"statistics"`` (recomputed from the points on load)."""
        return {
            "method": self.method,
            "preset": self.preset,
            "k": self.k,
            "seeds": list(self.seeds),
            "resolution": self.resolution,
            "reference_names": list(self.reference_names),
            "pearson": finite_or_none(self.pearson),
            "spearman": finite_or_none(self.spearman),
            "note": self.note,
            "n_computed": self.n_computed,
            "n_loaded": self.n_loaded,
            "points": [
                {
                    "index": p.index,
                    "weights": list(p.weights),
                    "objective": finite_or_none(p.objective),
                    "accuracies": [finite_or_none(a) for a in p.accuracies],
                    "accuracy_mean": finite_or_none(p.mean_accuracy),
                    "accuracy_std": finite_or_none(p.std_accuracy),
                    "seconds": p.seconds,
                }
                for p in self.points
            ],
            "a_hat": None if self.a_hat is None else list(self.a_hat),
            "statistics": self.statistics.to_dict(),
        }

    def to_json(self, indent: int | None = 2) -> str:
        """:meth:`to_dict` as strict JSON text."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> GridStudy:
        """Inverse of :meth:`to_json`; also reads files written before ``a_hat`` and
        ``statistics`` were stored (the statistics always come from the points)."""
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GridStudy:
        """Inverse of :meth:`to_dict`."""
        a_hat = d.get("a_hat")
        points = tuple(
            GridPoint(
                index=int(p["index"]),
                weights=tuple(float(w) for w in p["weights"]),
                objective=_float_or_nan(p["objective"]),
                accuracies=tuple(_float_or_nan(a) for a in p["accuracies"]),
                seconds=float(p["seconds"]),
            )
            for p in d["points"]
        )
        return cls(
            points=points,
            pearson=_float_or_nan(d["pearson"]),
            spearman=_float_or_nan(d["spearman"]),
            preset=str(d["preset"]),
            k=int(d["k"]),
            seeds=tuple(int(s) for s in d["seeds"]),
            resolution=int(d["resolution"]),
            method=str(d.get("method", "otdd")),
            reference_names=tuple(d.get("reference_names", ())),
            note=str(d.get("note", "")),
            n_computed=int(d.get("n_computed", 0)),
            n_loaded=int(d.get("n_loaded", 0)),
            a_hat=None if a_hat is None else tuple(float(a) for a in a_hat),
        )


# --------------------------------------------------------------------------- the study

#: One run of the study: (grid row, weights ``a``, seed).
_Cell = tuple[int, tuple[float, ...], int]


def _run_point(
    task: Any,
    geodesic: Any,
    preset: TransferPreset | str,
    method: Literal["otdd", "mixup"],
    item: _Cell,
) -> Any:
    """One (point, seed) run: the body of every task of :func:`run_grid`."""
    _, weights, seed = item
    return run_method(
        task,
        method,
        geodesic=geodesic,
        weights=np.asarray(weights, dtype=float),
        preset=preset,
        seed=seed,
    )


def run_grid(
    task: Any,
    geodesic: Any,
    *,
    resolution: int,
    seeds: Sequence[int],
    preset: TransferPreset | str,
    checkpoint_dir: Path | str | None = None,
    backend: Backend = "auto",
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    method: Literal["otdd", "mixup"] = "otdd",
) -> GridStudy:
    """Train ``method`` on ``P_a`` for every ``a`` of a simplex grid and every seed.

    Parameters
    ----------
    task
        The :class:`~geoviz.transfer.experiment.TransferTask` (target splits,
        references, ``k``).
    geodesic
        The fitted :class:`~geoviz.geodesic.result.GeodesicResult` whose
        ``P_a`` are trained on; ``geodesic.objective`` gives ``W^2(P_a, Q)``.
    resolution
        Grid resolution ``R``: ``simplex_grid(geodesic.m, R)``, e.g. 7 for the
        paper's 36 points with 3 references.
    seeds
        Training seeds (at least one, distinct); accuracies are averaged over them.
    preset
        Training preset, a name of :data:`geoviz.nn.training.PRESETS` or a
        :class:`~geoviz.nn.training.TransferPreset`.
    checkpoint_dir
        Folder of the per-(point, seed) JSON checkpoints
        (:class:`~geoviz.transfer.checkpoints.CheckpointStore`, created when
        needed); existing ones are loaded and not recomputed. ``None``: none.
    backend, address
        See :func:`geoviz.tasks.run_tasks`; each (point, seed) is one task.
    progress
        ``progress(done, total)`` over all ``K x len(seeds)`` runs (loaded
        checkpoints count as done from the start).
    method
        ``"otdd"`` (pretrain on ``P_a``) or ``"mixup"`` (the Mixup set of the
        same weights), see :func:`~geoviz.transfer.experiment.run_method`.

    Returns
    -------
    GridStudy

    Raises
    ------
    GeovizError
        Bad ``resolution``, ``seeds``, preset or method (only ``"otdd"`` and
        ``"mixup"`` depend on the weights); ``ExportError`` when a
        checkpoint cannot be written. Errors of the runs propagate.
    """
    seeds = _check_grid_request(task, geodesic, seeds, method)
    preset_name, _ = preset_spec(preset)
    grid = simplex_grid(geodesic.m, resolution)
    values = np.asarray(geodesic.objective(grid), dtype=float).reshape(-1)
    scenario = study_scenario(task, geodesic, preset, method)
    store = None if checkpoint_dir is None else CheckpointStore(Path(checkpoint_dir), method)

    # the cells: one run per (grid point, seed), point-major; finished ones come from the store
    items: list[_Cell] = [
        (i, tuple(float(w) for w in grid[i]), seed) for i in range(grid.shape[0]) for seed in seeds
    ]
    keys = [checkpoint_key(scenario, weights, seed) for _, weights, seed in items]
    records: list[dict[str, Any] | None] = [None] * len(items)
    if store is not None:
        for j, (key, (_, _, seed)) in enumerate(zip(keys, items, strict=True)):
            records[j] = store.load(seed, key)
    todo = [j for j, rec in enumerate(records) if rec is None]
    _run_cells(
        functools.partial(_run_point, task, geodesic, preset, method),
        items,
        keys,
        records,
        todo,
        store,
        backend=backend,
        address=address,
        progress=progress,
    )

    points = _grid_points(grid, values, records, len(seeds))
    pearson, spearman, note = correlations(
        [p.objective for p in points], [p.mean_accuracy for p in points]
    )
    names = tuple(geodesic.reference_names) or tuple(ref.name for ref in geodesic.references)
    a_hat = getattr(geodesic, "a_hat", None)
    return GridStudy(
        points=tuple(points),
        pearson=pearson,
        spearman=spearman,
        preset=preset_name,
        k=int(task.k),
        seeds=seeds,
        resolution=int(resolution),
        method=str(method),
        reference_names=names,
        note=note,
        n_computed=len(todo),
        n_loaded=len(items) - len(todo),
        a_hat=None if a_hat is None else tuple(float(a) for a in np.asarray(a_hat).reshape(-1)),
    )


def _check_grid_request(
    task: Any, geodesic: Any, seeds: Sequence[int], method: str
) -> tuple[int, ...]:
    """The seeds as distinct ints, after checking the method and the number of references."""
    if method not in ("otdd", "mixup"):
        raise GeovizError(
            f"the simplex study trains on P_a: method must be 'otdd' or 'mixup', got {method!r}"
        )
    checked = tuple(int(s) for s in seeds)
    if not checked:
        raise GeovizError("run_grid needs at least one seed")
    if len(set(checked)) != len(checked):
        raise GeovizError(f"seeds must be distinct, got {list(checked)}")
    if geodesic.m != len(task.references):
        raise GeovizError(
            f"the geodesic has {geodesic.m} references but the task {len(task.references)}"
        )
    return checked


def _run_cells(
    run: Callable[[_Cell], Any],
    items: Sequence[_Cell],
    keys: Sequence[str],
    records: list[dict[str, Any] | None],
    todo: Sequence[int],
    store: CheckpointStore | None,
    *,
    backend: Backend,
    address: str | None,
    progress: Callable[[int, int], None] | None,
) -> None:
    """Run the cells ``items[j]`` for ``j`` in ``todo`` (one task each, :func:`run_tasks`),
    filling ``records[j]`` and storing each record as soon as its run is done.

    ``progress(done, total)`` counts the loaded cells as done from the start.
    """
    n_loaded = len(items) - len(todo)
    total = len(items)

    def save(position: int, result: Any) -> None:
        j = todo[position]
        _, weights, seed = items[j]
        record = result_record(result, keys[j], weights, seed)
        records[j] = record
        if store is not None:
            store.save(record)

    report = None if progress is None else (lambda done, _t: progress(n_loaded + done, total))
    if todo:
        run_tasks(
            run,
            [items[j] for j in todo],
            backend=backend,
            address=address,
            progress=report,
            on_result=save,
        )
    elif progress is not None:
        progress(total, total)


def _grid_points(
    grid: np.ndarray,
    values: np.ndarray,
    records: Sequence[dict[str, Any] | None],
    n_seeds: int,
) -> list[GridPoint]:
    """One :class:`GridPoint` per grid row from its ``n_seeds`` records (point-major order)."""
    points = []
    for i in range(grid.shape[0]):
        recs = [rec for rec in records[i * n_seeds : (i + 1) * n_seeds] if rec is not None]
        assert len(recs) == n_seeds  # every run was loaded or computed
        points.append(
            GridPoint(
                index=i,
                weights=tuple(float(w) for w in grid[i]),
                objective=float(values[i]),
                accuracies=tuple(float(r["accuracy"]) for r in recs),
                seconds=float(sum(float(r["seconds"]) for r in recs)),
            )
        )
    return points
