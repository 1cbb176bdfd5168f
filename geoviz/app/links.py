"""URL state: a scenario as a token, weights as text, and where weights enter the app."""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from geoviz import limits
from geoviz.app.scenario import Scenario
from geoviz.data.choice import MAX_NAME_CHARS
from geoviz.data.served import link_choice
from geoviz.errors import DatasetError, GeovizError, WeightsError, short_repr
from geoviz.geodesic.weights import ENTRY_DECIMALS, SimplexWeights, weights_text
from geoviz.vocabulary import AUTO, DEFAULT_EPSILON, Split

#: URL query parameter names
QUERY_SCENARIO = "scenario"
QUERY_WEIGHTS = "a"
#: a readable scenario (the CLI's ``app`` line): ``target``, ``refs`` (comma-separated), ``n``,
#: ``size``, ``seed``, ``epsilon``, ``features``, ``method``, ``split``
QUERY_FIELDS = ("target", "refs", "n", "size", "seed", "epsilon", "features", "method", "split")
#: McCann page: the reference index (0-based) and t
QUERY_MCCANN_REF = "ref"
QUERY_MCCANN_T = "t"


def entry_weights(weights: Sequence[float] | np.ndarray, m: int) -> np.ndarray:
    """Validate a weight vector for ``m`` references and round it on the simplex.

    :meth:`SimplexWeights.from_input <geoviz.geodesic.weights.SimplexWeights.from_input>`
    as an array: :func:`geoviz.geodesic.weights.check_weights` (length, NaN, negatives,
    sum 1 within 1e-6), then :func:`~geoviz.geodesic.weights.round_to_simplex` to
    :data:`ENTRY_DECIMALS` places (the rounded vector still sums to exactly 1). The
    app itself keeps the :class:`~geoviz.geodesic.weights.SimplexWeights`
    (:meth:`geoviz.app.session.SessionModel.set_weights`).

    Returns
    -------
    np.ndarray
        ``(m,)`` float64.
    """
    return SimplexWeights.from_input(weights, m, ENTRY_DECIMALS).to_array()


def weights_to_text(weights: Sequence[float] | np.ndarray) -> str:
    """``"0.5,0.3,0.2"``: the URL form of rounded weights (shortest exact decimals)."""
    return weights_text(weights, ENTRY_DECIMALS)


def weights_from_text(text: str) -> np.ndarray:
    """Parse :func:`weights_to_text`'s form; :class:`WeightsError` for anything else."""
    text = str(text)
    if len(text) > 32 * limits.MAX_REFERENCES:  # a link's weights: at most m numbers
        raise WeightsError(f"the weights text has {len(text):,} characters; expected m numbers")
    try:
        return np.asarray([float(p) for p in str(text).split(",")], dtype=float)
    except ValueError:
        raise WeightsError(
            f"weights must be comma-separated numbers, got {short_repr(text)}"
        ) from None


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
    # a link made before feature spaces existed meant pixels, the default then; tokens
    # made since name their space ("auto" since issue 33), so old links keep their meaning
    d.setdefault("features", "pixels")
    return Scenario.from_dict(d)


def scenario_query(scenario: Scenario) -> dict[str, str]:
    """The readable query of ``scenario`` (:data:`QUERY_FIELDS`), for registry and served
    datasets without few-shot options; inverse of :func:`scenario_from_query`.

    Raises
    ------
    DatasetError
        A scenario the readable form cannot state (uploads, few-shot, neural budgets,
        derived datasets): use :func:`scenario_to_token`.
    """
    plain = all(
        c.source in ("registry", "server") and not c.options and c.seed is None
        for c in scenario.choices
    )
    splits = {c.split for c in scenario.choices}
    if (
        not plain
        or len(splits) != 1
        or scenario.few_shot.enabled
        or scenario.n_target != scenario.n_reference
        or scenario.map_method != "barycentric"
        or scenario.channels != "auto"
    ):
        raise DatasetError("this scenario has options a readable link cannot state")
    query = {
        "target": scenario.target.name,
        "refs": ",".join(r.name for r in scenario.references),
        "n": str(scenario.n_target),
        "size": str(scenario.image_size),
        "seed": str(scenario.seed),
        "epsilon": repr(float(scenario.epsilon)),
        "features": scenario.features,
        "method": scenario.map_method,
        "split": splits.pop(),
    }
    # a field the readable form does not carry (the encoder preset, one added later) would
    # load as its default: a different scenario under the same link, so refuse instead
    if scenario_from_query(query).key() != scenario.key():
        raise DatasetError("this scenario has options a readable link cannot state")
    return query


def scenario_from_query(params: Mapping[str, str]) -> Scenario:
    """The scenario of a readable query (:data:`QUERY_FIELDS`; ``target`` and ``refs``
    required). A name with a ``/`` is a served dataset (``<folder>/<path>``), others are
    registry names. Every value is bounded before it is parsed and the scenario is checked
    like any other (:class:`Scenario`).

    Raises
    ------
    DatasetError
        A missing, overlong or malformed field, or an invalid scenario, in one sentence.
    """
    values: dict[str, str] = {}
    for name in QUERY_FIELDS:
        raw = params.get(name)
        if raw is None:
            continue
        text = str(raw).strip()
        longest = (
            (MAX_NAME_CHARS + 1) * (limits.MAX_REFERENCES + 1) if name == "refs" else MAX_NAME_CHARS
        )
        if len(text) > longest:
            raise DatasetError(f"the link's {name} has {len(text):,} characters, too many")
        values[name] = text
    for needed in ("target", "refs"):
        if not values.get(needed):
            raise DatasetError(f"the link names no {needed}")
    split_text = values.get("split", "train")
    if split_text not in ("train", "test"):
        raise DatasetError(
            f"the link's split must be 'train' or 'test', got {short_repr(split_text)}"
        )
    split: Split = "train" if split_text == "train" else "test"

    def number(name: str, kind: type[int] | type[float], default: Any) -> Any:
        if name not in values:
            return default
        try:
            return kind(values[name])
        except ValueError:
            raise DatasetError(
                f"the link's {name} is not a number: {short_repr(values[name])}"
            ) from None

    refs = [r.strip() for r in values["refs"].split(",")]
    limits.check_reference_count(len(refs), error=DatasetError)  # before each is parsed
    n = number("n", int, 2000)
    return Scenario(
        target=link_choice(values["target"], split),
        references=tuple(link_choice(r, split) for r in refs),
        n_target=n,
        n_reference=n,
        image_size=number("size", int, 32),
        seed=number("seed", int, 0),
        epsilon=number("epsilon", float, DEFAULT_EPSILON),
        features=values.get("features", AUTO),
        map_method=values.get("method", "barycentric"),  # type: ignore[arg-type]
    )
