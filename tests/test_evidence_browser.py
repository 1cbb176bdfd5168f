"""The Evidence run's Ray head killed mid-run, in the served app (issue 32, marker ``browser``).

The app is served as ``make run`` serves it (``tests/test_browser.py``'s helpers) with
``GEOVIZ_TRANSFER_BACKEND=ray``; a visitor starts the transfer experiments; once the job's
worker process has started its Ray cluster, its head (``gcs_server`` and ``raylet``) is
killed with SIGKILL. Before issue 32 the Ray driver ran inside the server, and Ray ended
the server's process. Now the server answers its health check 90 s after the kill, the
Evidence page says in a sentence that the run stopped and offers to start it again, and
another page renders. Ports 8700-8719 only (the test machine's share).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import browser_support as bs
import pytest
import test_browser as tb

pytestmark = pytest.mark.browser

#: seconds for the job to reach its Ray cluster: the server fits the maps first
HEAD_TIMEOUT = 600
#: seconds from the kill to the page's sentence (the worker's Ray driver gives up after
#: geoviz.app.services.evidence.GCS_RECONNECT_S at most)
FAILURE_TIMEOUT = 240


def _processes() -> dict[int, tuple[int, str, str]]:
    """``{pid: (parent pid, name, command line)}`` of every process (from /proc)."""
    out: dict[int, tuple[int, str, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z":
            continue
        out[int(entry.name)] = (int(fields[1]), name, cmdline)
    return out


def _descendants(root: int, table: dict[int, tuple[int, str, str]]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _ray_head_of_the_job() -> tuple[int, list[int]]:
    """``(worker pid, [gcs_server and raylet pids])`` of the job started by this test's server
    (a descendant of this process), waited for up to :data:`HEAD_TIMEOUT` seconds."""
    deadline = time.monotonic() + HEAD_TIMEOUT
    while time.monotonic() < deadline:
        table = _processes()
        workers = [
            pid for pid in _descendants(os.getpid(), table) if "geoviz.isolation" in table[pid][2]
        ]
        for worker in workers:
            head = [
                pid
                for pid in _descendants(worker, table)
                if table[pid][1] in ("gcs_server", "raylet")
            ]
            if {table[pid][1] for pid in head} == {"gcs_server", "raylet"}:
                return worker, head
        time.sleep(0.5)
    raise AssertionError("the Evidence job's worker never started its Ray cluster")


def test_killing_the_ray_head_of_an_evidence_run_leaves_the_server_up(tmp_path):
    pytest.importorskip("ray")
    pw = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    if not Path(bs.CHROMIUM).exists():
        pytest.skip(f"Chromium not found at {bs.CHROMIUM}")
    sync_playwright = pw.sync_playwright
    with (
        bs.app_server(tmp_path, GEOVIZ_TRANSFER_BACKEND="ray") as server,
        sync_playwright() as p,
    ):
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=bs.CHROMIUM,
            args=bs.CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1500, "height": 1900},
        )
        try:
            pg = context.new_page()
            pg.set_default_timeout(bs.PAGE_TIMEOUT_MS)
            pg.goto(f"{server['url']}/evidence")
            pg.wait_for_selector("h1:has-text('Evidence')")
            bs.wait_idle(pg)
            tb._choose(pg, pg.locator("[data-testid='stSelectbox']").first, "tiny")
            sliders = pg.locator("[data-testid='stSlider']")
            for index in (1, 2):  # grid resolution 3 -> 1, seeds 3 -> 1
                sliders.nth(index).locator("input[type='range']").focus()
                for _ in range(2):
                    pg.keyboard.press("ArrowLeft")
            pg.get_by_role("button", name="Run the transfer experiments").click()

            worker, head = _ray_head_of_the_job()
            for pid in head:
                os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()

            try:
                # killed mid-run: "The transfer run stopped ..."; killed while the cluster
                # was still starting (a loaded machine): "... failed: Ray could not start"
                pg.wait_for_selector(
                    "text=/The transfer (run stopped|experiments failed: Ray could not start)/",
                    timeout=FAILURE_TIMEOUT * 1000,
                )
            except Exception as err:
                tb._shot(pg, "7_evidence_ray_head_killed_timeout")
                log = server["log"].read_text(errors="replace")[-3000:]
                raise AssertionError(f"no failure sentence: {bs.main_text(pg)}\n{log}") from err
            bs.wait_idle(pg)
            shot = tb._shot(pg, "7_evidence_ray_head_killed")
            assert shot.exists()
            error = pg.locator("[data-testid='stAlertContentError']").first.inner_text()
            if "Ray could not start" not in error:  # the kill came after the cluster started
                assert "The transfer run stopped: its worker process" in error
                assert "Start it again to resume from the checkpoints." in error
            assert pg.get_by_role("button", name="Start the run again").count() == 1
            assert pg.locator("[data-testid='stException']").count() == 0
            assert bs.healthy(server["url"])
            # the job's worker is gone with its Ray processes; the server is not
            assert worker not in _processes()

            # another page renders, in this session
            tb._goto_page(pg, "6 · About")
            bs.assert_no_exception(pg, "about after the Ray head was killed")

            time.sleep(max(0.0, killed + 90 - time.monotonic()))
            assert bs.healthy(server["url"]), "the server stopped answering after the kill"
            pg.goto(f"{server['url']}/geodesic")
            pg.wait_for_selector("h1:has-text('Geodesic')")
            bs.wait_idle(pg)
            bs.assert_no_exception(pg, "geodesic 90 s after the kill")
        finally:
            context.close()
