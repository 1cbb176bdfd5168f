"""The paper's notation and the names geoviz gives it: one table, one spelling each.

Fan & Alvarez-Melis (UAI 2023) write ``Q`` for the target dataset, ``P_i`` for
the references, ``T_i`` for the OTDD maps, ``P_a`` for a dataset of the
generalized geodesic and ``W_i``, ``W_ij`` for the (2,Q)-dataset distances.
:data:`GLOSSARY` maps every symbol to

* ``text`` — the Unicode label shown to people (app, CLI tables, figure
  titles); the constants below (:data:`W_TARGET`, :data:`OBJECTIVE`, ...) are
  these strings: the CLI and :mod:`geoviz.viz` import them, and app pages
  should too, so every front end prints the same thing;
* ``ascii`` — the spelling used in docstrings and comments;
* ``code`` — the dotted names of the attributes and functions that hold it
  (``tests/test_glossary.py`` checks that each one exists).

:func:`markdown_table` renders the table for ``README.md`` and
``docs/architecture.md`` (the test checks both copies are current).

This module is plain data: it imports nothing from geoviz.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "A_HAT",
    "EPSILON",
    "EPSILON_ABS",
    "GLOSSARY",
    "MAP",
    "OBJECTIVE",
    "OBJECTIVE_AT_A_HAT",
    "OTDD",
    "OTDD_COST",
    "OTDD_SHORT",
    "P_A",
    "REFERENCE",
    "TARGET",
    "WEIGHTS",
    "W_BETWEEN",
    "W_SYMBOL",
    "W_TARGET",
    "GlossaryEntry",
    "markdown_table",
]

# --------------------------------------------------------------------------- labels

#: The target dataset.
TARGET = "Q"
#: A reference dataset, ``i = 1..m``.
REFERENCE = "P_i"
#: The OTDD map from ``Q`` to ``P_i``.
MAP = "T_i"
#: Interpolation weights, a point of the simplex.
WEIGHTS = "a"
#: A dataset of the generalized geodesic.
P_A = "P_a"
#: The squared (2,Q)-dataset distance (paper Def. 2), without arguments.
W_SYMBOL = "W²₂,Q"
#: ``W_i``: (2,Q) distance between reference ``i`` and the target (``w_to_target``).
W_TARGET = "W²₂,Q(P_i, Q)"
#: ``W_ij``: (2,Q) distance between references ``i`` and ``j`` (``w_between``).
W_BETWEEN = "W²₂,Q(P_i, P_j)"
#: The projection objective of eq. (ds_eq).
OBJECTIVE = "W²(P_a, Q)"
#: The projection weights of eq. (hat_a).
A_HAT = "â"
#: The objective at ``a_hat`` (``w2_hat``).
OBJECTIVE_AT_A_HAT = "W²(P_â, Q)"
#: The OTDD between the target and a reference.
OTDD = "OTDD d²(Q, P_i)"
#: Short OTDD label (colour bars, table headers).
OTDD_SHORT = "OTDD d²"
#: The OTDD ground cost between samples ``z = (x, y)`` and ``z' = (x', y')``.
OTDD_COST = "‖x − x′‖² + W₂²(α_y, α_y′)"
#: Entropic regularisation, relative to the mean ground cost.
EPSILON = "ε"
#: Absolute entropic regularisation, ``ε × mean cost``.
EPSILON_ABS = "ε_abs"


# --------------------------------------------------------------------------- table


@dataclass(frozen=True)
class GlossaryEntry:
    """One symbol of the paper.

    Attributes
    ----------
    symbol
        The paper's LaTeX.
    text
        Unicode label shown in the app, the CLI and figures.
    ascii
        Spelling in docstrings and comments.
    meaning
        What it is, with the paper's equation or section.
    code
        Dotted names (``module.attribute`` or ``module.Class.attribute``) that
        hold it in geoviz.
    """

    symbol: str
    text: str
    ascii: str
    meaning: str
    code: tuple[str, ...]


_RESULT = "geoviz.geodesic.result.GeodesicResult"

GLOSSARY: tuple[GlossaryEntry, ...] = (
    GlossaryEntry(
        r"Q",
        TARGET,
        "Q",
        "target dataset (N_Q samples z = (x, y)), pushed forward by the maps",
        (f"{_RESULT}.target",),
    ),
    GlossaryEntry(
        r"P_i",
        REFERENCE,
        "P_i",
        "reference (training) dataset i = 1..m",
        (f"{_RESULT}.references", f"{_RESULT}.reference_names", f"{_RESULT}.m"),
    ),
    GlossaryEntry(
        r"\mathcal{T}_i",
        MAP,
        "T_i",
        "OTDD map Q -> P_i, z -> [x_i; y_i] (barycentric projection, eq. (bary_map), or neural "
        "map, eq. (max-min); Sec. 3.1)",
        (
            "geoviz.maps.barycentric.BarycentricMap",
            "geoviz.maps.neural.NeuralOTDDMap",
            f"{_RESULT}.mapped_features",
            f"{_RESULT}.soft_labels",
        ),
    ),
    GlossaryEntry(
        r"a \in \Delta_{m-1}",
        WEIGHTS,
        "a",
        "interpolation weights on the probability simplex",
        (
            "geoviz.geodesic.weights.check_weights",
            "geoviz.geodesic.weights.project_to_simplex",
            "geoviz.geodesic.distances.simplex_grid",
        ),
    ),
    GlossaryEntry(
        r"P_a = \left(\sum_i a_i \mathcal{T}_i\right)\sharp Q",
        P_A,
        "P_a",
        "dataset on the generalized geodesic, labels concatenated across references (Sec. 3.2-3.3)",
        (
            f"{_RESULT}.interpolate",
            "geoviz.geodesic.interpolate.generalized_geodesic_dataset",
            "geoviz.geodesic.labels.LabelSpace",
        ),
    ),
    GlossaryEntry(
        r"W_i = \mathcal{W}^2_{2,Q}(P_i, Q)",
        W_TARGET,
        "W_i = W^2_{2,Q}(P_i, Q)",
        "squared (2,Q)-dataset distance between reference i and the target (Def. 2)",
        (f"{_RESULT}.w_to_target", "geoviz.geodesic.distances.TwoQDistances.w_to_target"),
    ),
    GlossaryEntry(
        r"W_{ij} = \mathcal{W}^2_{2,Q}(P_i, P_j)",
        W_BETWEEN,
        "W_ij = W^2_{2,Q}(P_i, P_j)",
        "squared (2,Q)-dataset distance between references i and j, (m, m) (Def. 2)",
        (f"{_RESULT}.w_between", "geoviz.geodesic.distances.TwoQDistances.w_between"),
    ),
    GlossaryEntry(
        r"\mathcal{W}^2(P_a, Q)",
        OBJECTIVE,
        "W^2(P_a, Q)",
        "projection objective sum_i a_i W_i - 1/2 sum_{i!=j} a_i a_j W_ij (eq. (ds_eq)); "
        "column / metadata key `objective`",
        (f"{_RESULT}.objective", "geoviz.geodesic.distances.objective"),
    ),
    GlossaryEntry(
        r"\hat a",
        A_HAT,
        "a_hat",
        "argmin of the objective on the simplex, a quadratic programme (eq. (hat_a))",
        (f"{_RESULT}.a_hat", "geoviz.geodesic.distances.optimal_weights"),
    ),
    GlossaryEntry(
        r"\mathcal{W}^2(P_{\hat a}, Q)",
        OBJECTIVE_AT_A_HAT,
        "W^2(P_a_hat, Q)",
        "the objective at a_hat",
        (f"{_RESULT}.w2_hat",),
    ),
    GlossaryEntry(
        r"d^2_{\mathrm{OT}}(Q, P_i)",
        OTDD,
        "d^2_OT(Q, P_i)",
        "optimal transport dataset distance, entropic (Sec. 2.2, eq. (otdd))",
        (f"{_RESULT}.otdd", "geoviz.ot.otdd.otdd", "geoviz.ot.otdd_result.OTDDResult.cost"),
    ),
    GlossaryEntry(
        r"\lVert x - x'\rVert_2^2 + W_2^2(\alpha_y, \alpha_{y'})",
        OTDD_COST,
        "||x - x'||^2 + W_2^2(alpha_y, alpha_y')",
        "OTDD ground cost (squared Euclidean, no 1/2; label term between class conditionals)",
        ("geoviz.ot.otdd_cost.ground_cost", "geoviz.ot.labels.label_distances"),
    ),
    GlossaryEntry(
        r"\varepsilon",
        EPSILON,
        "epsilon",
        "entropic regularisation, relative to the mean ground cost",
        ("geoviz.ot.otdd_cost.OTDDConfig.epsilon", "geoviz.vocabulary.DEFAULT_EPSILON"),
    ),
    GlossaryEntry(
        r"\varepsilon_{\mathrm{abs}}",
        EPSILON_ABS,
        "epsilon_abs",
        "absolute regularisation of each coupling, epsilon x mean(C)",
        (f"{_RESULT}.epsilon_abs", "geoviz.ot.otdd_result.OTDDResult.epsilon_abs"),
    ),
    GlossaryEntry(
        r"P^M_t = ((1-t)\,\mathrm{Id} + t\,\mathcal{T})\sharp Q",
        "P^M_t",
        "P^M_t",
        "McCann interpolation between Q and one reference (appendix)",
        (f"{_RESULT}.mccann", "geoviz.geodesic.interpolate.mccann_dataset"),
    ),
    GlossaryEntry(
        r"\left(\sum_i a_i \mathcal{T}_i\right)\sharp Q,\ \mathcal{T}_i \text{ random}",
        "Mixup",
        "Mixup",
        "baseline: random pairs of reference samples mixed with weights a (paper Sec. "
        "'Transfer learning on *NIST datasets'; Fig. 'Visualization and comparison ...' (b))",
        ("geoviz.geodesic.mixup.mixup_interpolation",),
    ),
)


def markdown_table() -> str:
    """:data:`GLOSSARY` as a Markdown table (paper, label, docstring spelling, meaning, code)."""
    lines = [
        "| paper | shown as | in docstrings | meaning | code |",
        "|---|---|---|---|---|",
    ]
    for entry in GLOSSARY:
        code = ", ".join(f"`{name}`" for name in entry.code)
        cells = [f"${entry.symbol}$", entry.text, f"`{entry.ascii}`", entry.meaning, code]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)
