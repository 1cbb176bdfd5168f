"""Benchmark: the app opens a full-size fit the CLI computed (issue 34, "Everywhere").

Runs ``geoviz project`` on whole datasets with the disk cache on (the maps go there), reads
the ``app ...`` line it prints, starts the app as ``make run`` does (``python -m
geoviz.app.serve``) with the same ``GEOVIZ_DATA_DIRS`` and cache, opens the link in headless
Chromium and waits until the Geodesic page shows ``â``. Prints a table: the CLI's wall time,
the app's time from the link to the page showing the fit, the server's peak memory, and
whether the app solved anything (its log's Sinkhorn stages). Saves the page at
``docs/screenshots/full_size_app.png``.

Usage::

    .venv/bin/python benchmarks/open_full_size_in_app.py              # 60,000 per dataset
    .venv/bin/python benchmarks/open_full_size_in_app.py --n 5000     # a quick trial
    .venv/bin/python benchmarks/open_full_size_in_app.py --skip-cli   # the cache is filled
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("GEOVIZ_NIST_DIR", ROOT / ".." / "shared" / "data" / "nist"))
CHROMIUM = os.environ.get("GEOVIZ_CHROMIUM", "/usr/bin/chromium")
SHOT = ROOT / "docs" / "screenshots" / "full_size_app.png"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_kb(pid: int) -> int:
    """The resident set of ``pid`` and its children (kB), from /proc."""
    total = 0
    pids = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        pids += [int(c) for c in children]
    except OSError:
        pass
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=60_000)
    parser.add_argument("--work", default=None, help="folder for the data link and cache")
    parser.add_argument("--skip-cli", action="store_true", help="the cache already holds the fit")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds the app may take")
    args = parser.parse_args()

    work = Path(args.work or tempfile.mkdtemp(prefix="geoviz-full-app-"))
    served = work / "digits"
    served.mkdir(parents=True, exist_ok=True)
    for name in ("mnist", "fashion_mnist", "kmnist"):
        if not (served / f"{name}.npz").exists():
            shutil.copy(DATA_DIR / f"{name}.npz", served / f"{name}.npz")
    env = {
        **os.environ,
        "GEOVIZ_DATA_DIRS": str(served),
        "GEOVIZ_CACHE_DIR": str(work / "cache"),
        "PYTHONUNBUFFERED": "1",
    }
    files = [str(served / f"{n}.npz") for n in ("mnist", "fashion_mnist", "kmnist")]
    cmd = [sys.executable, "-m", "geoviz", "project", "--target", files[0]]
    cmd += ["--refs", ",".join(files[1:]), "--n", str(args.n), "--quiet"]
    cli_s = float("nan")
    start = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    if not args.skip_cli:
        cli_s = time.perf_counter() - start
    if out.returncode != 0:
        print(out.stdout[-2000:], out.stderr[-2000:])
        return 1
    link = next((ln for ln in out.stdout.splitlines() if ln.startswith("app ")), None)
    if link is None:
        print("the CLI printed no app line:\n" + out.stdout[-2000:])
        return 1
    # the line names the server's settings the fit needs (data folders, memory bound)
    words = shlex.split(link.split(": ", 1)[1])
    env.update(dict(w.split("=", 1) for w in words if w.startswith("GEOVIZ_")))
    url_path = words[-1].split("8501", 1)[1]
    a_hat_line = next(ln for ln in out.stdout.splitlines() if ln.startswith("â"))

    from playwright.sync_api import sync_playwright

    port = _free_port()
    log_path = work / "server.log"
    server_cmd = [sys.executable, "-m", "geoviz.app.serve", "--server.port", str(port)]
    server_cmd += ["--server.address", "127.0.0.1", "--server.headless", "true"]
    server_cmd += ["--browser.gatherUsageStats", "false"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(server_cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    peak_kb = 0
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                urllib.request.urlopen(base + "/_stcore/health", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    print("the app did not start:\n" + log_path.read_text()[-2000:])
                    return 1
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
            page = browser.new_page(viewport={"width": 1500, "height": 1900})
            opened = time.perf_counter()
            page.goto(base + url_path)
            deadline = time.monotonic() + args.timeout
            shown = False
            while time.monotonic() < deadline:
                peak_kb = max(peak_kb, _rss_kb(proc.pid))
                text = page.locator("[data-testid='stMain']").inner_text(timeout=60_000)
                if page.locator("[data-testid='stException']").count():
                    print("the page shows an exception:\n" + text[:2000])
                    break
                if "could not be read" in text or "could not be loaded" in text:
                    print("the app refused the link:\n" + text[:600])
                    break
                side = page.locator("[data-testid='stSidebar']").inner_text(timeout=60_000)
                if re.search(r"â\s*=", text) and f"N = {args.n}" in side:
                    shown = True
                    break
                page.wait_for_timeout(2000)
            app_s = time.perf_counter() - opened
            page.wait_for_timeout(3000)
            SHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOT), full_page=False)
            browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    log_text = log_path.read_text(errors="replace")
    solved = len(re.findall(r"sinkhorn", log_text))
    print(f"\nfull size in the app, n = {args.n:,} per dataset (Q = MNIST; Fashion-MNIST, KMNIST)")
    print(f"CLI: {a_hat_line}")
    print("| step | seconds | peak memory | note |")
    print("|---|---:|---:|---|")
    cli_cell = "(cached)" if args.skip_cli else f"{cli_s:.0f}"
    print(f"| `geoviz project` (fills the cache) | {cli_cell} | | prints the app link |")
    status = "shows â" if shown else "DID NOT SHOW â"
    print(
        f"| app: link -> Geodesic page | {app_s:.0f} | {peak_kb / 2**20:.2f} GiB (server) | "
        f"{status}; Sinkhorn lines in the server log: {solved} |"
    )
    print(f"screenshot: {SHOT.relative_to(ROOT)}")
    return 0 if shown else 1


if __name__ == "__main__":
    sys.exit(main())
