"""How sure is â? Calibration, shrinkage and cost of the bootstrap intervals (issue 23).

Part ``calibration`` (2-D Gaussians, closed forms): Q = N(0, I), P_i = N(m_i, A_i^2) with
the three maps of ``tests/test_geodesic_uncertainty.py`` (population â inside the
triangle). Brenier's maps are affine, so the population ``W_i``, ``W_ij`` and ``a_hat`` are
known (paper Prop. 1; labels are random and ``lambda_y = 0``, so the OTDD is the plain W2).
Over ``--reps`` independent draws it counts how often each nominal 95% interval holds the
population value, for

1. ``exact maps, q-resample``: Q drawn, the exact maps applied (the unit test's setting);
2. ``entropic maps, q-resample``: Q and the P_i drawn, maps fitted by ``fit_geodesic``;
3. ``entropic maps, refit``: the same, with refits (``--refit-reps`` draws of
   ``--refit-b`` refits each, as Ray tasks);

and prints the estimator's bias (mean estimate minus population, over draws) beside the
mean bootstrap bias and width, and the coverage of the bias-corrected interval.

Part ``bundled`` (the app's default scenario: MNIST <- Fashion-MNIST, USPS, KMNIST, 32x32):
interval widths at n = 500 and n = 2000 (same B and seed), the cost of 200 Q-resampling
replicates beside a cold fit, refit cost per replicate sequentially and on Ray, and the
widths of both bootstraps at n = 500 (which part of the variance dominates).

Run: ``.venv/bin/python benchmarks/bench_uncertainty.py [--part calibration|bundled|all]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from geoviz.backend import DiskCache, configure_torch  # noqa: E402
from geoviz.data.dataset import LabeledDataset  # noqa: E402
from geoviz.geodesic.config import GeodesicConfig  # noqa: E402
from geoviz.geodesic.distances import objective, optimal_weights, two_q_distances  # noqa: E402
from geoviz.geodesic.pipeline import fit_geodesic  # noqa: E402
from geoviz.geodesic.refit import bootstrap_refit  # noqa: E402
from geoviz.geodesic.uncertainty import bootstrap_q  # noqa: E402
from geoviz.ot.otdd_cost import OTDDConfig  # noqa: E402

MEANS = [np.array([1.0, 0.0]), np.array([-0.5, 0.9]), np.array([-0.5, -0.9])]
MATS = [
    np.array([[1.2, 0.1], [0.1, 0.8]]),
    np.array([[0.9, -0.2], [-0.2, 1.1]]),
    np.array([[1.0, 0.0], [0.0, 1.3]]),
]


def population() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    eye = np.eye(2)
    w_t = np.array([mu @ mu + np.sum((a - eye) ** 2) for mu, a in zip(MEANS, MATS, strict=True)])
    w_b = np.array(
        [
            [
                np.sum((MEANS[i] - MEANS[j]) ** 2) + np.sum((MATS[i] - MATS[j]) ** 2)
                for j in range(3)
            ]
            for i in range(3)
        ]
    )
    return w_t, w_b, optimal_weights(w_t, w_b)


def _labelled(x: np.ndarray, name: str, rng: np.random.Generator) -> LabeledDataset:
    y = rng.integers(0, 2, size=len(x))
    y[:2] = (0, 1)
    return LabeledDataset(
        torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y), ("a", "b"), name=name
    )


def _exact_distances(x: np.ndarray):
    n = x.shape[0]
    ones = torch.ones(n, 1, dtype=torch.float64)
    return two_q_distances(
        torch.from_numpy(x),
        torch.zeros(n, dtype=torch.long),
        [torch.from_numpy(mu + x @ a.T) for mu, a in zip(MEANS, MATS, strict=True)],
        [ones] * 3,
        [torch.zeros(1, 1)] * 3,
        {(i, j): torch.zeros(1, 1) for i in range(3) for j in range(i + 1, 3)},
    )


def _fit(seed: int, n: int):
    rng = np.random.default_rng(seed)
    q = _labelled(rng.normal(size=(n, 2)), "Q", rng)
    refs = [
        _labelled(mu + rng.normal(size=(n, 2)) @ a.T, f"P{i + 1}", rng)
        for i, (mu, a) in enumerate(zip(MEANS, MATS, strict=True))
    ]
    cfg = GeodesicConfig(otdd=OTDDConfig(lambda_y=0.0))
    return fit_geodesic(q, refs, cfg, cache=DiskCache(enabled=False))


class Tally:
    """Coverage, widths and biases of one setting over draws."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple[float, float, float, float, float, float]]] = {}

    def add(self, name: str, truth: float, interval) -> None:  # interval: Interval, scalar
        lo, hi = float(interval.low), float(interval.high)
        clo, chi = (float(v) for v in interval.corrected)
        self.rows.setdefault(name, []).append(
            (
                float(lo <= truth <= hi),
                float(clo <= truth <= chi),
                hi - lo,
                float(interval.estimate) - truth,
                float(interval.bias),
                truth,
            )
        )

    def print(self, setting: str, draws: int) -> None:
        for name, rows in self.rows.items():
            r = np.array(rows)
            print(
                f"| {setting} | {name} | {draws} | {r[:, 0].mean():.3f} | {r[:, 1].mean():.3f} "
                f"| {r[:, 2].mean():.4g} | {r[:, 3].mean():+.4g} | {r[:, 4].mean():+.4g} |",
                flush=True,
            )


def _tally(tally: Tally, boot, w_t, a_pop, f_pop) -> None:
    w = boot.w_to_target_interval()
    a = boot.a_hat_interval()
    f = boot.objective_interval(a_pop)
    for i in range(3):
        tally.add(f"W_{i + 1}", w_t[i], _pick(w, i))
        tally.add(f"â_{i + 1}", a_pop[i], _pick(a, i))
    tally.add("W²(P_a*, Q)", f_pop, f)


def _pick(interval, i):
    from geoviz.geodesic.uncertainty import Interval

    return Interval(
        interval.estimate[i], interval.low[i], interval.high[i], interval.bias[i], interval.level
    )


def calibration(reps: int, refit_reps: int, refit_b: int, n: int, backend: str) -> None:
    w_t, w_b, a_pop = population()
    f_pop = float(objective(a_pop, w_t, w_b))
    print(f"population: W_i = {np.round(w_t, 4)}, â = {np.round(a_pop, 4)}, f(â) = {f_pop:.4f}")
    print()
    print(
        "| setting | quantity | draws | coverage (percentile) | coverage (bias-corrected) "
        "| mean width | estimator bias (vs population) | mean bootstrap bias |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    exact = Tally()
    if reps == 0:  # only the refits (``--reps 0``)
        _refits(refit_reps, refit_b, n, backend, w_t, a_pop, f_pop)
        return
    for r in range(reps):
        x = np.random.default_rng(10_000 + r).normal(size=(400, 2))
        _tally(exact, bootstrap_q(_exact_distances(x), 200, seed=r), w_t, a_pop, f_pop)
    exact.print("exact maps, q-resample, n=400, B=200", reps)
    q_tally, t_fit, t_boot = Tally(), 0.0, 0.0
    for r in range(reps):
        t0 = time.perf_counter()
        fit = _fit(20_000 + r, n)
        t1 = time.perf_counter()
        boot = fit.bootstrap(200, seed=r)
        t_boot += time.perf_counter() - t1
        t_fit += t1 - t0
        _tally(q_tally, boot, w_t, a_pop, f_pop)
    q_tally.print(f"entropic maps, q-resample, n={n}, B=200", reps)
    t_refit = _refits(refit_reps, refit_b, n, backend, w_t, a_pop, f_pop)
    print()
    print(
        f"time per draw (n={n}): fit {t_fit / reps:.2f} s, 200 q-resample replicates "
        f"{t_boot / reps:.3f} s, {refit_b} refits {t_refit:.1f} s ({backend})"
    )


def _refits(refit_reps, refit_b, n, backend, w_t, a_pop, f_pop) -> float:
    """The refit setting; returns the mean seconds of one draw's refits."""
    refit, t_refit = Tally(), 0.0
    for r in range(refit_reps):
        fit = _fit(20_000 + r, n)
        t0 = time.perf_counter()
        boot = bootstrap_refit(
            fit, refit_b, seed=r, backend=backend, cache=DiskCache(enabled=False)
        )
        t_refit += time.perf_counter() - t0
        _tally(refit, boot, w_t, a_pop, f_pop)
        if (r + 1) % 25 == 0:
            print(f"({r + 1} draws)", flush=True)
    refit.print(f"entropic maps, refit, n={n}, B={refit_b}", refit_reps)
    return t_refit / max(refit_reps, 1)


def bundled(backend: str) -> None:
    from geoviz.data.preprocess import harmonize
    from geoviz.data.registry import load_dataset

    def data(n: int):
        q = load_dataset("mnist", n=n, seed=0)
        refs = [load_dataset(k, n=n, seed=0) for k in ("fashion_mnist", "usps", "kmnist")]
        return harmonize([q, *refs], size=32, channels="grey")

    print(
        "| n | fit (cold) | 200 q-resample replicates | share | width W_i (mean) | width â_i (mean) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    widths = {}
    fits = {}
    for n in (500, 2000):
        q, *refs = data(n)
        t0 = time.perf_counter()
        fit = fit_geodesic(q, refs, cache=DiskCache(enabled=False))
        t1 = time.perf_counter()
        boot = fit.bootstrap(200, seed=0)
        t2 = time.perf_counter()
        fits[n] = fit
        ww = boot.w_to_target_interval().width
        wa = boot.a_hat_interval().width
        widths[n] = (ww, wa)
        print(
            f"| {n} | {t1 - t0:.1f} s | {t2 - t1:.2f} s | {100 * (t2 - t1) / (t1 - t0):.1f}% "
            f"| {ww.mean():.4g} | {wa.mean():.4g} |",
            flush=True,
        )
    ratio_w = widths[500][0] / widths[2000][0]
    ratio_a = widths[500][1] / np.maximum(widths[2000][1], 1e-12)
    print(f"\nwidth ratio n=500 / n=2000: W_i {np.round(ratio_w, 2)}, â_i {np.round(ratio_a, 2)}")
    print(f"â at n=2000: {np.round(fits[2000].a_hat, 4)}")
    # refit cost and the two variances at n = 500
    fit = fits[500]
    print("\n| refits at n=500 | backend | replicates | wall | per replicate |")
    print("|---|---|---:|---:|---:|")
    for name in ("sequential", backend):
        t0 = time.perf_counter()
        boot_r = bootstrap_refit(fit, 20, seed=1, backend=name, cache=DiskCache(enabled=False))
        wall = time.perf_counter() - t0
        print(f"| refit | {name} | 20 | {wall:.1f} s | {wall / 20:.2f} s |", flush=True)
    boot_q = fit.bootstrap(200, seed=0)
    print("\n| n=500 | W_i width | â_i width | W_i bootstrap bias |")
    print("|---|---|---|---|")
    for label, b in (("q-resample (B=200)", boot_q), ("refit (B=20)", boot_r)):
        w = b.w_to_target_interval()
        print(
            f"| {label} | {np.round(w.width, 4)} | {np.round(b.a_hat_interval().width, 3)} "
            f"| {np.round(w.bias, 4)} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=("calibration", "bundled", "all"), default="all")
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--refit-reps", type=int, default=50)
    parser.add_argument("--refit-b", type=int, default=40)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--backend", default="ray")
    args = parser.parse_args()
    configure_torch(threads=1, flush_denormal=True)
    if args.part in ("calibration", "all"):
        calibration(args.reps, args.refit_reps, args.refit_b, args.n, args.backend)
    if args.part in ("bundled", "all"):
        print()
        bundled(args.backend)


if __name__ == "__main__":
    main()
