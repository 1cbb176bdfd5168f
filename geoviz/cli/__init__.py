"""Command-line interface: ``geoviz <command> ...`` (:func:`main`, the console script).

The commands live in this package, one module per group:

* :mod:`geoviz.cli.otdd` — ``datasets``, ``show``;
* :mod:`geoviz.cli.transfer` — ``transfer`` (the paper's transfer experiments and
  simplex study);
* :mod:`geoviz.cli.geodesic` — ``distance``, ``project``, ``grid``;

with their shared helpers in :mod:`geoviz.cli.args` (argument parsers and bound
checks) and :mod:`geoviz.cli.output` (tables, safe file writes, progress).

Every module of :data:`PLUGIN_MODULES` that can be imported and has
``register(subparsers)`` is called with the ``argparse`` sub-parsers object, in order;
one whose optional dependency is missing (``qpsolvers``, ``ray``) only loses its
commands, with a warning. Each command a plug-in adds must set
``parser.set_defaults(func=handler)`` with ``handler(args: argparse.Namespace) -> int``;
handlers may raise :class:`~geoviz.errors.GeovizError` for bad input, which
``main`` prints as ``error: <message>`` on stderr with exit status 2.

The environment (``GEOVIZ_DEVICE``, ``GEOVIZ_CACHE_DIR``, ``GEOVIZ_NO_CACHE``,
``GEOVIZ_ASSETS_DIR``, ``GEOVIZ_EMBEDDING``) is read once per command by :func:`main`
(:meth:`geoviz.backend.RuntimeSettings.from_env`) and installed for the command's run
(:func:`geoviz.backend.configured`). Torch's process-wide settings (one intra-op thread,
:data:`geoviz.nn.training.CPU_TRAIN_THREADS`; subnormals flushed) are set by ``main``
too (:func:`geoviz.backend.configure_torch`): the library changes neither.

Every option a user gives is checked right after parsing, before any dataset is
loaded or map fitted, against the shared bounds of :mod:`geoviz.limits`
(:mod:`geoviz.cli.args`). ``main`` runs the handler inside
:func:`geoviz.memory.memory_guard`, so running out of memory is one sentence with exit
status 2 too, and it words library messages for the command line (``--overwrite``
instead of ``overwrite=True``, ``--batch-size`` instead of "the batched mode").

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
import importlib
import sys
from collections.abc import Sequence

from geoviz.backend import RuntimeSettings, configure_torch, configured
from geoviz.cli import otdd
from geoviz.errors import GeovizError
from geoviz.memory import memory_guard
from geoviz.nn.training import CPU_TRAIN_THREADS

__all__ = ["PLUGIN_MODULES", "build_parser", "cli_message", "main"]

#: command modules registered after ``datasets`` and ``show``, in order
PLUGIN_MODULES: tuple[str, ...] = ("geoviz.cli.transfer", "geoviz.cli.geodesic")


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The full parser: ``datasets``, ``show`` and every command of :data:`PLUGIN_MODULES`."""
    from geoviz import __version__

    parser = argparse.ArgumentParser(
        prog="geoviz",
        description="Synthetic labeled datasets along generalized geodesics in OT dataset space.",
    )
    parser.add_argument("--version", action="version", version=f"geoviz {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    otdd.register(subparsers)
    _register_plugins(subparsers)
    return parser


def _register_plugins(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
            reconfigure = getattr(stream, "reconfigure", None)  # io.TextIOWrapper's
            encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
            if callable(reconfigure) and encoding != "utf8":
                reconfigure(errors="replace")


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
    # process-wide torch settings, once per process, here at the entry point (the library
    # sets none): one intra-op thread suits the small networks, subnormals flushed
    configure_torch(threads=CPU_TRAIN_THREADS, flush_denormal=True)
    try:
        # the environment is read here, once per command (GEOVIZ_DEVICE, GEOVIZ_CACHE_DIR,
        # ...); MemoryError / allocator failures anywhere in a command become a ResourceError
        with (
            configured(RuntimeSettings.from_env()),
            memory_guard(f"geoviz {args.command}"),
        ):
            return int(func(args) or 0)
    except GeovizError as err:
        print(f"error: {cli_message(err, args)}", file=sys.stderr)
        return 2
