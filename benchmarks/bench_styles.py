"""Leave a style family out: does the shipped encoder keep the class on styles it never saw?

The styles of :mod:`geoviz.data.styles` are grouped into families that are not variations of
one another (:data:`geoviz.data.styles.FAMILIES`: plain colour fields, smooth colour fields
and colour maps, photo backgrounds, patterns, relief, distortions). For each family ``F``
(issue 42; ``--holdout style`` holds out one style at a time instead, as issue 33 did):

1. an encoder is trained exactly as the shipped one (``scripts/train_encoder.py``: bundled
   training samples of USPS, Fashion-MNIST and KMNIST with their labels, the shipped config
   :data:`geoviz.features.pretrained.GLYPH_CONFIG`) but drawing the grey training images in
   every style **except** those of ``F``; the config is fixed before any result is seen and is
   the same for every held-out family;
2. for every style ``s`` of ``F``, the target Q is ``--n`` MNIST *test* digits from the full
   copy in ``../shared/data/nist`` (``GEOVIZ_NIST_DIR``; stratified, seed 0; no MNIST image or
   label trained any encoder) drawn in style ``s`` with a seed no training run used, 32x32 RGB;
3. the references are the bundled training samples of MNIST, Fashion-MNIST and USPS
   (2000 each, grey, as the app's colour preset has them); the OTDD maps (barycentric,
   default epsilon, Q's labels in the cost as the OTDD defines it) and ``a_hat`` are fitted
   in the spaces of ``--spaces``:

   * ``pixels``: the yardstick;
   * ``heldout``: the encoder of step 1 (the family of ``s`` never seen);
   * ``v1``: the six-style encoder shipped since issue 33 (gradient, photo, texture, outline,
     stroke, noise), from ``<out>/encoders/glyphs-v1.npz`` (a copy of
     ``assets/encoders/glyphs.npz``, sha256 ``2a7cba91...``); on the six styles it saw,
     *not* a held-out result, on the seven others it is;
   * ``shipped``: ``assets/encoders/glyphs.npz`` as it is when the run is made (the table
     marks it "seen": it may have been trained on the style).

*Agreement* of a digit reference's map: the share of Q whose mapped soft label's largest
entry is Q's true digit. Balanced OT must move about 9 % of USPS's mass across classes
(its training split is imbalanced: 16 % zeros, 7.4 % eights; Q is not), which caps its
agreement near 0.91; the ``usps (balanced)`` column maps to a class-balanced USPS subsample
(148 per class) to show the space's part without that cap.

Rows are merged into ``<out>/<--results>`` under a file lock, so several processes may run
disjoint ``--units`` at once. Encoders are kept in ``<out>/encoders`` and reused.

``--units a+b`` holds families ``a`` and ``b`` out of one training together: stricter (the
encoder sees fewer styles) and cheaper. The issue-42 run held out three such groups, each
in its own process (on 2 cores at load 7-12: 44-53 min of wall time to train each, 5-8 min
per style to evaluate)::

    OMP_NUM_THREADS=1 python benchmarks/bench_styles.py --threads 1 --units plain+photo
    OMP_NUM_THREADS=1 python benchmarks/bench_styles.py --threads 1 --units field+relief+distortion
    OMP_NUM_THREADS=1 python benchmarks/bench_styles.py --threads 1 --units pattern
    python benchmarks/bench_styles.py --spaces shipped   # after retraining the shipped one
    python benchmarks/bench_styles.py --table            # the markdown table of every row
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
NIST = Path(os.environ.get("GEOVIZ_NIST_DIR", ROOT.parent / "shared" / "data" / "nist"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_features import agreement, nist  # noqa: E402


def balanced(ds, per_class: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    keep = []
    for c in range(len(ds.classes)):
        idx = torch.nonzero(ds.labels == c).flatten()
        keep.append(idx[torch.randperm(len(idx), generator=gen)[:per_class]])
    ds2 = ds.subset(torch.sort(torch.cat(keep)).values)
    return dataclasses.replace(ds2, name="usps_balanced") if dataclasses.is_dataclass(ds2) else ds2


def save_row(path: Path, style: str, row: dict[str, object]) -> dict[str, object]:
    """Merge ``row`` into ``path``'s entry for ``style`` under an exclusive lock."""
    import fcntl

    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = json.loads(path.read_text()) if path.exists() else {}
        merged = {**done.get(style, {}), **row}
        done[style] = merged
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(done, indent=1))
        tmp.replace(path)
    return merged


def encoder_for(unit: str, styles: tuple[str, ...], folder: Path):
    """The encoder trained without ``styles`` (trained now unless kept in ``folder``)."""
    from geoviz.data.styles import STYLES
    from geoviz.features.pretrained import GLYPH_CONFIG, save_encoder, train_glyph_encoder

    # the shipped settings on every style of the module but the held-out ones
    config = dataclasses.replace(GLYPH_CONFIG, styles=tuple(s for s in STYLES if s not in styles))
    name = f"glyphs{len(STYLES)}-without-{unit}"
    npz = folder / f"{name}.npz"
    if npz.exists():
        arrays = np.load(npz)
        state = {key: torch.from_numpy(arrays[key]) for key in arrays.files}
        facts = json.loads(npz.with_suffix(".json").read_text())
        return name, state, config, facts, False
    state, facts = train_glyph_encoder(config)
    save_encoder(state, config, name, folder=folder, extra=facts)
    return name, state, config, facts, True


def load_v1(folder: Path):
    from geoviz.features.encoder import EncoderConfig

    manifest = json.loads((folder / "glyphs-v1.json").read_text())
    raw = dict(manifest["config"])
    raw["styles"] = tuple(raw["styles"])
    arrays = np.load(folder / "glyphs-v1.npz")
    return {key: torch.from_numpy(arrays[key]) for key in arrays.files}, EncoderConfig(**raw)


def target(digits, style: str):
    """Q: the grey digits drawn in ``style`` (seed 900000 + the style's index), 32x32 RGB."""
    from geoviz.data.preprocess import harmonize
    from geoviz.data.styles import STYLES, render

    ink = harmonize([digits], size=32, channels="grey")[0]
    # one seed per style, whichever styles this run does; no training run uses these
    gen = torch.Generator().manual_seed(900_000 + STYLES.index(style))
    rgb = render(ink.features.reshape(-1, 1, 32, 32), style, gen)
    q = ink.with_features(rgb.reshape(len(rgb), -1), image_shape=(3, 32, 32))
    return dataclasses.replace(q, name=f"mnist_{style}") if dataclasses.is_dataclass(q) else q


def measure(space: str, fitted, q, refs, usps_bal, cache) -> dict[str, object]:
    from geoviz.geodesic.pipeline import GeodesicConfig, fit_geodesic

    t0 = time.perf_counter()
    if fitted is not None:
        q_f, *refs_f = (fitted.transform(ds) for ds in (q, *refs))
        bal_f = fitted.transform(usps_bal)
    else:
        q_f, refs_f, bal_f = q, refs, usps_bal
    # named, never "auto": on colour pixels the default would pick the shipped encoder
    named = GeodesicConfig(features="pixels")
    result = fit_geodesic(q_f, refs_f, named, cache=cache)
    bal = fit_geodesic(q_f, [refs_f[0], bal_f], named, cache=cache)
    return {
        "agreement_mnist": agreement(result, 0, q),
        "agreement_usps": agreement(result, 2, q),
        "agreement_usps_balanced": agreement(bal, 1, q),
        "a_hat": [round(float(v), 3) for v in result.a_hat],
        "effective_neighbours": [round(float(v), 2) for v in result.effective_neighbours],
        "seconds": round(time.perf_counter() - t0, 1),
    }


def table(done: dict[str, dict], spaces: tuple[str, ...]) -> None:
    from geoviz.data.styles import STYLES

    print("| held-out | style | space | agreement mnist | agreement usps | usps (balanced) "
          "| a_hat (m/f/u) |")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---|")
    for style in STYLES:
        row = done.get(style)
        if not row:
            continue
        for space in spaces:
            r = row.get(space)
            if not r:
                continue
            # v1 trained on the first six styles, the shipped one on all: not held out there
            seen = space == "shipped" or (space == "v1" and style in STYLES[:6])
            label = f"{space} (seen)" if seen else space
            print(
                f"| {row.get('held_out', '')} | {style} | {label} | {r['agreement_mnist']:.3f} | "
                f"{r['agreement_usps']:.3f} | {r['agreement_usps_balanced']:.3f} | "
                + " / ".join(f"{v:.2f}" for v in r["a_hat"])
                + " |"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "styles")
    parser.add_argument("--results", default="bench_styles_families.json")
    parser.add_argument("--holdout", choices=["family", "style"], default="family")
    parser.add_argument("--units", default=None, help="held-out families or styles (default all)")
    parser.add_argument("--spaces", default="pixels,heldout,v1")
    parser.add_argument("--n", type=int, default=1000, help="samples of Q")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--table", action="store_true", help="print the table of every row")
    args = parser.parse_args()

    from geoviz.backend import DiskCache, configure_torch
    from geoviz.data.preprocess import harmonize
    from geoviz.data.registry import load_dataset
    from geoviz.data.styles import FAMILIES, STYLES, family_of
    from geoviz.features.pretrained import PretrainedEncoderSpace, fitted_encoder

    configure_torch(threads=args.threads)
    results_path = args.out / args.results
    spaces = tuple(args.spaces.split(","))
    if args.table:
        table(json.loads(results_path.read_text()), ("pixels", "heldout", "v1", "shipped"))
        return 0
    groups = dict(FAMILIES) if args.holdout == "family" else {s: (s,) for s in STYLES}
    units = tuple(args.units.split(",")) if args.units else tuple(groups)
    # "a+b": families a and b held out together (a stricter test, one training for both)
    groups.update({u: sum((groups[f] for f in u.split("+")), ()) for u in units if "+" in u})
    args.out.mkdir(parents=True, exist_ok=True)
    cache = DiskCache(enabled=False)
    refs_grey = [load_dataset(n) for n in ("mnist", "fashion_mnist", "usps")]
    digits = nist("mnist", "test", args.n, 0)

    for unit in units:
        held = groups[unit]
        done = json.loads(results_path.read_text()) if results_path.exists() else {}
        todo = [s for s in held if any(sp not in done.get(s, {}) for sp in spaces)]
        if not todo:
            print(f"{unit}: done before, skipped", flush=True)
            continue
        trained = None
        start = time.perf_counter()
        if "heldout" in spaces:
            trained = encoder_for(unit, held, args.out / "encoders")
        train_s = time.perf_counter() - start
        for style in todo:
            q, *refs = harmonize([target(digits, style), *refs_grey], size=32, channels="rgb")
            usps_bal = balanced(refs[2], per_class=148)
            row: dict[str, object] = {
                "style": style,
                "family": family_of(style),
                "held_out": unit if args.holdout == "family" else style,
            }
            if trained is not None:
                row["train_seconds"] = trained[3].get("train_seconds")
                row["trained_in_this_run"] = trained[4]
                row["training_wall_seconds"] = round(train_s, 1)
            for space in spaces:
                if space in done.get(style, {}):
                    continue
                fitted = None
                if space == "heldout" and trained is not None:
                    name, state, config = trained[0], trained[1], trained[2]
                    fitted = fitted_encoder(
                        state, config, (3, 32, 32), digest=name, info={}, device="cpu"
                    )
                elif space == "v1":
                    state, config = load_v1(args.out / "encoders")
                    fitted = fitted_encoder(
                        state, config, (3, 32, 32), digest="glyphs-v1", info={}, device="cpu"
                    )
                elif space == "shipped":
                    fitted = PretrainedEncoderSpace(device="cpu").fit([q, *refs])
                row[space] = measure(space, fitted, q, refs, usps_bal, cache)
            merged = save_row(results_path, style, row)
            print(json.dumps(merged), flush=True)

    print()
    print(f"Q: {args.n} MNIST test digits per style, 32x32 RGB; references: bundled "
          "MNIST, Fashion-MNIST, USPS training samples (2000 each); a_hat order m/f/u")  # fmt: skip
    table(json.loads(results_path.read_text()), ("pixels", "heldout", "v1", "shipped"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
