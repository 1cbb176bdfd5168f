"""``geoviz datasets | show``: the dataset commands of the CLI.

* ``geoviz datasets [--offline]`` — table of the registered datasets.
* ``geoviz show NAME [--split train|test] [--n N] [--seed S] [--grid out.png
  [--overwrite]] [--per-class K] [--zoom Z]`` — summary of a dataset (sizes, class
  counts, fingerprint) and, with ``--grid``, a PNG of samples, one row per class,
  written atomically and never over an existing file without ``--overwrite``.

Every option is checked right after parsing, before the dataset is loaded, against
:mod:`geoviz.limits` (:mod:`geoviz.cli.args`). :func:`register` is called by
:func:`geoviz.cli.build_parser`.
"""

from __future__ import annotations

import argparse
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from geoviz import limits
from geoviz.cli.args import (
    add_n_option,
    add_seed_option,
    cli_int,
    cli_path,
    cli_seed,
    positive_int,
)
from geoviz.cli.output import format_table, refuse_existing, write_file
from geoviz.errors import DatasetError, GeovizError
from geoviz.memory import check_bytes
from geoviz.vocabulary import SPLITS

if TYPE_CHECKING:  # the parser imports no torch: datasets are loaded when a command runs
    from PIL import Image

    from geoviz.data.dataset import LabeledDataset

__all__ = ["GRID_BACKGROUND", "GRID_PAD", "register", "render_grid"]

GRID_PAD = 2
GRID_BACKGROUND = 128


# --------------------------------------------------------------------------- helpers


def _shape_text(image_shape: Sequence[int] | None, n_features: int | None) -> str:
    if image_shape:
        return "x".join(str(s) for s in image_shape)
    return f"vector({n_features})" if n_features else "vector"


def render_grid(
    ds: LabeledDataset, per_class: int = 8, *, seed: int = 0, zoom: int = 1, pad: int = GRID_PAD
) -> Image.Image:
    """A PIL image of samples: one row per class, ``per_class`` columns.

    Row ``c`` shows up to ``per_class`` randomly chosen (``seed``) samples of
    class ``c``, in class order; missing samples leave the background. Size:
    ``width = per_class * W * zoom + (per_class + 1) * pad``,
    ``height = C * H * zoom + (C + 1) * pad``.

    Raises
    ------
    DatasetError
        The dataset holds vectors, or images with other than 1 or 3 channels.
    ResourceError
        The image would not fit in this process's memory (checked before drawing).
    """
    from PIL import Image

    if ds.image_shape is None:
        raise DatasetError(
            f"--grid needs an image dataset; {ds.name!r} holds {ds.n_features}-D vectors",
            ds.source or ds.name,
        )
    channels, h, w = ds.image_shape
    if channels not in (1, 3):
        raise DatasetError(
            f"cannot draw images with {channels} channels (need 1 or 3)", ds.source or ds.name
        )
    if per_class < 1 or zoom < 1 or pad < 0:
        raise GeovizError(
            f"per_class and zoom must be >= 1 and pad >= 0, got {per_class}, {zoom}, {pad}"
        )
    cell_h, cell_w = h * zoom, w * zoom
    height = ds.n_classes * cell_h + (ds.n_classes + 1) * pad
    width = per_class * cell_w + (per_class + 1) * pad
    # the canvas, PIL's copy and the PNG encoder's buffers
    check_bytes(3 * height * width * channels, f"a {width}x{height} sample grid")
    canvas = np.full((height, width, channels), GRID_BACKGROUND, dtype=np.uint8)
    images = ds.images().numpy()  # (N, C, H, W) in [0, 1]
    labels = ds.labels.numpy()
    rng = np.random.default_rng(seed)
    for c in range(ds.n_classes):
        members = np.flatnonzero(labels == c)
        if members.size > per_class:
            members = np.sort(rng.choice(members, size=per_class, replace=False))
        top = pad + c * (cell_h + pad)
        for j, idx in enumerate(members):
            tile = np.clip(images[idx].transpose(1, 2, 0), 0.0, 1.0)
            tile = np.round(tile * 255).astype(np.uint8)
            tile = np.repeat(np.repeat(tile, zoom, axis=0), zoom, axis=1)
            left = pad + j * (cell_w + pad)
            canvas[top : top + cell_h, left : left + cell_w] = tile
    if channels == 1:
        return Image.fromarray(canvas[:, :, 0], mode="L")
    return Image.fromarray(canvas, mode="RGB")


# --------------------------------------------------------------------------- commands


def _cmd_datasets(args: argparse.Namespace) -> int:
    from geoviz.data.registry import list_datasets, missing_reason, unavailable_reason

    infos = list_datasets(include_download=not args.offline)
    # entries that cannot load here (a torchvision download without torchvision, a bundled
    # sample missing from this install) are marked, and each reason is said once under the
    # table, with the entries it concerns
    reasons = {info.name: unavailable_reason(info.name) for info in infos}
    missing = {info.name: missing_reason(info.name) for info in infos}

    def availability(name: str, offline: bool) -> str:
        if missing[name] is not None:
            return "missing"
        if reasons[name] is not None:
            return "unavailable"
        return "offline" if offline else "download"

    rows = [
        [
            info.name,
            info.kind,
            str(info.n_train),
            str(info.n_test),
            str(info.n_classes),
            _shape_text(info.image_shape, info.n_features),
            availability(info.name, info.offline),
        ]
        for info in infos
    ]
    header = ["name", "kind", "train", "test", "classes", "shape", "availability"]
    print(format_table(header, rows, right={2, 3, 4}))
    for reason in dict.fromkeys(r for r in reasons.values() if r is not None):
        print(f"unavailable: {reason}.")
    by_file: dict[str, list[str]] = {}
    for name, lack in missing.items():
        if lack is not None:
            by_file.setdefault(lack, []).append(name)
    for lack, names in by_file.items():
        print(f"missing ({', '.join(names)}): {lack}.")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from geoviz.data.registry import load_dataset

    # every option before the dataset is read
    if args.n is not None:
        cli_int(args.n, "--n", limits.MIN_SAMPLES, limits.MAX_SAMPLES, why="samples to show")
    cli_seed(args.seed)
    cli_int(args.per_class, "--per-class", 1, limits.MAX_PREVIEW_PER_CLASS)
    cli_int(args.zoom, "--zoom", 1, limits.MAX_PREVIEW_ZOOM)
    cli_path(args.name, "NAME")
    if args.grid is not None:
        cli_path(args.grid, "--grid", output=True)
    elif args.overwrite:  # it would do nothing
        raise GeovizError("--overwrite only applies with --grid OUT.png")
    grid_path = None if args.grid is None else refuse_existing(args.grid, args.overwrite, "--grid")

    ds = load_dataset(args.name, split=args.split, n=args.n, seed=args.seed)
    # render first, so that an impossible grid fails before any output
    image = (
        None
        if args.grid is None
        else render_grid(ds, args.per_class, seed=args.seed, zoom=args.zoom)
    )
    info = ds.summary()
    print(f"name:        {info['name']}")
    print(f"source:      {info['source']}")
    print(f"split:       {args.split}")
    print(f"samples:     {info['n_samples']}")
    print(f"features:    {info['n_features']}")
    print(f"shape:       {_shape_text(info['image_shape'], info['n_features'])}")
    print(f"fingerprint: {info['fingerprint']}")
    print(f"classes:     {info['n_classes']}")
    rows = [
        [str(i), name, str(count)]
        for i, (name, count) in enumerate(zip(info["classes"], info["class_counts"], strict=True))
    ]
    table = format_table(["label", "class", "count"], rows, right={0, 2})
    print("\n".join("  " + line for line in table.splitlines()))
    if image is not None and grid_path is not None:
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        write_file(grid_path, buf.getvalue(), args.overwrite, "grid image")
        print(f"grid:        {grid_path} ({image.width}x{image.height} px, one row per class)")
    return 0


# --------------------------------------------------------------------------- registration


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``datasets`` and ``show`` to the ``geoviz`` CLI."""
    p_list = subparsers.add_parser("datasets", help="list the registered datasets")
    p_list.add_argument(
        "--offline", action="store_true", help="only datasets that need no download"
    )
    p_list.set_defaults(func=_cmd_datasets)

    p_show = subparsers.add_parser(
        "show", help="summarise a dataset (registry name or file/folder path) and draw samples"
    )
    p_show.add_argument(
        "name", help="registry name (see 'geoviz datasets') or path of a dataset file/folder"
    )
    p_show.add_argument("--split", choices=SPLITS, default="train")
    add_n_option(p_show, default=None, help="stratified subsample of N samples")
    add_seed_option(p_show, help="seed of the subsample and sample grid")
    p_show.add_argument(
        "--grid", metavar="OUT.png", default=None, help="save a PNG grid of samples"
    )
    p_show.add_argument("--overwrite", action="store_true", help="replace an existing --grid file")
    p_show.add_argument(
        "--per-class",
        type=positive_int,
        default=8,
        help=f"grid columns (samples per class, at most {limits.MAX_PREVIEW_PER_CLASS})",
    )
    p_show.add_argument(
        "--zoom",
        type=positive_int,
        default=1,
        help=f"integer pixel magnification of the grid (at most {limits.MAX_PREVIEW_ZOOM})",
    )
    p_show.set_defaults(func=_cmd_show)
