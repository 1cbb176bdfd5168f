"""GeodesicResult.explore() in a real JupyterLab, driven by headless Chromium (marker ``browser``).

Starts JupyterLab on 127.0.0.1 (a free port, a token, a temporary root and temporary Jupyter
config/data/runtime dirs), opens a notebook that fits a tiny geodesic and displays
``w = result.explore(); w``, runs its cells, drags the pick on the simplex, reads ``w.weights``
back from a cell's output (it must be the browser's pick), assigns ``w.weights`` from a cell
and checks the browser's pick moved. Screenshots: ``test-output/screenshots/notebook_widget.png``
and ``docs/screenshots/notebook_widget.png``. Skips when JupyterLab, Playwright or Chromium is
missing. The server (and its kernel) is always stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_support import (  # the shared Chromium, and its Playwright fixture (skips without them)
    CHROMIUM,
    CHROMIUM_ARGS,
    ROOT,
    SHOTS,
    free_port,
    sync_playwright,  # noqa: F401 - a fixture
)

pytest.importorskip(
    "jupyterlab", reason="jupyterlab is not installed (pip install geoviz[notebook])"
)

pytestmark = pytest.mark.browser

DOC_SHOT = ROOT / "docs" / "screenshots" / "notebook_widget.png"
SERVER_START_SECONDS = 180
CELL_TIMEOUT_MS = 300_000  # imports, the data and the fit of the first cell on a loaded machine
WIDGET = ".geoviz-widget"
#: the explorer's hooks, as jupyter.js exposes them on the widget's element
HOOKS = f"document.querySelector('{WIDGET}').geovizExplorer"
TARGET = [0.6, 0.15, 0.25]
ASSIGNED = [0.2, 0.2, 0.6]

CELLS = [
    # 0: a tiny geodesic on the bundled samples
    "from geoviz.data.preprocess import harmonize\n"
    "from geoviz.data.registry import load_dataset\n"
    "from geoviz.geodesic import fit_geodesic\n"
    "q, *refs = harmonize([load_dataset('mnist', n=60)]\n"
    "    + [load_dataset(n, n=40) for n in ('fashion_mnist', 'usps', 'kmnist')])\n"
    "result = fit_geodesic(q, refs)\n"
    "print('FITTED', result.m)",
    # 1: the widget
    "w = result.explore()\nw",
    # 2: the pick as Python sees it
    "print('WEIGHTS', w.weights)",
    # 3: a pick from Python
    f"w.weights = {ASSIGNED}\nprint('ASSIGNED', w.weights)",
]


def _up(url: str, token: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=3) as resp:
            return resp.status == 200
    except OSError:
        return False


def _notebook(path: Path) -> None:
    nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)


@contextlib.contextmanager
def _jupyterlab(tmp: Path) -> Iterator[dict[str, str]]:
    """JupyterLab on 127.0.0.1 with its own token and dirs; yields ``{"url", "token",
    "log"}``; always stopped (its process group: the server and its kernels)."""
    port, token = free_port(), secrets.token_hex(16)
    root = tmp / "root"
    root.mkdir()
    config = tmp / "jupyter-config"
    # no "news" toast over the notebook
    (config / "labconfig").mkdir(parents=True)
    (config / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}})
    )
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_RUNTIME_DIR": str(tmp / "jupyter-runtime"),
        "JUPYTER_DATA_DIR": str(tmp / "jupyter-data"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp / "lab-settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "lab-workspaces"),
        "IPYTHONDIR": str(tmp / "ipython"),
        "GEOVIZ_CACHE_DIR": str(tmp / "cache"),
        "GEOVIZ_EMBEDDING": "pca",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    log_path = tmp / "jupyterlab.log"
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                "--ServerApp.open_browser=False",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={root}",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                "--LabApp.extension_manager=readonly",  # no PyPI look-ups
                "--ServerApp.terminals_enabled=False",
                *(["--allow-root"] if os.geteuid() == 0 else []),  # CI containers run as root
            ],
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + SERVER_START_SECONDS
            while not _up(url, token):
                if proc.poll() is not None:
                    pytest.fail(
                        f"JupyterLab exited: {log_path.read_text(errors='replace')[-3000:]}"
                    )
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"JupyterLab did not start: {log_path.read_text(errors='replace')[-3000:]}"
                    )
                time.sleep(0.5)
            yield {"url": url, "token": token, "log": str(log_path), "root": str(root)}
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=20)


def _cell(page, k: int):
    return page.locator(".jp-Notebook .jp-Cell").nth(k)


def _run_cell(page, k: int) -> None:
    """Select cell ``k`` (a click on its prompt: command mode) and run it (Shift+Enter)."""
    cell = _cell(page, k)
    cell.scroll_into_view_if_needed()
    cell.locator(".jp-InputPrompt").first.click()
    page.keyboard.press("Shift+Enter")


def _output_with(page, k: int, marker: str) -> str:
    """The text of cell ``k``'s output once it holds ``marker`` (an error output fails)."""
    page.wait_for_function(
        """([k, marker]) => {
            const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[k];
            const out = cell && cell.querySelector('.jp-OutputArea');
            const text = out ? out.innerText : '';
            return text.includes(marker) || text.includes('Traceback') || text.includes('Error');
        }""",
        arg=[k, marker],
        timeout=CELL_TIMEOUT_MS,
    )
    text = _cell(page, k).locator(".jp-OutputArea").inner_text()
    assert marker in text, text
    return text


def _numbers(text: str, marker: str) -> list[float]:
    line = next(line for line in text.splitlines() if line.startswith(marker))
    return [float(x) for x in json.loads(line[len(marker) :].strip())]


def test_the_widget_in_jupyterlab(sync_playwright, tmp_path):  # noqa: F811 - the fixture above
    SHOTS.mkdir(parents=True, exist_ok=True)
    with _jupyterlab(tmp_path) as lab, sync_playwright() as p:
        _notebook(Path(lab["root"]) / "explore.ipynb")
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            errors: list[str] = []
            page.on("pageerror", lambda err: errors.append(str(err)))
            page.set_default_timeout(120_000)
            page.goto(f"{lab['url']}/lab/tree/explore.ipynb?token={lab['token']}")
            page.locator(".jp-Notebook .jp-Cell").nth(len(CELLS) - 1).wait_for()
            # the kernel is up when the status bar says it is idle (earlier runs are lost)
            page.wait_for_function(
                "() => document.querySelector('.jp-Notebook') !== null"
                " && /\\| Idle/.test(document.body.innerText)",
                timeout=120_000,
            )
            _run_cell(page, 0)
            _output_with(page, 0, "FITTED 3")
            _run_cell(page, 1)
            page.locator(f"{WIDGET} canvas#simplex").first.wait_for(timeout=CELL_TIMEOUT_MS)
            page.wait_for_function(f"() => {HOOKS} && {HOOKS}.ready === true")
            # the background parts (bootstrap, embedding view) arrive and the explorer is built
            # again with them: the drag starts once nothing is pending and the layout is still
            page.wait_for_function(
                f"() => {HOOKS}.pending().length === 0 && {HOOKS}.view() !== 'pending'",
                timeout=CELL_TIMEOUT_MS,
            )
            page.wait_for_function(
                f"""() => {{ const h = {HOOKS}, now = h.renders + 1000 * h.relayouts;
                    if (window.__gvzSeen !== now) {{ window.__gvzSeen = now; window.__gvzAt = performance.now(); }}
                    return performance.now() - window.__gvzAt > 1000; }}""",
                polling=200,
            )
            start = page.evaluate(f"() => {HOOKS}.pick()")
            canvas = page.locator(f"{WIDGET} canvas#simplex").first
            canvas.scroll_into_view_if_needed()
            box = canvas.bounding_box()
            assert box is not None
            # the pick, dragged from â to TARGET (canvas pixels from the explorer's own geometry)
            sent = page.evaluate(f"() => {HOOKS}.valuesSent")
            x0, y0 = page.evaluate(f"(a) => {HOOKS}.simplexXY(a)", start)
            x1, y1 = page.evaluate(f"(a) => {HOOKS}.simplexXY(a)", TARGET)
            page.mouse.move(box["x"] + x0, box["y"] + y0)
            page.mouse.down()
            for s in (0.25, 0.5, 0.75, 1.0):
                page.mouse.move(box["x"] + x0 + s * (x1 - x0), box["y"] + y0 + s * (y1 - y0))
            page.mouse.up()
            page.wait_for_function(f"(n) => {HOOKS}.valuesSent > n", arg=sent)
            dragged = page.evaluate(f"() => {HOOKS}.pick()")
            assert max(abs(a - b) for a, b in zip(dragged, TARGET, strict=True)) < 0.03, dragged
            # Python's pick is the browser's, to the rounding both use
            _run_cell(page, 2)
            weights = _numbers(_output_with(page, 2, "WEIGHTS"), "WEIGHTS")
            assert max(abs(a - b) for a, b in zip(weights, dragged, strict=True)) < 1e-9, (
                weights,
                dragged,
            )
            # a pick assigned in Python moves the browser's
            _run_cell(page, 3)
            _output_with(page, 3, "ASSIGNED")
            page.wait_for_function(
                f"""(a) => {{ const p = {HOOKS}.pick();
                    return p.every((x, i) => Math.abs(x - a[i]) < 1e-9); }}""",
                arg=ASSIGNED,
            )
            page.wait_for_function(f"() => {HOOKS}.pending().length === 0", timeout=120_000)
            widget = page.locator(WIDGET).first
            widget.scroll_into_view_if_needed()
            _cell(page, 1).evaluate("(el) => el.scrollIntoView({block: 'start'})")
            page.wait_for_timeout(300)  # a frame for the last draw
            shot = SHOTS / "notebook_widget.png"
            page.screenshot(path=str(shot))
            DOC_SHOT.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, DOC_SHOT)
            geoviz_errors = [e for e in errors if "geoviz" in e or "explorer" in e]
            assert not geoviz_errors, geoviz_errors
        except BaseException:
            with contextlib.suppress(Exception):
                page.screenshot(path=str(SHOTS / "notebook_widget_failure.png"))
            raise
        finally:
            browser.close()
