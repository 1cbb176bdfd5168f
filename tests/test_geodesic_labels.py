"""Concatenated label space of generalized geodesics (paper Sec. 3.2)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from geoviz.data.dataset import LabeledDataset
from geoviz.errors import DatasetError
from geoviz.geodesic.labels import label_space, pad_labels, unique_names


def _ds(name: str, n_classes: int, n: int = 12) -> LabeledDataset:
    rng = np.random.default_rng(n_classes)
    return LabeledDataset(
        features=rng.normal(size=(n, 2)),
        labels=np.arange(n) % n_classes,
        classes=tuple(f"c{k}" for k in range(n_classes)),
        name=name,
    )


def test_paper_example_2_3_4_classes():
    # the paper's example: 3 datasets with 2, 3, 4 classes embed into R^9
    space = label_space([_ds("A", 2), _ds("B", 3), _ds("C", 4)])
    assert space.size == 9
    assert space.block_slices == (slice(0, 2), slice(2, 5), slice(5, 9))
    assert space.class_names[:3] == ("A/c0", "A/c1", "B/c0")
    assert space.class_names[-1] == "C/c3"
    y1 = torch.tensor([[0.0, 1.0, 0.0]])
    padded = space.pad(1, y1)
    assert padded.tolist() == [[0, 0, 0, 1, 0, 0, 0, 0, 0]]


def test_combine_is_sum_of_padded_labels():
    space = label_space([("p", ["a", "b"]), ("q", ["x", "y", "z"])])
    rng = np.random.default_rng(0)
    y0 = torch.from_numpy(rng.dirichlet(np.ones(2), size=5))
    y1 = torch.from_numpy(rng.dirichlet(np.ones(3), size=5))
    a = [0.3, 0.7]
    expected = a[0] * space.pad(0, y0) + a[1] * space.pad(1, y1)
    got = space.combine([y0, y1], a)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got.sum(dim=1), torch.ones(5, dtype=torch.float64))
    with pytest.raises(ValueError, match="shape"):
        space.combine([y1, y0], a)


def test_duplicate_dataset_names_are_disambiguated():
    assert unique_names(["mnist", "usps", "mnist", "mnist"]) == (
        "mnist",
        "usps",
        "mnist#2",
        "mnist#3",
    )
    # a generated name never collides with a given one
    names = unique_names(["a", "a", "a#2"])
    assert len(set(names)) == 3 and names[0] == "a" and names[2] == "a#2"
    space = label_space([_ds("mnist", 2), _ds("mnist", 2)])
    assert space.dataset_names == ("mnist", "mnist#2")
    assert len(set(space.class_names)) == 4
    assert space.class_names[2:] == ("mnist#2/c0", "mnist#2/c1")


def test_pad_labels_rejects_wrong_width():
    with pytest.raises(ValueError, match=r"\(N, 2\)"):
        pad_labels(torch.zeros(3, 3), slice(0, 2), 5)
    with pytest.raises(DatasetError):
        label_space([])
