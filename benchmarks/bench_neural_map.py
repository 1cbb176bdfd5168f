"""Neural OTDD map vs barycentric map: fit time and out-of-sample error (MNIST -> Fashion-MNIST).

Paper Sec. 3.1: the barycentric projection only maps the target points of its
plan; the neural map (eq. (max-min)) maps any new point. This script measures,
in one run on the same data:

1. **fit**: the barycentric map (entropic OTDD plan, sharp default epsilon) and
   the neural map (:class:`geoviz.maps.neural.NeuralOTDDMap`, ``--preset``) on
   ``--n`` MNIST training samples -> ``--n`` Fashion-MNIST samples (32x32 grey,
   from ``../shared/data/nist``, ``GEOVIZ_NIST_DIR``); wall-clock seconds;
2. **out-of-sample error** on ``--n-out`` held-out MNIST *test* points: the
   reference answer is the barycentric projection of the entropic plan solved
   on those points against the same Fashion-MNIST sample. Each map's images of
   the held-out points are compared with it: relative squared error
   ``mean ||T(x) - T_ref(x)||^2 / mean ||x - T_ref(x)||^2`` and the agreement of
   the hard labels. The barycentric map's out-of-sample extension is the
   entropic map (:class:`geoviz.maps.barycentric.EntropicMap`: softmax of the
   fitted reference potential), the peer yardstick;
3. sharpness of each map on the held-out points: label confidence, and the
   median distance to the nearest Fashion-MNIST sample over the median
   nearest-neighbour distance inside Fashion-MNIST (about 1: looks like data).

It prints a markdown table and writes ``--out`` (JSON) and ``--png`` (rows of
held-out MNIST digits, the reference answer, the entropic map and the neural map).

Run: ``.venv/bin/python benchmarks/bench_neural_map.py`` (CPU: ~10 min at
N = 10000); ``--device cuda --preset paper`` on a GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent


def _bench_transfer():
    spec = importlib.util.spec_from_file_location("bench_transfer", HERE / "bench_transfer.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mosaic(rows: list[torch.Tensor], path: Path, titles: list[str], zoom: int = 2) -> None:
    """Strips of 32x32 images, one per row, each under its title (PIL, no plotting library)."""
    from PIL import Image, ImageDraw

    n = rows[0].shape[0]
    side, pad, title_h = 32 * zoom, 4, 14
    width = n * (side + pad) + pad
    height = len(rows) * (side + title_h + pad) + pad
    canvas = Image.new("L", (width, height), color=255)
    draw = ImageDraw.Draw(canvas)
    y = pad
    for imgs, title in zip(rows, titles, strict=True):
        draw.text((pad, y), title, fill=0)
        y += title_h
        for k, im in enumerate(imgs):
            arr = (im.reshape(32, 32).clamp(0, 1).numpy() * 255).astype(np.uint8)
            tile = Image.fromarray(arr).resize((side, side), Image.NEAREST)
            canvas.paste(tile, (pad + k * (side + pad), y))
        y += side + pad
    canvas.save(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10000, help="training samples per dataset")
    parser.add_argument("--n-out", type=int, default=1000, help="held-out target test points")
    parser.add_argument("--preset", default="cpu", help="neural-map preset: tiny, cpu, paper")
    parser.add_argument("--iterations", type=int, default=None, help="override the preset")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(HERE / "results_neural_map.json"))
    parser.add_argument("--png", default=str(HERE / "neural_vs_barycentric.png"))
    args = parser.parse_args(argv)

    from geoviz.backend import RuntimeSettings, configure, configure_torch
    from geoviz.nn.training import CPU_TRAIN_THREADS

    # process-wide settings, once, here at the entry point (the library sets none)
    configure_torch(threads=CPU_TRAIN_THREADS, flush_denormal=True)
    configure(RuntimeSettings.from_env())

    import dataclasses

    from geoviz.backend import DiskCache, resolve_device
    from geoviz.data.preprocess import harmonize
    from geoviz.maps.barycentric import BarycentricMap, EntropicMap
    from geoviz.maps.base import nearest_reference_ratio
    from geoviz.maps.neural import NeuralOTDDMap
    from geoviz.maps.neural_config import get_neural_preset
    from geoviz.ot.otdd_cost import OTDDConfig

    bt = _bench_transfer()
    q_raw = bt._load("mnist", "train", args.n, args.seed)
    p_raw = bt._load("fashion_mnist", "train", args.n, args.seed)
    out_raw = bt._load("mnist", "test", args.n_out, args.seed)
    q, p, q_out = harmonize([q_raw, p_raw, out_raw], size=32, channels="grey")
    cache = DiskCache(enabled=False)
    otdd_cfg = OTDDConfig(device=args.device)
    neural_cfg = get_neural_preset(args.preset)
    neural_cfg = dataclasses.replace(
        neural_cfg,
        device=args.device,
        **({} if args.iterations is None else {"iterations": args.iterations}),
    )
    device = resolve_device(args.device)
    print(
        f"MNIST -> Fashion-MNIST, N = {q.n_samples} / {p.n_samples}, held-out {q_out.n_samples} "
        f"MNIST test points, device {device}, torch threads {torch.get_num_threads()}, "
        f"load {os.getloadavg()[0]:.2f}",
        flush=True,
    )

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    bary = BarycentricMap(otdd_cfg, cache=cache).fit(q, p)
    timings["barycentric_fit"] = time.perf_counter() - t0
    print(f"barycentric fit {timings['barycentric_fit']:.1f} s", flush=True)
    t0 = time.perf_counter()
    ent = EntropicMap(otdd_cfg, cache=cache).fit(q, p)
    timings["entropic_fit"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ent_x, ent_y = ent.transform(q_out.features, q_out.labels)
    timings["entropic_transform"] = time.perf_counter() - t0

    last = [0.0]

    def progress(stage: str, fraction: float) -> None:
        if time.perf_counter() - last[0] > 30:
            print(f"  neural: {stage} {fraction:.0%}", flush=True)
            last[0] = time.perf_counter()

    t0 = time.perf_counter()
    neural = NeuralOTDDMap(neural_cfg, otdd_cfg, cache=cache).fit(q, p, progress=progress)
    timings["neural_fit"] = time.perf_counter() - t0
    print(f"neural fit {timings['neural_fit']:.1f} s", flush=True)
    t0 = time.perf_counter()
    neu_x, neu_y = neural.transform(q_out.features, q_out.labels)
    timings["neural_transform"] = time.perf_counter() - t0

    # the reference answer: the entropic plan solved on the held-out points themselves
    t0 = time.perf_counter()
    ref = BarycentricMap(otdd_cfg, cache=cache).fit(q_out, p)
    timings["reference_plan"] = time.perf_counter() - t0
    ref_x, ref_y = ref.mapped_features_, ref.soft_labels_
    # a balanced plan from n_out points onto N_P >> n_out points spreads every row over at least
    # N_P / n_out reference points: the yardstick itself is an average, say how much of one
    print(
        f"reference plan: effective neighbours {ref.otdd_.effective_neighbours:.1f} "
        f"(>= N_P / n_out = {p.n_samples / q_out.n_samples:.0f} by the marginals), "
        f"label confidence {ref.otdd_.label_confidence:.3f}",
        flush=True,
    )
    scale = float((q_out.features - ref_x).square().sum(1).mean())

    def row(name: str, x: torch.Tensor, y: torch.Tensor, fit_s: float, map_s: float) -> dict:
        return {
            "map": name,
            "fit_s": fit_s,
            "transform_s_per_1000": 1000 * map_s / q_out.n_samples,
            "rel_sq_error": float((x - ref_x).square().sum(1).mean()) / scale,
            "label_agreement": float((y.argmax(1) == ref_y.argmax(1)).float().mean()),
            "label_confidence": float(y.max(1).values.mean()),
            # the statistic every neural fit reports (same subsample sizes and seed)
            "nearest_reference": nearest_reference_ratio(x, p.features, np.random.default_rng(0)),
            "transport_cost": float((x - q_out.features).square().sum(1).mean()),
        }

    rows = [
        row(
            "entropic (barycentric plan + potential)",
            ent_x,
            ent_y,
            timings["barycentric_fit"] + timings["entropic_fit"],
            timings["entropic_transform"],
        ),
        row(
            f"neural ({type(neural.generator_).__name__}, {args.preset} preset)",
            neu_x,
            neu_y,
            timings["neural_fit"],
            timings["neural_transform"],
        ),
        row("reference: plan on the held-out points", ref_x, ref_y, timings["reference_plan"], 0.0),
    ]
    print(
        "\n| map | fit s | map s / 1000 pts | rel. sq. error vs plan | label agreement | "
        "label confidence | nearest-ref ratio | transport cost |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['map']} | {r['fit_s']:.1f} | {r['transform_s_per_1000']:.3f} | "
            f"{r['rel_sq_error']:.3f} | {r['label_agreement']:.3f} | {r['label_confidence']:.3f} | "
            f"{r['nearest_reference']:.2f} | {r['transport_cost']:.1f} |"
        )
    summary = neural.summary()
    print(
        f"\nneural fit: kept iteration {summary['best_iteration']}/{summary['iterations_run']} "
        f"(early stop: {summary['stopped_early']}), held-out OT {summary['heldout_ot']:.1f} "
        f"(identity {summary['heldout_ot_identity']:.1f}), classifier accuracy "
        f"{summary['classifier_accuracy']:.3f}; barycentric on the training points: "
        f"effective neighbours {bary.otdd_.effective_neighbours:.2f}, "
        f"label confidence {bary.otdd_.label_confidence:.3f}"
    )
    result = {
        "n": q.n_samples,
        "n_out": q_out.n_samples,
        "device": str(device),
        "preset": args.preset,
        "neural_config": dataclasses.asdict(neural_cfg),
        "timings": timings,
        "rows": rows,
        "neural_summary": summary,
        "neural_history": neural.history_,
        "barycentric": {
            "effective_neighbours": float(bary.otdd_.effective_neighbours),
            "label_confidence": float(bary.otdd_.label_confidence),
        },
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    k = 16
    _mosaic(
        [q_out.features[:k], ref_x[:k], ent_x[:k], neu_x[:k]],
        Path(args.png),
        [
            "held-out MNIST test digits x",
            "reference: barycentric projection of the plan solved on these points",
            "entropic map (out-of-sample extension of the barycentric map)",
            "neural map G(x, y)",
        ],
    )
    print(f"wrote {args.out} and {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
