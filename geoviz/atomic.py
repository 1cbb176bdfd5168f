"""Atomic writes: a file, or a set of files and folders, appears complete or not at all.

Everything is first written to hidden temporary siblings (``.<name>.<random>.tmp``)
in the target's directory and then renamed into place, so a reader never sees
a partial file. On any failure (an error, ``KeyboardInterrupt``) the
temporaries are removed, whatever was being replaced is restored, and folders
created for the write are removed again. Existing paths are replaced only with
``overwrite=True``.

Used by :mod:`geoviz.export` (data file + manifest, ImageFolder trees),
:class:`geoviz.backend.DiskCache` and the ``geoviz grid`` CSV writer.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

#: What :func:`atomic_write_many` writes at one path: file bytes, or a directory
#: tree given as ``{"relative/posix/path": bytes}``.
Content = bytes | Mapping[str, bytes]

__all__ = ["AtomicWriteError", "Content", "atomic_write_bytes", "atomic_write_many"]


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


def _exists_error(path: Path) -> FileExistsError:
    return FileExistsError(errno.EEXIST, "already exists", str(path))


def _temp_sibling(path: Path, tag: str) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(6)}.{tag}")


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


def _write_bytes(path: Path, data: bytes, *, sync: bool = False) -> None:
    with open(path, "xb") as fh:  # default permissions (umask), unlike mkstemp's 0600
        fh.write(data)
        if sync:
            fh.flush()
            os.fsync(fh.fileno())


def _write_temp(target: Path, content: Content) -> Path:
    tmp = _temp_sibling(target, "tmp")
    if isinstance(content, (bytes, bytearray)):
        try:
            _write_bytes(tmp, bytes(content), sync=True)
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


def atomic_write_bytes(path: str | Path, data: bytes, *, overwrite: bool) -> None:
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

    Raises
    ------
    FileExistsError
        ``path`` exists and ``overwrite`` is false.
    OSError
        Any other failure; the old file (if any) is intact and no temporary
        file or newly created folder is left behind.
    """
    path = Path(path)
    if not overwrite and os.path.lexists(path):
        raise _exists_error(path)
    created_dirs = _missing_dirs(path.parent)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _write_temp(path, data)
    except BaseException:
        _undo([], created_dirs)
        raise
    try:
        if overwrite:
            os.replace(tmp, path)
        else:
            _place(tmp, path)
    except BaseException:
        _undo([tmp], created_dirs)
        raise


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
        existing target that may not be replaced. Everything is rolled back.
    ValueError
        A directory tree names a member path that is absolute or contains
        ``..`` (nothing is left behind).
    """
    if not overwrite:
        for target, _ in entries:
            if os.path.lexists(target):
                raise AtomicWriteError(target, _exists_error(target))
    parent = entries[0][0].parent
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
        for (target, _), tmp in zip(entries, temps, strict=True):
            current = target
            if overwrite and os.path.lexists(target):
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
