"""geoviz.viz.study's computations for the Evidence page (issue 33): the bootstrap of Pearson
r over the grid points, â on the grid, the chance of a strong r by accident and the warnings
of a small run, and the markers of â on the study's figures."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from geoviz.errors import GeovizError
from geoviz.geodesic.distances import simplex_grid
from geoviz.nn.training import PRESETS
from geoviz.transfer.study import GridStudy
from geoviz.transfer.study_stats import GridPoint
from geoviz.viz.study import (
    a_hat_sentence,
    budget_warnings,
    chance_of_strong_r,
    correlation_sentence,
    interval_text,
    points_bootstrap_interval,
)
from geoviz.viz.study_figure import correlation_figure
from geoviz.viz.study_grid import BEST_LABEL, NEAREST_LABEL, nearest_grid_point

EVIDENCE = Path(__file__).resolve().parents[1] / "assets" / "evidence"


def _stored(target: str) -> tuple[GridStudy, list[float], dict[str, Any]]:
    """A stored study, its region's a_hat and the raw study file (read here, independently)."""
    text = (EVIDENCE / f"study_{target}.json").read_text(encoding="utf-8")
    region = json.loads((EVIDENCE / f"region_{target}.json").read_text(encoding="utf-8"))
    return GridStudy.from_json(text), region["a_hat"], json.loads(text)


def _grid_study(m: int, resolution: int, seeds: int = 2) -> GridStudy:
    """A study on the m-simplex grid whose accuracy falls as its objective rises."""
    grid = simplex_grid(m, resolution)
    rng = np.random.default_rng(3)
    points = []
    for i, w in enumerate(grid):
        objective = float(10.0 * w[0] + 3.0 * w[-1])
        acc = tuple(float(0.9 - 0.02 * objective + 0.01 * rng.random()) for _ in range(seeds))
        points.append(GridPoint(i, tuple(float(v) for v in w), objective, acc, 1.0))
    return GridStudy(
        tuple(points), float("nan"), float("nan"), "cpu", 5, tuple(range(seeds)), resolution
    )


# --------------------------------------------------------------------------- bootstrap over points


def test_every_resample_of_a_line_gives_r_of_its_sign() -> None:
    x = np.arange(12.0)
    low, high = points_bootstrap_interval(x, -2.0 * x + 1.0)[0] or (math.nan, math.nan)
    assert low == pytest.approx(-1.0, abs=1e-9) and high == pytest.approx(-1.0, abs=1e-9)
    low, high = points_bootstrap_interval(x, 0.5 * x)[0] or (math.nan, math.nan)
    assert low == pytest.approx(1.0, abs=1e-9) and high == pytest.approx(1.0, abs=1e-9)


def test_the_interval_holds_r_is_seeded_and_agrees_with_scipy() -> None:
    from scipy import stats

    rng = np.random.default_rng(11)
    x = rng.normal(size=20)
    y = 0.6 * x + rng.normal(size=20)
    r = float(np.corrcoef(x, y)[0, 1])
    interval, note = points_bootstrap_interval(x, y)
    assert interval is not None and note == ""
    assert interval[0] < r < interval[1]
    assert points_bootstrap_interval(x, y)[0] == interval  # seeded: the same every time
    assert points_bootstrap_interval(x, y, seed=1)[0] != interval
    # scipy's own paired percentile bootstrap (other draws): the same interval within noise
    ref = stats.bootstrap(
        (x, y),
        lambda a, b: stats.pearsonr(a, b)[0],
        paired=True,
        vectorized=False,
        method="percentile",
        n_resamples=2000,
        random_state=0,
    ).confidence_interval
    assert interval[0] == pytest.approx(ref.low, abs=0.05)
    assert interval[1] == pytest.approx(ref.high, abs=0.05)


def test_too_few_points_give_no_interval_and_bad_input_is_refused() -> None:
    interval, note = points_bootstrap_interval([1.0, 2.0], [3.0, 1.0])
    assert interval is None and "2 point(s)" in note
    with pytest.raises(GeovizError):
        points_bootstrap_interval([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(GeovizError):
        points_bootstrap_interval([1.0, 2.0, 3.0], [1.0, 2.0, 0.0], level=1.0)


def test_the_stored_studies_say_both_intervals() -> None:
    mnist, _, _ = _stored("mnist")
    text = interval_text(mnist)
    assert text.startswith("over the 5 seeds: [") and "; over the 36 points: [" in text
    seeds = mnist.statistics.pearson.interval
    assert seeds is not None and f"[{seeds[0]:+.3f}, {seeds[1]:+.3f}]" in text
    # the points' interval is the wider: 36 points support less than 5 seeds suggest
    points = points_bootstrap_interval(mnist.objectives, mnist.mean_accuracies)[0]
    assert points is not None and points[1] - points[0] > seeds[1] - seeds[0]
    assert "each excludes 0" in correlation_sentence("mnist", mnist)
    fashion, _, _ = _stored("fashion_mnist")
    sentence = correlation_sentence("fashion_mnist", fashion)
    assert "no correlation shown" in sentence and sentence.count("includes 0") == 2


# --------------------------------------------------------------------------- â on the grid


def test_nearest_grid_point() -> None:
    grid = simplex_grid(3, 7)
    # 7 * a_hat = (0.87, 4.28, 1.85) rounds to (1, 4, 2), a point of the grid
    i = nearest_grid_point(grid, [0.124, 0.612, 0.264])
    np.testing.assert_allclose(grid[i], np.array([1, 4, 2]) / 7.0)
    for j in (0, 5, len(grid) - 1):
        assert nearest_grid_point(grid, grid[j]) == j
    with pytest.raises(GeovizError):
        nearest_grid_point(grid, [0.5, 0.5])


def test_a_hat_sentence_reads_the_study_file() -> None:
    study, a_hat, raw = _stored("mnist")
    points = raw["points"]
    means = [float(np.mean(p["accuracies"])) for p in points]
    # independent: the grid point whose weights are the multiples of 1/7 nearest to a_hat
    near = next(p for p in points if np.allclose(p["weights"], np.array([1, 4, 2]) / 7.0))
    best = points[int(np.argmax(means))]
    text = a_hat_sentence("mnist", study, a_hat)
    assert f"{NEAREST_LABEL}, a = (0.14, 0.57, 0.29)" in text
    assert f"{100 * np.mean(near['accuracies']):.1f} ± " in text
    assert f"{BEST_LABEL}, a = (0.00, 0.86, 0.14), {100 * max(means):.1f} ± " in text
    assert best["weights"] == pytest.approx([0.0, 6 / 7, 1 / 7])


# --------------------------------------------------------------------------- small budgets


def test_chance_of_a_strong_r_by_accident() -> None:
    # n = 3: P(|r| >= t) = 1 - (2/pi) asin(t), 2/3 at t = 0.5
    assert chance_of_strong_r(3) == pytest.approx(2.0 / 3.0)
    assert chance_of_strong_r(3, 0.9) == pytest.approx(1 - 2 / math.pi * math.asin(0.9))
    # Monte Carlo: unrelated Gaussian accuracies at 6 fixed objectives
    rng = np.random.default_rng(0)
    x = np.arange(6.0)
    ys = rng.normal(size=(40_000, 6))
    yc = ys - ys.mean(axis=1, keepdims=True)
    xc = x - x.mean()
    r = (yc @ xc) / np.sqrt((yc * yc).sum(axis=1) * (xc @ xc))
    assert chance_of_strong_r(6) == pytest.approx(float(np.mean(np.abs(r) >= 0.5)), abs=0.01)
    assert chance_of_strong_r(36) < 0.01
    with pytest.raises(GeovizError):
        chance_of_strong_r(2)


def test_budget_warnings_say_why() -> None:
    assert budget_warnings("cpu", 36, 5) == [] and budget_warnings("cpu", 10, 2) == []
    (tiny,) = budget_warnings("tiny", 36, 5)
    preset = PRESETS["tiny"]
    assert f"pretraining {preset.pretrain.iterations} and fine-tuning " in tiny
    assert f"{preset.finetune.iterations} iterations" in tiny and "meaningless" in tiny
    (three,) = budget_warnings("cpu", 3, 3)
    assert three.startswith("3 grid points cannot support a correlation")
    assert "in 67 % of such studies" in three
    assert "always ±1" in budget_warnings("cpu", 2, 3)[0]
    (one,) = budget_warnings("cpu", 36, 1)
    assert "1 seed" in one and "no interval over seeds" in one
    assert len(budget_warnings("tiny", 6, 1)) == 3


# --------------------------------------------------------------------------- figures


def test_the_scatter_marks_the_grid_point_nearest_to_a_hat() -> None:
    study, a_hat, _ = _stored("mnist")
    fig = correlation_figure(study, kind="scatter", label="Q = mnist", a_hat=a_hat)
    by_name = {t.name: t for t in fig.data}
    assert len(by_name["grid point"].x) == 36
    near = nearest_grid_point(study.weights, a_hat)
    mark = by_name[NEAREST_LABEL]
    assert list(mark.x) == [study.points[near].objective]
    assert list(mark.y) == [pytest.approx(100 * study.points[near].mean_accuracy)]
    best = by_name[BEST_LABEL]
    assert list(best.y) == [pytest.approx(100 * float(study.mean_accuracies.max()))]
    assert fig.layout.showlegend
    # without a_hat: the figure as before, one trace
    assert len(correlation_figure(study, kind="scatter").data) == 1


def test_the_ternaries_and_lines_mark_a_hat() -> None:
    study, a_hat, _ = _stored("fashion_mnist")
    fig = correlation_figure(study, a_hat=a_hat)
    marks = [t for t in fig.data if t.name in ("â", NEAREST_LABEL, BEST_LABEL)]
    assert len(marks) == 6  # both panels
    hat = next(t for t in marks if t.name == "â")
    assert (hat.a[0], hat.b[0], hat.c[0]) == pytest.approx(tuple(a_hat))
    assert sum(bool(t.showlegend) for t in marks) == 3
    line = _grid_study(2, 4)
    fig2 = correlation_figure(line, a_hat=[0.3, 0.7])
    near = [t for t in fig2.data if t.name == NEAREST_LABEL]
    assert len(near) == 2 and near[0].x[0] == pytest.approx(0.75)
    with pytest.raises(GeovizError):
        correlation_figure(line, a_hat=[0.2, 0.3, 0.5])
