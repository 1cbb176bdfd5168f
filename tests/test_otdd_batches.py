"""Batches of one OTDD as tasks: Ray equals sequential, and a killed run resumes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from cache_forgery import forge_entry

from geoviz.backend import CacheCorruptWarning, DiskCache
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import GeovizError
from geoviz.maps.barycentric import BarycentricMap
from geoviz.ot import otdd_batches
from geoviz.ot.otdd import otdd
from geoviz.ot.otdd_batches import BatchSolve, batch_rows
from geoviz.ot.otdd_cost import OTDDConfig


def _blobs(n: int, seed: int, name: str) -> LabeledDataset:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    x = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])[y] + rng.normal(size=(n, 2)) * 0.6
    return LabeledDataset(x.astype(np.float32), y, ("a", "b", "c"), name=name)


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


def test_the_batches_solve_parts_of_the_one_cost_geometry(monkeypatch):
    """Issue 44: otdd() builds the whole problem's cost geometry once and every batch
    solves a part of it (each batch used to build it again)."""
    built = []
    real = OTDDConfig.cost_geometry

    def counting(self, *args, **kwargs):
        built.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(OTDDConfig, "cost_geometry", counting)
    res = otdd(Q, P, dataclasses.replace(BATCHED, debiased=True), barycentric=True)
    assert res.n_batches == 4 and len(built) == 1


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
    real = otdd_batches.solve_block

    def dies_on_third(*args, **kwargs):
        solved.append(1)
        if len(solved) == 3:
            raise GeovizError("worker killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(otdd_batches, "solve_block", dies_on_third)
    with pytest.raises(GeovizError, match="worker killed"):
        otdd(Q, P, BATCHED, barycentric=True, cache=cache)
    monkeypatch.setattr(otdd_batches, "solve_block", real)
    counted: list[int] = []

    def counting(*args, **kwargs):
        counted.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(otdd_batches, "solve_block", counting)
    resumed = otdd(Q, P, BATCHED, barycentric=True, cache=cache)
    assert len(counted) == 2  # batches 3 and 4; 1 and 2 came from the cache
    monkeypatch.setattr(otdd_batches, "solve_block", real)
    _same(resumed, otdd(Q, P, BATCHED, barycentric=True))
    # the whole result is now cached too: a third run solves nothing
    monkeypatch.setattr(otdd_batches, "solve_block", dies_on_third)
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


def _count_batch_solves(monkeypatch) -> list[int]:
    """The batches solved from now on (their indices); a batch read from the cache is not
    solved."""
    solved: list[int] = []
    real = BatchSolve._solve

    def counting(self, bi, *args, **kwargs):
        solved.append(int(bi))
        return real(self, bi, *args, **kwargs)

    monkeypatch.setattr(BatchSolve, "_solve", counting)
    return solved


def _same_map(a, b) -> None:
    """Two fits of the same deterministic batches: equal to float rounding."""
    _same(a.otdd_, b.otdd_)
    torch.testing.assert_close(a.mapped_features_, b.mapped_features_, rtol=0, atol=1e-6)
    torch.testing.assert_close(a.soft_labels_, b.soft_labels_, rtol=0, atol=1e-6)


def test_a_killed_barycentric_fit_resumes_from_its_finished_batches(tmp_path, monkeypatch):
    """Issue 41: the ``--batch-size`` maps (BarycentricMap) stored no batch, so a killed
    run started over. Now the two batches before the failing third are on disk and the
    rerun solves only the other two, giving the uninterrupted fit's map."""
    cache = DiskCache(tmp_path)
    uninterrupted = BarycentricMap(BATCHED, cache=DiskCache(enabled=False)).fit(Q, P)
    solved = _count_batch_solves(monkeypatch)
    real = otdd_batches.solve_block

    def dies_on_third(*args, **kwargs):
        if len(solved) == 3:
            raise GeovizError("worker killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(otdd_batches, "solve_block", dies_on_third)
    with pytest.raises(GeovizError, match="worker killed"):
        BarycentricMap(BATCHED, cache=cache).fit(Q, P)
    assert len(list((tmp_path / "otdd_batch").glob("*.pt"))) == 2
    monkeypatch.setattr(otdd_batches, "solve_block", real)
    solved.clear()
    resumed = BarycentricMap(BATCHED, cache=cache).fit(Q, P)
    assert sorted(solved) == [2, 3]  # batches 1 and 2 came from the cache
    _same_map(resumed, uninterrupted)


def test_a_second_identical_batched_fit_solves_no_batch(tmp_path, monkeypatch):
    """Every batch of a finished fit is on disk: with the whole map's entry gone (a run
    killed after its last batch), fitting again solves no batch, whatever
    ``keep_coupling`` (batches keep no plan), and the plain ``otdd`` reads them too."""
    cache = DiskCache(tmp_path)
    solved = _count_batch_solves(monkeypatch)
    first = BarycentricMap(BATCHED, cache=cache).fit(Q, P)
    assert len(solved) == 4
    assert len(list((tmp_path / "otdd_batch").glob("*.pt"))) == 4
    solved.clear()
    for entry in (tmp_path / "barycentric_map").glob("*.pt"):
        entry.unlink()
    again = BarycentricMap(BATCHED, cache=cache, keep_coupling=True).fit(Q, P)
    assert solved == []
    _same_map(again, first)
    otdd(Q, P, BATCHED, barycentric=True, cache=cache)
    assert solved == []


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda p: p.update(mapped=p["mapped"][:-1]), r"'mapped' has shape"),
        (lambda p: p.pop("soft"), r"'soft'"),
        (lambda p: p.update(transport="cheap"), r"cannot be used"),
    ],
)
def test_a_forged_batch_is_recomputed(tmp_path, monkeypatch, mutate, reason):
    """A batch entry re-signed with the folder's secret and a matching structure, but not
    what the batch holds (fewer rows, no soft labels, a cost that is not a number), is
    warned about and solved again, never added into the map."""
    cache = DiskCache(tmp_path)
    first = BarycentricMap(BATCHED, cache=cache).fit(Q, P)
    for entry in (tmp_path / "barycentric_map").glob("*.pt"):
        entry.unlink()
    forged = sorted((tmp_path / "otdd_batch").glob("*.pt"))[0].stem
    forge_entry(
        cache,
        "otdd_batch",
        forged,
        lambda envelope: mutate(envelope["payload"]),
        sign="secret+structure",
    )
    solved = _count_batch_solves(monkeypatch)
    with pytest.warns(CacheCorruptWarning, match=reason):
        again = BarycentricMap(BATCHED, cache=cache).fit(Q, P)
    assert len(solved) == 1
    _same_map(again, first)
