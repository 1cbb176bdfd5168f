"""The stored-study tables, figure and sentence of the Evidence page (geoviz.viz.study) and
the service that reads the stored studies (geoviz.app.services.stored_evidence)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from geoviz.app.services.stored_evidence import load_stored_study, stored_studies
from geoviz.errors import GeovizError
from geoviz.transfer.study import GridStudy
from geoviz.transfer.study_stats import GridPoint
from geoviz.viz.study import (
    correlation_sentence,
    correlation_table,
    format_estimate,
    objective_table,
)
from geoviz.viz.study_figure import correlation_figure


def _study(objectives: list[float], accuracies: list[list[float]]) -> GridStudy:
    """A study over ``len(objectives)`` points of a 2-simplex line, accuracies per seed."""
    n = len(objectives)
    points = tuple(
        GridPoint(i, (1.0 - i / (n - 1), i / (n - 1)), objectives[i], tuple(accuracies[i]), 1.0)
        for i in range(n)
    )
    seeds = tuple(range(len(accuracies[0])))
    return GridStudy(points, float("nan"), float("nan"), "tiny", 5, seeds, n - 1)


def test_sentence_follows_the_numbers_not_the_target():
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    falling = _study(x, [[0.9, 0.91], [0.8, 0.81], [0.7, 0.72], [0.6, 0.6], [0.5, 0.52]])
    rising = _study(x, [[0.5, 0.51], [0.6, 0.6], [0.7, 0.71], [0.8, 0.82], [0.9, 0.9]])
    # seed 0 rises, seed 1 falls: the resamples of the seeds give r of both signs
    noise = _study(x, [[0.5, 0.91], [0.6, 0.8], [0.7, 0.7], [0.8, 0.6], [0.9, 0.5]])
    assert "strong negative correlation" in correlation_sentence("A", falling)
    assert "excludes 0" in correlation_sentence("A", falling)
    assert "as the paper claims" in correlation_sentence("A", falling)
    assert "strong positive correlation" in correlation_sentence("A", rising)
    assert "against the paper's claim" in correlation_sentence("A", rising)
    low, high = noise.statistics.pearson.interval or (math.nan, math.nan)
    assert low <= 0.0 <= high
    assert "no correlation shown" in correlation_sentence("A", noise)
    one_seed = _study(x, [[0.9], [0.8], [0.7], [0.6], [0.5]])
    assert "not established" in correlation_sentence("A", one_seed)
    assert "no interval" in format_estimate(one_seed.statistics.pearson)
    flat = _study(x, [[0.5, 0.5]] * 5)
    assert "no correlation can be computed" in correlation_sentence("A", flat)
    assert format_estimate(flat.statistics.pearson) == "n/a"


def test_tables_carry_the_statistics_of_each_study():
    study = _study([1.0, 2.0, 4.0], [[0.9, 0.8], [0.7, 0.8], [0.6, 0.6]])
    table = correlation_table({"A": study, "B": study})
    assert list(table["target Q"]) == ["A", "B"]
    assert table["Pearson r [95% CI] (p)"][0] == format_estimate(study.statistics.pearson)
    assert list(table["points"]) == [3, 3] and list(table["seeds"]) == [2, 2]
    w = objective_table({"A": study}).iloc[0]
    assert w["W² mean"] == pytest.approx(7.0 / 3.0, abs=0.005)
    assert w["W² median"] == 2.0 and w["W² range"] == 3.0
    assert w["W² std"] == pytest.approx(np.std([1.0, 2.0, 4.0]), abs=0.005)
    # mean accuracies 0.85, 0.75, 0.6: the gain is 25 percentage points
    assert w["accuracy gain (pp)"] == pytest.approx(25.0)


def test_scatter_figure_has_the_seed_spread_as_error_bars():
    study = _study([1.0, 2.0, 4.0], [[0.9, 0.8], [0.7, 0.8], [0.6, 0.6]])
    fig = correlation_figure(study, kind="scatter", label="Q = A")
    trace = fig.data[0]
    assert trace.type == "scatter"
    np.testing.assert_allclose(trace.x, [1.0, 2.0, 4.0])
    np.testing.assert_allclose(trace.y, [85.0, 75.0, 60.0])
    np.testing.assert_allclose(trace.error_y.array, [100 * np.std([0.9, 0.8], ddof=1)] * 2 + [0])
    assert fig.layout.title.text.startswith("<b>Q = A</b><br>")
    # "auto" keeps the two line panels for m = 2
    assert len(correlation_figure(study).data) == 2


def test_stored_studies_are_shipped_and_read():
    evidence = stored_studies()
    assert evidence.problems == ()
    by_target = {s.target: s.study for s in evidence.studies}
    assert set(by_target) == {"mnist", "fashion_mnist"}
    for study in by_target.values():
        assert len(study.points) == 36 and study.resolution == 7 and len(study.seeds) == 5
    assert by_target["mnist"].statistics.pearson.r == pytest.approx(-0.867, abs=5e-4)
    assert by_target["fashion_mnist"].statistics.pearson.r == pytest.approx(0.181, abs=5e-4)
    # the region as good as a_hat is shipped beside each study (issue 23)
    for stored in evidence.studies:
        assert stored.region is not None and len(stored.region.inside) == 36
        assert stored.region.replicates == 200 and not stored.region.best_inside


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{not json", "could not be read (JSONDecodeError)"),
        ('{"points": []}', "is not a simplex study file"),
        ('{"points": [{"index": 0}]}', "is not a simplex study file"),
    ],
)
def test_a_corrupt_stored_study_is_one_sentence(tmp_path: Path, text: str, expected: str):
    path = tmp_path / "study_bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(GeovizError, match=r"study_bad\.json") as err:
        load_stored_study(path)
    assert expected in str(err.value) and "\n" not in str(err.value)
    evidence = stored_studies(tmp_path)
    assert evidence.studies == () and len(evidence.problems) == 1


# --------------------------------------------------------------------------- region (issue 23)


def _write_region(path: Path, n: int, inside: list[bool], best: int) -> None:
    import json

    path.write_text(
        json.dumps(
            {
                "a_hat": [0.4, 0.6],
                "a_hat_low": [0.3, 0.5],
                "a_hat_high": [0.5, 0.7],
                "method": "q-resample",
                "replicates": 200,
                "level": 0.95,
                "points": [{"as_good_as_a_hat": v} for v in inside[:n]],
                "best_accuracy_index": best,
            }
        ),
        encoding="utf-8",
    )


def test_a_stored_region_is_read_beside_its_study_and_said_in_a_sentence(tmp_path: Path):
    from geoviz.viz.study import region_sentence

    study = _study([3.0, 2.0, 1.0, 2.0], [[0.5], [0.6], [0.7], [0.65]])
    (tmp_path / "study_toy.json").write_text(study.to_json(), encoding="utf-8")
    _write_region(tmp_path / "region_toy.json", 4, [False, True, True, False], best=2)
    evidence = stored_studies(tmp_path)
    assert evidence.problems == ()
    region = evidence.studies[0].region
    assert region is not None and region.best_inside and region.inside == (False, True, True, False)
    text = region_sentence("toy", study, region.inside, region.best_index, 200, 0.95)
    assert "a = (0.33, 0.67)" in text and "lies inside the region" in text
    assert "2 of 4 grid points" in text and "70.0%" in text
    outside = region_sentence("toy", study, (False, True, False, False), 2, 200, 0.95)
    assert "lies outside the region" in outside


@pytest.mark.parametrize(
    ("n", "best", "expected"),
    [(3, 0, "made for another grid"), (4, 9, "made for another grid")],
)
def test_a_region_for_another_grid_is_one_sentence(tmp_path: Path, n, best, expected):
    study = _study([3.0, 2.0, 1.0, 2.0], [[0.5], [0.6], [0.7], [0.65]])
    (tmp_path / "study_toy.json").write_text(study.to_json(), encoding="utf-8")
    _write_region(tmp_path / "region_toy.json", n, [True] * 4, best=best)
    evidence = stored_studies(tmp_path)
    assert len(evidence.studies) == 1 and evidence.studies[0].region is None
    assert len(evidence.problems) == 1 and expected in evidence.problems[0]


# --------------------------------------------------------------------------- a run that dies (issue 32)


def test_a_run_whose_worker_is_killed_says_so_and_starts_again(fresh_server, monkeypatch):
    """The Evidence page's training runs in a child process: SIGKILL it mid-run and the page
    shows the sentence with a button; the button starts a new run (the server goes on)."""
    import os
    import signal
    import time

    from test_app import TIMEOUT, _app, _open, _plain
    from test_isolation import CHILD_ENV, _wait_forever

    import geoviz.app.services.evidence as evidence
    from geoviz.isolation import run_in_child

    runs: list[int] = []

    def killed_mid_run(fn, **kwargs):
        """The job's worker as it is, but running a stand-in that is SIGKILLed once running."""

        def progress(stage: str, fraction: float) -> None:
            if stage.startswith("helper "):
                os.kill(runs[-1], signal.SIGKILL)

        kwargs.pop("env", None)
        return run_in_child(
            _wait_forever, **{**kwargs, "progress": progress}, env=CHILD_ENV, on_start=runs.append
        )

    monkeypatch.setattr(evidence, "run_in_child", killed_mid_run)
    at = _open(_app(), "pages/7_evidence.py")
    at.selectbox[0].set_value("tiny")
    at.select_slider[1].set_value(1)
    at.select_slider[2].set_value(1)
    at.button[0].click().run()
    sentence = (
        "The transfer run stopped: its worker process was ended by signal 9 (SIGKILL) before it "
        "finished. Start it again to resume from the checkpoints."
    )

    def wait_for_the_failure() -> str:
        deadline = time.monotonic() + TIMEOUT
        while not at.error and time.monotonic() < deadline:
            time.sleep(1.0)
            at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert at.error, "the page never said that the run stopped"
        return _plain(at.error[0].value)  # as the visitor reads the Markdown

    assert sentence in wait_for_the_failure()
    # the sentence stays on later visits (another session would see it too) until a restart
    at.run()
    assert at.error and sentence in _plain(at.error[0].value)
    restart = next(b for b in at.button if b.label == "Start the run again")
    restart.click().run()
    assert len(runs) >= 1
    assert sentence in wait_for_the_failure()
    assert len(runs) == 2  # the button ran the job a second time


# --------------------------------------------------------------------------- space, N, Table 1 (issue 33)

ROOT = Path(__file__).resolve().parents[1]


def _table1_source() -> dict[str, Any]:
    """The benchmark output the shipped Table 1 is copied from (read here, independently)."""
    import json

    path = ROOT / "benchmarks" / "results" / "table1-box" / "bench_transfer.json"
    source: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return source


def test_each_stored_study_says_its_space_and_n() -> None:
    from geoviz.app.services.stored_evidence import meta_sentence

    for stored in stored_studies().studies:
        meta = stored.meta
        assert meta is not None and meta.space == "digit box" and meta.preprocess == "box"
        assert (meta.n_per_dataset, meta.n_test, meta.image_size) == (5000, 5000, 32)
        text = meta_sentence(stored)
        assert "space: digit box, every image box-normalised like MNIST" in text
        assert "N = 5000 training samples per dataset, 5000 test samples of Q" in text
        assert "20-shot target, 5 seeds, 36 grid points (resolution 7), preset “cpu”" in text


def test_a_description_of_another_study_is_one_sentence(tmp_path: Path) -> None:
    import json

    study = _study([3.0, 2.0, 1.0, 2.0], [[0.5], [0.6], [0.7], [0.65]])
    (tmp_path / "study_toy.json").write_text(study.to_json(), encoding="utf-8")
    meta = json.loads((ROOT / "assets" / "evidence" / "meta_mnist.json").read_text("utf-8"))
    (tmp_path / "meta_toy.json").write_text(json.dumps(meta), encoding="utf-8")
    evidence = stored_studies(tmp_path)
    assert len(evidence.studies) == 1 and evidence.studies[0].meta is None
    (problem,) = evidence.problems
    assert "meta_toy.json describes another study" in problem


def test_the_stored_table1_is_the_benchmark_output() -> None:
    from geoviz.app.services.stored_evidence import measured_claim, mixup_sentence

    table = stored_studies().table1
    assert table is not None and table.space == "digit box" and table.preprocess == "box"
    source = _table1_source()
    assert source["args"]["preprocess"] == "box" and int(source["args"]["k"]) == table.k
    assert [row.name for row in table.rows] == list(source["table1"])
    for row in table.rows:
        for entry in source["table1"][row.name]["summary"]:
            score = row.results[entry["method"]]
            assert (score.mean, score.std) == (entry["mean"], entry["std"])
        assert row.a_hat == tuple(source["table1"][row.name]["a_hat"])
    frame = table.frame()
    assert frame["OTDD barycentric, pretrain on P_a (paper)"][0] == "78.5 ± 1.8 (93.7)"
    # who leads, from the source: Mixup on three targets by 1.7-3.0 points, OTDD on KMNIST
    leads = {t: {e["method"]: e["mean"] for e in v["summary"]} for t, v in source["table1"].items()}
    gaps = {t: m["mixup"] - m["otdd"] for t, m in leads.items()}
    ahead = sorted(t for t, g in gaps.items() if g > 0)
    assert ahead == ["fashion_mnist", "mnist", "usps"] and gaps["kmnist"] < 0
    span = f"{min(gaps[t] for t in ahead):.1f}–{max(gaps[t] for t in ahead):.1f}"
    sentence = mixup_sentence(table)
    assert f"Mixup at â is ahead on MNIST, Fashion-MNIST and USPS, by {span} points" in sentence
    assert f"OTDD is ahead only on KMNIST, by {-gaps['kmnist']:.1f} points" in sentence
    assert "on 4 of 4 targets" in measured_claim(table)


def test_a_corrupt_table1_is_one_sentence(tmp_path: Path) -> None:
    (tmp_path / "table1_box.json").write_text('{"methods": {"otdd": "x"}}', encoding="utf-8")
    evidence = stored_studies(tmp_path)
    assert evidence.table1 is None
    (problem,) = evidence.problems
    assert "table1_box.json is malformed" in problem and "\n" not in problem


def test_evidence_page_states_space_n_table1_and_marks_a_hat(fresh_server: Path) -> None:
    """The stored study's space and N, the Geodesic page's space at its N, both r intervals
    named by what they resample, â marked on each scatter, and Table 1 beside the paper."""
    import json

    from test_app import _app, _assert_clean

    at = _app("pages/7_evidence.py")
    _assert_clean(at, "evidence stored")
    texts = "\n".join(m.value for m in at.markdown)
    assert texts.count("space: digit box, every image box-normalised like MNIST") == 2
    assert "N = 5000 training samples per dataset, 5000 test samples of Q, 20-shot" in texts
    infos = "\n".join(i.value for i in at.info)
    assert "same space, at another N" in infos and "N = 60 bundled samples" in infos
    captions = "\n".join(c.value for c in at.caption)
    assert "over the 5 seeds: [" in captions and "over the 36 points: [" in captions
    assert "nearest grid point to â, a = (0.14, 0.57, 0.29)" in captions
    assert "accuracy-best grid point, a = (0.00, 0.86, 0.14), 90.8 ± " in captions
    assert "--preprocess box --out benchmarks/results/table1-box" in captions
    figures = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    scatters = [f for f in figures if f["data"][0]["type"] == "scatter"]
    assert len(scatters) == 2
    for fig in scatters:
        names = [t.get("name") for t in fig["data"]]
        assert "nearest grid point to â" in names and "accuracy-best grid point" in names
    ternaries = [f for f in figures if f["data"][0]["type"] == "scatterternary"]
    assert len(ternaries) == 2 and all(
        any(t.get("name") == "â" for t in f["data"]) for f in ternaries
    )
    # a static table (every column shows at 1280 px), indexed by the target
    table = next(
        d.value.reset_index() for d in at.table if "Mixup with the same a (paper)" in d.value
    )
    assert list(table["target Q"]) == ["MNIST", "Fashion-MNIST", "USPS", "KMNIST"]
    assert table["Mixup with the same a (paper)"][0] == "81.5 ± 2.5 (88.7)"
    assert "Mixup at â is ahead on MNIST, Fashion-MNIST and USPS" in texts


def test_about_page_says_the_papers_claim_and_the_measured_table(fresh_server: Path) -> None:
    from test_app import _app, _assert_clean

    at = _app("pages/6_about.py")
    _assert_clean(at, "about")
    texts = "\n".join(m.value for m in at.markdown)
    assert "five of six targets" in texts
    assert "Mixup at â is ahead on MNIST, Fashion-MNIST and USPS, by 1.7–3.0 points" in texts
    assert "OTDD is ahead only on KMNIST" in texts and "in the digit box" in texts


def test_a_small_run_gets_its_warnings_beside_the_result(
    fresh_server: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finished tiny run of 3 grid points and 1 seed: the page says, beside its result,
    why its numbers cannot support a conclusion."""
    from test_app import _app

    from geoviz.app.services import evidence as evidence_services
    from geoviz.transfer.experiment import Method, MethodResult
    from geoviz.transfer.table import MethodComparison

    weights = (0.2, 0.3, 0.5)
    scores: tuple[tuple[Method, float], ...] = (
        ("otdd", 0.5),
        ("mixup", 0.4),
        ("fewshot", 0.3),
        ("1nn", 0.2),
    )
    comparison = MethodComparison(
        tuple(
            MethodResult(m, 0, a, weights if m in ("otdd", "mixup") else None, 1.0, 10)
            for m, a in scores
        ),
        weights,
        "tiny",
        1,
    )
    grid = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))
    study = GridStudy(
        tuple(GridPoint(i, w, 1.0 + i, (0.5 - 0.1 * i,), 1.0) for i, w in enumerate(grid)),
        -1.0,
        -1.0,
        "tiny",
        1,
        (0,),
        1,
        reference_names=("A", "B", "C"),
    )
    result = evidence_services.EvidenceResult(comparison, study, ("A", "B", "C"), 100, 1.0)
    monkeypatch.setattr(evidence_services, "evidence_if_ready", lambda scenario, request: result)
    at = _app("pages/7_evidence.py")
    at.selectbox[0].set_value("tiny")
    at.select_slider[1].set_value(1)
    at.select_slider[2].set_value(1)
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.success and "Done" in at.success[0].value
    warnings = [w.value for w in at.warning]
    assert any("“tiny” training budget" in w for w in warnings)
    assert any(w.startswith("3 grid points cannot support a correlation") for w in warnings)
    assert any("With 1 seed" in w for w in warnings)
