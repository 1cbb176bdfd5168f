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
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence

from geoviz import limits
from geoviz.cli.args import cli_int, cli_path, names, positive_int
from geoviz.errors import GeovizError
from geoviz.vocabulary import AUTO, BUILTIN_SPACES, SPLITS

__all__ = ["MAX_CANDIDATES", "register", "related_to_target"]

#: most candidate references one screen takes
MAX_CANDIDATES = 64


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
    parser.add_argument(
        "--n", type=positive_int, default=2000, help="stratified samples per dataset (default 2000)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the subsamples and slices")
    parser.add_argument(
        "--size", type=positive_int, default=None, help="common image size (default: the target's)"
    )
    parser.add_argument(
        "--features",
        choices=BUILTIN_SPACES,
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


def related_to_target(target: str, candidates: Sequence[str]) -> dict[str, str]:
    """The candidates of the target's lineage (made from the same source dataset,
    :func:`geoviz.data.registry.lineage`), each with that source's name; paths and names the
    registry does not know are related to nothing."""
    from geoviz.data.registry import lineage  # the registry imports torch: not at --help

    source = lineage(target)
    if source is None:
        return {}
    return {name: source for name in candidates if lineage(name) == source}


def _cmd_screen(args: argparse.Namespace) -> int:
    from geoviz.backend import get_cache
    from geoviz.data.choice import DatasetChoice
    from geoviz.geodesic.config import GeodesicConfig, space_of
    from geoviz.geodesic.spec import GeodesicSpec, load_spec_datasets
    from geoviz.ot.sliced import screen_references

    refs = list(args.refs)
    if not 2 <= len(refs) <= MAX_CANDIDATES:
        raise GeovizError(f"--refs takes 2 to {MAX_CANDIDATES} candidates, got {len(refs)}")
    if len(set(refs)) != len(refs):
        raise GeovizError("--refs names a candidate twice")
    cli_int(args.n, "--n", limits.MIN_SAMPLES, limits.MAX_SAMPLES, why="samples per dataset")
    cli_int(args.projections, "--projections", 1, 4096)
    for name in (args.target, *refs):
        cli_path(name, "--target/--refs")
    start = time.perf_counter()
    config = GeodesicConfig(features=args.features)
    datasets = []
    # a geodesic spec holds at most MAX_REFERENCES references: load the candidates in groups
    step = limits.MAX_REFERENCES
    for first in range(0, len(refs), step):
        group = refs[first : first + step]
        spec = GeodesicSpec(
            target=DatasetChoice.named(args.target, args.split),
            references=tuple(DatasetChoice.named(name, args.split) for name in group),
            n_target=args.n,
            n_reference=args.n,
            seed=args.seed,
            image_size=args.size,
            config=config,
        )
        loaded = load_spec_datasets(spec, distinct_names=True)
        target = loaded.target
        datasets += list(loaded.references)
    # the table and the suggested command name each candidate as the user typed it
    datasets = [
        dataclasses.replace(ds, name=typed) for ds, typed in zip(datasets, refs, strict=True)
    ]
    space, choice = space_of(config, get_cache(), [target, *datasets])
    fitted = space.fit([target, *datasets]) if space.name != "pixels" else None
    if fitted is not None:
        target = fitted.transform(target)
        datasets = [fitted.transform(ds) for ds in datasets]
    loading = time.perf_counter() - start
    rows, seconds = screen_references(
        target, datasets, n_projections=args.projections, seed=args.seed
    )
    reason = f" ({choice.reason})" if choice is not None else ""
    print(f"target: {target.name} ({target.n_samples} samples); space: {space.name}{reason}")
    related = related_to_target(args.target, refs)
    width = max(len(row.name) for row in rows)
    print(f"\n{'rank':>4}  {'reference':<{width}}  {'sliced OTDD':<11}  note")
    for row in rows:
        note = f"same source as the target ({related[row.name]})" if row.name in related else ""
        print(f"{row.rank:>4}  {row.name:<{width}}  {row.sliced_otdd:<11.6g}  {note}".rstrip())
    print(
        f"\nscreened {len(rows)} candidates in {seconds:.2f} s ({args.projections} slices; "
        f"loading and the space took {loading:.1f} s). The sliced OTDD ranks; it is not the "
        "OTDD's scale and has no maps."
    )
    _print_next(args, [row.name for row in rows], related)
    return 0


def _print_next(args: argparse.Namespace, ranked: list[str], related: dict[str, str]) -> None:
    """The ``geoviz project`` command on the ``--top`` nearest candidates, those of the
    target's lineage left out (and said so) unless ``--include-related``."""
    pool = ranked
    if related:
        names = ", ".join(name for name in ranked if name in related)
        source = next(iter(related.values()))
        if args.include_related:
            print(
                f"{names}: made from {source}, as the target is; proposed as --include-related asks."
            )
        else:
            pool = [name for name in ranked if name not in related]
            print(
                f"{names}: made from {source}, as the target is, so near because they share its "
                "samples, not because they would transfer: not proposed (--include-related "
                "proposes them)."
            )
    if len(pool) < 2:
        print("next: no command, fewer than 2 candidates of another source than the target.")
        return
    top = pool[: max(2, min(args.top, limits.MAX_REFERENCES))]
    print(f"next: geoviz project --target {args.target} --refs {','.join(top)} --n {args.n}")
