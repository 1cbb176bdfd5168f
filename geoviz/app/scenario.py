"""What a scenario is: the datasets, sample sizes and options behind every computation.

A *scenario* is the library's :class:`~geoviz.geodesic.spec.GeodesicSpec` (the target
``Q``, the references ``P_1..P_m``, sample sizes, few-shot options, preprocessing, feature
space and solver options; every value checked there, once) plus the app's policy: which
data and models this server serves, its defaults, and the links and cache keys that name
a scenario. Every value may come from a link; :meth:`Scenario.key` (computed once per
scenario) keys every cache.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from geoviz import limits
from geoviz.backend import digest, digest_bytes
from geoviz.data.choice import (
    DatasetChoice,
    FewShotOptions,
    check_relative_name,
    feature_bytes_bound,
)
from geoviz.data.formats import STAMP_LENGTH, OutsideRootError, check_confined, path_stamp
from geoviz.errors import DatasetError, GeovizError, short_repr
from geoviz.features import registered_models
from geoviz.geodesic.config import GeodesicConfig, space_allows
from geoviz.geodesic.spec import GeodesicSpec
from geoviz.maps.neural_config import get_neural_preset
from geoviz.ot.otdd_cost import OTDDConfig
from geoviz.viz.report import markdown_literal
from geoviz.vocabulary import (
    AUTO,
    BUILTIN_SPACES,
    DEFAULT_EPSILON,
    NEURAL_PRESET_NAMES,
    ChannelMode,
    MapMethod,
    NeuralPresetName,
)

# the dataset choice is a library value: import it from geoviz.data.choice (issue 44)
__all__ = [
    "DEFAULT_REFERENCES",
    "DEFAULT_TARGET",
    "EPSILON_CHOICES",
    "Scenario",
    "epsilon_choices",
    "scenario_feature_bytes",
    "served_datasets",
    "served_path",
]


DEFAULT_TARGET = "mnist"


DEFAULT_REFERENCES = ("fashion_mnist", "usps", "kmnist")


#: relative epsilons offered by the Maps page (``eps_abs = epsilon * mean(C)``), sharp to blurry
EPSILON_CHOICES = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.05)


@dataclass(frozen=True, init=False)
class Scenario:
    """A generalized-geodesic problem as the app serves it: the library's
    :class:`~geoviz.geodesic.spec.GeodesicSpec` plus the app's policy.

    The problem (datasets, sample sizes, seed, image format, few-shot target, feature
    space and solver options) is :attr:`spec`, and every value of it is checked there, by
    the spec and the :class:`~geoviz.geodesic.config.GeodesicConfig` it holds, once. The
    scenario adds only what the app decides: its defaults (2000 samples, 32 pixels), the
    data a visitor may name (registry, uploaded and served datasets, never a path; each
    reference once; only data this server can load), the feature models this server
    registered, and the links (:meth:`to_dict`) and cache keys (:meth:`key`) that name it.

    The constructor takes the app's names of the problem's values (those of links and
    keys) and builds the spec from them; the read-only views of the same names
    (:attr:`epsilon`, :attr:`map_method`, ...) read the spec.

    Parameters
    ----------
    target
        ``Q``.
    references
        ``P_1..P_m`` with ``m >= 2``.
    n_target, n_reference
        Samples drawn (stratified, seeded) from ``Q`` and from each ``P_i``;
        datasets with fewer samples are used whole.
    few_shot
        Few-shot target options (disabled: ``Q``'s own labels).
    image_size, channels
        Common image format (``geoviz.data.preprocess.harmonize``).
    epsilon
        Entropic regularisation of the OTDD couplings, **relative** to the mean ground cost
        (``OTDDConfig.epsilon``); default :data:`geoviz.vocabulary.DEFAULT_EPSILON`.
    seed
        Seed of subsampling and of every randomised step.
    map_method
        ``"barycentric"`` (default) or ``"neural"`` (``GeodesicConfig.method``).
    neural_preset
        Training budget of neural maps, a preset name (``GeodesicConfig.neural``); only
        part of :meth:`key` for ``map_method="neural"``.
    features
        The feature space the OTDD costs live in (``GeodesicConfig.features``); a
        ``"model:<name>"`` only if this server registered it. Part of :meth:`key` unless
        pixels.
    encoder_preset
        Weights of the ``"encoder"`` space (``GeodesicConfig.encoder``); part of
        :meth:`key` only for that space.

    Raises
    ------
    DatasetError
        The spec's or its config's refusal (their own sentence), or the app's.
    """

    spec: GeodesicSpec

    def __init__(
        self,
        target: DatasetChoice,
        references: Sequence[DatasetChoice],
        n_target: int = 2000,
        n_reference: int = 2000,
        few_shot: FewShotOptions | None = None,
        image_size: int = 32,
        channels: ChannelMode = "auto",
        epsilon: float = DEFAULT_EPSILON,
        seed: int = 0,
        map_method: MapMethod = "barycentric",
        neural_preset: NeuralPresetName = "cpu",
        features: str = AUTO,
        encoder_preset: str = "pretrained",
    ) -> None:
        for what, n in (("n_target", n_target), ("n_reference", n_reference)):
            if n is None:  # the spec's None (all samples) is no app choice
                raise DatasetError(f"{what} must be a number of samples, got None")
        try:
            problem = GeodesicSpec(  # the data's facts first: the config is sized by them
                target=target,
                references=tuple(references),
                n_target=n_target,
                n_reference=n_reference,
                seed=seed,
                image_size=image_size,
                channels=channels,
                few_shot=FewShotOptions() if few_shot is None else few_shot,
            )
            config = GeodesicConfig(
                # sized like the CLI's problems: a full-size fit the CLI computed is
                # found in the disk cache (OTDDConfig.sized_for)
                otdd=OTDDConfig(epsilon=epsilon, seed=problem.seed).sized_for(
                    cast(int, problem.n_target), cast(int, problem.n_reference)
                ),
                method=map_method,
                neural=get_neural_preset(neural_preset),
                features=features,
                encoder=encoder_preset,
            )
        except DatasetError:
            raise
        except GeovizError as err:  # the config's refusals, as the scenario's
            raise DatasetError(str(err)) from None
        object.__setattr__(self, "spec", replace(problem, config=config))
        self._check_policy()

    def _check_policy(self) -> None:
        """What this app serves, beyond what the spec checks."""
        refs = self.references
        tokens = [r.token for r in refs]
        if len(set(tokens)) != len(tokens):
            dup = sorted({r.label for r in refs if tokens.count(r.token) > 1})
            raise DatasetError(f"each reference can be used once; repeated: {', '.join(dup)}")
        if any(c.source == "path" for c in self.choices):
            # a scenario may come from a link: it names data, never a path on the server
            raise DatasetError(
                "a scenario names registry, uploaded or server datasets, not local paths"
            )
        # the spec takes any "model:<name>"; a scenario only the models this server registered
        if self.features not in BUILTIN_SPACES and self.features not in registered_models():
            spaces = (*BUILTIN_SPACES, *registered_models())
            raise DatasetError(
                f"features must be one of {', '.join(spaces)}, got {short_repr(self.features)}"
            )
        for choice in self.choices:
            # a scenario names only data this server can load (no torchvision entry where
            # torchvision is missing): a link or the form never gets one that cannot work
            choice.check_available()

    # ------------------------------------------------------------------ views of the spec
    @property
    def target(self) -> DatasetChoice:
        return self.spec.target

    @property
    def references(self) -> tuple[DatasetChoice, ...]:
        return self.spec.references

    @property
    def n_target(self) -> int:
        return cast(int, self.spec.n_target)  # never None: the constructor refuses it

    @property
    def n_reference(self) -> int:
        return cast(int, self.spec.n_reference)

    @property
    def few_shot(self) -> FewShotOptions:
        return self.spec.few_shot or FewShotOptions()

    @property
    def image_size(self) -> int:
        return cast(int, self.spec.image_size)

    @property
    def channels(self) -> ChannelMode:
        return self.spec.channels

    @property
    def epsilon(self) -> float:
        return self.spec.config.otdd.epsilon

    @property
    def seed(self) -> int:
        return self.spec.seed

    @property
    def map_method(self) -> MapMethod:
        return self.spec.config.method

    @property
    def neural_preset(self) -> NeuralPresetName:
        """The preset name of the spec's neural budget (the app builds it from one)."""
        neural = self.spec.config.neural
        return next(n for n in NEURAL_PRESET_NAMES if get_neural_preset(n) == neural)

    @property
    def features(self) -> str:
        return self.spec.config.features

    @property
    def encoder_preset(self) -> str:
        return self.spec.config.encoder

    @property
    def m(self) -> int:
        return self.spec.m

    @property
    def choices(self) -> tuple[DatasetChoice, ...]:
        """``(Q, P_1, ..., P_m)``."""
        return self.spec.choices

    def _values(self) -> dict[str, Any]:
        """The constructor's arguments that give this scenario (:data:`_SCENARIO_FIELDS`)."""
        return {name: getattr(self, name) for name in _SCENARIO_FIELDS}

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description (links and manifests): every value but the datasets' file
        stamps, which say what a served file is on this server now, not what a link names."""
        d = self._values()
        d["target"] = asdict(self.target)
        d["references"] = tuple(asdict(r) for r in self.references)
        d["few_shot"] = asdict(self.few_shot)
        for entry in (d["target"], *d["references"]):
            entry.pop("stamp")
        return d

    def _identity_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` with the file stamp of each stamped dataset (:meth:`stamped`):
        what the cache keys hash. Unstamped datasets (registry names, uploads by their
        digest) keep the keys they had before stamps existed."""
        d = self.to_dict()
        for entry, choice in zip((d["target"], *d["references"]), self.choices, strict=True):
            if choice.stamp is not None:
                entry["stamp"] = choice.stamp
        few = d.get("few_shot")
        if isinstance(few, dict) and (not few.get("enabled") or few.get("pseudo_labels") == "knn"):
            # the pseudo-label method counts only where it labels Q: scenarios without a
            # few-shot target, and kNN ones (the only method before), keep their old keys
            few.pop("pseudo_labels", None)
        return d

    def stamped(self, data_dirs: Sequence[tuple[str, Path]]) -> Scenario:
        """This scenario with each served dataset stamped by what its file is now
        (:func:`served_stamp`: a ``stat``, never a read); ``self`` when no stamp changed.

        The app stamps a session's scenario on every page run and every scenario it
        admits, so every key (:meth:`key`, :meth:`data_key`, :meth:`otdd_key`) and so
        every cache of the app follows the file: a file replaced by another dataset gives
        new numbers, one turned unreadable its loader's sentence, never the old numbers.
        """
        choices = tuple(
            c.with_stamp(served_stamp(c.name, data_dirs)) if c.source == "server" else c
            for c in self.choices
        )
        if choices == self.choices:
            return self
        return self.with_(target=choices[0], references=choices[1:])

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Scenario:
        """Inverse of :meth:`to_dict` (validated like any new scenario).

        Raises
        ------
        DatasetError
            ``d`` does not describe a valid scenario (unknown or missing fields,
            bad values).
        """
        if not isinstance(d, Mapping):
            raise DatasetError("not a scenario description (not a mapping)")
        values = dict(d)
        unknown = sorted(str(k) for k in values if k not in _SCENARIO_FIELDS)
        if unknown:
            raise DatasetError(
                f"not a scenario description (unknown field {short_repr(unknown[0])})"
            )
        refs = values.get("references")
        if not isinstance(refs, (list, tuple)):
            raise DatasetError("not a scenario description (no list of references)")
        # bounded before each entry is parsed (a link may list thousands)
        limits.check_reference_count(len(refs), error=DatasetError)
        try:
            values["target"] = _choice_from_dict(values["target"])
            values["references"] = tuple(_choice_from_dict(r) for r in refs)
            if "few_shot" in values:
                few = values["few_shot"]
                known = {f.name for f in fields(FewShotOptions)}
                if not isinstance(few, Mapping) or set(few) - known:
                    raise DatasetError("not a scenario description (bad few-shot options)")
                values["few_shot"] = FewShotOptions(**few)
            return cls(**values)
        except GeovizError:
            raise
        except (KeyError, TypeError, ValueError):
            raise DatasetError("not a scenario description (missing or malformed fields)") from None

    def _memo(self, name: str, compute: Callable[[], str]) -> str:
        # a frozen dataclass: hash once per instance (pages ask for the key many times a rerun)
        value = self.__dict__.get(name)
        if value is None:
            value = compute()
            object.__setattr__(self, name, value)
        return value

    def data_key(self) -> str:
        """Hash of what determines the *loaded datasets* (not the OT options); computed once.

        The values the spec holds itself (:data:`_DATA_FIELDS`): those of its config (the
        maps', OTDD's and feature space's options) do not change the loaded datasets.
        """

        def compute() -> str:
            d = self._identity_dict()
            return _hash({name: d[name] for name in _DATA_FIELDS})

        return self._memo("_data_key", compute)

    def _key_dict(self) -> dict[str, Any]:
        d = self._identity_dict()
        if self.map_method == "barycentric":
            # the neural budget does not change barycentric maps, and barycentric keys stay
            # those of scenarios from before the map method existed (disk placements, links)
            d.pop("map_method")
            d.pop("neural_preset")
        # scenarios in pixel space keep the keys of before feature spaces (disk, links)
        if self.features == "pixels":
            d.pop("features")
        if self.features != "encoder":
            d.pop("encoder_preset")
        return d

    def key(self) -> str:
        """Hash of the whole scenario (computed once): equal keys give the same geodesic.

        The map method is part of it (and the neural budget for neural maps), so the
        barycentric and the neural geodesic of the same data are cached side by side.
        """
        return self._memo("_key", lambda: _hash(self._key_dict()))

    def otdd_key(self) -> str:
        """Hash of the datasets and the OTDD options, not of the map method (computed once).

        Equal for the barycentric and the neural scenario of the same data: OTDD values
        between the datasets themselves (pairwise page) are shared by both.
        """
        return self._memo(
            "_otdd_key",
            lambda: self.with_(
                map_method="barycentric", neural_preset="cpu", features="pixels"
            ).key(),
        )

    def with_method(self, method: MapMethod) -> Scenario:
        """The same data and OTDD options with the maps computed by ``method``.

        Neural maps generate images, so they live in pixel space: the neural scenario of a
        scenario in another feature space is in pixel space.
        """
        if method == self.map_method:
            return self
        if not space_allows(method, self.features):
            return self.with_(map_method=method, features="pixels")
        return self.with_(map_method=method)

    @property
    def map_label(self) -> str:
        """``"barycentric"`` or ``"neural (tiny budget)"``."""
        if self.map_method == "neural":
            return f"neural ({self.neural_preset} budget)"
        return "barycentric"

    def describe(
        self,
        is_image: bool | None = None,
        n_samples: Sequence[int] | None = None,
        space: str | None = None,
    ) -> list[str]:
        """Markdown lines for the sidebar.

        ``n_samples`` are the sample counts of the loaded ``(Q, P_1, ..., P_m)`` when known:
        the lines then show them instead of the requested N, with a note for every dataset
        that has fewer samples than requested (it is used whole). Dataset labels are
        escaped (:func:`geoviz.viz.report.markdown_literal`): a link or an upload names
        them, and they show as typed, never as a link or an image. ``space`` is the
        sentence of the feature space once the data are loaded
        (:func:`geoviz.geodesic.config.space_sentence`); before, ``"auto"`` says that
        the space will be chosen from the data.
        """

        def label(choice: DatasetChoice) -> str:
            return markdown_literal(choice.label)

        def ref(i: int, r: DatasetChoice) -> str:
            return label(r) if r.label == f"P{i + 1}" else f"P{i + 1} = {label(r)}"

        size = f" · images {self.image_size}×{self.image_size}" if is_image is not False else ""
        counts = None if n_samples is None else [int(n) for n in n_samples]
        if counts is not None and len(counts) != 1 + self.m:
            raise DatasetError(f"{len(counts)} sample counts for {1 + self.m} datasets")
        if counts is None:
            n_q, ref_n = self.n_target, f"N = {self.n_reference} per reference"
        else:
            n_q = counts[0]
            if all(n == self.n_reference for n in counts[1:]):
                ref_n = f"N = {self.n_reference} per reference"
            else:
                ref_n = "N = " + ", ".join(f"{n} (P{i + 1})" for i, n in enumerate(counts[1:]))
        lines = [
            f"**Q** (target): {label(self.target)}, N = {n_q}",
            "**References**: " + ", ".join(ref(i, r) for i, r in enumerate(self.references)),
            f"{ref_n}{size}",
        ]
        if counts is not None:
            requested = [self.n_target] + [self.n_reference] * self.m
            for choice, n, want in zip(self.choices, counts, requested, strict=True):
                if n < want:
                    lines.append(f"N capped at {n} for {label(choice)} (it has only {n} samples)")
        if self.few_shot.enabled:
            few = self.few_shot
            how = "label-spreading" if few.pseudo_labels == "spread" else f"{few.n_neighbors}-NN"
            lines.append(f"few-shot: {few.k} labels per class + {how} pseudo-labels")
        lines.append(f"OTDD maps: {self.map_label}")
        if space is not None:  # it names the datasets: a visitor's names, shown as typed
            lines.append(f"Feature {markdown_literal(space)}")
        elif self.features == AUTO:
            lines.append("Feature space: chosen from the data once they are loaded")
        elif self.features != "pixels":
            lines.append(f"costs in the {self.features} feature space")
        return lines

    def with_(self, **changes: Any) -> Scenario:
        """A validated copy with ``changes`` (the constructor's arguments) applied."""
        return Scenario(**{**self._values(), **changes})


#: the constructor's arguments: the names of links and keys, in the constructor's order
_SCENARIO_FIELDS = tuple(inspect.signature(Scenario.__init__).parameters)[1:]

#: those the spec holds itself (the datasets and how they are loaded), not its config's
_DATA_FIELDS = tuple(name for name in _SCENARIO_FIELDS if name in GeodesicSpec.__dataclass_fields__)


#: what a description names of a dataset: never its stamp (the server stamps what it serves)
_CHOICE_FIELDS = frozenset(f.name for f in fields(DatasetChoice)) - {"stamp"}


def _choice_from_dict(d: Any) -> DatasetChoice:
    if not isinstance(d, Mapping) or not set(d) <= _CHOICE_FIELDS:
        raise DatasetError("not a scenario description (bad dataset entry)")
    return DatasetChoice(**d)


def served_path(name: str, data_dirs: Sequence[tuple[str, Path]]) -> Path:
    """The file or folder a ``server`` dataset names, inside one of ``data_dirs``.

    ``name`` is ``<folder label>/<path inside it>`` (see :func:`_env_data_dirs`). The path
    is resolved (symlinks and ``..``) and must stay inside its folder, and so must every
    symbolic link below it, at any depth (:func:`geoviz.data.formats.check_confined`): a
    loader never follows a link out of the folder. Every refusal is the
    same sentence whether or not the path exists, so a link cannot probe the disk.

    Raises
    ------
    DatasetError
        The server serves no folders, the label is not one of them, or the path leaves it
        or does not exist there.
    """
    if not data_dirs:
        raise DatasetError(
            "this server does not load datasets from its disk (its operator can allow folders "
            "with GEOVIZ_DATA_DIRS); use the listed datasets or upload a file"
        )
    check_relative_name(name)
    label, _, inside = name.partition("/")
    roots = dict(data_dirs)
    refusal = DatasetError(f"no dataset {short_repr(name, 80)} in this server's data folders")
    if label not in roots or not inside:
        raise refusal
    root = roots[label]
    try:
        target = (root / inside).resolve(strict=True)
    except (OSError, RuntimeError):
        raise refusal from None
    if not target.is_relative_to(root):
        raise refusal
    try:
        # the loaders follow links below the target: none may lead out of the folder
        check_confined(target, root, max_entries=limits.MAX_SERVED_ENTRIES)
    except OutsideRootError:
        raise refusal from None
    return target


#: the stamp of a served dataset this server cannot open now (gone, or leaving its folder):
#: a state of its own, so no result of the file it was is served (loading it says why)
UNAVAILABLE_STAMP = digest_bytes([b"unavailable"], length=STAMP_LENGTH)


def served_stamp(name: str, data_dirs: Sequence[tuple[str, Path]]) -> str:
    """The stamp of the served dataset ``name`` as it is now
    (:func:`geoviz.data.formats.path_stamp` of :func:`served_path`, at most
    :data:`geoviz.limits.MAX_SERVED_ENTRIES` entries): a few ``stat`` calls for a file,
    nothing opened, so a FIFO cannot block. :data:`UNAVAILABLE_STAMP` where the server
    cannot serve it (the load then raises the sentence saying why)."""
    try:
        return path_stamp(served_path(name, data_dirs), max_entries=limits.MAX_SERVED_ENTRIES)
    except GeovizError:
        return UNAVAILABLE_STAMP


def served_datasets(data_dirs: Sequence[tuple[str, Path]]) -> list[str]:
    """Names of the datasets in the operator's folders: each folder's visible entries."""
    names = []
    for label, root in data_dirs:
        try:
            entries = sorted(p.name for p in root.iterdir() if not p.name.startswith("."))
        except OSError:
            continue
        names += [f"{label}/{entry}" for entry in entries[:200]]
    return names


def scenario_feature_bytes(scenario: Scenario) -> int:
    """Upper bound of the float32 features of the scenario's harmonised datasets, bytes
    (:func:`geoviz.data.choice.feature_bytes_bound`)."""
    counts = [scenario.n_target] + [scenario.n_reference] * scenario.m
    return feature_bytes_bound(scenario.choices, counts, scenario.image_size, scenario.channels)


def epsilon_choices(current: float | None = None) -> tuple[float, ...]:
    """:data:`EPSILON_CHOICES` plus ``current`` (e.g. typed on the Datasets page), ascending."""
    values = set(EPSILON_CHOICES)
    if current is not None and float(current) > 0 and np.isfinite(current):
        values.add(float(current))
    return tuple(sorted(values))


#: hex characters of a scenario key (folder and cache names on disk)
SCENARIO_KEY_LENGTH = 24


def _hash(obj: Any) -> str:
    """The scenario keys stored on disk: :func:`geoviz.backend.digest`, ``"plain"`` layout."""
    return digest(obj, length=SCENARIO_KEY_LENGTH, layout="plain")
