"""The explorer's figures in every mode, in Chromium (issue 45, item 3; marker ``browser``).

The ⤓ SVG button did nothing in presenter and step-by-step mode: the SVG recorder had no
``strokeText`` (the followed point's halo labels) and no ``rect`` (the squares T_i(x)), and the
error was lost in the click handler. And the embedding panel of a "2x" PNG was the screen's
1x background scaled up. Here the explorer's bundled modules run in a blank page (as
tests/test_explorer_host_browser.py does: no server) on small fitted payloads, and in each
mode — images with the embedding view, the 2-D teaching scatter free, in presenter mode,
at each of the three steps and with every switch on, McCann on images and on 2-D data —
the SVG is a valid SVG document holding that mode's own elements and renders in the
browser, the PNG has 2 pixels per CSS px, and the buttons download both. The figures go
to ``test-output/screenshots/figure_*`` to be looked at.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from browser_support import (  # the shared Chromium set-up (skips without it)
    SHOTS,
    browser,  # noqa: F401 - a fixture
    harness_html,
    sync_playwright,  # noqa: F401 - a fixture
)

from geoviz.data.preprocess import harmonize
from geoviz.data.registry import load_dataset
from geoviz.explorer.payload import build_geodesic, build_mccann
from geoviz.geodesic.config import GeodesicConfig
from geoviz.geodesic.pipeline import fit_geodesic
from geoviz.viz.embedding import fit_embedding

pytestmark = pytest.mark.browser

SVG_NS = "{http://www.w3.org/2000/svg}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@pytest.fixture(scope="module")
def payloads() -> dict[str, str]:
    """Small fitted payloads: images with their embedding view (geodesic and McCann), and
    2-D data (the teaching scatter, and McCann)."""
    q, *refs = harmonize(
        [load_dataset("mnist", n=60)]
        + [load_dataset(name, n=40) for name in ("fashion_mnist", "usps", "kmnist")]
    )
    images = fit_geodesic(q, refs)
    emb = fit_embedding([images.target, *images.references], max_per_dataset=60, method="pca")
    flat_q, *flat_refs = [load_dataset("gmm2d", n=80, seed=s) for s in range(4)]
    flat = fit_geodesic(flat_q, flat_refs)
    colour_q, *grey_refs = harmonize(
        [load_dataset("mnist_m", n=40), load_dataset("mnist", n=40), load_dataset("usps", n=40)]
    )
    colour = fit_geodesic(colour_q, grey_refs, GeodesicConfig(features="pixels"))
    return {
        "colour": _b64(build_geodesic(colour).data),
        "images": _b64(build_geodesic(images, emb, emb.place).data),
        "mccann_images": _b64(build_mccann(images, 1, emb, emb.place).data),
        "scatter": _b64(build_geodesic(flat).data),
        "mccann_scatter": _b64(build_mccann(flat, 0).data),
    }


@contextlib.contextmanager
def _explorer(browser, payload: str):  # noqa: F811
    """A page with one explorer rendering ``payload``; page errors fail the test."""
    pg = browser.new_page(viewport={"width": 1300, "height": 1400}, accept_downloads=True)
    errors: list[str] = []
    pg.on("pageerror", lambda err: errors.append(str(err)))
    try:
        pg.set_content(harness_html())
        pg.wait_for_function("() => window.harnessReady === true", timeout=30_000)
        args = {"payload": payload, "payload_id": "figure-test", "picked": None, "t": 0.5}
        pg.evaluate(f"() => window.renderArgs({json.dumps(args)})")
        pg.wait_for_function("() => window.explorer.hooks.ready === true", timeout=30_000)
        yield pg
        assert errors == [], errors
    finally:
        pg.close()


def _svg(pg) -> tuple[ET.Element, str]:
    text = pg.evaluate("() => window.explorer.hooks.figure('svg')")
    root = ET.fromstring(text)  # a valid XML document, or this raises
    assert root.tag == SVG_NS + "svg"
    assert int(root.get("width")) > 300 and int(root.get("height")) > 200
    assert root.get("viewBox") == f"0 0 {root.get('width')} {root.get('height')}"
    return root, text


def _texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(SVG_NS + "text")]


def _png(pg):
    from PIL import Image

    url = pg.evaluate("() => window.explorer.hooks.figure('png')")
    head, _, b64 = url.partition(",")
    assert head == "data:image/png;base64"
    img = Image.open(io.BytesIO(base64.b64decode(b64)))
    img.load()
    return img


def _rendered(browser, svg_text: str, name: str) -> np.ndarray:  # noqa: F811
    """The SVG as Chromium draws it (saved as a PNG to look at): its pixels."""
    from PIL import Image

    root = ET.fromstring(svg_text)
    w, h = int(root.get("width")), int(root.get("height"))
    pg = browser.new_page(viewport={"width": w, "height": h})
    try:
        pg.set_content(f"<html><body style='margin:0'>{svg_text}</body></html>")
        shot = pg.screenshot(clip={"x": 0, "y": 0, "width": w, "height": h})
    finally:
        pg.close()
    with contextlib.suppress(OSError):
        SHOTS.mkdir(parents=True, exist_ok=True)
        (SHOTS / f"figure_{name}.svg").write_text(svg_text, encoding="utf-8")
        (SHOTS / f"figure_{name}_svg_rendered.png").write_bytes(shot)
    return np.asarray(Image.open(io.BytesIO(shot)).convert("RGB"), dtype=int)


def _check_mode(browser, pg, name: str, must_have: list[str]) -> ET.Element:  # noqa: F811
    """The SVG and the PNG of the current view: valid, with ``must_have`` among the SVG's
    texts, drawn by Chromium (not blank), the PNG at twice the SVG's size."""
    root, svg_text = _svg(pg)
    texts = _texts(root)
    for want in must_have:
        assert any(want in t for t in texts), (name, want, texts[:40])
    pixels = _rendered(browser, svg_text, name)
    coloured = (pixels.max(axis=2) - pixels.min(axis=2) > 60).mean()
    assert coloured > 0.005, (name, coloured)  # the marks are drawn, not a white page
    png = _png(pg)
    assert png.size == (2 * int(root.get("width")), 2 * int(root.get("height"))), (name, png.size)
    with contextlib.suppress(OSError):
        png.save(SHOTS / f"figure_{name}.png")
    return root


def _click(pg, selector: str) -> None:
    pg.locator(selector).click()
    pg.wait_for_timeout(50)


def _download(pg, button: str, tmp_path: Path) -> Path:
    with pg.expect_download(timeout=20_000) as info:
        pg.locator(button).click()
    path = tmp_path / info.value.suggested_filename
    info.value.save_as(str(path))
    assert pg.locator("#figure-note").inner_text() == ""
    return path


def test_every_teaching_mode_exports_svg_and_png(browser, payloads, tmp_path):  # noqa: F811
    """The 2-D teaching scatter: free view, presenter mode (the followed x's halo labels),
    steps 1-3 (the coupling lines, the squares T_i(x), the mix) and every switch on."""
    with _explorer(browser, payloads["scatter"]) as pg:
        free = _check_mode(browser, pg, "scatter_free", ["Datasets (faded)", "P_a by Q's class"])
        assert not any(t == "P_a(x)" for t in _texts(free))
        _click(pg, "#presenter")
        root = _check_mode(browser, pg, "scatter_presenter", ["P_a(x)", "T1(x)", "T3(x)"])
        labels = [t for t in root.iter(SVG_NS + "text") if t.text == "P_a(x)"]
        # the halo: the label's outline in white under the label itself
        assert [t.get("stroke") for t in labels] == ["#fff", None], [t.attrib for t in labels]
        assert _download(pg, "#figure-svg", tmp_path).name == "geoviz-geodesic.svg"
        ET.parse(tmp_path / "geoviz-geodesic.svg")
        _click(pg, "#presenter")
        expected = {
            1: ["x → T_i(x), by reference", "x, Q's samples"],
            2: ["T_i(x), by reference"],
            3: ["P_a(x)", "P_a(x) as a moves"],
        }
        for step, words in expected.items():
            _click(pg, "#teach-next")
            assert pg.evaluate("() => window.explorer.hooks.teachingStep()") == step
            root = _check_mode(browser, pg, f"scatter_step{step}", words)
            if step == 2:  # the squares T_i(x): closed sub-paths of one stroked path each
                squares = [p for p in root.iter(SVG_NS + "path") if p.get("d", "").count("Z") >= 20]
                assert squares and all(p.get("fill") == "none" for p in squares)
        assert _download(pg, "#figure-svg", tmp_path).stat().st_size > 1000
        png = _download(pg, "#figure-png", tmp_path)
        assert png.read_bytes().startswith(b"\x89PNG")
        for _ in range(3):
            _click(pg, "#teach-back")
        for box in ("#teach-lines", "#teach-maps", "#teach-mixup", "#presenter"):
            _click(pg, box)
        _check_mode(
            browser,
            pg,
            "scatter_every_layer",
            ["naive mixup (grey)", "P_a(x)", "T_i(x), by reference"],
        )


def test_mccann_exports_svg_and_png(browser, payloads):  # noqa: F811
    with _explorer(browser, payloads["mccann_scatter"]) as pg:
        _check_mode(
            browser,
            pg,
            "mccann_scatter",
            ["McCann: Q →", "P^M_t by Q's class", "W²(P^M_t, Q) = t²"],
        )
    with _explorer(browser, payloads["mccann_images"]) as pg:
        root = _check_mode(browser, pg, "mccann_images", ["McCann: Q →", "Datasets (faded)"])
        assert len(list(root.iter(SVG_NS + "image"))) >= 1  # the tiles


def _crisp_edges(gray: np.ndarray) -> float:
    """The share of horizontally neighbouring pixels more than 100 grey levels apart: the
    edges of text drawn at this resolution (a 1x drawing scaled up by 2 spreads each edge
    over two pixels, and has almost none)."""
    return float((np.abs(np.diff(gray, axis=1)) > 100).mean())


def test_the_embedding_panel_of_a_2x_png_is_drawn_at_2x(browser, payloads):  # noqa: F811
    """The view's legend column (the faded background's own part: nothing else draws
    there in the embedding view) in the PNG figure has the crisp edges of a 2x drawing: at
    least five times those of the screen's 1x canvas scaled up by the browser, which is what
    the figure held before (1.8% of neighbours against 0.08% when this was written)."""
    from PIL import Image

    with _explorer(browser, payloads["images"]) as pg:
        assert pg.evaluate("() => window.explorer.hooks.view()") == "embedding"
        root = _check_mode(browser, pg, "embedding", ["Datasets (faded)", "P_a by Q's class"])
        # the background's points are vectors in the SVG (the faded squares), not an image
        assert len([r for r in root.iter(SVG_NS + "rect") if r.get("opacity") == "0.18"]) >= 100
        layout = pg.evaluate("() => window.explorer.hooks.figureLayout()")
        box = layout["parts"]["view"]
        legend_w = pg.evaluate("() => window.explorer.hooks.legendWidth()")
        png = _png(pg).convert("L")
        assert png.width == 2 * layout["width"]
        x0 = 2 * (box["x"] + box["width"] - legend_w)
        y0 = 2 * box["y"]
        figure = np.asarray(
            png.crop((x0, y0, x0 + 2 * legend_w, y0 + 2 * min(box["height"], 200))), dtype=float
        )
        # the old figure: the 1x screen canvas drawn at 2x by the browser
        upscaled = pg.evaluate(
            """([w, h]) => { const v = document.getElementById('view'), c = document.createElement('canvas');
                c.width = 2 * w; c.height = 2 * h; const ctx = c.getContext('2d');
                ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, c.width, c.height);
                ctx.drawImage(v, 0, 0, c.width, c.height); return c.toDataURL('image/png'); }""",
            [box["width"], box["height"]],
        )
        old = Image.open(io.BytesIO(base64.b64decode(upscaled.split(",", 1)[1]))).convert("L")
        ox = 2 * (box["width"] - legend_w)
        before = np.asarray(
            old.crop((ox, 0, ox + 2 * legend_w, 2 * min(box["height"], 200))), dtype=float
        )
        assert figure.shape == before.shape
        assert figure.min() < 100  # the legend's text is there
        sharp, blurred = _crisp_edges(figure), _crisp_edges(before)
        assert sharp > 0.005 and sharp > 5 * blurred, (sharp, blurred)


def test_a_colour_target_says_why_p_a_is_grey(browser, payloads):  # noqa: F811
    """Under P_a's tiles, the payload's note (GeodesicResult.grey_note), as text."""
    with _explorer(browser, payloads["colour"]) as pg:
        note = pg.locator("#pa-note").inner_text()
        assert note.startswith("P_a is grey because it is made of the references' images")
        assert "(mnist, usps) are grey" in note
        with contextlib.suppress(OSError):
            SHOTS.mkdir(parents=True, exist_ok=True)
            pg.screenshot(path=str(SHOTS / "pa_grey_note.png"), full_page=True)
    with _explorer(browser, payloads["images"]) as pg:
        assert pg.locator("#pa-note").count() == 0


def test_every_w2_of_a_view_has_one_number_of_decimals(browser, payloads):  # noqa: F811
    """Issue 45: W² was printed with 7 significant digits, so 1 to 7 decimals as the pick
    moved. Now one number of decimals per view (seven significant digits at W²(P_â, Q), the
    smallest), for the readout and â's line alike, and the text is the value."""
    import re

    with _explorer(browser, payloads["images"]) as pg:
        pg.locator("canvas#simplex").focus()
        seen = []
        for key in ["ArrowUp"] * 6 + ["ArrowLeft"] * 6:
            pg.keyboard.press(key)
            pg.wait_for_timeout(30)
            text = pg.locator("#value").inner_text()
            value = float(pg.locator("#value").get_attribute("data-value"))
            shown = text.split("= ")[-1]
            assert float(shown) == pytest.approx(value, rel=1e-6), (text, value)
            seen.append(shown)
        assert len(set(seen)) > 3, seen  # the pick moved
        decimals = {len(s.split(".")[1]) for s in seen}
        ahat = re.search(r"W²\(P_â, Q\) = ([0-9.]+)", pg.locator("#root").inner_text()).group(1)
        assert decimals == {len(ahat.split(".")[1])}, (seen, ahat)
    with _explorer(browser, payloads["mccann_scatter"]) as pg:
        texts = pg.locator("#mccann-w2").inner_text(), pg.locator("#root").inner_text()
        numbers = re.findall(r"(?<!t )= ([0-9]+\.[0-9]+)", " ".join(texts))  # not t = 0.50
        assert len(numbers) >= 2 and len({len(n.split(".")[1]) for n in numbers}) == 1, numbers
