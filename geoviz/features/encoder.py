"""An image encoder trained here, on the CPU, in minutes: meaning, not pixels.

Paper Sec. 5.3 embeds natural images with a pretrained MAE before computing the OTDD maps.
Offline and on two CPU cores there is no such model, so :class:`EncoderSpace` trains a small
convolutional network on the union of the datasets of the problem (Q and the references),
made to ignore what carries no class meaning:

* **per-image standardisation** at the input (each channel minus its mean, divided by the
  image's standard deviation): brightness, contrast and colour cast are gone before the
  first convolution;
* **augmentations** that change everything but the class: grey images are drawn in the
  styles of :mod:`geoviz.data.styles` named by ``EncoderConfig.styles`` (default
  :data:`DEFAULT_STYLES`, the six of issue 33: gradient backgrounds, ``|patch - digit|`` on
  photo patches as MNIST-M does, textures, outlined or inverted strokes, stroke widths,
  colour noise; the module has 13 in six families, any of which may be named), channels
  permuted and rescaled, images turned grey or inverted, shifted, scaled and rotated;
* **supervised heads** on a shared trunk: cross-entropy of one linear head per set of class
  names among the labelled datasets (the references' own classes: digits stay apart from
  digits, garments from garments; MNIST and USPS, both ``0``-``9``, share one head, so their
  classes land in the same places). Q's labels are not used (``labels="references"``).
  An optional contrastive loss (NT-Xent, SimCLR, weight ``contrastive``) between two
  augmented views of every image of the union, Q's included, is off by default: measured on
  the colour target (``benchmarks/bench_features.py --ablation``, N = 1000), adding it
  lowered the USPS map's class agreement from 0.85 to 0.75 and doubled the training time,
  and the contrastive loss alone gave 0.67 (``benchmarks/README.md``).

The embedding is the trunk's output, L2-normalised (``d = dim``): ``||z - z'||^2`` in
``[0, 4]``. Inputs of any size are resized to ``size x size`` first (a 64x64 RGB dataset
costs what a 32x32 one does), grey inputs repeated to three channels. The fitted weights
are cached on disk by the digest of the space's parameters and the datasets' fingerprints
(:class:`~geoviz.backend.DiskCache`, namespace ``feature_encoder``): a restart does not
retrain. Training runs on CUDA when present.

Embedding (:class:`NetEncode`) runs the batch-norm-folded network in the channels-last
memory layout, in chunks of :data:`ENCODE_CHUNK` images (about 2x faster on a CPU core than
NCHW in chunks of 256; the embeddings differ by float32 rounding, ~2e-6), and remembers the
embedding of every image it saw for the process (:data:`_MEMO_ROWS` images at most, keyed by
the network's weights and the image's bytes): the space-choice measurement embeds a sample
of the very images the fit embeds next, and each image is computed once. An image's
embedding does not depend on the batch it is in (a short last chunk is padded to a whole one,
as the convolutions' arithmetic depends on the batch size with several threads; checked bit
for bit in the tests with 1 and 2 threads).
"""

from __future__ import annotations

import copy
import hashlib
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import torch
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from geoviz import limits
from geoviz.backend import DiskCache, get_cache, resolve_device
from geoviz.data.dataset import LabeledDataset
from geoviz.data.styles import STYLES, Style, render_mixed
from geoviz.errors import GeovizError
from geoviz.features.base import FeatureSpace, FittedFeatures, Progress

__all__ = [
    "DEFAULT_STYLES",
    "ENCODER_PRESETS",
    "EncoderConfig",
    "EncoderNet",
    "EncoderSpace",
    "NetEncode",
    "augment",
    "encoder_input_shape",
    "train_encoder",
]

LabelUse = Literal["references", "all", "none"]

#: the styles an encoder trains on by default: the six of issue 33. Issue 42 added seven more
#: (:data:`geoviz.data.styles.STYLES`, 13 in six families); holding whole families out of
#: training (``benchmarks/bench_styles.py``), encoders trained on the broader set kept the
#: class on the seven new, unseen styles no better than the six-style encoder did (USPS map
#: agreement 0.861 against 0.873, MNIST 0.983 both), so the default stays these six
DEFAULT_STYLES: tuple[Style, ...] = STYLES[:6]


@dataclass(frozen=True)
class EncoderConfig:
    """Training settings of :class:`EncoderSpace`.

    Attributes
    ----------
    size
        Side the inputs are resized to, pixels.
    width
        Channels of the first convolution (then 2x and 4x).
    dim
        Embedding dimension ``d``.
    epochs
        Passes over the (capped) union.
    batch_size, lr
        Adam's batch and learning rate (cosine-decayed to 0).
    supervised, contrastive
        Weights of the two losses (0 turns one off; not both).
    temperature
        NT-Xent temperature.
    max_per_dataset
        Samples of each dataset used for training (stratified by the seed; all are encoded).
    labels
        Which datasets' labels train heads: ``"references"`` (all but the first, Q),
        ``"all"`` or ``"none"``.
    styles
        Colour styles (:data:`geoviz.data.styles.STYLES`) grey training images are drawn in;
        ``()`` keeps them grey (the colour and geometry augmentations still apply).
    seed
        Seed of the initialisation, the sampling and the augmentations.
    """

    size: int = 32
    width: int = 32
    dim: int = 64
    epochs: int = 10
    batch_size: int = 256
    lr: float = 2e-3
    supervised: float = 1.0
    contrastive: float = 0.0
    temperature: float = 0.2
    max_per_dataset: int = 3000
    labels: LabelUse = "references"
    styles: tuple[Style, ...] = DEFAULT_STYLES
    seed: int = 0

    def __post_init__(self) -> None:
        limits.check_int(self.size, "encoder size", 8, limits.MAX_IMAGE_SIZE)
        limits.check_int(self.width, "encoder width", 4, 256)
        limits.check_int(self.dim, "encoder dim", 2, 1024)
        limits.check_int(self.epochs, "encoder epochs", 1, 1000)
        limits.check_int(self.batch_size, "encoder batch_size", 4, 8192)
        limits.check_int(self.max_per_dataset, "encoder max_per_dataset", 10, limits.MAX_SAMPLES)
        limits.check_int(self.seed, "encoder seed", 0, limits.MAX_SEED)
        for name in ("lr", "supervised", "contrastive", "temperature"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise GeovizError(f"encoder {name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise GeovizError(f"encoder {name} must be finite and >= 0, got {value}")
        if self.lr <= 0 or self.temperature <= 0:
            raise GeovizError("encoder lr and temperature must be > 0")
        if self.supervised == 0 and self.contrastive == 0:
            raise GeovizError("the encoder needs a loss: supervised or contrastive weight > 0")
        unknown = [s for s in self.styles if s not in STYLES]
        if unknown or len(set(self.styles)) != len(self.styles):
            raise GeovizError(
                f"encoder styles are distinct names among {', '.join(STYLES)}, "
                f"got {list(self.styles)}"
            )
        if self.labels not in ("references", "all", "none"):
            raise GeovizError(
                f"encoder labels must be references, all or none, got {self.labels!r}"
            )


#: training budgets: ``tiny`` for tests (seconds), ``cpu`` to train one on a problem's own
#: datasets (minutes: 290-350 s for 8,000 images on 2 cores, ``benchmarks/README.md``); the
#: default encoder is the shipped one (:mod:`geoviz.features.pretrained`)
ENCODER_PRESETS: dict[str, EncoderConfig] = {
    "tiny": EncoderConfig(
        size=16, width=8, dim=16, epochs=1, batch_size=64, max_per_dataset=200, contrastive=0.5
    ),
    "cpu": EncoderConfig(),
}


class EncoderNet(nn.Module):
    """Per-image standardisation, three conv blocks, global average pooling, a linear layer."""

    def __init__(self, width: int, dim: int) -> None:
        super().__init__()

        def block(c_in: int, c_out: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
                nn.BatchNorm2d(c_out),
                nn.ReLU(inplace=True),
                nn.Conv2d(c_out, c_out, 3, padding=1, bias=False),
                nn.BatchNorm2d(c_out),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            )

        self.trunk = nn.Sequential(
            block(3, width), block(width, 2 * width), block(2 * width, 4 * width)
        )
        self.out = nn.Linear(4 * width, dim)

    @staticmethod
    def standardise(x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=(2, 3), keepdim=True)
        std = x.std(dim=(1, 2, 3), keepdim=True).clamp_min(1e-3)
        return (x - mean) / std

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.trunk(self.standardise(x))
        out: torch.Tensor = self.out(h.mean(dim=(2, 3)))
        return out


def fold_batch_norm(net: EncoderNet) -> EncoderNet:
    """A copy of ``net`` in eval mode with every ``Conv2d -> BatchNorm2d`` pair folded into
    one convolution: the same function (to float rounding), about twice as fast on a CPU,
    where batch norm over ``(N, C, H, W)`` costs as much as the convolution before it."""
    folded = copy.deepcopy(net).eval()
    for block in folded.trunk:
        assert isinstance(block, nn.Sequential)
        layers = list(block)
        kept: list[nn.Module] = []
        k = 0
        while k < len(layers):
            layer = layers[k]
            after = layers[k + 1] if k + 1 < len(layers) else None
            if isinstance(layer, nn.Conv2d) and isinstance(after, nn.BatchNorm2d):
                kept.append(fuse_conv_bn_eval(layer, after))
                k += 2
            else:
                kept.append(layer)
                k += 1
        block._modules.clear()
        for index, layer in enumerate(kept):
            block.add_module(str(index), layer)
    return folded


class NetEncode:
    """Images ``(N, C*H*W)`` -> the network's L2-normalised embedding ``(N, dim)``.

    A module-level callable (not a closure), so a fitted space pickles: a background job
    sends its geodesic, feature space included, to a child process.
    """

    def __init__(
        self, net: EncoderNet, shape: tuple[int, int, int], size: int, device: torch.device
    ) -> None:
        self.net = fold_batch_norm(net).to(device)
        for param in self.net.parameters():  # the convolutions' weights, as the inputs
            if param.dim() == 4:
                param.data = param.data.contiguous(memory_format=torch.channels_last)
        self.shape, self.size, self.device = shape, size, device
        digest = hashlib.blake2b(repr((shape, size)).encode(), digest_size=16)
        for name, value in self.net.state_dict().items():
            digest.update(name.encode())
            digest.update(value.detach().cpu().contiguous().numpy().tobytes())
        self.key = digest.hexdigest()

    #: ``__call__`` takes ``progress=`` (:meth:`geoviz.features.base.FittedFeatures.transform`)
    reports_progress = True

    def __call__(
        self, x: torch.Tensor, *, progress: Callable[[int], None] | None = None
    ) -> torch.Tensor:
        """Embeddings ``(N, dim)`` of the images ``x`` ``(N, C*H*W)``, each computed once
        per process (module docstring). ``progress(done)``: the images of ``x`` done so far
        (the remembered ones at once, then after each chunk of :data:`ENCODE_CHUNK`)."""
        x = x.detach().cpu().contiguous()
        rows = x.numpy().reshape(x.shape[0], -1)
        keys = [(self.key, hashlib.blake2b(r.tobytes(), digest_size=16).digest()) for r in rows]
        with _MEMO_LOCK:
            known = [_MEMO.get(k) for k in keys]
        todo = [i for i, z in enumerate(known) if z is None]
        if todo:
            known_already = len(keys) - len(todo)
            fresh = self._embed(
                x[todo],
                None if progress is None else (lambda done: progress(known_already + done)),
            )
            with _MEMO_LOCK:
                for i, z in zip(todo, fresh, strict=True):
                    known[i] = z
                    _MEMO[keys[i]] = z
                    _MEMO.move_to_end(keys[i])
                while len(_MEMO) > _MEMO_ROWS:
                    _MEMO.popitem(last=False)
        return torch.stack([z for z in known if z is not None])

    def _embed(
        self, x: torch.Tensor, progress: Callable[[int], None] | None = None
    ) -> torch.Tensor:
        out = []
        with torch.no_grad():
            for start in range(0, x.shape[0], ENCODE_CHUNK):
                chunk = x[start : start + ENCODE_CHUNK]
                count = chunk.shape[0]
                # a short last chunk is padded to ENCODE_CHUNK rows: with several threads the
                # convolutions' arithmetic depends on the batch size, and the memo needs an
                # image's embedding to be the same bits whatever batch computed it
                if count < ENCODE_CHUNK:
                    chunk = torch.cat(
                        [chunk, chunk.new_zeros(ENCODE_CHUNK - count, chunk.shape[1])]
                    )
                images = _to_rgb(chunk, self.shape, self.size)
                images = images.to(self.device).contiguous(memory_format=torch.channels_last)
                z = torch.nn.functional.normalize(self.net(images), dim=1).cpu()
                out.append(z[:count])
                if progress is not None:
                    progress(start + count)
        return torch.cat(out)


#: images per forward pass of :class:`NetEncode` (faster than larger chunks on a CPU core)
ENCODE_CHUNK = 64
#: images whose embeddings the process remembers (64 float32 each: ~20 MB at most)
_MEMO_ROWS = 60_000
_MEMO: OrderedDict[tuple[str, bytes], torch.Tensor] = OrderedDict()
_MEMO_LOCK = threading.Lock()


def encoder_input_shape(datasets: list[LabeledDataset]) -> tuple[int, int, int]:
    """The ``(C, H, W)`` the datasets share, checked to be grey or RGB images.

    Raises
    ------
    GeovizError
        Vectors, or images of another number of channels.
    """
    shape = datasets[0].image_shape
    if shape is None:
        raise GeovizError(
            "the encoder embeds images; these datasets are vectors (use pixels or pca)"
        )
    if shape[0] not in (1, 3):
        raise GeovizError(f"the encoder takes grey or RGB images, got {shape[0]} channels")
    return shape


def _to_rgb(x: torch.Tensor, shape: tuple[int, int, int], size: int) -> torch.Tensor:
    """``(N, C*H*W)`` features -> ``(N, 3, size, size)`` in ``[0, 1]``."""
    c, h, w = shape
    images = x.reshape(-1, c, h, w).to(torch.float32)
    if c == 1:
        images = images.expand(-1, 3, h, w)
    elif c != 3:
        raise GeovizError(f"the encoder takes grey or RGB images, got {c} channels")
    if (h, w) != (size, size):
        images = torch.nn.functional.interpolate(
            images, size=(size, size), mode="bilinear", antialias=(h > size), align_corners=False
        )
    return images.clamp(0.0, 1.0)


def augment(
    x: torch.Tensor,
    grey: torch.Tensor,
    gen: torch.Generator,
    styles: tuple[Style, ...] = DEFAULT_STYLES,
) -> torch.Tensor:
    """A random view of every image of ``x`` ``(N, 3, S, S)`` (see the module docstring).

    ``grey`` ``(N,)`` marks images that came in grey: 80 % of them are drawn in one of
    ``styles`` (:mod:`geoviz.data.styles`), the rest stay grey.
    """
    n, _, s, _ = x.shape
    dev = x.device

    def rand(*size: int) -> torch.Tensor:
        return torch.rand(*size, generator=gen).to(dev)

    out = x.clone()
    if bool(grey.any()) and styles:
        idx = torch.nonzero(grey).flatten()
        styled = render_mixed(x[idx, :1], styles, gen)
        keep = (rand(len(idx), 1, 1, 1) < 0.2).to(x.dtype)  # some stay grey
        out[idx] = keep * x[idx] + (1 - keep) * styled
    # colour: channel permutation and gains, grey, inversion
    perm = torch.stack([torch.randperm(3, generator=gen) for _ in range(n)]).to(dev)
    out = torch.gather(out, 1, perm[:, :, None, None].expand(-1, -1, s, s))
    out = (out * (0.6 + 0.8 * rand(n, 3, 1, 1))).clamp(0, 1)
    to_grey = (rand(n, 1, 1, 1) < 0.2).to(x.dtype)
    out = to_grey * out.mean(dim=1, keepdim=True).expand_as(out) + (1 - to_grey) * out
    invert = (rand(n, 1, 1, 1) < 0.2).to(x.dtype)
    out = invert * (1 - out) + (1 - invert) * out
    # geometry: scale, rotation, shift
    angle = (rand(n) - 0.5) * (math.pi / 9)
    scale = 0.65 + 0.7 * rand(n)  # USPS digits fill their frame, MNIST's a 20/28 box
    shift = (rand(n, 2) - 0.5) * 0.25
    cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
    theta = torch.stack(
        [torch.stack([cos, -sin, shift[:, 0]], 1), torch.stack([sin, cos, shift[:, 1]], 1)], 1
    )
    grid = torch.nn.functional.affine_grid(theta, list(out.shape), align_corners=False)
    return torch.nn.functional.grid_sample(out, grid, padding_mode="border", align_corners=False)


def _nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """SimCLR's loss: each view must pick its partner among the ``2N - 1`` other views."""
    z = torch.nn.functional.normalize(torch.cat([z1, z2]), dim=1)
    sim = z @ z.T / temperature
    n = z1.shape[0]
    sim.fill_diagonal_(float("-inf"))
    target = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return torch.nn.functional.cross_entropy(sim, target)


class EncoderSpace(FeatureSpace):
    """A small CNN trained on the union of the datasets (see the module docstring).

    Parameters
    ----------
    config
        :class:`EncoderConfig` or a preset name of :data:`ENCODER_PRESETS` (``"cpu"``).
    cache
        Disk cache of the fitted weights (default :func:`geoviz.backend.get_cache`;
        ``DiskCache(enabled=False)`` retrains every time).
    device
        ``None``: CUDA when available, else the CPU.
    """

    name = "encoder"

    def __init__(
        self,
        config: EncoderConfig | str = "cpu",
        *,
        cache: DiskCache | None = None,
        device: str | torch.device | None = None,
    ) -> None:
        if isinstance(config, str):
            if config not in ENCODER_PRESETS:
                raise GeovizError(
                    f"unknown encoder preset {config!r}: use one of {', '.join(ENCODER_PRESETS)}"
                )
            config = ENCODER_PRESETS[config]
        if not isinstance(config, EncoderConfig):
            raise GeovizError(f"config must be an EncoderConfig, got {type(config).__name__}")
        self.config = config
        self.cache = cache
        self.device = device

    def params(self) -> dict[str, Any]:
        return {"version": 3, **asdict(self.config)}

    def uses_labels(self, index: int) -> bool:
        labels = self.config.labels
        return labels == "all" or (labels == "references" and index > 0)

    def with_seed(self, seed: int) -> EncoderSpace:
        """The same space with another training seed."""
        return EncoderSpace(replace(self.config, seed=seed), cache=self.cache, device=self.device)

    def _fit(
        self, datasets: list[LabeledDataset], digest_: str, progress: Progress | None
    ) -> FittedFeatures:
        shape = encoder_input_shape(datasets)
        cache = self.cache if self.cache is not None else get_cache()
        cfg = self.config

        def load(payload: dict[str, Any]) -> EncoderNet:
            net = EncoderNet(cfg.width, cfg.dim)
            net.load_state_dict({k[4:]: v for k, v in payload.items() if k.startswith("net.")})
            return net

        payload = cache.get_or_compute(
            "feature_encoder",
            {"digest": digest_},
            lambda: train_encoder(datasets, cfg, device=self.device, progress=progress),
            expect={"train_seconds": float, "final_loss": float},
            check=load,  # weights of another shape (or missing) are a corrupt entry
        )
        net = load(payload)
        encode = NetEncode(net, shape, cfg.size, resolve_device(self.device))

        info = {
            "train_seconds": round(float(payload["train_seconds"]), 2),
            "final_loss": round(float(payload["final_loss"]), 4),
            "trained_on": int(payload["trained_on"]),
            "preset": next((k for k, v in ENCODER_PRESETS.items() if v == cfg), "custom"),
        }
        return FittedFeatures(
            name="encoder", digest=digest_, dim=cfg.dim, encode=encode, info=info, cache=cache
        )


def train_encoder(
    datasets: list[LabeledDataset],
    config: EncoderConfig,
    *,
    device: str | torch.device | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Train an :class:`EncoderNet` on ``datasets`` (one image shape) as ``config`` says.

    Which datasets' labels train a head follows ``config.labels`` (``"references"``: all but
    ``datasets[0]``). Returns the weights as ``"net.<name>"`` CPU tensors plus
    ``train_seconds``, ``final_loss`` and ``trained_on`` (images).
    """
    cfg = config
    shape = encoder_input_shape(datasets)
    device = resolve_device(device)
    gen = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    # the training set: up to max_per_dataset samples of each dataset
    xs, labels, heads = [], [], []
    labelled = [
        cfg.labels == "all" or (cfg.labels == "references" and i > 0) for i in range(len(datasets))
    ]
    # one head per set of class names: datasets with the same classes (MNIST and USPS
    # digits) share a classifier, so the trunk puts their classes in the same places
    head_of: dict[int, int] = {}
    head_classes: dict[tuple[str, ...], int] = {}
    for i, ds in enumerate(datasets):
        idx = torch.randperm(ds.n_samples, generator=gen)[: cfg.max_per_dataset]
        xs.append(_to_rgb(ds.features[idx], shape, cfg.size))
        if labelled[i]:
            head_of[i] = head_classes.setdefault(tuple(ds.classes), len(head_classes))
        labels.append(ds.labels[idx] if labelled[i] else torch.full((len(idx),), -1))
        heads.append(torch.full((len(idx),), head_of.get(i, -1)))
    x = torch.cat(xs)
    y = torch.cat(labels)
    head = torch.cat(heads)
    # grey samples (one channel, or three equal ones) get random backgrounds
    grey = (x.amax(dim=1) - x.amin(dim=1)).amax(dim=(1, 2)) < 1e-3
    n_classes = [len(names) for names in head_classes]
    net = EncoderNet(cfg.width, cfg.dim).to(device)
    classifier = nn.ModuleList([nn.Linear(cfg.dim, c) for c in n_classes]).to(device)
    params = list(net.parameters()) + list(classifier.parameters())
    opt = torch.optim.Adam(params, lr=cfg.lr)
    steps_per_epoch = max(1, len(x) // cfg.batch_size)
    total = cfg.epochs * steps_per_epoch
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
    start = time.perf_counter()
    step, loss_value = 0, float("nan")
    net.train()
    for epoch in range(cfg.epochs):
        order = torch.randperm(len(x), generator=gen)
        for b in range(steps_per_epoch):
            batch = order[b * cfg.batch_size : (b + 1) * cfg.batch_size]
            xb = x[batch].to(device)
            gb = grey[batch].to(device)
            v1 = augment(xb, gb, gen, cfg.styles)
            z1 = net(v1)
            loss = torch.zeros((), device=device)
            if cfg.supervised > 0 and head_of:
                yb, hb = y[batch].to(device), head[batch].to(device)
                for k in range(len(head_classes)):
                    mask = hb == k
                    if bool(mask.any()):
                        logits = classifier[k](z1[mask])
                        share = mask.float().mean()
                        loss = loss + cfg.supervised * share * nn.functional.cross_entropy(
                            logits, yb[mask]
                        )
            if cfg.contrastive > 0:
                z2 = net(augment(xb, gb, gen, cfg.styles))
                loss = loss + cfg.contrastive * _nt_xent(z1, z2, cfg.temperature)
            opt.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            sched.step()
            step += 1
            loss_value = float(loss.detach())
            if not math.isfinite(loss_value):
                raise GeovizError(
                    "the encoder's training diverged (loss is not finite); "
                    "try a smaller learning rate"
                )
            if progress is not None:
                progress(f"training the encoder (epoch {epoch + 1}/{cfg.epochs})", step / total)
    net.eval()
    state = {f"net.{k}": v.detach().cpu() for k, v in net.state_dict().items()}
    return {
        **state,
        "train_seconds": time.perf_counter() - start,
        "final_loss": loss_value,
        "trained_on": len(x),
    }
