"""Start the app: ``python -m geoviz.app.serve [streamlit run options]`` (what ``make run`` runs).

It is ``python -m streamlit run app.py [options]`` with two steps before the server answers:

1. :func:`preload` imports the modules every page needs (torch, pandas, plotly, qpsolvers,
   the app's services: about 2.3 s on 2 cores). Streamlit imports a page's modules only when
   a visitor opens it, so without this the first visitor waited for them.
2. :func:`prefetch_default_scenario` starts, in a background thread, what the Geodesic page
   of the default scenario needs: its datasets, the OTDD maps and (2,Q) distances, the
   explorer's payload, the bootstrap behind its intervals, then the embedding view (in that
   order: what the first view waits for first). It goes through
   the same cached services as the pages (one job per scenario and process), so a visitor who
   arrives while it runs joins it instead of starting again, and one who arrives later finds
   it done (issue 26). On a restarted server the maps come from the disk cache.
   ``GEOVIZ_PREFETCH=0`` turns it off (a server that should do nothing until asked).

Then Streamlit's own command line runs, unchanged, in this process (:func:`runpy.run_module`
on the ``streamlit`` package, i.e. the documented ``python -m streamlit run``): every option
of ``streamlit run`` is accepted as it is.
"""

from __future__ import annotations

import importlib
import logging
import os
import runpy
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as a package
    import tomli as tomllib

import torch

from geoviz.app.explorer_host.service import (
    bootstrap_payload,
    embedding_payload,
    geodesic_payload,
    has_embedding_view,
)
from geoviz.app.services import caches as cache_services
from geoviz.app.services import datasets as dataset_services
from geoviz.app.services import geodesic as geodesic_services
from geoviz.app.session import SessionModel
from geoviz.app.settings import AppSettings
from geoviz.app.uploads import secret_from_env
from geoviz.backend import RuntimeSettings
from geoviz.errors import GeovizError
from geoviz.site import app_script, streamlit_config
from geoviz.tasks import connect_timeout_from_env

LOG = logging.getLogger("geoviz.app.serve")  # also when run as __main__

#: the app's start page, served by ``streamlit run`` (in the wheel or the checkout)
APP_SCRIPT = app_script()

#: modules a page imports on its first run, heaviest first (imported by :func:`preload`)
PRELOAD_MODULES: tuple[str, ...] = (
    "torch",
    "pandas",  # plotly imports it while validating arrays; first here, never in a job thread
    "plotly.graph_objects",
    "qpsolvers",  # the QP behind a_hat (scipy.sparse): 0.3-1 s on its first import
    "geoviz.app.services",
    "geoviz.viz.plots",
    "geoviz.viz.compare",
)

__all__ = [
    "APP_SCRIPT",
    "PRELOAD_MODULES",
    "config_flags",
    "main",
    "prefetch_default_scenario",
    "prefetch_enabled",
    "preload",
    "settings_problem",
    "start_prefetch",
    "streamlit_argv",
]


def preload(modules: Sequence[str] = PRELOAD_MODULES) -> dict[str, float]:
    """Import ``modules`` now, in this (the main) thread; returns the seconds each took.

    In the main thread before the server starts, so no page's script thread can import the
    same modules concurrently (a half-initialised module seen by another thread is how the
    Geodesic page once failed, issue 23). A module that cannot be imported is skipped (the
    page that needs it says why when it runs).
    """
    seconds: dict[str, float] = {}
    for name in modules:
        start = time.perf_counter()
        try:
            importlib.import_module(name)
        except ImportError as err:  # an optional part missing: the page reports it
            LOG.warning("preload: %s could not be imported (%s)", name, err)
            continue
        seconds[name] = time.perf_counter() - start
    return seconds


def prefetch_enabled(env: Mapping[str, str] | None = None) -> bool:
    """``GEOVIZ_PREFETCH``: unset, ``1``, ``true``, ``yes`` or ``on`` prefetch; ``0``,
    ``false``, ``no`` or ``off`` do not; anything else is refused with one sentence."""
    env = os.environ if env is None else env
    raw = env.get("GEOVIZ_PREFETCH", "").strip().lower() or "1"
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise GeovizError(
        "environment variable GEOVIZ_PREFETCH must be 0 or 1 (or off/on, false/true, no/yes), "
        f"got {raw!r}"
    )


def settings_problem(env: Mapping[str, str] | None = None) -> str | None:
    """One sentence naming the environment variable the server cannot start with (and the
    values it accepts), or ``None`` when every setting is usable.

    Checked by :func:`main` before Streamlit starts: a server started with, say,
    ``GEOVIZ_FIT_WORKERS=abc`` would otherwise answer every page with an error box; one
    started with a short ``GEOVIZ_UPLOAD_SECRET`` would fail every upload link, and one
    with a bad ``GEOVIZ_RAY_CONNECT_TIMEOUT`` would fail the Evidence page's first Ray run.
    """
    env = os.environ if env is None else env
    try:
        AppSettings.from_env(env)
        prefetch_enabled(env)
        secret_from_env(env)
        connect_timeout_from_env(env)
        device = RuntimeSettings.from_env(env).device
        if device not in ("auto", "cpu", "cuda"):
            raise GeovizError(
                f"environment variable GEOVIZ_DEVICE must be auto, cpu or cuda, got {device!r}"
            )
        if device == "cuda" and not torch.cuda.is_available():
            raise GeovizError(
                "environment variable GEOVIZ_DEVICE is cuda, but no CUDA GPU is available to "
                "torch here: use auto or cpu"
            )
    except GeovizError as err:
        return str(err)
    return None


def prefetch_default_scenario(settings: AppSettings | None = None) -> dict[str, float]:
    """Compute what the Geodesic page shows for the default scenario, into the app's store.

    Runs the same services, with the same keys, as a visitor's first Geodesic page
    (:func:`geoviz.app.widgets.geodesic_with_status` and the explorer): the datasets, the
    geodesic fit and the embedding as two background jobs, then the explorer's payload and
    the Q-resampling bootstrap. Returns the seconds at which each part was ready.

    Parameters
    ----------
    settings
        The server's settings (default: from the environment, as the pages read them).
    """
    start = time.perf_counter()
    ready: dict[str, float] = {}
    model = SessionModel({}, settings)
    cache_services.configure_torch(model.settings.torch_threads)  # as every page's frame does first
    data = dataset_services.scenario_data(model)
    ready["data"] = time.perf_counter() - start
    job = geodesic_services.start_geodesic(model.scenario, data, model.settings.fit_workers_used())
    job.wait()
    geodesic_services.finish_geodesic(model.scenario)
    if job.error_ is not None:
        raise job.error_
    result = job.result_
    ready["geodesic"] = time.perf_counter() - start
    geodesic_payload(model, result)
    ready["explorer payload"] = time.perf_counter() - start
    boot, error = geodesic_services.explorer_bootstrap(model.scenario, result, wait_seconds=None)
    if error is not None:
        raise error
    if boot is not None:
        bootstrap_payload(model, boot)
    ready["bootstrap"] = time.perf_counter() - start
    if has_embedding_view(result):
        _emb, emb_error = embedding_payload(model, result, wait_seconds=None)
        if emb_error is not None:
            raise emb_error
        ready["embedding view"] = time.perf_counter() - start
    return ready


def start_prefetch(settings: AppSettings | None = None) -> threading.Thread:
    """:func:`prefetch_default_scenario` in a daemon thread; its outcome goes to the log
    (a failure is the page's to show: the visitor's own run meets the same error)."""

    def run() -> None:
        try:
            ready = prefetch_default_scenario(settings)
        except Exception:  # the pages meet and report the same error themselves
            LOG.exception("prefetching the default scenario failed")
            return
        LOG.info(
            "default scenario prefetched: %s",
            ", ".join(f"{part} at {sec:.1f} s" for part, sec in ready.items()),
        )

    thread = threading.Thread(target=run, name="geoviz-prefetch", daemon=True)
    thread.start()
    return thread


def _flag_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def config_flags(config: Path, options: Sequence[str]) -> list[str]:
    """The app's Streamlit settings (``config``, a ``config.toml``) as ``--section.key=value``
    flags, less those ``options`` give.

    Streamlit reads ``.streamlit/config.toml`` from the folder it is started in, so an
    installed app started from any other folder would run without its settings (uploads of
    512 MB, tracebacks hidden from visitors, the hidden page list): as flags they hold
    wherever it starts, and an option on the command line still wins.

    Raises
    ------
    GeovizError
        The file cannot be read or is not TOML (a damaged install).
    """
    try:
        parsed = tomllib.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise GeovizError(
            f"the app's settings {config} cannot be read ({err}); reinstall geoviz"
        ) from None
    given = {opt.split("=", 1)[0] for opt in options if opt.startswith("--")}
    flags: list[str] = []
    for section, values in parsed.items():
        if not isinstance(values, dict):
            continue
        for key, value in values.items():
            flag = f"--{section}.{key}"
            if flag not in given:
                flags.append(f"{flag}={_flag_value(value)}")
    return flags


def streamlit_argv(options: Sequence[str]) -> list[str]:
    """``sys.argv`` of ``streamlit run app.py [the app's settings] [options]``."""
    config = streamlit_config()
    settings = config_flags(config, options) if config.is_file() else []
    return ["streamlit", "run", str(APP_SCRIPT), *settings, *options]


def _log_to_stderr() -> None:
    """geoviz's INFO lines (start-up, prefetch, payload sizes) on stderr, beside Streamlit's;
    other libraries' loggers are left as they are."""
    logger = logging.getLogger("geoviz")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def main(argv: Sequence[str] | None = None) -> None:
    """Check the settings, preload, start the prefetch, then run ``streamlit run app.py
    [argv]`` in this process.

    Raises
    ------
    SystemExit
        Status 2 after one sentence on stderr when an environment variable is unusable
        (:func:`settings_problem`) or the app's settings file is damaged; nothing was started.
    """
    problem = settings_problem()
    if problem is not None:  # before anything starts: one sentence and the usage status
        print(f"geoviz: {problem}", file=sys.stderr)
        raise SystemExit(2)
    options = list(sys.argv[1:] if argv is None else argv)
    try:
        command = streamlit_argv(options)
    except GeovizError as err:
        print(f"geoviz: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    _log_to_stderr()
    seconds = preload()
    LOG.info(
        "preloaded %d modules of the pages (%.1f s beyond what the launcher imports itself)",
        len(seconds),
        sum(seconds.values()),
    )
    # results no open tab holds leave on a timer, whether or not a visitor ever comes
    cache_services.start_sweeper()
    if prefetch_enabled():
        start_prefetch()
    sys.argv = command
    runpy.run_module("streamlit", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
