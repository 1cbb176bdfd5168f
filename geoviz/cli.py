"""Command-line interface: ``geoviz <command> ...``.

Commands defined here:

* ``geoviz datasets [--offline]`` — table of the registered datasets.
* ``geoviz show NAME [--split train|test] [--n N] [--seed S] [--grid out.png
  [--overwrite]] [--per-class K] [--zoom Z]`` — summary of a dataset (sizes, class
  counts, fingerprint) and, with ``--grid``, a PNG of samples, one row per class,
  written atomically and never over an existing file without ``--overwrite``.

Plug-in commands
----------------
Other modules add subcommands without editing this file: every module of
:data:`PLUGIN_MODULES` that can be imported and has ``register(subparsers)`` is
called with the ``argparse`` sub-parsers object, in order:
``geoviz.transfer.cli`` (``transfer``: the paper's transfer experiments and
simplex study) and ``geoviz.geodesic.cli`` (``distance``, ``project``, ``grid``).
Each command a plug-in adds must set
``parser.set_defaults(func=handler)`` with ``handler(args: argparse.Namespace) -> int``;
handlers may raise :class:`~geoviz.errors.GeovizError` for bad input, which
``main`` prints as ``error: <message>`` on stderr with exit status 2.

Every option a user gives is checked right after parsing, before any dataset is
loaded or map fitted, against the shared bounds of :mod:`geoviz.limits`
(:func:`cli_int`, :func:`cli_epsilon`). ``main`` runs the handler inside
:func:`geoviz.memory.memory_guard`, so running out of memory is one sentence with exit
status 2 too, and it words library messages for the command line (``--overwrite``
instead of ``overwrite=True``, ``--batch-size`` instead of "the batched mode").

Progress goes to stderr (:func:`progress_callback`): a redrawn tqdm bar on a
terminal; when stderr is a file or a pipe (CI logs, Ray workers) plain lines instead,
one per stage and at most one per 10 % of the work.

Printed labels of the paper's quantities (``W²₂,Q(P_i, Q)``, ``â``, ...) are the
constants of :mod:`geoviz.glossary`, the same strings the app shows; ``main``
makes stdout/stderr replace characters a terminal cannot encode instead of failing.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from geoviz import limits
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import DatasetError, ExportError, ExportExistsError, GeovizError
from geoviz.memory import check_bytes, memory_guard

# plug-ins import helpers of this module (_positive_int, _format_table, cli_int, ...) at their top:
# they are imported lazily, by name, once this module is loaded (no import cycle)
PLUGIN_MODULES: tuple[str, ...] = ("geoviz.transfer.cli", "geoviz.geodesic.cli")

GRID_PAD = 2
GRID_BACKGROUND = 128


# --------------------------------------------------------------------------- helpers


def _format_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> str:
    widths = [max(len(str(cell)) for cell in col) for col in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            str(c).rjust(w) if i in right else str(c).ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _shape_text(image_shape: Sequence[int] | None, n_features: int | None) -> str:
    if image_shape:
        return "x".join(str(s) for s in image_shape)
    return f"vector({n_features})" if n_features else "vector"


def cli_int(value: Any, flag: str, low: int, high: int, *, why: str = "") -> int:
    """An integer option within ``[low, high]``, else a one-sentence GeovizError naming ``flag``."""
    return limits.check_int(value, flag, low, high, why=why)


def cli_epsilon(value: Any, flag: str = "--epsilon") -> float:
    """A relative epsilon option checked by :func:`geoviz.limits.check_epsilon`.

    The message names the flag (``--epsilon 1e-20 is below 0.0001 ...``).
    """
    try:
        return limits.check_epsilon(value)
    except GeovizError as err:
        text = str(err).replace("use epsilon >=", f"use {flag} >=")
        raise GeovizError(
            flag + text[len("epsilon") :] if text.startswith("epsilon") else f"{flag}: {text}"
        ) from None


def cli_seed(value: Any, flag: str = "--seed") -> int:
    """A seed option in ``[0, MAX_SEED]``."""
    return limits.check_int(value, flag, 0, limits.MAX_SEED)


def refuse_existing(path: str | Path, overwrite: bool, flag: str = "--out") -> Path:
    """``Path(path)``, refused *before any work* when it exists and ``--overwrite`` is not given.

    Raises
    ------
    ExportExistsError
        The path exists and ``overwrite`` is false.
    ExportError
        The path is a folder (a file is written there).
    """
    out = Path(path)
    if out.is_dir():
        raise ExportError(f"{flag} {out} is a folder; give a file name")
    if out.exists() and not overwrite:
        raise ExportExistsError(f"{out} already exists; pass --overwrite to replace it")
    return out


def write_file(path: Path, data: bytes, overwrite: bool, what: str) -> None:
    """Write ``data`` atomically (:func:`geoviz.atomic.atomic_write_bytes`), CLI messages."""
    from geoviz.atomic import atomic_write_bytes

    try:
        atomic_write_bytes(path, data, overwrite=overwrite)
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


class PlainProgress:
    """``progress(stage, fraction)`` writing plain lines for logs (no redraws).

    A line ``[ 40%] stage`` is written when the stage text changes (consecutive
    repeats are skipped) or when the overall percentage reaches another multiple
    of :data:`PLAIN_PROGRESS_STEP`; a solver reporting every iteration adds nothing.
    """

    def __init__(self, stream: TextIO | None = None, prefix: str = "") -> None:
        self.stream = sys.stderr if stream is None else stream
        self.prefix = prefix
        self.lines = 0
        self._stage: str | None = None
        self._step = -1

    def __call__(self, stage: str, fraction: float, detail: str = "") -> None:
        """Report ``fraction`` in ``[0, 1]`` of the work done, now in ``stage``.

        ``detail`` (e.g. ``"12/36 runs"``) is printed after the stage but does not
        count as a new stage.
        """
        pct = int(100 * min(max(float(fraction), 0.0), 1.0))
        step = pct // PLAIN_PROGRESS_STEP
        if stage == self._stage and step <= self._step:
            return
        self._stage, self._step = stage, max(step, self._step)
        tail = f" {detail}" if detail else ""
        print(f"{self.prefix}[{pct:3d}%] {stage}{tail}", file=self.stream, flush=True)
        self.lines += 1


@contextlib.contextmanager
def progress_callback(
    enabled: bool, *, stream: TextIO | None = None, prefix: str = ""
) -> Iterator[Callable[[str, float], None] | None]:
    """A ``progress(stage, fraction)`` callback on stderr, or ``None`` when disabled.

    On a terminal a tqdm bar (redrawn in place); otherwise :class:`PlainProgress`.
    """
    if not enabled:
        yield None
        return
    stream = sys.stderr if stream is None else stream
    if not stderr_is_terminal(stream):
        yield PlainProgress(stream, prefix)
        return
    from tqdm.auto import tqdm

    bar = tqdm(
        total=1000, file=stream, bar_format="{desc:<48.48} {percentage:3.0f}%|{bar}| {elapsed}"
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


def render_grid(
    ds: LabeledDataset, per_class: int = 8, *, seed: int = 0, zoom: int = 1, pad: int = GRID_PAD
):
    """A PIL image of samples: one row per class, ``per_class`` columns.

    Row ``c`` shows up to ``per_class`` randomly chosen (``seed``) samples of
    class ``c``, in class order; missing samples leave the background. Size:
    ``width = per_class * W * zoom + (per_class + 1) * pad``,
    ``height = C * H * zoom + (C + 1) * pad``.

    Raises
    ------
    DatasetError
        The dataset holds vectors, or images with other than 1 or 3 channels.
    ResourceError
        The image would not fit in this process's memory (checked before drawing).
    """
    from PIL import Image

    if ds.image_shape is None:
        raise DatasetError(
            f"--grid needs an image dataset; {ds.name!r} holds {ds.n_features}-D vectors",
            ds.source or ds.name,
        )
    channels, h, w = ds.image_shape
    if channels not in (1, 3):
        raise DatasetError(
            f"cannot draw images with {channels} channels (need 1 or 3)", ds.source or ds.name
        )
    if per_class < 1 or zoom < 1 or pad < 0:
        raise GeovizError(
            f"per_class and zoom must be >= 1 and pad >= 0, got {per_class}, {zoom}, {pad}"
        )
    cell_h, cell_w = h * zoom, w * zoom
    height = ds.n_classes * cell_h + (ds.n_classes + 1) * pad
    width = per_class * cell_w + (per_class + 1) * pad
    # the canvas, PIL's copy and the PNG encoder's buffers
    check_bytes(3 * height * width * channels, f"a {width}x{height} sample grid")
    canvas = np.full((height, width, channels), GRID_BACKGROUND, dtype=np.uint8)
    images = ds.images().numpy()  # (N, C, H, W) in [0, 1]
    labels = ds.labels.numpy()
    rng = np.random.default_rng(seed)
    for c in range(ds.n_classes):
        members = np.flatnonzero(labels == c)
        if members.size > per_class:
            members = np.sort(rng.choice(members, size=per_class, replace=False))
        top = pad + c * (cell_h + pad)
        for j, idx in enumerate(members):
            tile = np.clip(images[idx].transpose(1, 2, 0), 0.0, 1.0)
            tile = np.round(tile * 255).astype(np.uint8)
            tile = np.repeat(np.repeat(tile, zoom, axis=0), zoom, axis=1)
            left = pad + j * (cell_w + pad)
            canvas[top : top + cell_h, left : left + cell_w] = tile
    if channels == 1:
        return Image.fromarray(canvas[:, :, 0], mode="L")
    return Image.fromarray(canvas, mode="RGB")


# --------------------------------------------------------------------------- commands


def _cmd_datasets(args: argparse.Namespace) -> int:
    from geoviz.data.registry import list_datasets

    infos = list_datasets(include_download=not args.offline)
    rows = [
        [
            info.name,
            info.kind,
            str(info.n_train),
            str(info.n_test),
            str(info.n_classes),
            _shape_text(info.image_shape, info.n_features),
            "offline" if info.offline else "download",
        ]
        for info in infos
    ]
    header = ["name", "kind", "train", "test", "classes", "shape", "availability"]
    print(_format_table(header, rows, right={2, 3, 4}))
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from geoviz.data.registry import load_dataset

    # every option before the dataset is read
    if args.n is not None:
        cli_int(args.n, "--n", limits.MIN_SAMPLES, limits.MAX_SAMPLES, why="samples to show")
    cli_seed(args.seed)
    cli_int(args.per_class, "--per-class", 1, limits.MAX_PREVIEW_PER_CLASS)
    cli_int(args.zoom, "--zoom", 1, limits.MAX_PREVIEW_ZOOM)
    grid_path = None if args.grid is None else refuse_existing(args.grid, args.overwrite, "--grid")

    ds = load_dataset(args.name, split=args.split, n=args.n, seed=args.seed)
    # render first, so that an impossible grid fails before any output
    image = (
        None
        if args.grid is None
        else render_grid(ds, args.per_class, seed=args.seed, zoom=args.zoom)
    )
    info = ds.summary()
    print(f"name:        {info['name']}")
    print(f"source:      {info['source']}")
    print(f"split:       {args.split}")
    print(f"samples:     {info['n_samples']}")
    print(f"features:    {info['n_features']}")
    print(f"shape:       {_shape_text(info['image_shape'], info['n_features'])}")
    print(f"fingerprint: {info['fingerprint']}")
    print(f"classes:     {info['n_classes']}")
    rows = [
        [str(i), name, str(count)]
        for i, (name, count) in enumerate(zip(info["classes"], info["class_counts"], strict=True))
    ]
    table = _format_table(["label", "class", "count"], rows, right={0, 2})
    print("\n".join("  " + line for line in table.splitlines()))
    if image is not None and grid_path is not None:
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        write_file(grid_path, buf.getvalue(), args.overwrite, "grid image")
        print(f"grid:        {grid_path} ({image.width}x{image.height} px, one row per class)")
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The full parser, including plug-in commands."""
    from geoviz import __version__

    parser = argparse.ArgumentParser(
        prog="geoviz",
        description="Synthetic labeled datasets along generalized geodesics in OT dataset space.",
    )
    parser.add_argument("--version", action="version", version=f"geoviz {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")

    p_list = subparsers.add_parser("datasets", help="list the registered datasets")
    p_list.add_argument(
        "--offline", action="store_true", help="only datasets that need no download"
    )
    p_list.set_defaults(func=_cmd_datasets)

    p_show = subparsers.add_parser(
        "show", help="summarise a dataset (registry name or file/folder path) and draw samples"
    )
    p_show.add_argument(
        "name", help="registry name (see 'geoviz datasets') or path of a dataset file/folder"
    )
    p_show.add_argument("--split", choices=("train", "test"), default="train")
    p_show.add_argument(
        "--n", type=_positive_int, default=None, help="stratified subsample of N samples"
    )
    p_show.add_argument("--seed", type=int, default=0, help="seed of the subsample and sample grid")
    p_show.add_argument(
        "--grid", metavar="OUT.png", default=None, help="save a PNG grid of samples"
    )
    p_show.add_argument("--overwrite", action="store_true", help="replace an existing --grid file")
    p_show.add_argument(
        "--per-class",
        type=_positive_int,
        default=8,
        help=f"grid columns (samples per class, at most {limits.MAX_PREVIEW_PER_CLASS})",
    )
    p_show.add_argument(
        "--zoom",
        type=_positive_int,
        default=1,
        help=f"integer pixel magnification of the grid (at most {limits.MAX_PREVIEW_ZOOM})",
    )
    p_show.set_defaults(func=_cmd_show)

    _register_plugins(subparsers)
    return parser


def _register_plugins(subparsers: argparse._SubParsersAction) -> None:
    for module_name in PLUGIN_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name is not None and (
                err.name == module_name or module_name.startswith(err.name + ".")
            ):
                continue  # plug-in not installed: its commands are simply absent
            print(f"warning: commands from {module_name} unavailable: {err}", file=sys.stderr)
            continue
        except ImportError as err:
            print(f"warning: commands from {module_name} unavailable: {err}", file=sys.stderr)
            continue
        register = getattr(module, "register", None)
        if callable(register):
            register(subparsers)


def _tolerant_streams() -> None:
    """Never fail on a Unicode label (``W²₂,Q``, ``â``) written to a legacy-encoded stream."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            if (getattr(stream, "encoding", None) or "").lower().replace("-", "") != "utf8":
                stream.reconfigure(errors="replace")


_BATCHED_HINT = "use a smaller sample or the batched mode"


def cli_message(err: GeovizError, args: argparse.Namespace | None = None) -> str:
    """``str(err)`` worded for the command line.

    Library messages name Python arguments; the CLI has flags for them:
    ``overwrite=True`` becomes ``--overwrite``, and "the batched mode" of an
    out-of-memory refusal becomes ``--batch-size`` where the command has it (else a
    smaller ``--n``).
    """
    text = str(err).replace("overwrite=True", "--overwrite")
    if _BATCHED_HINT in text:
        if args is not None and hasattr(args, "batch_size"):
            hint = (
                "use a smaller --n, or --batch-size B (e.g. 2000: batches of B target points, "
                "each against B reference points)"
            )
        else:
            hint = "use a smaller --n"
        text = text.replace(_BATCHED_HINT, hint)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 bad input or not enough memory)."""
    _tolerant_streams()
    parser = build_parser()
    try:
        args = parser.parse_args(None if argv is None else list(argv))
    except SystemExit as exc:  # --help, --version, or an argparse usage error
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        # MemoryError / allocator failures anywhere in a command become a ResourceError
        with memory_guard(f"geoviz {args.command}"):
            return int(func(args) or 0)
    except GeovizError as err:
        print(f"error: {cli_message(err, args)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
