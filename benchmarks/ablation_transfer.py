"""Why does pretraining transfer so little here? An ablation of the transfer protocol (issue 18).

For each target Q (default MNIST and KMNIST; references: the other *NIST sets) and seed, this
script builds the paper's ``k``-shot task (Sec. 5.2; ``k`` = 5 labels per class, the rest of
Q's pool pseudo-labelled by 1-NN), fits the generalized geodesic on the pool and pretrains a
LeNet-5 on each *pretraining set*:

* ``none``: no pretraining (train from scratch on the few-shot set, fine-tuning budget);
* ``real``: one real reference alone, the yardstick (USPS for digit targets: the same task in
  another hand; otherwise the reference with the smallest OTDD to Q);
* ``otdd``: ``P_a_hat``, the product's recommendation (soft labels);
* ``otdd_hard``: the same samples with the one-hot of their largest soft label;
* ``mnistm_proxy``: MNIST training digits on random backgrounds, a stand-in for MNIST-M,
  which the paper's Table 1 has among MNIST's references (diagnostic, MNIST target only);
* ``otdd_oracle``: ``P_a_hat`` with maps computed from the pool's *true* labels, a diagnostic
  bound on what better pseudo-labels could give (never a method);

then fine-tunes every pretrained model with every *fine-tuning protocol* (learning rate,
iterations, which layers adapt) and measures accuracy on a **validation split** of Q's
training data (disjoint from the pool; the only split any choice is made on) and on Q's test
split (reported, never used to choose).

Everything is checkpointed under ``--out``: pretrained weights in ``models/``, one JSON line
per fine-tuned run in ``results.jsonl``; a stopped run resumes where it was. Units (one target,
seed and pretraining set) run as Ray tasks when Ray is installed (``--backend``), else one
after another, through :func:`geoviz.tasks.run_tasks`.

``--model`` picks the network (:func:`geoviz.nn.models.make_model`'s ``architecture``):
``lenet5`` (default, the correlation study's) or ``spinalnet`` (the paper's Table 1 baseline
network); the model is part of every result's key, checkpoint name and report heading, so the
results of two models never mix (rows without a ``model`` field are LeNet-5's). Torch runs on
one intra-op thread (``--threads``) so that a background run leaves the other cores alone.

Run: ``.venv/bin/python benchmarks/ablation_transfer.py --out ablation-out`` (data from
``../shared/data/nist``, ``GEOVIZ_NIST_DIR``); ``--report`` prints the table of what is stored.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_transfer import load_split as _load_split

#: fine-tuning protocols: name -> (lr, iterations, body_lr_scale, head_only_iterations).
#: "paper" is the appendix's protocol at the cpu budget (all layers, Adam 1e-3).
PROTOCOLS: dict[str, tuple[float, int, float, int]] = {
    "paper (lr 1e-3, 300 it, all layers)": (1e-3, 300, 1.0, 0),
    "lr 1e-4, 300 it": (1e-4, 300, 1.0, 0),
    "lr 3e-4, 1000 it": (3e-4, 1000, 1.0, 0),
    "lr 1e-3, 100 it": (1e-3, 100, 1.0, 0),
    "lr 1e-3, 1000 it": (1e-3, 1000, 1.0, 0),
    "body lr x0.1": (1e-3, 300, 0.1, 0),
    "frozen body (linear probe)": (1e-3, 300, 0.0, 0),
    "head 100 it, then all": (1e-3, 300, 1.0, 100),
}
PRETRAIN_SETS = ("none", "real", "otdd", "otdd_hard", "otdd_oracle", "mnistm_proxy")
NAMES = ("mnist", "fashion_mnist", "usps", "kmnist")
MODELS = ("lenet5", "spinalnet")
DEFAULT_MODEL = "lenet5"
DIGITS = {"mnist", "usps"}


@dataclass(frozen=True)
class Unit:
    """One pretraining: target, seed, pretraining set (its fine-tunings follow it)."""

    target: str
    seed: int
    pretrain_set: str


@functools.lru_cache(maxsize=4)
def _datasets_cached(target: str, n: int, n_val: int, n_test: int, data_seed: int, preprocess: str):
    return _build_datasets(target, n, n_val, n_test, data_seed, preprocess)


def _datasets(target: str, args: argparse.Namespace):
    pool, val, test, refs = _datasets_cached(
        target, args.n, args.n_val, args.n_test, args.data_seed, args.preprocess
    )
    if args.with_mnistm_proxy:
        refs = (*refs, _mnistm_proxy(target, args))
    return pool, val, test, refs


def _build_datasets(
    target: str, n: int, n_val: int, n_test: int, data_seed: int, preprocess: str = "resize"
):
    """``(pool, validation, test, references)`` harmonised to 32x32 grey; pool and validation
    are disjoint random parts of Q's training split (seeded by ``--data-seed``)."""
    from geoviz.data.preprocess import box_normalise, harmonize, stratified_subsample

    full = _load_split(target, "train")
    order = np.random.default_rng(data_seed).permutation(full.n_samples)
    val = full.subset(order[:n_val])
    pool = full.subset(order[n_val : n_val + n])
    test = stratified_subsample(_load_split(target, "test"), n_test, seed=data_seed)
    refs = [
        stratified_subsample(_load_split(r, "train"), n, seed=data_seed)
        for r in NAMES
        if r != target
    ]
    raw = [pool, val, test, *refs]
    if preprocess == "box":
        raw = [box_normalise(ds) for ds in raw]
    sets = harmonize(raw, size=32, channels="grey")
    return sets[0], sets[1], sets[2], tuple(sets[3:])


def _task(target: str, seed: int, args: argparse.Namespace):
    from geoviz.transfer.experiment import make_task

    pool, val, test, refs = _datasets(target, args)
    return make_task(pool, test, refs, args.k, seed=seed, n_neighbors=args.pseudo_knn), val


def _geodesic(pool, refs, args: argparse.Namespace, seed: int):
    from geoviz.backend import get_cache
    from geoviz.geodesic.config import GeodesicConfig
    from geoviz.geodesic.pipeline import fit_geodesic
    from geoviz.ot.otdd_cost import OTDDConfig

    config = GeodesicConfig(otdd=OTDDConfig(epsilon=args.epsilon, seed=seed))
    return fit_geodesic(pool, list(refs), config, cache=get_cache())


def _real_reference(target: str, refs, geodesic) -> Any:
    """USPS for a digit target, else the reference with the smallest OTDD to Q."""
    names = [r.name for r in refs]
    if target in DIGITS:
        return refs[names.index(next(n for n in names if n in DIGITS))]
    return refs[int(np.argmin(np.asarray(geodesic.otdd)))]


def _pretraining_set(unit: Unit, task, args: argparse.Namespace):
    """The unit's pretraining dataset (``None`` for ``none``) and a description."""
    if unit.pretrain_set == "none":
        return None, {}
    if unit.pretrain_set == "mnistm_proxy":
        return _mnistm_proxy(unit.target, args), {"reference": "MNIST-M proxy"}
    if unit.pretrain_set == "real":
        geo = _geodesic(task.target_train, task.references, args, unit.seed)
        ref = _real_reference(unit.target, task.references, geo)
        return ref, {"reference": ref.name}
    pool = task.target_train
    truth = _datasets(unit.target, args)[0]  # the same samples with their true labels
    info: dict[str, Any] = {}
    if unit.pretrain_set == "otdd_oracle":
        pool = truth  # a diagnostic bound only
    else:
        info["pseudo_label_accuracy"] = float((pool.labels.numpy() == truth.labels.numpy()).mean())
    geo = _geodesic(pool, task.references, args, unit.seed)
    info["a_hat"] = [float(v) for v in geo.a_hat]
    info["w2_hat"] = float(geo.w2_hat)
    pa = geo.interpolate(geo.a_hat)
    if unit.pretrain_set == "otdd_hard":
        # the same samples, each with the one-hot of its largest soft label
        import dataclasses

        import torch

        hard = torch.nn.functional.one_hot(pa.soft_labels.argmax(1), pa.soft_labels.shape[1])
        pa = dataclasses.replace(pa, soft_labels=hard.to(pa.soft_labels.dtype))
    return pa, info


def _mnistm_proxy(target: str, args: argparse.Namespace):
    return _mnistm_proxy_cached(target, args.n, args.n_val, args.data_seed, args.preprocess)


@functools.lru_cache(maxsize=2)
def _mnistm_proxy_cached(target: str, n: int, n_val: int, data_seed: int, preprocess: str):
    """A grey stand-in for MNIST-M (Ganin & Lempitsky 2015), which the paper's Table 1 has
    among MNIST's references: MNIST *training* digits (disjoint from the pool and the
    validation split) blended as ``|background - digit|`` with a random smooth background,
    as MNIST-M blends them with photo patches. A diagnostic of what a reference built from
    the target's own digit images gives; MNIST-M itself is not available offline."""
    import torch

    from geoviz.data.dataset import LabeledDataset
    from geoviz.data.preprocess import box_normalise, harmonize

    if target != "mnist":
        raise ValueError("the MNIST-M proxy is a reference for the MNIST target only")
    full = _load_split("mnist", "train")
    order = np.random.default_rng(data_seed).permutation(full.n_samples)
    digits = full.subset(order[n_val + n : n_val + 2 * n])
    if preprocess == "box":
        digits = box_normalise(digits)
    (digits,) = harmonize([digits], size=32, channels="grey")
    rng = np.random.default_rng(data_seed + 1)
    coarse = torch.from_numpy(rng.random((digits.n_samples, 1, 4, 4), dtype=np.float32))
    background = torch.nn.functional.interpolate(coarse, size=(32, 32), mode="bicubic")
    blended = (background.clamp(0, 1).reshape(digits.n_samples, -1) - digits.features).abs()
    return LabeledDataset(
        blended.numpy(),
        digits.labels.numpy(),
        digits.classes,
        name="mnistm_proxy",
        image_shape=(1, 32, 32),
    )


def _key(*parts: Any) -> str:
    return "|".join(str(p) for p in parts)


def _unit_key(unit: Unit, protocol: str, model: str) -> str:
    """A result's key; LeNet-5's keeps the form it had before ``--model`` (stored results)."""
    parts: tuple[Any, ...] = (unit.target, unit.seed, unit.pretrain_set, protocol)
    return _key(*parts) if model == DEFAULT_MODEL else _key(*parts, model)


def _done(out: Path) -> set[str]:
    path = out / "results.jsonl"
    if not path.exists():
        return set()
    return {json.loads(line)["key"] for line in path.read_text().splitlines() if line.strip()}


def run_unit(unit: Unit, args: argparse.Namespace) -> int:
    """Pretrain (or load the checkpoint), fine-tune with every protocol, append the results."""
    import torch

    from geoviz.nn.models import make_model
    from geoviz.nn.training import (
        TrainConfig,
        evaluate,
        finetune,
        get_preset,
        pretrain,
        train_from_scratch,
    )

    out: Path = args.out
    done = _done(out)
    protocols = {n: p for n, p in PROTOCOLS.items() if n in args.protocols}
    todo = [n for n in protocols if _unit_key(unit, n, args.model) not in done]
    if not todo:
        return 0
    preset = get_preset(args.preset)
    task, val = _task(unit.target, unit.seed, args)
    knobs = set(inspect.signature(finetune).parameters)
    written = 0
    start = time.perf_counter()
    data, info = _pretraining_set(unit, task, args)
    model = None
    pretrain_seconds = 0.0
    if data is not None:
        suffix = "" if args.model == DEFAULT_MODEL else f"-{args.model}"
        ckpt = (
            out
            / "models"
            / f"{unit.target}-{unit.seed}-{unit.pretrain_set}-{args.preset}{suffix}.pt"
        )
        if ckpt.exists():
            n_outputs = (
                int(data.soft_labels.shape[1]) if hasattr(data, "soft_labels") else data.n_classes
            )
            model = make_model(data, n_outputs, architecture=args.model)
            model.load_state_dict(torch.load(ckpt, weights_only=True))
            model.eval()
        else:
            t0 = time.perf_counter()
            model = pretrain(data, preset.pretrain, seed=unit.seed, architecture=args.model)
            pretrain_seconds = time.perf_counter() - t0
            ckpt.parent.mkdir(parents=True, exist_ok=True)
            tmp = ckpt.with_suffix(".tmp")
            torch.save(model.state_dict(), tmp)
            tmp.replace(ckpt)
    for name in todo:
        lr, iterations, body_scale, head_only = protocols[name]
        config = TrainConfig(iterations=iterations, batch_size=preset.finetune.batch_size, lr=lr)
        extra: dict[str, Any] = {}
        if body_scale != 1.0 or head_only:
            if not {"body_lr_scale", "head_only_iterations"} <= knobs or model is None:
                continue  # this library version cannot run the protocol (or nothing to adapt)
            extra = {"body_lr_scale": body_scale, "head_only_iterations": head_only}
        t0 = time.perf_counter()
        if model is None:
            tuned = train_from_scratch(
                task.target_fewshot, config, seed=unit.seed, architecture=args.model
            )
        else:
            tuned = finetune(model, task.target_fewshot, config, seed=unit.seed, **extra)
        row = {
            "key": _unit_key(unit, name, args.model),
            "model": args.model,
            "target": unit.target,
            "seed": unit.seed,
            "pretrain_set": unit.pretrain_set,
            "protocol": name,
            "val_accuracy": float(evaluate(tuned, val)),
            "test_accuracy": float(evaluate(tuned, task.target_test)),
            "finetune_seconds": time.perf_counter() - t0,
            "pretrain_seconds": pretrain_seconds,
            "preset": args.preset,
            "preprocess": args.preprocess,
            "pseudo_knn": args.pseudo_knn,
            "references": [r.name for r in task.references],
            "pretrain_config": [
                preset.pretrain.iterations,
                preset.pretrain.batch_size,
                preset.pretrain.lr,
            ],
            "n": args.n,
            "k": args.k,
            **info,
        }
        with open(out / "results.jsonl", "a") as fh:
            fh.write(json.dumps(row) + "\n")
        written += 1
    print(
        f"  {unit}: {written} runs in {time.perf_counter() - start:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return written


def report(out: Path) -> str:
    """Markdown table of the stored runs: mean +- sd over seeds of test (validation) accuracy."""
    path = out / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for r in rows:
        r.setdefault("model", DEFAULT_MODEL)  # rows stored before --model are LeNet-5's
    lines = []
    for model, target in dict.fromkeys((r["model"], r["target"]) for r in rows):
        rows_of = [r for r in rows if r["model"] == model and r["target"] == target]
        sets = [s for s in PRETRAIN_SETS if any(r["pretrain_set"] == s for r in rows_of)]
        lines += [
            f"\n**Q = {target}**, model {model}, {rows_of[0]['k']}-shot, N = {rows_of[0]['n']}, "
            f"preset {rows_of[0]['preset']}: "
            "test accuracy % (validation %), mean ± sd over seeds\n",
            "| fine-tuning protocol | " + " | ".join(sets) + " |",
            "|---|" + "---:|" * len(sets),
        ]
        for protocol in PROTOCOLS:
            cells = []
            for s in sets:
                got = [r for r in rows_of if r["pretrain_set"] == s and r["protocol"] == protocol]
                if not got:
                    cells.append("")
                    continue
                test = 100 * np.array([r["test_accuracy"] for r in got])
                val = 100 * np.array([r["val_accuracy"] for r in got])
                sd = test.std(ddof=1) if len(test) > 1 else 0.0
                cells.append(f"{test.mean():.1f} ± {sd:.1f} ({val.mean():.1f}), n={len(got)}")
            if any(cells):
                lines.append(f"| {protocol} | " + " | ".join(cells) + " |")
        extra = [r for r in rows_of if "pseudo_label_accuracy" in r]
        if extra:
            acc = np.mean([r["pseudo_label_accuracy"] for r in extra])
            lines.append(f"\npool pseudo-label accuracy (1-NN): {100 * acc:.1f}%")
        secs = [r["pretrain_seconds"] for r in rows_of if r["pretrain_seconds"]]
        if secs:
            lines.append(f"pretraining: {np.mean(secs):.0f} s per run (mean of {len(secs)})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from geoviz.tasks import run_tasks
    from geoviz.vocabulary import DEFAULT_EPSILON

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--targets", default="mnist,kmnist")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--sets", default=",".join(PRETRAIN_SETS))
    p.add_argument("--protocols", default="all", help="names separated by ';', or all")
    p.add_argument("--n", type=int, default=5000, help="pool and reference samples")
    p.add_argument("--n-val", type=int, default=1000, help="validation samples of Q's train split")
    p.add_argument("--n-test", type=int, default=5000)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--preset", default="cpu")
    p.add_argument("--epsilon", type=float, default=DEFAULT_EPSILON)
    p.add_argument("--data-seed", type=int, default=0)
    p.add_argument("--backend", default="sequential", choices=["auto", "ray", "sequential"])
    p.add_argument("--out", type=Path, default=Path("ablation-out"))
    p.add_argument(
        "--preprocess",
        default="resize",
        choices=["resize", "box"],
        help="resize: every set resized to 32x32 as is; box: MNIST's digit-box normalisation first",
    )
    p.add_argument(
        "--with-mnistm-proxy",
        action="store_true",
        help="add the MNIST-M proxy to the references of the geodesic (MNIST target)",
    )
    p.add_argument("--pseudo-knn", type=int, default=1, help="neighbours of the pool's kNN labels")
    p.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        choices=MODELS,
        help="network pretrained and fine-tuned (geoviz.nn.models.make_model's architecture)",
    )
    p.add_argument("--threads", type=int, default=1, help="torch intra-op CPU threads")
    p.add_argument("--report", action="store_true", help="only print the stored results")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report:
        print(report(args.out))
        return 0
    args.protocols = list(PROTOCOLS) if args.protocols == "all" else args.protocols.split(";")
    unknown = [name for name in args.protocols if name not in PROTOCOLS]
    if unknown:
        p.error(f"unknown protocol(s) {unknown}; choose from {list(PROTOCOLS)}")
    import torch

    torch.set_num_threads(args.threads)
    units = [
        Unit(t, int(s), ps)
        for t in args.targets.split(",")
        for s in args.seeds.split(",")
        for ps in args.sets.split(",")
    ]
    start = time.perf_counter()
    run_tasks(
        lambda u: run_unit(u, args),
        units,
        backend=args.backend,
        address=os.environ.get("RAY_ADDRESS") or None,  # the entry point reads the environment
    )
    print(f"done in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    print(report(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
