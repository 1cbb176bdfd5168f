"""The default feature space: chosen from the data, with the reason said (issue 33).

When no space is named (``features="auto"``, the default everywhere), :func:`choose_space`
looks at the datasets of the problem (Q first, then the references, as they enter the fit)
and picks the space whose distances carry meaning for them:

=============================================== =========================================
the data                                        the space
=============================================== =========================================
vectors (no image shape)                        ``pixels``: the raw features
grey images of glyphs on a plain dark           ``box``: MNIST's own size normalisation
background (digits, letters, garments; every    (the digit box), then pixels: the space of
dataset)                                        the stored transfer study (Evidence page)
any other images: colour, textured, photos,     ``encoder``: the shipped pretrained encoder
inverted or light backgrounds                   (:mod:`.pretrained`), which learned shapes
                                                and ignores colour and background
=============================================== =========================================

A colour target whose lineage is one of the datasets whose labels trained the shipped
encoder (``usps``, ``fashion_mnist``, ``kmnist``) gets the encoder trained here on the
references (preset ``cpu``) instead, so the space never saw the target's labels. Without the
shipped weights (a stripped install) images fall back to ``pixels``, and the reason says so;
with damaged ones (:func:`~geoviz.features.pretrained.load_encoder`) they fall back too, and
the reason names the damaged file.

*Grey* means one channel, or three equal ones; a *plain dark background* means that, in
every dataset, the mean of the images' outer ring (a sixteenth of the side, at least one
pixel) is at most
:data:`DARK_BORDER` and at least :data:`DARK_SHARE` of all pixels are at most :data:`DARK_PIXEL` (values in
``[0, 1]``). Measured on the bundled samples as they come / at 32x32: border means MNIST
0.00 / 0.00, USPS 0.10 / 0.11, Fashion-MNIST 0.05 / 0.08, KMNIST 0.05 / 0.07, against 0.36
for the photo digits (``mnist_m``) and 0.49 for the textured ones (``mnist_tex``); dark
shares 0.53-0.83 against 0.00-0.13.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from geoviz.data.dataset import LabeledDataset
from geoviz.errors import AssetError, DamagedAssetError, GeovizError
from geoviz.features.pretrained import DEFAULT_ENCODER, labels_seen_for, load_encoder
from geoviz.vocabulary import AUTO

__all__ = [
    "AUTO",
    "DARK_BORDER",
    "DARK_PIXEL",
    "DARK_SHARE",
    "SpaceChoice",
    "choose_space",
    "dark_plain_background",
    "is_grey",
]


#: largest mean of the outer ring of a "plain dark background"
DARK_BORDER = 0.25

#: a pixel at most this bright is background
DARK_PIXEL = 0.1

#: least share of background pixels of a "plain dark background"
DARK_SHARE = 0.35

#: images examined per dataset (the first ones: the choice must not cost a pass over 60k)
_SAMPLE = 512

ChosenSpace = Literal["pixels", "box", "encoder"]


@dataclass(frozen=True)
class SpaceChoice:
    """The space :func:`choose_space` picked and why.

    Attributes
    ----------
    name
        ``"pixels"``, ``"box"`` or ``"encoder"``.
    encoder_preset
        ``"pretrained"`` (the shipped weights) or ``"cpu"`` (trained here on the
        references); meaningful for ``name="encoder"`` only.
    reason
        One sentence a user reads: what was seen in the data and what it implies.
    kind
        ``"vectors"``, ``"grey glyphs"`` or ``"images"``: what the data looked like.
    """

    name: ChosenSpace
    encoder_preset: str
    reason: str
    kind: Literal["vectors", "grey glyphs", "images"]

    @property
    def label(self) -> str:
        """The space in words: ``"digit box"``, ``"pretrained encoder"``, ``"raw features"``."""
        if self.name == "box":
            return "digit box"
        if self.name == "encoder":
            return "pretrained encoder" if self.encoder_preset == "pretrained" else "encoder"
        return "raw features" if self.kind == "vectors" else "pixels"

    def as_dict(self) -> dict[str, str]:
        """JSON-able record for manifests."""
        return {
            "chosen_by": AUTO,
            "space": self.name,
            "encoder_preset": self.encoder_preset,
            "kind": self.kind,
            "reason": self.reason,
        }


def _images(ds: LabeledDataset) -> torch.Tensor:
    assert ds.image_shape is not None
    c, h, w = ds.image_shape
    return ds.features[:_SAMPLE].reshape(-1, c, h, w).to(torch.float32)


def is_grey(ds: LabeledDataset) -> bool:
    """One channel, or three equal ones (to 1e-3), in the examined images."""
    if ds.image_shape is None:
        return False
    x = _images(ds)
    return x.shape[1] == 1 or bool(((x.amax(dim=1) - x.amin(dim=1)) < 1e-3).all())


def dark_plain_background(ds: LabeledDataset) -> bool:
    """Glyph-like: a dark outer ring and a mostly dark image (see the module docstring)."""
    if ds.image_shape is None:
        return False
    x = _images(ds).mean(dim=1)  # (N, H, W)
    h, w = x.shape[1:]
    ring = max(1, min(h, w) // 16)  # 1 px on USPS's 16x16, 2 px on 32x32
    if min(h, w) < 4:
        return False
    mask = torch.ones(h, w, dtype=torch.bool)
    mask[ring : h - ring, ring : w - ring] = False
    border = float(x[:, mask].mean())
    dark_share = float((x <= DARK_PIXEL).float().mean())
    return border <= DARK_BORDER and dark_share >= DARK_SHARE


def choose_space(datasets: Sequence[LabeledDataset]) -> SpaceChoice:
    """The feature space for Q (``datasets[0]``) and the references (the rest).

    Raises
    ------
    GeovizError
        No datasets.
    """
    datasets = list(datasets)
    if not datasets:
        raise GeovizError("choosing a feature space needs at least one dataset")
    if any(ds.image_shape is None for ds in datasets):
        return SpaceChoice(
            "pixels",
            "pretrained",
            "the datasets are vectors, so distances are computed on their raw features",
            "vectors",
        )
    if all(is_grey(ds) and dark_plain_background(ds) for ds in datasets):
        return SpaceChoice(
            "box",
            "pretrained",
            "every dataset is grey glyphs on a plain dark background, so images are aligned "
            "by MNIST's own size normalisation (the digit box) before pixel distances, the "
            "space of the stored transfer study",
            "grey glyphs",
        )
    target = datasets[0]
    looks = "colour" if not all(is_grey(ds) for ds in datasets) else "not plain dark-background"
    try:
        # the whole asset, weights included: a damaged one is said here, not at the fit
        encoder = load_encoder(DEFAULT_ENCODER)
    except DamagedAssetError as err:
        return SpaceChoice(
            "pixels",
            "pretrained",
            f"the images are {looks}, but {err}; until then distances are on pixels, which "
            "mostly measure colour and background",
            "images",
        )
    except AssetError:
        return SpaceChoice(
            "pixels",
            "pretrained",
            f"the images are {looks}, but the shipped encoder is not installed "
            f"(assets/encoders/{DEFAULT_ENCODER}.npz), so distances are on pixels, which "
            "mostly measure colour and background",
            "images",
        )
    seen = labels_seen_for(target, DEFAULT_ENCODER)
    if seen:
        return SpaceChoice(
            "encoder",
            "cpu",
            f"the images are {looks}; the shipped encoder learned the labels of "
            f"{', '.join(seen)}, the target's own data, so an encoder is trained here on the "
            "references only (a few minutes, then cached)",
            "images",
        )
    trained = ", ".join(encoder.manifest.get("labels_from", []))
    return SpaceChoice(
        "encoder",
        "pretrained",
        f"the images are {looks}, so they are embedded by the shipped encoder (trained on "
        f"{trained} glyphs in many colour styles), whose distances follow shape, not colour "
        "or background",
        "images",
    )
