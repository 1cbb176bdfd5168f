"""Background jobs and the process-wide result store, with separate cache tiers."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Literal, TypeVar

# plotly looks pandas up in sys.modules without importing it: if a job thread is the first to
# import pandas (through scikit-learn or UMAP) while a page draws a figure, plotly finds a
# half-initialised module and the page fails ("partially initialized module 'pandas' has no
# attribute 'Series'", seen in the browser test). Importing it before any job starts closes
# that race.
import pandas  # noqa: F401  # isort: skip

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
        self, fn: Callable[[Callable[[str, float], None]], Any], name: str = "job"
    ) -> None:
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


#: which cache of a :class:`ResultStore` holds a value: ``"fit"`` for what takes seconds to
#: minutes (loaded datasets, couplings, maps, embeddings, pairwise OTDD, payloads),
#: ``"derived"`` for what is cheap to compute again from a fit (``P_a`` at some weights,
#: McCann steps, figures, tables, export bytes)
CacheTier = Literal["fit", "derived"]


class LRUCache:
    """A thread-safe least-recently-used map with at most ``max_entries`` values.

    Concurrent :meth:`get_or_compute` calls for one key compute once; the others wait.
    """

    def __init__(self, max_entries: int) -> None:
        self.max_entries = int(max_entries)
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._key_locks: dict[Hashable, threading.Lock] = {}
        self.hits_ = 0
        self.misses_ = 0

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def items(self) -> list[tuple[Hashable, Any]]:
        """``[(key, value), ...]`` oldest first (a copy)."""
        with self._lock:
            return list(self._data.items())

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        return default

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def get_or_compute(self, key: Hashable, compute: Callable[[], T]) -> T:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits_ += 1
                return self._data[key]
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                if key in self._data:  # computed by another thread meanwhile
                    self.hits_ += 1
                    return self._data[key]
            value = compute()
            self.put(key, value)
            with self._lock:
                self.misses_ += 1
                self._key_locks.pop(key, None)
            return value

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


class ResultStore:
    """The app's job runner and in-memory caches, one per server process.

    Two bounded tiers (:data:`CacheTier`), so that deriving values can never evict a fit:
    moving the weights fills :attr:`derived` with ``P_a`` values, while the fits they come
    from stay in :attr:`fits`. Background jobs (:meth:`start_job`) are fits: a claimed
    job's result goes to :attr:`fits`. Results are shared across pages and sessions; unlike
    ``st.cache_resource``, computing inside :meth:`get_or_compute` may report progress to
    Streamlit elements created by the caller.

    Parameters
    ----------
    max_fits, max_derived
        Entries each tier keeps (least recently used first out).
    """

    def __init__(self, max_fits: int = 32, max_derived: int = 64) -> None:
        self.fits = LRUCache(max_fits)
        self.derived = LRUCache(max_derived)
        self._lock = threading.Lock()
        self._jobs: dict[Hashable, BackgroundJob] = {}

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

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value of ``key`` in either tier, else ``default``."""
        for cache in (self.fits, self.derived):
            if key in cache:
                return cache.get(key, default)
        return default

    def put(self, key: Hashable, value: Any, tier: CacheTier = "fit") -> None:
        self.tier(tier).put(key, value)

    def get_or_compute(self, key: Hashable, compute: Callable[[], T], *, tier: CacheTier) -> T:
        """The value of ``key`` in ``tier``, computed once (concurrent callers wait)."""
        return self.tier(tier).get_or_compute(key, compute)

    def start_job(
        self, key: Hashable, fn: Callable[[Callable[[str, float], None]], Any]
    ) -> BackgroundJob:
        """The running (or finished, unclaimed) job for ``key``, else a new one.

        Concurrent callers share one job. Use :meth:`claim_job` to move a
        finished job's result into the fit tier.
        """
        with self._lock:
            job = self._jobs.get(key)
            if job is None:
                job = BackgroundJob(fn, name=f"geoviz-job-{len(self._jobs)}")
                self._jobs[key] = job
            return job

    def job(self, key: Hashable) -> BackgroundJob | None:
        with self._lock:
            return self._jobs.get(key)

    def claim_job(self, key: Hashable) -> BackgroundJob | None:
        """Remove the job of ``key`` if it has finished; its result (not its error) is
        stored under ``key`` in the fit tier. Returns the finished job, or ``None`` while
        it runs."""
        with self._lock:
            job = self._jobs.get(key)
            if job is None or not job.done():
                return None
            del self._jobs[key]
        if job.error_ is None:
            self.fits.put(key, job.result_)
        return job

    def job_result(
        self,
        key: Hashable,
        fn: Callable[[Callable[[str, float], None]], Any],
        wait_seconds: float | None = 0.0,
    ) -> tuple[Any, BaseException | None]:
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
            for key in [k for k, job in self._jobs.items() if job.done()]:
                del self._jobs[key]
