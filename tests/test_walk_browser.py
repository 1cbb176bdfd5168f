"""Walk every page at a projector's 1280x800 and a wide 1920x1080, on the default preset, the
colour preset and the 2-D preset, in a real headless Chromium against the served app (issue
45, "done when"; markers ``browser`` and ``slow``).

On every page, at both sizes, on each preset:

- no exception box and no error box;
- nothing is cut or clipped sideways: the document and the main section do not scroll
  sideways, no element of the main block reaches past the viewport, no table scrolls its
  columns sideways inside its frame, no select box cuts its chosen value;
- the title starts near the top (no ~120 px of empty space above it);
- the key views are on screen together: on the Geodesic page the simplex, the pick's
  readout and the data that move with it (the tiles or the scatter) inside the first
  viewport; on the McCann page the slider, the tiles or the scatter and the view once the
  explorer's stage is scrolled to the top (as during Play, tests/test_projector_browser.py).

Screenshots (the first viewport) go to ``test-output/walk/<preset>_<page>_<size>.png`` and
each view's time to ``test-output/walk/timings.txt``. Every failure of a walk is collected
and reported together, so one run shows the whole matrix.

The colour preset's first view computes its encoder features and its maps on a cold cache
(minutes on a loaded machine): its walk starts at the Geodesic page with a long timeout.
"""

from __future__ import annotations

import contextlib
import time

import pytest
from browser_support import (  # the shared Chromium and app-server set-up
    PAGE_TIMEOUT_MS,
    ROOT,
    browser,  # noqa: F401 - a fixture
    explorer_frame,
    inside_view,
    scenario_link,
    server,  # noqa: F401 - the app, a fixture
    sync_playwright,  # noqa: F401 - a fixture
    wait_idle,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WALK = ROOT / "test-output" / "walk"
SIZES = {"1280x800": (1280, 800), "1920x1080": (1920, 1080)}
PRESETS = {
    "default": "*NIST (MNIST ← Fashion-MNIST, USPS, KMNIST)",
    "colour": "Colour digits (MNIST-M-style ← MNIST, Fashion-MNIST, USPS)",
    "2d": "2-D Gaussian mixtures",
}
#: the URL path of every page ("" the start page); the Geodesic page first: it computes what
#: the others show
PAGES = ("geodesic", "", "datasets", "maps", "mccann", "export", "about", "evidence")
#: the colour preset's first view on a cold cache (encoder features, three maps), seconds
COLD_COLOUR_S = 1500
#: the title's top may sit this far below the viewport's top (it was ~120 px lower)
TITLE_TOP_PX = 100

_CLIPPED_JS = """() => {
  const vw = document.documentElement.clientWidth, out = {vw};
  const doc = document.documentElement, main = document.querySelector('[data-testid=stMain]');
  out.docScroll = doc.scrollWidth;
  out.mainScroll = main ? main.scrollWidth : 0; out.mainClient = main ? main.clientWidth : 0;
  const block = document.querySelector('[data-testid=stMainBlockContainer]');
  const name = (e) => (e.dataset && e.dataset.testid) || e.tagName.toLowerCase();
  const text = (e) => (e.innerText || '').trim().slice(0, 60);
  out.wide = []; out.cutTables = []; out.cutSelects = [];
  if (!block) return out;
  for (const e of block.querySelectorAll('*')) {
    const r = e.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    const s = getComputedStyle(e);
    if (s.visibility === 'hidden' || s.position === 'fixed') continue;
    // inside something that scrolls or clips sideways on purpose (a table's canvas)
    let p = e.parentElement, inner = false;
    while (p && p !== block) {
      const ps = getComputedStyle(p);
      if (ps.overflowX === 'auto' || ps.overflowX === 'scroll' || ps.overflowX === 'hidden') {
        inner = true; break; }
      p = p.parentElement;
    }
    if (!inner && (r.right > vw + 1 || r.left < -1))
      out.wide.push([name(e), Math.round(r.left), Math.round(r.right), text(e)]);
  }
  // a table (or anything) that scrolls its content sideways inside its own frame: cut
  for (const e of block.querySelectorAll('*')) {
    const s = getComputedStyle(e);
    if (!(s.overflowX === 'auto' || s.overflowX === 'scroll') || e.clientWidth === 0) continue;
    if (e.scrollWidth > e.clientWidth + 2) {
      const where = e.closest('[data-testid=stDataFrame], [data-testid=stTable], [data-testid=stElementContainer]') || e;
      out.cutTables.push([name(where), e.clientWidth, e.scrollWidth, text(where)]);
    }
  }
  for (const s of block.querySelectorAll('[data-testid=stSelectbox], [data-testid=stMultiSelect]')) {
    if (s.getBoundingClientRect().width === 0) continue;
    // the chosen value is cut where its box clips it (with an ellipsis or without)
    for (const v of s.querySelectorAll('[data-baseweb=select] *')) {
      const vs = getComputedStyle(v);
      const clips = vs.textOverflow === 'ellipsis' || vs.overflowX === 'hidden';
      if (v.tagName === 'INPUT' || !(v.textContent || '').trim()) continue;
      if (v.clientWidth > 0 && clips && v.scrollWidth > v.clientWidth + 1)
        out.cutSelects.push([text(s.querySelector('label') || s), (v.textContent || '').slice(0, 60)]);
    }
  }
  return out;
}"""

_DRAWN_JS = """() => !document.querySelector('[data-testid=stSkeleton], [data-stale=true]')
  && document.querySelectorAll("[data-testid=stSidebar] [data-testid=stPageLink-NavLink]").length >= 8"""

_FRAME_CLIPPED_JS = """() => { const d = document.documentElement, r = document.getElementById('root');
  return {docScroll: d.scrollWidth, docClient: d.clientWidth,
          rootScroll: r ? r.scrollWidth : 0, rootClient: r ? r.clientWidth : 0}; }"""


@pytest.fixture(scope="module")
def scenarios():
    from geoviz.app.settings import AppSettings, preset_scenarios

    presets = preset_scenarios(AppSettings.from_env({"GEOVIZ_APP_N": "200"}))
    return {key: presets[title] for key, title in PRESETS.items()}


def _box(frame, selector: str) -> dict | None:
    loc = frame.locator(selector)
    if not loc.count():
        return None
    box = loc.first.bounding_box()
    return box if box and box["width"] > 0 and box["height"] > 0 else None


def _problems_of_view(pg, path: str, width: int, height: int) -> list[str]:
    """What is wrong with the page on screen: errors, clipping, the title's place."""
    problems = []
    for testid in ("stException", "stAlertContentError"):
        boxes = pg.locator(f"[data-testid='{testid}']")
        if boxes.count():
            problems.append(f"{testid}: {boxes.first.inner_text()[:300]}")
    clip = pg.evaluate(_CLIPPED_JS)
    if clip["docScroll"] > clip["vw"] + 1:
        problems.append(f"the page scrolls sideways ({clip['docScroll']} > {clip['vw']})")
    if clip["mainScroll"] > clip["mainClient"] + 1:
        problems.append(
            f"the main section scrolls sideways: {clip['mainScroll']} > {clip['mainClient']}"
        )
    if clip["wide"]:
        problems.append(f"elements past the viewport: {clip['wide'][:5]}")
    if clip["cutTables"]:
        problems.append(f"tables cut sideways: {clip['cutTables'][:5]}")
    if clip["cutSelects"]:
        problems.append(f"selects cut: {clip['cutSelects'][:5]}")
    title = pg.locator("[data-testid='stMainBlockContainer'] h1").first
    box = title.bounding_box() if title.count() else None
    if box is None or box["y"] > TITLE_TOP_PX:
        problems.append(f"the title is not near the top: {box}")
    if path in ("geodesic", "mccann"):
        frame = explorer_frame(pg)
        inner = frame.evaluate(_FRAME_CLIPPED_JS)
        if (
            inner["docScroll"] > inner["docClient"] + 1
            or inner["rootScroll"] > inner["rootClient"] + 1
        ):
            problems.append(f"the explorer scrolls sideways: {inner}")
        problems += _key_views(pg, frame, path, width, height)
    return problems


def _key_views(pg, frame, path: str, width: int, height: int) -> list[str]:
    """The views that belong together are inside the first viewport together."""
    moving = "#samples" if _box(frame, "#samples") else "#view"
    if path == "geodesic":
        wanted = ["#simplex", "#value", "#play", moving]
    else:  # McCann: as during Play, with the explorer's stage at the top
        frame.locator(".stage").first.evaluate("e => e.scrollIntoView({block: 'start'})")
        pg.wait_for_timeout(300)
        wanted = ["#t-slider", moving, "#view"]
    boxes = {s: _box(frame, s) for s in dict.fromkeys(wanted)}
    out = [
        f"{s} is not inside the first {width}x{height} view: {b}"
        for s, b in boxes.items()
        if not inside_view(b, width, height)
    ]
    if path == "mccann":
        pg.locator("[data-testid='stMain']").evaluate("e => e.scrollTo(0, 0)")
    return out


def _log(line: str) -> None:
    WALK.mkdir(parents=True, exist_ok=True)
    with open(WALK / "timings.txt", "a", encoding="utf-8") as f:
        f.write(line + "\n")


@pytest.fixture(scope="module", autouse=True)
def _fresh_walk_log():
    WALK.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        (WALK / "timings.txt").unlink()


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("preset", list(PRESETS))
def test_walk_every_page(browser, server, scenarios, preset: str, size: str):  # noqa: F811
    width, height = SIZES[size]
    ctx = browser.new_context(viewport={"width": width, "height": height})
    failures: dict[str, list[str]] = {}
    try:
        pg = ctx.new_page()
        pg.set_default_timeout(PAGE_TIMEOUT_MS)
        for i, path in enumerate(PAGES):
            cold = preset == "colour" and i == 0
            start = time.monotonic()
            pg.goto(scenario_link(server, scenarios[preset], path))
            try:
                if path in ("geodesic", "mccann"):
                    explorer_frame(pg, timeout_s=COLD_COLOUR_S if cold else PAGE_TIMEOUT_MS / 1000)
                wait_idle(pg, timeout_s=COLD_COLOUR_S if cold else None)
                # the whole page drawn: no placeholder left, no element of a run before
                pg.wait_for_function(_DRAWN_JS, timeout=120_000)
                pg.wait_for_timeout(500)
            except AssertionError as err:
                failures[path or "start"] = [f"did not finish: {str(err)[:300]}"]
                continue
            seconds = time.monotonic() - start
            pg.screenshot(path=str(WALK / f"{preset}_{path or 'start'}_{size}.png"))
            problems = _problems_of_view(pg, path, width, height)
            _log(
                f"{preset:8s} {size:9s} {path or 'start':9s} {seconds:7.1f} s  "
                f"{'ok' if not problems else 'FAIL'}"
            )
            if problems:
                failures[path or "start"] = problems
    finally:
        ctx.close()
    assert not failures, "\n".join(f"{p}: {v}" for p, v in failures.items())
