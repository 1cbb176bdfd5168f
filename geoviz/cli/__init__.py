"""Command-line interface: ``geoviz <command> ...`` (:func:`main`, the console script).

The commands live in this package, one module per group:

* :mod:`geoviz.cli.otdd` — ``datasets``, ``show``;
* :mod:`geoviz.cli.transfer` — ``transfer`` (the paper's transfer experiments and
  simplex study), its options, checks and report in ``transfer_options``,
  ``transfer_checks`` and ``transfer_report``;
* :mod:`geoviz.cli.geodesic` — ``distance``, ``project``, ``grid``, likewise with
  ``geodesic_options``, ``geodesic_run``, ``geodesic_checks`` and ``geodesic_report``;
* :mod:`geoviz.cli.screen` — ``screen``, with ``screen_run``;

* :mod:`geoviz.cli.app` — ``app``;

with their shared helpers in :mod:`geoviz.cli.args` (argument parsers, the shared options
and bound checks) and :mod:`geoviz.cli.output` (tables, safe file writes, progress).

The command modules are imported here, at the top, and :data:`COMMANDS` registers them in
order: each ``register(subparsers)`` adds its commands to the ``argparse`` sub-parsers
object, and each command sets ``parser.set_defaults(func=handler)`` with
``handler(args: argparse.Namespace) -> int``; handlers may raise
:class:`~geoviz.errors.GeovizError` for bad input, which ``main`` prints as
``error: <message>`` on stderr with exit status 2.

The environment (``GEOVIZ_DEVICE``, ``GEOVIZ_CACHE_DIR``, ``GEOVIZ_NO_CACHE``,
``GEOVIZ_ASSETS_DIR``, ``GEOVIZ_EMBEDDING``) is read once per command by :func:`main`
(:meth:`geoviz.backend.RuntimeSettings.from_env`) and installed for the command's run
(:func:`geoviz.backend.configured`). Torch's process-wide settings (one intra-op thread,
:data:`geoviz.nn.training.CPU_TRAIN_THREADS`; subnormals flushed) are set by ``main``
too (:func:`geoviz.backend.configure_torch`): the library changes neither.

Parsing and ``--help`` import no torch (``geoviz --help`` answers at once): the command
modules import only light modules (no torch, Streamlit, UMAP or Ray) at their top, and
each command imports the library it runs when it runs, once: its ``*_run`` module
(``distance``, ``project`` and ``grid``: ``geodesic_run``; ``transfer``: ``transfer_run``;
``screen``: ``screen_run``).

Every option a user gives is checked right after parsing, before any dataset is
loaded or map fitted, against the shared bounds of :mod:`geoviz.limits`
(:mod:`geoviz.cli.args`). ``main`` runs the handler inside
:func:`geoviz.memory.memory_guard`, so running out of memory is one sentence with exit
status 2 too, and it words library messages for the command line (``--overwrite``
instead of ``overwrite=True``, ``--batch-size`` instead of "the batched mode").

Every failure is one line on stderr and a non-zero exit status: bad input
(:class:`~geoviz.errors.GeovizError`) and a file the system refuses (``OSError``) exit
with 2, anything else (a bug) with 1 (``GEOVIZ_TRACEBACK=1`` prints its traceback
too). Ctrl-C (``KeyboardInterrupt``) prints ``interrupted`` and exits with 130, as a
shell reports a process ended by SIGINT. Warnings are one ``warning: ...`` line each.
Library messages that name Python arguments are worded with the command's options
(:func:`cli_message`).

Progress goes to stderr (:func:`geoviz.cli.output.progress_callback`): a redrawn tqdm bar on a
terminal; when stderr is a file or a pipe (CI logs, Ray workers) plain lines instead,
one per stage and at most one per 10 % of the work.

Printed labels of the paper's quantities (``W²₂,Q(P_i, Q)``, ``â``, ...) are the
constants of :mod:`geoviz.glossary`, the same strings the app shows; ``main``
makes stdout/stderr replace characters a terminal cannot encode instead of failing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence

from geoviz import __version__
from geoviz.cli import app as app_command
from geoviz.cli import geodesic, otdd, screen, transfer
from geoviz.errors import GeovizError
from geoviz.memory import memory_guard
from geoviz.tasks import connect_timeout_from_env

__all__ = ["COMMANDS", "INTERRUPTED_STATUS", "build_parser", "cli_message", "main"]

#: ``register(subparsers)`` of each command module, in the order ``geoviz --help`` lists
#: their commands: ``datasets``, ``show``; ``transfer``; ``distance``, ``project``, ``grid``;
#: ``screen``; ``app``
COMMANDS: tuple[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None], ...] = (
    otdd.register,
    transfer.register,
    geodesic.register,
    screen.register,
    app_command.register,
)

#: exit status after Ctrl-C: 128 + SIGINT, what a shell reports for a process SIGINT ended
INTERRUPTED_STATUS = 130
#: longest message printed for an unexpected error (its first line, cut)
MAX_ERROR_CHARS = 400


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The full parser: every command of :data:`COMMANDS`, in order."""
    parser = argparse.ArgumentParser(
        prog="geoviz",
        description="Synthetic labeled datasets along generalized geodesics in OT dataset space.",
    )
    parser.add_argument("--version", action="version", version=f"geoviz {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in COMMANDS:
        register(subparsers)
    return parser


def _tolerant_streams() -> None:
    """Never fail on a Unicode label (``W²₂,Q``, ``â``) written to a legacy-encoded stream."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            reconfigure = getattr(stream, "reconfigure", None)  # io.TextIOWrapper's
            encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
            if callable(reconfigure) and encoding != "utf8":
                reconfigure(errors="replace")


_BATCHED_HINT = "use a smaller sample or the batched mode"

#: library wording (Python arguments) -> the command line's options; applied in order
_CLI_WORDING: tuple[tuple[str, str], ...] = (
    ("pass overwrite=True", "pass --overwrite"),
    ("overwrite=True", "--overwrite"),
    ("(use method='barycentric')", "(use --method barycentric)"),
    ("use method='barycentric'", "use --method barycentric"),
    ("or use backend='sequential'", "or use --backend sequential"),
    ("or pass format=", "or pass --format"),
    ("pass size=... to resize them", "use --size to resize them"),
    (
        "resize them with geoviz.data.preprocess.harmonize(size=...)",
        "use a larger --size",
    ),
    (
        "so a relative epsilon is undefined; give an absolute one",
        "so the relative --epsilon is undefined: these datasets cannot be compared",
    ),
    ("increase max_iter or epsilon", "use a larger --epsilon"),
    ("OTDDConfig: lambda_x and lambda_y", "--lambda-x and --lambda-y"),
    ("OTDDConfig: lambda_x", "--lambda-x"),
    ("OTDDConfig: lambda_y", "--lambda-y"),
    ("OTDDConfig: device", "--device"),
    ("a model of your own (features_model)", "a model of your own (--features-model)"),
)
#: the same for wording with a value in it
_CLI_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"cannot draw n=(\d+) samples"), r"cannot draw --n-out \1 samples"),
    (
        re.compile(r"use n <= (\d+) or fit with more target samples"),
        r"use --n-out <= \1 or a larger --n",
    ),
    (re.compile(r"\bk=(\d+) labelled examples per class"), r"--k \1 labelled examples per class"),
    (re.compile(r"\(config\.features='([^']*)'\)"), r"(--features \1)"),
)


def cli_message(err: BaseException | str, args: argparse.Namespace | None = None) -> str:
    """``str(err)`` worded for the command line, on one line.

    Library messages name Python arguments; the CLI has options for them:
    ``overwrite=True`` becomes ``--overwrite``, ``method='barycentric'`` becomes
    ``--method barycentric`` (:data:`_CLI_WORDING`), and "the batched mode" of an
    out-of-memory refusal becomes ``--batch-size`` where the command has it (else a
    smaller ``--n``). Advice naming an option the command lacks is left out.
    """
    text = " ".join(str(err).split())  # one line, whatever the library wrote
    for python, cli in _CLI_WORDING:
        text = text.replace(python, cli)
    for pattern, cli in _CLI_PATTERNS:
        text = pattern.sub(cli, text)
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


def _os_message(err: OSError) -> str:
    """An ``OSError`` as one sentence: what failed and on which file (cut if very long)."""
    what = err.strerror or type(err).__name__
    name = err.filename
    if name is None:
        return f"{what}"
    text = os.fsdecode(name) if isinstance(name, bytes) else str(name)
    if len(text) > 120:
        text = text[:60] + "…" + text[-40:]
    return f"{what}: {text}"


def _unexpected_message(err: BaseException) -> str:
    """A bug's one line: its type and the first line of its message, cut."""
    first = (str(err).strip().splitlines() or [""])[0]
    if len(first) > MAX_ERROR_CHARS:
        first = first[: MAX_ERROR_CHARS - 1] + "…"
    detail = f"{type(err).__name__}: {first}" if first else type(err).__name__
    return (
        f"unexpected {detail} (a bug in geoviz; set GEOVIZ_TRACEBACK=1 to print where it happened)"
    )


@contextlib.contextmanager
def _one_line_warnings(args: argparse.Namespace | None) -> Iterator[None]:
    """Warnings printed as ``warning: <message>`` lines, worded for the command line."""

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: object = None,
        line: str | None = None,
    ) -> None:
        with contextlib.suppress(OSError, ValueError):
            print(f"warning: {cli_message(str(message), args)}", file=sys.stderr)

    previous = warnings.showwarning
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


def _interrupted(process: bool) -> int:
    """Ctrl-C: one line, status :data:`INTERRUPTED_STATUS`; for the process's own command
    line (``process``) a second Ctrl-C while Python shuts down is ignored, not a traceback."""
    if process:
        with contextlib.suppress(ValueError, OSError):  # not the main thread
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    with contextlib.suppress(OSError, ValueError):
        print("interrupted", file=sys.stderr, flush=True)
    if process:
        # a fit's parts may still run on threads (--workers), and Python joins them at exit:
        # leave now; their half-written cache entries are temporaries the next run removes
        os._exit(INTERRUPTED_STATUS)
    return INTERRUPTED_STATUS


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 bad input, a refused file or not enough
    memory, 1 a bug, :data:`INTERRUPTED_STATUS` after Ctrl-C).

    ``argv`` ``None`` reads the process's command line (the ``geoviz`` script,
    ``python -m geoviz``).
    """
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return _interrupted(process=argv is None)


def _main(argv: Sequence[str] | None) -> int:
    _tolerant_streams()
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["app"]:  # Streamlit's options pass through: not this parser's to refuse
        return app_command.run_app(arguments[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(arguments)
    except SystemExit as exc:  # --help, --version, or an argparse usage error
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    # torch only now that a command runs: parsing and --help import none of it
    from geoviz.backend import RuntimeSettings, configure_torch, configured
    from geoviz.nn.training import CPU_TRAIN_THREADS

    # process-wide torch settings, once per process, here at the entry point (the library
    # sets none): one intra-op thread suits the small networks, subnormals flushed; a
    # command of large GEMMs (the OTDD's costs) sets torch_threads=None to keep every core
    threads = getattr(args, "torch_threads", CPU_TRAIN_THREADS)
    if getattr(args, "method", None) == "neural":  # small networks, like the transfer CLI's
        threads = CPU_TRAIN_THREADS
    configure_torch(threads=threads, flush_denormal=True)
    try:
        # Ray's connection wait is a setting of the environment too: refused now, before any
        # work, not when a batch or a refit first needs Ray minutes into the run
        connect_timeout_from_env()
        # the environment is read here, once per command (GEOVIZ_DEVICE, GEOVIZ_CACHE_DIR,
        # ...); MemoryError / allocator failures anywhere in a command become a ResourceError
        with (
            _one_line_warnings(args),
            configured(RuntimeSettings.from_env()),
            memory_guard(f"geoviz {args.command}"),
        ):
            return int(func(args) or 0)
    except GeovizError as err:
        print(f"error: {cli_message(err, args)}", file=sys.stderr)
        return 2
    except OSError as err:  # a file the system refuses (a name too long, a full disk, ...)
        print(f"error: {cli_message(_os_message(err), args)}", file=sys.stderr)
        return 2
    except Exception as err:  # a bug: one line, its traceback only when asked for
        if os.environ.get("GEOVIZ_TRACEBACK", "").strip() not in ("", "0"):
            traceback.print_exc()
        print(f"error: {_unexpected_message(err)}", file=sys.stderr)
        return 1
