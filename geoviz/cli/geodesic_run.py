"""The run of ``geoviz distance | project | grid`` (:mod:`geoviz.cli.geodesic`): check, build
the spec, load, fit, then print, export or write the grid.

Imported by the commands' handlers when one runs (it imports the library, torch included,
with :mod:`geoviz.cli.geodesic_checks` and :mod:`geoviz.cli.geodesic_report`), never by
the parser.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import os
import shlex
import warnings
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlencode

import numpy as np

from geoviz import limits
from geoviz.backend import DiskCache, cache_key, get_cache
from geoviz.backend.cost_model import remember_iterations
from geoviz.cli.app import DEFAULT_ADDRESS, DEFAULT_PORT
from geoviz.cli.args import ray_address
from geoviz.cli.geodesic_checks import check_args, spec_from_args
from geoviz.cli.geodesic_report import num, print_intervals, print_maps, reference_names, table
from geoviz.cli.output import (
    PlainProgress,
    announced,
    fit_estimate,
    progress_callback,
    refuse_existing,
    write_file,
)
from geoviz.data.choice import DatasetChoice, feature_bytes_bound
from geoviz.data.served import link_choice, served_folders, served_name
from geoviz.errors import BlurWarning, GeovizError
from geoviz.export import export_dataset
from geoviz.geodesic import spec as geodesic_spec
from geoviz.geodesic.distances import simplex_grid
from geoviz.geodesic.refit import bootstrap_refit
from geoviz.geodesic.result import GeodesicResult
from geoviz.geodesic.uncertainty import GeodesicBootstrap
from geoviz.glossary import A_HAT, OBJECTIVE, OBJECTIVE_AT_A_HAT, W_BETWEEN, W_TARGET
from geoviz.ot.otdd_cost import OTDDConfig
from geoviz.vocabulary import AUTO, DEFAULT_ENCODER_PRESET, DEFAULT_MAP_METHOD

__all__ = ["app_query", "print_app_link", "run_distance", "run_grid", "run_project"]


def _fit(args: argparse.Namespace) -> GeodesicResult:
    """Check every option, build the spec, load its datasets and fit it (progress on stderr)."""
    check_args(args)
    spec = spec_from_args(args)  # the user's --features-model travels inside it
    # looked up in geoviz.geodesic.spec when called (the tests' guards patch them there)
    data = geodesic_spec.load_spec_datasets(spec)
    cache = DiskCache(enabled=False) if args.no_cache else get_cache()
    # a cold fit (none of these maps in the cache) estimated above ANNOUNCE_SECONDS says its
    # cost on stderr before and what it took after (issue 45 item 1); stdout is unchanged
    mark = _fit_mark(spec, data)
    cold = cache.load(FIT_MARKS, mark) is None
    est = fit_estimate(data.target, data.references, features=spec.config.features)
    with (
        announced(est, "fitting the maps", enabled=cold and not args.quiet),
        progress_callback(not args.quiet, estimate=est.seconds if cold else None) as progress,
        warnings.catch_warnings(),
    ):
        # the commands print their own BLURRY MAP line (also for maps read from the cache)
        warnings.simplefilter("ignore", BlurWarning)
        result = geodesic_spec.fit_spec(
            spec, data, progress=progress, cache=cache, workers=args.workers
        )
    if cold:
        cache.store(FIT_MARKS, mark, {"fitted": 1})
        if result.config.method == "barycentric":  # Sinkhorn's iterations, learned per space
            remember_iterations(result.features_name, [d.iterations for d in result.diagnostics])
    return result


#: disk-cache namespace of the marks of the CLI's finished fits (:func:`_fit_mark`)
FIT_MARKS = "cli_fit_marks"


def _fit_mark(spec: geodesic_spec.GeodesicSpec, data: geodesic_spec.SpecDatasets) -> str:
    """The key of this fit's mark: its configuration and its loaded datasets' fingerprints
    (a user's feature model by its name). Marked once fitted, so the same fit run again reads
    its maps from the cache and is not announced as a cold one."""
    model = spec.features_model
    return cache_key(
        FIT_MARKS,
        {
            "config": spec.config.to_dict(),
            "data": [ds.fingerprint for ds in (data.target, *data.references)],
            "features_model": None if model is None else model.name,
        },
    )


def _bootstrap(args: argparse.Namespace, result: GeodesicResult) -> GeodesicBootstrap | None:
    """The replicates ``--bootstrap`` asks for, or ``None``."""
    if args.bootstrap is None:
        return None
    if args.bootstrap_method == "q-resample":
        return result.bootstrap(args.bootstrap, seed=args.bootstrap_seed)
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


def print_app_link(args: argparse.Namespace, result: GeodesicResult) -> None:
    """``app ...``: the link that opens this fit in the app (from the disk cache), printed
    when :func:`app_query` can state it and the disk cache is on."""
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


def _print_space(result: GeodesicResult) -> None:
    """The feature space's sentence and, when the answer is not to be trusted, its caution."""
    print(result.space_sentence)
    if result.space_caution is not None:
        print(result.space_caution)


# --------------------------------------------------------------------------- commands


def run_distance(args: argparse.Namespace) -> int:
    """``geoviz distance``: the OTDD values, the maps' diagnostics and the (2,Q) matrix."""
    result = _fit(args)
    names = reference_names(result)
    print(f"target: {result.target.name} ({result.target.n_samples} samples)")
    _print_space(result)
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
    print_app_link(args, result)
    return 0


def run_project(args: argparse.Namespace) -> int:
    """``geoviz project``: ``a_hat``, ``W^2(P_a_hat, Q)`` and, with ``--out``, the export."""
    result = _fit(args)
    names = reference_names(result)
    print(f"target: {result.target.name} ({result.target.n_samples} samples)")
    _print_space(result)
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
        ds = result.interpolate(weights, n=args.n_out, seed=args.seed)
        if boot is not None:
            ds = dataclasses.replace(ds, metadata={**ds.metadata, "uncertainty": boot.manifest()})
        written = export_dataset(ds, args.out, format=args.format, overwrite=args.overwrite)
        print(f"wrote {ds.n_samples} samples of {ds.name} to {written.data_path}")
        print(f"manifest (with every map's OTDD and sharpness): {written.manifest_path}")
    print_app_link(args, result)
    return 0


def _write_csv_atomic(path: Path, header: Sequence[str], rows: np.ndarray, overwrite: bool) -> None:
    refuse_existing(path, overwrite)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([repr(float(v)) for v in row])
    write_file(path, buf.getvalue().encode("utf-8"), overwrite, "CSV file")


def run_grid(args: argparse.Namespace) -> int:
    """``geoviz grid``: ``W^2(P_a, Q)`` over a simplex grid, written to ``--out`` (CSV)."""
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
    _print_space(result)
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
