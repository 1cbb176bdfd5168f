"""What ``geoviz distance | project | grid`` print: the per-map table, blur warnings and
the bootstrap intervals.

Labels of the paper's quantities are the constants of :mod:`geoviz.glossary` (the app's
too); the map table's columns, headers and captions are the app's
(:mod:`geoviz.viz.report`).

It imports the library at its top: it is imported by :mod:`geoviz.cli.geodesic_run` (the
commands' run, imported when a command runs), never by the parser.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from geoviz.cli.output import format_table
from geoviz.geodesic.result import GeodesicResult
from geoviz.geodesic.uncertainty import GeodesicBootstrap
from geoviz.glossary import A_HAT, OBJECTIVE, OBJECTIVE_AT_A_HAT, OTDD, W_TARGET
from geoviz.maps.base import MapDiagnostics, PlanDiagnostics
from geoviz.ot.otdd_cost import BLUR_NEIGHBOURS
from geoviz.viz.report import (
    diagnostic_fields,
    field_header,
    field_text,
    field_value,
    map_table_notes,
)
from geoviz.vocabulary import DEFAULT_EPSILON

__all__ = [
    "blur_lines",
    "num",
    "print_intervals",
    "print_maps",
    "reference_names",
    "table",
]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table: the first column left-aligned, the numbers right-aligned."""
    return format_table(header, rows, right=set(range(1, len(header))))


def num(x: float) -> str:
    """A number as the commands print it: 6 significant digits (scripts read them back)."""
    return f"{x:.6g}"


def reference_names(result: GeodesicResult) -> list[str]:
    """The references' names, in order (as the label space names them)."""
    return list(result.label_space.dataset_names)


def blur_lines(result: GeodesicResult) -> list[str]:
    """One ``BLURRY MAP`` line per map whose effective neighbours exceed ``BLUR_NEIGHBOURS``."""
    eps = float(result.config.otdd.epsilon)
    lines = []
    for i, name in enumerate(reference_names(result)):
        if not result.blurry[i]:
            continue
        hint = (
            f"lower --epsilon (default {DEFAULT_EPSILON:g}) for a sharp map"
            if eps > DEFAULT_EPSILON
            else "lower --epsilon further for a sharp map"
        )
        lines.append(
            f"BLURRY MAP T{i + 1} -> {name}: each mapped point averages a median of "
            f"{result.effective_neighbours[i]:.0f} reference points (more than "
            f"{BLUR_NEIGHBOURS:g}; label confidence {result.label_confidence[i]:.2f}) at "
            f"--epsilon {eps:g} x mean cost, so its mapped points are blurred averages; {hint}."
        )
    return lines


def _maps_heading(result: GeodesicResult, two_q: bool) -> str:
    """The line above the per-map table: what it shows, and the epsilon of plan maps."""
    what = f"{OTDD}, (2,Q) distance to Q and diagnostics" if two_q else f"{OTDD} and diagnostics"
    space = "" if result.features_name == "pixels" else f" in the {result.features_name} space"
    if all(isinstance(d, PlanDiagnostics) for d in result.diagnostics):
        eps = float(result.config.otdd.epsilon)
        return f"{what} of each map T_i: Q -> P_i{space} (epsilon = {eps:g} x mean ground cost):"
    return f"{what} of each {result.config.method} map T_i: Q -> P_i{space}:"


def _cell(diagnostics: MapDiagnostics, name: str) -> str:
    """A field as the CLI prints it: numbers at 6 significant digits (scripts read them
    back), everything else as the app reads it (:func:`geoviz.viz.report.field_text`)."""
    value = field_value(diagnostics, name)
    if isinstance(value, float):
        return num(value)
    return field_text(diagnostics, name)


def print_maps(result: GeodesicResult, *, two_q: bool = False) -> None:
    """The per-map table (OTDD and the diagnostics of each map), its captions and blur
    warnings.

    The columns, their headers, missing texts and captions are those of the app's map
    table (:data:`geoviz.viz.report.FIELD_FORMATS`, keyed by diagnostics type and field);
    a field no map has a value for is left out.
    """
    diagnostics = result.diagnostics
    fields = [
        name
        for name in diagnostic_fields(diagnostics)
        if name != "otdd" and any(field_value(d, name) is not None for d in diagnostics)
    ]
    header = ["reference", field_header(diagnostics, "otdd")]
    if two_q:
        header.append(W_TARGET)
    header += [field_header(diagnostics, name) for name in fields]
    rows = []
    for i, (name, diag) in enumerate(zip(reference_names(result), diagnostics, strict=True)):
        row = [name, num(diag.otdd)]
        if two_q:
            row.append(num(result.w_to_target[i]))
        rows.append(row + [_cell(diag, field) for field in fields])
    print(f"\n{_maps_heading(result, two_q)}")
    print(table(header, rows))
    captions, warnings_ = map_table_notes(result)
    for line in [*captions, *warnings_]:
        print(line)
    for line in blur_lines(result):
        print(line)


def print_intervals(result: GeodesicResult, boot: GeodesicBootstrap, weights: Any = None) -> None:
    """The intervals of W_i and a_hat, and whether ``weights`` can be told from a_hat."""
    what = (
        "Q's samples drawn again, maps fixed"
        if boot.method == "q-resample"
        else "Q and every reference drawn again, maps refitted"
    )
    print(
        f"\n{boot.level:.0%} bootstrap intervals ({boot.method}: {what}; "
        f"B = {boot.replicates}, seed {boot.seed}):"
    )
    w_int = boot.w_to_target_interval()
    a_int = boot.a_hat_interval()
    # refits see the maps' bias (OT's plug-in bias), so their bias-corrected interval is shown
    corrected = boot.method == "refit"
    c_low, c_high = w_int.corrected
    rows = [
        [
            name,
            num(w_int.estimate[i]),
            f"[{num(w_int.low[i])}, {num(w_int.high[i])}]",
            num(w_int.bias[i]),
            *([f"[{num(c_low[i])}, {num(c_high[i])}]"] if corrected else []),
            f"{a_int.estimate[i]:.4f}",
            f"[{a_int.low[i]:.4f}, {a_int.high[i]:.4f}]",
        ]
        for i, name in enumerate(reference_names(result))
    ]
    header = ["reference", W_TARGET, "interval", "bias"]
    header += ["bias-corrected"] if corrected else []
    print(table([*header, A_HAT, "interval"], rows))
    f_int = boot.objective_interval(result.a_hat)
    print(
        f"{OBJECTIVE_AT_A_HAT} = {num(float(f_int.estimate))} "
        f"[{num(float(f_int.low))}, {num(float(f_int.high))}]"
    )
    if weights is not None and not boot.flat:
        gap = boot.gap_interval(weights)
        same = bool(boot.as_good_as_a_hat(weights))
        verdict = (
            "as good as â at this sample size (the interval holds 0)"
            if same
            else "worse than â beyond the sampling noise"
        )
        print(
            f"weights {','.join(f'{w:g}' for w in np.asarray(weights))}: {OBJECTIVE} - "
            f"{OBJECTIVE_AT_A_HAT} = {num(float(gap.estimate))} "
            f"[{num(float(gap.low))}, {num(float(gap.high))}]: {verdict}"
        )
    if boot.flat:
        print("the references are identical as seen from Q: every weight vector is as good as â")
