"""Benchmark: the sliced-OTDD screen against the full OTDD ranking (issue 34, item 6).

For each target Q, twelve candidate references from ``../shared/data/nist`` (the other
datasets, and MNIST/KMNIST drawn differently: rotated, shifted, blurred, thickened,
thinned, noisy, flipped; every candidate keeps the dark background, so the space the
product chooses for all of them is the digit box) are ranked twice in that one space:

* **screen**: :func:`geoviz.ot.screen_references` (sliced OTDD, 256 slices, 4 moments: the
  defaults, fixed before this benchmark was first run and not tuned on it);
* **full**: :func:`geoviz.ot.otdd.otdd` at the default epsilon, one problem per candidate.

It prints both rankings, Spearman's rank correlation and Kendall's tau between them, and
the wall time of each. Samples: ``--n`` per dataset (training splits; Q's MNIST samples are
disjoint from the MNIST-derived candidates').

Usage::

    .venv/bin/python benchmarks/bench_screen.py              # n = 1000, targets mnist and usps
    .venv/bin/python benchmarks/bench_screen.py --n 2000 --targets mnist
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import kendalltau, spearmanr

from geoviz.backend import configure_torch, get_cache
from geoviz.data.dataset import LabeledDataset
from geoviz.data.preprocess import harmonize
from geoviz.geodesic.config import GeodesicConfig, space_of
from geoviz.ot.otdd import otdd
from geoviz.ot.otdd_cost import OTDDConfig
from geoviz.ot.sliced import screen_references

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("GEOVIZ_NIST_DIR", ROOT / ".." / "shared" / "data" / "nist"))


def _load(name: str, n: int, offset: int = 0) -> LabeledDataset:
    with np.load(DATA_DIR / f"{name}.npz", allow_pickle=False) as z:
        x = z["x_train"][offset : offset + n].astype(np.float32) / 255
        y = z["y_train"][offset : offset + n]
        classes = tuple(str(c) for c in z["classes"])
    h, w = x.shape[1:]
    return LabeledDataset(
        torch.from_numpy(x.reshape(len(x), -1)),
        torch.from_numpy(y),
        classes,
        name=name,
        image_shape=(1, h, w),
    )


def _variant(ds: LabeledDataset, name: str, how) -> LabeledDataset:
    c, h, w = ds.image_shape or (1, 28, 28)
    images = ds.features.reshape(-1, 1, h, w)
    out = how(images).clamp(0, 1).reshape(len(images), -1)
    return LabeledDataset(out, ds.labels, ds.classes, name=name, image_shape=(c, h, w))


def _blur(x: torch.Tensor) -> torch.Tensor:
    kernel = torch.ones(1, 1, 3, 3) / 9
    return torch.nn.functional.conv2d(x, kernel, padding=1)


def _thick(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.max_pool2d(x, 3, stride=1, padding=1)


def _thin(x: torch.Tensor) -> torch.Tensor:
    return -torch.nn.functional.max_pool2d(-x, 2, stride=1, padding=1)[..., :28, :28]


def candidates(n: int, target: str) -> list[LabeledDataset]:
    """Twelve or thirteen references; the MNIST ones use the samples after Q's first n."""
    gen = torch.Generator().manual_seed(0)
    mnist = _load("mnist", n, offset=n)  # disjoint from Q = the first n MNIST images
    kmnist = _load("kmnist", n)
    out = [_load(name, n) for name in ("fashion_mnist", "kmnist", "usps") if name != target]
    out += [
        mnist,
        _variant(mnist, "mnist_rot90", lambda x: torch.rot90(x, 1, (2, 3))),
        _variant(mnist, "mnist_flip", lambda x: torch.flip(x, (2,))),
        _variant(mnist, "mnist_shift4", lambda x: torch.roll(x, (4, 4), (2, 3))),
        _variant(mnist, "mnist_blur", _blur),
        _variant(mnist, "mnist_thick", _thick),
        _variant(mnist, "mnist_thin", _thin),
        _variant(mnist, "mnist_noise", lambda x: x + 0.3 * torch.rand(x.shape, generator=gen)),
        _variant(kmnist, "kmnist_rot90", lambda x: torch.rot90(x, 1, (2, 3))),
        _variant(kmnist, "kmnist_blur", _blur),
    ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--targets", default="mnist,usps")
    args = parser.parse_args()
    configure_torch(threads=None)
    print(f"# sliced-OTDD screen vs full OTDD, n = {args.n}, load {os.getloadavg()[0]:.2f}")
    for target_name in args.targets.split(","):
        q = _load(target_name, args.n)
        refs = candidates(args.n, target_name)
        sets = harmonize([q, *refs], size=28)
        space, _choice = space_of(GeodesicConfig(), get_cache(), sets)
        space = space.fit(sets)
        q, refs = space.transform(sets[0]), [space.transform(ds) for ds in sets[1:]]
        rows, screen_s = screen_references(q, refs)
        start = time.perf_counter()
        full = {ref.name: otdd(q, ref, OTDDConfig(), keep_coupling=False).cost for ref in refs}
        full_s = time.perf_counter() - start
        sliced = {row.name: row.sliced_otdd for row in rows}
        names = [ref.name for ref in refs]
        rho = spearmanr([sliced[n] for n in names], [full[n] for n in names]).statistic
        tau = kendalltau([sliced[n] for n in names], [full[n] for n in names]).statistic
        full_rank = {n: r + 1 for r, n in enumerate(sorted(names, key=full.get))}
        print(f"\n## Q = {target_name} ({len(refs)} candidates, space: {space.name})\n")
        print("| candidate | sliced OTDD | screen rank | OTDD | OTDD rank |")
        print("|---|---:|---:|---:|---:|")
        for row in rows:
            print(
                f"| {row.name} | {row.sliced_otdd:.4g} | {row.rank} | {full[row.name]:.4g} | "
                f"{full_rank[row.name]} |"
            )
        top3 = {r.name for r in rows[:3]} == {n for n in names if full_rank[n] <= 3}
        print(
            f"\nSpearman rho = {rho:.3f}, Kendall tau = {tau:.3f}; same top 3: {top3}; "
            f"screen {screen_s:.2f} s, full OTDD {full_s:.1f} s"
        )


if __name__ == "__main__":
    main()
