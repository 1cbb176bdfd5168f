"""``geoviz transfer``: the transfer-experiment command of the CLI.

:func:`register` is called by :func:`geoviz.cli.build_parser` (this module is one of
:data:`geoviz.cli.PLUGIN_MODULES`) with its ``argparse`` sub-parsers.

``geoviz transfer [--target T --refs A,B,C] [--method all] [--grid R] [--out DIR] ...``
runs the paper's transfer experiments (Sec. 5.2, Table 1): pretrain on ``P_a``,
fine-tune on ``k`` labelled target samples per class, test
(:func:`geoviz.transfer.table.compare_methods`); or, with ``--grid R``, the
simplex study correlating ``W²(P_a, Q)`` with accuracy
(:func:`geoviz.transfer.study.run_grid`). Runs are Ray tasks with
``--backend ray`` (:mod:`geoviz.tasks`). The datasets are those of a
:class:`~geoviz.geodesic.spec.GeodesicSpec` (the target's train split, the references
and the target's test split, all at ``--size``), loaded by
:func:`~geoviz.geodesic.spec.load_spec_datasets`; the geodesic is fitted only when a
method needs it (``otdd``, ``mixup`` at ``a_hat``, ``--grid``).

Every option is checked before any dataset is loaded, against :mod:`geoviz.limits`
(``--refs`` count, ``--n``, ``--n-test``, ``--size``, ``--k``, ``--seed``, ``--seeds``,
``--epsilon``, ``--grid`` with the grid size it gives for ``m``, ``--weights``).
Progress goes to stderr: tqdm bars on a terminal, plain lines (at most one per 10 %)
in a log or a pipe.

The module holds the run (:func:`_run_transfer`: the fits the methods need, then the
comparison or the study), the handler and :func:`register`; the options are declared in
:mod:`geoviz.cli.transfer_options`, checked and turned into the spec in
:mod:`geoviz.cli.transfer_checks`, and reported by :mod:`geoviz.cli.transfer_report`.
Building the parser imports no torch: the library is imported when the command runs.

The handler returns the exit status and raises
:class:`~geoviz.errors.GeovizError` for bad input (printed by
:func:`geoviz.cli.main` with status 2).
"""

from __future__ import annotations

import argparse
import warnings
from typing import TYPE_CHECKING, Any, Literal, cast

from geoviz.cli.args import ray_address
from geoviz.cli.transfer_checks import TransferOptions, check_transfer_args, transfer_spec
from geoviz.cli.transfer_options import add_transfer_args
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

if TYPE_CHECKING:
    from geoviz.geodesic.config import GeodesicConfig
    from geoviz.transfer.experiment import Method

__all__ = [
    "register",
]

# the old private name of the moved progress helper, for callers that import it from here
_transfer_progress = transfer_progress


def _run_transfer(
    args: argparse.Namespace, opts: TransferOptions, config: GeodesicConfig, task: Any
) -> TransferRun:
    """Fit the geodesic(s) the methods need, then run the comparison or the simplex study."""
    import dataclasses

    from geoviz.backend import DiskCache, get_cache
    from geoviz.geodesic.pipeline import fit_geodesic
    from geoviz.transfer.table import compare_methods

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
            from geoviz.transfer.study import run_grid

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
                weights=weights,
                neural_geodesic=run.neural_geodesic,
                **run_options,
            )
    return run


def _cmd_transfer(args: argparse.Namespace) -> int:
    """``geoviz transfer``: check, build the spec, load, fit and run, report."""
    from geoviz.geodesic.spec import load_spec_datasets
    from geoviz.transfer.experiment import make_task

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
            write_study(run.study, ref_names, opts.out_dir, manifest)
        return 0
    assert run.comparison is not None
    report_comparison(run.comparison, opts.seeds, run.geodesic, opts.out_dir, manifest)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``transfer`` to the ``geoviz`` CLI."""
    help_text = (
        "transfer experiments: pretrain on P_a, fine-tune on k-shot target, test "
        "(or --grid R: W²(P_a, Q) vs accuracy over the simplex)"
    )
    p = subparsers.add_parser("transfer", help=help_text, description=help_text)
    add_transfer_args(p)
    p.set_defaults(func=_cmd_transfer)
