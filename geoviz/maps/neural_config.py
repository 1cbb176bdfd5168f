"""Training budgets of the OTDD neural map: :class:`NeuralMapConfig` and its presets.

The budget (iterations, batch size, learning rate, networks, warm start,
early stopping) of :class:`~geoviz.maps.neural.NeuralOTDDMap` (paper Sec. 3.1,
appendix B), the named budgets :data:`NEURAL_PRESETS` and
:func:`get_neural_preset`. Re-exported by :mod:`geoviz.maps.neural`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from geoviz.backend import jsonable
from geoviz.errors import GeovizError
from geoviz.maps.networks import Architecture

__all__ = ["NEURAL_PRESETS", "NeuralMapConfig", "get_neural_preset"]


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
