"""The natural-image table (issue 42, item 3): each space's class structure and maps on photos.

Natural-image material, offline: crops of the two photos scikit-learn ships (10 classes: 5
vertical regions of each) and of scikit-image's colour photos (8 classes, one per image) and
grey textures (6 classes), built by ``bench_space_choice.py``'s helpers. Problems (rows):

* **regions vs digits, clothes** -- the issue's row: photo regions (native 32x32 crops) vs
  MNIST, Fashion-MNIST;
* **regions vs zoomed regions** -- the same regions cropped wider (1/3-2/3 of a region's
  side, resized to 32, other seed): a reference with Q's class names under a change of
  scale, plus Fashion-MNIST;
* **sk photos vs wider crops** / **sk textures vs wider crops** -- scikit-image's photos
  (textures) at 1/6-1/3 of their side vs 1/3-1/2 (other seed), plus MNIST (Fashion-MNIST);
* **regions vs sk photos, sk textures** -- natural references with other classes;
* **sk photos vs digits, clothes**.

For every candidate space (pixels, the digit box where grey, the shipped glyph encoder, the
natural-image encoder: EfficientNet-Lite0 and, when their packages are installed, Lite1 and
Lite2), on the product's own measurement sample (200 per dataset,
:func:`geoviz.features.structure.measure_space`): Q's leave-one-out 5-NN kappa, 1-NN agreement
kappa into references with Q's class names, AMI into every reference, and the cost. Then the
product's choice (:func:`geoviz.features.choose_space`: space, reason, caveat) and, as the
yardstick, the agreement of the product's OTDD map (barycentric, default epsilon) from Q into
each same-name reference, computed in each space on ``--n`` samples per dataset.

Two more tables choose the encoder's settings: Q's kappa of lite0 at input sides 32-96 px
with the cost of a pass (:data:`geoviz.features.natural.NATURAL_SIDE`), and the variants'
ImageNet top-1 for the two sample photos (a check of weights and scaling), kappa and cost.

References come from ``../shared/data/nist`` (``GEOVIZ_NIST_DIR``); scikit-image is needed
for the scikit-image rows (benchmarks only). Run:
``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_natural.py`` (about 10 min on 2 busy
cores, one torch thread).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_space_choice as bsc

ROOT = bsc.ROOT
VARIANTS = ("lite0", "lite1", "lite2")
SIDES = (32, 48, 64, 96)
#: ImageNet classes of the two sample photos (china: bell cote, boathouse, palace; flower: daisy)
IMAGENET = {
    442: "bell cote",
    449: "boathouse",
    698: "palace",
    985: "daisy",
    996: "hen-of-the-woods",
}


def problems(n: int, seed: int) -> list[dict[str, Any]]:
    """The rows: ``{"row", "q", "refs"}`` (datasets not yet harmonised)."""
    excluded: dict[str, int] = {}
    nist = {name: bsc.nist(name, "train", n, seed, excluded) for name in ("mnist", "fashion_mnist")}
    regions = bsc.sklearn_regions(n, seed)
    zoomed = bsc.sklearn_regions(n, seed + 1, scale=(1 / 3, 2 / 3), name="photo_regions:zoomed")
    sk = {ds.name: ds for ds in bsc.skimage_sets(n, seed)}
    wide = {ds.name: ds for ds in bsc.skimage_sets(n, seed + 1, (1 / 3, 1 / 2), ":wide")}
    rows = [
        ("regions vs digits, clothes", regions, [nist["mnist"], nist["fashion_mnist"]]),
        ("regions vs zoomed regions", regions, [zoomed, nist["fashion_mnist"]]),
    ]
    if sk:
        rows += [
            ("sk photos vs wider crops", sk["sk_photos"], [wide["sk_photos:wide"], nist["mnist"]]),
            (
                "sk textures vs wider crops",
                sk["sk_textures"],
                [wide["sk_textures:wide"], nist["fashion_mnist"]],
            ),
            ("regions vs sk photos, sk textures", regions, [sk["sk_photos"], sk["sk_textures"]]),
            (
                "sk photos vs digits, clothes",
                sk["sk_photos"],
                [nist["mnist"], nist["fashion_mnist"]],
            ),
        ]
    return [{"row": row, "q": q, "refs": refs} for row, q, refs in rows]


def spaces(grey: bool) -> list[tuple[str, Any]]:
    """``(label, FeatureSpace)`` of every candidate for these datasets."""
    from geoviz.errors import AssetError
    from geoviz.features.builtin import BoxSpace, PixelSpace
    from geoviz.features.natural import NaturalImageSpace, load_natural_weights
    from geoviz.features.pretrained import PretrainedEncoderSpace

    out: list[tuple[str, Any]] = [("pixels", PixelSpace())]
    if grey:
        out.append(("box", BoxSpace()))
    out.append(("encoder", PretrainedEncoderSpace()))
    for variant in VARIANTS:
        try:
            load_natural_weights(variant)
        except AssetError as err:
            print(f"{variant}: {err}")
            continue
        out.append(
            ("natural" if variant == "lite0" else f"natural:{variant}", NaturalImageSpace(variant))
        )
    return out


def measure_row(row: dict[str, Any], maps: bool) -> dict[str, Any]:
    """Every space's measurement, the product's choice and the maps' yardstick on one row."""
    import torch

    from geoviz.data.preprocess import harmonize
    from geoviz.features.choice import choose_space, is_grey
    from geoviz.features.pretrained import labels_seen_for
    from geoviz.features.structure import measure_space, measurement_sample

    datasets = harmonize([row["q"], *row["refs"]], size=32)
    q, refs = datasets[0], datasets[1:]
    sampled = [measurement_sample(ds) for ds in datasets]
    grey = all(is_grey(ds) for ds in sampled)
    entry: dict[str, Any] = {
        "row": row["row"],
        "q": q.name,
        "refs": [r.name for r in refs],
        "channels": q.image_shape[0],
        "n": [ds.n_samples for ds in datasets],
        "spaces": {},
    }
    for label, space in spaces(grey):
        unclean = [r.name for r in refs if label == "encoder" and labels_seen_for(r)]
        m = measure_space("pixels", space.fit, sampled[0], sampled[1:], unclean=unclean)
        res: dict[str, Any] = {**m.as_dict(), "space": label}
        if maps:
            start = time.perf_counter()
            fitted = space.fit(datasets)
            zs = [fitted.transform(ds).features for ds in datasets]
            yard = {}
            for ref, zr in zip(refs, zs[1:], strict=True):
                if bsc.same_names(q, ref):
                    yard[ref.name] = bsc.map_agreement(q, ref, zs[0], zr)
            res["map_agreement"] = yard
            res["map_seconds"] = round(time.perf_counter() - start, 2)
        entry["spaces"][label] = res
    torch.manual_seed(0)
    start = time.perf_counter()
    choice = choose_space(datasets)
    entry["choice"] = {**choice.as_dict(), "seconds": round(time.perf_counter() - start, 2)}
    return entry


def side_sweep(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Q's 5-NN kappa of lite0 at each input side, and the seconds of its pass on the Q's."""
    from geoviz.data.preprocess import harmonize
    from geoviz.features.natural import NaturalImageSpace
    from geoviz.features.structure import loo_knn_kappa, measurement_sample

    qs = {}
    for row in rows:
        q = measurement_sample(harmonize([row["q"]], size=32)[0])
        qs.setdefault(q.name, q)
    out = []
    for side in SIDES:
        kappas, seconds, images = {}, 0.0, 0
        for name, q in qs.items():
            fitted = NaturalImageSpace(side=side).fit([q])  # its own channels
            start = time.perf_counter()
            z = fitted._encode_all(q)  # no cache: the pass itself
            seconds += time.perf_counter() - start
            images += q.n_samples
            kappas[name] = round(loo_knn_kappa(z, q.labels), 4)
        out.append(
            {"side": side, "q_kappa": kappas, "ms_per_image": round(1000 * seconds / images, 2)}
        )
    return out


def variant_check() -> list[dict[str, Any]]:
    """ImageNet top-1 of each variant for the two sample photos at 224 px (native side)."""
    import torch
    from sklearn.datasets import load_sample_images

    from geoviz.errors import AssetError
    from geoviz.features.natural import NATURAL_VARIANTS, EfficientNetLite, load_natural_weights
    from geoviz.features.natural import _scaled as scaled

    photos = [img.astype(np.float32) / 255.0 for img in load_sample_images().images]
    out = []
    for variant in VARIANTS:
        spec = NATURAL_VARIANTS[variant]
        try:
            state = load_natural_weights(variant)
        except AssetError as err:
            out.append({"variant": variant, "note": str(err)})
            continue
        net = EfficientNetLite(spec.width, spec.depth)
        net.load_state_dict(state)
        net.eval()
        top = []
        for photo in photos:
            x = torch.from_numpy(photo).permute(2, 0, 1).reshape(1, -1)
            with torch.no_grad():
                p = net(scaled(x, (3, *photo.shape[:2]), 224)).softmax(1)[0]
            k = int(p.argmax())
            top.append(f"{IMAGENET.get(k, k)} ({float(p[k]):.2f})")
        params = sum(t.numel() for t in state.values() if t.is_floating_point())
        out.append({"variant": variant, "top1": top, "parameters": params, "package": spec.package})
    return out


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def print_tables(record: dict[str, Any]) -> None:
    print(
        "\n### Class structure and maps per space (200 per dataset measured; κ chance-corrected)\n"
    )
    print(
        "| problem | space | Q κ (5-NN) | agreement κ (same names) | AMI per reference | "
        "OTDD map agreement | measure s |"
    )
    print("|---|---|---:|---|---|---|---:|")
    for entry in record["rows"]:
        for label, m in entry["spaces"].items():
            seen = set(m["labels_learned"])
            agree = ", ".join(
                f"{r} {v:.2f}{'*' if r in seen else ''}" for r, v in m["agreement_kappa"].items()
            )
            ami = ", ".join(f"{r} {v:.2f}{'*' if r in seen else ''}" for r, v in m["ami"].items())
            maps = ", ".join(
                f"{r} {y['agreement']:.2f}{' (nc)' if y['warnings'] else ''}"
                for r, y in m.get("map_agreement", {}).items()
            )
            print(
                f"| {entry['row']} | {label} | {_f(m['q_kappa'])} | {agree or '-'} | {ami} | "
                f"{maps or '-'} | {m['seconds']:.2f} |"
            )
    print("\n### The product's choice (`auto`)\n")
    print("| problem | chosen | reason | caveat | choose s |")
    print("|---|---|---|---|---:|")
    for entry in record["rows"]:
        c = entry["choice"]
        print(
            f"| {entry['row']} | {c['space']} | {c['reason']} | {c['caveat'] or '-'} | "
            f"{c['seconds']:.1f} |"
        )
    if record.get("sides"):
        names = list(record["sides"][0]["q_kappa"])
        print("\n### lite0's input side: Q's 5-NN κ and the pass on one thread\n")
        print(f"| side | {' | '.join(names)} | ms per image |")
        print(f"|---:|{'---:|' * len(names)}---:|")
        for s in record["sides"]:
            kappas = " | ".join(f"{s['q_kappa'][n]:.2f}" for n in names)
            print(f"| {s['side']} | {kappas} | {s['ms_per_image']:.1f} |")
    print("\n### Variants: ImageNet top-1 of the sample photos at 224 px (china, flower)\n")
    print("| variant | package | parameters | top-1 |")
    print("|---|---|---:|---|")
    for v in record["variants"]:
        if "note" in v:
            print(f"| {v['variant']} | {v['note']} | | |")
        else:
            print(
                f"| {v['variant']} | {v['package']} | {v['parameters']:,} | {', '.join(v['top1'])} |"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=300, help="samples per dataset (maps)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-maps", dest="maps", action="store_false")
    parser.add_argument("--no-sides", dest="sides", action="store_false")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "natural.json"
    )
    args = parser.parse_args()

    os.environ["GEOVIZ_NO_CACHE"] = "1"  # cold: every pass is paid
    import torch

    torch.set_num_threads(1)
    started = time.perf_counter()
    load = os.getloadavg()[0]
    rows = problems(args.n, args.seed)
    results = []
    for row in rows:
        results.append(measure_row(row, args.maps))
        print(f"{row['row']}: done ({time.perf_counter() - started:.0f} s)", flush=True)
    record: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch threads 1",
        "load_before": round(load, 2),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "rows": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")  # the rows, should a sweep fail
    record["sides"] = side_sweep(rows) if args.sides else []
    record["variants"] = variant_check()
    record["total_s"] = round(time.perf_counter() - started, 1)
    record["load_after"] = round(os.getloadavg()[0], 2)
    print_tables(record)
    print(
        f"\nwhole benchmark: {record['total_s']:.0f} s (load {load:.1f} before, "
        f"{record['load_after']:.1f} after)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
