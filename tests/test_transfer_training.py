"""Budgets, soft cross-entropy, pretrain / finetune / train_from_scratch / evaluate."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from synthetic_data import bars

from geoviz.backend import configure_torch, torch_settings
from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError, GeovizError
from geoviz.nn.models import LeNet5, MLPNet
from geoviz.nn.training import (
    CPU_TRAIN_THREADS,
    PRESETS,
    TrainConfig,
    TransferPreset,
    _batch_indices,
    evaluate,
    finetune,
    get_preset,
    pretrain,
    soft_cross_entropy,
    train_from_scratch,
)

FAST = TrainConfig(iterations=40, batch_size=32, lr=1e-2)


def _gaussians(n: int, seed: int) -> LabeledDataset:
    """Two well separated 2-D Gaussian blobs."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 2
    centres = np.array([[-2.0, -2.0], [2.0, 2.0]])
    return LabeledDataset(
        features=centres[labels] + 0.6 * rng.normal(size=(n, 2)), labels=labels, classes=("a", "b")
    )


def _soft(n: int = 40, seed: int = 0) -> SoftLabeledDataset:
    base = _gaussians(n, seed)
    soft = np.zeros((n, 4))
    soft[np.arange(n), base.labels.numpy()] = 0.7
    soft[np.arange(n), 2 + base.labels.numpy()] = 0.3
    return SoftLabeledDataset(
        features=base.features, soft_labels=soft, class_names=("p/a", "p/b", "q/a", "q/b")
    )


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------- configs


def test_presets_follow_the_paper_and_shrink():
    paper = PRESETS["paper"]
    assert (paper.pretrain.iterations, paper.finetune.iterations) == (10_000, 2_000)
    for cfg in (paper.pretrain, paper.finetune):
        assert (cfg.batch_size, cfg.lr, cfg.optimizer) == (64, 1e-3, "adam")
    cpu, tiny = PRESETS["cpu"], PRESETS["tiny"]
    assert cpu.pretrain.iterations < paper.pretrain.iterations
    assert tiny.pretrain.iterations < cpu.pretrain.iterations
    assert tiny.finetune.iterations < cpu.finetune.iterations
    for name, preset in PRESETS.items():
        assert preset.name == name and preset.note
    with pytest.raises(dataclasses.FrozenInstanceError):
        paper.pretrain.iterations = 1  # type: ignore[misc]


def test_get_preset():
    assert get_preset("CPU") is PRESETS["cpu"]
    custom = TransferPreset("x", TrainConfig(1), TrainConfig(2))
    assert get_preset(custom) is custom
    with pytest.raises(GeovizError, match=r"unknown transfer preset .huge.*paper"):
        get_preset("huge")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"iterations": 0}, "iterations"),
        ({"iterations": 2.5}, "iterations"),
        ({"iterations": 5, "batch_size": 0}, "batch_size"),
        ({"iterations": 5, "lr": 0.0}, "lr"),
        ({"iterations": 5, "lr": float("nan")}, "lr"),
        ({"iterations": 5, "optimizer": "sgd"}, "adam"),
    ],
)
def test_train_config_validation(kwargs, match):
    with pytest.raises(GeovizError, match=match):
        TrainConfig(**kwargs)


def test_preset_needs_train_configs():
    with pytest.raises(GeovizError, match="TrainConfig"):
        TransferPreset("x", 10, TrainConfig(1))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- loss


@settings(max_examples=40, deadline=None)
@given(
    batch=st.integers(1, 8),
    classes=st.integers(2, 6),
    seed=st.integers(0, 2**31 - 1),
    scale=st.floats(0.01, 30.0),
)
def test_soft_cross_entropy_equals_cross_entropy_on_one_hot(batch, classes, seed, scale):
    gen = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(batch, classes, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, classes, (batch,), generator=gen)
    one_hot = F.one_hot(labels, classes).to(torch.float64)
    torch.testing.assert_close(soft_cross_entropy(logits, one_hot), F.cross_entropy(logits, labels))


def test_soft_cross_entropy_is_the_mixture_of_hard_losses():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    p = torch.softmax(torch.randn(5, 4, generator=gen, dtype=torch.float64), dim=1)
    expected = sum(
        (p[:, k] * F.cross_entropy(logits, torch.full((5,), k), reduction="none")).mean()
        for k in range(4)
    )
    loss = soft_cross_entropy(logits, p)
    torch.testing.assert_close(loss, expected)
    loss.backward()  # differentiable
    # gradient of the mean soft CE: (softmax - p) / B
    torch.testing.assert_close(logits.grad, (torch.softmax(logits, 1) - p).detach() / 5)


def test_soft_cross_entropy_shape_errors():
    with pytest.raises(GeovizError, match=r"\(B, K\)"):
        soft_cross_entropy(torch.zeros(3, 2), torch.zeros(3, 4))
    with pytest.raises(GeovizError, match="at least one sample"):
        soft_cross_entropy(torch.zeros(0, 2), torch.zeros(0, 2))


# --------------------------------------------------------------------------- batches


def test_batches_walk_through_permutations():
    gen = torch.Generator().manual_seed(0)
    batches = list(_batch_indices(10, 4, 5, gen))
    assert [len(b) for b in batches] == [4] * 5
    flat = torch.cat(batches).tolist()
    assert sorted(flat[:10]) == list(range(10))  # first epoch: every sample exactly once
    # a dataset smaller than the batch is used whole at every step
    assert all(sorted(b.tolist()) == [0, 1, 2] for b in _batch_indices(3, 64, 4, gen))


# --------------------------------------------------------------------------- learning


def test_mlp_learns_separable_gaussians():
    train, test = _gaussians(200, seed=0), _gaussians(200, seed=1)
    model = train_from_scratch(train, TrainConfig(iterations=150, batch_size=32), seed=0)
    assert isinstance(model, MLPNet)
    acc = evaluate(model, test)
    assert isinstance(acc, float)
    assert acc > 0.95


def test_lenet_learns_bar_orientation():
    train, test = bars(128, seed=0), bars(200, seed=1)
    model = train_from_scratch(train, TrainConfig(iterations=150, batch_size=32), seed=0)
    assert isinstance(model, LeNet5)
    assert evaluate(model, test) > 0.95


def test_pretrain_on_soft_labels_then_finetune_transfers():
    # pretrain on a soft-labelled 4-column set, fine-tune on 2 target classes
    model = pretrain(_soft(), TrainConfig(iterations=60, batch_size=20, lr=1e-2), seed=0)
    assert model.head.out_features == 4
    target = _gaussians(8, seed=3)  # 4 labelled samples per class
    tuned = finetune(model, target, TrainConfig(iterations=30, batch_size=8, lr=1e-2), seed=0)
    assert tuned.head.out_features == 2
    assert evaluate(tuned, _gaussians(200, seed=4)) > 0.95


def test_pretrain_accepts_hard_labels_as_one_hot():
    model = pretrain(_gaussians(40, 0), FAST, seed=0)
    assert model.head.out_features == 2
    assert not model.training
    assert next(model.parameters()).device.type == "cpu"


# --------------------------------------------------------------------------- determinism


def test_same_seed_same_weights_other_seed_other_weights():
    data = _soft()
    torch.manual_seed(123)
    global_state = torch.get_rng_state()
    a = _state(pretrain(data, FAST, seed=7))
    assert torch.equal(torch.get_rng_state(), global_state)  # caller's RNG untouched
    b = _state(pretrain(data, FAST, seed=7))
    c = _state(pretrain(data, FAST, seed=8))
    assert _same(a, b)
    assert not _same(a, c)


def test_finetune_is_deterministic_and_leaves_the_input_untouched():
    base = pretrain(_soft(), FAST, seed=0)
    before = _state(base)
    target = _gaussians(10, seed=5)
    one = finetune(base, target, FAST, seed=1)
    two = finetune(base, target, FAST, seed=1)
    other = finetune(base, target, FAST, seed=2)
    assert _same(_state(base), before)
    assert base.head.out_features == 4 and not base.training
    assert one is not base and one.head.out_features == target.n_classes
    assert one(target.features).shape == (10, 2)
    assert _same(_state(one), _state(two))
    assert not _same(_state(one), _state(other))
    assert evaluate(one, target) == evaluate(two, target)


def test_finetune_changes_every_layer():
    base = pretrain(_soft(), FAST, seed=0)
    tuned = finetune(base, _gaussians(10, seed=5), FAST, seed=0)
    for key, value in base.state_dict().items():
        if not key.startswith("head."):
            assert not torch.equal(value, tuned.state_dict()[key]), key


# --------------------------------------------------------------------------- errors


def test_finetune_rejects_other_feature_spaces():
    base = pretrain(_soft(), FAST, seed=0)
    wide = LabeledDataset(features=np.zeros((4, 3)), labels=[0, 1, 0, 1], classes=("a", "b"))
    with pytest.raises(DatasetError, match="2 features but 'dataset' has 3"):
        finetune(base, wide, FAST, seed=0)
    with pytest.raises(DatasetError, match="LabeledDataset"):
        finetune(base, _soft(), FAST, seed=0)  # type: ignore[arg-type]


def test_evaluate_needs_matching_outputs():
    model = pretrain(_soft(), FAST, seed=0)  # 4 outputs
    with pytest.raises(DatasetError, match="4 outputs but 'dataset' has 2 classes"):
        evaluate(model, _gaussians(10, 0))


def test_bad_seed_and_config():
    with pytest.raises(GeovizError, match="seed"):
        pretrain(_soft(), FAST, seed=1.5)  # type: ignore[arg-type]
    with pytest.raises(GeovizError, match="TrainConfig"):
        pretrain(_soft(), {"iterations": 3}, seed=0)  # type: ignore[arg-type]
    with pytest.raises(DatasetError, match="LabeledDataset"):
        pretrain(np.zeros((3, 2)), FAST, seed=0)  # type: ignore[arg-type]


def test_progress_is_monotone_and_ends_at_one():
    seen: list[tuple[str, float]] = []
    pretrain(
        _soft(),
        TrainConfig(iterations=100, batch_size=8),
        seed=0,
        progress=lambda s, f: seen.append((s, f)),
    )
    assert {s for s, _ in seen} == {"pretrain"}
    fractions = [f for _, f in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(fractions) > 10
    assert all(0.0 <= f <= 1.0 for f in fractions)


def test_divergence_is_a_clear_error():
    huge = LabeledDataset(
        features=np.full((8, 2), 3e38, dtype=np.float32) * np.array([1.0, -1.0], dtype=np.float32),
        labels=np.arange(8) % 2,
        classes=("a", "b"),
    )
    with pytest.raises(GeovizError, match="diverged"):
        train_from_scratch(huge, TrainConfig(iterations=3, batch_size=4), seed=0)


# --------------------------------------------------------------------------- fast path


def _reference_fit(
    model: torch.nn.Module, data: LabeledDataset, config: TrainConfig, seed: int
) -> torch.nn.Module:
    """The plain loop the fast path must equal: flat features gathered per step, soft CE, Adam."""
    model.train()
    x, y = data.features, data.one_hot(torch.float32)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    gen = torch.Generator().manual_seed(seed)
    for idx in _batch_indices(x.shape[0], config.batch_size, config.iterations, gen):
        opt.zero_grad()
        soft_cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    return model.eval()


def _one_thread_pool() -> None:
    """What an entry point does before training (``configure_torch``); both loops of a test
    then sum in the same order (the autouse fixture restores the settings afterwards)."""
    configure_torch(threads=CPU_TRAIN_THREADS, flush_denormal=torch_settings().flush_denormal)


@pytest.mark.parametrize("channels", [1, 3])
def test_fast_path_equals_a_plain_loop_on_lenet(channels):
    # the plain loop runs a LeNet5 with ReLU *before* max-pool (the textbook order) and
    # gathers flat rows at every step; the library's pool-then-ReLU path with inputs laid
    # out once computes the same math and, in the same (channels-last) layout, the same bits
    rng = np.random.default_rng(0)
    n = 40
    data = LabeledDataset(
        features=rng.random((n, channels * 16 * 16)),
        labels=np.arange(n) % 3,
        classes=("a", "b", "c"),
        image_shape=(channels, 16, 16),
    )
    config = TrainConfig(iterations=12, batch_size=16, lr=1e-2)
    # the library leaves torch's thread pool alone: the caller (here) sets it, for both loops
    _one_thread_pool()
    fast = train_from_scratch(data, config, seed=4)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(4)
        ref = LeNet5(channels, 3, image_size=16)
    f = ref.features
    ref.features = torch.nn.Sequential(f[0], f[2], f[1], f[3], f[5], f[4])  # conv, ReLU, pool
    assert isinstance(ref.features[1], torch.nn.ReLU)
    ref = _reference_fit(ref.to(memory_format=torch.channels_last), data, config, seed=4)
    assert _same(_state(fast), _state(ref))
    assert all(p.is_contiguous() for p in fast.parameters())  # handed back in plain layout


def test_fast_path_equals_a_plain_loop_on_mlp():
    data = _gaussians(30, seed=2)
    config = TrainConfig(iterations=15, batch_size=8, lr=1e-2)
    _one_thread_pool()
    fast = train_from_scratch(data, config, seed=1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        ref = MLPNet(2, 2)
    assert _same(_state(fast), _state(_reference_fit(ref, data, config, seed=1)))


def test_lenet_training_is_deterministic():
    data = bars(48, seed=0)
    config = TrainConfig(iterations=10, batch_size=16)
    a = _state(train_from_scratch(data, config, seed=3))
    b = _state(train_from_scratch(data, config, seed=3))
    c = _state(train_from_scratch(data, config, seed=4))
    assert _same(a, b) and not _same(a, c)


def test_evaluate_leaves_the_model_alone_and_matches_a_plain_count():
    model = train_from_scratch(bars(64, seed=0), TrainConfig(iterations=20, batch_size=16), seed=0)
    test = bars(50, seed=1)
    model.train()
    before = _state(model)
    acc = evaluate(model, test)
    assert model.training and _same(_state(model), before)
    assert all(p.is_contiguous() for p in model.parameters())
    with torch.no_grad():
        pred = model.eval()(test.features).argmax(1)
    assert acc == pytest.approx(float((pred == test.labels).float().mean()))


# --------------------------------------------------------------------------- finetune options


def _pretrained_lenet() -> torch.nn.Module:
    return pretrain(bars(48, seed=0), TrainConfig(iterations=10, batch_size=16), seed=0)


def test_finetune_options_are_deterministic_and_default_to_the_plain_protocol():
    base, target = _pretrained_lenet(), bars(12, seed=2)
    cfg = TrainConfig(iterations=8, batch_size=8, lr=1e-2)
    plain = _state(finetune(base, target, cfg, seed=1))
    assert _same(plain, _state(finetune(base, target, cfg, seed=1, body_lr_scale=1.0)))
    for kwargs in ({"body_lr_scale": 0.1}, {"head_only_iterations": 5}):
        one = _state(finetune(base, target, cfg, seed=1, **kwargs))
        two = _state(finetune(base, target, cfg, seed=1, **kwargs))
        assert _same(one, two), kwargs
        assert not _same(one, plain), kwargs


def test_body_lr_scale_zero_freezes_the_body_bit_identically():
    base, target = _pretrained_lenet(), bars(12, seed=2)
    cfg = TrainConfig(iterations=10, batch_size=8, lr=1e-2)
    tuned = finetune(base, target, cfg, seed=0, body_lr_scale=0.0)
    before, after = _state(base), _state(tuned)
    body = [k for k in before if not k.startswith("head.")]
    assert body and all(torch.equal(before[k], after[k]) for k in body)
    assert all(p.requires_grad for p in tuned.parameters())  # frozen only while training
    # a small scale moves the body a little, a full one more
    small = _state(finetune(base, target, cfg, seed=0, body_lr_scale=0.01))
    full = _state(finetune(base, target, cfg, seed=0))
    step = {
        name: (s[k] - before[k]).abs().max()
        for name, s in (("small", small), ("full", full))
        for k in body[:1]
    }
    assert 0 < step["small"] < step["full"]


def test_head_only_phase_changes_only_the_head():
    base, target = _pretrained_lenet(), bars(12, seed=2)
    before = _state(base)
    body = [k for k in before if not k.startswith("head.")]
    # a one-iteration second phase at a zero body rate: everything the body could
    # have learnt would come from the head-only phase
    cfg = TrainConfig(iterations=1, batch_size=8, lr=1e-2)
    tuned = _state(finetune(base, target, cfg, seed=0, head_only_iterations=6, body_lr_scale=0.0))
    assert all(torch.equal(before[k], tuned[k]) for k in body)
    # the head-only phase did train the head: it differs from a run without it
    no_phase = _state(finetune(base, target, cfg, seed=0, body_lr_scale=0.0))
    assert not torch.equal(tuned["head.weight"], no_phase["head.weight"])
    # with the body trained afterwards, the body moves
    both = _state(finetune(base, target, cfg, seed=0, head_only_iterations=6))
    assert any(not torch.equal(before[k], both[k]) for k in body)


def test_head_only_iterations_count_in_the_progress():
    seen: list[float] = []
    finetune(
        _pretrained_lenet(),
        bars(12, seed=2),
        TrainConfig(iterations=50, batch_size=8),
        seed=0,
        head_only_iterations=50,
        progress=lambda _s, f: seen.append(f),
    )
    assert seen == sorted(seen) and seen[-1] == 1.0
    assert any(abs(f - 0.5) < 0.03 for f in seen)  # the head-only half is half of the run


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"body_lr_scale": -0.5}, "body_lr_scale must be a finite number >= 0"),
        ({"body_lr_scale": float("inf")}, "body_lr_scale"),
        ({"body_lr_scale": True}, "body_lr_scale"),
        ({"body_lr_scale": "1"}, "body_lr_scale"),
        ({"head_only_iterations": -1}, "head_only_iterations must be an integer >= 0"),
        ({"head_only_iterations": 2.5}, "head_only_iterations"),
    ],
)
def test_finetune_option_validation(kwargs, match):
    with pytest.raises(GeovizError, match=match):
        finetune(_pretrained_lenet(), bars(8, seed=1), FAST, seed=0, **kwargs)
