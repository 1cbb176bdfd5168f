"""Every page of the Streamlit app under streamlit.testing (AppTest), bundled data, small N.

The app's compute layer caches per process, so the first test that needs the
geodesic fits it (a few seconds at N = 150) and the others reuse it.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from geoviz.app.scenario import Scenario
from geoviz.app.session import SessionModel
from geoviz.data.choice import DatasetChoice

ROOT = Path(__file__).resolve().parents[1]
N = 150
TIMEOUT = 600  # a cold geodesic fit on 2 shared cores, with headroom


@pytest.fixture(autouse=True, scope="module")
def _small_app(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("app")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GEOVIZ_APP_N", str(N))
        mp.setenv("GEOVIZ_APP_GRID", "10")
        mp.setenv("GEOVIZ_APP_EMBED_N", "60")
        mp.setenv("GEOVIZ_EMBEDDING", "pca")
        # no Ray cluster inside the test process (its driver would outlive the module)
        mp.setenv("GEOVIZ_TRANSFER_BACKEND", "sequential")
        mp.setenv("GEOVIZ_ENCODER_PRESET", "tiny")
        mp.setenv("GEOVIZ_CACHE_DIR", str(tmp / "cache"))
        (tmp / "exports").mkdir()
        mp.setenv("GEOVIZ_EXPORT_ROOT", str(tmp / "exports"))
        yield tmp


def _app(page: str | None = "pages/1_datasets.py"):
    """A fresh session on ``page`` (``None``: the start page ``app.py``)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    if page is not None:
        at.switch_page(page)
    at.run()
    return at


def _open(at, page: str):
    at.switch_page(page)
    at.run()
    _assert_clean(at, page)
    return at


def _assert_clean(at, where: str) -> None:
    assert not at.exception, f"{where}: {[e.value for e in at.exception]}"
    assert not at.error, f"{where}: {[e.value for e in at.error]}"


def _plain(text: str) -> str:
    """Markdown as the visitor reads it: backslash escapes of ASCII punctuation dropped (the
    pages escape every name a visitor gave, ``geoviz.viz.report.markdown_literal``)."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text)


def _sidebar(at) -> str:
    return _plain("\n".join(m.value for m in at.sidebar.markdown))


def _arr(value) -> np.ndarray:
    """Plotly >= 6 writes numpy data as ``{"dtype", "bdata", "shape"}`` typed arrays."""
    if isinstance(value, dict) and "bdata" in value:
        out = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        if "shape" in value:
            out = out.reshape([int(k) for k in str(value["shape"]).split(",")])
        return out.astype(float)
    return np.asarray(value, dtype=float)


def _figures(at) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def _sliders(at, prefix: str = "geodesic_w_"):
    return [s for s in at.slider if str(s.key).startswith(prefix)]


# ---------------------------------------------------------------- page 1


def test_datasets_page_default_scenario_and_pairwise_otdd():
    at = _app()
    _assert_clean(at, "datasets")
    assert at.title[0].value == "1 · Datasets"
    assert [s.value for s in at.subheader][:3] == [
        "Samples",
        "Class histograms",
        "OTDD between all pairs",
    ]
    side = _sidebar(at)
    assert "mnist" in side and "P1 = fashion_mnist" in side and f"N = {N}" in side
    assert [_plain(m.label) for m in at.metric] == [
        "Q (target): mnist",
        "P1: fashion_mnist",
        "P2: usps",
        "P3: kmnist",
    ]
    figs = _figures(at)
    assert any(f["layout"].get("title", {}).get("text") == "Samples per class" for f in figs)
    at.button(key="pairwise_btn").click().run()
    _assert_clean(at, "pairwise")
    heat = [
        f for f in _figures(at) if f["layout"].get("title", {}).get("text") == "Pairwise OTDD d²"
    ]
    assert heat, "no pairwise OTDD heatmap"
    z = _arr(heat[0]["data"][0]["z"])
    assert (
        z.shape == (4, 4)
        and np.allclose(z, z.T)
        and np.allclose(np.diag(z), 0)
        and (z[0, 1:] > 0).all()
    )
    assert any("Closest single reference" in c.value for c in at.caption)


def test_invalid_upload_shows_the_library_error_inline():
    from geoviz.data.formats import load_upload
    from geoviz.errors import GeovizError

    bad = b"this is not a zip archive"
    with pytest.raises(GeovizError) as info:
        load_upload(bad, "broken.npz")
    at = _app()
    at.file_uploader(key="dataset_upload").set_value(
        ("broken.npz", bad, "application/octet-stream")
    )
    at.run()
    assert not at.exception
    assert [_plain(e.value) for e in at.error] == [str(info.value)]


def test_valid_upload_becomes_a_choice():
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    np.savez(buf, x=rng.random((60, 8, 8)).astype(np.float32), y=np.repeat(np.arange(3), 20))
    at = _app()
    at.file_uploader(key="dataset_upload").set_value(
        ("tiny.npz", buf.getvalue(), "application/octet-stream")
    )
    at.run()
    _assert_clean(at, "upload")
    assert any("tiny.npz: 60 samples, 3 classes" in _plain(s.value) for s in at.success)
    assert any("upload: tiny.npz" in o for o in at.selectbox(key="form_target").options)


def test_scenario_form_rejects_a_single_reference():
    at = _app()
    at.multiselect(key="form_refs").set_value(["registry:usps:train"])
    submit = next(b for b in at.form_submit_button if b.label == "Apply scenario")
    submit.click().run()
    assert not at.exception
    assert any("2 to 10 reference datasets" in e.value for e in at.error)
    # the scenario is unchanged
    assert at.session_state[SessionModel.SCENARIO].m == 3


# ---------------------------------------------------------------- pages 2-5 on the default scenario


def test_geodesic_page_release_sets_the_weights_url_and_reset():
    """The explorer (drawn in the browser) reports the weights on release; the page stores
    them once, rounded like every other entry, and the URL follows."""
    at = _open(_app(), "pages/3_geodesic.py")
    assert at.title[0].value == "3 · Generalized geodesic"
    assert "**â** =" in _sidebar(at)
    assert not _sliders(at)  # no server-side per-step widgets any more
    key = at.session_state[SessionModel.SCENARIO].key()
    assert at.session_state[SessionModel.WEIGHTS].get(key) is None
    at.session_state["geodesic_explorer"] = json.dumps(
        {"weights": [0.6, 0.25, 0.15], "seq": 1, "id": "t"}
    )
    at.run()
    _assert_clean(at, "after release")
    picked = at.session_state[SessionModel.WEIGHTS][key]
    assert list(picked) == pytest.approx([0.6, 0.25, 0.15]) and sum(picked) == pytest.approx(1.0)
    shown = at.query_params["a"]
    shown = shown if isinstance(shown, str) else shown[0]
    assert [float(x) for x in shown.split(",")] == pytest.approx(list(picked))
    # weights off the simplex from the browser are refused with a sentence, the pick is kept
    at.session_state["geodesic_explorer"] = json.dumps(
        {"weights": [0.9, 0.9, -0.8], "seq": 2, "id": "t"}
    )
    at.run()
    assert not at.exception and at.warning  # one sentence (the explorer stays), no traceback
    assert list(at.session_state[SessionModel.WEIGHTS][key]) == pytest.approx(list(picked))
    at.button(key="reset_weights").click().run()
    _assert_clean(at, "after reset")
    assert "a" not in at.query_params


def test_maps_page():
    from geoviz.vocabulary import DEFAULT_EPSILON

    at = _open(_app(), "pages/2_maps.py")
    assert at.title[0].value == "2 · OTDD maps"
    assert [s.value for s in at.subheader] == [
        "Target samples under each map",
        "Where does a mapped point come from?",
        "Label transition per reference",
        "Barycentric vs neural maps",
    ]
    # only the barycentric maps are fitted: the page offers the neural ones, in the background
    assert at.button(key="maps_fit_other").label == "Fit the other map (background)"
    assert at.radio(key="maps_method").value == "barycentric"
    # a static table (every column shows at 1280 px), indexed by the reference
    df = next(t.value.reset_index() for t in at.table if t.value.index.name == "reference P_i")
    assert list(df["reference P_i"]) == ["fashion_mnist", "usps", "kmnist"]
    assert (df["OTDD d²(Q, P_i)"] > 0).all()
    assert [_plain(t.label) for t in at.tabs][-3:] == [
        "P1: fashion_mnist",
        "P2: usps",
        "P3: kmnist",
    ]
    titles = [f["layout"].get("title", {}).get("text", "") for f in _figures(at)]
    assert sum(t.startswith("Label transition") for t in titles) == 3
    assert any("OTDD d²(Q, fashion_mnist)" in _plain(m.value) for m in at.markdown)

    # the default scenario uses the library's default (sharp) epsilon
    assert at.session_state[SessionModel.SCENARIO].epsilon == DEFAULT_EPSILON
    assert at.select_slider(key="maps_eps").value == DEFAULT_EPSILON
    # effective neighbours and label confidence next to every map, equal to the table's
    assert [_plain(m.label) for m in at.metric] == ["effective neighbours", "label confidence"] * 3
    values = [float(m.value) for m in at.metric]
    neighbours, confidence = values[0::2], values[1::2]
    np.testing.assert_allclose(neighbours, df["effective neighbours"], atol=0.051)
    np.testing.assert_allclose(confidence, df["label confidence"], atol=0.0051)
    assert all(1 <= v <= N for v in neighbours) and all(0.1 <= c <= 1 for c in confidence)
    blurry_warnings = [w.value for w in at.warning if "Blurry map" in w.value]
    assert len(blurry_warnings) == sum(v > 10 for v in neighbours)

    # teaching panel: 3 random target points, 6 neighbours each, then the mapped point
    teach = next(
        f for f in _figures(at) if "comes from" in f["layout"].get("title", {}).get("text", "")
    )
    assert teach["layout"]["title"]["text"].startswith("Where T1(x) comes from")
    texts = [a["text"] for a in teach["layout"]["annotations"]]
    cells = texts[: 3 * 8]
    assert len(cells) == 24 and texts[24:26] == ["<b>x ∈ Q</b>", "<b>#1</b>"]
    assert all("neighb." in c for c in cells[7::8])
    assert any("w " in c for c in cells)
    table = at.dataframe[0].value
    assert set(table["target #"]) == {int(c.split()[0][1:]) for c in cells[0::8]}
    assert (table["weight"] > 0).all() and (
        table.groupby("target #")["weight"].sum() <= 1 + 1e-5
    ).all()

    # chosen points, fewer neighbours, another map
    at.text_input(key="teach_indices").set_value("5, 0").run()
    at.slider(key="teach_k").set_value(2).run()
    at.selectbox(key="teach_map").set_value(1).run()
    _assert_clean(at, "teaching panel")
    teach = next(
        f for f in _figures(at) if "comes from" in f["layout"].get("title", {}).get("text", "")
    )
    assert teach["layout"]["title"]["text"].startswith("Where T2(x) comes from: the 2 largest")
    texts = [a["text"] for a in teach["layout"]["annotations"]]
    assert texts[0].startswith("#5 ·") and texts[4].startswith("#0 ·")
    at.text_input(key="teach_indices").set_value("0, 99999").run()
    assert not at.exception
    assert any("out of range" in w.value for w in at.warning)


@pytest.mark.filterwarnings("ignore::geoviz.errors.BlurWarning")  # the page shows its own
def test_maps_page_epsilon_slider_refits_and_warns_when_blurry():
    from geoviz.vocabulary import DEFAULT_EPSILON

    at = _open(_app(), "pages/2_maps.py")
    sharp = [float(m.value) for m in at.metric][0::2]
    at.select_slider(key="maps_eps").set_value(0.05).run()
    _assert_clean(at, "epsilon 0.05")
    assert at.session_state[SessionModel.SCENARIO].epsilon == 0.05
    assert at.select_slider(key="maps_eps").value == 0.05
    blurry = [float(m.value) for m in at.metric][0::2]
    assert all(b > s for b, s in zip(blurry, sharp, strict=True))
    warnings = [w.value for w in at.warning if "Blurry map" in w.value]
    assert len(warnings) == sum(v > 10 for v in blurry) >= 1
    assert all(f"Lower ε above (default {DEFAULT_EPSILON:g})" in w for w in warnings)
    # back to the default: the earlier geodesic, no warning
    at.select_slider(key="maps_eps").set_value(DEFAULT_EPSILON).run()
    _assert_clean(at, "epsilon back to default")
    assert [float(m.value) for m in at.metric][0::2] == sharp
    assert not [w for w in at.warning if "Blurry map" in w.value]


def test_teaching_indices_parse_or_draw():
    from geoviz.app.services.maps import teaching_indices
    from geoviz.errors import GeovizError

    drawn = teaching_indices(100, 3, seed=1)
    assert drawn.shape == (3,) and len(set(drawn.tolist())) == 3 and (drawn < 100).all()
    np.testing.assert_array_equal(drawn, teaching_indices(100, 3, seed=1))
    assert teaching_indices(100, 3, seed=0, text=" 7, 3 7 ").tolist() == [7, 3]
    assert teaching_indices(2, 5, seed=0).shape == (2,)
    for bad, msg in (
        ("a, 1", "whole numbers"),
        ("100", "out of range"),
        ("1,2,3,4,5,6,7,8,9", "at most"),
    ):
        with pytest.raises(GeovizError, match=msg):
            teaching_indices(100, 3, seed=0, text=bad)


def test_export_page_offers_a_registered_format(tmp_path):
    """Issue 24: a format registered with geoviz.export (the toy one of the tests) is offered
    on the Export page and downloads as it writes, with nothing in the app changed."""
    import toy_export_format

    from geoviz.app.services.caches import store
    from geoviz.export import load_export, register_format, unregister_format

    register_format(toy_export_format.SPEC)
    try:
        at = _open(_app(), "pages/5_export.py")
        box = at.selectbox(key="export_fmt")
        assert any("toyjson" in o for o in box.options)
        box.set_value("toyjson").run()
        at.button(key="export_prepare").click().run()
        _assert_clean(at, "export prepare (toyjson)")
        assert any("json.load" in c.value for c in at.code)  # the format's own snippet
        data, filename, mime = next(
            v
            for k, v in store().derived.items()
            if isinstance(k, tuple) and k[0] == "export" and k[3] == "toyjson"
        )
        assert filename.endswith(".toyjson") and mime == "application/json"
        (tmp_path / filename).write_bytes(data)
        assert load_export(tmp_path / filename).n_samples == N
    finally:
        unregister_format(toy_export_format.NAME)


def test_export_page_download_bytes_load_back(tmp_path):
    from geoviz.app.services.caches import store
    from geoviz.export import load_export

    at = _open(_app(), "pages/5_export.py")
    assert at.title[0].value == "5 · Export"
    at.selectbox(key="export_fmt").set_value("npz").run()
    at.button(key="export_prepare").click().run()
    _assert_clean(at, "export prepare")
    assert len(at.get("download_button")) == 1
    assert any("np.load" in c.value for c in at.code)
    # the bytes the download button serves, from the app's cache
    entries = [
        v
        for k, v in store().derived.items()
        if isinstance(k, tuple) and k[0] == "export" and k[3] == "npz"
    ]
    assert entries, "no export payload cached"
    data, filename, mime = entries[-1]
    assert filename.endswith(".npz") and mime
    path = tmp_path / filename
    path.write_bytes(data)
    ds = load_export(path)
    assert ds.n_samples == N and len(ds.class_names) == 30
    a_hat = np.asarray(ds.metadata["weights"])
    assert a_hat.shape == (3,) and a_hat.sum() == pytest.approx(1.0)

    # save to folder writes data + manifest that load back, only inside the export root;
    # a hostile sub-folder is reduced to one safe name in it
    root = Path(os.environ["GEOVIZ_EXPORT_ROOT"])
    outside = tmp_path / "outside"
    at.text_input(key="export_subfolder").set_value(f"../../{outside}/saved").run()
    at.button(key="export_save").click().run()
    _assert_clean(at, "export save")
    assert at.success and "Wrote" in at.success[0].value
    assert str(tmp_path) not in at.success[0].value  # names relative to the root only
    assert not outside.exists()
    (saved,) = [p for p in root.iterdir() if p.is_dir()]
    assert saved.name.endswith("saved") and ".." not in saved.name
    written = sorted(saved.iterdir())
    assert any(p.name.endswith(".manifest.json") for p in written)
    data_file = next(p for p in written if p.suffix == ".npz")
    assert load_export(data_file).n_samples == N
    before = data_file.read_bytes()

    # saving again refuses, says how to replace, and leaves the first file alone
    at.button(key="export_save").click().run()
    assert at.error and "Overwrite existing files" in at.error[0].value
    assert data_file.read_bytes() == before
    at.checkbox(key="export_overwrite").check().run()
    at.button(key="export_save").click().run()
    _assert_clean(at, "export overwrite")
    assert at.success and "Wrote" in at.success[0].value


def test_export_manifest_carries_the_intervals_of_the_geodesic_page(tmp_path):
    """Issue 32: the app's exports wrote ``"uncertainty": null`` although the Geodesic page
    had shown the bootstrap intervals; they now carry the very bootstrap the explorer drew
    (the CLI's ``geoviz project --bootstrap --out`` block), in the download and on disk."""
    from geoviz.app.services.caches import store
    from geoviz.app.services.geodesic import (
        EXPLORER_REPLICATES,
        explorer_bootstrap,
        geodesic_if_ready,
    )

    at = _open(_app(), "pages/3_geodesic.py")
    scenario = at.session_state[SessionModel.SCENARIO]
    result = geodesic_if_ready(scenario)
    # the intervals the page shows: the explorer's bootstrap of this scenario
    shown, error = explorer_bootstrap(scenario, result, wait_seconds=None)
    assert error is None and shown is not None
    expected = shown.manifest()
    assert expected["a_hat_low"] and expected["replicates"] == EXPLORER_REPLICATES

    _open(at, "pages/5_export.py")
    assert any("bootstrap intervals of page 3" in c.value for c in at.caption)
    at.selectbox(key="export_fmt").set_value("npz").run()
    # a hard-label seed no other test uses: this file is prepared here, not found ready
    at.number_input(key="export_label_seed").set_value(7).run()
    at.button(key="export_prepare").click().run()
    _assert_clean(at, "export prepare")
    data = next(
        v[0]
        for k, v in store().derived.items()
        if isinstance(k, tuple) and k[0] == "export" and k[3] == "npz" and k[5] == 7
    )
    with np.load(io.BytesIO(data)) as npz:
        manifest = json.loads(str(npz["manifest_json"]))
    assert manifest["uncertainty"] == json.loads(json.dumps(expected))

    # saved on the server: the manifest file beside the data says the same
    at.text_input(key="export_subfolder").set_value("with_intervals").run()
    at.button(key="export_save").click().run()
    _assert_clean(at, "export save")
    root = Path(os.environ["GEOVIZ_EXPORT_ROOT"]) / "with_intervals"
    (written,) = root.glob("*.manifest.json")
    saved = json.loads(written.read_text(encoding="utf-8"))
    assert saved["uncertainty"] == manifest["uncertainty"]


def test_about_page():
    at = _open(_app(), "pages/6_about.py")
    assert at.title[0].value == "6 · About the method"
    assert len(at.get("plotly_chart")) == 1
    assert len(at.latex) >= 4
    text = "\n".join(m.value for m in at.markdown)
    assert "Sharp or blurry maps: ε" in text and "relative to the" in text
    assert "effective neighbours" in text and "label confidence" in text and "0.001" in text


# ---------------------------------------------------------------- other scenario shapes


def _with_scenario(scenario: Scenario, page: str):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.session_state[SessionModel.SCENARIO] = scenario
    at.run()
    return _open(at, page)


def test_two_references_release_two_weights():
    scenario = Scenario(
        target=DatasetChoice("mnist"),
        references=(DatasetChoice("usps"), DatasetChoice("kmnist")),
        n_target=80,
        n_reference=80,
    )
    at = _with_scenario(scenario, "pages/3_geodesic.py")
    at.session_state["geodesic_explorer"] = json.dumps({"weights": [0.3, 0.7], "seq": 1, "id": "t"})
    at.run()
    _assert_clean(at, "m=2 release")
    assert "0.3,0.7" in str(at.query_params["a"])


def test_four_references_release_four_weights():
    scenario = Scenario(
        target=DatasetChoice("mnist", split="test"),
        references=tuple(DatasetChoice(n) for n in ("mnist", "fashion_mnist", "usps", "kmnist")),
        n_target=60,
        n_reference=60,
    )
    at = _with_scenario(scenario, "pages/3_geodesic.py")
    at.session_state["geodesic_explorer"] = json.dumps(
        {"weights": [0.1, 0.2, 0.3, 0.4], "seq": 1, "id": "t"}
    )
    at.run()
    _assert_clean(at, "m=4 release")
    assert "0.1,0.2,0.3,0.4" in str(at.query_params["a"])


def test_two_dimensional_preset_shows_datasets_and_mixup_comparison():
    from geoviz.app.settings import AppSettings, preset_scenarios

    scenario = preset_scenarios(AppSettings(n_default=N))["2-D Gaussian mixtures"]
    at = _with_scenario(scenario, "pages/3_geodesic.py")
    titles = [f["layout"].get("title", {}).get("text", "") for f in _figures(at)]
    # the moving P_a scatter is drawn in the browser (test_browser: test_explorer_*); the
    # server draws the OT-maps-vs-mixup comparison at the released weights
    assert any("different couplings" in t for t in titles)
    _open(at, "pages/1_datasets.py")
    assert any(
        f["layout"].get("title", {}).get("text") == "Q and the references" for f in _figures(at)
    )
    _open(at, "pages/4_mccann.py")


def test_few_shot_target_reports_pseudo_labels_and_fits():
    from geoviz.data.choice import FewShotOptions

    scenario = Scenario(
        target=DatasetChoice("mnist", split="test"),
        references=(DatasetChoice("usps"), DatasetChoice("kmnist"), DatasetChoice("fashion_mnist")),
        n_target=100,
        n_reference=100,
        few_shot=FewShotOptions(enabled=True, k=3, n_neighbors=1),
    )
    at = _with_scenario(scenario, "pages/1_datasets.py")
    info = " ".join(i.value for i in at.info)
    assert (
        "Few-shot target: 30 labelled samples" in info and "label-spreading pseudo-labels" in info
    )
    assert "few-shot: 3 labels per class" in _sidebar(at)
    # the space is measured on the 30 labelled points, and the fit keeps that one choice
    assert "labelled 1-NN κ" in _sidebar(at)
    _open(at, "pages/3_geodesic.py")
    assert "**â** =" in _sidebar(at)
    from geoviz.app.services.geodesic import geodesic_if_ready

    result = geodesic_if_ready(scenario)
    assert result is not None and result.space_choice is not None
    assert result.space_sentence in _sidebar(at)


# ---------------------------------------------------------------- issue 7 (browser review)


def test_geodesic_page_tex_and_one_weight_format():
    import re

    at = _open(_app(), "pages/3_geodesic.py")
    # the (2,Q) expander renders its formulas with st.latex / $...$, no raw TeX in prose
    tex = [el.value for el in at.latex]
    assert any(r"\mathcal{W}^2_{2,Q}(P_i, P_j)" in t for t in tex), tex
    prose = [m.value for m in at.expander[0].markdown]
    for text in prose:
        # Markdown's escapes of punctuation (dataset names in the table: fashion\_mnist) are
        # not TeX; a backslash before a letter would be
        plain = re.sub(r"\\[!-/:-@\[-`{-~]", "", text)
        outside = re.sub(r"\$[^$]*\$", "", plain)
        assert "_{" not in outside and "\\" not in outside, text
    # the sidebar's a_hat and the page's summary show the same 2-decimal numbers
    sidebar = next(m.value for m in at.sidebar.markdown if m.value.startswith("**â** ="))
    summary = next(m.value for m in at.markdown if m.value.startswith("**Picked a** ="))
    numbers = re.findall(r"\d+\.\d+", sidebar)
    assert len(numbers) == 3 and summary.endswith(sidebar.split(" = ", 1)[1]), (sidebar, summary)


def test_download_datasets_say_they_fail_offline():
    from geoviz.app.services.datasets import choice_caption
    from geoviz.data.registry import list_datasets

    infos = list_datasets()
    assert any(not i.offline for i in infos)
    for info in infos:
        caption = choice_caption(DatasetChoice(info.name))
        assert ("fails offline" in caption) == (not info.offline), caption


# ---------------------------------------------------------------- browser-found bugs (form sync, N cap, favicon)


def _form_state(at) -> dict:
    return {
        "target": at.selectbox(key="form_target").value,
        "refs": list(at.multiselect(key="form_refs").value),
        "nq": at.number_input(key="form_nq").value,
        "np": at.number_input(key="form_np").value,
    }


def test_load_preset_after_apply_updates_the_form_and_apply_keeps_the_preset():
    from geoviz.app.settings import AppSettings, preset_scenarios

    at = _app()
    # own choices: Q = USPS, references MNIST and KMNIST, 60 samples each
    at.selectbox(key="form_target").set_value("registry:usps:train")
    at.multiselect(key="form_refs").set_value(["registry:mnist:train", "registry:kmnist:train"])
    at.number_input(key="form_nq").set_value(60)
    at.number_input(key="form_np").set_value(60)
    next(b for b in at.form_submit_button if b.label == "Apply scenario").click().run()
    _assert_clean(at, "apply own choices")
    own = at.session_state[SessionModel.SCENARIO]
    assert own.target.name == "usps" and own.m == 2 and own.n_target == 60
    assert _form_state(at)["target"] == "registry:usps:train"

    name = "2-D Gaussian mixtures"
    preset = preset_scenarios(AppSettings(n_default=N))[name]
    at.selectbox(key="preset_name").set_value(name)
    at.button(key="load_preset").click().run()
    _assert_clean(at, "load preset")
    assert at.session_state[SessionModel.SCENARIO] == preset
    # a browser keeps the values its form widgets had unless the server sets them (set_value):
    # model that, so the old scenario would come back here without the fix
    stale = {"form_target": "registry:usps:train", "form_nq": 60, "form_np": 60}
    for key, old in stale.items():
        widget = at.get("selectbox" if key == "form_target" else "number_input")
        widget = next(w for w in widget if w.key == key)
        if not widget.proto.set_value:
            widget.set_value(old)
    refs = at.multiselect(key="form_refs")
    if not refs.proto.set_value:
        refs.set_value(["registry:mnist:train", "registry:kmnist:train"])
    # the form shows the preset, not the scenario applied before
    assert _form_state(at) == {
        "target": preset.target.token,
        "refs": [r.token for r in preset.references],
        "nq": preset.n_target,
        "np": preset.n_reference,
    }
    # pressing Apply without edits keeps the preset
    next(b for b in at.form_submit_button if b.label == "Apply scenario").click().run()
    _assert_clean(at, "apply after preset")
    assert at.session_state[SessionModel.SCENARIO].key() == preset.key()
    assert _form_state(at)["target"] == preset.target.token


def test_sidebar_shows_actual_sample_counts_and_the_cap():
    rng = np.random.default_rng(1)
    buf = io.BytesIO()
    np.savez(buf, x=rng.random((60, 8, 8)).astype(np.float32), y=np.repeat(np.arange(3), 20))
    at = _app()
    at.file_uploader(key="dataset_upload").set_value(
        ("small60.npz", buf.getvalue(), "application/octet-stream")
    )
    at.run()
    assert any("upload: small60.npz" in o for o in at.selectbox(key="form_target").options)
    (ref,) = at.session_state[SessionModel.UPLOADS].values()
    token = "upload:" + ref.key  # a private key, not the file's sha256
    assert ref.key != hashlib.sha256(buf.getvalue()).hexdigest()
    assert f"N = {N}" in _sidebar(at) and "N capped at" not in _sidebar(at)
    # Q = the upload with the requested N = 150 (it has only 60 samples)
    at.selectbox(key="form_target").set_value(token)
    submit = next(b for b in at.form_submit_button if b.label == "Apply scenario")
    submit.click().run()
    _assert_clean(at, "apply small target")
    scenario = at.session_state[SessionModel.SCENARIO]
    assert scenario.target.source == "upload" and scenario.n_target == N
    side = _sidebar(at)
    assert "**Q** (target): upload: small60.npz, N = 60" in side
    assert "N capped at 60 for upload: small60.npz (it has only 60 samples)" in side
    assert f"N = {N} per reference" in side
    # issue 26, item 6: the count alone (a unit was cut to "2000 sa…"), the shape without an arrow
    assert at.metric[0].value == "60"
    assert at.metric[0].proto.delta.startswith("samples · ")
    assert at.metric[0].proto.direction == at.metric[0].proto.NONE  # no ↑ on a caption


def test_page_icon_is_local_no_network():
    import ast

    def config_calls(path: Path) -> tuple[ast.Module, list[ast.Call]]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "set_page_config"
        ]
        return tree, calls

    # every page opens through geoviz.app.widgets.app_page, the one place with page config
    for script in [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]:
        assert not config_calls(script)[1], f"{script.name} sets its own page config"
        assert "app_page(" in script.read_text(encoding="utf-8"), script.name
    tree, calls = config_calls(ROOT / "geoviz" / "app" / "widgets.py")
    assert len(calls) == 1
    icon_kw = [kw for kw in calls[0].keywords if kw.arg == "page_icon"]
    assert icon_kw, "set_page_config has no page_icon: the browser falls back to a CDN icon"
    consts = {
        n.targets[0].id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
    }
    value = icon_kw[0].value
    icon = consts[value.id] if isinstance(value, ast.Name) else value.value
    # a single emoji character: the browser draws it as an inline SVG (no font CDN, no URL)
    assert isinstance(icon, str) and len(icon) == 1 and not icon.isascii()


# ---------------------------------------------------------------- page 7


def test_evidence_page_runs_the_experiments_in_the_background():
    import time

    at = _open(_app(), "pages/7_evidence.py")
    assert at.title[0].value == "7 · Evidence"
    # nothing runs before the user asks: the only charts are the stored studies
    charts = at.get("plotly_chart")
    assert charts and all(str(c.key).startswith("stored_study_") for c in charts)
    at.select_slider[0].set_value(2)  # k
    at.selectbox[0].set_value("tiny")
    at.select_slider[1].set_value(1)  # grid resolution: 3 points
    at.select_slider[2].set_value(1)  # seeds
    at.button[0].click().run()
    _assert_clean(at, "evidence start")
    deadline = time.monotonic() + TIMEOUT
    while not at.success and time.monotonic() < deadline:
        time.sleep(1.0)
        at.run()
        _assert_clean(at, "evidence polling")
    assert at.success and "Done" in at.success[0].value
    figures = _figures(at)
    bars = next(f for f in figures if f["data"][0]["type"] == "bar")
    means = _arr(bars["data"][0]["y"])
    assert len(means) == 4 and np.all((means >= 0) & (means <= 100))
    study = next(f for f in figures if any(t["type"] == "scatterternary" for t in f["data"]))
    assert len(study["data"]) >= 2  # W² and accuracy panels
    labels = [m.label for m in at.metric]
    assert "Pearson r" in labels and "Spearman ρ" in labels
    # the same request again is read from the store: no new job
    at.run()
    assert at.success


def test_evidence_page_shows_the_stored_studies_with_their_intervals():
    """The measured studies shipped in assets/evidence show before anything runs: both
    targets' Pearson r with its bootstrap interval, the W² table and a sentence each."""
    from geoviz.app.services.stored_evidence import stored_studies
    from geoviz.viz.study import format_estimate

    at = _app("pages/7_evidence.py")
    _assert_clean(at, "evidence stored")
    assert at.header[0].value == "Stored study (measured)"
    stored = {s.target: s.study for s in stored_studies().studies}
    assert set(stored) == {"mnist", "fashion_mnist"}
    # static tables (every column shows at 1280 px), indexed by the target
    tables = [t.value.reset_index() for t in at.table]
    correlations = next(d for d in tables if "Pearson r [95% CI] (p)" in d)
    shown = dict(zip(correlations["target Q"], correlations["Pearson r [95% CI] (p)"], strict=True))
    for target, study in stored.items():
        pearson = study.statistics.pearson
        assert pearson.interval is not None
        assert shown[target] == format_estimate(pearson)
        assert (
            f"{pearson.r:+.3f} [{pearson.interval[0]:+.3f}, {pearson.interval[1]:+.3f}]"
            in (shown[target])
        )
    assert shown["mnist"].startswith("-0.867") and shown["fashion_mnist"].startswith("+0.181")
    texts = "\n".join(m.value for m in at.markdown)
    assert "mnist: strong negative correlation" in texts and "excludes 0" in texts
    assert "fashion_mnist: no correlation shown" in texts and "includes 0" in texts
    w_table = next(d for d in tables if "W² range" in d)
    assert list(w_table["target Q"]) == sorted(stored)
    scatters = [
        f
        for f in _figures(at)
        if f["data"][0]["type"] == "scatter" and f["data"][0].get("error_y", {}).get("visible")
    ]
    assert len(scatters) == 2 and all(len(_arr(f["data"][0]["x"])) == 36 for f in scatters)
    captions = "\n".join(c.value for c in at.caption)
    assert "5 seeds" in captions and "grid resolution 7 (36 points)" in captions


def test_evidence_page_refuses_a_corrupt_stored_study_with_a_sentence(tmp_path, monkeypatch):
    from geoviz.app.services import stored_evidence

    good = stored_evidence.evidence_dir() / "study_mnist.json"
    (tmp_path / "study_mnist.json").write_text(good.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "study_broken.json").write_text('{"points": [', encoding="utf-8")
    monkeypatch.setattr(stored_evidence, "evidence_dir", lambda: tmp_path)
    at = _app("pages/7_evidence.py")
    assert not at.exception, [e.value for e in at.exception]
    warnings = [w.value for w in at.warning]
    assert warnings == [
        "The stored study study_broken.json could not be read (JSONDecodeError); it is left out."
    ]
    assert "Traceback" not in warnings[0]
    # the readable study still shows
    assert any("mnist: strong negative correlation" in m.value for m in at.markdown)


# ---------------------------------------------------------------- neural maps (issue 9)


@pytest.fixture
def fast_neural(monkeypatch):
    """The "tiny" neural budget cut to a few steps (the app runs in this process)."""
    import dataclasses

    from geoviz.maps import neural_config

    small = dataclasses.replace(
        neural_config.NEURAL_PRESETS["tiny"], iterations=20, eval_every=10, classifier_iterations=20
    )
    monkeypatch.setitem(neural_config.NEURAL_PRESETS, "tiny", small)
    return small


def _page_text(at) -> str:
    """Everything a page prints as text: markdown, captions, metrics, tables, alerts."""
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [f"{m.label} {m.value}" for m in at.metric]
    parts += [w.value for w in (*at.warning, *at.info, *at.success)]
    parts += [d.value.to_string() for d in (*at.dataframe, *at.table)]
    return _plain("\n".join(parts))  # names are escaped Markdown


def test_maps_page_neural_maps_and_side_by_side(fast_neural):
    from geoviz.viz.report import NO_PLAN

    scenario = Scenario(
        target=DatasetChoice("mnist"),
        references=(DatasetChoice("usps"), DatasetChoice("fashion_mnist")),
        n_target=40,
        n_reference=40,
        image_size=16,
        map_method="neural",
        neural_preset="tiny",
    )
    at = _with_scenario(scenario, "pages/2_maps.py")
    assert "OTDD maps: neural (tiny budget)" in _sidebar(at)
    assert at.radio(key="maps_method").value == "neural"
    assert at.selectbox(key="maps_budget").value == "tiny"
    assert [s.value for s in at.subheader] == [
        "Target samples under each map",
        "What does a generated point look like?",
        "Label transition per reference",
        "Barycentric vs neural maps",
    ]
    # no plan: no effective neighbours metric, "n/a" instead of NaN everywhere
    assert [_plain(m.label) for m in at.metric] == [
        "label confidence",
        "nearest-reference ratio",
    ] * 2
    table = next(t.value for t in at.table if t.value.index.name == "reference P_i")
    assert (table["effective neighbours"] == NO_PLAN).all() and "held-out OT" in table
    assert "nan" not in _page_text(at).lower()
    titles = [f["layout"].get("title", {}).get("text", "") for f in _figures(at)]
    assert any(
        t.startswith("T1(x) next to real data: the 4 closest samples of usps") for t in titles
    )
    assert at.dataframe[0].value.columns[-1] == "distance"

    # fit the barycentric maps of the same data; then both side by side on the same points
    at.button(key="maps_fit_other").click().run()
    _assert_clean(at, "fit the other map")
    assert "nan" not in _page_text(at).lower()
    figs = _figures(at)
    side = [f for f in figs if f["layout"].get("title", {}).get("text", "").startswith("P")]
    assert [f["layout"]["title"]["text"] for f in side] == ["P1: usps", "P2: fashion_mnist"]
    for f in side:
        heads = [a["text"] for a in f["layout"]["annotations"] if a["text"].startswith("<b>")]
        assert heads[:1] == ["<b>Q sample<br>x</b>"]
        assert heads[1].startswith("<b>barycentric") and heads[2].startswith("<b>neural")
        assert f["data"][0]["type"] == "image"
    # the button and the progress box are gone once both maps are there
    assert not [b for b in at.button if b.key == "maps_fit_other"]
    # the comparison's tables (the summary table above them is indexed by the reference)
    compare = [t.value for t in at.table if t.value.index.name != "reference P_i"]
    assert len(compare) == 2
    assert list(compare[0].columns) == ["barycentric", "neural"]
    assert compare[0].loc["effective neighbours", "neural"] == NO_PLAN
    agree = compare[0].loc["hard labels agree"]
    assert agree["barycentric"] == agree["neural"] and agree["neural"].endswith("%")
    # same points under both maps: one x column, the same captions in each panel
    first = [a["text"] for a in side[0]["layout"]["annotations"] if a["text"].startswith("#")]
    second = [a["text"] for a in side[1]["layout"]["annotations"] if a["text"].startswith("#")]
    assert first and first == second

    # switching the method shows the other fit at once (both are in the store)
    at.radio(key="maps_method").set_value("barycentric").run()
    _assert_clean(at, "switch to barycentric")
    assert at.session_state[SessionModel.SCENARIO].map_method == "barycentric"
    assert [m.label for m in at.metric][:2] == ["effective neighbours", "label confidence"]
    assert len([t for t in at.table if t.value.index.name != "reference P_i"]) == 2
    at.radio(key="maps_method").set_value("neural").run()
    _assert_clean(at, "switch back to neural")

    # the other pages work unchanged with neural maps
    for page in ("pages/3_geodesic.py", "pages/4_mccann.py"):
        _open(at, page)
        assert "nan" not in _page_text(at).lower(), page
    _open(at, "pages/5_export.py")
    at.selectbox(key="export_fmt").set_value("npz").run()
    at.button(key="export_prepare").click().run()
    _assert_clean(at, "export neural P_a")
    assert len(at.get("download_button")) == 1


def test_scenario_form_sets_the_map_method_and_budget():
    at = _app()
    assert at.radio(key="form_method").value == "barycentric"
    at.radio(key="form_method").set_value("neural")
    at.selectbox(key="form_budget").set_value("tiny")
    next(b for b in at.form_submit_button if b.label == "Apply scenario").click().run()
    _assert_clean(at, "apply neural")
    scenario = at.session_state[SessionModel.SCENARIO]
    assert (scenario.map_method, scenario.neural_preset) == ("neural", "tiny")
    assert "OTDD maps: neural (tiny budget)" in _sidebar(at)
    # the datasets are those of the barycentric scenario: nothing is reloaded
    assert scenario.data_key() == scenario.with_method("barycentric").data_key()


def test_colour_preset_computes_in_the_encoder_space_and_shows_images():
    """Issues 22 and 33: the colour preset leaves the space to the default, which chooses
    the pretrained encoder and says why; the Geodesic page works on images lifted through
    the plans, and the form switches spaces."""
    from geoviz.app.settings import COLOUR_PRESET

    at = _app()
    at.selectbox(key="preset_name").set_value(COLOUR_PRESET)
    at.button(key="load_preset").click().run()
    _assert_clean(at, "colour preset")
    scenario = at.session_state[SessionModel.SCENARIO]
    assert scenario.features == "auto"
    assert at.selectbox(key="form_features").value == "auto"
    sidebar = _sidebar(at)
    assert "Feature space: pretrained encoder (chosen automatically: measured on " in sidebar
    datasets_page = " ".join(str(e.value) for e in at.info).replace("\\", "")
    assert "space: pretrained encoder (chosen automatically" in datasets_page
    at = _open(at, "pages/3_geodesic.py")
    assert any(type(e).__name__ == "UnknownElement" for e in at.main)  # the explorer
    # back to pixels from the form: another scenario key, same data
    at = _open(at, "pages/1_datasets.py")
    at.selectbox(key="form_features").set_value("pixels")
    next(b for b in at.form_submit_button if b.label == "Apply scenario").click().run()
    _assert_clean(at, "pixels")
    pixels = at.session_state[SessionModel.SCENARIO]
    assert pixels.features == "pixels" and pixels.key() != scenario.key()
    assert pixels.data_key() == scenario.data_key()
