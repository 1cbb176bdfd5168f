"""LeNet5 / MLPNet, make_model and replace_head (geoviz.nn.models)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError, GeovizError
from geoviz.nn.models import LeNet5, MLPNet, make_model, replace_head


def _images(n: int, shape: tuple[int, int, int]) -> LabeledDataset:
    rng = np.random.default_rng(0)
    return LabeledDataset(
        features=rng.random((n, int(np.prod(shape)))),
        labels=np.arange(n) % 3,
        classes=("a", "b", "c"),
        image_shape=shape,
    )


@pytest.mark.parametrize(("size", "flat"), [(16, 16), (28, 256), (32, 400)])
def test_lenet_flatten_size_and_output_shape(size, flat):
    torch.manual_seed(0)
    model = LeNet5(1, 7, image_size=size)
    assert model.body[1].in_features == flat  # 16 channels x (side after two conv+pool)^2
    assert model.n_features == size * size
    x = torch.rand(5, size * size)
    out = model(x)
    assert out.shape == (5, 7)
    # (B, C, H, W) input gives the same logits as the flattened one
    torch.testing.assert_close(model(x.reshape(5, 1, size, size)), out)


def test_lenet_layers_follow_lenet5():
    model = LeNet5(3, 10)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert [(c.in_channels, c.out_channels, c.kernel_size) for c in convs] == [
        (3, 6, (5, 5)),
        (6, 16, (5, 5)),
    ]
    assert [(lin.in_features, lin.out_features) for lin in linears] == [
        (400, 120),
        (120, 84),
        (84, 10),
    ]
    assert model.head is linears[-1]
    assert sum(isinstance(m, nn.MaxPool2d) for m in model.modules()) == 2


def test_lenet_non_square_images():
    model = LeNet5(1, 2, image_size=(16, 32))
    assert model(torch.rand(2, 16 * 32)).shape == (2, 2)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_lenet_rejects_bad_arguments(bad):
    with pytest.raises(GeovizError, match="positive integer"):
        LeNet5(1, bad)
    with pytest.raises(GeovizError, match="positive integer"):
        MLPNet(bad, 3)


def test_lenet_rejects_too_small_images():
    with pytest.raises(GeovizError, match="at least 16x16"):
        LeNet5(1, 10, image_size=12)


def test_mlp_shapes():
    model = MLPNet(5, 4, hidden=16)
    assert model(torch.rand(3, 5)).shape == (3, 4)
    assert model.head.in_features == 16 and model.head.out_features == 4


def test_make_model_picks_lenet_for_images_and_mlp_otherwise():
    assert isinstance(make_model(_images(6, (1, 16, 16)), 3), LeNet5)
    assert isinstance(make_model(_images(6, (3, 32, 32)), 3), LeNet5)
    # 8x8 images (sklearn digits) are too small for two 5x5 convolutions
    assert isinstance(make_model(_images(6, (1, 8, 8)), 3), MLPNet)
    vectors = LabeledDataset(features=np.zeros((4, 2)), labels=[0, 1, 0, 1], classes=("a", "b"))
    model = make_model(vectors, 5)
    assert isinstance(model, MLPNet) and model.head.out_features == 5
    soft = SoftLabeledDataset(
        features=np.zeros((2, 256)),
        soft_labels=np.full((2, 4), 0.25),
        class_names=("p/a", "p/b", "q/a", "q/b"),
        image_shape=(1, 16, 16),
    )
    assert make_model(soft, 4)(soft.features).shape == (2, 4)


def test_make_model_rejects_non_datasets():
    with pytest.raises(DatasetError, match="LabeledDataset"):
        make_model(np.zeros((3, 3)), 2)  # type: ignore[arg-type]


@pytest.mark.parametrize("model", [LeNet5(1, 30, 16), MLPNet(256, 30)])
def test_replace_head_copies_and_keeps_the_body(model):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    new = replace_head(model, 4)
    assert new is not model
    assert new.head.out_features == 4
    assert new.head.in_features == model.head.in_features
    assert model.head.out_features == 30  # input untouched
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, before[key], rtol=0, atol=0)
    for key, value in new.state_dict().items():
        if not key.startswith("head."):
            torch.testing.assert_close(value, before[key], rtol=0, atol=0)
    # a copy: training the new model cannot move the old one's weights
    first = next(iter(new.parameters()))
    with torch.no_grad():
        first.add_(1.0)
    torch.testing.assert_close(next(iter(model.parameters())), next(iter(before.values())))
    assert new(torch.rand(2, 256)).shape == (2, 4)


def test_replace_head_needs_a_linear_head():
    with pytest.raises(GeovizError, match="head"):
        replace_head(nn.Sequential(nn.Linear(2, 3)), 2)
    with pytest.raises(GeovizError, match="positive integer"):
        replace_head(MLPNet(2, 3), 0)
