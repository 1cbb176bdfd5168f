"""Training throughput of geoviz.nn.training on one CPU thread (issue 18, part 1).

Measures, in one run and on the same machine, samples per second of

- **plain loop** (the yardstick): a textbook PyTorch LeNet-5 loop, batch 64,
  Adam 1e-3, ``F.cross_entropy``, NCHW tensors prepared once, one thread;
- **library before**: the training loop of ``geoviz.transfer.training._fit`` as it
  was before issue 18 (copied below: the features gathered flat and converted to
  channels-last at every step, ReLU before max-pool), batch 64;
- **library after**: :func:`geoviz.nn.training.pretrain` at the ``cpu``
  preset (and at other batch sizes with ``--batches``);
- **evaluate**: :func:`geoviz.nn.training.evaluate` against a plain
  ``no_grad`` loop over batches of 1024.

The methods are run in interleaved rounds (``--rounds``) and the median is
reported, so a neighbour's load on a shared machine hits all of them alike.
``--accuracy`` also trains from scratch on bundled MNIST at each batch size
(same epochs, learning rate scaled by sqrt(batch / 64), or linearly with ``--lr-scaling``) and prints the test
accuracy, the check for a preset that changes the batch size.

Run: ``.venv/bin/python benchmarks/bench_training.py`` (about a minute).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from geoviz.backend import configure_torch
from geoviz.data.dataset import LabeledDataset
from geoviz.nn.training import (
    CPU_TRAIN_THREADS,
    PRESETS,
    TrainConfig,
    _batch_indices,
    evaluate,
    pretrain,
    soft_cross_entropy,
)


def _plain_lenet(n_classes: int = 10) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(1, 6, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(400, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, n_classes),
    )


class _Clock:
    """Wall and thread-CPU seconds since creation (one thread: CPU time ignores a busy neighbour)."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.thread_time()

    def stop(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.thread_time() - self.cpu


Seconds = tuple[float, float]


def plain_loop(x: torch.Tensor, labels: torch.Tensor, iterations: int, batch: int = 64) -> Seconds:
    """The yardstick: a plain batch-64 PyTorch loop; returns (wall, CPU) seconds."""
    torch.manual_seed(0)
    model = _plain_lenet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    images = x.reshape(-1, 1, 32, 32).contiguous()
    gen = torch.Generator().manual_seed(0)
    clock = _Clock()
    perm, pos = torch.randperm(len(images), generator=gen), 0
    for _ in range(iterations):
        if pos + batch > len(images):
            perm, pos = torch.randperm(len(images), generator=gen), 0
        idx = perm[pos : pos + batch]
        pos += batch
        opt.zero_grad()
        loss = F.cross_entropy(model(images[idx]), labels[idx])
        loss.backward()
        opt.step()
    return clock.stop()


class _OldLeNet(nn.Module):
    """LeNet5 as it was before issue 18: ReLU before max-pool, input laid out at every step."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.body = nn.Sequential(
            nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU()
        )
        self.head = nn.Linear(84, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim == 2:
            x = x.reshape(x.shape[0], 1, 32, 32)
        if not self.features[3].weight.is_contiguous():
            x = x.contiguous(memory_format=torch.channels_last)
        return self.head(self.body(self.features(x)))


def library_before(x: torch.Tensor, targets: torch.Tensor, config: TrainConfig) -> Seconds:
    """The pre-issue-18 ``_fit`` loop (git 5534b86), on CPU; returns (wall, CPU) seconds."""
    torch.manual_seed(0)
    model = _OldLeNet().to(memory_format=torch.channels_last)
    model.train()
    clock = _Clock()
    xs, ys = x.to("cpu"), targets.to("cpu")
    optimiser = torch.optim.Adam(model.parameters(), lr=config.lr)
    generator = torch.Generator().manual_seed(0)
    n_steps = config.iterations
    every = max(1, n_steps // 50)
    # one thread, as the old loop ran: main() sets it for every method (configure_torch)
    batches = _batch_indices(xs.shape[0], config.batch_size, n_steps, generator)
    for step, idx in enumerate(batches):
        idx = idx.to("cpu")
        optimiser.zero_grad(set_to_none=True)
        loss = soft_cross_entropy(model(xs[idx]), ys[idx])
        loss.backward()
        optimiser.step()
        check = (step + 1) % every == 0 or step + 1 == n_steps
        if check and not np.isfinite(loss.item()):
            raise RuntimeError("diverged")
    model.to("cpu", memory_format=torch.contiguous_format).eval()
    return clock.stop()


def plain_evaluate(model: nn.Module, data: LabeledDataset) -> Seconds:
    """A plain ``no_grad`` evaluation loop over batches of 1024; returns (wall, CPU) seconds."""
    clock = _Clock()
    images = data.features.reshape(-1, 1, 32, 32)
    correct = 0
    with torch.no_grad():
        for s in range(0, data.n_samples, 1024):
            pred = model(images[s : s + 1024]).argmax(1)
            correct += int((pred == data.labels[s : s + 1024]).sum())
    return clock.stop()


def _median_rate(samples: int, runs: list[Seconds], which: int) -> float:
    return samples / statistics.median(r[which] for r in runs)


def _mnist(split: str, n: int) -> LabeledDataset:
    from geoviz.data.preprocess import harmonize
    from geoviz.data.registry import load_dataset

    return harmonize([load_dataset("mnist", split=split, n=n, seed=0)], size=32)[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=5000, help="training samples (random 32x32 images)")
    p.add_argument("--iterations", type=int, default=150, help="steps per measurement at batch 64")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batches", default="64,128,256", help="batch sizes for pretrain()")
    p.add_argument("--accuracy", action="store_true", help="also the MNIST accuracy check")
    p.add_argument("--acc-epochs", type=float, default=6.0)
    p.add_argument("--acc-seeds", type=int, default=3)
    p.add_argument("--lr-scaling", default="sqrt", choices=["sqrt", "linear"])
    args = p.parse_args(argv)

    # the entry point sets torch's process-wide settings; no denormal flushing, as the
    # training loop has never had it (the rows stay comparable with earlier runs)
    configure_torch(threads=CPU_TRAIN_THREADS, flush_denormal=False)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(args.n, 1024, generator=gen)
    labels = torch.randint(0, 10, (args.n,), generator=gen)
    data = LabeledDataset(
        features=x, labels=labels, classes=tuple("0123456789"), image_shape=(1, 32, 32)
    )
    one_hot = data.one_hot(torch.float32)
    cpu = PRESETS["cpu"].pretrain
    batches = [int(b) for b in args.batches.split(",")]
    it64 = args.iterations

    def lib(batch: int) -> Callable[[], Seconds]:
        cfg = TrainConfig(iterations=max(10, it64 * 64 // batch), batch_size=batch, lr=cpu.lr)

        def run() -> Seconds:
            clock = _Clock()
            pretrain(data, cfg, seed=0, device="cpu")
            return clock.stop()

        return run

    cfg64 = TrainConfig(iterations=it64, batch_size=64, lr=cpu.lr)
    methods: dict[str, tuple[int, Callable[[], Seconds]]] = {
        "plain loop, batch 64 (yardstick)": (it64 * 64, lambda: plain_loop(x, labels, it64)),
        "library before (HEAD 5534b86 _fit), batch 64": (
            it64 * 64,
            lambda: library_before(x, one_hot, cfg64),
        ),
    }
    for b in batches:
        tag = " = cpu preset" if b == cpu.batch_size else ""
        methods[f"library after: pretrain(), batch {b}{tag}"] = (
            max(10, it64 * 64 // b) * b,
            lib(b),
        )
    model = pretrain(data, TrainConfig(iterations=2, batch_size=64), seed=0, device="cpu")
    plain_model = _plain_lenet().eval()
    methods["evaluate(): plain no_grad loop, batch 1024"] = (
        args.n,
        lambda: plain_evaluate(plain_model, data),
    )
    methods["evaluate(): library after"] = (
        args.n,
        lambda: _timed(lambda: evaluate(model, data, device="cpu")),
    )

    times: dict[str, list[Seconds]] = {k: [] for k in methods}
    for _ in range(args.rounds):
        for name, (_, fn) in methods.items():
            times[name].append(fn())

    first = next(iter(methods))
    yard = [_median_rate(methods[first][0], times[first], w) for w in (0, 1)]
    print(
        f"one CPU thread (torch {torch.__version__}), N = {args.n} random 32x32 grey images, "
        f"{args.rounds} interleaved rounds, medians; CPU s = the thread's CPU time"
    )
    print(f"| {'what':<50} | {'samples/s':>9} | {'per CPU s':>9} | {'x plain':>7} |")
    print(f"|{'-' * 52}|{'-' * 10}:|{'-' * 10}:|{'-' * 8}:|")
    eval_plain = yard
    for name, (samples, _) in methods.items():
        rate = [_median_rate(samples, times[name], w) for w in (0, 1)]
        if name.startswith("evaluate(): plain"):
            eval_plain = rate
        ref = eval_plain if name.startswith("evaluate(): library") else yard
        ratio = "" if name.startswith("evaluate(): plain") else f"{rate[1] / ref[1]:.2f}"
        print(f"| {name:<50} | {rate[0]:>9.0f} | {rate[1]:>9.0f} | {ratio:>7} |")
    print(
        "x plain: samples per CPU second over the yardstick's (evaluate rows: over the plain "
        "evaluation loop's)"
    )

    if args.accuracy:
        _accuracy(batches, args.acc_epochs, args.acc_seeds, args.lr_scaling)
    return 0


def _timed(fn: Callable[[], object]) -> Seconds:
    clock = _Clock()
    fn()
    return clock.stop()


def _accuracy(batches: list[int], epochs: float, seeds: int, scaling: str) -> None:
    """Train from scratch on bundled MNIST at each batch size (same epochs, lr scaled with it)."""
    from geoviz.nn.training import train_from_scratch

    train, test = _mnist("train", 5000), _mnist("test", 2000)
    print(
        f"\nMNIST from scratch: {train.n_samples} train / {test.n_samples} test, {epochs:g} epochs"
    )
    print("| batch | lr | iterations | accuracy % (mean +- std over seeds) | wall s |")
    print("|---:|---:|---:|---|---:|")
    for b in batches:
        lr = 1e-3 * (b / 64) ** (0.5 if scaling == "sqrt" else 1.0)
        its = round(epochs * train.n_samples / b)
        accs, start = [], time.perf_counter()
        for seed in range(seeds):
            m = train_from_scratch(train, TrainConfig(its, b, lr), seed=seed, device="cpu")
            accs.append(100 * evaluate(m, test, device="cpu"))
        wall = (time.perf_counter() - start) / seeds
        print(
            f"| {b} | {lr:.2g} | {its} | {np.mean(accs):.1f} +- {np.std(accs):.1f} | {wall:.1f} |"
        )


if __name__ == "__main__":
    sys.exit(main())
