"""The geodesic page as a teacher uses it (issue 35, item 5): a projector's 1280x800, a wide
1920x1080 screen, a high-DPI screen (marker ``browser``).

Cause and effect on one screen: while the pick is dragged, the simplex and the data that move
with it (P_a's tiles, the embedding view) are all inside the first viewport, and the tiles'
pixels change; at 1920 px the explorer uses the page's width; at a devicePixelRatio of 2 the
canvases keep 2 backing pixels per CSS pixel and the PNG figure is at least 2x; hints are
readable (>= 13 px, contrast >= 4.5:1); the small region as good as â gets a zoomed inset and
a caption that says so. Screenshots: ``docs/screenshots/classroom_1280x800.png`` and
``classroom_1920x1080.png`` (mid-drag); the frame times go beside the test screenshots.
Reuses test_browser.py's server and helpers; skips without Chromium or Playwright.
"""

from __future__ import annotations

import base64
import contextlib
import io

import numpy as np
import pytest
from browser_support import (  # the shared Chromium and app-server set-up
    DOC_SHOTS,
    PAGE_TIMEOUT_MS,
    SHOTS,
    browser,  # noqa: F401 - a fixture
    inside_view,
    server,  # noqa: F401 - the app, a fixture
    sync_playwright,  # noqa: F401 - a fixture
)
from browser_support import assert_no_exception as _assert_no_exception
from browser_support import explorer_frame as _explorer
from browser_support import wait_idle as _wait_idle

pytestmark = pytest.mark.browser

#: the region as good as â counts as small (simplex_draw.js's SMALL_REGION_CELLS)
SMALL_REGION_CELLS = 60
#: a drag's frames: a gross regression fails here; the target (median <= 16 ms on the
#: 2-core machine) is measured and written down, not asserted (a loaded machine is slower)
FRAME_MS_LIMIT = 60.0


@pytest.fixture(scope="module", autouse=True)
def _fresh_frame_times():
    """This module's frame times are written anew."""
    with contextlib.suppress(OSError):
        (SHOTS / "classroom_frame_times.txt").unlink(missing_ok=True)


@contextlib.contextmanager
def _geodesic(browser, server, width: int, height: int, dpr: float = 1):  # noqa: F811
    """The geodesic page at ``width`` x ``height`` (devicePixelRatio ``dpr``), with the
    bootstrap in the explorer; yields (page, explorer frame)."""
    ctx = browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=dpr)
    try:
        pg = ctx.new_page()
        pg.set_default_timeout(PAGE_TIMEOUT_MS)
        pg.goto(f"{server['url']}/geodesic")
        frame = _explorer(pg)
        frame.wait_for_function("() => geovizExplorer.bootstrap() !== null", timeout=120_000)
        _wait_idle(pg)
        # the region (and its inset) is drawn in a task of its own after the bootstrap
        frame.wait_for_function("() => geovizExplorer.regionCells() > 0", timeout=30_000)
        _assert_no_exception(pg, f"geodesic page at {width}x{height}")
        yield pg, frame
    finally:
        ctx.close()


def _boxes(frame, ids) -> dict:
    """Page-viewport boxes of the explorer's elements ``ids`` (None: not there)."""
    out = {}
    for i in ids:
        loc = frame.locator(f"#{i}")
        out[i] = loc.bounding_box() if loc.count() else None
    return out


def _tiles_digest(frame) -> float:
    """A digest of the tiles canvas's pixels as drawn now."""
    return frame.evaluate(
        """() => { const c = document.getElementById('samples');
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let s = 0; for (let k = 0; k < d.length; k += 4) s += (k % 997) * d[k]; return s; }"""
    )


def _drag_circle(pg, frame, shot=None, check=None, moves: int = 60) -> np.ndarray:
    """Drag the pick round a circle about the triangle's centre (``moves`` pointer moves,
    20 ms apart); at the half-way move ``check(pg, frame)`` runs and ``shot`` is saved;
    returns the drag's frame times (ms)."""
    box = frame.locator("canvas#simplex").bounding_box()
    centre = frame.evaluate("() => geovizExplorer.simplexXY([1 / 3, 1 / 3, 1 / 3])")
    side = frame.evaluate(
        "() => geovizExplorer.simplexXY([0, 0, 1])[0] - geovizExplorer.simplexXY([0, 1, 0])[0]"
    )
    r = 0.22 * side
    start = frame.evaluate("() => geovizExplorer.frameTimes.length")
    x0, y0 = box["x"] + centre[0], box["y"] + centre[1]
    pg.mouse.move(x0 + r, y0)
    pg.mouse.down()
    for k in range(1, moves + 1):
        ang = 2 * np.pi * k / moves
        pg.mouse.move(x0 + r * np.cos(ang), y0 + r * np.sin(ang))
        pg.wait_for_timeout(20)
        if k == moves // 2:
            if check is not None:
                check(pg, frame)
            if shot is not None:
                pg.screenshot(path=str(shot))
    assert frame.evaluate("() => geovizExplorer.valuesSent") == 0  # nothing sent mid-drag
    pg.mouse.up()
    return np.asarray(frame.evaluate("() => geovizExplorer.frameTimes.slice()"))[start:]


def _frame_note(name: str, frames: np.ndarray) -> str:
    text = (
        f"{name}: pointer moves {len(frames)}, median {np.median(frames):.1f} ms, "
        f"p95 {np.percentile(frames, 95):.1f} ms"
    )
    with contextlib.suppress(OSError):
        SHOTS.mkdir(parents=True, exist_ok=True)
        with open(SHOTS / "classroom_frame_times.txt", "a", encoding="utf-8") as f:
            f.write(text + "\n")
    return text


def _contrast(rgb: str) -> float:
    """WCAG contrast of the CSS colour ``rgb(r, g, b)`` on white."""
    vals = [float(v) for v in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3]]
    lin = [
        (v / 255 / 12.92) if v / 255 <= 0.04045 else ((v / 255 + 0.055) / 1.055) ** 2.4
        for v in vals
    ]
    lum = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    return 1.05 / (lum + 0.05)


def test_projector_1280x800_shows_cause_and_effect_in_one_screen(browser, server):  # noqa: F811
    """At 1280x800 the simplex, the tiles and the embedding view are all in the first screen
    while the pick is dragged, and the tiles change; the hints are readable; the small region
    as good as â has its inset and its caption."""
    with _geodesic(browser, server, 1280, 800) as (pg, frame):
        layout = frame.evaluate("() => geovizExplorer.layout()")
        assert layout["mode"] == "beside", layout
        header = frame.evaluate("() => geovizExplorer.header()")
        assert header["view"] == "embedding" and header["m"] == 3
        seen = {}

        def check(pg, frame):
            seen["boxes"] = _boxes(frame, ["simplex", "samples", "view"])
            seen["tiles"] = _tiles_digest(frame)

        before = _tiles_digest(frame)
        DOC_SHOTS.mkdir(parents=True, exist_ok=True)
        frames = _drag_circle(pg, frame, shot=DOC_SHOTS / "classroom_1280x800.png", check=check)
        for name, box in seen["boxes"].items():
            assert inside_view(box, 1280, 800), (name, box, seen["boxes"])
        assert seen["tiles"] != before  # the tiles moved with the pick, mid-drag
        frame.wait_for_function("() => geovizExplorer.valuesSent >= 1")  # sent on release
        note = _frame_note("1280x800 dpr 1", frames)
        assert len(frames) >= 40 and np.median(frames) <= FRAME_MS_LIMIT, note
        # hints: >= 13 px, contrast >= 4.5:1 on white
        hints = frame.evaluate(
            """() => Array.from(document.querySelectorAll('.hint')).filter((e) => e.offsetParent)
                .map((e) => { const s = getComputedStyle(e); return [s.fontSize, s.color, e.id]; })"""
        )
        assert hints
        for size, colour, name in hints:
            assert float(size.rstrip("px")) >= 13, (name, size)
            assert _contrast(colour) >= 4.5, (name, colour)
        # the region as good as â: small on this scenario, so an inset and a caption
        cells = frame.evaluate("() => geovizExplorer.regionCells()")
        inset = frame.evaluate("() => geovizExplorer.regionInset()")
        note_box = frame.locator("#region-note").bounding_box()
        if cells <= SMALL_REGION_CELLS:
            assert inset is not None and inset["zoom"] >= 2 and inset["size"] >= 64, inset
            # its size as a share of the simplex (the same at every viewport), not in cells
            assert "is small" in inset["caption"] and "% of the simplex" in inset["caption"]
            assert "cell" not in inset["caption"], inset["caption"]
            assert "inset" in inset["caption"]
            assert note_box is not None and inside_view(note_box, 1280, 800), note_box
            # the inset is drawn: its frame (dark) and the heatmap inside it
            corner = frame.evaluate(
                """([x, y]) => Array.from(document.getElementById('simplex').getContext('2d')
                    .getImageData(Math.round(x), Math.round(y), 1, 1).data)""",
                [inset["x"] + 1, inset["y"] + inset["size"] / 2],
            )
            assert sum(corner[:3]) < 200 and corner[3] == 255, corner
        else:
            assert inset is None and note_box is None


def test_hidpi_canvases_are_sharp_and_the_figure_is_2x(browser, server):  # noqa: F811
    """devicePixelRatio 2: backing stores are 2x their CSS size, the pointer's maths stays in
    CSS px (the star is where simplexXY says), the PNG figure has >= 2 pixels per CSS px;
    the moving data are still in the first screen."""
    from PIL import Image

    with _geodesic(browser, server, 1280, 800, dpr=2) as (pg, frame):
        sizes = frame.evaluate(
            """() => ['simplex', 'colorbar', 'samples', 'mass', 'view'].map((id) => {
                const c = document.getElementById(id), r = c.getBoundingClientRect();
                return [id, c.width, c.height, r.width, r.height]; })"""
        )
        for name, w, h, cw, ch in sizes:
            assert w == pytest.approx(2 * cw, abs=1) and h == pytest.approx(2 * ch, abs=1), (
                name,
                w,
                h,
                cw,
                ch,
            )
        assert frame.evaluate("() => geovizExplorer.layout().dpr") == 2
        # simplexXY is in CSS px: the star's centre (white) at twice those backing pixels
        xy = frame.evaluate("() => geovizExplorer.simplexXY(geovizExplorer.pick())")  # at â
        px = frame.evaluate(
            """([x, y]) => Array.from(document.getElementById('simplex').getContext('2d')
                .getImageData(Math.round(2 * x), Math.round(2 * y), 1, 1).data)""",
            xy,
        )
        assert min(px[:3]) > 200, px
        # the view too: P_a's dots (in CSS px, viewXY) drawn where twice those backing pixels are
        coloured = frame.evaluate(
            """() => { const ctx = document.getElementById('view').getContext('2d');
                return geovizExplorer.viewXY().map(([x, y]) => {
                  const d = ctx.getImageData(Math.round(2 * x), Math.round(2 * y), 1, 1).data;
                  return Math.max(d[0], d[1], d[2]) - Math.min(d[0], d[1], d[2]) > 60; }); }"""
        )
        assert len(coloured) > 20 and np.mean(coloured) > 0.8, np.mean(coloured)
        svg = frame.evaluate("() => geovizExplorer.figure('svg')")
        import xml.etree.ElementTree as ET

        root = ET.fromstring(svg)
        data = frame.evaluate("() => geovizExplorer.figure('png')")
        with Image.open(io.BytesIO(base64.b64decode(data.split(",", 1)[1]))) as img:
            assert img.width >= 2 * int(root.get("width")) and img.height >= 2 * int(
                root.get("height")
            )
            assert img.width % int(root.get("width")) == 0
        seen = {}

        def check(pg, frame):
            seen["boxes"] = _boxes(frame, ["simplex", "samples", "view"])

        frames = _drag_circle(pg, frame, check=check)
        for name, box in seen["boxes"].items():
            assert inside_view(box, 1280, 800), (name, box)
        note = _frame_note("1280x800 dpr 2", frames)
        assert len(frames) >= 40 and np.median(frames) <= FRAME_MS_LIMIT, note


def test_wide_screen_1920x1080_uses_the_width(browser, server):  # noqa: F811
    """At 1920x1080 the explorer spreads over the page's width: simplex, view and readout in
    one row, the tiles under them, all in the first screen."""
    with _geodesic(browser, server, 1920, 1080) as (pg, frame):
        layout = frame.evaluate("() => geovizExplorer.layout()")
        assert layout["mode"] == "wide", layout
        page_w = frame.evaluate("() => document.documentElement.clientWidth")
        assert page_w >= 1200
        boxes = {}

        def check(pg, frame):
            boxes.update(_boxes(frame, ["simplex", "samples", "view", "mass", "value"]))

        DOC_SHOTS.mkdir(parents=True, exist_ok=True)
        frames = _drag_circle(pg, frame, shot=DOC_SHOTS / "classroom_1920x1080.png", check=check)
        for name, box in boxes.items():
            assert inside_view(box, 1920, 1080), (name, box)
        iframe = pg.locator("iframe[title*='geoviz_explorer']").first.bounding_box()
        left = min(b["x"] for b in boxes.values())
        right = max(b["x"] + b["width"] for b in boxes.values())
        assert right - left >= 0.85 * iframe["width"], (left, right, iframe)
        # the three columns side by side
        assert boxes["view"]["x"] > boxes["simplex"]["x"] + boxes["simplex"]["width"] - 1
        assert boxes["mass"]["x"] > boxes["view"]["x"] + boxes["view"]["width"] - 1
        _frame_note("1920x1080 dpr 1", frames)


def test_narrow_width_stacks(browser, server):  # noqa: F811
    """A narrow page (as a notebook cell): the parts stack, none wider than the page."""
    with _geodesic(browser, server, 1000, 900) as (pg, frame):
        layout = frame.evaluate("() => geovizExplorer.layout()")
        assert layout["mode"] == "stacked", layout
        page_w = frame.evaluate("() => document.documentElement.clientWidth")
        rights = frame.evaluate(
            "() => ['simplex', 'colorbar', 'samples', 'view', 'mass'].map((id) => {"
            " const e = document.getElementById(id); return e ? e.getBoundingClientRect().right : 0; })"
        )
        assert max(rights) <= page_w + 1, (rights, page_w)
        with contextlib.suppress(OSError):
            SHOTS.mkdir(parents=True, exist_ok=True)
            pg.screenshot(path=str(SHOTS / "classroom_narrow_1000.png"))


def test_a_resized_window_is_laid_out_again(browser, server):  # noqa: F811
    """Opened on a 1920 px screen, then moved to the projector (1280 px): the explorer is laid
    out again for the new width, with the same pick, and nothing is wider than the page; back
    to 1920 px, it spreads again."""
    with _geodesic(browser, server, 1920, 1080) as (pg, frame):
        assert frame.evaluate("() => geovizExplorer.layout().mode") == "wide"
        pick = frame.evaluate("() => geovizExplorer.pick()")
        pg.set_viewport_size({"width": 1280, "height": 800})
        frame.wait_for_function("() => geovizExplorer.relayouts >= 1", timeout=30_000)
        layout = frame.evaluate("() => geovizExplorer.layout()")
        assert layout["mode"] == "beside", layout
        assert frame.evaluate("() => geovizExplorer.pick()") == pick
        widths = frame.evaluate(
            "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert widths[0] <= widths[1] + 1, widths
        boxes = _boxes(frame, ["simplex", "view"])
        for name, box in boxes.items():
            assert inside_view(box, 1280, 800) or box["y"] + box["height"] > 800, (name, box)
            assert box["x"] + box["width"] <= 1280 + 0.5, (name, box)
        pg.set_viewport_size({"width": 1920, "height": 1080})
        frame.wait_for_function("() => geovizExplorer.relayouts >= 2", timeout=30_000)
        assert frame.evaluate("() => geovizExplorer.layout().mode") == "wide"
        _assert_no_exception(pg, "the explorer laid out again")
