"""Load test: links to distinct scenarios, then their tabs closed (issue 32, item 5).

Before issue 32 four visitors opening links to four distinct allowed scenarios (image size
100, N 2000) and closing their tabs took the server from 419 MB to 5,030 MB, and it stayed
there: the fit cache was bounded by count (32 fits), not by bytes. This script starts the app
(``python -m geoviz.app.serve``, no prefetch) on a port in 8720-8739 and:

1. opens, in headless Chromium, one tab per scenario on ``/datasets?scenario=<token>``
   (the default *NIST scenario at ``--image-size`` and ``--n``, seeds 0, 1, 2, ...: four
   distinct scenarios, each loading its datasets and their projection);
2. closes every tab, waits ``--settle`` seconds (Streamlit drops a closed session after
   ``server.disconnectedSessionTTL``, set to 10 s here; geoviz's sweeper runs every 60 s and
   drops results idle for ``GEOVIZ_FIT_IDLE_MINUTES`` that no session holds), then opens one
   more tab on the start page (Streamlit forgets expired sessions when another one is stored).

It prints the server's resident memory (``VmRSS``): idle, the peak seen while the tabs were
open, right after they closed, after the settle time, and the budget
(``GEOVIZ_FIT_CACHE_MB``). ``--root`` runs another checkout's app (a ``git worktree`` of the
commit before issue 32) with the same steps.

Run: ``.venv/bin/python benchmarks/bench_links_memory.py`` (about 6 min on 2 cores).
"""

from __future__ import annotations

import argparse
import os
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


def start(root: Path, env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    """``python -m geoviz.app.serve`` of ``root`` on a free port; ``(process, url)``."""
    port = free_port()
    cmd = [
        sys.executable, "-m", "geoviz.app.serve",
        "--server.port", str(port), "--server.address", "127.0.0.1",
        "--server.headless", "true", "--browser.gatherUsageStats", "false",
        "--server.disconnectedSessionTTL", "10",
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


class Peak:
    """The highest RSS of ``pid`` sampled every 0.5 s while running."""

    def __init__(self, pid: int) -> None:
        self.pid, self.mb = pid, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.mb = max(self.mb, rss_mb(self.pid))
            except OSError:
                return

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.mb


def links(root: Path, n: int, image_size: int, count: int) -> list[str]:
    """Query strings of ``count`` distinct scenarios (seeds 0..count-1)."""
    code = (
        "import sys; from geoviz.app.links import scenario_to_token; "
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenarios", type=int, default=4)
    parser.add_argument("--n", type=int, default=2000, help="samples per dataset")
    parser.add_argument("--image-size", type=int, default=100)
    parser.add_argument("--budget-mb", type=int, default=1024, help="GEOVIZ_FIT_CACHE_MB")
    parser.add_argument("--settle", type=float, default=150.0, help="seconds after the tabs close")
    parser.add_argument("--root", type=Path, default=HERE, help="the checkout whose app runs")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    queries = links(args.root, args.n, args.image_size, args.scenarios)
    with tempfile.TemporaryDirectory(prefix="geoviz-bench-links-") as tmp_name:
        tmp = Path(tmp_name)
        env = {
            **os.environ,
            "GEOVIZ_CACHE_DIR": str(tmp / "cache"),
            "GEOVIZ_PREFETCH": "0",
            "GEOVIZ_EMBEDDING": "pca",
            "GEOVIZ_FIT_CACHE_MB": str(args.budget_mb),
            "GEOVIZ_FIT_IDLE_MINUTES": "1",
            "PYTHONPATH": str(args.root),
        }
        proc, url = start(args.root, env, tmp / "server.log")
        rows: list[tuple[str, float]] = []
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
                )
                ctx = browser.new_context()
                pg = ctx.new_page()
                pg.set_default_timeout(600_000)
                pg.goto(url)
                _wait_idle(pg)
                ctx.close()
                time.sleep(3)
                rows.append(("idle (one visit)", rss_mb(proc.pid)))
                peak = Peak(proc.pid)
                contexts = []
                for i, query in enumerate(queries):
                    ctx = browser.new_context(viewport={"width": 1400, "height": 1200})
                    pg = ctx.new_page()
                    pg.set_default_timeout(900_000)
                    start_t = time.perf_counter()
                    pg.goto(f"{url}/datasets?{query}")
                    pg.wait_for_selector("text=Class histograms")
                    _wait_idle(pg)
                    contexts.append(ctx)  # the tab stays open until every link is open
                    rows.append(
                        (
                            f"link {i + 1} open ({time.perf_counter() - start_t:.0f} s)",
                            rss_mb(proc.pid),
                        )
                    )
                    print(rows[-1], flush=True)
                for ctx in contexts:
                    ctx.close()
                rows.append(("peak while open", peak.stop()))
                rows.append(("all tabs closed", rss_mb(proc.pid)))
                time.sleep(args.settle)
                ctx = browser.new_context()
                pg = ctx.new_page()
                pg.goto(url)
                _wait_idle(pg)
                ctx.close()
                browser.close()
            time.sleep(65)  # one more sweep after the expired sessions were forgotten
            rows.append((f"{args.settle + 65:.0f} s after closing", rss_mb(proc.pid)))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        idle = rows[0][1]
        print()
        print(
            f"{args.scenarios} links (image size {args.image_size}, N {args.n}); app from "
            f"{args.root}; GEOVIZ_FIT_CACHE_MB={args.budget_mb}, GEOVIZ_FIT_IDLE_MINUTES=1"
        )
        print("| moment | server RSS (MB) | above idle (MB) |")
        print("|---|---:|---:|")
        for what, rss in rows:
            print(f"| {what} | {rss:,.0f} | {rss - idle:+,.0f} |")
        print(f"| budget (fit cache) | {args.budget_mb:,} | |")
        print(f"| bound: idle + budget + 300 | {idle + args.budget_mb + 300:,.0f} | |")


if __name__ == "__main__":
    main()
