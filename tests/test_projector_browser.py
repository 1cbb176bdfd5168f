"""One screen at a projector on every page (issue 45, item 2), in a real headless Chromium
against the served app (marker ``browser``; tests/test_browser.py's server and helpers).

- McCann at 1280x800: during Play the slider, the moving tiles and the view are inside the
  first viewport together, as on the Geodesic page.
- Presenter mode (the teaching scatter) at 1280x800 and 1920x1080: the whole explorer grows
  (the view, its texts, the captions), and nothing is clipped: the explorer's frame does not
  scroll sideways and its parts lie inside the viewport's width.
- The followed point's labels (x, T_i(x), P_a(x)) do not overlap.
- Captions (the tiles' and the hints) are at least 14 px at 1280.

Screenshots in ``test-output/screenshots/projector_*.png``.
"""

from __future__ import annotations

import contextlib

import pytest
from browser_support import (  # the shared Chromium and app-server set-up
    PAGE_TIMEOUT_MS,
    SHOTS,
    browser,  # noqa: F401 - a fixture
    inside_view,
    server,  # noqa: F401 - the app, a fixture
    sync_playwright,  # noqa: F401 - a fixture
)
from browser_support import assert_no_exception as _assert_no_exception
from browser_support import explorer_frame as _explorer
from browser_support import scenario_link as _scenario_link
from browser_support import wait_idle as _wait_idle

pytestmark = pytest.mark.browser

#: the least caption size readable from the back of a room (CSS px at 1280)
CAPTION_PX = 14
#: the 2-D teaching scenario (presenter mode lives on its scatter)
TEACHING = "2-D Gaussian mixtures"


@contextlib.contextmanager
def _opened(browser, url: str, width: int, height: int):  # noqa: F811
    """``url`` at ``width`` x ``height``; yields (page, explorer frame)."""
    ctx = browser.new_context(viewport={"width": width, "height": height})
    try:
        pg = ctx.new_page()
        pg.set_default_timeout(PAGE_TIMEOUT_MS)
        pg.goto(url)
        frame = _explorer(pg)
        _wait_idle(pg)
        _assert_no_exception(pg, url)
        yield pg, frame
    finally:
        ctx.close()


def _teaching_url(server, page_path: str = "geodesic") -> str:  # noqa: F811
    from geoviz.app.settings import AppSettings, preset_scenarios

    return _scenario_link(server, preset_scenarios(AppSettings(n_default=200))[TEACHING], page_path)


def _box(frame, selector: str) -> dict | None:
    loc = frame.locator(selector)
    return loc.first.bounding_box() if loc.count() else None


def _shot(pg, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SHOTS / f"projector_{name}.png"))


def _scroll_to(pg, frame, selector: str) -> None:
    """The page scrolled so that ``selector`` (in the explorer) starts near the top."""
    frame.locator(selector).first.evaluate("e => e.scrollIntoView({block: 'start'})")
    pg.wait_for_timeout(300)


def _not_clipped(frame) -> dict:
    """The explorer frame's own widths: its document and its root do not scroll sideways."""
    return frame.evaluate(
        """() => { const d = document.documentElement, r = document.getElementById('root');
            return {docScroll: d.scrollWidth, docClient: d.clientWidth,
                    rootScroll: r.scrollWidth, rootClient: r.clientWidth,
                    rootBottom: r.getBoundingClientRect().bottom, frameHeight: window.innerHeight}; }"""
    )


def _caption_sizes(frame) -> list:
    """[font px, id or class] of every visible hint/caption, and the tiles' caption size."""
    return frame.evaluate(
        """() => Array.from(document.querySelectorAll('.hint')).filter((e) => e.offsetParent)
            .map((e) => [parseFloat(getComputedStyle(e).fontSize), e.id || e.className])
            .concat(geovizExplorer.captionPx() ? [[geovizExplorer.captionPx(), 'tiles']] : [])"""
    )


def test_mccann_1280x800_shows_slider_tiles_and_view_together(browser, server):  # noqa: F811
    with _opened(browser, f"{server['url']}/mccann", 1280, 800) as (pg, frame):
        assert frame.evaluate("() => geovizExplorer.header().mode") == "mccann"
        assert frame.evaluate("() => geovizExplorer.layout().mode") == "beside"
        _scroll_to(pg, frame, ".stage")  # the explorer's first row (its titles) at the top
        frame.locator("#play").click()
        pg.wait_for_timeout(600)
        assert frame.evaluate("() => geovizExplorer.play().playing")
        boxes = {s: _box(frame, s) for s in ("#t-slider", "#samples", "#view")}
        _shot(pg, "mccann_1280x800_play")
        for name, box in boxes.items():
            assert inside_view(box, 1280, 800), (name, boxes)
        sizes = _caption_sizes(frame)
        for size, name in sizes:
            assert size >= CAPTION_PX, (name, size, sizes)
        clip = _not_clipped(frame)
        assert clip["docScroll"] <= clip["docClient"], clip


@pytest.mark.parametrize("size", [(1280, 800), (1920, 1080)], ids=["1280x800", "1920x1080"])
def test_presenter_mode_scales_the_explorer_and_never_clips(browser, server, size):  # noqa: F811
    width, height = size
    with _opened(browser, _teaching_url(server), width, height) as (pg, frame):
        normal = {
            "view": _box(frame, "#view"),
            "caption": float(
                frame.evaluate(
                    "() => getComputedStyle(document.getElementById('teach-caption')).fontSize"
                ).rstrip("px")
            ),
        }
        frame.locator("#presenter").check()
        frame.wait_for_function("() => geovizExplorer.layout().presenter === true")
        pg.wait_for_timeout(600)
        _wait_idle(pg)
        frame.wait_for_function("() => geovizExplorer.followed() !== null")
        _scroll_to(pg, frame, "#view")
        _shot(pg, f"presenter_{width}x{height}")
        clip = _not_clipped(frame)
        assert clip["docScroll"] <= clip["docClient"], clip
        assert clip["rootScroll"] <= clip["rootClient"], clip
        assert clip["rootBottom"] <= clip["frameHeight"] + 1, (
            clip
        )  # the frame as tall as its content
        for sel in ("#view", "#teach-caption", "#mass", "#simplex", "#presenter"):
            assert inside_view(_box(frame, sel), width), (sel, _box(frame, sel))
        view = _box(frame, "#view")
        caption = float(
            frame.evaluate(
                "() => getComputedStyle(document.getElementById('teach-caption')).fontSize"
            ).rstrip("px")
        )
        # the whole explorer grows: the view, not only the caption
        assert view["width"] >= max(1.2 * normal["view"]["width"], 0.4 * width), (normal, view)
        assert view["height"] <= height, view
        assert caption > normal["caption"] and caption >= 18, (normal, caption)
        hint = frame.evaluate(
            "() => parseFloat(getComputedStyle(document.querySelector('.hint')).fontSize)"
        )
        assert hint >= 16, hint
        # the followed point's labels: inside the plot, none on another
        labels = frame.evaluate("() => geovizExplorer.followLabels()")
        texts = [b["text"] for b in labels]
        assert "x" in texts and "P_a(x)" in texts and sum(t.startswith("T") for t in texts) >= 2
        for i, a in enumerate(labels):
            assert a["x"] >= 0 and a["x"] + a["w"] <= view["width"], a
            for b in labels[i + 1 :]:
                apart = (
                    a["x"] + a["w"] <= b["x"]
                    or b["x"] + b["w"] <= a["x"]
                    or a["y"] + a["h"] <= b["y"]
                    or b["y"] + b["h"] <= a["y"]
                )
                assert apart, (a, b, labels)


def test_followed_labels_apart_in_the_default_view(browser, server):  # noqa: F811
    """Step 3 of the teaching steps follows one x without presenter mode: its labels too."""
    with _opened(browser, _teaching_url(server), 1280, 800) as (pg, frame):
        for _ in range(3):
            frame.locator("#teach-next").click()
        pg.wait_for_timeout(400)
        labels = frame.evaluate("() => geovizExplorer.followLabels()")
        assert len(labels) >= 4, labels
        for i, a in enumerate(labels):
            for b in labels[i + 1 :]:
                assert (
                    a["x"] + a["w"] <= b["x"]
                    or b["x"] + b["w"] <= a["x"]
                    or a["y"] + a["h"] <= b["y"]
                    or b["y"] + b["h"] <= a["y"]
                ), (a, b)
        _scroll_to(pg, frame, "#view")
        _shot(pg, "teaching_step3_1280x800")
