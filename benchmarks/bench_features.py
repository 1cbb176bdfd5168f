"""Feature spaces on a colour target: class agreement of the maps, a_hat, time (issue 22).

The target Q is MNIST-M-style (:func:`geoviz.data.colour.photo_digits`: MNIST *test* digits
blended into patches of scikit-learn's sample photos, 32x32 RGB; ``--target textured`` uses
:func:`geoviz.data.colour.textured_digits` instead), the references MNIST, Fashion-MNIST and
USPS *training* samples (grey, shown to the encoder as RGB), all from the full copies in
``../shared/data/nist`` (``GEOVIZ_NIST_DIR``). For each feature space it fits the space on the
union, the three OTDD maps in that space (barycentric, default epsilon) and ``a_hat``, and
reports:

* **class agreement** of each map: the fraction of target samples whose mapped soft label's
  largest entry names the target's true class (digit references; Fashion-MNIST has no digit
  classes, so its agreement is not defined);
* effective neighbours and label confidence of each map, in the space the plan lives in;
* ``a_hat`` and the time (space fit + maps + distances) and peak RSS growth.

Pixel space is the yardstick, measured in the same run. ``--ablation`` adds the encoder
trained with the contrastive loss added to the supervised one, and with it alone (the
default is supervised heads with augmentations, no contrastive term: measured best). Nothing here uses Q's labels to fit anything.

Run: ``.venv/bin/python benchmarks/bench_features.py --n 2000`` (about 10 min on 2 cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
NIST = Path(os.environ.get("GEOVIZ_NIST_DIR", ROOT.parent / "shared" / "data" / "nist"))


def nist(name: str, split: str, n: int, seed: int = 0):
    from geoviz.data.dataset import LabeledDataset
    from geoviz.data.preprocess import stratified_subsample

    data = np.load(NIST / f"{name}.npz")
    x = data[f"x_{split}"].astype(np.float32) / 255.0
    ds = LabeledDataset(
        features=x.reshape(len(x), -1),
        labels=data[f"y_{split}"],
        classes=tuple(str(c) for c in data["classes"]),
        name=name,
        image_shape=(1, *x.shape[1:]),
    )
    return stratified_subsample(ds, n, seed=seed) if n < ds.n_samples else ds


def agreement(result, i: int, target_true) -> float | None:
    """Fraction of Q whose map to reference i gives its true class the largest mass."""
    ref = result.references[i]
    names = list(ref.classes)
    q_names = [target_true.classes[int(c)] for c in target_true.labels]
    if not set(q_names) <= set(names):
        return None
    pred = result.soft_labels[i].argmax(dim=1).numpy()
    return float(np.mean([names[p] == t for p, t in zip(pred, q_names, strict=True)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="samples of Q and of each P_i")
    parser.add_argument("--target", choices=["photo", "textured"], default="photo")
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--spaces", default="pixels,encoder")
    parser.add_argument("--ablation", action="store_true")
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="JSON results")
    args = parser.parse_args()

    from geoviz.backend import DiskCache, configure_torch
    from geoviz.data.colour import photo_digits, textured_digits
    from geoviz.data.preprocess import harmonize
    from geoviz.features import make_space
    from geoviz.features.encoder import ENCODER_PRESETS, EncoderSpace
    from geoviz.geodesic.pipeline import fit_geodesic

    configure_torch(threads=2)
    build = photo_digits if args.target == "photo" else textured_digits
    q = build(nist("mnist", "test", args.n, args.seed), size=args.size, seed=args.seed)
    refs = [nist(n, "train", args.n, args.seed) for n in ("mnist", "fashion_mnist", "usps")]
    q, *refs = harmonize([q, *refs], size=args.size, channels="rgb")
    cache = DiskCache(enabled=False)  # every space fitted in this run, nothing reused

    spaces: list[tuple[str, object]] = []
    for name in args.spaces.split(","):
        if name == "encoder":
            spaces.append(("encoder", EncoderSpace(args.preset, cache=cache).with_seed(args.seed)))
        else:
            spaces.append((name, make_space(name)))
    if args.ablation:
        base = ENCODER_PRESETS[args.preset]
        for label, change in (("encoder, supervised + contrastive", {"contrastive": 1.0}),
                              ("encoder, contrastive only", {"supervised": 0.0, "contrastive": 1.0})):  # fmt: skip
            cfg = dataclasses.replace(base, seed=args.seed, **change)
            spaces.append((label, EncoderSpace(cfg, cache=cache)))

    rows = []
    for label, space in spaces:
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        fitted = space.fit([q, *refs])
        fit_s = time.perf_counter() - start
        feats = [fitted.transform(ds) for ds in (q, *refs)]
        result = fit_geodesic(feats[0], feats[1:], cache=cache)
        total = time.perf_counter() - start
        rss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
        row = {
            "space": label,
            "digest": fitted.digest[:12],
            "dim": feats[0].n_features,
            "agreement": [agreement(result, i, q) for i in range(3)],
            "effective_neighbours": [float(v) for v in result.effective_neighbours],
            "label_confidence": [float(v) for v in result.label_confidence],
            "a_hat": [float(v) for v in result.a_hat],
            "fit_seconds": fit_s,
            "total_seconds": total,
            "peak_rss_growth_mb": rss,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)

    names = [r.name for r in refs]
    print()
    print(f"Q = {q.name} ({args.target}, N = {q.n_samples}, {args.size}x{args.size} RGB), "
          f"references {', '.join(names)} (N = {args.n} each), seed {args.seed}")  # fmt: skip
    print("| space | d | agreement mnist | agreement usps | eff. neighbours (m/f/u) | "
          "label conf. (m/f/u) | a_hat (m/f/u) | space fit | total | peak RSS + |")  # fmt: skip
    print("|---|---:|---:|---:|---|---|---|---:|---:|---:|")
    for r in rows:
        ag = r["agreement"]
        print(
            f"| {r['space']} | {r['dim']} | {ag[0]:.3f} | {ag[2]:.3f} | "
            + " / ".join(f"{v:.1f}" for v in r["effective_neighbours"])
            + " | "
            + " / ".join(f"{v:.2f}" for v in r["label_confidence"])
            + " | "
            + " / ".join(f"{v:.2f}" for v in r["a_hat"])
            + " | "
            + f"{r['fit_seconds']:.0f} s | {r['total_seconds']:.0f} s | {r['peak_rss_growth_mb']:.0f} MB |"
        )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"args": vars(args) | {"out": str(args.out)}, "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    sys.exit(main())
