"""GeodesicResult.explore(): the Jupyter widget without a browser.

The pick starts at a_hat rounded as the app rounds it, moves on assignment, refuses values off
the simplex (from Python and from the browser's messages) and keeps the old pick; ``value`` is
the result's objective; ``dataset()`` exports and loads back; the payloads are the app's bytes;
a failing background part is a sentence on the widget; figures arrive by custom messages.
"""

from __future__ import annotations

import base64
import math

import numpy as np
import pytest
import traitlets

from geoviz.app.explorer_host.service import bootstrap_payload, geodesic_payload
from geoviz.app.explorer_host.service import has_embedding_view as app_has_embedding_view
from geoviz.app.services import caches as cache_services
from geoviz.app.services import datasets as dataset_services
from geoviz.app.services import geodesic as geodesic_services
from geoviz.app.session import SessionModel
from geoviz.app.settings import default_scenario
from geoviz.errors import GeovizError
from geoviz.explorer import payload as xp
from geoviz.explorer.widget import GeodesicExplorer, WeightsTraitError, has_embedding_view
from geoviz.export import export_dataset, load_export
from geoviz.geodesic.config import GeodesicConfig
from geoviz.geodesic.pipeline import fit_geodesic
from geoviz.geodesic.result import GeodesicResult
from geoviz.geodesic.weights import ENTRY_DECIMALS, SimplexWeights
from geoviz.ot.otdd_cost import OTDDConfig


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """The app's default scenario, small (as tests/test_explorer.py), fitted once."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GEOVIZ_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        mp.setenv("GEOVIZ_APP_N", "60")
        mp.setenv("GEOVIZ_APP_EMBED_N", "40")
        mp.setenv("GEOVIZ_EMBEDDING", "pca")
        cache_services.store().clear()
        model = SessionModel({})
        model.scenario = default_scenario().with_(n_target=120, n_reference=60)
        data = dataset_services.scenario_data(model)
        result = fit_geodesic(
            data.target, list(data.references), GeodesicConfig(otdd=OTDDConfig(epsilon=0.01))
        )
        yield model, result
        cache_services.store().clear()


@pytest.fixture
def quiet(fitted):
    """A widget without background parts (no bootstrap, no embedding)."""
    _, result = fitted
    return result.explore(bootstrap=0, embedding=False)


def test_weights_start_at_a_hat_rounded_as_the_app_rounds(fitted):
    model, result = fitted
    w = result.explore(bootstrap=0, embedding=False)
    assert isinstance(w, GeodesicExplorer) and w.result is result
    assert w.weights == model.current_weights(result.a_hat).tolist()
    assert w.weights == SimplexWeights.from_input(result.a_hat, result.m, ENTRY_DECIMALS).tolist()
    assert w.a_hat == [float(x) for x in result.a_hat]
    assert w._pending == [] and w.error == ""


def test_assignment_moves_the_pick_and_value_is_the_objective(quiet, fitted):
    _, result = fitted
    for target in ([0.5, 0.25, 0.25], np.array([1.0, 0.0, 0.0]), (0.2, 0.3, 0.5)):
        quiet.weights = target
        assert quiet.weights == [float(x) for x in target]
        assert quiet.value == pytest.approx(float(result.objective(target)), rel=0, abs=1e-12)
    quiet.weights = SimplexWeights.from_input([0.1, 0.6, 0.3], 3)
    assert quiet.weights == [0.1, 0.6, 0.3]
    quiet.weights = [0.123456, 0.3, 0.576544]  # rounded on the simplex to ENTRY_DECIMALS
    assert quiet.weights == [0.1235, 0.3, 0.5765] and math.fsum(quiet.weights) == 1.0
    assert quiet.value == float(result.objective(quiet.weights))


HOSTILE = [
    [0.5, 0.5],
    [0.25, 0.25, 0.25, 0.25],
    [0.5, 0.6, -0.1],
    [0.5, 0.5, 0.5],
    [0.2, 0.2, 0.2],
    [float("nan"), 0.5, 0.5],
    [float("inf"), 0.0, 0.0],
    [[0.2, 0.3, 0.5]],
    [],
    "0.2,0.3,0.5",
    None,
    {"a": 1},
    ["x", 0.5, 0.5],
    0.5,
]


@pytest.mark.parametrize("bad", HOSTILE, ids=lambda v: repr(v)[:30])
def test_off_simplex_values_are_refused_and_the_pick_stays(quiet, bad):
    quiet.weights = [0.2, 0.3, 0.5]
    with pytest.raises(traitlets.TraitError) as caught:
        quiet.weights = bad
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, WeightsTraitError)
    assert "refused weights" in str(caught.value) and "weights" in str(caught.value)
    assert quiet.weights == [0.2, 0.3, 0.5]


def test_values_from_the_browser_go_through_the_same_validation(quiet):
    """The JavaScript host sends ``{"kind": "pick", "weights", "seq"}`` as a custom message
    (``model.send``), which reaches ``_handle_custom_msg``, as from a kernel's comm."""
    quiet.weights = [0.2, 0.3, 0.5]
    quiet._handle_custom_msg({"kind": "pick", "weights": [0.6, 0.3, 0.1], "seq": 1}, [])
    assert quiet.weights == [0.6, 0.3, 0.1] and quiet._handled_seq == 1 and quiet.error == ""
    for seq, bad in enumerate(HOSTILE, start=2):
        quiet._handle_custom_msg({"kind": "pick", "weights": bad, "seq": seq}, [])
        assert quiet.weights == [0.6, 0.3, 0.1], bad
        assert quiet._handled_seq == seq  # the browser re-renders with the kept pick
        assert quiet.error.startswith("The browser's pick was refused"), quiet.error
    # odd messages are ignored, never raised into the kernel
    for content in (None, [], "pick", {"kind": "unknown"}, {"kind": "pick", "seq": True}):
        quiet._handle_custom_msg(content, [])
    assert quiet.weights == [0.6, 0.3, 0.1]
    assert quiet.receive_pick([0.0, 0.0, 1.0], 99) is True
    assert quiet.weights == [0.0, 0.0, 1.0] and quiet.error == ""


def _nested(depth: int, inner: object) -> object:
    """``inner`` wrapped in ``depth`` one-element lists (built without recursion)."""
    for _ in range(depth):
        inner = [inner]
    return inner


class _Hostile:
    """An object whose conversion to an array and whose ``repr`` both fail."""

    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("no array here")

    def __repr__(self):
        raise RuntimeError("no repr either")


#: issue 41: each raised RecursionError, OverflowError or ValueError instead of TraitError,
#: or was quoted whole in the message (70 MB for 10^7 weights) and in ``error``
REFUSED_BADLY = {
    "nested 5,000 deep": lambda: _nested(5_000, [0.2, 0.3, 0.5]),
    "nested 900 deep": lambda: _nested(900, [0.2, 0.3, 0.5]),
    "10**400": lambda: [10**400, 0, 0],
    "10**5000": lambda: [0, 10**5000, 0],
    "object array with 10**400": lambda: np.array([10**400, 0, 0], dtype=object),
    "10^7 weights": lambda: [0.1] * 10**7,
    "10^7-entry array": lambda: np.full(10**7, 0.1),
    "10 MB text": lambda: "w" * 10**7,
    "hostile __array__": _Hostile,
}


@pytest.mark.parametrize("name", list(REFUSED_BADLY))
def test_every_refusal_is_a_short_trait_error(quiet, name):
    """Assigned from Python or sent by the browser: one TraitError (a WeightsTraitError)
    that quotes at most a few dozen characters of the value, and the pick stays."""
    bad = REFUSED_BADLY[name]()
    quiet.weights = [0.2, 0.3, 0.5]
    with pytest.raises(traitlets.TraitError) as caught:
        quiet.weights = bad
    text = str(caught.value)
    assert isinstance(caught.value, WeightsTraitError) and text.startswith("refused weights")
    assert len(text) <= 300 and "\n" not in text, text[:400]
    assert "w" * 50 not in text and "0.1, 0.1, 0.1, 0.1, 0.1, 0.1" not in text
    assert quiet.weights == [0.2, 0.3, 0.5]
    assert quiet.receive_pick(bad, 7) is False
    assert quiet.weights == [0.2, 0.3, 0.5] and quiet._handled_seq == 7
    assert quiet.error.startswith("The browser's pick was refused") and len(quiet.error) <= 350
    assert quiet.receive_pick([0.5, 0.3, 0.2], 8) is True and quiet.error == ""


def test_a_figure_error_from_the_browser_is_quoted_short(quiet, tmp_path, monkeypatch):
    """A 10 MB reason from the browser, or a nested one, becomes a short sentence; an id
    that is not a number is ignored (it was used as a dict key: a list raised TypeError)."""
    monkeypatch.setattr(quiet, "send", lambda content, buffers=None: None)
    failed = quiet.save_figure(tmp_path / "g.png")
    quiet._handle_custom_msg({"kind": "figure", "id": [1], "error": "x"}, [])
    assert not failed.done()
    quiet._handle_custom_msg({"kind": "figure", "id": 1, "error": "e" * 10**7}, [])
    with pytest.raises(GeovizError) as caught:
        failed.result(0)
    assert len(str(caught.value)) <= 300
    nested = quiet.save_figure(tmp_path / "h.png")
    quiet._handle_custom_msg({"kind": "figure", "id": 2, "error": _nested(5_000, "e")}, [])
    with pytest.raises(GeovizError, match="could not draw") as caught:
        nested.result(0)
    assert len(str(caught.value)) <= 300
    assert not (tmp_path / "g.png").exists() and not (tmp_path / "h.png").exists()


def test_dataset_round_trips_through_export(quiet, fitted, tmp_path):
    _, result = fitted
    quiet.weights = [0.5, 0.25, 0.25]
    ds = quiet.dataset()
    expected = result.interpolate([0.5, 0.25, 0.25])
    np.testing.assert_array_equal(ds.features.numpy(), expected.features.numpy())
    written = export_dataset(ds, tmp_path / "p_a.npz")
    back = load_export(written.data_path)
    np.testing.assert_allclose(back.features.numpy(), ds.features.numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(back.soft_labels.numpy(), ds.soft_labels.numpy(), atol=1e-6)
    assert list(back.class_names) == list(ds.class_names)
    assert back.metadata["objective"] == pytest.approx(quiet.value)


def test_payloads_are_the_apps(fitted):
    model, result = fitted
    assert has_embedding_view(result) == app_has_embedding_view(result)
    w = result.explore()
    assert w._payload == geodesic_payload(model, result).data
    assert w.wait(120)
    assert w.error == "" and w._pending == []
    boot, error = geodesic_services.explorer_bootstrap(model.scenario, result, wait_seconds=None)
    assert error is None
    assert w._boot == bootstrap_payload(model, boot).data
    header, arrays = xp.decode(w._emb)
    assert header["mode"] == "embedding" and arrays["place"].shape[-1] == 2
    intervals = w.intervals
    assert intervals is not None
    assert float(intervals["value"].estimate) == pytest.approx(w.value)
    assert intervals["value"].low <= w.value <= intervals["value"].high
    assert w.bootstrap_result is not None and w.bootstrap_result.replicates == 200


def test_a_failing_background_part_is_a_sentence(fitted, monkeypatch):
    _, result = fitted

    def broken(*args, **kwargs):
        raise RuntimeError("no memory left\nat /some/where")

    monkeypatch.setattr(GeodesicResult, "bootstrap", broken)
    monkeypatch.setattr("geoviz.explorer.widget.fit_embedding", broken)
    w = result.explore()
    assert w.wait(60)
    assert w._pending == [] and w.intervals is None
    assert "The bootstrap intervals could not be computed (RuntimeError: no memory left" in w.error
    assert "The embedding view could not be computed" in w.error and "\n" not in w.error
    assert w._emb_error is not None and w._emb_error.startswith("The embedding view")


def test_save_figure_writes_what_the_browser_answers(quiet, tmp_path, monkeypatch):
    sent = []
    monkeypatch.setattr(quiet, "send", lambda content, buffers=None: sent.append(content))
    png = b"\x89PNG\r\n\x1a\n" + b"0" * 20
    future = quiet.save_figure(tmp_path / "f.png")
    assert not future.done() and sent[-1] == {"kind": "figure", "id": 1, "format": "png"}
    data = "data:image/png;base64," + base64.b64encode(png).decode()
    quiet._handle_custom_msg({"kind": "figure", "id": 1, "format": "png", "data": data}, [])
    assert future.result(0) == tmp_path / "f.png" and (tmp_path / "f.png").read_bytes() == png
    # a second view answering the same request changes nothing
    quiet._handle_custom_msg({"kind": "figure", "id": 1, "format": "png", "data": "x"}, [])
    svg_future = quiet.save_figure(tmp_path / "f.svg", kind="svg")
    quiet._handle_custom_msg({"kind": "figure", "id": 2, "data": "<svg>é</svg>"}, [])
    assert svg_future.result(0).read_text(encoding="utf-8") == "<svg>é</svg>"
    failed = quiet.save_figure(tmp_path / "g.png")
    quiet._handle_custom_msg({"kind": "figure", "id": 3, "error": "no canvas"}, [])
    with pytest.raises(GeovizError, match="no canvas"):
        failed.result(0)
    bad = quiet.save_figure(tmp_path / "h.png")
    quiet._handle_custom_msg({"kind": "figure", "id": 4, "data": "data:text/html,<b>"}, [])
    with pytest.raises(GeovizError, match="not a PNG"):
        bad.result(0)
    assert not (tmp_path / "g.png").exists() and not (tmp_path / "h.png").exists()
    with pytest.raises(GeovizError, match="figure kind"):
        quiet.save_figure(tmp_path / "f.pdf", kind="pdf")


def test_explore_passes_its_options(fitted):
    _, result = fitted
    w = result.explore(weights=[1, 0, 0], bootstrap=0, embedding=False)
    assert w.weights == [1.0, 0.0, 0.0] and w._pending == [] and w.wait(1)
    with pytest.raises(traitlets.TraitError):
        result.explore(weights=[2, 0, 0], bootstrap=0, embedding=False)
