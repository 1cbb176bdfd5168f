"""Compare two checkouts of geoviz on the OTDD benchmark: speed and values, in one run.

Each checkout's own ``benchmarks/bench_otdd.py`` worker (the ``geoviz`` row: ``otdd`` with
the ``auto`` kernel and barycentric outputs, MNIST -> Fashion-MNIST, first N training
images) runs in a fresh subprocess with ``PYTHONPATH`` set to that checkout. The runs are
interleaved (before, after, before, after, ...) so that drifting load on shared cores
falls on both alike; the table reports the fastest run of each (the least disturbed one),
their ratio, and the OTDD values, which must agree (relative difference ~1e-6 or less:
the code paths are the same arithmetic).

Usage::

    .venv/bin/python benchmarks/compare_trees.py --before ../wt-before --after . \\
        --sizes 2000,5000,10000 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path


def run_worker(tree: Path, n: int, args: argparse.Namespace) -> dict[str, object]:
    """One ``bench_otdd.py --worker geoviz`` row of ``tree`` at size ``n`` (fresh process)."""
    cmd = [
        sys.executable, str(tree / "benchmarks" / "bench_otdd.py"), "--worker", "geoviz",
        "--n", str(n), "--epsilon", str(args.epsilon), "--tol", str(args.tol),
        "--device", args.device,
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(tree))
    if args.threads:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = str(args.threads)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{tree} at N={n} failed:\n{proc.stderr[-2000:]}")
    row: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return row


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parents[1]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, required=True, help="checkout A (the reference)")
    p.add_argument("--after", type=Path, default=here, help="checkout B (default: this one)")
    p.add_argument("--sizes", default="2000,5000,10000", help="comma-separated N")
    p.add_argument("--repeats", type=int, default=2, help="runs per checkout and size")
    p.add_argument("--epsilon", type=float, default=1e-3, help="x mean ground cost")
    p.add_argument("--tol", type=float, default=1e-4, help="L1 marginal tolerance")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0, help="pin BLAS/OpenMP threads (0: default)")
    args = p.parse_args(argv)
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    lines = [
        "| N | before s | after s | after/before | iters before/after "
        "| OTDD before | OTDD after | rel. diff | load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for n in [int(s) for s in args.sizes.split(",") if s.strip()]:
        runs: dict[str, list[dict[str, object]]] = {"before": [], "after": []}
        for _ in range(args.repeats):
            for name, tree in trees.items():  # A/B/A/B: load drift falls on both
                row = run_worker(tree, n, args)
                runs[name].append(row)
                print(f"N={n} {name}: {float(row['time']):.2f} s", file=sys.stderr, flush=True)
        best = {k: min(v, key=lambda r: float(r["time"])) for k, v in runs.items()}
        t_a, t_b = float(best["before"]["time"]), float(best["after"]["time"])
        v_a, v_b = float(best["before"]["value"]), float(best["after"]["value"])
        loads = " ".join(str(r["load"]) for k in ("before", "after") for r in runs[k])
        lines.append(
            f"| {n} | {t_a:.2f} | {t_b:.2f} | {t_b / t_a:.3f} | "
            f"{best['before']['iters']}/{best['after']['iters']} | {v_a:.9g} | {v_b:.9g} | "
            f"{abs(v_b - v_a) / abs(v_a):.1e} | {loads} |"
        )
    print(
        f"\nOTDD MNIST -> Fashion-MNIST, epsilon = {args.epsilon:g} x mean cost, tol = "
        f"{args.tol:g}, {args.device}, fastest of {args.repeats} interleaved runs each\n"
        f"before = {trees['before']}\nafter  = {trees['after']}\n"
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
