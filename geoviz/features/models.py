"""A model the user brings: a torch module or any callable, a TorchScript file, or a
torchvision architecture with a local weights file.

:class:`ModelSpace` wraps it as a :class:`~geoviz.features.base.FeatureSpace`: images
``(N, C, H, W)`` in ``[0, 1]`` are resized to ``input_size`` (when given), turned to
``channels`` channels (grey repeated to RGB, RGB averaged to grey), normalised by ``mean``
and ``std`` (when given, per channel), and the model's output ``(N, d)`` (or
``(N, d, 1, 1)``) is the feature vector. Vector datasets go to the model as ``(N, D)``.
Nothing is trained; the digest covers the model's weights (or the file's bytes).

Offline, a torchvision architecture needs its weights as a local file: a hub download is
tried only when asked (``allow_download=True``) and fails with a sentence saying what is
missing when the machine is offline.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from geoviz.backend import digest_bytes, resolve_device
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import GeovizError
from geoviz.features.base import FeatureSpace, FittedFeatures, Progress, check_feature_output

__all__ = ["ModelSpace"]


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
        self.model = model
        self.label = str(name)
        self.name = f"model:{self.label}"
        self.input_size = input_size
        self.channels = channels
        self.mean = None if mean is None else tuple(float(v) for v in mean)
        self.std = None if std is None else tuple(float(v) for v in std)
        self.batch_size = int(batch_size)
        self.device = device
        self.weights_digest = weights_digest or _weights_digest(model)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_torchscript(cls, path: str | Path, **kwargs: Any) -> ModelSpace:
        """A TorchScript file (``torch.jit.save``).

        Raises
        ------
        GeovizError
            The file is missing or is not a TorchScript model.
        """
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as err:
            raise GeovizError(f"cannot read the model file {path.name}: {err.strerror}") from None
        try:
            model = torch.jit.load(str(path), map_location="cpu")  # type: ignore[no-untyped-call]
        except Exception as err:  # torch raises RuntimeError / ValueError variants
            raise GeovizError(
                f"{path.name} is not a TorchScript model ({type(err).__name__}); save one with "
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
                "torchvision is not installed (or does not load beside this torch); "
                "use a TorchScript file or pass a torch module instead"
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
            try:
                state = torch.load(str(path), map_location="cpu", weights_only=True)
                model.load_state_dict(state)
            except OSError as err:
                raise GeovizError(f"cannot read {path.name}: {err.strerror}") from None
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

    def _prepare(self, x: torch.Tensor, shape: tuple[int, int, int] | None) -> torch.Tensor:
        if shape is None:
            return x.to(torch.float32)
        c, h, w = shape
        images = x.reshape(-1, c, h, w).to(torch.float32)
        if self.channels == 3 and c == 1:
            images = images.expand(-1, 3, h, w)
        elif self.channels == 1 and c == 3:
            images = images.mean(dim=1, keepdim=True)
        if self.input_size is not None and (h, w) != (self.input_size, self.input_size):
            images = torch.nn.functional.interpolate(
                images, size=(self.input_size, self.input_size), mode="bilinear", antialias=True
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
        return images

    def _fit(
        self, datasets: list[LabeledDataset], digest_: str, progress: Progress | None
    ) -> FittedFeatures:
        shape = datasets[0].image_shape
        device = resolve_device(self.device)
        model = self.model
        if isinstance(model, torch.nn.Module):
            model = model.to(device).eval()

        def encode(x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                try:
                    out = model(self._prepare(x, shape).to(device))
                except GeovizError:
                    raise
                except Exception as err:
                    raise GeovizError(
                        f"the model {self.label} failed on inputs of shape "
                        f"{tuple(self._prepare(x[:1], shape).shape[1:])} ({type(err).__name__}: "
                        f"{str(err)[:120]})"
                    ) from None
            return check_feature_output(out, x.shape[0], f"the model {self.label}")

        # one sample first: a wrong output shape is reported before encoding everything
        probe = encode(datasets[0].features[:2])
        return FittedFeatures(
            name=self.name,
            digest=digest_,
            dim=int(probe.shape[1]),
            encode=encode,
            batch_size=self.batch_size,
            info={"weights": self.weights_digest[:16]},
        )
