"""Leave one style out: does the shipped encoder keep the class on colour styles it never saw?

For each style ``s`` of :data:`geoviz.data.styles.STYLES` (issue 33):

1. an encoder is trained exactly as the shipped one (``scripts/train_encoder.py``: bundled
   training samples of USPS, Fashion-MNIST and KMNIST with their labels, the shipped config
   :data:`geoviz.features.pretrained.GLYPH_CONFIG`) but drawing the grey training images in
   every style **except** ``s``; the config is fixed before any result is seen and is the
   same for every held-out style;
2. the target Q is ``--n`` MNIST *test* digits from the full copy in ``../shared/data/nist``
   (``GEOVIZ_NIST_DIR``; stratified, seed 0; no MNIST image or label trained any encoder)
   drawn in style ``s`` with a seed no training run used, 32x32 RGB;
3. the references are the bundled training samples of MNIST, Fashion-MNIST and USPS
   (2000 each, grey, as the app's colour preset has them); the OTDD maps (barycentric,
   default epsilon, Q's labels in the cost as the OTDD defines it) and ``a_hat`` are fitted
   in that encoder's space (``encoder``: the style held out) and, as yardsticks, in pixel
   space (``pixels``) and in the shipped encoder's space (``shipped``: trained on every style,
   the held-out one included, so *not* a held-out result).

*Agreement* of a digit reference's map: the share of Q whose mapped soft label's largest
entry is Q's true digit. Balanced OT must move about 9 % of USPS's mass across classes
(its training split is imbalanced: 16 % zeros, 7.4 % eights; Q is not), which caps its
agreement near 0.91; the ``usps (balanced)`` column maps to a class-balanced USPS subsample
(148 per class) to show the space's part without that cap.

Run (about 6 min per style on 2 cores; encoders are kept in ``--out`` and reused)::

    python benchmarks/bench_styles.py --out benchmarks/results/styles
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "styles")
    parser.add_argument("--styles", default=None, help="held-out styles (default: all)")
    parser.add_argument("--n", type=int, default=1000, help="samples of Q")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from geoviz.backend import DiskCache, configure_torch
    from geoviz.data.preprocess import harmonize
    from geoviz.data.registry import load_dataset
    from geoviz.data.styles import STYLES, render
    from geoviz.features.pretrained import (
        GLYPH_CONFIG,
        PretrainedEncoderSpace,
        fitted_encoder,
        save_encoder,
        train_glyph_encoder,
    )
    from geoviz.geodesic.pipeline import GeodesicConfig, fit_geodesic

    configure_torch(threads=args.threads)
    styles = tuple(args.styles.split(",")) if args.styles else STYLES
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "bench_styles.json"
    done = json.loads(results_path.read_text()) if results_path.exists() else {}
    cache = DiskCache(enabled=False)

    refs_grey = [load_dataset(n) for n in ("mnist", "fashion_mnist", "usps")]
    digits = nist("mnist", "test", args.n, 0)

    for style in styles:
        if style in done:
            print(f"{style}: done before, skipped", flush=True)
            continue
        config = dataclasses.replace(GLYPH_CONFIG, styles=tuple(s for s in STYLES if s != style))
        name = f"glyphs-without-{style}"
        npz = args.out / "encoders" / f"{name}.npz"
        start = time.perf_counter()
        if npz.exists():
            arrays = np.load(npz)
            state = {key: torch.from_numpy(arrays[key]) for key in arrays.files}
            facts = json.loads(npz.with_suffix(".json").read_text())
        else:
            state, facts = train_glyph_encoder(config)
            save_encoder(state, config, name, folder=npz.parent, extra=facts)
        train_s = time.perf_counter() - start

        ink = harmonize([digits], size=32, channels="grey")[0]
        # one seed per style, whichever styles this run does; no training run uses these
        gen = torch.Generator().manual_seed(900_000 + STYLES.index(style))
        rgb = render(ink.features.reshape(-1, 1, 32, 32), style, gen)
        q = ink.with_features(rgb.reshape(len(rgb), -1), image_shape=(3, 32, 32))
        q = dataclasses.replace(q, name=f"mnist_{style}") if dataclasses.is_dataclass(q) else q
        q, *refs = harmonize([q, *refs_grey], size=32, channels="rgb")
        usps_bal = balanced(refs[2], per_class=148)

        row: dict[str, object] = {"style": style, "train_seconds": facts.get("train_seconds")}
        for space in ("pixels", "encoder", "shipped"):
            t0 = time.perf_counter()
            if space != "pixels":
                fitted = (
                    fitted_encoder(state, config, (3, 32, 32), digest=name, info={}, device="cpu")
                    if space == "encoder"
                    else PretrainedEncoderSpace(device="cpu").fit([q, *refs])
                )
                q_f, *refs_f = (fitted.transform(ds) for ds in (q, *refs))
                bal_f = fitted.transform(usps_bal)
            else:
                q_f, refs_f, bal_f = q, refs, usps_bal
            # named, never "auto": on colour pixels the default would pick the shipped
            # encoder, which was trained on every style, the held-out one included
            named = GeodesicConfig(features="pixels")
            result = fit_geodesic(q_f, refs_f, named, cache=cache)
            bal = fit_geodesic(q_f, [refs_f[0], bal_f], named, cache=cache)
            row[space] = {
                "agreement_mnist": agreement(result, 0, q),
                "agreement_usps": agreement(result, 2, q),
                "agreement_usps_balanced": agreement(bal, 1, q),
                "a_hat": [round(float(v), 3) for v in result.a_hat],
                "effective_neighbours": [round(float(v), 2) for v in result.effective_neighbours],
                "seconds": round(time.perf_counter() - t0, 1),
            }
        row["wall_seconds_with_training"] = round(time.perf_counter() - start, 1)
        row["training_in_this_run_seconds"] = round(train_s, 1)
        done[style] = row
        results_path.write_text(json.dumps(done, indent=1))
        print(json.dumps(row), flush=True)

    print()
    print(f"Q: {args.n} MNIST test digits per held-out style, 32x32 RGB; references: bundled "
          "MNIST, Fashion-MNIST, USPS training samples (2000 each); a_hat order m/f/u")  # fmt: skip
    print("| held-out style | space | agreement mnist | agreement usps | usps (balanced) | a_hat (m/f/u) |")  # fmt: skip
    print("|---|---|---:|---:|---:|---|")
    for style in styles:
        row = done[style]
        for space in ("pixels", "encoder", "shipped"):
            r = row[space]
            print(
                f"| {style} | {space} | {r['agreement_mnist']:.3f} | {r['agreement_usps']:.3f} | "
                f"{r['agreement_usps_balanced']:.3f} | "
                + " / ".join(f"{v:.2f}" for v in r["a_hat"])
                + " |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
