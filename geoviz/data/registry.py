"""One entry point for every dataset geoviz knows: names, sizes and loading.

>>> from geoviz.data.registry import list_datasets, load_dataset
>>> [info.name for info in list_datasets(include_download=False)][:4]
['mnist', 'fashion_mnist', 'kmnist', 'usps']
>>> load_dataset("usps", split="test", n=100).n_samples
100

Names
-----
* bundled samples (offline): ``mnist``, ``fashion_mnist``, ``kmnist``, ``usps``
  (:mod:`geoviz.data.bundled`), and the colour targets built from them ``mnist_m`` and
  ``mnist_tex`` (:mod:`geoviz.data.colour`);
* scikit-learn (offline): ``digits``, ``iris``, ``wine``
  (:mod:`geoviz.data.sklearn_sets`);
* synthetic (offline): ``chessboard``, ``gmm2d``, ``gmm3d``
  (:mod:`geoviz.data.synthetic`);
* torchvision downloads: ``torchvision:mnist``, ``torchvision:emnist_letters``,
  ``torchvision:fashion_mnist``, ``torchvision:kmnist``, ``torchvision:usps``
  (:mod:`geoviz.data.torchvision_sets`).

Names are case-insensitive and ``-``/space are read as ``_``. A string that is
not a registered name but an existing file or folder is loaded with
:func:`geoviz.data.formats.load_path` (write ``./mnist`` to load a folder that
happens to be called like a registered dataset).

Loaded datasets are cached in-process (the Streamlit app calls
:func:`load_dataset` on every rerun); datasets are immutable, so sharing them
is safe. :func:`clear_cache` empties the cache.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import torch

from geoviz.data import bundled, colour, sklearn_sets, synthetic, torchvision_sets
from geoviz.data.dataset import ImageShape, LabeledDataset
from geoviz.data.formats import load_path, path_stamp
from geoviz.data.preprocess import stratified_subsample
from geoviz.errors import DatasetError, UnknownDatasetError
from geoviz.vocabulary import Split

DatasetKind = Literal["bundled", "sklearn", "synthetic", "download"]

TORCHVISION_PREFIX = "torchvision:"


@dataclass(frozen=True)
class DatasetInfo:
    """What a registered dataset is, without loading it.

    Attributes
    ----------
    name
        Registry name to pass to :func:`load_dataset`.
    title
        Human-readable title.
    kind
        ``"bundled"``, ``"sklearn"``, ``"synthetic"`` or ``"download"``.
    n_train, n_test
        Samples in each split (default options).
    n_classes
        Number of classes.
    image_shape
        ``(C, H, W)`` for images, ``None`` for vectors.
    offline
        Whether it loads without network access or optional packages.
    description
        One sentence: content, source, licence.
    n_features
        Feature dimension ``D``.
    made_from
        Registry name of the dataset whose samples this one is made of (``mnist_m`` and
        ``mnist_tex``: ``mnist``), or ``None``; :func:`lineage` follows it.
    """

    name: str
    title: str
    kind: DatasetKind
    n_train: int
    n_test: int
    n_classes: int
    image_shape: ImageShape | None
    offline: bool
    description: str
    n_features: int | None = None
    made_from: str | None = None


@dataclass(frozen=True)
class _Entry:
    info: DatasetInfo
    loader: Callable[..., LabeledDataset]  # loader(split, seed, **options)
    options: tuple[str, ...]
    seeded: bool = False  # the data itself depends on the seed (synthetic sets)
    bundled_file: str | None = None  # the bundled sample it reads (bundled and colour sets)


def _bundled_entry(spec: bundled.BundledSpec) -> _Entry:
    c, h, w = spec.image_shape
    info = DatasetInfo(
        name=spec.name,
        title=spec.title,
        kind="bundled",
        n_train=spec.n_train,
        n_test=spec.n_test,
        n_classes=spec.n_classes,
        image_shape=spec.image_shape,
        offline=True,
        description=spec.description,
        n_features=c * h * w,
    )

    def load(split: Split, seed: int) -> LabeledDataset:
        return bundled.load_bundled(spec.name, split)

    return _Entry(info, load, (), bundled_file=spec.name)


def _sklearn_entry(spec: sklearn_sets.SklearnSpec) -> _Entry:
    info = DatasetInfo(
        name=spec.name,
        title=spec.title,
        kind="sklearn",
        n_train=spec.n_train,
        n_test=spec.n_test,
        n_classes=spec.n_classes,
        image_shape=spec.image_shape,
        offline=True,
        description=spec.description,
        n_features=spec.n_features,
    )
    is_table = spec.image_shape is None

    def load(split: Split, seed: int, **options: Any) -> LabeledDataset:
        return sklearn_sets.load_sklearn(spec.name, split, **options)

    return _Entry(info, load, ("standardize",) if is_table else ())


#: the colour targets' digits: the bundled MNIST *test* split (disjoint from the ``mnist``
#: reference's training split), 400 for ``train`` and 100 for ``test``
_COLOUR_SPLIT = {"train": slice(0, 400), "test": slice(400, 500)}


def _colour_entry(name: str, title: str, description: str) -> _Entry:
    info = DatasetInfo(
        name=name,
        title=title,
        kind="bundled",
        n_train=400,
        n_test=100,
        n_classes=10,
        image_shape=(3, 28, 28),
        offline=True,
        description=description,
        n_features=3 * 28 * 28,
        made_from="mnist",
    )

    def load(split: Split, seed: int) -> LabeledDataset:
        digits = bundled.load_bundled("mnist", "test")
        part = digits.subset(torch.arange(500)[_COLOUR_SPLIT[split]])
        build = colour.photo_digits if name == "mnist_m" else colour.textured_digits
        return build(part, size=28, seed=0 if split == "train" else 1, name=name)

    return _Entry(info, load, (), bundled_file="mnist")


_CHESS_N = {"train": 100, "test": 25}
_GMM_N = {"train": 250, "test": 100}
_GMM_CLASSES = 4


def _chessboard_entry() -> _Entry:
    info = DatasetInfo(
        name="chessboard",
        title="Chess-board mixture (synthetic 2-D)",
        kind="synthetic",
        n_train=16 * _CHESS_N["train"],
        n_test=16 * _CHESS_N["test"],
        n_classes=4,
        image_shape=None,
        offline=True,
        description=(
            "16 Gaussians on a 4x4 grid, 4 classes in a chess-board pattern (paper appendix, "
            "OTDD map visualisation); options: class_names, permutation, std, spacing."
        ),
        n_features=2,
    )

    def load(split: Split, seed: int, **options: Any) -> LabeledDataset:
        options.setdefault("n_per_component", _CHESS_N[split])
        return synthetic.chessboard_gmm(seed=seed, split=split, **options)

    return _Entry(
        info,
        load,
        ("n_per_component", "std", "spacing", "class_names", "permutation", "name"),
        seeded=True,
    )


def _gmm_entry(dim: Literal[2, 3]) -> _Entry:
    info = DatasetInfo(
        name=f"gmm{dim}d",
        title=f"Gaussian mixture (synthetic {dim}-D)",
        kind="synthetic",
        n_train=_GMM_CLASSES * _GMM_N["train"],
        n_test=_GMM_CLASSES * _GMM_N["test"],
        n_classes=_GMM_CLASSES,
        image_shape=None,
        offline=True,
        description=(
            f"One random anisotropic Gaussian per class in {dim}-D; options: n_classes, "
            "n_per_class, spread, std, anisotropy, class_names."
        ),
        n_features=dim,
    )

    def load(split: Split, seed: int, **options: Any) -> LabeledDataset:
        options.setdefault("n_classes", _GMM_CLASSES)
        options.setdefault("n_per_class", _GMM_N[split])
        return synthetic.gaussian_mixture(dim=dim, seed=seed, split=split, **options)

    return _Entry(
        info,
        load,
        ("n_classes", "n_per_class", "spread", "std", "anisotropy", "class_names", "name"),
        seeded=True,
    )


def _torchvision_entry(spec: torchvision_sets.TorchvisionSpec) -> _Entry:
    c, h, w = spec.image_shape
    info = DatasetInfo(
        name=TORCHVISION_PREFIX + spec.name,
        title=spec.title,
        kind="download",
        n_train=spec.n_train,
        n_test=spec.n_test,
        n_classes=spec.n_classes,
        image_shape=spec.image_shape,
        offline=False,
        description=spec.description + " Needs torchvision and a download.",
        n_features=c * h * w,
    )

    def load(split: Split, seed: int, **options: Any) -> LabeledDataset:
        return torchvision_sets.load_torchvision(spec.name, split, **options)

    return _Entry(info, load, ("root", "download"))


def _build_registry() -> dict[str, _Entry]:
    entries = [_bundled_entry(s) for s in bundled.BUNDLED.values()]
    entries += [
        _colour_entry(
            "mnist_m",
            "MNIST-M-style colour digits (built offline)",
            "MNIST test digits blended by |patch - digit| into patches of scikit-learn's two "
            "sample photos (geoviz.data.colour.photo_digits): a colour target for feature spaces.",
        ),
        _colour_entry(
            "mnist_tex",
            "Coloured digits on procedural textures (built offline)",
            "MNIST test digits painted on random striped and blotched colour backgrounds "
            "(geoviz.data.colour.textured_digits).",
        ),
    ]
    entries += [_sklearn_entry(s) for s in sklearn_sets.SKLEARN.values()]
    entries += [_chessboard_entry(), _gmm_entry(2), _gmm_entry(3)]
    entries += [_torchvision_entry(s) for s in torchvision_sets.TORCHVISION.values()]
    return {e.info.name: e for e in entries}


_REGISTRY: dict[str, _Entry] = _build_registry()

#: Extra spellings accepted by :func:`load_dataset`.
ALIASES: dict[str, str] = {
    "fashion": "fashion_mnist",
    "fashionmnist": "fashion_mnist",
    "fmnist": "fashion_mnist",
    "kuzushiji_mnist": "kmnist",
    "chess": "chessboard",
    "emnist": "torchvision:emnist_letters",
    "emnist_letters": "torchvision:emnist_letters",
    "torchvision:fashionmnist": "torchvision:fashion_mnist",
    "torchvision:emnist": "torchvision:emnist_letters",
}
for _prefix, _kind in (
    ("bundled:", "bundled"),
    ("sklearn:", "sklearn"),
    ("synthetic:", "synthetic"),
):
    ALIASES.update({_prefix + n: n for n, e in _REGISTRY.items() if e.info.kind == _kind})


def list_datasets(
    include_download: bool = True, *, available_only: bool = False
) -> list[DatasetInfo]:
    """Every registered dataset, offline ones first.

    Parameters
    ----------
    include_download
        Also list the torchvision datasets that need a download.
    available_only
        List only the datasets that can load in this process (:func:`unavailable_reason`
        is ``None``): no torchvision entry where torchvision is not installed.
    """
    infos = [e.info for e in _REGISTRY.values()]
    infos.sort(key=lambda info: not info.offline)  # stable: keeps registry order otherwise
    return [
        info
        for info in infos
        if (include_download or info.offline)
        and not (available_only and unavailable_reason(info.name) is not None)
    ]


def unavailable_reason(name: str) -> str | None:
    """Why the registered dataset ``name`` cannot be loaded in this process, or ``None``.

    A missing optional package (torchvision for the ``torchvision:`` downloads); unknown
    names raise :class:`~geoviz.errors.UnknownDatasetError` as in :func:`dataset_info`.
    The reason is a clause: ``"it needs torchvision, which is not installed here (...)"``.
    """
    info = dataset_info(name)
    if info.name.startswith(TORCHVISION_PREFIX):
        return torchvision_sets.unavailable_reason(info.name.removeprefix(TORCHVISION_PREFIX))
    return None


def missing_reason(name: str) -> str | None:
    """What this install lacks for the registered dataset ``name``, or ``None``.

    The bundled sample it reads (the ``bundled`` entries, and ``mnist_m``/``mnist_tex``,
    built from the bundled MNIST) when that file is absent or not a regular file
    (:func:`geoviz.data.bundled.missing_reason`, a clause); a ``stat``, nothing read.
    Such an entry stays listed (its load fails with a sentence), but ``geoviz datasets``
    marks it missing instead of offline.
    """
    entry = _REGISTRY[dataset_info(name).name]
    if entry.bundled_file is None:
        return None
    return bundled.missing_reason(entry.bundled_file)


def dataset_names(include_download: bool = True) -> list[str]:
    """Registry names, offline ones first."""
    return [info.name for info in list_datasets(include_download)]


def _normalize(name: str) -> str:
    key = name.strip().lower().replace("-", "_").replace(" ", "_")
    return ALIASES.get(key, key)


def lineage(name: str) -> str | None:
    """The source dataset a registered ``name``'s samples come from, or ``None`` for a path
    or any other name the registry does not know.

    ``made_from`` is followed (``mnist_m`` and ``mnist_tex`` are MNIST digits: ``mnist``) and
    a torchvision download is the source of the bundled sample of the same name
    (``torchvision:mnist``: ``mnist``). Two datasets of one lineage share their samples'
    origin, so their distance says little about a dataset of another origin.

    >>> [lineage(n) for n in ("mnist_m", "torchvision:mnist", "usps", "./my_folder")]
    ['mnist', 'mnist', 'usps', None]
    """
    key = _normalize(name)
    seen: set[str] = set()
    while key in _REGISTRY and key not in seen:
        seen.add(key)
        bare = key.removeprefix(TORCHVISION_PREFIX)
        if bare != key and bare in _REGISTRY:
            key = bare
            continue
        made_from = _REGISTRY[key].info.made_from
        if made_from is None:
            return key
        key = made_from
    return key if key in _REGISTRY else None


def dataset_info(name: str) -> DatasetInfo:
    """The :class:`DatasetInfo` of a registered name (aliases allowed)."""
    key = _normalize(name)
    if key not in _REGISTRY:
        raise _unknown(name, paths=False)
    return _REGISTRY[key].info


def _unknown(name: str, *, paths: bool = True) -> UnknownDatasetError:
    key = name.strip().lower().replace("-", "_").replace(" ", "_")
    # compare with full names, aliases and the parts of names ("letters" -> emnist_letters)
    candidates: dict[str, str] = {}
    for full in _REGISTRY:
        bare = full.removeprefix(TORCHVISION_PREFIX)
        for part in (bare, *bare.split("_")):
            candidates.setdefault(part, full)
        candidates[full] = full
    for alias, target in ALIASES.items():
        candidates.setdefault(alias, target)
    close = difflib.get_close_matches(key, list(candidates), n=6, cutoff=0.6)
    close += difflib.get_close_matches(
        key.removeprefix(TORCHVISION_PREFIX), list(candidates), n=6, cutoff=0.6
    )
    suggestion = ""
    if close:
        resolved = list(dict.fromkeys(candidates[c] for c in close))[:3]
        suggestion = " Did you mean " + " or ".join(repr(c) for c in resolved) + "?"
    shown = name if len(name) <= 60 else name[:57] + "..."
    # only what can load here (no torchvision entry without torchvision)
    available = ", ".join(info.name for info in list_datasets(available_only=True))
    if not paths:
        return UnknownDatasetError(
            f"unknown dataset {shown!r}.{suggestion} Available: {available}."
        )
    return UnknownDatasetError(
        f"unknown dataset {shown!r}, and no file or folder of that name exists.{suggestion} "
        f"Available: {available}; or pass the path of a dataset file or folder."
    )


def _freeze(value: Any) -> Hashable:
    """Lists become tuples (same meaning to every loader); other unhashables raise TypeError."""
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    hash(value)
    return value


@lru_cache(maxsize=16)
def _load_cached(
    kind: str, key: str, stamp: Hashable, split: str, n: int | None, seed: int, options: tuple
) -> LabeledDataset:
    if n is None:
        return _load(kind, key, split, None, seed, dict(options))
    # subsample the cached full split, so that the full split is loaded only once
    base_seed = seed if kind == "registry" and _REGISTRY[key].seeded else 0
    base = _load_cached(kind, key, stamp, split, None, base_seed, options)
    return stratified_subsample(base, n, seed=seed)


def _load(
    kind: str, key: str, split: str, n: int | None, seed: int, options: dict[str, Any]
) -> LabeledDataset:
    if kind == "path":
        ds = load_path(key, split=split, **options)
    else:
        entry = _REGISTRY[key]
        unknown = sorted(set(options) - set(entry.options))
        if unknown:
            allowed = ", ".join(entry.options) if entry.options else "none"
            raise DatasetError(
                f"dataset {key!r} has no option(s) {', '.join(unknown)} (options: {allowed})", key
            )
        ds = entry.loader(split, seed, **options)
    if n is not None:
        ds = stratified_subsample(ds, n, seed=seed)
    return ds


def load_dataset(
    name_or_path: str | Path,
    *,
    split: Split = "train",
    n: int | None = None,
    seed: int = 0,
    allow_paths: bool = True,
    **options: Any,
) -> LabeledDataset:
    """Load a registered dataset, or a dataset file/folder.

    Parameters
    ----------
    name_or_path
        A registry name (see :func:`list_datasets`; aliases and ``-`` for
        ``_`` accepted) or the path of a file/folder readable by
        :func:`geoviz.data.formats.load_path`.
    split
        ``"train"`` or ``"test"``.
    n
        If given, a seeded stratified subsample of ``n`` samples
        (:func:`~geoviz.data.preprocess.stratified_subsample`); ``n`` at least
        the dataset size returns the whole split.
    seed
        Seed of the subsample and of the synthetic generators.
    allow_paths
        Whether a name that is not registered may be a file or folder. The app passes
        ``False`` (a link names data, never a server path): an unregistered name is then
        an :class:`~geoviz.errors.UnknownDatasetError` whether or not such a path exists.
    **options
        Loader options: ``standardize`` (iris, wine); ``class_names``,
        ``permutation``, ``std``, ``spacing``, ``n_per_component``
        (chessboard); ``n_classes``, ``n_per_class``, ``spread``, ``std``,
        ``anisotropy``, ``class_names`` (gmm2d/gmm3d); ``root``, ``download``
        (torchvision); ``kind``, ``name``, ``label_column`` (paths).

    Returns
    -------
    LabeledDataset
        Cached in-process: repeated calls with the same arguments return the
        same object (a file's or folder's :func:`~geoviz.data.formats.path_stamp`, what
        ``stat`` says of it and of every entry below it, is part of the key).

    Raises
    ------
    UnknownDatasetError
        Neither a registered name nor an existing path; lists close matches
        and the available names.
    DatasetError
        Bad ``split``, ``n`` or option.
    DownloadUnavailableError
        A torchvision dataset cannot be obtained.
    """
    raw = str(name_or_path)
    if split not in ("train", "test"):
        raise DatasetError(f"split must be 'train' or 'test', got {split!r}", raw)
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 2):
        raise DatasetError(f"n must be an integer >= 2 or None, got {n!r}", raw)
    key = _normalize(raw)
    if not isinstance(name_or_path, Path) and key in _REGISTRY:
        kind, stamp = "registry", None
    elif not allow_paths:
        raise _unknown(raw, paths=False)
    else:
        path = Path(raw).expanduser()
        if not path.exists():
            raise _unknown(raw)
        # what the file (or every file of the folder) is now, by stat only: a file replaced
        # or rewritten since it was cached is loaded again, never served from the cache
        kind, key, stamp = "path", str(path.resolve()), path_stamp(path)
    seed = int(seed)
    if n is None and not (kind == "registry" and _REGISTRY[key].seeded):
        seed = 0  # the seed only picks subsamples here: share one cache entry
    try:
        frozen = tuple(sorted((k, _freeze(v)) for k, v in options.items()))
    except TypeError:
        return _load(kind, key, split, n, seed, options)
    return _load_cached(kind, key, stamp, split, n, seed, frozen)


def clear_cache() -> None:
    """Forget every dataset loaded by :func:`load_dataset` in this process."""
    _load_cached.cache_clear()
