"""App latency in a real headless Chromium: cold start, warm start, weight changes.

Measures what a user waits for on the default scenario (Q = MNIST sample,
references Fashion-MNIST, USPS, KMNIST; ``GEOVIZ_APP_N`` samples per dataset,
default 2000; UMAP embedding), by driving the served app with Playwright and
Debian's Chromium exactly as ``tests/test_browser.py`` does:

* **cold**: a fresh server with an empty on-disk cache; open ``/geodesic`` and
  wait for the ternary heatmap (OTDD maps, (2,Q) distances, ``a_hat`` and the
  grid computed), then until the page is idle (sample grid and UMAP drawn);
* **weight change**: one slider step (keyboard) and one click on the ternary
  heatmap, each until the page is idle again with the new ``P_a``, its sample
  grid and its UMAP placement;
* **warm (restart)**: the server restarted on the same disk cache, a new browser;
* **via the landing page**: restarted again, the Datasets page first (after which the
  app compiles UMAP in the background), ``--think`` seconds there, then Geodesic;
* **warm (same server)**: a second browser session on the running server.

Yardstick measured in the same run: the About page (no computation), i.e. what
Streamlit + Chromium alone cost for a page load on this machine.

Run: ``.venv/bin/python benchmarks/bench_app.py`` (``--n 2000``, ``--embedding
umap|pca``). Needs ``/usr/bin/chromium`` and the ``playwright`` package.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_browser import (  # noqa: E402  (the browser test's helpers, one copy)
    CHROMIUM,
    CHROMIUM_ARGS,
    _free_port,
    _healthy,
    _wait_idle,
)


def _start_server(env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cmd = [
        sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"),
        "--server.port", str(port), "--server.address", "127.0.0.1",
        "--server.headless", "true", "--browser.gatherUsageStats", "false",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while not _healthy(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"streamlit did not start: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    return proc, url


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


def _open_geodesic(browser, url: str) -> tuple[object, float, float]:
    """New page on ``/geodesic``: (page, seconds to the drawn simplex, seconds to idle)."""
    page = browser.new_page(viewport={"width": 1500, "height": 1900})
    page.set_default_timeout(600_000)
    t0 = time.monotonic()
    page.goto(f"{url}/geodesic")
    page.wait_for_function(_SIMPLEX_DRAWN, polling=50)
    t_ternary = time.monotonic() - t0
    _wait_idle(page, settle_ms=300)
    return page, t_ternary, time.monotonic() - t0 - 0.3


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
  if (!window.__geovizObserver) {
    window.__geovizObserver = new MutationObserver(() => {
      window.__geovizLastMutation = performance.now();
      const app = document.querySelector('[data-testid=stApp]');
      const state = app && app.getAttribute('data-test-script-state');
      if (state === 'running' && !window.__geovizRunning) {
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


def _report(rows: list[tuple[str, float, str]], args: argparse.Namespace) -> int:
    print(
        f"\ngeoviz app, default scenario (mnist <- fashion_mnist, usps, kmnist), N = {args.n} per "
        f"dataset, grid {args.grid}, embedding {args.embedding}, {os.cpu_count()} CPUs; "
        f"interactions: median of {args.repeat} runs\n"
    )
    print("| what | seconds | target |\n|---|---:|---|")
    for what, sec, target in rows:
        print(f"| {what} | {sec:.2f} | {target} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2000, help="samples per dataset (GEOVIZ_APP_N)")
    p.add_argument("--embedding", choices=["umap", "pca"], default="umap")
    p.add_argument("--grid", type=int, default=30, help="ternary grid resolution (GEOVIZ_APP_GRID)")
    p.add_argument("--no-restart", action="store_true", help="skip the restarted-server rows")
    p.add_argument("--repeat", type=int, default=5, help="runs per interaction (median reported)")
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

    rows: list[tuple[str, float, str]] = []

    def add(what: str, sec: float, target: str = "") -> None:
        rows.append((what, sec, target))
        print(f"{what}: {sec:.2f} s", file=sys.stderr, flush=True)

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
                proc, url = _start_server(env, log)
                try:
                    about = [_about(browser, url) for _ in range(args.repeat)]
                    add("yardstick: About page (no compute), fresh server, median", _median(about))
                finally:
                    _stop(proc)
                # a fresh server and an empty disk cache: the default scenario's first visit
                proc, url = _start_server(env, log)
                try:
                    page, t_tern, t_idle = _open_geodesic(browser, url)
                    add("cold: /geodesic until the ternary heatmap", t_tern, "")
                    add("cold: /geodesic until idle (grid + UMAP drawn)", t_idle, "target <= 20 s")
                    if args.screenshot is not None:
                        page.set_viewport_size({"width": 1400, "height": 1250})
                        page.wait_for_timeout(1500)  # plotly re-layout after the resize
                        page.screenshot(path=str(args.screenshot))
                        page.set_viewport_size({"width": 1500, "height": 1900})
                        _wait_idle(page, settle_ms=300)
                    steps = [_slider_step(page) for _ in range(args.repeat)]
                    add("weight change: one slider step", _median(steps), "target <= 1 s")
                    targets = (40, 200, 300, 120, 400, 260, 80, 350, 20, 180)[: args.repeat]
                    clicks = [_ternary_click(page, k) for k in targets]
                    add("weight change: ternary click", _median(clicks), "target <= 1 s")
                    mc = _mccann_steps(page, args.repeat)
                    add("McCann: one t slider step", _median(mc), "target <= 1 s")
                    page.close()
                    _, t_tern2, _ = _open_geodesic(browser, url)
                    add("warm (same server, new session): until the ternary", t_tern2, "")
                    about = [_about(browser, url) for _ in range(args.repeat)]
                    add("yardstick: About page, warm server, median", _median(about))
                finally:
                    _stop(proc)
                if args.no_restart:
                    return _report(rows, args)
                proc, url = _start_server(env, log)
                try:
                    _, t_tern3, t_idle3 = _open_geodesic(browser, url)
                    add("restarted server (disk cache): until the ternary", t_tern3, "")
                    add("restarted server (disk cache): until idle", t_idle3, "target <= 5 s")
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
