"""Atomic writes: a file, or a set of files and folders, appears complete or not at all.

Everything is first written to hidden temporary siblings (``.<name>.<random>.tmp``)
in the target's directory and then renamed into place, so a reader never sees
a partial file. On any failure (an error, ``KeyboardInterrupt``) the
temporaries are removed, whatever was being replaced is restored, and folders
created for the write are removed again. Existing paths are replaced only with
``overwrite=True``.

A process killed mid-write (``kill -9``, a power cut) cannot clean up: its
``.<name>.<random>.p<pid>h<host>.tmp`` sibling stays behind. The name records the
writer's process id and a token of its machine (host name, boot and process namespace),
so a later write into the same folder, from this machine, removes the temporaries whose
writer is no longer running, whatever their age; :func:`atomic_write_many` (exports) does
so before it starts, every write after it succeeds. A temporary of another machine (or one
written before these names) is removed once it is older than :data:`STALE_TEMP_SECONDS`
(one hour; a live writer's temporary is younger, since writing it updates its
modification time). Backups (``.<name>.<random>.old``) are never
removed automatically: after a crash in the middle of a replacement the backup may be
the only copy of what was replaced.

Used by :mod:`geoviz.export` (data file + manifest, ImageFolder trees),
:class:`geoviz.backend.DiskCache` and the ``geoviz grid`` CSV writer.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import shutil
import socket
import stat
import time
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

#: What :func:`atomic_write_many` writes at one path: file bytes, or a directory
#: tree given as ``{"relative/posix/path": bytes}``.
Content = bytes | Mapping[str, bytes]

__all__ = [
    "STALE_TEMP_SECONDS",
    "AtomicWriteError",
    "Content",
    "NotReplaceableError",
    "atomic_write_bytes",
    "atomic_write_many",
    "check_replaceable",
    "remove_stale_temps",
]

#: Age (seconds since the last modification) after which a temporary sibling left by a
#: killed write is removed by the next write into its folder.
STALE_TEMP_SECONDS = 3600.0

_TEMP_TOKEN_HEX = 12  # secrets.token_hex(6)
#: ``.<name>.<random>[.p<pid>h<machine>].tmp`` (the writer's part is absent in old names)
_STALE_TEMP_RE = re.compile(
    rf"^\..+\.[0-9a-f]{{{_TEMP_TOKEN_HEX}}}(?:\.p(?P<pid>[0-9]+)h(?P<host>[0-9a-f]{{8}}))?\.tmp$"
)


def _machine_token() -> str:
    """8 hex digits naming this machine, boot and process namespace: a process id in a
    temporary's name means this process only where the token is the same."""
    parts = [socket.gethostname()]
    for probe in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/pid"):
        with contextlib.suppress(OSError):
            parts.append(
                Path(probe).read_text().strip()
                if probe.endswith("boot_id")
                else str(os.stat(probe).st_ino)
            )
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]


_MACHINE = _machine_token()


def _writer_gone(pid: int) -> bool:
    """Whether process ``pid`` of this machine has ended (a zombie has: it writes no more)."""
    if os.name != "posix" or pid <= 0:
        return False  # os.kill(pid, 0) is not a probe on Windows: age decides there
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process: running
        return False
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] == "Z"
    return False


class AtomicWriteError(OSError):
    """Writing ``path`` failed and everything was rolled back.

    Attributes
    ----------
    path
        The target being written when the failure happened (or the parent
        directory, when creating it failed).
    cause
        The underlying :class:`OSError` (also ``__cause__``); a
        :class:`FileExistsError` when a target exists and may not be replaced.
    """

    def __init__(self, path: Path, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.path = path
        self.cause = cause

    def __str__(self) -> str:
        return f"{self.path}: {self.cause.strerror or self.cause}"


class NotReplaceableError(OSError):
    """The target exists and is not what a write may replace (see :func:`check_replaceable`).

    ``str(err)`` is one sentence naming the path and what it is.
    """

    def __init__(self, path: Path, what: str, expected: str) -> None:
        self.path = path
        self.what = what
        message = f"{path} is {what}, not {expected}; refusing to replace it"
        super().__init__(errno.EINVAL, message)

    def __str__(self) -> str:
        return str(self.strerror)


def _kind(mode: int) -> str:
    """What a ``st_mode`` names, as words for a sentence."""
    kinds = (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISREG, "a regular file"),
    )
    return next((words for test, words in kinds if test(mode)), "a special file")


def check_replaceable(path: str | Path, *, tree: bool = False) -> None:
    """Refuse ``path`` when it exists and a write may not replace it.

    A write of bytes replaces only a regular file; a write of a tree (an ImageFolder)
    only a folder. Nothing is opened or followed (``lstat``): a FIFO is not read from, and
    a symbolic link is refused whatever it points to.

    Parameters
    ----------
    path
        The target of the write; a missing path passes.
    tree
        Whether the write makes a folder (else a file).

    Raises
    ------
    NotReplaceableError
        ``path`` exists and is a device, a FIFO, a socket, a symbolic link, or a folder
        where a file is written (a file where a folder is).
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except NotADirectoryError:  # a parent is a file: the write's own error says so
        return
    ok = stat.S_ISDIR(mode) if tree else stat.S_ISREG(mode)
    if not ok:
        raise NotReplaceableError(Path(path), _kind(mode), "a folder" if tree else "a regular file")


def _exists_error(path: Path) -> FileExistsError:
    return FileExistsError(errno.EEXIST, "already exists", str(path))


def _temp_sibling(path: Path, tag: str) -> Path:
    token = secrets.token_hex(_TEMP_TOKEN_HEX // 2)
    if tag == "tmp":  # who writes it: a later write may remove it once this process is gone
        token = f"{token}.p{os.getpid()}h{_MACHINE}"
    return path.with_name(f".{path.name}.{token}.{tag}")


def _newest_mtime(path: Path, since: float) -> float:
    """Latest modification time in ``path`` (a file or a tree), stopping early once a
    time after ``since`` is seen (then the entry is not stale anyway)."""
    newest = os.lstat(path).st_mtime
    if newest > since or not os.path.isdir(path) or os.path.islink(path):
        return newest
    for dirpath, dirnames, filenames in os.walk(path):
        for name in (*dirnames, *filenames):
            with contextlib.suppress(OSError):
                newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
                if newest > since:
                    return newest
    return newest


def remove_stale_temps(folder: str | Path, *, older_than: float = STALE_TEMP_SECONDS) -> int:
    """Remove the temporaries that killed writes left in ``folder``.

    Only hidden names of the form the writer uses (``.<name>.<12 hex digits>.tmp`` or
    ``.<name>.<12 hex digits>.p<pid>h<machine>.tmp``, files or trees) are removed: those
    whose writer was a process of this machine that is no longer running, and the others
    once their newest modification is more than ``older_than`` seconds old. Backups
    (``.old``) and every other file are left alone. Failures are ignored (another process
    may be removing the same entry).

    Parameters
    ----------
    folder
        The folder to sweep (not recursively).
    older_than
        Minimum age in seconds; default :data:`STALE_TEMP_SECONDS`.

    Returns
    -------
    int
        How many temporaries were removed.
    """
    cutoff = time.time() - older_than
    removed = 0
    try:
        with os.scandir(folder) as it:
            candidates = [
                (Path(e.path), match) for e in it if (match := _STALE_TEMP_RE.match(e.name))
            ]
    except OSError:
        return 0
    for path, match in candidates:
        pid, host = match.group("pid"), match.group("host")
        gone = host == _MACHINE and pid is not None and _writer_gone(int(pid))
        try:
            if not gone and _newest_mtime(path, cutoff) > cutoff:
                continue
            _remove(path)
        except OSError:
            continue
        removed += 1
    return removed


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def _missing_dirs(folder: Path) -> list[Path]:
    """The folders that creating ``folder`` would create, innermost first."""
    missing: list[Path] = []
    probe = folder
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    return missing


def _undo(paths: Sequence[Path], created_dirs: Sequence[Path]) -> None:
    """Best-effort removal of ``paths``, then of the (empty) ``created_dirs``."""
    for path in paths:
        with contextlib.suppress(OSError):
            _remove(path)
    for folder in created_dirs:  # innermost first
        with contextlib.suppress(OSError):
            folder.rmdir()


def _write_bytes(path: Path, data: bytes, *, sync: bool = False, mode: int = 0o666) -> None:
    # default permissions (0o666 less the umask), unlike mkstemp's 0600
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode)
    with open(fd, "wb") as fh:
        fh.write(data)
        if sync:
            fh.flush()
            os.fsync(fh.fileno())


def _write_temp(target: Path, content: Content, *, mode: int = 0o666) -> Path:
    tmp = _temp_sibling(target, "tmp")
    if isinstance(content, (bytes, bytearray)):
        try:
            _write_bytes(tmp, bytes(content), sync=True, mode=mode)
        except BaseException:
            _undo([tmp], [])
            raise
        return tmp
    os.mkdir(tmp)
    try:
        for rel, data in content.items():
            parts = PurePosixPath(rel).parts
            if not parts or PurePosixPath(rel).is_absolute() or ".." in parts:
                raise ValueError(f"refusing to write unsafe member path {rel!r}")
            dest = tmp.joinpath(*parts)
            dest.parent.mkdir(parents=True, exist_ok=True)
            _write_bytes(dest, data)
    except BaseException:
        _remove(tmp)
        raise
    return tmp


def _place(tmp: Path, target: Path) -> None:
    """Move ``tmp`` to ``target`` without clobbering anything that appeared meanwhile."""
    if tmp.is_dir():
        if os.path.lexists(target):
            raise _exists_error(target)
        os.rename(tmp, target)
        return
    try:
        os.link(tmp, target)  # atomic and fails if target exists
    except FileExistsError:
        raise
    except OSError:  # hard links unsupported here (some network/FAT file systems)
        if os.path.lexists(target):
            raise _exists_error(target) from None
        os.replace(tmp, target)
        return
    os.unlink(tmp)


def atomic_write_bytes(
    path: str | Path, data: bytes, *, overwrite: bool, mode: int = 0o666
) -> None:
    """Write ``data`` to the file ``path`` atomically (missing parent folders are created).

    The bytes go to a hidden temporary sibling, are flushed to disk and then
    renamed over ``path`` (``os.replace``, so readers see the old or the new
    file, never a partial one).

    Parameters
    ----------
    path
        The file to write.
    data
        Its complete content.
    overwrite
        Replace an existing ``path``. With ``False`` an existing path (also one
        that appears while writing) is never replaced.
    mode
        Permission bits of the new file (less the umask); ``0o600`` for a secret.

    Raises
    ------
    NotReplaceableError
        ``path`` exists and is not a regular file (:func:`check_replaceable`); nothing is
        written.
    FileExistsError
        ``path`` exists and ``overwrite`` is false.
    OSError
        Any other failure; the old file (if any) is intact and no temporary
        file or newly created folder is left behind.

    Notes
    -----
    After a successful write, temporaries of killed writes older than
    :data:`STALE_TEMP_SECONDS` are removed from the folder (:func:`remove_stale_temps`).

    Examples
    --------
    >>> from pathlib import Path
    >>> from geoviz.atomic import atomic_write_bytes
    >>> atomic_write_bytes("notes/a.txt", b"first", overwrite=False)  # creates notes/
    >>> atomic_write_bytes("notes/a.txt", b"second", overwrite=False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    FileExistsError: [Errno 17] already exists: ...
    >>> atomic_write_bytes("notes/a.txt", b"second", overwrite=True)
    >>> Path("notes/a.txt").read_bytes(), sorted(p.name for p in Path("notes").iterdir())
    (b'second', ['a.txt'])
    """
    path = Path(path)
    check_replaceable(path)
    if not overwrite and os.path.lexists(path):
        raise _exists_error(path)
    created_dirs = _missing_dirs(path.parent)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _write_temp(path, data, mode=mode)
    except BaseException:
        _undo([], created_dirs)
        raise
    try:
        if overwrite:
            check_replaceable(path)  # again: a FIFO may have appeared while writing
            os.replace(tmp, path)
        else:
            _place(tmp, path)
    except BaseException:
        _undo([tmp], created_dirs)
        raise
    remove_stale_temps(path.parent)


def atomic_write_many(entries: Sequence[tuple[Path, Content]], *, overwrite: bool) -> None:
    """Write every entry (file bytes or a directory tree) all-or-nothing.

    All targets must share one parent directory (created if missing). Each
    entry is first written to a temporary sibling; then, in order, an existing
    target is moved aside to a hidden backup (only with ``overwrite=True``)
    and the temporary is renamed into place. If anything fails, the targets
    placed so far are removed, the backups are moved back, the temporaries and
    the folders created are removed; on success the backups are deleted.

    Parameters
    ----------
    entries
        ``(target, content)`` pairs; ``content`` is bytes (a file) or a
        mapping of relative POSIX paths to bytes (a directory tree).
    overwrite
        Replace existing targets (files or directories). With ``False`` an
        existing target (also one that appears while writing) is never replaced.

    Raises
    ------
    AtomicWriteError
        An :class:`OSError` naming the target that failed (``path``) with the
        underlying error as ``cause``: a :class:`FileExistsError` for an
        existing target that may not be replaced, a :class:`NotReplaceableError` for one
        that is not what the entry writes (a device, a FIFO, a link, a folder for a file:
        checked before anything is written). Everything is rolled back.
    ValueError
        A directory tree names a member path that is absolute or contains
        ``..`` (nothing is left behind).

    Notes
    -----
    Before writing and after a successful write, temporaries of killed writes are removed
    from the folder (:func:`remove_stale_temps`).
    """
    for target, content in entries:
        try:
            check_replaceable(target, tree=not isinstance(content, (bytes, bytearray)))
        except NotReplaceableError as err:
            raise AtomicWriteError(target, err) from err
        if not overwrite and os.path.lexists(target):
            raise AtomicWriteError(target, _exists_error(target))
    parent = entries[0][0].parent
    # an export killed here before (SIGKILL, a power cut) left its temporaries: gone first
    remove_stale_temps(parent)
    created_dirs = _missing_dirs(parent)
    temps: list[Path] = []
    placed: list[Path] = []
    backups: list[tuple[Path, Path]] = []
    current = parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        for target, content in entries:
            current = target
            temps.append(_write_temp(target, content))
        for (target, content), tmp in zip(entries, temps, strict=True):
            current = target
            if overwrite and os.path.lexists(target):
                check_replaceable(target, tree=not isinstance(content, (bytes, bytearray)))
                backup = _temp_sibling(target, "old")
                os.replace(target, backup)
                backups.append((target, backup))
            _place(tmp, target)
            placed.append(target)
    except BaseException as err:
        _undo(placed[::-1], [])
        for target, backup in reversed(backups):
            with contextlib.suppress(OSError):
                os.replace(backup, target)
        _undo(temps, created_dirs)
        if isinstance(err, OSError):
            raise AtomicWriteError(current, err) from err
        raise
    _undo([backup for _, backup in backups], [])
    remove_stale_temps(parent)
