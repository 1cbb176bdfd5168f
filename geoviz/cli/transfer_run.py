"""The run of ``geoviz transfer`` (:mod:`geoviz.cli.transfer`): check, load, fit, train, report.

Imported by the command's handler when it runs (it imports the library, torch included),
never by the parser.
"""

from __future__ import annotations

import argparse
import dataclasses
import warnings
from typing import Any, Literal, cast

from geoviz.backend import DiskCache, get_cache
from geoviz.cli.args import ray_address
from geoviz.cli.transfer_checks import TransferOptions, check_transfer_args, transfer_spec
from geoviz.cli.transfer_report import (
    TransferRun,
    print_grid_study,
    print_transfer_header,
    report_comparison,
    transfer_manifest,
    transfer_progress,
    write_study,
)
from geoviz.errors import BlurWarning
from geoviz.geodesic.config import GeodesicConfig
from geoviz.geodesic.pipeline import fit_geodesic
from geoviz.geodesic.spec import load_spec_datasets
from geoviz.transfer.experiment import Method, make_task
from geoviz.transfer.study import run_grid
from geoviz.transfer.table import compare_methods
from geoviz.viz.study_figure import correlation_figure

__all__ = ["run_transfer"]


def _run_transfer(
    args: argparse.Namespace, opts: TransferOptions, config: GeodesicConfig, task: Any
) -> TransferRun:
    """Fit the geodesic(s) the methods need, then run the comparison or the simplex study."""
    methods, weights = opts.methods, opts.weights
    needs_geodesic = (
        args.grid is not None or "otdd" in methods or ("mixup" in methods and weights is None)
    )
    cache = DiskCache(enabled=False) if args.no_cache else get_cache()
    what = "simplex study" if args.grid is not None else "transfer"
    run = TransferRun()
    with transfer_progress(not args.quiet, what) as (fit_progress, run_progress):
        refs = list(task.references)
        if needs_geodesic:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", BlurWarning)
                run.geodesic = fit_geodesic(
                    task.target_train, refs, config, progress=fit_progress, cache=cache
                )
        if "otdd_neural" in methods:
            # neural maps generate images: they live in pixel space
            neural = dataclasses.replace(
                config, method="neural", neural=args.neural_preset, features="pixels"
            )
            run.neural_geodesic = fit_geodesic(
                task.target_train, refs, neural, progress=fit_progress, cache=cache
            )
        # the options of every (method or grid point, seed) run
        run_options: dict[str, Any] = {
            "seeds": opts.seeds,
            "preset": opts.preset,
            "backend": args.backend,
            # the environment is read here, at the entry point (the library reads none)
            "address": ray_address(args),
            "progress": run_progress,
        }
        if args.grid is not None:
            checkpoints = None if opts.out_dir is None else opts.out_dir / "checkpoints"
            run.study = run_grid(
                task,
                run.geodesic,
                resolution=args.grid,
                checkpoint_dir=checkpoints,
                method=cast("Literal['otdd', 'mixup']", methods[0]),
                **run_options,
            )
        else:
            run.comparison = compare_methods(
                task,
                run.geodesic,
                methods=cast("list[Method]", methods),
                # compare_methods takes an array: the same numbers, validated once already
                weights=None if weights is None else weights.to_array(),
                neural_geodesic=run.neural_geodesic,
                **run_options,
            )
    return run


def run_transfer(args: argparse.Namespace) -> int:
    """``geoviz transfer``: check, build the spec, load, fit and run, report; returns the
    exit status."""
    opts = check_transfer_args(args)
    spec = transfer_spec(args, opts)
    data = load_spec_datasets(spec)
    assert data.target_test is not None  # the spec names the test split
    task = make_task(data.target, data.target_test, list(data.references), args.k, seed=args.seed)
    run = _run_transfer(args, opts, spec.config, task)
    ref_names = (
        list(run.geodesic.reference_names)
        if run.geodesic is not None
        else [r.name for r in data.references]
    )
    print_transfer_header(
        task, opts, run, ref_names, float(spec.config.otdd.epsilon), data.target.name
    )
    manifest = transfer_manifest(args, opts, spec, data, task, run)
    if run.study is not None:
        print_grid_study(run.study, ref_names, opts.seeds)
        if opts.out_dir is not None:
            figure = correlation_figure(run.study, ref_names)
            html = figure.to_html(include_plotlyjs="cdn")
            write_study(run.study, opts.out_dir, manifest, html)
        return 0
    assert run.comparison is not None
    report_comparison(run.comparison, opts.seeds, run.geodesic, opts.out_dir, manifest)
    return 0
