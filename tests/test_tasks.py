"""geoviz.tasks: Ray tasks and sequential runs give the same, ordered results."""

from __future__ import annotations

import functools
import sys
import threading
import time

import numpy as np
import pytest

from geoviz.errors import GeovizError
from geoviz.tasks import resolve_backend, run_in_threads, run_tasks


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
    with pytest.raises(RuntimeError, match="no shared memory"):
        run_tasks(functools.partial(_fail_on, -1), [1, 2, 3], backend="ray")


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
