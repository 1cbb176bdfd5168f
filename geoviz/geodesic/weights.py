"""Interpolation weights ``a``: points of the probability simplex ``Delta_{m-1}``.

A dataset ``P_a = (sum_i a_i T_i)#Q`` of the generalized geodesic (paper
Sec. 3.3) is indexed by a weight vector ``a`` of the simplex
``Delta_{m-1} = {a in R^m : a_i >= 0, sum_i a_i = 1}``; ``a_hat`` of eq. (hat_a)
is one. This module is the one place for the weight vector:

* :func:`check_weights` — *the* validator (NaN/inf, wrong length, negative
  entries, sum different from 1 beyond a tolerance); every library function
  that takes weights calls it.
* :func:`project_to_simplex` — Euclidean projection of arbitrary values.
* :func:`uniform_weights` — the barycentre ``(1/m, ..., 1/m)``.
* :func:`round_to_simplex`, :func:`display_weights`, :func:`format_weights` —
  the one rounding rule for showing weights (app, CLI, figure labels).
* :func:`weights_tag` — compact ``"0.5,0.3,0.2"`` for dataset and file names.
* :class:`SimplexWeights` — a weight vector validated and rounded *once*, where it enters
  (a slider release, a link, ``a_hat``); it is array-like, so every function above accepts
  it, and :func:`check_weights` passes it through without checking it again.

:func:`geoviz.geodesic.distances.simplex_grid` enumerates grid points of the
simplex. (A *measure*, the marginal of a coupling, is something else:
:func:`geoviz.ot.problem.uniform_measure`.)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
import torch

from geoviz.errors import WeightsError, short_repr

__all__ = [
    "ENTRY_DECIMALS",
    "WEIGHT_ATOL",
    "WEIGHT_DECIMALS",
    "SimplexWeights",
    "as_simplex_weights",
    "check_weights",
    "display_weights",
    "format_weights",
    "project_to_simplex",
    "round_to_simplex",
    "uniform_weights",
    "weights_tag",
    "weights_text",
]

#: Tolerance of :func:`check_weights` on negative entries and on ``|sum - 1|``.
WEIGHT_ATOL = 1e-6

#: Decimals used for every displayed weight (sliders, text, bar labels): one rule everywhere.
WEIGHT_DECIMALS = 2

#: Decimals of a :class:`SimplexWeights` built from user input: the numbers ``P_a`` is
#: computed with and cached under (finer than :data:`WEIGHT_DECIMALS`, the displayed ones).
ENTRY_DECIMALS = 4


def check_weights(weights: Any, m: int, atol: float = WEIGHT_ATOL) -> np.ndarray:
    """Validate interpolation weights on the probability simplex ``Delta_{m-1}``.

    The single validator of a weight vector in geoviz: every function that
    takes weights ``a`` calls it, so the error messages are the same everywhere.

    Parameters
    ----------
    weights
        ``(m,)`` or a batch ``(..., m)`` of weights (list, array or tensor).
    m
        Number of reference datasets.
    atol
        Tolerance for negative entries and for ``|sum - 1|``.

    Returns
    -------
    np.ndarray
        float64 array of the same shape, with entries in ``[-atol, 0)`` set to 0
        and each row renormalised to sum exactly to 1.

    Raises
    ------
    WeightsError
        Non-numeric input, wrong length, NaN/inf, a negative entry or a sum
        different from 1; the message names the offending entry / row and value.

    Examples
    --------
    >>> from geoviz.geodesic import check_weights
    >>> check_weights([0.5, 0.3, 0.2], 3)
    array([0.5, 0.3, 0.2])
    >>> check_weights([0.5, 0.6, -0.1], 3)
    Traceback (most recent call last):
    ...
    geoviz.errors.WeightsError: weight 2 is negative (-0.1): weights must lie on the probability simplex (all >= 0, sum = 1)
    """
    if isinstance(weights, SimplexWeights):  # validated when it was built: only the length
        if weights.m != m:
            raise WeightsError(
                f"weights must have {m} entries (one per reference dataset), got {weights.m} entries"
            )
        return weights.to_array()
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().numpy()
    try:
        arr = np.asarray(weights, dtype=np.float64)
    except OverflowError:  # an integer such as 10**400: no float holds it
        raise WeightsError(
            f"weights must be finite numbers, got {short_repr(weights)} (an entry is too "
            "large for a float)"
        ) from None
    except (TypeError, ValueError, RecursionError) as err:  # text, objects, deep nesting
        raise WeightsError(f"weights must be numbers, got {short_repr(weights)}") from err
    if arr.ndim == 0 or arr.shape[-1] != m:
        got = "a scalar" if arr.ndim == 0 else f"{arr.shape[-1]} entries"
        raise WeightsError(
            f"weights must have {m} entries (one per reference dataset), got {got}"
            + (f" (shape {arr.shape})" if arr.ndim > 1 else "")
        )
    if arr.size == 0:
        raise WeightsError("weights are empty")
    flat = arr.reshape(-1, m)

    def where(row: int) -> str:
        return f" in row {row}" if flat.shape[0] > 1 else ""

    bad = ~np.isfinite(flat)
    if bad.any():
        row, col = map(int, np.argwhere(bad)[0])
        raise WeightsError(
            f"weight {col} is {flat[row, col]}{where(row)}: weights must be finite numbers"
        )
    neg = flat < -atol
    if neg.any():
        row, col = map(int, np.argwhere(neg)[0])
        raise WeightsError(
            f"weight {col} is negative ({flat[row, col]:.6g}){where(row)}: weights must lie on the "
            f"probability simplex (all >= 0, sum = 1)"
        )
    sums = flat.sum(axis=1)
    off = np.abs(sums - 1.0) > atol
    if off.any():
        row = int(np.argmax(off))
        raise WeightsError(
            f"weights sum to {sums[row]:.6g}{where(row)}, not 1: weights must lie on the "
            f"probability simplex (all >= 0, sum = 1)"
        )
    clean: np.ndarray = np.clip(flat, 0.0, None)
    clean = clean / clean.sum(axis=1, keepdims=True)
    return np.asarray(clean.reshape(arr.shape), dtype=np.float64)


def uniform_weights(m: int) -> np.ndarray:
    """``(m,)`` the barycentre of the simplex, ``1/m`` everywhere.

    >>> from geoviz.geodesic import uniform_weights
    >>> uniform_weights(4)
    array([0.25, 0.25, 0.25, 0.25])
    """
    if int(m) < 1:
        raise WeightsError(f"need at least one reference dataset, got m={m}")
    return np.full(int(m), 1.0 / int(m))


def project_to_simplex(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Euclidean projection of ``values`` onto the probability simplex.

    Solves ``argmin_{a in Delta} ||a - v||_2`` with the sorting algorithm of
    Held, Wolfe & Crowder (1974) / Duchi et al. (2008): sort ``v`` decreasingly,
    find the largest ``rho`` with ``u_rho - (sum_{j<=rho} u_j - 1) / rho > 0``
    and shift by that threshold ``theta``; ``a = max(v - theta, 0)``.

    Parameters
    ----------
    values
        ``(..., m)`` real numbers (any sign); batches are projected row-wise.

    Returns
    -------
    np.ndarray
        ``(..., m)`` float64 rows that are non-negative and sum to 1.

    Examples
    --------
    A point of the simplex is its own projection; a shift along ``(1, ..., 1)`` is undone,
    and a far point lands on the nearest vertex:

    >>> from geoviz.geodesic import project_to_simplex
    >>> project_to_simplex([0.5, 0.3, 0.2])
    array([0.5, 0.3, 0.2])
    >>> project_to_simplex([1.5, 1.5, 1.5])
    array([0.33333333, 0.33333333, 0.33333333])
    >>> project_to_simplex([[2.0, 0.0, -1.0], [0.6, 0.6, 0.0]])
    array([[1. , 0. , 0. ],
           [0.5, 0.5, 0. ]])
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 0 or v.shape[-1] == 0:
        raise WeightsError(f"weights must be a non-empty vector, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise WeightsError("weights must be finite numbers (found NaN or inf)")
    m = v.shape[-1]
    u = -np.sort(-v, axis=-1)  # decreasing
    css = np.cumsum(u, axis=-1) - 1.0
    ks = np.arange(1, m + 1, dtype=np.float64)
    cond = u - css / ks > 0
    # rho: last index where cond holds (cond[..., 0] is always true)
    rho = m - 1 - np.argmax(cond[..., ::-1], axis=-1)
    theta = np.take_along_axis(css, rho[..., None], axis=-1) / (rho[..., None] + 1.0)
    out: np.ndarray = np.maximum(v - theta, 0.0)
    # remove rounding drift so the rows sum to 1 to machine precision
    return np.asarray(out / out.sum(axis=-1, keepdims=True), dtype=np.float64)


def round_to_simplex(weights: Sequence[float] | np.ndarray, decimals: int = 2) -> np.ndarray:
    """Round to ``decimals`` places while keeping the sum exactly 1.

    Largest-remainder rounding on the integer grid ``10**-decimals``: the
    result is the closest grid point on the simplex to the input (in the sense
    of distributing leftover units to the largest fractional parts), so slider
    widgets with ``step = 10**-decimals`` can display it without drifting off.

    >>> from geoviz.geodesic.weights import round_to_simplex
    >>> round_to_simplex([1 / 3, 1 / 3, 1 / 3])
    array([0.34, 0.33, 0.33])
    """
    return _largest_remainder(project_to_simplex(weights), decimals)


def _largest_remainder(w: np.ndarray, decimals: int) -> np.ndarray:
    """Round ``(m,)`` simplex weights ``w`` to ``decimals`` places, keeping the sum 1."""
    scale = 10 ** int(decimals)
    raw = w * scale
    floor = np.floor(raw + 1e-9)
    missing = round(scale - floor.sum())
    if missing > 0:
        order = np.argsort(-(raw - floor), kind="stable")
        floor[order[:missing]] += 1
    return np.asarray(floor / scale, dtype=np.float64)


def display_weights(
    weights: Sequence[float] | np.ndarray | SimplexWeights, digits: int = WEIGHT_DECIMALS
) -> np.ndarray:
    """The values shown for ``weights``: each rounded to the nearest ``digits`` places.

    A shown weight is the nearest value to the weight it stands for (0.2138 reads 0.21),
    so the shown values may sum to 0.99 or 1.01; forcing the sum to 1 (largest
    remainders) made a shown weight disagree with the pick (issue 26). Entries within
    :data:`WEIGHT_ATOL` below 0 are shown as 0."""
    if isinstance(weights, SimplexWeights):
        return weights.display(digits)
    w = np.asarray(weights, dtype=float).ravel()
    shown: np.ndarray = np.round(w, int(digits)) + 0.0  # + 0.0: no "-0.00"
    tiny = (w < 0) & (w >= -WEIGHT_ATOL)
    shown[tiny] = 0.0
    return shown


def format_weights(
    weights: Sequence[float] | np.ndarray | SimplexWeights,
    names: Sequence[str] | None = None,
    digits: int = WEIGHT_DECIMALS,
) -> str:
    """``"fashion_mnist 0.50 · usps 0.30 · kmnist 0.20"`` (or ``"(0.50, 0.30, 0.20)"``).

    Values are rounded with :func:`display_weights`, the same rule as the
    app's weight sliders.

    >>> from geoviz.geodesic import format_weights
    >>> format_weights([0.5, 0.3, 0.2], ["fashion_mnist", "usps", "kmnist"])
    'fashion_mnist 0.50 · usps 0.30 · kmnist 0.20'
    >>> format_weights([0.5, 0.3, 0.2])
    '(0.50, 0.30, 0.20)'
    """
    w = display_weights(weights, digits)
    if names is None:
        return "(" + ", ".join(f"{x:.{digits}f}" for x in w) + ")"
    if len(names) != len(w):
        raise WeightsError(f"{len(w)} weights but {len(names)} names")
    return " · ".join(f"{n} {x:.{digits}f}" for n, x in zip(names, w, strict=True))


def weights_tag(weights: Sequence[float] | np.ndarray, digits: int = 3) -> str:
    """``"0.5,0.3,0.2"``: weights to ``digits`` significant digits, for dataset and file names.

    Unlike :func:`format_weights` (what a person reads) this is ASCII, has no
    spaces and is stable for names such as ``"P_a(0.5,0.3,0.2)"``.
    """
    return ",".join(f"{float(w):.{digits}g}" for w in np.asarray(weights, dtype=np.float64).ravel())


def weights_text(weights: Sequence[float] | np.ndarray, decimals: int = ENTRY_DECIMALS) -> str:
    """``"0.5,0.3,0.2"``: each weight to ``decimals`` places, trailing zeros dropped.

    The URL form of weights rounded to ``decimals`` places: exact, so parsing it gives
    back the same numbers (unlike :func:`weights_tag`, which keeps significant digits).
    """
    return ",".join(f"{float(x):.{int(decimals)}f}".rstrip("0").rstrip(".") or "0" for x in weights)


@dataclass(frozen=True)
class SimplexWeights:
    """Interpolation weights ``a`` on the simplex ``Delta_{m-1}``, validated once.

    Build it with :meth:`from_input` where weights enter (a slider release, a link,
    ``a_hat``): :func:`check_weights`, then :func:`round_to_simplex` to ``decimals``
    places, so the value, its cache key and its URL form are the same numbers. It then
    travels as is: it is array-like (``np.asarray(a)`` is the ``(m,)`` float64 vector; it
    has a length and iterates over floats), and :func:`check_weights` returns it without
    checking it again, so the library's functions take it unchanged.

    Attributes
    ----------
    values
        ``(a_1, ..., a_m)``: non-negative, multiples of ``10**-decimals``, summing to 1.
    decimals
        Decimal places of ``values``; ``None``: validated but not rounded (e.g. ``a_hat``
        exactly as the solver found it).

    Examples
    --------
    >>> import numpy as np
    >>> from geoviz.geodesic.weights import SimplexWeights
    >>> a = SimplexWeights.from_input([1 / 3, 1 / 3, 1 / 3], m=3)
    >>> a
    SimplexWeights(values=(0.3334, 0.3333, 0.3333), decimals=4)
    >>> a.to_text()
    '0.3334,0.3333,0.3333'
    >>> SimplexWeights.from_text(a.to_text(), m=3) == a
    True
    >>> np.asarray(a)
    array([0.3334, 0.3333, 0.3333])
    >>> a.format(["mnist", "usps", "kmnist"])
    'mnist 0.33 · usps 0.33 · kmnist 0.33'
    """

    values: tuple[float, ...]
    decimals: int | None = ENTRY_DECIMALS

    def __post_init__(self) -> None:
        # an invariant of the type, not a second validation: cheap checks on m floats
        try:
            values = tuple(float(x) for x in self.values)
        except (TypeError, ValueError, OverflowError):  # OverflowError: an int like 10**400
            raise WeightsError(
                f"SimplexWeights needs a flat sequence of numbers, got {short_repr(self.values)}"
            ) from None
        object.__setattr__(self, "values", values)
        if not values or not all(np.isfinite(x) and x >= 0.0 for x in values):
            raise WeightsError(
                f"SimplexWeights needs non-negative finite numbers, got {short_repr(values)}"
            )
        if abs(sum(values) - 1.0) > WEIGHT_ATOL:
            raise WeightsError(f"SimplexWeights must sum to 1, got {sum(values):.6g}")

    @classmethod
    def from_input(
        cls, weights: Any, m: int, decimals: int | None = ENTRY_DECIMALS
    ) -> SimplexWeights:
        """Validate ``weights`` for ``m`` references (:func:`check_weights`) and round them
        on the simplex to ``decimals`` places (:func:`round_to_simplex`; ``None``: no
        rounding).

        Raises
        ------
        WeightsError
            Not one vector (a batch such as ``[[0.2, 0.3, 0.5]]`` is refused: it is one
            weight vector, not several), wrong length, NaN/inf, a negative entry or a sum
            other than 1.
        """
        if isinstance(weights, SimplexWeights) and weights.decimals == decimals:
            check_weights(weights, m)  # the length only
            return weights
        valid = check_weights(weights, m)
        if valid.ndim != 1:
            raise WeightsError(
                f"expected one weight vector of {m} entries, got an array of shape {valid.shape}"
            )
        if decimals is None:
            return cls(tuple(valid.tolist()), None)
        return cls(tuple(round_to_simplex(valid, decimals).tolist()), int(decimals))

    @classmethod
    def from_text(cls, text: str, m: int, decimals: int | None = ENTRY_DECIMALS) -> SimplexWeights:
        """Parse :meth:`to_text`'s form (``"0.5,0.3,0.2"``) and validate it like
        :meth:`from_input`.

        Raises
        ------
        WeightsError
            Not comma-separated numbers, or numbers that are not weights for ``m``.
        """
        try:
            values = [float(p) for p in str(text).split(",")]
        except ValueError:
            raise WeightsError(
                f"weights must be comma-separated numbers, got {short_repr(text)}"
            ) from None
        if decimals is None:  # the text's numbers exactly (check_weights would renormalise)
            check_weights(values, m)
            return cls(tuple(values), None)
        return cls.from_input(values, m, decimals)

    @property
    def m(self) -> int:
        """Number of references."""
        return len(self.values)

    def to_array(self) -> np.ndarray:
        """``(m,)`` float64, a new array (the caller may modify it)."""
        return np.array(self.values, dtype=np.float64)

    def tolist(self) -> list[float]:
        """``[a_1, ..., a_m]`` as Python floats (as ``ndarray.tolist``)."""
        return list(self.values)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self.to_array()
        return out if dtype is None else out.astype(dtype)

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[float]:
        return iter(self.values)

    @overload
    def __getitem__(self, index: int) -> float: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[float, ...]: ...
    def __getitem__(self, index: int | slice) -> float | tuple[float, ...]:
        return self.values[index]

    def key(self) -> tuple[float, ...]:
        """The cache-key form: the exact rounded numbers ``P_a`` is computed with."""
        return self.values

    def to_text(self) -> str:
        """The URL form, ``"0.5,0.3,0.2"`` (:func:`weights_text`; unrounded weights: every
        digit of each float); :meth:`from_text` reads it back exactly."""
        if self.decimals is None:
            return ",".join(repr(x) for x in self.values)
        return weights_text(self.values, self.decimals)

    def display(self, digits: int = WEIGHT_DECIMALS) -> np.ndarray:
        """``(m,)`` the values shown for these weights: each rounded to the nearest ``digits``
        places, the rule of :func:`display_weights`."""
        return display_weights(self.to_array(), digits)

    def format(self, names: Sequence[str] | None = None, digits: int = WEIGHT_DECIMALS) -> str:
        """What a person reads, as :func:`format_weights` (``"usps 0.50 · kmnist 0.50"``)."""
        return format_weights(self, names, digits)


def as_simplex_weights(weights: Any, m: int) -> SimplexWeights:
    """One ``(m,)`` weight vector as :class:`SimplexWeights`, checked at most once.

    A :class:`SimplexWeights` passes through (only its length is compared with ``m``,
    its rounding is kept); anything else is validated by :func:`check_weights` and kept
    unrounded (``decimals=None``). Functions that hand weights on to other validating
    functions call this first, so the inner :func:`check_weights` calls are
    pass-throughs: one full check per weight vector, wherever it entered.

    Raises
    ------
    WeightsError
        Wrong length, NaN/inf, a negative entry, a sum other than 1, or a batch.
    """
    if isinstance(weights, SimplexWeights):
        check_weights(weights, m)  # the length only
        return weights
    valid = check_weights(weights, m)
    if valid.ndim != 1:
        raise WeightsError(f"expected one weight vector of {m} entries, got shape {valid.shape}")
    return SimplexWeights(tuple(valid.tolist()), None)
