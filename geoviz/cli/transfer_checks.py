"""From the options of ``geoviz transfer`` to the study's problem.

:func:`check_transfer_args` checks every option before any dataset is loaded, against
:mod:`geoviz.limits` (and refuses an option that would do nothing with the methods run),
into :class:`TransferOptions`; :func:`transfer_spec` builds the
:class:`~geoviz.geodesic.spec.GeodesicSpec` of the study. Imported by the command's run
(:mod:`geoviz.cli.transfer_run`), never by the parser: it imports the library (torch).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geoviz import limits
from geoviz.atomic import NotReplaceableError, check_replaceable
from geoviz.cli.args import (
    cli_epsilon,
    cli_int,
    cli_path,
    cli_seed,
    cli_seeds,
    given_options,
    ray_address,
    reference_count,
    refuse_unused,
)
from geoviz.data.choice import DatasetChoice
from geoviz.errors import ExportError, GeovizError, WeightsError
from geoviz.geodesic.config import GeodesicConfig
from geoviz.geodesic.spec import GeodesicSpec
from geoviz.geodesic.weights import SimplexWeights
from geoviz.limits import RelativeEpsilon
from geoviz.nn.models import MIN_LENET_SIZE
from geoviz.nn.training import TransferPreset, get_preset
from geoviz.ot.otdd_cost import OTDDConfig
from geoviz.vocabulary import (
    AUTO,
    DEFAULT_ENCODER_PRESET,
    DEFAULT_NEURAL_PRESET,
    TABLE_METHODS,
)

__all__ = ["OUT_FILES", "TransferOptions", "check_transfer_args", "transfer_spec"]


def _weights_arg(text: str, m: int) -> SimplexWeights | None:
    """``None`` for ``a_hat``, else the weights on the simplex, validated once
    (:meth:`SimplexWeights.from_input <geoviz.geodesic.weights.SimplexWeights.from_input>`,
    kept as given: ``decimals=None``); a one-line WeightsError otherwise."""
    if text.strip().lower() in ("a_hat", "ahat", "â"):
        return None
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise WeightsError(
            f"--weights: expected 'a_hat' or {m} comma-separated numbers, got {text!r}"
        ) from None
    try:
        return SimplexWeights.from_input(values, m, decimals=None)
    except WeightsError as err:
        raise WeightsError(f"--weights: {err}") from err


@dataclass(frozen=True)
class TransferOptions:
    """The checked options of ``geoviz transfer`` (:func:`check_transfer_args`)."""

    refs: list[str]
    seeds: list[int]
    weights: SimplexWeights | None
    preset: TransferPreset
    epsilon: RelativeEpsilon | None
    methods: list[str]
    out_dir: Path | None


#: defaults of the options declared with ``default=None`` (a given one is told apart)
_DEFAULTS: dict[str, Any] = {
    "features": AUTO,
    "encoder_preset": DEFAULT_ENCODER_PRESET,
    "neural_preset": DEFAULT_NEURAL_PRESET,
    "weights": "a_hat",
    "backend": AUTO,
    "ray_address": None,
    "epsilon": None,
}


def _refuse_unused_options(
    args: argparse.Namespace, given: set[str], methods: list[str], weights: SimplexWeights | None
) -> None:
    """Options that would do nothing with the methods run, refused in one sentence (they
    were silently ignored)."""
    given = set(given) | ({"neural"} if args.neural else set())
    # the barycentric geodesic is fitted for otdd, mixup at a_hat and the grid (as
    # _run_transfer decides); otdd_neural fits a neural one, in pixel space
    barycentric = (
        args.grid is not None or "otdd" in methods or ("mixup" in methods and weights is None)
    )
    unused: dict[str, str] = {}
    if args.method != "all" or args.grid is not None:
        unused["neural"] = "only applies to --method all (without --grid)"
    if "otdd_neural" not in methods:
        unused["neural_preset"] = "only applies when otdd_neural runs (--method otdd_neural)"
    if args.features != "encoder":
        unused["encoder_preset"] = "only applies with --features encoder"
    if not {"otdd", "mixup"} & set(methods):
        unused["weights"] = "only applies to --method otdd, mixup or all (P_a's weights)"
    if not barycentric:
        unused["features"] = (
            "only applies when the OTDD geodesic is fitted (otdd, or mixup at a_hat)"
        )
        if "otdd_neural" not in methods:
            unused["epsilon"] = "only applies when a geodesic is fitted (otdd, mixup at a_hat)"
    if args.backend == "sequential":
        unused["ray_address"] = "only applies with --backend ray or auto"
    refuse_unused(given, unused)


#: the files ``geoviz transfer --out DIR`` writes in ``DIR`` (besides ``checkpoints/``)
OUT_FILES = (
    "grid.json",
    "grid.csv",
    "correlation.html",
    "manifest.json",
    "results.json",
    "results.csv",
)


def check_transfer_args(args: argparse.Namespace) -> TransferOptions:
    """Every option checked before any work, in one sentence naming the flag; an option
    that would do nothing with the others is refused too."""
    given = given_options(args, _DEFAULTS)
    cli_path(args.target, "--target")
    if args.out is not None:
        cli_path(args.out, "--out")
    refs = [part.strip() for part in args.refs.split(",") if part.strip()]
    if not refs:
        raise GeovizError("--refs: expected comma-separated dataset names")
    reference_count(refs)
    cli_int(args.n, "--n", limits.MIN_SAMPLES, limits.MAX_SAMPLES, why="samples per dataset")
    if args.n_test is not None:
        cli_int(args.n_test, "--n-test", limits.MIN_SAMPLES, limits.MAX_SAMPLES)
    cli_int(
        args.size,
        "--size",
        max(limits.MIN_IMAGE_SIZE, MIN_LENET_SIZE),
        limits.MAX_IMAGE_SIZE,
        why="pixels per side, for the transfer network",
    )
    cli_int(args.k, "--k", 1, limits.MAX_FEW_SHOT_K, why="labelled samples per class")
    cli_seed(args.seed)
    seeds = cli_seeds(args.seeds)
    weights = _weights_arg(args.weights, len(refs))
    preset = get_preset(args.preset)
    epsilon = None if args.epsilon is None else cli_epsilon(args.epsilon)
    methods = _transfer_methods(args, len(refs), weights)
    _refuse_unused_options(args, given, methods, weights)
    for name in refs:
        cli_path(name, "--refs")
    out_dir = None if args.out is None else Path(args.out)
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"--out {out_dir} exists and is not a folder")
    if out_dir is not None:  # a FIFO or a device where a result goes: refused before the work
        for name in OUT_FILES:
            try:
                check_replaceable(out_dir / name)
            except NotReplaceableError as err:
                raise ExportError(f"--out: {err}") from None
    if args.backend != "sequential":
        ray_address(args)  # a malformed --ray-address / RAY_ADDRESS before any work
    return TransferOptions(refs, seeds, weights, preset, epsilon, methods, out_dir)


def _transfer_methods(
    args: argparse.Namespace, m: int, weights: SimplexWeights | None
) -> list[str]:
    """The methods to run; with ``--grid`` the one method trained at every grid point."""
    if args.grid is None:
        methods = list(TABLE_METHODS) if args.method == "all" else [args.method]
        if args.method == "all" and args.neural:
            methods.insert(1, "otdd_neural")
        return methods
    try:
        limits.check_grid(args.grid, m)
    except GeovizError as err:
        raise GeovizError(f"--grid: {err}") from None
    if args.method == "otdd_neural":
        raise GeovizError(
            "--grid runs the barycentric geodesic; --method otdd_neural is not supported there"
        )
    if args.method in ("fewshot", "1nn"):
        raise GeovizError(
            f"--grid trains on P_a for every grid point: --method must be otdd or mixup, "
            f"not {args.method}"
        )
    if weights is not None:
        raise GeovizError("--weights has no effect with --grid (every grid point is run)")
    return ["otdd" if args.method == "all" else args.method]


def transfer_spec(args: argparse.Namespace, opts: TransferOptions) -> GeodesicSpec:
    """The study's problem, built with the library's constructors."""
    return GeodesicSpec(
        target=DatasetChoice.named(args.target),
        references=tuple(DatasetChoice.named(name) for name in opts.refs),
        n_target=args.n,
        n_reference=args.n,
        seed=args.seed,
        image_size=args.size,
        target_test=DatasetChoice.named(args.target, "test"),
        n_test=args.n_test,
        config=GeodesicConfig(
            otdd=OTDDConfig() if opts.epsilon is None else OTDDConfig(epsilon=opts.epsilon),
            features=args.features,
            encoder=args.encoder_preset,
        ),
    )
