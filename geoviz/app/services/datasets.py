"""Datasets page: the scenario's datasets, dataset choices, uploads and pairwise OTDD."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from geoviz.app.scenario import Scenario, scenario_feature_bytes, served_datasets, served_path
from geoviz.app.services.caches import Progress, disk_cache, store, upload_store
from geoviz.app.session import SessionModel
from geoviz.app.settings import AppSettings
from geoviz.app.uploads import UploadRef
from geoviz.app.uploads import upload_notice as uploads_notice
from geoviz.data import choice as data_choice
from geoviz.data.choice import DatasetChoice
from geoviz.data.dataset import LabeledDataset
from geoviz.data.formats import load_path, rebased_errors
from geoviz.data.pseudo_labels import PseudoLabelMethod
from geoviz.data.registry import dataset_info, list_datasets, unavailable_reason
from geoviz.errors import DatasetError, GeovizError
from geoviz.features import BUILTIN_SPACES, registered_models
from geoviz.features.choice import SpaceChoice
from geoviz.geodesic.config import space_sentence
from geoviz.geodesic.spec import SpecDatasets, load_spec_datasets
from geoviz.memory import check_bytes, memory_guard
from geoviz.ot.otdd import otdd
from geoviz.ot.otdd_cost import OTDDConfig
from geoviz.viz.embedding import Embedding, fit_embedding


@dataclass(frozen=True)
class ScenarioData:
    """The datasets of a scenario, loaded, subsampled and harmonised: the library's
    :class:`~geoviz.geodesic.spec.SpecDatasets` of :meth:`Scenario.spec`, with what the
    app keeps beside them.

    Attributes
    ----------
    loaded
        The datasets (``target``, ``references``, ``target_true``, ``labelled_indices``,
        ``pseudo_label_accuracy``, read through the properties of the same names).
    load_seconds
        Time spent loading.
    data_key
        :meth:`Scenario.data_key` of the scenario these datasets were loaded for.
    """

    loaded: SpecDatasets
    load_seconds: float
    data_key: str

    @property
    def target(self) -> LabeledDataset:
        """``Q`` as used by the geodesic (pseudo-labelled when few-shot)."""
        return self.loaded.target

    @property
    def references(self) -> tuple[LabeledDataset, ...]:
        """``P_1..P_m`` in the same feature space as ``target``."""
        return self.loaded.references

    @property
    def target_true(self) -> LabeledDataset:
        """``Q`` with its true labels (equal to ``target`` unless few-shot)."""
        return self.loaded.target_true

    @property
    def labelled_indices(self) -> np.ndarray | None:
        """Few-shot: indices of ``Q`` whose label was kept; else ``None``."""
        return self.loaded.labelled_indices

    @property
    def pseudo_label_accuracy(self) -> float | None:
        """Few-shot: accuracy of the pseudo-labels (label spreading or kNN) on the other samples."""
        return self.loaded.pseudo_label_accuracy

    @property
    def space_choice(self) -> SpaceChoice | None:
        """Few-shot, ``"auto"``: the space chosen on the labelled points, the fit's too."""
        return self.loaded.space_choice

    @property
    def datasets(self) -> tuple[LabeledDataset, ...]:
        return (self.target, *self.references)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(ds.name for ds in self.datasets)

    @property
    def reference_names(self) -> tuple[str, ...]:
        return tuple(ds.name for ds in self.references)

    @property
    def is_image(self) -> bool:
        return self.target.is_image

    @property
    def dim(self) -> int:
        return self.target.n_features


def pseudo_label_words(method: PseudoLabelMethod) -> str:
    """A few-shot target's pseudo-labels in words: ``"label-spreading pseudo-labels"`` or
    ``"kNN pseudo-labels"`` (:mod:`geoviz.data.pseudo_labels`)."""
    return "label-spreading pseudo-labels" if method == "spread" else "kNN pseudo-labels"


def _resolver(model: SessionModel) -> Callable[[DatasetChoice], LabeledDataset]:
    """The raw dataset of an uploaded or served choice: the server's upload store (by the
    upload's key, whichever session uploaded it) and the operator's data folders
    (:func:`served_path`)."""

    def resolve(choice: DatasetChoice) -> LabeledDataset:
        if choice.source == "upload":
            try:
                return upload_store(model.settings).dataset(str(choice.digest))
            except DatasetError as err:
                raise DatasetError(err.problem, choice.name) from None
        path = served_path(choice.name, model.settings.data_dirs)
        label = choice.name.partition("/")[0]
        # messages name "<folder label>/<path inside>", never the folder's place on the server
        with rebased_errors(dict(model.settings.data_dirs)[label], label):
            return load_path(path, split=choice.split)

    return resolve


def load_choice(model: SessionModel, choice: DatasetChoice, n: int, seed: int) -> LabeledDataset:
    """One dataset of the session's scenario (:func:`geoviz.data.choice.load_choice`, no paths)."""
    return data_choice.load_choice(
        choice, int(n), seed, allow_paths=False, resolve=_resolver(model)
    )


def scenario_data(model: SessionModel, scenario: Scenario | None = None) -> ScenarioData:
    """Load, subsample, harmonise (and few-shot) the scenario's datasets. Cached.

    ``scenario`` (default: the session's) is first admitted by the server's settings
    (:meth:`~geoviz.app.settings.AppSettings.admit`: data folders, neural budget, memory per
    scenario), whichever way it came (form, link, preset), and its served datasets stamped
    by their files as they are now (:meth:`SessionModel.admit
    <geoviz.app.session.SessionModel.admit>`: the cache key follows the file); the datasets
    are then those of its :class:`~geoviz.geodesic.spec.GeodesicSpec`
    (:func:`geoviz.geodesic.spec.load_spec_datasets`, without local paths). A served file
    that changes while it is read is refused, so that the datasets kept are those of the
    key they are kept under.

    Returns
    -------
    ScenarioData
        Its ``data_key`` is that of the scenario as admitted (stamped) here: a caller holding
        an older stamp of the scenario compares it with its own (:func:`start_geodesic
        <geoviz.app.services.geodesic.start_geodesic>` does).
    """
    scenario = model.admit(model.scenario if scenario is None else scenario)

    def compute() -> ScenarioData:
        start = time.perf_counter()
        # loaded, subsampled and harmonised copies live side by side for a moment
        check_bytes(3 * scenario_feature_bytes(scenario), "loading the scenario's datasets")
        with memory_guard("loading the scenario's datasets"):
            loaded = load_spec_datasets(
                scenario.spec, allow_paths=False, resolve=_resolver(model), distinct_names=True
            )
        if scenario.stamped(model.settings.data_dirs) is not scenario:
            # what was read may be neither file: never kept under either's key
            raise DatasetError(
                "a served dataset of this scenario changed on the server while it was "
                "loaded; load the page again"
            )
        return ScenarioData(
            loaded=loaded,
            load_seconds=time.perf_counter() - start,
            data_key=scenario.data_key(),
        )

    # the datasets do not depend on epsilon: moving the Maps page's epsilon reloads nothing
    return store().get_or_compute(("data", scenario.data_key()), compute, tier="fit")


def apply_scenario(model: SessionModel, scenario: Scenario) -> ScenarioData:
    """Make ``scenario`` the session's only once its datasets have loaded.

    The form's Apply and a preset go through here: the scenario is admitted and its
    datasets are loaded (:func:`scenario_data`, cached, so the pages that follow reuse
    them) *before* it replaces the session's. A scenario that cannot work here (an
    upload that is gone, a download without network, a size over the server's budget)
    raises, and the session keeps its working scenario.

    Raises
    ------
    GeovizError
        Why the scenario cannot be used; the session's scenario is unchanged.
    """
    data = scenario_data(model, scenario)
    model.scenario = model.admit(scenario)
    return data


def scenario_data_if_ready(scenario: Scenario) -> ScenarioData | None:
    """The loaded datasets of ``scenario`` if already in memory, else ``None`` (never loads)."""
    ready: ScenarioData | None = store().get(("data", scenario.data_key()))
    return ready


def choice_options(model: SessionModel) -> dict[str, DatasetChoice]:
    """Datasets a user can pick, ``token -> choice``: the scenario's own choices
    first (presets may use seeds/options), then every registry dataset (train
    split), then the session's uploads."""
    out: dict[str, DatasetChoice] = {}
    for c in model.scenario.choices:
        out.setdefault(c.token, c)
    for info in list_datasets(available_only=True):  # never a choice that cannot load here
        c = DatasetChoice(info.name)
        out.setdefault(c.token, c)
    for up in model.uploads.values():
        # UploadRef has the filename and digest from_upload reads (it is typed for Upload)
        c = DatasetChoice.from_upload(up)  # type: ignore[arg-type]
        out.setdefault(c.token, c)
    for name in served_datasets(model.settings.data_dirs):  # only with GEOVIZ_DATA_DIRS
        c = DatasetChoice(name, source="server")
        out.setdefault(c.token, c)
    return out


def unavailable_datasets() -> dict[str, str]:
    """Registry datasets left out of :func:`choice_options` here, ``name -> reason`` (a
    clause: "it needs torchvision, which is not installed here (...)")."""
    out: dict[str, str] = {}
    for info in list_datasets():
        reason = unavailable_reason(info.name)
        if reason is not None:
            out[info.name] = reason
    return out


def unavailable_note() -> str | None:
    """One sentence under the dataset lists naming what they leave out and why, or ``None``.

    Registry names only (never a visitor's text); the reasons are grouped so that five
    torchvision entries read as one sentence.
    """
    by_reason: dict[str, list[str]] = {}
    for name, reason in unavailable_datasets().items():
        by_reason.setdefault(reason, []).append(name)
    if not by_reason:
        return None
    parts = [f"{', '.join(names)} ({reason})" for reason, names in by_reason.items()]
    return "Not offered on this server: " + "; ".join(parts) + "."


def choice_caption(choice: DatasetChoice) -> str:
    """Label for select boxes, flagging datasets that need a download.

    Registry entries with ``offline=False`` (torchvision downloads) are marked
    ``"(needs internet: download fails offline)"`` so nobody picks them on an
    offline machine expecting them to load.
    """
    if choice.source == "upload":
        return choice.label
    try:
        info = dataset_info(choice.name)
    except GeovizError:
        return choice.label
    if info.offline:
        return choice.label
    return f"{choice.label} (needs internet: download fails offline)"


def add_upload(model: SessionModel, filename: str, data: bytes) -> tuple[UploadRef, LabeledDataset]:
    """Take an uploaded file into the server's upload store and the session's choices.

    The file is parsed (:func:`geoviz.data.formats.load_upload`; nothing is kept if it does
    not parse), its bytes go to the store's disk folder and its dataset to the store's
    memory (:class:`~geoviz.app.uploads.UploadStore`); the session keeps only the
    :class:`~geoviz.app.uploads.UploadRef`.

    Raises
    ------
    GeovizError
        The file is not a usable dataset, or larger than the store's disk quota.
    """
    ref, ds = upload_store(model.settings).add(filename, data)
    model.add_upload(ref)
    return ref, ds


#: what the feature-space select box explains
FEATURE_SPACE_HELP = (
    "Where the OTDD costs live (paper Sec. 5.3). auto (default): chosen from the data and "
    "said on this page: the space that measured the most class structure in the target "
    "(pixels, the digit box, the glyph encoder, the natural-image encoder), raw features for "
    "vectors. pixels: raw pixels; pca: 50 principal "
    "components; box: grey digits box-normalised like MNIST; encoder: a small network "
    "shipped with geoviz, trained on glyphs in many colour styles to ignore colour, "
    "background, contrast, position and scale; natural: an ImageNet network "
    "(EfficientNet-Lite0) for photos and textures. P_a's images always come back through the "
    "plans, from the references' own images."
)


def space_line(scenario: Scenario, data: ScenarioData) -> str:
    """The sentence of the scenario's feature space for its loaded datasets: which space
    and, for ``"auto"``, why (:meth:`~geoviz.geodesic.spec.SpecDatasets.chosen_space`: a
    few-shot target's on its labelled points, the choice the fit uses)."""
    config = scenario.spec.config
    return space_sentence(data.loaded.chosen_space(config), config.features)


def space_caveat(scenario: Scenario, data: ScenarioData) -> str | None:
    """The one sentence that flags the answer as not to be trusted, when the measured space
    shows no class structure in Q or references unrelated to it (else ``None``)."""
    choice = data.loaded.chosen_space(scenario.spec.config)
    return None if choice is None else choice.caveat


def feature_space_names() -> tuple[str, ...]:
    """The spaces a scenario may name: the built-in ones and the server's registered models."""
    return (*BUILTIN_SPACES, *registered_models())


def upload_notice(settings: AppSettings, file_limit_mb: int | None = None) -> str:
    """What the upload box says about the largest file, where an upload goes, how long it
    lasts (at most the expiry; less when the shared space fills) and what a link to it gives
    (:func:`geoviz.app.uploads.upload_notice`)."""
    limit = settings.upload_disk_mb if file_limit_mb is None else int(file_limit_mb)
    return uploads_notice(settings.upload_ttl_hours, settings.upload_disk_mb, limit)


def dataset_projection(data: ScenarioData) -> Embedding:
    """PCA of ``Q`` and every ``P_i`` (1000 points each) for the Datasets page. Cached."""
    return store().get_or_compute(
        ("projection", data.data_key),
        lambda: fit_embedding(list(data.datasets), method="pca", max_per_dataset=1000),
        tier="fit",
    )


def pairwise_otdd_if_ready(scenario: Scenario) -> np.ndarray | None:
    """:func:`pairwise_otdd` of ``scenario`` if already in memory, else ``None``."""
    ready: np.ndarray | None = store().get(("pairwise", scenario.otdd_key()))
    return ready


def pairwise_otdd(model: SessionModel, progress: Progress | None = None) -> np.ndarray:
    """Symmetric ``(m+1, m+1)`` OTDD ``d^2`` between ``Q, P_1, ..., P_m``. Cached.

    ``progress(pair description, fraction done)`` is called before each pair.
    """
    scenario = model.scenario
    data = scenario_data(model)

    def compute() -> np.ndarray:
        config = OTDDConfig(epsilon=float(scenario.epsilon), seed=int(scenario.seed))
        ds = data.datasets
        n = len(ds)
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
        mat = np.zeros((n, n))
        for k, (i, j) in enumerate(pairs):
            stage = f"OTDD {ds[i].name} ↔ {ds[j].name}"

            def sub(inner: str, fraction: float, k: int = k, stage: str = stage) -> None:
                if progress is not None:
                    progress(f"{stage} ({inner})", (k + float(fraction)) / len(pairs))

            sub("start", 0.0)
            res = otdd(ds[i], ds[j], config, sub, keep_coupling=False, cache=disk_cache())
            mat[i, j] = mat[j, i] = float(res.cost)
        if progress is not None:
            progress("done", 1.0)
        return mat

    # OTDD between the datasets themselves: the same for barycentric and neural maps
    return store().get_or_compute(("pairwise", scenario.otdd_key()), compute, tier="fit")
