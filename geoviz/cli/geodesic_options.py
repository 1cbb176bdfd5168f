"""The options of ``geoviz distance | project | grid`` (``argparse`` declarations only).

:func:`add_common_args` declares what the three commands share (the problem, the OTDD and
its maps, :func:`add_feature_args`, :func:`add_bootstrap_args`); :func:`add_project_args`
and :func:`add_grid_args` the export and the grid. The choices and defaults come from
:mod:`geoviz.vocabulary`, so building the parser (and ``--help``) imports no torch. The
values are checked after parsing by :func:`geoviz.cli.geodesic_checks.check_args`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NamedTuple

from geoviz import limits
from geoviz.cli.args import (
    ExportFormatChoices,
    add_backend_args,
    add_epsilon_option,
    add_features_option,
    add_n_option,
    add_seed_option,
    add_size_option,
    names,
    number,
    number_list,
    positive_int,
)
from geoviz.vocabulary import (
    AUTO,
    BOOTSTRAP_METHODS,
    DEFAULT_MAP_METHOD,
    ENCODER_PRESET_NAMES,
    LABEL_METHODS,
    MAP_METHODS,
    NEURAL_PRESET_NAMES,
    SPLITS,
)

__all__ = [
    "EMBEDDINGS_SUFFIXES",
    "EmbeddingsFile",
    "add_bootstrap_args",
    "add_common_args",
    "add_feature_args",
    "add_grid_args",
    "add_project_args",
    "embeddings_file",
]


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """The options of ``distance``, ``project`` and ``grid``: the problem (datasets,
    samples, size), the OTDD and its maps, the feature space and the bootstrap."""
    parser.add_argument("--target", required=True, help="target dataset Q (registry name or path)")
    parser.add_argument(
        "--refs",
        required=True,
        type=names,
        help="comma-separated reference datasets P_1,...,P_m (m >= 2)",
    )
    parser.add_argument("--split", choices=SPLITS, default="train", help="split of every dataset")
    add_n_option(
        parser,
        default=1000,
        help=(
            f"stratified samples per dataset (default 1000, {limits.MIN_SAMPLES} to "
            f"{limits.MAX_SAMPLES:,})"
        ),
    )
    add_seed_option(parser, help="seed of the subsamples")
    add_size_option(
        parser,
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
    parser.add_argument("--label-method", choices=LABEL_METHODS, default=None)
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
        choices=MAP_METHODS,
        default=DEFAULT_MAP_METHOD,
        help=(
            "how the OTDD maps T_i are computed: barycentric projection of the entropic plan "
            "(default) or the neural map of the paper's max-min problem (trained, out-of-sample)"
        ),
    )
    parser.add_argument(
        "--neural-preset",
        choices=NEURAL_PRESET_NAMES,
        default=None,  # DEFAULT_NEURAL_PRESET: None tells a given option apart
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
        choices=BOOTSTRAP_METHODS,
        default=None,  # DEFAULT_BOOTSTRAP_METHOD
        help="q-resample (default) or refit: Q and every reference drawn again and the maps "
        "refitted, each replicate one task (about one fit each)",
    )
    add_backend_args(
        parser,
        "each bootstrap refit and each OTDD batch (--batch-size; batches: sequential unless --backend or --ray-address is given)",
    )


class EmbeddingsFile(NamedTuple):
    """``--features-embeddings FILE[:COLUMN]``, parsed (:func:`embeddings_file`)."""

    path: Path
    column: str | None


#: suffixes of embeddings files (those of geoviz.features.embeddings.EMBEDDINGS_FORMATS,
#: repeated here so that parsing imports no torch; a test compares them)
EMBEDDINGS_SUFFIXES = (".npz", ".parquet", ".pq")


def embeddings_file(text: str) -> EmbeddingsFile:
    """``FILE[:COLUMN]``: the text after the last ``:`` is a column when what precedes it
    ends in an embeddings suffix (:data:`EMBEDDINGS_SUFFIXES`)."""
    head, sep, tail = str(text).rpartition(":")
    if sep and tail and Path(head).suffix.lower() in EMBEDDINGS_SUFFIXES:
        return EmbeddingsFile(Path(head), tail)
    return EmbeddingsFile(Path(text), None)


def add_feature_args(parser: argparse.ArgumentParser) -> None:
    """``--features``, ``--features-model`` or ``--features-embeddings`` (one dest,
    ``features_model``: a :class:`~pathlib.Path` or an :class:`EmbeddingsFile`),
    ``--features-arch``, ``--features-size``, ``--encoder-preset``."""
    add_features_option(
        parser,
        default=AUTO,
        help=(
            "the space the OTDD costs live in (paper Sec. 5.3): auto (default: the candidate "
            "that measures the most class structure on your data, printed with its numbers), "
            "pixels, pca (50 components of the union), box (grey digits box-normalised like "
            "MNIST), encoder (the shipped glyph CNN, or one trained here with --encoder-preset "
            "cpu), natural (an ImageNet network, EfficientNet-Lite0, for photos and textures): "
            "P_a's images come back through the couplings"
        ),
    )
    own = parser.add_mutually_exclusive_group()
    own.add_argument(
        "--features-model",
        type=Path,
        default=None,
        metavar="FILE",
        help="your own vision model (instead of --features): a TorchScript file mapping "
        "(N, C, H, W) images in [0, 1] to (N, d) features, or a state dict (torch.save) of "
        "the architecture --features-arch names; the kind is told from the file",
    )
    own.add_argument(
        "--features-embeddings",
        dest="features_model",  # the space of your own: one of the two
        type=embeddings_file,
        default=None,
        metavar="FILE[:COLUMN]",
        help="precomputed embeddings as the space (instead of --features): an .npz with one "
        "(N, d) array per dataset name and its row keys '<name>.keys', or one array COLUMN of "
        "every row, or a .parquet list column (default 'embedding'), each with 'dataset' "
        "and/or 'key' arrays or columns; rows are matched by the key of each sample's "
        "features as loaded (subsampled, resized: geoviz.features.embeddings.save_embeddings "
        "writes them), rows without keys by position (one per sample)",
    )
    parser.add_argument(
        "--features-arch",
        default=None,
        metavar="FAMILY:NAME",
        help="with a state dict as --features-model: its architecture, torchvision:NAME "
        "(e.g. torchvision:resnet18; needs torchvision) or timm:NAME (needs timm); the "
        "classifier is removed and the input normalised as its pretrained weights expect",
    )
    parser.add_argument(
        "--features-size",
        type=positive_int,
        default=None,
        help="with --features-model: the side images are resized to first (224 for most "
        "ImageNet models)",
    )
    parser.add_argument(
        "--encoder-preset",
        choices=ENCODER_PRESET_NAMES,
        default=None,  # DEFAULT_ENCODER_PRESET
        help="weights of --features encoder: pretrained (default, shipped in assets/encoders; "
        "nothing trained) or a budget to train one here on your datasets (cpu: minutes, "
        "cached; tiny: seconds, for tests)",
    )


def add_project_args(parser: argparse.ArgumentParser) -> None:
    """``project``'s export of ``P_a``: ``--out``, ``--format``, ``--overwrite``,
    ``--weights``, ``--n-out``."""
    parser.add_argument(
        "--out",
        default=None,
        help="export P_a here (.npz, .pt, .parquet, .zip or a folder)",
    )
    parser.add_argument(  # every registered export format, read when asked
        "--format", choices=ExportFormatChoices(), default=None
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing export")
    parser.add_argument(
        "--weights",
        type=number_list,
        default=None,
        help="export P_a at these weights instead of a_hat",
    )
    parser.add_argument(
        "--n-out", type=positive_int, default=None, help="samples to export (default all)"
    )


def add_grid_args(parser: argparse.ArgumentParser) -> None:
    """``grid``'s simplex grid and its CSV file: ``--resolution``, ``--out``, ``--overwrite``."""
    parser.add_argument(
        "--resolution",
        type=positive_int,
        default=20,
        help=(
            f"grid step 1/resolution (at most {limits.MAX_GRID_RESOLUTION}, and at most "
            f"{limits.MAX_GRID_POINTS:,} grid points for the m references)"
        ),
    )
    parser.add_argument("--out", required=True, help="CSV file (columns a_<ref>..., objective)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing CSV")
