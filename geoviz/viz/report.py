"""The app's tables of fitted maps and exports, as ``pandas.DataFrame``.

Library code (no Streamlit). A statistic a map kind does not have reads
:data:`NO_PLAN` or ``"n/a"``, never NaN.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from geoviz.errors import GeovizError
from geoviz.viz.fitted_maps import as_index, require_plan

if TYPE_CHECKING:
    import pandas as pd

    from geoviz.data.dataset import SoftLabeledDataset
    from geoviz.export import HardLabelRule
    from geoviz.geodesic.pipeline import GeodesicResult


#: what the app shows instead of a plan statistic (effective neighbours, epsilon, marginal
#: error) for neural maps, which generate their points instead of averaging reference points
NO_PLAN = "n/a (generated, no plan)"


def format_stat(value: Any, spec: str = ".4g", missing: str = NO_PLAN) -> str:
    """``value`` formatted by ``spec``, or ``missing`` for ``None``/NaN (never ``"nan"``)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return missing
    return missing if not np.isfinite(x) else format(x, spec)


def map_table(result: GeodesicResult) -> pd.DataFrame:
    """The Maps page's table: one row per map ``T_i``.

    Barycentric maps: OTDD, ``W^2``, effective neighbours, label confidence,
    ``epsilon_abs``, marginal error and convergence (numbers). Neural maps have no
    plan: those plan columns say :data:`NO_PLAN`, and the fit's own diagnostics
    follow (Monge cost, held-out OT against the identity map, nearest-reference
    ratio, classifier accuracy, iterations, early stopping).
    """
    import pandas as pd

    from geoviz import glossary

    names = list(result.reference_names)
    if result.method != "neural":
        return pd.DataFrame(
            {
                "reference P_i": names,
                glossary.OTDD: result.otdd,
                glossary.W_TARGET: result.w_to_target,
                "effective neighbours": result.effective_neighbours,
                "label confidence": result.label_confidence,
                "ε_abs": result.epsilon_abs,
                "marginal error": result.marginal_errors,
                "converged": list(result.converged),
            }
        )
    details = _details(result)
    return pd.DataFrame(
        {
            "reference P_i": names,
            f"{glossary.OTDD} (Monge cost)": result.otdd,
            glossary.W_TARGET: result.w_to_target,
            "label confidence": result.label_confidence,
            "held-out OT": [format_stat(d.get("heldout_ot"), missing="n/a") for d in details],
            "held-out OT, identity": [
                format_stat(d.get("heldout_ot_identity"), missing="n/a") for d in details
            ],
            "nearest-reference ratio": [
                format_stat(d.get("nearest_reference"), ".2f", missing="n/a") for d in details
            ],
            "classifier accuracy": [
                format_stat(d.get("classifier_accuracy"), ".1%", missing="n/a") for d in details
            ],
            "iterations (best)": [
                f"{int(d.get('iterations_run', 0))} ({int(d.get('best_iteration', 0))})"
                for d in details
            ],
            "stopped early": list(result.converged),
            "effective neighbours": [NO_PLAN] * result.m,
            "ε_abs": [NO_PLAN] * result.m,
            "marginal error": [NO_PLAN] * result.m,
        }
    )


def _details(result: GeodesicResult) -> list[dict[str, Any]]:
    details = list(getattr(result, "map_details", ()) or ())
    return details if len(details) == result.m else [{} for _ in range(result.m)]


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

    The neural fit reports the same statistic (``map_details[i]["nearest_reference"]``);
    this computes it for any result (seeded subsample of at most ``max_points``) with
    :func:`geoviz.maps.base.nearest_reference_ratio`.
    """
    from geoviz.maps.base import nearest_reference_ratio as ratio

    return ratio(
        result.mapped_features[int(i)],
        result.references[int(i)].features,
        np.random.default_rng(0),
        max_mapped=max_points,
        max_reference=max_points,
    )


def check_pair(bary: GeodesicResult, neural: GeodesicResult) -> None:
    if bary.method != "barycentric" or neural.method != "neural":
        raise GeovizError("expected a barycentric and a neural result, in this order")
    if bary.target.fingerprint != neural.target.fingerprint or [
        r.fingerprint for r in bary.references
    ] != [r.fingerprint for r in neural.references]:
        raise GeovizError("the two results were fitted on different datasets")


def label_agreement(bary: GeodesicResult, neural: GeodesicResult) -> np.ndarray:
    """``(m,)``: share of target points whose hard label (argmax of the soft label over
    ``P_i``'s classes) is the same under the barycentric and the neural ``T_i``."""
    check_pair(bary, neural)
    return np.array(
        [
            float((b.argmax(dim=1) == n.argmax(dim=1)).float().mean())
            for b, n in zip(bary.soft_labels, neural.soft_labels, strict=True)
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

    from geoviz.export import dataset_hard_labels

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


def map_comparison_tables(bary: GeodesicResult, neural: GeodesicResult) -> list[pd.DataFrame]:
    """One small table per map ``T_i``: rows ``quantity``, columns ``barycentric`` and
    ``neural`` (text, so a missing value reads :data:`NO_PLAN` or ``n/a``, never NaN).

    Rows: OTDD (entropic plan) / Monge cost of the trained map, label confidence,
    effective neighbours (barycentric only), nearest-reference ratio, held-out OT
    (neural: trained map vs identity), and the share of target points whose hard
    labels agree under both maps.
    """
    import pandas as pd

    check_pair(bary, neural)
    agree = label_agreement(bary, neural)
    details = _details(neural)
    out = []
    for i in range(bary.m):
        d = details[i]
        held = format_stat(d.get("heldout_ot"), missing="n/a")
        ident = format_stat(d.get("heldout_ot_identity"), missing="n/a")
        rows = [
            (
                "OTDD d² (plan) / Monge cost (neural)",
                format_stat(bary.otdd[i]),
                format_stat(neural.otdd[i]),
            ),
            (
                "label confidence",
                format_stat(bary.label_confidence[i], ".2f"),
                format_stat(neural.label_confidence[i], ".2f"),
            ),
            ("effective neighbours", format_stat(bary.effective_neighbours[i], ".1f"), NO_PLAN),
            (
                "nearest-reference ratio",
                format_stat(nearest_reference_ratio(bary, i), ".2f"),
                format_stat(d.get("nearest_reference"), ".2f"),
            ),
            (
                "held-out OT (identity map)",
                "n/a (not trained)",
                f"{held} ({ident})",
            ),
            ("hard labels agree", f"{agree[i]:.0%}", f"{agree[i]:.0%}"),
        ]
        out.append(pd.DataFrame(rows, columns=["quantity", "barycentric", "neural"]))
    return out
