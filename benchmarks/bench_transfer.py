"""Transfer experiments on the full *NIST data: paper Table 1 and the simplex correlation study.

For each target Q in MNIST, Fashion-MNIST, USPS, KMNIST (the other three are the
references P_i; EMNIST is not available offline) this script

1. draws ``--n`` training samples of every dataset (stratified, seeded) from
   ``../shared/data/nist/<name>.npz`` (``GEOVIZ_NIST_DIR``), harmonised to 32x32
   grey, and ``--n-test`` samples of Q's test split;
2. builds the ``k``-shot task (``--k`` labels per class of Q, the rest of Q's
   pool pseudo-labelled by 1-NN: :func:`geoviz.transfer.experiment.make_task`),
   fits the generalized geodesic on that pool (sharp OTDD maps, default epsilon)
   and its ``a_hat``;
3. runs every method for ``--seeds`` seeds (:func:`geoviz.transfer.table.compare_methods`):
   pretrain on ``P_a_hat`` (OTDD barycentric), Mixup with ``a_hat``, train on the
   few-shot set, 1-NN on the few-shot set; and prints the table beside the paper's;
4. for ``--grid-targets`` (MNIST, Fashion-MNIST) runs the simplex study
   (:func:`geoviz.transfer.study.run_grid`, ``--grid-k`` = 20 labels per class as in
   the paper, resolution 7 = 36 grid points) and prints Pearson / Spearman r between
   ``W^2(P_a, Q)`` and the fine-tuned accuracy.

Runs go through :func:`geoviz.tasks.run_tasks`: Ray tasks when Ray is
installed (``--backend``), else sequentially; grid points are checkpointed under
``--out`` so an interrupted run resumes. Results and timings are written to
``--out/bench_transfer.json``.

Run: ``.venv/bin/python benchmarks/bench_transfer.py`` (CPU preset, see
``geoviz.nn.training.PRESETS``); ``--preset paper`` on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

DATA_DIR = Path(
    os.environ.get(
        "GEOVIZ_NIST_DIR", Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "nist"
    )
)

#: paper Table 1, 5-shot accuracy (mean of 5 runs): OTDD barycentric / OTDD neural / Mixup /
#: train on few-shot / 1-NN on few-shot
PAPER = {
    "mnist": {"otdd": 93.7, "neural": 88.8, "mixup": 88.7, "fewshot": 72.8, "1nn": 64.5},
    "fashion_mnist": {"otdd": 70.1, "neural": 70.0, "mixup": 66.7, "fewshot": 60.5, "1nn": 60.9},
    "usps": {"otdd": 86.0, "neural": 83.8, "mixup": 88.6, "fewshot": 80.7, "1nn": 73.6},
    "kmnist": {"otdd": 52.6, "neural": 50.3, "mixup": 48.2, "fewshot": 41.7, "1nn": 40.2},
}
NAMES = ("mnist", "fashion_mnist", "usps", "kmnist")


def load_split(name: str, split: str):
    """The whole ``split`` of ``DATA_DIR/<name>.npz`` as grey images in ``[0, 1]``."""
    from geoviz.data.dataset import LabeledDataset

    with np.load(DATA_DIR / f"{name}.npz") as data:
        x = data[f"x_{split}"]
        y = data[f"y_{split}"]
        classes = tuple(str(c) for c in data["classes"])
    h, w = x.shape[1:]
    return LabeledDataset(
        x.reshape(len(x), -1).astype(np.float32) / 255.0,
        y,
        classes,
        name=name,
        image_shape=(1, h, w),
    )


def _load(name: str, split: str, n: int, seed: int):
    from geoviz.data.preprocess import stratified_subsample

    ds = load_split(name, split)
    return stratified_subsample(ds, n, seed=seed) if ds.n_samples > n else ds


def _task(target: str, k: int, args: argparse.Namespace):
    from geoviz.data.preprocess import harmonize
    from geoviz.transfer.experiment import make_task

    refs = [r for r in NAMES if r != target]
    raw = [_load(target, "train", args.n, args.data_seed)]
    raw += [_load(r, "train", args.n, args.data_seed) for r in refs]
    raw.append(_load(target, "test", args.n_test, args.data_seed))
    if args.preprocess == "box":
        from geoviz.data.preprocess import box_normalise

        raw = [box_normalise(ds) for ds in raw]
    sets = harmonize(raw, size=32, channels="grey")
    train, references, test = sets[0], sets[1:-1], sets[-1]
    return make_task(train, test, references, k, seed=args.data_seed)


def _geodesic(task, args: argparse.Namespace, method: str = "barycentric"):
    from geoviz.backend import get_cache
    from geoviz.geodesic.config import GeodesicConfig
    from geoviz.geodesic.pipeline import fit_geodesic
    from geoviz.ot.otdd_cost import OTDDConfig

    config = GeodesicConfig(
        otdd=OTDDConfig(epsilon=args.epsilon, seed=args.data_seed),
        method=method,
        neural=args.neural_preset,
    )
    return fit_geodesic(task.target_train, list(task.references), config, cache=get_cache())


def _progress(what: str):
    start = time.perf_counter()

    def report(done: int, total: int) -> None:
        print(
            f"  {what}: {done}/{total} runs, {time.perf_counter() - start:.0f} s",
            file=sys.stderr,
            flush=True,
        )

    return report


def _interval(estimate: dict) -> str:
    if estimate["interval"] is None:
        return "n/a"
    low, high = estimate["interval"]
    return f"[{low:.2f}, {high:.2f}]"


def print_study_statistics(statistics: dict[str, dict]) -> None:
    """The correlation tests and the paper's table of W² statistics (appendix Table "w_stat"),
    one row per target, from :meth:`geoviz.transfer.study_stats.StudyStatistics.to_dict`."""
    nan = float("nan")
    print(
        "\nCorrelation of W²(P_a, Q) with mean accuracy: r, p-value, bootstrap 95 % interval "
        "over the seeds\n"
    )
    print(
        "| Q | Pearson r | p | 95 % CI | Spearman ρ | p | 95 % CI |\n|---|---:|---:|---|---:|---:|---|"
    )
    for target, st in statistics.items():
        cells = []
        for name in ("pearson", "spearman"):
            e = st[name]
            r = nan if e["r"] is None else e["r"]
            p = nan if e["p_value"] is None else e["p_value"]
            cells += [f"{r:.3f}", f"{p:.2g}", _interval(e)]
        print(f"| {target} | " + " | ".join(cells) + " |")
    notes = {st["pearson"]["interval_note"] for st in statistics.values()} - {""}
    for note in sorted(notes):
        print(f"  ({note})")
    print(
        "\nW²(P_a, Q) over the grid points (paper appendix, Table w_stat) and accuracy gain "
        "(max - min of the mean accuracy over the grid, percentage points)\n"
    )
    print(
        "| Q | mean | median | min | max | range | std | accuracy gain | accuracy at a_hat |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    for target, st in statistics.items():
        w = st["objective"]
        at = st["accuracy_at_a_hat"]
        gain = st["accuracy_gain"]
        print(
            f"| {target} | {w['mean']:.2f} | {w['median']:.2f} | {w['min']:.2f} | "
            f"{w['max']:.2f} | {w['range']:.2f} | {w['std']:.2f} | "
            f"{'n/a' if gain is None else f'{100 * gain:.1f}'} | "
            f"{'n/a' if at is None else f'{100 * at:.1f}'} |"
        )


def main(argv: list[str] | None = None) -> int:
    from geoviz.vocabulary import DEFAULT_EPSILON

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--targets", default=",".join(NAMES))
    p.add_argument("--grid-targets", default="mnist,fashion_mnist")
    p.add_argument("--n", type=int, default=5000, help="training samples per dataset")
    p.add_argument("--n-test", type=int, default=5000, help="test samples of the target")
    p.add_argument("--k", type=int, default=5, help="labels per class (Table 1)")
    p.add_argument("--grid-k", type=int, default=20, help="labels per class (simplex study)")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--grid-seeds", type=int, default=1)
    p.add_argument("--grid-resolution", type=int, default=7, help="7: the paper's 36 points")
    p.add_argument("--preset", default="cpu")
    p.add_argument("--epsilon", type=float, default=DEFAULT_EPSILON)
    p.add_argument("--data-seed", type=int, default=0)
    p.add_argument("--backend", default="auto", choices=["auto", "ray", "sequential"])
    p.add_argument("--out", type=Path, default=Path("bench-transfer-out"))
    p.add_argument(
        "--neural",
        action="store_true",
        help="add the 'OTDD neural map' column (neural geodesic, --neural-preset)",
    )
    p.add_argument("--neural-preset", default="cpu")
    p.add_argument(
        "--preprocess",
        default="resize",
        choices=["resize", "box"],
        help="box: MNIST's digit-box normalisation of every set before resizing "
        "(geoviz.data.preprocess.box_normalise; see the ablation in benchmarks/README.md)",
    )
    args = p.parse_args(argv)
    if not (DATA_DIR / "mnist.npz").exists():
        print(f"data not found in {DATA_DIR} (set GEOVIZ_NIST_DIR)", file=sys.stderr)
        return 2

    import torch

    from geoviz.backend import RuntimeSettings, configure, configure_torch
    from geoviz.nn.training import CPU_TRAIN_THREADS
    from geoviz.transfer.study import run_grid
    from geoviz.transfer.table import METHODS, compare_methods

    # process-wide torch settings, once, here at the entry point (the library sets none)
    configure_torch(
        threads=None if torch.cuda.is_available() else CPU_TRAIN_THREADS, flush_denormal=True
    )
    configure(RuntimeSettings.from_env())

    methods = (
        ["otdd", "otdd_neural", *[m for m in METHODS if m != "otdd"]]
        if args.neural
        else list(METHODS)
    )

    args.out.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else f"cpu ({os.cpu_count()} cores)"
    report: dict = {"args": {k: str(v) for k, v in vars(args).items()}, "device": device}
    start_all = time.perf_counter()

    table = {}
    for target in [t for t in args.targets.split(",") if t]:
        t0 = time.perf_counter()
        task = _task(target, args.k, args)
        geo = _geodesic(task, args)
        neural_geo = _geodesic(task, args, "neural") if args.neural else None
        t_maps = time.perf_counter() - t0
        comp = compare_methods(
            task,
            geo,
            seeds=range(args.seeds),
            preset=args.preset,
            methods=methods,
            backend=args.backend,
            address=os.environ.get("RAY_ADDRESS") or None,
            progress=_progress(f"Table 1, Q = {target}"),
            neural_geodesic=neural_geo,
        )
        table[target] = {
            "summary": comp.summary(),
            "a_hat": list(comp.weights),
            "references": list(geo.reference_names),
            "maps_seconds": t_maps,
            "seconds": time.perf_counter() - t0,
            "effective_neighbours": [float(x) for x in geo.effective_neighbours],
        }
        if neural_geo is not None:
            table[target]["a_hat_neural"] = [float(a) for a in neural_geo.a_hat]
            table[target]["neural_maps"] = list(neural_geo.map_details)
        print(f"Q = {target}: done in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    report["table1"] = table

    studies = {}
    for target in [t for t in args.grid_targets.split(",") if t]:
        t0 = time.perf_counter()
        task = _task(target, args.grid_k, args)
        geo = _geodesic(task, args)
        study = run_grid(
            task,
            geo,
            resolution=args.grid_resolution,
            seeds=range(args.grid_seeds),
            preset=args.preset,
            checkpoint_dir=args.out / "checkpoints" / target,
            backend=args.backend,
            address=os.environ.get("RAY_ADDRESS") or None,
            progress=_progress(f"simplex study, Q = {target}"),
        )
        studies[target] = {
            "pearson": study.pearson,
            "spearman": study.spearman,
            "note": study.note,
            "points": len(study.points),
            "n_computed": study.n_computed,
            "n_loaded": study.n_loaded,
            "seconds": time.perf_counter() - t0,
            "objective_range": [
                float(min(pt.objective for pt in study.points)),
                float(max(pt.objective for pt in study.points)),
            ],
            "statistics": study.statistics.to_dict(),
        }
        study_path = args.out / f"study_{target}.json"
        study_path.write_text(study.to_json())
    report["studies"] = studies
    report["seconds"] = time.perf_counter() - start_all
    (args.out / "bench_transfer.json").write_text(json.dumps(report, indent=2))

    print(
        f"\n{args.k}-shot transfer accuracy (%), mean ± std over {args.seeds} seeds; preset "
        f"{args.preset}; N = {args.n} per dataset, {args.n_test} target test samples; {device}\n"
    )
    paper_key = {"otdd_neural": "neural"}
    head = "| Q | " + " | ".join(f"{m} (paper)" for m in methods) + " | a_hat | seconds |"
    print(head + "\n|" + "---|" * (len(methods) + 3))
    for target, row in table.items():
        by = {r["method"]: r for r in row["summary"]}
        cells = [
            f"{by[m]['mean']:.1f} ± {by[m]['std']:.1f} ({PAPER[target][paper_key.get(m, m)]:.1f})"
            for m in methods
        ]
        a_hat = ", ".join(f"{x:.2f}" for x in row["a_hat"])
        if "a_hat_neural" in row:
            a_hat += " (neural: " + ", ".join(f"{x:.2f}" for x in row["a_hat_neural"]) + ")"
        print(f"| {target} | " + " | ".join(cells) + f" | {a_hat} | {row['seconds']:.0f} |")
    if studies:
        print(
            f"\nSimplex study ({args.grid_k}-shot, resolution {args.grid_resolution}, "
            f"{args.grid_seeds} seed(s)): r between W²(P_a, Q) and accuracy (target r <= -0.5)\n"
        )
        print(
            "| Q | points | Pearson r | Spearman ρ | W² range | seconds |\n|---|---:|---:|---:|---|---:|"
        )
        for target, st in studies.items():
            lo, hi = st["objective_range"]
            print(
                f"| {target} | {st['points']} | {st['pearson']:.2f} | {st['spearman']:.2f} | "
                f"{lo:.0f}–{hi:.0f} | {st['seconds']:.0f} |"
            )
        print_study_statistics({t: st["statistics"] for t, st in studies.items()})
    print(f"\ntotal wall time {report['seconds'] / 60:.1f} min ({device})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
