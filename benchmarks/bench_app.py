"""App latency in a real headless Chromium: cold start, restarted server, the explorer.

Measures what a user waits for on the default scenario (Q = MNIST sample,
references Fashion-MNIST, USPS, KMNIST; ``GEOVIZ_APP_N`` samples per dataset,
default 2000; UMAP embedding), by driving the served app with Playwright and
Debian's Chromium exactly as ``tests/test_browser.py`` does (issue 16's table):

* the server is started as ``make run`` starts it (``python -m geoviz.app.serve``: the pages'
  modules preloaded, the default scenario prefetched in the background; issue 26), and
  the page opened as soon as it answers its health check, as a script would;
* **cold**: a fresh server with an empty on-disk cache; open ``/geodesic`` until the
  weight simplex is drawn (the explorer component says it is ready: OTDD maps, (2,Q)
  distances, ``a_hat`` and the payload computed and drawn), until the embedding view and
  the intervals arrive (computed after the maps, sent by the browser's polls), then idle;
  also counted from the server's launch;
* **explorer drag** (``--repeat`` drags of ``--moves`` pointer moves, ~60 Hz, across the
  triangle in the component's iframe): frame time per move as the component records it
  (``geovizExplorer.frameTimes``: ms from the event's ``timeStamp`` to the drawn frame;
  median and p95 over all moves), Streamlit script runs during the drag and after the
  release (the app's ``data-test-script-state`` going to ``running``), and the time from
  the release until the page is idle;
* **McCann Play**: frames per second of the explorer's Play (``geovizExplorer.playFps``);
* **restarted server** (``--repeat`` restarts on the same disk cache, new browser page
  each): until the simplex is drawn, and until idle;
* **via the landing page**: restarted again, the Datasets page first, ``--think``
  seconds there, then Geodesic;
* **warm (same server)**: a second browser session on the running server.

Before the explorer component (no ``geoviz_explorer`` frame on the page) the weight rows
fall back to the server-side picker: one slider step, one ternary click, one McCann t step.

Yardstick measured in the same run: the About page (no computation), i.e. what
Streamlit + Chromium alone cost for a page load on this machine.

Run: ``.venv/bin/python benchmarks/bench_app.py`` (``--n 2000``, ``--embedding
umap|pca``, ``--repeat 5``, ``--moves 120``). Needs ``/usr/bin/chromium`` and the
``playwright`` package.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_browser import (  # noqa: E402  (the browser test's helpers, one copy)
    CHROMIUM,
    CHROMIUM_ARGS,
    _free_port,
    _healthy,
    _wait_idle,
)

#: when the last server was launched (time.monotonic()): the "from launch" rows count from here
_LAUNCHED = [0.0]


def _start_server(env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    """The app as ``make run`` starts it (``python -m geoviz.app.serve``: preload, prefetch of
    the default scenario unless ``GEOVIZ_PREFETCH=0``, then ``streamlit run``)."""
    port = _free_port()
    cmd = [
        sys.executable, "-m", "geoviz.app.serve",
        "--server.port", str(port), "--server.address", "127.0.0.1",
        "--server.headless", "true", "--browser.gatherUsageStats", "false",
    ]  # fmt: skip
    _LAUNCHED[0] = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while not _healthy(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"streamlit did not start: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    return proc, url


def _since_launch() -> float:
    return time.monotonic() - _LAUNCHED[0]


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


# the weight simplex is drawn: the explorer component's frame says it is ready (issue 16),
# or, before the component, Plotly's ternary heatmap
_SIMPLEX_DRAWN = """() => {
  if (document.querySelector("[data-testid='stPlotlyChart'] g.ternary")) return true;
  for (const f of document.querySelectorAll("iframe")) {
    try {
      const x = f.contentWindow && f.contentWindow.geovizExplorer;
      if (x && x.ready) return true;
    } catch (e) {}
  }
  return false;
}"""


def _explorer_frame(page):
    """The explorer component's frame once drawn, or ``None`` (no component on the page)."""
    for frame in page.frames:
        if "geoviz_explorer" not in (frame.url or ""):
            continue
        try:
            if frame.evaluate("() => !!(window.geovizExplorer && window.geovizExplorer.ready)"):
                return frame
        except Exception:  # a frame being replaced
            continue
    return None


# the explorer has everything: the embedding view drawn and nothing pending (issue 26: it
# arrives after the simplex, by the browser's polls)
_ALL_DRAWN = """() => {
  for (const f of document.querySelectorAll("iframe")) {
    try {
      const x = f.contentWindow && f.contentWindow.geovizExplorer;
      if (x && x.ready && x.view() !== "pending" && x.pending().length === 0) return true;
    } catch (e) {}
  }
  return false;
}"""


@dataclass(frozen=True)
class Opened:
    """A ``/geodesic`` page opened by :func:`_open_geodesic`, and its times (seconds)."""

    page: Any  # playwright Page
    drawn: float  # to the drawn simplex
    idle: float  # to the page's idle state
    all_drawn: float  # to the explorer with everything (the embedding view and the intervals)
    drawn_from_launch: float  # the drawn simplex, counted from the server's launch
    all_from_launch: float


def _open_geodesic(browser, url: str) -> Opened:
    """New page on ``/geodesic``, timed until the simplex is drawn, until everything is, and
    until idle."""
    page = browser.new_page(viewport={"width": 1500, "height": 1900})
    page.set_default_timeout(600_000)
    t0 = time.monotonic()
    page.goto(f"{url}/geodesic")
    page.wait_for_function(_SIMPLEX_DRAWN, polling=50)
    drawn, drawn_from_launch = time.monotonic() - t0, _since_launch()
    if _explorer_frame(page) is not None:
        page.wait_for_function(_ALL_DRAWN, polling=50)
    all_drawn, all_from_launch = time.monotonic() - t0, _since_launch()
    _wait_idle(page, settle_ms=300)
    idle = time.monotonic() - t0 - 0.3
    return Opened(page, drawn, idle, all_drawn, drawn_from_launch, all_from_launch)


def _about(browser, url: str) -> float:
    page = browser.new_page()
    t0 = time.monotonic()
    page.goto(f"{url}/about")
    page.wait_for_selector("h1:has-text('About')")
    _wait_idle(page, settle_ms=300)
    elapsed = time.monotonic() - t0 - 0.3
    page.close()
    return elapsed


# the URL's "a=..." changes with every new weight vector
_URL_CHANGED = "(b) => window.location.search !== b"
# a script (or fragment) run started by the action has finished
_RUN_DONE = "() => window.__geovizScriptDone > 0"
NAV_LINK = "[data-testid='stSidebar'] [data-testid='stPageLink-NavLink']"


# records the time of the last DOM change: the moment the page looked final to a user
_WATCH_DOM = """() => {
  window.__geovizLastMutation = performance.now();
  window.__geovizScriptDone = 0;
  window.__geovizRunning = 0;
  window.__geovizStarted = 0;
  window.__geovizRuns = 0;
  if (!window.__geovizObserver) {
    window.__geovizObserver = new MutationObserver(() => {
      window.__geovizLastMutation = performance.now();
      const app = document.querySelector('[data-testid=stApp]');
      const state = app && app.getAttribute('data-test-script-state');
      if (state === 'running' && !window.__geovizRunning) {
        window.__geovizRuns += 1;
        window.__geovizRunning = performance.now();
        window.__geovizStarted = window.__geovizStarted || window.__geovizRunning;
      }
      if (state === 'notRunning' && window.__geovizRunning) {
        window.__geovizScriptDone = performance.now();
        window.__geovizRunning = 0;
      }
    });
    window.__geovizObserver.observe(document.body, {subtree: true, childList: true,
      attributes: true, characterData: true});
  }
  return performance.now();
}"""


def _until_settled(page, action, *, weights_change: bool = True) -> float:
    """Seconds from ``action()`` to the last DOM change before the app went idle.

    With ``weights_change`` the URL's weights must change too (the action really
    picked new weights); otherwise a finished run is enough.
    """
    t0 = page.evaluate(_WATCH_DOM)
    before = page.evaluate("() => window.location.search")
    action()
    if weights_change:
        page.wait_for_function(_URL_CHANGED, arg=before)
    page.wait_for_function(_RUN_DONE)
    _wait_idle(page, settle_ms=1000)
    done = page.evaluate(
        "() => [window.__geovizStarted, window.__geovizScriptDone, window.__geovizLastMutation]"
    )
    start_s, script_s, total_s = ((t - t0) / 1000.0 for t in done)
    print(
        f"  script ran {start_s:.2f} -> {script_s:.2f} s, last DOM change {total_s:.2f} s",
        file=sys.stderr,
    )
    return total_s


def _slider_step(page) -> float:
    slider = page.locator("[data-testid='stSlider'] input[type='range']").first
    slider.focus()
    return _until_settled(page, lambda: page.keyboard.press("ArrowRight"))


def _ternary_click(page, index: int) -> float:
    points = page.locator("[data-testid='stPlotlyChart'] g.ternary g.points").first.locator(
        "path.point"
    )
    box = points.nth(index).bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x - 12, y + 12)
    page.mouse.move(x, y, steps=4)
    page.wait_for_timeout(300)  # let the hover label settle before timing

    def click() -> None:
        page.mouse.down()
        page.mouse.up()

    return _until_settled(page, click)


def _mccann_steps(page, n: int) -> list[float]:
    """Go to the McCann page (same session) and step its t slider ``n`` times."""
    page.locator(NAV_LINK, has_text="4 · McCann").first.click()
    page.wait_for_selector("h1:has-text('McCann')")
    _wait_idle(page, settle_ms=300)
    slider = page.locator("[data-testid='stSlider'] input[type='range']").first
    slider.focus()
    return [
        _until_settled(page, lambda: page.keyboard.press("ArrowRight"), weights_change=False)
        for _ in range(n)
    ]


def _drag_path(box: dict, n: int, phase: float = 0.0) -> list[tuple[float, float]]:
    """``n`` points inside the simplex drawn in ``box``: most of a loop near the three
    vertices, starting at ``phase`` (a fraction of the loop; drags end at different weights)."""
    import math

    w, h = box["width"], box["height"]
    verts = [(0.5 * w, 0.14 * h), (0.1 * w, 0.86 * h), (0.9 * w, 0.86 * h)]
    cx, cy = sum(v[0] for v in verts) / 3, sum(v[1] for v in verts) / 3
    out = []
    for k in range(n):
        th = 2 * math.pi * (phase + 0.8 * k / max(1, n - 1))
        a = [max(0.0, math.cos(th - 2 * math.pi * i / 3)) + 0.05 for i in range(3)]
        s = sum(a)
        x = sum(ai / s * v[0] for ai, v in zip(a, verts, strict=True))
        y = sum(ai / s * v[1] for ai, v in zip(a, verts, strict=True))
        out.append((box["x"] + cx + 0.85 * (x - cx), box["y"] + cy + 0.85 * (y - cy)))
    return out


def _explorer_drag(page, frame, moves: int, phase: float = 0.0) -> dict[str, float]:
    """Drag across the explorer's simplex with ``moves`` pointer moves, then release.

    Returns the frame times (ms from each ``pointermove``'s ``event.timeStamp`` to the
    drawn frame, recorded by the component in ``geovizExplorer.frameTimes``), the
    Streamlit script runs during the drag and after the release, and the seconds from
    the release until the page was idle again.
    """
    box = frame.locator("canvas#simplex").bounding_box()
    path = _drag_path(box, moves + 1, phase)
    n_before = frame.evaluate("() => geovizExplorer.frameTimes.length")
    page.mouse.move(*path[0])
    page.evaluate(_WATCH_DOM)  # counts script runs from here
    page.mouse.down()
    for x, y in path[1:]:
        page.mouse.move(x, y)
        page.wait_for_timeout(10)  # about a 60 Hz pointer
    page.wait_for_timeout(300)  # any rerun the drag caused would have started by now
    during = page.evaluate("() => window.__geovizRuns")
    t_up = page.evaluate(_WATCH_DOM)
    before = page.evaluate("() => window.location.search")
    page.mouse.up()
    with contextlib.suppress(Exception):  # the same weights as before leave the URL alone
        page.wait_for_function(_URL_CHANGED, arg=before, timeout=10_000)
    with contextlib.suppress(Exception):
        page.wait_for_function(_RUN_DONE, timeout=30_000)
    _wait_idle(page, settle_ms=1000)
    after, last = page.evaluate("() => [window.__geovizRuns, window.__geovizLastMutation]")
    times = frame.evaluate(f"() => geovizExplorer.frameTimes.slice({n_before})")
    return {
        "frames": times,
        "during": during,
        "after": after,
        "idle": (last - t_up) / 1000.0,
    }


def _mccann_play(page) -> float | None:
    """Open the McCann page (same session), press the explorer's Play: frames per second."""
    page.locator(NAV_LINK, has_text="4 · McCann").first.click()
    page.wait_for_selector("h1:has-text('McCann')")
    deadline = time.monotonic() + 300
    frame = None
    while frame is None and time.monotonic() < deadline:
        frame = _explorer_frame(page)
        if frame is not None and frame.evaluate("() => geovizExplorer.header().mode") != "mccann":
            frame = None
        if frame is None:
            page.wait_for_timeout(200)
    if frame is None:
        return None
    _wait_idle(page, settle_ms=300)
    frame.locator("#play").click()
    frame.wait_for_function("() => geovizExplorer.playFps !== null", timeout=60_000)
    return float(frame.evaluate("() => geovizExplorer.playFps"))


def _via_landing_page(browser, url: str, think: float) -> tuple[float, float]:
    """Open the app's start page, stay ``think`` seconds, go to Geodesic."""
    page = browser.new_page(viewport={"width": 1500, "height": 1900})
    page.set_default_timeout(600_000)
    t0 = time.monotonic()
    page.goto(url)
    page.wait_for_selector("h1:has-text('datasets between datasets')")
    _wait_idle(page, settle_ms=300)
    t_land = time.monotonic() - t0 - 0.3
    page.wait_for_timeout(think * 1000)
    t0 = time.monotonic()
    page.locator(NAV_LINK, has_text="3 · Geodesic").first.click()
    page.wait_for_function(_SIMPLEX_DRAWN, polling=50)
    _wait_idle(page, settle_ms=300)
    t_geo = time.monotonic() - t0 - 0.3
    page.close()
    return t_land, t_geo


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return float(ordered[k])


def _report(rows: list[tuple[str, str, str]], args: argparse.Namespace) -> int:
    print(
        f"\ngeoviz app, default scenario (mnist <- fashion_mnist, usps, kmnist), N = {args.n} per "
        f"dataset, embedding {args.embedding}, {os.cpu_count()} CPUs, headless Chromium; "
        f"page loads and interactions: median of {args.repeat} runs unless noted\n"
    )
    print("| what | measured | target |\n|---|---:|---|")
    for what, value, target in rows:
        print(f"| {what} | {value} | {target} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2000, help="samples per dataset (GEOVIZ_APP_N)")
    p.add_argument("--embedding", choices=["umap", "pca"], default="umap")
    p.add_argument("--grid", type=int, default=30, help="ternary grid resolution (GEOVIZ_APP_GRID)")
    p.add_argument("--no-restart", action="store_true", help="skip the restarted-server rows")
    p.add_argument("--repeat", type=int, default=5, help="runs per interaction (median reported)")
    p.add_argument(
        "--moves", type=int, default=120, help="pointer moves per explorer drag (>= 100)"
    )
    p.add_argument(
        "--think", type=float, default=10.0,
        help="seconds a user spends on the Datasets page before opening Geodesic",
    )  # fmt: skip
    p.add_argument(
        "--screenshot", type=Path, default=None,
        help="save the top of the cold geodesic page as this PNG (the README picture)",
    )  # fmt: skip
    args = p.parse_args(argv)

    from playwright.sync_api import sync_playwright

    rows: list[tuple[str, str, str]] = []

    def add(what: str, value: float | str, target: str = "") -> None:
        text = f"{value:.2f} s" if isinstance(value, float) else str(value)
        rows.append((what, text, target))
        print(f"{what}: {text}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="geoviz-bench-app-") as tmp:
        env = {
            **os.environ,
            "GEOVIZ_APP_N": str(args.n),
            "GEOVIZ_APP_GRID": str(args.grid),
            "GEOVIZ_EMBEDDING": args.embedding,
            "GEOVIZ_CACHE_DIR": str(Path(tmp) / "cache"),
            "GEOVIZ_EXPORT_DIR": str(Path(tmp) / "exports"),
        }
        log = Path(tmp) / "server.log"
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
            )
            try:
                # the yardstick's server computes nothing ahead and has a cache of its own: its
                # prefetch would slow the About page and fill the cold server's disk cache
                yard_env = {
                    **env,
                    "GEOVIZ_PREFETCH": "0",
                    "GEOVIZ_CACHE_DIR": str(Path(tmp) / "cache-yardstick"),
                }
                proc, url = _start_server(yard_env, log)
                try:
                    about = [_about(browser, url) for _ in range(args.repeat)]
                    add("yardstick: About page (no compute), fresh server", _median(about))
                finally:
                    _stop(proc)
                # a fresh server and an empty disk cache: the default scenario's first visit
                proc, url = _start_server(env, log)
                try:
                    cold = _open_geodesic(browser, url)
                    page, t_tern, t_idle = cold.page, cold.drawn, cold.idle
                    add("cold: /geodesic until the simplex is drawn", t_tern, "<= 8 s")
                    add(
                        "cold: /geodesic until the embedding view and intervals are drawn",
                        cold.all_drawn,
                    )
                    add("cold: /geodesic until idle", t_idle, "")
                    add(
                        "cold, counted from the server's launch: until the simplex is drawn",
                        cold.drawn_from_launch,
                    )
                    add(
                        "cold, counted from the server's launch: until everything is drawn",
                        cold.all_from_launch,
                    )
                    if args.screenshot is not None:
                        page.set_viewport_size({"width": 1400, "height": 1250})
                        page.wait_for_timeout(1500)  # re-layout after the resize
                        page.screenshot(path=str(args.screenshot))
                        page.set_viewport_size({"width": 1500, "height": 1900})
                        _wait_idle(page, settle_ms=300)
                    frame = _explorer_frame(page)
                    if frame is not None:
                        drags = [
                            _explorer_drag(page, frame, args.moves) for _ in range(args.repeat)
                        ]
                        frames = [t for d in drags for t in d["frames"]]
                        add(
                            f"frame time per pointer move, median ({len(frames)} moves, "
                            f"{args.repeat} drags)",
                            f"{statistics.median(frames):.1f} ms",
                            "<= 16 ms",
                        )
                        add(
                            "frame time per pointer move, p95",
                            f"{_percentile(frames, 95):.1f} ms",
                            "<= 50 ms",
                        )
                        add(
                            "server script runs during a drag (each drag)",
                            ", ".join(str(d["during"]) for d in drags),
                            "0",
                        )
                        add(
                            "server script runs after the release (each drag)",
                            ", ".join(str(d["after"] - d["during"]) for d in drags),
                            "exactly 1",
                        )
                        add(
                            "release until idle",
                            _median([d["idle"] for d in drags]),
                            "<= 1 s",
                        )
                        fps = _mccann_play(page)
                        add(
                            "McCann Play (frames per second)",
                            "n/a" if fps is None else f"{fps:.0f} fps",
                            ">= 30 fps",
                        )
                    else:  # the server-side picker (before the explorer component)
                        steps = [_slider_step(page) for _ in range(args.repeat)]
                        add("weight change: one slider step", _median(steps), "<= 1 s")
                        targets = (40, 200, 300, 120, 400, 260, 80, 350, 20, 180)[: args.repeat]
                        clicks = [_ternary_click(page, k) for k in targets]
                        add("weight change: ternary click", _median(clicks), "<= 1 s")
                        mc = _mccann_steps(page, args.repeat)
                        add("McCann: one t slider step", _median(mc), "<= 1 s")
                    page.close()
                    t_tern2 = _open_geodesic(browser, url).drawn
                    add("warm (same server, new session): until the simplex is drawn", t_tern2, "")
                    about = [_about(browser, url) for _ in range(args.repeat)]
                    add("yardstick: About page (no compute), warm server", _median(about))
                finally:
                    _stop(proc)
                if args.no_restart:
                    return _report(rows, args)
                proc, url = _start_server(env, log)
                try:
                    restarts = []
                    for k in range(args.repeat):
                        if k:
                            _stop(proc)
                            proc, url = _start_server(env, log)
                        opened = _open_geodesic(browser, url)
                        opened.page.close()
                        restarts.append((opened.drawn, opened.idle, opened.drawn_from_launch))
                    add(
                        "restarted server, warm disk cache: until the simplex is drawn",
                        _median([r[0] for r in restarts]),
                        "<= 3 s",
                    )
                    add(
                        "restarted server, counted from the launch: until the simplex is drawn",
                        _median([r[2] for r in restarts]),
                    )
                    add(
                        "restarted server, warm disk cache: until idle",
                        _median([r[1] for r in restarts]),
                        "",
                    )
                finally:
                    _stop(proc)
                proc, url = _start_server(env, log)
                try:
                    t_land, t_geo = _via_landing_page(browser, url, args.think)
                    add("warm (restarted): Datasets page until idle", t_land, "")
                    add(
                        f"  then, after {args.think:g} s on it, Geodesic until idle (UMAP warmed up)",
                        t_geo,
                        "",
                    )
                finally:
                    _stop(proc)
            finally:
                browser.close()

    return _report(rows, args)


if __name__ == "__main__":
    raise SystemExit(main())
