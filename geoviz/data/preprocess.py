"""Preprocessing shared by every experiment: harmonising, features, subsampling.

* :func:`harmonize` brings several image datasets to one ``(C, size, size)``
  shape so that OTDD between them (paper Sec. 3.1) is defined on a common
  feature space; vector datasets must already share their dimension.
* :class:`PCAFeatures` is the default :class:`FeatureExtractor`: a PCA fitted on
  the *union* of the target and the references, so that all of them live in the
  same low-dimensional coordinates.
* :func:`stratified_subsample` draws a seeded, class-proportional subset.
* :func:`few_shot` builds the few-shot target of the transfer-learning
  experiments (paper Sec. 4.2 and Sec. 5.2, Table 2): ``k`` labelled examples per
  class (:func:`few_shot_picks`), the other samples pseudo-labelled from them
  (:mod:`geoviz.data.pseudo_labels`: label spreading on ``Q``'s kNN graph by default,
  or the labelled points' kNN vote).

All functions return new :class:`~geoviz.data.dataset.LabeledDataset` objects
and never modify their inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from geoviz import limits, memory
from geoviz.data.dataset import LabeledDataset
from geoviz.data.pseudo_labels import PSEUDO_LABEL_METHODS, PseudoLabelMethod, pseudo_labels
from geoviz.errors import DatasetError, GeovizError
from geoviz.vocabulary import ChannelMode

#: ITU-R BT.601 luma weights used to turn RGB into grey.
LUMA_WEIGHTS: tuple[float, float, float] = (0.299, 0.587, 0.114)

_RESIZE_BATCH = 4096


def _src(ds: LabeledDataset) -> str:
    return ds.source or ds.name


# --------------------------------------------------------------------------- harmonize


def _resize_images(images: torch.Tensor, size: int) -> torch.Tensor:
    """``(N, C, H, W)`` -> ``(N, C, size, size)`` (bilinear, antialiased), in batches."""
    out = []
    for start in range(0, images.shape[0], _RESIZE_BATCH):
        batch = images[start : start + _RESIZE_BATCH]
        out.append(
            torch.nn.functional.interpolate(
                batch, size=(size, size), mode="bilinear", antialias=True, align_corners=False
            )
        )
    return torch.cat(out, dim=0)


def harmonize(
    datasets: Sequence[LabeledDataset],
    *,
    size: int | None = 32,
    channels: ChannelMode = "auto",
) -> list[LabeledDataset]:
    """Bring datasets to one common feature space.

    Image datasets are resized to ``(size, size)`` with antialiased bilinear
    interpolation (``torch.nn.functional.interpolate``) and converted to a
    common number of channels; values are clamped to ``[0, 1]``. A dataset that
    already has the target shape is returned unchanged (same fingerprint).

    Parameters
    ----------
    datasets
        One or more datasets, either all images (``image_shape`` set, 1 or 3
        channels) or all vectors.
    size
        Output height and width of images, in
        ``[geoviz.limits.MIN_IMAGE_SIZE, geoviz.limits.MAX_IMAGE_SIZE]`` = ``[4, 128]``;
        ``None`` keeps the sizes, which then must already agree. Ignored for vector
        datasets. The memory of the new features is checked
        (:func:`geoviz.memory.check_bytes`) before any image is resized.
    channels
        ``"auto"``: 3 channels if any dataset is colour (grey images are
        repeated), else 1. ``"grey"``: colour images become grey with the luma
        weights :data:`LUMA_WEIGHTS`. ``"rgb"``: every dataset gets 3 channels.

    Returns
    -------
    list of LabeledDataset
        In the input order, with ``image_shape == (C, size, size)`` for images,
        or the (unchanged) vector datasets when they all share ``D``.

    Raises
    ------
    DatasetError
        Empty input, images mixed with vectors, vectors of different
        dimensions, images with other than 1 or 3 channels, differing image
        sizes with ``size=None``, or an invalid ``size``/``channels``.
    ResourceError
        The harmonized features would not fit in this process's memory.
    """
    datasets = list(datasets)
    if not datasets:
        raise DatasetError("harmonize needs at least one dataset")
    if channels not in ("auto", "grey", "rgb"):
        raise DatasetError(f"channels must be 'auto', 'grey' or 'rgb', got {channels!r}")
    size = _check_size(size)

    images = [ds for ds in datasets if ds.is_image]
    if images and len(images) != len(datasets):
        kinds = ", ".join(
            f"{ds.name} ({'images' if ds.is_image else 'vectors'})" for ds in datasets
        )
        raise DatasetError(f"cannot mix image and vector datasets: {kinds}")

    if not images:
        dims = {ds.n_features for ds in datasets}
        if len(dims) > 1:
            detail = ", ".join(f"{ds.name}: D={ds.n_features}" for ds in datasets)
            raise DatasetError(f"vector datasets must share their dimension, got {detail}")
        return datasets

    _check_image_shapes(datasets, size)
    if channels == "grey":
        out_c = 1
    elif channels == "rgb":
        out_c = 3
    else:
        out_c = 3 if any(ds.image_shape[0] == 3 for ds in datasets) else 1
    _check_harmonize_memory(datasets, out_c, size)
    return [_harmonize_images(ds, out_c, size) for ds in datasets]


def _check_size(size: int | None) -> int | None:
    """``size`` as an int within the image-size limits, or ``None``."""
    if size is None:
        return None
    if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 1:
        raise DatasetError(f"size must be a positive integer or None, got {size!r}")
    return limits.check_int(
        size,
        "image size",
        limits.MIN_IMAGE_SIZE,
        limits.MAX_IMAGE_SIZE,
        why="pixels per side; the features of N images take N x C x size^2 x 4 bytes",
        error=DatasetError,
    )


def _check_image_shapes(datasets: Sequence[LabeledDataset], size: int | None) -> None:
    """1 or 3 channels each; one height and width for all when ``size`` is ``None``."""
    for ds in datasets:
        if ds.image_shape[0] not in (1, 3):
            raise DatasetError(
                f"images must have 1 (grey) or 3 (RGB) channels, got {ds.image_shape[0]}", _src(ds)
            )
    if size is None:
        hw = {tuple(ds.image_shape[1:]) for ds in datasets}
        if len(hw) > 1:
            detail = ", ".join(
                f"{ds.name}: {ds.image_shape[1]}x{ds.image_shape[2]}" for ds in datasets
            )
            raise DatasetError(f"image sizes differ ({detail}); pass size=... to resize them")


def _check_harmonize_memory(
    datasets: Sequence[LabeledDataset], out_c: int, size: int | None
) -> None:
    """Refuse a harmonization whose new features cannot fit, before allocating any of it.

    Every changed dataset gets a new float32 feature matrix, and the resize works on
    batches of ``_RESIZE_BATCH`` images (input, resized and clamped copies).
    """
    needed = temporaries = 0
    for ds in datasets:
        c, h, w = ds.image_shape
        out_pixels = out_c * (h * w if size is None else size * size)
        if (c, h, w) != (out_c, h, w) or (size is not None and (h, w) != (size, size)):
            needed += 4 * ds.n_samples * out_pixels
            batch = min(_RESIZE_BATCH, ds.n_samples)
            temporaries = max(temporaries, 4 * batch * (ds.n_features + 2 * out_pixels))
    if needed:
        total = sum(ds.n_samples for ds in datasets)
        shape = f"{out_c} channel(s)" if size is None else f"{out_c}x{size}x{size}"
        memory.check_bytes(needed + temporaries, f"harmonizing {total:,} images to {shape}")


def _harmonize_images(ds: LabeledDataset, out_c: int, size: int | None) -> LabeledDataset:
    """``ds`` with ``out_c`` channels of ``size x size`` pixels in ``[0, 1]`` (itself if it has them)."""
    c, h, w = ds.image_shape
    out_h, out_w = (h, w) if size is None else (size, size)
    if (c, h, w) == (out_c, out_h, out_w):
        return ds
    x = ds.images()
    if c == 3 and out_c == 1:
        weights = torch.tensor(LUMA_WEIGHTS, dtype=x.dtype).view(1, 3, 1, 1)
        x = (x * weights).sum(dim=1, keepdim=True)
    if (h, w) != (out_h, out_w):
        x = _resize_images(x, out_h)
    if c == 1 and out_c == 3:
        x = x.expand(-1, 3, -1, -1)
    x = x.clamp(0.0, 1.0).reshape(ds.n_samples, -1)
    return ds.with_features(x.contiguous(), image_shape=(out_c, out_h, out_w))


# --------------------------------------------------------------------------- features


@runtime_checkable
class FeatureExtractor(Protocol):
    """Maps datasets to a common feature space (fit on several, apply to each).

    Attributes
    ----------
    name
        Short identifier used in cache keys and exports (e.g. ``"pca50"``).
    n_components
        Output dimension ``D'``.
    """

    name: str
    n_components: int

    def fit(self, datasets: Sequence[LabeledDataset]) -> FeatureExtractor:
        """Fit on the union of ``datasets``; returns ``self``."""
        ...

    def transform(self, ds: LabeledDataset) -> LabeledDataset:
        """Features ``(N, D)`` -> ``(N, D')``; labels kept, ``image_shape`` None."""
        ...


class PCAFeatures:
    """Principal components fitted on the union of several datasets.

    Parameters
    ----------
    n_components
        Output dimension; at most ``min(total samples, D)``.
    seed
        Seed of the randomized SVD used for large inputs (scikit-learn
        ``PCA(svd_solver="auto")``), so results are reproducible.

    Attributes
    ----------
    mean_ : torch.Tensor
        ``(D,)`` mean of the union.
    components_ : torch.Tensor
        ``(n_components, D)`` orthonormal principal axes.
    explained_variance_ratio_ : numpy.ndarray
        ``(n_components,)``.
    n_features_in_ : int
        ``D`` seen during :meth:`fit`.
    """

    def __init__(self, n_components: int = 50, seed: int = 0) -> None:
        if (
            isinstance(n_components, bool)
            or not isinstance(n_components, (int, np.integer))
            or n_components < 1
        ):
            raise GeovizError(f"n_components must be a positive integer, got {n_components!r}")
        self.n_components = int(n_components)
        self.seed = int(seed)

    @property
    def name(self) -> str:
        return f"pca{self.n_components}"

    def __repr__(self) -> str:
        return f"PCAFeatures(n_components={self.n_components}, seed={self.seed})"

    def fit(self, datasets: Sequence[LabeledDataset] | LabeledDataset) -> PCAFeatures:
        """Fit the PCA on the concatenated features of ``datasets``.

        Raises
        ------
        DatasetError
            No datasets, differing feature dimensions, or ``n_components``
            larger than ``min(total samples, D)``.
        """
        from sklearn.decomposition import PCA

        if isinstance(datasets, LabeledDataset):
            datasets = [datasets]
        datasets = list(datasets)
        if not datasets:
            raise DatasetError("PCAFeatures.fit needs at least one dataset")
        dims = {ds.n_features for ds in datasets}
        if len(dims) > 1:
            detail = ", ".join(f"{ds.name}: D={ds.n_features}" for ds in datasets)
            raise DatasetError(
                f"PCA is fitted on the union of the datasets, which must share D; got {detail} "
                "(harmonize them first)"
            )
        x = torch.cat([ds.features for ds in datasets], dim=0).numpy()
        limit = min(x.shape)
        if self.n_components > limit:
            raise DatasetError(
                f"n_components={self.n_components} exceeds min(total samples, features)={limit}"
            )
        pca = PCA(n_components=self.n_components, svd_solver="auto", random_state=self.seed)
        pca.fit(x)
        self.mean_ = torch.as_tensor(pca.mean_, dtype=torch.float32)
        self.components_ = torch.as_tensor(pca.components_, dtype=torch.float32).contiguous()
        self.explained_variance_ratio_ = np.asarray(pca.explained_variance_ratio_, dtype=np.float64)
        self.n_features_in_ = int(x.shape[1])
        return self

    def transform(self, ds: LabeledDataset) -> LabeledDataset:
        """Project ``ds`` onto the fitted axes: ``(N, D)`` -> ``(N, n_components)``."""
        if not hasattr(self, "components_"):
            raise GeovizError("PCAFeatures is not fitted: call fit(datasets) first")
        if ds.n_features != self.n_features_in_:
            raise DatasetError(
                f"PCA was fitted on D={self.n_features_in_} features but this dataset has "
                f"D={ds.n_features}",
                _src(ds),
            )
        z = (ds.features - self.mean_) @ self.components_.T
        return ds.with_features(z, image_shape=None)

    def fit_transform(self, datasets: Sequence[LabeledDataset]) -> list[LabeledDataset]:
        """:meth:`fit` on the union, then :meth:`transform` each dataset."""
        datasets = list(datasets)
        self.fit(datasets)
        return [self.transform(ds) for ds in datasets]


# --------------------------------------------------------------------------- subsampling


def box_normalise(
    ds: LabeledDataset, *, box: int = 20, canvas: int = 28, threshold: float = 0.1
) -> LabeledDataset:
    """MNIST's own size normalisation applied to any grey image dataset.

    Each image's ink (pixels above ``threshold`` times the image's maximum) is cropped to its
    bounding box, resized (bilinear, aspect kept) so that its longer side is ``box`` pixels,
    and pasted on a ``canvas x canvas`` black square with its centre of mass at the centre
    (LeCun et al.'s MNIST procedure: a 20x20 box in 28x28, centre of mass at (14, 14)).

    Why: datasets disagree on how much of the frame the object fills. USPS digits fill their
    16x16 frame, MNIST digits a 20x20 box of 28x28, so after :func:`harmonize` to 32x32 a USPS
    digit is about 40% larger than an MNIST one, and an OTDD map or a network pretrained on one
    meets the other at the wrong scale. Measured on the 5-shot MNIST transfer
    (``benchmarks/ablation_transfer.py``): pretraining on USPS alone gave 74-78% resized as is
    and 84-86% box-normalised (see ``benchmarks/README.md``).

    Parameters
    ----------
    ds
        Grey image dataset (``image_shape = (1, H, W)``), features in ``[0, 1]``.
    box, canvas
        Side of the box the ink is scaled into and of the output square, pixels.
    threshold
        Fraction of each image's maximum above which a pixel counts as ink.

    Returns
    -------
    LabeledDataset
        Same labels and classes, ``image_shape = (1, canvas, canvas)``, values in ``[0, 1]``.
        Blank images stay blank.

    Raises
    ------
    DatasetError
        Not a grey image dataset, or ``box > canvas``.
    """
    if ds.image_shape is None or ds.image_shape[0] != 1:
        raise DatasetError("box_normalise needs grey images (image_shape (1, H, W))", _src(ds))
    box = limits.check_int(box, "box", 1, limits.MAX_IMAGE_SIZE, error=DatasetError)
    canvas = limits.check_int(canvas, "canvas", box, limits.MAX_IMAGE_SIZE, error=DatasetError)
    _, h, w = ds.image_shape
    out = box_images(ds.features.numpy().reshape(-1, h, w), box, canvas, threshold)
    return LabeledDataset(
        features=out.reshape(len(out), -1),
        labels=ds.labels,
        classes=ds.classes,
        name=ds.name,
        image_shape=(1, canvas, canvas),
        source=ds.source,
    )


def box_images(images: np.ndarray, box: int, canvas: int, threshold: float = 0.1) -> np.ndarray:
    """:func:`box_normalise` on ``(N, H, W)`` grey images: ``(N, canvas, canvas)`` float32."""
    from PIL import Image

    memory.check_bytes(images.shape[0] * canvas * canvas * 4, "box-normalising images")
    out = np.zeros((images.shape[0], canvas, canvas), dtype=np.float32)
    grid = np.indices((box, box))  # row and column index of every pixel of a resized crop
    # the ink and its bounding box of every image at once (a chunk at a time: bounded
    # temporaries); only the crop's resize and placement stay per image
    for start in range(0, images.shape[0], 4096):
        chunk = np.asarray(images[start : start + 4096], dtype=np.float32)
        peak = chunk.max(axis=(1, 2))
        # the threshold as one image's ``img > threshold * float(img.max())`` has it: the
        # product in float64, compared in float32 (numpy casts the Python float to the
        # array's type), so a pixel at the threshold stays on its side
        level = (threshold * peak.astype(np.float64)).astype(np.float32)
        ink = chunk > level[:, None, None]
        ink_rows, ink_cols = ink.any(2), ink.any(1)
        has_ink = (peak > 0) & ink_rows.any(1)
        top_ink = ink_rows.argmax(1)
        bottom_ink = ink_rows.shape[1] - ink_rows[:, ::-1].argmax(1)
        left_ink = ink_cols.argmax(1)
        right_ink = ink_cols.shape[1] - ink_cols[:, ::-1].argmax(1)
        for j in np.flatnonzero(has_ink):
            crop = np.ascontiguousarray(
                chunk[j, top_ink[j] : bottom_ink[j], left_ink[j] : right_ink[j]]
            )
            scale = box / max(crop.shape)
            size = (max(1, round(crop.shape[1] * scale)), max(1, round(crop.shape[0] * scale)))
            resized = Image.fromarray(crop).resize(size, Image.BILINEAR)
            # from the raw buffer: np.asarray on a PIL image costs more than the resize
            small = np.frombuffer(resized.tobytes(), dtype=np.float32).reshape(size[1], size[0])
            small = small.clip(0.0, 1.0)
            # the centre of mass exactly as one image at a time (its float64 products and
            # float32 mass): a different rounding moves a tie at .5 by one pixel
            mass = float(small.sum())
            weighted = (grid[:, : size[1], : size[0]] * small).reshape(2, -1).sum(1)
            cy, cx = weighted / max(mass, 1e-12)
            top = int(np.clip(round(canvas / 2 - cy), 0, canvas - small.shape[0]))
            left = int(np.clip(round(canvas / 2 - cx), 0, canvas - small.shape[1]))
            out[start + j, top : top + small.shape[0], left : left + small.shape[1]] = small
    return out


def stratified_allocation(counts: np.ndarray, n: int) -> np.ndarray:
    """How many samples of each class a stratified subset of size ``n`` keeps.

    Proportional allocation ``n * c_k / N`` rounded by largest remainder (ties
    to the lower class index), with every present class keeping at least one
    (taken back from the classes furthest above their quota). When every
    present quota is at least 1, each class gets its quota rounded up or down.

    Parameters
    ----------
    counts
        ``(C,)`` class sizes.
    n
        Subset size, ``#present classes <= n <= N``.

    Returns
    -------
    numpy.ndarray
        ``(C,)`` int64, summing to ``n``, ``<= counts`` and ``>= 1`` where ``counts > 0``.
    """
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    present = counts > 0
    if not present.sum() <= n <= total:
        raise DatasetError(
            f"a stratified subset needs between {int(present.sum())} (one per present class) "
            f"and {total} samples, got n={n}"
        )
    quota = counts * (n / total)
    alloc = np.floor(quota).astype(np.int64)
    alloc[present] = np.maximum(alloc[present], 1)
    classes = range(len(counts))
    # hand out what is left to the classes furthest below their quota (largest remainder)
    while alloc.sum() < n:
        k = max(
            (k for k in classes if alloc[k] < counts[k]), key=lambda k: (quota[k] - alloc[k], -k)
        )
        alloc[k] += 1
    # the ">= 1" guarantee may overshoot: take back from the classes furthest above their quota
    while alloc.sum() > n:
        k = max((k for k in classes if alloc[k] > 1), key=lambda k: (alloc[k] - quota[k], -k))
        alloc[k] -= 1
    return alloc


def stratified_indices(labels: np.ndarray | torch.Tensor, n: int, seed: int = 0) -> np.ndarray:
    """Sorted indices of a seeded stratified subset of size ``n`` (see :func:`stratified_allocation`)."""
    y = labels.numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    y = y.astype(np.int64)
    counts = np.bincount(y)
    alloc = stratified_allocation(counts, int(n))
    rng = np.random.default_rng(seed)
    chosen = []
    for k in range(len(counts)):
        members = np.flatnonzero(y == k)
        if alloc[k]:
            chosen.append(rng.choice(members, size=int(alloc[k]), replace=False))
    return np.sort(np.concatenate(chosen))


def stratified_subsample(ds: LabeledDataset, n: int, seed: int = 0) -> LabeledDataset:
    """A seeded subset of ``n`` samples with class proportions preserved.

    Every class present in ``ds`` keeps at least one sample; samples keep their
    original order. ``n >= len(ds)`` returns ``ds`` itself.

    Raises
    ------
    DatasetError
        ``n`` smaller than the number of present classes (or < 2).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise DatasetError(f"n must be an integer, got {n!r}", _src(ds))
    if n >= ds.n_samples:
        return ds
    n_present = int((ds.class_counts() > 0).sum())
    if n < n_present:
        raise DatasetError(
            f"n={n} is smaller than the {n_present} classes present; a stratified subset keeps "
            "at least one sample of each",
            _src(ds),
        )
    return ds.subset(stratified_indices(ds.labels, int(n), seed))


# --------------------------------------------------------------------------- few-shot


@dataclass(frozen=True, eq=False)
class FewShotTarget:
    """A few-shot target dataset (paper Sec. 4.2, Sec. 5.2).

    Attributes
    ----------
    labelled_indices
        ``(k * C_present,)`` sorted indices of the samples whose true label is kept.
    dataset
        All samples of the original dataset; labelled ones carry their true
        label, the others a pseudo-label found from the labelled ones (``method``).
    pseudo_label_accuracy
        Fraction of the *unlabelled* samples whose pseudo-label equals the true
        label (1.0 when every sample is labelled). For reporting only.
    k
        Labelled examples per class.
    n_neighbors
        Neighbours of the kNN classifier (``"knn"``; ``"spread"``'s fall-back).
    method
        How the pseudo-labels were found (:data:`~geoviz.data.pseudo_labels.PseudoLabelMethod`).
    """

    labelled_indices: np.ndarray
    dataset: LabeledDataset
    pseudo_label_accuracy: float
    k: int
    n_neighbors: int
    method: PseudoLabelMethod = "spread"


def few_shot_picks(ds: LabeledDataset, k: int, *, seed: int = 0) -> np.ndarray:
    """The sorted indices of the ``k`` samples per present class whose label a few-shot
    target keeps (:func:`few_shot`'s, for the same ``seed``): all a run may know of its labels.

    Raises
    ------
    DatasetError
        ``k`` not a positive integer, or more than the smallest class holds.
    """
    src = _src(ds)
    counts = ds.class_counts()
    present = np.flatnonzero(counts > 0)
    smallest = int(counts[present].min())
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise DatasetError(
            f"k (labelled examples per class) must be a positive integer, got {k!r}", src
        )
    if k > smallest:
        worst = ds.classes[int(present[np.argmin(counts[present])])]
        raise DatasetError(
            f"k={k} labelled examples per class is more than the smallest class "
            f"({worst!r}, {smallest} samples) holds",
            src,
        )
    rng = np.random.default_rng(seed)
    y = ds.labels.numpy()
    picks = [rng.choice(np.flatnonzero(y == c), size=k, replace=False) for c in present]
    return np.sort(np.concatenate(picks))


def few_shot(
    ds: LabeledDataset,
    k: int,
    *,
    seed: int = 0,
    n_neighbors: int = 1,
    embedding: np.ndarray | torch.Tensor | None = None,
    method: PseudoLabelMethod = "spread",
) -> FewShotTarget:
    """Keep ``k`` labels per class and pseudo-label the rest (paper Sec. 4.2, Sec. 5.2).

    Parameters
    ----------
    ds
        The full target dataset (true labels used for the labelled picks and
        for :attr:`FewShotTarget.pseudo_label_accuracy` only).
    k
        Labelled examples per present class, ``1 <= k <=`` smallest class size.
    seed
        Seed of the choice of labelled examples.
    n_neighbors
        Neighbours of the (Euclidean, majority vote) kNN classifier, at most the
        number of labelled samples and :data:`geoviz.limits.MAX_NEIGHBOURS`.
    embedding
        ``(N, d)`` coordinates the pseudo-labels are found in (a feature space,
        :mod:`geoviz.features`); default the dataset's own features. The returned
        dataset keeps its own features either way.
    method
        ``"spread"`` (default): label spreading on a kNN graph of all of ``ds``
        (:func:`geoviz.data.pseudo_labels.spread_labels`; measured on the colour few-shot
        target in ``benchmarks/bench_pseudo_labels.py``); ``"knn"``: the labelled
        points' ``n_neighbors``-NN vote. Either way the labelled points keep their labels
        and the result is deterministic.

    Raises
    ------
    DatasetError
        ``k`` out of range, ``n_neighbors`` invalid, an unknown ``method``, or an
        embedding of another length.
    """
    src = _src(ds)
    if method not in PSEUDO_LABEL_METHODS:
        raise DatasetError(
            f"pseudo-label method must be one of {', '.join(PSEUDO_LABEL_METHODS)}, got {method!r}",
            src,
        )
    labelled = few_shot_picks(ds, k, seed=seed)
    n_labelled = labelled.size
    most = min(n_labelled, limits.MAX_NEIGHBOURS)
    if (
        isinstance(n_neighbors, bool)
        or not isinstance(n_neighbors, (int, np.integer))
        or not 1 <= n_neighbors <= most
    ):
        raise DatasetError(
            f"n_neighbors must be an integer in 1..{most} (at most the {n_labelled} labelled "
            f"samples and {limits.MAX_NEIGHBOURS}), got {n_neighbors!r}",
            src,
        )
    if embedding is not None and len(embedding) != ds.n_samples:
        raise DatasetError(
            f"the embedding has {len(embedding)} rows for {ds.n_samples} samples", src
        )

    y = ds.labels.numpy()
    unlabelled = np.setdiff1d(np.arange(ds.n_samples), labelled, assume_unique=True)
    new_labels = y.copy()
    accuracy = 1.0
    if unlabelled.size:
        x = ds.features if embedding is None else embedding
        new_labels = pseudo_labels(x, y, labelled, method=method, n_neighbors=int(n_neighbors))
        accuracy = float(np.mean(new_labels[unlabelled] == y[unlabelled]))
    target = LabeledDataset(
        features=ds.features,
        labels=new_labels,
        classes=ds.classes,
        name=ds.name,
        image_shape=ds.image_shape,
        source=ds.source,
    )
    return FewShotTarget(
        labelled_indices=labelled,
        dataset=target,
        pseudo_label_accuracy=accuracy,
        k=int(k),
        n_neighbors=int(n_neighbors),
        method=method,
    )
