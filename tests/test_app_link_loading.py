"""A link never replaces a working scenario with one that cannot load (issue 32, item 3).

A link naming a dataset that is offered here but does not load (a torchvision entry on a
server with torchvision and no network, a served file that does not parse) switched the
session's scenario, and every page then showed only a red error. The link's datasets are
now loaded before the scenario is taken, as Apply does; on failure the session keeps its
scenario and the visitor reads one sentence.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import pytest

from geoviz.app.links import scenario_to_token
from geoviz.app.scenario import Scenario
from geoviz.app.services import datasets as dataset_services
from geoviz.app.session import SessionModel
from geoviz.app.settings import AppSettings
from geoviz.data import torchvision_sets
from geoviz.data.choice import DatasetChoice

ROOT = Path(__file__).resolve().parents[1]
N = 120
NOT_LOADED = "The link's datasets could not be loaded on this server ("


@pytest.fixture
def offline_torchvision(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchvision entries offered (the package looks installed) but every load fails, as
    a download without network does."""
    monkeypatch.setitem(sys.modules, "torchvision", None)
    monkeypatch.setattr(torchvision_sets, "torchvision_installed", lambda: True)


def _app_loader(model: SessionModel):
    """The loader the app's pages give :meth:`SessionModel.restore` (widgets.app_page)."""
    return functools.partial(dataset_services.scenario_data, model)


def test_a_link_whose_download_fails_keeps_the_scenario(offline_torchvision):
    model = SessionModel({}, AppSettings(n_default=N))
    model.set_weights([0.2, 0.3, 0.5])
    before = model.scenario
    linked = before.with_(target=DatasetChoice("torchvision:usps"))
    problems = model.restore(
        {"scenario": scenario_to_token(linked), "a": "0.1,0.2,0.7"}, load=_app_loader(model)
    )
    assert model.scenario == before
    assert len(problems) == 1, problems
    assert problems[0].startswith(NOT_LOADED) and "torchvision:usps" in problems[0]
    assert problems[0].endswith("keeping the current scenario.")
    assert "\n" not in problems[0] and "Traceback" not in problems[0]


def test_a_link_to_a_served_file_that_does_not_parse_keeps_the_scenario(tmp_path):
    data = tmp_path / "served"
    data.mkdir()
    rng = np.random.default_rng(0)
    np.savez(data / "good.npz", x=rng.random((60, 4), dtype=np.float32), y=np.arange(60) % 3)
    (data / "bad.npz").write_bytes(b"PK\x03\x04 not a zip archive at all")
    settings = AppSettings(n_default=40, data_dirs=(("served", data.resolve()),))

    def linked(target: str) -> Scenario:
        return Scenario(
            DatasetChoice(target, source="server"),
            (DatasetChoice("iris"), DatasetChoice("iris", seed=1)),
            n_target=40,
            n_reference=40,
        )

    model = SessionModel({}, settings)
    before = model.scenario
    problems = model.restore(
        {"scenario": scenario_to_token(linked("served/bad.npz"))}, load=_app_loader(model)
    )
    assert model.scenario == before
    assert len(problems) == 1 and problems[0].startswith(NOT_LOADED), problems
    assert "served/bad.npz" in problems[0] and str(tmp_path) not in problems[0]

    # a file that parses is taken, stamped by what the file is (issue 41: the keys follow
    # the file), its datasets loaded for the page that follows
    good = linked("served/good.npz").stamped(settings.data_dirs)
    assert model.restore({"scenario": scenario_to_token(good)}, load=_app_loader(model)) == []
    assert model.scenario == good
    assert dataset_services.scenario_data_if_ready(good) is not None


def test_restore_loads_through_the_loader_it_is_given():
    model = SessionModel({}, AppSettings(n_default=N))
    before = model.scenario
    seen: list[Scenario] = []
    other = before.with_(seed=before.seed + 1)
    token = scenario_to_token(other)
    # the session's own scenario is not loaded again; a new one is, before it is taken
    assert model.restore({"scenario": scenario_to_token(before)}, load=seen.append) == []
    assert seen == []
    assert model.restore({"scenario": token}, load=seen.append) == []
    assert seen == [other] and model.scenario == other


@pytest.fixture
def small_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GEOVIZ_APP_N", str(N))
    monkeypatch.setenv("GEOVIZ_EMBEDDING", "pca")
    monkeypatch.setenv("GEOVIZ_TRANSFER_BACKEND", "sequential")
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def test_a_link_that_cannot_load_shows_a_sentence_and_the_working_scenario(
    small_app, offline_torchvision
):
    from streamlit.testing.v1 import AppTest

    settings = AppSettings.from_env()
    working = SessionModel({}, settings).scenario
    linked = working.with_(references=(DatasetChoice("torchvision:usps"), *working.references[1:]))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["scenario"] = scenario_to_token(linked)
    at.switch_page("pages/1_datasets.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [e.value for e in at.error] == []  # no red box: the page works on its scenario
    warnings = [w.value for w in at.warning]
    assert len(warnings) == 1 and "could not be loaded on this server" in warnings[0], warnings
    assert "torchvision:usps" in warnings[0].replace("\\", "")
    assert at.session_state[SessionModel.SCENARIO] == working
    assert at.metric and at.metric[0].label.startswith("Q (target): ")
