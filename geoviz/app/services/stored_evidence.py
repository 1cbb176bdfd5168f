"""Evidence page, the stored part: the simplex studies shipped in ``assets/evidence`` (with
how each was made, the region as good as ``a_hat`` and the measured Table 1 beside them),
read and checked on load, and the sentences the Evidence and About pages say about them."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from geoviz.data.bundled import assets_dir
from geoviz.errors import GeovizError
from geoviz.features.builtin import BoxSpace
from geoviz.glossary import A_HAT, OBJECTIVE
from geoviz.transfer.study import GridStudy

#: Folder of the stored studies under the assets folder (``assets/evidence``).
EVIDENCE_FOLDER = "evidence"
#: A stored study's file name is ``study_<target>.json``.
STUDY_PREFIX = "study_"
#: The region as good as a_hat beside it: ``region_<target>.json`` (benchmarks/evidence_region.py)
REGION_PREFIX = "region_"
#: How a stored study was made (space, preprocessing, N): ``meta_<target>.json``.
META_PREFIX = "meta_"
#: The measured Table 1 in the digit box (copied from benchmarks/results/table1-box).
TABLE1_FILE = "table1_box.json"


@dataclass(frozen=True)
class StoredRegion:
    """The region as good as ``a_hat`` on a stored study's grid (issue 23).

    Written by ``benchmarks/evidence_region.py`` from the study's own geodesic (its objective
    at the grid points equals the study's) with Q-resampling replicates.

    Attributes
    ----------
    a_hat, a_hat_low, a_hat_high
        ``a_hat`` and its percentile interval, one value per reference.
    method, replicates, level
        The bootstrap (``"q-resample"``), ``B`` and the nominal coverage.
    inside
        Per grid point (the study's order): the interval of ``W^2(P_a, Q) - W^2(P_â, Q)``
        holds 0.
    best_index
        The grid point with the highest mean accuracy.
    """

    a_hat: tuple[float, ...]
    a_hat_low: tuple[float, ...]
    a_hat_high: tuple[float, ...]
    method: str
    replicates: int
    level: float
    inside: tuple[bool, ...]
    best_index: int

    @property
    def best_inside(self) -> bool:
        """Whether the accuracy-best grid point is as good as ``a_hat``."""
        return self.inside[self.best_index]


def load_stored_region(path: Path, n_points: int) -> StoredRegion:
    """Read ``region_<target>.json`` for a study of ``n_points`` grid points.

    Raises
    ------
    GeovizError
        Unreadable, malformed, or made for another grid (one sentence).
    """
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        region = StoredRegion(
            a_hat=tuple(float(v) for v in raw["a_hat"]),
            a_hat_low=tuple(float(v) for v in raw["a_hat_low"]),
            a_hat_high=tuple(float(v) for v in raw["a_hat_high"]),
            method=str(raw["method"]),
            replicates=int(raw["replicates"]),
            level=float(raw["level"]),
            inside=tuple(bool(p["as_good_as_a_hat"]) for p in raw["points"]),
            best_index=int(raw["best_accuracy_index"]),
        )
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise GeovizError(
            f"The stored region {path.name} could not be read ({type(err).__name__}); "
            "it is left out."
        ) from err
    except (KeyError, TypeError, ValueError) as err:
        raise GeovizError(
            f"The stored region {path.name} is not a region file (bad or missing field {err}); "
            "it is left out."
        ) from err
    if len(region.inside) != n_points or not 0 <= region.best_index < n_points:
        raise GeovizError(
            f"The stored region {path.name} was made for another grid "
            f"({len(region.inside)} points, the study has {n_points}); it is left out."
        )
    return region


def _read_json(path: Path, what: str) -> Any:
    """``path``'s JSON, or a one-sentence :class:`GeovizError` naming ``what`` and the file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise GeovizError(
            f"The stored {what} {path.name} could not be read ({type(err).__name__}); "
            "it is left out."
        ) from err


def _malformed(path: Path, what: str, err: Exception) -> GeovizError:
    return GeovizError(
        f"The stored {what} {path.name} is malformed (bad or missing field {err}); it is left out."
    )


@dataclass(frozen=True)
class StudyMeta:
    """How a stored study was made (``meta_<target>.json``, beside the study's byte copy).

    Attributes
    ----------
    title
        The target's name for readers (``"MNIST"``).
    space, space_description
        The feature space in two words (``"digit box"``) and in a sentence.
    preprocess, image_size
        ``bench_transfer.py --preprocess`` and the side of the (grey) images, pixels.
    n_per_dataset, n_test
        Training samples per dataset (Q and every reference) and test samples of Q.
    k, seeds, resolution, grid_points, preset
        As in the study (checked against it on load).
    epsilon
        The maps' entropic epsilon (relative).
    command
        The command that made the study.
    """

    title: str
    space: str
    space_description: str
    preprocess: str
    image_size: int
    n_per_dataset: int
    n_test: int
    k: int
    seeds: tuple[int, ...]
    resolution: int
    grid_points: int
    preset: str
    epsilon: float
    command: str


def _common_fields(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a stored study description and a stored Table 1 share: the space, the
    preprocessing, the sizes, k and the seeds (a ``KeyError``/``ValueError`` when malformed)."""
    return {
        "space": str(raw["space"]),
        "space_description": str(raw["space_description"]),
        "preprocess": str(raw["preprocess"]),
        "image_size": int(raw["image_size"]),
        "n_per_dataset": int(raw["n_per_dataset"]),
        "n_test": int(raw["n_test"]),
        "k": int(raw["k"]),
        "seeds": tuple(int(v) for v in raw["seeds"]),
    }


def load_study_meta(path: Path, study: GridStudy) -> StudyMeta:
    """Read ``meta_<target>.json`` and check it describes ``study`` (k, seeds, grid, preset).

    Raises
    ------
    GeovizError
        Unreadable, malformed, or describing another study (one sentence).
    """
    raw = _read_json(path, "study description")
    try:
        meta = StudyMeta(
            title=str(raw["title"]),
            **_common_fields(raw),
            resolution=int(raw["resolution"]),
            grid_points=int(raw["grid_points"]),
            preset=str(raw["preset"]),
            epsilon=float(raw["epsilon"]),
            command=str(raw["command"]),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise _malformed(path, "study description", err) from err
    made = (meta.k, meta.seeds, meta.resolution, meta.grid_points, meta.preset)
    if made != (study.k, study.seeds, study.resolution, len(study.points), study.preset):
        raise GeovizError(
            f"The stored study description {path.name} describes another study (k, seeds, "
            "grid or preset differ from the study's); it is left out."
        )
    return meta


@dataclass(frozen=True)
class MethodScore:
    """One method's measured accuracy (%): mean and sample std over ``n_seeds`` seeds."""

    mean: float
    std: float
    n_seeds: int


@dataclass(frozen=True)
class Table1Row:
    """One target of the measured Table 1.

    Attributes
    ----------
    name, title
        The target's registry name and its name for readers.
    references
        The references' registry names.
    a_hat
        The weights both OTDD and Mixup used (this run's ``a_hat``).
    n_test
        Test samples of Q the accuracies are measured on.
    results, paper
        Per method (``otdd``, ``mixup``, ``fewshot``, ``1nn``): the measured score, and the
        paper's Table 1 accuracy (%).
    """

    name: str
    title: str
    references: tuple[str, ...]
    a_hat: tuple[float, ...]
    n_test: int
    results: Mapping[str, MethodScore]
    paper: Mapping[str, float]

    def lead(self, first: str, second: str) -> float:
        """``first``'s mean minus ``second``'s, in percentage points."""
        return self.results[first].mean - self.results[second].mean


@dataclass(frozen=True)
class StoredTable1:
    """The paper's Table 1 as this project measured it (``table1_box.json``).

    Attributes
    ----------
    rows
        One :class:`Table1Row` per target, in the file's order.
    methods
        Method key to its title, in the table's column order.
    space, space_description, preprocess, image_size
        The feature space and preprocessing, as in :class:`StudyMeta`.
    n_per_dataset, n_test, k, seeds, preset
        Training samples per dataset, at most that many test samples of Q, the k-shot
        target, the training seeds and preset.
    command, commit, made, source, paper_source
        How, from which checkout, when and into which file it was measured, and where the
        paper's numbers come from.
    """

    rows: tuple[Table1Row, ...]
    methods: Mapping[str, str]
    space: str
    space_description: str
    preprocess: str
    image_size: int
    n_per_dataset: int
    n_test: int
    k: int
    seeds: tuple[int, ...]
    preset: str
    command: str
    commit: str
    made: str
    source: str
    paper_source: str

    def frame(self) -> pd.DataFrame:
        """The table as shown: one row per target, each method as ``"mean ± std (paper)"``
        (``± std`` left out when the method has no spread, as 1-NN), then ``a_hat`` and the
        test samples.

        Returns
        -------
        pandas.DataFrame
        """
        return pd.DataFrame([self._frame_row(row) for row in self.rows])

    def _frame_row(self, row: Table1Row) -> dict[str, Any]:
        out: dict[str, Any] = {"target Q": row.title}
        for key, title in self.methods.items():
            score = row.results[key]
            spread = f" ± {score.std:.1f}" if score.std > 0 else ""
            out[f"{title} (paper)"] = f"{score.mean:.1f}{spread} ({row.paper[key]:.1f})"
        out["â (OTDD and Mixup)"] = "(" + ", ".join(f"{w:.2f}" for w in row.a_hat) + ")"
        out["test samples"] = row.n_test
        return out


def _score(raw: Mapping[str, Any]) -> MethodScore:
    return MethodScore(float(raw["mean"]), float(raw["std"]), int(raw["n_seeds"]))


def _table1_row(name: str, raw: Mapping[str, Any], methods: Sequence[str]) -> Table1Row:
    results = {m: _score(raw["results"][m]) for m in methods}
    paper = {m: float(raw["paper"][m]) for m in methods}
    return Table1Row(
        name=name,
        title=str(raw["title"]),
        references=tuple(str(r) for r in raw["references"]),
        a_hat=tuple(float(w) for w in raw["a_hat"]),
        n_test=int(raw["n_test"]),
        results=results,
        paper=paper,
    )


def load_table1(path: Path) -> StoredTable1:
    """Read the measured Table 1 (``table1_box.json``).

    Raises
    ------
    GeovizError
        Unreadable or malformed (one sentence), or without OTDD and Mixup.
    """
    raw = _read_json(path, "Table 1")
    try:
        methods = {str(k): str(v) for k, v in raw["methods"].items()}
        if not {"otdd", "mixup"} <= set(methods):
            raise KeyError("methods: otdd and mixup")
        rows = tuple(_table1_row(n, t, list(methods)) for n, t in raw["targets"].items())
        return StoredTable1(
            rows=rows,
            methods=methods,
            **_common_fields(raw),
            preset=str(raw["preset"]),
            command=str(raw["command"]),
            commit=str(raw["commit"]),
            made=str(raw["made"]),
            source=str(raw["source"]),
            paper_source=str(raw["paper_source"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise _malformed(path, "Table 1", err) from err


def _span(values: Sequence[float]) -> str:
    """``"1.7–3.0"``, or one number when they round alike."""
    low, high = f"{min(values):.1f}", f"{max(values):.1f}"
    return low if low == high else f"{low}–{high}"


def _names(titles: Sequence[str]) -> str:
    """``"A"``, ``"A and B"``, ``"A, B and C"``."""
    return titles[0] if len(titles) == 1 else ", ".join(titles[:-1]) + " and " + titles[-1]


def mixup_sentence(table: StoredTable1) -> str:
    """Who leads between OTDD and Mixup at the same ``a_hat`` in the measured Table 1, by how
    many points, beside the seeds' standard deviation of those two methods there."""
    ahead = {
        who: [row for row in table.rows if row.lead(who, other) > 0]
        for who, other in (("mixup", "otdd"), ("otdd", "mixup"))
    }
    parts = []
    for who, other, label in (("mixup", "otdd", "Mixup at â"), ("otdd", "mixup", "OTDD")):
        rows = ahead[who]
        if not rows:
            continue
        sd = [row.results[m].std for row in rows for m in (who, other)]
        only = "only " if len(rows) < len(table.rows) - len(rows) else ""
        parts.append(
            f"{label} is ahead {only}on {_names([r.title for r in rows])}, by "
            f"{_span([row.lead(who, other) for row in rows])} points (the seeds' sd of the "
            f"two methods there: {_span(sd)})"
        )
    if not parts:
        return "OTDD and Mixup at â score alike on every target."
    return "; ".join(parts) + "."


def measured_claim(table: StoredTable1) -> str:
    """What this project's measured Table 1 says against the paper's claim (OTDD ahead of
    Mixup and of the few-shot baseline), in two sentences, every number from ``table``."""
    titles = [row.title for row in table.rows]
    over_few = ""
    if "fewshot" in table.methods:
        wins = [row.title for row in table.rows if row.lead("otdd", "fewshot") > 0]
        over_few = (
            f" Pretraining on P̂_a beats training on the few-shot set on {len(wins)} of "
            f"{len(titles)} targets."
        )
    return (
        f"This project's own Table 1 on {_names(titles)}, in the {table.space} "
        f"({table.k}-shot, N = {table.n_per_dataset} per dataset, {len(table.seeds)} seeds, "
        f"preset “{table.preset}”).{over_few} Against Mixup with the same weights: "
        f"{mixup_sentence(table)}"
    )


def table1_provenance(table: StoredTable1) -> str:
    """The measured Table 1's space, budget and command, in two sentences."""
    return (
        f"Space: {table.space}, {table.space_description}; preprocessing "
        f"`--preprocess {table.preprocess}`. N = {table.n_per_dataset} training samples per "
        f"dataset, up to {table.n_test} test samples of Q (column “test samples”), "
        f"{table.k}-shot target, {len(table.seeds)} seeds, preset “{table.preset}”; mean ± "
        f"sample std in %, the paper's number in brackets ({table.paper_source}). Measured "
        f"{table.made} from a checkout of `{table.commit}` with `{table.command}` "
        f"(`{table.source}`)."
    )


@dataclass(frozen=True)
class StoredStudy:
    """One measured simplex study shipped with the app (``assets/evidence/study_<target>.json``).

    Attributes
    ----------
    target
        Name of the target dataset Q (from the file name).
    file_name
        The file's name inside the evidence folder.
    study
        The :class:`~geoviz.transfer.study.GridStudy` (its ``statistics`` come from its points).
    region
        The region as good as ``a_hat`` on its grid, when ``region_<target>.json`` is shipped.
    meta
        How it was made (space, preprocessing, N), when ``meta_<target>.json`` is shipped.
    """

    target: str
    file_name: str
    study: GridStudy
    region: StoredRegion | None = None
    meta: StudyMeta | None = None


@dataclass(frozen=True)
class StoredEvidence:
    """Every stored study that could be read, the measured Table 1 when shipped and
    readable, and one sentence per file that could not be read."""

    studies: tuple[StoredStudy, ...]
    problems: tuple[str, ...]
    table1: StoredTable1 | None = None


def evidence_dir() -> Path:
    """The folder of the stored studies: ``assets_dir() / "evidence"``."""
    return assets_dir() / EVIDENCE_FOLDER


def load_stored_study(path: Path) -> StoredStudy:
    """Read one stored study file.

    Raises
    ------
    GeovizError
        The file cannot be read or is not a study written by
        :meth:`GridStudy.to_json` (one sentence, no traceback).
    """
    target = path.stem.removeprefix(STUDY_PREFIX)
    try:
        study = GridStudy.from_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise GeovizError(
            f"The stored study {path.name} could not be read ({type(err).__name__}); "
            "it is left out."
        ) from err
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise GeovizError(
            f"The stored study {path.name} is not a simplex study file (bad or missing field "
            f"{err}); it is left out."
        ) from err
    if not study.points:
        raise GeovizError(f"The stored study {path.name} has no grid points; it is left out.")
    return StoredStudy(target=target, file_name=path.name, study=study)


@functools.lru_cache(maxsize=4)
def _stored_in(folder: Path) -> StoredEvidence:
    studies: list[StoredStudy] = []
    problems: list[str] = []
    for path in sorted(folder.glob(f"{STUDY_PREFIX}*.json")):
        try:
            stored = load_stored_study(path)
        except GeovizError as err:
            problems.append(str(err))
            continue
        region_path = folder / f"{REGION_PREFIX}{stored.target}.json"
        if region_path.exists():
            try:
                region = load_stored_region(region_path, len(stored.study.points))
                stored = dataclasses.replace(stored, region=region)
            except GeovizError as err:
                problems.append(str(err))
        meta_path = folder / f"{META_PREFIX}{stored.target}.json"
        if meta_path.exists():
            try:
                stored = dataclasses.replace(stored, meta=load_study_meta(meta_path, stored.study))
            except GeovizError as err:
                problems.append(str(err))
        studies.append(stored)
    table1 = None
    if (folder / TABLE1_FILE).exists():
        try:
            table1 = load_table1(folder / TABLE1_FILE)
        except GeovizError as err:
            problems.append(str(err))
    return StoredEvidence(tuple(studies), tuple(problems), table1)


def stored_studies(folder: Path | None = None) -> StoredEvidence:
    """The measured studies shipped in ``folder`` (default :func:`evidence_dir`), read once
    per process and folder, in file-name order, with the measured Table 1; a corrupt file
    is left out with a sentence in :attr:`StoredEvidence.problems`, so the others still
    show."""
    return _stored_in((evidence_dir() if folder is None else folder).resolve())


def meta_sentence(stored: StoredStudy) -> str:
    """A stored study's space, preprocessing and N, in two sentences (``""`` without its
    ``meta_<target>.json``)."""
    meta, study = stored.meta, stored.study
    if meta is None:
        return ""
    return (
        f"**{meta.title}**, space: {meta.space}, {meta.space_description}; preprocessing "
        f"`--preprocess {meta.preprocess}`. N = {meta.n_per_dataset} training samples per "
        f"dataset, {meta.n_test} test samples of Q, {meta.k}-shot target, "
        f"{len(meta.seeds)} seeds, {meta.grid_points} grid points (resolution "
        f"{meta.resolution}), preset “{meta.preset}” (method {study.method})."
    )


def geodesic_space_sentence(n_default: int) -> str:
    """That the Geodesic page's default space for grey digits is the stored studies' digit
    box, at another N: ``n_default`` bundled samples per dataset, box-normalised on the
    digit box's canvas (:class:`~geoviz.features.builtin.BoxSpace`)."""
    canvas = BoxSpace().canvas
    return (
        "The Geodesic page's default space for grey digits is this same digit box (its "
        "“auto” space chooses the box for grey glyphs): the same space, at another N. The "
        f"app's default scenario fits its geodesic on N = {n_default} bundled samples per "
        f"dataset, box-normalised at {canvas}×{canvas}, so its {A_HAT} and {OBJECTIVE} are "
        "not these studies' numbers."
    )
