"""Few-shot pseudo-labels: kNN vs label spreading, and what the OTDD maps make of them (issue 42).

The paper's few-shot protocol (Sec. 4.2; Sec. 5.2, Table 2) labels ``k`` samples per class of
the target Q and pseudo-labels the rest; the OTDD cost's label term then follows those labels.
For each target, seed and space this measures:

* the pseudo-labels' accuracy on Q's unlabelled samples, for ``k`` in ``--ks``, by the
  labelled points' 1-NN vote (``knn``, the method before) and by label spreading on Q's kNN
  graph (``spread``, :func:`geoviz.data.pseudo_labels.spread_labels`), and each one's time;
* for ``k = --maps-k``: the geodesic fitted with Q labelled by each method (and by its true
  labels, the ceiling), and its maps' class agreement on Q (the fraction of Q whose map to
  MNIST, resp. USPS, gives Q's *true* class the largest mass) and ``a_hat``.

Targets, as ``table2_colour.py`` builds them: ``colour`` is MNIST-M-style photo digits
(:func:`geoviz.data.colour.photo_digits` on MNIST test digits 0-4999, 32x32 RGB), ``grey`` the
same MNIST test digits in grey. References MNIST, Fashion-MNIST, USPS training samples
(``--n`` each). Spaces: ``pixels`` and ``default`` (what ``features="auto"`` chooses for the
few-shot target, on its ``--maps-k`` labelled points per class, as ``load_spec_datasets``
does). The shipped encoder's digest is recorded: another encoder gives other numbers.

Also ``--cost-n``: the seconds of each method on grey MNIST training samples in pixel space
(1024 features), ``k = 10``.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_pseudo_labels.py --seeds 0,1,2``
(``benchmarks/results/pseudo-labels.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_features import agreement, nist  # noqa: E402
from table2_colour import encoder_digest  # noqa: E402

METHODS = ("knn", "spread")


def build(target: str, n: int, seed: int):
    """Q (``n`` of MNIST test digits 0-4999, coloured or grey) and the references, harmonised."""
    from geoviz.data.colour import photo_digits
    from geoviz.data.preprocess import harmonize, stratified_subsample

    digits = nist("mnist", "test", 10_000).subset(torch.arange(5000))
    q = stratified_subsample(digits, n, seed=seed)
    if target == "colour":
        q = photo_digits(q, size=32, seed=seed)
    refs = [nist(name, "train", n, seed) for name in ("mnist", "fashion_mnist", "usps")]
    channels = "rgb" if target == "colour" else "grey"
    return harmonize([q, *refs], size=32, channels=channels)


def relabelled(ds, labels: np.ndarray):
    """``ds`` with other labels (same features, classes, name)."""
    from geoviz.data.dataset import LabeledDataset

    return LabeledDataset(features=ds.features, labels=torch.as_tensor(labels), classes=ds.classes,
                          name=ds.name, image_shape=ds.image_shape, source=ds.source)  # fmt: skip


def unlabelled_accuracy(labels: np.ndarray, q, picks: np.ndarray) -> float:
    """Fraction of Q's unlabelled samples whose label is their true one."""
    rest = np.setdiff1d(np.arange(q.n_samples), picks)
    return float(np.mean(labels[rest] == q.labels.numpy()[rest]))


def maps_labels(geo, q, picks: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Q's labels read from the maps: each unlabelled sample takes the class its maps to the
    references that share Q's class names (MNIST, USPS) give the most mass, summed over them;
    the labelled picks keep theirs (an experiment here, not a product option)."""
    scores = np.zeros((q.n_samples, len(q.classes)))
    for i, ref in enumerate(geo.references):
        names = list(ref.classes)
        if not set(q.classes) <= set(names):
            continue
        soft = geo.soft_labels[i].numpy()
        for c, name in enumerate(q.classes):
            scores[:, c] += soft[:, names.index(name)]
    out = scores.argmax(axis=1)
    out[picks] = current[picks]
    return out


def measure_seed(args, target: str, seed: int, cache) -> list[dict]:
    """Every row of one target and seed: per space, per k, per method; maps at ``--maps-k``."""
    from geoviz.data.preprocess import few_shot, few_shot_picks
    from geoviz.features import PixelSpace
    from geoviz.geodesic.config import GeodesicConfig, space_of
    from geoviz.geodesic.pipeline import fit_in_space

    q, *refs = build(target, args.n, seed)
    rows = []
    for space_name in args.spaces.split(","):
        label = "pixels"
        if space_name == "pixels":
            space = PixelSpace()
        else:
            picks = few_shot_picks(q, args.maps_k, seed=seed)
            space, choice = space_of(GeodesicConfig(), cache, [q, *refs], labelled=picks)
            label = choice.label if choice is not None else space.name
        z = q.features if space.name == "pixels" else space.fit([q, *refs]).transform(q).features
        labelled_q: dict[str, object] = {"true": q}
        for k in [int(v) for v in args.ks.split(",")]:
            for method in METHODS:
                start = time.perf_counter()
                shot = few_shot(q, k, seed=seed, embedding=z, method=method)
                row = {"target": target, "seed": seed, "space": space_name, "space_label": label,
                       "k": k, "method": method, "accuracy": shot.pseudo_label_accuracy,
                       "seconds": time.perf_counter() - start}  # fmt: skip
                rows.append(row)
                print(f"{target} seed {seed} {space_name} k={k} {method}: "
                      f"{shot.pseudo_label_accuracy:.3f} ({row['seconds']:.2f} s)", flush=True)  # fmt: skip
                if k == args.maps_k:
                    labelled_q[method] = shot.dataset
        if args.no_maps:
            continue
        picks = few_shot_picks(q, args.maps_k, seed=seed)
        fitted = {}
        for labels in ("true", *METHODS, "maps(spread)"):
            start = time.perf_counter()
            if labels == "maps(spread)":  # one round of the maps' own labels (see maps_labels)
                y = maps_labels(fitted["spread"], q, picks, labelled_q["spread"].labels.numpy())
                dataset = relabelled(q, y)
                rows.append({"target": target, "seed": seed, "space": space_name,
                             "space_label": label, "k": args.maps_k, "method": "maps(spread)",
                             "accuracy": unlabelled_accuracy(y, q, picks),
                             "seconds": time.perf_counter() - start})  # fmt: skip
                print(f"{target} seed {seed} {space_name} k={args.maps_k} maps(spread): "
                      f"{rows[-1]['accuracy']:.3f}", flush=True)  # fmt: skip
            else:
                dataset = labelled_q[labels]
            geo = fitted[labels] = fit_in_space(dataset, list(refs), None, space, cache=cache)
            row = {"target": target, "seed": seed, "space": space_name, "space_label": label,
                   "k": args.maps_k, "maps_labels": labels,
                   "agreement_mnist": agreement(geo, 0, q), "agreement_usps": agreement(geo, 2, q),
                   "a_hat": [round(float(a), 3) for a in geo.a_hat],
                   "seconds": time.perf_counter() - start}  # fmt: skip
            rows.append(row)
            print(f"{target} seed {seed} {space_name} maps with {labels} labels: "
                  f"mnist {row['agreement_mnist']:.3f} usps {row['agreement_usps']:.3f} "
                  f"a_hat {row['a_hat']} ({row['seconds']:.0f} s)", flush=True)  # fmt: skip
    return rows


def measure_cost(sizes: list[int]) -> list[dict]:
    """Seconds of each method on ``n`` grey MNIST training samples (pixels, k = 10)."""
    from geoviz.data.preprocess import few_shot, harmonize

    rows = []
    for n in sizes:
        (ds,) = harmonize([nist("mnist", "train", n, 0)], size=32, channels="grey")
        for method in METHODS:
            start = time.perf_counter()
            shot = few_shot(ds, 10, seed=0, method=method)
            rows.append({"n": n, "method": method, "seconds": time.perf_counter() - start,
                         "accuracy": shot.pseudo_label_accuracy})  # fmt: skip
            print(f"cost n={n} {method}: {rows[-1]['seconds']:.2f} s "
                  f"(accuracy {shot.pseudo_label_accuracy:.3f})", flush=True)  # fmt: skip
    return rows


def summary(rows: list[dict]) -> None:
    """Mean ± sd over seeds of every (target, space, k, method) and maps row, as markdown."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        if "method" in row:
            groups.setdefault((row["target"], row["space"], row["k"], row["method"]), []).append(
                row
            )
    print("\n| target | space | k | kNN | spreading | maps' labels (spread, one round) |")
    print("|---|---|---:|---:|---:|---:|")
    for target, space, k, method in sorted(groups):
        if method != "knn":
            continue
        cells = []
        for m in (*METHODS, "maps(spread)"):
            if (target, space, k, m) not in groups:
                cells.append("")
                continue
            acc = np.array([r["accuracy"] for r in groups[(target, space, k, m)]])
            cells.append(f"{acc.mean():.3f} ± {acc.std():.3f}")
        print(f"| {target} | {space} | {k} | {' | '.join(cells)} |")
    maps: dict[tuple, list[dict]] = {}
    for row in rows:
        if "maps_labels" in row:
            maps.setdefault((row["target"], row["space"], row["maps_labels"]), []).append(row)
    print("\n| target | space | Q's labels | agreement mnist | agreement usps | a_hat (m/f/u) |")
    print("|---|---|---|---:|---:|---|")
    for (target, space, labels), group in sorted(maps.items()):
        m = np.array([r["agreement_mnist"] for r in group])
        u = np.array([r["agreement_usps"] for r in group])
        a = np.mean([r["a_hat"] for r in group], axis=0)
        print(f"| {target} | {space} | {labels} | {m.mean():.3f} ± {m.std():.3f} | "
              f"{u.mean():.3f} ± {u.std():.3f} | {' / '.join(f'{v:.2f}' for v in a)} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--targets", default="colour,grey")
    parser.add_argument("--spaces", default="pixels,default")
    parser.add_argument("--ks", default="5,10,20", help="labelled samples per class")
    parser.add_argument("--maps-k", type=int, default=10, help="k of the maps' agreement")
    parser.add_argument("--no-maps", action="store_true", help="pseudo-label accuracy only")
    parser.add_argument("--n", type=int, default=1000, help="samples of Q and of each P_i")
    parser.add_argument("--cost-n", default="1000,5000,20000", help="'' for none")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/pseudo-labels.json")
    args = parser.parse_args()

    from geoviz.backend import DiskCache, configure_torch

    configure_torch(threads=args.threads)
    cache = DiskCache(ROOT / "benchmarks/results/.cache-pseudo-labels")
    out = {"args": {k: str(v) for k, v in vars(args).items()}, "rows": [], "cost": [],
           "encoder digest (sha256 of glyphs.npz, first 16)": [], "load average": []}  # fmt: skip
    for seed in [int(s) for s in args.seeds.split(",")]:
        for target in args.targets.split(","):
            out["encoder digest (sha256 of glyphs.npz, first 16)"].append(encoder_digest())
            out["rows"].extend(measure_seed(args, target, seed, cache))
            out["load average"].append(round(os.getloadavg()[0], 1))
            args.out.write_text(json.dumps(out, indent=1))
    if args.cost_n:
        out["cost"] = measure_cost([int(n) for n in args.cost_n.split(",")])
        out["load average"].append(round(os.getloadavg()[0], 1))
        args.out.write_text(json.dumps(out, indent=1))
    summary(out["rows"])


if __name__ == "__main__":
    main()
