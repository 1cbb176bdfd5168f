"""The simplex study: ``W^2(P_a, Q)`` against fine-tuned accuracy over a weight grid.

Paper Sec. 5.1 and Figs. "ternary" / "corr": discretise the simplex
(``simplex_grid(m, R)``; the paper's 36 points for ``m = 3`` are ``R = 7``),
pre-train a classifier on every ``P_a``, fine-tune it on the few-shot target
``Q`` and correlate its test accuracy with the objective ``W^2(P_a, Q)`` of
eq. (ds_eq). The paper finds a negative correlation for most targets.

:func:`run_grid` runs one :func:`~geoviz.transfer.experiment.run_method` per
(grid point, seed), each one task of :func:`~geoviz.transfer.runner.run_tasks`
(Ray or sequential: the same results). With ``checkpoint_dir`` every finished
(point, seed) is written at once, atomically, as a small JSON file named by a
hash of everything its result depends on (the fingerprints of the task's
datasets and of the geodesic's inputs, the geodesic configuration, ``k``, the
preset, the method, the weights and the seed), so an interrupted or repeated
study recomputes only what is missing, and a point shared by two resolutions
is trained once. :func:`correlation_figure` draws the result.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from geoviz.atomic import atomic_write_bytes
from geoviz.backend import jsonable
from geoviz.errors import ExportError, GeovizError
from geoviz.geodesic.distances import simplex_grid
from geoviz.glossary import OBJECTIVE
from geoviz.transfer.experiment import run_method
from geoviz.transfer.runner import Backend, run_tasks

__all__ = [
    "CHECKPOINT_VERSION",
    "GridPoint",
    "GridStudy",
    "checkpoint_key",
    "correlation_figure",
    "correlations",
    "run_grid",
]

#: Bumped when the meaning of a checkpoint changes (old files are then ignored).
CHECKPOINT_VERSION = 1
#: Decimals of the weights in a checkpoint key (grid weights are ``k / R``).
_KEY_DECIMALS = 12


# --------------------------------------------------------------------------- results


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(float(x)) else None


def _float_or_nan(x: Any) -> float:
    return float("nan") if x is None else float(x)


@dataclass(frozen=True)
class GridPoint:
    """One weight vector ``a`` of the study.

    Attributes
    ----------
    index
        Row of ``simplex_grid(m, resolution)``.
    weights
        ``a`` (``m`` entries summing to 1).
    objective
        ``W^2(P_a, Q)`` (``geodesic.objective(a)``).
    accuracies
        Fine-tuned test accuracy in ``[0, 1]``, one per seed (``GridStudy.seeds`` order).
    seconds
        Total run time of those runs, as recorded when each ran (also for
        results loaded from checkpoints).
    """

    index: int
    weights: tuple[float, ...]
    objective: float
    accuracies: tuple[float, ...]
    seconds: float

    @property
    def mean_accuracy(self) -> float:
        """Mean of :attr:`accuracies`."""
        return float(np.mean(self.accuracies)) if self.accuracies else float("nan")

    @property
    def std_accuracy(self) -> float:
        """Sample standard deviation (``ddof=1``) of :attr:`accuracies`; 0 for one seed."""
        if len(self.accuracies) < 2:
            return 0.0
        return float(np.std(self.accuracies, ddof=1))


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

    def _names(self) -> list[str]:
        m = len(self.points[0].weights) if self.points else len(self.reference_names)
        if len(self.reference_names) == m:
            return list(self.reference_names)
        return [f"P{i + 1}" for i in range(m)]

    def to_frame(self):
        """A pandas DataFrame, one row per point.

        Columns: ``index``, ``a_<reference>`` (one per reference),
        ``objective``, ``accuracy_mean``, ``accuracy_std``,
        ``accuracy_seed<s>`` (one per seed) and ``seconds``.
        """
        import pandas as pd

        names = self._names()
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
        """Plain JSON-able content (``nan`` correlations become ``None``)."""
        return {
            "method": self.method,
            "preset": self.preset,
            "k": self.k,
            "seeds": list(self.seeds),
            "resolution": self.resolution,
            "reference_names": list(self.reference_names),
            "pearson": _finite_or_none(self.pearson),
            "spearman": _finite_or_none(self.spearman),
            "note": self.note,
            "n_computed": self.n_computed,
            "n_loaded": self.n_loaded,
            "points": [
                {
                    "index": p.index,
                    "weights": list(p.weights),
                    "objective": _finite_or_none(p.objective),
                    "accuracies": [_finite_or_none(a) for a in p.accuracies],
                    "accuracy_mean": _finite_or_none(p.mean_accuracy),
                    "accuracy_std": _finite_or_none(p.std_accuracy),
                    "seconds": p.seconds,
                }
                for p in self.points
            ],
        }

    def to_json(self, indent: int | None = 2) -> str:
        """:meth:`to_dict` as strict JSON text."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> GridStudy:
        """Inverse of :meth:`to_json`."""
        d = json.loads(text)
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
        )


def correlations(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, str]:
    """Pearson and Spearman correlation of ``x`` and ``y`` (``scipy.stats``).

    Pairs with a non-finite value are dropped. Returns ``(pearson, spearman,
    note)``: both ``nan`` with a note when fewer than 2 pairs remain or either
    side is constant (then a correlation is undefined); ``note`` is empty otherwise.
    """
    from scipy import stats

    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if x.shape != y.shape:
        raise GeovizError(f"correlations need equal lengths, got {x.size} and {y.size}")
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    nan = float("nan")
    if x.size < 2:
        return nan, nan, f"correlation undefined: {x.size} point(s) with finite values"
    constant = [name for name, v in ((OBJECTIVE, x), ("mean accuracy", y)) if np.ptp(v) == 0.0]
    if constant:
        return (
            nan,
            nan,
            "correlation undefined: all values of " + " and ".join(constant) + " are equal",
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # near-constant input warnings: the value is still defined
        pearson = float(stats.pearsonr(x, y)[0])
        spearman = float(stats.spearmanr(x, y)[0])
    return pearson, spearman, ""


# --------------------------------------------------------------------------- checkpoints


def _preset_spec(preset: Any) -> tuple[str, Any]:
    """``(name, JSON-able training budgets)`` of a preset given by name or object."""
    from geoviz.transfer.training import get_preset

    preset = get_preset(preset)
    spec = {
        "name": preset.name,
        "pretrain": dataclasses.asdict(preset.pretrain),
        "finetune": dataclasses.asdict(preset.finetune),
    }
    return str(preset.name), jsonable(spec)


def _scenario(task: Any, geodesic: Any, preset: Any, method: str) -> dict[str, Any]:
    """Everything a (point, seed) result depends on, except the weights and the seed."""
    _, preset_spec = _preset_spec(preset)
    return {
        "version": CHECKPOINT_VERSION,
        "method": str(method),
        "k": int(task.k),
        "task_seed": int(task.seed),
        "target_train": task.target_train.fingerprint,
        "target_fewshot": task.target_fewshot.fingerprint,
        "target_test": task.target_test.fingerprint,
        "references": [ref.fingerprint for ref in task.references],
        "geodesic_target": geodesic.target.fingerprint,
        "geodesic_references": [ref.fingerprint for ref in geodesic.references],
        "geodesic_config": jsonable(geodesic.config.to_dict()),
        "preset": preset_spec,
    }


def checkpoint_key(scenario: dict[str, Any], weights: Sequence[float], seed: int) -> str:
    """sha256 (hex) of a scenario (:func:`run_grid`'s), the weights and the seed."""
    payload = {
        **scenario,
        "weights": [round(float(w), _KEY_DECIMALS) + 0.0 for w in weights],
        "seed": int(seed),
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _checkpoint_path(directory: Path, method: str, seed: int, key: str) -> Path:
    return directory / f"{method}-seed{seed}-{key[:24]}.json"


def _load_checkpoint(path: Path, key: str) -> dict[str, Any] | None:
    """The stored run, or ``None`` when absent, unreadable or of another key."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    try:
        float(data["accuracy"]), float(data["seconds"])
    except (KeyError, TypeError, ValueError):
        return None
    return data


def _result_record(result: Any, key: str, weights: Sequence[float], seed: int) -> dict[str, Any]:
    n_pretrain = getattr(result, "n_pretrain", None)
    return {
        "key": key,
        "version": CHECKPOINT_VERSION,
        "method": str(result.method),
        "seed": int(seed),
        "weights": [float(w) for w in weights],
        "accuracy": float(result.accuracy),
        "seconds": float(result.seconds),
        "n_pretrain": None if n_pretrain is None else int(n_pretrain),
    }


# --------------------------------------------------------------------------- the study


def _run_point(
    task: Any, geodesic: Any, preset: Any, method: str, item: tuple[int, tuple[float, ...], int]
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
    preset: Any,
    checkpoint_dir: Path | str | None = None,
    backend: Backend = "auto",
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    method: str = "otdd",
) -> GridStudy:
    """Train ``method`` on ``P_a`` for every ``a`` of a simplex grid and every seed.

    Parameters
    ----------
    task
        The :class:`~geoviz.transfer.experiment.TransferTask` (target splits,
        references, ``k``).
    geodesic
        The fitted :class:`~geoviz.geodesic.pipeline.GeodesicResult` whose
        ``P_a`` are trained on; ``geodesic.objective`` gives ``W^2(P_a, Q)``.
    resolution
        Grid resolution ``R``: ``simplex_grid(geodesic.m, R)``, e.g. 7 for the
        paper's 36 points with 3 references.
    seeds
        Training seeds (at least one, distinct); accuracies are averaged over them.
    preset
        Training preset, a name of :data:`geoviz.transfer.training.PRESETS` or a
        :class:`~geoviz.transfer.training.TransferPreset`.
    checkpoint_dir
        Folder of the per-(point, seed) JSON checkpoints (created when
        needed); existing ones are loaded and not recomputed. ``None``: none.
    backend, address
        See :func:`geoviz.transfer.runner.run_tasks`; each (point, seed) is one task.
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
    if method not in ("otdd", "mixup"):
        raise GeovizError(
            f"the simplex study trains on P_a: method must be 'otdd' or 'mixup', got {method!r}"
        )
    seeds = tuple(int(s) for s in seeds)
    if not seeds:
        raise GeovizError("run_grid needs at least one seed")
    if len(set(seeds)) != len(seeds):
        raise GeovizError(f"seeds must be distinct, got {list(seeds)}")
    if geodesic.m != len(task.references):
        raise GeovizError(
            f"the geodesic has {geodesic.m} references but the task {len(task.references)}"
        )
    preset_name, _ = _preset_spec(preset)
    grid = simplex_grid(geodesic.m, resolution)
    values = np.asarray(geodesic.objective(grid), dtype=float).reshape(-1)
    scenario = _scenario(task, geodesic, preset, method)
    directory = None if checkpoint_dir is None else Path(checkpoint_dir)

    items: list[tuple[int, tuple[float, ...], int]] = [
        (i, tuple(float(w) for w in grid[i]), seed) for i in range(grid.shape[0]) for seed in seeds
    ]
    keys = [checkpoint_key(scenario, weights, seed) for _, weights, seed in items]
    records: list[dict[str, Any] | None] = [None] * len(items)
    if directory is not None:
        for j, (key, (_, _, seed)) in enumerate(zip(keys, items, strict=True)):
            records[j] = _load_checkpoint(_checkpoint_path(directory, method, seed, key), key)
    todo = [j for j, rec in enumerate(records) if rec is None]
    n_loaded = len(items) - len(todo)
    total = len(items)

    def save(position: int, result: Any) -> None:
        j = todo[position]
        _, weights, seed = items[j]
        record = _result_record(result, keys[j], weights, seed)
        records[j] = record
        if directory is None:
            return
        path = _checkpoint_path(directory, method, seed, keys[j])
        data = json.dumps(record, indent=1, allow_nan=True).encode("utf-8")
        try:
            atomic_write_bytes(path, data, overwrite=True)
        except OSError as err:
            raise ExportError(f"cannot write checkpoint {path}: {err}") from err

    report = None if progress is None else (lambda done, _t: progress(n_loaded + done, total))
    if todo:
        run_tasks(
            functools.partial(_run_point, task, geodesic, preset, method),
            [items[j] for j in todo],
            backend=backend,
            address=address,
            progress=report,
            on_result=save,
        )
    elif progress is not None:
        progress(total, total)

    points = []
    n_seeds = len(seeds)
    for i in range(grid.shape[0]):
        recs = [records[i * n_seeds + s] for s in range(n_seeds)]
        assert all(r is not None for r in recs)
        points.append(
            GridPoint(
                index=i,
                weights=tuple(float(w) for w in grid[i]),
                objective=float(values[i]),
                accuracies=tuple(float(r["accuracy"]) for r in recs),  # type: ignore[index]
                seconds=float(sum(float(r["seconds"]) for r in recs)),  # type: ignore[index]
            )
        )
    pearson, spearman, note = correlations(
        [p.objective for p in points], [p.mean_accuracy for p in points]
    )
    names = tuple(geodesic.reference_names) or tuple(ref.name for ref in geodesic.references)
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
        n_loaded=n_loaded,
    )


# --------------------------------------------------------------------------- figure


def correlation_figure(study: GridStudy, names: Sequence[str] | None = None):
    """Side-by-side plots of ``W^2(P_a, Q)`` (left) and mean accuracy (right).

    ``m = 3``: two ternary plots (vertex ``i`` is ``names[i]``), markers
    coloured by value, each with its colour bar (accuracy on the reversed
    scale, so the negative correlation the paper reports shows as two alike
    pictures: dark = small ``W^2`` / high accuracy). ``m = 2``: two line plots
    against the weight of ``names[1]`` (accuracy with ± std error bars).
    Other ``m``: one scatter plot of accuracy against ``W^2(P_a, Q)``. The
    title gives the Pearson ``r`` and Spearman ``rho``.

    Parameters
    ----------
    study
        A :class:`GridStudy`.
    names
        The ``m`` reference names; default ``study.reference_names``.

    Returns
    -------
    plotly.graph_objects.Figure
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if not study.points:
        raise GeovizError("the study has no points to draw")
    grid = study.weights
    m = grid.shape[1]
    names = [str(n) for n in (study._names() if names is None else names)]
    if len(names) != m:
        raise GeovizError(f"correlation_figure needs {m} reference names, got {len(names)}")
    values = study.objectives
    acc = study.mean_accuracies
    std = np.array([p.std_accuracy for p in study.points])
    r_text = "n/a" if not math.isfinite(study.pearson) else f"{study.pearson:.3f}"
    rho_text = "n/a" if not math.isfinite(study.spearman) else f"{study.spearman:.3f}"
    acc_label = f"mean accuracy ({len(study.seeds)} seed{'s' if len(study.seeds) != 1 else ''})"
    title = (
        f"{OBJECTIVE} vs fine-tuned accuracy ({study.method}, preset {study.preset}, "
        f"k={study.k}): Pearson r = {r_text}, Spearman ρ = {rho_text}"
    )
    if study.note:
        title += f"<br><sub>{study.note}</sub>"
    hover = "<br>".join(f"{n}: %{{customdata[{i}]:.3f}}" for i, n in enumerate(names))
    custom = np.column_stack([grid, values, acc, std])
    hover_values = (
        f"<br>{OBJECTIVE} = %{{customdata[{m}]:.4g}}"
        f"<br>accuracy = %{{customdata[{m + 1}]:.3f}} ± %{{customdata[{m + 2}]:.3f}}<extra></extra>"
    )

    if m == 3:
        fig = make_subplots(
            rows=1,
            cols=2,
            specs=[[{"type": "ternary"}, {"type": "ternary"}]],
            subplot_titles=(OBJECTIVE, f"{acc_label}, r = {r_text}"),
            horizontal_spacing=0.14,
        )
        for col, (vals, label, scale, bar_x) in enumerate(
            [(values, OBJECTIVE, "Viridis", 0.43), (acc, "accuracy", "Viridis_r", 1.0)], start=1
        ):
            fig.add_trace(
                go.Scatterternary(
                    a=grid[:, 0],
                    b=grid[:, 1],
                    c=grid[:, 2],
                    mode="markers",
                    showlegend=False,
                    name=label,
                    customdata=custom,
                    hovertemplate=hover + hover_values,
                    marker={
                        "color": vals,
                        "colorscale": scale,
                        "size": float(np.clip(200.0 / max(study.resolution, 1), 6.0, 30.0)),
                        "symbol": "hexagon",
                        "line": {"width": 0},
                        "colorbar": {
                            "title": {"text": label, "side": "right"},
                            "x": bar_x,
                            "len": 0.75,
                            "thickness": 14,
                        },
                    },
                ),
                row=1,
                col=col,
            )
        axis = {"min": 0, "tickformat": ".1f", "linecolor": "#444"}
        for key in ("ternary", "ternary2"):
            fig.layout[key].update(
                sum=1,
                aaxis={**axis, "title": {"text": f"<b>{names[0]}</b>"}},
                baxis={**axis, "title": {"text": f"<b>{names[1]}</b>"}},
                caxis={**axis, "title": {"text": f"<b>{names[2]}</b>"}},
                bgcolor="#f4f4f4",
            )
        # the subplot titles sit above the top vertex's axis title
        for annotation in fig.layout.annotations:
            annotation.update(y=1.13)
        fig.update_layout(title={"text": title}, height=600, margin={"t": 150, "l": 50, "r": 50})
        return fig

    if m == 2:
        x = grid[:, 1]
        order = np.argsort(x)
        fig = make_subplots(
            rows=1, cols=2, subplot_titles=(OBJECTIVE, f"{acc_label}, r = {r_text}")
        )
        fig.add_trace(
            go.Scatter(
                x=x[order],
                y=values[order],
                mode="lines+markers",
                name=OBJECTIVE,
                customdata=custom[order],
                hovertemplate=hover + hover_values,
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=x[order],
                y=acc[order],
                mode="lines+markers",
                name="accuracy",
                error_y={"type": "data", "array": std[order], "visible": True},
                customdata=custom[order],
                hovertemplate=hover + hover_values,
            ),
            row=1,
            col=2,
        )
        x_title = f"weight of {names[1]} (0 = {names[0]}, 1 = {names[1]})"
        fig.update_xaxes(title_text=x_title, range=[-0.03, 1.03])
        fig.update_yaxes(title_text=OBJECTIVE, row=1, col=1)
        fig.update_yaxes(title_text="accuracy", row=1, col=2)
        fig.update_layout(title={"text": title}, height=460, showlegend=False)
        return fig

    fig = go.Figure(
        go.Scatter(
            x=values,
            y=acc,
            mode="markers",
            error_y={"type": "data", "array": std, "visible": True},
            customdata=custom,
            hovertemplate=hover + hover_values,
        )
    )
    fig.update_layout(
        title={"text": title}, xaxis_title=OBJECTIVE, yaxis_title=acc_label, height=460
    )
    return fig
