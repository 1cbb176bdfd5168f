"""Where a dataset comes from: :class:`DatasetChoice`, and loading one (:func:`load_choice`).

A :class:`DatasetChoice` names one dataset of a geodesic problem (a registry name with
its split, seed and loader options, an uploaded file by its sha256, a file in an app
server's data folder, or a local path) and checks every field when it is built, since
it may come from a link: loader options are bounded per registry kind. It is part of a
:class:`geoviz.geodesic.spec.GeodesicSpec`, which the command line, the app's links and
the transfer experiments all build; :func:`load_choice` is the one loader of a choice.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from geoviz import limits
from geoviz.backend import digest_bytes
from geoviz.data.dataset import LabeledDataset
from geoviz.data.formats import STAMP_LENGTH
from geoviz.data.pseudo_labels import PSEUDO_LABEL_METHODS, PseudoLabelMethod
from geoviz.data.registry import DatasetInfo, dataset_info, unavailable_reason
from geoviz.errors import DatasetError, DownloadUnavailableError, UnknownDatasetError, short_repr
from geoviz.vocabulary import Split

__all__ = [
    "MAX_NAME_CHARS",
    "ChoiceResolver",
    "DatasetChoice",
    "FewShotOptions",
    "SourceKind",
    "Upload",
    "check_relative_name",
    "feature_bytes_bound",
    "load_choice",
]


#: where a dataset comes from: the registry, an uploaded file (by its sha256), a file in one
#: of an app server's data folders, or a local path (command line only: a link never names one)
SourceKind = Literal["registry", "upload", "server", "path"]


#: longest dataset name, option string or class name a scenario (or a link) may carry
MAX_NAME_CHARS = 200


_SHA256 = re.compile(r"[0-9a-f]{64}")
_STAMP = re.compile(rf"[0-9a-f]{{{STAMP_LENGTH}}}")


def _number(low: float, high: float) -> Callable[[str, Any], float]:
    def check(key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DatasetError(f"option {key} must be a number, got {short_repr(value)}")
        number = float(value)
        if not (np.isfinite(number) and low <= number <= high):
            raise DatasetError(f"option {key} must be between {low:g} and {high:g}, got {number:g}")
        return number

    return check


def _integer(low: int, high: int) -> Callable[[str, Any], int]:
    def check(key: str, value: Any) -> int:
        return limits.check_int(value, f"option {key}", low, high, error=DatasetError)

    return check


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 64:
        raise DatasetError(f"option {key} must be a text of 1 to 64 characters")
    return value


def _texts(key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= limits.MAX_CLASSES:
        raise DatasetError(f"option {key} must be a list of 1 to {limits.MAX_CLASSES} names")
    return tuple(_text(key, v) for v in value)


def _integers(key: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= limits.MAX_CLASSES:
        raise DatasetError(f"option {key} must be a list of 1 to {limits.MAX_CLASSES} integers")
    return tuple(
        limits.check_int(v, f"option {key}", 0, limits.MAX_CLASSES, error=DatasetError)
        for v in value
    )


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise DatasetError(f"option {key} must be true or false, got {short_repr(value)}")
    return value


#: loader options a scenario (and so a link) may set, per registry kind, each with its check.
#: Options that name server paths or reach the network (torchvision's ``root``,
#: ``download``) are not here: the server's operator decides those.
_LINK_OPTIONS: dict[str, dict[str, Callable[[str, Any], Any]]] = {
    "bundled": {},
    "download": {},
    "sklearn": {"standardize": _flag},
    "chessboard": {
        "n_per_component": _integer(1, limits.MAX_SYNTHETIC_SAMPLES // 16),
        "std": _number(1e-3, 10.0),
        "spacing": _number(1e-3, 100.0),
        "class_names": _texts,
        "permutation": _integers,
        "name": _text,
    },
    "gmm": {
        "n_classes": _integer(2, 100),
        "n_per_class": _integer(1, limits.MAX_SYNTHETIC_SAMPLES),
        "spread": _number(0.0, 100.0),
        "std": _number(1e-3, 10.0),
        "anisotropy": _number(0.0, 1.0),
        "class_names": _texts,
        "name": _text,
    },
}


def _check_options(info: DatasetInfo, options: dict[Any, Any]) -> dict[str, Any]:
    """The allowed, bounded loader ``options`` of a registry dataset (normalised)."""
    group: str = "chessboard" if info.name == "chessboard" else info.kind
    if info.kind == "synthetic" and group != "chessboard":
        group = "gmm"
    allowed = _LINK_OPTIONS[group]
    out: dict[str, Any] = {}
    for key, value in options.items():
        check = allowed.get(key) if isinstance(key, str) else None
        if check is None:
            names = ", ".join(allowed) or "none"
            raise DatasetError(
                f"dataset {info.name!r} has no option {short_repr(key)} (options: {names})"
            )
        out[key] = check(key, value)
    if group == "gmm":
        n = out.get("n_classes", 4) * out.get("n_per_class", 250)
        if n > limits.MAX_SYNTHETIC_SAMPLES:
            raise DatasetError(
                f"n_classes x n_per_class = {n:,} samples, more than "
                f"{limits.MAX_SYNTHETIC_SAMPLES:,}"
            )
    return out


def check_relative_name(name: str) -> None:
    """A served dataset is named ``<folder label>/<relative path>``: no absolute path,
    no ``..``, no ``~`` (checked again after resolving, see :func:`geoviz.app.scenario.served_path`)."""
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "~")) or any(p in ("", ".", "..") for p in parts) or ":" in parts[0]:
        raise DatasetError("a server dataset is named '<data folder>/<path inside it>'")


@dataclass(frozen=True)
class Upload:
    """An uploaded file kept in the session: name, raw bytes and their sha256."""

    filename: str
    data: bytes = field(repr=False)
    digest: str = ""

    def __post_init__(self) -> None:
        if not self.digest:
            object.__setattr__(self, "digest", digest_bytes([self.data]))

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class DatasetChoice:
    """Where one dataset of a scenario comes from.

    Attributes
    ----------
    name
        Registry name (``"mnist"``), the uploaded file's name, ``<data folder>/<path>`` of
        a server file, or a local path (``"path"``).
    source
        ``"registry"``, ``"upload"``, ``"server"`` or ``"path"`` (:data:`SourceKind`).
    split
        ``"train"`` or ``"test"`` (registry datasets; uploads are one split).
    digest
        sha256 of the uploaded bytes (uploads only): part of the cache key, so
        re-uploading a changed file with the same name recomputes.
    stamp
        What a server or local file (or folder) is right now
        (:func:`geoviz.data.formats.path_stamp`: device, inode, type, size, modification and
        change times, read with ``stat`` only), set by whoever serves it
        (:meth:`with_stamp`; the app on every page run). Part of every cache key, so a
        replaced, rewritten or broken file gives new numbers or its loader's sentence,
        never the old numbers; never part of :attr:`token` or of a link. ``None``: not
        looked at (registry datasets and uploads, whose name or digest says what they hold).
    seed
        Seed passed to the registry loader instead of the scenario's seed;
        for synthetic sets it picks *another mixture* (``gmm2d`` with seeds 1,
        2, 3 are three different datasets).
    options
        Extra loader options as ``(key, value)`` pairs (e.g.
        ``(("name", "gmm2d_a"),)``, ``(("permutation", (1, 0, 3, 2)),)``).
    """

    name: str
    source: SourceKind = "registry"
    split: Split = "train"
    digest: str | None = None
    seed: int | None = None
    options: tuple[tuple[str, Any], ...] = ()
    stamp: str | None = None

    def __post_init__(self) -> None:
        # every value may come from a link: check types and bounds, then normalise
        if not isinstance(self.name, str) or not self.name.strip():
            raise DatasetError("a dataset choice needs a name")
        if len(self.name) > MAX_NAME_CHARS:
            raise DatasetError(f"a dataset name has at most {MAX_NAME_CHARS} characters")
        if self.source not in ("registry", "upload", "server", "path"):
            raise DatasetError(
                "dataset source must be 'registry', 'upload', 'server' or 'path', "
                f"got {short_repr(self.source)}"
            )
        if self.split not in ("train", "test"):
            raise DatasetError(f"split must be 'train' or 'test', got {short_repr(self.split)}")
        if self.source == "upload":
            if not isinstance(self.digest, str) or not _SHA256.fullmatch(self.digest):
                raise DatasetError("an uploaded dataset needs the sha256 digest of its bytes")
        elif self.digest is not None:
            raise DatasetError("only uploaded datasets have a digest")
        if self.stamp is not None and (
            self.source not in ("server", "path")
            or not isinstance(self.stamp, str)
            or not _STAMP.fullmatch(self.stamp)
        ):
            raise DatasetError("only a server or local file has a stamp, made by path_stamp")
        if self.seed is not None:
            seed = limits.check_int(
                self.seed, "dataset seed", 0, limits.MAX_SEED, error=DatasetError
            )
            object.__setattr__(self, "seed", seed)
        try:
            raw_options = dict(self.options)
        except (TypeError, ValueError):
            raise DatasetError("dataset options must be (name, value) pairs") from None
        if self.source == "registry":
            info = dataset_info(self.name)  # UnknownDatasetError: never a path (see served_path)
            raw_options = _check_options(info, raw_options)
        elif raw_options:
            raise DatasetError(f"{self.source} datasets take no loader options")
        elif self.source == "server":
            check_relative_name(self.name)
        opts = tuple((str(k), _freeze(v)) for k, v in raw_options.items())
        object.__setattr__(self, "options", opts)

    @classmethod
    def from_upload(cls, upload: Upload) -> DatasetChoice:
        """The choice naming ``upload`` by the sha256 of its bytes."""
        return cls(name=upload.filename, source="upload", digest=upload.digest)

    @classmethod
    def named(cls, name: str, split: Split = "train") -> DatasetChoice:
        """A registry dataset if ``name`` is registered, else the local path ``name``.

        The command line's reading of a dataset argument (the order of
        :func:`geoviz.data.registry.load_dataset`): a path that does not exist is
        refused when it is loaded, with the close registry names.
        """
        try:
            dataset_info(name)
        except UnknownDatasetError:
            return cls(name=name, source="path", split=split)
        return cls(name=name, split=split)

    def with_stamp(self, stamp: str) -> DatasetChoice:
        """This server or local file's choice stamped ``stamp`` (:attr:`stamp`); ``self``
        when it already is."""
        return self if stamp == self.stamp else replace(self, stamp=stamp)

    def check_available(self) -> None:
        """Refuse a registry dataset that cannot load in this process (a missing optional
        package: :func:`geoviz.data.registry.unavailable_reason`); other sources pass.

        Raises
        ------
        DownloadUnavailableError
            A sentence naming the dataset and what it needs.
        """
        if self.source != "registry":
            return
        reason = unavailable_reason(self.name)
        if reason is not None:
            raise DownloadUnavailableError(
                f"dataset {self.name!r} cannot be loaded on this server: {reason}"
            )

    @property
    def label(self) -> str:
        """Short display label: ``mnist``, ``mnist (test)``, ``upload: my.npz``."""
        if self.source == "upload":
            return f"upload: {self.name}"
        if self.source in ("server", "path"):
            return f"{self.source}: {self.name}"
        shown = dict(self.options).get("name", self.name)
        extras: list[str] = [] if self.split == "train" else [self.split]
        if self.seed is not None and "name" not in dict(self.options):
            extras.append(f"seed {self.seed}")
        return f"{shown} ({', '.join(extras)})" if extras else str(shown)

    @property
    def token(self) -> str:
        """Stable identifier: ``registry:mnist:train`` (plus seed/options when set)."""
        if self.source == "upload":
            return f"upload:{self.digest}"
        if self.source in ("server", "path"):
            return f"{self.source}:{self.name}:{self.split}"
        tok = f"registry:{self.name}:{self.split}"
        if self.seed is not None:
            tok += f":seed={self.seed}"
        if self.options:
            tok += ":" + json.dumps(self.options, default=str)
        return tok

    def loader_kwargs(self) -> dict[str, Any]:
        """Options for ``load_dataset`` (lists restored from tuples)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.options}


@dataclass(frozen=True)
class FewShotOptions:
    """Few-shot target (paper Sec. 4.2, Sec. 5.2): keep ``k`` labels per class and
    pseudo-label the rest of ``Q`` by ``pseudo_labels``: ``"spread"`` (label spreading on
    ``Q``'s kNN graph, :func:`geoviz.data.pseudo_labels.spread_labels`) or ``"knn"`` (the
    labelled points' ``n_neighbors``-NN vote; also ``"spread"``'s fall-back)."""

    enabled: bool = False
    k: int = 10
    n_neighbors: int = 1
    pseudo_labels: PseudoLabelMethod = "spread"

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise DatasetError(
                f"few-shot enabled must be true or false, got {short_repr(self.enabled)}"
            )
        k = limits.check_int(
            self.k, "few-shot k (labels per class)", 1, limits.MAX_FEW_SHOT_K, error=DatasetError
        )
        nn = limits.check_int(
            self.n_neighbors, "few-shot n_neighbors", 1, limits.MAX_NEIGHBOURS, error=DatasetError
        )
        if self.pseudo_labels not in PSEUDO_LABEL_METHODS:
            raise DatasetError(
                f"few-shot pseudo_labels must be one of {', '.join(PSEUDO_LABEL_METHODS)}, "
                f"got {short_repr(self.pseudo_labels)}"
            )
        object.__setattr__(self, "k", k)
        object.__setattr__(self, "n_neighbors", nn)


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


#: the raw dataset of an ``"upload"`` or ``"server"`` choice (the caller's store decides
#: where those bytes and folders are); :func:`load_choice` subsamples it
ChoiceResolver = Callable[[DatasetChoice], LabeledDataset]


def load_choice(
    choice: DatasetChoice,
    n: int | None,
    seed: int,
    *,
    allow_paths: bool = True,
    resolve: ChoiceResolver | None = None,
) -> LabeledDataset:
    """Load the dataset ``choice`` names, as a stratified subsample of at most ``n`` samples.

    Parameters
    ----------
    choice
        What to load.
    n
        Samples to keep (stratified, seeded); ``None`` or a smaller dataset: all of it.
    seed
        Seed of the subsample, and of the generator of a synthetic registry dataset unless
        ``choice.seed`` is set.
    allow_paths
        ``False`` refuses ``"path"`` choices (an app: a link never names the server's disk).
    resolve
        Gives the raw dataset of an ``"upload"`` or ``"server"`` choice (the app's
        uploads and data folders); required for those sources.

    Raises
    ------
    DatasetError
        A path choice with ``allow_paths=False``, an upload/server choice without
        ``resolve``, or a dataset that cannot be loaded (:class:`UnknownDatasetError`
        for an unknown name).
    """
    from geoviz.data.preprocess import stratified_subsample
    from geoviz.data.registry import load_dataset

    if choice.source in ("upload", "server"):
        if resolve is None:
            raise DatasetError(
                f"{choice.source} datasets are loaded by the app that holds them", choice.name
            )
        ds = resolve(choice)
        return ds if n is None or ds.n_samples <= n else stratified_subsample(ds, n, seed=seed)
    if choice.source == "path" and not allow_paths:
        raise DatasetError("datasets are named by registry name here, not by path", choice.name)
    own_seed = seed if choice.seed is None else int(choice.seed)
    return load_dataset(
        choice.name,
        split=choice.split,
        n=None if n is None else int(n),
        seed=own_seed,
        # a registry choice names registry data (checked when it was built): never a path
        allow_paths=choice.source == "path",
        **choice.loader_kwargs(),
    )


def feature_bytes_bound(
    choices: Sequence[DatasetChoice], counts: Sequence[int], image_size: int, channels: str
) -> int:
    """Upper bound of the float32 features of ``choices`` harmonised to ``image_size``, bytes.

    Each dataset holds at most its requested count (fewer when the registry says the split
    is smaller) times ``D`` features: ``image_size^2`` per channel for images (3 channels
    unless ``channels="grey"``; uploads, served and local files count as images), the
    registry's ``n_features`` for vectors. The app bounds a scenario's memory with it
    before loading; the CLI says with it what a server needs to open a fit.
    """
    total = 0
    pixels = int(image_size) ** 2 * (1 if channels == "grey" else 3)
    for choice, n in zip(choices, counts, strict=True):
        dim, available = pixels, int(n)
        if choice.source == "registry":
            info = dataset_info(choice.name)
            if info.kind != "synthetic":
                available = info.n_train if choice.split == "train" else info.n_test
            if info.image_shape is None:
                dim = int(info.n_features or pixels)
        total += min(int(n), available) * dim * 4
    return total
