"""From the options of ``geoviz distance | project | grid`` to the problem.

:func:`check_args` checks every option right after parsing, before any dataset is loaded
or map fitted, against :mod:`geoviz.limits` (and refuses an option that would do nothing
with the others given); :func:`spec_from_args` turns the checked options into a
:class:`~geoviz.geodesic.spec.GeodesicSpec` (:func:`otdd_config`: the OTDD's
configuration); :func:`feature_space_from_args` loads a ``--features-model`` or
``--features-embeddings``.

It imports the library at its top: it is imported by :mod:`geoviz.cli.geodesic_run` (the
commands' run, imported when a command runs), never by the parser.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from geoviz import limits
from geoviz.cli.args import (
    cli_epsilon,
    cli_int,
    cli_path,
    cli_seed,
    given_options,
    ray_address,
    reference_count,
    refuse_unused,
)
from geoviz.cli.geodesic_options import EmbeddingsFile
from geoviz.cli.output import refuse_existing
from geoviz.data.choice import DatasetChoice
from geoviz.errors import ExportExistsError, GeovizError, WeightsError
from geoviz.features.base import FeatureSpace
from geoviz.features.embeddings import EmbeddingSpace
from geoviz.features.models import ModelSpace
from geoviz.geodesic.config import GeodesicConfig
from geoviz.geodesic.spec import GeodesicSpec
from geoviz.geodesic.uncertainty import check_replicates
from geoviz.geodesic.weights import SimplexWeights
from geoviz.maps.neural_config import NeuralMapConfig, get_neural_preset
from geoviz.ot.otdd_cost import OTDDConfig
from geoviz.vocabulary import (
    AUTO,
    DEFAULT_BOOTSTRAP_METHOD,
    DEFAULT_ENCODER_PRESET,
    DEFAULT_MAP_METHOD,
    DEFAULT_NEURAL_PRESET,
)

__all__ = ["check_args", "feature_space_from_args", "otdd_config", "spec_from_args"]


def feature_space_from_args(args: argparse.Namespace) -> FeatureSpace | None:
    """The user's own space (``--features-model`` or ``--features-embeddings``), or ``None``.

    A ``--features-model`` file is a TorchScript model or a state dict of the
    ``--features-arch`` architecture (:meth:`ModelSpace.from_file
    <geoviz.features.models.ModelSpace.from_file>`); ``--features-embeddings`` is read by
    :class:`~geoviz.features.embeddings.EmbeddingSpace`.

    Raises
    ------
    GeovizError
        The file is missing, not a vision model, not a state dict of the architecture,
        or holds no usable embeddings; the architecture's package is not installed.
    """
    value = getattr(args, "features_model", None)
    if value is None:
        return None
    if isinstance(value, EmbeddingsFile):
        return EmbeddingSpace(value.path, value.column)
    # with --features too, the spec refuses the pair (spec_from_args)
    return ModelSpace.from_file(
        value,
        getattr(args, "features_arch", None),
        arch_hint="--features-arch torchvision:NAME or timm:NAME",
        input_size=getattr(args, "features_size", None),
    )


#: defaults of the options declared with ``default=None`` (a given one is told apart)
_DEFAULTS: dict[str, Any] = {
    "bootstrap_seed": 0,
    "bootstrap_method": DEFAULT_BOOTSTRAP_METHOD,
    "backend": AUTO,
    "ray_address": None,
    "neural_preset": DEFAULT_NEURAL_PRESET,
    "encoder_preset": DEFAULT_ENCODER_PRESET,
    "neural_iterations": None,
    "features_size": None,
    "features_arch": None,
    "format": None,
    "n_out": None,
}


def _refuse_unused_options(args: argparse.Namespace, given: set[str]) -> None:
    """Options that would do nothing in the given combination, refused in one sentence
    (they were silently ignored): the bootstrap's options without ``--bootstrap``, the
    refits' backend without ``--bootstrap-method refit``, ``--ray-address`` with ``--backend
    sequential``, the neural maps' options without ``--method neural``, ``--encoder-preset``
    without ``--features encoder``, ``--features-size`` and ``--features-arch`` without
    ``--features-model``, and the
    export's options without ``--out``. ``given``: the options of :data:`_DEFAULTS` given on
    the command line."""
    given = set(given)
    if getattr(args, "overwrite", False) and args.command == "project":
        given.add("overwrite")
    unused: dict[str, str] = {}
    if args.bootstrap is None:
        for dest in ("bootstrap_method", "bootstrap_seed"):
            unused[dest] = "only applies with --bootstrap B (the number of replicates)"
    refits = args.bootstrap is not None and args.bootstrap_method == "refit"
    if not refits and getattr(args, "batch_size", None) is None:
        for dest in ("backend", "ray_address"):
            unused[dest] = (
                "only applies to --batch-size B (each batch is a task) or to --bootstrap B "
                "--bootstrap-method refit (each refit is a task)"
            )
    elif args.backend == "sequential":  # the tasks run in this process: no cluster is joined
        unused["ray_address"] = "only applies with --backend ray or auto"
    if args.method != "neural":
        for dest in ("neural_preset", "neural_iterations"):
            unused[dest] = "only applies with --method neural"
    if args.features != "encoder":
        unused["encoder_preset"] = "only applies with --features encoder"
    if args.features_model is None or isinstance(args.features_model, EmbeddingsFile):
        unused["features_size"] = "only applies with --features-model FILE"
        unused["features_arch"] = "only applies with --features-model FILE (a state dict)"
    if args.command == "project" and args.out is None:
        for dest in ("format", "n_out", "overwrite"):
            unused[dest] = "only applies with --out (an export)"
    refuse_unused(given, unused)
    # a neural map in a feature space is refused by the spec (spec_from_args), where the
    # library checks it for every front door


def _check_paths(args: argparse.Namespace) -> None:
    """Every path option is one the file system can take (:func:`cli_path`)."""
    cli_path(args.target, "--target")
    for name in args.refs:
        cli_path(name, "--refs")
    own = args.features_model
    if isinstance(own, EmbeddingsFile):
        cli_path(own.path, "--features-embeddings")
        if args.features != AUTO:
            raise GeovizError(
                f"--features {args.features} and --features-embeddings both choose the space "
                "the costs live in: give one of them"
            )
    elif own is not None:
        cli_path(own, "--features-model")
    if getattr(args, "out", None) is not None:
        cli_path(args.out, "--out", output=True)


def check_args(args: argparse.Namespace) -> None:
    """Check every option of ``distance`` / ``project`` / ``grid`` before any work.

    Sets ``args.checked_weights`` (the ``--weights`` as
    :class:`~geoviz.geodesic.weights.SimplexWeights`, or ``None``),
    ``args.backend_given`` (whether ``--backend`` was typed), and the defaults of the options declared with ``default=None`` (:data:`_DEFAULTS`).

    Raises
    ------
    GeovizError
        The first option out of its range (:mod:`geoviz.limits`), a path the file system
        cannot take, or an option that would do nothing with the others given, in one
        sentence naming the flag; :class:`~geoviz.errors.WeightsError` for ``--weights``;
        :class:`~geoviz.errors.ExportExistsError` for an existing ``--out``.
    """
    given = given_options(args, _DEFAULTS)
    args.backend_given = "backend" in given
    _check_paths(args)
    m = reference_count(args.refs)
    cli_int(args.n, "--n", limits.MIN_SAMPLES, limits.MAX_SAMPLES, why="samples per dataset")
    cli_seed(args.seed)
    cli_int(args.workers, "--workers", 1, 64, why="threads of the fit")
    if args.bootstrap is not None:
        check_replicates(args.bootstrap, "--bootstrap")
        cli_seed(args.bootstrap_seed, "--bootstrap-seed")
        if args.bootstrap_method == "refit" and args.method != "barycentric":
            raise GeovizError("--bootstrap-method refit needs barycentric maps (--method)")
        if args.bootstrap_method == "refit" and args.backend != "sequential":
            ray_address(args)  # a malformed --ray-address / RAY_ADDRESS before any work
    if args.size is not None:
        cli_int(
            args.size,
            "--size",
            limits.MIN_IMAGE_SIZE,
            limits.MAX_IMAGE_SIZE,
            why="pixels per side of the common image size",
        )
    if args.epsilon is not None:
        args.epsilon = cli_epsilon(args.epsilon)
    if args.batch_size is not None:
        cli_int(args.batch_size, "--batch-size", 2, limits.MAX_SAMPLES)
        if args.stream:
            raise GeovizError(
                "--stream solves one problem; --batch-size B solves batches: give one of them"
            )
        if args.backend != "sequential":
            ray_address(args)  # a malformed --ray-address / RAY_ADDRESS before any work
    if args.neural_iterations is not None:
        cli_int(args.neural_iterations, "--neural-iterations", 1, limits.MAX_NEURAL_ITERATIONS)
    args.checked_weights = None
    if getattr(args, "weights", None) is not None:
        try:  # validated once, kept as given (no rounding): every use after takes it as is
            args.checked_weights = SimplexWeights.from_input(args.weights, m, decimals=None)
        except WeightsError as err:
            raise WeightsError(f"--weights: {err}") from err
    if getattr(args, "n_out", None) is not None:
        cli_int(args.n_out, "--n-out", 1, limits.MAX_SAMPLES, why="samples to export")
        if args.n_out > args.n:  # P_a is the push-forward of the --n target samples
            raise GeovizError(
                f"--n-out {args.n_out:,} is more than the {args.n:,} target samples (--n) "
                "P_a is made of; use --n-out <= --n"
            )
    if getattr(args, "resolution", None) is not None:
        try:
            limits.check_grid(args.resolution, m)
        except GeovizError as err:
            raise GeovizError(f"--resolution: {err}") from None
    _refuse_unused_options(args, given)
    if getattr(args, "out", None) is not None:
        if args.command == "grid":
            refuse_existing(args.out, args.overwrite)
        elif Path(args.out).exists() and not args.overwrite:
            # an export may be a folder (ImageFolder): export_dataset checks the rest
            raise ExportExistsError(f"{args.out} already exists; pass --overwrite to replace it")


def otdd_config(args: argparse.Namespace) -> OTDDConfig:
    """The OTDD's configuration of checked options (``--epsilon``, ``--lambda-x/-y``,
    ``--label-method``, ``--device``, ``--batch-size`` or ``--stream``), sized for ``--n``
    as the app sizes its problems."""
    base = OTDDConfig()
    names = {f.name for f in dataclasses.fields(base)}
    changes = {
        key: value
        for key, value in (
            ("epsilon", args.epsilon),
            ("lambda_x", args.lambda_x),
            ("lambda_y", args.lambda_y),
            ("label_method", args.label_method),
            ("device", args.device),
            # balanced batches: B target points against B reference points each
            ("batch_size", args.batch_size),
            ("reference_subsample", args.batch_size),
        )
        if value is not None and key in names
    }
    if args.batch_size is not None:
        # Ray only when asked for (--backend, --ray-address or $RAY_ADDRESS): an embedded
        # cluster started inside a caller's process ends that process if it dies
        address = ray_address(args)
        # (check_args fills in --backend's default "auto": only a given one counts)
        given_backend = getattr(args, "backend_given", args.backend is not None)
        changes["backend"] = args.backend if given_backend else ("ray" if address else "sequential")
        changes["ray_address"] = address
    elif args.stream:
        changes["stream_reference"] = True
    # the app sizes its problems the same way (it opens this fit from the disk cache)
    return dataclasses.replace(base, **changes).sized_for(args.n, args.n)


def _neural_config(args: argparse.Namespace) -> NeuralMapConfig:
    cfg = get_neural_preset(getattr(args, "neural_preset", DEFAULT_NEURAL_PRESET))
    changes: dict[str, Any] = {}
    if getattr(args, "neural_iterations", None) is not None:
        changes["iterations"] = args.neural_iterations
    if args.device is not None:
        changes["device"] = args.device
    return dataclasses.replace(cfg, **changes) if changes else cfg


def spec_from_args(args: argparse.Namespace) -> GeodesicSpec:
    """The :class:`~geoviz.geodesic.spec.GeodesicSpec` of checked options (:func:`check_args`).

    ``--target`` and every name of ``--refs`` is a registry name or a path
    (:meth:`DatasetChoice.named <geoviz.data.choice.DatasetChoice.named>`), all of split
    ``--split``, ``--n`` samples each (seed ``--seed``); ``--size`` is the common image
    size (default: sizes kept, resized to the target's height when they differ).
    """
    return GeodesicSpec(
        target=DatasetChoice.named(args.target, args.split),
        references=tuple(DatasetChoice.named(name, args.split) for name in args.refs),
        n_target=args.n,
        n_reference=args.n,
        seed=args.seed,
        image_size=args.size,
        config=GeodesicConfig(
            otdd=otdd_config(args),
            qp_solver=args.solver,
            method=getattr(args, "method", DEFAULT_MAP_METHOD),
            neural=_neural_config(args),
            features=getattr(args, "features", AUTO),
            encoder=getattr(args, "encoder_preset", DEFAULT_ENCODER_PRESET),
        ),
        features_model=feature_space_from_args(args),
    )
