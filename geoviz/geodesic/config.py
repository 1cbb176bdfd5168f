"""The parameters of :func:`~geoviz.geodesic.pipeline.fit_geodesic` and the space they name.

* :class:`GeodesicConfig` — the maps' OTDD settings, the QP solver of
  ``a_hat``, the map method and the feature space, validated on construction;
  :meth:`GeodesicConfig.to_dict` is the plain form used in cache keys and manifests.
* :func:`space_choice_for`, :func:`space_of` — which feature space a configuration means
  for some datasets (``"auto"``: chosen from the data, paper Sec. 5.3), and
  :func:`space_sentence`, the one sentence that says it.

Split out of :mod:`geoviz.geodesic.pipeline` (import these names from here), as
:mod:`geoviz.ot.otdd_cost` holds :class:`~geoviz.ot.otdd_cost.OTDDConfig`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from geoviz.backend import DiskCache, jsonable
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import GeovizError
from geoviz.features import (
    AUTO,
    BUILTIN_SPACES,
    ENCODER_PRESET_NAMES,
    FeatureSpace,
    SpaceChoice,
    choose_space,
    make_space,
)
from geoviz.geodesic.distances import check_qp_solver
from geoviz.maps.methods import MAP_METHODS, TRAINED_MAP_METHODS
from geoviz.maps.neural_config import NeuralMapConfig, get_neural_preset
from geoviz.ot.otdd_cost import OTDDConfig
from geoviz.vocabulary import MapMethod

__all__ = [
    "GeodesicConfig",
    "caution_line",
    "check_space_allows",
    "space_allows",
    "space_choice_for",
    "space_of",
    "space_sentence",
]

#: map methods whose maps may live in a feature space other than pixels: their images come
#: back through the plans (:func:`~geoviz.geodesic.pipeline.lift_through_plan`)
UNTRAINED_SPACE_METHODS: tuple[MapMethod, ...] = ("barycentric",)


def space_allows(method: str, space: str) -> bool:
    """Whether maps of ``method`` may live in feature space ``space`` (a name, ``"auto"`` or
    ``"model:<name>"``): barycentric maps anywhere, maps that generate images (neural) only
    in pixel space (``"auto"`` is pixels for them, :func:`space_choice_for`)."""
    return method in UNTRAINED_SPACE_METHODS or space in ("pixels", AUTO)


def check_space_allows(method: str, space: str, *, error: type[GeovizError] = GeovizError) -> None:
    """Refuse maps of ``method`` in ``space`` (:func:`space_allows`), in the one sentence of
    the config, the spec and the fit."""
    if not space_allows(method, space):
        raise error(
            f"maps in the {space} feature space are barycentric: a neural map there would "
            "generate features, not images (use method='barycentric')"
        )


#: what a config's keys said of the subsamples before they moved to the spec (all samples)
_ALL_SAMPLES: dict[str, Any] = {"n_target": None, "n_reference": None, "subsample_seed": 0}


@dataclass(frozen=True)
class GeodesicConfig:
    """Parameters of :func:`~geoviz.geodesic.pipeline.fit_geodesic`.

    Attributes
    ----------
    otdd
        OTDD / barycentric-map settings (entropic ``epsilon`` relative to the
        mean ground cost, ``lambda_x``/``lambda_y``, label method, device, ...).
        The (2,Q) distances use the same ``lambda_x``/``lambda_y`` weights and
        the same class-conditional label distances (``label_method``,
        ``max_per_class``, ``seed``) as the maps.
    qp_solver
        ``qpsolvers`` solver for ``a_hat`` (``None``: default; ``"enumerate"``:
        exact face enumeration), see :func:`~geoviz.geodesic.distances.optimal_weights`.
    method
        ``"barycentric"`` (entropic plan, :class:`~geoviz.maps.barycentric.BarycentricMap`)
        or ``"neural"`` (:class:`~geoviz.maps.neural.NeuralOTDDMap`, trained with
        the same cost: ``lambda_x``, ``lambda_y`` and label distances of ``otdd``).
    neural
        Budget of the neural maps (a :class:`~geoviz.maps.neural_config.NeuralMapConfig`
        or a preset name ``"tiny"``/``"cpu"``/``"paper"``); ignored for
        ``method="barycentric"`` (and left out of :meth:`to_dict`).
    features
        The feature space the costs live in (paper Sec. 5.3): ``"auto"`` (default: chosen
        from the data by :func:`geoviz.features.choose_space`, the digit box for grey
        glyphs, the pretrained encoder for other images, raw features for vectors; pixel
        space for neural maps), ``"pixels"``, ``"pca"``, ``"box"``, ``"encoder"`` or a
        registered ``"model:<name>"`` (:func:`geoviz.features.make_space`); left out of
        :meth:`to_dict` for pixels, so pixel-space keys are those of before feature spaces
        existed.
    encoder
        The ``"encoder"`` space's weights: ``"pretrained"`` (default, the shipped ones) or
        a training budget here (``"cpu"``, ``"tiny"``; :data:`geoviz.features.ENCODER_PRESETS`).
    """

    otdd: OTDDConfig = field(default_factory=OTDDConfig)
    qp_solver: str | None = None
    method: MapMethod = "barycentric"
    neural: NeuralMapConfig = field(default_factory=lambda: get_neural_preset("cpu"))
    features: str = AUTO
    encoder: str = "pretrained"

    def __post_init__(self) -> None:
        # OTDDConfig validates its own fields on construction (epsilon within
        # [limits.EPSILON_MIN, limits.EPSILON_MAX], lambdas, ...)
        if not isinstance(self.otdd, OTDDConfig):
            raise GeovizError(
                f"GeodesicConfig.otdd must be an OTDDConfig, got {type(self.otdd).__name__}"
            )
        check_qp_solver(self.qp_solver)  # an unknown solver fails here, not after the fit
        if self.method not in MAP_METHODS:
            raise GeovizError(
                f"GeodesicConfig.method must be one of {list(MAP_METHODS)}, got {self.method!r}"
            )
        if isinstance(self.neural, str):
            object.__setattr__(self, "neural", get_neural_preset(self.neural))
        if not isinstance(self.neural, NeuralMapConfig):
            raise GeovizError(
                "GeodesicConfig.neural must be a NeuralMapConfig or a preset name, got "
                f"{type(self.neural).__name__}"
            )
        if not isinstance(self.features, str) or not (
            self.features in BUILTIN_SPACES or self.features.startswith("model:")
        ):
            raise GeovizError(
                f"GeodesicConfig.features must be one of {', '.join(BUILTIN_SPACES)} or "
                f"'model:<name>', got {str(self.features)[:40]!r}"
            )
        if self.encoder not in ENCODER_PRESET_NAMES:
            raise GeovizError(
                f"GeodesicConfig.encoder must be one of {', '.join(ENCODER_PRESET_NAMES)}, "
                f"got {str(self.encoder)[:40]!r}"
            )
        check_space_allows(self.method, self.features)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able parameters (for cache keys and metadata).

        The neural budget only appears for methods that train networks
        (:data:`~geoviz.maps.methods.TRAINED_MAP_METHODS`), so barycentric keys
        do not change when it does.
        """
        # the subsamples are the spec's (GeodesicSpec.n_target, ...): the config fits the
        # datasets it is given, and its keys (checkpoint fingerprints) keep those entries
        out = {**dataclasses.asdict(self), **_ALL_SAMPLES}
        if self.method not in TRAINED_MAP_METHODS:
            out.pop("neural")
        if self.features == "pixels":
            out.pop("features")
        if self.features != "encoder":
            out.pop("encoder")
        plain: dict[str, Any] = jsonable(out)
        return plain


def space_sentence(choice: SpaceChoice | None, named: str) -> str:
    """``"space: digit box (chosen: ...)"``, or ``"space: pca50 (named)"`` without a choice."""
    if choice is not None:
        return f"space: {choice.label} (chosen automatically: {choice.reason})"
    words = {"box": "digit box", "pixels": "pixels", "natural": "natural-image encoder"}.get(
        named, named
    )
    return f"space: {words} (named, not chosen automatically)"


def caution_line(choice: SpaceChoice | None) -> str | None:
    """``"caution: <caveat>"``, the line printed beside the answer when the chosen space
    measured no class structure in Q or references unrelated to it; else ``None``."""
    if choice is None or choice.caveat is None:
        return None
    return f"caution: {choice.caveat}"


def space_choice_for(
    config: GeodesicConfig,
    datasets: Sequence[LabeledDataset],
    *,
    labelled: np.ndarray | None = None,
) -> SpaceChoice | None:
    """What ``"auto"`` picks for ``datasets`` (Q first) under ``config``; ``None`` when
    ``config.features`` names a space. Neural maps generate images, so for them ``"auto"``
    is pixel space. ``labelled``: a few-shot Q, the indices of its points whose label is
    known (Q is then measured on them alone, :func:`~geoviz.features.choice.choose_space`)."""
    if config.features != AUTO:
        return None
    if config.method != "barycentric":
        return SpaceChoice(
            "pixels",
            "pretrained",
            "neural maps generate images, so their costs are on pixels",
            "images" if datasets and datasets[0].image_shape is not None else "vectors",
        )
    return choose_space(datasets, labelled=labelled)


def space_of(
    config: GeodesicConfig,
    cache: DiskCache,
    datasets: Sequence[LabeledDataset] = (),
    *,
    labelled: np.ndarray | None = None,
    choice: SpaceChoice | None = None,
) -> tuple[FeatureSpace, SpaceChoice | None]:
    """The feature space of ``config`` for ``datasets`` (the encoder caches in ``cache``).

    Returns the space and, for ``"auto"``, the choice (:func:`space_choice_for`, with
    ``labelled``). ``choice``: one already made for these datasets (a few-shot target's, on
    its labelled points), used as it is with ``"auto"`` instead of choosing again.
    """
    if choice is None or config.features != AUTO:
        choice = space_choice_for(config, datasets, labelled=labelled)
    name = config.features if choice is None else choice.name
    preset = config.encoder if choice is None else choice.encoder_preset
    space = make_space(name, encoder_preset=preset, cache=cache, device=config.otdd.device)
    return space, choice
