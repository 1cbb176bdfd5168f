"""Argument helpers of the ``geoviz`` commands: parsers for ``argparse`` and bound checks.

Parsers (``type=`` of ``add_argument``; bad text is an argparse usage error, exit 2):
:func:`positive_int`, :func:`number`, :func:`names`, :func:`number_list`.

Checks (run right after parsing, before any dataset is loaded; a
:class:`~geoviz.errors.GeovizError` naming the flag, printed by :func:`geoviz.cli.main`):
:func:`cli_int`, :func:`cli_seed`, :func:`cli_epsilon`, :func:`cli_seeds` — the shared
bounds of :mod:`geoviz.limits`.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from geoviz import limits
from geoviz.errors import GeovizError

__all__ = [
    "MAX_SEEDS",
    "add_backend_args",
    "add_epsilon_option",
    "cli_epsilon",
    "cli_int",
    "cli_seed",
    "cli_seeds",
    "names",
    "number",
    "number_list",
    "positive_int",
    "ray_address",
]

#: training seeds of one command (``geoviz transfer --seeds``: each seed trains every method)
MAX_SEEDS = 100


# --------------------------------------------------------------------------- argparse types


def positive_int(text: str) -> int:
    """An integer ``>= 1``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def number(text: str) -> float:
    """A float (range checks come after parsing, e.g. :func:`cli_epsilon`)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def names(text: str) -> list[str]:
    """Comma-separated dataset names (``"usps,kmnist"``), blanks dropped; at least one."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError("expected comma-separated dataset names, got nothing")
    return parts


def number_list(text: str) -> list[float]:
    """Comma-separated numbers (``--weights 0.5,0.3,0.2``), checked later against ``m``."""
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None


# --------------------------------------------------------------------------- bound checks


def cli_int(value: Any, flag: str, low: int, high: int, *, why: str = "") -> int:
    """An integer option within ``[low, high]``, else a one-sentence GeovizError naming ``flag``."""
    return limits.check_int(value, flag, low, high, why=why)


def add_epsilon_option(parser: argparse.ArgumentParser) -> None:
    """``--epsilon`` (one definition for every command): parsed as a number, checked by
    :func:`cli_epsilon` where the command validates its options (``None``: the default,
    :data:`geoviz.ot.otdd.DEFAULT_EPSILON`)."""
    from geoviz.ot.otdd_cost import DEFAULT_EPSILON  # deferred: the CLI starts without torch

    parser.add_argument(
        "--epsilon",
        type=number,
        default=None,
        help=(
            "entropic regularisation relative to the mean ground cost: eps_abs = epsilon x "
            f"mean(||x-x'||^2 + W_2^2). Default {DEFAULT_EPSILON:g} (sharp maps: a few "
            "reference points per mapped point); larger values blur the maps (0.05 averages "
            f"about half the reference); {limits.EPSILON_MIN:g} to {limits.EPSILON_MAX:g}"
        ),
    )


def cli_epsilon(value: Any, flag: str = "--epsilon") -> limits.RelativeEpsilon:
    """A relative epsilon option checked by :func:`geoviz.limits.check_epsilon`: the
    :class:`~geoviz.limits.RelativeEpsilon` that the library receives and never checks again.

    The message names the flag (``--epsilon 1e-20 is below 0.0001 ...``).
    """
    try:
        return limits.check_epsilon(value)
    except GeovizError as err:
        text = str(err).replace("use epsilon >=", f"use {flag} >=")
        raise GeovizError(
            flag + text[len("epsilon") :] if text.startswith("epsilon") else f"{flag}: {text}"
        ) from None


def cli_seed(value: Any, flag: str = "--seed") -> int:
    """A seed option in ``[0, MAX_SEED]``."""
    return limits.check_int(value, flag, 0, limits.MAX_SEED)


def cli_seeds(text: str, flag: str = "--seeds") -> list[int]:
    """1 to :data:`MAX_SEEDS` distinct comma-separated seeds, each in ``[0, MAX_SEED]``."""
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise GeovizError(f"{flag}: expected comma-separated integers, got {text!r}") from None
    if not seeds:
        raise GeovizError(f"{flag}: expected at least one seed")
    if len(seeds) > MAX_SEEDS:
        raise GeovizError(f"{flag}: at most {MAX_SEEDS} seeds, got {len(seeds)}")
    if len(set(seeds)) != len(seeds):
        raise GeovizError(f"{flag}: seeds must be distinct, got {text!r}")
    for seed in seeds:
        cli_seed(seed, f"{flag}: every seed")
    return seeds


# --------------------------------------------------------------------------- shared options


def add_backend_args(parser: argparse.ArgumentParser, what: str) -> None:
    """``--backend`` and ``--ray-address``: how independent tasks run (:mod:`geoviz.tasks`).

    ``what`` names one task in the help text ("each (method, seed)", "each refit").
    """
    parser.add_argument(
        "--backend",
        choices=("auto", "ray", "sequential"),
        default="auto",
        help=f"run {what} as a Ray task (ray), in this process (sequential), or Ray if "
        "installed (auto, default)",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        help="Ray cluster address (default: $RAY_ADDRESS, else a local cluster)",
    )


def ray_address(args: argparse.Namespace) -> str | None:
    """``--ray-address``, else ``$RAY_ADDRESS``, else ``None`` (a local cluster); a malformed
    one is refused in one sentence naming where it came from."""
    from geoviz.tasks import check_ray_address

    if args.ray_address:
        return check_ray_address(args.ray_address, "--ray-address")
    return check_ray_address(os.environ.get("RAY_ADDRESS") or None, "RAY_ADDRESS")
