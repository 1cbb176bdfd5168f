"""geoviz.transfer.study (+ checkpoints, viz.study): the simplex study (W²(P_a, Q) vs accuracy), on tiny data."""

from __future__ import annotations

import dataclasses
import json
import math
import warnings

import numpy as np
import pytest
import torch
from scipy import stats

import geoviz.transfer.study as grid_module
from geoviz.backend import DiskCache
from geoviz.data.preprocess import harmonize
from geoviz.data.registry import load_dataset
from geoviz.errors import GeovizError
from geoviz.geodesic.config import GeodesicConfig
from geoviz.geodesic.distances import simplex_grid
from geoviz.geodesic.pipeline import fit_geodesic
from geoviz.nn.training import PRESETS
from geoviz.transfer.experiment import MethodResult, make_task
from geoviz.transfer.study import GridPoint, GridStudy, run_grid
from geoviz.transfer.study_stats import correlations
from geoviz.viz.study_figure import correlation_figure

RESOLUTION = 2
N_POINTS = (RESOLUTION + 1) * (RESOLUTION + 2) // 2
#: The "tiny" budgets (30 + 20 iterations) with a 10x learning rate: still instant, but the
#: accuracies differ between grid points, so equality checks and correlations mean something.
PRESET = dataclasses.replace(
    PRESETS["tiny"],
    name="tiny-lr",
    pretrain=dataclasses.replace(PRESETS["tiny"].pretrain, lr=1e-2),
    finetune=dataclasses.replace(PRESETS["tiny"].finetune, lr=1e-2),
)


@pytest.fixture(scope="module")
def scenario():
    """mnist (n=40) target, three bundled references (n=40), 16x16, k=2; geodesic fitted once.

    The fit runs on one torch thread: with two threads on a busy 2-core machine its
    sparse Sinkhorn stage was seen to take 30 s instead of 1.5 s (thread contention).
    """
    names = ["mnist", "fashion_mnist", "usps", "kmnist"]
    train = [load_dataset(name, n=40, seed=0) for name in names]
    test = load_dataset("mnist", split="test", n=40, seed=0)
    datasets = harmonize([*train, test], size=16)
    task = make_task(datasets[0], datasets[-1], datasets[1:-1], 2, seed=0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        geodesic = fit_geodesic(
            task.target_train,
            list(task.references),
            GeodesicConfig(),
            cache=DiskCache(enabled=False),
        )
    finally:
        torch.set_num_threads(threads)
    return task, geodesic


@pytest.fixture(scope="module")
def sequential_study(scenario, tmp_path_factory):
    task, geodesic = scenario
    ckpt = tmp_path_factory.mktemp("grid") / "checkpoints"
    study = run_grid(
        task,
        geodesic,
        resolution=RESOLUTION,
        seeds=[0],
        preset=PRESET,
        checkpoint_dir=ckpt,
        backend="sequential",
    )
    return study, ckpt


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():  # pragma: no cover - left over by another module
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _fake_run_method(task, method, *, geodesic, weights, preset, seed, device=None, progress=None):
    """Instant stand-in for run_method: accuracy falls linearly with W²(P_a, Q)."""
    value = float(geodesic.objective(np.asarray(weights, dtype=float)))
    accuracy = 0.9 - 0.001 * value + 0.0001 * seed
    return MethodResult(method, seed, accuracy, tuple(map(float, weights)), 0.001, 40)


def test_study_points_objective_and_checkpoints(scenario, sequential_study) -> None:
    _, geodesic = scenario
    study, ckpt = sequential_study
    grid = simplex_grid(geodesic.m, RESOLUTION)
    assert len(study.points) == N_POINTS == grid.shape[0]
    assert study.weights.tolist() == grid.tolist()
    # W²(P_a, Q) is the geodesic's objective, bit for bit
    np.testing.assert_array_equal(study.objectives, geodesic.objective(grid))
    assert [p.index for p in study.points] == list(range(N_POINTS))
    assert all(len(p.accuracies) == 1 and 0.0 <= p.accuracies[0] <= 1.0 for p in study.points)
    assert (study.preset, study.k, study.seeds, study.resolution) == ("tiny-lr", 2, (0,), 2)
    assert study.method == "otdd" and study.n_computed == N_POINTS and study.n_loaded == 0
    assert study.reference_names == tuple(geodesic.reference_names)
    files = sorted(ckpt.glob("*.json"))
    assert len(files) == N_POINTS
    record = json.loads(files[0].read_text())
    assert {"key", "accuracy", "seconds", "weights", "seed", "method"} <= set(record)
    assert not list(ckpt.glob(".*"))  # no temporaries left behind
    # correlations are scipy's on the study's arrays (nan with a note when undefined)
    x, y = study.objectives, study.mean_accuracies
    assert np.ptp(y) > 0 and study.note == ""
    assert study.pearson == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
    assert study.spearman == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
    # frame and JSON
    frame = study.to_frame()
    assert len(frame) == N_POINTS
    assert list(frame.columns[1:4]) == [f"a_{n}" for n in geodesic.reference_names]
    assert frame["objective"].tolist() == study.objectives.tolist()
    assert GridStudy.from_json(study.to_json()) == study  # (finite correlations here)


def test_resumed_study_recomputes_nothing(scenario, sequential_study, monkeypatch) -> None:
    task, geodesic = scenario
    study, ckpt = sequential_study
    calls: list[tuple[float, ...]] = []
    real = grid_module.run_method

    def counting(*args, **kwargs):
        calls.append(tuple(kwargs["weights"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(grid_module, "run_method", counting)
    kwargs = dict(resolution=RESOLUTION, seeds=[0], preset=PRESET, backend="sequential")
    progress: list[tuple[int, int]] = []
    again = run_grid(
        task, geodesic, checkpoint_dir=ckpt, progress=lambda d, t: progress.append((d, t)), **kwargs
    )
    assert calls == [] and again.n_loaded == N_POINTS and again.n_computed == 0
    assert again.points == study.points
    assert progress[-1] == (N_POINTS, N_POINTS)
    # a lost checkpoint is the only run redone, with the same result
    victim = sorted(ckpt.glob("*.json"))[2]
    victim.unlink()
    third = run_grid(task, geodesic, checkpoint_dir=ckpt, **kwargs)
    assert len(calls) == 1 and third.n_computed == 1
    assert victim.exists()
    assert [p.accuracies for p in third.points] == [p.accuracies for p in study.points]
    # another preset is another scenario: nothing is reused
    monkeypatch.setattr(grid_module, "run_method", _fake_run_method)
    other = run_grid(task, geodesic, checkpoint_dir=ckpt, **{**kwargs, "preset": "tiny"})
    assert other.n_computed == N_POINTS and len(list(ckpt.glob("*.json"))) == 2 * N_POINTS


def test_ray_and_sequential_give_identical_accuracies(
    scenario, sequential_study, ray_cluster, tmp_path
) -> None:
    task, geodesic = scenario
    study, _ = sequential_study
    done: list[tuple[int, int]] = []
    # resolution 1: the three vertices, rows 0, 2 and 5 of the resolution-2 grid
    on_ray = run_grid(
        task,
        geodesic,
        resolution=1,
        seeds=[0],
        preset=PRESET,
        checkpoint_dir=tmp_path,
        backend="ray",
        progress=lambda d, t: done.append((d, t)),
    )
    same = [study.points[i] for i in (0, 2, 5)]
    assert [p.weights for p in on_ray.points] == [p.weights for p in same]
    assert [p.accuracies for p in on_ray.points] == [p.accuracies for p in same]
    assert [p.objective for p in on_ray.points] == [p.objective for p in same]
    assert len(list(tmp_path.glob("*.json"))) == 3  # checkpointed by the driver
    assert done[-1] == (3, 3)


def test_correlations_equal_scipy_and_several_seeds(scenario, monkeypatch) -> None:
    task, geodesic = scenario
    monkeypatch.setattr(grid_module, "run_method", _fake_run_method)
    study = run_grid(
        task, geodesic, resolution=3, seeds=[0, 1], preset="tiny", backend="sequential"
    )
    assert len(study.points) == 10 and study.seeds == (0, 1) and study.note == ""
    x, y = study.objectives, study.mean_accuracies
    assert study.pearson == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
    assert study.spearman == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
    assert study.pearson == pytest.approx(-1.0)  # accuracy is linear in W² here
    point = study.points[4]
    assert point.accuracies[1] - point.accuracies[0] == pytest.approx(1e-4)
    assert point.std_accuracy == pytest.approx(np.std(point.accuracies, ddof=1))
    frame = study.to_frame()
    assert {"accuracy_seed0", "accuracy_seed1", "accuracy_std"} <= set(frame.columns)


def test_correlations_are_nan_safe() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ConstantInputWarning from scipy either
        r, rho, note = correlations([1.0, 2.0, 3.0], [0.5, 0.5, 0.5])
    assert math.isnan(r) and math.isnan(rho) and "mean accuracy" in note
    r, rho, note = correlations([1.0, 1.0, 1.0], [0.1, 0.2, 0.3])
    assert math.isnan(r) and "equal" in note
    r, rho, note = correlations([1.0, float("nan")], [0.1, 0.2])
    assert math.isnan(r) and "1 point" in note
    r, rho, note = correlations([1.0, 2.0, 4.0], [0.3, 0.2, 0.25])
    assert note == "" and r == pytest.approx(stats.pearsonr([1, 2, 4], [0.3, 0.2, 0.25])[0])
    # a study with nan correlations still serialises (as null)
    point = GridPoint(0, (1.0, 0.0), 1.0, (0.5,), 0.1)
    study = GridStudy((point,), math.nan, math.nan, "tiny", 1, (0,), 1)
    assert json.loads(study.to_json())["pearson"] is None


def test_bad_arguments(scenario) -> None:
    task, geodesic = scenario
    with pytest.raises(GeovizError, match="at least one seed"):
        run_grid(task, geodesic, resolution=1, seeds=[], preset="tiny")
    with pytest.raises(GeovizError, match="distinct"):
        run_grid(task, geodesic, resolution=1, seeds=[1, 1], preset="tiny")
    with pytest.raises(GeovizError, match="unknown transfer preset"):
        run_grid(task, geodesic, resolution=1, seeds=[0], preset="huge")
    with pytest.raises(GeovizError, match="method must be 'otdd' or 'mixup'"):
        run_grid(task, geodesic, resolution=1, seeds=[0], preset="tiny", method="1nn")
    with pytest.raises(GeovizError, match="resolution"):
        run_grid(task, geodesic, resolution=0, seeds=[0], preset="tiny")


def _study(m: int, n: int = 6) -> GridStudy:
    rng = np.random.default_rng(m)
    weights = simplex_grid(m, 2)[:n] if m > 1 else np.ones((1, 1))
    points = tuple(
        GridPoint(i, tuple(w), float(rng.random()), (float(rng.random()), float(rng.random())), 1.0)
        for i, w in enumerate(weights)
    )
    r, rho, note = correlations([p.objective for p in points], [p.mean_accuracy for p in points])
    names = tuple(f"ref{i}" for i in range(m))
    return GridStudy(points, r, rho, "tiny", 2, (0, 1), 2, reference_names=names, note=note)


def test_correlation_figure_ternary_pair_line_pair_and_scatter() -> None:
    study = _study(3)
    fig = correlation_figure(study)
    assert [t.type for t in fig.data] == ["scatterternary", "scatterternary"]
    assert fig.layout.ternary.aaxis.title.text == "<b>ref0</b>"
    assert fig.layout.ternary2.caxis.title.text == "<b>ref2</b>"
    np.testing.assert_allclose(fig.data[0].marker.color, study.objectives)
    # the figure reads accuracies in percent (issue 45 item 5)
    np.testing.assert_allclose(fig.data[1].marker.color, 100 * np.asarray(study.mean_accuracies))
    assert fig.data[0].marker.colorbar.x != fig.data[1].marker.colorbar.x
    assert f"r = {study.pearson:.3f}" in fig.layout.title.text
    assert any(f"r = {study.pearson:.3f}" in a.text for a in fig.layout.annotations)
    names = correlation_figure(study, ["A", "B", "C"]).layout.ternary.baxis.title.text
    assert names == "<b>B</b>"
    line = correlation_figure(_study(2, n=3))
    assert [t.type for t in line.data] == ["scatter", "scatter"]
    assert list(line.data[0].x) == sorted(line.data[0].x)
    assert len(correlation_figure(_study(4)).data) == 1
    with pytest.raises(GeovizError, match="3 reference names"):
        correlation_figure(study, ["A", "B"])
    # a nan correlation is drawn, not an error
    flat = dataclasses.replace(study, pearson=math.nan, spearman=math.nan, note="all equal")
    assert "n/a" in correlation_figure(flat).layout.title.text


def test_runs_are_one_task_per_point_and_seed(scenario, monkeypatch) -> None:
    task, geodesic = scenario
    seen: list[int] = []
    real = grid_module.run_tasks

    def spy(fn, items, **kwargs):
        seen.append(len(items))
        return real(fn, items, **kwargs)

    monkeypatch.setattr(grid_module, "run_tasks", spy)
    monkeypatch.setattr(grid_module, "run_method", _fake_run_method)
    run_grid(task, geodesic, resolution=2, seeds=[3, 4], preset="tiny", backend="sequential")
    assert seen == [N_POINTS * 2]
