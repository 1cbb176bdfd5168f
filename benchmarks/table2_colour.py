"""The paper's Table 2 protocol, small, on a colour target: pixel space vs the encoder (issue 22).

Q is MNIST-M-style (:func:`geoviz.data.colour.photo_digits`: MNIST *test* digits on patches of
scikit-learn's sample photos; Q's training split from the first 5000 test digits, its test
split from the last 5000, so they never share a digit), the references are MNIST,
Fashion-MNIST and USPS *training* samples (grey, as RGB), from ``../shared/data/nist``.
For every seed the ``k``-shot task is drawn (:func:`geoviz.transfer.experiment.make_task`: the
other target samples carry pseudo-labels, by label spreading on Q's kNN graph unless
``--pseudo-method knn``; no test label is used) and these pretraining
sets are compared, each pretrained then fine-tuned on the ``k``-shot set and scored on Q's
test split (preset ``--preset``):

* none (train on the ``k``-shot set only; the denominator of the relative improvement);
* each single reference ``P_i`` (its own samples and labels);
* pooling (all references together, their labels concatenated);
* sub-pooling (for each target sample its 10 nearest reference samples in the space,
  labelled with the target sample's (pseudo-)label);
* Mixup at uniform weights and at ``a_hat`` (random pairs of reference samples);
* OTDD at uniform weights and at ``a_hat`` (``P_a`` of the geodesic in the space).

Rows that depend on the space (sub-pooling, Mixup at ``a_hat``, OTDD) are run in pixel space
and in the encoder's space; in the encoder's rows Q's pseudo-labels are found in the
encoder's space (``--pseudo-labels pixels``: in pixel space, as ``make_task`` does). The relative improvement of a row is the paper's mean over seeds
of ``accuracy / accuracy(none) - 1``. Also printed: each space's ``a_hat`` and the maps'
class agreement on Q.

Run: ``.venv/bin/python benchmarks/table2_colour.py --seeds 0,1,2`` (about 3 min per seed on
2 idle cores at the defaults). The shipped encoder's digest (SHA-256 of
``assets/encoders/glyphs.npz``) is recorded with every seed: another encoder gives other
numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_features import agreement, nist  # noqa: E402


def pooled(refs, label_space):
    """All references together, one-hot labels over the concatenated label space."""
    from geoviz.data.dataset import SoftLabeledDataset

    feats, soft = [], []
    for i, ref in enumerate(refs):
        block = label_space.block_slices[i]
        onehot = torch.zeros(ref.n_samples, len(label_space.class_names))
        onehot[torch.arange(ref.n_samples), block.start + ref.labels] = 1.0
        feats.append(ref.features)
        soft.append(onehot)
    return SoftLabeledDataset(
        features=torch.cat(feats),
        soft_labels=torch.cat(soft),
        class_names=tuple(label_space.class_names),
        name="pool",
        image_shape=refs[0].image_shape,
    )


def sub_pooled(target, refs, target_feats, ref_feats, k: int = 10):
    """For each target sample its ``k`` nearest reference samples (in the given features),
    labelled with the target sample's label."""
    from geoviz.data.dataset import LabeledDataset

    images = torch.cat([r.features for r in refs])
    space = torch.cat(ref_feats)
    picked, labels = [], []
    for start in range(0, target.n_samples, 512):
        d = torch.cdist(target_feats[start : start + 512], space)
        nn_idx = d.topk(k, largest=False).indices
        picked.append(nn_idx.reshape(-1))
        labels.append(target.labels[start : start + 512].repeat_interleave(k))
    idx = torch.cat(picked)
    return LabeledDataset(
        features=images[idx],
        labels=torch.cat(labels),
        classes=target.classes,
        name="subpool",
        image_shape=refs[0].image_shape,
    )


def encoder_digest() -> str:
    """The first 16 hex digits of the shipped encoder file's SHA-256 (it may be replaced)."""
    import hashlib

    from geoviz.features.pretrained import encoder_path

    return hashlib.sha256(encoder_path().read_bytes()).hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument(
        "--n", type=int, default=1000, help="samples of Q's train split and of each P_i"
    )
    parser.add_argument("--n-test", type=int, default=2000)
    parser.add_argument("--k", type=int, default=10, help="labelled target samples per class")
    parser.add_argument("--preset", default="cpu")
    parser.add_argument(
        "--pseudo-labels",
        choices=("space", "pixels"),
        default="space",
        help="where the encoder rows find Q's kNN pseudo-labels (default: the encoder's space)",
    )
    parser.add_argument(
        "--pseudo-method",
        choices=("spread", "knn"),
        default="spread",
        help="how Q's unlabelled samples are labelled (geoviz.data.pseudo_labels)",
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument(
        "--label-rows-only",
        action="store_true",
        help="skip the rows that do not read Q's pseudo-labels (single references, pooling, "
        "Mixup at uniform weights): a control run of another --pseudo-method",
    )
    parser.add_argument(
        "--spaces",
        default="pixels,default",
        help="spaces of the space-dependent rows: pixels, default (what features='auto' "
        "chooses for this target: the shipped encoder), encoder (one trained here, cpu preset)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/table2-colour.json")
    args = parser.parse_args()

    from geoviz.backend import DiskCache, configure_torch
    from geoviz.data.colour import photo_digits
    from geoviz.data.preprocess import few_shot, harmonize
    from geoviz.features import EncoderSpace, PixelSpace
    from geoviz.geodesic.config import GeodesicConfig, space_of
    from geoviz.geodesic.pipeline import fit_in_space
    from geoviz.nn.training import evaluate, finetune, get_preset, pretrain
    from geoviz.transfer.experiment import make_task, run_method

    configure_torch(threads=args.threads)
    seeds = [int(s) for s in args.seeds.split(",")]
    digits = nist("mnist", "test", 10_000)
    half = torch.arange(5000)
    train_digits = digits.subset(half)
    test_digits = digits.subset(half + 5000)
    preset = get_preset(args.preset)
    cache = DiskCache(ROOT / "benchmarks/results/.cache-table2")
    results: dict[str, list[float]] = {}
    facts: dict[str, list] = {}

    def record(row: str, acc: float) -> None:
        results.setdefault(row, []).append(acc)
        print(f"  {row}: {100 * acc:.1f}", flush=True)

    for seed in seeds:
        start = time.perf_counter()
        from geoviz.data.preprocess import stratified_subsample

        q_train = photo_digits(
            stratified_subsample(train_digits, args.n, seed=seed), size=32, seed=seed
        )
        q_test = photo_digits(
            stratified_subsample(test_digits, args.n_test, seed=seed), size=32, seed=1000 + seed
        )
        refs = [nist(n, "train", args.n, seed) for n in ("mnist", "fashion_mnist", "usps")]
        q_train, q_test, *refs = harmonize([q_train, q_test, *refs], size=32, channels="rgb")
        task = make_task(q_train, q_test, refs, args.k, seed=seed, pseudo_labels=args.pseudo_method)
        facts.setdefault("encoder digest (sha256 of glyphs.npz, first 16)", []).append(
            encoder_digest()
        )
        facts.setdefault("pseudo-label accuracy (pixels)", []).append(
            float(np.mean((task.target_train.labels == q_train.labels).numpy()))
        )
        print(f"seed {seed}: task ready", flush=True)

        def trained(dataset, task=task, seed=seed) -> float:
            model = pretrain(dataset, preset.pretrain, seed=seed)
            model = finetune(model, task.target_fewshot, preset.finetune, seed=seed)
            return evaluate(model, task.target_test)

        record("none (k-shot only)", run_method(task, "fewshot", preset=preset, seed=seed).accuracy)
        for ref in task.references if not args.label_rows_only else ():
            record(f"single: {ref.name}", trained(ref))
        m = task.m
        uniform = np.full(m, 1.0 / m)
        spaces = []
        for space_name in args.spaces.split(","):
            if space_name == "pixels":
                spaces.append((space_name, PixelSpace()))
            elif space_name == "encoder":
                spaces.append((space_name, EncoderSpace("cpu", cache=cache).with_seed(seed)))
            else:  # the product's default: chosen from the data, as fit_geodesic does
                space, choice = space_of(GeodesicConfig(), cache, [q_train, *refs])
                assert choice is not None
                facts.setdefault("default space", []).append(f"{choice.label}: {choice.reason}")
                spaces.append((space_name, space))
        for space_name, space in spaces:
            space_task = task
            if space_name != "pixels" and args.pseudo_labels == "space":
                # Q's pseudo-labels found where the costs live (as load_spec_datasets does)
                fitted0 = space.fit([task.target_train, *task.references])
                z = fitted0.transform(q_train).features
                shot = few_shot(q_train, args.k, seed=seed, embedding=z, method=args.pseudo_method)
                space_task = dataclasses.replace(task, target_train=shot.dataset)
                facts.setdefault(f"pseudo-label accuracy ({space_name})", []).append(
                    shot.pseudo_label_accuracy
                )
            geo = fit_in_space(
                space_task.target_train, list(space_task.references), None, space, cache=cache
            )
            facts.setdefault(f"a_hat ({space_name})", []).append(geo.a_hat.tolist())
            facts.setdefault(f"agreement ({space_name})", []).append(
                [agreement(geo, i, q_train) for i in range(m)]
            )
            if space_name == "pixels":
                if not args.label_rows_only:
                    record("pooling", trained(pooled(task.references, geo.label_space)))
                    record(
                        "Mixup, uniform",
                        run_method(
                            task, "mixup", weights=uniform, preset=preset, seed=seed
                        ).accuracy,
                    )
                record(
                    "OTDD, uniform",
                    run_method(
                        task, "otdd", geodesic=geo, weights=uniform, preset=preset, seed=seed
                    ).accuracy,
                )
            fitted = space.fit([space_task.target_train, *task.references])
            t_feats = fitted.transform(space_task.target_train).features
            r_feats = [fitted.transform(r).features for r in task.references]
            record(
                f"sub-pooling ({space_name})",
                trained(sub_pooled(space_task.target_train, task.references, t_feats, r_feats)),
            )
            record(
                f"Mixup, a_hat ({space_name})",
                run_method(task, "mixup", weights=geo.a_hat, preset=preset, seed=seed).accuracy,
            )
            pa = geo.interpolate(geo.a_hat)
            facts.setdefault(f"P_a_hat size, label confidence ({space_name})", []).append(
                [pa.n_samples, round(float(pa.soft_labels.max(dim=1).values.mean()), 3)]
            )
            if space_name != "pixels":
                record(
                    f"OTDD, uniform ({space_name})",
                    run_method(
                        task, "otdd", geodesic=geo, weights=uniform, preset=preset, seed=seed
                    ).accuracy,
                )
            record(
                f"OTDD, a_hat ({space_name})",
                run_method(task, "otdd", geodesic=geo, preset=preset, seed=seed).accuracy,
            )
        elapsed = time.perf_counter() - start
        facts.setdefault("seconds, load average (1 min) at the end", []).append(
            [round(elapsed), round(os.getloadavg()[0], 1)]
        )
        print(f"seed {seed}: {elapsed:.0f} s", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                        "seeds_done": seeds[: seeds.index(seed) + 1],
                                        "accuracy": results, "facts": facts}, indent=1))  # fmt: skip

    base = np.asarray(results["none (k-shot only)"])
    print()
    print(f"Q = MNIST-M-style photo digits (32x32 RGB, {args.n} train / {args.n_test} test), "
          f"k = {args.k}, references mnist, fashion_mnist, usps ({args.n} each), "
          f"preset {args.preset}, seeds {seeds}")  # fmt: skip
    print("| pretraining set | accuracy (mean ± sd) | relative improvement |")
    print("|---|---:|---:|")
    for row, accs in results.items():
        acc = np.asarray(accs)
        rel = np.mean(acc / base - 1.0)
        print(f"| {row} | {100 * acc.mean():.1f} ± {100 * acc.std():.1f} | {100 * rel:+.1f}% |")
    for key, values in facts.items():
        print(f"{key}: {values}")


if __name__ == "__main__":
    main()
