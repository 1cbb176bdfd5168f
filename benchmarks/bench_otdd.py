"""Benchmark: sharp OTDD coupling + barycentric map, geoviz vs POT, MNIST -> Fashion-MNIST.

Every row runs in a fresh subprocess (clean peak memory) on the first N training
images of MNIST (target) and Fashion-MNIST (reference), 784-d, at the **same
absolute epsilon** ``eps_abs = epsilon x mean ground cost`` (default epsilon =
geoviz's default, 1e-3: sharp maps) and the same L1 marginal tolerance:

* ``geoviz``: ``otdd(target, reference, OTDDConfig(epsilon, tol), barycentric=True)``
  end to end (Gaussian label distances, the N x N OTDD cost, Sinkhorn with the
  ``auto`` kernel, barycentric projection and soft labels, plan-row statistics);
* ``geoviz dense``: the same with ``solver="dense"`` (no kernel truncation,
  no multiscale start: the engine before the sparse kernel), as a yardstick;
* ``POT <method>``: ``ot.sinkhorn(a, b, C, eps_abs, method=...)`` on the *same*
  cost matrix (built by geoviz, with the label term) on the same device
  (torch backend), then the same barycentric projection. POT stops on the L2
  norm of the column-marginal violation; ``stopThr = tol / sqrt(N)`` makes its
  L1 error comparable (``||.||_1 <= sqrt(N) ||.||_2``). The table reports POT's
  *actual* L1 marginal error, computed from the returned plan. A POT row that
  runs longer than ``--pot-timeout`` seconds is killed and reported as such.

``--full`` adds the full training sets (60000 vs 60000) in batches of
``--full-batch`` target points, each against the whole reference (paper
appendix "Complexity"), each against the whole reference and/or a fresh random
subsample of ``--full-subsample`` reference points (memory ``~B x N_ref x 4``
bytes for the cost, no 60000^2 array unless ``--full-batch 60000``). Against the
whole reference a batch of B target points must spread its mass over 60000/B
times as many reference points, so its maps are blurrier by construction; a
subsample of B reference points keeps each batch balanced (and sharp).

Columns: wall time (s; in brackets the part inside Sinkhorn), peak memory of
the worker (CPU: resident set, ``ru_maxrss``; CUDA: ``max_memory_allocated``;
on CUDA a tiny untimed OTDD first creates the context and loads the kernels),
iterations, the L1 marginal error measured on the returned plan, the plan's
sharpness (median plan-row perplexity = reference points averaged per mapped
point, and the mean largest soft label), the OTDD value ``<pi, C>`` and the
1-min load average before/after (the cores are shared).

Usage::

    .venv/bin/python benchmarks/bench_otdd.py                           # N = 2000, 5000, 10000 on CPU
    .venv/bin/python benchmarks/bench_otdd.py --sizes "" --full         # only 60000 vs 60000
    .venv/bin/python benchmarks/bench_otdd.py --device cuda --full --full-batch 60000
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


def _plan_stats(plan, onehot) -> dict:
    """Marginal error, median row perplexity and mean max soft label of a dense plan."""
    import torch

    n, m = plan.shape
    rows = plan.sum(1).double()
    cols = plan.sum(0).double()
    err = float((rows - 1.0 / n).abs().sum() + (cols - 1.0 / m).abs().sum())
    perp = torch.empty(n, dtype=torch.float64)
    for r0 in range(0, n, 1024):
        q = plan[r0 : r0 + 1024].double()
        q = q / q.sum(1, keepdim=True)
        perp[r0 : r0 + 1024] = (-(q * q.clamp_min(1e-300).log()).sum(1)).exp().cpu()
    soft = (plan @ onehot.to(plan.dtype)).double()
    soft = soft / soft.sum(1, keepdim=True)
    return {
        "marginal_error": err,
        "neighbours": float(perp.median()),
        "confidence": float(soft.max(1).values.mean()),
    }


def _peak_mb(device: str) -> float:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return _rss_mb()


def worker(args: argparse.Namespace) -> dict:
    """Run one measurement in this (fresh) process and return a result row."""
    import torch

    from geoviz.ot.labels import label_distances
    from geoviz.ot.otdd import otdd
    from geoviz.ot.otdd_cost import OTDDConfig
    from geoviz.ot.sinkhorn import Sinkhorn

    sink_time = [0.0]
    depth = [0]  # the multiscale start calls a solver inside the solver: time the outer call
    inner = Sinkhorn.__call__

    def timed_call(self, *a, **k):
        depth[0] += 1
        t = time.perf_counter()
        try:
            out = inner(self, *a, **k)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
        finally:
            depth[0] -= 1
        if depth[0] == 0:
            sink_time[0] += time.perf_counter() - t
        return out

    if args.device.startswith("cuda"):
        # create the CUDA context and load the kernels outside the timed region
        tiny = _load("mnist", 300), _load("fashion_mnist", 300)
        otdd(*tiny, OTDDConfig(device=args.device), barycentric=True, keep_coupling=False)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    Sinkhorn.__call__ = timed_call
    load0 = os.getloadavg()[0]
    n = None if args.n == 0 else args.n
    target = _load("mnist", n)
    reference = _load("fashion_mnist", n)
    row: dict = {
        "n": target.n_samples,
        "device": args.device,
        "threads": torch.get_num_threads(),
    }
    if args.worker.startswith("geoviz"):
        sub = int(str(args.full_subsample).split(",")[0])
        options = {
            "geoviz": ({}, "geoviz auto"),
            "geoviz-dense": ({"solver": "dense"}, "geoviz dense kernel"),
            "geoviz-batched": (
                {
                    "batch_size": args.full_batch,
                    "reference_subsample": sub or None,
                },
                f"geoviz auto, batches of {args.full_batch} vs "
                + (f"{sub} random reference points" if sub else "all"),
            ),
            "geoviz-streamed": ({"stream_reference": True}, "geoviz streamed (no N x N cost)"),
        }
        extra, label = options[args.worker]
        cfg = OTDDConfig(epsilon=args.epsilon, tol=args.tol, device=args.device, **extra)
        t0 = time.perf_counter()
        res = otdd(target, reference, cfg, barycentric=True, keep_coupling=False)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        row.update(
            time=time.perf_counter() - t0,
            time_sinkhorn=sink_time[0],
            iters=res.n_iter,
            marginal_error=res.marginal_error,
            value=res.cost,
            converged=res.converged,
            eps_abs=res.epsilon_abs,
            neighbours=res.effective_neighbours,
            confidence=res.label_confidence,
            solver=f"{label} ({res.solver_mode})",
            batches=res.n_batches,
        )
    else:  # POT on the same cost matrix, same device
        import ot

        method = args.worker.split(":", 1)[1]
        dev = torch.device(args.device)
        t0 = time.perf_counter()
        lab = label_distances(target, reference, device=dev)
        # the same cost and absolute epsilon as geoviz's (resolved on the cost geometry)
        geom = OTDDConfig(epsilon=args.epsilon).cost_geometry(target, reference, lab, device=dev)
        eps_abs = geom.epsilon_abs
        cost = geom.dense()
        a = torch.full((target.n_samples,), 1.0 / target.n_samples, device=dev)
        b = torch.full((reference.n_samples,), 1.0 / reference.n_samples, device=dev)
        stop = args.tol / math.sqrt(reference.n_samples)
        t1 = time.perf_counter()
        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plan, log = ot.sinkhorn(
                a,
                b,
                cost,
                eps_abs,
                method=method,
                stopThr=stop,
                numItermax=args.pot_max_iter,
                log=True,
            )
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t_sink = time.perf_counter() - t1
        rows = plan.sum(1, keepdim=True)
        _mapped = (plan @ reference.features.to(dev)) / rows
        onehot = reference.one_hot().to(dev)
        stats = _plan_stats(plan, onehot)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        row.update(
            time=time.perf_counter() - t0,
            time_sinkhorn=t_sink,
            iters=int(log.get("niter", log.get("n_iter", -1))),
            value=float((plan.double() * cost.double()).sum()),
            converged=not any("converge" in str(w.message) for w in caught)
            and stats["marginal_error"] <= args.tol,
            solver=f"POT {method}",
            eps_abs=eps_abs,
            **stats,
        )
    row["peak_mb"] = _peak_mb(args.device)
    row["load"] = f"{load0:.1f}/{os.getloadavg()[0]:.1f}"
    return row


def _run(kind: str, n: int, args: argparse.Namespace, timeout: float | None = None) -> dict:
    cmd = [
        sys.executable, __file__, "--worker", kind, "--n", str(n),
        "--epsilon", str(args.epsilon), "--tol", str(args.tol),
        "--pot-max-iter", str(args.pot_max_iter), "--full-batch", str(args.full_batch),
        "--full-subsample", str(args.full_subsample),
        "--device", args.device,
    ]  # fmt: skip
    env = dict(os.environ)
    if args.threads:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = str(args.threads)
    label = kind if not kind.startswith("pot:") else f"POT {kind[4:]}"
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, check=False, env=env, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"solver": label, "n": n, "error": f"killed after {timeout:.0f} s"}
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"
        return {"solver": label, "n": n, "error": tail}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _table(rows: list[dict]) -> str:
    head = (
        "| N | solver | time (s) [Sinkhorn] | peak mem (MB) | iters | marginal err (L1) "
        "| neighbours (median) | label confidence | OTDD <pi,C> | load |"
    )
    out = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['n']} | {r['solver']} | {r['error']} | | | | | | | |")
            continue
        conv = "" if r.get("converged", True) else " (not converged)"
        out.append(
            f"| {r['n']} | {r['solver']} | {r['time']:.2f} [{r['time_sinkhorn']:.2f}] | "
            f"{r['peak_mb']:.0f} | {r['iters']} | {r['marginal_error']:.1e}{conv} | "
            f"{r['neighbours']:.2f} | {r['confidence']:.3f} | {r['value']:.3f} | {r['load']} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from geoviz.vocabulary import DEFAULT_EPSILON

    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sizes", default="2000,5000,10000", help="comma-separated N ('' for none)")
    p.add_argument("--full", action="store_true", help="add 60000 vs 60000 (batched)")
    p.add_argument("--full-batch", type=int, default=10000, help="target batch size for --full")
    p.add_argument(
        "--full-subsample",
        default="0,10000",
        help="--full rows: per-batch random reference subsample sizes (0: the whole reference)",
    )
    p.add_argument("--epsilon", type=float, default=DEFAULT_EPSILON, help="x mean ground cost")
    p.add_argument("--tol", type=float, default=1e-4, help="L1 marginal tolerance")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--no-dense", action="store_true", help="skip the geoviz dense-kernel rows")
    p.add_argument(
        "--pot-methods",
        default="sinkhorn_log,sinkhorn_epsilon_scaling",
        help="POT methods to run ('' for none)",
    )
    p.add_argument("--pot-max-iter", type=int, default=100000)
    p.add_argument("--pot-timeout", type=float, default=300.0, help="seconds per POT row")
    p.add_argument("--pot-max-n", type=int, default=10000, help="skip POT above this N")
    p.add_argument("--streamed-sizes", default="", help="N for stream_reference=True rows")
    p.add_argument("--threads", type=int, default=0, help="pin torch/BLAS threads (0: default)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    if not (DATA_DIR / "mnist.npz").exists():
        print(f"data not found in {DATA_DIR} (set GEOVIZ_NIST_DIR)", file=sys.stderr)
        return 2
    rows: list[dict] = []

    def record(row: dict) -> None:
        rows.append(row)
        print("done:", _table([row]).splitlines()[-1], file=sys.stderr, flush=True)

    methods = [m for m in args.pot_methods.split(",") if m.strip()]
    for n in [int(s) for s in args.sizes.split(",") if s.strip()]:
        record(_run("geoviz", n, args))
        if not args.no_dense:
            record(_run("geoviz-dense", n, args))
        if n <= args.pot_max_n:
            for method in methods:
                record(_run(f"pot:{method}", n, args, timeout=args.pot_timeout))
    for n in [int(s) for s in args.streamed_sizes.split(",") if s.strip()]:
        record(_run("geoviz-streamed", n, args))
    if args.full:
        for sub in [int(x) for x in str(args.full_subsample).split(",") if x.strip()]:
            record(
                _run(
                    "geoviz-batched", 0, argparse.Namespace(**{**vars(args), "full_subsample": sub})
                )
            )
    import torch

    where = (
        f"GPU {torch.cuda.get_device_name()}"
        if args.device.startswith("cuda")
        else f"{os.cpu_count()} CPUs, {rows[0].get('threads', '?') if rows else '?'} torch threads"
    )
    print(
        f"\nMNIST -> Fashion-MNIST (train), 784-d, epsilon = {args.epsilon:g} x mean cost "
        f"(eps_abs {rows[0].get('eps_abs', float('nan')) if rows else float('nan'):.3f} at the "
        f"first N), tol = {args.tol:g} (L1), {where}, torch {torch.__version__}\n"
    )
    print(_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
