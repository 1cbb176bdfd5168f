"""A model the user brings: a torch module or any callable, a TorchScript file, or an
architecture (torchvision's, timm's or the user's module) with a local state dict.

:class:`ModelSpace` wraps it as a :class:`~geoviz.features.base.FeatureSpace`: images
``(N, C, H, W)`` in ``[0, 1]`` are resized to ``input_size`` (when given), turned to
``channels`` channels (grey repeated to RGB, RGB averaged to grey), normalised by ``mean``
and ``std`` (when given, per channel), and the model's output ``(N, d)`` (other
``(N, ...)`` shapes flattened) is the feature vector. Vector datasets go to the model as
``(N, D)``. Nothing is trained; the digest covers the model's weights (or the file's bytes).

The model is the user's code and is treated as such:

* it gets a **copy** of each batch, never a view of a dataset's storage, so a model that
  works in place (``x.sub_(0.5)``) cannot change the datasets;
* its output must be real and finite, ``(N, d)`` (other ``(N, ...)`` shapes are flattened
  after the batch axis), with the same ``d`` for every batch
  (:func:`~geoviz.features.base.check_feature_output`); anything else is refused in a
  sentence naming the model and the batch;
* its failure is reported with the last line of its error (where a TorchScript error
  states the cause);
* only a regular file of at most :data:`geoviz.files.MAX_MODEL_BYTES` is read as a model
  (:mod:`geoviz.files`), and images are resized to at most :data:`MAX_INPUT_SIZE` pixels a
  side, in batches whose input stays under :data:`MAX_BATCH_INPUT_BYTES`;
* a file is refused in one sentence when it is not a vision model (a TorchScript
  ``forward`` that takes no tensor or returns none), not a state dict, or not one of the
  named architecture (its missing, unexpected or mis-shaped keys counted and named).

A TorchScript file is code: load only models you trust. A state dict is read with
``weights_only=True``. Offline, a torchvision architecture needs its weights as a local
file (a hub download only with ``allow_download=True``); timm is not a dependency of
geoviz, and a timm architecture without it installed is a sentence saying so.
"""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import torch

from geoviz import files, limits
from geoviz.backend import digest_bytes, resolve_device
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import GeovizError
from geoviz.features.base import (
    FeatureSpace,
    FittedFeatures,
    Progress,
    check_feature_output,
    last_error_line,
)
from geoviz.memory import check_bytes, format_bytes

__all__ = [
    "ARCH_FAMILIES",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "MAX_BATCH_INPUT_BYTES",
    "MAX_INPUT_SIZE",
    "ArchFamily",
    "ModelFileKind",
    "ModelSpace",
    "load_weights",
    "model_file_kind",
    "parse_arch",
]

#: How a model file is stored, told apart by its bytes (:func:`model_file_kind`).
ModelFileKind = Literal["torchscript", "state_dict"]
#: Where a state dict's architecture comes from (``"torchvision:resnet18"``, ``"timm:NAME"``).
ArchFamily = Literal["torchvision", "timm"]
ARCH_FAMILIES: tuple[ArchFamily, ...] = ("torchvision", "timm")
#: ImageNet's per-channel mean and std, in [0, 1] units: what torchvision's weights expect.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_ARCH_NAME = re.compile(r"[A-Za-z][\w.\-]{0,99}")
#: attributes that hold a torchvision classifier, replaced by the identity
_HEAD_ATTRS = ("fc", "classifier", "head", "heads")
#: where a training checkpoint keeps its state dict
_NESTED_STATE_KEYS = ("state_dict", "model_state_dict", "model")
#: keys named in a sentence about a mismatch
_KEYS_SHOWN = 3

#: Largest side images are resized to for a model (``input_size``, ``--features-size``).
MAX_INPUT_SIZE = 512
#: A batch's model input is kept under this many bytes (the batch is made smaller).
MAX_BATCH_INPUT_BYTES = 256 * 2**20
#: Bytes of one batch's input while it is prepared: the copy the model gets, a resize's
#: source and result (float32 each)
_PREPARE_COPIES = 3


def _check_input_size(input_size: Any) -> int | None:
    if input_size is None:
        return None
    return limits.check_int(
        input_size,
        "the model's input size (--features-size)",
        1,
        MAX_INPUT_SIZE,
        why="the side, in pixels, images are resized to before the model",
    )


def _model_file_error(path: Path) -> files.ErrorFactory:
    def make(problem: str) -> GeovizError:
        reason = problem.removeprefix("cannot read file: ")
        if reason != problem:
            return GeovizError(f"cannot read the model file {path.name}: {reason}")
        return GeovizError(f"the model file {path.name} {problem}")

    return make


def _read_model_file(path: Path) -> bytes:
    """A model file's bytes: a regular file of at most :data:`geoviz.files.MAX_MODEL_BYTES`."""
    return files.read_regular_file(
        path,
        max_bytes=files.MAX_MODEL_BYTES,  # read at call time: can be changed on the module
        what=f"reading the model file {path.name}",
        error=_model_file_error(path),
    )


def _weights_digest(model: Any) -> str:
    if isinstance(model, torch.nn.Module):
        parts = []
        for key, value in sorted(model.state_dict().items()):
            parts.append(key.encode())
            parts.append(value.detach().cpu().contiguous().numpy().tobytes())
        return digest_bytes(parts)
    return "callable:" + getattr(model, "__qualname__", type(model).__qualname__)


def model_file_kind(data: bytes) -> ModelFileKind:
    """``"torchscript"`` for a TorchScript archive (a zip with the model's ``code/``),
    ``"state_dict"`` for anything else (what ``torch.save`` writes, or not a model)."""
    if data[:2] == b"PK":
        try:
            names = zipfile.ZipFile(io.BytesIO(data)).namelist()
        except (zipfile.BadZipFile, OSError, ValueError):
            return "state_dict"
        if any("/code/" in name for name in names):
            return "torchscript"
    return "state_dict"


def parse_arch(arch: str) -> tuple[ArchFamily, str]:
    """``"torchvision:resnet18"`` -> ``("torchvision", "resnet18")``; a sentence for
    another family or a malformed name."""
    family, sep, name = str(arch).partition(":")
    if not sep or family not in ARCH_FAMILIES or not _ARCH_NAME.fullmatch(name):
        raise GeovizError(
            f"an architecture is torchvision:NAME or timm:NAME (NAME: letters, digits, '_', "
            f"'.', '-'), got {str(arch)[:60]!r}"
        )
    return ("timm" if family == "timm" else "torchvision"), name


def _state_dict(data: bytes, path: Path) -> dict[str, torch.Tensor]:
    """The ``{name: tensor}`` a ``torch.save`` file holds (read with ``weights_only``:
    nothing is unpickled but tensors and plain containers), else a sentence."""
    try:
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as err:  # pickle, zip and torch errors of many kinds
        raise GeovizError(
            f"{path.name} is not a state dict saved with torch.save ({last_error_line(err)})"
        ) from None
    if isinstance(obj, Mapping):
        for key in _NESTED_STATE_KEYS:  # a training checkpoint: {"state_dict": ..., "epoch": 3}
            if isinstance(obj.get(key), Mapping):
                obj = obj[key]
                break
    if not isinstance(obj, Mapping) or not obj:
        held = f"a {type(obj).__name__}" + (" with nothing in it" if not obj else "")
        raise GeovizError(
            f"{path.name} is not a state dict: it holds {held}, not parameter names mapped to "
            "tensors (torch.save(model.state_dict(), path))"
        )
    bad = [k for k, v in obj.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise GeovizError(
            f"{path.name} is not a state dict: {len(bad):,} of its {len(obj):,} entries, such "
            f"as {str(bad[0])[:60]!r}, are not a parameter name mapped to a tensor"
        )
    state = dict(obj)
    if all(k.startswith("module.") for k in state):  # saved from DataParallel
        state = {k.removeprefix("module."): v for k, v in state.items()}
    return state


def _is_state_dict(data: bytes, path: Path) -> bool:
    try:
        _state_dict(data, path)
    except GeovizError:
        return False
    return True


def _count(items: Sequence[str], noun: str) -> str:
    return f"{len(items):,} {noun}" + ("" if len(items) == 1 else "s")


def _some(keys: Sequence[str]) -> str:
    shown = ", ".join(repr(k) for k in keys[:_KEYS_SHOWN])
    return shown + (", ..." if len(keys) > _KEYS_SHOWN else "")


def load_weights(
    module: torch.nn.Module, state: Mapping[str, torch.Tensor], path: Path, arch: str
) -> None:
    """Load ``state`` into ``module`` after checking it is ``module``'s: the same keys
    (missing ``num_batches_tracked`` of old checkpoints aside) of the same shapes.

    Raises
    ------
    GeovizError
        ``"x.pt is not a resnet18 state dict: 12 missing keys such as 'layer4.1.bn2.weight'"``
        and the like (missing, unexpected, mis-shaped keys).
    """
    expected = module.state_dict()
    missing = [k for k in expected if k not in state and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in state if k not in expected]
    problems = []
    if missing:
        problems.append(f"{_count(missing, 'missing key')} such as {_some(missing)}")
    if unexpected:
        problems.append(f"{_count(unexpected, 'unexpected key')} such as {_some(unexpected)}")
    if not problems:
        wrong = [k for k in state if tuple(state[k].shape) != tuple(expected[k].shape)]
        if wrong:
            k = wrong[0]
            problems.append(
                f"{_count(wrong, 'tensor')} of another shape, such as {k!r}: "
                f"{tuple(state[k].shape)} in the file, {tuple(expected[k].shape)} in {arch}"
            )
    if problems:
        raise GeovizError(f"{path.name} is not a {arch} state dict: {'; '.join(problems)}")
    module.load_state_dict(state, strict=False)  # checked above; old BN counters may be absent


def _torchvision_builder(arch: str) -> Callable[..., torch.nn.Module]:
    try:
        import torchvision
    except Exception:
        raise GeovizError(
            "torchvision is not installed (or does not load beside this torch): "
            "pip install 'geoviz[vision]', or use a TorchScript file or a torch module"
        ) from None
    builder = getattr(torchvision.models, str(arch), None)
    if builder is None or not callable(builder) or str(arch).startswith("_"):
        raise GeovizError(f"torchvision has no architecture {arch!r}")
    return cast(Callable[..., torch.nn.Module], builder)


def _drop_head(model: torch.nn.Module) -> str | None:
    """Replace the classifier (``fc``, ``classifier``, ``head``, ``heads``) by the identity;
    its attribute name, or ``None`` when there is none."""
    for attr in _HEAD_ATTRS:
        if hasattr(model, attr):
            setattr(model, attr, torch.nn.Identity())
            return attr
    return None


#: a model without its classifier, its name, the classifier's attribute, default options
_Built = tuple[torch.nn.Module, str, str | None, dict[str, Any]]
_IMAGENET_DEFAULTS: dict[str, Any] = {"channels": 3, "mean": IMAGENET_MEAN, "std": IMAGENET_STD}


def _headless_architecture(arch: str) -> _Built:
    """The architecture ``arch`` names (:func:`parse_arch`), untrained, without its
    classifier: torchvision's normalised like ImageNet, timm's like its ``pretrained_cfg``."""
    family, name = parse_arch(arch)
    if family == "torchvision":
        model = _torchvision_builder(name)(weights=None)
        return model, name, _drop_head(model), dict(_IMAGENET_DEFAULTS)
    try:
        import timm
    except Exception:
        raise GeovizError(
            f"timm is not installed (or does not load beside this torch), so the timm "
            f"architecture {name} cannot be built: pip install timm (geoviz does not depend "
            "on it), or save the model as TorchScript (torch.jit.trace) and give that file"
        ) from None
    try:
        model = timm.create_model(name, pretrained=False, num_classes=0)
    except Exception as err:
        raise GeovizError(f"timm cannot build {name!r} ({last_error_line(err)})") from None
    cfg = dict(getattr(model, "pretrained_cfg", None) or {})
    head = cfg.get("classifier")
    defaults: dict[str, Any] = {"channels": 3}
    if "mean" in cfg and "std" in cfg:
        defaults.update(mean=tuple(cfg["mean"]), std=tuple(cfg["std"]))
    return model, name, head if isinstance(head, str) else None, defaults


_VISION_RETURNS = re.compile(r"^(?:Tensor|Tuple\[Tensor.*|List\[Tensor\])$")


def _not_a_vision_model(model: Any) -> str | None:
    """What keeps a TorchScript module from being a feature model, read from its
    ``forward``'s schema (its output's shape is checked on the first samples at fit)."""
    try:
        schema = model.forward.schema
    except Exception:  # a module without a scripted forward
        return "cannot be read (the module has no scripted forward method)"
    inputs = list(schema.arguments)[1:]  # after self
    required = [a for a in inputs if not a.has_default_value()]
    if not inputs:
        return "takes no input"
    if len(required) > 1:
        return f"takes {len(required)} inputs ({', '.join(a.name for a in required)}), not one"
    if str(inputs[0].type) not in ("Tensor", "Optional[Tensor]"):
        return f"takes {inputs[0].type} {inputs[0].name!r}, not a tensor of images"
    returns = [str(r.type) for r in schema.returns]
    if len(returns) != 1 or not _VISION_RETURNS.match(returns[0]):
        return f"returns {', '.join(returns) or 'nothing'}, not a tensor of features"
    return None


class ModelSpace(FeatureSpace):
    """Features from a model the user brings (see the module docstring).

    Parameters
    ----------
    model
        A ``torch.nn.Module`` (put in eval mode) or any callable ``(N, ...) tensor -> (N, d)``.
    name
        Shown and recorded as ``"model:<name>"``.
    input_size
        Side images are resized to before the model (``None``: as they are).
    channels
        Channels the model takes (1 or 3; ``None``: as they are).
    mean, std
        Per-channel normalisation after resizing (``None``: none).
    batch_size
        Images per forward pass.
    device
        ``None``: CUDA when available.
    """

    def __init__(
        self,
        model: torch.nn.Module | Callable[[torch.Tensor], Any],
        *,
        name: str = "custom",
        input_size: int | None = None,
        channels: int | None = None,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        batch_size: int = 256,
        device: str | torch.device | None = None,
        weights_digest: str | None = None,
    ) -> None:
        if not callable(model):
            raise GeovizError(f"a feature model must be callable, got {type(model).__name__}")
        if channels not in (None, 1, 3):
            raise GeovizError(f"channels must be 1, 3 or None, got {channels!r}")
        input_size = _check_input_size(input_size)
        self.model = model
        self.label = str(name)
        self.name = f"model:{self.label}"
        self.input_size = input_size
        self.channels = channels
        self.mean = None if mean is None else tuple(float(v) for v in mean)
        self.std = None if std is None else tuple(float(v) for v in std)
        self.batch_size = limits.check_int(batch_size, "batch_size", 1, limits.MAX_SAMPLES)
        self.device = device
        self.weights_digest = weights_digest or _weights_digest(model)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_file(
        cls,
        path: str | Path,
        arch: str | None = None,
        *,
        arch_hint: str = "arch='torchvision:NAME' or 'timm:NAME'",
        **kwargs: Any,
    ) -> ModelSpace:
        """A model file of either kind, told apart by its bytes (:func:`model_file_kind`):
        a TorchScript model (``arch`` must be ``None``: it carries its architecture) or a
        state dict (``torch.save``) of the architecture ``arch`` names
        (``"torchvision:resnet18"``, ``"timm:NAME"``; :meth:`from_architecture`).

        ``arch_hint`` is how the message for a state dict without ``arch`` tells to name one
        (the CLI: ``--features-arch ...``). The file is read once.

        Raises
        ------
        GeovizError
            As :meth:`from_torchscript` and :meth:`from_architecture`; a state dict without
            ``arch``, or a TorchScript model with one.
        """
        path = Path(path)
        _check_input_size(kwargs.get("input_size"))  # before reading up to 2 GiB
        if arch is not None:
            parse_arch(arch)  # a malformed name before reading the file
        data = _read_model_file(path)
        if model_file_kind(data) == "torchscript":
            if arch is not None:
                raise GeovizError(
                    f"{path.name} is a TorchScript model, which carries its own architecture: "
                    f"give it without an architecture (not {arch})"
                )
            return cls._torchscript(data, path, **kwargs)
        if arch is None:
            if data[:2] == b"PK" and not _is_state_dict(data, path):
                _state_dict(data, path)  # a torch.save archive: says what it holds instead
            if not _is_state_dict(data, path):
                return cls._torchscript(data, path, **kwargs)  # says what it is not
            raise GeovizError(
                f"{path.name} holds weights (a state dict of {len(_state_dict(data, path)):,} "
                f"tensors) but no architecture: name it ({arch_hint}), or save a TorchScript "
                "model"
            )
        state = _state_dict(data, path)
        return cls._with_weights(_headless_architecture(arch), state, path, **kwargs)

    @classmethod
    def from_torchscript(cls, path: str | Path, **kwargs: Any) -> ModelSpace:
        """A TorchScript file (``torch.jit.save``) of a vision model: its ``forward`` takes
        one tensor of images and returns a tensor (or a tuple of tensors, the first the
        features); the output's shape is checked on the first samples at fit.

        A TorchScript file is code: load only models you trust.

        Raises
        ------
        GeovizError
            The file is missing, is not a regular file (a directory, a FIFO, a device), is
            larger than :data:`geoviz.files.MAX_MODEL_BYTES`, is not a TorchScript model (a
            state dict is told apart), or is not a vision model (a ``forward`` that takes no
            tensor, more than one input, or returns no tensor).
        """
        path = Path(path)
        _check_input_size(kwargs.get("input_size"))  # before reading up to 2 GiB
        return cls._torchscript(_read_model_file(path), path, **kwargs)

    @classmethod
    def _torchscript(cls, data: bytes, path: Path, **kwargs: Any) -> ModelSpace:
        """:meth:`from_torchscript` of the bytes already read (the path is opened once)."""
        if model_file_kind(data) == "state_dict" and _is_state_dict(data, path):
            raise GeovizError(
                f"{path.name} holds weights (a state dict), not a TorchScript model: name "
                "their architecture (ModelSpace.from_architecture), or save a TorchScript model"
            )
        try:
            model = torch.jit.load(io.BytesIO(data), map_location="cpu")  # type: ignore[no-untyped-call]
        except Exception as err:  # torch raises RuntimeError / ValueError variants
            raise GeovizError(
                f"{path.name} is not a TorchScript model ({last_error_line(err)}); save "
                "one with torch.jit.save(torch.jit.script(model), path)"
            ) from None
        problem = _not_a_vision_model(model)
        if problem is not None:
            raise GeovizError(
                f"{path.name} is not a vision model: its forward {problem}; a feature model "
                "maps a tensor of (N, C, H, W) images to (N, d) features"
            )
        kwargs.setdefault("name", path.stem)
        return cls(model, weights_digest=hashlib.sha256(data).hexdigest(), **kwargs)

    @classmethod
    def from_state_dict(
        cls, module: torch.nn.Module, weights: str | Path, *, arch: str | None = None, **kwargs: Any
    ) -> ModelSpace:
        """An architecture of the user's (a ``torch.nn.Module``) with a local state dict.

        Every key of the file must be one of ``module``'s with the same shape and every key
        of ``module`` must be in the file (``num_batches_tracked`` of old checkpoints
        aside); a training checkpoint holding the state dict under ``"state_dict"``,
        ``"model_state_dict"`` or ``"model"``, and DataParallel's ``module.`` prefix, are
        taken. ``arch`` names the architecture in messages (default: the module's class).

        Raises
        ------
        GeovizError
            The file is not a state dict, or not one of ``module``: one sentence naming the
            file and, for example, how many keys are missing with a few of them.
        """
        if not isinstance(module, torch.nn.Module):
            raise GeovizError(
                f"from_state_dict takes a torch.nn.Module, got {type(module).__name__}"
            )
        path = Path(weights)
        what = arch or type(module).__name__
        load_weights(module, _state_dict(_read_model_file(path), path), path, what)
        kwargs.setdefault("name", what)
        return cls(module, **kwargs)

    @classmethod
    def from_architecture(cls, arch: str, weights: str | Path, **kwargs: Any) -> ModelSpace:
        """``"torchvision:NAME"`` (:meth:`from_torchvision`) or ``"timm:NAME"``
        (:func:`parse_arch`) with a local state dict.

        A timm architecture is ``timm.create_model(NAME, num_classes=0)`` (pooled features,
        no classifier), its input normalised with its own ``pretrained_cfg`` mean and std in
        3 channels unless given. timm is not a dependency of geoviz: without it, a sentence.

        Raises
        ------
        GeovizError
            A malformed name, torchvision or timm missing, an unknown architecture, or a
            file that is not its state dict.
        """
        built = _headless_architecture(arch)  # the package and the name before the file
        path = Path(weights)
        return cls._with_weights(built, _state_dict(_read_model_file(path), path), path, **kwargs)

    @classmethod
    def _with_weights(
        cls, built: _Built, state: dict[str, torch.Tensor], path: Path, **kwargs: Any
    ) -> ModelSpace:
        model, name, head, defaults = built
        if head is not None:  # the classifier was removed: a checkpoint of any class count
            state = {k: v for k, v in state.items() if not k.startswith(head + ".")}
        load_weights(model, state, path, name)
        kwargs.setdefault("name", name)
        return cls(model, **{**defaults, **kwargs})

    @classmethod
    def from_torchvision(
        cls,
        arch: str,
        weights: str | Path | None = None,
        *,
        allow_download: bool = False,
        **kwargs: Any,
    ) -> ModelSpace:
        """A torchvision classification architecture with its classifier removed.

        Its input is normalised with ImageNet's mean and std (:data:`IMAGENET_MEAN`,
        :data:`IMAGENET_STD`; torchvision's weights expect it) in 3 channels unless
        ``mean``, ``std`` or ``channels`` are given. The classifier's weights in the file
        are ignored (a checkpoint fine-tuned to any number of classes loads).

        Parameters
        ----------
        arch
            A ``torchvision.models`` builder name (``"resnet18"``, ...).
        weights
            A local ``state_dict`` file (``torch.save``); required offline.
        allow_download
            Without ``weights``, load torchvision's default pretrained weights from the hub.

        Raises
        ------
        GeovizError
            torchvision missing, unknown architecture, no weights offline, or a weights file
            that is not a state dict of the architecture (its missing, unexpected or
            mis-shaped keys named).
        """
        if weights is not None:
            return cls.from_architecture(f"torchvision:{arch}", weights, **kwargs)
        builder = _torchvision_builder(str(arch))  # torchvision and the name first
        if not allow_download:
            raise GeovizError(
                f"no weights for {arch}: give a local weights file (a state_dict saved with "
                "torch.save), or allow a download when the machine is online"
            )
        try:
            model = builder(weights="DEFAULT")
        except Exception as err:
            raise GeovizError(
                f"could not load {arch}'s pretrained weights ({type(err).__name__}): this "
                "machine is probably offline; give a local weights file instead"
            ) from None
        _drop_head(model)
        kwargs.setdefault("name", str(arch))
        return cls(model, **{**_IMAGENET_DEFAULTS, **kwargs})

    # ------------------------------------------------------------------ the space
    def params(self) -> dict[str, Any]:
        return {
            "name": self.label,
            "weights": self.weights_digest,
            "input_size": self.input_size,
            "channels": self.channels,
            "mean": self.mean,
            "std": self.std,
        }

    def _input_shape(self, n_features: int, shape: tuple[int, int, int] | None) -> tuple[int, ...]:
        """The shape of one sample as the model gets it."""
        if shape is None:
            return (n_features,)
        c, h, w = shape
        if self.channels is not None:
            c = self.channels
        if self.input_size is not None:
            h = w = self.input_size
        return (c, h, w)

    def _prepare(self, x: torch.Tensor, shape: tuple[int, int, int] | None) -> torch.Tensor:
        """The model's input for the rows ``x``: a new tensor, never a view of ``x``."""
        if shape is None:
            images = x.to(torch.float32)
        else:
            c, h, w = shape
            images = x.reshape(-1, c, h, w).to(torch.float32)
            if self.channels == 3 and c == 1:
                images = images.expand(-1, 3, h, w)
            elif self.channels == 1 and c == 3:
                images = images.mean(dim=1, keepdim=True)
            if self.input_size is not None and (h, w) != (self.input_size, self.input_size):
                images = torch.nn.functional.interpolate(
                    images,
                    size=(self.input_size, self.input_size),
                    mode="bilinear",
                    antialias=True,
                )
            if self.mean is not None or self.std is not None:
                n_ch = images.shape[1]
                mean = torch.tensor(self.mean or (0.0,) * n_ch).reshape(1, -1, 1, 1)
                std = torch.tensor(self.std or (1.0,) * n_ch).reshape(1, -1, 1, 1)
                if mean.shape[1] != n_ch or std.shape[1] != n_ch:
                    raise GeovizError(
                        f"mean/std have {mean.shape[1]}/{std.shape[1]} values for {n_ch} channels"
                    )
                images = (images - mean) / std
        # The model is the user's code: it may work in place (x.sub_(0.5)). Without these
        # steps ``images`` is ``x`` itself or a view of it, i.e. of the dataset's storage,
        # so it gets its own contiguous copy whenever it could share memory with ``x``.
        if images.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
            images = images.clone(memory_format=torch.contiguous_format)
        return images

    def _batch_size(self, sample_shape: tuple[int, ...], n_samples: int) -> int:
        """Rows per forward pass: :attr:`batch_size`, made smaller so one batch's input
        stays under :data:`MAX_BATCH_INPUT_BYTES`; its memory is checked before any batch
        is allocated.

        Raises
        ------
        ResourceError
            Even one batch's input would not fit in this process's memory.
        """
        per_sample = 4 * max(1, int(torch.Size(sample_shape).numel()))
        batch = max(1, min(self.batch_size, n_samples, MAX_BATCH_INPUT_BYTES // per_sample))
        check_bytes(
            _PREPARE_COPIES * batch * per_sample,
            f"one batch of the model {self.label}'s input ({batch} samples of shape "
            f"{sample_shape}, {format_bytes(batch * per_sample)})",
        )
        return batch

    def _fit(
        self, datasets: list[LabeledDataset], digest_: str, progress: Progress | None
    ) -> FittedFeatures:
        shape = datasets[0].image_shape
        sample_shape = self._input_shape(datasets[0].n_features, shape)
        batch_size = self._batch_size(sample_shape, max(ds.n_samples for ds in datasets))
        device = resolve_device(self.device)
        model = self.model
        if isinstance(model, torch.nn.Module):
            model = model.to(device).eval()

        def encode(x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                inputs = self._prepare(x, shape).to(device)
                try:
                    out = model(inputs)
                except GeovizError:
                    raise
                except Exception as err:
                    # a TorchScript error is many lines with the cause last
                    raise GeovizError(
                        f"the model {self.label} failed on inputs of shape {sample_shape}: "
                        f"{last_error_line(err)}"
                    ) from None
            return check_feature_output(out, x.shape[0], f"the model {self.label}")

        # a couple of samples first: a wrong output is reported before encoding everything
        try:
            probe = encode(datasets[0].features[:2])
        except GeovizError as err:
            err.args = (f"{err} (on the first samples of {datasets[0].name})",)
            raise
        dim = int(probe.shape[1])
        n_total = sum(ds.n_samples for ds in datasets)
        # the features of every dataset, and torch.cat's copy of one dataset's
        check_bytes(
            2 * 4 * n_total * dim,
            f"the features of the model {self.label} ({n_total:,} samples x {dim:,})",
        )
        return FittedFeatures(
            name=self.name,
            digest=digest_,
            dim=dim,
            encode=encode,
            batch_size=batch_size,
            info={"weights": self.weights_digest[:16]},
        )
