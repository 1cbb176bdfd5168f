"""``geoviz distance | project | grid``: generalized-geodesic commands of the CLI.

:func:`register` is called by :func:`geoviz.cli.build_parser` with its ``argparse``
sub-parsers. All three commands describe their problem as a
:class:`~geoviz.geodesic.spec.GeodesicSpec` (:func:`spec_from_args`: a target and
references, registry names or paths, with ``--split``, ``--n``, ``--seed``, ``--size``
and the map options), load its datasets with
:func:`~geoviz.geodesic.spec.load_spec_datasets` (image sizes harmonised when they
differ; USPS is 16x16, MNIST 28x28), fit the OTDD maps (cached on disk) and then:

* ``distance`` prints the OTDD values ``d^2_OT(Q, P_i)`` and the (2,Q) matrix
  (``W_i = W^2_{2,Q}(P_i, Q)`` and ``W_ij = W^2_{2,Q}(P_i, P_j)``, paper Def. 2);
* ``project`` prints ``a_hat`` and ``W^2(P_a_hat, Q)`` (eq. (hat_a), (ds_eq))
  and, with ``--out``, exports ``P_a_hat`` (or ``P_a`` for ``--weights``) with
  :func:`geoviz.export.export_dataset`;
* ``grid`` writes ``W^2(P_a, Q)`` over a simplex grid to a CSV file (columns
  ``a_<reference>...`` and ``objective``, the key of ``P_a``'s metadata too).

Every command also prints, for every map ``T_i``, its OTDD, its *effective
neighbours* (median number of reference points a mapped point averages; 1 is
a one-to-one map) and its *label confidence* (mean largest soft-label entry),
and a ``BLURRY MAP`` line with the fix (a smaller ``--epsilon``) for a map
whose effective neighbours exceed :data:`geoviz.ot.otdd.BLUR_NEIGHBOURS`.
``--epsilon`` is relative to the mean ground cost
(``eps_abs = epsilon * mean(||x - x'||^2 + W_2^2)``, no 1/2), default
:data:`geoviz.ot.otdd.DEFAULT_EPSILON`.

Every option is checked by :func:`check_args` right after parsing, *before* any
dataset is loaded or map fitted, against :mod:`geoviz.limits`: ``--refs`` (2 to
:data:`~geoviz.limits.MAX_REFERENCES` names), ``--n``, ``--size``, ``--seed``,
``--epsilon``, ``--batch-size``, ``--neural-iterations``, ``--weights`` (against
``m``, with :func:`geoviz.geodesic.weights.check_weights`), ``--n-out``,
``--resolution`` (with the grid size it gives for ``m``) and an existing ``--out``
without ``--overwrite``.

``--batch-size B`` selects the batched OTDD mode (paper appendix "Complexity"):
batches of ``B`` target points, each solved against a seeded subsample of ``B``
reference points, so memory is ``~B^2`` per batch instead of ``N_Q x N_P`` (for the
full 60,000-sample *NIST splits).

Handlers return the exit status and raise :class:`~geoviz.errors.GeovizError`
for bad input (printed by :func:`geoviz.cli.main` with status 2).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import os
import shlex
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from geoviz import limits
from geoviz.cli.args import (
    add_backend_args,
    add_epsilon_option,
    cli_epsilon,
    cli_int,
    cli_path,
    cli_seed,
    given_options,
    names,
    number,
    number_list,
    positive_int,
    ray_address,
    refuse_unused,
)
from geoviz.cli.output import progress_callback, refuse_existing, write_file
from geoviz.errors import BlurWarning, ExportExistsError, GeovizError, WeightsError
from geoviz.glossary import (
    A_HAT,
    OBJECTIVE,
    OBJECTIVE_AT_A_HAT,
    OTDD,
    W_BETWEEN,
    W_TARGET,
)
from geoviz.vocabulary import AUTO, BUILTIN_SPACES, ENCODER_PRESET_NAMES

if TYPE_CHECKING:  # the CLI imports torch-based modules only when a command runs
    from geoviz.features import ModelSpace
    from geoviz.geodesic.pipeline import GeodesicResult
    from geoviz.geodesic.spec import GeodesicSpec
    from geoviz.geodesic.uncertainty import GeodesicBootstrap
    from geoviz.maps.base import MapDiagnostics
    from geoviz.maps.neural import NeuralMapConfig
    from geoviz.ot.otdd import OTDDConfig

__all__ = ["check_args", "register", "spec_from_args"]


def _add_common(parser: argparse.ArgumentParser) -> None:

    parser.add_argument("--target", required=True, help="target dataset Q (registry name or path)")
    parser.add_argument(
        "--refs",
        required=True,
        type=names,
        help="comma-separated reference datasets P_1,...,P_m (m >= 2)",
    )
    parser.add_argument(
        "--split", choices=("train", "test"), default="train", help="split of every dataset"
    )
    parser.add_argument(
        "--n",
        type=positive_int,
        default=1000,
        help=(
            f"stratified samples per dataset (default 1000, {limits.MIN_SAMPLES} to "
            f"{limits.MAX_SAMPLES:,})"
        ),
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the subsamples")
    parser.add_argument(
        "--size",
        type=positive_int,
        default=None,
        help=(
            "common image size when sizes differ (default: the target's height; "
            f"{limits.MIN_IMAGE_SIZE} to {limits.MAX_IMAGE_SIZE})"
        ),
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        metavar="B",
        help=(
            "batched OTDD (paper appendix 'Complexity'): batches of B target points, each "
            "solved against B random reference points, so memory is ~B^2 per batch instead "
            "of N x N (e.g. 2000 for the full 60,000-sample splits); default: one problem"
        ),
    )
    parser.add_argument(
        "--stream",
        action="store_true",
        help=(
            "one problem with the cost streamed by row blocks instead of stored (at most "
            f"{limits.STREAMED_SUPPORT_PER_ROW} kept entries per row): every target point can map "
            "to any reference point; chosen automatically when the stored N x N cost would "
            "not fit in memory"
        ),
    )
    add_epsilon_option(parser)
    parser.add_argument("--lambda-x", type=number, default=None, help="weight of the feature cost")
    parser.add_argument("--lambda-y", type=number, default=None, help="weight of the label cost")
    parser.add_argument("--label-method", choices=("gaussian", "exact"), default=None)
    parser.add_argument("--device", default=None, help="auto (default), cpu or cuda")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help=(
            "threads for the independent parts of the fit, its maps and label distances "
            "(default 1: one after another; the values do not depend on it)"
        ),
    )
    parser.add_argument(
        "--solver", default=None, help="QP solver for a_hat (quadprog, clarabel, osqp, enumerate)"
    )
    parser.add_argument(
        "--method",
        choices=("barycentric", "neural"),
        default="barycentric",
        help=(
            "how the OTDD maps T_i are computed: barycentric projection of the entropic plan "
            "(default) or the neural map of the paper's max-min problem (trained, out-of-sample)"
        ),
    )
    parser.add_argument(
        "--neural-preset",
        choices=("tiny", "cpu", "paper"),
        default=None,  # "cpu" (_DEFAULTS): None tells a given option apart
        help="training budget of --method neural (default cpu: minutes per map at 32x32)",
    )
    parser.add_argument(
        "--neural-iterations",
        type=positive_int,
        default=None,
        help=(
            "override the preset's maximum number of critic iterations (at most "
            f"{limits.MAX_NEURAL_ITERATIONS:,})"
        ),
    )
    add_feature_args(parser)
    add_bootstrap_args(parser)
    parser.add_argument(
        "--no-cache", action="store_true", help="do not read or write the on-disk cache"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def add_bootstrap_args(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap B``, ``--bootstrap-seed``, ``--bootstrap-method``, ``--backend``,
    ``--ray-address``: intervals of the projection's numbers (issue 23)."""
    parser.add_argument(
        "--bootstrap",
        type=positive_int,
        default=None,
        metavar="B",
        help="print 95%% bootstrap intervals of W_i, a_hat and the objective from B "
        "replicates (q-resample: cheap, Q's samples drawn again with the maps fixed)",
    )
    parser.add_argument(
        "--bootstrap-seed", type=int, default=None, help="seed of the replicates (default 0)"
    )
    parser.add_argument(
        "--bootstrap-method",
        choices=("q-resample", "refit"),
        default=None,  # "q-resample" (_DEFAULTS)
        help="q-resample (default) or refit: Q and every reference drawn again and the maps "
        "refitted, each replicate one task (about one fit each)",
    )
    add_backend_args(
        parser,
        "each bootstrap refit and each OTDD batch (--batch-size; batches: sequential unless --backend or --ray-address is given)",
    )


def add_feature_args(parser: argparse.ArgumentParser) -> None:
    """``--features``, ``--features-model``, ``--features-size``, ``--encoder-preset``."""
    parser.add_argument(
        "--features",
        choices=BUILTIN_SPACES,
        default=AUTO,
        help=(
            "the space the OTDD costs live in (paper Sec. 5.3): auto (default: chosen from the "
            "data and printed with the reason: box for grey glyphs, the pretrained encoder for "
            "colour or textured images, raw features for vectors), pixels, pca (50 components "
            "of the union), box (grey digits box-normalised like MNIST), encoder (the shipped "
            "pretrained CNN, or one trained here with --encoder-preset cpu): P_a's images come "
            "back through the couplings"
        ),
    )
    parser.add_argument(
        "--features-model",
        type=Path,
        default=None,
        metavar="FILE",
        help="a TorchScript file mapping (N, C, H, W) images in [0, 1] to (N, d) features "
        "(instead of --features)",
    )
    parser.add_argument(
        "--features-size",
        type=positive_int,
        default=None,
        help="with --features-model: the side images are resized to first",
    )
    parser.add_argument(
        "--encoder-preset",
        choices=ENCODER_PRESET_NAMES,
        default=None,  # "pretrained" (_DEFAULTS)
        help="weights of --features encoder: pretrained (default, shipped in assets/encoders; "
        "nothing trained) or a budget to train one here on your datasets (cpu: minutes, "
        "cached; tiny: seconds, for tests)",
    )


def feature_space_from_args(args: argparse.Namespace) -> ModelSpace | None:
    """The user's model as a feature space (``--features-model``), or ``None``.

    Raises
    ------
    GeovizError
        The file is missing or not a TorchScript model.
    """
    path = getattr(args, "features_model", None)
    if path is None:
        return None
    from geoviz.features import ModelSpace

    if getattr(args, "features", AUTO) != AUTO:
        raise GeovizError("give either --features or --features-model, not both")
    return ModelSpace.from_torchscript(path, input_size=getattr(args, "features_size", None))


# --------------------------------------------------------------------------- shared steps

#: defaults of the options declared with ``default=None`` (a given one is told apart)
_DEFAULTS: dict[str, Any] = {
    "bootstrap_seed": 0,
    "bootstrap_method": "q-resample",
    "backend": "auto",
    "ray_address": None,
    "neural_preset": "cpu",
    "encoder_preset": "pretrained",
    "neural_iterations": None,
    "features_size": None,
    "format": None,
    "n_out": None,
}


def _refuse_unused_options(args: argparse.Namespace, given: set[str]) -> None:
    """Options that would do nothing in the given combination, refused in one sentence
    (they were silently ignored): the bootstrap's options without ``--bootstrap``, the
    refits' backend without ``--bootstrap-method refit``, the neural maps' options without
    ``--method neural``, ``--encoder-preset`` without ``--features encoder``,
    ``--features-size`` without ``--features-model``, and the export's options without
    ``--out``. ``given``: the options of :data:`_DEFAULTS` given on the command line."""
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
    if args.method != "neural":
        for dest in ("neural_preset", "neural_iterations"):
            unused[dest] = "only applies with --method neural"
    if args.features != "encoder":
        unused["encoder_preset"] = "only applies with --features encoder"
    if args.features_model is None:
        unused["features_size"] = "only applies with --features-model FILE"
    if args.command == "project" and args.out is None:
        for dest in ("format", "n_out", "overwrite"):
            unused[dest] = "only applies with --out (an export)"
    refuse_unused(given, unused)
    if args.method == "neural" and (args.features not in ("pixels", AUTO) or args.features_model):
        space = "--features-model" if args.features_model else f"--features {args.features}"
        raise GeovizError(
            f"--method neural maps images in pixel space; with {space} use --method barycentric"
        )


def _check_paths(args: argparse.Namespace) -> None:
    """Every path option is one the file system can take (:func:`cli_path`)."""
    cli_path(args.target, "--target")
    for name in args.refs:
        cli_path(name, "--refs")
    if args.features_model is not None:
        cli_path(args.features_model, "--features-model")
    if getattr(args, "out", None) is not None:
        cli_path(args.out, "--out", output=True)


def check_args(args: argparse.Namespace) -> None:
    """Check every option of ``distance`` / ``project`` / ``grid`` before any work.

    Sets ``args.checked_weights`` (the ``--weights`` on the simplex, or ``None``),
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
    m = len(args.refs)
    if m < 2:
        raise GeovizError(f"--refs needs at least 2 reference datasets (comma-separated), got {m}")
    if m > limits.MAX_REFERENCES:
        raise GeovizError(f"--refs takes at most {limits.MAX_REFERENCES} datasets, got {m}")
    cli_int(args.n, "--n", limits.MIN_SAMPLES, limits.MAX_SAMPLES, why="samples per dataset")
    cli_seed(args.seed)
    cli_int(args.workers, "--workers", 1, 64, why="threads of the fit")
    if args.bootstrap is not None:
        from geoviz.geodesic.uncertainty import check_replicates

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
        from geoviz.geodesic.weights import check_weights

        try:
            args.checked_weights = check_weights(args.weights, m)
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


def _otdd_config(args: argparse.Namespace) -> OTDDConfig:
    from geoviz.ot.otdd import OTDDConfig

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
    from geoviz.maps.neural import get_neural_preset

    cfg = get_neural_preset(getattr(args, "neural_preset", "cpu"))
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
    from geoviz.data.choice import DatasetChoice
    from geoviz.geodesic.pipeline import GeodesicConfig
    from geoviz.geodesic.spec import GeodesicSpec

    return GeodesicSpec(
        target=DatasetChoice.named(args.target, args.split),
        references=tuple(DatasetChoice.named(name, args.split) for name in args.refs),
        n_target=args.n,
        n_reference=args.n,
        seed=args.seed,
        image_size=args.size,
        config=GeodesicConfig(
            otdd=_otdd_config(args),
            qp_solver=args.solver,
            method=getattr(args, "method", "barycentric"),
            neural=_neural_config(args),
            features=getattr(args, "features", AUTO),
            encoder=getattr(args, "encoder_preset", "pretrained"),
        ),
    )


def _fit(args: argparse.Namespace) -> GeodesicResult:
    from geoviz.backend import DiskCache, get_cache
    from geoviz.geodesic import spec as geodesic_spec
    from geoviz.geodesic.pipeline import fit_geodesic

    check_args(args)
    spec = spec_from_args(args)
    features = feature_space_from_args(args)
    data = geodesic_spec.load_spec_datasets(spec)
    cache = DiskCache(enabled=False) if args.no_cache else get_cache()
    with progress_callback(not args.quiet) as progress, warnings.catch_warnings():
        # the commands print their own BLURRY MAP line (also for maps read from the cache)
        warnings.simplefilter("ignore", BlurWarning)
        return fit_geodesic(
            data.target,
            list(data.references),
            spec.config,
            progress=progress,
            cache=cache,
            features=features,
            workers=args.workers,
        )


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(cell)) for cell in col) for col in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            str(c).ljust(w) if i == 0 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _num(x: float) -> str:
    return f"{x:.6g}"


def _names_of(result: GeodesicResult) -> list[str]:
    return list(result.label_space.dataset_names)


def _blur_lines(result: GeodesicResult) -> list[str]:
    """One ``BLURRY MAP`` line per map whose effective neighbours exceed ``BLUR_NEIGHBOURS``."""
    from geoviz.ot.otdd import BLUR_NEIGHBOURS, DEFAULT_EPSILON

    eps = float(result.config.otdd.epsilon)
    lines = []
    for i, name in enumerate(_names_of(result)):
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
    from geoviz.maps.base import PlanDiagnostics

    what = f"{OTDD}, (2,Q) distance to Q and diagnostics" if two_q else f"{OTDD} and diagnostics"
    space = "" if result.features_name == "pixels" else f" in the {result.features_name} space"
    if all(isinstance(d, PlanDiagnostics) for d in result.diagnostics):
        eps = float(result.config.otdd.epsilon)
        return f"{what} of each map T_i: Q -> P_i{space} (epsilon = {eps:g} x mean ground cost):"
    return f"{what} of each {result.config.method} map T_i: Q -> P_i{space}:"


def _cell(diagnostics: MapDiagnostics, name: str) -> str:
    """A field as the CLI prints it: numbers at 6 significant digits (scripts read them
    back), everything else as the app reads it (:func:`geoviz.viz.report.field_text`)."""
    from geoviz.viz.report import field_text, field_value

    value = field_value(diagnostics, name)
    if isinstance(value, float):
        return _num(value)
    return field_text(diagnostics, name)


def _print_maps(result: GeodesicResult, *, two_q: bool = False) -> None:
    """The per-map table (OTDD and the diagnostics of each map), its captions and blur
    warnings.

    The columns, their headers, missing texts and captions are those of the app's map
    table (:data:`geoviz.viz.report.FIELD_FORMATS`, keyed by diagnostics type and field);
    a field no map has a value for is left out.
    """
    from geoviz.viz.report import diagnostic_fields, field_header, field_value, map_table_notes

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
    for i, (name, diag) in enumerate(zip(_names_of(result), diagnostics, strict=True)):
        row = [name, _num(diag.otdd)]
        if two_q:
            row.append(_num(result.w_to_target[i]))
        rows.append(row + [_cell(diag, field) for field in fields])
    print(f"\n{_maps_heading(result, two_q)}")
    print(_table(header, rows))
    captions, warnings_ = map_table_notes(result)
    for line in [*captions, *warnings_]:
        print(line)
    for line in _blur_lines(result):
        print(line)


def _bootstrap(args: argparse.Namespace, result: GeodesicResult) -> GeodesicBootstrap | None:
    """The replicates ``--bootstrap`` asks for, or ``None``."""
    if args.bootstrap is None:
        return None
    if args.bootstrap_method == "q-resample":
        return result.bootstrap(args.bootstrap, seed=args.bootstrap_seed)
    from geoviz.backend import DiskCache, get_cache
    from geoviz.cli.output import PlainProgress
    from geoviz.geodesic.refit import bootstrap_refit

    bar = None if args.quiet else PlainProgress()

    def report(done: int, total: int) -> None:
        if bar is not None:
            bar("bootstrap refits", done / max(total, 1), f"{done}/{total}")

    return bootstrap_refit(
        result,
        args.bootstrap,
        seed=args.bootstrap_seed,
        backend=args.backend,
        address=ray_address(args),
        cache=DiskCache(enabled=False) if args.no_cache else get_cache(),
        progress=report,
    )


def _print_intervals(result: GeodesicResult, boot: GeodesicBootstrap, weights: Any = None) -> None:
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
            _num(w_int.estimate[i]),
            f"[{_num(w_int.low[i])}, {_num(w_int.high[i])}]",
            _num(w_int.bias[i]),
            *([f"[{_num(c_low[i])}, {_num(c_high[i])}]"] if corrected else []),
            f"{a_int.estimate[i]:.4f}",
            f"[{a_int.low[i]:.4f}, {a_int.high[i]:.4f}]",
        ]
        for i, name in enumerate(_names_of(result))
    ]
    header = ["reference", W_TARGET, "interval", "bias"]
    header += ["bias-corrected"] if corrected else []
    print(_table([*header, A_HAT, "interval"], rows))
    f_int = boot.objective_interval(result.a_hat)
    print(
        f"{OBJECTIVE_AT_A_HAT} = {_num(float(f_int.estimate))} "
        f"[{_num(float(f_int.low))}, {_num(float(f_int.high))}]"
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
            f"{OBJECTIVE_AT_A_HAT} = {_num(float(gap.estimate))} "
            f"[{_num(float(gap.low))}, {_num(float(gap.high))}]: {verdict}"
        )
    if boot.flat:
        print("the references are identical as seen from Q: every weight vector is as good as â")


def app_query(args: argparse.Namespace, result: GeodesicResult) -> dict[str, str] | None:
    """The app's readable link query of this fit (``geoviz.app.links.QUERY_FIELDS``), or
    ``None`` when the app cannot state it.

    The app opens it from the disk cache (the same data and the same configuration, sized
    alike by :meth:`OTDDConfig.sized_for <geoviz.ot.otdd.OTDDConfig.sized_for>`: every map
    and label distance is a cache hit) when each dataset is a registry name or a file
    inside a folder of ``$GEOVIZ_DATA_DIRS`` (:mod:`geoviz.data.served`), the maps are
    barycentric, the OTDD's numbers are the app's (no ``--batch-size``, ``--lambda-x/-y``,
    ``--label-method``; ``--stream`` only where the app streams too) and neither
    ``--features-model`` nor ``--solver`` was given.
    ``size`` is the image size the fit used, so both resize alike.
    """
    from geoviz.data.choice import DatasetChoice
    from geoviz.data.served import served_folders, served_name
    from geoviz.ot.otdd import OTDDConfig

    image_shape = result.target.image_shape
    # the app's OTDD configuration of this scenario (Scenario.spec): epsilon, seed, sized
    app_otdd = OTDDConfig(epsilon=float(result.config.otdd.epsilon), seed=args.seed)
    if (
        image_shape is None
        or app_otdd.sized_for(args.n, args.n).cache_params() != result.config.otdd.cache_params()
        or args.features_model is not None
        or args.solver is not None
        or getattr(args, "method", "barycentric") != "barycentric"
        or (
            getattr(args, "features", AUTO) == "encoder"
            and getattr(args, "encoder_preset", "pretrained") != "pretrained"
        )
    ):
        return None
    try:
        folders = served_folders()
    except GeovizError:
        return None
    names = []
    for name in (args.target, *args.refs):
        if DatasetChoice.named(name, args.split).source == "registry":
            names.append(name)
            continue
        served = served_name(name, folders)
        if served is None:
            return None
        names.append(served)
    return {
        "target": names[0],
        "refs": ",".join(names[1:]),
        "n": str(args.n),
        "size": str(int(image_shape[-1])),
        "seed": str(args.seed),
        "epsilon": repr(float(result.config.otdd.epsilon)),
        "features": getattr(args, "features", AUTO),
        "method": "barycentric",
        "split": args.split,
    }


def _print_app_link(args: argparse.Namespace, result: GeodesicResult) -> None:
    """``app ...``: the link that opens this fit in the app (from the disk cache)."""
    from urllib.parse import urlencode

    from geoviz.data.choice import feature_bytes_bound
    from geoviz.data.served import link_choice

    query = None if args.no_cache else app_query(args, result)
    if query is None:
        return
    names = [query["target"], *query["refs"].split(",")]
    choices = [link_choice(n, "test" if query["split"] == "test" else "train") for n in names]
    need_mb = -(
        -feature_bytes_bound(choices, [args.n] * len(names), int(query["size"]), "auto") // 2**20
    )
    env = []
    if any(c.source == "server" for c in choices):
        env.append(f"GEOVIZ_DATA_DIRS={shlex.quote(os.environ.get('GEOVIZ_DATA_DIRS', ''))}")
    if need_mb > limits.APP_MAX_SCENARIO_MB:  # the app's default bound (GEOVIZ_APP_MAX_MB)
        env.append(f"GEOVIZ_APP_MAX_MB={need_mb}")
    prefix = " ".join([*env, ""])
    print(
        f"app (its maps are in the disk cache): {prefix}streamlit run app.py, then open "
        f"http://localhost:8501/geodesic?{urlencode(query, safe='/,')}"
    )


# --------------------------------------------------------------------------- commands


def _cmd_distance(args: argparse.Namespace) -> int:
    result = _fit(args)
    names = _names_of(result)
    print(f"target: {result.target.name} ({result.target.n_samples} samples)")
    print(result.space_sentence)
    _print_maps(result, two_q=True)
    print(f"\n(2,Q) matrix {W_BETWEEN} (last column: {W_TARGET}):")
    header = ["", *names, "Q"]
    body = [
        [
            name,
            *(_num(result.w_between[i, j]) for j in range(result.m)),
            _num(result.w_to_target[i]),
        ]
        for i, name in enumerate(names)
    ]
    print(_table(header, body))
    boot = _bootstrap(args, result)
    if boot is not None:
        _print_intervals(result, boot)
    _print_app_link(args, result)
    return 0


def _cmd_project(args: argparse.Namespace) -> int:
    result = _fit(args)
    names = _names_of(result)
    print(f"target: {result.target.name} ({result.target.n_samples} samples)")
    print(result.space_sentence)
    print(
        f"{A_HAT}:  "
        + ", ".join(f"{name}={a:.4f}" for name, a in zip(names, result.a_hat, strict=True))
    )
    print(f"{OBJECTIVE_AT_A_HAT} = {result.w2_hat:.6g}")
    print(
        "best single reference: " + f"{names[int(np.argmin(result.w_to_target))]} "
        f"({W_TARGET} = {float(np.min(result.w_to_target)):.6g})"
    )
    _print_maps(result)
    weights = result.a_hat
    if args.checked_weights is not None:  # checked against m before the fit
        weights = args.checked_weights
        print(
            f"{OBJECTIVE} at --weights {','.join(f'{w:g}' for w in weights)} = {float(result.objective(weights)):.6g}"
        )
    boot = _bootstrap(args, result)
    if boot is not None:
        _print_intervals(result, boot, args.checked_weights)
    if args.out is not None:
        from geoviz.export import export_dataset

        ds = result.interpolate(weights, n=args.n_out, seed=args.seed)
        if boot is not None:
            ds = dataclasses.replace(ds, metadata={**ds.metadata, "uncertainty": boot.manifest()})
        written = export_dataset(ds, args.out, format=args.format, overwrite=args.overwrite)
        print(f"wrote {ds.n_samples} samples of {ds.name} to {written.data_path}")
        print(f"manifest (with every map's OTDD and sharpness): {written.manifest_path}")
    _print_app_link(args, result)
    return 0


def _write_csv_atomic(path: Path, header: Sequence[str], rows: np.ndarray, overwrite: bool) -> None:
    refuse_existing(path, overwrite)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([repr(float(v)) for v in row])
    write_file(path, buf.getvalue().encode("utf-8"), overwrite, "CSV file")


def _cmd_grid(args: argparse.Namespace) -> int:
    from geoviz.geodesic.distances import simplex_grid

    result = _fit(args)
    names = _names_of(result)
    grid = simplex_grid(result.m, args.resolution)
    values = result.objective(grid)
    k = int(np.argmin(values))
    header = [*(f"a_{n}" for n in names), "objective"]
    columns = [grid, values]
    boot = _bootstrap(args, result)
    if boot is not None:
        f_int = boot.objective_interval(grid)
        header += ["objective_low", "objective_high"]
        columns += [f_int.low, f_int.high]
        if not boot.flat:  # 1.0 where the weights are as good as a_hat at this sample size
            header.append("as_good_as_a_hat")
            columns.append(boot.as_good_as_a_hat(grid).astype(np.float64))
    _write_csv_atomic(Path(args.out), header, np.column_stack(columns), args.overwrite)
    print(result.space_sentence)
    print(f"wrote {grid.shape[0]} simplex points (resolution {args.resolution}) to {args.out}")
    print(
        "grid minimum: "
        + ", ".join(f"{n}={a:.4f}" for n, a in zip(names, grid[k], strict=True))
        + f"  {OBJECTIVE} = {values[k]:.6g}"
    )
    print(
        f"{A_HAT} (QP):       "
        + ", ".join(f"{n}={a:.4f}" for n, a in zip(names, result.a_hat, strict=True))
        + f"  {OBJECTIVE_AT_A_HAT} = {result.w2_hat:.6g}"
    )
    _print_maps(result)
    if boot is not None:
        _print_intervals(result, boot)
        if not boot.flat:
            inside = int(boot.as_good_as_a_hat(grid).sum())
            print(f"{inside} of {grid.shape[0]} grid points are as good as â at this sample size")
    return 0


# --------------------------------------------------------------------------- registration


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``distance``, ``project`` and ``grid`` to the ``geoviz`` CLI."""
    from geoviz.export import export_formats  # the registry, read when the parser is built

    commands: list[tuple[str, str, Callable[[argparse.Namespace], int]]] = [
        (
            "distance",
            "OTDD values and the (2,Q) distance matrix of a target and references",
            _cmd_distance,
        ),
        (
            "project",
            f"{A_HAT}, {OBJECTIVE_AT_A_HAT} and optional export of P_{A_HAT}",
            _cmd_project,
        ),
        ("grid", f"{OBJECTIVE} over a simplex grid, written to CSV", _cmd_grid),
    ]
    for name, help_text, handler in commands:
        parser = subparsers.add_parser(name, help=help_text, description=help_text)
        _add_common(parser)
        if name == "project":
            parser.add_argument(
                "--out",
                default=None,
                help="export P_a here (.npz, .pt, .parquet, .zip or a folder)",
            )
            parser.add_argument(  # every registered export format (geoviz.export.registry)
                "--format", choices=export_formats(), default=None
            )
            parser.add_argument(
                "--overwrite", action="store_true", help="replace an existing export"
            )
            parser.add_argument(
                "--weights",
                type=number_list,
                default=None,
                help="export P_a at these weights instead of a_hat",
            )
            parser.add_argument(
                "--n-out", type=positive_int, default=None, help="samples to export (default all)"
            )
        if name == "grid":
            parser.add_argument(
                "--resolution",
                type=positive_int,
                default=20,
                help=(
                    f"grid step 1/resolution (at most {limits.MAX_GRID_RESOLUTION}, and at most "
                    f"{limits.MAX_GRID_POINTS:,} grid points for the m references)"
                ),
            )
            parser.add_argument(
                "--out", required=True, help="CSV file (columns a_<ref>..., objective)"
            )
            parser.add_argument("--overwrite", action="store_true", help="replace an existing CSV")
        # the OTDD's cost passes are GEMMs that use every core (neural maps: see _cmd_*)
        parser.set_defaults(func=handler, torch_threads=None)
