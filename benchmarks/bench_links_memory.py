"""Load test: four visitors on the Geodesic page at default settings, then their tabs closed
(issue 32 item 5, issue 41 item 5).

At ``eb7d397``, four open links (image size 100, N 2000) on the Geodesic page took the server
385 -> 1,642 -> 2,367 -> 3,054 -> 3,801 MB (peak 3,988 MB against the 2,048 MB of
``GEOVIZ_FIT_CACHE_MB``), and 720 s after the tabs closed it still held 3,013 MB: it fell only
when a new visitor came. This script starts the app as ``make run`` does (``python -m
geoviz.app.serve``: preload, prefetch of the default scenario), with **every setting at its
default** (budget 2,048 MB, 10 idle minutes, ``server.disconnectedSessionTTL`` 120 s, the UMAP
embedding) except a fresh disk cache, on a port in 8720-8739, and:

1. reads the idle RSS: the same server started with nothing to compute (``GEOVIZ_PREFETCH=0``;
   its modules preloaded, no visitor yet: the 385 MB the issue measured; a first visit also
   warms UMAP up, ~+200 MB); then starts the server with every default, waits for its prefetch,
   opens and closes the start page, and reads it again;
2. opens, in headless Chromium, one tab per scenario on ``/geodesic?scenario=<token>`` (the
   default *NIST scenario at ``--image-size`` and ``--n``, seeds 0, 1, 2, ...: distinct
   scenarios), each waited for until the explorer has drawn and its background parts (the
   bootstrap intervals, the embedding view) have arrived; the tabs stay open;
3. keeps every tab open ``--stay`` seconds (their pages beat their sessions' leases);
4. closes every tab and, **with no other visitor**, reads the RSS every ``--sample`` seconds
   for ``--after`` seconds (default: the idle time + the lease grace + two sweeps).

The RSS (``VmRSS`` of the server) is sampled every 0.5 s throughout; the table gives each
moment, its excess over idle and the bound the issue sets, idle + ``GEOVIZ_FIT_CACHE_MB`` +
300 MB, with idle the RSS of the server that computed nothing (the stricter reading: the
prefetched default scenario counts against the budget, not the idle). The server's ``sweep:`` log lines (what the timer gave back) follow the table.
``--root`` runs another checkout's app (a ``git worktree`` of an older commit) the same way.

Run: ``.venv/bin/python benchmarks/bench_links_memory.py`` (about 30 min on 2 cores: the fits
are computed cold, then the after-close watch takes ~14 min).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "tests"))
sys.path.insert(0, str(HERE / "benchmarks"))

from bench_uploads import free_port, rss_mb  # noqa: E402
from test_browser import CHROMIUM, CHROMIUM_ARGS, _healthy, _wait_idle  # noqa: E402

from geoviz.app.jobs import LEASE_GRACE_SECONDS  # noqa: E402
from geoviz.app.settings import fit_cache_knobs  # noqa: E402

#: the server's log line once the default scenario is prefetched (or failed to be)
PREFETCHED = re.compile(r"default scenario prefetched|prefetching the default scenario failed")


def start(root: Path, env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m geoviz.app.serve`` of ``root`` on a free port, Streamlit's options at their
    defaults; ``(process, url)`` once it answers."""
    port = free_port()
    cmd = [
        sys.executable, "-m", "geoviz.app.serve",
        "--server.port", str(port), "--server.address", "127.0.0.1",
        "--server.headless", "true", "--browser.gatherUsageStats", "false",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while not _healthy(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"the app did not start: {log.read_text()[-2000:]}")
        time.sleep(0.3)
    return proc, url


class Sampler:
    """The RSS of ``pid`` every 0.5 s, with the time: ``peak(since, until)`` reads them."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.samples.append((time.monotonic(), rss_mb(self.pid)))
            except OSError:
                return

    def peak(self, since: float, until: float | None = None) -> float:
        end = time.monotonic() if until is None else until
        return max((mb for t, mb in list(self.samples) if since <= t <= end), default=0.0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def visit_start_page(browser: object, url: str) -> None:
    """Open the start page in a new tab, wait until it has run, close the tab."""
    ctx = browser.new_context()  # type: ignore[attr-defined]
    pg = ctx.new_page()
    pg.set_default_timeout(600_000)
    pg.goto(url)
    _wait_idle(pg)
    ctx.close()


def idle_rss(root: Path, env: dict[str, str], log: Path) -> float:
    """RSS of ``root``'s server that computed nothing: no prefetch, no visitor, 10 s after it
    answered."""
    proc, _url = start(root, {**env, "GEOVIZ_PREFETCH": "0"}, log)
    try:
        time.sleep(10)
        return rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def links(root: Path, n: int, image_size: int, count: int) -> list[str]:
    """Query strings of ``count`` distinct scenarios (seeds 0..count-1) of ``root``'s app."""
    code = (
        "from geoviz.app.links import scenario_to_token; "
        "from geoviz.app.settings import default_scenario; "
        f"base = default_scenario().with_(n_target={n}, n_reference={n}, image_size={image_size}); "
        f"[print(scenario_to_token(base.with_(seed=s))) for s in range({count})]"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        check=True,
    )
    return [f"scenario={line.strip()}" for line in out.stdout.splitlines() if line.strip()]


def wait_for_log(log: Path, pattern: re.Pattern[str], timeout: float) -> str:
    """The first line of ``log`` matching ``pattern`` (waited for up to ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if pattern.search(line):
                return line
        time.sleep(2)
    raise SystemExit(f"no {pattern.pattern!r} in the server log within {timeout:.0f} s")


def explorer_complete(pg: object, timeout: float) -> None:
    """Wait until the Geodesic page's explorer has drawn and nothing is pending in it (the
    bootstrap's intervals and the embedding view arrived), and the page is idle."""
    deadline = time.monotonic() + timeout
    probe = "() => !!(window.geovizExplorer && geovizExplorer.ready && !geovizExplorer.pending().length)"
    while time.monotonic() < deadline:
        for frame in pg.frames:  # type: ignore[attr-defined]
            if "geoviz_explorer" in (frame.url or ""):
                with contextlib.suppress(Exception):
                    if frame.evaluate(probe):
                        _wait_idle(pg)
                        return
        pg.wait_for_timeout(500)  # type: ignore[attr-defined]
    raise SystemExit("the Geodesic page's explorer did not complete in time")


def watch(
    args: argparse.Namespace,
    browser: object,
    pid: int,
    url: str,
    log: Path,
    queries: list[str],
    sampler: Sampler,
) -> list[tuple[str, float]]:
    """Steps 1 (after the prefetch) to 4 on the server ``pid`` at ``url``: the table's rows."""
    print(wait_for_log(log, PREFETCHED, 1800), flush=True)
    visit_start_page(browser, url)
    time.sleep(5)
    rows = [("default scenario prefetched, one visit", rss_mb(pid))]
    opened = time.monotonic()
    contexts = []
    for i, query in enumerate(queries):
        ctx = browser.new_context(viewport={"width": 1400, "height": 1200})  # type: ignore[attr-defined]
        pg = ctx.new_page()
        pg.set_default_timeout(900_000)
        begin = time.monotonic()
        pg.goto(f"{url}/geodesic?{query}")
        explorer_complete(pg, 1800)
        contexts.append(ctx)  # the tab stays open
        seconds = time.monotonic() - begin
        rows.append((f"link {i + 1} open ({seconds:.0f} s)", rss_mb(pid)))
        print(rows[-1], flush=True)
    time.sleep(args.stay)
    rows.append((f"all {len(contexts)} tabs open, {args.stay:.0f} s later", rss_mb(pid)))
    rows.append(("peak while the tabs were open", sampler.peak(opened)))
    for ctx in contexts:
        ctx.close()
    closed = time.monotonic()
    rows.append(("all tabs closed", rss_mb(pid)))
    print(rows[-1], flush=True)
    step = 1
    while time.monotonic() - closed < args.after:
        time.sleep(max(0.0, closed + step * args.sample - time.monotonic()))
        rows.append((f"{step * args.sample:.0f} s after closing", rss_mb(pid)))
        print(rows[-1], flush=True)
        step += 1
    return rows


def main() -> None:
    knobs = fit_cache_knobs({})  # the defaults: the server runs without these variables
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenarios", type=int, default=4)
    parser.add_argument("--n", type=int, default=2000, help="samples per dataset")
    parser.add_argument("--image-size", type=int, default=100)
    parser.add_argument("--stay", type=float, default=60.0, help="seconds all tabs stay open")
    parser.add_argument(
        "--after",
        type=float,
        default=knobs["fit_idle_minutes"] * 60 + LEASE_GRACE_SECONDS + 120,
        help="seconds watched after the tabs closed (default: idle time + lease grace + 120)",
    )
    parser.add_argument("--sample", type=float, default=60.0, help="seconds between table rows")
    parser.add_argument("--root", type=Path, default=HERE, help="the checkout whose app runs")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    budget = knobs["fit_cache_mb"]
    queries = links(args.root, args.n, args.image_size, args.scenarios)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("GEOVIZ_") or k == "GEOVIZ_CHROMIUM"
    }
    with tempfile.TemporaryDirectory(prefix="geoviz-bench-links-") as tmp_name:
        tmp = Path(tmp_name)
        env.update(
            GEOVIZ_CACHE_DIR=str(tmp / "cache"), PYTHONPATH=str(args.root), PYTHONUNBUFFERED="1"
        )
        log = tmp / "server.log"
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
            )
            rows = [("idle: nothing computed (no prefetch)", idle_rss(args.root, env, log))]
            proc, url = start(args.root, env, log)
            sampler = Sampler(proc.pid)
            try:
                rows += watch(args, browser, proc.pid, url, log, queries, sampler)
            finally:
                sampler.stop()
                browser.close()
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
        idle = rows[0][1]
        bound = idle + budget + 300
        print()
        print(
            f"{args.scenarios} links on the Geodesic page (image size {args.image_size}, N {args.n}); "
            f"app from {args.root}; default settings: GEOVIZ_FIT_CACHE_MB={budget}, "
            f"GEOVIZ_FIT_IDLE_MINUTES={knobs['fit_idle_minutes']}, no other visitor after closing"
        )
        print("| moment | server RSS (MB) | above idle (MB) | within idle + budget + 300 |")
        print("|---|---:|---:|:---:|")
        for what, rss in rows:
            print(
                f"| {what} | {rss:,.0f} | {rss - idle:+,.0f} | {'yes' if rss <= bound else 'NO'} |"
            )
        print(f"| bound: idle + budget ({budget:,}) + 300 | {bound:,.0f} | | |")
        print()
        for line in log.read_text(errors="replace").splitlines():
            if "sweep:" in line:
                print(line)


if __name__ == "__main__":
    main()
