"""geoviz.tasks: Ray tasks and sequential runs give the same, ordered results."""

from __future__ import annotations

import _thread
import functools
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from geoviz.errors import GeovizError
from geoviz.tasks import (
    check_ray_address,
    probe_ray_address,
    resolve_backend,
    run_in_threads,
    run_tasks,
)


def _work(item: tuple[int, float]) -> tuple[int, float]:
    """Deterministic in ``seed``; the sleep makes later items finish first."""
    seed, delay = item
    time.sleep(delay)
    rng = np.random.default_rng(seed)
    return seed, float(rng.standard_normal(1000) @ rng.standard_normal(1000))


def _fail_on(bad: int, item: int) -> int:
    if item == bad:
        raise GeovizError(f"item {bad} is bad")
    return item


ITEMS = [(seed, 0.05 * (5 - i)) for i, seed in enumerate([7, 3, 11, 0, 5])]


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():  # pragma: no cover - left over by another module
        ray.shutdown()
    # Ray workers cannot import this test module: ship its functions by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_sequential_results_in_order_with_progress() -> None:
    calls: list[tuple[int, int]] = []
    seen: list[int] = []
    out = run_tasks(
        _work,
        ITEMS,
        backend="sequential",
        progress=lambda done, total: calls.append((done, total)),
        on_result=lambda i, _r: seen.append(i),
    )
    assert out == [_work((seed, 0.0)) for seed, _ in ITEMS]
    assert calls == [(i, len(ITEMS)) for i in range(len(ITEMS) + 1)]
    assert seen == list(range(len(ITEMS)))
    assert run_tasks(_work, [], backend="sequential") == []


def test_ray_equals_sequential_and_keeps_order(ray_cluster) -> None:
    calls: list[tuple[int, int]] = []
    seen: dict[int, tuple[int, float]] = {}
    out = run_tasks(
        _work,
        ITEMS,
        backend="ray",
        num_gpus_per_task=0,
        progress=lambda done, total: calls.append((done, total)),
        on_result=seen.__setitem__,
    )
    assert out == run_tasks(_work, ITEMS, backend="sequential")
    assert [seed for seed, _ in out] == [seed for seed, _ in ITEMS]
    assert calls == [(i, len(ITEMS)) for i in range(len(ITEMS) + 1)]
    assert seen == dict(enumerate(out))
    # "auto" picks Ray when it is importable; a partial is shipped once to every task
    assert resolve_backend("auto") == "ray"
    assert run_tasks(functools.partial(_fail_on, -1), [4, 2, 9]) == [4, 2, 9]


def test_ray_task_error_is_reraised_as_its_own_class(ray_cluster) -> None:
    with pytest.raises(GeovizError, match="item 2 is bad"):
        run_tasks(functools.partial(_fail_on, 2), [1, 2, 3], backend="ray")


def test_missing_ray_gives_install_hint_and_auto_falls_back(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # "import ray" raises ImportError
    with pytest.raises(GeovizError, match=r"pip install 'geoviz\[ray\]'"):
        run_tasks(_work, ITEMS, backend="ray")
    assert resolve_backend("auto") == "sequential"
    assert run_tasks(_work, ITEMS[:2]) == [_work((seed, 0.0)) for seed, _ in ITEMS[:2]]


def test_bad_arguments() -> None:
    with pytest.raises(GeovizError, match="backend must be one of"):
        run_tasks(_work, ITEMS, backend="threads")  # type: ignore[arg-type]
    with pytest.raises(GeovizError, match="num_gpus_per_task"):
        run_tasks(_work, ITEMS, backend="sequential", num_gpus_per_task=-1)


def test_auto_falls_back_to_sequential_when_ray_cannot_start(monkeypatch):
    """backend="auto" on a machine where Ray is installed but cannot start still computes."""
    import types

    def broken_init(**kwargs):
        raise RuntimeError("no shared memory here")

    fake = types.ModuleType("ray")
    fake.is_initialized = lambda: False
    fake.init = broken_init
    monkeypatch.setitem(sys.modules, "ray", fake)
    with pytest.warns(RuntimeWarning, match="running the tasks sequentially"):
        out = run_tasks(functools.partial(_fail_on, -1), [1, 2, 3], backend="auto")
    assert out == [_fail_on(-1, x) for x in (1, 2, 3)]
    # "ray" says so in one sentence (issue 32: no traceback from Ray's start-up)
    with pytest.raises(GeovizError, match=r"Ray could not start \(RuntimeError: no shared memory"):
        run_tasks(functools.partial(_fail_on, -1), [1, 2, 3], backend="ray")


# ---- Ray addresses (issue 32): malformed ones refused up front, silent ones within a bound ----


def _fake_ray(monkeypatch) -> list[dict]:
    """A Ray whose ``init`` only records its calls (nothing may reach it in these tests)."""
    import types

    calls: list[dict] = []
    fake = types.ModuleType("ray")
    fake.is_initialized = lambda: False
    fake.init = lambda **kwargs: calls.append(kwargs)
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return calls


def _closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    "address", ["garbage!!", "127.0.0.1:99999", "127.0.0.1:0", "host", "ray://", "x" * 5000]
)
def test_a_malformed_ray_address_is_refused_up_front(monkeypatch, address):
    calls = _fake_ray(monkeypatch)
    ran: list[int] = []
    for backend in ("ray", "auto"):
        with pytest.raises(GeovizError, match="is not a Ray address") as err:
            run_tasks(ran.append, [1, 2], backend=backend, address=address)  # type: ignore[arg-type]
        message = str(err.value)
        assert "\n" not in message and len(message) < 200 and "host:port" in message
    assert ran == [] and calls == []
    with pytest.raises(GeovizError, match="--ray-address 'garbage!!' is not a Ray address"):
        check_ray_address("garbage!!", "--ray-address")
    # the forms Ray accepts pass unchanged (a sequential run never looks at the address)
    for good in ("auto", "local", "10.0.0.2:6379", "ray://head.example.org:10001", "[::1]:6379"):
        assert check_ray_address(f" {good} ") == good
    assert run_tasks(abs, [-1], backend="sequential", address="garbage!!") == [1]


def test_an_address_that_does_not_answer_is_refused_naming_it(monkeypatch):
    calls = _fake_ray(monkeypatch)
    port = _closed_port()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(GeovizError, match="does not answer") as err:
            run_tasks(abs, [1, 2], backend="ray", address=address, connect_timeout=5)
        assert repr(address) in str(err.value) and "\n" not in str(err.value)
    # a port that accepts the connection but never answers: refused once the wait is over
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen()
        address = f"127.0.0.1:{mute.getsockname()[1]}"
        with pytest.raises(GeovizError, match=r"no answer within 0\.3 s"):
            run_tasks(abs, [1, 2], backend="ray", address=address, connect_timeout=0.3)
    # the wait's default comes from the environment, checked like every other knob
    monkeypatch.setenv("GEOVIZ_RAY_CONNECT_TIMEOUT", "abc")
    with pytest.raises(GeovizError, match="GEOVIZ_RAY_CONNECT_TIMEOUT must be a number"):
        run_tasks(abs, [1, 2], backend="ray", address=f"127.0.0.1:{port}")
    assert calls == []  # Ray itself was never asked to connect


def test_a_dead_ray_address_in_the_environment_is_named(monkeypatch):
    calls = _fake_ray(monkeypatch)
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{_closed_port()}")
    with pytest.raises(GeovizError, match=r"^RAY_ADDRESS '127\.0\.0\.1:\d+' does not answer"):
        run_tasks(abs, [1, 2], backend="ray", connect_timeout=5)
    monkeypatch.setenv("RAY_ADDRESS", "garbage!!")
    with pytest.raises(GeovizError, match="RAY_ADDRESS 'garbage!!' is not a Ray address"):
        run_tasks(abs, [1, 2], backend="ray")
    assert calls == []


def test_auto_address_without_a_cluster_is_refused(monkeypatch):
    services = pytest.importorskip("ray._private.services")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)

    def nothing_running(addr, temp_dir):  # what Ray's lookup does when no cluster runs
        if addr == "auto":
            raise ConnectionError("Could not find any running Ray instance.")
        return None

    monkeypatch.setattr(services, "get_ray_address_from_environment", nothing_running)
    with pytest.raises(GeovizError, match="no running Ray cluster was found for the Ray address"):
        probe_ray_address("auto", timeout=5)
    probe_ray_address(None, timeout=5)  # no address, no cluster: Ray starts a local one


def test_auto_backend_falls_back_to_sequential_when_the_cluster_does_not_answer(monkeypatch):
    calls = _fake_ray(monkeypatch)
    address = f"127.0.0.1:{_closed_port()}"
    with pytest.warns(RuntimeWarning, match="does not answer.*running the tasks sequentially"):
        out = run_tasks(abs, [-1, -2, 3], backend="auto", address=address, connect_timeout=5)
    assert out == [1, 2, 3] and calls == []


def test_sigterm_ends_the_wait_for_a_silent_cluster(tmp_path):
    """The wait is plain Python: SIGTERM ends the process at once (Ray's own wait ignored it)."""
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen()
        mute.settimeout(120)
        port = mute.getsockname()[1]
        code = (
            "from geoviz.tasks import probe_ray_address; "
            f"probe_ray_address('127.0.0.1:{port}', timeout=600)"
        )
        child = subprocess.Popen([sys.executable, "-c", code])
        try:
            conn, _ = mute.accept()  # the child is waiting for an answer now
            conn.close()
            child.send_signal(signal.SIGTERM)
            assert child.wait(timeout=60) == -signal.SIGTERM
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()


# ---- run_in_threads: the parts of one computation on threads of this process ----


def test_run_in_threads_keeps_the_input_order_when_later_items_finish_first():
    assert run_in_threads(_work, ITEMS, workers=3) == [_work(item) for item in ITEMS]


def test_run_in_threads_runs_parts_at_the_same_time():
    # two parties: one after another, the first part would wait for a second that never comes
    barrier = threading.Barrier(2, timeout=10)

    def meet(item: int) -> int:
        barrier.wait()
        return item

    assert run_in_threads(meet, [1, 2], workers=2) == [1, 2]


def test_run_in_threads_with_one_worker_stays_in_the_calling_thread():
    caller = threading.get_ident()
    seen = run_in_threads(lambda _: threading.get_ident(), [0, 1, 2], workers=1)
    assert seen == [caller] * 3


def test_run_in_threads_stops_at_a_failure_and_raises_the_first_in_item_order():
    started: list[int] = []

    def part(item: int) -> int:
        started.append(item)
        if item == 0:
            time.sleep(0.2)  # fails last in time, first in order
            raise GeovizError("item 0 is bad")
        if item == 1:
            raise GeovizError("item 1 is bad")
        time.sleep(0.05)
        return item

    with pytest.raises(GeovizError, match="item 0 is bad"):
        run_in_threads(part, list(range(40)), workers=2)
    assert len(started) < 10  # the parts not started when item 1 failed were dropped


@pytest.mark.parametrize("workers", [0, -1, 1.5, True, "2"])
def test_run_in_threads_refuses_a_bad_worker_count(workers):
    with pytest.raises(GeovizError, match="workers must be an integer >= 1"):
        run_in_threads(_work, ITEMS, workers=workers)


def test_ctrl_c_while_parts_run_leaves_without_waiting_for_them():
    """Ctrl-C in the waiting thread does not join the parts still running (a fit's map can
    take minutes); they finish on their own."""
    release = threading.Event()
    finished: list[int] = []

    def part(i: int) -> int:
        if i == 0:
            _thread.interrupt_main()  # the user presses Ctrl-C while this part runs
        release.wait(timeout=60)
        finished.append(i)
        return i

    try:
        with pytest.raises(KeyboardInterrupt):
            run_in_threads(part, [0, 1], workers=2)
        assert finished == []  # out before the running parts ended
    finally:
        release.set()


def test_threads_that_start_ray_together_start_it_once(monkeypatch):
    """The maps of one geodesic run on threads and each submits its batches: Ray is
    started by one of them (``ray.init`` twice at once fails inside Ray)."""
    import types

    from geoviz import tasks

    started: list[int] = []
    fake = types.ModuleType("ray")

    def init(**_kwargs):
        if started:
            raise AssertionError("Perhaps you called ray.init twice by accident?")
        time.sleep(0.2)  # a start takes a while: the other thread arrives meanwhile
        started.append(1)

    fake.is_initialized = lambda: bool(started)
    fake.init = init
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    errors: list[BaseException] = []

    def start() -> None:
        try:
            tasks._ray_ready(None, None)
        except BaseException as err:  # pragma: no cover - the failure this test looks for
            errors.append(err)

    threads = [threading.Thread(target=start) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and started == [1]
