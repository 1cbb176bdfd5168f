"""Memory a visitor can cause is bounded in bytes and freed (issue 32 item 5, issue 41 item 5).

The result store (geoviz.app.jobs.ResultStore) was bounded by count: four links to four
large scenarios kept ~4.6 GB after their tabs closed. Now each tier has a byte budget
(values measured by nbytes_of), and values no living session uses leave after an idle time.
Issue 41: a session lives while its open tab beats (not while Streamlit keeps it), the
sweeper runs on a timer from the server's start, and no page keeps a fit the store let go.
"""

from __future__ import annotations

import dataclasses
import gc
from pathlib import Path

import numpy as np
import pytest
import torch

from geoviz.app.jobs import CacheLease, ResultStore
from geoviz.app.lru import LRUCache, nbytes_of
from geoviz.app.session import SessionModel
from geoviz.app.settings import AppSettings

ROOT = Path(__file__).resolve().parents[1]
MB = 2**20


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def mb_array(mb: float, seed: int = 0) -> np.ndarray:
    return np.full(int(mb * MB) // 8, float(seed))


# ---------------------------------------------------------------- nbytes_of


def test_nbytes_of_counts_buffers_once_however_often_they_are_referenced():
    a = np.zeros((1000, 100), dtype=np.float32)  # 400,000 bytes
    assert 400_000 <= nbytes_of(a) < 401_000
    # views (a slice, a transpose) keep the same buffer alive: counted once
    assert 400_000 <= nbytes_of([a, a[10:], a.T, a]) < 401_000
    t = torch.zeros(500, 200, dtype=torch.float64)  # 800,000 bytes
    assert 800_000 <= nbytes_of(t) < 801_000
    assert 800_000 <= nbytes_of({"t": t, "view": t[:10], "again": t}) < 801_000
    # a slice of a large storage keeps the whole storage
    assert nbytes_of(t[:1]) >= 800_000


def test_nbytes_of_walks_nested_dataclasses_and_containers():
    @dataclasses.dataclass
    class Inner:
        features: torch.Tensor
        labels: np.ndarray

    @dataclasses.dataclass
    class Outer:
        parts: tuple[Inner, ...]
        payload: dict
        blob: bytes

    inner = Inner(torch.ones(1000, 250), np.arange(1000, dtype=np.int64))  # 1 MB + 8 kB
    outer = Outer((inner, inner), {"x": [np.ones(10_000)], "name": "Q"}, b"\0" * 50_000)
    expected = 1_000_000 + 8_000 + 80_000 + 50_000
    measured = nbytes_of(outer)
    assert expected <= measured < expected + 5_000  # containers' own sizes on top
    # a module's weights are its parameters
    lin = torch.nn.Linear(100, 100)
    assert 40_400 <= nbytes_of(lin) < 60_000


def test_nbytes_of_is_bounded_in_work():
    many = [np.ones(1000) for _ in range(1000)]  # 8 MB in a thousand arrays
    assert nbytes_of(many) >= 8_000_000
    assert nbytes_of(many, max_nodes=100) < 1_000_000  # stopped after 100 objects


# ---------------------------------------------------------------- byte budget


def test_the_fit_tier_is_bounded_in_bytes_least_recently_used_out():
    store = ResultStore(max_fits=32, fit_bytes=10 * MB)
    for i in range(4):  # four 4 MB fits into 10 MB: the two most recent stay
        store.get_or_compute(("fit", i), lambda i=i: mb_array(4, i), tier="fit")
    assert ("fit", 0) not in store and ("fit", 1) not in store
    assert ("fit", 2) in store and ("fit", 3) in store
    assert store.fits.nbytes <= 10 * MB
    # reading one makes it the most recent: the next fit evicts the other one
    store.get(("fit", 2))
    store.put(("fit", 4), mb_array(4, 4))
    assert ("fit", 2) in store and ("fit", 3) not in store


def test_a_value_larger_than_the_budget_is_returned_and_not_kept():
    store = ResultStore(fit_bytes=2 * MB)
    store.put("small", mb_array(1))
    big = store.get_or_compute("big", lambda: mb_array(3), tier="fit")
    assert big.nbytes == 3 * MB
    assert "big" not in store and "small" in store and store.fits.nbytes <= 2 * MB


def test_a_count_bound_still_holds():
    cache = LRUCache(max_entries=3, max_bytes=100 * MB)
    for i in range(5):
        cache.put(i, i)
    assert cache.ordered_keys() == [2, 3, 4]


def test_the_budget_comes_from_the_environment():
    settings = AppSettings.from_env({"GEOVIZ_FIT_CACHE_MB": "512", "GEOVIZ_FIT_IDLE_MINUTES": "3"})
    assert settings.fit_cache_mb == 512 and settings.fit_idle_minutes == 3
    assert AppSettings.from_env({}).fit_cache_mb == 2048
    from geoviz.errors import GeovizError

    with pytest.raises(GeovizError, match="GEOVIZ_FIT_CACHE_MB"):
        AppSettings.from_env({"GEOVIZ_FIT_CACHE_MB": "lots"})


# ---------------------------------------------------------------- sessions


def test_values_no_open_tab_uses_leave_after_the_idle_time():
    clock = Clock()
    store = ResultStore(fit_bytes=100 * MB, idle_seconds=600, lease_seconds=120, clock=clock)
    lease = store.lease()
    with store.scope(lease):
        store.get_or_compute(("data", "held"), lambda: mb_array(1), tier="fit")
    store.put(("data", "orphan"), mb_array(1))  # read by no session's page
    clock.now += 599
    lease.beat()  # the tab is open: its page frame beats every LEASE_BEAT_SECONDS
    store.sweep()
    assert ("data", "orphan") in store  # not idle long enough yet
    clock.now += 2
    lease.beat()
    store.sweep()
    assert ("data", "orphan") not in store and ("data", "held") in store
    # the visitor closes the tab: no more beats, while Streamlit still keeps the session's
    # state (and the lease in it), for as long as no other tab disconnects
    clock.now += 119
    store.sweep()
    assert ("data", "held") in store  # within the grace time: a hidden tab beats late
    clock.now += 2
    store.sweep()
    assert ("data", "held") not in store and store.nbytes == 0


def test_a_page_that_runs_long_keeps_its_lease_without_beating():
    clock = Clock()
    store = ResultStore(fit_bytes=100 * MB, idle_seconds=60, lease_seconds=120, clock=clock)
    lease = store.lease()
    with store.scope(lease):
        store.put(("data", "read"), mb_array(1))
        clock.now += 1000  # a page waiting for a long fit cannot beat meanwhile
        store.sweep()
        assert ("data", "read") in store
    clock.now += 121
    store.sweep()
    assert ("data", "read") not in store


def test_a_session_streamlit_forgot_holds_nothing():
    clock = Clock()
    store = ResultStore(fit_bytes=100 * MB, idle_seconds=60, clock=clock)
    lease = store.lease()
    with store.scope(lease):
        store.put(("data", "read"), mb_array(1))
    clock.now += 61
    del lease  # the session state went, its lease with it (the store holds leases weakly)
    gc.collect()
    store.sweep()
    assert ("data", "read") not in store


def test_a_held_value_is_still_evicted_by_the_byte_budget():
    store = ResultStore(fit_bytes=3 * MB)
    lease = store.lease()
    with store.scope(lease):
        for i in range(3):
            store.put(("fit", i), mb_array(1.5, i))
    assert lease.holds(("fit", 0)) and ("fit", 0) not in store
    assert store.fits.nbytes <= 3 * MB


def test_a_running_fit_keeps_room_in_the_budget_until_its_result_is_collected():
    """Issue 41: the fits kept made way only once a new fit was done, so while it ran the
    server held the whole budget plus the new fit. A job now keeps room for its result from
    its start."""
    import threading

    store = ResultStore(fit_bytes=10 * MB)
    for i in range(3):
        store.put(("fit", i), mb_array(3, i))
    assert store.fits.nbytes == 9 * MB
    go = threading.Event()
    job = store.start_job(
        ("fit", "new"), lambda progress: go.wait(10) and mb_array(4), reserve_bytes=4 * MB
    )
    # the least recently used fit left when the job started: 6 MB kept + 4 MB of room
    assert ("fit", 0) not in store and store.fits.nbytes + store.fits.reserved <= 10 * MB
    assert store.start_job(("fit", "new"), lambda progress: None, reserve_bytes=4 * MB) is job
    assert store.fits.reserved == 4 * MB  # joining a running job keeps no more room
    go.set()
    assert job.wait(10)
    assert store.claim_job(("fit", "new")) is job
    assert store.fits.reserved == 0 and ("fit", "new") in store
    assert store.fits.nbytes <= 10 * MB
    # a job forgotten (cleared, an upload gone) gives its room back too
    store.start_job(("fit", "other"), lambda progress: 1, reserve_bytes=2 * MB).wait(10)
    store.clear()
    assert store.fits.reserved == 0


def test_a_finished_job_nobody_collects_leaves_memory():
    clock = Clock()
    store = ResultStore(fit_bytes=100 * MB, idle_seconds=60, clock=clock)
    job = store.start_job(("geodesic", "gone"), lambda progress: mb_array(2))
    assert job.wait(10)
    store.sweep()
    assert store.job(("geodesic", "gone")) is job  # a page may still come for it
    clock.now += 61
    store.sweep()
    assert store.job(("geodesic", "gone")) is None and ("geodesic", "gone") not in store


def test_a_lease_remembers_a_bounded_number_of_keys():
    from geoviz.app.jobs import LEASE_MAX_KEYS

    lease = CacheLease()
    for i in range(LEASE_MAX_KEYS + 10):
        lease.note(i)
    assert not lease.holds(0) and lease.holds(LEASE_MAX_KEYS + 9)


def test_forgetting_an_upload_drops_what_sessions_using_it_read():
    store = ResultStore()
    upload = "ab" * 32
    scenario_key = "0123456789abcdef01234567"  # a Scenario.key(): 24 hex characters
    lease = store.lease()
    with store.scope(lease, lambda: {upload}):
        store.put(("data", scenario_key), "datasets")
        store.put(("place", scenario_key, 3), "points", tier="derived")
    # the same scenario's fit stored by a job's thread (no scope) shares the scenario key
    store.put(("evidence", scenario_key, (5, 1)), "evidence")
    store.put(("data", "fedcba9876543210fedcba98"), "another scenario")
    assert store.forget_upload(upload) == 3
    assert len(store) == 1 and ("data", "fedcba9876543210fedcba98") in store


# ---------------------------------------------------------------- issue 41: the timer, open tabs


def test_the_sweeper_gives_results_back_on_a_timer_without_any_page(monkeypatch):
    """Issue 41: four tabs' results stayed 720 s after the tabs closed, and left only when a
    new visitor came. Now the sweeper thread drops, on its own timer, what no open tab holds:
    a value no session read, and one read by a tab that closed (its session still kept, as
    Streamlit keeps it); a value of a tab that stays open (it beats) stays."""
    import time

    from geoviz.app.services import caches

    store = caches.store()
    monkeypatch.setattr(store, "idle_seconds", 0.3)
    monkeypatch.setattr(store, "lease_seconds", 1.0)
    monkeypatch.setattr(caches, "SWEEPER_TICK_SECONDS", 0.05)
    open_tab, closed_tab = store.lease(), store.lease()
    with store.scope(open_tab):
        store.put(("issue41", "open tab"), mb_array(1))
    with store.scope(closed_tab):
        store.put(("issue41", "closed tab"), mb_array(1))
    store.put(("issue41", "nobody"), mb_array(1))
    caches.start_sweeper()  # what the server's start-up does; no page runs below
    gone = [("issue41", "closed tab"), ("issue41", "nobody")]
    deadline = time.monotonic() + 30
    try:
        while any(key in store for key in gone) and time.monotonic() < deadline:
            open_tab.beat()  # the open tab's page frame, every LEASE_BEAT_SECONDS
            time.sleep(0.05)
        assert not any(key in store for key in gone)
        assert ("issue41", "open tab") in store
        assert closed_tab.holds(("issue41", "closed tab"))  # its session is still there
    finally:
        store.fits.pop(("issue41", "open tab"))


def test_the_server_starts_the_sweeper_before_any_visitor(monkeypatch):
    """The prefetched default scenario is held by no session: it must leave after the idle
    time even if nobody ever visits, so the launcher starts the sweeper itself."""
    from geoviz.app import serve
    from geoviz.app.services import caches

    started: list[str] = []
    monkeypatch.setattr(caches, "start_sweeper", lambda: started.append("sweeper") or True)
    monkeypatch.setattr(serve, "preload", lambda: {})
    monkeypatch.setattr(serve, "_log_to_stderr", lambda: None)
    monkeypatch.setattr(serve, "start_prefetch", lambda: started.append("prefetch"))
    monkeypatch.setattr(serve.runpy, "run_module", lambda *a, **k: started.append("streamlit"))
    monkeypatch.setattr(serve.sys, "argv", ["serve"])
    serve.main(["--server.headless", "true"])
    assert started.index("sweeper") < started.index("streamlit")


@pytest.mark.parametrize(
    ("page", "fragment_arguments"),
    [
        ("pages/2_maps.py", "teaching_panel"),
        ("pages/3_geodesic.py", "explorer"),
        ("pages/4_mccann.py", "mccann_view"),
    ],
)
def test_a_page_keeps_no_fit_the_store_let_go(fresh_server, page, fragment_arguments):
    """Streamlit keeps a fragment's arguments as long as its session (a closed tab's too, until
    Streamlit forgets it): the Geodesic page's explorer kept each visitor's fit, ~560 MB at
    image size 100, outside the byte budget (3.8 GB for four tabs, issue 41). The fragments
    now get a :class:`~geoviz.app.widgets.FitRef`: once the store lets a fit go, no open
    page keeps it."""
    import threading
    import weakref

    from streamlit.testing.v1 import AppTest

    from geoviz.app.services import caches
    from geoviz.app.services import geodesic as geodesic_services
    from geoviz.app.settings import default_scenario

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.switch_page(page)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    for thread in threading.enumerate():  # the explorer's background jobs hold it meanwhile
        if thread.name.startswith("geoviz-job"):
            thread.join(300)
    key = geodesic_services.geodesic_key(at.session_state[SessionModel.SCENARIO])
    assert at.session_state[SessionModel.SCENARIO] == default_scenario()
    fit = weakref.ref(caches.store().get(key))
    assert fit() is not None
    caches.store().clear()  # evicted by the budget, or swept
    gc.collect()
    assert fit() is None, f"the {fragment_arguments} fragment still holds the fit"
    # the page's next run fits it again (from the disk cache) and works as before
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert caches.store().get(key) is not None
