"""The cold colour run against its pixel yardstick, in one run (issues 42 and 45).

Each timed row is one fresh process with its own empty cache directory
(``GEOVIZ_CACHE_DIR``), ``OMP_NUM_THREADS`` as the caller set it:

* **pixels**: ``geoviz project --target mnist_m --refs mnist,fashion_mnist,usps --features
  pixels`` (the yardstick; ``--n`` as the CLI's default, 1000: the target has 400 samples);
* **default**: the same command at the default space (``auto``: measured, then the shipped
  encoder);
* **named encoder**: the same with ``--features encoder`` (no measurement): default minus
  named is what the space-choice measurement adds to the cold default run;
* **measurement alone**: :func:`geoviz.features.choice.choose_space` on the loaded datasets
  in a fresh process with an empty cache (its own seconds);
* **app, first colour view**: the app's colour preset (:data:`geoviz.app.settings.COLOUR_PRESET`,
  ``GEOVIZ_APP_N`` samples per dataset, default 2000) through the service layer as the pages
  run it (:func:`~geoviz.app.services.datasets.apply_scenario`, then
  :func:`~geoviz.app.services.geodesic.start_geodesic` until its job is done: the maps,
  (2,Q) distances and ``a_hat`` the explorer's first view draws), fresh cache.

For the two CLI runs it also reports ``a_hat``, each map's Sinkhorn iterations and
convergence, and the **map agreement** (share of Q whose map's soft label names Q's digit,
for the references with Q's class names), read back from the run's own warm cache.

The machine's load (``uptime``) is printed before and after: the machine is shared, so only
ratios measured in the same run are compared.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_cold_colour.py --out
benchmarks/results/cold-colour-<date>.json`` (about 2-4 min on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BASE = ["project", "--target", "mnist_m", "--refs", "mnist,fashion_mnist,usps"]


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "uptime: not available"


def _env(cache: str) -> dict[str, str]:
    """The environment of a timed process: a fresh cache; this tree's ``geoviz`` first."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, GEOVIZ_CACHE_DIR=cache, PYTHONPATH=path)


def _child(mode: str, cache: str, extra: list[str]) -> dict[str, Any]:
    env = _env(cache)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cli_run(features: list[str], n: int | None) -> dict[str, Any]:
    """One cold ``geoviz project`` (fresh cache), then its maps' agreement from that cache."""
    args = [*BASE, *features, *([] if n is None else ["--n", str(n)]), "--quiet"]
    with tempfile.TemporaryDirectory() as cache:
        env = _env(cache)
        cmd = [sys.executable, "-m", "geoviz", *args]
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
        agreement = _child("agreement", cache, args)
    out = done.stdout
    lines = out.splitlines()
    a_hat_line = next(ln for ln in lines if ln.startswith("â:"))
    space = next((ln for ln in lines if ln.startswith("space: ")), "space: pixels")
    iters = {}
    for ln in lines:
        m = re.match(
            r"^(mnist|fashion_mnist|usps)\s+\S+\s+\S+\s+\S+\s+\S+\s+(\S+)\s+(not converged|converged)\s+(\d+)",
            ln,
        )
        if m:
            iters[m.group(1)] = {
                "marginal_error": float(m.group(2)),
                "converged": m.group(3) == "converged",
                "iterations": int(m.group(4)),
            }
    return {
        "command": "geoviz " + " ".join(args),
        "wall_s": round(wall, 2),
        "space": space.removeprefix("space: ")[:200],
        "a_hat": {k: float(v) for k, v in re.findall(r"(\S+?)=([0-9.]+)", a_hat_line[2:])},
        "sinkhorn": iters,
        **agreement,
    }


# --------------------------------------------------------------------------- children


def child_agreement(argv: list[str]) -> dict[str, Any]:
    """The run's maps (from its warm cache): share of Q whose map names Q's class."""
    from geoviz.backend import get_cache
    from geoviz.cli import build_parser
    from geoviz.cli.geodesic_checks import check_args, spec_from_args
    from geoviz.geodesic.spec import fit_spec, load_spec_datasets

    args = build_parser().parse_args(argv)
    check_args(args)
    spec = spec_from_args(args)
    data = load_spec_datasets(spec)
    start = time.perf_counter()
    result = fit_spec(spec, data, cache=get_cache())
    q = result.target
    q_names = [q.classes[int(i)] for i in q.labels]
    agree = {}
    for ref, soft in zip(result.references, result.soft_labels, strict=True):
        if set(q.classes) <= set(ref.classes):
            pred = [ref.classes[int(i)] for i in soft.argmax(1)]
            agree[ref.name] = round(
                sum(a == b for a, b in zip(q_names, pred, strict=True)) / len(pred), 4
            )
    return {"map_agreement": agree, "readback_s": round(time.perf_counter() - start, 2)}


def child_measure(argv: list[str]) -> dict[str, Any]:
    """The space-choice measurement alone, in a fresh process with an empty cache."""
    from geoviz.cli import build_parser
    from geoviz.cli.geodesic_checks import check_args, spec_from_args
    from geoviz.features.choice import choose_space
    from geoviz.geodesic.spec import load_spec_datasets

    args = build_parser().parse_args(argv)
    check_args(args)
    data = load_spec_datasets(spec_from_args(args))
    start = time.perf_counter()
    choice = choose_space([data.target, *data.references])
    seconds = time.perf_counter() - start
    return {
        "measure_s": round(seconds, 2),
        "chosen": str(choice.name),
        "per_space_s": {m.space: round(m.seconds, 2) for m in choice.measurements},
    }


def child_app() -> dict[str, Any]:
    """The app's first colour view through the service layer, cold."""
    from geoviz.app.services import datasets as dataset_services
    from geoviz.app.services import geodesic as geodesic_services
    from geoviz.app.session import SessionModel
    from geoviz.app.settings import COLOUR_PRESET, preset_scenarios

    start = time.perf_counter()
    model = SessionModel({})
    scenario = preset_scenarios(model.settings)[COLOUR_PRESET]
    data = dataset_services.apply_scenario(model, scenario)
    loaded = time.perf_counter() - start
    scenario = model.scenario
    job = geodesic_services.start_geodesic(scenario, data)
    while not job.wait(0.05):
        pass
    if job.error_ is not None:
        raise SystemExit(f"the colour preset's fit failed: {job.error_}")
    result = geodesic_services.finish_geodesic(scenario)
    del result
    res = job.result_
    iters = [int(d.iterations) for d in res.diagnostics]
    conv = [bool(d.converged) for d in res.diagnostics]
    return {
        "first_view_s": round(time.perf_counter() - start, 2),
        "load_s": round(loaded, 2),
        "n": int(model.settings.n_default),
        "a_hat": {
            n: round(float(v), 4) for n, v in zip(res.reference_names, res.a_hat, strict=True)
        },
        "iterations": iters,
        "converged": conv,
    }


# --------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="JSON results")
    parser.add_argument("--n", type=int, default=None, help="--n of the CLI runs (its default)")
    parser.add_argument("--no-app", action="store_true", help="skip the app's first view")
    parser.add_argument("--label", default="", help="a name for this run in the table")
    parser.add_argument("--app-only", action="store_true", help="only the app's first view")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.child is not None:
        if args.child == "agreement":
            out = child_agreement(rest)
        elif args.child == "measure":
            out = child_measure(rest)
        else:
            out = child_app()
        print(json.dumps(out))
        return 0

    load_before = uptime()
    print(f"load before: {load_before}", flush=True)
    if args.app_only:
        with tempfile.TemporaryDirectory() as cache:
            app = _child("app", cache, [])
        print("app", json.dumps(app), flush=True)
        print(f"load after: {uptime()}")
        return 0
    rows: dict[str, Any] = {}
    rows["pixels"] = cli_run(["--features", "pixels"], args.n)
    print("pixels", json.dumps(rows["pixels"]), flush=True)
    rows["default"] = cli_run([], args.n)
    print("default", json.dumps(rows["default"]), flush=True)
    rows["named encoder"] = cli_run(["--features", "encoder"], args.n)
    print("named encoder", json.dumps(rows["named encoder"]), flush=True)
    with tempfile.TemporaryDirectory() as cache:
        n_args = [] if args.n is None else ["--n", str(args.n)]
        measure = _child("measure", cache, [*BASE, *n_args])
    print("measure", json.dumps(measure), flush=True)
    app = None
    if not args.no_app:
        with tempfile.TemporaryDirectory() as cache:
            app = _child("app", cache, [])
        print("app", json.dumps(app), flush=True)
    load_after = uptime()
    pix, dflt, named = (
        rows["pixels"]["wall_s"],
        rows["default"]["wall_s"],
        rows["named encoder"]["wall_s"],
    )
    summary = {
        "label": args.label,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "load_before": load_before,
        "load_after": load_after,
        "rows": rows,
        "ratio_default_to_pixels": round(dflt / pix, 2),
        "measurement_added_s": round(dflt - named, 2),
        "measurement_added_share": round((dflt - named) / dflt, 3),
        "measurement_alone": measure,
        "measurement_alone_share": round(measure["measure_s"] / dflt, 3),
        "app_first_colour_view": app,
    }
    print()
    print(f"| cold colour run ({args.label or 'this tree'}) | value |")
    print("|---|---|")
    for name, row in rows.items():
        its = ", ".join(
            f"{k} {v['iterations']}{'' if v['converged'] else ' (not converged)'}"
            for k, v in row["sinkhorn"].items()
        )
        agree = ", ".join(f"{k} {v:.3f}" for k, v in row["map_agreement"].items())
        a_hat = ", ".join(f"{k} {v:.3f}" for k, v in row["a_hat"].items())
        print(
            f"| {name}: `{row['command']}` | {row['wall_s']:.1f} s; â {a_hat}; "
            f"map agreement {agree}; Sinkhorn iterations {its} |"
        )
    print(f"| ratio default / pixels | **{summary['ratio_default_to_pixels']:.2f}x** (<= 2.5x) |")
    print(
        f"| space-choice measurement | added {summary['measurement_added_s']:.1f} s = "
        f"{100 * summary['measurement_added_share']:.1f} % of the default run (default - named "
        f"encoder); alone {measure['measure_s']:.1f} s = "
        f"{100 * summary['measurement_alone_share']:.1f} % (<= 10 %) |"
    )
    if app is not None:
        print(
            f"| app, first colour view (service layer, n {app['n']}) | "
            f"{app['first_view_s']:.1f} s (datasets {app['load_s']:.1f} s); iterations "
            f"{app['iterations']}, converged {app['converged']} |"
        )
    print(
        f"| load | before: {load_before.split('load average:')[-1].strip()}; after: "
        f"{load_after.split('load average:')[-1].strip()} |"
    )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
        print(f"\nwritten: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
