"""Output helpers of the ``geoviz`` commands: tables, files written safely, progress on stderr.

* :func:`format_table` — a plain-text table.
* :func:`refuse_existing`, :func:`write_file` — an output file refused before any work when
  it exists without ``--overwrite``, then written atomically.
* :func:`progress_callback`, :class:`PlainProgress` — progress on stderr: a redrawn tqdm
  bar on a terminal; when stderr is a file or a pipe (CI logs, Ray workers) plain lines
  instead, one per stage and at most one per 10 % of the work.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from geoviz.atomic import NotReplaceableError, atomic_write_bytes, check_replaceable
from geoviz.errors import ExportError, ExportExistsError

__all__ = [
    "ANNOUNCE_SECONDS",
    "PLAIN_PROGRESS_STEP",
    "PlainProgress",
    "announced",
    "fit_estimate",
    "format_table",
    "progress_callback",
    "refuse_existing",
    "stderr_is_terminal",
    "write_file",
]


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> str:
    """``header``, a dashed rule and ``rows``, columns padded; columns in ``right`` right-aligned."""
    widths = [max(len(str(cell)) for cell in col) for col in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            str(c).rjust(w) if i in right else str(c).ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def refuse_existing(path: str | Path, overwrite: bool, flag: str = "--out") -> Path:
    """``Path(path)``, refused *before any work* when it exists and ``--overwrite`` is not given.

    Raises
    ------
    ExportExistsError
        The path exists and ``overwrite`` is false.
    ExportError
        The path is a folder (a file is written there), or something else that is not a
        regular file (a device, a FIFO, a link): never replaced, even with ``--overwrite``.
    """
    out = Path(path)
    if out.is_dir():
        raise ExportError(f"{flag} {out} is a folder; give a file name")
    try:
        check_replaceable(out)
    except NotReplaceableError as err:
        raise ExportError(f"{flag} {err}") from None
    if out.exists() and not overwrite:
        raise ExportExistsError(f"{out} already exists; pass --overwrite to replace it")
    return out


def write_file(path: Path, data: bytes, overwrite: bool, what: str) -> None:
    """Write ``data`` atomically (:func:`geoviz.atomic.atomic_write_bytes`), CLI messages."""
    try:
        atomic_write_bytes(path, data, overwrite=overwrite)
    except NotReplaceableError as err:  # a FIFO or device put there during the work
        raise ExportError(str(err)) from None
    except OSError as err:
        if isinstance(err, FileExistsError) and Path(path).exists():  # appeared meanwhile
            raise ExportExistsError(
                f"{path} already exists; pass --overwrite to replace it"
            ) from None
        # e.g. a parent "folder" that is a file (mkdir's FileExistsError names the parent)
        raise ExportError(f"cannot write {what} {path}: {err.strerror or err}") from err


def stderr_is_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default ``sys.stderr``) is an interactive terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


#: plain progress lines: one whenever the overall fraction passes another tenth
PLAIN_PROGRESS_STEP = 10
#: a solver's iteration count in a stage's text (``geoviz.ot.otdd``), or the images encoded
#: (``geoviz.geodesic.pipeline``): not a new stage
_ITERATION = re.compile(r"[:,] iteration \d+|encoding [\d,]+/")


class PlainProgress:
    """``progress(stage, fraction)`` writing plain lines for logs (no redraws).

    A line ``[ 40%] stage`` is written when the stage text changes (consecutive
    repeats are skipped) or when the overall percentage reaches another multiple
    of :data:`PLAIN_PROGRESS_STEP`; a solver reporting every iteration adds nothing.
    After two seconds the line ends with the time left (``· about 12 s left``,
    :class:`geoviz.backend.cost_model.EtaClock`: from the fraction done, blended with
    ``estimate`` seconds when given).
    """

    def __init__(
        self, stream: TextIO | None = None, prefix: str = "", *, estimate: float | None = None
    ) -> None:
        from geoviz.backend.cost_model import EtaClock

        self.stream = sys.stderr if stream is None else stream
        self.prefix = prefix
        self.lines = 0
        self._stage: str | None = None
        self._step = -1
        self.clock = EtaClock(estimate)

    def __call__(self, stage: str, fraction: float, detail: str = "") -> None:
        """Report ``fraction`` in ``[0, 1]`` of the work done, now in ``stage``.

        ``detail`` (e.g. ``"12/36 runs"``) is printed after the stage but does not
        count as a new stage.
        """
        pct = int(100 * min(max(float(fraction), 0.0), 1.0))
        step = pct // PLAIN_PROGRESS_STEP
        # "sinkhorn: iteration 1200" is the same stage as "sinkhorn: iteration 1100"
        key = _ITERATION.sub("", stage)
        if key == self._stage and step <= self._step:
            return
        self._stage, self._step = key, max(step, self._step)
        tail = (f" {detail}" if detail else "") + self.clock.text(fraction)
        print(f"{self.prefix}[{pct:3d}%] {stage}{tail}", file=self.stream, flush=True)
        self.lines += 1


#: a run estimated above this many seconds is announced before it starts (:func:`announced`)
ANNOUNCE_SECONDS = 10.0


def fit_estimate(target: Any, references: Sequence[Any], *, features: str = "auto") -> Any:
    """The cost model's estimate of a cold fit
    (:func:`geoviz.backend.cost_model.fit_estimate`)."""
    from geoviz.backend.cost_model import fit_estimate as estimate

    return estimate(target, references, features=features)


@contextlib.contextmanager
def announced(
    estimate: Any, what: str, *, enabled: bool = True, stream: TextIO | None = None
) -> Iterator[None]:
    """Around a long run: ``"<what>: about 40 s on this machine"`` before it when ``estimate``
    (an :class:`~geoviz.backend.cost_model.Estimate`) is above :data:`ANNOUNCE_SECONDS`, and
    ``"<what> took 38 s (estimated about 40 s)"`` after it (then at any length), on stderr.
    The measured time teaches the cost model (:func:`geoviz.backend.cost_model.remember`)
    unless the run took under a quarter of its estimate (its maps came from the cache)."""
    import time

    from geoviz.backend.cost_model import remember, took_sentence

    stream = sys.stderr if stream is None else stream
    long = estimate.seconds > ANNOUNCE_SECONDS
    if enabled and long:
        print(f"{what}: {estimate.sentence()} (cost model)", file=stream, flush=True)
    started = time.perf_counter()
    yield
    seconds = time.perf_counter() - started
    if enabled and long:
        print(f"{what} {took_sentence(seconds, estimate)}", file=stream, flush=True)
    if seconds > 0.25 * estimate.seconds:
        remember(estimate, seconds, steps=("encoder", "sinkhorn", "labels"))


@contextlib.contextmanager
def progress_callback(
    enabled: bool,
    *,
    stream: TextIO | None = None,
    prefix: str = "",
    estimate: float | None = None,
) -> Iterator[Callable[[str, float], None] | None]:
    """A ``progress(stage, fraction)`` callback on stderr, or ``None`` when disabled.

    On a terminal a tqdm bar (redrawn in place, with the time left); otherwise
    :class:`PlainProgress` (its lines end with the time left, from ``estimate`` seconds
    at first).
    """
    if not enabled:
        yield None
        return
    stream = sys.stderr if stream is None else stream
    if not stderr_is_terminal(stream):
        yield PlainProgress(stream, prefix, estimate=estimate)
        return
    from tqdm.auto import tqdm

    bar = tqdm(
        total=1000,
        file=stream,
        bar_format="{desc:<48.48} {percentage:3.0f}%|{bar}| {elapsed}<{remaining} left",
    )
    state = {"done": 0}

    def update(stage: str, fraction: float) -> None:
        pos = round(1000 * min(max(float(fraction), 0.0), 1.0))
        bar.set_description_str(prefix + stage, refresh=False)
        if pos > state["done"]:
            bar.update(pos - state["done"])
            state["done"] = pos
        else:
            bar.refresh()

    try:
        yield update
    finally:
        bar.close()
