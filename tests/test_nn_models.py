"""SpinalNet (the paper's Table 1 network) and make_model's ``architecture`` (geoviz.nn.models)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from synthetic_data import bars
from torch import nn

from geoviz.data.dataset import LabeledDataset
from geoviz.errors import GeovizError
from geoviz.nn.init import seeded_generator
from geoviz.nn.models import LeNet5, MLPNet, SpinalNet, make_model, replace_head
from geoviz.nn.training import TrainConfig, evaluate, finetune


def _seeded_spinal(data: LabeledDataset, n_classes: int, seed: int) -> nn.Module:
    return make_model(data, n_classes, generator=seeded_generator(seed), architecture="spinalnet")


@pytest.mark.parametrize(("size", "n_conv"), [(28, 320), (32, 500)])
def test_spinal_feature_size_and_output_shape(size, n_conv):
    model = SpinalNet(1, 7, image_size=size)
    assert model.n_conv_features == n_conv  # 20 channels x (side after two conv + pool)^2
    assert model.n_features == size * size
    assert model.spinal[0].in_features == n_conv // 2
    assert [lin.in_features for lin in model.spinal[1:]] == [n_conv // 2 + 8] * 5
    assert model.head.in_features == 6 * 8
    x = torch.rand(4, size * size)
    out = model(x)
    assert out.shape == (4, 7)
    torch.testing.assert_close(model(x.reshape(4, 1, size, size)), out)


def test_spinal_parameter_count_is_the_reference_scripts():
    # MNIST/SpinalNet_MNIST.py at 28x28: conv 1->10 k5 (260), conv 10->20 k5 (5020),
    # fc1 160->8 (1288), five 168->8 layers (5 x 1352), head 48->10 (490)
    model = SpinalNet(1, 10, image_size=28)
    assert sum(p.numel() for p in model.parameters()) == 260 + 5020 + 1288 + 5 * 1352 + 490


def test_spinal_forward_matches_a_hand_written_wiring():
    torch.manual_seed(0)
    model = SpinalNet(1, 3, image_size=16, width=2, n_spinal_layers=4).eval()
    x = torch.rand(5, 256)
    flat = model.features(x.reshape(5, 1, 16, 16))
    assert flat.shape == (5, 20)  # 20 channels x 1 x 1
    a, b = flat[:, :10], flat[:, 10:]
    lin = model.spinal
    s1 = torch.relu(a @ lin[0].weight.T + lin[0].bias)
    s2 = torch.relu(torch.cat([b, s1], 1) @ lin[1].weight.T + lin[1].bias)
    s3 = torch.relu(torch.cat([a, s2], 1) @ lin[2].weight.T + lin[2].bias)
    s4 = torch.relu(torch.cat([b, s3], 1) @ lin[3].weight.T + lin[3].bias)
    expected = torch.cat([s1, s2, s3, s4], 1) @ model.head.weight.T + model.head.bias
    torch.testing.assert_close(model(x), expected)


def test_zeroing_half_b_changes_every_spinal_output_but_the_first():
    torch.manual_seed(1)
    model = SpinalNet(1, 3, image_size=16, width=4, n_spinal_layers=4).eval()
    x = torch.rand(6, 256) + 0.5
    before = model.spinal_outputs(x)

    def zero_half_b(_module: nn.Module, _inputs: object, flat: torch.Tensor) -> torch.Tensor:
        return torch.cat([flat[:, : model.n_half], torch.zeros_like(flat[:, model.n_half :])], 1)

    handle = model.features.register_forward_hook(zero_half_b)
    try:
        after = model.spinal_outputs(x)
    finally:
        handle.remove()
    assert torch.equal(after[0], before[0])  # s_1 reads half a only
    assert all(not torch.equal(a, b) for a, b in zip(after[1:], before[1:], strict=True))


def test_spinal_rejects_bad_arguments():
    with pytest.raises(GeovizError, match="at least 16x16"):
        SpinalNet(1, 10, image_size=12)
    with pytest.raises(GeovizError, match="at least 2"):
        SpinalNet(1, 10, n_spinal_layers=1)
    with pytest.raises(GeovizError, match="dropout"):
        SpinalNet(1, 10, dropout=1.0)
    with pytest.raises(GeovizError, match="positive integer"):
        SpinalNet(1, 10, width=0)


def test_spinal_keeps_the_module_methods():
    # no attribute may shadow an nn.Module method (an earlier draft shadowed .half())
    model = SpinalNet(1, 2, image_size=16).half()
    assert model.head.weight.dtype == torch.float16


def test_spinal_dropout_only_acts_in_training():
    model = SpinalNet(1, 2, image_size=16, dropout=0.5)
    assert isinstance(model.features[4], nn.Dropout2d)
    x = torch.rand(3, 256)
    model.eval()
    torch.testing.assert_close(model(x), model(x))
    assert isinstance(SpinalNet(1, 2, image_size=16).features[4], nn.Identity)


def test_make_model_architecture_choice():
    data = bars(4, seed=0, size=32)
    assert isinstance(make_model(data, 3), LeNet5)
    assert isinstance(make_model(data, 3, architecture="lenet5"), LeNet5)
    assert isinstance(make_model(data, 3, architecture="spinalnet"), SpinalNet)
    assert isinstance(make_model(data, 3, architecture="mlp"), MLPNet)
    with pytest.raises(GeovizError, match="unknown architecture"):
        make_model(data, 3, architecture="vgg")  # type: ignore[arg-type]
    vectors = LabeledDataset(np.zeros((4, 5)), np.arange(4) % 2, ("a", "b"))
    with pytest.raises(GeovizError, match="needs images"):
        make_model(vectors, 2, architecture="spinalnet")
    with pytest.raises(GeovizError, match="12x12 images"):
        make_model(bars(4, seed=0, size=12), 2, architecture="spinalnet")


def test_spinal_same_seed_same_weights_without_the_global_rng():
    data = bars(4, seed=0, size=28)
    state = torch.random.get_rng_state()
    first = _seeded_spinal(data, 5, seed=3).state_dict()
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG is untouched
    second = _seeded_spinal(data, 5, seed=3).state_dict()
    other = _seeded_spinal(data, 5, seed=4).state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first)
    # seeded draws equal torch's default initialisation after manual_seed (geoviz.nn.init)
    torch.manual_seed(3)
    default = SpinalNet(1, 5, image_size=28).state_dict()
    assert all(torch.equal(first[k], default[k]) for k in first)


def test_replace_head_keeps_the_spinal_body():
    model = _seeded_spinal(bars(4, seed=0, size=28), 12, seed=0)
    new = replace_head(model, 3, generator=seeded_generator(1))
    assert isinstance(new, SpinalNet)
    assert new.head.in_features == 48 and new.head.out_features == 3
    assert model.head.out_features == 12  # the input is not modified
    old, kept = model.state_dict(), new.state_dict()
    body = [k for k in old if not k.startswith("head.")]
    assert body and all(torch.equal(old[k], kept[k]) for k in body)


def test_spinal_learns_bars_and_same_seed_gives_the_same_numbers():
    train, test = bars(64, seed=0, size=28), bars(200, seed=1, size=28)
    config = TrainConfig(iterations=120, batch_size=16, lr=3e-3)
    body = _seeded_spinal(train, 4, seed=0)  # an untrained "pretrained" model, 4 classes
    tuned = finetune(body, train, config, seed=0)  # channels-last fast path inside
    again = finetune(body, train, config, seed=0)
    assert isinstance(tuned, SpinalNet) and tuned.head.out_features == 2
    a, b = tuned.state_dict(), again.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert evaluate(tuned, test) > 0.95
