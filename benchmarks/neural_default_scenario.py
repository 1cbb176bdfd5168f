"""What the neural maps change on the app's default scenario: a_hat, W^2(P_a, Q), mapped images.

Loads the default scenario exactly as the app does (bundled MNIST target, Fashion-MNIST,
USPS and KMNIST references, ``--n`` samples each, 32x32), fits the generalized geodesic
with barycentric maps and with neural maps (``--preset``; both cached in the default disk
cache, so the app finds them), and prints per map the OTDD / Monge cost, ``W_i`` and the
sharpness figures, then ``a_hat`` and ``W^2(P_a_hat, Q)`` of each method and each method's
objective at the other's ``a_hat``. Writes ``--png``: for every reference a strip of target
digits, their barycentric images and their neural images (the same target points).

Run: ``.venv/bin/python benchmarks/neural_default_scenario.py`` (CPU: ~15 min for the
three neural maps on the first run, seconds once cached).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent


def _strip_png(rows: list[tuple[str, torch.Tensor]], path: Path, zoom: int = 2) -> None:
    from PIL import Image, ImageDraw

    n = rows[0][1].shape[0]
    side, pad, title_h = 32 * zoom, 4, 14
    canvas = Image.new(
        "L", (n * (side + pad) + pad, len(rows) * (side + title_h + pad) + pad), color=255
    )
    draw = ImageDraw.Draw(canvas)
    y = pad
    for title, imgs in rows:
        draw.text((pad, y), title, fill=0)
        y += title_h
        for k, im in enumerate(imgs):
            arr = (im.reshape(32, 32).clamp(0, 1).numpy() * 255).astype(np.uint8)
            canvas.paste(
                Image.fromarray(arr).resize((side, side), Image.NEAREST),
                (pad + k * (side + pad), y),
            )
        y += side + pad
    canvas.save(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--png", default=str(HERE / "neural_default_scenario.png"))
    parser.add_argument("--show", type=int, default=12, help="target points in the PNG")
    args = parser.parse_args(argv)

    from geoviz.backend import RuntimeSettings, configure, configure_torch
    from geoviz.nn.training import CPU_TRAIN_THREADS

    # process-wide settings, once, here at the entry point (the library sets none)
    configure_torch(threads=CPU_TRAIN_THREADS, flush_denormal=True)
    configure(RuntimeSettings.from_env())

    from geoviz.data.choice import DatasetChoice
    from geoviz.geodesic.config import GeodesicConfig
    from geoviz.geodesic.pipeline import fit_geodesic
    from geoviz.geodesic.spec import GeodesicSpec, load_spec_datasets

    spec = GeodesicSpec(
        target=DatasetChoice("mnist"),
        references=tuple(DatasetChoice(n) for n in ("fashion_mnist", "usps", "kmnist")),
        n_target=args.n,
        n_reference=args.n,
        image_size=32,
    )
    data = load_spec_datasets(spec)
    q, refs = data.target, list(data.references)
    results = {}
    last = [0.0]

    def progress(stage: str, fraction: float) -> None:
        if time.perf_counter() - last[0] > 60:
            print(f"  {stage} {fraction:.0%}", flush=True)
            last[0] = time.perf_counter()

    for method in ("barycentric", "neural"):
        start = time.perf_counter()

        results[method] = fit_geodesic(
            q, refs, GeodesicConfig(method=method, neural=args.preset), progress=progress
        )
        print(f"{method}: {time.perf_counter() - start:.1f} s", flush=True)
    bary, neural = results["barycentric"], results["neural"]
    names = list(bary.reference_names)

    print(
        "\n| reference | OTDD bary | Monge cost neural | W_i bary | W_i neural | "
        "eff. neighbours bary | nearest-ref neural | label conf. bary | label conf. neural | "
        "hard-label agreement |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i, name in enumerate(names):
        d = neural.map_details[i]
        agree = float(
            (bary.soft_labels[i].argmax(1) == neural.soft_labels[i].argmax(1)).float().mean()
        )
        print(
            f"| {name} | {bary.otdd[i]:.1f} | {neural.otdd[i]:.1f} | {bary.w_to_target[i]:.1f} | "
            f"{neural.w_to_target[i]:.1f} | {bary.effective_neighbours[i]:.2f} | "
            f"{d['nearest_reference']:.2f} | {bary.label_confidence[i]:.3f} | "
            f"{neural.label_confidence[i]:.3f} | {agree:.3f} |"
        )
    print(
        "\n| method | a_hat (" + ", ".join(names) + ") | W²(P_a_hat, Q) | "
        "objective at the other method's a_hat |"
    )
    print("|---|---|---:|---:|")
    for mine, other in ((bary, neural), (neural, bary)):
        print(
            f"| {mine.method} | {', '.join(f'{a:.3f}' for a in mine.a_hat)} | "
            f"{mine.w2_hat:.1f} | {float(mine.objective(other.a_hat)):.1f} |"
        )
    for i, name in enumerate(names):
        d = neural.map_details[i]
        print(
            f"neural {name}: held-out OT {d['heldout_ot']:.1f} (identity "
            f"{d['heldout_ot_identity']:.1f}), kept iteration {d['best_iteration']}/"
            f"{d['iterations_run']}, classifier {d['classifier_accuracy']:.3f}, "
            f"{d['fit_seconds']:.0f} s"
        )

    k = args.show
    rows = [("target Q (MNIST sample)", q.features[:k])]
    for i, name in enumerate(names):
        rows.append((f"barycentric T -> {name}", bary.mapped_features[i][:k]))
        rows.append((f"neural T -> {name}", neural.mapped_features[i][:k]))
    _strip_png(rows, Path(args.png))
    print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
