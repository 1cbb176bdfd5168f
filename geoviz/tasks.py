"""Run independent, deterministic tasks as Ray tasks or one after another.

:func:`run_tasks` maps ``fn`` over ``items`` and returns the results in input
order. The two backends give the same results for a deterministic ``fn``
(every experiment of :mod:`geoviz.transfer` seeds its own generators):

* ``"sequential"`` calls ``fn`` in this process;
* ``"ray"`` submits one Ray task per item. ``ray.init`` connects to the cluster
  at ``address`` (the library reads no environment: entry points pass
  ``$RAY_ADDRESS``; with ``None`` Ray itself still honours ``RAY_ADDRESS``) or, with
  neither, starts a local cluster embedded in this process (a few seconds). A
  cluster already initialised by the caller (``ray.init(...)`` before the call)
  is used as is, and a cluster started here stays up for later calls (Ray
  shuts it down when the process exits). Each task asks for
  ``num_gpus_per_task`` GPUs; by default one GPU when this process sees CUDA,
  else none. ``fn`` is put in the object store once and shared by all tasks.
  A task's exception is re-raised here (Ray's error is also an instance of
  the original exception class, so a :class:`~geoviz.errors.GeovizError`
  raised in a task can be caught as one) and the unfinished tasks are cancelled;
* ``"auto"`` is Ray when it can be imported, sequential otherwise. A single
  item always runs in this process (a cluster would only add its start-up).

Ray is an optional dependency (``pip install 'geoviz[ray]'``), imported only
when the Ray backend is used.

:func:`run_in_threads` is the in-process engine for the few independent parts of *one*
computation a user is waiting for (the maps and label distances of one geodesic fit):
``concurrent.futures`` threads of this process, which share its datasets and start in
microseconds, where a Ray cluster would take seconds to start and copy every input.
torch, LAPACK and POT release the GIL in their kernels, so the parts run in parallel.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any, Literal, TypeVar

from geoviz.errors import GeovizError

__all__ = [
    "BACKENDS",
    "Backend",
    "ray_available",
    "resolve_backend",
    "run_in_threads",
    "run_tasks",
]

T = TypeVar("T")
R = TypeVar("R")

Backend = Literal["auto", "ray", "sequential"]
#: The accepted values of ``backend``.
BACKENDS: tuple[str, ...] = ("auto", "ray", "sequential")

_RAY_MISSING = (
    "the Ray backend needs the optional dependency ray: pip install 'geoviz[ray]' "
    "(or use backend='sequential')"
)


def _import_ray() -> Any | None:
    """The ``ray`` module, or ``None`` when it cannot be imported."""
    try:
        import ray
    except ImportError:
        return None
    return ray


def ray_available() -> bool:
    """Whether ``ray`` can be imported (so ``backend="auto"`` would use it)."""
    return _import_ray() is not None


def resolve_backend(backend: str) -> Literal["ray", "sequential"]:
    """The backend ``backend`` stands for: ``"auto"`` is Ray if importable, else sequential.

    Raises
    ------
    GeovizError
        An unknown backend, or ``"ray"`` while ray is not installed.
    """
    if backend not in BACKENDS:
        raise GeovizError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "sequential":
        return "sequential"
    if ray_available():
        return "ray"
    if backend == "ray":
        raise GeovizError(_RAY_MISSING)
    return "sequential"


def _default_gpus() -> float:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return 0.0
    return 1.0 if torch.cuda.is_available() else 0.0


def _call(fn: Callable[[Any], Any], item: Any) -> Any:
    """Body of every Ray task (``fn`` arrives resolved from the object store)."""
    return fn(item)


def run_tasks(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    backend: Backend = "auto",
    address: str | None = None,
    num_gpus_per_task: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    on_result: Callable[[int, R], None] | None = None,
) -> list[R]:
    """``[fn(item) for item in items]``, run as Ray tasks or sequentially.

    Parameters
    ----------
    fn
        A deterministic function of one item. For Ray it must be picklable
        (cloudpickle): a module-level function or a ``functools.partial`` of one.
    items
        The inputs, one task each (picklable for Ray).
    backend
        ``"auto"`` (Ray if importable, else sequential), ``"ray"`` or ``"sequential"``.
    address
        Ray cluster address (``"auto"``, ``"ray://host:10001"``, ...); ``None``: what
        ``ray.init`` does without one (``RAY_ADDRESS`` if set, else a local embedded
        cluster). Entry points read the environment (``geoviz transfer --ray-address``).
    num_gpus_per_task
        GPUs each Ray task reserves; ``None``: 1 when CUDA is available here, else 0.
    progress
        Called with ``(done, total)`` once before the first result (``done = 0``)
        and after every finished task.
    on_result
        Called in this process with ``(index, result)`` as each result arrives
        (in completion order for Ray), e.g. to checkpoint it.

    Returns
    -------
    list
        ``fn(items[i])`` at position ``i``.

    Raises
    ------
    GeovizError
        An unknown backend, ``backend="ray"`` without ray installed, or a
        negative ``num_gpus_per_task``. Exceptions of ``fn`` propagate.
    """
    items = list(items)
    resolved = resolve_backend(backend)
    if num_gpus_per_task is not None and not num_gpus_per_task >= 0:
        raise GeovizError(f"num_gpus_per_task must be >= 0, got {num_gpus_per_task}")
    total = len(items)
    if progress is not None:
        progress(0, total)
    if total == 0:
        return []
    if resolved == "sequential" or (backend == "auto" and total == 1):
        return _run_sequential(fn, items, progress, on_result)
    if backend == "auto" and not _ray_ready(address):
        # "auto" means Ray when it works here: a machine where it cannot start still computes
        return _run_sequential(fn, items, progress, on_result)
    return _run_ray(fn, items, address, num_gpus_per_task, progress, on_result)


def _ray_ready(address: str | None) -> bool:
    """Start (or join) Ray; ``False`` with a warning when it cannot start on this machine."""
    ray = _import_ray()
    if ray is None:
        return False
    if ray.is_initialized():
        return True
    try:
        ray.init(address=address or None, ignore_reinit_error=True)
    except Exception as err:  # any start-up failure of the optional engine
        warnings.warn(
            f"Ray could not start ({type(err).__name__}: {err}); running the tasks sequentially",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return True


def _run_sequential(
    fn: Callable[[T], R],
    items: list[T],
    progress: Callable[[int, int], None] | None,
    on_result: Callable[[int, R], None] | None,
) -> list[R]:
    results: list[R] = []
    for i, item in enumerate(items):
        result = fn(item)
        results.append(result)
        if on_result is not None:
            on_result(i, result)
        if progress is not None:
            progress(i + 1, len(items))
    return results


def _run_ray(
    fn: Callable[[T], R],
    items: list[T],
    address: str | None,
    num_gpus_per_task: float | None,
    progress: Callable[[int, int], None] | None,
    on_result: Callable[[int, R], None] | None,
) -> list[R]:
    ray = _import_ray()
    if ray is None:  # pragma: no cover - resolve_backend checked it
        raise GeovizError(_RAY_MISSING)
    if not ray.is_initialized():
        ray.init(address=address or None, ignore_reinit_error=True)
    gpus = _default_gpus() if num_gpus_per_task is None else float(num_gpus_per_task)
    remote = ray.remote(num_gpus=gpus)(_call)
    fn_ref = ray.put(fn)
    refs = [remote.remote(fn_ref, item) for item in items]
    position = {ref: i for i, ref in enumerate(refs)}
    results: list[Any] = [None] * len(items)
    pending = list(refs)
    done = 0
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                i = position[ref]
                results[i] = ray.get(ref)
                done += 1
                if on_result is not None:
                    on_result(i, results[i])
                if progress is not None:
                    progress(done, len(items))
    except BaseException:
        for ref in pending:  # best effort: the original error is what matters
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        raise
    return results


def run_in_threads(fn: Callable[[T], R], items: Sequence[T], workers: int) -> list[R]:
    """``[fn(item) for item in items]`` on up to ``workers`` threads of this process.

    For the independent parts of one computation (see the module docstring), not for sweeps
    (those are :func:`run_tasks`). Items are started in order; with ``workers <= 1`` or a
    single item everything runs in the calling thread, one after another.

    Parameters
    ----------
    fn
        A function of one item that is safe to call from several threads at once (no
        shared mutable state; seeded generators of its own).
    items
        The inputs, one part each.
    workers
        Most parts running at the same time (>= 1).

    Returns
    -------
    list
        ``fn(items[i])`` at position ``i``, whatever order the parts finished in.

    Raises
    ------
    GeovizError
        ``workers`` below 1.
    Exception
        A failing part's exception: once one fails, the parts not yet started are
        dropped and the running ones finish; of those that failed, the first in the order
        of ``items`` is raised.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise GeovizError(f"workers must be an integer >= 1, got {workers!r}")
    items = list(items)
    if workers == 1 or len(items) <= 1:
        return [fn(item) for item in items]
    pool = ThreadPoolExecutor(
        max_workers=min(workers, len(items)), thread_name_prefix="geoviz-part"
    )
    try:
        futures = [pool.submit(fn, item) for item in items]
        wait(futures, return_when=FIRST_EXCEPTION)
    finally:
        # after a failure: the parts not started are dropped, the running ones waited for
        pool.shutdown(wait=True, cancel_futures=True)
    failed = [f.exception() for f in futures if not f.cancelled() and f.exception() is not None]
    if failed:
        raise failed[0]  # type: ignore[misc]
    return [future.result() for future in futures]
