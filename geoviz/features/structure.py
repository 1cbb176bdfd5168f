"""How much class structure a feature space carries for the datasets of a problem (issue 42).

The measurements behind the default space (:func:`geoviz.features.choice.choose_space`), on a
small deterministic stratified subsample of every dataset (:data:`SAMPLE` per dataset, seed
:data:`SAMPLE_SEED`, whatever the user's seed):

* **Q's class structure**: leave-one-out :data:`K_NEIGHBOURS`-NN accuracy inside Q, as the
  chance-corrected kappa ``(acc - 1/C) / (1 - 1/C)`` (:func:`loo_knn_kappa`); for a few-shot
  Q, leave-one-out 1-NN among its labelled points only;
* **agreement** with a reference that has Q's class names: 1-NN from Q into it, as kappa
  (:func:`agreement_kappa`);
* **AMI** between Q's labels and the labels of Q's nearest reference points, for every
  reference (:func:`nearest_ami`; about 0 for unrelated labels at any size).

A space whose weights learned a reference's labels (the shipped encoder, its manifest's
``labels_from``) scores inflated on it: such references are recorded as *unclean* and kept
out of every comparison (:func:`choose_measured`).

The rule and its thresholds come from the measured table of ``bench_space_choice.py``
(``benchmarks/README.md``, "bench_space_choice.py — how much class structure each candidate
space carries"): seed-to-seed SD of a Q kappa 0.03 (at most 0.06), unrelated references at
AMI 0.12-0.22, related ones at 0.58-0.65 (box / encoder on usps).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from geoviz.data.dataset import LabeledDataset
from geoviz.data.preprocess import stratified_subsample
from geoviz.features.base import FittedFeatures

__all__ = [
    "AMI_DROP",
    "CANDIDATE_ORDER",
    "ENCODER_BELOW",
    "KEEP_WITHIN",
    "K_NEIGHBOURS",
    "NO_STRUCTURE",
    "RELATED_AGREEMENT",
    "RELATED_AMI",
    "SAMPLE",
    "SAMPLE_SEED",
    "SpaceMeasure",
    "SpaceName",
    "adjusted_mutual_info",
    "agreement_kappa",
    "choose_measured",
    "flags_of",
    "kappa",
    "loo_knn_kappa",
    "measure_space",
    "measurement_sample",
    "nearest_ami",
]

#: a candidate space (``natural``: the ImageNet encoder, :mod:`geoviz.features.natural`)
SpaceName = Literal["pixels", "box", "encoder", "natural"]

# Thresholds of the rule, from the measured table in benchmarks/README.md
# (bench_space_choice.py, issue 42 item 1).

#: samples per dataset measured (stratified; at 100 the readings flip between seeds)
SAMPLE = 200

#: seed of the measured subsample: fixed, independent of the user's seed
SAMPLE_SEED = 0

#: neighbours of Q's leave-one-out vote
K_NEIGHBOURS = 5

#: spaces whose Q kappa is within this of the best are kept (seed SD 0.03, at most 0.06)
KEEP_WITHIN = 0.15

#: a kept space whose AMI into a clean reference is this much below another kept space's is
#: dropped (pixels vs box on mnist -> usps: 0.14 vs 0.58)
AMI_DROP = 0.15

#: the shipped encoder is measured (its pass costs more than the 10 % of a cold default run
#: on grey digits) only when the best of pixels / box keeps Q's classes below this kappa
ENCODER_BELOW = 0.6

#: below this best Q kappa no space shows class structure in Q (shuffled labels: -0.03)
NO_STRUCTURE = 0.2

#: a reference with Q's class names is related when Q's 1-NN agreement kappa reaches this
RELATED_AGREEMENT = 0.3

#: ... and any reference is related when its AMI reaches this (unrelated: 0.12-0.22)
RELATED_AMI = 0.4

#: the candidates from cheapest to dearest: ties go to the first, except between the two
#: pretrained networks (``encoder``, ``natural``: a forward pass each), where the one that
#: measured more class structure in Q is taken (photos never get the glyph encoder because
#: it is listed first)
CANDIDATE_ORDER = ("pixels", "box", "encoder", "natural")

#: the candidates of one cost: among them the higher Q kappa wins
_NETWORKS = ("encoder", "natural")


def kappa(accuracy: float, n_classes: int) -> float:
    """Chance-corrected accuracy ``(acc - 1/C) / (1 - 1/C)``: 1 perfect, about 0 chance."""
    if n_classes < 2:
        return 0.0
    return (accuracy - 1.0 / n_classes) / (1.0 - 1.0 / n_classes)


def _distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.cdist(a.to(torch.float64), b.to(torch.float64))


def _present(labels: torch.Tensor) -> int:
    return int(torch.unique(labels).numel())


def loo_knn_kappa(z: torch.Tensor, labels: torch.Tensor, k: int = K_NEIGHBOURS) -> float:
    """Kappa of leave-one-out ``k``-NN accuracy inside ``z`` (majority vote, a tie to the
    nearer neighbour), over the classes present."""
    n = len(labels)
    if n < 2:
        return 0.0
    d = _distances(z, z)
    d.fill_diagonal_(float("inf"))
    k = min(k, n - 1)
    nn = d.topk(k, largest=False).indices  # nearest first
    y = labels.to(torch.long)
    votes = torch.zeros(n, int(y.max()) + 1, dtype=torch.float64)
    # a tie goes to the nearer neighbours: powers of two, so no two sets of neighbours weigh
    # the same and the vote never depends on how the classes are numbered
    tie = 1.0 + 1e-6 * 2.0 ** -torch.arange(k, dtype=torch.float64).expand(n, k)
    votes.scatter_add_(1, y[nn], tie)
    accuracy = float((votes.argmax(1) == y).double().mean())
    return kappa(accuracy, _present(y))


def _nearest(zq: torch.Tensor, zr: torch.Tensor) -> np.ndarray:
    return _distances(zq, zr).argmin(dim=1).numpy()


def agreement_kappa(
    zq: torch.Tensor, q_names: Sequence[str], zr: torch.Tensor, r_names: Sequence[str]
) -> float:
    """Kappa of 1-NN agreement from Q into a reference: the share of Q whose nearest
    reference point has Q's class name (``q_names`` / ``r_names``: one name per point)."""
    nn = _nearest(zq, zr)
    same = np.asarray(q_names, dtype=object) == np.asarray(r_names, dtype=object)[nn]
    return kappa(float(np.mean(same)), len(set(r_names)))


def adjusted_mutual_info(a: np.ndarray, b: np.ndarray) -> float:
    """Adjusted mutual information of two labelings (arithmetic normalisation, as
    scikit-learn's ``adjusted_mutual_info_score``, whose import alone costs a second): 1 for
    the same partition, about 0 for independent ones."""
    _, ia = np.unique(np.asarray(a), return_inverse=True)
    _, ib = np.unique(np.asarray(b), return_inverse=True)
    n = len(ia)
    table = np.zeros((int(ia.max(initial=0)) + 1, int(ib.max(initial=0)) + 1))
    np.add.at(table, (ia, ib), 1.0)
    if n == 0 or (table.shape[0] == 1 and table.shape[1] == 1):
        return 1.0
    rows, cols = table.sum(1), table.sum(0)
    nz = table > 0
    mi = float(np.sum(table[nz] / n * np.log(n * table[nz] / np.outer(rows, cols)[nz])))

    def entropy(counts: np.ndarray) -> float:
        p = counts[counts > 0] / n
        return float(-np.sum(p * np.log(p)))

    # expected MI under the hypergeometric model (Vinh, Epps & Bailey 2010)
    ai = torch.as_tensor(rows, dtype=torch.float64)[:, None, None]
    bj = torch.as_tensor(cols, dtype=torch.float64)[None, :, None]
    nij = torch.arange(1, int(max(rows.max(), cols.max())) + 1, dtype=torch.float64)
    nij = nij[None, None, :]
    valid = (nij >= ai + bj - n) & (nij <= torch.minimum(ai, bj))
    lg = torch.lgamma
    log_p = (
        lg(ai + 1)
        + lg(bj + 1)
        + lg(n - ai + 1)
        + lg(n - bj + 1)
        - lg(torch.tensor(n + 1.0))
        - lg(nij + 1)
        - lg((ai - nij).clamp(min=0) + 1)
        - lg((bj - nij).clamp(min=0) + 1)
        - lg((n - ai - bj + nij).clamp(min=0) + 1)
    )
    terms = nij / n * (torch.log(n * nij) - torch.log(ai * bj)) * torch.exp(log_p)
    emi = float(torch.where(valid, terms, torch.zeros(())).sum())
    denominator = 0.5 * (entropy(rows) + entropy(cols)) - emi
    eps = float(np.finfo(np.float64).eps)
    denominator = min(denominator, -eps) if denominator < 0 else max(denominator, eps)
    return (mi - emi) / denominator


def nearest_ami(
    zq: torch.Tensor, q_labels: torch.Tensor, zr: torch.Tensor, r_labels: torch.Tensor
) -> float:
    """Adjusted mutual information between Q's labels and the labels of Q's nearest
    reference points (any class names; about 0 when unrelated)."""
    nn = _nearest(zq, zr)
    return adjusted_mutual_info(q_labels.numpy(), r_labels.numpy()[nn])


def measurement_sample(ds: LabeledDataset) -> LabeledDataset:
    """The measured subsample of ``ds``: :data:`SAMPLE` stratified, seed :data:`SAMPLE_SEED`."""
    if ds.n_samples <= SAMPLE or _present(ds.labels) > SAMPLE:
        return ds
    return stratified_subsample(ds, SAMPLE, SAMPLE_SEED)


@dataclass(frozen=True)
class SpaceMeasure:
    """What one candidate space measured.

    Attributes
    ----------
    space
        ``"pixels"``, ``"box"``, ``"encoder"`` or ``"natural"``.
    q_kappa
        Q's class structure (kappa, see :attr:`q_score`); ``None``: not measured.
    q_score
        ``"5-NN"`` (leave-one-out over Q's sample) or ``"labelled 1-NN"`` (few-shot).
    agreement
        ``(reference, kappa)`` of 1-NN agreement, for references with Q's class names.
    ami
        ``(reference, AMI)`` for every reference.
    unclean
        References whose labels the space learned: their scores are not compared.
    seconds
        Wall time of the fit, the transforms and the measurements.
    sizes
        Samples measured: Q's (its labelled points when few-shot), then each reference's.
    note
        Why it was not measured, or why its references were not, when so.
    """

    space: SpaceName
    q_kappa: float | None
    q_score: str = "5-NN"
    agreement: tuple[tuple[str, float], ...] = ()
    ami: tuple[tuple[str, float], ...] = ()
    unclean: tuple[str, ...] = ()
    seconds: float = 0.0
    note: str | None = None
    sizes: tuple[int, ...] = ()

    def clean_ami(self) -> dict[str, float]:
        return {name: v for name, v in self.ami if name not in self.unclean}

    def clean_agreement(self) -> dict[str, float]:
        return {name: v for name, v in self.agreement if name not in self.unclean}

    def as_dict(self) -> dict[str, Any]:
        """JSON-able record for manifests."""
        return {
            "space": self.space,
            "q_kappa": None if self.q_kappa is None else round(self.q_kappa, 4),
            "q_score": self.q_score,
            "agreement_kappa": {n: round(v, 4) for n, v in self.agreement},
            "ami": {n: round(v, 4) for n, v in self.ami},
            "labels_learned": list(self.unclean),
            "seconds": round(self.seconds, 3),
            "samples": list(self.sizes),
            "note": self.note,
        }


def measure_space(
    space: SpaceName,
    fit: Any,
    q: LabeledDataset,
    refs: Sequence[LabeledDataset],
    *,
    unclean: Sequence[str] = (),
    few_shot: bool = False,
    relate_from: float | None = None,
) -> SpaceMeasure:
    """Measure ``space`` on the sampled ``q`` and ``refs``.

    ``fit`` is a callable ``fit(datasets) -> FittedFeatures`` (the space's ``fit``);
    ``few_shot``: ``q`` holds Q's labelled points only, and Q's score is their leave-one-out
    1-NN kappa. ``relate_from``: the references are embedded and related to Q only when Q's
    kappa reaches it (the best kappa measured so far less :data:`KEEP_WITHIN`: below, the
    space cannot be kept by :func:`choose_measured`, whatever its relations), which spares a
    network's pass over them.
    """
    start = time.perf_counter()
    fitted: FittedFeatures = fit([q, *refs])
    zq = fitted.transform(q).features
    q_score = "labelled 1-NN" if few_shot else f"{K_NEIGHBOURS}-NN"
    q_kappa = loo_knn_kappa(zq, q.labels, 1 if few_shot else K_NEIGHBOURS)
    if relate_from is not None and q_kappa < relate_from:
        note = (
            f"the references were not embedded: Q's κ {q_kappa:.2f} is below "
            f"{relate_from:.2f}, more than {KEEP_WITHIN} below the best"
        )
        seconds = time.perf_counter() - start
        return SpaceMeasure(
            space, q_kappa, q_score, (), (), tuple(unclean), seconds, note, (q.n_samples,)
        )
    q_names = [q.classes[int(i)] for i in q.labels]
    agreement, ami = [], []
    for ref in refs:
        nn = _nearest(zq, fitted.transform(ref).features)  # once for both relations
        if set(q.classes) <= set(ref.classes):
            r_names = np.asarray(ref.classes, dtype=object)[ref.labels.numpy()[nn]]
            same = float(np.mean(np.asarray(q_names, dtype=object) == r_names))
            agreement.append((ref.name, kappa(same, _present(ref.labels))))
        ami.append((ref.name, adjusted_mutual_info(q.labels.numpy(), ref.labels.numpy()[nn])))
    return SpaceMeasure(
        space,
        q_kappa,
        q_score,
        tuple(agreement),
        tuple(ami),
        tuple(unclean),
        time.perf_counter() - start,
        sizes=(q.n_samples, *(ref.n_samples for ref in refs)),
    )


def choose_measured(measures: Sequence[SpaceMeasure]) -> SpaceMeasure:
    """The rule: keep the spaces within :data:`KEEP_WITHIN` of the best Q kappa; drop a kept
    space whose AMI into some reference (clean in both) is :data:`AMI_DROP` or more below
    another kept space's; of the rest, the cheapest (:data:`CANDIDATE_ORDER`; of the two
    pretrained networks, the one with the higher Q kappa).

    ``measures`` holds at least one measured space (``q_kappa`` not ``None``).
    """
    measured = [m for m in measures if m.q_kappa is not None]
    best = max(float(m.q_kappa or 0.0) for m in measured)
    kept = [m for m in measured if float(m.q_kappa or 0.0) >= best - KEEP_WITHIN]

    def beaten(m: SpaceMeasure) -> bool:
        mine = m.clean_ami()
        for other in kept:
            theirs = other.clean_ami()
            if other is not m and any(
                theirs[r] - v >= AMI_DROP for r, v in mine.items() if r in theirs
            ):
                return True
        return False

    rest = [m for m in kept if not beaten(m)] or kept

    def cost(m: SpaceMeasure) -> tuple[int, float]:
        if m.space in _NETWORKS:
            return CANDIDATE_ORDER.index(_NETWORKS[0]), -float(m.q_kappa or 0.0)
        return CANDIDATE_ORDER.index(m.space), 0.0

    return min(rest, key=cost)


def flags_of(chosen: SpaceMeasure, best_kappa: float) -> tuple[bool, bool]:
    """``(no class structure, references unrelated)`` in the chosen space: the best Q kappa
    below :data:`NO_STRUCTURE`; no clean reference with Q's names reaching 1-NN kappa
    :data:`RELATED_AGREEMENT` and none reaching AMI :data:`RELATED_AMI` (not judged when
    every reference is unclean)."""
    no_structure = best_kappa < NO_STRUCTURE
    agreement, ami = chosen.clean_agreement(), chosen.clean_ami()
    unrelated = bool(ami) and (
        all(v < RELATED_AGREEMENT for v in agreement.values())
        and all(v < RELATED_AMI for v in ami.values())
    )
    return no_structure, unrelated
