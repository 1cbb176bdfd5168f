"""``geoviz distance | project | grid``: generalized-geodesic commands of the CLI.

:func:`register` is called by :func:`geoviz.cli.build_parser` with its ``argparse``
sub-parsers. All three commands describe their problem as a
:class:`~geoviz.geodesic.spec.GeodesicSpec`
(:func:`~geoviz.cli.geodesic_checks.spec_from_args`: a target and references, registry
names or paths, with ``--split``, ``--n``, ``--seed``, ``--size`` and the map options),
load its datasets with :func:`~geoviz.geodesic.spec.load_spec_datasets` (image sizes
harmonised when they differ; USPS is 16x16, MNIST 28x28), fit the OTDD maps (cached on
disk) and then:

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

Every option is checked by :func:`~geoviz.cli.geodesic_checks.check_args` right after
parsing, *before* any dataset is loaded or map fitted, against :mod:`geoviz.limits`:
``--refs`` (2 to :data:`~geoviz.limits.MAX_REFERENCES` names), ``--n``, ``--size``,
``--seed``, ``--epsilon``, ``--batch-size``, ``--neural-iterations``, ``--weights`` (against
``m``, with :func:`geoviz.geodesic.weights.check_weights`), ``--n-out``,
``--resolution`` (with the grid size it gives for ``m``) and an existing ``--out``
without ``--overwrite``.

``--batch-size B`` selects the batched OTDD mode (paper appendix "Complexity"):
batches of ``B`` target points, each solved against a seeded subsample of ``B``
reference points, so memory is ``~B^2`` per batch instead of ``N_Q x N_P`` (for the
full 60,000-sample *NIST splits).

The module holds :func:`register` and the three handlers; the options are declared in
:mod:`geoviz.cli.geodesic_options`. The run (:mod:`geoviz.cli.geodesic_run`: the fit, the
bootstrap, the app's link and what each command prints, with the checks and the spec of
:mod:`geoviz.cli.geodesic_checks` and the tables of :mod:`geoviz.cli.geodesic_report`) is
imported by each handler, once, when its command runs: building the parser imports no
torch.

Handlers return the exit status and raise :class:`~geoviz.errors.GeovizError`
for bad input (printed by :func:`geoviz.cli.main` with status 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from geoviz.cli.geodesic_options import add_common_args, add_grid_args, add_project_args
from geoviz.glossary import A_HAT, OBJECTIVE, OBJECTIVE_AT_A_HAT

__all__ = ["register"]


# --------------------------------------------------------------------------- commands
# the library (torch) is imported when a command runs: each handler imports the run module


def _cmd_distance(args: argparse.Namespace) -> int:
    from geoviz.cli.geodesic_run import run_distance

    return run_distance(args)


def _cmd_project(args: argparse.Namespace) -> int:
    from geoviz.cli.geodesic_run import run_project

    return run_project(args)


def _cmd_grid(args: argparse.Namespace) -> int:
    from geoviz.cli.geodesic_run import run_grid

    return run_grid(args)


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
        # the OTDD's cost passes are GEMMs that use every core (neural maps: geoviz.cli.main)
        parser.set_defaults(func=handler, torch_threads=None)
