"""The Chromium and app-server set-up shared by the browser tests (``tests/test_*browser*.py``).

- :data:`CHROMIUM`, :data:`CHROMIUM_ARGS`: Debian's Chromium (``GEOVIZ_CHROMIUM``), driven by
  Playwright; the ``sync_playwright`` fixture skips a test without either.
- :func:`app_server`: the app as ``make run`` starts it (``python -m geoviz.app.serve``) on a
  free localhost port with the test sizes; always stopped. The ``server`` fixture is one per
  test module.
- ``browser``: one headless Chromium per test module (``browser.new_context(viewport=...)``
  per view).
- :func:`harness_html`: a blank page running the explorer's bundled modules against a
  scripted host (no server).
- :func:`wait_idle`, :func:`assert_no_exception`, :func:`explorer_frame`,
  :func:`scenario_link`: the served app's pages.

A test module imports the fixtures it uses by name (``from browser_support import browser,
server, sync_playwright``), as pytest finds fixtures in a module's namespace.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "test-output" / "screenshots"
DOC_SHOTS = ROOT / "docs" / "screenshots"
CHROMIUM = os.environ.get("GEOVIZ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
NAV_LINK = "[data-testid='stSidebar'] [data-testid='stPageLink-NavLink']"
SERVER_START_TIMEOUT = 120
PAGE_TIMEOUT_MS = 420_000  # the first geodesic page computes the OTDD maps


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def sync_playwright():
    pw = pytest.importorskip(
        "playwright.sync_api", reason="the playwright Python package is not installed"
    )
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(
            f"Chromium not found at {CHROMIUM} (apt-get install chromium, or set GEOVIZ_CHROMIUM)"
        )
    return pw.sync_playwright


@contextlib.contextmanager
def app_server(tmp: Path, **env_overrides: str) -> Iterator[dict]:
    """The app (``python -m geoviz.app.serve``) on a free port with the test sizes and
    ``env_overrides``; yields ``{"url", "export_dir", "log"}``; always stopped."""
    port = free_port()
    env = {
        **os.environ,
        "GEOVIZ_APP_N": os.environ.get("GEOVIZ_TEST_APP_N", "200"),
        "GEOVIZ_APP_GRID": "15",
        "GEOVIZ_EMBEDDING": os.environ.get("GEOVIZ_TEST_EMBEDDING", "pca"),
        "GEOVIZ_TRANSFER_BACKEND": "sequential",
        "GEOVIZ_NEURAL_PRESET": "tiny",
        "GEOVIZ_CACHE_DIR": str(tmp / "cache"),
        "GEOVIZ_EXPORT_ROOT": str(tmp / "exports"),
        "PYTHONUNBUFFERED": "1",
        **env_overrides,
    }
    (tmp / "exports").mkdir(exist_ok=True)
    log = open(tmp / "server.log", "wb")  # noqa: SIM115 - closed in finally
    cmd = [  # as `make run` starts it: preload, prefetch of the default scenario, streamlit run
        sys.executable,
        "-m",
        "geoviz.app.serve",
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while not healthy(url):
            if proc.poll() is not None:
                pytest.fail(
                    f"streamlit exited with {proc.returncode}: {(tmp / 'server.log').read_text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"streamlit did not answer within {SERVER_START_TIMEOUT} s")
            time.sleep(0.5)
        yield {"url": url, "export_dir": tmp / "exports", "log": tmp / "server.log"}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)
        log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, sync_playwright) -> Iterator[dict]:
    """The app (``python -m geoviz.app.serve``) on a free port; yields
    ``{"url", "export_dir", "log"}``; always stopped."""
    with app_server(tmp_path_factory.mktemp("browser")) as info:
        yield info


def wait_idle(pg, settle_ms: int = 800, timeout_s: float | None = None) -> None:
    """Wait until Streamlit has finished running the script (no 'running' widget, no
    spinner), for at most ``timeout_s`` (default: :data:`PAGE_TIMEOUT_MS`)."""
    pg.wait_for_selector("[data-testid='stApp']")
    deadline = time.monotonic() + (PAGE_TIMEOUT_MS / 1000 if timeout_s is None else timeout_s)
    quiet_since = None
    while time.monotonic() < deadline:
        state = pg.get_attribute("[data-testid='stApp']", "data-test-script-state")
        spinning = pg.locator("[data-testid='stSpinner']").count()
        if state not in ("running", "rerunRequested", "initial", None) and spinning == 0:
            quiet_since = quiet_since or time.monotonic()
            if (time.monotonic() - quiet_since) * 1000 >= settle_ms:
                return
        else:
            quiet_since = None
        pg.wait_for_timeout(200)
    raise AssertionError("the app kept running past the page timeout")


def assert_no_exception(pg, where: str) -> None:
    """No Streamlit exception box on the page (its text in the message)."""
    errors = pg.locator("[data-testid='stException']")
    assert errors.count() == 0, f"{where}: {errors.first.inner_text()[:2000]}"


def main_text(pg) -> str:
    """What the page shows (for assertion messages)."""
    return pg.locator("[data-testid='stMain']").inner_text()[:3000]


def explorer_frame(pg, timeout_s: float = PAGE_TIMEOUT_MS / 1000):
    """The explorer component's frame once its payload is drawn."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for frame in pg.frames:
            if "geoviz_explorer" not in (frame.url or ""):
                continue
            with contextlib.suppress(Exception):
                if frame.evaluate("() => !!(window.geovizExplorer && window.geovizExplorer.ready)"):
                    return frame
        pg.wait_for_timeout(250)
    raise AssertionError(f"the explorer did not render: {main_text(pg)}")


def scenario_link(server: dict, scenario, page_path: str = "geodesic") -> str:
    """The link that opens ``scenario`` on the page ``page_path`` of ``server``."""
    from geoviz.app.links import scenario_to_token

    return f"{server['url']}/{page_path}?scenario={scenario_to_token(scenario)}"


@pytest.fixture(scope="module")
def browser(sync_playwright):
    """One headless Chromium for the module; each view opens a context of its own."""
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


#: the scripted host of :func:`harness_html` that answers every send and records nothing
QUIET_HOST = "const host = { send() { return true; }, resized() {} };"
#: a scripted host that records what the explorer sends in ``window.sent``
RECORDING_HOST = (
    "window.sent = [];\n"
    "const host = { send(v) { window.sent.push(JSON.parse(JSON.stringify(v))); return true; },"
    " resized() {} };"
)


def harness_html(host_js: str = QUIET_HOST) -> str:
    """A blank page running the explorer's bundled modules (``explorer.js``) against the
    scripted host ``host_js``: ``window.renderArgs(args)`` renders ``args`` (its
    ``payload`` in base64) as a host would, and ``window.harnessReady`` says it loaded."""
    from geoviz.explorer.bundle import FRONTEND, build_bundle

    code = build_bundle(FRONTEND, "explorer.js")
    return (
        "<!doctype html><html><body><div id='root' style='width:1200px'></div>"
        "<script type='module'>\n" + code + "\n" + host_js + "\n"
        "window.explorer = createExplorer(document.getElementById('root'), host);\n"
        "window.renderArgs = (args) => {\n"
        "  const raw = atob(args.payload);\n"
        "  const bytes = new Uint8Array(raw.length);\n"
        "  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);\n"
        "  window.explorer.render(Object.assign({}, args, { payload: bytes }));\n"
        "};\n"
        "window.harnessReady = true;\n"
        "</script></body></html>"
    )


def inside_view(box, width: int, height: int | None = None) -> bool:
    """``box`` (a Playwright bounding box, or ``None``) lies inside the first ``width`` x
    ``height`` CSS px of the page (only across when ``height`` is ``None``), to half a px."""
    return (
        box is not None
        and box["x"] >= -0.5
        and box["x"] + box["width"] <= width + 0.5
        and (height is None or (box["y"] >= -0.5 and box["y"] + box["height"] <= height + 0.5))
    )
