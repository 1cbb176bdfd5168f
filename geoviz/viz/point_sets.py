"""Points of datasets prepared for plots, and the colours they are drawn in.

:class:`PointSet` (a dataset's points, class names, confidences, sample indices and
hover lines) is what :func:`geoviz.viz.scatter.scatter_sets` and
:func:`geoviz.viz.compare.side_by_side_scatter` draw; :func:`point_set` makes one from a
dataset, :func:`soft_label_summary` writes the top soft labels of each point.
:func:`color_map` and the palettes give every figure of :mod:`geoviz.viz` the same colours.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.express as px
import torch

from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError

__all__ = [
    "CLASS_PALETTE",
    "DATASET_PALETTE",
    "OTHER_COLOR",
    "SHOWN_MASS",
    "PointSet",
    "as_array",
    "color_map",
    "point_set",
    "soft_label_summary",
]

#: Colours of classes, in first-seen order (:func:`color_map`'s default).
CLASS_PALETTE: list[str] = px.colors.qualitative.Dark24 + px.colors.qualitative.Light24
#: Colours of datasets: ``Q`` (the first) near black, then Set1.
DATASET_PALETTE: list[str] = ["#222222", *px.colors.qualitative.Set1]
#: Colour of the classes merged into one "other" entry or bar.
OTHER_COLOR = "#b0b0b0"
#: Smallest soft-label mass listed in hovers and sample cards (below, it reads "0.00").
SHOWN_MASS = 0.005


def color_map(names: Sequence[str], palette: Sequence[str] | None = None) -> dict[str, str]:
    """Stable name -> colour assignment in first-seen order."""
    pal = list(palette or CLASS_PALETTE)
    out: dict[str, str] = {}
    for n in names:
        if n not in out:
            out[n] = pal[len(out) % len(pal)]
    return out


def as_array(x: torch.Tensor | np.ndarray) -> np.ndarray:
    """A tensor's values as a NumPy array (on the CPU); an array as it is."""
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


@dataclass(frozen=True)
class PointSet:
    """Points of one dataset prepared for a scatter plot.

    Attributes
    ----------
    name
        Dataset name (legend / symbol), as typed: the figures escape it
        (:func:`geoviz.viz.literal.plotly_name`) where they draw it.
    points
        ``(N, 2)`` or ``(N, 3)`` coordinates.
    labels
        ``N`` class names (hard label; argmax for soft labels), as typed.
    confidence
        ``(N,)`` mass of that class (1 for hard labels), shown on hover.
    indices
        ``(N,)`` index of each point in its dataset (shown on hover and sent
        back by a click, see :func:`geoviz.viz.scatter.selected_samples`); ``None`` means
        ``0..N-1``.
    hover
        ``N`` extra hover lines, e.g. the top soft labels of each point
        (:func:`soft_label_summary`), plain text; ``None`` for none.
    """

    name: str
    points: np.ndarray
    labels: tuple[str, ...]
    confidence: np.ndarray
    indices: np.ndarray | None = None
    hover: tuple[str, ...] | None = None

    def sample_indices(self) -> np.ndarray:
        """``(N,)`` int64 index of each point in its dataset (``0..N-1`` when unknown)."""
        if self.indices is None:
            return np.arange(len(self.labels), dtype=np.int64)
        idx = np.asarray(self.indices, dtype=np.int64).ravel()
        if idx.shape[0] != len(self.labels):
            raise DatasetError(f"{len(self.labels)} points but {idx.shape[0]} indices", self.name)
        return idx


def soft_label_summary(
    soft_labels: np.ndarray | torch.Tensor, class_names: Sequence[str], top: int = 3
) -> list[str]:
    """Per row, the ``top`` largest soft labels with their mass.

    ``"kmnist/tsu 0.62 · fashion_mnist/Bag 0.21 · usps/3 0.10"``; classes
    whose mass rounds to ``0.00`` are left out (the top one is always named).
    """
    s = as_array(soft_labels).astype(np.float64)
    if s.ndim != 2 or s.shape[1] != len(class_names):
        raise DatasetError(
            f"soft labels of shape {s.shape} do not match {len(class_names)} class names"
        )
    k = max(1, min(int(top), s.shape[1]))
    order = np.argsort(-s, axis=1, kind="stable")[:, :k]
    out = []
    for row, idx in zip(s, order, strict=True):
        parts = [
            f"{class_names[int(j)]} {row[j]:.2f}"
            for n, j in enumerate(idx)
            if n == 0 or row[j] >= SHOWN_MASS
        ]
        out.append(" · ".join(parts))
    return out


def point_set(
    ds: LabeledDataset | SoftLabeledDataset,
    points: np.ndarray | torch.Tensor | None = None,
    *,
    name: str | None = None,
    prefix_labels: bool = False,
    indices: np.ndarray | None = None,
) -> PointSet:
    """Make a :class:`PointSet` from a dataset (its own features, or given ``points``).

    ``prefix_labels`` writes hard labels as ``"name/class"`` so classes of
    different datasets never share a colour; soft-labelled sets already carry
    prefixed names. ``indices`` selects rows of the dataset (``points``, when
    given, are already those rows).

    The point set records each point's row in the dataset (``indices``, for
    hover and click selection) and, for soft-labelled sets, the top-3 soft
    labels with their mass as an extra hover line.
    """
    rows = slice(None) if indices is None else np.asarray(indices, dtype=np.int64).ravel()
    pts = as_array(ds.features[rows] if points is None else points).astype(np.float64)
    hover = None
    if isinstance(ds, SoftLabeledDataset):
        soft = as_array(ds.soft_labels)[rows]
        idx = soft.argmax(axis=1)
        labels = tuple(ds.class_names[int(k)] for k in idx)
        conf = soft[np.arange(len(idx)), idx]
        hover = tuple(soft_label_summary(soft, ds.class_names, top=3))
    else:
        y = as_array(ds.labels)[rows]
        labels = tuple(
            (f"{ds.name}/{ds.classes[int(k)]}" if prefix_labels else ds.classes[int(k)]) for k in y
        )
        conf = np.ones(len(y))
    if pts.shape[0] != len(labels):
        raise DatasetError(f"{pts.shape[0]} points but {len(labels)} labels", name or ds.name)
    sample_idx = (
        np.arange(len(labels), dtype=np.int64) if indices is None else np.asarray(rows).copy()
    )
    return PointSet(name or ds.name, pts, labels, conf, indices=sample_idx, hover=hover)
