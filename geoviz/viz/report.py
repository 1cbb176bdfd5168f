"""The app's tables of fitted maps and exports, as ``pandas.DataFrame``.

Library code (no Streamlit). What a map can tell comes from its typed
diagnostics (:meth:`geoviz.maps.base.FittedMap.diagnostics`): the fields of the
diagnostics dataclass decide which columns and rows exist, and
:data:`FIELD_FORMATS` (keyed by diagnostics *type* and field, never by map
method) how each reads. A value the map does not have (``None``, or a field its
diagnostics type lacks) reads as the field's ``missing`` text, never NaN; a new
map kind with its own diagnostics type needs no change here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from geoviz import glossary
from geoviz.errors import GeovizError
from geoviz.export import HardLabelRule, dataset_hard_labels
from geoviz.maps.base import (
    MapDiagnostics,
    NeuralDiagnostics,
    PlanDiagnostics,
)
from geoviz.maps.base import (
    nearest_reference_ratio as map_nearest_reference_ratio,
)
from geoviz.viz.fitted_maps import as_index, require_plan

if TYPE_CHECKING:
    import pandas as pd

    from geoviz.data.dataset import SoftLabeledDataset
    from geoviz.geodesic.result import GeodesicResult

#: what a plan statistic (effective neighbours, epsilon, marginal error) reads for a map
#: without a plan: it generates its points instead of averaging reference points
NO_PLAN = "n/a (generated, no plan)"
#: what any other statistic reads where a map does not have it
NOT_AVAILABLE = "n/a"

#: A diagnostics field's value: a number or a flag; ``None`` where the map has none.
FieldValue = float | int | bool | None


@dataclass(frozen=True)
class FieldFormat:
    """How the app shows one field of a map's diagnostics.

    Attributes
    ----------
    label
        Column header / row name / metric label.
    spec
        :func:`format` spec of a number (``".4g"``, ``".2e"``, ``".1%"``).
    missing
        Text where the map has no value: the field is ``None`` or its
        diagnostics type lacks it.
    bool_texts
        ``(when False, when True)`` for a boolean field.
    note
        Short qualifier after a value (``"Monge cost"``) and in the column header.
    caption
        Sentence under the map table explaining the column ("" for none).
    warn_when_false
        Warning shown when the (boolean) field is ``False`` for some map ("" for none).
    help
        Tooltip of the page's metric; ``{reference}``, ``{n_reference}`` and
        ``{n_classes}`` are filled in with the map's reference.
    headline
        The Maps page shows the field as a metric per map.
    compare
        A row of the side-by-side comparison of two maps.
    """

    label: str
    spec: str = ".4g"
    missing: str = NOT_AVAILABLE
    bool_texts: tuple[str, str] = ("no", "yes")
    note: str = ""
    caption: str = ""
    warn_when_false: str = ""
    help: str = ""
    headline: bool = False
    compare: bool = False


_NOT_TRAINED = "n/a (not trained)"

#: Presentation of the diagnostics fields, keyed by ``(diagnostics type, field name)``.
#: :func:`field_format` resolves a type along its MRO (a subclass inherits its base's
#: entries and may override them); fields of unknown types read by their own name.
#: The order of first appearance of a field name is the order of columns and rows.
FIELD_FORMATS: Mapping[tuple[type[MapDiagnostics], str], FieldFormat] = {
    (MapDiagnostics, "otdd"): FieldFormat(glossary.OTDD, compare=True),
    (NeuralDiagnostics, "otdd"): FieldFormat(
        glossary.OTDD,
        note="Monge cost",
        caption="OTDD is the Monge cost of the trained map (same cost, no entropy)",
        compare=True,
    ),
    (MapDiagnostics, "effective_neighbours"): FieldFormat(
        "effective neighbours",
        ".1f",
        missing=NO_PLAN,
        help=(
            "How many reference samples a mapped point T(x) averages: the median over x "
            "of exp(entropy of x's normalised plan row). 1 = a one-to-one map; "
            "N_P = {n_reference} = every x maps to the mean image."
        ),
        headline=True,
        compare=True,
    ),
    (MapDiagnostics, "label_confidence"): FieldFormat(
        "label confidence",
        ".2f",
        help=(
            "Mean over x of the largest entry of T(x)'s soft label: 1 = each mapped point "
            "gets one class of {reference}; 1/{n_classes} = uniform labels."
        ),
        headline=True,
        compare=True,
    ),
    (PlanDiagnostics, "epsilon_abs"): FieldFormat("ε_abs", missing=NO_PLAN),
    (PlanDiagnostics, "marginal_error"): FieldFormat("marginal error", ".2e", missing=NO_PLAN),
    (MapDiagnostics, "converged"): FieldFormat(
        "converged", bool_texts=("not converged", "converged")
    ),
    (PlanDiagnostics, "converged"): FieldFormat(
        "converged",
        bool_texts=("not converged", "converged"),
        warn_when_false=(
            "Some Sinkhorn solves stopped before their tolerance: see the marginal errors."
        ),
    ),
    (NeuralDiagnostics, "converged"): FieldFormat(
        "stopped early",
        bool_texts=("ran its whole budget", "stopped early"),
        caption="'stopped early' = the held-out cost stopped improving",
    ),
    (MapDiagnostics, "iterations"): FieldFormat("iterations", "d"),
    (NeuralDiagnostics, "transport_cost"): FieldFormat("transport cost"),
    (NeuralDiagnostics, "label_term"): FieldFormat("label term"),
    (NeuralDiagnostics, "heldout_ot"): FieldFormat(
        "held-out OT",
        missing=_NOT_TRAINED,
        caption=(
            "held-out OT is W₂² between T#Q and P_i on held-out samples (identity map in the "
            "next column, for scale)"
        ),
        compare=True,
    ),
    (NeuralDiagnostics, "heldout_ot_identity"): FieldFormat(
        "held-out OT, identity", missing=_NOT_TRAINED, compare=True
    ),
    (NeuralDiagnostics, "nearest_reference"): FieldFormat(
        "nearest-reference ratio",
        ".2f",
        help=(
            "Median distance from T(x) to its closest reference sample, divided by the "
            "median nearest-neighbour distance inside P_i: about 1 = mapped points sit "
            "among real ones; much larger = off the data."
        ),
        headline=True,
        compare=True,
    ),
    (NeuralDiagnostics, "classifier_accuracy"): FieldFormat("classifier accuracy", ".1%"),
    (NeuralDiagnostics, "best_iteration"): FieldFormat("best iteration", "d"),
    (NeuralDiagnostics, "fit_seconds"): FieldFormat("fit time (s)", ".1f"),
}

_FIELD_ORDER: dict[str, int] = {}
for _type, _name in FIELD_FORMATS:
    _FIELD_ORDER.setdefault(_name, len(_FIELD_ORDER))


def field_format(diagnostics_type: type[MapDiagnostics], name: str) -> FieldFormat:
    """How field ``name`` of ``diagnostics_type`` reads.

    The entry of the nearest class in the type's MRO; for a field the type lacks,
    the entry of the first type that declares it (its ``missing`` text is what a
    map without the field shows); otherwise the field's own name.
    """
    for cls in diagnostics_type.__mro__:
        found = FIELD_FORMATS.get((cls, name))
        if found is not None:
            return found
    for (_, field_name), found in FIELD_FORMATS.items():
        if field_name == name:
            return found
    return FieldFormat(name.replace("_", " "))


def diagnostic_fields(
    diagnostics: Sequence[MapDiagnostics], extra: Sequence[str] = ()
) -> list[str]:
    """Field names of all ``diagnostics`` (union) and ``extra``, in :data:`FIELD_FORMATS`
    order, then fields of unknown types in their dataclass order."""
    names: dict[str, None] = dict.fromkeys(extra)
    for d in diagnostics:
        names.update(dict.fromkeys(f.name for f in dataclasses.fields(d)))
    unknown = len(_FIELD_ORDER)
    return sorted(names, key=lambda n: _FIELD_ORDER.get(n, unknown))


def field_value(diagnostics: MapDiagnostics, name: str) -> FieldValue:
    """The field's value, ``None`` where the map does not have it (``None`` or no such field)."""
    names = {f.name for f in dataclasses.fields(diagnostics)}
    return getattr(diagnostics, name) if name in names else None


def format_stat(value: FieldValue | str, spec: str = ".4g", missing: str = NOT_AVAILABLE) -> str:
    """``value`` formatted by ``spec`` (booleans and text as they are), ``missing`` for ``None``."""
    if value is None:
        return missing
    if isinstance(value, (bool, str)):
        return str(value)
    return format(value, spec)


def field_text(diagnostics: MapDiagnostics, name: str, *, with_note: bool = False) -> str:
    """Field ``name`` of ``diagnostics`` as text, by :func:`field_format` of its type.

    ``None`` and absent fields read the format's ``missing`` text; booleans its
    ``bool_texts``; ``with_note`` appends the format's note (``"0.51 (Monge cost)"``).
    """
    fmt = field_format(type(diagnostics), name)
    value = field_value(diagnostics, name)
    if value is None:
        return fmt.missing
    if isinstance(value, bool):
        return fmt.bool_texts[int(value)]
    text = format_stat(value, fmt.spec)
    return f"{text} ({fmt.note})" if with_note and fmt.note else text


def field_header(diagnostics: Sequence[MapDiagnostics], name: str) -> str:
    """The column header of field ``name`` for these maps: its label, with its note."""
    # one header per column: the maps of a result share a diagnostics type, else the
    # first declaring type's label
    types = {type(d) for d in diagnostics}
    fmt = field_format(types.pop(), name) if len(types) == 1 else field_format(MapDiagnostics, name)
    return f"{fmt.label} ({fmt.note})" if fmt.note else fmt.label


def map_table(result: GeodesicResult) -> pd.DataFrame:
    """The Maps page's table: one row per map ``T_i``, one column per diagnostics field.

    Columns: ``reference P_i``, then every field of the maps' diagnostics
    (:func:`diagnostic_fields`) headed by :func:`field_format`, with
    :data:`~geoviz.glossary.W_TARGET` after the OTDD. A column keeps its numbers
    (and booleans) where every map has a value; otherwise it is text, a missing
    value reading the field's ``missing`` text (e.g. :data:`NO_PLAN` for the
    effective neighbours of a map without a plan), never NaN.
    """
    import pandas as pd

    diagnostics = result.diagnostics
    columns: dict[str, Sequence[FieldValue | str]] = {"reference P_i": list(result.reference_names)}
    for name in diagnostic_fields(diagnostics):
        values = [field_value(d, name) for d in diagnostics]
        complete = all(v is not None for v in values)
        columns[field_header(diagnostics, name)] = (
            values if complete else [field_text(d, name) for d in diagnostics]
        )
        if name == "otdd":
            columns[glossary.W_TARGET] = list(result.w_to_target)
    return pd.DataFrame(columns)


def two_q_table(matrix: np.ndarray, names: Sequence[str], digits: int = 4) -> pd.DataFrame:
    """The (2,Q) dataset distances as a table (paper Def. 2): rows and columns ``names``
    (``Q, P_1, ..., P_m``), each value as text with ``digits`` significant digits.

    ``matrix`` is ``(m + 1, m + 1)``: row/column 0 is ``Q`` (``W_i`` against the
    references), the rest ``W_ij``. Text, so a table shows ``1.234e+04`` and ``12.34``
    alike, never a column rounded to one width.
    """
    import pandas as pd

    mat = np.asarray(matrix, dtype=np.float64)
    if mat.ndim != 2 or mat.shape[0] != mat.shape[1] or mat.shape[0] != len(names):
        raise GeovizError(
            f"two_q_table: a ({len(names)}, {len(names)}) matrix is needed for {len(names)} "
            f"names, got shape {mat.shape}"
        )
    cells = [[format_stat(float(v), f".{int(digits)}g") for v in row] for row in mat]
    return pd.DataFrame(cells, index=list(names), columns=list(names))


#: characters Streamlit's Markdown would read as formatting: ``$`` starts math, ``|`` a cell,
#: ``[``/``]``/``(``/``)``/``!`` links and images, ``<`` HTML and autolinks, ``&`` character
#: references, ``:`` the ``http://`` autolinks and Streamlit's ``:red[...]``/``:material/x:``
#: directives, ``@`` e-mail autolinks (every one an ASCII punctuation CommonMark lets a
#: backslash escape)
_MARKDOWN_SPECIALS = frozenset("\\`*_{}[]()#+-.!|<>~$&:@")


def markdown_literal(text: str) -> str:
    """``text`` backslash-escaped so Markdown shows it as typed.

    For every string a visitor names (dataset, class, upload and file names, link
    parameters, error messages that quote them) that a page puts into Markdown:
    ``st.markdown``, ``st.caption``, the alert boxes, widget labels and help texts, tab,
    expander and metric labels. ``![x](http://host/a.png)`` then shows as those
    characters, with no image fetched and no link made; a ``|`` does not split a table
    cell, a ``$`` starts no math. Control characters and line breaks become spaces (one
    line: no heading, list or code block can start).
    """
    flat = " ".join(str(text).splitlines())
    flat = "".join(" " if (ord(c) < 32 or ord(c) == 127) else c for c in flat)
    return "".join(f"\\{c}" if c in _MARKDOWN_SPECIALS else c for c in flat)


def plotly_literal(text: str) -> str:
    """``text`` as Plotly shows it literally in a title, legend entry, axis title, tick or
    hover label: Plotly reads a subset of HTML there (``<a href>``, ``<b>``, ``<span
    style>``, ``<br>``, entities), so ``&``, ``<`` and ``>`` become entities and line
    breaks spaces."""
    flat = " ".join(str(text).splitlines())
    return flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def two_q_markdown(matrix: np.ndarray, names: Sequence[str], digits: int = 4) -> str:
    """:func:`two_q_table` as a Markdown pipe table (same cells, names escaped with
    :func:`markdown_literal`). A page shows it with the Markdown it has already loaded,
    where a table widget would first fetch a data-frame renderer (~1 MB of script in
    Streamlit; issue 26)."""
    table = two_q_table(matrix, names, digits)
    head = [markdown_literal(n) for n in names]
    lines = [
        "| | " + " | ".join(head) + " |",
        "|---|" + "---:|" * len(head),
    ]
    for name, row in zip(head, table.to_numpy(), strict=True):
        lines.append(f"| **{name}** | " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


def map_table_notes(result: GeodesicResult) -> tuple[list[str], list[str]]:
    """``(captions, warnings)`` under :func:`map_table`: the fields' ``caption`` texts, and
    the ``warn_when_false`` text of every boolean field that is ``False`` for some map."""
    captions: dict[str, None] = {}
    warnings: dict[str, None] = {}
    for d in result.diagnostics:
        for name in diagnostic_fields([d]):
            fmt = field_format(type(d), name)
            if fmt.caption:
                captions[fmt.caption] = None
            if fmt.warn_when_false and field_value(d, name) is False:
                warnings[fmt.warn_when_false] = None
    return list(captions), list(warnings)


def plan_neighbours_table(
    result: GeodesicResult, i: int, indices: np.ndarray, k: int
) -> pd.DataFrame:
    """``pandas.DataFrame``: one row per (target point, plan neighbour) of map ``i``.

    Columns: ``target #``, ``target class``, ``effective neighbours``, ``rank``,
    ``reference #``, ``reference class``, ``weight`` (row-normalised plan weight);
    padding entries are left out.
    """
    import pandas as pd

    require_plan(result)
    idx = np.asarray(indices, dtype=np.int64).ravel()
    q, ref = result.target, result.references[i]
    nb_idx, nb_w, perp = result.neighbours(i, idx)
    rows = []
    for r, t in enumerate(idx):
        for j in range(min(int(k), nb_idx.shape[1])):
            if nb_idx[r, j] < 0:
                continue
            rows.append(
                {
                    "target #": int(t),
                    "target class": q.classes[int(q.labels[int(t)])],
                    "effective neighbours": float(perp[r]),
                    "rank": j + 1,
                    "reference #": int(nb_idx[r, j]),
                    "reference class": ref.classes[int(ref.labels[int(nb_idx[r, j])])],
                    "weight": float(nb_w[r, j]),
                }
            )
    return pd.DataFrame(rows)


def nearest_reference_table(
    result: GeodesicResult, i: int, indices: np.ndarray, k: int
) -> pd.DataFrame:
    """One row per (target point, close reference sample) of map ``i``.

    Columns: ``target #``, ``target class``, ``T(x) top label``, ``rank``,
    ``reference #``, ``reference class``, ``distance`` (``||T_i(x) - x'||``).
    """
    import pandas as pd

    idx = np.asarray(indices, dtype=np.int64).ravel()
    q, ref = result.target, result.references[int(i)]
    nb_idx, nb_d = result.nearest_references(int(i), idx, k=int(k))
    top = result.soft_labels[int(i)][as_index(idx)].argmax(dim=1).numpy()
    rows = []
    for r, t in enumerate(idx):
        for j in range(nb_idx.shape[1]):
            rows.append(
                {
                    "target #": int(t),
                    "target class": q.classes[int(q.labels[int(t)])],
                    "T(x) top label": ref.classes[int(top[r])],
                    "rank": j + 1,
                    "reference #": int(nb_idx[r, j]),
                    "reference class": ref.classes[int(ref.labels[int(nb_idx[r, j])])],
                    "distance": float(nb_d[r, j]),
                }
            )
    return pd.DataFrame(rows)


def nearest_reference_ratio(result: GeodesicResult, i: int, max_points: int = 2000) -> float:
    """Median distance from ``T_i(x)`` to its nearest sample of ``P_i``, divided by the
    median nearest-neighbour distance inside ``P_i`` (about 1: mapped points sit among
    the reference samples; much larger: off the data, e.g. blurred averages).

    Maps may report the same statistic in their diagnostics (``nearest_reference``);
    this computes it for any result (seeded subsample of at most ``max_points``) with
    :func:`geoviz.maps.base.nearest_reference_ratio`.
    """
    return map_nearest_reference_ratio(
        result.mapped_features[int(i)],
        result.references[int(i)].features,
        np.random.default_rng(0),
        max_mapped=max_points,
        max_reference=max_points,
    )


def check_pair(first: GeodesicResult, second: GeodesicResult) -> None:
    """Raise :class:`~geoviz.errors.GeovizError` unless the two results are two map
    methods (the comparison's two columns) fitted on the same datasets."""
    if first.method == second.method:
        raise GeovizError(f"expected two different map methods, got {first.method} twice")
    if first.target.fingerprint != second.target.fingerprint or [
        r.fingerprint for r in first.references
    ] != [r.fingerprint for r in second.references]:
        raise GeovizError("the two results were fitted on different datasets")


def label_agreement(first: GeodesicResult, second: GeodesicResult) -> np.ndarray:
    """``(m,)``: share of target points whose hard label (argmax of the soft label over
    ``P_i``'s classes) is the same under both results' ``T_i``."""
    check_pair(first, second)
    return np.array(
        [
            float((a.argmax(dim=1) == b.argmax(dim=1)).float().mean())
            for a, b in zip(first.soft_labels, second.soft_labels, strict=True)
        ]
    )


def hard_label_shares(
    result: GeodesicResult, pa: SoftLabeledDataset, rule: HardLabelRule, seed: int
) -> pd.DataFrame:
    """Per reference ``i``: weight ``a_i``, soft-label mass of its block and the share of
    hard labels under ``rule`` and under ``"argmax"`` (blocks from ``result.block_slices``).

    With ``"block-sample"`` the share is a multinomial draw with probabilities
    ``a``, so it matches ``a_i`` within sampling error; ``"argmax"`` favours the
    largest weights.
    """
    import pandas as pd

    soft = pa.soft_labels.numpy()
    weights = np.asarray(pa.metadata["weights"], dtype=float)
    n = max(len(soft), 1)
    chosen, _ = dataset_hard_labels(pa, rule, seed)  # exactly the exported labels
    top = soft.argmax(axis=1)
    columns = np.arange(soft.shape[1])
    rows = []
    for i, (name, block) in enumerate(
        zip(result.reference_names, result.block_slices, strict=True)
    ):
        cols = columns[block]
        rows.append(
            {
                "reference": name,
                "weight a_i": float(weights[i]),
                "soft-label mass": float(soft[:, cols].sum() / n),
                f"hard-label share ({rule})": float(np.isin(chosen, cols).mean()),
                "hard-label share (argmax)": float(np.isin(top, cols).mean()),
            }
        )
    return pd.DataFrame(rows)


#: Statistics the app computes for any map whose diagnostics lack them (or say ``None``):
#: field name -> ``f(result, i)``.
COMPUTED_FIELDS: Mapping[str, Callable[[GeodesicResult, int], float]] = {
    "nearest_reference": nearest_reference_ratio,
}


def map_comparison_tables(first: GeodesicResult, second: GeodesicResult) -> list[pd.DataFrame]:
    """One small table per map ``T_i``: rows ``quantity``, one text column per result
    (headed by its method), so a missing value reads the field's ``missing`` text
    (e.g. :data:`NO_PLAN`), never NaN.

    Rows: the diagnostics fields marked ``compare`` in :data:`FIELD_FORMATS` that
    either map has (OTDD, effective neighbours, label confidence, held-out OT and
    its identity-map baseline), the :data:`COMPUTED_FIELDS` (nearest-reference
    ratio: a map's own value, else computed from its mapped points), and the share
    of target points whose hard labels agree under both maps.
    """
    import pandas as pd

    check_pair(first, second)
    agree = label_agreement(first, second)
    results = (first, second)
    out = []
    for i in range(first.m):
        diagnostics = [r.diagnostics[i] for r in results]
        rows = []
        for name in diagnostic_fields(diagnostics, extra=list(COMPUTED_FIELDS)):
            base = field_format(MapDiagnostics, name)
            if not base.compare:
                continue
            cells = []
            for r, d in zip(results, diagnostics, strict=True):
                compute = COMPUTED_FIELDS.get(name)
                if field_value(d, name) is None and compute is not None:
                    cells.append(format_stat(compute(r, i), field_format(type(d), name).spec))
                else:
                    cells.append(field_text(d, name, with_note=True))
            rows.append((base.label, *cells))
        rows.append(("hard labels agree", *[f"{agree[i]:.0%}"] * len(results)))
        out.append(pd.DataFrame(rows, columns=["quantity", *(r.method for r in results)]))
    return out


#: below this mean largest soft-label entry a blurry map's labels are said to mix classes
MIXED_LABELS = 0.9


def blur_warning(
    index: int,
    effective_neighbours: float,
    label_confidence: float,
    epsilon: float,
    *,
    images: bool,
    default_epsilon: float,
    blur_neighbours: float,
) -> str:
    """The "Blurry map" sentence for map ``T_{index+1}``, saying only what is true of it.

    Issue 26, item 1: on 2-D points at the default epsilon the old text spoke of "mapped
    images", of labels that "mix classes" at confidence 0.99, and asked to lower epsilon "to
    the default" it already had. Here: images or points by the data; labels mix only when the
    confidence is below :data:`MIXED_LABELS`, else they are said to stay sharp; the fix is
    "lower epsilon (default ...)" above the default, "lower it below the default" at or below.
    """
    what = (
        "mapped images look like a blurred mean"
        if images
        else ("mapped points are pulled towards local means of the reference")
    )
    labels = (
        f"their labels mix classes (confidence {label_confidence:.2f})"
        if label_confidence < MIXED_LABELS
        else f"their labels stay sharp (confidence {label_confidence:.2f})"
    )
    fix = (
        f"Lower ε above (default {default_epsilon:g}) for a sharp map."
        if epsilon > default_epsilon
        else f"ε is {epsilon:g}, at or below the default; lower it further for a sharper map."
    )
    return (
        f"**Blurry map.** Each T{index + 1}(x) averages a median of {effective_neighbours:.0f} "
        f"reference samples (more than {blur_neighbours:g}), so {what}; {labels}. {fix}"
    )
