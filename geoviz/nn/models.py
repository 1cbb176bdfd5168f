"""Small classifiers for the transfer experiments (paper Sec. 5.2, appendix "Hyperparameters").

The *NIST experiments of the paper pretrain a "5-layer LeNet classifier" on each
synthetic dataset ``P_a`` (Sec. "Transfer learning on *NIST datasets",
"Connection to generalization") and fine-tune it on the few-shot target. This
module provides that network, :class:`LeNet5`, an MLP for vector data,
:func:`make_model` that picks one for a dataset, and :func:`replace_head`, which
swaps the final layer so that a model pretrained on the ``K`` classes of the
concatenated label space ``[P_1 | ... | P_m]`` can be fine-tuned on the target's
``C_Q`` classes.

Given a :class:`torch.Generator`, :func:`make_model` and :func:`replace_head`
draw the initial weights from it (:mod:`geoviz.nn.init`), never from torch's
global random state.

Both networks take the *flattened* features ``(B, D)`` of a
:class:`~geoviz.data.dataset.LabeledDataset` (``LeNet5`` reshapes them to its
image shape; ``(B, C, H, W)`` input is accepted too) and expose their last
layer as the attribute ``head`` (an :class:`torch.nn.Linear`).

The paper's Table 1 uses a SpinalNet (Kabir et al. 2022) for the baseline
comparison (appendix "Hyperparameters"); :class:`SpinalNet` builds the reference
MNIST design. :func:`make_model` picks LeNet-5 / MLP by default (so all methods
share the correlation study's architecture) and the SpinalNet on request
(``architecture="spinalnet"``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Literal, cast, get_args

import torch
from torch import nn

from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError, GeovizError
from geoviz.nn.init import build_seeded, reset_parameters

__all__ = [
    "MIN_LENET_SIZE",
    "Architecture",
    "LeNet5",
    "MLPNet",
    "SpinalNet",
    "make_model",
    "replace_head",
]

#: Networks :func:`make_model` builds: ``"auto"`` (LeNet-5 for images of at least
#: :data:`MIN_LENET_SIZE` pixels, else the MLP), or one by name.
Architecture = Literal["auto", "lenet5", "spinalnet", "mlp"]

#: Smallest image side :class:`LeNet5` accepts (two 5x5 valid convolutions and
#: two 2x2 poolings leave a 1x1 map at 16 pixels); :func:`make_model` uses an
#: :class:`MLPNet` for smaller images.
MIN_LENET_SIZE = 16


def _check_positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GeovizError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def _image_sides(image_size: int | tuple[int, int], network: str) -> tuple[int, int]:
    """``(H, W)`` of ``image_size``, checked to be at least :data:`MIN_LENET_SIZE`."""
    if isinstance(image_size, tuple):
        h, w = (_check_positive_int(s, "image_size") for s in image_size)
    else:
        h = w = _check_positive_int(image_size, "image_size")
    if min(h, w) < MIN_LENET_SIZE:
        raise GeovizError(
            f"{network} needs images of at least {MIN_LENET_SIZE}x{MIN_LENET_SIZE} pixels, got "
            f"{h}x{w}; resize them with geoviz.data.preprocess.harmonize(size=...)"
        )
    return h, w


def _conv_out(size: int) -> int:
    """Side length after conv5 -> pool2 -> conv5 -> pool2 (no padding)."""
    return ((size - 4) // 2 - 4) // 2


class LeNet5(nn.Module):
    """LeNet-5: conv 6@5x5 -> ReLU -> maxpool 2 -> conv 16@5x5 -> ReLU -> maxpool 2
    -> fc 120 -> ReLU -> fc 84 -> ReLU -> fc ``n_classes``.

    (Each ReLU is applied after its max-pool, which computes the same function
    with the same gradients, more cheaply.)

    The "5-layer LeNet" of the paper's *NIST experiments (Sec. 5.2). The
    flatten size is computed from ``image_size`` (400 for 32x32 input, 256 for
    28x28, 16 for 16x16), so the same class serves every harmonised size.

    Parameters
    ----------
    in_channels
        Image channels ``C`` (1 for grey, 3 for RGB).
    n_classes
        Outputs of the final layer :attr:`head`.
    image_size
        Height = width of the input images, or ``(H, W)``; at least
        :data:`MIN_LENET_SIZE`.

    Attributes
    ----------
    n_features
        ``C * H * W``: the length of a flattened input sample.
    head
        The final :class:`torch.nn.Linear` (84 -> ``n_classes``).
    """

    def __init__(self, in_channels: int, n_classes: int, image_size: int | tuple[int, int] = 32):
        super().__init__()
        in_channels = _check_positive_int(in_channels, "in_channels")
        n_classes = _check_positive_int(n_classes, "n_classes")
        h, w = _image_sides(image_size, "LeNet5")
        self.image_shape = (in_channels, h, w)
        self.n_features = in_channels * h * w
        # Each max-pool runs before its ReLU: relu(maxpool(z)) == maxpool(relu(z)) exactly
        # (ReLU is monotone) and the gradients are bit-identical too (a window whose max is
        # <= 0 passes no gradient either way), but the ReLU and its backward pass then touch
        # 4x fewer values (a cheaper training step on CPU). The state-dict keys are unchanged
        # (the convolutions stay at features.0 and features.3).
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 6, kernel_size=5),
            nn.MaxPool2d(2),
            nn.ReLU(),
            nn.Conv2d(6, 16, kernel_size=5),
            nn.MaxPool2d(2),
            nn.ReLU(),
        )
        flat = 16 * _conv_out(h) * _conv_out(w)
        self.body = nn.Sequential(
            nn.Flatten(), nn.Linear(flat, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU()
        )
        self.head = nn.Linear(84, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, n_classes)`` of flattened ``(B, C*H*W)`` or ``(B, C, H, W)`` input."""
        if x.ndim == 2:
            x = x.reshape(x.shape[0], *self.image_shape)
        if not cast(nn.Conv2d, self.features[3]).weight.is_contiguous():
            # weights moved to channels_last (faster CPU convolutions, see training._fit)
            x = x.contiguous(memory_format=torch.channels_last)
        logits: torch.Tensor = self.head(self.body(self.features(x)))
        return logits


class SpinalNet(nn.Module):
    """SpinalNet: a small CNN whose classifier takes its input gradually (Kabir et al. 2022).

    The baseline network of the paper's Table 1 (Fan & Alvarez-Melis 2023,
    appendix "Hyperparameters": "we train a SpinalNet for 10^4 iterations, and
    fine-tune it for 2000 iterations"), as in the reference MNIST script of
    https://github.com/dipuk0506/SpinalNet (``MNIST/SpinalNet_MNIST.py``, which
    the paper links):

    * features: conv 10@5x5 -> maxpool 2 -> ReLU -> conv 20@5x5 -> [dropout]
      -> maxpool 2 -> ReLU -> flatten, ``F = 20 * h' * w'`` values (320 at
      28x28, 500 at 32x32), split into halves ``a = x[:, :F//2]`` and
      ``b = x[:, F//2:]``;
    * spinal layers, each of ``width`` ReLU units: ``s_1 = relu(L_1 a)``,
      ``s_i = relu(L_i [h_i, s_{i-1}])`` with ``h_i = b`` for even ``i`` and
      ``a`` for odd ``i`` (``i = 2 .. n_spinal_layers``);
    * :attr:`head`: linear on ``[s_1, ..., s_n]`` (``n_spinal_layers * width``
      values) -> ``n_classes``.

    The defaults are the reference script's (``first_HL = 8``, six spinal
    layers); the geodesics paper does not state widths. The reference applies
    ``Dropout2d(0.5)`` after the second convolution; it draws its masks from
    torch's global random state, which geoviz's training never reads (a seed
    alone fixes a fit, and two app fits may run at once), so it is off by
    default (``dropout=0``).

    Parameters
    ----------
    in_channels
        Image channels ``C``.
    n_classes
        Outputs of :attr:`head`.
    image_size
        Height = width of the input images, or ``(H, W)``; at least
        :data:`MIN_LENET_SIZE`.
    width
        Units of each spinal layer.
    n_spinal_layers
        Number of spinal layers (at least 2: each half must reach the classifier).
    dropout
        Channel dropout probability after the second convolution (global
        random state; ``0`` keeps training reproducible from its seed).

    Attributes
    ----------
    n_features
        ``C * H * W``: the length of a flattened input sample.
    n_conv_features
        ``F``, the length of the flattened convolutional features.
    n_half
        ``F // 2``, the length of half ``a`` (half ``b`` has the rest).
    head
        The final :class:`torch.nn.Linear` (``n_spinal_layers * width`` -> ``n_classes``).

    References
    ----------
    H. M. D. Kabir, M. Abdar, S. M. J. Jalali, A. Khosravi, A. F. Atiya,
    S. Nahavandi, D. Srinivasan. "SpinalNet: Deep Neural Network with Gradual
    Input." IEEE Transactions on Artificial Intelligence, 2022 (arXiv:2007.03347).
    J. Fan, D. Alvarez-Melis. "Generating Synthetic Datasets by Interpolating
    along Generalized Geodesics." UAI 2023, Sec. 5.2 and appendix.
    """

    def __init__(
        self,
        in_channels: int,
        n_classes: int,
        image_size: int | tuple[int, int] = 32,
        *,
        width: int = 8,
        n_spinal_layers: int = 6,
        dropout: float = 0.0,
    ):
        super().__init__()
        in_channels = _check_positive_int(in_channels, "in_channels")
        n_classes = _check_positive_int(n_classes, "n_classes")
        width = _check_positive_int(width, "width")
        n_spinal_layers = _check_positive_int(n_spinal_layers, "n_spinal_layers")
        if n_spinal_layers < 2:
            raise GeovizError(f"n_spinal_layers must be at least 2, got {n_spinal_layers}")
        if not 0.0 <= float(dropout) < 1.0:
            raise GeovizError(f"dropout must be in [0, 1), got {dropout!r}")
        h, w = _image_sides(image_size, "SpinalNet")
        self.image_shape = (in_channels, h, w)
        self.n_features = in_channels * h * w
        self.n_conv_features = 20 * _conv_out(h) * _conv_out(w)
        self.n_half = self.n_conv_features // 2
        # ReLU after max-pool, as in LeNet5 (the same function and gradients, cheaper).
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 10, kernel_size=5),
            nn.MaxPool2d(2),
            nn.ReLU(),
            nn.Conv2d(10, 20, kernel_size=5),
            nn.Dropout2d(float(dropout)) if dropout > 0 else nn.Identity(),
            nn.MaxPool2d(2),
            nn.ReLU(),
            nn.Flatten(),
        )
        # layer i reads half a (odd i, 1-based) or half b (even i) plus layer i-1's output
        sizes = [self.n_half] + [
            (self.n_half if i % 2 == 0 else self.n_conv_features - self.n_half) + width
            for i in range(1, n_spinal_layers)
        ]
        self.spinal = nn.ModuleList(nn.Linear(size, width) for size in sizes)
        self.head = nn.Linear(n_spinal_layers * width, n_classes)

    def spinal_outputs(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The spinal layers' outputs ``[s_1, ..., s_n]``, each ``(B, width)``."""
        if x.ndim == 2:
            x = x.reshape(x.shape[0], *self.image_shape)
        if not cast(nn.Conv2d, self.features[3]).weight.is_contiguous():
            # weights moved to channels_last (faster CPU convolutions, see training._fit)
            x = x.contiguous(memory_format=torch.channels_last)
        flat = self.features(x)
        halves = (flat[:, : self.n_half], flat[:, self.n_half :])
        outputs = [torch.relu(self.spinal[0](halves[0]))]
        for i, layer in enumerate(self.spinal[1:], start=1):
            outputs.append(torch.relu(layer(torch.cat([halves[i % 2], outputs[-1]], dim=1))))
        return outputs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, n_classes)`` of flattened ``(B, C*H*W)`` or ``(B, C, H, W)`` input."""
        logits: torch.Tensor = self.head(torch.cat(self.spinal_outputs(x), dim=1))
        return logits


class MLPNet(nn.Module):
    """Two hidden ReLU layers for vector data: ``D -> hidden -> hidden -> n_classes``.

    Parameters
    ----------
    n_features
        Input dimension ``D``.
    n_classes
        Outputs of the final layer :attr:`head`.
    hidden
        Width of both hidden layers.
    """

    def __init__(self, n_features: int, n_classes: int, hidden: int = 128):
        super().__init__()
        self.n_features = _check_positive_int(n_features, "n_features")
        n_classes = _check_positive_int(n_classes, "n_classes")
        hidden = _check_positive_int(hidden, "hidden")
        self.body = nn.Sequential(
            nn.Linear(self.n_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, n_classes)`` of ``(B, D)`` input (further axes are flattened)."""
        logits: torch.Tensor = self.head(self.body(x.reshape(x.shape[0], -1)))
        return logits


def make_model(
    example: LabeledDataset | SoftLabeledDataset,
    n_classes: int,
    *,
    generator: torch.Generator | None = None,
    architecture: Architecture = "auto",
) -> nn.Module:
    """A fresh, randomly initialised classifier for the samples of ``example``.

    Parameters
    ----------
    example
        A dataset whose samples the model will read; only its feature
        dimension and ``image_shape`` are used.
    n_classes
        Number of outputs (``K`` of the concatenated label space for
        pretraining, ``C_Q`` for a target).
    generator
        Draws the initial weights (:func:`geoviz.nn.init.build_seeded`: the
        global random state is neither read nor advanced); ``None``: torch's
        global random state, as ``torch.nn`` layers do.
    architecture
        ``"auto"``: :class:`LeNet5` when ``example.image_shape`` is set and both
        sides are at least :data:`MIN_LENET_SIZE`, else :class:`MLPNet`
        (vectors, or images too small for two 5x5 convolutions).
        ``"lenet5"``, ``"spinalnet"`` (:class:`SpinalNet`, the paper's Table 1
        network; both need such images) or ``"mlp"``: that network.

    Returns
    -------
    torch.nn.Module
        The network, with ``n_classes`` outputs in its final layer ``head``.

    Raises
    ------
    GeovizError
        An unknown ``architecture``, or a convolutional one for vectors or
        images smaller than :data:`MIN_LENET_SIZE`.
    """
    if not isinstance(example, (LabeledDataset, SoftLabeledDataset)):
        raise DatasetError(
            f"make_model needs a LabeledDataset or SoftLabeledDataset, got {type(example).__name__}"
        )
    if architecture not in get_args(Architecture):
        raise GeovizError(
            f"unknown architecture {architecture!r}; choose from {get_args(Architecture)}"
        )
    shape = example.image_shape
    is_image = shape is not None and min(shape[1], shape[2]) >= MIN_LENET_SIZE
    if architecture == "auto":
        architecture = "lenet5" if is_image else "mlp"
    factory: Callable[[], nn.Module]
    if architecture in ("lenet5", "spinalnet"):
        if shape is None or not is_image:
            raise GeovizError(
                f"architecture {architecture!r} needs images of at least "
                f"{MIN_LENET_SIZE}x{MIN_LENET_SIZE} pixels; {example.name!r} has "
                f"{'vectors' if shape is None else f'{shape[1]}x{shape[2]} images'}"
            )
        c, h, w = shape
        network = LeNet5 if architecture == "lenet5" else SpinalNet

        def factory() -> nn.Module:
            return network(c, n_classes, image_size=(h, w))
    else:
        n_features = int(example.features.shape[1])

        def factory() -> nn.Module:
            return MLPNet(n_features, n_classes)

    return factory() if generator is None else build_seeded(factory, generator)


def replace_head(
    model: nn.Module, n_classes: int, *, generator: torch.Generator | None = None
) -> nn.Module:
    """A copy of ``model`` with a new, randomly initialised final layer of ``n_classes`` outputs.

    Used before fine-tuning a pretrained model on the target's classes (paper
    Sec. 5.2: pretrain on ``P_a``, fine-tune on the few-shot target). The
    input model is not modified; every other layer keeps its weights. The
    new layer is initialised from ``generator`` (PyTorch's default
    initialisation, :func:`geoviz.nn.init.reset_parameters`), or from torch's
    global random state when it is ``None``.

    Parameters
    ----------
    model
        A :class:`LeNet5`, :class:`SpinalNet`, :class:`MLPNet`, or any module whose final layer
        is an :class:`torch.nn.Linear` attribute ``head``.
    n_classes
        Outputs of the new final layer.
    generator
        Draws the new layer's weights; ``None``: torch's global random state.

    Raises
    ------
    GeovizError
        ``model`` has no linear ``head``, or ``n_classes`` is not a positive integer.
    """
    n_classes = _check_positive_int(n_classes, "n_classes")
    head = getattr(model, "head", None)
    if not isinstance(head, nn.Linear):
        raise GeovizError(
            f"cannot replace the head of a {type(model).__name__}: it needs a final "
            "torch.nn.Linear attribute 'head' (as LeNet5, SpinalNet and MLPNet have)"
        )
    new = copy.deepcopy(model)
    if generator is None:
        new.head = nn.Linear(
            head.in_features,
            n_classes,
            bias=head.bias is not None,
            device=head.weight.device,
            dtype=head.weight.dtype,
        )
        return new
    fresh = nn.Linear(
        head.in_features,
        n_classes,
        bias=head.bias is not None,
        device="meta",
        dtype=head.weight.dtype,
    ).to_empty(device="cpu")
    new.head = reset_parameters(fresh, generator).to(head.weight.device)
    return new
