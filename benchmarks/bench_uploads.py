"""Load test: many large uploads through the served app, in a real Chromium (issue 25, row 1).

Before issue 25 each distinct 200 MB npz upload kept about 1.1 GB of server memory after
its tab closed (the raw bytes in the session, the parsed float32 copy in a cache bounded
by count, Streamlit's own copy) and 200 MB on disk, never cleaned. This script starts
``streamlit run app.py`` on a free localhost port and, for each of ``--files`` different
npz files of ``--mb`` MB (float32 vectors, written once to a temporary folder):

1. opens a new browser tab (its own session), goes to the Datasets page, uploads the file
   through the upload box and waits until the page says it was taken;
2. closes the tab.

It prints the server's resident memory (``VmRSS`` of the streamlit process) when idle, after
each upload, right after the last tab closed, and after ``--settle`` seconds (Streamlit
drops a closed tab's session after ``server.disconnectedSessionTTL``, 120 s; geoviz's store
drops parsed uploads idle for ``GEOVIZ_UPLOAD_IDLE_MINUTES``); and the bytes the upload
folder holds against its quota. The yardstick is the same server before any upload.

``--one-tab`` uploads every file in one tab that stays open (issue 32: the uploader took a new
key after each file and Streamlit kept every earlier file's bytes, +510 MB for five 103 MB
files; now the page removes each stored file from the box, and Streamlit deletes its copy).

The server listens on a port in 8720-8739 and takes ``.streamlit/config.toml``'s
``maxUploadSize`` (512 MB), as a server started from the checkout does.

``--root`` runs another checkout's app.py (e.g. a ``git worktree`` of the commit before
issue 25) with the same steps, for the before/after table in ``benchmarks/README.md``.

Run: ``.venv/bin/python benchmarks/bench_uploads.py`` (about 10 min on 2 cores: 10 x 100 MB).
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "tests"))

from test_browser import CHROMIUM, CHROMIUM_ARGS, _healthy, _wait_idle  # noqa: E402

#: the ports the benchmarks may use
PORTS = range(8720, 8740)


def free_port() -> int:
    """The first free port of :data:`PORTS`."""
    import socket

    for port in PORTS:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise SystemExit(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its children (Streamlit runs in one process), MB."""
    total = 0
    pids = [pid]
    with open(f"/proc/{pid}/task/{pid}/children") as fh:
        pids += [int(p) for p in fh.read().split()]
    for p in pids:
        with open(f"/proc/{p}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


def folder_mb(folder: Path) -> float:
    if not folder.exists():
        return 0.0
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def make_file(path: Path, mb: float, seed: int) -> None:
    """An npz of float32 vectors, ``mb`` MB, different for every seed."""
    d = 500
    n = int(mb * 2**20 / (4 * d))
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    np.savez(buf, x=rng.random((n, d), dtype=np.float32), y=np.arange(n) % 5)
    path.write_bytes(buf.getvalue())


def start(root: Path, env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [
        sys.executable, "-m", "streamlit", "run", str(root / "app.py"),
        "--server.port", str(port), "--server.address", "127.0.0.1",
        "--server.headless", "true", "--browser.gatherUsageStats", "false",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while not _healthy(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"streamlit did not start: {log.read_text()[-2000:]}")
        time.sleep(0.3)
    return proc, url


def upload_in(page, path: Path) -> float:
    """Upload ``path`` through the upload box of an open Datasets page; seconds until the page
    took it (and let go of the file)."""
    start_t = time.perf_counter()
    page.locator("input[type='file']").first.set_input_files(str(path))
    page.wait_for_function(
        "(name) => document.body.innerText.includes(name + ': ')"
        " && document.body.innerText.includes('samples')",
        arg=path.name,
    )
    _wait_idle(page)
    return time.perf_counter() - start_t


def open_datasets(browser, url: str):
    """A new tab (its own session) on the Datasets page with the upload box open."""
    context = browser.new_context(viewport={"width": 1400, "height": 1200})
    page = context.new_page()
    page.set_default_timeout(600_000)
    page.goto(f"{url}/datasets")
    _wait_idle(page)
    page.get_by_text("Upload a dataset").first.click()
    return context, page


def upload(browser, url: str, path: Path) -> float:
    """Upload ``path`` on the Datasets page in a new tab; seconds until the page took it."""
    context, page = open_datasets(browser, url)
    try:
        return upload_in(page, path)
    finally:
        context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--mb", type=float, default=100.0)
    parser.add_argument("--settle", type=float, default=200.0, help="seconds after the tabs close")
    parser.add_argument("--root", type=Path, default=HERE, help="the checkout whose app runs")
    parser.add_argument("--disk-mb", type=int, default=500, help="GEOVIZ_UPLOAD_DISK_MB")
    parser.add_argument("--memory-mb", type=int, default=256, help="GEOVIZ_UPLOAD_MEMORY_MB")
    parser.add_argument("--idle-minutes", type=int, default=2, help="GEOVIZ_UPLOAD_IDLE_MINUTES")
    parser.add_argument(
        "--one-tab", action="store_true", help="every upload in one tab that stays open"
    )
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="geoviz-bench-uploads-") as tmp_name:
        tmp = Path(tmp_name)
        files = []
        for i in range(args.files):
            files.append(tmp / f"upload{i:02d}.npz")
            make_file(files[-1], args.mb, seed=i)
        cache = tmp / "cache"
        env = {
            **os.environ,
            "GEOVIZ_CACHE_DIR": str(cache),
            "GEOVIZ_APP_N": "200",
            "GEOVIZ_EMBEDDING": "pca",
            "GEOVIZ_UPLOAD_DISK_MB": str(args.disk_mb),
            "GEOVIZ_UPLOAD_MEMORY_MB": str(args.memory_mb),
            "GEOVIZ_UPLOAD_IDLE_MINUTES": str(args.idle_minutes),
            "PYTHONPATH": str(args.root),
        }
        proc, url = start(args.root, env, tmp / "server.log")
        rows: list[tuple[str, float, float, str]] = []
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
                )
                # one visit first, so the idle baseline has the app's modules loaded
                ctx = browser.new_context()
                pg = ctx.new_page()
                pg.set_default_timeout(600_000)
                pg.goto(f"{url}/datasets")
                _wait_idle(pg)
                ctx.close()
                time.sleep(3)
                idle = rss_mb(proc.pid)
                rows.append(("idle (one visit)", idle, folder_mb(cache), ""))
                tab = open_datasets(browser, url) if args.one_tab else None
                for i, path in enumerate(files):
                    if tab is None:
                        seconds, where = upload(browser, url, path), "tab closed"
                    else:
                        seconds, where = upload_in(tab[1], path), "tab open"
                    rows.append(
                        (
                            f"after upload {i + 1} ({where})",
                            rss_mb(proc.pid),
                            folder_mb(cache),
                            f"{seconds:.1f} s",
                        )
                    )
                    print(rows[-1], flush=True)
                if tab is not None:
                    time.sleep(args.settle)  # the tab stays open
                    rows.append(
                        (
                            f"{args.settle:.0f} s later, tab still open",
                            rss_mb(proc.pid),
                            folder_mb(cache),
                            "",
                        )
                    )
                    tab[0].close()
                browser.close()
            rows.append(("all tabs closed", rss_mb(proc.pid), folder_mb(cache), ""))
            step = 20.0
            waited = 0.0
            while waited < args.settle:
                time.sleep(step)
                waited += step
            # a new visit: Streamlit forgets expired sessions when another one is stored
            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
                )
                ctx = browser.new_context()
                pg = ctx.new_page()
                pg.goto(url)
                _wait_idle(pg)
                ctx.close()
                browser.close()
            time.sleep(5)
            rows.append(
                (
                    f"{args.settle:.0f} s later, one more visit",
                    rss_mb(proc.pid),
                    folder_mb(cache),
                    "",
                )
            )
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        print()
        print(
            f"{args.files} uploads of {args.mb:g} MB; app from {args.root}; upload memory budget "
            f"{args.memory_mb} MB, disk quota {args.disk_mb} MB, idle {args.idle_minutes} min"
        )
        print("| moment | server RSS (MB) | above idle (MB) | cache folder (MB) | upload took |")
        print("|---|---:|---:|---:|---:|")
        for what, rss, disk, took in rows:
            print(f"| {what} | {rss:,.0f} | {rss - idle:+,.0f} | {disk:,.0f} | {took} |")


if __name__ == "__main__":
    main()
