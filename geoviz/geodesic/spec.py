"""A geodesic problem as one value: :class:`GeodesicSpec`, :func:`load_spec_datasets` and
:func:`fit_spec`.

A :class:`GeodesicSpec` is everything that determines a fitted generalized geodesic
(paper Sec. 3): which datasets (the target ``Q`` and the references ``P_1..P_m``, each a
:class:`~geoviz.data.choice.DatasetChoice` with its split), how many samples of each,
the subsample seed, the common image format, the few-shot target options, the feature
space (a named one in the config, or a user's model), and the
:class:`~geoviz.geodesic.config.GeodesicConfig` of the maps and the QP. Every
front-end builds one: the command line (``geoviz distance | project | grid``), the
transfer experiments (``geoviz transfer``) and the app (a link's scenario,
:meth:`geoviz.app.scenario.Scenario.spec`). Each fact is checked here, once, as it enters;
front-ends add only their own policy (the app: no paths, its operator's limits, a memory
check). :func:`load_spec_datasets` is the one place that loads, subsamples, harmonises and
few-shots those datasets, and :func:`fit_spec` fits the geodesic they describe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from geoviz import limits
from geoviz.backend import DiskCache, get_cache
from geoviz.data.choice import ChoiceResolver, DatasetChoice, FewShotOptions, load_choice
from geoviz.data.dataset import LabeledDataset
from geoviz.data.preprocess import few_shot, few_shot_picks, harmonize
from geoviz.errors import DatasetError
from geoviz.features.base import FeatureSpace
from geoviz.features.choice import SpaceChoice
from geoviz.geodesic import pipeline
from geoviz.geodesic.config import (
    GeodesicConfig,
    check_space_allows,
    space_choice_for,
    space_of,
)
from geoviz.geodesic.labels import unique_names
from geoviz.geodesic.pipeline import Progress
from geoviz.geodesic.result import GeodesicResult
from geoviz.vocabulary import AUTO, CHANNEL_MODES, ChannelMode

__all__ = [
    "GeodesicSpec",
    "LoadedProblem",
    "SpecDatasets",
    "check_image_size",
    "fit_spec",
    "load_spec_datasets",
]


def check_image_size(value: object) -> int:
    """``value`` as the pixels per side of the common image size, checked once for every caller.

    Raises
    ------
    DatasetError
        Not an integer in ``[limits.MIN_IMAGE_SIZE, limits.MAX_IMAGE_SIZE]``.
    """
    return limits.check_int(
        value,
        "image_size",
        limits.MIN_IMAGE_SIZE,
        limits.MAX_IMAGE_SIZE,
        why="pixels per side of the common image size",
        error=DatasetError,
    )


def _optional_count(value: int | None, what: str) -> int | None:
    if value is None:
        return None
    return limits.check_int(value, what, limits.MIN_SAMPLES, limits.MAX_SAMPLES, error=DatasetError)


@dataclass(frozen=True)
class GeodesicSpec:
    """The datasets and options of one generalized-geodesic problem, validated once.

    Attributes
    ----------
    target
        ``Q``.
    references
        ``P_1..P_m``, ``2 <= m <=`` :data:`geoviz.limits.MAX_REFERENCES`.
    n_target, n_reference
        Samples drawn (stratified, seed ``seed``) from ``Q`` and from each ``P_i``, in
        ``[MIN_SAMPLES, MAX_SAMPLES]``; ``None`` or a smaller dataset: all of it.
    seed
        Seed of the subsamples (and of the few-shot labels and synthetic generators).
    image_size
        Pixels per side of the common image format: every dataset is resized to it
        (:func:`geoviz.data.preprocess.harmonize`). ``None``: sizes are kept, and resized
        to the target's height only when they differ (USPS 16x16 with MNIST 28x28).
    channels
        ``"auto"``, ``"grey"`` or ``"rgb"`` (:func:`~geoviz.data.preprocess.harmonize`).
    few_shot
        Keep ``k`` labels per class of ``Q`` and pseudo-label the rest
        (:func:`geoviz.data.preprocess.few_shot`); ``None`` or options not ``enabled`` (a
        front-end's remembered choice): ``Q``'s own labels.
    target_test
        Held-out data of the target for evaluation (the transfer experiments' test split),
        loaded and harmonised with the others, not part of the geodesic; ``None``: none.
    n_test
        Samples of ``target_test`` (``None``: the whole split).
    config
        The maps', OTDD's and QP's parameters (:class:`GeodesicConfig`), the named feature
        space among them (``config.features``); the subsamples are the spec's
        (``n_target``, ``n_reference``, ``seed``).
    features_model
        A feature space of the user's own (paper Sec. 5.3), e.g.
        :meth:`geoviz.features.ModelSpace.from_torchscript`, instead of a named one:
        ``config.features`` is then ``"auto"`` and the maps barycentric. The few-shot
        pseudo-labels and the fit both use it. ``None``: the space ``config.features`` names.
    """

    target: DatasetChoice
    references: tuple[DatasetChoice, ...]
    n_target: int | None = None
    n_reference: int | None = None
    seed: int = 0
    image_size: int | None = None
    channels: ChannelMode = "auto"
    few_shot: FewShotOptions | None = None
    target_test: DatasetChoice | None = None
    n_test: int | None = None
    config: GeodesicConfig = field(default_factory=GeodesicConfig)
    # a model is compared by identity and left out of the hash (a network is no value)
    features_model: FeatureSpace | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        refs = tuple(self.references)
        object.__setattr__(self, "references", refs)
        choices = (self.target, *refs) + (() if self.target_test is None else (self.target_test,))
        if not all(isinstance(c, DatasetChoice) for c in choices):
            raise DatasetError("the datasets of a GeodesicSpec must be DatasetChoice values")
        limits.check_reference_count(len(refs), error=DatasetError)
        for name in ("n_target", "n_reference", "n_test"):
            object.__setattr__(self, name, _optional_count(getattr(self, name), name))
        seed = limits.check_int(self.seed, "seed", 0, limits.MAX_SEED, error=DatasetError)
        object.__setattr__(self, "seed", seed)
        if self.image_size is not None:
            object.__setattr__(self, "image_size", check_image_size(self.image_size))
        if self.channels not in CHANNEL_MODES:
            raise DatasetError(f"channels must be 'auto', 'grey' or 'rgb', got {self.channels!r}")
        if self.few_shot is not None and not isinstance(self.few_shot, FewShotOptions):
            raise DatasetError("few_shot must be FewShotOptions or None")
        if not isinstance(self.config, GeodesicConfig):
            raise DatasetError("config must be a GeodesicConfig")
        self._check_features_model()

    def _check_features_model(self) -> None:
        model = self.features_model
        if model is None:
            return
        if not isinstance(model, FeatureSpace):
            raise DatasetError(f"features_model must be a FeatureSpace, got {type(model).__name__}")
        if self.config.features != AUTO:
            raise DatasetError(
                f"give either a named feature space (config.features={self.config.features!r}) "
                "or a model of your own (features_model), not both"
            )
        check_space_allows(self.config.method, model.name, error=DatasetError)

    @property
    def m(self) -> int:
        """Number of references."""
        return len(self.references)

    @property
    def choices(self) -> tuple[DatasetChoice, ...]:
        """``(Q, P_1, ..., P_m)``."""
        return (self.target, *self.references)


@dataclass(frozen=True)
class SpecDatasets:
    """The datasets of a :class:`GeodesicSpec`, loaded, subsampled and harmonised.

    Attributes
    ----------
    target
        ``Q`` as the geodesic uses it (pseudo-labelled when few-shot).
    references
        ``P_1..P_m`` in the feature space of ``target``.
    target_true
        ``Q`` with its true labels (``target`` itself unless few-shot).
    labelled_indices
        Few-shot: ``(m_k,)`` indices of ``Q`` whose label was kept; else ``None``.
    pseudo_label_accuracy
        Few-shot: accuracy of the pseudo-labels on the other samples; else ``None``.
    target_test
        The spec's held-out target data in the same format, or ``None``.
    space_choice
        Few-shot with ``config.features="auto"``: the space chosen once, on what a run can
        see (Q's labelled points, ``labelled_indices``, never the true labels of the
        others), that the pseudo-labels were found in and the fit uses; else ``None``
        (the fit chooses on Q's own labels).
    """

    target: LabeledDataset
    references: tuple[LabeledDataset, ...]
    target_true: LabeledDataset
    labelled_indices: np.ndarray | None = None
    pseudo_label_accuracy: float | None = None
    target_test: LabeledDataset | None = None
    space_choice: SpaceChoice | None = None

    def chosen_space(self, config: GeodesicConfig) -> SpaceChoice | None:
        """What ``"auto"`` means for these datasets under ``config``: the few-shot target's
        one choice (:attr:`space_choice`), else
        :func:`~geoviz.geodesic.config.space_choice_for` on Q and the references."""
        if self.labelled_indices is not None:
            return self.space_choice
        return space_choice_for(config, [self.target, *self.references])


def _harmonised(
    datasets: Sequence[LabeledDataset], size: int | None, channels: ChannelMode
) -> list[LabeledDataset]:
    if size is not None:
        return harmonize(datasets, size=size, channels=channels)
    shapes = {ds.image_shape for ds in datasets}
    target_shape = datasets[0].image_shape
    if any(ds.is_image for ds in datasets) and len(shapes) > 1 and target_shape is not None:
        # sizes differ (USPS 16x16 with MNIST 28x28): the target's height
        return harmonize(datasets, size=target_shape[1], channels=channels)
    if len(shapes) > 1:  # images mixed with vectors: harmonize names the problem
        return harmonize(datasets, size=None, channels=channels)
    return list(datasets)


def load_spec_datasets(
    spec: GeodesicSpec,
    *,
    allow_paths: bool = True,
    resolve: ChoiceResolver | None = None,
    distinct_names: bool = False,
) -> SpecDatasets:
    """Load, subsample, harmonise (and few-shot) the datasets of ``spec``.

    Each choice is loaded by :func:`geoviz.data.choice.load_choice` (``n_target`` samples
    of ``Q``, ``n_reference`` of each ``P_i``, ``n_test`` of ``target_test``, seed
    ``spec.seed``), all are brought to one format (:attr:`GeodesicSpec.image_size`,
    :attr:`GeodesicSpec.channels`), and with ``spec.few_shot`` the target keeps ``k``
    labels per class and is pseudo-labelled, by nearest neighbours in the feature space of
    ``spec.config.features`` (fitted here on Q and the references; the geodesic's fit then
    finds the same space in the cache). For ``"auto"`` that space is chosen here, once, on
    the labelled points alone (:attr:`SpecDatasets.space_choice`, which the fit reuses).

    Parameters
    ----------
    spec
        The problem.
    allow_paths
        ``False``: a ``"path"`` choice is refused (the app).
    resolve
        The raw dataset of an ``"upload"`` or ``"server"`` choice (the app's store).
    distinct_names
        Rename ``Q`` and the ``P_i`` apart (:func:`~geoviz.geodesic.labels.unique_names`:
        ``mnist``, ``mnist#2``) for a display that names each of them; the datasets keep
        their own names otherwise (the geodesic's label space tells references apart).

    Raises
    ------
    DatasetError
        A dataset that cannot be loaded, refused choices, or formats that cannot be
        harmonised.
    """

    def load(choice: DatasetChoice, n: int | None) -> LabeledDataset:
        return load_choice(choice, n, spec.seed, allow_paths=allow_paths, resolve=resolve)

    loaded = [load(spec.target, spec.n_target)]
    loaded += [load(choice, spec.n_reference) for choice in spec.references]
    if spec.target_test is not None:
        loaded.append(load(spec.target_test, spec.n_test))
    datasets = _harmonised(loaded, spec.image_size, spec.channels)
    test = datasets[1 + spec.m] if spec.target_test is not None else None
    geodesic_sets = datasets[: 1 + spec.m]
    if distinct_names:
        names = unique_names([ds.name for ds in geodesic_sets])
        geodesic_sets = [
            ds if ds.name == name else dataclasses.replace(ds, name=name)
            for ds, name in zip(geodesic_sets, names, strict=True)
        ]
    target, refs = geodesic_sets[0], tuple(geodesic_sets[1:])
    few = spec.few_shot
    if few is None or not few.enabled:
        return SpecDatasets(target=target, references=refs, target_true=target, target_test=test)
    embedding = None
    choice: SpaceChoice | None = None
    if spec.features_model is not None or spec.config.features != "pixels":
        # the pseudo-labels are found where the costs live: on colour images pixel
        # neighbours are mostly background (the geodesic's fit reuses this fitted space);
        # "auto" is measured on the labelled points: the others' labels are not known
        space = spec.features_model
        if space is None:
            labelled = few_shot_picks(target, few.k, seed=spec.seed)
            space, choice = space_of(spec.config, get_cache(), [target, *refs], labelled=labelled)
        if space.name != "pixels":
            embedding = space.fit([target, *refs]).transform(target).features
    fs = few_shot(
        target,
        few.k,
        seed=spec.seed,
        n_neighbors=few.n_neighbors,
        embedding=embedding,
        method=few.pseudo_labels,
    )
    return SpecDatasets(
        target=fs.dataset,
        references=refs,
        target_true=target,
        labelled_indices=fs.labelled_indices,
        pseudo_label_accuracy=fs.pseudo_label_accuracy,
        target_test=test,
        space_choice=choice,
    )


class LoadedProblem(Protocol):
    """The datasets of a problem in hand: :class:`SpecDatasets`, or the app's loaded data."""

    @property
    def target(self) -> LabeledDataset: ...

    @property
    def references(self) -> Sequence[LabeledDataset]: ...

    @property
    def space_choice(self) -> SpaceChoice | None: ...


def fit_spec(
    spec: GeodesicSpec,
    data: LoadedProblem | None = None,
    *,
    progress: Progress | None = None,
    cache: DiskCache | None = None,
    workers: int = 1,
) -> GeodesicResult:
    """Fit the generalized geodesic ``spec`` describes (paper Sec. 3): the one way from a
    problem value to :func:`~geoviz.geodesic.pipeline.fit_geodesic`, its feature space
    (``config.features`` or ``features_model``) included.

    Parameters
    ----------
    spec
        The problem.
    data
        Its datasets, loaded (:func:`load_spec_datasets`, or a front-end's own loading
        with its policy); ``None``: loaded here with :func:`load_spec_datasets`'s defaults.
    progress, cache, workers
        As :func:`~geoviz.geodesic.pipeline.fit_geodesic`'s.
    """
    loaded: LoadedProblem = load_spec_datasets(spec) if data is None else data
    return pipeline.fit_in_space(  # looked up at each call (a test or a tool may wrap it)
        loaded.target,
        list(loaded.references),
        spec.config,
        spec.features_model,
        progress=progress,
        cache=cache,
        workers=workers,
        space_choice=loaded.space_choice,
    )
