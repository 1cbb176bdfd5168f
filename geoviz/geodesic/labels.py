"""The concatenated label space of a generalized geodesic (paper Sec. 3.2).

Datasets may have different numbers of classes and unrelated label sets, so a
convex combination of labels cannot add label vectors directly. Following the
paper ("Convex combination in dataset space"), every reference ``P_i`` with
``C_i`` classes gets its own block of the concatenated space
``[P_1 classes | P_2 classes | ... | P_m classes]`` of size ``K = sum_i C_i``,
and a label ``y_i`` of ``P_i`` is padded with zeros to

    y~_i = [0_{C_1}; ...; y_i; ...; 0_{C_m}]   (K,)

so that ``y_a = sum_i a_i y~_i``. Class names in that space are prefixed by their
dataset, ``"<dataset name>/<class>"``; duplicate dataset names are made unique
(``"mnist"``, ``"mnist#2"``) so that the prefixes, and hence the blocks, stay
distinguishable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from geoviz.data.dataset import LabeledDataset
from geoviz.errors import DatasetError

__all__ = ["LabelSpace", "label_space", "pad_labels", "unique_names"]


def unique_names(names: Sequence[str]) -> tuple[str, ...]:
    """Make dataset names unique while keeping the first occurrence unchanged.

    The ``k``-th repeat of ``name`` becomes ``"name#k"`` (``k = 2, 3, ...``),
    skipping any candidate that is already taken by another input name.

    Examples
    --------
    >>> unique_names(["mnist", "usps", "mnist", "mnist"])
    ('mnist', 'usps', 'mnist#2', 'mnist#3')
    >>> unique_names(["a", "a", "a#2"])
    ('a', 'a#3', 'a#2')
    """
    names = [str(n) for n in names]
    taken = set(names)
    seen: set[str] = set()
    out: list[str] = []
    for name in names:
        if name not in seen:
            seen.add(name)
            out.append(name)
            continue
        k = 2
        while f"{name}#{k}" in taken:
            k += 1
        new = f"{name}#{k}"
        taken.add(new)
        seen.add(new)
        out.append(new)
    return tuple(out)


@dataclass(frozen=True)
class LabelSpace:
    """Block layout of the concatenated label space ``[P_1 | ... | P_m]``.

    Attributes
    ----------
    dataset_names
        ``m`` unique dataset names (see :func:`unique_names`).
    class_names
        ``K = sum_i C_i`` names ``"<dataset>/<class>"`` in block order.
    block_slices
        ``m`` slices: block ``i`` is ``class_names[block_slices[i]]``.
    """

    dataset_names: tuple[str, ...]
    class_names: tuple[str, ...]
    block_slices: tuple[slice, ...]

    @property
    def n_blocks(self) -> int:
        return len(self.block_slices)

    @property
    def size(self) -> int:
        """``K``, the dimension of the concatenated space."""
        return len(self.class_names)

    def block_size(self, i: int) -> int:
        s = self.block_slices[i]
        return int(s.stop - s.start)

    def pad(self, i: int, labels: torch.Tensor) -> torch.Tensor:
        """Embed ``(N, C_i)`` labels of dataset ``i`` into ``(N, K)`` (zeros elsewhere)."""
        return pad_labels(labels, self.block_slices[i], self.size)

    def combine(self, labels: Sequence[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
        """``sum_i a_i y~_i`` for per-dataset labels ``labels[i]`` of shape ``(N, C_i)``.

        Because the blocks do not overlap this is the concatenation
        ``[a_1 y_1 | ... | a_m y_m]`` of shape ``(N, K)``.
        """
        if len(labels) != self.n_blocks or len(weights) != self.n_blocks:
            raise ValueError(
                f"expected {self.n_blocks} label blocks and weights, got {len(labels)} and {len(weights)}"
            )
        parts = []
        for i, (lab, w) in enumerate(zip(labels, weights, strict=True)):
            if lab.ndim != 2 or lab.shape[1] != self.block_size(i):
                raise ValueError(
                    f"labels of block {i} ({self.dataset_names[i]!r}) must have shape (N, "
                    f"{self.block_size(i)}), got {tuple(lab.shape)}"
                )
            parts.append(lab * float(w))
        return torch.cat(parts, dim=1)


def label_space(
    datasets: Sequence[LabeledDataset] | Sequence[tuple[str, Sequence[str]]],
) -> LabelSpace:
    """Concatenated label space of ``datasets`` (paper Sec. 3.2).

    Parameters
    ----------
    datasets
        Either :class:`~geoviz.data.dataset.LabeledDataset` objects or
        ``(name, classes)`` pairs, in block order.

    Returns
    -------
    LabelSpace
        With names ``"<unique dataset name>/<class>"`` and one slice per dataset.
    """
    pairs: list[tuple[str, tuple[str, ...]]] = []
    for ds in datasets:
        if isinstance(ds, LabeledDataset):
            pairs.append((ds.name, ds.classes))
        else:
            name, classes = ds
            pairs.append((str(name), tuple(str(c) for c in classes)))
    if not pairs:
        raise DatasetError("a label space needs at least one dataset")
    names = unique_names([p[0] for p in pairs])
    class_names: list[str] = []
    slices: list[slice] = []
    start = 0
    for name, (_, classes) in zip(names, pairs, strict=True):
        if len(classes) == 0:
            raise DatasetError(f"dataset {name!r} has no classes")
        class_names.extend(f"{name}/{c}" for c in classes)
        slices.append(slice(start, start + len(classes)))
        start += len(classes)
    return LabelSpace(tuple(names), tuple(class_names), tuple(slices))


def pad_labels(labels: torch.Tensor, block: slice, total: int) -> torch.Tensor:
    """Zero-pad ``(N, C)`` labels into columns ``block`` of an ``(N, total)`` matrix.

    Parameters
    ----------
    labels
        ``(N, C)`` soft or one-hot labels with ``C == block.stop - block.start``.
    block
        Target columns.
    total
        ``K``, the width of the padded matrix.
    """
    width = int(block.stop - block.start)
    if labels.ndim != 2 or labels.shape[1] != width:
        raise ValueError(f"labels must have shape (N, {width}), got {tuple(labels.shape)}")
    if block.start < 0 or block.stop > total:
        raise ValueError(f"block {block} does not fit in {total} columns")
    out = labels.new_zeros((labels.shape[0], total))
    out[:, block] = labels
    return out
