"""``geoviz transfer``: the transfer-experiment command of the CLI.

:func:`register` is called by :func:`geoviz.cli.build_parser` (this module is one of
:data:`geoviz.cli.PLUGIN_MODULES`) with its ``argparse`` sub-parsers.

``geoviz transfer [--target T --refs A,B,C] [--method all] [--grid R] [--out DIR] ...``
runs the paper's transfer experiments (Sec. 5.2, Table 1): pretrain on ``P_a``,
fine-tune on ``k`` labelled target samples per class, test
(:func:`geoviz.transfer.table.compare_methods`); or, with ``--grid R``, the
simplex study correlating ``W²(P_a, Q)`` with accuracy
(:func:`geoviz.transfer.study.run_grid`). Runs are Ray tasks with
``--backend ray`` (:mod:`geoviz.tasks`). The datasets are those of a
:class:`~geoviz.geodesic.spec.GeodesicSpec` (the target's train split, the references
and the target's test split, all at ``--size``), loaded by
:func:`~geoviz.geodesic.spec.load_spec_datasets`; the geodesic is fitted only when a
method needs it (``otdd``, ``mixup`` at ``a_hat``, ``--grid``).

Every option is checked before any dataset is loaded, against :mod:`geoviz.limits`
(``--refs`` count, ``--n``, ``--n-test``, ``--size``, ``--k``, ``--seed``, ``--seeds``,
``--epsilon``, ``--grid`` with the grid size it gives for ``m``, ``--weights``).
Progress goes to stderr: tqdm bars on a terminal, plain lines (at most one per 10 %)
in a log or a pipe.

The handler returns the exit status and raises
:class:`~geoviz.errors.GeovizError` for bad input (printed by
:func:`geoviz.cli.main` with status 2).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from geoviz import limits
from geoviz.cli.args import (
    add_backend_args,
    add_epsilon_option,
    cli_epsilon,
    cli_int,
    cli_path,
    cli_seed,
    cli_seeds,
    given_options,
    positive_int,
    ray_address,
    refuse_unused,
)
from geoviz.cli.output import PlainProgress, format_table, stderr_is_terminal
from geoviz.errors import BlurWarning, ExportError, GeovizError
from geoviz.transfer.table import ALL_METHODS, METHODS
from geoviz.vocabulary import BUILTIN_SPACES, ENCODER_PRESET_NAMES

if TYPE_CHECKING:
    from geoviz.geodesic.pipeline import GeodesicConfig, GeodesicResult
    from geoviz.geodesic.spec import GeodesicSpec
    from geoviz.limits import RelativeEpsilon
    from geoviz.nn.training import TransferPreset
    from geoviz.transfer.experiment import Method

__all__ = ["TRANSFER_REFS", "TRANSFER_TARGET", "register"]

TRANSFER_TARGET = "mnist"
TRANSFER_REFS = "fashion_mnist,usps,kmnist"


def _weights_arg(text: str, m: int) -> np.ndarray | None:
    """``None`` for ``a_hat``, else the checked weights (one-line WeightsError otherwise)."""
    from geoviz.errors import WeightsError
    from geoviz.geodesic.weights import check_weights

    if text.strip().lower() in ("a_hat", "ahat", "â"):
        return None
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise WeightsError(
            f"--weights: expected 'a_hat' or {m} comma-separated numbers, got {text!r}"
        ) from None
    try:
        return check_weights(values, m)
    except WeightsError as err:
        raise WeightsError(f"--weights: {err}") from err


@contextlib.contextmanager
def _transfer_progress(
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
    from geoviz.atomic import atomic_write_bytes

    try:
        atomic_write_bytes(path, data, overwrite=True)
    except OSError as err:
        raise ExportError(f"cannot write {path}: {err}") from err


def _json_bytes(obj: Any) -> bytes:
    import json

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


@dataclass(frozen=True)
class _TransferOptions:
    """The checked options of ``geoviz transfer`` (:func:`_check_transfer_args`)."""

    refs: list[str]
    seeds: list[int]
    weights: np.ndarray | None
    preset: TransferPreset
    epsilon: RelativeEpsilon | None
    methods: list[str]
    out_dir: Path | None


#: defaults of the options declared with ``default=None`` (a given one is told apart)
_DEFAULTS: dict[str, Any] = {
    "features": "auto",
    "encoder_preset": "pretrained",
    "neural_preset": "cpu",
    "weights": "a_hat",
    "backend": "auto",
    "ray_address": None,
    "epsilon": None,
}


def _refuse_unused_options(
    args: argparse.Namespace, given: set[str], methods: list[str], weights: np.ndarray | None
) -> None:
    """Options that would do nothing with the methods run, refused in one sentence (they
    were silently ignored)."""
    given = set(given) | ({"neural"} if args.neural else set())
    # the barycentric geodesic is fitted for otdd, mixup at a_hat and the grid (as
    # _run_transfer decides); otdd_neural fits a neural one, in pixel space
    barycentric = (
        args.grid is not None or "otdd" in methods or ("mixup" in methods and weights is None)
    )
    unused: dict[str, str] = {}
    if args.method != "all" or args.grid is not None:
        unused["neural"] = "only applies to --method all (without --grid)"
    if "otdd_neural" not in methods:
        unused["neural_preset"] = "only applies when otdd_neural runs (--method otdd_neural)"
    if args.features != "encoder":
        unused["encoder_preset"] = "only applies with --features encoder"
    if not {"otdd", "mixup"} & set(methods):
        unused["weights"] = "only applies to --method otdd, mixup or all (P_a's weights)"
    if not barycentric:
        unused["features"] = (
            "only applies when the OTDD geodesic is fitted (otdd, or mixup at a_hat)"
        )
        if "otdd_neural" not in methods:
            unused["epsilon"] = "only applies when a geodesic is fitted (otdd, mixup at a_hat)"
    if args.backend == "sequential":
        unused["ray_address"] = "only applies with --backend ray or auto"
    refuse_unused(given, unused)


def _check_transfer_args(args: argparse.Namespace) -> _TransferOptions:
    """Every option checked before any work, in one sentence naming the flag; an option
    that would do nothing with the others is refused too."""
    from geoviz.nn.models import MIN_LENET_SIZE
    from geoviz.nn.training import get_preset

    given = given_options(args, _DEFAULTS)
    cli_path(args.target, "--target")
    if args.out is not None:
        cli_path(args.out, "--out")
    refs = [part.strip() for part in args.refs.split(",") if part.strip()]
    if not refs:
        raise GeovizError("--refs: expected comma-separated dataset names")
    if not 2 <= len(refs) <= limits.MAX_REFERENCES:
        raise GeovizError(
            f"--refs: expected 2 to {limits.MAX_REFERENCES} reference datasets, got {len(refs)}"
        )
    cli_int(args.n, "--n", limits.MIN_SAMPLES, limits.MAX_SAMPLES, why="samples per dataset")
    if args.n_test is not None:
        cli_int(args.n_test, "--n-test", limits.MIN_SAMPLES, limits.MAX_SAMPLES)
    cli_int(
        args.size,
        "--size",
        max(limits.MIN_IMAGE_SIZE, MIN_LENET_SIZE),
        limits.MAX_IMAGE_SIZE,
        why="pixels per side, for the transfer network",
    )
    cli_int(args.k, "--k", 1, limits.MAX_FEW_SHOT_K, why="labelled samples per class")
    cli_seed(args.seed)
    seeds = cli_seeds(args.seeds)
    weights = _weights_arg(args.weights, len(refs))
    preset = get_preset(args.preset)
    epsilon = None if args.epsilon is None else cli_epsilon(args.epsilon)
    methods = _transfer_methods(args, len(refs), weights)
    _refuse_unused_options(args, given, methods, weights)
    for name in refs:
        cli_path(name, "--refs")
    out_dir = None if args.out is None else Path(args.out)
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"--out {out_dir} exists and is not a folder")
    if args.backend != "sequential":
        ray_address(args)  # a malformed --ray-address / RAY_ADDRESS before any work
    return _TransferOptions(refs, seeds, weights, preset, epsilon, methods, out_dir)


def _transfer_methods(args: argparse.Namespace, m: int, weights: np.ndarray | None) -> list[str]:
    """The methods to run; with ``--grid`` the one method trained at every grid point."""
    if args.grid is None:
        methods = list(METHODS) if args.method == "all" else [args.method]
        if args.method == "all" and args.neural:
            methods.insert(1, "otdd_neural")
        return methods
    try:
        limits.check_grid(args.grid, m)
    except GeovizError as err:
        raise GeovizError(f"--grid: {err}") from None
    if args.method == "otdd_neural":
        raise GeovizError(
            "--grid runs the barycentric geodesic; --method otdd_neural is not supported there"
        )
    if args.method in ("fewshot", "1nn"):
        raise GeovizError(
            f"--grid trains on P_a for every grid point: --method must be otdd or mixup, "
            f"not {args.method}"
        )
    if weights is not None:
        raise GeovizError("--weights has no effect with --grid (every grid point is run)")
    return ["otdd" if args.method == "all" else args.method]


def _transfer_spec(args: argparse.Namespace, opts: _TransferOptions) -> GeodesicSpec:
    """The study's problem, built with the library's constructors."""
    from geoviz.data.choice import DatasetChoice
    from geoviz.geodesic.pipeline import GeodesicConfig
    from geoviz.geodesic.spec import GeodesicSpec
    from geoviz.ot.otdd import OTDDConfig

    return GeodesicSpec(
        target=DatasetChoice.named(args.target),
        references=tuple(DatasetChoice.named(name) for name in opts.refs),
        n_target=args.n,
        n_reference=args.n,
        seed=args.seed,
        image_size=args.size,
        target_test=DatasetChoice.named(args.target, "test"),
        n_test=args.n_test,
        config=GeodesicConfig(
            otdd=OTDDConfig() if opts.epsilon is None else OTDDConfig(epsilon=opts.epsilon),
            features=args.features,
            encoder=args.encoder_preset,
        ),
    )


@dataclass
class _TransferRun:
    """What the fits and the runs gave."""

    geodesic: GeodesicResult | None = None
    neural_geodesic: GeodesicResult | None = None
    study: Any = None
    comparison: Any = None


def _run_transfer(
    args: argparse.Namespace, opts: _TransferOptions, config: GeodesicConfig, task: Any
) -> _TransferRun:
    """Fit the geodesic(s) the methods need, then run the comparison or the simplex study."""
    import dataclasses

    from geoviz.backend import DiskCache, get_cache
    from geoviz.geodesic.pipeline import fit_geodesic
    from geoviz.transfer.table import compare_methods

    methods, weights = opts.methods, opts.weights
    needs_geodesic = (
        args.grid is not None or "otdd" in methods or ("mixup" in methods and weights is None)
    )
    cache = DiskCache(enabled=False) if args.no_cache else get_cache()
    what = "simplex study" if args.grid is not None else "transfer"
    run = _TransferRun()
    with _transfer_progress(not args.quiet, what) as (fit_progress, run_progress):
        refs = list(task.references)
        if needs_geodesic:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", BlurWarning)
                run.geodesic = fit_geodesic(
                    task.target_train, refs, config, progress=fit_progress, cache=cache
                )
        if "otdd_neural" in methods:
            # neural maps generate images: they live in pixel space
            neural = dataclasses.replace(
                config, method="neural", neural=args.neural_preset, features="pixels"
            )
            run.neural_geodesic = fit_geodesic(
                task.target_train, refs, neural, progress=fit_progress, cache=cache
            )
        # the options of every (method or grid point, seed) run
        run_options: dict[str, Any] = {
            "seeds": opts.seeds,
            "preset": opts.preset,
            "backend": args.backend,
            # the environment is read here, at the entry point (the library reads none)
            "address": ray_address(args),
            "progress": run_progress,
        }
        if args.grid is not None:
            from geoviz.transfer.study import run_grid

            checkpoints = None if opts.out_dir is None else opts.out_dir / "checkpoints"
            run.study = run_grid(
                task,
                run.geodesic,
                resolution=args.grid,
                checkpoint_dir=checkpoints,
                method=cast("Literal['otdd', 'mixup']", methods[0]),
                **run_options,
            )
        else:
            run.comparison = compare_methods(
                task,
                run.geodesic,
                methods=cast("list[Method]", methods),
                weights=weights,
                neural_geodesic=run.neural_geodesic,
                **run_options,
            )
    return run


def _print_transfer_header(
    task: Any,
    opts: _TransferOptions,
    run: _TransferRun,
    ref_names: list[str],
    epsilon: float,
    target_name: str,
) -> None:
    """The task, the preset, â (of both map methods) and any blurry map, before the results."""
    from geoviz.glossary import A_HAT, OBJECTIVE, OBJECTIVE_AT_A_HAT

    print(
        f"target: {target_name} ({task.target_train.n_samples} train, "
        f"{task.target_fewshot.n_samples} labelled = {task.k} per class, "
        f"{task.target_test.n_samples} test); references: {', '.join(ref_names)}"
    )
    print(f"preset: {opts.preset.name} ({opts.preset.note})")
    geodesic, weights = run.geodesic, opts.weights
    if geodesic is not None:
        print(geodesic.space_sentence)
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


def _transfer_manifest(
    args: argparse.Namespace,
    opts: _TransferOptions,
    spec: GeodesicSpec,
    data: Any,
    task: Any,
    run: _TransferRun,
) -> dict[str, Any]:
    """``manifest.json`` of the run: what was run, on which data (fingerprints), with what."""
    import dataclasses

    from geoviz import __version__

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


def _write_study(study: Any, ref_names: list[str], out_dir: Path, manifest: dict[str, Any]) -> None:
    """The simplex study's files under ``--out``."""
    from geoviz.viz.study import correlation_figure

    _write_out(out_dir / "grid.json", (study.to_json() + "\n").encode("utf-8"))
    _write_out(out_dir / "grid.csv", study.to_frame().to_csv(index=False).encode("utf-8"))
    html = correlation_figure(study, ref_names).to_html(include_plotlyjs="cdn")
    _write_out(out_dir / "correlation.html", html.encode("utf-8"))
    _write_out(out_dir / "manifest.json", _json_bytes(manifest))
    print(
        f"wrote {out_dir / 'grid.json'}, grid.csv, correlation.html, manifest.json "
        f"and {study.n_computed + study.n_loaded} checkpoints under "
        f"{out_dir / 'checkpoints'}"
    )


def _cmd_transfer(args: argparse.Namespace) -> int:
    """``geoviz transfer``: check, build the spec, load, fit and run, report."""
    from geoviz.geodesic.spec import load_spec_datasets
    from geoviz.transfer.experiment import make_task

    opts = _check_transfer_args(args)
    spec = _transfer_spec(args, opts)
    data = load_spec_datasets(spec)
    assert data.target_test is not None  # the spec names the test split
    task = make_task(data.target, data.target_test, list(data.references), args.k, seed=args.seed)
    run = _run_transfer(args, opts, spec.config, task)
    ref_names = (
        list(run.geodesic.reference_names)
        if run.geodesic is not None
        else [r.name for r in data.references]
    )
    _print_transfer_header(
        task, opts, run, ref_names, float(spec.config.otdd.epsilon), data.target.name
    )
    manifest = _transfer_manifest(args, opts, spec, data, task, run)
    if run.study is not None:
        _print_grid_study(run.study, ref_names, opts.seeds)
        if opts.out_dir is not None:
            _write_study(run.study, ref_names, opts.out_dir, manifest)
        return 0
    assert run.comparison is not None
    _report_comparison(run.comparison, opts.seeds, run.geodesic, opts.out_dir, manifest)
    return 0


def _report_comparison(
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
    import csv
    import io

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


def _print_grid_study(study: Any, names: Sequence[str], seeds: Sequence[int]) -> None:
    import math

    from geoviz.glossary import OBJECTIVE

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


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``transfer`` to the ``geoviz`` CLI."""

    help_text = (
        "transfer experiments: pretrain on P_a, fine-tune on k-shot target, test "
        "(or --grid R: W²(P_a, Q) vs accuracy over the simplex)"
    )
    p = subparsers.add_parser("transfer", help=help_text, description=help_text)
    p.add_argument(
        "--target", default=TRANSFER_TARGET, help=f"target dataset Q (default {TRANSFER_TARGET})"
    )
    p.add_argument(
        "--refs",
        default=TRANSFER_REFS,
        help=f"comma-separated pretraining datasets P_1..P_m (default {TRANSFER_REFS})",
    )
    p.add_argument(
        "--n", type=positive_int, default=1000, help="training samples per dataset (default 1000)"
    )
    p.add_argument(
        "--n-test",
        type=positive_int,
        default=None,
        help="test samples of the target (default: the whole test split)",
    )
    p.add_argument("--size", type=positive_int, default=32, help="image size (default 32)")
    p.add_argument(
        "--features",
        choices=BUILTIN_SPACES,
        default=None,  # "auto" (_DEFAULTS): None tells a given option apart
        help="the space the OTDD maps and a_hat are computed in (default auto: chosen from "
        "the data, as `geoviz project` does, and printed); the pretraining set P_a is made "
        "of images in every case",
    )
    p.add_argument(
        "--encoder-preset",
        choices=ENCODER_PRESET_NAMES,
        default=None,  # "pretrained" (_DEFAULTS)
        help="weights of --features encoder: pretrained (default, shipped) or a budget to "
        "train one here (cpu, tiny)",
    )
    p.add_argument(
        "--k", type=positive_int, default=5, help="labelled target samples per class (default 5)"
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the subsamples and of the choice of the k labelled samples (default 0)",
    )
    p.add_argument(
        "--method",
        choices=(*ALL_METHODS, "all"),
        default="all",
        help=(
            "method(s) to run (default all; with --grid: otdd, or mixup). otdd_neural trains "
            "neural OTDD maps (minutes per map on a CPU); 'all' includes it with --neural"
        ),
    )
    p.add_argument(
        "--neural",
        action="store_true",
        help="with --method all: also run the 'OTDD neural map' column of Table 1",
    )
    p.add_argument(
        "--neural-preset",
        choices=("tiny", "cpu", "paper"),
        default=None,  # "cpu" (_DEFAULTS)
        help="training budget of the neural maps (default cpu)",
    )
    p.add_argument(
        "--weights",
        default=None,  # "a_hat" (_DEFAULTS)
        help="weights a of P_a for otdd/mixup: a_hat (default) or comma-separated, e.g. 0.5,0.3,0.2",
    )
    p.add_argument(
        "--seeds", default="0,1,2", help="comma-separated training seeds (default 0,1,2)"
    )
    p.add_argument(
        "--preset",
        default="cpu",
        help="training budget: paper, cpu (default) or tiny (see geoviz.nn.training.PRESETS)",
    )
    add_epsilon_option(p)
    p.add_argument(
        "--grid",
        type=positive_int,
        default=None,
        metavar="R",
        help="run the simplex study on simplex_grid(m, R) instead (R=7: the paper's 36 points)",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help=(
            "write results JSON/CSV and a manifest here (files replaced); with --grid also "
            "DIR/checkpoints (reused by a rerun) and correlation.html"
        ),
    )
    add_backend_args(p, "each (method or grid point, seed)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the OTDD cache")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=_cmd_transfer)
