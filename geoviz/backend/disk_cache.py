"""The content-addressed on-disk cache of geoviz (:class:`DiskCache`).

Entries are signed with a per-folder secret and checked on every read
(:mod:`geoviz.backend.cache_entries`); their keys are :func:`geoviz.backend.keys.cache_key`.
The process-wide default cache is :func:`geoviz.backend.get_cache`; its folder, and that of a
:class:`DiskCache` built without one, is :func:`geoviz.backend.settings.default_cache_dir`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import io
import os
import secrets
import threading
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from geoviz.atomic import atomic_write_bytes
from geoviz.backend.cache_entries import (
    Payload,
    ValueSpec,
    describe,
    envelope_problem,
    expect_problem,
    to_storable,
)
from geoviz.backend.keys import CACHE_FORMAT_VERSION, cache_key
from geoviz.backend.settings import default_cache_dir
from geoviz.errors import ResourceError
from geoviz.files import read_regular_file

__all__ = ["CACHE_SECRET_NAME", "CacheCorruptWarning", "DiskCache"]


class CacheCorruptWarning(UserWarning):
    """A :class:`DiskCache` entry failed a check on read: it was ignored, removed and
    recomputed (the message names the file and what was wrong)."""


#: name of the per-folder secret that signs the entries (:class:`DiskCache`)
CACHE_SECRET_NAME = ".geoviz-cache-secret"
_SECRET_BYTES = 32


def _read_entry_file(path: Path, *, max_bytes: int | None = None) -> bytes:
    """The bytes of a cache file, read only as a bounded regular file: a FIFO or a device
    put where an entry (or the secret) goes is refused at once, never opened for reading.

    Raises
    ------
    FileNotFoundError
        Nothing is there.
    OSError
        Anything else that keeps it from being read (its ``strerror`` says what).
    """
    if not os.path.lexists(path):
        raise FileNotFoundError(errno.ENOENT, "no such file", str(path))

    def refuse(problem: str) -> OSError:
        return OSError(errno.EINVAL, problem)

    try:
        return read_regular_file(path, max_bytes=max_bytes, error=refuse)
    except ResourceError as err:  # an entry larger than memory: not worth reading
        raise OSError(errno.EFBIG, str(err)) from err


class DiskCache:
    """Content-addressed store of tensors/arrays/JSON-able values on disk.

    Each entry is one file ``<dir>/<namespace>/<key>.pt`` written with
    :func:`torch.save` and read back with ``torch.load(weights_only=True)``
    (no arbitrary unpickling). Writes go to a temporary file in the same
    directory and are renamed into place, so readers never see half a file; the
    temporaries of writes that were killed are removed by a later write into the same
    folder once they are an hour old (:func:`geoviz.atomic.remove_stale_temps`).

    Every read checks what it reads, and an entry that fails a check is treated as
    corrupt: a :class:`CacheCorruptWarning` names the file and what was wrong, the file
    is removed and the value is recomputed (never a traceback, never a wrong value):

    - the file starts with the 64-hex HMAC-SHA256 of the rest, keyed by a random
      secret kept beside the entries (``<dir>/.geoviz-cache-secret``, mode ``0600``),
      so a truncated or edited entry, also one re-signed with a plain hash, is detected;
    - the stored object is ``{"namespace", "key", "version", "structure", "payload"}``:
      an entry read under another namespace, key or :data:`CACHE_FORMAT_VERSION`
      (copied or renamed) is refused;
    - ``structure`` records the payload's keys and, for each array, its dtype, shape,
      whether it was finite and a checksum of its bytes bound to the entry's key
      (and of each plain value): missing keys, reshaped, scaled, NaN-filled arrays or
      arrays swapped in from another entry do not match it;
    - the caller's ``expect`` (shapes it knows, e.g. a coupling is ``n x m``, and
      finiteness) and ``check`` (typically rebuilding the result) must hold.

    Callers see only the payload.

    Parameters
    ----------
    directory
        Where entries live; default :func:`default_cache_dir`.
    enabled
        ``False`` turns the cache into a pass-through (every call computes).

    Attributes
    ----------
    hits_, misses_, corrupt_
        Counters since construction (useful for tests and for the app's status).
    """

    def __init__(self, directory: str | Path | None = None, *, enabled: bool = True) -> None:
        if directory is None:
            directory = default_cache_dir()
        self.directory = Path(directory)
        self.enabled = enabled
        self.hits_ = 0
        self.misses_ = 0
        self.corrupt_ = 0
        self._lock = threading.Lock()
        self._secret: bytes | None = None

    def __getstate__(self) -> dict[str, Any]:
        # a cache travels to Ray tasks and worker processes by its folder; the lock stays
        # here, and the secret is read again from the folder where the cache is used
        state = dict(self.__dict__)
        state.pop("_lock", None)
        state.pop("_secret", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._secret = None

    def path_for(self, namespace: str, key: str) -> Path:
        return self.directory / namespace / f"{key}.pt"

    def signature(self, body: bytes, *, create: bool = False) -> bytes | None:
        """The 64 hex bytes that precede ``body`` in an entry file (HMAC-SHA256 keyed by
        the folder's secret); ``None`` when the folder has no readable secret (with
        ``create``, one is made first).

        Raises
        ------
        OSError
            ``create`` and the secret cannot be written.
        """
        secret = self._folder_secret(create=create)
        if secret is None:
            return None
        return hmac.new(secret, body, hashlib.sha256).hexdigest().encode("ascii")

    def _folder_secret(self, *, create: bool) -> bytes | None:
        if self._secret is not None:
            return self._secret
        path = self.directory / CACHE_SECRET_NAME
        for _ in range(5):
            try:
                data = _read_entry_file(path, max_bytes=4 * _SECRET_BYTES)
            except FileNotFoundError:
                if not create:
                    return None
                with contextlib.suppress(FileExistsError):  # another process made it first
                    atomic_write_bytes(
                        path, secrets.token_bytes(_SECRET_BYTES), overwrite=False, mode=0o600
                    )
                continue
            except OSError:
                if create:
                    raise
                return None
            if len(data) == _SECRET_BYTES:
                self._secret = data
                return data
            if not create:
                return None
            # a damaged secret: a new one (every entry it signed is then recomputed)
            atomic_write_bytes(path, secrets.token_bytes(_SECRET_BYTES), overwrite=True, mode=0o600)
        return None

    def load(
        self,
        namespace: str,
        key: str,
        *,
        expect: Mapping[str, ValueSpec] | None = None,
        check: Callable[[Payload], object] | None = None,
    ) -> Payload | None:
        """Return the stored payload or ``None`` (missing, or corrupt: warned and removed).

        Parameters
        ----------
        namespace, key
            Where the entry is.
        expect
            What the caller knows of the payload: for each required key an
            :class:`ArraySpec` or the type(s) of a plain value.
        check
            Called with the payload; if it raises, the entry is corrupt (e.g. rebuild the
            cached object from it).
        """
        if not self.enabled:
            return None
        path = self.path_for(namespace, key)
        try:
            raw = _read_entry_file(path)
        except FileNotFoundError:
            return None
        except OSError as err:  # unreadable, or a FIFO/device put where an entry goes
            warnings.warn(
                f"geoviz cache entry {path} cannot be read ({err.strerror or err}); recomputing",
                CacheCorruptWarning,
                stacklevel=2,
            )
            return None
        stored, problem = self._read(raw, namespace, key)
        if problem is None:
            problem = expect_problem(stored["payload"], expect)
        if problem is None and check is not None:
            try:
                check(stored["payload"])
            except Exception as err:  # whatever rebuilding it raises, the entry is unusable
                problem = f"it cannot be used: {type(err).__name__}: {err}"
        if problem is not None:
            with self._lock:
                self.corrupt_ += 1
            warnings.warn(
                f"geoviz cache entry {path} is corrupt ({problem}); it was ignored and "
                "removed, recomputing",
                CacheCorruptWarning,
                stacklevel=2,
            )
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        payload: Payload = stored["payload"]
        return payload

    def _read(self, raw: bytes, namespace: str, key: str) -> tuple[Any, str | None]:
        """The stored envelope of an entry file's bytes and why it is unusable (or None)."""
        signature, body = raw[:64], raw[64:]
        expected = self.signature(body)
        if expected is None:
            return None, "this cache folder has no readable secret to check its signature"
        if not hmac.compare_digest(signature, expected):
            return (
                None,
                "its signature does not match: it was changed, truncated or not signed here",
            )
        try:
            stored = torch.load(io.BytesIO(body), weights_only=True)
        except Exception:  # any unpickling failure means a corrupt entry
            return None, "it cannot be read"
        return stored, envelope_problem(stored, namespace, key)

    def store(self, namespace: str, key: str, payload: Payload) -> Path | None:
        """Atomically write ``payload`` (a dict of tensors/arrays/plain values)."""
        if not self.enabled:
            return None
        path = self.path_for(namespace, key)
        storable = to_storable(payload)
        envelope = {
            "namespace": str(namespace),
            "key": str(key),
            "version": CACHE_FORMAT_VERSION,
            "structure": describe(storable, str(namespace), str(key)),
            "payload": storable,
        }
        buf = io.BytesIO()
        torch.save(envelope, buf)
        body = buf.getvalue()
        try:
            signature = self.signature(body, create=True)
            if signature is None:
                raise OSError(f"cannot read the cache secret {self.directory / CACHE_SECRET_NAME}")
            atomic_write_bytes(path, signature + body, overwrite=True)
        except OSError as err:  # a full or read-only disk must not break compute
            warnings.warn(f"geoviz cache could not write {path}: {err}", stacklevel=2)
            return None
        return path

    def get_or_compute(
        self,
        namespace: str,
        params: Mapping[str, Any],
        compute: Callable[[], Payload],
        *,
        expect: Mapping[str, ValueSpec] | None = None,
        check: Callable[[Payload], object] | None = None,
    ) -> Payload:
        """Return the cached payload for ``(namespace, params)``, computing it on a miss.

        ``expect`` and ``check`` are the caller's checks of a stored payload
        (:meth:`load`); an entry that fails them is recomputed with a
        :class:`CacheCorruptWarning`.
        """
        key = cache_key(namespace, params)
        payload = self.load(namespace, key, expect=expect, check=check)
        if payload is not None:
            with self._lock:
                self.hits_ += 1
            return payload
        with self._lock:
            self.misses_ += 1
        # normalise so a miss returns exactly what a later hit will (tensors, not ndarrays)
        payload = to_storable(compute())
        self.store(namespace, key, payload)
        return payload

    def clear(self) -> int:
        """Delete every entry; returns how many files were removed."""
        removed = 0
        if self.directory.exists():
            for file in self.directory.rglob("*.pt"):
                with contextlib.suppress(OSError):
                    file.unlink()
                    removed += 1
        return removed
