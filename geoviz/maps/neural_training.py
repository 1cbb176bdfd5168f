"""Training of the OTDD neural map, stage by stage (paper Sec. 3.1, eq. (max-min); appendix B).

:func:`_train` is the body of :meth:`~geoviz.maps.neural.NeuralOTDDMap.fit`
(what the disk cache stores); the method itself is described in
:mod:`geoviz.maps.neural`. Its stages, each a function here:

1. the frozen ingredients (:func:`_frozen_ingredients`): label distances ``M``,
   the hold-out split of Q and P, the classifier ``l`` trained on ``P``;
2. the max-min problem's data (:class:`_Problem`: the cost, its scale ``s``,
   the held-out score) and its state (:func:`_adversarial_state`: networks,
   optimisers, batches);
3. the starting point (:func:`_start`): the identity, or the barycentric warm
   start (:func:`_warm_start`);
4. the adversarial training with early stopping (:func:`_run_adversarial`);
5. the kept map on every target point and the fit's scalars (:func:`_kept_map`).

:func:`_apply` maps points with a trained ``G`` and ``l`` (also used by
:meth:`~geoviz.maps.neural.FittedNeuralMap.transform`).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from geoviz.backend import DiskCache, resolve_device
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import GeovizError
from geoviz.maps.barycentric import BarycentricMap
from geoviz.maps.base import nearest_reference_ratio
from geoviz.maps.networks import build_networks, choose_architecture
from geoviz.maps.neural_config import NeuralMapConfig
from geoviz.nn.init import seeded_generator
from geoviz.nn.training import TrainConfig, evaluate, train_from_scratch
from geoviz.ot.labels import label_distances
from geoviz.ot.otdd import ProgressFn
from geoviz.ot.otdd_cost import OTDDConfig, mean_ground_cost

_IMPROVEMENT = 0.005  # relative gain in the held-out OT cost that resets the patience
_TRANSFORM_BATCH = 512


@torch.no_grad()
def _apply(
    generator: nn.Module,
    classifier: nn.Module,
    feats: torch.Tensor,
    labs: torch.Tensor,
    feature_range: tuple[torch.Tensor, torch.Tensor] | None,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(n, D)`` features and ``(n,)`` labels to ``(G(x, y), softmax(l(G(x, y))))``.

    The images are ``(n, D)`` float32, clamped to ``feature_range`` (per-feature
    ``(low, high)``) when given; the soft labels ``(n, C_P)`` float32. Computed on
    ``device`` in batches of ``_TRANSFORM_BATCH`` rows; both networks end on the CPU.
    """
    generator = generator.to(device).eval()
    classifier = classifier.to(device).eval()
    n = feats.shape[0]
    out_x = torch.empty_like(feats)
    out_y: list[torch.Tensor] = []
    bounds = None if feature_range is None else tuple(t.to(device) for t in feature_range)
    for r0 in range(0, n, _TRANSFORM_BATCH):
        x = feats[r0 : r0 + _TRANSFORM_BATCH].to(device)
        gx = generator(x, labs[r0 : r0 + _TRANSFORM_BATCH].to(device))
        if bounds is not None:
            gx = torch.maximum(torch.minimum(gx, bounds[1]), bounds[0])
        out_x[r0 : r0 + x.shape[0]] = gx.float().cpu()
        out_y.append(torch.softmax(classifier(gx).float(), dim=1).cpu())
    soft = torch.cat(out_y) if out_y else torch.zeros((0, 0))
    generator.cpu()
    classifier.cpu()
    return out_x, soft


def _heldout_ot(mapped: torch.Tensor, reference: torch.Tensor, lambda_x: float) -> float:
    """Exact ``lambda_x W_2^2`` between two uniform point clouds (network simplex)."""
    import ot

    a = mapped.double().cpu().numpy()
    b = reference.double().cpu().numpy()
    cost = ot.dist(a, b, metric="sqeuclidean")
    return float(lambda_x * ot.emd2([], [], cost, numItermax=1_000_000))


def _split(n: int, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ``(kept, held_out)`` indices of ``range(n)``: ``fraction`` of ``n`` held out,
    at least 8 and at most half."""
    n_hold = min(max(8, round(fraction * n)), n // 2)
    perm = rng.permutation(n)
    return np.sort(perm[n_hold:]), np.sort(perm[:n_hold])


def _batches(n: int, batch: int, generator: torch.Generator) -> Any:
    """Endless shuffled mini-batches of ``range(n)`` (the whole set when ``n <= batch``)."""
    while True:
        order = torch.randperm(n, generator=generator)
        if n <= batch:
            yield order
            continue
        for pos in range(0, n - batch + 1, batch):
            yield order[pos : pos + batch]


def _warm_start(
    generator: nn.Module,
    target: LabeledDataset,
    reference: LabeledDataset,
    otdd: OTDDConfig,
    cache: DiskCache,
    cfg: NeuralMapConfig,
    scale: float,
    dev: torch.device,
    report: Any,
) -> None:
    """Regress ``G(x, y)`` onto the barycentric projection of the training pairs (in place)."""
    report(0.0)
    bary = BarycentricMap(otdd, cache=cache).fit(target, reference)
    x = target.features.to(dev)
    y = target.labels.to(dev)
    goal = bary.mapped_features_.to(dev)
    opt = torch.optim.Adam(generator.parameters(), lr=cfg.learning_rate)
    batches = _batches(x.shape[0], cfg.batch_size, torch.Generator().manual_seed(int(cfg.seed) + 1))
    every = max(1, cfg.init_iterations // 20)
    for step in range(1, cfg.init_iterations + 1):
        idx = next(batches).to(dev)
        loss = (generator(x[idx], y[idx]) - goal[idx]).square().sum(dim=1).mean() / scale
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % every == 0:
            report(step / cfg.init_iterations)
    report(1.0)


@dataclass
class _Frozen:
    """What the max-min problem holds fixed: label distances ``M``, the hold-out splits
    and the trained reference classifier ``l`` (paper eq. (max-min))."""

    label_cost: torch.Tensor  # (C_Q, C_P) float64
    rng: np.random.Generator  # goes on to the nearest-reference ratio at the end
    q_train: np.ndarray
    q_hold: np.ndarray
    ref_train: LabeledDataset
    ref_hold: LabeledDataset
    classifier: nn.Module
    classifier_accuracy: float


def _frozen_ingredients(
    target: LabeledDataset,
    reference: LabeledDataset,
    cfg: NeuralMapConfig,
    otdd: OTDDConfig,
    dev: torch.device,
    report: ProgressFn,
) -> _Frozen:
    """Label distances, the hold-out split of both datasets, and the classifier (frozen)."""
    report("labels", 0.0)
    label_cost = label_distances(
        target,
        reference,
        method=otdd.label_method,
        max_per_class=otdd.max_per_class,
        seed=int(otdd.seed),
        device=dev,
    ).double()
    report("labels", 1.0)
    rng = np.random.default_rng((int(cfg.seed), 11))
    q_train, q_hold = _split(target.n_samples, cfg.holdout, rng)
    p_train, p_hold = _split(reference.n_samples, cfg.holdout, rng)
    ref_train = reference.subset(p_train)
    ref_hold = reference.subset(p_hold)
    classifier = train_from_scratch(
        ref_train,
        TrainConfig(
            iterations=cfg.classifier_iterations,
            batch_size=cfg.batch_size,
            lr=cfg.learning_rate,
        ),
        seed=int(cfg.seed),
        device=dev,
        progress=lambda _stage, f: report("classifier", f),
    )
    classifier_accuracy = evaluate(classifier, ref_hold, device=dev)
    classifier = classifier.to(dev).eval()
    for p in classifier.parameters():
        p.requires_grad_(False)
    return _Frozen(
        label_cost, rng, q_train, q_hold, ref_train, ref_hold, classifier, classifier_accuracy
    )


def _network_spec(target: LabeledDataset, cfg: NeuralMapConfig) -> dict[str, Any]:
    """What :func:`build_networks` builds (kept in the payload to rebuild the map)."""
    return {
        "kind": choose_architecture(target.image_shape, cfg.architecture),
        "n_features": int(target.n_features),
        "n_classes": int(target.n_classes),
        "image_shape": list(target.image_shape) if target.image_shape else None,
        "width": cfg.width,
        "hidden": cfg.hidden,
        "n_blocks": cfg.n_blocks,
    }


@dataclass
class _Adversarial:
    """The max-min problem's state: networks, optimisers, batches, history, best EMA map."""

    generator: nn.Module
    critic: nn.Module
    ema: nn.Module
    opt_g: torch.optim.Optimizer
    opt_f: torch.optim.Optimizer
    q_batches: Iterator[torch.Tensor]
    p_batches: Iterator[torch.Tensor]
    history: dict[str, list[float]]
    best: tuple[float, int, dict[str, torch.Tensor]] | None = None
    stopped_early: bool = False
    iterations_run: int = 0

    def record(self, it: int, score: float, loss_g: float, loss_f: float) -> None:
        self.history["iteration"].append(float(it))
        self.history["heldout_ot"].append(score)
        self.history["loss_generator"].append(loss_g)
        self.history["loss_critic"].append(loss_f)


def _run_adversarial(
    state: _Adversarial,
    xq: torch.Tensor,
    yq: torch.Tensor,
    xp: torch.Tensor,
    cost: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    scale: float,
    heldout: Callable[[nn.Module], float],
    cfg: NeuralMapConfig,
    dev: torch.device,
    names: tuple[str, str],
    report: ProgressFn,
) -> None:
    """Alternate critic ascent and generator descent (paper eq. (max-min)); keep the best
    EMA generator by held-out OT, stop after ``cfg.patience`` evaluations without gain."""
    generator, critic, ema = state.generator, state.critic, state.ema
    assert state.best is not None
    since_best = 0
    report("adversarial", 0.0)
    for it in range(1, cfg.iterations + 1):
        state.iterations_run = it
        # critic ascent: f high on P, low on G#Q
        qi, pi = next(state.q_batches).to(dev), next(state.p_batches).to(dev)
        with torch.no_grad():
            gx = generator(xq[qi], yq[qi])
        loss_f = critic(gx).mean() - critic(xp[pi]).mean()
        state.opt_f.zero_grad(set_to_none=True)
        loss_f.backward()
        state.opt_f.step()
        # generator descent on cost/s - f(G)
        for _ in range(cfg.generator_steps):
            qi = next(state.q_batches).to(dev)
            x, y = xq[qi], yq[qi]
            gx = generator(x, y)
            feat, lab = cost(x, y, gx)
            loss_g = ((feat + lab) / scale - critic(gx)).mean()
            state.opt_g.zero_grad(set_to_none=True)
            loss_g.backward()
            state.opt_g.step()
        with torch.no_grad():
            for pe, pg in zip(ema.parameters(), generator.parameters(), strict=True):
                pe.lerp_(pg, 1.0 - cfg.ema_decay)
            for be, bg in zip(ema.buffers(), generator.buffers(), strict=True):
                be.copy_(bg)
        if it % cfg.eval_every == 0 or it == cfg.iterations:
            loss_g_val, loss_f_val = loss_g.item(), loss_f.item()
            if not (math.isfinite(loss_g_val) and math.isfinite(loss_f_val)):
                raise GeovizError(
                    f"neural map {names[0]!r} -> {names[1]!r}: the losses became "
                    f"{loss_g_val}, {loss_f_val} at iteration {it}; training diverged (lower "
                    f"the learning rate, now {cfg.learning_rate:g})"
                )
            score = heldout(ema)
            state.record(it, score, loss_g_val, loss_f_val)
            if score < state.best[0] * (1.0 - _IMPROVEMENT):
                state.best = (score, it, copy.deepcopy(ema.state_dict()))
                since_best = 0
            else:
                since_best += 1
                if since_best >= cfg.patience:
                    state.stopped_early = True
                    break
            report("adversarial", it / cfg.iterations)
    report("adversarial", 1.0)


@dataclass
class _Problem:
    """The data of the max-min problem on the device (paper eq. (max-min)).

    ``xq, yq``: the training part of Q; ``xq_hold, yq_hold``: its held-out
    part; ``xp``: the training features of P; ``xp_hold``: the held-out
    features of P (CPU); ``m_cost``: ``lambda_y M`` ``(C_Q, C_P)`` float32
    (``nan`` entries of absent classes as 0); ``scale``: ``s``, the mean ground
    cost the objective is divided by.
    """

    xq: torch.Tensor
    yq: torch.Tensor
    xq_hold: torch.Tensor
    yq_hold: torch.Tensor
    xp: torch.Tensor
    xp_hold: torch.Tensor
    m_cost: torch.Tensor
    scale: float
    lambda_x: float
    lambda_y: float
    classifier: nn.Module

    def cost(
        self, x: torch.Tensor, y: torch.Tensor, gx: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(lambda_x ||x - G(z)||^2, lambda_y y^T M l(G(z)))`` per sample, ``(n,)`` each."""
        feat = self.lambda_x * (gx - x).square().sum(dim=1)
        if self.lambda_y == 0:
            return feat, torch.zeros_like(feat)
        soft = torch.softmax(self.classifier(gx), dim=1)
        return feat, (self.m_cost[y] * soft).sum(dim=1)

    @torch.no_grad()
    def heldout(self, model: nn.Module) -> float:
        """``W_2^2(G#Q_held, P_held)`` of the map ``model`` (the early-stopping score)."""
        mapped = model(self.xq_hold, self.yq_hold)
        return _heldout_ot(mapped, self.xp_hold, self.lambda_x)


def _problem(
    target: LabeledDataset,
    reference: LabeledDataset,
    frozen: _Frozen,
    otdd: OTDDConfig,
    dev: torch.device,
) -> _Problem:
    """The training and held-out tensors, the label cost and the cost scale ``s``."""
    lam_x, lam_y = float(otdd.lambda_x), float(otdd.lambda_y)
    xq_all = target.features.to(dev)
    yq_all = target.labels.to(dev)
    q_train = torch.from_numpy(frozen.q_train).to(dev)
    m_cost = torch.nan_to_num(frozen.label_cost, nan=0.0).to(device=dev, dtype=torch.float32)
    scale = mean_ground_cost(target, reference, frozen.label_cost, lambda_x=lam_x, lambda_y=lam_y)
    return _Problem(
        xq=xq_all[q_train],
        yq=yq_all[q_train],
        xq_hold=xq_all[torch.from_numpy(frozen.q_hold).to(dev)],
        yq_hold=yq_all[torch.from_numpy(frozen.q_hold).to(dev)],
        xp=frozen.ref_train.features.to(dev),
        xp_hold=frozen.ref_hold.features,
        m_cost=m_cost * lam_y,
        scale=scale if scale > 0 and math.isfinite(scale) else 1.0,
        lambda_x=lam_x,
        lambda_y=lam_y,
        classifier=frozen.classifier,
    )


def _adversarial_state(
    spec: dict[str, Any], problem: _Problem, cfg: NeuralMapConfig, dev: torch.device
) -> _Adversarial:
    """``G`` (identity), the critic ``f``, the EMA copy of ``G``, Adam for both, the batches."""
    generator, critic = build_networks(spec, seeded_generator(int(cfg.seed)))
    generator, critic = generator.to(dev), critic.to(dev)
    ema = copy.deepcopy(generator).eval()
    for p in ema.parameters():
        p.requires_grad_(False)
    betas = (0.5, 0.9)  # the usual choice for adversarial training
    opt_g = torch.optim.Adam(generator.parameters(), lr=cfg.learning_rate, betas=betas)
    opt_f = torch.optim.Adam(critic.parameters(), lr=cfg.learning_rate, betas=betas)
    gen = torch.Generator().manual_seed(int(cfg.seed))
    return _Adversarial(
        generator,
        critic,
        ema,
        opt_g,
        opt_f,
        _batches(problem.xq.shape[0], cfg.batch_size, gen),
        _batches(problem.xp.shape[0], cfg.batch_size, gen),
        {"iteration": [], "heldout_ot": [], "loss_generator": [], "loss_critic": []},
    )


def _start(
    state: _Adversarial,
    problem: _Problem,
    target: LabeledDataset,
    frozen: _Frozen,
    cfg: NeuralMapConfig,
    otdd: OTDDConfig,
    cache: DiskCache,
    dev: torch.device,
    report: ProgressFn,
) -> float:
    """Score the identity, warm-start ``G`` when ``cfg.init == "barycentric"`` and record
    the starting point as the first best map; returns the identity's held-out OT."""
    identity_ot = problem.heldout(state.ema)
    if cfg.init == "barycentric":
        _warm_start(
            state.generator,
            target.subset(frozen.q_train),
            frozen.ref_train,
            otdd,
            cache,
            cfg,
            problem.scale,
            dev,
            lambda f: report("warm start", f),
        )
        state.ema.load_state_dict(state.generator.state_dict())
        # Adam moves every weight by ~lr per step whatever the gradient's size: at the full
        # rate the cost term drags the warm-started G back towards the identity before the
        # (random) critic has learnt anything, so G fine-tunes at a tenth of the rate
        for group in state.opt_g.param_groups:
            group["lr"] = cfg.learning_rate * cfg.warm_generator_lr_scale
    start_ot = identity_ot if cfg.init == "identity" else problem.heldout(state.ema)
    state.record(0, start_ot, float("nan"), float("nan"))
    state.best = (start_ot, 0, copy.deepcopy(state.ema.state_dict()))
    return identity_ot


@dataclass
class _KeptMap:
    """The kept map's images of every target point and the fit's costs and sharpness."""

    mapped: torch.Tensor  # (N_Q, D) float32
    soft: torch.Tensor  # (N_Q, C_P) float32
    feature_range: tuple[torch.Tensor, torch.Tensor] | None
    transport_cost: float
    label_term: float
    label_confidence: float
    nearest_reference: float


def _kept_map(
    state: _Adversarial,
    problem: _Problem,
    target: LabeledDataset,
    reference: LabeledDataset,
    frozen: _Frozen,
    cfg: NeuralMapConfig,
    dev: torch.device,
) -> _KeptMap:
    """Load the best EMA weights into ``state.ema`` and map every target point with them
    (clamped to the reference's range when ``cfg.clip_to_reference``); ``G`` and ``l``
    are left on the CPU in eval mode."""
    assert state.best is not None
    state.ema.load_state_dict(state.best[2])
    ema = state.ema.cpu().eval()
    classifier = problem.classifier.cpu().eval()
    feature_range = None
    if cfg.clip_to_reference:
        feature_range = (
            reference.features.min(dim=0).values.float(),
            reference.features.max(dim=0).values.float(),
        )
    mapped, soft = _apply(
        ema, classifier, target.features.float(), target.labels, feature_range, dev
    )
    feat_cost = problem.lambda_x * (mapped.double() - target.features.double()).square().sum(1)
    lab_term = (problem.m_cost.double().cpu()[target.labels] * soft.double()).sum(1)
    return _KeptMap(
        mapped=mapped,
        soft=soft,
        feature_range=feature_range,
        transport_cost=float(feat_cost.mean()),
        label_term=float(lab_term.mean()),
        label_confidence=float(soft.max(dim=1).values.mean()) if soft.numel() else 1.0,
        nearest_reference=float(nearest_reference_ratio(mapped, reference.features, frozen.rng)),
    )


def _train(
    target: LabeledDataset,
    reference: LabeledDataset,
    cfg: NeuralMapConfig,
    otdd: OTDDConfig,
    progress: ProgressFn | None,
    cache: DiskCache,
) -> dict[str, Any]:
    """Train ``G``, ``f`` and ``l`` for ``target -> reference``: the payload of the cache
    (networks, images of the target points, history and scalars, see
    :meth:`~geoviz.maps.neural.FittedNeuralMap.from_payload`)."""
    start = time.perf_counter()
    dev = resolve_device(cfg.device)

    def report(stage: str, fraction: float) -> None:
        if progress is not None:
            progress(stage, min(max(float(fraction), 0.0), 1.0))

    frozen = _frozen_ingredients(target, reference, cfg, otdd, dev, report)
    spec = _network_spec(target, cfg)
    problem = _problem(target, reference, frozen, otdd, dev)
    state = _adversarial_state(spec, problem, cfg, dev)
    identity_ot = _start(state, problem, target, frozen, cfg, otdd, cache, dev, report)
    _run_adversarial(
        state,
        problem.xq,
        problem.yq,
        problem.xp,
        problem.cost,
        problem.scale,
        problem.heldout,
        cfg,
        dev,
        (target.name, reference.name),
        report,
    )
    assert state.best is not None
    kept = _kept_map(state, problem, target, reference, frozen, cfg, dev)
    return {
        "spec": spec,
        "generator": {k: v.detach().cpu() for k, v in state.ema.state_dict().items()},
        "classifier": {k: v.detach().cpu() for k, v in problem.classifier.state_dict().items()},
        "label_cost": frozen.label_cost.cpu(),
        "mapped_features": kept.mapped,
        "soft_labels": kept.soft,
        "feature_range": None if kept.feature_range is None else list(kept.feature_range),
        "history": state.history,
        "scalars": {
            "transport_cost": kept.transport_cost,
            "label_term": kept.label_term,
            "heldout_ot": float(state.best[0]),
            "heldout_ot_identity": float(identity_ot),
            "label_confidence": kept.label_confidence,
            "classifier_accuracy": float(frozen.classifier_accuracy),
            "nearest_reference": kept.nearest_reference,
            "best_iteration": int(state.best[1]),
            "iterations_run": int(state.iterations_run),
            "stopped_early": bool(state.stopped_early),
            "fit_seconds": float(time.perf_counter() - start),
            "cost_scale": float(problem.scale),
        },
    }
