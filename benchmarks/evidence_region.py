"""Does the stored simplex study's accuracy-best grid point fall inside the region as good as â?

Issue 23, item 5. Rebuilds the geodesic behind a stored study (``assets/evidence/study_<target>.json``,
made by ``bench_transfer.py --preprocess box``: N = 5000, 20-shot target pseudo-labelled by
1-NN, epsilon 1e-3, data seed 0), checks that it is the same geodesic (its ``W^2(P_a, Q)`` at
the 36 grid points equals the stored ``objective``), draws 200 Q-resampling replicates and
writes ``assets/evidence/region_<target>.json``: â with its interval, every grid point's
gap interval and "as good as â" flag, and where the accuracy-best point lies. The Evidence
page shows it beside the study.

Run: ``.venv/bin/python benchmarks/evidence_region.py --target mnist`` (needs
``../shared/data``; a few minutes per target on 2 cores, less with the maps cached).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from bench_transfer import _geodesic, _task  # noqa: E402

from geoviz.backend import configure_torch  # noqa: E402
from geoviz.transfer.study import GridStudy  # noqa: E402
from geoviz.vocabulary import DEFAULT_EPSILON  # noqa: E402

REPLICATES = 200


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="mnist")
    parser.add_argument("--replicates", type=int, default=REPLICATES)
    args = parser.parse_args()
    configure_torch(threads=2, flush_denormal=True)
    stored_path = ROOT / "assets" / "evidence" / f"study_{args.target}.json"
    study = GridStudy.from_json(stored_path.read_text())
    ns = argparse.Namespace(
        n=5000,
        n_test=5000,
        data_seed=0,
        preprocess="box",
        epsilon=DEFAULT_EPSILON,
        neural_preset="cpu",
    )
    start = time.perf_counter()
    task = _task(args.target, study.k, ns)
    result = _geodesic(task, ns)
    fit_s = time.perf_counter() - start
    weights = np.array([p.weights for p in study.points])
    stored = np.array([p.objective for p in study.points])
    ours = result.objective(weights)
    rel = float(np.max(np.abs(ours - stored) / np.abs(stored)))
    if rel > 1e-4:
        raise SystemExit(f"not the stored study's geodesic: objective differs by {rel:.2e}")
    boot = result.bootstrap(args.replicates, seed=0)
    gap = boot.gap_interval(weights)
    good = boot.as_good_as_a_hat(weights)
    acc = np.array([p.mean_accuracy for p in study.points])
    best = int(np.argmax(acc))
    a_int = boot.a_hat_interval()
    out = {
        "target": args.target,
        "references": list(study.reference_names),
        "method": boot.method,
        "replicates": boot.replicates,
        "level": boot.level,
        "seed": boot.seed,
        "n_samples": boot.n_samples,
        "a_hat": result.a_hat.tolist(),
        "a_hat_low": a_int.low.tolist(),
        "a_hat_high": a_int.high.tolist(),
        "objective_max_rel_diff_vs_stored": rel,
        "points": [
            {
                "weights": weights[k].tolist(),
                "objective": float(stored[k]),
                "gap_low": float(gap.low[k]),
                "gap_high": float(gap.high[k]),
                "as_good_as_a_hat": bool(good[k]),
                "accuracy_mean": float(acc[k]),
            }
            for k in range(len(weights))
        ],
        "best_accuracy_index": best,
        "best_accuracy_inside_region": bool(good[best]),
        "points_inside_region": int(good.sum()),
    }
    path = ROOT / "assets" / "evidence" / f"region_{args.target}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    inside = [k for k in range(len(weights)) if good[k]]
    print(f"geodesic rebuilt in {fit_s:.0f} s; objective vs stored: max rel diff {rel:.1e}")
    print(
        f"â = {np.round(result.a_hat, 4)}, interval low {np.round(a_int.low, 4)}, high {np.round(a_int.high, 4)}"
    )
    print(
        f"{len(inside)} of {len(weights)} grid points as good as â: {[weights[k].round(3).tolist() for k in inside]}"
    )
    print(
        f"accuracy-best grid point {weights[best].round(3).tolist()} (mean accuracy {acc[best]:.4f}): "
        f"{'inside' if good[best] else 'outside'} the region "
        f"(gap interval [{gap.low[best]:.4g}, {gap.high[best]:.4g}])"
    )
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
