"""Benchmark: OTDD coupling + barycentric map, geoviz vs POT, MNIST -> Fashion-MNIST.

For each size N (points per side) this runs, each in a fresh subprocess so the
peak resident memory is clean:

* **geoviz**: ``otdd(target, reference, OTDDConfig(epsilon), barycentric=True)``
  end to end: Gaussian label distances, the ``N x N`` OTDD cost (feature +
  label term) and the stabilised Sinkhorn to an L1 marginal error ``<= tol``,
  the coupling and the barycentric projection (features and soft labels);
* **POT** ``ot.sinkhorn`` (``--pot-method``, default ``sinkhorn_log``) on the
  *same* cost matrix (built by geoviz, including the label term) with the same
  absolute epsilon, followed by the same barycentric projection. POT's stopping
  rule is the L2 norm of the column-marginal violation, checked every 10
  iterations; ``stopThr = tol / sqrt(N)`` makes its L1 error comparable
  (``||.||_1 <= sqrt(N) ||.||_2``); the table reports POT's *actual* L1
  marginal error, computed from the returned plan.

``--full`` adds batched runs on the full training sets (60000 vs 60000):
batches of ``--batch-size`` target points, each against a fresh random subsample
of the reference of each size in ``--full-subsamples`` (paper appendix; ``0`` =
the whole reference per batch, memory ``~2 B 60000 * 4`` bytes). POT is not run
there (a 60000^2 float32 matrix is 14 GB).

Columns: wall time (s; in brackets the time spent inside the Sinkhorn solver),
peak RSS of the worker process (MB, ``ru_maxrss``) and its increase over the
RSS after loading the data (~0.4 GB for Python, torch and the arrays), Sinkhorn
iterations, L1 marginal error, OTDD value ``<pi, C>``, and the 1-min load
average before/after (the cores are shared: other processes inflate times).

Usage::

    .venv/bin/python benchmarks/bench_otdd.py                      # N = 2000, 5000, 10000
    .venv/bin/python benchmarks/bench_otdd.py --sizes 2000 --no-pot
    .venv/bin/python benchmarks/bench_otdd.py --sizes "" --full    # only the 60000 batched run
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

DATA_DIR = Path(
    os.environ.get(
        "GEOVIZ_NIST_DIR", Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "nist"
    )
)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _load(name: str, n: int | None):
    import numpy as np

    from geoviz.data.dataset import LabeledDataset

    with np.load(DATA_DIR / f"{name}.npz") as data:
        x = data["x_train"]
        y = data["y_train"]
        classes = tuple(str(c) for c in data["classes"])
    if n is not None:
        x, y = x[:n], y[:n]
    feats = x.reshape(len(x), -1).astype(np.float32) / 255.0
    return LabeledDataset(feats, y, classes, name=name, image_shape=(1, 28, 28))


def _marginal_error(plan) -> float:

    n, m = plan.shape
    rows = plan.sum(1).double()  # sum(dtype=float64) would copy the whole plan
    cols = plan.sum(0).double()
    return float((rows - 1.0 / n).abs().sum() + (cols - 1.0 / m).abs().sum())


def worker(args: argparse.Namespace) -> dict:
    """Run one measurement in this (fresh) process and return a result row."""
    import torch

    from geoviz.ot.labels import label_distances
    from geoviz.ot.otdd import OTDDConfig, ground_cost, mean_ground_cost, otdd

    otdd_module = sys.modules["geoviz.ot.otdd"]  # (the package attribute is the function)
    sink_time = [0.0]
    inner = otdd_module.sinkhorn

    def timed_sinkhorn(*a, **k):
        t = time.perf_counter()
        out = inner(*a, **k)
        sink_time[0] += time.perf_counter() - t
        return out

    otdd_module.sinkhorn = timed_sinkhorn
    load0 = os.getloadavg()[0]
    n = None if args.n == 0 else args.n
    target = _load("mnist", n)
    reference = _load("fashion_mnist", n)
    rss0 = _rss_mb()
    row: dict = {"solver": args.worker, "n": target.n_samples, "threads": torch.get_num_threads()}
    if args.worker.startswith("geoviz"):
        sub = None if args.reference_subsample == 0 else args.reference_subsample
        full = args.worker == "geoviz"
        options = {
            "geoviz": ({}, f"geoviz (tol={args.tol:g})"),
            "geoviz-batched": (
                {"batch_size": args.batch_size, "reference_subsample": sub},
                f"geoviz batched B={args.batch_size}, ref={sub or 'all'}",
            ),
            "geoviz-streamed": (
                {"stream_reference": True},
                "geoviz streamed (B x 2048 cost blocks)",
            ),
        }
        extra, label = options[args.worker]
        cfg = OTDDConfig(epsilon=args.epsilon, tol=args.tol, device="cpu", **extra)
        t0 = time.perf_counter()
        res = otdd(target, reference, cfg, barycentric=True, keep_coupling=full)
        row["time"] = time.perf_counter() - t0
        row.update(
            iters=res.n_iter,
            marginal_error=res.marginal_error,
            value=res.cost,
            converged=res.converged,
            eps_abs=res.epsilon_abs,
            solver=label,
        )
        if args.worker != "geoviz-streamed":  # the streamed solver is not the dense sinkhorn
            row["time_sinkhorn"] = sink_time[0]
        if args.worker == "geoviz-batched":
            row["batches"] = res.n_batches
        if res.coupling is not None:
            row["marginal_error_check"] = _marginal_error(res.coupling)
    else:  # POT on the same cost matrix
        import ot

        t0 = time.perf_counter()
        lab = label_distances(target, reference, device="cpu")
        eps_abs = args.epsilon * mean_ground_cost(target, reference, lab)
        cost = ground_cost(
            target.features, target.labels, reference.features, reference.labels, lab
        )
        t_cost = time.perf_counter() - t0
        a = torch.full((target.n_samples,), 1.0 / target.n_samples)
        b = torch.full((reference.n_samples,), 1.0 / reference.n_samples)
        stop = args.tol / math.sqrt(reference.n_samples)
        t1 = time.perf_counter()
        with __import__("warnings").catch_warnings(record=True) as caught:
            __import__("warnings").simplefilter("always")
            plan, log = ot.sinkhorn(
                a,
                b,
                cost,
                eps_abs,
                method=args.pot_method,
                stopThr=stop,
                numItermax=args.pot_max_iter,
                log=True,
            )
        t_sink = time.perf_counter() - t1
        rows = plan.sum(1, keepdim=True)
        _mapped = (plan @ reference.features) / rows
        _soft = (plan @ reference.one_hot()) / rows
        row["time"] = time.perf_counter() - t0
        row["time_sinkhorn"] = t_sink
        row["time_cost"] = t_cost
        row["iters"] = int(log.get("niter", log.get("n_iter", -1)))
        row["marginal_error"] = _marginal_error(plan)
        row["value"] = float((plan.double() * cost.double()).sum())
        row["converged"] = not any("did not converge" in str(w.message) for w in caught)
        row["solver"] = f"POT {args.pot_method} (stopThr={stop:.1e})"
        row["eps_abs"] = eps_abs
    row["peak_rss_mb"] = _rss_mb()
    row["rss_before_mb"] = rss0
    row["load"] = f"{load0:.1f}/{os.getloadavg()[0]:.1f}"
    return row


def _run(kind: str, n: int, args: argparse.Namespace, tol: float | None = None) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        kind,
        "--n",
        str(n),
        "--epsilon",
        str(args.epsilon),
        "--tol",
        str(args.tol if tol is None else tol),
        "--pot-method",
        args.pot_method,
        "--pot-max-iter",
        str(args.pot_max_iter),
        "--batch-size",
        str(args.batch_size),
        "--reference-subsample",
        str(args.reference_subsample),
    ]
    env = dict(os.environ)
    if args.threads:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = str(args.threads)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        return {
            "solver": kind,
            "n": n,
            "error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed",
        }
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _table(rows: list[dict]) -> str:
    head = (
        "| N | solver | time (s) | peak RSS (MB) | +RSS (MB) | iters | marginal err (L1) | OTDD <pi,C> "
        "| load before/after |"
    )
    out = [head, "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['n']} | {r['solver']} | failed: {r['error']} | | | | | | |")
            continue
        t = f"{r['time']:.2f}"
        if "time_sinkhorn" in r:
            t += f" (Sinkhorn {r['time_sinkhorn']:.2f})"
        conv = "" if r.get("converged", True) else " (not converged)"
        out.append(
            f"| {r['n']} | {r['solver']} | {t} | {r['peak_rss_mb']:.0f} | "
            f"{r['peak_rss_mb'] - r['rss_before_mb']:.0f} | {r['iters']} | "
            f"{r['marginal_error']:.1e}{conv} | {r['value']:.4f} | {r['load']} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--sizes", default="2000,5000,10000", help="comma-separated N per side ('' for none)"
    )
    p.add_argument("--full", action="store_true", help="add the batched 60000 vs 60000 run")
    p.add_argument(
        "--epsilon", type=float, default=0.05, help="relative epsilon (x mean ground cost)"
    )
    p.add_argument("--tol", type=float, default=1e-4, help="L1 marginal tolerance")
    p.add_argument("--no-pot", action="store_true", help="skip POT")
    p.add_argument(
        "--geoviz-extra-tols",
        default="1e-6",
        help="extra geoviz runs at these tolerances (equal-accuracy rows vs POT; '' for none)",
    )
    p.add_argument(
        "--pot-method",
        default="sinkhorn_log",
        help="POT method (sinkhorn_log, sinkhorn_stabilized, sinkhorn)",
    )
    p.add_argument("--pot-max-iter", type=int, default=5000)
    p.add_argument("--batch-size", type=int, default=10000)
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="pin torch/BLAS threads in the workers (0: library defaults); 1 is steadier on a loaded box",
    )
    p.add_argument("--reference-subsample", type=int, default=10000, help=argparse.SUPPRESS)
    p.add_argument(
        "--full-subsamples",
        default="10000",
        help="comma list of per-batch reference subsample sizes for --full (0: whole reference)",
    )
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--streamed-sizes",
        default="",
        help="comma-separated N for the streamed mode (stream_reference=True; '' for none)",
    )
    p.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    if not (DATA_DIR / "mnist.npz").exists():
        print(f"data not found in {DATA_DIR} (set GEOVIZ_NIST_DIR)", file=sys.stderr)
        return 2
    rows: list[dict] = []
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    extra_tols = [float(t) for t in args.geoviz_extra_tols.split(",") if t.strip()]
    for n in sizes:
        jobs = [("geoviz", None)] + [("geoviz", t) for t in extra_tols]
        if not args.no_pot:
            jobs.append(("pot", None))
        for kind, tol in jobs:
            row = _run(kind, n, args, tol)
            rows.append(row)
            print("done:", _table([row]).splitlines()[-1], file=sys.stderr, flush=True)
    for n in [int(s) for s in args.streamed_sizes.split(",") if s.strip()]:
        row = _run("geoviz-streamed", n, args)
        rows.append(row)
        print("done:", _table([row]).splitlines()[-1], file=sys.stderr, flush=True)
    if args.full:
        for sub in [int(x) for x in args.full_subsamples.split(",") if x.strip()]:
            row = _run(
                "geoviz-batched",
                0,
                argparse.Namespace(**{**vars(args), "reference_subsample": sub}),
            )
            rows.append(row)
            print("done:", _table([row]).splitlines()[-1], file=sys.stderr, flush=True)
    threads = rows[0].get("threads", "?") if rows else "?"
    print(
        f"\nMNIST -> Fashion-MNIST (train), 784-d, epsilon={args.epsilon} x mean cost, tol={args.tol}, "
        f"{os.cpu_count()} CPUs, {threads} torch thread(s)\n"
    )
    print(_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
