"""``geoviz transfer``: the transfer-experiment command of the CLI.

:func:`register` is called by :func:`geoviz.cli.build_parser` (it is one of
:data:`geoviz.cli.COMMANDS`) with its ``argparse`` sub-parsers.

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

The module holds :func:`register` and the handler; the options are declared in
:mod:`geoviz.cli.transfer_options`. The run (:mod:`geoviz.cli.transfer_run`: the checks of
:mod:`geoviz.cli.transfer_checks` and the spec, the fits the methods need, then the
comparison or the study, reported by :mod:`geoviz.cli.transfer_report`) is imported by the
handler, once, when the command runs: building the parser imports no torch.

The handler returns the exit status and raises
:class:`~geoviz.errors.GeovizError` for bad input (printed by
:func:`geoviz.cli.main` with status 2).
"""

from __future__ import annotations

import argparse

from geoviz.cli.transfer_options import add_transfer_args

__all__ = [
    "register",
]


def _cmd_transfer(args: argparse.Namespace) -> int:
    """``geoviz transfer``: the library (torch) is imported now, when the command runs."""
    from geoviz.cli.transfer_run import run_transfer

    return run_transfer(args)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``transfer`` to the ``geoviz`` CLI."""
    help_text = (
        "transfer experiments: pretrain on P_a, fine-tune on k-shot target, test "
        "(or --grid R: W²(P_a, Q) vs accuracy over the simplex)"
    )
    p = subparsers.add_parser("transfer", help=help_text, description=help_text)
    add_transfer_args(p)
    p.set_defaults(func=_cmd_transfer)
