"""Run one function in a supervised child Python process, so that its failure stays its own.

A Ray driver ends its whole process when its cluster's coordinator (the GCS) goes away
("Failed to connect to GCS within 60 seconds ... The program will terminate"), and a
native crash or the kernel's OOM killer ends a process as abruptly. Work that can fail
like that must not run inside a process others depend on (the app's server):
:func:`run_in_child` runs ``fn(progress)`` in a fresh interpreter (``python -m
geoviz.isolation``), forwards its ``progress(stage, fraction)`` calls through a pipe and
returns its value. Whatever ends the child (an exception, a signal, Ray's exit) becomes
one :class:`~geoviz.errors.GeovizError` sentence in the caller; the caller's process
goes on.

The child is the leader of its own process group: when it ends, the group (Ray's
raylet, GCS and workers that it started) is killed with it. When the caller's process
ends first, the child notices within a second and ends its group too.

``fn`` and its value travel with :mod:`pickle`: ``fn`` is a module-level function or a
:func:`functools.partial` of one, importable in a fresh interpreter.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

from geoviz.errors import GeovizError

__all__ = ["WorkerExitedError", "run_in_child"]

R = TypeVar("R")

#: seconds between two looks of the child at whether its parent is still there
_PARENT_POLL_S = 1.0
#: characters of the child's last log line quoted in a message
_LOG_LINE_CHARS = 160
#: a log line's prefix: Ray's C++ ``[2026-01-01 10:00:00,000 E 1 2] rpc_client.h:204: `` or
#: Python's ``2026-01-01 10:00:00,000 INFO worker.py:1841 -- ``
_LOG_PREFIX = re.compile(
    r"^(?:\[[^\]]*\]\s*[\w./-]+:\d+:\s*"
    r"|\d{4}-\d\d-\d\d[ T][\d:.,]+\s+[A-Z]+\s+[\w./-]+:\d+\s+--\s*)"
)


class WorkerExitedError(GeovizError):
    """The child process of :func:`run_in_child` ended without a value.

    Attributes
    ----------
    returncode
        The child's exit status; ``-N`` when signal ``N`` ended it.
    """

    def __init__(self, message: str, returncode: int | None = None) -> None:
        super().__init__(message)
        self.returncode = returncode


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"


def _last_line(path: Path) -> str:
    """The last non-empty line of the child's log (cut), or ``""``."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(fh.seek(0, os.SEEK_END) - 8192, 0))
            tail = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    if not lines:
        return ""
    # what the line says, without a logger's time stamp and source position
    line = _LOG_PREFIX.sub("", lines[-1]).strip() or lines[-1]
    first, dot, rest = line.partition(". ")
    line = first if dot and rest else line.rstrip(".")  # its first sentence
    return line if len(line) <= _LOG_LINE_CHARS else line[: _LOG_LINE_CHARS - 1] + "…"


def run_in_child(
    fn: Callable[[Callable[[str, float], None]], R],
    *,
    progress: Callable[[str, float], None] | None = None,
    what: str = "The job",
    advice: str = "Start it again.",
    env: Mapping[str, str] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> R:
    """``fn(progress)`` computed in a child Python process this one supervises.

    Parameters
    ----------
    fn
        A picklable function of one ``progress(stage, fraction)`` callback.
    progress
        Receives the child's progress calls, in this process (on the calling thread).
    what, advice
        The subject and the last sentence of the message when the child fails
        ("The transfer run", "Start it again to resume from the checkpoints.").
    env
        Extra environment variables of the child.
    on_start
        Called with the child's process id once it runs (a supervisor may note it).

    Returns
    -------
    The value ``fn`` returned in the child.

    Raises
    ------
    GeovizError
        ``fn`` raised one in the child: the same error, re-raised here.
    WorkerExitedError
        Anything else ended the child: another exception (its class and last line), a
        signal (its number and name) or an exit without a value (its status and the last
        line of its output), in one sentence ending with ``advice``.
    """
    folder = Path(tempfile.mkdtemp(prefix="geoviz-child-"))
    job, result, log_path = folder / "job.pkl", folder / "result.pkl", folder / "child.log"
    try:
        job.write_bytes(pickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL))
        read_fd, write_fd = os.pipe()
        child_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        with open(log_path, "wb") as log:
            try:
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "geoviz.isolation",
                        str(job),
                        str(result),
                        str(write_fd),
                    ],
                    pass_fds=(write_fd,),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=child_env,
                    start_new_session=True,  # its own group: it and all it started end together
                )
            finally:
                os.close(write_fd)
        try:
            if on_start is not None:
                on_start(proc.pid)
            error = _follow(read_fd, progress)
            returncode = proc.wait()
        finally:
            _end_group(proc)
        return cast("R", _outcome(result, returncode, error, log_path, what, advice))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _follow(read_fd: int, progress: Callable[[str, float], None] | None) -> str | None:
    """Forward the child's progress lines until it closes the pipe; its error line, if any."""
    error: str | None = None
    with os.fdopen(read_fd, "r", encoding="utf-8", errors="replace") as pipe:
        for line in pipe:
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(message, dict):
                continue
            if "error" in message:
                error = str(message["error"])
            elif progress is not None and "stage" in message:
                progress(str(message["stage"]), float(message.get("fraction", 0.0)))
    return error


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill what is left of the child's process group (Ray's processes), and reap the child."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _outcome(
    result: Path, returncode: int, error: str | None, log_path: Path, what: str, advice: str
) -> Any:
    """The child's value, or the error that says how it ended."""
    if result.exists():
        with open(result, "rb") as fh:
            ok, value = pickle.load(fh)
        if ok:
            return value
        if isinstance(value, BaseException):
            raise value
    if error is not None:
        raise WorkerExitedError(f"{what} stopped: {error}. {advice}", returncode)
    if returncode < 0:
        how = f"was ended by signal {-returncode} ({_signal_name(-returncode)})"
    else:
        last = _last_line(log_path)
        how = f"exited with status {returncode}" + (f" ({last})" if last else "")
    raise WorkerExitedError(
        f"{what} stopped: its worker process {how} before it finished. {advice}", returncode
    )


# --------------------------------------------------------------------------- the child's side


def _watch_parent(parent: int, folder: Path) -> None:
    """End this process group once the parent is gone (the child is re-parented), removing
    the job's folder first: the parent that would have removed it is gone."""
    while True:
        time.sleep(_PARENT_POLL_S)
        if os.getppid() != parent:
            shutil.rmtree(folder, ignore_errors=True)
            os.killpg(0, signal.SIGKILL)


def _describe(err: BaseException) -> str:
    """``err`` as a clause: its class and the last line of its message."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    if len(last) > _LOG_LINE_CHARS:
        last = last[: _LOG_LINE_CHARS - 1] + "…"
    return f"{type(err).__name__}: {last}" if last else type(err).__name__


def _child_main(argv: list[str]) -> int:
    job, result, fd = Path(argv[0]), Path(argv[1]), int(argv[2])
    threading.Thread(
        target=_watch_parent,
        args=(os.getppid(), job.parent),
        name="geoviz-parent-watch",
        daemon=True,
    ).start()
    pipe = os.fdopen(fd, "w", encoding="utf-8", buffering=1)
    lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        with lock, contextlib.suppress(OSError, ValueError):
            pipe.write(json.dumps(message) + "\n")

    def progress(stage: str, fraction: float) -> None:
        send({"stage": str(stage), "fraction": float(fraction)})

    def store(ok: bool, value: Any) -> None:
        partial = result.with_suffix(".part")
        partial.write_bytes(pickle.dumps((ok, value), protocol=pickle.HIGHEST_PROTOCOL))
        partial.replace(result)

    status = 0
    try:
        fn = pickle.loads(job.read_bytes())
        store(True, fn(progress))
    except BaseException as err:  # handed to the parent, as the error or as a sentence
        status = 1
        stored = False
        if isinstance(err, GeovizError):
            with contextlib.suppress(Exception):
                store(False, err)
                stored = True
        if not stored:
            send({"error": f"its worker process failed ({_describe(err)})"})
        import traceback

        traceback.print_exc()  # the child's log, for whoever debugs it
    finally:
        with contextlib.suppress(OSError):
            pipe.close()
    return status


if __name__ == "__main__":
    # os._exit: no interpreter teardown (Ray's atexit hooks could wait on a dead cluster)
    code = _child_main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
