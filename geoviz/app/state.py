"""The app's scenario model, defined without Streamlit.

A *scenario* is everything that determines the expensive computations: the
target ``Q``, the references ``P_1..P_m``, sample sizes, few-shot options and
preprocessing. Pages keep one :class:`Scenario` in ``st.session_state`` (through
:class:`SessionModel`, which only needs a mutable mapping) so every page works
on the same choice; :mod:`geoviz.app.services` caches results by
:meth:`Scenario.key`.

Environment variables (read by :func:`AppSettings.from_env`):

``GEOVIZ_APP_N``
    Samples per dataset of the default scenario (default 2000; tests use ~200).
``GEOVIZ_APP_GRID``
    Resolution of the ternary heatmap grid (default 30).
``GEOVIZ_APP_EMBED_N``
    Points per dataset in the UMAP embedding (default 300; placing P_a costs time per point).
``GEOVIZ_TRANSFER_BACKEND``
    How the Evidence page runs its trainings: ``auto`` (Ray when installed and able to
    start, else sequential; default), ``ray`` or ``sequential``.
``GEOVIZ_NEURAL_PRESET``
    Training budget of neural OTDD maps in new scenarios: ``tiny`` (seconds on small data;
    tests), ``cpu`` (default, minutes per map at 32x32) or ``paper`` (GPU scale).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, MutableMapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np

from geoviz import limits
from geoviz.data.registry import DatasetInfo, dataset_info
from geoviz.errors import DatasetError, GeovizError, WeightsError
from geoviz.ot.otdd import DEFAULT_EPSILON

__all__ = [
    "DEFAULT_REFERENCES",
    "DEFAULT_TARGET",
    "EPSILON_CHOICES",
    "MAP_METHODS",
    "NEURAL_PRESET_NAMES",
    "AppSettings",
    "BackgroundJob",
    "DatasetChoice",
    "FewShotOptions",
    "ResultStore",
    "Scenario",
    "SessionModel",
    "Upload",
    "default_scenario",
    "entry_weights",
    "epsilon_choices",
    "preset_scenarios",
    "scenario_from_token",
    "scenario_to_token",
    "sync_form_state",
    "weights_from_text",
    "weights_to_text",
]

SourceKind = Literal["registry", "upload", "server"]
Split = Literal["train", "test"]
ChannelMode = Literal["auto", "grey", "rgb"]
MapMethod = Literal["barycentric", "neural"]
NeuralPreset = Literal["tiny", "cpu", "paper"]

#: how the OTDD maps are computed (:attr:`geoviz.geodesic.pipeline.GeodesicConfig.method`)
MAP_METHODS: tuple[MapMethod, ...] = ("barycentric", "neural")
#: training budgets of neural maps (:data:`geoviz.maps.neural.NEURAL_PRESETS`), small to large
NEURAL_PRESET_NAMES: tuple[NeuralPreset, ...] = ("tiny", "cpu", "paper")

DEFAULT_TARGET = "mnist"
DEFAULT_REFERENCES = ("fashion_mnist", "usps", "kmnist")

#: relative epsilons offered by the Maps page (``eps_abs = epsilon * mean(C)``), sharp to blurry
EPSILON_CHOICES = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.05)

T = TypeVar("T")


def _env_int(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError as err:
        raise GeovizError(f"environment variable {name} must be an integer, got {raw!r}") from err
    if value < minimum:
        raise GeovizError(f"environment variable {name} must be >= {minimum}, got {value}")
    return value


def _env_data_dirs(env: Mapping[str, str]) -> tuple[tuple[str, Path], ...]:
    """``GEOVIZ_DATA_DIRS``: folders (``os.pathsep``-separated) whose datasets a link may
    name, each as ``<folder name>/<path inside>``; unset, the app reads no server path."""
    raw = env.get("GEOVIZ_DATA_DIRS", "").strip()
    out: dict[str, Path] = {}
    for part in filter(None, (p.strip() for p in raw.split(os.pathsep))):
        folder = Path(part).expanduser().resolve()
        if not folder.is_dir():
            raise GeovizError(f"GEOVIZ_DATA_DIRS names {part!r}, which is not a folder")
        label = folder.name or "data"
        while label in out:
            label += "_"
        out[label] = folder
    return tuple(out.items())


def _env_folder(env: Mapping[str, str], name: str) -> Path | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    folder = Path(raw).expanduser().resolve()
    if not folder.is_dir():
        raise GeovizError(f"environment variable {name} names {raw!r}, which is not a folder")
    return folder


@dataclass(frozen=True)
class AppSettings:
    """Knobs of the app that are not part of a scenario (display sizes, defaults)."""

    n_default: int = 2000
    grid_resolution: int = 30
    embed_per_dataset: int = 300
    transfer_backend: Literal["auto", "ray", "sequential"] = "auto"
    neural_preset: NeuralPreset = "cpu"
    data_dirs: tuple[tuple[str, Path], ...] = ()
    export_root: Path | None = None
    max_scenario_mb: int = 1024

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AppSettings:
        env = os.environ if env is None else env
        return cls(
            n_default=_env_int(env, "GEOVIZ_APP_N", 2000, minimum=10),
            grid_resolution=_env_int(env, "GEOVIZ_APP_GRID", 30, minimum=2),
            embed_per_dataset=_env_int(env, "GEOVIZ_APP_EMBED_N", 300, minimum=10),
            transfer_backend=_env_backend(env),
            neural_preset=_env_neural_preset(env),
            data_dirs=_env_data_dirs(env),
            export_root=_env_folder(env, "GEOVIZ_EXPORT_ROOT"),
            max_scenario_mb=_env_int(env, "GEOVIZ_APP_MAX_MB", 1024, minimum=16),
        )

    def admit(self, scenario: Scenario) -> Scenario:
        """``scenario`` if this server runs it for anyone who asks (a link, the form), else
        :class:`DatasetError` saying which switch of the operator it would need.

        Beyond the bounds every :class:`Scenario` meets (:mod:`geoviz.limits`): datasets
        from the server's disk only from the folders in ``GEOVIZ_DATA_DIRS``, neural maps
        at most at this server's budget (``GEOVIZ_NEURAL_PRESET``: a link cannot start a
        GPU-scale training), and the features of all datasets together within
        ``GEOVIZ_APP_MAX_MB`` (:func:`scenario_feature_bytes`).
        """
        for choice in scenario.choices:
            if choice.source == "server":
                served_path(choice.name, self.data_dirs)
        if scenario.map_method == "neural" and NEURAL_PRESET_NAMES.index(
            scenario.neural_preset
        ) > NEURAL_PRESET_NAMES.index(self.neural_preset):
            raise DatasetError(
                f"this server trains neural maps at most at the {self.neural_preset!r} budget "
                f"(GEOVIZ_NEURAL_PRESET), not {scenario.neural_preset!r}"
            )
        need = scenario_feature_bytes(scenario)
        if need > self.max_scenario_mb * 2**20:
            raise DatasetError(
                f"this scenario's datasets take about {need / 2**20:,.0f} MB as float32 features, "
                f"more than the {self.max_scenario_mb:,} MB this server allows per scenario "
                "(GEOVIZ_APP_MAX_MB); use fewer samples or a smaller image size"
            )
        return scenario


def _env_backend(env: Mapping[str, str]) -> Literal["auto", "ray", "sequential"]:
    raw = env.get("GEOVIZ_TRANSFER_BACKEND", "").strip().lower() or "auto"
    if raw not in ("auto", "ray", "sequential"):
        raise GeovizError(
            f"environment variable GEOVIZ_TRANSFER_BACKEND must be auto, ray or sequential, got {raw!r}"
        )
    return raw  # type: ignore[return-value]


def _env_neural_preset(env: Mapping[str, str]) -> NeuralPreset:
    raw = env.get("GEOVIZ_NEURAL_PRESET", "").strip().lower() or "cpu"
    if raw not in NEURAL_PRESET_NAMES:
        raise GeovizError(
            "environment variable GEOVIZ_NEURAL_PRESET must be one of "
            f"{', '.join(NEURAL_PRESET_NAMES)}, got {raw!r}"
        )
    return raw  # type: ignore[return-value]


#: longest dataset name, option string or class name a scenario (or a link) may carry
MAX_NAME_CHARS = 200
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _short(value: Any, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters: error texts never echo a whole link."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(low: float, high: float) -> Callable[[str, Any], float]:
    def check(key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DatasetError(f"option {key} must be a number, got {_short(value)}")
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
        raise DatasetError(f"option {key} must be true or false, got {_short(value)}")
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
    group = "chessboard" if info.name == "chessboard" else info.kind
    if info.kind == "synthetic" and group != "chessboard":
        group = "gmm"
    allowed = _LINK_OPTIONS[group]
    out: dict[str, Any] = {}
    for key, value in options.items():
        check = allowed.get(key) if isinstance(key, str) else None
        if check is None:
            names = ", ".join(allowed) or "none"
            raise DatasetError(
                f"dataset {info.name!r} has no option {_short(key)} (options: {names})"
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


def _check_relative(name: str) -> None:
    """A served dataset is named ``<folder label>/<relative path>``: no absolute path,
    no ``..``, no ``~`` (checked again after resolving, see :func:`served_path`)."""
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
            object.__setattr__(self, "digest", hashlib.sha256(self.data).hexdigest())

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class DatasetChoice:
    """Where one dataset of a scenario comes from.

    Attributes
    ----------
    name
        Registry name (``"mnist"``) or the uploaded file's name.
    source
        ``"registry"`` or ``"upload"``.
    split
        ``"train"`` or ``"test"`` (registry datasets; uploads are one split).
    digest
        sha256 of the uploaded bytes (uploads only): part of the cache key, so
        re-uploading a changed file with the same name recomputes.
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

    def __post_init__(self) -> None:
        # every value may come from a link: check types and bounds, then normalise
        if not isinstance(self.name, str) or not self.name.strip():
            raise DatasetError("a dataset choice needs a name")
        if len(self.name) > MAX_NAME_CHARS:
            raise DatasetError(f"a dataset name has at most {MAX_NAME_CHARS} characters")
        if self.source not in ("registry", "upload", "server"):
            raise DatasetError(
                f"dataset source must be 'registry', 'upload' or 'server', got {_short(self.source)}"
            )
        if self.split not in ("train", "test"):
            raise DatasetError(f"split must be 'train' or 'test', got {_short(self.split)}")
        if self.source == "upload":
            if not isinstance(self.digest, str) or not _SHA256.fullmatch(self.digest):
                raise DatasetError("an uploaded dataset needs the sha256 digest of its bytes")
        elif self.digest is not None:
            raise DatasetError("only uploaded datasets have a digest")
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
            _check_relative(self.name)
        opts = tuple((str(k), _freeze(v)) for k, v in raw_options.items())
        object.__setattr__(self, "options", opts)

    @classmethod
    def from_upload(cls, upload: Upload) -> DatasetChoice:
        return cls(name=upload.filename, source="upload", digest=upload.digest)

    @property
    def label(self) -> str:
        """Short display label: ``mnist``, ``mnist (test)``, ``upload: my.npz``."""
        if self.source == "upload":
            return f"upload: {self.name}"
        if self.source == "server":
            return f"server: {self.name}"
        shown = dict(self.options).get("name", self.name)
        extras = [] if self.split == "train" else [self.split]
        if self.seed is not None and "name" not in dict(self.options):
            extras.append(f"seed {self.seed}")
        return f"{shown} ({', '.join(extras)})" if extras else str(shown)

    @property
    def token(self) -> str:
        """Stable identifier: ``registry:mnist:train`` (plus seed/options when set)."""
        if self.source == "upload":
            return f"upload:{self.digest}"
        if self.source == "server":
            return f"server:{self.name}:{self.split}"
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
    """Few-shot target (paper Sec. 3.2 figure, Sec. 5): keep ``k`` labels per
    class and pseudo-label the rest of ``Q`` with a ``n_neighbors``-NN classifier."""

    enabled: bool = False
    k: int = 10
    n_neighbors: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise DatasetError(
                f"few-shot enabled must be true or false, got {_short(self.enabled)}"
            )
        k = limits.check_int(
            self.k, "few-shot k (labels per class)", 1, limits.MAX_FEW_SHOT_K, error=DatasetError
        )
        nn = limits.check_int(
            self.n_neighbors, "few-shot n_neighbors", 1, limits.MAX_NEIGHBOURS, error=DatasetError
        )
        object.__setattr__(self, "k", k)
        object.__setattr__(self, "n_neighbors", nn)


@dataclass(frozen=True)
class Scenario:
    """Target, references and every option that changes the computed geodesic.

    Attributes
    ----------
    target
        ``Q``.
    references
        ``P_1..P_m`` with ``m >= 2``.
    n_target, n_reference
        Samples drawn (stratified, seeded) from ``Q`` and from each ``P_i``;
        datasets with fewer samples are used whole.
    few_shot
        Few-shot target options.
    image_size, channels
        Common image format (``geoviz.data.preprocess.harmonize``).
    epsilon
        Entropic regularisation of the OTDD couplings, **relative** to the
        mean ground cost (``eps_abs = epsilon * mean(C)``, ``C = ||x - x'||^2 +
        W_2^2`` with no 1/2); default :data:`geoviz.ot.otdd.DEFAULT_EPSILON`
        (sharp maps). Larger values blur the maps.
    seed
        Seed of subsampling and of every randomised step.
    map_method
        ``"barycentric"`` (projection of the entropic plan, default) or ``"neural"``
        (generator trained on the OTDD cost, :class:`geoviz.maps.neural.NeuralOTDDMap`).
    neural_preset
        Training budget of neural maps (``"tiny"``, ``"cpu"``, ``"paper"``); only part
        of :meth:`key` for ``map_method="neural"``.
    """

    target: DatasetChoice
    references: tuple[DatasetChoice, ...]
    n_target: int = 2000
    n_reference: int = 2000
    few_shot: FewShotOptions = FewShotOptions()
    image_size: int = 32
    channels: ChannelMode = "auto"
    epsilon: float = DEFAULT_EPSILON
    seed: int = 0
    map_method: MapMethod = "barycentric"
    neural_preset: NeuralPreset = "cpu"

    def __post_init__(self) -> None:
        refs = tuple(self.references)
        object.__setattr__(self, "references", refs)
        if len(refs) < 2:
            raise DatasetError(
                f"choose at least 2 reference datasets P_i (got {len(refs)}): a geodesic needs m >= 2"
            )
        tokens = [r.token for r in refs]
        if len(set(tokens)) != len(tokens):
            dup = sorted({r.label for r in refs if tokens.count(r.token) > 1})
            raise DatasetError(f"each reference can be used once; repeated: {', '.join(dup)}")
        if len(refs) > limits.MAX_REFERENCES:
            raise DatasetError(
                f"at most {limits.MAX_REFERENCES} reference datasets, got {len(refs)}"
            )
        if not all(isinstance(c, DatasetChoice) for c in (self.target, *refs)):
            raise DatasetError("the target and references must be dataset choices")
        if not isinstance(self.few_shot, FewShotOptions):
            raise DatasetError("few_shot must be FewShotOptions")
        for what in ("n_target", "n_reference"):
            n = limits.check_int(
                getattr(self, what),
                what,
                limits.MIN_SAMPLES,
                limits.MAX_SAMPLES,
                error=DatasetError,
            )
            object.__setattr__(self, what, n)
        size = limits.check_int(
            self.image_size,
            "image_size",
            limits.MIN_IMAGE_SIZE,
            limits.MAX_IMAGE_SIZE,
            why="pixels per side of the common image size",
            error=DatasetError,
        )
        object.__setattr__(self, "image_size", size)
        if self.channels not in ("auto", "grey", "rgb"):
            raise DatasetError(
                f"channels must be 'auto', 'grey' or 'rgb', got {_short(self.channels)}"
            )
        object.__setattr__(self, "epsilon", limits.check_epsilon(self.epsilon, error=DatasetError))
        seed = limits.check_int(self.seed, "seed", 0, limits.MAX_SEED, error=DatasetError)
        object.__setattr__(self, "seed", seed)
        if self.map_method not in MAP_METHODS:
            raise DatasetError(
                f"map_method must be one of {', '.join(MAP_METHODS)}, got {_short(self.map_method)}"
            )
        if self.neural_preset not in NEURAL_PRESET_NAMES:
            raise DatasetError(
                f"neural_preset must be one of {', '.join(NEURAL_PRESET_NAMES)}, "
                f"got {_short(self.neural_preset)}"
            )

    # ------------------------------------------------------------------ views
    @property
    def m(self) -> int:
        return len(self.references)

    @property
    def choices(self) -> tuple[DatasetChoice, ...]:
        """``(Q, P_1, ..., P_m)``."""
        return (self.target, *self.references)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description (used for the cache key and manifests)."""
        return asdict(self)

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
            raise DatasetError(f"not a scenario description (unknown field {_short(unknown[0])})")
        refs = values.get("references")
        if not isinstance(refs, (list, tuple)):
            raise DatasetError("not a scenario description (no list of references)")
        if len(refs) > limits.MAX_REFERENCES:
            raise DatasetError(
                f"at most {limits.MAX_REFERENCES} reference datasets, got {len(refs)}"
            )
        try:
            values["target"] = _choice_from_dict(values["target"])
            values["references"] = tuple(_choice_from_dict(r) for r in refs)
            if "few_shot" in values:
                few = values["few_shot"]
                if not isinstance(few, Mapping) or set(few) - {"enabled", "k", "n_neighbors"}:
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
        """Hash of what determines the *loaded datasets* (not the OT options); computed once."""

        def compute() -> str:
            d = self.to_dict()
            for name in ("epsilon", "map_method", "neural_preset"):
                d.pop(name)
            return _hash(d)

        return self._memo("_data_key", compute)

    def _key_dict(self) -> dict[str, Any]:
        d = self.to_dict()
        if self.map_method == "barycentric":
            # the neural budget does not change barycentric maps, and barycentric keys stay
            # those of scenarios from before the map method existed (disk placements, links)
            d.pop("map_method")
            d.pop("neural_preset")
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
            "_otdd_key", lambda: self.with_(map_method="barycentric", neural_preset="cpu").key()
        )

    def with_method(self, method: MapMethod) -> Scenario:
        """The same data and OTDD options with the maps computed by ``method``."""
        return self if method == self.map_method else self.with_(map_method=method)

    @property
    def map_label(self) -> str:
        """``"barycentric"`` or ``"neural (tiny budget)"``."""
        if self.map_method == "neural":
            return f"neural ({self.neural_preset} budget)"
        return "barycentric"

    def describe(
        self, is_image: bool | None = None, n_samples: Sequence[int] | None = None
    ) -> list[str]:
        """Markdown lines for the sidebar.

        ``n_samples`` are the sample counts of the loaded ``(Q, P_1, ..., P_m)`` when known:
        the lines then show them instead of the requested N, with a note for every dataset
        that has fewer samples than requested (it is used whole).
        """

        def ref(i: int, r: DatasetChoice) -> str:
            return r.label if r.label == f"P{i + 1}" else f"P{i + 1} = {r.label}"

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
            f"**Q** (target): {self.target.label}, N = {n_q}",
            "**References**: " + ", ".join(ref(i, r) for i, r in enumerate(self.references)),
            f"{ref_n}{size}",
        ]
        if counts is not None:
            requested = [self.n_target] + [self.n_reference] * self.m
            for choice, n, want in zip(self.choices, counts, requested, strict=True):
                if n < want:
                    lines.append(f"N capped at {n} for {choice.label} (it has only {n} samples)")
        if self.few_shot.enabled:
            lines.append(
                f"few-shot: {self.few_shot.k} labels per class + {self.few_shot.n_neighbors}-NN pseudo-labels"
            )
        lines.append(f"OTDD maps: {self.map_label}")
        return lines

    def with_(self, **changes: Any) -> Scenario:
        """A validated copy with ``changes`` applied (``dataclasses.replace``)."""
        return replace(self, **changes)


_SCENARIO_FIELDS = frozenset(f.name for f in fields(Scenario))
_CHOICE_FIELDS = frozenset(f.name for f in fields(DatasetChoice))


def _choice_from_dict(d: Any) -> DatasetChoice:
    if not isinstance(d, Mapping) or not set(d) <= _CHOICE_FIELDS:
        raise DatasetError("not a scenario description (bad dataset entry)")
    return DatasetChoice(**d)


def served_path(name: str, data_dirs: Sequence[tuple[str, Path]]) -> Path:
    """The file or folder a ``server`` dataset names, inside one of ``data_dirs``.

    ``name`` is ``<folder label>/<path inside it>`` (see :func:`_env_data_dirs`). The path
    is resolved (symlinks and ``..``) and must stay inside its folder. Every refusal is the
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
    _check_relative(name)
    label, _, inside = name.partition("/")
    roots = dict(data_dirs)
    refusal = DatasetError(f"no dataset {_short(name, 80)} in this server's data folders")
    if label not in roots or not inside:
        raise refusal
    root = roots[label]
    try:
        target = (root / inside).resolve(strict=True)
    except (OSError, RuntimeError):
        raise refusal from None
    if not target.is_relative_to(root):
        raise refusal
    return target


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
    """Upper bound of the float32 features of the scenario's harmonised datasets, bytes.

    Each dataset holds at most its requested N (fewer when the registry says the split is
    smaller) times ``D`` features: ``image_size^2`` per channel for images (3 channels
    unless ``channels="grey"``; uploads and server files count as images), the registry's
    ``n_features`` for vectors.
    """
    total = 0
    pixels = scenario.image_size**2 * (1 if scenario.channels == "grey" else 3)
    for choice, n in zip(
        scenario.choices, [scenario.n_target] + [scenario.n_reference] * scenario.m, strict=True
    ):
        dim, available = pixels, n
        if choice.source == "registry":
            info = dataset_info(choice.name)
            if info.kind != "synthetic":
                available = info.n_train if choice.split == "train" else info.n_test
            if info.image_shape is None:
                dim = int(info.n_features or pixels)
        total += min(n, available) * dim * 4
    return total


def epsilon_choices(current: float | None = None) -> tuple[float, ...]:
    """:data:`EPSILON_CHOICES` plus ``current`` (e.g. typed on the Datasets page), ascending."""
    values = set(EPSILON_CHOICES)
    if current is not None and float(current) > 0 and np.isfinite(current):
        values.add(float(current))
    return tuple(sorted(values))


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:24]


def default_scenario(settings: AppSettings | None = None) -> Scenario:
    """Target MNIST sample, references Fashion-MNIST, USPS and KMNIST (bundled, offline)."""
    settings = settings or AppSettings.from_env()
    return Scenario(
        target=DatasetChoice(DEFAULT_TARGET),
        references=tuple(DatasetChoice(n) for n in DEFAULT_REFERENCES),
        n_target=settings.n_default,
        n_reference=settings.n_default,
        neural_preset=settings.neural_preset,
    )


def preset_scenarios(settings: AppSettings | None = None) -> dict[str, Scenario]:
    """Ready-made scenarios for the datasets page (all offline).

    * ``*NIST`` — the default: Q = MNIST, P = Fashion-MNIST, USPS, KMNIST
      (paper Sec. 5.1 uses the *NIST family the same way).
    * ``2-D Gaussian mixtures`` / ``3-D Gaussian mixtures`` — Q and three
      references drawn from different random mixtures (paper Fig. 3b style).
    * ``Chess-board`` — the 16-Gaussian chess board with the classes
      permuted differently in each reference (paper appendix, OTDD maps).
    """
    settings = settings or AppSettings.from_env()
    out = {"*NIST (MNIST ← Fashion-MNIST, USPS, KMNIST)": default_scenario(settings)}
    for dim in (2, 3):
        base = f"gmm{dim}d"
        out[f"{dim}-D Gaussian mixtures"] = Scenario(
            target=DatasetChoice(base, seed=0, options=(("name", "Q"),)),
            references=tuple(
                DatasetChoice(base, seed=s, options=(("name", f"P{s}"),)) for s in (1, 2, 3)
            ),
            n_target=min(settings.n_default, 800),
            n_reference=min(settings.n_default, 800),
            neural_preset=settings.neural_preset,
        )
    perms = ((0, 1, 2, 3), (1, 0, 3, 2), (2, 3, 0, 1))
    out["Chess-board (permuted classes)"] = Scenario(
        target=DatasetChoice("chessboard", seed=0, options=(("name", "Q"),)),
        references=tuple(
            DatasetChoice(
                "chessboard", seed=i + 1, options=(("name", f"P{i + 1}"), ("permutation", p))
            )
            for i, p in enumerate(perms)
        ),
        n_target=min(settings.n_default, 800),
        n_reference=min(settings.n_default, 800),
        neural_preset=settings.neural_preset,
    )
    return out


def sync_form_state(
    state: MutableMapping[str, Any],
    scenario: Scenario,
    values: Mapping[str, Any],
    marker: str = "geoviz_form_synced",
) -> bool:
    """Write a form's widget ``values`` (widget key -> value shown for ``scenario``) into ``state``.

    Call before the widgets are created. When the scenario changed since the form was last
    synced (a preset was loaded, another page changed epsilon, ...) every value is written, so
    the widgets show the active scenario instead of the browser's stale values; otherwise only
    missing keys are filled and the user's unsubmitted edits are kept. Returns ``True`` when
    the whole form was rewritten. Deleting ``state[marker]`` forces the next call to rewrite.
    """
    changed = state.get(marker) != scenario.key()
    for key, value in values.items():
        if changed or key not in state:
            state[key] = value
    state[marker] = scenario.key()
    return changed


class SessionModel:
    """Typed access to the app's entries of a session-state mapping.

    Parameters
    ----------
    state
        ``st.session_state`` in the app, a plain ``dict`` in tests.

    The model keeps: the current :class:`Scenario`, the uploaded files
    (``digest -> Upload``), and the weights picked by the user per scenario
    key (so changing the scenario starts again from ``a_hat``).
    """

    SCENARIO = "geoviz_scenario"
    UPLOADS = "geoviz_uploads"
    WEIGHTS = "geoviz_weights"
    SETTINGS = "geoviz_settings"

    def __init__(
        self, state: MutableMapping[str, Any], settings: AppSettings | None = None
    ) -> None:
        self.state = state
        if self.SETTINGS not in state:
            state[self.SETTINGS] = settings or AppSettings.from_env()
        if self.UPLOADS not in state:
            state[self.UPLOADS] = {}
        if self.WEIGHTS not in state:
            state[self.WEIGHTS] = {}
        if self.SCENARIO not in state:
            state[self.SCENARIO] = default_scenario(state[self.SETTINGS])

    @property
    def settings(self) -> AppSettings:
        return self.state[self.SETTINGS]

    @property
    def scenario(self) -> Scenario:
        return self.state[self.SCENARIO]

    @scenario.setter
    def scenario(self, value: Scenario) -> None:
        if not isinstance(value, Scenario):
            raise TypeError(f"expected a Scenario, got {type(value).__name__}")
        self.state[self.SCENARIO] = value

    @property
    def uploads(self) -> dict[str, Upload]:
        return self.state[self.UPLOADS]

    def add_upload(self, filename: str, data: bytes) -> Upload:
        up = Upload(filename=filename, data=bytes(data))
        self.uploads[up.digest] = up
        return up

    def upload_for(self, choice: DatasetChoice) -> Upload:
        if choice.source != "upload":
            raise DatasetError(f"{choice.label} is not an upload")
        try:
            return self.uploads[str(choice.digest)]
        except KeyError:
            raise DatasetError(
                "the uploaded file is no longer in this session; upload it again", choice.name
            ) from None

    def picked_weights(self, m: int) -> np.ndarray | None:
        """Weights the user picked for the current scenario (already validated and
        rounded by :meth:`set_weights`), or ``None``."""
        w = self.state[self.WEIGHTS].get(self.scenario.key())
        if w is None or len(w) != m:
            return None
        return np.asarray(w, dtype=float)

    def set_weights(self, weights: Sequence[float] | np.ndarray) -> np.ndarray:
        """Validate ``weights`` once, where they enter the app, and keep them rounded.

        The stored vector is :func:`entry_weights` of the input: on the simplex
        and rounded to :data:`WEIGHT_KEY_DECIMALS` places, so the cache key and
        the computed ``P_a`` use the very same numbers.

        Raises
        ------
        WeightsError
            Wrong length, NaN, negative entries or a sum other than 1.
        """
        w = entry_weights(weights, self.scenario.m)
        self.state[self.WEIGHTS][self.scenario.key()] = tuple(w.tolist())
        return w

    def clear_weights(self) -> None:
        self.state[self.WEIGHTS].pop(self.scenario.key(), None)

    def current_weights(self, a_hat: np.ndarray) -> np.ndarray:
        """The picked weights, or ``a_hat`` (rounded like picked ones) when none were picked."""
        w = self.picked_weights(len(a_hat))
        return entry_weights(a_hat, len(a_hat)) if w is None else w

    # ------------------------------------------------------------------ URL state
    def query_state(self) -> dict[str, str]:
        """The session as URL query parameters: ``{"scenario": token}`` plus ``{"a": "0.5,0.3,0.2"}``
        when weights were picked (see :func:`scenario_to_token`)."""
        out = {QUERY_SCENARIO: scenario_to_token(self.scenario)}
        picked = self.picked_weights(self.scenario.m)
        if picked is not None:
            out[QUERY_WEIGHTS] = weights_to_text(picked)
        return out

    def restore(self, params: Mapping[str, str]) -> list[str]:
        """Take the scenario and picked weights from URL query ``params``.

        A missing parameter keeps the session's value. Returns the problems
        found (a corrupt scenario token, weights that do not fit), each as a
        sentence for the user; the session keeps its values for those.
        """
        problems: list[str] = []
        token = params.get(QUERY_SCENARIO)
        if token:
            try:
                self.scenario = self.settings.admit(scenario_from_token(token))
            except GeovizError as err:
                problems.append(
                    f"The link's scenario could not be read ({err}); keeping the current scenario."
                )
        text = params.get(QUERY_WEIGHTS)
        if text:
            try:
                self.set_weights(weights_from_text(text))
            except GeovizError as err:
                problems.append(f"The link's weights were ignored: {err}")
        return problems


#: decimals of the weights the app computes with (the cache key uses the same numbers)
WEIGHT_KEY_DECIMALS = 4

#: URL query parameter names
QUERY_SCENARIO = "scenario"
QUERY_WEIGHTS = "a"


def entry_weights(weights: Sequence[float] | np.ndarray, m: int) -> np.ndarray:
    """Validate a weight vector for ``m`` references and round it on the simplex.

    One check for every way weights enter the app (ternary click, slider, URL,
    ``a_hat``): :func:`geoviz.geodesic.weights.check_weights` (length, NaN,
    negatives, sum 1 within 1e-6), then
    :func:`~geoviz.geodesic.weights.round_to_simplex` to :data:`WEIGHT_KEY_DECIMALS`
    places (the rounded vector still sums to exactly 1).

    Returns
    -------
    np.ndarray
        ``(m,)`` float64.
    """
    from geoviz.geodesic.weights import check_weights, round_to_simplex

    return round_to_simplex(check_weights(weights, m), WEIGHT_KEY_DECIMALS)


def weights_to_text(weights: Sequence[float] | np.ndarray) -> str:
    """``"0.5,0.3,0.2"``: the URL form of rounded weights (shortest exact decimals)."""
    return ",".join(
        f"{float(x):.{WEIGHT_KEY_DECIMALS}f}".rstrip("0").rstrip(".") or "0" for x in weights
    )


def weights_from_text(text: str) -> np.ndarray:
    """Parse :func:`weights_to_text`'s form; :class:`WeightsError` for anything else."""
    text = str(text)
    if len(text) > 32 * limits.MAX_REFERENCES:  # a link's weights: at most m numbers
        raise WeightsError(f"the weights text has {len(text):,} characters; expected m numbers")
    try:
        return np.asarray([float(p) for p in str(text).split(",")], dtype=float)
    except ValueError:
        raise WeightsError(f"weights must be comma-separated numbers, got {_short(text)}") from None


def scenario_to_token(scenario: Scenario) -> str:
    """A URL-safe token holding the whole scenario (zlib-compressed JSON, base64url).

    Exact: :func:`scenario_from_token` gives back an equal scenario, including
    preset options and uploads (by the sha256 of their bytes).
    """
    raw = json.dumps(scenario.to_dict(), sort_keys=True, separators=(",", ":"), default=list)
    return base64.urlsafe_b64encode(zlib.compress(raw.encode(), 9)).decode().rstrip("=")


def scenario_from_token(token: str) -> Scenario:
    """Inverse of :func:`scenario_to_token`.

    Raises
    ------
    DatasetError
        The token is truncated, not ours, or describes an invalid scenario.
    """
    text = str(token).strip()
    if len(text) > limits.MAX_TOKEN_CHARS:
        raise DatasetError(
            f"the scenario token has {len(text):,} characters, more than the "
            f"{limits.MAX_TOKEN_CHARS:,} a scenario needs"
        )
    try:
        packed = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        # inflate at most MAX_TOKEN_INFLATED_BYTES (+1 to notice more): no zip bomb in a link
        inflater = zlib.decompressobj()
        raw = inflater.decompress(packed, limits.MAX_TOKEN_INFLATED_BYTES + 1)
        if len(raw) > limits.MAX_TOKEN_INFLATED_BYTES or inflater.unconsumed_tail:
            raise DatasetError(
                f"the scenario token inflates to more than {limits.MAX_TOKEN_INFLATED_BYTES:,} "
                "bytes; a scenario is far smaller"
            )
        if not inflater.eof:
            raise ValueError("truncated")
        d = json.loads(raw)
    except GeovizError:
        raise
    except (ValueError, zlib.error, RecursionError):
        raise DatasetError("corrupt or truncated scenario token") from None
    if not isinstance(d, dict):
        raise DatasetError("corrupt scenario token (not a mapping)")
    return Scenario.from_dict(d)


class BackgroundJob:
    """One long computation in a daemon thread, with progress any page can poll.

    ``fn(progress)`` runs once in the thread; ``progress(stage, fraction)``
    records the latest stage and fraction and, for every new top-level stage
    (the text before `` (``), a log line with the elapsed seconds. A Streamlit
    page that polls the job can be left (its script is stopped, the thread is
    not) and re-entered: it finds the same job, further along.

    Attributes
    ----------
    result_, error_
        The value returned by ``fn`` or the exception it raised (once done).
    """

    def __init__(
        self, fn: Callable[[Callable[[str, float], None]], Any], name: str = "job"
    ) -> None:
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._stage = "starting"
        self._fraction = 0.0
        self._log: list[tuple[float, str]] = []
        self._started = time.perf_counter()
        self._finished: float | None = None
        self.result_: Any = None
        self.error_: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)
        self._thread.start()

    def _progress(self, stage: str, fraction: float) -> None:
        top = str(stage).split(" (", 1)[0]
        with self._lock:
            self._stage = str(stage)
            self._fraction = float(min(max(fraction, 0.0), 1.0))
            if not self._log or self._log[-1][1] != top:
                self._log.append((time.perf_counter() - self._started, top))

    def _run(self, fn: Callable[[Callable[[str, float], None]], Any]) -> None:
        try:
            self.result_ = fn(self._progress)
        except BaseException as err:  # handed to whoever polls the job
            self.error_ = err
        finally:
            self._finished = time.perf_counter()
            self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block up to ``timeout`` seconds; ``True`` once the job has finished."""
        return self._done.wait(timeout)

    @property
    def elapsed(self) -> float:
        """Seconds since the start (until the end once finished)."""
        end = self._finished if self._finished is not None else time.perf_counter()
        return end - self._started

    def snapshot(self) -> tuple[str, float, list[tuple[float, str]]]:
        """``(stage, fraction in [0, 1], [(seconds, top-level stage), ...])``."""
        with self._lock:
            return self._stage, self._fraction, list(self._log)


class ResultStore:
    """A small thread-safe LRU of computed results, keyed by hashable keys.

    The app keeps one instance per process (created by ``st.cache_resource``
    in :mod:`geoviz.app.services`) so that results are shared across pages and
    sessions. Unlike decorating the compute function with
    ``st.cache_resource`` directly, computing inside :meth:`get_or_compute`
    may report progress to Streamlit elements created by the caller.

    Concurrent requests for one key compute once; the others wait.
    """

    def __init__(self, max_entries: int = 16) -> None:
        self.max_entries = int(max_entries)
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._key_locks: dict[Hashable, threading.Lock] = {}
        self._jobs: dict[Hashable, BackgroundJob] = {}
        self.hits_ = 0
        self.misses_ = 0

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        return default

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def get_or_compute(self, key: Hashable, compute: Callable[[], T]) -> T:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits_ += 1
                return self._data[key]
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                if key in self._data:  # computed by another thread meanwhile
                    self.hits_ += 1
                    return self._data[key]
            value = compute()
            self.put(key, value)
            with self._lock:
                self.misses_ += 1
                self._key_locks.pop(key, None)
            return value

    def start_job(
        self, key: Hashable, fn: Callable[[Callable[[str, float], None]], Any]
    ) -> BackgroundJob:
        """The running (or finished, unclaimed) job for ``key``, else a new one.

        Concurrent callers share one job. Use :meth:`claim_job` to move a
        finished job's result into the store.
        """
        with self._lock:
            job = self._jobs.get(key)
            if job is None:
                job = BackgroundJob(fn, name=f"geoviz-job-{len(self._jobs)}")
                self._jobs[key] = job
            return job

    def job(self, key: Hashable) -> BackgroundJob | None:
        with self._lock:
            return self._jobs.get(key)

    def claim_job(self, key: Hashable) -> BackgroundJob | None:
        """Remove the job of ``key`` if it has finished; its result (not its error) is
        stored under ``key``. Returns the finished job, or ``None`` while it runs."""
        with self._lock:
            job = self._jobs.get(key)
            if job is None or not job.done():
                return None
            del self._jobs[key]
        if job.error_ is None:
            self.put(key, job.result_)
        return job

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
