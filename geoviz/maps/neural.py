"""OTDD neural map: a learned, out-of-sample map from a target Q to a reference P.

Paper Sec. 3.1 ("OTDD neural map", eqs. (map) and (max-min)) and appendix B.
The map is ``T_N(x, y) = [G(x, y); l(G(x, y))]``: a pushforward feature map
``G`` and a classifier ``l`` pre-trained on ``P`` and then frozen. ``G`` and a
critic (Kantorovich potential) ``f`` solve the max-min problem (the appendix's
form, critic on features only)::

    sup_f inf_G  E_Q[ lambda_x ||x - G(x, y)||^2 + lambda_y y^T M l(G(x, y)) - f(G(x, y)) ]
                 + E_P[ f(x') ]

with ``M[i, j] = W_2^2(alpha_i, beta_j)`` the class-conditional label distances
of :func:`geoviz.ot.labels.label_distances` (frozen), i.e. the label term
``W_2^2(alpha_y, alpha_ybar)`` linearised over the soft label ``l(G(z))`` as in
the appendix. Units: the cost is the OTDD ground cost of
:func:`geoviz.ot.otdd.ground_cost` (``||x - x'||^2``, no 1/2), in the units of
the features. Internally the objective is divided by the mean ground cost
``s`` (a positive constant, so the saddle point is unchanged) to keep the
critic's outputs O(1) whatever the feature scale.

Training (Fan et al. 2021, "Scalable computation of Monge maps with general
costs"): alternate one critic ascent step with ``generator_steps`` descent
steps of ``G`` (Adam, the paper's lr 1e-3, batch 64). ``G`` starts as the
identity exactly (zero-initialised residual, :mod:`geoviz.maps.networks`), as
the paper's pre-training to the identity does, or (``init="barycentric"``, the
``"cpu"`` preset) is first regressed onto the barycentric projection of the
sharp entropic plan between the training parts of Q and P and then fine-tuned
on the max-min problem at a tenth of the learning rate; the final ``G`` is an
exponential moving average of its iterates (as in the paper).

Early stopping: every ``eval_every`` iterations the EMA map is applied to a
held-out part of Q and compared with a held-out part of P by the exact OT cost
``W_2^2(G#Q_held, P_held)`` (features, :func:`ot.emd2`); training stops when it
has not improved by 0.5 % for ``patience`` evaluations and the best EMA
weights are kept.

Sharpness: a neural map generates points instead of averaging reference points,
so it has no plan-row perplexity; every fit reports the soft-label confidence
``mean max l(G(z))`` and the distance from each mapped point to its nearest
reference point (``nearest_reference_``), the neural counterpart of "does the
map look like the reference data".

Caching: the fitted networks, training history and the images of the fitted
target points are stored in the :class:`~geoviz.backend.DiskCache` under the
fingerprints of both datasets and the configuration, like the other maps.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from torch import nn

from geoviz.backend import ArraySpec, DiskCache, get_cache, jsonable, resolve_device
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import GeovizError
from geoviz.maps.barycentric import BarycentricMap
from geoviz.maps.base import (
    FittedMap,
    MapKind,
    NeuralDiagnostics,
    check_transform_inputs,
    nearest_reference_ratio,
)
from geoviz.maps.networks import Architecture, build_networks, choose_architecture
from geoviz.nn.init import seeded_generator
from geoviz.nn.models import make_model
from geoviz.nn.training import TrainConfig, evaluate, train_from_scratch
from geoviz.ot.labels import label_distances
from geoviz.ot.otdd import OTDDConfig, ProgressFn, check_compatible, mean_ground_cost

__all__ = [
    "NEURAL_PRESETS",
    "FittedNeuralMap",
    "NeuralMapConfig",
    "NeuralOTDDMap",
    "get_neural_preset",
]

#: Bumped when the cached payload changes meaning.
NEURAL_CACHE_VERSION = 1
_NAMESPACE = "neural_map"
_IMPROVEMENT = 0.005  # relative gain in the held-out OT cost that resets the patience
_TRANSFORM_BATCH = 512


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


@dataclass(frozen=True)
class NeuralMapConfig:
    """Training budget and networks of :class:`NeuralOTDDMap`.

    Attributes
    ----------
    iterations
        Maximum number of critic updates (outer iterations), each followed by
        ``generator_steps`` updates of ``G``. The paper uses ``K = O(N)``.
    generator_steps
        ``G`` updates per critic update.
    batch_size
        Samples of Q and of P per step (64 in the paper).
    learning_rate
        Adam learning rate of ``G`` and ``f`` (1e-3 in the paper).
    ema_decay
        Decay of the exponential moving average of ``G``'s weights.
    architecture
        ``"auto"`` (UNet for images of at least 8x8, residual MLP otherwise),
        ``"unet"`` or ``"mlp"``.
    width
        UNet / convolutional critic base width (channels ``w, 2w, 4w``).
    hidden, n_blocks
        Residual-MLP width and number of residual blocks (vectors).
    classifier_iterations
        Training steps of the label classifier ``l`` on ``P`` (LeNet-5 for
        images, MLP for vectors; :func:`geoviz.nn.training.train_from_scratch`).
    holdout
        Fraction of Q and of P held out for early stopping (at least 8 points each).
    eval_every, patience
        Held-out evaluation period (iterations) and the number of evaluations
        without a 0.5 % improvement that stops training.
    init
        How ``G`` starts. ``"identity"`` (the paper's choice): ``G = Id``
        exactly. ``"barycentric"``: ``G`` is first regressed for
        ``init_iterations`` steps onto the barycentric projection of the sharp
        entropic OTDD plan between the *training* parts of Q and P
        (:class:`~geoviz.maps.barycentric.BarycentricMap`, same cost), then
        trained on the max-min problem as usual. The warm start reaches a
        given held-out OT cost in far fewer adversarial iterations, which is
        what makes CPU budgets usable on 32x32 images; the result is still the
        neural map of eq. (max-min), and it maps new points.
    init_iterations
        Regression steps of the barycentric warm start.
    warm_generator_lr_scale
        After a barycentric warm start, ``G``'s Adam learning rate is
        ``learning_rate`` times this (the critic keeps ``learning_rate``).
    clip_to_reference
        Clamp mapped features to the reference's per-feature range (keeps
        pixels in ``[0, 1]`` for images) when mapping.
    seed
        Seeds initialisation, batches and the hold-out split.
    device
        ``"auto"``, ``"cpu"`` or ``"cuda"``.
    cpu_threads
        The torch intra-op thread count this budget is meant to train with on
        the CPU, for the entry point to set once per process
        (:func:`geoviz.backend.configure_torch`); a fit itself never changes
        torch's process-wide pool (it may run in one of several job threads).
        1 by default: with other work on the same cores (the app's server and
        browser, Ray workers) a multi-threaded pool that waits for a busy core
        made training about 8x slower on a 2-core machine; a quiet machine
        gains at most ~1.8x from 2 threads. Not part of the cache key (like ``device``).
    """

    iterations: int = 500
    generator_steps: int = 2
    batch_size: int = 64
    learning_rate: float = 1e-3
    ema_decay: float = 0.99
    architecture: Architecture = "auto"
    width: int = 8
    hidden: int = 128
    n_blocks: int = 3
    classifier_iterations: int = 1000
    init: Literal["identity", "barycentric"] = "identity"
    init_iterations: int = 300
    warm_generator_lr_scale: float = 0.1
    holdout: float = 0.1
    eval_every: int = 100
    patience: int = 4
    clip_to_reference: bool = True
    seed: int = 0
    device: str = "auto"
    cpu_threads: int = 1

    def __post_init__(self) -> None:
        def bad(msg: str) -> GeovizError:
            return GeovizError(f"NeuralMapConfig: {msg}")

        for name in (
            "iterations",
            "generator_steps",
            "batch_size",
            "width",
            "hidden",
            "n_blocks",
            "classifier_iterations",
            "eval_every",
            "patience",
            "cpu_threads",
            "init_iterations",
        ):
            value = getattr(self, name)
            if not _is_int(value) or int(value) < 1:
                raise bad(f"{name} must be a positive integer, got {value!r}")
            object.__setattr__(self, name, int(value))
        for name, lo, hi in (
            ("learning_rate", 0.0, math.inf),
            ("ema_decay", 0.0, 1.0),
            ("holdout", 0.0, 0.5),
            ("warm_generator_lr_scale", 0.0, 1.0 + 1e-12),
        ):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float, np.floating, np.integer))
                or not math.isfinite(float(value))
            ):
                raise bad(f"{name} must be a finite number, got {value!r}")
            if not (lo < float(value) < hi or (name == "ema_decay" and float(value) == 0.0)):
                raise bad(f"{name} must lie in ({lo:g}, {hi:g}), got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.init not in ("identity", "barycentric"):
            raise bad(f"init must be 'identity' or 'barycentric', got {self.init!r}")
        if self.architecture not in ("auto", "unet", "mlp"):
            raise bad(f"architecture must be 'auto', 'unet' or 'mlp', got {self.architecture!r}")
        if not _is_int(self.seed):
            raise bad(f"seed must be an integer, got {self.seed!r}")
        if str(self.device) not in ("auto", "cpu", "cuda") and not str(self.device).startswith(
            "cuda:"
        ):
            raise bad(f"device must be 'auto', 'cpu' or 'cuda', got {self.device!r}")

    def cache_params(self) -> dict[str, Any]:
        """Everything that changes the fitted map (not the device)."""
        params = dataclasses.asdict(self)
        params.pop("device")
        params.pop("cpu_threads")
        plain: dict[str, Any] = jsonable(params)
        return plain


#: Named budgets: ``tiny`` for tests and demos (seconds on 2-D data); ``cpu``
#: (about 1.5 min per map at 32x32 on one CPU thread: barycentric warm start of a
#: residual-MLP generator, then a short max-min phase); ``paper`` (the appendix's
#: scale: UNet for images, identity start, 10^4 iterations; GPU).
NEURAL_PRESETS: dict[str, NeuralMapConfig] = {
    "tiny": NeuralMapConfig(
        iterations=200, hidden=64, n_blocks=2, width=4, classifier_iterations=100, eval_every=25
    ),
    # measured on MNIST -> Fashion-MNIST (N = 2000, 32x32, 1 CPU thread): the residual MLP
    # warm-started for 1000 steps reaches a held-out OT of 36 (identity 134) in 96 s and its
    # images look like Fashion-MNIST; the w=8 UNet reaches 42 in 227 s and keeps the digit
    "cpu": NeuralMapConfig(
        init="barycentric",
        init_iterations=1000,
        architecture="mlp",
        hidden=512,
        n_blocks=2,
        iterations=100,
        eval_every=25,
        patience=4,
    ),
    "paper": NeuralMapConfig(
        iterations=10000, generator_steps=5, width=32, classifier_iterations=2000, patience=10
    ),
}


def get_neural_preset(preset: NeuralMapConfig | str) -> NeuralMapConfig:
    """A :class:`NeuralMapConfig` from a preset name (``tiny``, ``cpu``, ``paper``) or itself."""
    if isinstance(preset, NeuralMapConfig):
        return preset
    if preset not in NEURAL_PRESETS:
        raise GeovizError(
            f"unknown neural-map preset {preset!r}; choose one of {sorted(NEURAL_PRESETS)}"
        )
    return NEURAL_PRESETS[preset]


# --------------------------------------------------------------------------- fitted map


@dataclass(frozen=True, eq=False, kw_only=True)
class FittedNeuralMap(FittedMap["NeuralOTDDMap"]):
    """A trained OTDD neural map ``T_N(x, y) = [G(x, y); l(G(x, y))]``.

    Attributes
    ----------
    generator_
        ``G`` (EMA weights, eval mode, CPU): ``(n, D)`` features and ``(n,)``
        target labels to ``(n, D)`` mapped features.
    classifier_
        ``l`` (eval mode, CPU): ``(n, D)`` features to ``(n, C_P)`` logits.
    label_cost_
        ``(C_Q, C_P)`` float64 label distances ``M`` used in training.
    mapped_features_, soft_labels_
        ``(N_Q, D)`` / ``(N_Q, C_P)`` float32 images of the fitted target points
        (soft labels ``softmax(l(G(z)))``, rows sum to 1).
    transport_cost_
        Mean ``lambda_x ||x - G(z)||^2`` over the fitted target points.
    label_term_
        Mean ``lambda_y y^T M l(G(z))``.
    otdd_
        ``transport_cost_ + label_term_``: the Monge cost of the map, an
        estimate of ``OTDD^2(Q, P)`` (same cost, no entropy).
    heldout_ot_
        ``W_2^2(G#Q_held, P_held)`` (features, exact OT) of the kept weights.
    heldout_ot_identity_
        The same cost before training (``G`` = identity), for scale.
    label_confidence_
        Mean largest soft-label entry (1: every point gets one class of P).
    classifier_accuracy_
        Accuracy of ``l`` on the held-out part of P.
    nearest_reference_
        Median distance from a mapped point to its nearest reference point,
        divided by the median nearest-neighbour distance within P (about 1:
        mapped points sit among reference points; much larger: off the data).
    history_
        ``iteration``, ``heldout_ot``, ``loss_generator``, ``loss_critic`` lists.
    best_iteration_, iterations_run_, stopped_early_
        Where the kept weights come from and whether patience ended training.
    fit_seconds_
        Training time (0 when read from the cache... the time of the original fit).
    cost_scale_
        ``s``, the mean ground cost the objective was divided by.
    network_spec_
        The networks' description (:func:`~geoviz.maps.networks.build_networks`).

    The other attributes are those of :class:`~geoviz.maps.base.FittedMap`.
    """

    kind: ClassVar[MapKind] = "neural"
    supports_out_of_sample: ClassVar[bool] = True
    symbol: ClassVar[str] = "T_N"

    generator_: nn.Module
    classifier_: nn.Module
    transport_cost_: float
    label_term_: float
    otdd_: float
    heldout_ot_: float
    heldout_ot_identity_: float
    label_confidence_: float
    classifier_accuracy_: float
    nearest_reference_: float
    history_: dict[str, list[float]]
    best_iteration_: int
    iterations_run_: int
    stopped_early_: bool
    fit_seconds_: float
    cost_scale_: float
    network_spec_: dict[str, Any]
    config: NeuralMapConfig
    otdd_config: OTDDConfig
    _feature_range: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False)

    def transform(
        self, features: torch.Tensor, labels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Map any labelled target points (out-of-sample), see :meth:`FittedMap.transform`.

        ``labels`` are required: ``G`` is conditioned on the label (eq. (map)).
        """
        d = self.mapped_features_.shape[1]
        feats, labs = check_transform_inputs(features, labels, d, len(self.target_classes))
        if labs is None:
            raise GeovizError(
                "NeuralOTDDMap.transform needs the labels of the points: G(x, y) is "
                "conditioned on the target class"
            )
        return _apply(
            self.generator_,
            self.classifier_,
            feats,
            labs,
            self._feature_range,
            resolve_device(self.config.device),
        )

    def diagnostics(self) -> NeuralDiagnostics:
        """The fit's diagnostics (see :class:`~geoviz.maps.base.NeuralDiagnostics`)."""
        return NeuralDiagnostics(
            otdd=self.otdd_,
            label_confidence=self.label_confidence_,
            effective_neighbours=None,
            converged=self.stopped_early_,
            iterations=self.iterations_run_,
            transport_cost=self.transport_cost_,
            label_term=self.label_term_,
            heldout_ot=self.heldout_ot_,
            heldout_ot_identity=self.heldout_ot_identity_,
            classifier_accuracy=self.classifier_accuracy_,
            nearest_reference=self.nearest_reference_,
            best_iteration=self.best_iteration_,
            fit_seconds=self.fit_seconds_,
        )

    def summary(self) -> dict[str, Any]:
        """Plain-Python scalars of the fit (for the CLI, the app and manifests)."""
        return {
            "otdd": self.otdd_,
            "transport_cost": self.transport_cost_,
            "label_term": self.label_term_,
            "heldout_ot": self.heldout_ot_,
            "heldout_ot_identity": self.heldout_ot_identity_,
            "label_confidence": self.label_confidence_,
            "classifier_accuracy": self.classifier_accuracy_,
            "nearest_reference": self.nearest_reference_,
            "best_iteration": self.best_iteration_,
            "iterations_run": self.iterations_run_,
            "stopped_early": self.stopped_early_,
            "fit_seconds": self.fit_seconds_,
        }

    def to_payload(self) -> dict[str, Any]:
        """Networks, history, images of the fitted points and scalars (what the cache stores)."""
        return {
            "spec": dict(self.network_spec_),
            "generator": {k: v.detach().cpu() for k, v in self.generator_.state_dict().items()},
            "classifier": {k: v.detach().cpu() for k, v in self.classifier_.state_dict().items()},
            "label_cost": self.label_cost_,
            "mapped_features": self.mapped_features_,
            "soft_labels": self.soft_labels_,
            "feature_range": None if self._feature_range is None else list(self._feature_range),
            "history": {k: list(v) for k, v in self.history_.items()},
            # the summary without the derived OTDD (transport_cost + label_term), plus s
            "scalars": {
                **{k: v for k, v in self.summary().items() if k != "otdd"},
                "cost_scale": self.cost_scale_,
            },
        }

    @classmethod
    def from_payload(
        cls,
        payload: Mapping[str, Any],
        target: LabeledDataset,
        reference: LabeledDataset,
        estimator: NeuralOTDDMap,
    ) -> FittedNeuralMap:
        """Rebuild the map that ``estimator`` trained on ``target -> reference``."""
        # the weights come from the payload: a fixed generator only avoids global random draws
        generator, _ = build_networks(payload["spec"], seeded_generator(0))
        generator.load_state_dict(payload["generator"])
        classifier = _classifier_for(reference)
        classifier.load_state_dict(payload["classifier"])
        rng = payload.get("feature_range")
        s = payload["scalars"]
        return cls(
            generator_=generator.eval(),
            classifier_=classifier.eval(),
            label_cost_=payload["label_cost"].double(),
            mapped_features_=payload["mapped_features"].float(),
            soft_labels_=payload["soft_labels"].float(),
            transport_cost_=float(s["transport_cost"]),
            label_term_=float(s["label_term"]),
            otdd_=float(s["transport_cost"]) + float(s["label_term"]),
            heldout_ot_=float(s["heldout_ot"]),
            heldout_ot_identity_=float(s["heldout_ot_identity"]),
            label_confidence_=float(s["label_confidence"]),
            classifier_accuracy_=float(s["classifier_accuracy"]),
            nearest_reference_=float(s["nearest_reference"]),
            history_={k: [float(v) for v in vals] for k, vals in payload["history"].items()},
            best_iteration_=int(s["best_iteration"]),
            iterations_run_=int(s["iterations_run"]),
            stopped_early_=bool(s["stopped_early"]),
            fit_seconds_=float(s["fit_seconds"]),
            cost_scale_=float(s["cost_scale"]),
            network_spec_=dict(payload["spec"]),
            config=estimator.config,
            otdd_config=estimator.otdd,
            **cls.fitted_on(target, reference),
            _feature_range=None if rng is None else (rng[0].float(), rng[1].float()),
        )


@torch.no_grad()
def _apply(
    generator: nn.Module,
    classifier: nn.Module,
    feats: torch.Tensor,
    labs: torch.Tensor,
    feature_range: tuple[torch.Tensor, torch.Tensor] | None,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
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


# --------------------------------------------------------------------------- estimator


def _heldout_ot(mapped: torch.Tensor, reference: torch.Tensor, lambda_x: float) -> float:
    """Exact ``lambda_x W_2^2`` between two uniform point clouds (network simplex)."""
    import ot

    a = mapped.double().cpu().numpy()
    b = reference.double().cpu().numpy()
    cost = ot.dist(a, b, metric="sqeuclidean")
    return float(lambda_x * ot.emd2([], [], cost, numItermax=1_000_000))


def _split(n: int, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n_hold = min(max(8, round(fraction * n)), n // 2)
    perm = rng.permutation(n)
    return np.sort(perm[n_hold:]), np.sort(perm[:n_hold])


class NeuralOTDDMap:
    """Estimator of the OTDD neural map (paper Sec. 3.1, eq. (max-min); appendix B).

    Parameters
    ----------
    config
        Training budget and networks (a :class:`NeuralMapConfig` or a preset
        name from :data:`NEURAL_PRESETS`).
    otdd
        The OTDD cost: ``lambda_x``, ``lambda_y`` and the label distances
        (``label_method``, ``max_per_class``, ``seed``) are taken from it, so the
        neural map optimises the same cost as the barycentric map.
    cache
        Disk cache (default :func:`geoviz.backend.get_cache`).

    Examples
    --------
    >>> fitted = NeuralOTDDMap("tiny").fit(target, reference)  # doctest: +SKIP
    >>> x_new, soft = fitted.transform(new_features, new_labels)  # doctest: +SKIP
    """

    supports_out_of_sample: ClassVar[bool] = True

    def __init__(
        self,
        config: NeuralMapConfig | str = "cpu",
        otdd: OTDDConfig = OTDDConfig(),  # noqa: B008 - immutable
        *,
        cache: DiskCache | None = None,
    ) -> None:
        self.config = get_neural_preset(config)
        if not isinstance(otdd, OTDDConfig):
            raise GeovizError(f"otdd must be an OTDDConfig, got {type(otdd).__name__}")
        self.otdd = otdd
        self.cache = cache

    def cache_params(self, target: LabeledDataset, reference: LabeledDataset) -> dict[str, Any]:
        """The disk-cache key parameters of a fit of ``target -> reference``."""
        o = self.otdd
        return {
            "v": NEURAL_CACHE_VERSION,
            "target": target.fingerprint,
            "reference": reference.fingerprint,
            "config": self.config.cache_params(),
            "cost": {
                "lambda_x": float(o.lambda_x),
                "lambda_y": float(o.lambda_y),
                "label_method": o.label_method,
                "max_per_class": o.max_per_class,
                "seed": int(o.seed),
            },
        }

    def fit(
        self,
        target: LabeledDataset,
        reference: LabeledDataset,
        progress: ProgressFn | None = None,
    ) -> FittedNeuralMap:
        """Train ``G``, ``f`` and ``l`` for ``target -> reference`` (or read them from the cache).

        ``progress(stage, fraction)`` is called with stages ``"labels"``,
        ``"classifier"``, ``"adversarial"`` and ``"done"`` (fraction in ``[0, 1]``
        within the stage).
        """
        check_compatible(target, reference)
        cache = self.cache if self.cache is not None else get_cache()

        def compute() -> dict[str, Any]:
            # torch's thread pool and denormal handling are the entry point's to set
            # (geoviz.backend.configure_torch): this may run in one of several job threads
            return _train(target, reference, self.config, self.otdd, progress, cache)

        # checked on read: the networks must load and the projection fit these datasets
        expect = {
            "mapped_features": ArraySpec((target.n_samples, int(reference.features.shape[1]))),
            "soft_labels": ArraySpec((target.n_samples, reference.n_classes)),
            "label_cost": ArraySpec((target.n_classes, reference.n_classes), finite=False),
        }
        payload = cache.get_or_compute(
            _NAMESPACE,
            self.cache_params(target, reference),
            compute,
            expect=expect,
            check=lambda p: FittedNeuralMap.from_payload(p, target, reference, self),
        )
        if progress is not None:
            progress("done", 1.0)
        return FittedNeuralMap.from_payload(payload, target, reference, self)


def _classifier_for(reference: LabeledDataset) -> nn.Module:
    """An untrained classifier of the payload's shape (its weights are loaded over these)."""
    return make_model(reference, reference.n_classes, generator=seeded_generator(0))


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


def _train(
    target: LabeledDataset,
    reference: LabeledDataset,
    cfg: NeuralMapConfig,
    otdd: OTDDConfig,
    progress: ProgressFn | None,
    cache: DiskCache,
) -> dict[str, Any]:
    start = time.perf_counter()
    dev = resolve_device(cfg.device)
    lam_x, lam_y = float(otdd.lambda_x), float(otdd.lambda_y)

    def report(stage: str, fraction: float) -> None:
        if progress is not None:
            progress(stage, min(max(float(fraction), 0.0), 1.0))

    frozen = _frozen_ingredients(target, reference, cfg, otdd, dev, report)
    label_cost, classifier = frozen.label_cost, frozen.classifier

    # ---- the max-min problem
    spec = _network_spec(target, cfg)
    generator, critic = build_networks(spec, seeded_generator(int(cfg.seed)))
    generator, critic = generator.to(dev), critic.to(dev)
    ema = copy.deepcopy(generator).eval()
    for p in ema.parameters():
        p.requires_grad_(False)

    xq_all = target.features.to(dev)
    yq_all = target.labels.to(dev)
    q_train = torch.from_numpy(frozen.q_train).to(dev)
    xq, yq = xq_all[q_train], yq_all[q_train]
    xq_hold = xq_all[torch.from_numpy(frozen.q_hold).to(dev)]
    yq_hold = yq_all[torch.from_numpy(frozen.q_hold).to(dev)]
    xp = frozen.ref_train.features.to(dev)
    xp_hold_cpu = frozen.ref_hold.features
    m_cost = torch.nan_to_num(label_cost, nan=0.0).to(device=dev, dtype=torch.float32) * lam_y
    scale = mean_ground_cost(target, reference, label_cost, lambda_x=lam_x, lambda_y=lam_y)
    scale = scale if scale > 0 and math.isfinite(scale) else 1.0

    def cost(
        x: torch.Tensor, y: torch.Tensor, gx: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        feat = lam_x * (gx - x).square().sum(dim=1)
        if lam_y == 0:
            return feat, torch.zeros_like(feat)
        soft = torch.softmax(classifier(gx), dim=1)
        return feat, (m_cost[y] * soft).sum(dim=1)

    betas = (0.5, 0.9)  # the usual choice for adversarial training
    opt_g = torch.optim.Adam(generator.parameters(), lr=cfg.learning_rate, betas=betas)
    opt_f = torch.optim.Adam(critic.parameters(), lr=cfg.learning_rate, betas=betas)
    gen = torch.Generator().manual_seed(int(cfg.seed))
    state = _Adversarial(
        generator,
        critic,
        ema,
        opt_g,
        opt_f,
        _batches(xq.shape[0], cfg.batch_size, gen),
        _batches(xp.shape[0], cfg.batch_size, gen),
        {"iteration": [], "heldout_ot": [], "loss_generator": [], "loss_critic": []},
    )

    @torch.no_grad()
    def heldout(model: nn.Module) -> float:
        mapped = model(xq_hold, yq_hold)
        return _heldout_ot(mapped, xp_hold_cpu, lam_x)

    identity_ot = heldout(ema)
    if cfg.init == "barycentric":
        _warm_start(
            generator,
            target.subset(frozen.q_train),
            frozen.ref_train,
            otdd,
            cache,
            cfg,
            scale,
            dev,
            lambda f: report("warm start", f),
        )
        ema.load_state_dict(generator.state_dict())
        # Adam moves every weight by ~lr per step whatever the gradient's size: at the full
        # rate the cost term drags the warm-started G back towards the identity before the
        # (random) critic has learnt anything, so G fine-tunes at a tenth of the rate
        for group in opt_g.param_groups:
            group["lr"] = cfg.learning_rate * cfg.warm_generator_lr_scale
    start_ot = identity_ot if cfg.init == "identity" else heldout(ema)
    state.record(0, start_ot, float("nan"), float("nan"))
    state.best = (start_ot, 0, copy.deepcopy(ema.state_dict()))
    _run_adversarial(
        state, xq, yq, xp, cost, scale, heldout, cfg, dev, (target.name, reference.name), report
    )
    best = state.best

    # ---- the kept map on every target point
    ema.load_state_dict(best[2])
    ema = ema.cpu().eval()
    classifier = classifier.cpu().eval()
    feature_range = None
    if cfg.clip_to_reference:
        feature_range = (
            reference.features.min(dim=0).values.float(),
            reference.features.max(dim=0).values.float(),
        )
    mapped, soft = _apply(
        ema, classifier, target.features.float(), target.labels, feature_range, dev
    )
    feat_cost = lam_x * (mapped.double() - target.features.double()).square().sum(1)
    lab_term = (m_cost.double().cpu()[target.labels] * soft.double()).sum(1)
    nearest = nearest_reference_ratio(mapped, reference.features, frozen.rng)
    return {
        "spec": spec,
        "generator": {k: v.detach().cpu() for k, v in ema.state_dict().items()},
        "classifier": {k: v.detach().cpu() for k, v in classifier.state_dict().items()},
        "label_cost": label_cost.cpu(),
        "mapped_features": mapped,
        "soft_labels": soft,
        "feature_range": None if feature_range is None else list(feature_range),
        "history": state.history,
        "scalars": {
            "transport_cost": float(feat_cost.mean()),
            "label_term": float(lab_term.mean()),
            "heldout_ot": float(best[0]),
            "heldout_ot_identity": float(identity_ot),
            "label_confidence": float(soft.max(dim=1).values.mean()) if soft.numel() else 1.0,
            "classifier_accuracy": float(frozen.classifier_accuracy),
            "nearest_reference": float(nearest),
            "best_iteration": int(best[1]),
            "iterations_run": int(state.iterations_run),
            "stopped_early": bool(state.stopped_early),
            "fit_seconds": float(time.perf_counter() - start),
            "cost_scale": float(scale),
        },
    }
