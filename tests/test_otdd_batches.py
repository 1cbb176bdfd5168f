"""Batches of one OTDD as tasks: Ray equals sequential, and a killed run resumes."""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest
import torch

from geoviz.backend import DiskCache
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import GeovizError
from geoviz.ot.otdd import OTDDConfig, otdd
from geoviz.ot.otdd_batches import batch_rows


def _blobs(n: int, seed: int, name: str) -> LabeledDataset:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    x = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])[y] + rng.normal(size=(n, 2)) * 0.6
    return LabeledDataset(x.astype(np.float32), y, ("a", "b", "c"), name=name)


# the module, not the function geoviz.ot re-exports under the same name
otdd_module = importlib.import_module("geoviz.ot.otdd")
Q, P = _blobs(90, 0, "Q"), _blobs(80, 1, "P")
BATCHED = OTDDConfig(batch_size=25, reference_subsample=40, epsilon=0.01)


def _same(a, b) -> None:
    """Two runs of the same deterministic batches: equal to float rounding."""
    assert a.n_batches == b.n_batches == 4
    assert a.cost == pytest.approx(b.cost, rel=1e-9, abs=1e-12)
    assert a.marginal_error == pytest.approx(b.marginal_error, rel=1e-6, abs=1e-12)
    assert a.n_iter == b.n_iter
    torch.testing.assert_close(a.mapped_features, b.mapped_features, rtol=0, atol=1e-6)
    torch.testing.assert_close(a.soft_labels, b.soft_labels, rtol=0, atol=1e-6)
    assert torch.equal(a.neighbour_index, b.neighbour_index)


def test_batches_are_a_seeded_partition_of_the_target():
    rows = batch_rows(BATCHED, 90)
    assert [len(r) for r in rows] == [25, 25, 25, 15]
    assert sorted(np.concatenate(rows).tolist()) == list(range(90))
    assert all(np.array_equal(a, b) for a, b in zip(rows, batch_rows(BATCHED, 90), strict=True))


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():  # pragma: no cover - left over by another module
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.parametrize("debiased", [False, True])
def test_ray_batches_equal_sequential_batches(ray_cluster, debiased):
    config = dataclasses.replace(BATCHED, debiased=debiased)
    seen: list[str] = []
    sequential = otdd(Q, P, config, barycentric=True)
    on_ray = otdd(
        Q,
        P,
        dataclasses.replace(config, backend="ray"),
        lambda stage, _f: seen.append(stage),
        barycentric=True,
    )
    _same(on_ray, sequential)
    # the progress counts the finished tasks
    assert [s for s in seen if s.startswith("sinkhorn")][-1] == "sinkhorn: batch 4/4"


def test_a_killed_run_resumes_from_its_finished_batches(tmp_path, monkeypatch):
    """The third batch fails (as a killed worker would): the two before it are on disk,
    the rerun computes only the other two and gives the uninterrupted run's values."""
    cache = DiskCache(tmp_path)
    solved: list[int] = []
    real = otdd_module._solve_block

    def dies_on_third(*args, **kwargs):
        solved.append(1)
        if len(solved) == 3:
            raise GeovizError("worker killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(otdd_module, "_solve_block", dies_on_third)
    with pytest.raises(GeovizError, match="worker killed"):
        otdd(Q, P, BATCHED, barycentric=True, cache=cache)
    monkeypatch.setattr(otdd_module, "_solve_block", real)
    counted: list[int] = []

    def counting(*args, **kwargs):
        counted.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(otdd_module, "_solve_block", counting)
    resumed = otdd(Q, P, BATCHED, barycentric=True, cache=cache)
    assert len(counted) == 2  # batches 3 and 4; 1 and 2 came from the cache
    monkeypatch.setattr(otdd_module, "_solve_block", real)
    _same(resumed, otdd(Q, P, BATCHED, barycentric=True))
    # the whole result is now cached too: a third run solves nothing
    monkeypatch.setattr(otdd_module, "_solve_block", dies_on_third)
    solved.clear()
    otdd(Q, P, BATCHED, barycentric=True, cache=cache)
    assert solved == []


def test_where_batches_run_does_not_change_the_cache_key(tmp_path):
    cache = DiskCache(tmp_path)
    otdd(Q, P, BATCHED, cache=cache)
    otdd(Q, P, dataclasses.replace(BATCHED, backend="auto", device="cpu"), cache=cache)
    assert cache.hits_ == 1


def test_backend_and_address_are_checked():
    with pytest.raises(GeovizError, match="backend"):
        OTDDConfig(backend="threads")  # type: ignore[arg-type]
    with pytest.raises(GeovizError, match="ray_address"):
        OTDDConfig(ray_address="http://example.com/../x")
