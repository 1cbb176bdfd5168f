"""Run independent, deterministic tasks as Ray tasks or one after another.

:func:`run_tasks` maps ``fn`` over ``items`` and returns the results in input
order. The two backends give the same results for a deterministic ``fn``
(every experiment of :mod:`geoviz.transfer` seeds its own generators):

* ``"sequential"`` calls ``fn`` in this process;
* ``"ray"`` submits one Ray task per item. ``ray.init`` connects to the cluster
  at ``address`` (entry points pass ``$RAY_ADDRESS``; with ``None`` Ray itself still
  honours ``RAY_ADDRESS`` and the cluster last started on this machine) or, with
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

Before Ray connects to a cluster, :func:`check_ray_address` refuses a malformed address
in one sentence, and the cluster's port must answer as a gRPC server within
``connect_timeout`` seconds (default 30, ``GEOVIZ_RAY_CONNECT_TIMEOUT``). Ray's own
connection attempt waits minutes inside native code that ignores SIGTERM and, when it
gives up, ends the whole process: a cluster that does not answer is refused here instead,
naming the address (``"ray"``), or the tasks run sequentially with a warning (``"auto"``).
A program that must survive the loss of its cluster (the app's server) runs the Ray
driver in a child process (:mod:`geoviz.isolation`).

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
import os
import re
import socket
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any, Literal, TypeVar

from geoviz.errors import GeovizError

__all__ = [
    "BACKENDS",
    "RAY_CONNECT_TIMEOUT",
    "Backend",
    "check_ray_address",
    "probe_ray_address",
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

_RAY_INIT_LOCK = threading.Lock()

_RAY_MISSING = (
    "the Ray backend needs the optional dependency ray: pip install 'geoviz[ray]' "
    "(or use backend='sequential')"
)


#: Seconds a Ray cluster's port has to accept a connection (``GEOVIZ_RAY_CONNECT_TIMEOUT``).
RAY_CONNECT_TIMEOUT = 30.0
_TIMEOUT_ENV = "GEOVIZ_RAY_CONNECT_TIMEOUT"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
# host:port or ray://host:port; the host a name, an IPv4 address or a bracketed IPv6 one
_ADDRESS = re.compile(rf"(?:ray://)?({_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\]):([0-9]{{1,5}})")
_ADDRESS_FORMS = "host:port, ray://host:port, auto or local"


def _shown(text: str) -> str:
    """``text`` quoted for a message, cut so that a huge input is not echoed back."""
    return repr(text if len(text) <= 60 else text[:57] + "...")


def check_ray_address(address: str | None, name: str = "the Ray address") -> str | None:
    """``address`` stripped, if it has a form Ray accepts, else one sentence.

    Parameters
    ----------
    address
        ``None`` (Ray decides), ``"auto"`` (the running cluster of this machine),
        ``"local"`` (a new local cluster), ``"host:port"`` (a cluster's GCS) or
        ``"ray://host:port"`` (a Ray Client server).
    name
        What the message calls it (``"--ray-address"``, ``"RAY_ADDRESS"``).

    Raises
    ------
    GeovizError
        Anything else (``'garbage!!'``, a port out of 1-65535, a missing port).
    """
    if address is None:
        return None
    if not isinstance(address, str):
        raise GeovizError(f"{name} must be text ({_ADDRESS_FORMS}), got {type(address).__name__}")
    text = address.strip()
    if text in ("auto", "local"):
        return text
    match = _ADDRESS.fullmatch(text) if len(text) <= 300 else None
    if match is None or not 1 <= int(match.group(2)) <= 65535:
        raise GeovizError(f"{name} {_shown(text)} is not a Ray address: use {_ADDRESS_FORMS}")
    return text


def connect_timeout_from_env(env: Mapping[str, str] | None = None) -> float:
    """``GEOVIZ_RAY_CONNECT_TIMEOUT`` in seconds (default :data:`RAY_CONNECT_TIMEOUT`).

    Checked where a run starts (the server's :func:`geoviz.app.serve.settings_problem`, the
    command line's entry point), not only when Ray is first needed, minutes into a run.

    Raises
    ------
    GeovizError
        Not a number of seconds in (0, 3600].
    """
    raw = (os.environ if env is None else env).get(_TIMEOUT_ENV, "").strip()
    if not raw:
        return RAY_CONNECT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 3600:
        raise GeovizError(
            f"environment variable {_TIMEOUT_ENV} must be a number of seconds in (0, 3600], "
            f"got {_shown(raw)}"
        )
    return value


def _cluster_to_join(address: str | None) -> tuple[str, str] | None:
    """``(host:port, what the message calls it)`` of the cluster ``ray.init(address)``
    would join, or ``None`` when it would start a local one.

    Follows Ray's rules: ``RAY_ADDRESS`` before ``None``/``"auto"``, then the cluster last
    started on this machine; ``"auto"`` without any is refused.
    """
    if address is not None and address != "auto":
        return None if address == "local" else (address, f"the Ray address {_shown(address)}")
    env = check_ray_address(os.environ.get("RAY_ADDRESS", "").strip() or None, "RAY_ADDRESS")
    if env is not None and env != "auto":
        return None if env == "local" else (env, f"RAY_ADDRESS {_shown(env)}")
    wanted = "auto" if "auto" in (address, env) else None
    found: str | None = None
    try:  # Ray's own lookup of a running cluster (its temp folder, its processes)
        from ray._private.services import get_ray_address_from_environment

        # Ray's annotation says str; None is what its own ray.init passes for no address
        found = get_ray_address_from_environment(wanted, None)  # type: ignore[arg-type]
    except ConnectionError:
        found = None
    except Exception:  # a Ray without this helper: let ray.init decide
        return None
    if found is None or found in ("auto", "local"):
        if wanted == "auto":
            raise GeovizError(
                "no running Ray cluster was found for the Ray address 'auto' (start one with "
                "`ray start --head`, or give the cluster's host:port)"
            )
        return None
    return found, f"the running Ray cluster found for {_shown(wanted or 'a local run')} ({found})"


#: HTTP/2's client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS, a Ray
#: Client server) answers with a SETTINGS frame of its own
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_H2_SETTINGS = 4


def _grpc_answers(host: str, port: int, timeout: float) -> str | None:
    """``None`` when a gRPC server at ``host:port`` answers within ``timeout`` s, else why not.

    An open TCP port is not enough: a proxy or firewall may accept every connection.
    """
    result: list[str | None] = []

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout) as sock:
                sock.sendall(_H2_HELLO)
                head = b""
                while len(head) < 9:
                    chunk = sock.recv(9 - len(head))
                    if not chunk:
                        break
                    head += chunk
        except TimeoutError:  # the socket's own timeout: the same sentence as the join's
            result.append(f"no answer within {timeout:g} s")
            return
        except OSError as err:
            result.append(str(err.strerror or type(err).__name__).lower())
            return
        if len(head) < 9 or head[3] != _H2_SETTINGS:
            result.append("the port answered, but not as a Ray cluster")
        else:
            result.append(None)

    # in a thread, so that a name lookup that never returns is bounded too
    worker = threading.Thread(target=attempt, name="geoviz-ray-probe", daemon=True)
    worker.start()
    worker.join(timeout)
    if not result:
        return f"no answer within {timeout:g} s"
    return result[0]


def probe_ray_address(address: str | None, timeout: float | None = None) -> None:
    """Refuse a Ray cluster that does not answer, within ``timeout`` seconds.

    ``address`` as for ``ray.init`` (checked with :func:`check_ray_address`); the cluster
    it stands for (``RAY_ADDRESS``, ``"auto"``: see :func:`_cluster_to_join`) must answer
    on its port as a gRPC server does (:func:`_grpc_answers`). Nothing is checked when Ray
    would start a local cluster. The wait is plain Python: SIGTERM and Ctrl-C end it.

    Raises
    ------
    GeovizError
        A malformed address, ``"auto"`` with no cluster running, or a port that refuses
        or does not answer in time (the message names the address).
    """
    address = check_ray_address(address)
    timeout = connect_timeout_from_env() if timeout is None else float(timeout)
    target = _cluster_to_join(address)
    if target is None:
        return
    where, named = target
    host, _, port = where.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    start = time.monotonic()
    why = _grpc_answers(host, int(port), timeout)
    if why is not None:
        waited = time.monotonic() - start
        raise GeovizError(
            f"{named} does not answer ({why}, after {waited:.1f} s): start the cluster, give "
            "the address of a running one, or run the tasks sequentially (backend 'sequential')"
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
    connect_timeout: float | None = None,
    memory_per_task: int | None = None,
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
    connect_timeout
        Seconds the cluster's port has to answer before it is refused
        (:func:`probe_ray_address`); ``None``: ``GEOVIZ_RAY_CONNECT_TIMEOUT``, else 30.
    memory_per_task
        Bytes of memory each Ray task reserves (Ray's ``memory`` resource: a node runs no
        more tasks at once than its memory holds); ``None``: no reservation.

    Returns
    -------
    list
        ``fn(items[i])`` at position ``i``.

    Raises
    ------
    GeovizError
        An unknown backend, ``backend="ray"`` without ray installed, a malformed
        ``address`` (with Ray), a cluster that does not answer or a Ray that cannot
        start (``backend="ray"``; ``"auto"`` then runs sequentially with a warning), or a
        negative ``num_gpus_per_task``. Exceptions of ``fn`` propagate.
    """
    items = list(items)
    resolved = resolve_backend(backend)
    if num_gpus_per_task is not None and not num_gpus_per_task >= 0:
        raise GeovizError(f"num_gpus_per_task must be >= 0, got {num_gpus_per_task}")
    if resolved == "ray":  # a malformed address is a mistake whatever happens next
        address = check_ray_address(address or None)
    total = len(items)
    if progress is not None:
        progress(0, total)
    if total == 0:
        return []
    if resolved == "sequential" or (backend == "auto" and total == 1):
        return _run_sequential(fn, items, progress, on_result)
    try:
        _ray_ready(address, connect_timeout)
    except GeovizError as err:
        if backend != "auto":
            raise
        # "auto" means Ray when it works here: a machine where it cannot start still computes
        warnings.warn(f"{err}; running the tasks sequentially", RuntimeWarning, stacklevel=2)
        return _run_sequential(fn, items, progress, on_result)
    return _run_ray(fn, items, num_gpus_per_task, progress, on_result, memory_per_task)


def _ray_ready(address: str | None, connect_timeout: float | None) -> None:
    """Start (or join) Ray, unless this process already has.

    Raises
    ------
    GeovizError
        The cluster does not answer (:func:`probe_ray_address`), or ``ray.init`` failed.
    """
    ray = _import_ray()
    if ray is None:  # pragma: no cover - resolve_backend checked it
        raise GeovizError(_RAY_MISSING)
    # several threads of one fit (the maps of a geodesic) may each start their tasks:
    # one of them starts Ray, the others find it started
    with _RAY_INIT_LOCK:
        _ray_start(ray, address, connect_timeout)


def _ray_start(ray: Any, address: str | None, connect_timeout: float | None) -> None:
    if ray.is_initialized():
        return
    probe_ray_address(address, connect_timeout)
    try:
        ray.init(address=address or None, ignore_reinit_error=True)
    except Exception as err:  # any start-up failure of the optional engine
        lines = [line for line in str(err).strip().splitlines() if line.strip()]
        why = lines[-1].strip() if lines else type(err).__name__
        raise GeovizError(f"Ray could not start ({type(err).__name__}: {why})") from err


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
    num_gpus_per_task: float | None,
    progress: Callable[[int, int], None] | None,
    on_result: Callable[[int, R], None] | None,
    memory_per_task: int | None = None,
) -> list[R]:
    ray = _import_ray()
    if ray is None:  # pragma: no cover - resolve_backend checked it
        raise GeovizError(_RAY_MISSING)
    gpus = _default_gpus() if num_gpus_per_task is None else float(num_gpus_per_task)
    options: dict[str, Any] = {"num_gpus": gpus}
    if memory_per_task is not None:
        # a task no node can hold would wait forever: refuse it in one sentence instead
        largest = max(
            (
                float(node.get("Resources", {}).get("memory", 0.0))
                for node in ray.nodes()
                if node.get("Alive")
            ),
            default=0.0,
        )
        if largest and memory_per_task > largest:
            raise GeovizError(
                f"each task needs about {memory_per_task / 2**30:.1f} GiB of memory, but the "
                f"largest node of the Ray cluster offers {largest / 2**30:.1f} GiB; use smaller "
                "batches (--batch-size) or a node with more memory"
            )
        options["memory"] = int(memory_per_task)
    remote = ray.remote(**options)(_call)
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
    except BaseException:
        # Ctrl-C (or SystemExit) while waiting: the user wants out now, not after the parts
        # already running; they finish on their own and their results are dropped
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    # after a failure: the parts not started are dropped, the running ones waited for
    pool.shutdown(wait=True, cancel_futures=True)
    failed = [f.exception() for f in futures if not f.cancelled() and f.exception() is not None]
    if failed:
        raise failed[0]  # type: ignore[misc]
    return [future.result() for future in futures]
