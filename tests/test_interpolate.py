"""P_a = (sum_i a_i T_i)#Q and McCann interpolation on hand-built maps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from geoviz.data.dataset import LabeledDataset
from geoviz.errors import GeovizError, WeightsError
from geoviz.geodesic.interpolate import (
    generalized_geodesic_dataset,
    interpolate_features,
    interpolate_labels,
    mccann_dataset,
    subsample_indices,
)
from geoviz.geodesic.labels import label_space

N, D = 30, 3
CLASSES = [2, 3, 4]


@pytest.fixture
def maps():
    rng = np.random.default_rng(0)
    target = LabeledDataset(
        features=rng.normal(size=(N, D)),
        labels=np.arange(N) % 3,
        classes=("a", "b", "c"),
        name="Q",
    )
    mapped = [torch.from_numpy(rng.normal(size=(N, D))).float() for _ in CLASSES]
    soft = [torch.from_numpy(rng.dirichlet(np.ones(c), size=N)).float() for c in CLASSES]
    space = label_space([(f"P{i}", [f"k{j}" for j in range(c)]) for i, c in enumerate(CLASSES)])
    return target, mapped, soft, space


def test_one_hot_weights_give_single_pushforward(maps):
    _, mapped, soft, space = maps
    for i in range(3):
        a = np.eye(3)[i]
        ds = generalized_geodesic_dataset(mapped, soft, a, space)
        torch.testing.assert_close(ds.features, mapped[i])
        block = space.block_slices[i]
        torch.testing.assert_close(ds.soft_labels[:, block], soft[i] / soft[i].sum(1, keepdim=True))
        outside = torch.ones(space.size, dtype=torch.bool)
        outside[block] = False
        assert float(ds.soft_labels[:, outside].abs().max()) == 0.0
        assert ds.class_names == space.class_names
        assert ds.metadata["weights"] == a.tolist()


def test_convex_combination_features_and_block_labels(maps):
    _, mapped, soft, space = maps
    a = np.array([0.2, 0.5, 0.3])
    ds = generalized_geodesic_dataset(mapped, soft, a, space)
    expected = sum(a[i] * mapped[i].double() for i in range(3)).float()
    torch.testing.assert_close(ds.features, expected)
    torch.testing.assert_close(ds.soft_labels.sum(1), torch.ones(N))
    for i, block in enumerate(space.block_slices):
        # block i carries exactly a_i of the mass, distributed like y_i
        torch.testing.assert_close(ds.soft_labels[:, block].sum(1), torch.full((N,), float(a[i])))
        torch.testing.assert_close(ds.soft_labels[:, block], a[i] * soft[i], atol=1e-6, rtol=1e-5)
    assert ds.name == "P_a(0.2,0.5,0.3)"
    # the functional pieces agree with the dataset
    torch.testing.assert_close(interpolate_features(mapped, a), ds.features)
    torch.testing.assert_close(
        interpolate_labels(soft, a, space), ds.soft_labels, atol=1e-6, rtol=1e-5
    )


def test_subsampling_is_seeded_and_consistent(maps):
    _, mapped, soft, space = maps
    a = [0.1, 0.1, 0.8]
    full = generalized_geodesic_dataset(mapped, soft, a, space)
    sub = generalized_geodesic_dataset(mapped, soft, a, space, n=10, seed=3)
    again = generalized_geodesic_dataset(mapped, soft, a, space, n=10, seed=3)
    assert sub.n_samples == 10
    torch.testing.assert_close(sub.features, again.features)
    idx = subsample_indices(N, 10, 3)
    assert idx is not None and len(set(idx.tolist())) == 10
    torch.testing.assert_close(sub.features, full.features[idx])
    torch.testing.assert_close(sub.soft_labels, full.soft_labels[idx])
    other = generalized_geodesic_dataset(mapped, soft, a, space, n=10, seed=4)
    assert not torch.equal(other.features, sub.features)
    with pytest.raises(GeovizError, match="n <= 30"):
        generalized_geodesic_dataset(mapped, soft, a, space, n=31)


def test_bad_weights_are_rejected(maps):
    _, mapped, soft, space = maps
    with pytest.raises(WeightsError, match="negative"):
        generalized_geodesic_dataset(mapped, soft, [1.2, -0.2, 0.0], space)
    with pytest.raises(WeightsError, match="sum to"):
        generalized_geodesic_dataset(mapped, soft, [0.2, 0.2, 0.2], space)
    with pytest.raises(WeightsError, match="3 entries"):
        generalized_geodesic_dataset(mapped, soft, [0.5, 0.5], space)


def test_mccann_endpoints_and_midpoint(maps):
    target, mapped, soft, _ = maps
    kwargs = {"reference_name": "P1", "reference_classes": ["x", "y", "z"]}
    start = mccann_dataset(target, mapped[1], soft[1], 0.0, **kwargs)
    torch.testing.assert_close(start.features, target.features)
    torch.testing.assert_close(start.soft_labels[:, :3], target.one_hot())
    assert float(start.soft_labels[:, 3:].abs().max()) == 0.0
    assert start.class_names == ("Q/a", "Q/b", "Q/c", "P1/x", "P1/y", "P1/z")

    end = mccann_dataset(target, mapped[1], soft[1], 1.0, **kwargs)
    torch.testing.assert_close(end.features, mapped[1])
    assert float(end.soft_labels[:, :3].abs().max()) == 0.0
    torch.testing.assert_close(end.soft_labels[:, 3:], soft[1] / soft[1].sum(1, keepdim=True))

    mid = mccann_dataset(target, mapped[1], soft[1], 0.25, **kwargs)
    torch.testing.assert_close(mid.features, 0.75 * target.features + 0.25 * mapped[1])
    torch.testing.assert_close(mid.soft_labels[:, :3].sum(1), torch.full((N,), 0.75))
    torch.testing.assert_close(mid.soft_labels.sum(1), torch.ones(N))
    for bad in (-0.1, 1.5, float("nan"), "x"):
        with pytest.raises(WeightsError, match=r"\[0, 1\]"):
            mccann_dataset(target, mapped[1], soft[1], bad, **kwargs)


def test_mccann_same_name_is_disambiguated(maps):
    target, mapped, soft, _ = maps
    ds = mccann_dataset(
        target, mapped[0], soft[0], 0.5, reference_name="Q", reference_classes=["a", "b"]
    )
    assert ds.class_names == ("Q/a", "Q/b", "Q/c", "Q#2/a", "Q#2/b")


def test_hard_labels_of_p_a_follow_the_weights(maps):
    from geoviz.export import dataset_hard_labels, label_blocks

    _, mapped, soft, space = maps
    a = [0.5, 0.3, 0.2]
    ds = generalized_geodesic_dataset(mapped, soft, a, space)
    blocks = label_blocks(ds.class_names, ds.metadata["references"])
    assert [name for name, _ in blocks] == list(space.dataset_names)
    for (_, cols), block in zip(blocks, space.block_slices, strict=True):
        assert cols.tolist() == list(range(space.size))[block]
    labels, info = dataset_hard_labels(ds, "block-sample", 0)
    assert info["probabilities"] == "weights"
    assert [b["weight"] for b in info["blocks"]] == a
    for label, row in zip(labels.tolist(), ds.soft_labels, strict=True):
        block = next(s for s in space.block_slices if s.start <= label < s.stop)
        assert label == block.start + int(row[block].argmax())
    np.testing.assert_array_equal(labels, dataset_hard_labels(ds, "block-sample", 0)[0])
    argmax, _ = dataset_hard_labels(ds, "argmax")
    np.testing.assert_array_equal(argmax, ds.hard_labels.numpy())
