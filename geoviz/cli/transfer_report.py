"""What ``geoviz transfer`` reports: progress on stderr, the header and tables it prints,
and the files it writes under ``--out`` (results, the study's grid, the manifest).

Progress is tqdm bars on a terminal, plain lines (at most one per 10 %) in a log or a pipe
(:func:`transfer_progress`); every file is written atomically.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import io
import json
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from geoviz import __version__
from geoviz.atomic import NotReplaceableError, atomic_write_bytes
from geoviz.cli.output import PlainProgress, format_table, stderr_is_terminal
from geoviz.errors import ExportError
from geoviz.glossary import A_HAT, OBJECTIVE, OBJECTIVE_AT_A_HAT

if TYPE_CHECKING:
    from geoviz.cli.transfer_checks import TransferOptions
    from geoviz.geodesic.result import GeodesicResult
    from geoviz.geodesic.spec import GeodesicSpec

__all__ = [
    "TransferRun",
    "print_grid_study",
    "print_transfer_header",
    "report_comparison",
    "transfer_manifest",
    "transfer_progress",
    "write_study",
]


@dataclass
class TransferRun:
    """What the fits and the runs gave."""

    geodesic: GeodesicResult | None = None
    neural_geodesic: GeodesicResult | None = None
    study: Any = None
    comparison: Any = None


@contextlib.contextmanager
def transfer_progress(
    enabled: bool, what: str
) -> Iterator[tuple[Callable[[str, float], None] | None, Callable[[int, int], None] | None]]:
    """``(fit(stage, fraction), runs(done, total))`` progress callbacks drawing on stderr.

    tqdm bars on a terminal; plain lines (:class:`geoviz.cli.PlainProgress`: one per
    stage and per 10 % of the geodesic fit, one per 10 % of the runs) when stderr is
    a file or a pipe or tqdm is missing; ``(None, None)`` when disabled.
    """
    if not enabled:
        yield None, None
        return
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        tqdm = None
    if tqdm is None or not stderr_is_terminal(sys.stderr):
        # a log or a pipe: plain lines, one per stage and per 10 % (no bar redraws)
        fit_lines = PlainProgress(sys.stderr, "geodesic: ")
        run_lines = PlainProgress(sys.stderr)

        def plain_runs(done: int, total: int) -> None:
            run_lines(what, done / max(total, 1), f"{done}/{total} runs")

        yield fit_lines, plain_runs
        return
    bars: dict[str, Any] = {}

    def fit(stage: str, fraction: float) -> None:
        pos = round(100 * min(max(float(fraction), 0.0), 1.0))
        bar = bars.get("fit")
        if bar is None:
            bar = bars["fit"] = tqdm(
                total=100,
                file=sys.stderr,
                bar_format="{desc:<48.48} {percentage:3.0f}%|{bar}| {elapsed}",
            )
        bar.set_description_str(f"geodesic: {stage}", refresh=False)
        if pos > bar.n:
            bar.update(pos - bar.n)

    def runs(done: int, total: int) -> None:
        bar = bars.get("runs")
        if bar is None:
            if "fit" in bars:
                bars["fit"].close()
            bar = bars["runs"] = tqdm(total=total, file=sys.stderr, desc=what, unit="run")
        if done > bar.n:
            bar.update(done - bar.n)

    try:
        yield fit, runs
    finally:
        for bar in bars.values():
            bar.close()


def _write_out(path: Path, data: bytes) -> None:
    try:
        atomic_write_bytes(path, data, overwrite=True)
    except NotReplaceableError as err:
        raise ExportError(str(err)) from None
    except OSError as err:
        raise ExportError(f"cannot write {path}: {err}") from err


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, allow_nan=False) + "\n").encode("utf-8")


def _dataset_entry(ds: Any, name: str, split: str) -> dict[str, Any]:
    return {
        "name": name,
        "dataset": ds.name,
        "split": split,
        "n_samples": ds.n_samples,
        "shape": list(ds.image_shape) if ds.image_shape else [ds.n_features],
        "fingerprint": ds.fingerprint,
    }


def print_transfer_header(
    task: Any,
    opts: TransferOptions,
    run: TransferRun,
    ref_names: list[str],
    epsilon: float,
    target_name: str,
) -> None:
    """The task, the preset, â (of both map methods) and any blurry map, before the results."""
    print(
        f"target: {target_name} ({task.target_train.n_samples} train, "
        f"{task.target_fewshot.n_samples} labelled = {task.k} per class, "
        f"{task.target_test.n_samples} test); references: {', '.join(ref_names)}"
    )
    print(f"preset: {opts.preset.name} ({opts.preset.note})")
    geodesic, weights = run.geodesic, opts.weights
    if geodesic is not None:
        print(geodesic.space_sentence)
        if geodesic.space_caution is not None:
            print(geodesic.space_caution)
        for label, fitted in ((A_HAT, geodesic), (f"{A_HAT} (neural maps)", run.neural_geodesic)):
            if fitted is None:
                continue
            print(
                f"{label}: "
                + ", ".join(f"{n}={a:.4f}" for n, a in zip(ref_names, fitted.a_hat, strict=True))
                + f"  {OBJECTIVE_AT_A_HAT} = {float(fitted.w2_hat):.6g}"
            )
        for i in np.flatnonzero(geodesic.blurry):
            print(
                f"BLURRY MAP T{i + 1} -> {ref_names[i]}: each mapped point averages a median of "
                f"{geodesic.effective_neighbours[i]:.0f} reference points at --epsilon "
                f"{epsilon:g}, so P_a holds blurred averages; lower --epsilon for sharp maps."
            )
    if weights is not None:
        print(
            "weights a: "
            + ", ".join(f"{n}={a:.4f}" for n, a in zip(ref_names, weights, strict=True))
            + (
                ""
                if geodesic is None
                else f"  {OBJECTIVE} = {float(geodesic.objective(weights)):.6g}"
            )
        )


def transfer_manifest(
    args: argparse.Namespace,
    opts: TransferOptions,
    spec: GeodesicSpec,
    data: Any,
    task: Any,
    run: TransferRun,
) -> dict[str, Any]:
    """``manifest.json`` of the run: what was run, on which data (fingerprints), with what."""
    names = [args.target, *opts.refs]
    trains = [data.target, *data.references]
    geodesic, neural = run.geodesic, run.neural_geodesic
    return {
        "geoviz_version": __version__,
        "command": "transfer",
        "target": args.target,
        "references": opts.refs,
        "datasets": [
            *(_dataset_entry(ds, name, "train") for ds, name in zip(trains, names, strict=True)),
            _dataset_entry(data.target_test, args.target, "test"),
        ],
        "task": {
            "k": task.k,
            "seed": task.seed,
            "target_train_fingerprint": task.target_train.fingerprint,
            "target_fewshot_fingerprint": task.target_fewshot.fingerprint,
            "target_test_fingerprint": task.target_test.fingerprint,
        },
        "n": args.n,
        "n_test": args.n_test,
        "size": args.size,
        "subsample_seed": args.seed,
        "seeds": opts.seeds,
        "methods": opts.methods,
        "preset": {
            "name": opts.preset.name,
            "pretrain": dataclasses.asdict(opts.preset.pretrain),
            "finetune": dataclasses.asdict(opts.preset.finetune),
        },
        "epsilon": float(spec.config.otdd.epsilon),
        "weights": "a_hat" if opts.weights is None else [float(w) for w in opts.weights],
        "a_hat": None if geodesic is None else [float(a) for a in geodesic.a_hat],
        "space": None if geodesic is None else geodesic.space_record(),
        "a_hat_neural": None if neural is None else [float(a) for a in neural.a_hat],
        "neural_preset": args.neural_preset if neural is not None else None,
        "grid_resolution": args.grid,
        "backend": args.backend,
    }


def write_study(study: Any, out_dir: Path, manifest: dict[str, Any], figure_html: str) -> None:
    """The simplex study's files under ``--out``; ``figure_html`` is its correlation figure
    (:func:`geoviz.viz.study_figure.correlation_figure`) as a page."""
    _write_out(out_dir / "grid.json", (study.to_json() + "\n").encode("utf-8"))
    _write_out(out_dir / "grid.csv", study.to_frame().to_csv(index=False).encode("utf-8"))
    _write_out(out_dir / "correlation.html", figure_html.encode("utf-8"))
    _write_out(out_dir / "manifest.json", _json_bytes(manifest))
    print(
        f"wrote {out_dir / 'grid.json'}, grid.csv, correlation.html, manifest.json "
        f"and {study.n_computed + study.n_loaded} checkpoints under "
        f"{out_dir / 'checkpoints'}"
    )


def report_comparison(
    comparison: Any,
    seeds: Sequence[int],
    geodesic: Any,
    out_dir: Path | None,
    manifest: dict[str, Any],
) -> None:
    """Print the accuracy table of every method and seed; with ``out_dir``, write the results.

    The std is the sample standard deviation over seeds (ddof 1; 0 for one seed), as in
    :meth:`~geoviz.transfer.table.MethodComparison.summary`; written as fractions, shown in %.
    """
    header = ["method", "accuracy % (mean ± std)", *(f"seed {s}" for s in seeds)]
    rows = []
    summary = {}
    for method in comparison.methods:
        acc = comparison.accuracies(method)
        std = float(np.std(acc, ddof=1)) if acc.size > 1 else 0.0
        summary[method] = {
            "mean": float(acc.mean()),
            "std": std,
            "accuracies": acc.tolist(),
            "seeds": list(seeds),
        }
        rows.append(
            [
                method,
                f"{100 * acc.mean():.2f} ± {100 * std:.2f}",
                *(f"{100 * a:.2f}" for a in acc),
            ]
        )
    print()
    print(format_table(header, rows, right=set(range(1, len(header)))))
    print(f"std: sample standard deviation over the {len(seeds)} seed(s) (0 for one seed)")
    if out_dir is None:
        return
    # () when neither a geodesic nor --weights was needed (only fewshot / 1nn ran)
    used = np.asarray(comparison.weights, dtype=float) if comparison.weights else None
    payload = {
        "summary": summary,
        "runs": [r.to_dict() for r in comparison.results],
        "weights": None if used is None else [float(w) for w in used],
        "objective": (
            None if used is None or geodesic is None else float(geodesic.objective(used))
        ),
    }
    _write_out(out_dir / "results.json", _json_bytes(payload))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["method", "seed", "accuracy", "seconds", "n_pretrain", "weights"])
    for r in comparison.results:
        w = "" if r.weights is None else " ".join(f"{x:.6g}" for x in r.weights)
        writer.writerow([r.method, r.seed, repr(r.accuracy), f"{r.seconds:.3f}", r.n_pretrain, w])
    _write_out(out_dir / "results.csv", buf.getvalue().encode("utf-8"))
    _write_out(out_dir / "manifest.json", _json_bytes(manifest))
    print(f"wrote {out_dir / 'results.json'}, results.csv and manifest.json")


def print_grid_study(study: Any, names: Sequence[str], seeds: Sequence[int]) -> None:
    header = ["#", *(f"a_{n}" for n in names), OBJECTIVE, "accuracy %", "± std"]
    rows = [
        [
            str(p.index),
            *(f"{w:.3f}" for w in p.weights),
            f"{p.objective:.6g}",
            f"{100 * p.mean_accuracy:.2f}",
            f"{100 * p.std_accuracy:.2f}",
        ]
        for p in study.points
    ]
    print()
    print(
        f"simplex study: {len(study.points)} points (resolution {study.resolution}) x "
        f"{len(seeds)} seed(s), method {study.method}; {study.n_computed} runs trained, "
        f"{study.n_loaded} loaded from checkpoints"
    )
    print(format_table(header, rows, right=set(range(1, len(header)))))

    def fmt(x: float) -> str:
        return f"{x:.3f}" if math.isfinite(x) else "nan"

    print(
        f"correlation of {OBJECTIVE} and mean accuracy over {len(study.points)} points: "
        f"Pearson r = {fmt(study.pearson)}, Spearman rho = {fmt(study.spearman)}"
    )
    if study.note:
        print(f"note: {study.note}")
