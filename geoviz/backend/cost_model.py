"""How long geoviz's long steps should take on this machine: a small cost model, calibrated
here and kept in the cache.

Each step's time is modelled as a fixed overhead plus a work term::

    seconds(step) = contention * factor[step] * (overhead[step] + work(step, sizes) / rate)

* ``work`` is counted in multiply-adds (or their equivalent) by the formula of the step below;
* ``rate`` is this machine's multiply-add rate in units of 1e9 per second, measured by a
  quick micro-benchmark (:func:`measure_rate`: a float32 matrix product on torch's CPU
  threads, or on the device); it carries the cores, the threads and the device;
* ``overhead[step]`` (seconds at a reference rate of 1) and the unit costs in the work formulas
  are the shipped priors, fitted once on the 2-core development machine
  (``benchmarks/bench_estimates.py``);
* ``factor[step]`` (1 at first) is learned from the measured times of past steps
  (:meth:`CostModel.learn`: a geometric moving average of measured / predicted), so the model
  follows this machine and its libraries;
* ``contention = max(1, (load + threads) / cores) ** 0.5`` (:func:`contention`) is the
  machine's load when the estimate is made: ``load`` the 1-minute load average, ``threads``
  the step's torch threads, ``cores`` the CPU count; with more runnable threads than cores
  each gets a share (damped: other jobs' threads often wait). It is not kept: each estimate
  reads it anew.

Work formulas (``n``: target samples, ``m``: reference samples, ``d``: feature dimension,
``c_q``, ``c_p``: classes, ``pixels``: height x width x channels):

==============  =================================================================
``encoder``     ``n * pixels * 12000`` (a small conv net at its own input size, channels-last:
                ~12000 multiply-add equivalents per input value, measured)
``sinkhorn``    ``n * m * (d + 300 + iterations * 50)`` (the ground cost, then each
                log-domain iteration on the plan's entries; ``iterations`` per map
                depends on the space, :data:`ITERATIONS`, and is learned per space
                from each fit's diagnostics, :meth:`CostModel.learn_iterations`)
``labels``      ``n_eff * d * min(d, n_eff / (c_q + c_p)) * 15`` with ``n_eff = min(n, 200 c_q)
                + min(m, 200 c_p)`` (the Gaussian label distances: each class's covariance
                from at most 200 samples, of rank at most its samples, and its roots)
``bootstrap``   ``replicates * n * refs * 2000``
``training``    ``iterations * batch * params * 55`` (forward, backward and Adam: ~55
                multiply-add equivalents per parameter and sample on a CPU)
==============  =================================================================

The calibration (rate, factors) is a small JSON file in the geoviz cache folder
(:func:`geoviz.backend.settings.default_cache_dir`), keyed by the threads and the device; a
file that cannot be read is ignored with a warning and measured again.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, get_args

__all__ = [
    "CALIBRATION_FILE",
    "DEFAULT_ITERATIONS",
    "ITERATIONS",
    "CostModel",
    "Estimate",
    "EtaClock",
    "Step",
    "contention",
    "eta_seconds",
    "fit_estimate",
    "fit_space",
    "format_seconds",
    "load_cost_model",
    "measure_rate",
    "record_took",
    "remember",
    "remember_iterations",
    "took_sentence",
    "training_estimate",
    "work",
]

Step = Literal["encoder", "sinkhorn", "labels", "bootstrap", "training"]
STEPS: tuple[Step, ...] = get_args(Step)

#: the calibration file's name inside the cache folder
CALIBRATION_FILE = "cost_model.json"
_VERSION = 1

#: seconds of fixed cost per step at rate 1 (divided by the rate: a faster machine pays less)
_OVERHEAD: dict[Step, float] = {
    "encoder": 5.0,
    "sinkhorn": 2.0,
    "labels": 0.5,
    "bootstrap": 6.0,
    "training": 70.0,
}
#: seconds at rate 1 of a fit besides its steps (the space's fit, the (2,Q) distances, a_hat)
_FIT_OVERHEAD = 17.0
#: how much a learned factor moves toward one new measurement (in log space)
_LEARN_WEIGHT = 0.5
#: learned factors are kept within this range of the prior
_FACTOR_RANGE = (1 / 30, 30.0)


#: multiply-add equivalents per plan entry and Sinkhorn iteration (log-sum-exp in float64),
#: fitted on whole cold fits on the 2-core machine (``bench_estimates.py --cold-only``)
_PER_ENTRY_ITERATION = 50.0
#: Sinkhorn iterations of one map per space, the prior (measured at n = 1000-2000 after the
#: Sinkhorn-Newton steps of 7825185: digit box 149-294, grey pixels 117-175, colour pixels
#: 157-297, the encoder on colour digits 176-758); learned per space from each fit
ITERATIONS: dict[str, float] = {"pixels": 150.0, "box": 200.0, "encoder": 600.0}
#: iterations of a space with no prior (a user's model, PCA, the natural-image encoder)
DEFAULT_ITERATIONS = 250.0
#: features per sample of the spaces whose size does not follow from the data
_SPACE_DIM: dict[str, int] = {"box": 28 * 28, "encoder": 64, "natural": 1280}


def work(step: Step, **sizes: float) -> float:
    """The work of ``step`` in multiply-adds, by the formulas of the module docstring.

    Sizes missing from ``sizes`` count as 0 (or 1 for multipliers such as ``refs``)."""
    s = {k: float(v) for k, v in sizes.items()}
    n, m, d = s.get("n", 0.0), s.get("m", 0.0), s.get("d", 0.0)
    if step == "encoder":
        return n * s.get("pixels", 784.0) * 12000.0
    if step == "sinkhorn":
        iterations = s.get("iterations", DEFAULT_ITERATIONS)
        return n * m * (d + 300.0) + n * m * iterations * _PER_ENTRY_ITERATION
    if step == "labels":
        classes = s.get("c_q", 10.0) + s.get("c_p", 10.0)
        n_eff = min(n, 200.0 * s.get("c_q", 10.0)) + min(m, 200.0 * s.get("c_p", 10.0))
        return n_eff * d * min(d, n_eff / max(classes, 1.0)) * 15.0
    if step == "bootstrap":
        return s.get("replicates", 200.0) * n * s.get("refs", 1.0) * 2000.0
    if step == "training":
        return s.get("iterations", 1.0) * s.get("batch", 64.0) * s.get("params", 6e4) * 55.0
    raise ValueError(f"unknown step {step!r}: one of {', '.join(STEPS)}")


def format_seconds(seconds: float) -> str:
    """``"under a second"``, ``"about 40 s"``, ``"about 3 min"``, ``"about 1 h 10 min"``."""
    s = float(seconds)
    if not math.isfinite(s):
        return "an unknown time"
    if s < 1:
        return "under a second"
    if s < 90:
        return f"about {s:.0f} s" if s < 10 else f"about {5 * round(s / 5):.0f} s"
    if s < 3600:
        return f"about {round(s / 60):.0f} min"
    return f"about {int(s // 3600)} h {round(s % 3600 / 60):.0f} min"


@dataclass(frozen=True)
class Estimate:
    """What a step (or several, summed with ``+``) should take here.

    Attributes
    ----------
    step
        The step's name, or the names joined by ``" + "``.
    seconds
        The estimate, in seconds.
    work
        The work in multiply-adds (:func:`work`).
    """

    step: str
    seconds: float
    work: float = 0.0

    def __add__(self, other: Estimate) -> Estimate:
        return Estimate(
            f"{self.step} + {other.step}", self.seconds + other.seconds, self.work + other.work
        )

    def sentence(self) -> str:
        """``"about 40 s on this machine"``."""
        return f"{format_seconds(self.seconds)} on this machine"


def took_sentence(seconds: float, estimate: Estimate | None = None) -> str:
    """``"took 38 s (estimated about 40 s)"``."""
    tail = f" (estimated {format_seconds(estimate.seconds)})" if estimate is not None else ""
    return f"took {seconds:.1f} s{tail}" if seconds < 10 else f"took {seconds:.0f} s{tail}"


def measure_rate(device: str = "cpu", *, size: int = 384, repeats: int = 5) -> float:
    """This machine's multiply-add rate, in 1e9 per second: the best of ``repeats`` float32
    ``size`` x ``size`` matrix products on torch's current threads (or ``device``)."""
    import torch

    dev = torch.device(device)
    a = torch.randn(size, size, device=dev)
    b = torch.randn(size, size, device=dev)
    best = math.inf
    for _ in range(repeats + 1):  # the first warms up
        t0 = time.perf_counter()
        (a @ b).sum().item()
        best = min(best, time.perf_counter() - t0)
    return size**3 / max(best, 1e-9) / 1e9


def contention(threads: int = 1, device: str = "cpu") -> float:
    """``max(1, (load + threads) / cores) ** 0.5``: how much slower a CPU step runs now than on an
    idle machine (1 on a device, or where the load average cannot be read)."""
    if device != "cpu":
        return 1.0
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return 1.0
    share = (load + threads) / max(os.cpu_count() or 1, 1)
    return max(1.0, share) ** _CONTENTION_POWER


#: the load's share damped: on the 2-core machine cold fits at load 5.4 took 1.2-1.5x their
#: time at load 2, not the 2.1x of the plain share (other jobs' threads often wait)
_CONTENTION_POWER = 0.5


def _machine_key(threads: int, device: str) -> str:
    return f"{device}:{threads}"


@dataclass(frozen=True)
class CostModel:
    """The calibrated cost model of one machine, threads and device.

    Attributes
    ----------
    rate
        Multiply-adds per second / 1e9 (:func:`measure_rate`).
    factors
        Learned correction per step (measured / predicted, geometric moving average; 1 at first).
    threads, device
        What the rate was measured with.
    contention
        How much slower the machine's load makes a step now (:func:`contention`; 1: idle);
        :func:`load_cost_model` reads it, :meth:`now` reads it again.
    iterations
        Sinkhorn iterations per map learned per space (:meth:`learn_iterations`; the
        prior, :data:`ITERATIONS`, for a space not seen yet).
    """

    rate: float
    factors: Mapping[str, float] = field(default_factory=dict)
    threads: int = 1
    device: str = "cpu"
    contention: float = 1.0
    iterations: Mapping[str, float] = field(default_factory=dict)

    def iterations_of(self, space: str | None) -> float:
        """Sinkhorn iterations one map of ``space`` is expected to take: learned, else the
        prior (:data:`ITERATIONS`, :data:`DEFAULT_ITERATIONS` for an unknown space)."""
        if space is None:
            return DEFAULT_ITERATIONS
        return float(self.iterations.get(space, ITERATIONS.get(space, DEFAULT_ITERATIONS)))

    def learn_iterations(self, space: str, per_map: Sequence[int]) -> CostModel:
        """A model whose iterations of ``space`` moved toward the mean of ``per_map`` (the
        iterations of a fit's maps; geometric moving average, as the factors)."""
        counts = [float(i) for i in per_map if i > 0]
        if not counts:
            return self
        mean = sum(counts) / len(counts)
        old = self.iterations_of(space)
        new = math.exp((1 - _LEARN_WEIGHT) * math.log(old) + _LEARN_WEIGHT * math.log(mean))
        return replace(self, iterations={**self.iterations, space: new})

    def now(self) -> CostModel:
        """This model at the machine's present load (:func:`contention`)."""
        return replace(self, contention=contention(self.threads, self.device))

    def estimate(self, step: Step, **sizes: float) -> Estimate:
        """The seconds ``step`` should take at ``sizes`` (:func:`work`'s keywords)."""
        w = work(step, **sizes)
        seconds = (_OVERHEAD[step] + w / 1e9) / max(self.rate, 1e-6)
        return Estimate(step, self.contention * self.factors.get(step, 1.0) * seconds, w)

    def fixed(self, what: str, seconds_at_rate_1: float) -> Estimate:
        """A fixed cost (no step, nothing learned): ``seconds_at_rate_1`` on this machine."""
        seconds = self.contention * seconds_at_rate_1 / max(self.rate, 1e-6)
        return Estimate(what, seconds)

    def learn(self, step: Step, seconds: float, **sizes: float) -> CostModel:
        """A model whose factor for ``step`` moved toward ``seconds`` measured at ``sizes``."""
        predicted = self.estimate(step, **sizes).seconds
        if not (seconds > 0 and predicted > 0 and math.isfinite(seconds)):
            return self
        old = self.factors.get(step, 1.0)
        ratio = seconds / predicted * old  # the factor that would have been right
        new = math.exp((1 - _LEARN_WEIGHT) * math.log(old) + _LEARN_WEIGHT * math.log(ratio))
        new = min(max(new, _FACTOR_RANGE[0]), _FACTOR_RANGE[1])
        return replace(self, factors={**self.factors, step: new})

    def learn_total(self, parts: Estimate, seconds: float, steps: tuple[Step, ...]) -> CostModel:
        """A model whose factors for ``steps`` all moved toward ``seconds`` measured for the
        summed estimate ``parts`` (when only the total time of several steps is known)."""
        if not (seconds > 0 and parts.seconds > 0 and math.isfinite(seconds)):
            return self
        ratio = seconds / parts.seconds
        factors = dict(self.factors)
        for step in set(steps):
            old = factors.get(step, 1.0)
            new = old * math.exp(_LEARN_WEIGHT * math.log(ratio))
            factors[step] = min(max(new, _FACTOR_RANGE[0]), _FACTOR_RANGE[1])
        return replace(self, factors=factors)

    def geodesic_fit(
        self,
        n: int,
        ref_sizes: tuple[int, ...],
        *,
        d: int = 64,
        classes: int = 10,
        encoded_images: int = 0,
        pixels: int = 784,
        space: str | None = None,
    ) -> Estimate:
        """A geodesic fit: the encoder on ``encoded_images`` (0: no encoder), one map
        (Sinkhorn and label distances) per reference, and the label distances of each pair of
        references, in the ``d``-dimensional ``space`` (its Sinkhorn iterations:
        :meth:`iterations_of`)."""
        total = self.fixed("fit set-up", _FIT_OVERHEAD)
        if encoded_images > 0:
            total = total + self.estimate("encoder", n=encoded_images, pixels=pixels)
        sizes = {"d": d, "c_q": classes, "c_p": classes}
        iterations = self.iterations_of(space)
        for m in ref_sizes:
            total = total + self.estimate("sinkhorn", n=n, m=m, iterations=iterations, **sizes)
            total = total + self.estimate("labels", n=n, m=m, **sizes)
        for i, mi in enumerate(ref_sizes):
            for mj in ref_sizes[i + 1 :]:
                total = total + self.estimate("labels", n=mi, m=mj, **sizes)
        return Estimate("geodesic fit", total.seconds, total.work)

    # ---------------------------------------------------------------- the cache file

    def save(self, folder: Path | None = None) -> Path:
        """Write this model into ``folder``'s calibration file (other machines' entries kept)."""
        path = _calibration_path(folder)
        entries = _read_entries(path, quiet=True)
        entries[_machine_key(self.threads, self.device)] = {
            "rate": self.rate,
            "factors": dict(self.factors),
            "iterations": dict(self.iterations),
            "measured": time.time(),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": _VERSION, "machines": entries}, indent=1))
        os.replace(tmp, path)
        return path


def _calibration_path(folder: Path | None) -> Path:
    if folder is None:
        from geoviz.backend.settings import default_cache_dir

        folder = default_cache_dir()
    return Path(folder) / CALIBRATION_FILE


def _read_entries(path: Path, *, quiet: bool = False) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        raw = json.loads(path.read_text())
        if not isinstance(raw, dict) or raw.get("version") != _VERSION:
            raise ValueError("not a calibration of this version")
        machines = raw["machines"]
        if not isinstance(machines, dict):
            raise ValueError("no machines")
        return machines
    except (OSError, ValueError, KeyError, TypeError) as err:
        if not quiet:
            warnings.warn(
                f"ignoring the cost model's calibration {path} ({err}); measuring again",
                RuntimeWarning,
                stacklevel=3,
            )
        return {}


def _entry_model(entry: Any, threads: int, device: str) -> CostModel | None:
    try:
        rate = float(entry["rate"])
        factors = {str(k): float(v) for k, v in dict(entry.get("factors", {})).items()}
        iterations = {str(k): float(v) for k, v in dict(entry.get("iterations", {})).items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if not (math.isfinite(rate) and rate > 0) or not all(
        math.isfinite(v) and v > 0 for v in (*factors.values(), *iterations.values())
    ):
        return None
    return CostModel(rate, factors, threads, device, iterations=iterations)


def load_cost_model(
    folder: Path | None = None,
    *,
    device: str = "cpu",
    threads: int | None = None,
    measure: Callable[[str], float] = measure_rate,
    save: bool = True,
) -> CostModel:
    """This machine's cost model from the calibration in ``folder`` (default: the geoviz cache
    folder); measured (:func:`measure_rate`, well under a second) and saved when there is none
    for these threads and device, or when the file is corrupt (with a warning)."""
    import torch

    threads = int(torch.get_num_threads()) if threads is None else int(threads)
    path = _calibration_path(folder)
    entries = _read_entries(path)
    key = _machine_key(threads, device)
    model = _entry_model(entries[key], threads, device) if key in entries else None
    if key in entries and model is None:
        warnings.warn(
            f"ignoring the cost model's calibration {path} for {key} (unreadable); measuring again",
            RuntimeWarning,
            stacklevel=2,
        )
    if model is None:
        model = CostModel(measure(device), {}, threads, device)
        if save:
            with contextlib.suppress(OSError):  # a read-only cache: measured again next time
                model.save(folder)
    return model.now()


def remember(
    step: Step | Estimate,
    seconds: float,
    *,
    folder: Path | None = None,
    steps: tuple[Step, ...] = (),
    **sizes: float,
) -> None:
    """Learn from one measured time and keep it in the cache (best effort: a read-only or
    unreadable cache learns nothing). ``step`` is a step measured at ``sizes``, or a summed
    :class:`Estimate` of ``steps``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            model = load_cost_model(folder)
        if isinstance(step, Estimate):
            learned = model.learn_total(step, seconds, steps)
        else:
            learned = model.learn(step, seconds, **sizes)
        learned.save(folder)
    except (OSError, ValueError):
        pass


def remember_iterations(space: str, per_map: Sequence[int], *, folder: Path | None = None) -> None:
    """Learn the Sinkhorn iterations of ``space`` from a fit's maps (their diagnostics) and
    keep them in the cache (best effort, as :func:`remember`)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            model = load_cost_model(folder)
        model.learn_iterations(space, per_map).save(folder)
    except (OSError, ValueError):
        pass


def fit_space(target: Any, features: str = "auto") -> tuple[str, int]:
    """The space a fit of ``target`` with ``features`` is expected to run in, and its
    dimension: ``"auto"`` picks the digit box for grey images and the encoder for colour ones
    (what :func:`geoviz.features.choice.choose_space` measures on digits), pixels for
    vectors; a named space is itself."""
    shape = getattr(target, "image_shape", None)
    pixels = int(target.features.shape[1])
    if features == "auto":
        if shape is None:
            features = "pixels"
        else:
            features = "encoder" if len(shape) == 3 and shape[0] == 3 else "box"
    if features == "pixels":
        return features, pixels
    digits = "".join(ch for ch in features if ch.isdigit())
    if features.startswith("pca") and digits:
        return features, int(digits)
    return features, _SPACE_DIM.get(features, 64)


def fit_estimate(
    target: Any,
    references: Sequence[Any],
    *,
    features: str = "auto",
    model: CostModel | None = None,
) -> Estimate:
    """The estimate of a cold fit of ``target``'s maps to ``references`` (labelled datasets,
    :meth:`CostModel.geodesic_fit`): the encoder when the space is one (``"encoder"``, or
    ``"auto"`` on a colour target), a map per reference, the pairs' label distances.
    ``model``: default this machine's (:func:`load_cost_model`, at the present load)."""
    if model is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a corrupt file: measured again
            model = load_cost_model()
    space, d = fit_space(target, features)
    encoded = 0
    if space in ("encoder", "natural") or space.startswith("model:"):
        encoded = target.n_samples + sum(r.n_samples for r in references)
    choice = Estimate("space choice", 0.0)
    if features == "auto" and space != "pixels":
        # the default space's measurement (on colour images the networks' passes too)
        choice = model.fixed("space choice", _CHOICE_OVERHEAD[space == "encoder"])
    fit = model.geodesic_fit(
        target.n_samples,
        tuple(r.n_samples for r in references),
        d=d,
        classes=max([target.n_classes, *(r.n_classes for r in references)]),
        encoded_images=encoded,
        pixels=int(target.features.shape[1]),
        space=space,
    )
    return Estimate(fit.step, fit.seconds + choice.seconds, fit.work + choice.work)


#: seconds at rate 1 of the default space's measurement on grey images, on colour ones (the
#: glyph and natural-image encoders' passes on its sample): fitted on cold fits
#: (``bench_estimates.py --cold-only``)
_CHOICE_OVERHEAD = (20.0, 55.0)


def training_estimate(
    pretrain: tuple[int, int],
    finetune: tuple[int, int],
    *,
    points: int,
    seeds: int,
    methods_trained: int = 3,
    params: float = 6e4,
    model: CostModel | None = None,
) -> Estimate:
    """Transfer experiments (the Evidence page's run): per seed, ``methods_trained`` Table-1
    methods (all but one pretrain then fine-tune; the few-shot baseline fine-tunes only),
    then ``points`` grid points pretrained and fine-tuned. ``pretrain``, ``finetune``:
    ``(iterations, batch)``; ``params``: the classifier's (LeNet-5: 6e4)."""
    if model is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            model = load_cost_model()
    pre = model.estimate("training", iterations=pretrain[0], batch=pretrain[1], params=params)
    fine = model.estimate("training", iterations=finetune[0], batch=finetune[1], params=params)
    runs = max(methods_trained - 1, 0) + points
    per_seed = runs * (pre.seconds + fine.seconds) + fine.seconds
    work_ = (runs * (pre.work + fine.work) + fine.work) * max(seeds, 1)
    return Estimate("training", per_seed * max(int(seeds), 1), work_)


def record_took(seconds: float, estimate: Estimate, steps: tuple[Step, ...] = ()) -> None:
    """Teach the cost model (:func:`remember`) what a run took, unless it took
    under a quarter of its estimate (it read its results from a cache: it says nothing of the
    machine)."""
    if seconds > 0.25 * estimate.seconds:
        remember(estimate, seconds, steps=steps or ("encoder", "sinkhorn", "labels"))


def eta_seconds(elapsed: float, fraction: float, estimate: float | None = None) -> float | None:
    """Seconds left after ``elapsed`` seconds at ``fraction`` in [0, 1] of the work done.

    At 0 the estimate (``None`` without one); at 1, 0. In between, the rate so far
    (``elapsed * (1 - f) / f``) blended with what the estimate leaves, the rate's weight
    growing with the fraction done."""
    f = min(max(float(fraction), 0.0), 1.0)
    if f >= 1.0:
        return 0.0
    left_by_estimate = None if estimate is None else max(float(estimate) - elapsed, 0.0)
    if f <= 0.0:
        return left_by_estimate
    by_rate = max(float(elapsed), 0.0) * (1 - f) / f
    if left_by_estimate is None:
        return by_rate
    return f * by_rate + (1 - f) * left_by_estimate


class EtaClock:
    """Time left of one run from its progress fractions (:func:`eta_seconds`).

    ``text(fraction)`` is ``" · about 12 s left"`` once ``min_seconds`` have passed (before,
    or without a fraction, the estimate's sentence if there is one, else ``""``)."""

    def __init__(
        self,
        estimate: float | None = None,
        *,
        min_seconds: float = 2.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.estimate = estimate
        self.min_seconds = min_seconds
        self._clock = clock
        self.started = clock()

    def elapsed(self) -> float:
        return self._clock() - self.started

    def left(self, fraction: float) -> float | None:
        return eta_seconds(self.elapsed(), fraction, self.estimate)

    def text(self, fraction: float) -> str:
        elapsed = self.elapsed()
        if fraction >= 1.0 or (elapsed < self.min_seconds and self.estimate is None):
            return ""
        left = eta_seconds(elapsed, fraction, self.estimate)
        if left is None:
            return ""
        return f" · {format_seconds(left)} left"
