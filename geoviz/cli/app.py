"""``geoviz app``: start the Streamlit app from an install, from any folder.

``geoviz app [--port N] [--address A] [any streamlit run option]`` is what ``make run`` and
``python -m geoviz.app.serve`` do: the settings are checked, the pages' modules preloaded,
the default scenario prefetched, then ``streamlit run`` serves the installed ``app.py``
(:func:`geoviz.site.app_script`) with the app's own settings. By default it serves this
machine only (``127.0.0.1``); ``--address 0.0.0.0`` serves every interface, so anyone who
can reach the port can use the app.

Every option that is not ``--port`` or ``--address`` goes to ``streamlit run`` as it is
(``--server.maxUploadSize 100``, ``--theme.base dark``): the parser reads only its own two.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence

from geoviz.errors import GeovizError

__all__ = [
    "APP_HELP",
    "DEFAULT_ADDRESS",
    "DEFAULT_PORT",
    "LAUNCHER",
    "app_parser",
    "register",
    "run_app",
    "streamlit_options",
]

#: the module ``geoviz app`` becomes (the app's launcher, a layer above the CLI)
LAUNCHER = "geoviz.app.serve"
#: serves this machine only unless asked otherwise
DEFAULT_ADDRESS = "127.0.0.1"
#: Streamlit's own default port
DEFAULT_PORT = 8501

APP_HELP = "start the app in the browser (Streamlit), from any folder"

_EPILOG = (
    "Any other option is passed to `streamlit run` as it is, e.g. --server.maxUploadSize 100 "
    "or --theme.base dark. The app listens on 127.0.0.1 unless --address is given; "
    "--address 0.0.0.0 lets anyone who can reach the port use it."
)


def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--address",
        default=DEFAULT_ADDRESS,
        help=f"interface to listen on (default {DEFAULT_ADDRESS}: this machine only)",
    )


def app_parser(prog: str = "geoviz app") -> argparse.ArgumentParser:
    """The parser of ``geoviz app``'s own options (the rest is Streamlit's)."""
    parser = argparse.ArgumentParser(prog=prog, description=APP_HELP, epilog=_EPILOG)
    _add_options(parser)
    return parser


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``geoviz app`` in ``geoviz --help`` (:func:`geoviz.cli.main` runs it through
    :func:`run_app`, which passes unknown options on instead of refusing them)."""
    parser = subparsers.add_parser("app", help=APP_HELP, description=APP_HELP, epilog=_EPILOG)
    _add_options(parser)


def streamlit_options(argv: Sequence[str]) -> list[str]:
    """``streamlit run``'s options for ``geoviz app argv``.

    Raises
    ------
    GeovizError
        A port outside 1-65535, an empty address, or ``--server.port`` /
        ``--server.address`` given beside ``--port`` / ``--address`` (one would be ignored).
    SystemExit
        ``--help`` (status 0) or a malformed ``--port`` (status 2), from argparse.
    """
    args, rest = app_parser().parse_known_args(list(argv))
    if not 1 <= args.port <= 65535:
        raise GeovizError(f"--port must be between 1 and 65535, got {args.port}")
    if not str(args.address).strip():
        raise GeovizError("--address must name an interface, e.g. 127.0.0.1 or 0.0.0.0")
    named = {opt.split("=", 1)[0] for opt in rest if opt.startswith("--")}
    for ours, theirs in (("--port", "--server.port"), ("--address", "--server.address")):
        if theirs in named:
            raise GeovizError(f"give {ours} instead of {theirs} (geoviz app sets it)")
    return [
        f"--server.address={args.address}",
        f"--server.port={args.port}",
        "--server.headless=true",
        *rest,
    ]


def run_app(argv: Sequence[str]) -> int:
    """Check the options, then become ``python -m geoviz.app.serve OPTIONS`` (:func:`os.execv`:
    the same process, so Ctrl-C and the exit status are the server's).

    The CLI sits below the app in the layers and never imports it; the launcher is run as
    the module it is, as ``make run`` did.

    Returns
    -------
    int
        Only when nothing was started: 2 after a refused option (one sentence on stderr),
        0 after ``--help``.
    """
    try:
        options = streamlit_options(argv)
    except GeovizError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help, or argparse's usage error
        return exc.code if isinstance(exc.code, int) else 0
    sys.stdout.flush()
    sys.stderr.flush()
    command = [sys.executable, "-m", LAUNCHER, *options]
    if os.name != "posix":  # no exec there: wait for the server as a child
        return subprocess.call(command)
    os.execv(sys.executable, command)
    return 0  # not reached: execv does not return
