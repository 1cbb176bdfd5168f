"""Study statistics (issue 18) and the checkpoint store's stored format (issue 17).

No training here: synthetic points, a stored study JSON and a stored scenario.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from geoviz.geodesic.distances import simplex_grid
from geoviz.transfer.checkpoints import (
    CHECKPOINT_VERSION,
    CheckpointStore,
    checkpoint_key,
    result_record,
    study_scenario,
)
from geoviz.transfer.study import GridPoint, GridStudy
from geoviz.transfer.study_stats import BOOTSTRAP_RESAMPLES, bootstrap_interval, study_statistics

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
STORED = ROOT / "benchmarks" / "results" / "study-box" / "checkpoints" / "mnist"


def _points(objectives, accuracies) -> tuple[GridPoint, ...]:
    grid = simplex_grid(2, len(objectives) - 1)
    return tuple(
        GridPoint(i, tuple(float(w) for w in grid[i]), float(o), tuple(map(float, a)), 1.0)
        for i, (o, a) in enumerate(zip(objectives, accuracies, strict=True))
    )


def test_bootstrap_interval_of_an_exact_relation_is_a_point() -> None:
    # every seed's accuracy falls linearly with W², with a different offset per seed:
    # any resample of the seeds keeps r = -1, so the interval is [-1, -1]
    objectives = np.array([3.0, 1.0, 4.0, 1.5, 5.0, 9.0])
    accuracies = 0.9 - 0.01 * objectives[:, None] + 0.002 * np.arange(4)[None, :]
    for method in ("pearson", "spearman"):
        interval, note = bootstrap_interval(objectives, accuracies, method)
        assert interval == pytest.approx((-1.0, -1.0), abs=1e-12) and note == ""
    stat = study_statistics(_points(objectives, accuracies))
    assert stat.pearson.interval == pytest.approx((-1.0, -1.0), abs=1e-12)
    assert stat.spearman.r == pytest.approx(-1.0)


def test_bootstrap_interval_is_seeded_and_contains_the_estimate() -> None:
    rng = np.random.default_rng(5)
    objectives = rng.random(10) * 50
    accuracies = 0.8 - 0.002 * objectives[:, None] + 0.03 * rng.standard_normal((10, 5))
    first, _ = bootstrap_interval(objectives, accuracies)
    again, _ = bootstrap_interval(objectives, accuracies)
    other, _ = bootstrap_interval(objectives, accuracies, seed=1)
    assert first == again and first != other  # a fixed numpy Generator seed
    r = stats.pearsonr(objectives, accuracies.mean(axis=1))[0]
    assert first is not None and first[0] < r < first[1] and -1.0 <= first[0] < first[1] <= 1.0
    # the same interval by a plain loop over the same draws
    draws = np.random.default_rng(0).integers(0, 5, size=(BOOTSTRAP_RESAMPLES, 5))
    rs = [stats.pearsonr(objectives, accuracies[:, d].mean(axis=1))[0] for d in draws]
    assert first == pytest.approx(tuple(np.percentile(rs, [2.5, 97.5])), abs=1e-12)


def test_one_seed_has_no_interval_and_p_values_are_scipys() -> None:
    objectives = [5.0, 3.0, 4.0, 1.0, 2.0]
    accuracies = [[0.5], [0.7], [0.55], [0.9], [0.6]]
    stat = study_statistics(_points(objectives, accuracies))
    y = [a[0] for a in accuracies]
    assert stat.pearson.interval is None and "1 seed" in stat.pearson.interval_note
    assert stat.spearman.interval is None
    pearson, spearman = stats.pearsonr(objectives, y), stats.spearmanr(objectives, y)
    assert stat.pearson.r == pytest.approx(pearson[0], abs=1e-12)
    assert stat.pearson.p_value == pytest.approx(pearson[1], rel=1e-12)
    assert stat.spearman.p_value == pytest.approx(spearman[1], rel=1e-12)
    assert stat.n_points == 5 and stat.n_seeds == 1


def test_w_statistics_and_accuracy_gain() -> None:
    objectives = [5.0, 3.0, 4.0, 1.0, 2.0]
    accuracies = [[0.5, 0.6], [0.7, 0.7], [0.55, 0.5], [0.9, 0.8], [0.6, 0.6]]
    points = _points(objectives, accuracies)
    stat = study_statistics(points, a_hat=points[3].weights)
    w = stat.objective
    assert (w.mean, w.median, w.min, w.max, w.range) == (3.0, 3.0, 1.0, 5.0, 4.0)
    assert w.std == pytest.approx(np.std(objectives))
    assert stat.accuracy_gain == pytest.approx(0.85 - 0.525)
    assert stat.accuracy_at_a_hat == pytest.approx(0.85)
    assert study_statistics(points, a_hat=(0.3, 0.7)).accuracy_at_a_hat is None  # not on the grid
    # undefined correlations (constant accuracy) say so instead of inventing an interval
    flat = study_statistics(_points(objectives, [[0.5, 0.5]] * 5))
    assert math.isnan(flat.pearson.r) and math.isnan(flat.pearson.p_value)
    assert flat.pearson.interval is None and "undefined" in flat.pearson.interval_note
    json.dumps(flat.to_dict(), allow_nan=False)  # strict JSON (nan as null)


def test_old_study_json_loads_with_statistics_computed_from_its_points() -> None:
    text = (DATA / "study_box_mnist_old.json").read_text()
    assert "statistics" not in json.loads(text) and "a_hat" not in json.loads(text)
    study = GridStudy.from_json(text)
    assert len(study.points) == 36 and study.seeds == (0, 1, 2, 3, 4) and study.a_hat is None
    stat = study.statistics
    assert stat.pearson.r == pytest.approx(study.pearson, abs=1e-12)  # -0.867, as stored
    assert stat.spearman.r == pytest.approx(study.spearman, abs=1e-12)
    low, high = stat.pearson.interval
    assert low <= stat.pearson.r <= high < 0
    assert stat.objective.min == min(p.objective for p in study.points)
    assert stat.accuracy_at_a_hat is None
    # the new file carries the statistics and a_hat, and reads back equal
    again = GridStudy.from_json(study.to_json())
    assert again == study and again.statistics == stat
    with_a_hat = GridStudy.from_dict({**study.to_dict(), "a_hat": list(study.points[0].weights)})
    assert with_a_hat.statistics.accuracy_at_a_hat == study.points[0].mean_accuracy
    assert json.loads(with_a_hat.to_json())["statistics"]["pearson"]["p_value"] < 1e-6


def test_a_stored_checkpoint_is_found_by_its_key() -> None:
    """The key bytes are a stored format: the study-box checkpoints must keep loading."""
    if not STORED.is_dir():  # pragma: no cover - results are part of the repository
        pytest.skip("benchmarks/results/study-box is not in this checkout")
    stored = json.loads((DATA / "study_box_mnist_scenario.json").read_text())
    # the scenario of that study, rebuilt by study_scenario from objects with its fingerprints
    ds = SimpleNamespace
    task = ds(
        k=stored["k"],
        seed=stored["task_seed"],
        target_train=ds(fingerprint=stored["target_train"]),
        target_fewshot=ds(fingerprint=stored["target_fewshot"]),
        target_test=ds(fingerprint=stored["target_test"]),
        references=[ds(fingerprint=f) for f in stored["references"]],
    )
    geodesic = ds(
        target=ds(fingerprint=stored["geodesic_target"]),
        references=[ds(fingerprint=f) for f in stored["geodesic_references"]],
        config=ds(to_dict=lambda: stored["geodesic_config"]),
    )
    scenario = study_scenario(task, geodesic, "cpu", "otdd")
    assert scenario == stored and scenario["version"] == CHECKPOINT_VERSION
    store = CheckpointStore(STORED, "otdd")
    weights = tuple(float(w) for w in simplex_grid(3, 7)[7])
    key = checkpoint_key(scenario, weights, 3)
    record = store.load(3, key)
    assert record is not None and record["key"] == key and record["seed"] == 3
    assert record["weights"] == pytest.approx(list(weights)) and 0.5 < record["accuracy"] < 1.0
    assert store.load(3, checkpoint_key(scenario, weights, 99)) is None


def test_checkpoint_store_round_trip(tmp_path) -> None:
    store = CheckpointStore(tmp_path / "ckpt", "mixup")
    key = checkpoint_key({"version": CHECKPOINT_VERSION}, (0.5, 0.5), 2)
    result = SimpleNamespace(method="mixup", accuracy=0.75, seconds=1.5, n_pretrain=10)
    path = store.save(result_record(result, key, (0.5, 0.5), 2))
    assert path == store.path(2, key) and path.name.startswith("mixup-seed2-")
    assert store.load(2, key)["accuracy"] == 0.75
    assert store.load(2, "0" * 64) is None  # another key under another name
    path.write_text("{not json")
    assert store.load(2, key) is None
    # -0.0 and 0.0, and weights equal to 12 decimals, are one key
    assert checkpoint_key({}, (-0.0, 1.0), 0) == checkpoint_key({}, (0.0, 1.0 + 1e-15), 0)
