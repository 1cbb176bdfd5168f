"""What every service shares, once per server process: the job runner with its two cache
tiers (:func:`store`), the disk cache, the torch settings and background thread priority.

The result store is bounded in bytes (``GEOVIZ_FIT_CACHE_MB``) and given back when no
visitor uses it: every page runs inside :func:`session_scope`, which notes the keys the
page reads in its session's lease (kept in the session state); an open tab beats its lease
(:func:`geoviz.app.widgets.app_page`), and a lease that stopped beating is a closed tab's,
however long Streamlit keeps that session. A sweeper thread (:func:`start_sweeper`: started
once per process, by the server's start-up and by the first page) drops on a timer, every
:func:`sweep_seconds`, results idle for ``GEOVIZ_FIT_IDLE_MINUTES`` that no living session
holds, with or without visitors. An upload the upload store deletes takes the results
computed from it along (:meth:`ResultStore.forget_upload`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from geoviz.app.jobs import CacheLease, ResultStore
from geoviz.app.settings import AppSettings, fit_cache_knobs
from geoviz.app.uploads import UploadStore, secret_from_env
from geoviz.backend import DiskCache, RuntimeSettings, configure, get_cache
from geoviz.backend import configure_torch as configure_torch_settings
from geoviz.errors import GeovizError

if TYPE_CHECKING:
    from geoviz.app.session import SessionModel

Progress = Callable[[str, float], None]


#: fits kept in memory (datasets, geodesics of both map kinds, embeddings, payloads, ...)
MAX_FITS = 32
#: derived values kept in memory (P_a at so many weights, McCann steps, figures, tables)
MAX_DERIVED = 64

#: share of ``GEOVIZ_FIT_CACHE_MB`` the derived tier may take (the fits get the rest)
DERIVED_SHARE = 1 / 8


def _store_from_env() -> ResultStore:
    try:
        knobs = fit_cache_knobs()
    except GeovizError:
        # not a second outcome: the server's start-up check refuses the value (exit 2,
        # serve.settings_problem) and every page refuses it too (AppSettings.from_env);
        # this store only lets the module import so that they can say so
        knobs = fit_cache_knobs({})
    budget = knobs["fit_cache_mb"] * 2**20
    derived = int(budget * DERIVED_SHARE)
    return ResultStore(
        max_fits=MAX_FITS,
        max_derived=MAX_DERIVED,
        fit_bytes=budget - derived,
        derived_bytes=derived,
        idle_seconds=knobs["fit_idle_minutes"] * 60.0,
    )


_STORE = _store_from_env()
_TORCH_CONFIGURED: list[int] = []
_TORCH_LOCK = threading.Lock()


def store() -> ResultStore:
    """The process-wide job runner and in-memory caches (a fit tier and a derived tier)."""
    return _STORE


#: where a session keeps its :class:`~geoviz.app.jobs.CacheLease`
LEASE_KEY = "geoviz_cache_lease"


@contextlib.contextmanager
def session_scope(model: SessionModel) -> Iterator[None]:
    """Run one page of ``model``'s session: the result store notes the keys it reads in the
    session's lease (made on its first page, kept in its state), and they depend on the
    uploads the session knows (its own and its scenario's; see
    :meth:`~geoviz.app.jobs.ResultStore.forget_upload`); the lease lives while the page
    runs. Also starts the sweeper thread (:func:`start_sweeper`)."""
    lease = model.state.get(LEASE_KEY)
    if not isinstance(lease, CacheLease):
        lease = _STORE.lease()
        model.state[LEASE_KEY] = lease

    def uploads() -> set[str]:
        keys = set(model.uploads)
        keys.update(str(c.digest) for c in model.scenario.choices if c.source == "upload")
        return keys

    start_sweeper()
    with _STORE.scope(lease, uploads):
        yield


def configure_torch(threads: int) -> bool:
    """Set up the server process once, before any computation: torch and the library's settings.

    Called by every page's frame (:func:`geoviz.app.widgets.app_page`) with
    :attr:`~geoviz.app.settings.AppSettings.torch_threads`; only the first call does
    anything, so no request or job thread changes torch's global state afterwards (a
    per-request ``set_num_threads`` would change it under a fit running in another
    thread). ``threads = 0`` keeps torch's default. The first call also flushes
    subnormal floats (:func:`geoviz.backend.configure_torch`) and installs the
    environment's :class:`~geoviz.backend.RuntimeSettings` (``GEOVIZ_DEVICE``,
    ``GEOVIZ_CACHE_DIR``, ...) for the server's life (:func:`geoviz.backend.configure`).
    Returns ``True`` on the first call.
    """
    with _TORCH_LOCK:
        if _TORCH_CONFIGURED:
            return False
        _TORCH_CONFIGURED.append(int(threads))
        configure_torch_settings(
            threads=int(threads) if int(threads) > 0 else None, flush_denormal=True
        )
        configure(RuntimeSettings.from_env())
    return True


def disk_cache() -> DiskCache:
    return get_cache()


_UPLOADS: list[UploadStore] = []
_UPLOADS_LOCK = threading.Lock()
#: the disk cache's namespace of uploads before :class:`~geoviz.app.uploads.UploadStore`
LEGACY_UPLOAD_NAMESPACE = "app-upload"
#: most seconds between two sweeps (idle parsed uploads, expired files, idle results)
UPLOAD_SWEEP_SECONDS = 60.0


def upload_store(settings: AppSettings | None = None) -> UploadStore:
    """The server's :class:`~geoviz.app.uploads.UploadStore`: files under the disk cache's
    ``uploads/`` folder, budgets from the operator's settings (``GEOVIZ_UPLOAD_*``).

    Made on first use, with the sweeper thread (:func:`start_sweeper`: memory returns after
    visitors leave even when no page runs); made again when the cache folder changes (tests
    switch it).
    """
    folder = disk_cache().directory / "uploads"
    with _UPLOADS_LOCK:
        if _UPLOADS and _UPLOADS[-1].folder == folder:
            return _UPLOADS[-1]
        settings = settings or AppSettings.from_env()
        made = UploadStore(
            folder,
            memory_bytes=settings.upload_memory_mb * 2**20,
            disk_bytes=settings.upload_disk_mb * 2**20,
            ttl_seconds=settings.upload_ttl_hours * 3600.0,
            idle_seconds=settings.upload_idle_minutes * 60.0,
            secret=secret_from_env(),
            on_evict=_forget_upload,
        )
        _UPLOADS[:] = [made]
        # uploads kept by sha256 before the store existed never expired: removed once here
        shutil.rmtree(disk_cache().directory / LEGACY_UPLOAD_NAMESPACE, ignore_errors=True)
    start_sweeper()
    return made


def _forget_upload(key: str) -> None:
    _STORE.forget_upload(key)


_SWEEPER = "geoviz-sweeper"
_SWEEPER_LOCK = threading.Lock()
#: how often the sweeper thread looks at the clock: a shorter :func:`sweep_seconds` (a
#: store given a shorter idle time) takes effect within this
SWEEPER_TICK_SECONDS = 1.0


def sweep_seconds() -> float:
    """Seconds between two sweeps: a tenth of the result store's idle time, within
    [:data:`SWEEPER_TICK_SECONDS`, :data:`UPLOAD_SWEEP_SECONDS`] (60 s with the default 10
    idle minutes), so a result leaves at most a tenth of the idle time late."""
    return min(UPLOAD_SWEEP_SECONDS, max(SWEEPER_TICK_SECONDS, _STORE.idle_seconds / 10))


def start_sweeper() -> bool:
    """Start the process's sweeper, a daemon thread that runs :func:`sweep_once` every
    :func:`sweep_seconds` for the life of the process, whether or not any page runs (the
    server's start-up calls this; so do the first page and the upload store). Only the first
    call starts it; returns ``True`` then."""
    with _SWEEPER_LOCK:
        if any(t.name == _SWEEPER for t in threading.enumerate()):
            return False
        threading.Thread(target=_sweep_forever, name=_SWEEPER, daemon=True).start()
    return True


def sweep_once() -> int:
    """One sweep of the upload store and of the result store (what the sweeper thread does
    every :func:`sweep_seconds`); logs what left memory. Returns how many values left."""
    with _UPLOADS_LOCK:
        current = list(_UPLOADS)
    before = _STORE.nbytes
    sweeps: list[Callable[[], int]] = [u.sweep for u in current] + [_STORE.sweep]
    dropped = 0
    for sweep in sweeps:
        try:
            dropped += sweep()
        except Exception:  # a sweep must never end the thread
            logging.getLogger("geoviz.app").exception("sweep %r failed", sweep)
    if dropped:
        logging.getLogger("geoviz.app").info(
            "sweep: %d idle values no open tab holds left memory (results %.0f MB -> %.0f MB)",
            dropped,
            before / 2**20,
            _STORE.nbytes / 2**20,
        )
    return dropped


def _sweep_forever() -> None:
    due = time.monotonic() + sweep_seconds()
    while True:
        time.sleep(SWEEPER_TICK_SECONDS)
        now = time.monotonic()
        due = min(due, now + sweep_seconds())  # a shorter period applies at once
        if now >= due:
            sweep_once()
            due = time.monotonic() + sweep_seconds()


#: how much nicer (Linux thread niceness) a background fit that no page waits for runs
BACKGROUND_NICENESS = 10


def lower_thread_priority(increment: int = BACKGROUND_NICENESS) -> bool:
    """Make the calling thread (only it, and the threads it starts) nicer by ``increment``.

    On 2 cores the browser drawing the page and the page's own script compete with
    background fits (UMAP compiling, an embedding nobody looks at yet); a niced
    thread takes the CPU only when they leave it. Linux sets niceness per thread
    (``setpriority`` on the thread's id); elsewhere this does nothing. Returns
    ``True`` when the priority was lowered.
    """
    try:
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, current + int(increment)))
    except (AttributeError, OSError):  # not Linux, or not allowed
        return False
    return True
