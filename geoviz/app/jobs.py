"""Background jobs and the process-wide result store, with separate cache tiers."""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, Literal, TypeVar

# plotly looks pandas up in sys.modules without importing it: if a job thread is the first to
# import pandas (through scikit-learn or UMAP) while a page draws a figure, plotly finds a
# half-initialised module and the page fails ("partially initialized module 'pandas' has no
# attribute 'Series'", seen in the browser test). Importing it before any job starts closes
# that race.
import pandas  # noqa: F401  # isort: skip

from geoviz.app.lru import LRUCache, release_freed_memory
from geoviz.backend.cost_model import eta_seconds, format_seconds, took_sentence

T = TypeVar("T")


class BackgroundJob:
    """One long computation in a daemon thread, with progress any page can poll.

    ``fn(progress)`` runs once in the thread; ``progress(stage, fraction)``
    records the latest stage and fraction and, the first time a top-level stage
    (the text before `` (``) is reported, a log line with the elapsed seconds (parts that
    run at the same time and report in turn log each stage once, not at every turn). A Streamlit
    page that polls the job can be left (its script is stopped, the thread is
    not) and re-entered: it finds the same job, further along.

    Attributes
    ----------
    result_, error_
        The value returned by ``fn`` or the exception it raised (once done).
    """

    def __init__(
        self,
        fn: Callable[[Callable[[str, float], None]], Any],
        name: str = "job",
        *,
        estimate: float | None = None,
    ) -> None:
        self.estimate = estimate  # seconds the cost model expects, if it was asked
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._stage = "starting"
        self._fraction = 0.0
        self._log: list[tuple[float, str]] = []
        self._logged: set[str] = set()
        self._started = time.perf_counter()
        self._finished: float | None = None
        self.result_: Any = None
        self.error_: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)
        self._thread.start()

    def _progress(self, stage: str, fraction: float) -> None:
        top = str(stage).split(" (", 1)[0]
        with self._lock:
            self._stage = str(stage)
            self._fraction = float(min(max(fraction, 0.0), 1.0))
            if top not in self._logged:
                self._logged.add(top)
                self._log.append((time.perf_counter() - self._started, top))

    def _run(self, fn: Callable[[Callable[[str, float], None]], Any]) -> None:
        try:
            self.result_ = fn(self._progress)
        except BaseException as err:  # handed to whoever polls the job
            self.error_ = err
        finally:
            self._finished = time.perf_counter()
            self._done.set()
            # a fit's temporaries (plans, cost matrices: hundreds of MB at image size 100)
            # are free now; the next fit would otherwise reuse them only in part
            release_freed_memory()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block up to ``timeout`` seconds; ``True`` once the job has finished."""
        return self._done.wait(timeout)

    @property
    def elapsed(self) -> float:
        """Seconds since the start (until the end once finished)."""
        end = self._finished if self._finished is not None else time.perf_counter()
        return end - self._started

    def snapshot(self) -> tuple[str, float, list[tuple[float, str]]]:
        """``(stage, fraction in [0, 1], [(seconds, top-level stage), ...])``."""
        with self._lock:
            return self._stage, self._fraction, list(self._log)

    def remaining(self) -> float | None:
        """Seconds left (:func:`geoviz.backend.cost_model.eta_seconds`: the rate so far,
        blended with :attr:`estimate` early on); 0 once done, ``None`` when nothing says."""
        if self.done():
            return 0.0
        with self._lock:
            fraction = self._fraction
        return eta_seconds(self.elapsed, fraction, self.estimate)

    def eta_text(self, min_seconds: float = 2.0) -> str:
        """``" · about 12 s left"`` while running (after ``min_seconds``, or at once with an
        estimate); ``" · took 38 s"`` once done; ``""`` when nothing can be said yet."""
        if self.done():
            return f" · {took_sentence(self.elapsed)}"
        left = self.remaining()
        if left is None or (self.estimate is None and self.elapsed < min_seconds):
            return ""
        return f" · {format_seconds(left)} left"


#: which cache of a :class:`ResultStore` holds a value: ``"fit"`` for what takes seconds to
#: minutes (loaded datasets, couplings, maps, embeddings, pairwise OTDD, payloads),
#: ``"derived"`` for what is cheap to compute again from a fit (``P_a`` at some weights,
#: McCann steps, figures, tables, export bytes)
CacheTier = Literal["fit", "derived"]

#: keys a :class:`CacheLease` remembers (its session's most recent ones)
LEASE_MAX_KEYS = 2048

#: seconds between two heartbeats of an open page: the page frame's fragment
#: (:func:`geoviz.app.widgets.app_page`) beats its session's lease this often while the tab is
#: open, also when nobody touches it
LEASE_BEAT_SECONDS = 30.0
#: a lease that has not beaten for this long belongs to a closed tab. Streamlit keeps a closed
#: tab's session (its state, and the lease in it) at least ``server.disconnectedSessionTTL``
#: and in practice until another session disconnects, so its living in memory says nothing.
#: Four beats: a browser may run a hidden tab's timers only once a minute.
LEASE_GRACE_SECONDS = 4 * LEASE_BEAT_SECONDS


class CacheLease:
    """What one visitor's session uses of a :class:`ResultStore`: the keys its pages read.

    A session keeps its lease in its session state; the store holds it weakly. The lease is
    *living* while a page of its session runs (:meth:`running`) or its open tab beats
    (:meth:`beat`, every :data:`LEASE_BEAT_SECONDS`); a lease that has not beaten for the
    store's grace time (:data:`LEASE_GRACE_SECONDS`) belongs to a closed tab, even while
    Streamlit still keeps that session. While a lease lives, the store's idle sweep
    (:meth:`ResultStore.sweep`) keeps the values of its keys; the byte bound evicts them like
    any other.

    Parameters
    ----------
    clock
        Seconds (the store's; tests pass a fake one).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._keys: OrderedDict[Hashable, None] = OrderedDict()
        self._lock = threading.Lock()
        self._clock = clock
        self._seen = clock()
        self._running = 0

    def note(self, key: Hashable) -> None:
        with self._lock:
            self._keys[key] = None
            self._keys.move_to_end(key)
            while len(self._keys) > LEASE_MAX_KEYS:
                self._keys.popitem(last=False)

    def holds(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._keys

    def beat(self) -> None:
        """The session's tab is open now."""
        with self._lock:
            self._seen = self._clock()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Within this block a page of the session runs: the lease lives however long it
        takes (a page waiting for a fit cannot beat meanwhile)."""
        with self._lock:
            self._running += 1
            self._seen = self._clock()
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                self._seen = self._clock()

    def alive(self, grace_seconds: float) -> bool:
        """Whether a page of the session runs or its tab beat within ``grace_seconds``."""
        with self._lock:
            return self._running > 0 or self._clock() - self._seen <= grace_seconds


def _hash_tokens(key: Hashable) -> set[str]:
    """The hex digests (16+ characters: scenario keys, fingerprints) inside a cache key."""
    out: set[str] = set()
    stack: list[Any] = [key]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if len(item) >= 16 and set(item) <= _HEX:
                out.add(item)
        elif isinstance(item, (tuple, list, frozenset)):
            stack.extend(item)
    return out


_HEX = frozenset("0123456789abcdef")


class ResultStore:
    """The app's job runner and in-memory caches, one per server process.

    Two bounded tiers (:data:`CacheTier`), so that deriving values can never evict a fit:
    moving the weights fills :attr:`derived` with ``P_a`` values, while the fits they come
    from stay in :attr:`fits`. Background jobs (:meth:`start_job`) are fits: a claimed
    job's result goes to :attr:`fits`. Results are shared across pages and sessions; unlike
    ``st.cache_resource``, computing inside :meth:`get_or_compute` may report progress to
    Streamlit elements created by the caller.

    Memory is bounded in bytes (each value measured by :func:`nbytes_of` when stored) and
    given back when nobody uses it:

    * each tier keeps at most ``fit_bytes`` / ``derived_bytes``, least recently used out; a
      background fit keeps room for its result from its start (:meth:`start_job`), so the
      fits kept make way while it runs, not once it is done; memory freed by evictions and
      finished jobs goes back to the system (:func:`release_freed_memory`);
    * a page run inside :meth:`scope` notes the keys it reads in its session's
      :class:`CacheLease`; :meth:`sweep` drops values idle for ``idle_seconds`` that no
      living lease holds (the visitor closed the tab: its lease stopped beating
      ``lease_seconds`` ago), and results of finished jobs nobody collected;
    * the keys read inside a scope whose session uses uploads depend on those uploads:
      :meth:`forget_upload` (the upload store evicted one) drops every value whose key
      shares a scenario key with them.

    Parameters
    ----------
    max_fits, max_derived
        Entries each tier keeps (least recently used first out).
    fit_bytes, derived_bytes
        Bytes each tier keeps (``None``: unbounded).
    idle_seconds
        A value unused for this long, held by no session, leaves at the next :meth:`sweep`.
    lease_seconds
        A lease that has not beaten (:meth:`CacheLease.beat`) for this long, outside a page
        run, holds nothing: its tab is closed.
    clock
        Seconds (tests pass a fake one).
    """

    def __init__(
        self,
        max_fits: int = 32,
        max_derived: int = 64,
        *,
        fit_bytes: int | None = None,
        derived_bytes: int | None = None,
        idle_seconds: float = 600.0,
        lease_seconds: float = LEASE_GRACE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fits = LRUCache(max_fits, fit_bytes, clock=clock)
        self.derived = LRUCache(max_derived, derived_bytes, clock=clock)
        self.idle_seconds = float(idle_seconds)
        self.lease_seconds = float(lease_seconds)
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[Hashable, BackgroundJob] = {}
        # room each job keeps in the fit tier until its result is collected or forgotten
        self._job_room: dict[Hashable, int] = {}
        self._leases: weakref.WeakSet[CacheLease] = weakref.WeakSet()
        self._scope = threading.local()
        # upload key -> hex tokens (scenario keys) of cache keys read by sessions using it
        self._upload_tokens: dict[str, set[str]] = {}
        self._done_since: dict[Hashable, float] = {}

    def configure(
        self,
        *,
        fit_bytes: int | None,
        derived_bytes: int | None,
        idle_seconds: float | None = None,
    ) -> None:
        """Set the byte bounds (and the idle time) of a store in use; the next store evicts."""
        self.fits.max_bytes = fit_bytes
        self.derived.max_bytes = derived_bytes
        if idle_seconds is not None:
            self.idle_seconds = float(idle_seconds)

    # ------------------------------------------------------------------ sessions
    def lease(self) -> CacheLease:
        """A new :class:`CacheLease` for one session (kept in its session state)."""
        made = CacheLease(self._clock)
        with self._lock:
            self._leases.add(made)
        return made

    @contextlib.contextmanager
    def scope(
        self, lease: CacheLease, uploads: Callable[[], Iterable[str]] = tuple
    ) -> Iterator[None]:
        """Within this block (one page run, in its thread) every key read or stored is noted in
        ``lease``, and depends on the upload keys ``uploads()`` returns then; the lease lives
        while the block runs (:meth:`CacheLease.running`)."""
        previous = getattr(self._scope, "value", None)
        self._scope.value = (lease, uploads)
        try:
            with lease.running():
                yield
        finally:
            self._scope.value = previous

    def _note(self, key: Hashable) -> None:
        current = getattr(self._scope, "value", None)
        if current is None:
            return
        lease, uploads = current
        lease.note(key)
        keys = [str(k) for k in uploads()]
        if keys:
            tokens = _hash_tokens(key)
            with self._lock:
                for upload in keys:
                    self._upload_tokens.setdefault(upload, set()).update(tokens)

    def held(self, key: Hashable) -> bool:
        """Whether a living session's lease holds ``key`` (:meth:`CacheLease.alive`)."""
        with self._lock:
            leases = list(self._leases)
        return any(lease.holds(key) and lease.alive(self.lease_seconds) for lease in leases)

    def forget_upload(self, upload_key: str) -> int:
        """Drop every value (both tiers, finished jobs) that depends on the upload ``upload_key``
        (see :meth:`scope`): called when the upload store evicts it, so nothing computed from
        an upload outlives it. Returns how many values were dropped."""
        with self._lock:
            tokens = self._upload_tokens.pop(str(upload_key), set())
        tokens.add(str(upload_key))

        def depends(key: Hashable) -> bool:
            return not _hash_tokens(key).isdisjoint(tokens)

        dropped = 0
        for cache in (self.fits, self.derived):
            for key in cache.ordered_keys():
                if depends(key) and cache.pop(key):
                    dropped += 1
        with self._lock:
            for key in [k for k, job in self._jobs.items() if job.done() and depends(k)]:
                self._forget_job(key)
                dropped += 1
        return dropped

    def sweep(self) -> int:
        """Give back memory nobody uses: values idle for ``idle_seconds`` that no living
        session holds, and finished jobs nobody collected within ``idle_seconds`` (a
        result moves to the fit tier, under its bound; an error is forgotten). Returns how
        many values left memory."""
        dropped = 0
        idle = [(c, k) for c in (self.fits, self.derived) for k in c.idle_keys(self.idle_seconds)]
        for cache, key in idle:
            if not self.held(key) and cache.pop(key):
                dropped += 1
        now = self._clock()
        with self._lock:
            done = [k for k, job in self._jobs.items() if job.done()]
            for key in list(self._done_since):
                if key not in done:
                    del self._done_since[key]
            stale = []
            for key in done:
                since = self._done_since.setdefault(key, now)
                if now - since > self.idle_seconds:
                    stale.append(key)
        for key in stale:
            job = self.claim_job(key)
            if job is not None and job.error_ is None and not self.held(key):
                self.fits.pop(key)  # nobody collected it and no session reads it
                dropped += 1
        if dropped:
            release_freed_memory()
        return dropped

    # ------------------------------------------------------------------ tiers
    def tier(self, tier: CacheTier) -> LRUCache:
        """The cache of ``tier``."""
        if tier == "fit":
            return self.fits
        if tier == "derived":
            return self.derived
        raise ValueError(f"unknown cache tier {tier!r}: use 'fit' or 'derived'")

    def __contains__(self, key: Hashable) -> bool:
        return key in self.fits or key in self.derived

    def __len__(self) -> int:
        return len(self.fits) + len(self.derived)

    @property
    def nbytes(self) -> int:
        """Bytes both tiers keep (as measured when stored)."""
        return self.fits.nbytes + self.derived.nbytes

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value of ``key`` in either tier, else ``default``."""
        self._note(key)
        for cache in (self.fits, self.derived):
            if key in cache:
                return cache.get(key, default)
        return default

    def put(self, key: Hashable, value: Any, tier: CacheTier = "fit") -> None:
        self._note(key)
        self.tier(tier).put(key, value)

    def get_or_compute(self, key: Hashable, compute: Callable[[], T], *, tier: CacheTier) -> T:
        """The value of ``key`` in ``tier``, computed once (concurrent callers wait)."""
        self._note(key)
        return self.tier(tier).get_or_compute(key, compute)

    def start_job(
        self,
        key: Hashable,
        fn: Callable[[Callable[[str, float], None]], Any],
        *,
        reserve_bytes: int = 0,
        estimate: float | None = None,
    ) -> BackgroundJob:
        """The running (or finished, unclaimed) job for ``key``, else a new one.

        ``estimate``: the seconds a new job should take (the cost model's), the start of its
        time left (:meth:`BackgroundJob.eta_text`).

        Concurrent callers share one job. Use :meth:`claim_job` to move a
        finished job's result into the fit tier. A new job first keeps ``reserve_bytes``
        of room in the fit tier (:meth:`LRUCache.reserve`: what its result will take), until
        its result is collected or forgotten: the memory it fills while it runs, and its
        result until a page collects it, are within the budget.
        """
        with self._lock:
            job = self._jobs.get(key)
            if job is None:
                if reserve_bytes > 0:
                    self.fits.reserve(reserve_bytes)
                    self._job_room[key] = int(reserve_bytes)
                job = BackgroundJob(fn, name=f"geoviz-job-{len(self._jobs)}", estimate=estimate)
                self._jobs[key] = job
            return job

    def _forget_job(self, key: Hashable) -> None:
        """Remove the job of ``key`` and give back its room (with the lock held)."""
        del self._jobs[key]
        self.fits.release(self._job_room.pop(key, 0))

    def job(self, key: Hashable) -> BackgroundJob | None:
        self._note(key)
        with self._lock:
            return self._jobs.get(key)

    def claim_job(self, key: Hashable) -> BackgroundJob | None:
        """Remove the job of ``key`` if it has finished; its result (not its error) is
        stored under ``key`` in the fit tier. Returns the finished job, or ``None`` while
        it runs."""
        self._note(key)
        with self._lock:
            job = self._jobs.get(key)
            if job is None or not job.done():
                return None
            self._forget_job(key)
        if job.error_ is None:
            self.fits.put(key, job.result_)
        return job

    def job_result(
        self,
        key: Hashable,
        fn: Callable[[Callable[[str, float], None]], T],
        wait_seconds: float | None = 0.0,
    ) -> tuple[T | None, BaseException | None]:
        """The value of a background job, for callers that must not block on it.

        ``(value, None)`` once the job of ``key`` (``fn``, started or joined here) has
        finished, waited for up to ``wait_seconds`` (``None``: until done); its value then
        lives in the fit tier. ``(None, None)`` while it runs; ``(None, error)`` when it
        failed, remembered (derived tier) so a failing job is not restarted on every call.
        """
        ready = self.get(key)
        if ready is not None:
            return ready, None
        failed = self.get(("failed", key))
        if failed is not None:
            return None, failed
        job = self.start_job(key, fn)
        if not job.wait(None if wait_seconds is None else max(float(wait_seconds), 0.0)):
            return None, None
        self.claim_job(key)  # the result (not an error) moves into the fit tier
        if job.error_ is not None:
            self.put(("failed", key), job.error_, tier="derived")
            return None, job.error_
        return job.result_, None

    def clear(self) -> None:
        """Forget every cached value: both tiers and the results of finished, unclaimed jobs
        (a later :meth:`start_job` would hand those out as if cached); running jobs go on."""
        self.fits.clear()
        self.derived.clear()
        with self._lock:
            self._upload_tokens.clear()
            self._done_since.clear()
            for key in [k for k, job in self._jobs.items() if job.done()]:
                self._forget_job(key)
