"""The work of ``geoviz screen`` (:mod:`geoviz.cli.screen`): load, place in the space, rank.

Imported by the command when it runs (it imports the library, torch included), never by
the parser.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence

from geoviz import limits
from geoviz.backend import get_cache
from geoviz.cli.args import MAX_CANDIDATES, cli_int, cli_path
from geoviz.data.choice import DatasetChoice
from geoviz.data.registry import lineage
from geoviz.errors import GeovizError
from geoviz.geodesic.config import GeodesicConfig, space_of
from geoviz.geodesic.spec import GeodesicSpec, load_spec_datasets
from geoviz.ot.sliced import screen_references

__all__ = ["related_to_target", "run_screen"]


def related_to_target(target: str, candidates: Sequence[str]) -> dict[str, str]:
    """The candidates of the target's lineage (made from the same source dataset,
    :func:`geoviz.data.registry.lineage`), each with that source's name; paths and names the
    registry does not know are related to nothing."""
    source = lineage(target)
    if source is None:
        return {}
    return {name: source for name in candidates if lineage(name) == source}


def run_screen(args: argparse.Namespace) -> int:
    """Check the options, load the target and the candidates, rank them, print the table
    and the suggested command; returns the exit status."""
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
