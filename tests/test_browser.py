"""The served app in a real headless Chromium (marker ``browser``).

Starts the app as ``make run`` does (``python -m geoviz.app.serve``: ``streamlit run app.py``
after preloading) on a free localhost port with small-N settings,
drives Debian's Chromium through Playwright, visits every page, changes a
weight on the geodesic page, downloads an export and saves screenshots under
``test-output/screenshots/`` (the barycentric-vs-neural maps comparison also
under ``docs/screenshots/``). Skips when Chromium or Playwright is missing.
The server is always stopped.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from pathlib import Path

import browser_support
import numpy as np
import pytest
from browser_support import (  # the shared Chromium and app-server set-up
    CHROMIUM,
    CHROMIUM_ARGS,
    DOC_SHOTS,
    NAV_LINK,
    PAGE_TIMEOUT_MS,
    SHOTS,
    app_server,
    assert_no_exception,
    explorer_frame,
    main_text,
    scenario_link,
    wait_idle,
)

pytestmark = pytest.mark.browser

# the fixtures, found by pytest in this module's namespace (assigned, not imported: a test's
# argument of the same name is the fixture's value)
server = browser_support.server
sync_playwright = browser_support.sync_playwright


@pytest.fixture(scope="module")
def page(sync_playwright, server, tmp_path_factory: pytest.TempPathFactory):
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            headless=True,
            accept_downloads=True,
            viewport={"width": 1500, "height": 1900},
        )
        try:
            pg = context.new_page()
            pg.set_default_timeout(PAGE_TIMEOUT_MS)
            yield pg
        finally:
            context.close()


def _choose(pg, box, option: str, exact: bool = False) -> None:
    """Open a select box and pick ``option``. A rerun that lands between the click and the
    pick redraws the box and closes its list, so the click is retried until the option
    shows (seen once on a loaded CI machine: the list never opened in 420 s)."""
    deadline = time.monotonic() + PAGE_TIMEOUT_MS / 1000
    wanted = pg.get_by_role("option", name=option, exact=exact)
    while True:
        wait_idle(pg)
        box.click()
        try:
            wanted.first.wait_for(state="visible", timeout=5_000)
        except Exception:
            if time.monotonic() > deadline:
                raise
            pg.keyboard.press("Escape")
            continue
        wanted.first.click()
        return


def _shot(pg, name: str) -> Path:
    """Screenshot of the whole page: Streamlit scrolls inside its main section, so the
    viewport is stretched to the content height for the picture and restored after."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    size = pg.viewport_size or {"width": 1500, "height": 1900}
    height = pg.evaluate(
        "() => Math.max(...[...document.querySelectorAll('[data-testid=stMain], "
        "[data-testid=stMainBlockContainer], body')].map(e => e.scrollHeight))"
    )
    pg.set_viewport_size(
        {"width": size["width"], "height": int(min(max(height + 80, size["height"]), 9000))}
    )
    pg.wait_for_timeout(1200)  # plotly charts re-layout after the resize
    pg.screenshot(path=str(path), full_page=True)
    pg.set_viewport_size(size)
    return path


def _shot_section(pg, name: str, heading: str) -> Path:
    """Screenshot from the subheader ``heading`` to the end of the page (full-height viewport)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    size = pg.viewport_size or {"width": 1500, "height": 1900}
    height = pg.evaluate(
        "() => Math.max(...[...document.querySelectorAll('[data-testid=stMain], "
        "[data-testid=stMainBlockContainer], body')].map(e => e.scrollHeight))"
    )
    pg.set_viewport_size(
        {"width": size["width"], "height": int(min(max(height + 80, size["height"]), 9000))}
    )
    pg.wait_for_timeout(1200)  # plotly charts re-layout after the resize
    top = pg.locator(f"h3:has-text('{heading}')").first.bounding_box()
    main = pg.locator("[data-testid='stMain']").bounding_box()
    assert top is not None and main is not None
    # down to the last element drawn (not the main area's empty padding)
    bottom = pg.evaluate(
        "() => Math.max(...[...document.querySelectorAll("
        "'[data-testid=stMain] [data-testid=stElementContainer]')]"
        ".map(e => e.getBoundingClientRect().bottom + window.scrollY))"
    )
    y = max(top["y"] - 10, 0)
    clip = {"x": main["x"], "y": y, "width": main["width"], "height": max(bottom + 20 - y, 100)}
    pg.screenshot(path=str(path), clip=clip, full_page=True)
    pg.set_viewport_size(size)
    return path


def _goto_page(pg, title: str) -> None:
    """Navigate with the sidebar link (keeps the session)."""
    pg.locator(f"{NAV_LINK}", has_text=title).first.click()
    pg.wait_for_selector(f"h1:has-text('{title.split(' · ', 1)[1]}')")
    wait_idle(pg)


def _query(pg) -> dict[str, str]:
    """The page URL's query parameters."""
    from urllib.parse import parse_qs, urlsplit

    return {k: v[0] for k, v in parse_qs(urlsplit(pg.url).query).items()}


def _slider_values(pg) -> list[float]:
    return [
        float(s.input_value())
        for s in pg.locator("[data-testid='stSlider'] input[type='range']").all()
    ]


def _sidebar_text(pg) -> str:
    return pg.locator("[data-testid='stSidebar']").inner_text()


def test_first_visit_to_a_page_url_renders_the_whole_page(page, server):
    """The first request a fresh server gets is a page URL (a shared link): that page comes
    with the app's navigation and scenario sidebar, and the start page with its own."""
    pg = page
    pg.goto(f"{server['url']}/about")
    pg.wait_for_selector("h1:has-text('About the method')")
    wait_idle(pg)
    assert_no_exception(pg, "about (first visit)")
    links = pg.locator(NAV_LINK).all_inner_texts()
    # each link's text is its Material icon's ligature name, then the label
    assert [t.strip().splitlines()[-1] for t in links] == [
        "Start",
        "1 · Datasets",
        "2 · OTDD maps",
        "3 · Geodesic",
        "4 · McCann",
        "5 · Export",
        "6 · About the method",
        "7 · Evidence",
    ], links
    assert "Current scenario" in _sidebar_text(pg)
    assert "scenario" in _query(pg)  # the URL holds the scenario from the first run on
    _shot(pg, "6_about_first_visit")
    pg.goto(server["url"])
    pg.wait_for_selector("h1:has-text('datasets between datasets')")
    wait_idle(pg)
    assert_no_exception(pg, "start page")
    _shot(pg, "0_start")


def test_every_page_weight_change_and_download(page, server):
    pg = page
    timings: dict[str, float] = {}
    start = time.monotonic()
    pg.goto(f"{server['url']}/datasets")
    pg.wait_for_selector("h1:has-text('Datasets')")
    wait_idle(pg)
    timings["datasets"] = time.monotonic() - start
    assert_no_exception(pg, "datasets")
    # sample grid + histograms (waited for: a first run may look idle before they arrive)
    try:
        pg.wait_for_function(
            "() => document.querySelectorAll('[data-testid=stPlotlyChart]').length >= 2",
            timeout=120_000,
        )
    except Exception as err:
        raise AssertionError(f"no sample grid and histograms: {main_text(pg)}") from err
    wait_idle(pg)
    _shot(pg, "1_datasets")

    # pairwise OTDD on demand
    pg.get_by_role("button", name="Compute OTDD for all").click()
    pg.wait_for_selector("text=Closest single reference to Q by OTDD")
    wait_idle(pg)
    assert_no_exception(pg, "datasets/pairwise")
    _shot(pg, "1_datasets_pairwise")

    t0 = time.monotonic()
    _goto_page(pg, "3 · Geodesic")
    timings["geodesic (cold)"] = time.monotonic() - t0
    assert_no_exception(pg, "geodesic")
    assert "â =" in _sidebar_text(pg)
    explorer_frame(pg)  # the in-browser explorer drew its payload (drags: test_explorer_*)
    _shot(pg, "3_geodesic")

    # a shared link (another tab: a new session) shows the weights it names: 0.5/0.3/0.2,
    # and so does a reload of it
    from urllib.parse import urlencode

    query = dict(_query(pg), a="0.5,0.3,0.2")
    shared = pg.context.new_page()
    shared.goto(f"{server['url']}/geodesic?{urlencode(query)}")
    explorer_frame(shared)
    wait_idle(shared)
    assert_no_exception(shared, "shared link")
    assert "Picked a = fashion_mnist 0.50 · usps 0.30 · kmnist 0.20" in main_text(shared)
    assert _query(shared)["scenario"] == query["scenario"]
    shared.reload()
    explorer_frame(shared)
    wait_idle(shared)
    assert "Picked a = fashion_mnist 0.50" in main_text(shared)
    shared.close()

    # the rest of the tour at a = (0.5, 0.3, 0.2): every page keeps the weights in its URL
    pg.goto(f"{server['url']}/geodesic?{urlencode(query)}")
    explorer_frame(pg)
    wait_idle(pg)
    for title, shot in (
        ("2 · OTDD maps", "2_maps"),
        ("4 · McCann", "4_mccann"),
        ("6 · About the method", "6_about"),
    ):
        _goto_page(pg, title)
        assert_no_exception(pg, title)
        if title == "4 · McCann":  # McCann draws in the browser
            explorer_frame(pg)
        else:
            # a chart may arrive after a quiet moment (a figure built once the maps' job
            # is claimed): wait for it rather than count at the first idle
            try:
                pg.wait_for_selector("[data-testid='stPlotlyChart']", timeout=PAGE_TIMEOUT_MS)
            except Exception as err:
                raise AssertionError(f"{title}: no chart: {main_text(pg)}") from err
        assert _query(pg).get("a") == "0.5,0.3,0.2", (title, pg.url)
        _shot(pg, shot)

    _goto_page(pg, "5 · Export")
    assert_no_exception(pg, "export")
    assert pg.get_by_text("picked a (page 3)").count() == 1
    pg.get_by_role("button", name="Prepare npz file").click()
    pg.wait_for_selector("[data-testid='stDownloadButton'] button")
    wait_idle(pg)
    with pg.expect_download() as info:
        pg.locator("[data-testid='stDownloadButton'] button").first.click()
    download = info.value
    target = server["export_dir"].parent / download.suggested_filename
    download.save_as(str(target))
    _shot(pg, "5_export")
    from geoviz.export import load_export, load_hard_labels

    ds = load_export(target)
    assert ds.n_samples > 0 and len(ds.class_names) == 30  # 3 references x 10 classes
    assert ds.metadata.get("weights") == pytest.approx([0.5, 0.3, 0.2])
    # honest hard labels: each reference's share of the labels is its weight, within
    # sampling error (block-sample rule, the default), and the rule is in the manifest
    labels, info = load_hard_labels(target)
    assert info["rule"] == "block-sample"
    shares = np.bincount(np.asarray(labels) // 10, minlength=3) / len(labels)
    sigma = np.sqrt(np.array([0.25, 0.21, 0.16]) / len(labels))
    assert np.all(np.abs(shares - [0.5, 0.3, 0.2]) <= 4 * sigma), shares

    # a 2-D teaching preset: the datasets themselves and OT maps vs naive mixup
    _goto_page(pg, "1 · Datasets")
    _choose(pg, pg.locator("[data-testid='stSelectbox']").first, "2-D Gaussian mixtures")
    pg.get_by_role("button", name="Load preset").click()
    wait_idle(pg)
    assert "References: P1, P2, P3" in _sidebar_text(pg)
    _goto_page(pg, "3 · Geodesic")
    assert_no_exception(pg, "geodesic 2-D preset")
    pg.wait_for_selector("text=OT maps vs naive mixup")
    _shot(pg, "3_geodesic_2d_preset")
    _goto_page(pg, "4 · McCann")
    assert_no_exception(pg, "McCann 2-D preset")
    _shot(pg, "4_mccann_2d_preset")

    with contextlib.suppress(OSError):
        (SHOTS / "timings.txt").write_text(
            "\n".join(f"{k}: {v:.1f} s" for k, v in timings.items()) + "\n"
        )


def test_load_preset_after_apply_shows_the_preset_in_the_form(page, server):
    """Apply own choices, then Load preset: the form shows the preset, and Apply keeps it."""
    from geoviz.app.links import scenario_from_token

    pg = page
    pg.goto(f"{server['url']}/datasets")
    pg.wait_for_selector("h1:has-text('Datasets')")
    wait_idle(pg)
    pg.get_by_label("Samples per reference").fill("150")
    pg.get_by_role("button", name="Apply scenario").click()
    pg.wait_for_function(
        "() => document.querySelector('[data-testid=stSidebar]').innerText.includes("
        "'N = 150 per reference')"
    )
    wait_idle(pg)
    assert scenario_from_token(_query(pg)["scenario"]).n_reference == 150

    _choose(pg, pg.locator("[data-testid='stSelectbox']").first, "*NIST")
    pg.get_by_role("button", name="Load preset").click()
    pg.wait_for_function(
        "() => document.querySelector('[data-testid=stSidebar]').innerText.includes("
        "'N = 200 per reference')"
    )
    wait_idle(pg)
    assert pg.get_by_label("Samples per reference").input_value() == "200"
    pg.get_by_role("button", name="Apply scenario").click()
    wait_idle(pg)
    assert_no_exception(pg, "apply after preset")
    assert "N = 200 per reference" in _sidebar_text(pg)
    assert scenario_from_token(_query(pg)["scenario"]).n_reference == 200
    _shot(pg, "1_datasets_preset_synced")


def test_evidence_page_shows_the_stored_study(page, server):
    """The measured studies shipped in assets/evidence show on arrival, before any run: both
    scatter plots with their seed error bars, the intervals and a sentence per target."""
    pg = page
    pg.goto(f"{server['url']}/evidence")
    pg.wait_for_selector("h2:has-text('Stored study (measured)')")
    wait_idle(pg)
    assert_no_exception(pg, "evidence stored study")
    main = pg.locator("[data-testid='stMain']").inner_text()
    assert "mnist: strong negative correlation" in main and "excludes 0" in main
    assert "fashion_mnist: no correlation shown" in main and "includes 0" in main
    # Plotly's bundle loads on demand: on a loaded machine the charts come after the
    # script has finished (seen once in CI: none yet when counted), so wait for both
    pg.locator("[data-testid='stPlotlyChart']").nth(1).wait_for(state="visible")
    pg.locator("[data-testid='stPlotlyChart'] g.errorbar").nth(1).wait_for(state="attached")
    assert pg.get_by_text("Q = mnist").count() >= 1
    assert pg.get_by_text("Q = fashion_mnist").count() >= 1
    _shot(pg, "7_evidence_stored_study")


def test_evidence_page_runs_and_shows_both_results(page, server):
    """Tiny budget: the job runs in the background, the page polls, then shows the
    Table-1 bars with error bars and the W² / accuracy ternaries with r."""
    pg = page
    pg.goto(f"{server['url']}/evidence")
    pg.wait_for_selector("h1:has-text('Evidence')")
    wait_idle(pg)
    assert_no_exception(pg, "evidence")
    _choose(pg, pg.get_by_role("combobox", name="Training budget"), "tiny", exact=True)
    sliders = pg.locator("[data-testid='stSlider']")
    for index, presses in ((1, 2), (2, 2)):  # grid resolution 3 -> 1, seeds 3 -> 1
        sliders.nth(index).locator("input[type='range']").focus()
        for _ in range(presses):
            pg.keyboard.press("ArrowLeft")
    shown = [
        sliders.nth(i).locator("[data-testid='stSliderThumbValue']").inner_text() for i in range(3)
    ]
    assert shown == ["5", "1", "1"], shown
    pg.get_by_role("button", name="Run the transfer experiments").click()
    try:
        pg.wait_for_selector("text=Done in", timeout=PAGE_TIMEOUT_MS)
    except Exception as err:
        _shot(pg, "7_evidence_timeout")
        raise AssertionError(f"no result: {main_text(pg)}") from err
    wait_idle(pg)
    assert_no_exception(pg, "evidence results")
    _shot(pg, "7_evidence")  # the full-height viewport also draws the charts below the fold
    # one chart, two ternary panels: W² on the left, mean accuracy on the right
    assert pg.locator("[data-testid='stPlotlyChart'] g.ternary").count() >= 1
    assert pg.get_by_text("mean accuracy").count() >= 1
    assert pg.get_by_text("Pearson r").count() >= 1


def test_maps_page_compares_barycentric_and_neural_maps(page, server):
    """A neural scenario (tiny budget, 16x16, N = 60): the maps train in the background with
    their stage shown, "Fit the other map" adds the barycentric ones, and both appear side by
    side on the same target points (screenshot ``2_maps_side_by_side.png``)."""
    from geoviz.app.links import scenario_to_token

    scenario = _two_references(map_method="neural", neural_preset="tiny")
    pg = page
    pg.goto(f"{server['url']}/maps?scenario={scenario_to_token(scenario)}")
    pg.wait_for_selector("h1:has-text('OTDD maps')")
    # the training shows which part of which map runs
    stages: list[str] = []
    deadline = time.monotonic() + PAGE_TIMEOUT_MS / 1000
    while time.monotonic() < deadline and not pg.get_by_text("Barycentric vs neural maps").count():
        stages += pg.locator("[data-testid='stProgress']").all_inner_texts()
        pg.wait_for_timeout(250)
    assert any(
        "neural OTDD map" in s and ("(classifier)" in s or "(adversarial)" in s) for s in stages
    ), stages[-5:]
    wait_idle(pg)
    assert_no_exception(pg, "maps (neural)")
    assert "OTDD maps: neural (tiny budget)" in _sidebar_text(pg)
    shown = pg.locator("[data-testid='stMain']").inner_text()
    assert not re.search(r"\bnan\b", shown, re.IGNORECASE), shown[:2000]

    _shot(pg, "2_maps_neural")
    pg.get_by_role("button", name="Fit the other map (background)").click()
    pg.wait_for_selector("text=The same target points x under both maps")
    wait_idle(pg)
    assert_no_exception(pg, "maps side by side")
    # one image grid per reference, each with x | barycentric T_i(x) | neural T_i(x)
    assert pg.locator("[data-testid='stPlotlyChart'] image").count() >= 2
    for head in ("barycentric", "neural"):
        assert pg.locator("[data-testid='stPlotlyChart']", has_text=head).count() >= 2
    shot = _shot_section(pg, "2_maps_side_by_side", "Barycentric vs neural maps")
    DOC_SHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, DOC_SHOTS / shot.name)


def _link_token(d: dict) -> str:
    import base64
    import json
    import zlib

    raw = json.dumps(d).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


def test_hostile_links_and_the_export_folder(page, server, tmp_path):
    """Issue 15 as a visitor does it: links naming a server file or an absurd size get a
    sentence and the default scenario; the export folder cannot be left."""
    import json

    from geoviz.app.settings import AppSettings, default_scenario

    pg = page
    secret = tmp_path / "secret.npz"
    np.savez(secret, x=np.zeros((20, 4), np.float32), y=np.repeat([0, 1], 10))
    base = json.loads(json.dumps(default_scenario(AppSettings(n_default=200)).to_dict()))
    hostile = {
        "server file": {**base, "target": {**base["target"], "name": str(secret)}},
        "huge images": {**base, "image_size": 100_000},
        "loader options": {
            **base,
            "target": {
                **base["target"],
                "name": "torchvision:mnist",
                "options": [["root", "/etc"], ["download", True]],
            },
        },
    }
    expected = {
        "server file": "unknown dataset",
        "huge images": "image_size must be between",
        "loader options": "has no option",
    }
    for what, d in hostile.items():
        pg.goto(f"{server['url']}/datasets?scenario={_link_token(d)}")
        pg.wait_for_selector("h1:has-text('Datasets')")
        wait_idle(pg)
        assert_no_exception(pg, what)
        warning = pg.locator("[data-testid='stAlertContentWarning']").first.inner_text()
        assert "could not be read" in warning and expected[what] in warning, (what, warning)
        assert str(tmp_path) not in main_text(pg)
        assert "Q** (target): mnist" in _sidebar_text(pg) or "mnist" in _sidebar_text(pg)
        if what == "server file":
            _shot(pg, "1_datasets_hostile_link")

    # the export folder: a sub-folder name full of path tricks stays inside the root
    _goto_page(pg, "5 · Export")
    assert_no_exception(pg, "export")
    field = pg.get_by_role("textbox", name="Sub-folder of the server's export folder (optional)")
    field.fill("../../../tmp/escape")
    field.press("Enter")
    wait_idle(pg)
    pg.get_by_role("button", name="Save to folder").click()
    wait_idle(pg)
    success = pg.locator("[data-testid='stAlertContentSuccess']").first.inner_text()
    assert "in the server's export folder" in success, main_text(pg)
    root = server["export_dir"]
    (folder,) = [p for p in root.iterdir() if p.is_dir()]
    assert folder.name.endswith("escape") and any(folder.glob("*.manifest.json"))
    assert not Path("/tmp/escape").exists()
    assert str(root) not in main_text(pg)
    _shot(pg, "5_export_server_folder")


# ---------------------------------------------------------------- the explorer (issue 16)


def _with_bootstrap(pg, frame):
    """The explorer's frame once the background bootstrap is in it: the page draws the
    explorer without waiting for it, and the browser's polls bring it (no reload, no click)."""
    frame.wait_for_function("() => geovizExplorer.bootstrap() !== null", timeout=120_000)
    return frame


def _two_references(**kwargs):
    """Q = MNIST against USPS and Fashion-MNIST, 60 samples each at 16x16 (m = 2)."""
    from geoviz.app.scenario import Scenario
    from geoviz.data.choice import DatasetChoice

    return Scenario(
        target=DatasetChoice("mnist"),
        references=(DatasetChoice("usps"), DatasetChoice("fashion_mnist")),
        n_target=60,
        n_reference=60,
        image_size=16,
        **kwargs,
    )


def _four_references(name: str):
    """Q and four references drawn from 2-D Gaussian mixtures, named ``name.format(seed)``."""
    from geoviz.app.scenario import Scenario
    from geoviz.data.choice import DatasetChoice

    return Scenario(
        target=DatasetChoice("gmm2d", seed=0, options=(("name", "Q"),)),
        references=tuple(
            DatasetChoice("gmm2d", seed=s, options=(("name", name.format(s)),))
            for s in (1, 2, 3, 4)
        ),
        n_target=150,
        n_reference=150,
    )


def _count_url_changes(pg) -> None:
    """Count the page's URL changes from now on in ``window.__urlChanges``."""
    pg.evaluate(
        """() => {
        window.__urlChanges = 0;
        for (const name of ['pushState', 'replaceState']) {
          const orig = history[name].bind(history);
          history[name] = (s, t, u) => {
            const before = location.href; orig(s, t, u);
            if (location.href !== before) window.__urlChanges += 1;
          };
        }
      }"""
    )


def _app_result(server, token: str):
    """The geodesic the server computed for the scenario ``token`` (read from its disk cache)."""
    from geoviz.app.links import scenario_from_token
    from geoviz.app.services import datasets as dataset_services
    from geoviz.app.services import geodesic as geodesic_services
    from geoviz.app.session import SessionModel

    old = os.environ.get("GEOVIZ_CACHE_DIR")
    os.environ["GEOVIZ_CACHE_DIR"] = str(Path(server["log"]).parent / "cache")
    try:
        model = SessionModel({})
        model.scenario = scenario_from_token(token)
        data = dataset_services.scenario_data(model)
        job = geodesic_services.start_geodesic(model.scenario, data)
        job.wait()
        assert job.error_ is None, job.error_
        return job.result_
    finally:
        if old is None:
            os.environ.pop("GEOVIZ_CACHE_DIR", None)
        else:
            os.environ["GEOVIZ_CACHE_DIR"] = old


def _mix(frame, a) -> np.ndarray:
    import base64

    arg = float(a) if np.ndim(a) == 0 else [float(x) for x in a]
    raw = frame.evaluate("(a) => geovizExplorer.mix64(a)", arg)
    return np.frombuffer(base64.b64decode(raw), dtype=np.uint8)


def _python_mix(result, header: dict, a) -> np.ndarray:
    from geoviz.explorer.payload import quantize

    shown = np.asarray(header["sample_index"][: header["n_shown"]])
    pa = result.interpolate(np.asarray(a, dtype=float))
    return quantize(pa.features.numpy()[shown], header["pixel_lo"], header["pixel_hi"]).ravel()


def _drag(pg, frame, path: list[tuple[float, float]], shot: str | None = None) -> None:
    box = frame.locator("canvas#simplex").bounding_box()
    assert box is not None
    x0, y0 = box["x"], box["y"]
    pg.mouse.move(x0 + path[0][0], y0 + path[0][1])
    pg.mouse.down()
    for k, (x, y) in enumerate(path[1:]):
        pg.mouse.move(x0 + x, y0 + y)
        if shot and k == len(path) // 2:
            pg.wait_for_timeout(100)
            _shot(pg, shot)
    pg.mouse.up()


def test_explorer_drag_across_the_triangle(page, server):
    """m = 3: a drag redraws P_a in the browser with no rerun; the release sends the
    weights once, the URL changes once, and browser and Python agree."""
    pg = page
    pg.goto(f"{server['url']}/geodesic")
    frame = explorer_frame(pg)
    wait_idle(pg)
    assert_no_exception(pg, "geodesic explorer")
    header = frame.evaluate("() => geovizExplorer.header()")
    assert header["m"] == 3 and header["n_shown"] >= 30 and header["view"] == "embedding"
    before = _mix(frame, frame.evaluate("() => geovizExplorer.pick()"))
    _count_url_changes(pg)
    runs_before = frame.evaluate("() => geovizExplorer.renders")
    # across the triangle, from near P2 to near P3 through the middle
    path = [(110 + 6 * k, 300 - 4 * k) for k in range(15)] + [
        (200 + 6 * k, 240 + 3 * k) for k in range(15)
    ]
    box = frame.locator("canvas#simplex").bounding_box()
    pg.mouse.move(box["x"] + path[0][0], box["y"] + path[0][1])
    pg.mouse.down()
    mids = []
    for k, (x, y) in enumerate(path[1:]):
        pg.mouse.move(box["x"] + x, box["y"] + y)
        if k in (5, 20):
            pg.wait_for_timeout(50)
            mids.append(_mix(frame, frame.evaluate("() => geovizExplorer.pick()")))
        if k == 15:
            pg.wait_for_timeout(100)
            _shot(pg, "3_geodesic_explorer_mid_drag")
    assert frame.evaluate("() => geovizExplorer.valuesSent") == 0  # nothing sent mid-drag
    pg.mouse.up()
    pg.wait_for_function("() => window.location.search.includes('a=')")
    wait_idle(pg)
    assert_no_exception(pg, "geodesic explorer after release")
    assert not np.array_equal(mids[0], mids[1]) and not np.array_equal(before, mids[1])
    stats = frame.evaluate(
        "() => ({sent: geovizExplorer.valuesSent, pick: geovizExplorer.pick(),"
        " frames: geovizExplorer.frameTimes.slice(), renders: geovizExplorer.renders,"
        " shown: document.getElementById('value').textContent})"
    )
    assert stats["sent"] == 1
    assert pg.evaluate("() => window.__urlChanges") == 1
    assert stats["renders"] - runs_before <= 2  # the single rerun after the release
    a = np.asarray(stats["pick"])
    assert _query(pg)["a"] == ",".join(f"{x:.4f}".rstrip("0").rstrip(".") for x in a)
    result = _app_result(server, _query(pg)["scenario"])
    shown = float(stats["shown"].split("=")[-1])
    assert shown == pytest.approx(float(result.objective(a)), rel=1e-6)
    got = _mix(frame, a).astype(int)
    want = _python_mix(result, header, a).astype(int)
    assert np.abs(got - want).max() <= 1
    frames = np.asarray(stats["frames"])
    assert len(frames) >= 20
    with contextlib.suppress(OSError):
        (SHOTS / "explorer_frame_times.txt").write_text(
            f"pointer moves: {len(frames)}, median {np.median(frames):.1f} ms, "
            f"p95 {np.percentile(frames, 95):.1f} ms\n"
        )
    # the server's own summary follows the released weights
    assert "Picked a" in main_text(pg)


def test_explorer_objective_and_mix_at_random_weights(page, server):
    pg = page
    pg.goto(f"{server['url']}/geodesic")
    frame = explorer_frame(pg)
    wait_idle(pg)
    header = frame.evaluate("() => geovizExplorer.header()")
    result = _app_result(server, _query(pg)["scenario"])
    weights = np.random.default_rng(3).dirichlet(np.ones(3), size=100)
    values = frame.evaluate("(ws) => ws.map((a) => geovizExplorer.objective(a))", weights.tolist())
    np.testing.assert_allclose(values, result.objective(weights), rtol=1e-9)
    for a in weights:
        got = _mix(frame, a).astype(int)
        assert np.abs(got - _python_mix(result, header, a).astype(int)).max() <= 1


def test_explorer_two_and_four_references(page, server):
    """m = 2: the geodesic segment; m = 4: linked bars moved with the keyboard."""

    pg = page
    two = _two_references()
    pg.goto(scenario_link(server, two))
    frame = explorer_frame(pg)
    wait_idle(pg)
    assert_no_exception(pg, "m = 2")
    assert frame.evaluate("() => geovizExplorer.header().m") == 2
    _count_url_changes(pg)
    _drag(pg, frame, [(60 + 12 * k, 120) for k in range(25)])
    pg.wait_for_function("() => window.location.search.includes('a=')")
    wait_idle(pg)
    a = np.asarray(frame.evaluate("() => geovizExplorer.pick()"))
    assert a[1] > 0.5 and pg.evaluate("() => window.__urlChanges") == 1
    result = _app_result(server, _query(pg)["scenario"])
    shown = float(frame.locator("#value").inner_text().split("=")[-1])
    assert shown == pytest.approx(float(result.objective(a)), rel=1e-6)
    _shot(pg, "3_geodesic_explorer_m2")

    four = _four_references("P{}")
    pg.goto(scenario_link(server, four))
    frame = explorer_frame(pg)
    wait_idle(pg)
    assert_no_exception(pg, "m = 4")
    header = frame.evaluate("() => geovizExplorer.header()")
    assert header["m"] == 4 and header["view"] == "scatter"
    start = frame.evaluate("() => geovizExplorer.points()")
    frame.locator("canvas#simplex").focus()
    for key in ("ArrowRight", "ArrowUp", "ArrowUp", "ArrowUp"):
        pg.keyboard.press(key)  # bar 2 (P2) up by 3 x 0.02; each key up sends the weights
    pg.wait_for_function("() => window.location.search.includes('a=')")
    wait_idle(pg)
    a = np.asarray(frame.evaluate("() => geovizExplorer.pick()"))
    assert a.sum() == pytest.approx(1.0) and len(a) == 4
    moved = np.asarray(frame.evaluate("() => geovizExplorer.points()"))
    assert not np.allclose(moved, start)
    result = _app_result(server, _query(pg)["scenario"])
    np.testing.assert_allclose(moved, result.interpolate(a).features.numpy(), atol=1e-4)
    _shot(pg, "3_geodesic_explorer_m4")


def test_explorer_teaching_preset_scatter_moves_point_by_point(page, server):
    from geoviz.app.settings import AppSettings, preset_scenarios

    pg = page
    scenario = preset_scenarios(AppSettings(n_default=200))["2-D Gaussian mixtures"]
    pg.goto(scenario_link(server, scenario))
    frame = explorer_frame(pg)
    wait_idle(pg)
    assert_no_exception(pg, "2-D preset")
    assert frame.evaluate("() => geovizExplorer.header().view") == "scatter"
    _drag(
        pg, frame, [(200, 120 + 6 * k) for k in range(25)], shot="3_geodesic_explorer_2d_mid_drag"
    )
    pg.wait_for_function("() => window.location.search.includes('a=')")
    wait_idle(pg)
    assert_no_exception(pg, "2-D preset after release")
    a = np.asarray(frame.evaluate("() => geovizExplorer.pick()"))
    result = _app_result(server, _query(pg)["scenario"])
    pts = np.asarray(frame.evaluate("() => geovizExplorer.points()"))
    np.testing.assert_allclose(pts, result.interpolate(a).features.numpy(), atol=1e-4)
    pg.wait_for_selector("text=OT maps vs naive mixup")
    # issue 26, item 5: the legends have their own column, no point is drawn over them, and
    # P_a's class colours have a legend (a swatch per class of Q)
    width = frame.evaluate("() => document.getElementById('view').width")
    legend_w = frame.evaluate("() => geovizExplorer.legendWidth()")
    xy = np.asarray(frame.evaluate("() => geovizExplorer.viewXY()"))
    assert xy[:, 0].max() < width - legend_w
    classes = frame.evaluate("() => geovizExplorer.header().target_classes")
    swatches = frame.evaluate(
        """([x0, n]) => { const c = document.getElementById('view'), d = c.getContext('2d')
            .getImageData(x0, 0, c.width - x0, c.height).data; let k = 0;
            for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && (d[i] !== d[i + 1] || d[i + 1] !== d[i + 2])) k++;
            return k; }""",
        [width - legend_w, len(classes)],
    )
    assert swatches > 40 * (len(classes) + 3), swatches  # coloured swatches in the column
    frame.locator("canvas#view").scroll_into_view_if_needed()
    _shot(pg, "3_geodesic_2d_legends")


def test_explorer_mccann_play(page, server):
    pg = page
    pg.goto(f"{server['url']}/mccann")
    frame = explorer_frame(pg)
    wait_idle(pg)
    assert_no_exception(pg, "McCann")
    assert frame.evaluate("() => geovizExplorer.header().mode") == "mccann"
    frame.locator("#play").click()
    pg.wait_for_timeout(700)
    _shot(pg, "4_mccann_explorer_mid_play")
    pg.wait_for_function("() => document.body.innerText.includes('Released t = 1.00')")
    wait_idle(pg)
    stats = frame.evaluate("() => ({fps: geovizExplorer.playFps, sent: geovizExplorer.valuesSent})")
    assert stats["sent"] == 1 and stats["fps"] >= 30, stats
    # the embedding view for image data (issue 26, item 8): at t = 1 its points sit at T_i(x)'s
    assert frame.evaluate("() => geovizExplorer.header().view") == "embedding"
    at_end = np.asarray(frame.evaluate("() => geovizExplorer.points()"))
    assert at_end.shape == (frame.evaluate("() => geovizExplorer.header().n_shown"), 2)
    frame.locator("canvas#view").scroll_into_view_if_needed()
    _shot(pg, "4_mccann_embedding")
    # P^M_t in the browser equals Python's McCann interpolation (to uint8 rounding)
    from geoviz.explorer.payload import quantize

    header = frame.evaluate("() => geovizExplorer.header()")
    result = _app_result(server, _query(pg)["scenario"])
    shown = np.asarray(header["sample_index"])
    for t in (0.0, 0.35, 1.0):
        ds = result.mccann(header["ref"], t)
        want = quantize(ds.features.numpy()[shown], header["pixel_lo"], header["pixel_hi"])
        got = _mix(frame, t)
        assert np.abs(got.astype(int) - want.ravel().astype(int)).max() <= 1
    # issue 26, item 8: the W² readout, t² W_i (eq. (ds_eq) on {Q, P_i} at a = (1 - t, t))
    t_now = frame.evaluate("() => geovizExplorer.t()")
    shown_w2 = float(frame.locator("#mccann-w2").get_attribute("data-value"))
    w_i = float(result.w_to_target[header["ref"]])
    assert shown_w2 == pytest.approx(t_now**2 * w_i, rel=1e-9)
    from geoviz.geodesic.distances import objective

    both = objective([1 - t_now, t_now], [0.0, w_i], [[0.0, w_i], [w_i, 0.0]])
    assert shown_w2 == pytest.approx(float(both), rel=1e-9)


def _post_value(frame, value_js: str, seq: int) -> bool:
    """Post a component value from inside the explorer's frame, as a hostile page script
    would: ``value_js`` is a JavaScript expression for the ``weights`` / ``t`` field or, with
    seq < 0, for the whole value. Through ``window.top``, around the frame's own guard on
    ``window.parent`` (tests/test_explorer_guard.py), and as the JSON text of the value (the
    form the explorer's values take), so the server's checks are what is tested here. False
    when the page's guard stopped it (a text longer than an event takes): it never reached
    the server."""
    return bool(
        frame.evaluate(
            "([expr, seq]) => { const v = eval(expr);"
            " const value = seq < 0 ? v : Object.assign({seq: seq, id: 'hostile'}, v);"
            " const before = geovizExplorer.dropped();"
            " window.top.postMessage({isStreamlitMessage: true, type:"
            " 'streamlit:setComponentValue', value: JSON.stringify(value), dataType: 'json'},"
            " '*');"
            " return new Promise((done) => setTimeout("
            " () => done(geovizExplorer.dropped() === before), 50)); }",
            [value_js, seq],
        )
    )


def test_hostile_explorer_values_keep_the_explorer_and_the_last_pick(page, server):
    """Issue 25 rows 4-7: NaN, null, text, nested lists, objects and huge arrays posted as the
    explorer's value each give one short sentence; the explorer stays drawn with the last
    good pick, on the Geodesic and the McCann page."""
    pg = page
    pg.goto(f"{server['url']}/geodesic")
    frame = explorer_frame(pg)
    wait_idle(pg)
    _post_value(frame, "({weights: [0.5, 0.3, 0.2]})", 10_001)
    pg.wait_for_function(
        "() => decodeURIComponent(window.location.search).includes('a=0.5,0.3,0.2')",
        timeout=60_000,
    )
    wait_idle(pg)
    hostile = [
        "({weights: 'nan'})",
        "({weights: [[0.2, 0.3, 0.5]]})",
        "({weights: null})",
        "({weights: {}})",
        "({weights: [0.2, 0.3]})",
        "({weights: ['0.2', '0.3', '0.5']})",
        "({weights: 'w'.repeat(1000000)})",
        "({weights: Array(200000).fill(0.1)})",
        "'just a text'",
        "[0.2, 0.3, 0.5]",
    ]
    for k, expr in enumerate(hostile):
        whole = expr.startswith("'") or expr.startswith("[")
        sent = _post_value(frame, expr, -1 if whole else 10_002 + k)
        pg.wait_for_timeout(300)
        wait_idle(pg)
        assert_no_exception(pg, f"after {expr[:40]}")
        frame = explorer_frame(pg, timeout_s=30)
        assert frame.evaluate("() => geovizExplorer.pick()") == pytest.approx([0.5, 0.3, 0.2])
        assert _query(pg)["a"] == "0.5,0.3,0.2", expr
        warnings = pg.locator("[data-testid='stAlertContentWarning']")
        if sent:  # a bare value without an event number is refused as an event too
            assert warnings.count() >= 1, expr
        else:  # only the 1 MB texts are longer than an event takes
            assert "1000000" in expr or "200000" in expr, expr
        for text in warnings.all_inner_texts():
            assert len(text) <= 200 and "wwwwwwwwwwwwwwwwwwwwwwwwwwwwww" not in text
    _shot(pg, "3_geodesic_after_hostile_values")
    assert "Picked a" in main_text(pg)

    pg.goto(f"{server['url']}/mccann")
    frame = explorer_frame(pg)
    wait_idle(pg)
    _post_value(frame, "({t: 0.25})", 20_001)
    pg.wait_for_function(
        "() => document.body.innerText.includes('Released t = 0.25')", timeout=60_000
    )
    wait_idle(pg)
    shown_t = frame.evaluate("() => geovizExplorer.t()")  # the browser's own slider
    for k, expr in enumerate(["'nan'", "null", "'abc'", "[0.5]", "({})", "1.5", "'q'.repeat(1e6)"]):
        sent = _post_value(frame, f"({{t: {expr}}})", 20_002 + k)
        assert sent == ("1e6" not in expr), expr  # the 1 MB text is stopped on the page
        pg.wait_for_timeout(300)
        wait_idle(pg)
        assert_no_exception(pg, f"McCann after t = {expr}")
        frame = explorer_frame(pg, timeout_s=30)
        assert "Released t = 0.25" in main_text(pg), expr
        assert frame.evaluate("() => geovizExplorer.t()") == pytest.approx(shown_t)
        warnings = pg.locator("[data-testid='stAlertContentWarning']")
        if sent:
            assert warnings.count() >= 1 and len(warnings.first.inner_text()) <= 200, expr
    _shot(pg, "4_mccann_after_hostile_values")


def test_colour_preset_in_the_encoder_space_drag_and_export(page, server):
    """Issues 22 and 33: the colour preset's first view on a cold cache within 30 s (the
    default space loads the shipped encoder), pixels and the default picked in the form, a
    drag on the Geodesic page, an export; P_a's images come back through the plans (look at
    the screenshots)."""
    from geoviz.app.links import scenario_from_token

    pg = page
    pg.goto(f"{server['url']}/datasets")
    pg.wait_for_selector("h1:has-text('Datasets')")
    wait_idle(pg)
    _choose(pg, pg.locator("[data-testid='stSelectbox']").first, "Colour digits")
    started = time.monotonic()
    pg.get_by_role("button", name="Load preset").click()
    pg.wait_for_function(
        "() => document.querySelector('[data-testid=stSidebar]').innerText.includes('mnist_m')"
    )
    wait_idle(pg)
    loading_s = time.monotonic() - started
    assert "Feature space: pretrained encoder (chosen automatically" in _sidebar_text(pg)

    # issue 33: on a cold cache the first view takes <= 30 s: loading the preset's datasets,
    # then the Geodesic page's fit (the pretrained encoder is loaded, not trained) and explorer
    started = time.monotonic()
    _goto_page(pg, "3 · Geodesic")
    frame = explorer_frame(pg)
    wait_idle(pg)
    first_view_s = loading_s + time.monotonic() - started
    # 30 s on a machine this run has to itself; a busy machine (other jobs: a load above the
    # core count) stretches it in proportion, so the check stays one of "nothing is trained"
    busy = max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    print(
        f"colour preset, cold cache: first view {first_view_s:.1f} s (loading {loading_s:.1f} s; "
        f"load {busy:.2f} x the cores)"
    )
    assert first_view_s <= 30.0 * busy, f"colour preset's first view took {first_view_s:.1f} s"
    assert_no_exception(pg, "geodesic, encoder space")
    box = frame.locator("canvas#simplex").bounding_box()
    pg.mouse.move(box["x"] + 130, box["y"] + 280)
    pg.mouse.down()
    for k in range(12):
        pg.mouse.move(box["x"] + 130 + 8 * k, box["y"] + 280 - 6 * k)
    pg.mouse.up()
    pg.wait_for_function("() => window.location.search.includes('a=')")
    wait_idle(pg)
    assert_no_exception(pg, "geodesic, encoder space, after the drag")
    _shot(pg, "3_geodesic_colour_encoder")
    header = frame.evaluate("() => geovizExplorer.header()")
    assert header["image_shape"][0] == 3  # colour images, not feature vectors

    _goto_page(pg, "2 · OTDD maps")
    assert_no_exception(pg, "maps, encoder space")
    _shot(pg, "2_maps_colour_encoder")

    # pick the space in the form: pixels, then the default again
    _goto_page(pg, "1 · Datasets")
    for space in ("pixels", "auto"):
        _choose(
            pg, pg.get_by_role("combobox", name="Feature space of the costs"), space, exact=True
        )
        pg.get_by_role("button", name="Apply scenario").click()
        wait_idle(pg)
        assert scenario_from_token(_query(pg)["scenario"]).features == space
    assert "Feature space: pretrained encoder (chosen automatically" in _sidebar_text(pg)
    _shot(pg, "1_datasets_colour_preset")

    _goto_page(pg, "5 · Export")
    pg.get_by_role("button", name="Prepare npz file").click()
    pg.wait_for_selector("[data-testid='stDownloadButton'] button")
    wait_idle(pg)
    with pg.expect_download() as info:
        pg.locator("[data-testid='stDownloadButton'] button").first.click()
    target = server["export_dir"].parent / f"colour_{info.value.suggested_filename}"
    info.value.save_as(str(target))
    from geoviz.export import load_export

    ds = load_export(target)
    assert ds.image_shape is not None and ds.image_shape[0] == 3
    assert ds.metadata["features"]["name"] == "encoder"
    assert len(ds.metadata["features"]["digest"]) == 64
    # sharp plans: a P_a image is a blend of a few real references, not a mean image
    spread = float(ds.features.std(dim=0).mean())
    assert spread > 0.05, spread


def test_explorer_region_as_good_as_a_hat_and_the_readout_flag(page, server):
    """Issue 23: the region and the cloud are drawn over the heatmap; a drag through the
    region and out of it gives the readout's "distinguishable" flag, which equals the
    library's at the released weights, and the browser's intervals equal the library's."""
    from geoviz.app.services.geodesic import EXPLORER_REPLICATES

    pg = page
    pg.goto(f"{server['url']}/geodesic")
    frame = explorer_frame(pg)
    # the bootstrap comes from a background job after the explorer is drawn
    frame = _with_bootstrap(pg, frame)
    wait_idle(pg)
    assert frame.evaluate("() => geovizExplorer.bootstrap()")["replicates"] == EXPLORER_REPLICATES
    assert frame.evaluate("() => geovizExplorer.regionCells()") > 0
    result = _app_result(server, _query(pg)["scenario"])
    boot = result.bootstrap(EXPLORER_REPLICATES, seed=0)
    # the browser's numbers at random weights against the library's
    weights = np.random.default_rng(5).dirichlet(np.ones(3), size=40)
    got = frame.evaluate("(ws) => ws.map((a) => geovizExplorer.uncertainty(a))", weights.tolist())
    f_int = boot.objective_interval(weights)
    gap = boot.gap_interval(weights)
    np.testing.assert_allclose([g["value"][0] for g in got], f_int.low, rtol=1e-9)
    np.testing.assert_allclose([g["value"][1] for g in got], f_int.high, rtol=1e-9)
    np.testing.assert_allclose([g["gap"][0] for g in got], gap.low, rtol=1e-9, atol=1e-15)
    assert [g["good"] for g in got] == boot.as_good_as_a_hat(weights).tolist()
    # into the region (onto â) and out of it (to a corner), each released once
    box = frame.locator("canvas#simplex").bounding_box()
    a_hat = np.asarray(result.a_hat)
    verdicts = []
    for target_xy in ("star", "corner"):
        if target_xy == "star":
            xy = frame.evaluate("(a) => geovizExplorer.simplexXY(a)", a_hat.tolist())
        else:
            xy = [box["width"] / 2, 40]  # near P1's corner
        path = [(xy[0] + 30, xy[1] + 20), (xy[0] + 10, xy[1] + 8), (xy[0], xy[1])]
        _drag(pg, frame, path)
        frame.wait_for_function("(seq) => geovizExplorer.valuesSent >= seq", arg=len(verdicts) + 1)
        wait_idle(pg)
        pick = np.asarray(frame.evaluate("() => geovizExplorer.pick()"))
        flag = frame.evaluate(
            "() => document.getElementById('verdict').getAttribute('data-distinguishable')"
        )
        verdicts.append((pick, flag == "true"))
        assert (flag == "true") == (not bool(boot.as_good_as_a_hat(pick))), (pick, flag)
        _shot(pg, f"3_geodesic_region_{target_xy}")
    assert verdicts[0][1] is False and verdicts[1][1] is True
    assert_no_exception(pg, "geodesic explorer with the region")


def _pixel(frame, canvas_id: str, x: float, y: float) -> list[int]:
    return frame.evaluate(
        """([id, x, y]) => Array.from(document.getElementById(id).getContext('2d')
            .getImageData(Math.round(x), Math.round(y), 1, 1).data)""",
        [canvas_id, x, y],
    )


def test_explorer_first_view_scale_gap_and_bar_labels(page, server):
    """Issue 26, items 2, 3, 6: the first view says "at â" (not a red +4.5e-7) and shows the
    star; the ternary has a colour scale and the m = 2 curve a y axis; with m = 4 the keyboard's
    bar keeps its own colour and long names are not cut to 12 letters."""

    pg = page
    pg.goto(f"{server['url']}/geodesic")
    frame = explorer_frame(pg)
    wait_idle(pg)
    gap = frame.evaluate(
        "() => [document.getElementById('gap').textContent, document.getElementById('gap').className]"
    )
    assert gap[0].startswith("at â") and "down" in gap[1], gap
    # the star is drawn on top of the ring around it: its centre is white
    star_xy = frame.evaluate("() => geovizExplorer.simplexXY(geovizExplorer.pick())")
    assert min(_pixel(frame, "simplex", *star_xy)[:3]) > 200
    # the colour scale: a bar of viridis colours, dark at the bottom, light at the top
    bar = frame.locator("canvas#colorbar").bounding_box()
    assert bar is not None and bar["width"] > 40
    top, bottom = _pixel(frame, "colorbar", 10, 60), _pixel(frame, "colorbar", 10, 290)
    assert sum(top[:3]) > sum(bottom[:3]) + 150, (top, bottom)
    _shot(pg, "3_geodesic_first_view_scale")

    two = _two_references()
    pg.goto(scenario_link(server, two))
    frame = explorer_frame(pg)
    wait_idle(pg)
    # y axis: dark tick labels left of the curve's plot area
    left = frame.evaluate(
        """() => { const c = document.getElementById('simplex'), d = c.getContext('2d')
            .getImageData(0, 0, 46, c.height).data; let n = 0;
            for (let k = 0; k < d.length; k += 4) if (d[k + 3] > 0 && d[k] < 120) n++; return n; }"""
    )
    assert left > 40, left

    four = _four_references("reference_number_{}")
    pg.goto(scenario_link(server, four))
    frame = explorer_frame(pg)
    wait_idle(pg)
    frame.locator("canvas#simplex").focus()
    pg.keyboard.press("ArrowRight")  # bar 2 is the keyboard's now
    pg.keyboard.press("ArrowUp")
    pg.wait_for_timeout(300)
    # bar 2's fill keeps P2's colour (#ef553b), not the pick's red (#ff4b4b)
    colour = frame.evaluate(
        """() => { const c = document.getElementById('simplex'), m = 4, w = (c.width - 40) / m;
            const x = 20 + 1 * w + w / 2, y = c.height - 42;
            return Array.from(c.getContext('2d').getImageData(Math.round(x), Math.round(y), 1, 1).data); }"""
    )
    assert colour[:3] == [0xEF, 0x55, 0x3B], colour
    # whole names: the canvas is as wide as four "reference_number_k" labels need
    width = frame.evaluate("() => document.getElementById('simplex').width")
    assert width > 4 * 100, width
    _shot(pg, "3_geodesic_m4_labels")


def test_explorer_tile_zoom_and_sample_inspector(page, server):
    """Issue 26, item 4: a zoom control for the tiles; a click on a tile shows x, every
    T_i(x) and P_a(x) large, side by side; P_a(x) equals the library's mix."""
    pg = page
    pg.goto(f"{server['url']}/geodesic")
    frame = explorer_frame(pg)
    wait_idle(pg)
    header = frame.evaluate("() => geovizExplorer.header()")
    before = frame.evaluate("() => document.getElementById('samples').height")
    frame.locator("#zoom").fill("3")
    frame.wait_for_function(f"() => document.getElementById('samples').height > {before}")
    assert frame.evaluate("() => document.getElementById('samples').width") <= 1100
    # a real click on the first tile opens the inspector
    box = frame.locator("canvas#samples").bounding_box()
    pg.mouse.click(box["x"] + 20, box["y"] + 20)
    frame.wait_for_function("() => document.getElementById('inspector').style.display === 'block'")
    # the 4th sample, large
    frame.evaluate("() => geovizExplorer.inspect(3)")
    wait_idle(pg)
    width = frame.evaluate("() => document.getElementById('inspector').width")
    m = header["m"]
    assert width >= (m + 2) * 130, width
    # P_a(x) (the last panel), centre pixel, against the library's P_a at the picked weights
    c, hh, ww = header["image_shape"]
    big = max(2, 120 // max(hh, ww))
    cell = max(ww * big + 16, 130)
    x0 = (m + 1) * cell + (cell - ww * big) / 2
    px = _pixel(
        frame, "inspector", x0 + (ww // 2) * big + big // 2, 18 + (hh // 2) * big + big // 2
    )
    a = np.asarray(frame.evaluate("() => geovizExplorer.pick()"))
    result = _app_result(server, _query(pg)["scenario"])
    mix = _python_mix(result, header, a).reshape(header["n_shown"], c, hh, ww)
    want = int(mix[3, 0, hh // 2, ww // 2])
    assert abs(int(px[0]) - want) <= 1, (px, want)
    frame.locator("canvas#inspector").scroll_into_view_if_needed()
    _shot(pg, "3_geodesic_inspector")


def test_explorer_teaching_view_lines_maps_mixup_and_caption(page, server):
    """Issue 26, teaching view: coupling lines, the T_i(x), the naive mixup in the same colours,
    all moving with the pick; the mixup equals the library's; a caption in words; frames stay
    drawn at every pointer move during a drag with everything on (their times are written
    beside the screenshots; the frame-rate target is benchmarks/bench_app.py's)."""
    from geoviz.app.settings import AppSettings, preset_scenarios
    from geoviz.geodesic.mixup import mixup_interpolation

    pg = page
    scenario = preset_scenarios(AppSettings(n_default=200))["2-D Gaussian mixtures"]
    pg.goto(scenario_link(server, scenario))
    frame = explorer_frame(pg)
    wait_idle(pg)
    for box_id in ("teach-lines", "teach-maps", "teach-mixup"):
        frame.locator(f"#{box_id}").check()
    # the caption follows on the next animation frame
    frame.wait_for_function(
        "() => geovizExplorer.teachingCaption().includes('Grey diamonds are naive mixup')"
    )
    assert "Lines join x to its images" in frame.evaluate("() => geovizExplorer.teachingCaption()")
    start = frame.evaluate("() => geovizExplorer.frameTimes.length")
    _drag(
        pg,
        frame,
        [(120 + 5 * k, 260 - 5 * k) for k in range(30)],
        shot="3_geodesic_teaching_mid_drag",
    )
    pg.wait_for_function("() => window.location.search.includes('a=')")
    wait_idle(pg)
    frames = np.asarray(frame.evaluate("() => geovizExplorer.frameTimes.slice()"))[start:]
    # every pointer move drew a frame; their speed is benchmarks/bench_app.py's to measure
    # (a timed assertion here failed on a loaded machine), the times go to the text file below
    assert len(frames) >= 15 and np.all(np.isfinite(frames)), frames
    a = np.asarray(frame.evaluate("() => geovizExplorer.pick()"))
    result = _app_result(server, _query(pg)["scenario"])
    want = mixup_interpolation(result.target, list(result.references), a, seed=scenario.seed)
    got = np.asarray(frame.evaluate("(a) => geovizExplorer.mixupPoints(a)", a.tolist()))
    np.testing.assert_allclose(got, want.features.numpy(), atol=1e-4)
    assert f"{round(100 * a[0])}% of the way to T1(x)" in frame.evaluate(
        "() => geovizExplorer.teachingCaption()"
    )
    frame.locator("canvas#view").scroll_into_view_if_needed()
    _shot(pg, "3_geodesic_teaching_view")
    with contextlib.suppress(OSError):
        (SHOTS / "teaching_frame_times.txt").write_text(
            f"teaching view on, pointer moves: {len(frames)}, median {np.median(frames):.1f} ms, "
            f"p95 {np.percentile(frames, 95):.1f} ms\n"
        )


def test_explorer_figure_download_png_and_svg(page, server, tmp_path):
    """Issue 26, figures out: the explorer's current view downloads as PNG (it opens, at the
    figure's size) and as SVG (it parses; its text holds the readout), drawn by the page's
    own drawing code."""
    import base64
    import io
    import xml.etree.ElementTree as ET

    from PIL import Image

    pg = page
    pg.goto(f"{server['url']}/geodesic")
    frame = explorer_frame(pg)
    frame = _with_bootstrap(pg, frame)
    wait_idle(pg)
    value = frame.locator("#value").inner_text()
    with pg.expect_download() as png_info:
        frame.locator("#figure-png").click()
    png_path = tmp_path / png_info.value.suggested_filename
    png_info.value.save_as(str(png_path))
    assert png_path.name == "geoviz-geodesic.png"
    with Image.open(png_path) as img:
        assert img.format == "PNG" and img.width >= 800 and img.height >= 600
        shown = img.convert("RGB")
        # not blank: the heatmap's dark purple is in it
        assert np.asarray(shown.resize((80, 80)), dtype=int).sum(axis=2).min() < 200
    with pg.expect_download() as svg_info:
        frame.locator("#figure-svg").click()
    svg_path = tmp_path / svg_info.value.suggested_filename
    svg_info.value.save_as(str(svg_path))
    root = ET.parse(svg_path).getroot()
    assert root.tag.endswith("svg")
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert value in texts  # the readout, as text
    assert any(t.startswith("P1 · ") for t in texts)  # the simplex's vertex labels are vectors
    assert len(list(root.iter("{http://www.w3.org/2000/svg}image"))) >= 1  # the heatmap layer
    # the same figure from the page's API: the SVG's size at 2 pixels per CSS px (issue 35)
    data = frame.evaluate("() => geovizExplorer.figure('png')")
    with Image.open(io.BytesIO(base64.b64decode(data.split(",", 1)[1]))) as again:
        assert again.size == (2 * int(root.get("width")), 2 * int(root.get("height")))
    with contextlib.suppress(OSError):
        SHOTS.mkdir(parents=True, exist_ok=True)
        (SHOTS / "figure_geodesic.png").write_bytes(png_path.read_bytes())
        (SHOTS / "figure_geodesic.svg").write_bytes(svg_path.read_bytes())


def test_explorer_at_projector_width(page, server):
    """Issue 26: at a projector's 1280 px the explorer's parts fit the page width (the
    screenshot is looked at by a person)."""
    pg = page
    old = pg.viewport_size
    pg.set_viewport_size({"width": 1280, "height": 900})
    try:
        pg.goto(f"{server['url']}/geodesic")
        frame = explorer_frame(pg)
        wait_idle(pg)
        widths = frame.evaluate(
            "() => ['simplex', 'colorbar', 'samples', 'view', 'mass'].map((id) => {"
            " const e = document.getElementById(id); return e ? e.getBoundingClientRect().right : 0; })"
        )
        page_width = frame.evaluate("() => document.documentElement.clientWidth")
        assert max(widths) <= page_width + 1, (widths, page_width)
        _shot(pg, "3_geodesic_projector_1280")
    finally:
        pg.set_viewport_size(old)


def test_explorer_comes_first_and_the_embedding_arrives_without_a_click(page, tmp_path):
    """Issue 26: on a server that computes nothing ahead (``GEOVIZ_PREFETCH=0``) and fits
    UMAP, the explorer is drawn as soon as the maps are there, with the embedding still
    pending; the browser's polls bring the embedding view (no click, no reload), never during
    a drag, and the pick made meanwhile stays."""
    with app_server(tmp_path, GEOVIZ_PREFETCH="0", GEOVIZ_EMBEDDING="umap") as srv:
        pg = page.context.new_page()  # a second tab of the tests' browser, on this server
        try:
            pg.set_default_timeout(PAGE_TIMEOUT_MS)
            pg.goto(f"{srv['url']}/geodesic")
            frame = explorer_frame(pg)
            first = frame.evaluate(
                "() => ({view: geovizExplorer.view(), pending: geovizExplorer.pending(),"
                " note: document.getElementById('view-pending').textContent,"
                " value: document.getElementById('value').textContent})"
            )
            assert first["view"] == "pending" and "embedding" in first["pending"], first
            assert "appears here when ready" in first["note"]
            assert first["value"].startswith("W²(P_a, Q) =")  # the simplex works meanwhile
            _shot(pg, "3_geodesic_embedding_pending")
            # a drag while the embedding is pending: no poll and no value until the release
            box = frame.locator("canvas#simplex").bounding_box()
            pg.mouse.move(box["x"] + 200, box["y"] + 230)
            pg.mouse.down()
            # counted once the drag has begun: a poll due just before the press is not mid-drag
            polls = frame.evaluate("() => geovizExplorer.polls")
            for k in range(12):
                pg.mouse.move(box["x"] + 200 + 6 * k, box["y"] + 230 + 3 * k)
                pg.wait_for_timeout(100)
            during = frame.evaluate("() => [geovizExplorer.polls, geovizExplorer.valuesSent]")
            assert during == [polls, 0], "the explorer polled or sent a value mid-drag"
            pg.mouse.up()
            picked = frame.evaluate("() => geovizExplorer.pick()")
            frame.wait_for_function(
                "() => geovizExplorer.view() === 'embedding' && geovizExplorer.pending().length === 0",
                timeout=240_000,
            )
            after = frame.evaluate(
                "() => ({polls: geovizExplorer.polls, sent: geovizExplorer.valuesSent,"
                " pick: geovizExplorer.pick(), points: geovizExplorer.viewXY().length,"
                " header: geovizExplorer.header()})"
            )
            assert after["polls"] >= 1 and after["sent"] == 1  # polls, and the one release
            assert after["pick"] == picked  # the embedding did not reset the pick
            assert after["points"] == len(after["header"]["sample_index"]) > 0
            assert after["header"]["embedding_method"] in ("umap", "pca")
            assert frame.evaluate("() => document.getElementById('view-pending') === null")
            wait_idle(pg)
            assert_no_exception(pg, "geodesic explorer after the embedding arrived")
            _shot(pg, "3_geodesic_embedding_arrived")
        finally:
            pg.close()
