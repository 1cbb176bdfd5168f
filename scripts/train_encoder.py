"""Train the encoder that ships in ``assets/encoders/`` (issues 33 and 42).

The encoder learns from the bundled training samples of USPS, Fashion-MNIST and KMNIST with
their labels (never MNIST: every bundled colour target is made of MNIST digits), drawn in
the styles of ``GLYPH_CONFIG`` (the six of issue 33; ``--all-styles``: the 13 of
:mod:`geoviz.data.styles`, in six families). It writes ``<name>.npz``
(float32 weights, no pickle) and ``<name>.json`` (config, data, sha256, this command) and
prints the digest.

Run from the repository root::

    python scripts/train_encoder.py                      # assets/encoders/glyphs.{npz,json}
    python scripts/train_encoder.py --exclude-style photo --name glyphs-no-photo --out /tmp/enc
    python scripts/train_encoder.py --exclude-family photo --name glyphs-no-photos --out /tmp/enc
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
import time
from pathlib import Path

import torch

from geoviz.backend import configure_torch
from geoviz.data.styles import FAMILIES, STYLES
from geoviz.features.pretrained import (
    DEFAULT_ENCODER,
    GLYPH_CONFIG,
    GLYPH_TRAINING_SETS,
    save_encoder,
    train_glyph_encoder,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--name", default=DEFAULT_ENCODER)
    parser.add_argument("--out", type=Path, default=None, help="folder (default assets/encoders)")
    parser.add_argument("--sets", default=",".join(GLYPH_TRAINING_SETS))
    parser.add_argument("--exclude-style", action="append", default=[], choices=STYLES)
    parser.add_argument("--exclude-family", action="append", default=[], choices=FAMILIES)
    parser.add_argument("--all-styles", action="store_true", help="all 13 styles, not six")
    parser.add_argument("--epochs", type=int, default=GLYPH_CONFIG.epochs)
    parser.add_argument("--seed", type=int, default=GLYPH_CONFIG.seed)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    configure_torch(threads=args.threads)
    excluded = set(args.exclude_style).union(*(FAMILIES[f] for f in args.exclude_family))
    pool = STYLES if args.all_styles else GLYPH_CONFIG.styles
    styles = tuple(s for s in pool if s not in excluded)
    config = dataclasses.replace(GLYPH_CONFIG, styles=styles, epochs=args.epochs, seed=args.seed)
    sets = tuple(s for s in args.sets.split(",") if s)
    last = [0.0]

    def progress(stage: str, fraction: float) -> None:
        if time.monotonic() - last[0] > 10 or fraction >= 1:
            last[0] = time.monotonic()
            print(f"  {stage}: {fraction:.0%}", flush=True)

    state, facts = train_glyph_encoder(config, sets, progress=progress)
    command = "python scripts/train_encoder.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    path = save_encoder(
        state,
        config,
        args.name,
        folder=args.out,
        extra={
            **facts,
            "command": command.strip(),
            "torch": torch.__version__,
            "machine": f"{platform.machine()}, {args.threads} threads",
        },
    )
    print(f"wrote {path} ({path.stat().st_size:,} bytes) in {facts['train_seconds']} s")
    print(path.with_suffix(".json").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
