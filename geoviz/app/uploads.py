"""Uploaded datasets: one store per server, bounded in bytes in memory and on disk.

A visitor's upload lives in two places, both bounded, neither in the visitor's session:

* **on disk**, the file's bytes (``<folder>/<key>.data`` and a small ``<key>.json``), so a
  link naming the upload works after the visitor left and after a restart. The folder has
  a quota (``GEOVIZ_UPLOAD_DISK_MB``) and an expiry (``GEOVIZ_UPLOAD_TTL_HOURS`` after the
  upload was last used); when the quota (or the disk itself) has no room for a new upload,
  the least recently used uploads are deleted first, however recent: the expiry is the
  longest an upload lasts, not a promise (:func:`upload_notice` says so to the visitor).
  Whoever is told of an eviction (``on_evict``: the result store) drops what was computed
  from the upload.
* **in memory**, the parsed dataset (float32 features), so a scenario does not parse the
  same upload again: bounded by bytes (``GEOVIZ_UPLOAD_MEMORY_MB``), least recently used
  out first, and emptied of what nobody used for ``GEOVIZ_UPLOAD_IDLE_MINUTES``
  (:meth:`UploadStore.sweep`). The raw bytes are never kept in memory.

The session keeps only an :class:`UploadRef` (key, file name, size).

**Keys are private.** An upload is named by ``HMAC-SHA256(server secret, file name and
sha256 of the bytes)``, not by the bare content hash: whoever holds a link can load the
upload, but nobody can test whether some file was uploaded by computing its hash. The
secret is ``GEOVIZ_UPLOAD_SECRET``, else a random 32 bytes kept in ``<folder>/secret``
(so links survive a restart). Every refusal for an unknown key is the same sentence.
Changing the secret breaks every earlier link: an upload records which secret named it, and
a key made under another secret is refused with a sentence that says so.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import json
import os
import secrets
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geoviz.atomic import atomic_write_bytes
from geoviz.data.dataset import LabeledDataset
from geoviz.data.formats import load_upload
from geoviz.errors import DatasetError, GeovizError, ResourceError
from geoviz.memory import format_bytes

__all__ = [
    "MIN_SECRET_BYTES",
    "UploadRef",
    "UploadStore",
    "dataset_bytes",
    "secret_from_env",
    "upload_notice",
]

#: what parses an upload's bytes (its file name chooses the format)
Parser = Callable[[bytes, str], LabeledDataset]

_KEY_CHARS = frozenset("0123456789abcdef")

#: bytes left free on the upload folder's disk beyond a new upload (logs, the disk cache)
DISK_HEADROOM = 64 * 2**20

#: fewest bytes of the secret that names uploads (``GEOVIZ_UPLOAD_SECRET``): 128 bits
MIN_SECRET_BYTES = 16

_SECRET_ENV = "GEOVIZ_UPLOAD_SECRET"


def secret_from_env(env: Mapping[str, str] | None = None) -> bytes | None:
    """``GEOVIZ_UPLOAD_SECRET`` as bytes (UTF-8), or ``None`` when unset or empty (the
    store then makes its own, :class:`UploadStore`).

    Checked by the server's start-up (:func:`geoviz.app.serve.settings_problem`): a store
    refuses a short secret only when the first upload comes, so every upload link of a
    server started with one would fail.

    Raises
    ------
    GeovizError
        The secret is shorter than :data:`MIN_SECRET_BYTES`.
    """
    raw = (os.environ if env is None else env).get(_SECRET_ENV, "")
    secret = raw.encode("utf-8", "surrogateescape")  # the bytes the environment holds
    if not secret:
        return None
    if len(secret) < MIN_SECRET_BYTES:
        raise GeovizError(
            f"environment variable {_SECRET_ENV} must be at least {MIN_SECRET_BYTES} bytes "
            f"(it keys the links to uploads), got {len(secret)}"
        )
    return secret


def upload_notice(ttl_hours: float, disk_mb: int, file_limit_mb: int) -> str:
    """What the upload box tells a visitor about where an upload goes and how long it lasts.

    The expiry is an upper bound: when the server's upload space (shared by every visitor)
    is full, the least recently used uploads are deleted to make room, possibly minutes
    after they were made.
    """
    return (
        f"Files up to {file_limit_mb:,} MB. Your file is kept on this server for at most "
        f"{ttl_hours:g} hours after it was last used. The server keeps {disk_mb:,} MB of "
        "uploads for all visitors together: when that space is full, the least recently used "
        "uploads are deleted first, possibly within minutes, and links to them stop working. "
        "It is named by a private key: a link to a scenario that uses it lets whoever you "
        "send the link to load it, and nobody else can find it (not even with a copy of the "
        "file)."
    )


@dataclass(frozen=True)
class UploadRef:
    """What a session keeps of an upload: the key links use, the file name, the size.

    Attributes
    ----------
    key
        64 hex characters, :meth:`UploadStore.key_for` of the file (not its sha256).
    filename
        The name it was uploaded under (its extension decides the format).
    size
        Bytes of the file.
    """

    key: str
    filename: str
    size: int

    @property
    def digest(self) -> str:
        """The key, under the name :class:`~geoviz.data.choice.DatasetChoice` gives it."""
        return self.key


def dataset_bytes(ds: LabeledDataset) -> int:
    """Memory held by a dataset's arrays (features and labels), bytes."""
    total = 0
    for tensor in (ds.features, ds.labels):
        total += int(tensor.element_size()) * int(tensor.numel())
    return total


@dataclass
class _Parsed:
    dataset: LabeledDataset
    nbytes: int
    used: float


class UploadStore:
    """The server's uploads: bytes on disk under a quota and an expiry, parsed datasets in
    memory under a byte budget.

    Parameters
    ----------
    folder
        Where the bytes live (created when missing).
    memory_bytes
        Most bytes of parsed datasets kept in memory; a dataset larger than this is
        parsed for its caller and not kept.
    disk_bytes
        Most bytes of uploaded files kept on disk; a file larger than this is refused.
    ttl_seconds
        An upload not used for this long is deleted from disk (and its links stop working).
    idle_seconds
        A parsed dataset not used for this long leaves memory at the next :meth:`sweep`.
    secret
        Key of the HMAC naming uploads; default ``<folder>/secret``, made on first use.
    parse
        Turns ``(bytes, file name)`` into a dataset (:func:`geoviz.data.formats.load_upload`).
    clock
        Seconds since the epoch (tests pass a fake one).
    on_evict
        Called with the key of every upload deleted from disk (expired, or evicted to make
        room), after it is gone: the result store drops what was computed from it.

    Attributes
    ----------
    parses_
        Uploads parsed since construction (a scenario never parses one twice while it is
        in memory).
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        memory_bytes: int = 256 * 2**20,
        disk_bytes: int = 2 * 2**30,
        ttl_seconds: float = 24 * 3600.0,
        idle_seconds: float = 600.0,
        secret: bytes | None = None,
        parse: Parser = load_upload,
        clock: Callable[[], float] = time.time,
        on_evict: Callable[[str], None] | None = None,
    ) -> None:
        self.folder = Path(folder)
        self._on_evict = on_evict
        self.memory_bytes = int(memory_bytes)
        self.disk_bytes = int(disk_bytes)
        self.ttl_seconds = float(ttl_seconds)
        self.idle_seconds = float(idle_seconds)
        self._parse = parse
        self._clock = clock
        if secret is not None and len(secret) < MIN_SECRET_BYTES:
            raise GeovizError(
                f"the upload secret (GEOVIZ_UPLOAD_SECRET) needs at least {MIN_SECRET_BYTES} bytes"
            )
        self._secret = secret
        self._lock = threading.RLock()
        # striped per-key locks: one parse per upload at a time, in bounded memory
        self._stripes = [threading.Lock() for _ in range(64)]
        self._parsed: OrderedDict[str, _Parsed] = OrderedDict()
        self.parses_ = 0

    # ------------------------------------------------------------------ keys
    def _server_secret(self) -> bytes:
        if self._secret is None:
            path = self.folder / "secret"
            try:
                self._secret = path.read_bytes()
            except FileNotFoundError:
                self.folder.mkdir(parents=True, exist_ok=True)
                try:
                    atomic_write_bytes(path, secrets.token_bytes(32), overwrite=False)
                    os.chmod(path, 0o600)
                except FileExistsError:  # another process made it first
                    pass
                self._secret = path.read_bytes()
            if len(self._secret) < MIN_SECRET_BYTES:
                raise ResourceError(
                    f"the upload secret {path.name} is shorter than {MIN_SECRET_BYTES} bytes"
                )
        return self._secret

    def key_for(self, filename: str, data: bytes) -> str:
        """``HMAC-SHA256(secret, file name + sha256(data))`` in hex: the upload's name in links."""
        content = hashlib.sha256(data).digest()
        message = str(filename).encode("utf-8", "replace") + b"\0" + content
        return hmac.new(self._server_secret(), message, hashlib.sha256).hexdigest()

    @staticmethod
    def _valid_key(key: str) -> bool:
        return isinstance(key, str) and len(key) == 64 and set(key) <= _KEY_CHARS

    def _secret_id(self) -> str:
        """Names the secret (not derivable back to it): which secret an upload was keyed by."""
        return hmac.new(self._server_secret(), b"geoviz-upload-secret-id", "sha256").hexdigest()[
            :16
        ]

    def _paths(self, key: str) -> tuple[Path, Path]:
        return self.folder / f"{key}.data", self.folder / f"{key}.json"

    def _gone(self) -> DatasetError:
        hours = self.ttl_seconds / 3600
        return DatasetError(
            "this upload is not on this server: uploads are deleted after "
            f"{hours:g} hours unused, or sooner when the server's upload space is full; "
            "upload the file again"
        )

    @staticmethod
    def _rotated() -> DatasetError:
        return DatasetError(
            "this link names an upload keyed by an earlier upload secret of this server "
            "(GEOVIZ_UPLOAD_SECRET was changed, which breaks earlier links); upload the file again"
        )

    # ------------------------------------------------------------------ public API
    def add(self, filename: str, data: bytes) -> tuple[UploadRef, LabeledDataset]:
        """Take an upload: parse it (nothing is kept if it does not parse), keep its bytes on
        disk and its dataset in memory. Adding the same file again parses nothing.

        Raises
        ------
        GeovizError
            The file is not a usable dataset (:func:`~geoviz.data.formats.load_upload`).
        ResourceError
            The file alone is larger than the disk quota.
        """
        filename = str(filename)
        if len(data) > self.disk_bytes:
            raise ResourceError(
                f"{filename} is {format_bytes(len(data))}, more than the "
                f"{format_bytes(self.disk_bytes)} this server keeps for all uploads together "
                "(GEOVIZ_UPLOAD_DISK_MB)"
            )
        key = self.key_for(filename, data)
        ref = UploadRef(key=key, filename=filename, size=len(data))
        with self._key_lock(key):
            parsed = self._memory_get(key)
            if parsed is None:
                parsed = self._parse_now(data, filename)
            self._write(ref, data)
            self._memory_put(key, parsed)
        return ref, parsed

    def dataset(self, key: str) -> LabeledDataset:
        """The parsed dataset of the upload ``key``: from memory, else parsed from disk.

        Raises
        ------
        DatasetError
            No such upload on this server (never uploaded, expired or evicted): the same
            sentence whatever the key.
        """
        if not self._valid_key(key):
            raise self._gone()
        with self._key_lock(key):
            parsed = self._memory_get(key)
            if parsed is not None:
                self._touch(key)
                return parsed
            meta = self._meta(key)
            if meta is not None and meta.get("secret") not in (None, self._secret_id()):
                raise self._rotated()
            ref = self.ref(key)
            data_path, _ = self._paths(key)
            try:
                data = data_path.read_bytes()
            except OSError:
                raise self._gone() from None
            if ref is None or len(data) != ref.size:
                raise self._gone()
            if not hmac.compare_digest(self.key_for(ref.filename, data), key):
                raise self._rotated()  # stored before uploads recorded their secret
            parsed = self._parse_now(data, ref.filename)
            del data
            self._touch(key)
            self._memory_put(key, parsed)
            return parsed

    def ref(self, key: str) -> UploadRef | None:
        """The upload ``key`` (file name and size), or ``None`` if it is not on disk or expired."""
        if not self._valid_key(key):
            return None
        data_path, _ = self._paths(key)
        meta = self._meta(key)
        try:
            if meta is None:
                return None
            used = data_path.stat().st_mtime
            ref = UploadRef(key=key, filename=str(meta["filename"]), size=int(meta["size"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if self._clock() - used > self.ttl_seconds:
            return None
        return ref

    def _meta(self, key: str) -> dict[str, Any] | None:
        try:
            meta = json.loads(self._paths(key)[1].read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) else None

    def sweep(self) -> int:
        """Forget parsed datasets idle for ``idle_seconds``, delete expired uploads from disk
        and any ``.json`` left without its ``.data`` (a write killed half-way). Returns how
        many items were dropped."""
        now = self._clock()
        dropped = 0
        with self._lock:
            for key in [k for k, p in self._parsed.items() if now - p.used > self.idle_seconds]:
                del self._parsed[key]
                dropped += 1
        for key, used, _ in self._disk_entries():
            if now - used > self.ttl_seconds:
                self._delete(key)
                dropped += 1
        self._remove_orphans()
        return dropped

    def _remove_orphans(self) -> None:
        # the data is written before its .json, so a .json alone is never a write in progress
        try:
            names = os.listdir(self.folder)
        except OSError:
            return
        for name in names:
            key = name[:-5]
            orphan = not (self.folder / f"{key}.data").exists()
            if name.endswith(".json") and self._valid_key(key) and orphan:
                with contextlib.suppress(OSError):
                    (self.folder / name).unlink()

    @property
    def memory_used(self) -> int:
        """Bytes of parsed datasets held in memory now."""
        with self._lock:
            return sum(p.nbytes for p in self._parsed.values())

    @property
    def disk_used(self) -> int:
        """Bytes of uploaded files on disk now."""
        return sum(size for _, _, size in self._disk_entries())

    def clear_memory(self) -> None:
        """Forget every parsed dataset (as after a restart); the disk is kept."""
        with self._lock:
            self._parsed.clear()

    # ------------------------------------------------------------------ memory
    def _key_lock(self, key: str) -> threading.Lock:
        return self._stripes[int(key[:8], 16) % len(self._stripes)]

    def _parse_now(self, data: bytes, filename: str) -> LabeledDataset:
        self.parses_ += 1
        return self._parse(data, filename)

    def _memory_get(self, key: str) -> LabeledDataset | None:
        with self._lock:
            parsed = self._parsed.get(key)
            if parsed is None:
                return None
            parsed.used = self._clock()
            self._parsed.move_to_end(key)
            return parsed.dataset

    def _memory_put(self, key: str, ds: LabeledDataset) -> None:
        nbytes = dataset_bytes(ds)
        with self._lock:
            self._parsed.pop(key, None)
            if nbytes > self.memory_bytes:
                return  # parsed for this caller only: the budget is a hard bound
            while self._parsed and self.memory_used + nbytes > self.memory_bytes:
                self._parsed.popitem(last=False)
            self._parsed[key] = _Parsed(ds, nbytes, self._clock())

    # ------------------------------------------------------------------ disk
    def _disk_entries(self) -> list[tuple[str, float, int]]:
        """``(key, last use, bytes)`` of every upload on disk."""
        out: list[tuple[str, float, int]] = []
        try:
            names = os.listdir(self.folder)
        except OSError:
            return out
        for name in names:
            if not name.endswith(".data") or not self._valid_key(name[:-5]):
                continue
            try:
                st = os.stat(self.folder / name)
            except OSError:
                continue
            out.append((name[:-5], st.st_mtime, st.st_size))
        return out

    def _delete(self, key: str) -> None:
        """Delete the upload ``key`` (its data first: a .json never outlives it for long) and
        tell ``on_evict``."""
        for path in self._paths(key):
            with contextlib.suppress(OSError):
                path.unlink()
        with self._lock:
            self._parsed.pop(key, None)
        if self._on_evict is not None:
            self._on_evict(key)

    @staticmethod
    def _no_room(ref: UploadRef, code: int | None) -> ResourceError:
        return ResourceError(
            f"{ref.filename} could not be kept: the server's disk has no room for "
            f"{format_bytes(ref.size)} ({os.strerror(code or errno.EIO)})"
        )

    def _free_bytes(self) -> int | None:
        """Bytes free on the folder's disk (``None`` when it cannot be read)."""
        try:
            return int(shutil.disk_usage(self.folder).free)
        except OSError:
            return None

    def _touch(self, key: str) -> None:
        now = self._clock()
        with contextlib.suppress(OSError):
            os.utime(self._paths(key)[0], (now, now))

    def _write(self, ref: UploadRef, data: bytes) -> None:
        """Keep ``data`` on disk, first deleting expired uploads, then the least recently
        used ones until both the quota and the disk itself have room.

        The data is written before its ``.json`` (an upload exists once its ``.json`` does),
        and a failed write leaves neither. When the disk is full even so, older uploads are
        evicted one by one and the write retried.

        Raises
        ------
        ResourceError
            The disk has no room for the file even with every other upload deleted.
        """
        data_path, meta_path = self._paths(ref.key)
        if data_path.exists() and meta_path.exists():
            self._touch(ref.key)
            return
        self.sweep()
        self.folder.mkdir(parents=True, exist_ok=True)
        entries = sorted((e for e in self._disk_entries() if e[0] != ref.key), key=lambda e: e[1])
        used = sum(size for _, _, size in entries)
        free = self._free_bytes()
        if free is not None and free + used < ref.size + DISK_HEADROOM:
            raise self._no_room(ref, errno.ENOSPC)  # not even with every other upload deleted
        while entries:
            fits_quota = used + ref.size <= self.disk_bytes
            fits_disk = free is None or free >= ref.size + DISK_HEADROOM
            if fits_quota and fits_disk:
                break
            key, _, size = entries.pop(0)
            self._delete(key)
            used -= size
            if free is not None:
                free += size
        meta = {
            "filename": ref.filename,
            "size": ref.size,
            "created": self._clock(),
            "secret": self._secret_id(),
        }
        while True:
            try:
                atomic_write_bytes(data_path, data, overwrite=True)
                atomic_write_bytes(meta_path, json.dumps(meta).encode(), overwrite=True)
                break
            except OSError as err:
                for path in (meta_path, data_path):
                    with contextlib.suppress(OSError):
                        path.unlink()
                if err.errno not in (errno.ENOSPC, errno.EDQUOT) or not entries:
                    raise self._no_room(ref, err.errno) from None
                self._delete(entries.pop(0)[0])  # the disk is fuller than it said: one more
        self._touch(ref.key)
