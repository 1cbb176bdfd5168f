"""A model the user brings: a torch module or any callable, a TorchScript file, or a
torchvision architecture with a local weights file.

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
  side, in batches whose input stays under :data:`MAX_BATCH_INPUT_BYTES`.

A TorchScript file is code: load only models you trust.

Offline, a torchvision architecture needs its weights as a local file: a hub download is
tried only when asked (``allow_download=True``) and fails with a sentence saying what is
missing when the machine is offline.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

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

__all__ = ["MAX_BATCH_INPUT_BYTES", "MAX_INPUT_SIZE", "ModelSpace"]

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
    def from_torchscript(cls, path: str | Path, **kwargs: Any) -> ModelSpace:
        """A TorchScript file (``torch.jit.save``).

        A TorchScript file is code: load only models you trust.

        Raises
        ------
        GeovizError
            The file is missing, is not a regular file (a directory, a FIFO, a device), is
            larger than :data:`geoviz.files.MAX_MODEL_BYTES`, or is not a TorchScript model.
        """
        path = Path(path)
        _check_input_size(kwargs.get("input_size"))  # before reading up to 2 GiB
        data = _read_model_file(path)
        try:
            # from the bytes already read: the path is opened once, after its checks
            buffer = io.BytesIO(data)
            model = torch.jit.load(buffer, map_location="cpu")  # type: ignore[no-untyped-call]
        except Exception as err:  # torch raises RuntimeError / ValueError variants
            raise GeovizError(
                f"{path.name} is not a TorchScript model ({last_error_line(err)}); save one with "
                "torch.jit.save(torch.jit.script(model), path)"
            ) from None
        kwargs.setdefault("name", path.stem)
        return cls(model, weights_digest=hashlib.sha256(data).hexdigest(), **kwargs)

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
            that does not fit the architecture.
        """
        try:
            import torchvision
        except Exception:
            raise GeovizError(
                "torchvision is not installed (or does not load beside this torch): "
                "pip install 'geoviz[vision]', or use a TorchScript file or a torch module"
            ) from None
        builder = getattr(torchvision.models, str(arch), None)
        if builder is None or not callable(builder):
            raise GeovizError(f"torchvision has no architecture {arch!r}")
        if weights is None and not allow_download:
            raise GeovizError(
                f"no weights for {arch}: give a local weights file (a state_dict saved with "
                "torch.save), or allow a download when the machine is online"
            )
        try:
            model = builder(weights="DEFAULT" if weights is None else None)
        except Exception as err:
            raise GeovizError(
                f"could not load {arch}'s pretrained weights ({type(err).__name__}): this "
                "machine is probably offline; give a local weights file instead"
            ) from None
        if weights is not None:
            path = Path(weights)
            data = _read_model_file(path)
            try:
                state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
                model.load_state_dict(state)
            except Exception as err:
                raise GeovizError(
                    f"{path.name} does not hold weights for {arch} ({type(err).__name__})"
                ) from None
        for attr in ("fc", "classifier", "head", "heads"):
            if hasattr(model, attr):
                setattr(model, attr, torch.nn.Identity())
                break
        kwargs.setdefault("name", str(arch))
        kwargs.setdefault("channels", 3)
        return cls(model, **kwargs)

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
