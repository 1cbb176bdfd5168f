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
whose effective neighbours exceed :data:`geoviz.ot.otdd_cost.BLUR_NEIGHBOURS`.
``--epsilon`` is relative to the mean ground cost
(``eps_abs = epsilon * mean(||x - x'||^2 + W_2^2)``, no 1/2), default
:data:`geoviz.vocabulary.DEFAULT_EPSILON`.

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

The module holds the commands (fit, bootstrap, the app's link, the three handlers) and
:func:`register`; their options are declared in :mod:`geoviz.cli.geodesic_options`,
checked and turned into the spec in :mod:`geoviz.cli.geodesic_checks`, and printed by
:mod:`geoviz.cli.geodesic_report` (every name stays importable from here). Building the
parser imports no torch: the library is imported when a command runs.

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
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import numpy as np

from geoviz import limits
from geoviz.cli.app import DEFAULT_ADDRESS, DEFAULT_PORT
from geoviz.cli.args import ray_address
from geoviz.cli.geodesic_checks import (
    check_args,
    otdd_config,
    spec_from_args,
)
from geoviz.cli.geodesic_options import (
    add_common_args,
    add_grid_args,
    add_project_args,
)
from geoviz.cli.geodesic_report import (
    num,
    print_intervals,
    print_maps,
    reference_names,
    table,
)
from geoviz.cli.output import PlainProgress, progress_callback, refuse_existing, write_file
from geoviz.errors import BlurWarning, GeovizError
from geoviz.glossary import A_HAT, OBJECTIVE, OBJECTIVE_AT_A_HAT, W_BETWEEN, W_TARGET
from geoviz.vocabulary import AUTO, DEFAULT_ENCODER_PRESET, DEFAULT_MAP_METHOD

if TYPE_CHECKING:  # the CLI imports torch-based modules only when a command runs
    from geoviz.geodesic.result import GeodesicResult
    from geoviz.geodesic.uncertainty import GeodesicBootstrap

__all__ = [
    "app_query",
    "register",
]

# the old private names of the moved helpers, for callers that import them from here
_otdd_config = otdd_config
_print_maps = print_maps


def _fit(args: argparse.Namespace) -> GeodesicResult:
    from geoviz.backend import DiskCache, get_cache
    from geoviz.geodesic import spec as geodesic_spec

    check_args(args)
    spec = spec_from_args(args)  # the user's --features-model travels inside it
    data = geodesic_spec.load_spec_datasets(spec)
    cache = DiskCache(enabled=False) if args.no_cache else get_cache()
    with progress_callback(not args.quiet) as progress, warnings.catch_warnings():
        # the commands print their own BLURRY MAP line (also for maps read from the cache)
        warnings.simplefilter("ignore", BlurWarning)
        return geodesic_spec.fit_spec(
            spec, data, progress=progress, cache=cache, workers=args.workers
        )


def _bootstrap(args: argparse.Namespace, result: GeodesicResult) -> GeodesicBootstrap | None:
    """The replicates ``--bootstrap`` asks for, or ``None``."""
    if args.bootstrap is None:
        return None
    if args.bootstrap_method == "q-resample":
        return result.bootstrap(args.bootstrap, seed=args.bootstrap_seed)
    from geoviz.backend import DiskCache, get_cache
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


def app_query(args: argparse.Namespace, result: GeodesicResult) -> dict[str, str] | None:
    """The app's readable link query of this fit (``geoviz.app.links.QUERY_FIELDS``), or
    ``None`` when the app cannot state it.

    The app opens it from the disk cache (the same data and the same configuration, sized
    alike by :meth:`OTDDConfig.sized_for <geoviz.ot.otdd_cost.OTDDConfig.sized_for>`: every map
    and label distance is a cache hit) when each dataset is a registry name or a file
    inside a folder of ``$GEOVIZ_DATA_DIRS`` (:mod:`geoviz.data.served`), the maps are
    barycentric, the OTDD's numbers are the app's (no ``--batch-size``, ``--lambda-x/-y``,
    ``--label-method``; ``--stream`` only where the app streams too) and neither
    ``--features-model`` nor ``--solver`` was given.
    ``size`` is the image size the fit used, so both resize alike.
    """
    from geoviz.data.choice import DatasetChoice
    from geoviz.data.served import served_folders, served_name
    from geoviz.ot.otdd_cost import OTDDConfig

    image_shape = result.target.image_shape
    # the app's OTDD configuration of this scenario (Scenario.spec): epsilon, seed, sized
    app_otdd = OTDDConfig(epsilon=float(result.config.otdd.epsilon), seed=args.seed)
    if (
        image_shape is None
        or app_otdd.sized_for(args.n, args.n).cache_params() != result.config.otdd.cache_params()
        or args.features_model is not None
        or args.solver is not None
        or getattr(args, "method", DEFAULT_MAP_METHOD) != "barycentric"
        or (
            getattr(args, "features", AUTO) == "encoder"
            and getattr(args, "encoder_preset", DEFAULT_ENCODER_PRESET) != "pretrained"
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
    print(  # the app's own address: `geoviz app` serves this machine only (127.0.0.1)
        f"app (its maps are in the disk cache): {prefix}geoviz app, then open "
        f"http://{DEFAULT_ADDRESS}:{DEFAULT_PORT}/geodesic?{urlencode(query, safe='/,')}"
    )


# --------------------------------------------------------------------------- commands


def _cmd_distance(args: argparse.Namespace) -> int:
    result = _fit(args)
    names = reference_names(result)
    print(f"target: {result.target.name} ({result.target.n_samples} samples)")
    print(result.space_sentence)
    if result.space_caution is not None:
        print(result.space_caution)
    print_maps(result, two_q=True)
    print(f"\n(2,Q) matrix {W_BETWEEN} (last column: {W_TARGET}):")
    header = ["", *names, "Q"]
    body = [
        [
            name,
            *(num(result.w_between[i, j]) for j in range(result.m)),
            num(result.w_to_target[i]),
        ]
        for i, name in enumerate(names)
    ]
    print(table(header, body))
    boot = _bootstrap(args, result)
    if boot is not None:
        print_intervals(result, boot)
    _print_app_link(args, result)
    return 0


def _cmd_project(args: argparse.Namespace) -> int:
    result = _fit(args)
    names = reference_names(result)
    print(f"target: {result.target.name} ({result.target.n_samples} samples)")
    print(result.space_sentence)
    if result.space_caution is not None:
        print(result.space_caution)
    print(
        f"{A_HAT}:  "
        + ", ".join(f"{name}={a:.4f}" for name, a in zip(names, result.a_hat, strict=True))
    )
    print(f"{OBJECTIVE_AT_A_HAT} = {result.w2_hat:.6g}")
    print(
        "best single reference: " + f"{names[int(np.argmin(result.w_to_target))]} "
        f"({W_TARGET} = {float(np.min(result.w_to_target)):.6g})"
    )
    if result.grey_note is not None:  # a colour target of grey references (issue 45)
        print(result.grey_note)
    print_maps(result)
    weights = result.a_hat
    if args.checked_weights is not None:  # checked against m before the fit
        weights = args.checked_weights
        print(
            f"{OBJECTIVE} at --weights {','.join(f'{w:g}' for w in weights)} = {float(result.objective(weights)):.6g}"
        )
    boot = _bootstrap(args, result)
    if boot is not None:
        print_intervals(result, boot, args.checked_weights)
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
    names = reference_names(result)
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
    if result.space_caution is not None:
        print(result.space_caution)
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
    print_maps(result)
    if boot is not None:
        print_intervals(result, boot)
        if not boot.flat:
            inside = int(boot.as_good_as_a_hat(grid).sum())
            print(f"{inside} of {grid.shape[0]} grid points are as good as â at this sample size")
    return 0


# --------------------------------------------------------------------------- registration


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``distance``, ``project`` and ``grid`` to the ``geoviz`` CLI."""
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
        add_common_args(parser)
        if name == "project":
            add_project_args(parser)
        if name == "grid":
            add_grid_args(parser)
        # the OTDD's cost passes are GEMMs that use every core (neural maps: see _cmd_*)
        parser.set_defaults(func=handler, torch_threads=None)
