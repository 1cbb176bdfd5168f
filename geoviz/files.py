"""Opening files a user names: regular files only, of bounded size.

A path given as a model or a dataset may be anything the file system holds. A named pipe
(FIFO) blocks ``open()`` until a writer comes, and a character device such as ``/dev/zero``
is read without end, so both would hang a command or fill its memory. Every user path that
geoviz reads is therefore checked with :func:`os.stat` *before* it is opened: only a regular
file (a symbolic link to one is fine) of at most ``max_bytes`` is read. The check is
repeated on the open descriptor (:func:`os.fstat`), so a path swapped for a pipe in between
cannot block either: the file is opened non-blocking, which returns at once for a pipe.

Errors are sentences; ``error`` builds the exception from the problem text, so that each
caller raises its own kind (:class:`~geoviz.errors.DatasetError` naming the dataset file,
:class:`~geoviz.errors.GeovizError` naming the model file).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from geoviz.errors import GeovizError
from geoviz.memory import check_bytes, format_bytes

__all__ = [
    "MAX_MODEL_BYTES",
    "ErrorFactory",
    "check_regular_file",
    "file_kind_problem",
    "open_regular_file",
    "read_regular_file",
]

#: Largest model file (TorchScript, weights) that is read; change it on this module.
MAX_MODEL_BYTES: int = 2 * 1024**3

#: Builds the exception raised for a problem (a sentence without the file's name).
ErrorFactory = Callable[[str], Exception]

_READ_CHUNK = 16 * 2**20

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _default_error(path: str | os.PathLike[str]) -> ErrorFactory:
    name = Path(path).name or str(path)
    return lambda problem: GeovizError(f"{name}: {problem}")


def file_kind_problem(st: os.stat_result, max_bytes: int | None = None) -> str | None:
    """What keeps a file of status ``st`` from being read, in words, or ``None``.

    Parameters
    ----------
    st
        The file's :func:`os.stat` (or :func:`os.fstat`) result.
    max_bytes
        Largest size allowed (``None``: any).
    """
    mode = st.st_mode
    if not stat.S_ISREG(mode):
        kind = next((word for test, word in _KINDS if test(mode)), "not a regular file")
        return f"is {kind}, not a regular file; give the path of a file"
    return _size_problem(int(st.st_size), max_bytes)


def _size_problem(size: int, max_bytes: int | None) -> str | None:
    if max_bytes is not None and size > max_bytes:
        return (
            f"is {format_bytes(size)}, larger than the {format_bytes(max_bytes)} "
            "geoviz reads from one file"
        )
    return None


def check_regular_file(
    path: str | os.PathLike[str],
    *,
    max_bytes: int | None = None,
    error: ErrorFactory | None = None,
) -> int:
    """Check, without opening it, that ``path`` is a regular file of at most ``max_bytes``.

    Returns
    -------
    int
        The file's size in bytes.

    Raises
    ------
    Exception
        ``error(problem)`` (default: a :class:`~geoviz.errors.GeovizError` naming the file)
        when the file is missing or unreadable, is not a regular file (a directory, a FIFO,
        a device, a socket) or is larger than ``max_bytes``.
    """
    make = error or _default_error(path)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise make(f"cannot read file: {exc.strerror or exc}") from None
    problem = file_kind_problem(st, max_bytes)
    if problem is not None:
        raise make(problem)
    return int(st.st_size)


@contextmanager
def open_regular_file(
    path: str | os.PathLike[str],
    *,
    max_bytes: int | None = None,
    error: ErrorFactory | None = None,
) -> Iterator[BinaryIO]:
    """Open ``path`` for binary reading once it is known to be a regular file.

    :func:`check_regular_file` first; then the file is opened non-blocking (a pipe swapped
    in after the check does not block) and its descriptor checked again.

    Raises
    ------
    Exception
        As :func:`check_regular_file`.
    """
    make = error or _default_error(path)
    check_regular_file(path, max_bytes=max_bytes, error=make)
    nonblocking = getattr(os, "O_NONBLOCK", 0)  # POSIX; Windows has no FIFOs to open
    flags = os.O_RDONLY | nonblocking | getattr(os, "O_NOCTTY", 0)
    flags |= getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise make(f"cannot read file: {exc.strerror or exc}") from None
    try:
        problem = file_kind_problem(os.fstat(fd), max_bytes)
        if problem is not None:
            raise make(problem)
        if nonblocking:
            os.set_blocking(fd, True)  # a regular file: reads as usual
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        yield fh


def read_regular_file(
    path: str | os.PathLike[str],
    *,
    max_bytes: int | None = None,
    what: str | None = None,
    error: ErrorFactory | None = None,
) -> bytes:
    """The bytes of the regular file ``path``, refused before reading when they cannot fit.

    The size is checked against ``max_bytes`` and against this process's memory
    (:func:`geoviz.memory.check_bytes`) before the read, and again while reading, so a file
    that grows meanwhile is still bounded.

    Parameters
    ----------
    what
        What is read, for the memory message (default: ``"reading <path>"``).

    Raises
    ------
    Exception
        As :func:`check_regular_file`; also ``error(...)`` for a file that grows past
        ``max_bytes`` while read.
    ResourceError
        The file does not fit in memory.
    """
    make = error or _default_error(path)
    label = what or f"reading {path}"
    with open_regular_file(path, max_bytes=max_bytes, error=make) as fh:
        size = os.fstat(fh.fileno()).st_size
        check_bytes(size, label)
        chunks: list[bytes] = []
        total = 0
        try:
            while chunk := fh.read(_READ_CHUNK):
                total += len(chunk)
                problem = _size_problem(total, max_bytes)
                if problem is not None:
                    raise make(problem)
                if total > size:  # grows while read: keep it within memory
                    check_bytes(2 * total, label, at_least=True)
                chunks.append(chunk)
        except OSError as exc:
            raise make(f"cannot read file: {exc.strerror or exc}") from None
    return b"".join(chunks)
