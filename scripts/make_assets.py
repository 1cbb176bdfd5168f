"""Derive the bundled dataset samples in ``assets/nist/`` from full copies.

Usage::

    python scripts/make_assets.py [--source DIR] [--out DIR] [--n-train 2000] [--n-test 500] [--seed 0]

``--source`` holds ``mnist.npz``, ``fashion_mnist.npz``, ``kmnist.npz`` and
``usps.npz`` with keys ``x_train`` (uint8 N x H x W), ``y_train`` (int64),
``x_test``, ``y_test`` and ``classes`` (str). For each, a stratified, seeded
subset of each split is written to ``<out>/nist/<name>.npz`` with the same keys
(``np.savez_compressed``). Class proportions follow the source split (largest
remainder rounding, see ``geoviz.data.preprocess.stratified_indices``); the
chosen images keep their original order. Re-running with the same inputs and
seed reproduces the files bit for bit (content, not zip timestamps).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from geoviz.data.preprocess import stratified_indices  # noqa: E402

NAMES = ("mnist", "fashion_mnist", "kmnist", "usps")


def make_subset(src: Path, dst: Path, n_train: int, n_test: int, seed: int) -> dict[str, object]:
    """Write the subset of ``src`` to ``dst``; returns a summary row."""
    with np.load(src, allow_pickle=False) as data:
        x_train, y_train = data["x_train"], data["y_train"].astype(np.int64)
        x_test, y_test = data["x_test"], data["y_test"].astype(np.int64)
        classes = np.asarray([str(c) for c in data["classes"]])
    if x_train.dtype != np.uint8 or x_test.dtype != np.uint8:
        raise SystemExit(f"{src}: images must be uint8")
    i_train = stratified_indices(y_train, n_train, seed=seed)
    i_test = stratified_indices(y_test, n_test, seed=seed)
    dst.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        dst,
        x_train=np.ascontiguousarray(x_train[i_train]),
        y_train=y_train[i_train],
        x_test=np.ascontiguousarray(x_test[i_test]),
        y_test=y_test[i_test],
        classes=classes,
    )
    return {
        "name": dst.stem,
        "train": len(i_train),
        "test": len(i_test),
        "shape": "x".join(map(str, x_train.shape[1:])),
        "bytes": dst.stat().st_size,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=ROOT.parent / "shared" / "data" / "nist")
    parser.add_argument("--out", type=Path, default=ROOT / "assets")
    parser.add_argument("--n-train", type=int, default=2000)
    parser.add_argument("--n-test", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    rows = []
    for name in tqdm(NAMES, desc="subsets", unit="dataset"):
        src = args.source / f"{name}.npz"
        if not src.is_file():
            print(f"error: {src} not found", file=sys.stderr)
            return 2
        rows.append(
            make_subset(
                src, args.out / "nist" / f"{name}.npz", args.n_train, args.n_test, args.seed
            )
        )
    total = 0
    for row in rows:
        total += int(row["bytes"])
        print(
            f"{row['name']:<14} train={row['train']:>5} test={row['test']:>4} {row['shape']:>6} {row['bytes'] / 1e6:6.2f} MB"
        )
    print(f"{'total':<14} {total / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
