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
:func:`geoviz.ot.otdd_cost.ground_cost` (``||x - x'||^2``, no 1/2), in the units of
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

Modules: the budget (:class:`NeuralMapConfig`, :data:`NEURAL_PRESETS`) is in
:mod:`geoviz.maps.neural_config`, the training stages in
:mod:`geoviz.maps.neural_training`; this module holds the estimator and the
fitted map.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from geoviz.backend import ArraySpec, DiskCache, get_cache, resolve_device
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import GeovizError
from geoviz.maps.base import (
    FittedMap,
    MapKind,
    NeuralDiagnostics,
    check_transform_inputs,
)
from geoviz.maps.networks import build_networks

# the budget and the training live in their own modules; their names stay importable from here
from geoviz.maps.neural_config import NeuralMapConfig, get_neural_preset
from geoviz.maps.neural_training import _apply, _train
from geoviz.nn.init import seeded_generator
from geoviz.nn.models import make_model
from geoviz.ot.otdd import ProgressFn
from geoviz.ot.otdd_cost import OTDDConfig, check_compatible

__all__ = [
    "FittedNeuralMap",
    "NeuralOTDDMap",
]

#: Bumped when the cached payload changes meaning.
NEURAL_CACHE_VERSION = 1
_NAMESPACE = "neural_map"


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


# --------------------------------------------------------------------------- estimator


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
    A preset names a training budget (``tiny`` is for tests and demos):

    >>> from geoviz.maps import NeuralOTDDMap, get_neural_preset
    >>> estimator = NeuralOTDDMap("tiny")
    >>> estimator.config == get_neural_preset("tiny")
    True
    >>> estimator.config.iterations, estimator.supports_out_of_sample
    (200, True)

    Fitting trains two networks (minutes on a CPU), so it is shown, not run here:

    >>> fitted = estimator.fit(target, reference)  # doctest: +SKIP
    >>> x_new, soft = fitted.transform(new_features, new_labels)  # doctest: +SKIP
    """

    supports_out_of_sample: ClassVar[bool] = True

    def __init__(
        self,
        config: NeuralMapConfig | str = "cpu",
        otdd: OTDDConfig = OTDDConfig(),
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
