"""``geoviz screen``: rank many candidate references by their sliced OTDD to a target.

Before a geodesic, a user with ten or more candidate pretraining sets wants to know which
few deserve the full OTDD maps. ``screen`` loads the target and every candidate (same
split, ``--n`` samples each, brought to one image size), places them in the space the
geodesic would choose (``--features``, default ``auto``: :func:`geoviz.features.choose_space`),
and ranks them by :func:`geoviz.ot.sliced.sliced_otdd` (seconds for a dozen candidates).
It prints the table, the time, and the ``geoviz project`` command on the ``--top`` nearest.

A candidate made from the target's own source dataset (``mnist_m`` or ``torchvision:mnist``
for an MNIST target: :func:`geoviz.data.registry.lineage`) is marked in the table: it is near
because it holds the same samples, not because it would transfer to a dataset of another
origin, so the command leaves it out unless ``--include-related`` is given, and says so.

The command's work is :func:`geoviz.cli.screen_run.run_screen`, imported when the command
runs: building the parser imports no torch.
"""

from __future__ import annotations

import argparse

from geoviz.cli.args import (
    MAX_CANDIDATES,
    add_features_option,
    add_n_option,
    add_seed_option,
    add_size_option,
    names,
    positive_int,
)
from geoviz.vocabulary import AUTO, SPLITS

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``screen`` to the ``geoviz`` CLI."""
    text = "rank candidate references by their sliced OTDD to the target (seconds)"
    parser = subparsers.add_parser("screen", help=text, description=text)
    parser.add_argument("--target", required=True, help="target dataset Q (registry name or path)")
    parser.add_argument(
        "--refs",
        required=True,
        type=names,
        help=f"comma-separated candidate references (2 to {MAX_CANDIDATES})",
    )
    parser.add_argument("--split", choices=SPLITS, default="train")
    add_n_option(parser, default=2000, help="stratified samples per dataset (default 2000)")
    add_seed_option(parser, help="seed of the subsamples and slices")
    add_size_option(parser, default=None, help="common image size (default: the target's)")
    add_features_option(
        parser,
        default=AUTO,
        help="space of the distances (default auto: the geodesic's choice for these datasets)",
    )
    parser.add_argument(
        "--projections", type=positive_int, default=256, help="slices (default 256, at most 4096)"
    )
    parser.add_argument(
        "--top", type=positive_int, default=3, help="references named in the suggested command"
    )
    parser.add_argument(
        "--include-related",
        action="store_true",
        help="also propose candidates made from the target's source dataset (e.g. mnist_m for "
        "an MNIST target): marked in the table and left out of the command by default",
    )
    parser.set_defaults(func=_cmd_screen, torch_threads=None)


def _cmd_screen(args: argparse.Namespace) -> int:
    """``geoviz screen``: the library (torch) is imported now, when the command runs."""
    from geoviz.cli.screen_run import run_screen

    return run_screen(args)
