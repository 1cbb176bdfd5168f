"""Sliced OTDD: closed forms, invariances and the screen's ranking."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from geoviz.data.dataset import LabeledDataset
from geoviz.errors import DatasetError, GeovizError
from geoviz.ot.otdd import otdd
from geoviz.ot.otdd_cost import OTDDConfig
from geoviz.ot.sliced import screen_references, sliced_otdd


def _blobs(n: int, seed: int, shift: float = 0.0, dim: int = 5, name: str = "d") -> LabeledDataset:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    centres = np.random.default_rng(7).normal(size=(3, dim)) * 3
    x = centres[y] + shift + rng.normal(size=(n, dim))
    return LabeledDataset(x.astype(np.float32), y, ("a", "b", "c"), name=name)


def test_a_dataset_is_at_zero_from_itself():
    q = _blobs(300, 0)
    assert sliced_otdd(q, q) == pytest.approx(0.0, abs=1e-10)
    assert sliced_otdd(q, _blobs(300, 1)) > 0


def test_translation_on_a_line_is_its_squared_length():
    """D = 1, K = 1: shifting every point by d shifts its projection by theta d and its
    class's mean by the same, so each slice's scores move by (u_0 + u_1) theta d as a whole
    (a 1-D translation: W_2^2 is its square). (u_0, u_1) is uniform on the circle and
    theta = +-1, so E[(u_0 + u_1)^2] = 1 and the sliced OTDD is d^2 (4096 slices: 5 %)."""
    x = np.random.default_rng(2).normal(size=(400, 1)).astype(np.float32)
    q = LabeledDataset(x, np.arange(400) % 2, ("a", "b"), name="q")
    d = 1.7
    p = dataclasses.replace(q, features=q.features + d, name="p")
    value = sliced_otdd(q, p, n_projections=4096, n_moments=1)
    assert value == pytest.approx(d**2, rel=0.05)


def test_relabelling_the_reference_changes_nothing():
    q, p = _blobs(240, 3), _blobs(210, 4, shift=0.5)
    perm = np.array([2, 0, 1])  # old class c -> new index perm[c]
    names = [""] * 3
    for old, new in enumerate(perm):
        names[new] = p.classes[old]
    relabelled = LabeledDataset(
        p.features.numpy(), perm[p.labels.numpy()], tuple(names), name=p.name
    )
    assert sliced_otdd(q, relabelled) == pytest.approx(sliced_otdd(q, p), rel=1e-9)


def test_sizes_may_differ_and_the_value_grows_with_the_shift():
    q = _blobs(500, 5)
    values = [sliced_otdd(q, _blobs(230, 6, shift=s)) for s in (0.0, 1.0, 2.0, 4.0)]
    assert values == sorted(values)
    assert values[0] < 0.1 * values[-1]


def test_the_screen_ranks_like_the_full_otdd_on_shifted_copies():
    """Five references at growing shifts and with one class swapped: the sliced ranking is
    the full OTDD's (a brute-force comparison on a small case)."""
    q = _blobs(200, 8, name="Q")
    refs = [_blobs(180, 10 + i, shift=s, name=f"s{s}") for i, s in enumerate((0.3, 1.0, 2.0, 3.5))]
    swapped = _blobs(180, 20, name="swapped")
    swapped = dataclasses.replace(swapped, labels=(swapped.labels + 1) % 3)
    refs.append(swapped)
    rows, seconds = screen_references(q, refs)
    full = [otdd(q, ref, OTDDConfig(), keep_coupling=False).cost for ref in refs]
    full_order = [refs[i].name for i in np.argsort(full)]
    assert [row.name for row in rows] == full_order
    assert [row.rank for row in rows] == [1, 2, 3, 4, 5]
    assert seconds >= 0


def test_bad_inputs_are_refused():
    q = _blobs(50, 0)
    with pytest.raises(DatasetError, match="feature"):
        sliced_otdd(q, _blobs(50, 1, dim=3))
    with pytest.raises(GeovizError, match="n_projections"):
        sliced_otdd(q, q, n_projections=0)
    with pytest.raises(GeovizError, match="at least one"):
        screen_references(q, [])
    with pytest.raises(GeovizError, match="differ"):
        screen_references(q, [q, q])
    bad = dataclasses.replace(q, features=q.features.clone())
    bad.features[0, 0] = float("nan")
    with pytest.raises(DatasetError, match="NaN"):
        sliced_otdd(bad, q)
    torch.manual_seed(0)  # the module's draws use their own generator: global state untouched
