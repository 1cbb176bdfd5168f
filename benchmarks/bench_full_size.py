"""Benchmark: the paper's full size (60,000 MNIST images) through the CLI, and a yardstick.

Issue 34. Every row is one ``geoviz project`` command, as a user would type it, in a
fresh process (``--no-cache``): Q = the MNIST training split against references
Fashion-MNIST (60,000) and KMNIST (8,000, all there is in ``../shared/data``), in the
space the product chooses by default, exporting ``P_a`` at ``â`` for **every** target
point. The peak memory is the command's own resident set (``os.wait4``'s ``ru_maxrss``;
the Ray row's workers are other processes, counted separately from ``ray``'s own report
only where stated). Per map the table shows the OTDD, the measured L1 marginal error,
convergence and sharpness (median plan-row perplexity = reference points averaged per
mapped point), read back from the export's manifest.

* ``one problem``: no ``--batch-size``: the 60,000 x 60,000 cost does not fit, so the CLI
  streams it (``--stream`` chosen automatically): every target point can reach every
  reference point, the support capped at 256 entries per row and chosen among 512
  candidates per row found in one pass (:class:`geoviz.ot.support.Candidates`).
* ``batched``: ``--batch-size 10000`` (the paper's appendix: six batches of 10,000 target
  points, each against a seeded 10,000-point subsample of the reference), ``--backend
  sequential`` and ``--backend ray`` (one Ray task per (reference, batch) pair).
* ``agreement``: how often the one-problem and the batched maps give a target point the
  same most likely reference class.
* yardstick, same run: POT's ``ot.sinkhorn(method="sinkhorn_log")`` and geoviz's stored
  one-problem solver on the first 10,000 points of Q and of Fashion-MNIST, in the same space
  and at the same absolute epsilon (POT cannot hold 60,000 x 60,000).

Usage::

    .venv/bin/python benchmarks/bench_full_size.py                  # all rows (~25 min, 2 cores)
    .venv/bin/python benchmarks/bench_full_size.py --rows one,batched
    .venv/bin/python benchmarks/bench_full_size.py --n 20000        # a smaller trial
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("GEOVIZ_NIST_DIR", ROOT / ".." / "shared" / "data" / "nist"))
ROWS = ("one", "batched", "ray", "yardstick")


def _run(cmd: list[str], env: dict[str, str] | None = None, timeout: float | None = None) -> dict:
    """Run ``cmd``; its wall time, peak RSS (GiB), exit status and output tail (killed after
    ``timeout`` seconds: exit status -9)."""
    import threading

    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT
    )
    timer = threading.Timer(timeout, proc.kill) if timeout else None
    if timer is not None:
        timer.start()
    assert proc.stdout is not None
    out = proc.stdout.read()
    if timer is not None:
        timer.cancel()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {
        "seconds": time.perf_counter() - start,
        "peak_gib": usage.ru_maxrss / 2**20,
        "rc": proc.returncode,
        "output": out,
    }


def _project(n: int, out: Path, extra: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "geoviz",
        "project",
        "--target",
        str(DATA_DIR / "mnist.npz"),
        "--refs",
        f"{DATA_DIR / 'fashion_mnist.npz'},{DATA_DIR / 'kmnist.npz'}",
        "--n",
        str(n),
        "--no-cache",
        "--quiet",
        "--out",
        str(out),
        *extra,
    ]


def _manifest(out: Path) -> dict:
    manifests = sorted(out.parent.glob(out.stem + "*.json"))
    return json.loads(manifests[0].read_text()) if manifests else {}


def _maps(manifest: dict) -> list[dict]:
    def find(obj):
        if isinstance(obj, dict):
            if "maps" in obj and isinstance(obj["maps"], list):
                return obj["maps"]
            for value in obj.values():
                found = find(value)
                if found is not None:
                    return found
        return None

    return find(manifest) or []


def _row(name: str, n: int, tmp: Path, extra: list[str], env=None) -> dict:
    out = tmp / f"{name}.npz"
    run = _run(_project(n, out, extra), env)
    run["name"] = name
    run["maps"] = _maps(_manifest(out)) if run["rc"] == 0 else []
    run["export"] = out
    return run


def _labels_of(path: Path):
    import numpy as np

    with np.load(path, allow_pickle=False) as z:
        keys = [k for k in z.files if "soft" in k or k in ("y", "labels")]
        return {k: z[k] for k in keys}


def _yardstick(n: int, pot_timeout: float) -> list[dict]:
    """POT and geoviz on the same n x n problem in the default space, same eps_abs."""
    code = f"""
import json, resource, time, numpy as np, torch, ot
from geoviz.data.dataset import LabeledDataset
from geoviz.backend import get_cache
from geoviz.geodesic.pipeline import GeodesicConfig, space_of
from geoviz.ot.otdd import OTDDConfig, otdd
from geoviz.ot.labels import label_distances
from geoviz.ot.otdd_cost import mean_ground_cost
n = {n}
def load(name):
    z = np.load({str(DATA_DIR)!r} + '/' + name + '.npz')
    x = z['x_train'][:n].reshape(n, -1)
    return LabeledDataset(torch.from_numpy(x.astype(np.float32) / 255), torch.from_numpy(z['y_train'][:n]),
                          tuple(str(c) for c in z['classes']), name=name, image_shape=(1, 28, 28))
q, p = load('mnist'), load('fashion_mnist')
space, choice = space_of(GeodesicConfig(), get_cache(), [q, p])
space = space.fit([q, p])
q, p = space.transform(q), space.transform(p)
cfg = OTDDConfig()
rows = []
t = time.perf_counter()
res = otdd(q, p, cfg, barycentric=True, keep_coupling=False)
rows.append(dict(name=f'geoviz stored, {{n}} x {{n}}', seconds=time.perf_counter() - t,
                 otdd=res.cost, error=res.marginal_error, converged=res.converged,
                 iterations=res.n_iter, neighbours=res.effective_neighbours))
print('GEOVIZ' + json.dumps(rows[0]), flush=True)
lab = res.label_distances
c = cfg.cost_geometry(q, p, lab).stored().matrix
eps = res.epsilon_abs
a = torch.full((n,), 1.0 / n, dtype=torch.float32); b = a.clone()
t = time.perf_counter()
plan = ot.sinkhorn(a, b, c, eps, method='sinkhorn_log', numItermax=5000, stopThr=1e-4 / n ** 0.5)
sec = time.perf_counter() - t
err = float((plan.sum(1) - a).abs().sum() + (plan.sum(0) - b).abs().sum())
perp = torch.exp(-(torch.special.xlogy(plan * n, plan * n)).sum(1)).median()
rows.append(dict(name=f'POT sinkhorn_log, {{n}} x {{n}}', seconds=sec, otdd=float((plan * c).sum()),
                 error=err, converged=err <= 1e-4, iterations=None, neighbours=float(perp)))
print('JSON' + json.dumps(dict(rows=rows, space=space.name, peak=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)))
"""
    run = _run([sys.executable, "-c", code], timeout=pot_timeout)
    if "GEOVIZ" not in run["output"]:
        return [{"name": "yardstick", "failed": run["output"][-2000:]}]
    geoviz_row = json.loads(run["output"].split("GEOVIZ", 1)[1].splitlines()[0])
    if run["rc"] != 0 or "JSON" not in run["output"]:
        pot = {
            "name": f"POT sinkhorn_log, {n} x {n}: killed after {pot_timeout:.0f} s"
            if run["rc"] == -9
            else f"POT failed: {run['output'][-300:]!r}",
            "seconds": float("nan"),
            "otdd": float("nan"),
            "error": float("nan"),
            "converged": False,
            "iterations": None,
            "neighbours": float("nan"),
        }
        return [geoviz_row, pot]
    payload = json.loads(run["output"].split("JSON", 1)[1])
    return payload["rows"]


def main() -> None:
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=60000, help="samples per dataset (default 60000)")
    parser.add_argument("--batch-size", type=int, default=10000)
    parser.add_argument("--yardstick-n", type=int, default=10000)
    parser.add_argument("--pot-timeout", type=float, default=600.0, help="seconds POT may run")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"subset of {','.join(ROWS)}")
    args = parser.parse_args()
    rows = [r for r in args.rows.split(",") if r]
    print(f"# full size: n = {args.n}, cores = {os.cpu_count()}, load {os.getloadavg()[0]:.2f}")
    results = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if "one" in rows:
            results.append(_row("one problem (streamed)", args.n, tmp, []))
        batch = ["--batch-size", str(args.batch_size)]
        if "batched" in rows:
            results.append(
                _row("batched, sequential", args.n, tmp, [*batch, "--backend", "sequential"])
            )
        if "ray" in rows:
            results.append(_row("batched, Ray tasks", args.n, tmp, [*batch, "--backend", "ray"]))
        print()
        print(
            "| run | wall s | peak GiB | reference | OTDD | L1 marginal error | converged "
            "| median neighbours |"
        )
        print("|---|---:|---:|---|---:|---:|---|---:|")
        for run in results:
            if run["rc"] != 0:
                print(
                    f"| {run['name']} | {run['seconds']:.0f} | {run['peak_gib']:.2f} | "
                    f"failed (exit {run['rc']}): {run['output'][-300:]!r} | | | | |"
                )
                continue
            for m in run["maps"]:
                print(
                    f"| {run['name']} | {run['seconds']:.0f} | {run['peak_gib']:.2f} | "
                    f"{m.get('reference')} | {m.get('otdd', float('nan')):.4g} | "
                    f"{m.get('marginal_error', float('nan')):.2g} | {m.get('converged')} | "
                    f"{m.get('effective_neighbours', float('nan')):.2f} |"
                )
        exported = [r for r in results if r["rc"] == 0]
        if len(exported) >= 2:
            first = _labels_of(exported[0]["export"])
            for other in exported[1:]:
                second = _labels_of(other["export"])
                for key in first:
                    if key in second and first[key].ndim == 2:
                        same = float(np.mean(first[key].argmax(1) == second[key].argmax(1)))
                        print(
                            f"\nagreement of P_a's most likely class ({key}), "
                            f"{exported[0]['name']} vs {other['name']}: {same:.3f}"
                        )
        for run in exported:
            with np.load(run["export"], allow_pickle=False) as z:
                sizes = {k: z[k].shape for k in z.files}
            print(f"\n{run['name']}: export holds {sizes}")
    if "yardstick" in rows:
        print(
            "\n| yardstick | wall s | OTDD | L1 marginal error | converged | iterations "
            "| median neighbours |"
        )
        print("|---|---:|---:|---:|---|---:|---:|")
        for r in _yardstick(args.yardstick_n, args.pot_timeout):
            if "failed" in r:
                print(f"| yardstick failed: {r['failed'][-300:]!r} |")
                continue
            print(
                f"| {r['name']} | {r['seconds']:.1f} | {r['otdd']:.4g} | {r['error']:.2g} | "
                f"{r['converged']} | {r['iterations']} | {r['neighbours']:.2f} |"
            )


if __name__ == "__main__":
    main()
