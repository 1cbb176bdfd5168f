"""No choice that cannot work here (issue 32, item 3).

The Datasets lists offered ``torchvision:*`` entries on a server without torchvision, and
Apply replaced a working scenario with one whose pages showed only a red error. Entries
that cannot load are now left out (with one sentence saying which and why), a link
naming one gets a sentence, and Apply loads the new scenario's datasets before it
replaces the session's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from geoviz.app.links import scenario_to_token
from geoviz.app.scenario import Scenario
from geoviz.app.services import datasets as dataset_services
from geoviz.app.services.datasets import apply_scenario, unavailable_note
from geoviz.app.session import SessionModel
from geoviz.app.settings import AppSettings, default_scenario
from geoviz.data import registry, torchvision_sets
from geoviz.data.choice import DatasetChoice
from geoviz.errors import GeovizError

ROOT = Path(__file__).resolve().parents[1]
N = 120


@pytest.fixture
def no_torchvision(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as on a server without torchvision (``import torchvision`` fails)."""
    monkeypatch.setitem(sys.modules, "torchvision", None)


@pytest.fixture
def small_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GEOVIZ_APP_N", str(N))
    monkeypatch.setenv("GEOVIZ_EMBEDDING", "pca")
    monkeypatch.setenv("GEOVIZ_TRANSFER_BACKEND", "sequential")
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def test_registry_says_why_a_torchvision_entry_cannot_load(no_torchvision):
    assert not torchvision_sets.torchvision_installed()
    reason = registry.unavailable_reason("torchvision:mnist")
    assert reason is not None and "torchvision" in reason and "not installed" in reason
    assert registry.unavailable_reason("emnist") == reason  # aliases resolve first
    assert registry.unavailable_reason("mnist") is None  # bundled: always there
    names = [i.name for i in registry.list_datasets(available_only=True)]
    assert "mnist" in names and not any(n.startswith("torchvision:") for n in names)
    # the full list still describes them (the CLI's `geoviz datasets` table)
    assert "torchvision:mnist" in registry.dataset_names()


def test_dataset_lists_leave_out_what_cannot_load_and_say_why(no_torchvision, monkeypatch):
    model = SessionModel({}, AppSettings(n_default=200))
    tokens = list(dataset_services.choice_options(model))
    assert tokens and not any("torchvision:" in t for t in tokens), tokens
    note = unavailable_note()
    assert note is not None and note.startswith("Not offered on this server: ")
    assert "torchvision:mnist" in note and "torchvision, which is not installed" in note
    # where torchvision is installed they are offered (a download on first use)
    monkeypatch.setattr(torchvision_sets, "torchvision_installed", lambda: True)
    assert "registry:torchvision:mnist:train" in dataset_services.choice_options(model)
    assert unavailable_note() is None


def test_a_link_to_a_dataset_that_cannot_load_gives_a_sentence(no_torchvision, monkeypatch):
    settings = AppSettings(n_default=200)
    # built as on a server with torchvision, opened on one without
    with monkeypatch.context() as mp:
        mp.setattr(torchvision_sets, "torchvision_installed", lambda: True)
        link = default_scenario(settings).with_(target=DatasetChoice("torchvision:usps"))
        token = scenario_to_token(link)
    model = SessionModel({}, settings)
    before = model.scenario
    problems = model.restore({"scenario": token})
    assert model.scenario == before
    assert len(problems) == 1 and "could not be read" in problems[0]
    assert "'torchvision:usps' cannot be loaded on this server" in problems[0]
    with pytest.raises(GeovizError, match="needs torchvision"):
        Scenario(target=DatasetChoice("torchvision:usps"), references=before.references)


def test_apply_keeps_the_working_scenario_when_the_new_one_cannot_load(no_torchvision, monkeypatch):
    # offered (the package looks installed) but its load fails, as a download without network
    monkeypatch.setattr(torchvision_sets, "torchvision_installed", lambda: True)
    model = SessionModel({}, AppSettings(n_default=N))
    before = model.scenario
    broken = before.with_(target=DatasetChoice("torchvision:usps"))
    with pytest.raises(GeovizError, match="torchvision:usps"):
        apply_scenario(model, broken)
    assert model.scenario == before
    # a scenario that loads is applied, its datasets ready for the next page
    other = before.with_(target=DatasetChoice("usps", split="test"))
    data = apply_scenario(model, other)
    assert model.scenario == other and data.data_key == other.data_key()
    assert dataset_services.scenario_data_if_ready(other) is data


def test_datasets_page_apply_of_a_broken_choice_keeps_the_scenario(
    small_app, no_torchvision, monkeypatch
):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.switch_page("pages/1_datasets.py")
    at.run()
    assert not at.exception
    options = at.selectbox(key="form_target").options
    assert not any("torchvision" in o for o in options)
    assert any("Not offered on this server: torchvision:mnist" in c.value for c in at.caption)
    before = at.session_state[SessionModel.SCENARIO]

    # now offered (torchvision "installed"), but its load fails: Apply keeps the scenario
    monkeypatch.setattr(torchvision_sets, "torchvision_installed", lambda: True)
    at.run()
    at.selectbox(key="form_target").set_value("registry:torchvision:usps:train")
    submit = next(b for b in at.form_submit_button if b.label == "Apply scenario")
    submit.click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "was not applied (the current one is kept)" in errors[0], errors
    assert at.session_state[SessionModel.SCENARIO] == before
    # the pages still show the working scenario's datasets
    assert at.metric and at.metric[0].label.startswith("Q (target): ")
