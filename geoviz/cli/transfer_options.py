"""The options of ``geoviz transfer`` (``argparse`` declarations only).

:func:`add_transfer_args` declares them; the choices and defaults come from
:mod:`geoviz.vocabulary`, so building the parser (and ``--help``) imports no torch. The
values are checked after parsing by :func:`geoviz.cli.transfer_checks.check_transfer_args`.
"""

from __future__ import annotations

import argparse

from geoviz.cli.args import (
    add_backend_args,
    add_epsilon_option,
    add_features_option,
    add_n_option,
    add_seed_option,
    add_size_option,
    positive_int,
)
from geoviz.vocabulary import (
    DEFAULT_TRANSFER_PRESET,
    ENCODER_PRESET_NAMES,
    NEURAL_PRESET_NAMES,
    TRANSFER_METHODS,
)

__all__ = ["TRANSFER_REFS", "TRANSFER_TARGET", "add_transfer_args"]

TRANSFER_TARGET = "mnist"
TRANSFER_REFS = "fashion_mnist,usps,kmnist"


def add_transfer_args(p: argparse.ArgumentParser) -> None:
    """Every option of ``geoviz transfer``: the task (target, references, samples, ``k``),
    the feature space, the methods and their budgets, the grid study, the output and how
    the runs are run."""
    p.add_argument(
        "--target", default=TRANSFER_TARGET, help=f"target dataset Q (default {TRANSFER_TARGET})"
    )
    p.add_argument(
        "--refs",
        default=TRANSFER_REFS,
        help=f"comma-separated pretraining datasets P_1..P_m (default {TRANSFER_REFS})",
    )
    add_n_option(p, default=1000, help="training samples per dataset (default 1000)")
    p.add_argument(
        "--n-test",
        type=positive_int,
        default=None,
        help="test samples of the target (default: the whole test split)",
    )
    add_size_option(p, default=32, help="image size (default 32)")
    add_features_option(
        p,
        default=None,  # AUTO: None tells a given option apart
        help="the space the OTDD maps and a_hat are computed in (default auto: chosen from "
        "the data, as `geoviz project` does, and printed); the pretraining set P_a is made "
        "of images in every case",
    )
    p.add_argument(
        "--encoder-preset",
        choices=ENCODER_PRESET_NAMES,
        default=None,  # DEFAULT_ENCODER_PRESET
        help="weights of --features encoder: pretrained (default, shipped) or a budget to "
        "train one here (cpu, tiny)",
    )
    p.add_argument(
        "--k", type=positive_int, default=5, help="labelled target samples per class (default 5)"
    )
    add_seed_option(
        p, help="seed of the subsamples and of the choice of the k labelled samples (default 0)"
    )
    p.add_argument(
        "--method",
        choices=(*TRANSFER_METHODS, "all"),
        default="all",
        help=(
            "method(s) to run (default all; with --grid: otdd, or mixup). otdd_neural trains "
            "neural OTDD maps (minutes per map on a CPU); 'all' includes it with --neural"
        ),
    )
    p.add_argument(
        "--neural",
        action="store_true",
        help="with --method all: also run the 'OTDD neural map' column of Table 1",
    )
    p.add_argument(
        "--neural-preset",
        choices=NEURAL_PRESET_NAMES,
        default=None,  # DEFAULT_NEURAL_PRESET
        help="training budget of the neural maps (default cpu)",
    )
    p.add_argument(
        "--weights",
        default=None,  # "a_hat" (geoviz.cli.transfer_checks)
        help="weights a of P_a for otdd/mixup: a_hat (default) or comma-separated, e.g. 0.5,0.3,0.2",
    )
    p.add_argument(
        "--seeds", default="0,1,2", help="comma-separated training seeds (default 0,1,2)"
    )
    p.add_argument(
        "--preset",
        default=DEFAULT_TRANSFER_PRESET,
        help="training budget: paper, cpu (default) or tiny (see geoviz.nn.training.PRESETS)",
    )
    add_epsilon_option(p)
    p.add_argument(
        "--grid",
        type=positive_int,
        default=None,
        metavar="R",
        help="run the simplex study on simplex_grid(m, R) instead (R=7: the paper's 36 points)",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help=(
            "write results JSON/CSV and a manifest here (files replaced); with --grid also "
            "DIR/checkpoints (reused by a rerun) and correlation.html"
        ),
    )
    add_backend_args(p, "each (method or grid point, seed)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the OTDD cache")
    p.add_argument("--quiet", action="store_true", help="no progress output")
