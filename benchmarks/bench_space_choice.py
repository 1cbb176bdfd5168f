"""How much class structure each candidate space carries, per scenario (issue 42, item 1).

The groundwork of "choose the space by measurement": for every candidate space the product
has today (``make_space("pixels")``, ``"box"``, ``"encoder"`` with the shipped weights,
``"natural"``: EfficientNet-Lite0's ImageNet features) and every scenario row, on a small stratified subsample (``--n``, default 200 per dataset,
harmonised with :func:`geoviz.data.preprocess.harmonize` to the target's size, as the CLI
does), it measures:

* **LOO 5-NN** accuracy inside each dataset (leave-one-out, Euclidean in the space) and its
  chance-corrected kappa ``(acc - 1/C) / (1 - 1/C)``;
* **agreement**: 1-NN from Q into a reference with the same class names (kappa too);
* **NMI / AMI** between Q's labels and the labels of Q's nearest reference points, for every
  reference (the only relation score defined for references with other class names; AMI is
  sklearn's chance-adjusted mutual information, about 0 for unrelated labels at any n), and
  the distance ratio (median distance from Q to its nearest reference point over the median
  nearest-neighbour distance inside the reference);
* **few-shot**: ``k`` labels per class (``--k``, default 10, as the product's few-shot
  target), the rest of Q pseudo-labelled by 1-NN in the space
  (:func:`geoviz.data.preprocess.few_shot`, as :mod:`geoviz.geodesic.spec` does), mean over
  ``--seeds`` draws; with the leave-one-out 1-NN accuracy among the labelled points alone
  (what a run can see without Q's true labels);
* the **cost** in seconds (one torch thread) of each measurement and of each space's fit and
  transform, on a cold cache (``GEOVIZ_NO_CACHE=1`` in this process);
* the product's **choice** (:func:`geoviz.features.choose_space` on the row's datasets: the
  space, the candidates it measured, its reason and caveat, its seconds: what a run pays);
* a **yardstick** that is not part of the measurement: the agreement of the product's OTDD
  map (barycentric, default epsilon) from Q into each same-class reference, in each space.

The shipped encoder learned the labels of the datasets in its manifest's ``labels_from``
(:func:`geoviz.features.pretrained.labels_seen_for`): its scores on those are inflated. They
are marked ``*`` and kept out of every *clean* aggregate (the clean aggregates use the same
unseen datasets for every space). Its training images (the bundled train samples,
``assets/nist``) are removed from the reference pools before subsampling, so what is left of
the inflation is the labels it learned, not memorised images.

Scenarios (rows): (a) grey digits, mnist vs usps, fashion_mnist, kmnist; (b) every colour
style of :mod:`geoviz.data.styles` (and all mixed) rendered from MNIST *test* glyphs vs
mnist, fashion_mnist, usps; (c) natural images: 32x32 crops of scikit-learn's two sample
photos (5 vertical regions each, 10 classes) vs mnist, fashion_mnist, and, when scikit-image
is installed, crops of its grey textures and of its colour photos (one class per image);
(d) unrelated references: mnist vs fashion_mnist, kmnist; (e) a control, the floor: mnist with
its labels shuffled vs usps, fashion_mnist. References come from the train
splits of ``../shared/data/nist`` (``GEOVIZ_NIST_DIR``), MNIST targets from the test split.

The yardstick of the cost: the product's cold default run, ``geoviz project --target mnist
--refs fashion_mnist,usps,kmnist`` in a fresh ``GEOVIZ_CACHE_DIR``, timed in the same run
(``--cli-runs``, default 3: half before the measurements, the rest after; the ratio is taken
to the fastest, the least loaded), and once the colour default (``--target mnist_m --refs
mnist,fashion_mnist,usps``, the shipped encoder) for the encoder's measurement.

Run: ``.venv/bin/python benchmarks/bench_space_choice.py`` (3-6 min on 2 cores, most of it
the CLI runs; the measurements themselves take about 2 min, half of it the OTDD yardstick).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
NIST = Path(os.environ.get("GEOVIZ_NIST_DIR", ROOT.parent / "shared" / "data" / "nist"))
SPACES = ("pixels", "box", "encoder", "natural")
CLI_ARGS = ["project", "--target", "mnist", "--refs", "fashion_mnist,usps,kmnist"]
#: a second yardstick: the bundled colour target, whose default space is the shipped encoder
COLOUR_CLI_ARGS = ["project", "--target", "mnist_m", "--refs", "mnist,fashion_mnist,usps"]
SHORT = {"fashion_mnist": "fmnist", "kmnist": "kmnist", "usps": "usps", "mnist": "mnist"}


# --------------------------------------------------------------------------- data


def _bundled_hashes(name: str) -> set[bytes]:
    """Digests of the bundled train images of ``name`` (the shipped encoder's training set)."""
    data = np.load(ROOT / "assets" / "nist" / f"{name}.npz")
    return {hashlib.sha1(img.tobytes()).digest() for img in data["x_train"]}


def nist(name: str, split: str, n: int, seed: int, excluded: dict[str, int]):
    """``n`` stratified images of ``name`` (without the bundled train images, for train)."""
    from geoviz.data.dataset import LabeledDataset
    from geoviz.data.preprocess import stratified_subsample

    data = np.load(NIST / f"{name}.npz")
    x, y = data[f"x_{split}"], data[f"y_{split}"]
    if split == "train":
        seen = _bundled_hashes(name)
        keep = np.array([hashlib.sha1(img.tobytes()).digest() not in seen for img in x])
        excluded[name] = int((~keep).sum())
        x, y = x[keep], y[keep]
    ds = LabeledDataset(
        features=(x.astype(np.float32) / 255.0).reshape(len(x), -1),
        labels=y,
        classes=tuple(str(c) for c in data["classes"]),
        name=name,
        image_shape=(1, *x.shape[1:]),
    )
    return stratified_subsample(ds, n, seed=seed)


def _crops(
    images: list[np.ndarray],
    boxes: list[tuple[int, int, int, int]],
    n: int,
    seed: int,
    scale: tuple[float, float] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` 32x32 crops, class ``c`` inside ``boxes[c] = (image, top, left, height, width)``
    of ``images``; ``scale=None``: native 32x32 crops, else a side drawn in ``scale`` x the
    box's short side, resized to 32 (antialiased)."""
    import torch

    rng = np.random.default_rng(seed)
    counts = np.full(len(boxes), n // len(boxes))
    counts[: n - counts.sum()] += 1
    out, labels = [], []
    for c, ((img_i, top, left, h, w), count) in enumerate(zip(boxes, counts, strict=True)):
        img = images[img_i]
        for _ in range(count):
            side = 32 if scale is None else int(rng.uniform(*scale) * min(h, w))
            side = max(8, min(side, h, w))
            y0 = top + int(rng.integers(0, h - side + 1))
            x0 = left + int(rng.integers(0, w - side + 1))
            patch = torch.from_numpy(img[y0 : y0 + side, x0 : x0 + side]).permute(2, 0, 1)
            if side != 32:
                patch = torch.nn.functional.interpolate(
                    patch[None], size=(32, 32), mode="bilinear", antialias=True
                )[0]
            out.append(patch.numpy())
            labels.append(c)
    return np.stack(out), np.array(labels)


def _as_dataset(x: np.ndarray, y: np.ndarray, classes: list[str], name: str, grey: bool):
    from geoviz.data.dataset import LabeledDataset

    if grey:
        x = x[:, :1]
    return LabeledDataset(
        features=x.reshape(len(x), -1).astype(np.float32),
        labels=y,
        classes=tuple(classes),
        name=name,
        image_shape=tuple(x.shape[1:]),
    )


def sklearn_regions(
    n: int, seed: int, scale: tuple[float, float] | None = None, name: str = "photo_regions"
):
    """scikit-learn's two sample photos, 5 vertical regions each: 10 classes of 32x32 crops
    (``scale``: crops of that share of a region's short side, resized to 32, see
    :func:`_crops`)."""
    from sklearn.datasets import load_sample_images

    photos = [img.astype(np.float32) / 255.0 for img in load_sample_images().images]
    boxes, classes = [], []
    for i, (img, title) in enumerate(zip(photos, ("china", "flower"), strict=True)):
        h, w = img.shape[:2]
        for r in range(5):
            boxes.append((i, 0, r * w // 5, h, w // 5))
            classes.append(f"{title}{r}")
    x, y = _crops(photos, boxes, n, seed, scale=scale)
    return _as_dataset(x, y, classes, name, grey=False)


def skimage_sets(
    n: int, seed: int, scale: tuple[float, float] = (1 / 6, 1 / 3), suffix: str = ""
) -> list[Any]:
    """Crops of scikit-image's grey textures (6 classes) and colour photos (8 classes), of
    ``scale`` x each image's short side, resized to 32; names ``sk_textures<suffix>``,
    ``sk_photos<suffix>``."""
    try:
        import skimage.data as sk
    except ImportError:
        return []

    def rgb(a: np.ndarray) -> np.ndarray:
        a = a.astype(np.float32)
        a = a / 255.0 if a.max() > 1.0 else a
        return np.repeat(a[..., None], 3, axis=2) if a.ndim == 2 else a[..., :3]

    out = []
    for title, names, grey in (
        ("sk_textures", ["brick", "grass", "gravel", "moon", "page", "cell"], True),
        (
            "sk_photos",
            [
                "astronaut",
                "chelsea",
                "coffee",
                "rocket",
                "hubble_deep_field",
                "immunohistochemistry",
                "retina",
                "colorwheel",
            ],
            False,
        ),
    ):
        images = [rgb(getattr(sk, name)()) for name in names]
        boxes = [(i, 0, 0, *img.shape[:2]) for i, img in enumerate(images)]
        x, y = _crops(images, boxes, n, seed, scale=scale)
        out.append(_as_dataset(x, y, names, title + suffix, grey=grey))
    return out


def styled_targets(n: int, seed: int, excluded: dict[str, int]) -> list[Any]:
    """MNIST test glyphs in each style of :mod:`geoviz.data.styles`, and all styles mixed."""
    import torch

    from geoviz.data.styles import STYLES, render, render_mixed

    glyphs = nist("mnist", "test", n, seed, excluded)
    ink = glyphs.features.reshape(-1, 1, 28, 28)
    out = []
    for k, style in enumerate((*STYLES, "mixed")):
        gen = torch.Generator().manual_seed(4200 + 100 * seed + k)
        rgb = render_mixed(ink, STYLES, gen) if style == "mixed" else render(ink, style, gen)
        images = glyphs.with_features(rgb.reshape(len(rgb), -1), image_shape=(3, 28, 28))
        out.append(dataclasses.replace(images, name=f"mnist:{style}"))
    return out


# --------------------------------------------------------------------------- measurements


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def kappa(acc: float, n_classes: int) -> float:
    return (acc - 1.0 / n_classes) / (1.0 - 1.0 / n_classes)


def _dist(a, b):
    import torch

    return torch.cdist(a.to(torch.float64), b.to(torch.float64))


def loo_knn(z, y, k: int = 5) -> float:
    """Leave-one-out ``k``-NN accuracy (majority vote, ties to the nearer neighbour)."""
    import torch

    d = _dist(z, z)
    d.fill_diagonal_(float("inf"))
    k = min(k, len(y) - 1)
    nn = d.topk(k, largest=False).indices  # nearest first
    votes = torch.zeros(len(y), int(y.max()) + 1, dtype=torch.float64)
    tie = 1.0 + 1e-6 * torch.arange(k, 0, -1, dtype=torch.float64).expand(len(y), k)
    votes.scatter_add_(1, y[nn], tie)
    return float((votes.argmax(1) == y).double().mean())


def nearest(zq, zr):
    return _dist(zq, zr).min(dim=1)


def distance_ratio(zq, zr, to_ref) -> float:
    """Median distance from Q to its nearest reference point over the median distance from a
    reference point to its nearest other reference point (1: Q lies among the reference)."""
    d = _dist(zr, zr)
    d.fill_diagonal_(float("inf"))
    return float(to_ref.median() / d.min(dim=1).values.median())


def same_names(q, ref) -> bool:
    return set(q.classes) <= set(ref.classes)


def agreement(q, ref, nn) -> float:
    q_names = np.array(q.classes)[q.labels.numpy()]
    r_names = np.array(ref.classes)[ref.labels.numpy()[nn.numpy()]]
    return float(np.mean(q_names == r_names))


def map_agreement(q, ref, zq, zr) -> dict[str, Any]:
    """The product's OTDD map Q -> ref in the space: share of Q whose soft label's argmax
    names Q's class (the yardstick; not part of the measurement)."""
    from geoviz.ot.otdd import otdd
    from geoviz.ot.otdd_cost import OTDDConfig

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = otdd(q.with_features(zq), ref.with_features(zr), OTDDConfig(), barycentric=True)
    pred = res.soft_labels.argmax(dim=1).numpy()
    q_names = np.array(q.classes)[q.labels.numpy()]
    value = float(np.mean(q_names == np.array(ref.classes)[pred]))
    return {"agreement": value, "warnings": sorted({str(w.message)[:80] for w in caught})}


def measure_space(space_name: str, q, refs, seen: dict[str, bool], args) -> dict[str, Any]:
    """Every measurement of one space on one row."""
    import torch
    from sklearn.metrics import adjusted_mutual_info_score, normalized_mutual_info_score

    from geoviz.data.preprocess import few_shot
    from geoviz.errors import GeovizError
    from geoviz.features import make_space

    space = make_space(space_name)
    datasets = [q, *refs]
    try:
        fitted, t_fit = _timed(lambda: space.fit(datasets))
    except GeovizError as err:
        return {"available": False, "reason": str(err)}
    zs, t_transform = _timed(lambda: [fitted.transform(ds).features for ds in datasets])
    cost: dict[str, float] = {"fit": t_fit, "transform": t_transform}
    out: dict[str, Any] = {"available": True, "dim": int(zs[0].shape[1])}

    def loo_all() -> dict[str, dict[str, float]]:
        res = {}
        for ds, z in zip(datasets, zs, strict=True):
            acc = loo_knn(z, ds.labels, 5)
            c = int((ds.class_counts() > 0).sum())
            res[ds.name] = {"acc": acc, "kappa": kappa(acc, c), "seen": seen[ds.name]}
        return res

    out["loo5"], cost["loo5"] = _timed(loo_all)

    def relations() -> dict[str, dict[str, Any]]:
        res: dict[str, dict[str, Any]] = {}
        for ref, zr in zip(refs, zs[1:], strict=True):
            to_ref, nn = nearest(zs[0], zr)
            yq, yr = q.labels.numpy(), ref.labels.numpy()[nn.numpy()]
            row: dict[str, Any] = {
                "nmi": float(normalized_mutual_info_score(yq, yr)),
                "ami": float(adjusted_mutual_info_score(yq, yr)),
                "distance_ratio": distance_ratio(zs[0], zr, to_ref),
                "seen": seen[ref.name] or seen[q.name],
            }
            if same_names(q, ref):
                acc = agreement(q, ref, nn)
                row["agreement"] = acc
                row["agreement_kappa"] = kappa(acc, ref.n_classes)
            res[ref.name] = row
        return res

    out["relations"], cost["relations"] = _timed(relations)

    def shots() -> dict[str, float]:
        accs, loos = [], []
        c = int((q.class_counts() > 0).sum())
        for seed in range(args.seeds):
            fs = few_shot(q, args.k, seed=seed, n_neighbors=1, embedding=zs[0])
            accs.append(fs.pseudo_label_accuracy)
            lab = torch.from_numpy(fs.labelled_indices)
            loos.append(loo_knn(zs[0][lab], q.labels[lab], 1))
        acc, loo = float(np.mean(accs)), float(np.mean(loos))
        return {
            "acc": acc,
            "kappa": kappa(acc, c),
            "acc_sd": float(np.std(accs)),
            "labelled_loo1": loo,
            "labelled_loo1_kappa": kappa(loo, c),
        }

    out["few_shot"], cost["few_shot"] = _timed(shots)
    if args.maps:
        yard = {}
        for ref, zr in zip(refs, zs[1:], strict=True):
            if same_names(q, ref):
                yard[ref.name] = map_agreement(q, ref, zs[0], zr)
        out["map_agreement"] = yard
    out["seconds"] = {k: round(v, 4) for k, v in cost.items()}
    # what the product would pay for this space: fit + transform + LOO + relations
    # (+ few-shot only for a few-shot target)
    out["seconds"]["measurement"] = round(t_fit + t_transform + cost["loo5"] + cost["relations"], 4)
    return out


def clean_summary(res: dict[str, Any], names: list[str]) -> dict[str, float | None]:
    """Aggregates of LOO 5-NN kappa: Q's (``None`` if the encoder saw Q's labels), the mean
    over the references it never saw the labels of (the same ones for every space), and
    over every dataset (inflated for the encoder where any is seen)."""
    if not res.get("available"):
        return {}
    loo = res["loo5"]
    clean_refs = [n for n in names[1:] if not loo[n]["seen"]]
    return {
        "q_kappa": None if loo[names[0]]["seen"] else loo[names[0]]["kappa"],
        "clean_refs_kappa": (
            float(np.mean([loo[n]["kappa"] for n in clean_refs])) if clean_refs else None
        ),
        "all_kappa": float(np.mean([loo[n]["kappa"] for n in names])),
    }


# --------------------------------------------------------------------------- the CLI yardstick


def cold_cli(cli_args: list[str] = CLI_ARGS) -> dict[str, Any]:
    """The product's cold default run, in its own process and empty cache."""
    with tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k != "GEOVIZ_NO_CACHE"}
        env["GEOVIZ_CACHE_DIR"] = cache
        cmd = [sys.executable, "-m", "geoviz", *cli_args, "--quiet"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    space = next((ln for ln in done.stdout.splitlines() if ln.startswith("space: ")), "")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "command": "geoviz " + " ".join(cli_args),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "space": space[:60],
        "load_before": os.getloadavg()[0],
    }


# --------------------------------------------------------------------------- main


def build_rows(args, excluded: dict[str, int]) -> list[dict[str, Any]]:
    def ref(name: str):
        # "mnist:train": the mnist reference under another name (Q is mnist too)
        ds = nist(name.split(":")[0], "train", args.n, args.seed, excluded)
        return ds if ":" not in name else dataclasses.replace(ds, name=name)

    mnist_q = nist("mnist", "test", args.n, args.seed, excluded)
    rows: list[dict[str, Any]] = []
    wanted = set(args.scenarios.split(","))
    if "a" in wanted:
        rows.append(
            {
                "scenario": "a",
                "row": "a grey digits",
                "q": mnist_q,
                "refs": ["usps", "fashion_mnist", "kmnist"],
            }
        )
        # the clean yardstick of grey digits: the only same-class reference of the row above
        # (usps) had its labels learned by the encoder; MNIST's own training images did not
        rows.append(
            {
                "scenario": "a",
                "row": "a grey digits, clean yardstick",
                "q": mnist_q,
                "refs": ["mnist:train", "usps"],
            }
        )
    if "b" in wanted:
        for target in styled_targets(args.n, args.seed + 1, excluded):
            style = target.name.split(":")[1]
            rows.append(
                {
                    "scenario": "b",
                    "row": f"b {style}",
                    "q": target,
                    "refs": ["mnist", "fashion_mnist", "usps"],
                }
            )
    if "c" in wanted:
        rows.append(
            {
                "scenario": "c",
                "row": "c sklearn photo regions",
                "q": sklearn_regions(args.n, args.seed),
                "refs": ["mnist", "fashion_mnist"],
            }
        )
        for target in skimage_sets(args.n, args.seed):
            rows.append(
                {
                    "scenario": "c",
                    "row": f"c {target.name}",
                    "q": target,
                    "refs": ["mnist", "fashion_mnist"],
                }
            )
    if "d" in wanted:
        rows.append(
            {
                "scenario": "d",
                "row": "d unrelated refs",
                "q": mnist_q,
                "refs": ["fashion_mnist", "kmnist"],
            }
        )
    if "e" in wanted:
        # the floor: Q's labels shuffled, so no space can carry its class structure
        perm = np.random.default_rng(args.seed).permutation(mnist_q.n_samples)
        shuffled = dataclasses.replace(mnist_q, labels=mnist_q.labels[perm], name="mnist:shuffled")
        rows.append(
            {
                "scenario": "e",
                "row": "e control: Q labels shuffled",
                "q": shuffled,
                "refs": ["usps", "fashion_mnist"],
            }
        )
    cache: dict[str, Any] = {}
    for row in rows:
        row["refs"] = [cache.setdefault(n, ref(n)) for n in row["refs"]]
    return rows


def _fmt(v: float | None, seen: bool = False) -> str:
    return "-" if v is None else f"{v:.2f}{'*' if seen else ''}"


def _short(name: str) -> str:
    return SHORT.get(name, name)


def print_summary(results: list[dict[str, Any]]) -> None:
    """One line per row and space: the scores a rule would read, and the maps' yardstick."""
    print("\n### Summary (κ: chance-corrected; * = labels seen by the encoder, inflated)\n")
    print(
        "| row | space | Q κ (LOO 5-NN) | few-shot acc / labelled LOO κ | agreement κ, same"
        " names | AMI per reference | map agreement (yardstick) |"
    )
    print("|---|---|---:|---|---|---|---|")
    for row in results:
        for space in SPACES:
            res = row["spaces"][space]
            if not res["available"]:
                continue
            enc = space == "encoder"
            q = res["loo5"][row["q"]]
            fs = res["few_shot"]
            rel = res["relations"].items()
            agree = ", ".join(
                f"{_short(n)} {_fmt(r['agreement_kappa'], enc and r['seen'])}"
                for n, r in rel
                if "agreement" in r
            )
            ami = ", ".join(f"{_short(n)} {_fmt(r['ami'], enc and r['seen'])}" for n, r in rel)
            maps = ", ".join(
                f"{_short(n)} {m['agreement']:.2f}" for n, m in res.get("map_agreement", {}).items()
            )
            print(
                f"| {row['row']} | {space} | {_fmt(q['kappa'], enc and q['seen'])} | "
                f"{fs['acc']:.2f} / {fs['labelled_loo1_kappa']:.2f} | {agree or '-'} | {ami} | "
                f"{maps or '-'} |"
            )


def print_tables(
    results: list[dict[str, Any]], cli: list[dict[str, Any]], colour_cli: list[dict[str, Any]]
) -> None:
    """Markdown tables; ``*``: the encoder learned that dataset's labels (inflated)."""
    print("\n### Class structure: kappa of leave-one-out 5-NN (* = labels seen by the encoder)\n")
    print(
        "| row | space | Q acc / κ | references κ | few-shot acc, k per class (labelled LOO 1-NN)"
        " | measure s |"
    )
    print("|---|---|---|---|---|---:|")
    for row in results:
        for space in SPACES:
            res = row["spaces"][space]
            if not res["available"]:
                print(f"| {row['row']} | {space} | n/a (colour images) | | | |")
                continue
            enc = space == "encoder"
            loo, fs = res["loo5"], res["few_shot"]
            q = loo[row["q"]]
            refs = ", ".join(
                f"{_short(n)} {_fmt(loo[n]['kappa'], enc and loo[n]['seen'])}" for n in row["refs"]
            )
            print(
                f"| {row['row']} | {space} | {q['acc']:.2f} / {_fmt(q['kappa'], enc and q['seen'])}"
                f" | {refs} | {fs['acc']:.2f} ({fs['labelled_loo1']:.2f}) | "
                f"{res['seconds']['measurement']:.2f} |"
            )
    print("\n### Relation of Q to each reference (1-NN from Q into the reference)\n")
    print(
        "| row | space | agreement (same class names) | AMI (NMI) of Q's labels and the 1-NN's"
        " | distance ratio | OTDD map agreement (yardstick) |"
    )
    print("|---|---|---|---|---|---|")
    for row in results:
        for space in SPACES:
            res = row["spaces"][space]
            if not res["available"]:
                continue
            enc = space == "encoder"
            rel = res["relations"].items()
            agree = ", ".join(
                f"{_short(n)} {_fmt(r['agreement'], enc and r['seen'])}"
                for n, r in rel
                if "agreement" in r
            )
            ami = ", ".join(
                f"{_short(n)} {_fmt(r['ami'], enc and r['seen'])} ({r['nmi']:.2f})" for n, r in rel
            )
            ratio = ", ".join(f"{_short(n)} {r['distance_ratio']:.2f}" for n, r in rel)
            maps = ", ".join(
                f"{_short(n)} {m['agreement']:.2f}{' (not converged)' if m['warnings'] else ''}"
                for n, m in res.get("map_agreement", {}).items()
            )
            print(f"| {row['row']} | {space} | {agree or '-'} | {ami} | {ratio} | {maps or '-'} |")
    print("\n### The product's choice (`auto`, choose_space on the row's datasets)\n")
    print("| row | chosen | measured | reason | caveat | choose s |")
    print("|---|---|---|---|---|---:|")
    for row in results:
        c = row["choice"]
        measured = ", ".join(
            f"{m['space']} {_fmt(m['q_kappa'])}"
            for m in c["measurements"]
            if m["q_kappa"] is not None
        )
        print(
            f"| {row['row']} | {c['space']} | {measured} | {c['reason']} | {c['caveat'] or '-'} | "
            f"{c['seconds']:.2f} |"
        )
    print("\n### Cost (one torch thread; the CLI as the product runs it)\n")
    print("| what | wall s | CPU s |")
    print("|---|---:|---:|")
    for k, run in enumerate(cli):
        print(
            f"| cold default run #{k + 1}: `{run['command']}`, fresh cache (load "
            f"{run['load_before']:.1f} before) | {run['wall_s']} | "
            f"{run['cpu_s']} |"
        )
    for run in colour_cli:
        print(
            f"| cold colour default run: `{run['command']}`, fresh cache (load "
            f"{run['load_before']:.1f} before) | {run['wall_s']} | {run['cpu_s']} |"
        )
    for row in results:
        if row["scenario"] == "b" and colour_cli:
            wall = min(run["wall_s"] for run in colour_cli)
            paid = row["choice"]["seconds"]
            print(
                f"| {row['row']}, choose_space as the run pays it = {100 * paid / wall:.1f} % of "
                f"the cold colour run | {paid:.2f} | |"
            )
            for space in ("encoder", "natural"):
                if not row["spaces"][space]["available"]:
                    continue
                t = row["spaces"][space]["seconds"]["measurement"]
                print(
                    f"| {row['row']}, {space} = {100 * t / wall:.1f} % of the cold colour run | "
                    f"{t:.2f} | |"
                )
    for row in results:
        if row["scenario"] != "a":
            continue
        total = 0.0
        for space in SPACES:
            res = row["spaces"][space]
            if res["available"]:
                t = res["seconds"]
                total += t["measurement"]
                print(
                    f"| {row['row']}, {space}: fit {t['fit']:.3f} + transform {t['transform']:.3f}"
                    f" + LOO {t['loo5']:.3f} + relations {t['relations']:.3f} (few-shot "
                    f"{t['few_shot']:.3f}, not counted) | {t['measurement']:.2f} | |"
                )
        walls = sorted(run["wall_s"] for run in cli)
        share = (
            f" = {100 * total / walls[0]:.1f} % of the fastest cold run, "
            f"{100 * total / float(np.median(walls)):.1f} % of the median"
            if cli
            else ""
        )
        print(f"| {row['row']}: every space together{share} | {total:.2f} | |")
        paid = row["choice"]["seconds"]
        share = f" = {100 * paid / walls[0]:.1f} % of the fastest cold run" if cli else ""
        spaces = ", ".join(m["space"] for m in row["choice"]["measurements"])
        print(f"| {row['row']}: choose_space as the run pays it ({spaces}){share} | {paid:.2f} | |")
        cheap = sum(
            row["spaces"][sp]["seconds"]["measurement"]
            for sp in ("pixels", "box")
            if row["spaces"][sp]["available"]
        )
        share = f" = {100 * cheap / walls[0]:.1f} % of the fastest cold run" if cli else ""
        print(f"| {row['row']}: pixels and box only{share} | {cheap:.2f} | |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=200, help="samples per dataset")
    parser.add_argument("--k", type=int, default=10, help="few-shot labels per class")
    parser.add_argument("--seeds", type=int, default=5, help="few-shot draws")
    parser.add_argument("--seed", type=int, default=0, help="seed of the subsamples and crops")
    parser.add_argument("--scenarios", default="a,b,c,d,e")
    parser.add_argument(
        "--colour-cli-runs",
        type=int,
        default=1,
        help="cold runs of the colour default (mnist_m vs mnist, fashion_mnist, usps), after",
    )
    parser.add_argument(
        "--cli-runs",
        type=int,
        default=3,
        help="cold default CLI runs, the yardstick of the cost: half (rounded up) before the "
        "measurements, the rest after (0: none)",
    )
    parser.add_argument("--no-maps", dest="maps", action="store_false", help="skip the OTDD maps")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "space_choice.json"
    )
    args = parser.parse_args()

    # a cold measurement: nothing read from or written to a feature cache in this process
    os.environ["GEOVIZ_NO_CACHE"] = "1"
    import torch

    torch.set_num_threads(1)
    from geoviz.features.choice import choose_space
    from geoviz.features.pretrained import encoder_manifest, labels_seen_for

    started = time.perf_counter()
    cli = [cold_cli() for _ in range((args.cli_runs + 1) // 2)]
    excluded: dict[str, int] = {}
    rows = build_rows(args, excluded)
    manifest = encoder_manifest()
    results = []
    for row in rows:
        q, refs = row["q"], row["refs"]
        from geoviz.data.preprocess import harmonize

        size = q.image_shape[1]
        datasets = harmonize([q, *refs], size=size)
        names = [ds.name for ds in datasets]
        seen = {ds.name: bool(labels_seen_for(ds)) for ds in datasets}
        entry: dict[str, Any] = {
            "scenario": row["scenario"],
            "row": row["row"],
            "q": names[0],
            "refs": names[1:],
            "size": size,
            "channels": datasets[0].image_shape[0],
            "n": [ds.n_samples for ds in datasets],
            "spaces": {},
        }
        for space in SPACES:
            res = measure_space(space, datasets[0], datasets[1:], seen, args)
            res["clean"] = clean_summary(res, names)
            entry["spaces"][space] = res
        # the product's own choice on these datasets (a cold measurement, as above)
        choice, seconds = _timed(lambda datasets=datasets: choose_space(datasets))
        entry["choice"] = {**choice.as_dict(), "seconds": round(seconds, 2)}
        results.append(entry)
        print(f"{row['row']}: done ({time.perf_counter() - started:.0f} s)", flush=True)
    cli += [cold_cli() for _ in range(args.cli_runs // 2)]
    colour_cli = [cold_cli(COLOUR_CLI_ARGS) for _ in range(args.colour_cli_runs)]
    print_summary(results)
    print_tables(results, cli, colour_cli)
    total = time.perf_counter() - started
    print(f"\nwhole benchmark: {total:.0f} s")
    record = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch threads 1",
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "encoder": {"sha256": manifest["sha256"], "labels_from": manifest.get("labels_from", [])},
        "bundled_train_images_excluded": excluded,
        "cli_default_cold": cli,
        "cli_colour_default_cold": colour_cli,
        "total_s": round(total, 1),
        "rows": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
