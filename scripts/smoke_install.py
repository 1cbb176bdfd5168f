"""Smoke test of an installed wheel, outside the checkout (issue 43; run by ``.ci/run``).

    python scripts/smoke_install.py --venv /tmp/geoviz-wheel [--wheel dist/geoviz-*.whl]
                                    [--out test-output/install]

With ``--wheel``, the wheel is first checked to hold every run-time file git tracks in the
checkout (the package, app, pages, settings, assets), byte for byte, within 30 MB.
``--venv`` is a fresh environment holding only the wheel and what it requires. From an empty
folder outside the checkout, with its own cache, that environment's ``geoviz``:

1. reports its version (``geoviz --version``, ``geoviz.__version__``: the same);
2. runs ``geoviz project --target mnist --refs fashion_mnist,usps,kmnist`` on the bundled
   data, in the digit box;
3. runs a colour target (``mnist_m``) in the shipped encoder;
4. serves ``geoviz app``: a headless Chromium (driven by this interpreter's Playwright, the
   dev environment's) opens the Geodesic page, waits for the explorer to draw, then the
   Evidence page and its stored study; screenshots go to ``--out``.

Every step says what it checked; the first that fails ends the script with status 1 and a
sentence saying which file or answer was missing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

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
PAGE_TIMEOUT_MS = 300_000
#: what of ``geoviz/`` runs: modules and the explorer's page (package data)
RUNTIME_SUFFIXES = (".py", ".js", ".html")
#: the wheel's size bound (issue 43)
MAX_WHEEL_MB = 30


class SmokeFailure(Exception):
    """One step of the smoke test did not give what it should."""


def check_wheel(wheel: Path, tree: Path) -> int:
    """Every run-time file of the checkout ``tree`` is in ``wheel`` with the same bytes.

    The run-time files are those git tracks in ``geoviz/`` (the package, with the
    explorer's JavaScript) and in :data:`geoviz.site.SITE_FILES` (app, pages, Streamlit
    settings, assets: installed as ``geoviz/_site/...``). Returns how many were compared.
    """
    import zipfile

    sys.path.insert(0, str(tree))
    from geoviz.site import SITE_FILES

    tracked = (
        subprocess.run(
            ["git", "ls-files", "-z", "geoviz", *SITE_FILES],
            cwd=tree,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        compared = 0
        for rel in filter(None, tracked):
            if rel.startswith("geoviz/") and not rel.endswith(RUNTIME_SUFFIXES):
                continue  # notes beside the code (MODULES.md): not run-time files
            inside = rel if rel.startswith("geoviz/") else f"geoviz/_site/{rel}"
            if inside not in names:
                raise SmokeFailure(f"{wheel.name} lacks {inside} (from {rel} of the checkout)")
            if archive.read(inside) != (tree / rel).read_bytes():
                raise SmokeFailure(f"{wheel.name} holds another {inside} than the checkout's {rel}")
            compared += 1
    size_mb = wheel.stat().st_size / 2**20
    if size_mb > MAX_WHEEL_MB:
        raise SmokeFailure(f"{wheel.name} is {size_mb:.1f} MB, above the {MAX_WHEEL_MB} MB bound")
    print(f"  ok: {wheel.name} ({size_mb:.1f} MB) holds the checkout's {compared} run-time files")
    return compared


def _run(cmd: Sequence[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    started = time.monotonic()
    proc = subprocess.run(
        list(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    took = time.monotonic() - started
    if proc.returncode != 0:
        raise SmokeFailure(
            f"`{' '.join(cmd[1:])}` exited with {proc.returncode} after {took:.0f} s: "
            f"{(proc.stderr or proc.stdout).strip()[-1500:]}"
        )
    print(
        f"  ok ({took:.0f} s): {' '.join(Path(c).name if i == 0 else c for i, c in enumerate(cmd))}"
    )
    return proc.stdout


def _expect(text: str, needle: str, what: str) -> None:
    if needle not in text:
        raise SmokeFailure(f"{what}: expected {needle!r} in:\n{text[-2000:]}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def _served(geoviz: Path, cwd: Path, env: dict[str, str], log: Path) -> Iterator[str]:
    port = _free_port()
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            [str(geoviz), "app", "--port", str(port)],
            cwd=cwd,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 180
            while not _healthy(url):
                if proc.poll() is not None:
                    raise SmokeFailure(
                        f"geoviz app exited with {proc.returncode}: {log.read_text()[-2000:]}"
                    )
                if time.monotonic() > deadline:
                    raise SmokeFailure("geoviz app did not answer within 180 s")
                time.sleep(0.5)
            print(f"  ok: geoviz app answers on {url}")
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=20)


def _wait_idle(page: object) -> None:
    """Until Streamlit has finished the page's script (no spinner), a second of quiet."""
    pg: object = page
    deadline = time.monotonic() + PAGE_TIMEOUT_MS / 1000
    quiet_since = None
    while time.monotonic() < deadline:
        state = pg.get_attribute("[data-testid='stApp']", "data-test-script-state")  # type: ignore[attr-defined]
        spinning = pg.locator("[data-testid='stSpinner']").count()  # type: ignore[attr-defined]
        if state not in ("running", "rerunRequested", "initial", None) and spinning == 0:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since >= 1.0:
                return
        else:
            quiet_since = None
        pg.wait_for_timeout(250)  # type: ignore[attr-defined]
    raise SmokeFailure("the page kept running past its timeout")


def _no_exception(page: object, where: str) -> None:
    errors = page.locator("[data-testid='stException'], [data-testid='stAlertContentError']")  # type: ignore[attr-defined]
    if errors.count():
        raise SmokeFailure(f"{where} shows an error: {errors.first.inner_text()[:1000]}")


def _browse(url: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        context = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 800},
        )
        try:
            pg = context.new_page()
            pg.set_default_timeout(PAGE_TIMEOUT_MS)
            pg.goto(f"{url}/geodesic")
            pg.wait_for_selector("h1:has-text('Geodesic')")
            _wait_idle(pg)
            _no_exception(pg, "the Geodesic page")
            deadline = time.monotonic() + PAGE_TIMEOUT_MS / 1000
            drawn = False
            while not drawn and time.monotonic() < deadline:
                for frame in pg.frames:
                    if "geoviz_explorer" in (frame.url or ""):
                        with contextlib.suppress(Exception):
                            drawn = bool(
                                frame.evaluate(
                                    "() => !!(window.geovizExplorer && window.geovizExplorer.ready)"
                                )
                            )
                if not drawn:
                    pg.wait_for_timeout(500)
            if not drawn:
                raise SmokeFailure("the Geodesic page's explorer never drew its payload")
            sidebar = pg.locator("[data-testid='stSidebar']").inner_text()
            _expect(sidebar, "â =", "the Geodesic page's sidebar")
            pg.screenshot(path=str(out / "geodesic.png"))
            print(f"  ok: the Geodesic page drew the explorer ({out / 'geodesic.png'})")
            pg.goto(f"{url}/evidence")
            pg.wait_for_selector("h1:has-text('Evidence')")
            _wait_idle(pg)
            _no_exception(pg, "the Evidence page")
            main = pg.locator("[data-testid='stMain']").inner_text()
            _expect(main, "Table 1", "the Evidence page (its stored study)")
            pg.screenshot(path=str(out / "evidence.png"), full_page=True)
            print(f"  ok: the Evidence page shows the stored study ({out / 'evidence.png'})")
        finally:
            context.close()


def smoke(venv: Path, out: Path) -> None:
    """Every step of the module docstring, from a temporary folder outside any checkout."""
    geoviz = venv / "bin" / "geoviz"
    python = venv / "bin" / "python"
    if not geoviz.is_file():
        raise SmokeFailure(f"{geoviz} is missing: is geoviz installed in {venv}?")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="geoviz-smoke-") as tmp:
        cwd = Path(tmp)
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("GEOVIZ_", "PYTHON", "VIRTUAL_ENV"))
        }
        (cwd / "exports").mkdir()
        env.update(GEOVIZ_CACHE_DIR=str(cwd / "cache"), GEOVIZ_EXPORT_ROOT=str(cwd / "exports"))
        print(f"smoke test of {venv} in {cwd}")
        version = _run([str(geoviz), "--version"], cwd, env, 60).strip()
        imported = _run(
            [
                str(python),
                "-c",
                "import geoviz, geoviz.site as s; print(geoviz.__version__, s.site_dir())",
            ],
            cwd,
            env,
            60,
        ).split()
        _expect(version, f"geoviz {imported[0]}", "geoviz --version against geoviz.__version__")
        _expect(imported[1], str(venv), "the installed data folder (geoviz.site.site_dir)")
        grey = _run(
            [str(geoviz), "project", "--target", "mnist", "--refs", "fashion_mnist,usps,kmnist"],
            cwd,
            env,
            600,
        )
        _expect(grey, "space: digit box", "the bundled project run")
        _expect(grey, "W²(P_â, Q) =", "the bundled project run")
        colour = _run(
            [
                str(geoviz),
                "project",
                "--target",
                "mnist_m",
                "--refs",
                "mnist,fashion_mnist,usps",
                "--n",
                "300",
            ],
            cwd,
            env,
            600,
        )
        _expect(colour, "space: pretrained encoder", "the colour run (mnist_m)")
        with _served(geoviz, cwd, env, out / "server.log") as url:
            _browse(url, out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, required=True, help="environment holding the wheel")
    parser.add_argument(
        "--wheel", type=Path, help="the wheel installed there: its files checked against --tree"
    )
    parser.add_argument(
        "--tree", type=Path, default=Path(__file__).resolve().parents[1], help="the checkout"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("test-output/install"), help="screenshots and log"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        if args.wheel is not None:
            check_wheel(args.wheel.resolve(), args.tree.resolve())
        smoke(args.venv.resolve(), args.out.resolve())
    except (SmokeFailure, subprocess.TimeoutExpired) as err:
        print(f"install smoke test FAILED: {err}", file=sys.stderr)
        return 1
    print(f"install smoke test passed in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
