"""No global torch state from library code (issue 17): seeded init, threads, denormals.

* :mod:`geoviz.nn.init` draws the same weights as ``torch.manual_seed`` + construction
  did, from its own generator, and leaves the global random state alone;
* training and a neural-map fit change neither the global random state nor the
  thread count, and the same seed gives the same numbers from two threads at once;
* :func:`geoviz.backend.configure_torch` is the one place that sets the process-wide
  settings (entry points call it).
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import torch
from torch import nn

from geoviz.backend import DiskCache, TorchSettings, configure_torch, torch_settings
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import GeovizError
from geoviz.maps.networks import build_networks
from geoviz.maps.neural import NeuralOTDDMap
from geoviz.maps.neural_config import NeuralMapConfig
from geoviz.nn import (
    LeNet5,
    MLPNet,
    TrainConfig,
    build_seeded,
    finetune,
    make_model,
    replace_head,
    reset_parameters,
    seeded_generator,
    train_from_scratch,
)


def _same(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def _with_global_seed(seed: int, factory):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return factory()


def _images(n: int = 24, seed: int = 0) -> LabeledDataset:
    rng = np.random.default_rng(seed)
    return LabeledDataset(
        rng.random((n, 16 * 16)).astype(np.float32),
        np.arange(n) % 3,
        ("a", "b", "c"),
        image_shape=(1, 16, 16),
    )


def _vectors(n: int, shift: float, seed: int) -> LabeledDataset:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2)).astype(np.float32) + np.float32(shift)
    return LabeledDataset(x, np.arange(n) % 2, ("0", "1"), name=f"v{shift}")


# --------------------------------------------------------------------------- seeded init


@pytest.mark.parametrize(
    "factory",
    [
        lambda: LeNet5(3, 4, image_size=16),
        lambda: MLPNet(7, 3, hidden=5),
        lambda: nn.Sequential(nn.Embedding(5, 3, padding_idx=1), nn.Conv1d(3, 2, 3)),
    ],
    ids=["lenet", "mlp", "embedding+conv1d"],
)
def test_seeded_init_equals_torch_defaults_under_manual_seed(factory) -> None:
    before = torch.get_rng_state()
    seeded = build_seeded(factory, seeded_generator(11))
    assert torch.equal(torch.get_rng_state(), before)  # the global generator was not used
    assert _same(seeded, _with_global_seed(11, factory))
    assert not _same(seeded, build_seeded(factory, seeded_generator(12)))


def test_model_head_and_map_networks_from_a_generator_match_the_old_global_seed() -> None:
    data = _images()
    assert _same(
        make_model(data, 3, generator=seeded_generator(2)),
        _with_global_seed(2, lambda: make_model(data, 3)),
    )
    base = make_model(data, 3, generator=seeded_generator(0))
    new = replace_head(base, 5, generator=seeded_generator(4))
    assert _same(new, _with_global_seed(4, lambda: replace_head(base, 5)))
    assert torch.equal(new.features[0].weight, base.features[0].weight)
    for spec in (
        {"kind": "mlp", "n_features": 3, "n_classes": 2, "hidden": 8, "n_blocks": 2},
        {"kind": "unet", "image_shape": [1, 8, 8], "n_classes": 3, "width": 4},
    ):
        g, f = build_networks(spec, seeded_generator(6))
        g_ref, f_ref = _with_global_seed(6, lambda spec=spec: build_networks(spec))
        assert _same(g, g_ref) and _same(f, f_ref)
        x = torch.rand(4, 3 if spec["kind"] == "mlp" else 64)
        assert torch.equal(g(x, torch.tensor([0, 1, 1, 0])), x)  # still the identity at start


def test_reset_parameters_refuses_layers_it_cannot_initialise() -> None:
    with pytest.raises(GeovizError, match="BatchNorm1d"):
        reset_parameters(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)), seeded_generator(0))


# --------------------------------------------------------------------------- training


def _train_and_tune(seed: int) -> nn.Module:
    data = _images(seed=1)
    model = train_from_scratch(data, TrainConfig(iterations=6, batch_size=8, lr=1e-2), seed=seed)
    return finetune(model, data, TrainConfig(iterations=4, batch_size=8), seed=seed + 1)


def test_training_leaves_torch_global_state_alone() -> None:
    rng_before, threads_before = torch.get_rng_state(), torch.get_num_threads()
    seen: list[int] = []
    data = _images()
    train_from_scratch(
        data,
        TrainConfig(iterations=4, batch_size=8),
        seed=0,
        progress=lambda _stage, _f: seen.append(torch.get_num_threads()),
    )
    assert set(seen) == {threads_before}  # the caller's pool, also while training
    assert torch.equal(torch.get_rng_state(), rng_before)
    assert torch.get_num_threads() == threads_before


def _in_two_threads(fn, args):
    out: dict[int, object] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(args))

    def run(i, arg):
        try:
            barrier.wait()
            out[i] = fn(arg)
        except BaseException as err:  # re-raised in the main thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(args)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [out[i] for i in range(len(args))]


def test_same_seed_same_weights_from_two_threads_at_once() -> None:
    sequential = [_train_and_tune(seed) for seed in (0, 0, 3)]
    assert _same(sequential[0], sequential[1]) and not _same(sequential[0], sequential[2])
    concurrent = _in_two_threads(_train_and_tune, [0, 0, 3])
    assert all(_same(a, b) for a, b in zip(concurrent, sequential, strict=True))


def test_neural_map_fits_from_two_threads_equal_sequential_fits() -> None:
    config = NeuralMapConfig(
        iterations=20, batch_size=32, hidden=16, n_blocks=1, classifier_iterations=10,
        eval_every=10, patience=2, holdout=0.25,
    )  # fmt: skip
    target, reference = _vectors(64, 0.0, 0), _vectors(64, 2.0, 1)

    def fit(seed: int) -> tuple[torch.Tensor, ...]:
        estimator = NeuralOTDDMap(
            NeuralMapConfig(**{**config.__dict__, "seed": seed}), cache=DiskCache(enabled=False)
        )
        return tuple(estimator.fit(target, reference).transform(target.features, target.labels))

    def same(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...]) -> bool:
        return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))

    rng_before, threads_before = torch.get_rng_state(), torch.get_num_threads()
    sequential = [fit(seed) for seed in (0, 1)]
    assert torch.equal(torch.get_rng_state(), rng_before)
    assert torch.get_num_threads() == threads_before
    concurrent = _in_two_threads(fit, [0, 1])
    assert same(concurrent[0], sequential[0]) and same(concurrent[1], sequential[1])
    assert not same(sequential[0], sequential[1])


# --------------------------------------------------------------------------- entry points


def test_configure_torch_sets_threads_and_denormals_and_returns_the_old_settings() -> None:
    start = torch_settings()
    try:
        before = configure_torch(threads=1, flush_denormal=True)
        assert before == start and isinstance(before, TorchSettings)
        assert torch.get_num_threads() == 1

        def subnormal_times_one() -> float:  # 1e-39 is a float32 subnormal
            return float(torch.tensor([1e-39], dtype=torch.float32) * 1.0)

        if torch_settings().flush_denormal:  # CPUs without SSE3 cannot flush
            assert subnormal_times_one() == 0.0
        configure_torch(threads=None, flush_denormal=False)
        assert torch.get_num_threads() == 1 and not torch_settings().flush_denormal
        assert math.isclose(subnormal_times_one(), 1e-39, rel_tol=1e-6)
    finally:
        configure_torch(start.threads, start.flush_denormal)
    assert torch_settings() == start
    for bad in (0, -2, 1.5, True):
        with pytest.raises(GeovizError, match="threads"):
            configure_torch(threads=bad)
