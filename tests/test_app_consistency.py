"""The small inconsistencies a newcomer met on every page (issue 45, item 5), each pinned here
(the browser's view of them: tests/test_walk_browser.py).

- The main block's top padding: a style rule in every page (no ~120 px above the title).
- "Common image size" only for image data; a vector preset's datasets read "P1", not
  "P1: P1".
- A preset whose loading was stopped by leaving the page is not dropped silently.
- Evidence: accuracies in percent everywhere (the bars, the tables, the study's figures),
  rounded at display (no "39.800000000000004"), and the bars' labels above their whiskers.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from geoviz.app.widgets import PAGE_STYLE
from geoviz.geodesic.distances import simplex_grid
from geoviz.transfer.experiment import MethodResult
from geoviz.transfer.study import GridStudy
from geoviz.transfer.study_stats import GridPoint
from geoviz.transfer.table import MethodComparison
from geoviz.viz.study import grid_points_table
from geoviz.viz.study_figure import comparison_figure, correlation_figure

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 600


def _comparison() -> MethodComparison:
    # 100 * 0.398 is 39.800000000000004 in floating point
    accuracies = {"otdd": (0.398, 0.412), "fewshot": (0.3, 0.31), "1nn": (0.2, 0.2)}
    results = tuple(
        MethodResult(method, seed, acc, None, 1.0, 0)  # type: ignore[arg-type]
        for method, accs in accuracies.items()
        for seed, acc in enumerate(accs)
    )
    return MethodComparison(results=results, weights=(), preset="tiny", k=5)


def _study(seeds: int = 2) -> GridStudy:
    grid = simplex_grid(3, 2)
    points = [
        GridPoint(i, tuple(float(v) for v in w), float(3 * w[0]), (0.398,) * seeds, 1.0)
        for i, w in enumerate(grid)
    ]
    return GridStudy(tuple(points), float("nan"), float("nan"), "cpu", 5, tuple(range(seeds)), 2)


def test_the_comparison_table_is_rounded_in_percent_at_display():
    comp = _comparison()
    frame = comp.display_frame()
    shown = frame.to_string()
    assert "39.800000000000004" not in shown and "0.398" not in shown
    otdd = frame.iloc[0].to_dict()
    assert otdd["mean accuracy (%)"] == 40.5 and otdd["accuracy per seed (%)"] == "39.8, 41.2"
    # the exact numbers stay in the summary
    assert comp.summary()[0]["accuracies"][0] == pytest.approx(39.8)


def test_the_bars_labels_stand_above_their_whiskers():
    rows = _comparison().summary()
    fig = comparison_figure(rows)
    (bar,) = fig.data
    assert bar.text is None  # no label at the bar's top, where the whisker is
    labels = {a.text: a for a in fig.layout.annotations}
    for row in rows:
        spread = f" ± {row['std']:.1f}" if row["std"] > 0 else ""
        label = labels[f"{row['mean']:.1f}{spread} %"]
        assert label.y == pytest.approx(row["mean"] + row["std"])  # the whisker's top
        assert label.yanchor == "bottom" and label.yshift > 0
    assert fig.layout.yaxis.range[1] > max(r["mean"] + r["std"] for r in rows)


def test_the_study_s_tables_and_figures_read_accuracy_in_percent():
    study = _study()
    frame = grid_points_table(study)
    assert list(frame["mean accuracy (%)"]) == [39.8] * len(study.points)
    assert "seed 0 (%)" in frame.columns and "accuracy_mean" not in frame.columns
    fig = correlation_figure(study, ["P1", "P2", "P3"])
    accuracy = [t for t in fig.data if t.name == "accuracy (%)"]
    assert accuracy and np.allclose(np.asarray(accuracy[0].marker.color, float), 39.8)
    assert "%" in accuracy[0].marker.colorbar.title.text
    scatter = correlation_figure(study, kind="scatter")
    assert np.allclose(np.asarray(scatter.data[0].y, float), 39.8)


# ------------------------------------------------------------------------- the pages (AppTest)


@pytest.fixture(scope="module")
def _small_app(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("app")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GEOVIZ_APP_N", "100")
        mp.setenv("GEOVIZ_APP_GRID", "10")
        mp.setenv("GEOVIZ_APP_EMBED_N", "40")
        mp.setenv("GEOVIZ_EMBEDDING", "pca")
        mp.setenv("GEOVIZ_TRANSFER_BACKEND", "sequential")
        mp.setenv("GEOVIZ_CACHE_DIR", str(tmp / "cache"))
        yield tmp


def _datasets_page(scenario=None):
    from streamlit.testing.v1 import AppTest

    from geoviz.app.session import SessionModel

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    if scenario is not None:
        at.session_state[SessionModel.SCENARIO] = scenario
    at.switch_page("pages/1_datasets.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _plain(text: str) -> str:
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text)


def test_every_page_starts_its_title_near_the_top(_small_app):
    at = _datasets_page()
    assert PAGE_STYLE in [h.proto.body for h in at.get("html")]
    assert "stMainBlockContainer" in PAGE_STYLE and "padding-top" in PAGE_STYLE


def test_a_vector_preset_has_no_image_size_and_no_doubled_names(_small_app):
    from geoviz.app.settings import AppSettings, preset_scenarios

    images = _datasets_page()
    assert "Common image size" in [s.label for s in images.selectbox]
    scenario = preset_scenarios(AppSettings(n_default=100))["2-D Gaussian mixtures"]
    at = _datasets_page(scenario)
    assert "Common image size" not in [s.label for s in at.selectbox]
    labels = [_plain(m.label) for m in at.metric]
    assert labels[:4] == ["Q (target)", "P1", "P2", "P3"], labels
    assert not any(re.search(r"\bP(\d): P\1\b", label) for label in labels)
    # the form still applies (the hidden size is the scenario's own)
    at.button(key="FormSubmitter:scenario_form-Apply scenario").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]


def test_a_preset_stopped_by_leaving_the_page_is_not_dropped_silently(_small_app):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    # what a Load preset run leaves when the visitor switches page before it ends
    at.session_state["geoviz_preset_loading"] = "Colour digits"
    at.switch_page("pages/6_about.py")
    at.run()
    warnings = [_plain(w.value) for w in at.warning]
    assert any("Colour digits" in w and "was not loaded" in w for w in warnings), warnings
    at.run()  # said once
    assert not any("Colour digits" in _plain(w.value) for w in at.warning)
