"""Torch device/dtype selection, the content-addressed on-disk cache and the process settings.

All heavy compute in geoviz goes through :func:`get_device`, so one switch
(the ``GEOVIZ_DEVICE`` environment variable or ``set_device``) moves every
solver between CUDA and CPU. Results that are expensive to recompute
(couplings, maps, label distances) are stored by :class:`DiskCache`, keyed by
:func:`fingerprint` (dataset fingerprints, parameters and a format version).

Environment variables
---------------------
:class:`RuntimeSettings` holds the process-wide knobs that users set in the environment
(``GEOVIZ_DEVICE``, ``GEOVIZ_CACHE_DIR``, ``GEOVIZ_NO_CACHE``, ``GEOVIZ_ASSETS_DIR``,
``GEOVIZ_EMBEDDING``); :meth:`RuntimeSettings.from_env` is the one function of the library
that reads them. Entry points (``geoviz`` commands, the app, benchmark scripts) read them
once and install them with :func:`configure` / :func:`configured`; library modules ask
:func:`runtime_settings`, which falls back to reading the environment when no entry point
configured anything (geoviz used as a plain Python library).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import os
import secrets
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from geoviz.atomic import atomic_write_bytes
from geoviz.errors import GeovizError, ResourceError
from geoviz.memory import memory_limit_bytes

DeviceName = Literal["auto", "cpu", "cuda"]
DTypeName = Literal["float32", "float64"]

#: Bumped whenever a cached payload layout or an algorithm changes its output,
#: so stale entries are never read back. "2": entries record their namespace, key and
#: this version (:class:`DiskCache`). "3": entries are signed with the folder's secret
#: and record their structure (keys, dtypes, shapes, finiteness, checksums).
CACHE_FORMAT_VERSION = "3"

_device_override: torch.device | None = None


# --------------------------------------------------------------------------- settings

EmbeddingMethod = Literal["umap", "pca"]


def _env_flag(raw: str) -> bool:
    return raw in ("1", "true", "yes")


@dataclass(frozen=True)
class RuntimeSettings:
    """Process-wide settings of the library, each with its environment variable.

    Attributes
    ----------
    device
        ``GEOVIZ_DEVICE``: what ``"auto"`` means (``"auto"``: CUDA when available, else
        CPU; ``"cpu"``, ``"cuda"``), checked when a device is resolved.
    cache_dir
        ``GEOVIZ_CACHE_DIR``, else ``$XDG_CACHE_HOME/geoviz``, else ``~/.cache/geoviz``:
        the folder of the default :class:`DiskCache`.
    no_cache
        ``GEOVIZ_NO_CACHE`` in ``1``/``true``/``yes``: the default cache computes every time.
    assets_dir
        ``GEOVIZ_ASSETS_DIR``: folder of the bundled datasets (``None``: the repository's
        ``assets``), see :func:`geoviz.data.bundled.assets_dir`.
    embedding
        ``GEOVIZ_EMBEDDING=pca``: ``"pca"``, else ``"umap"``: what
        :func:`geoviz.viz.embedding.auto_method` means by ``"auto"``.
    """

    device: str = "auto"
    cache_dir: Path = Path.home() / ".cache" / "geoviz"
    no_cache: bool = False
    assets_dir: Path | None = None
    embedding: EmbeddingMethod = "umap"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RuntimeSettings:
        """The settings the environment ``env`` (default ``os.environ``) asks for."""
        env = os.environ if env is None else env
        cache_env = env.get("GEOVIZ_CACHE_DIR")
        if cache_env:
            cache_dir = Path(cache_env).expanduser()
        else:
            xdg = env.get("XDG_CACHE_HOME")
            cache_dir = (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "geoviz"
        assets = env.get("GEOVIZ_ASSETS_DIR")
        pca = env.get("GEOVIZ_EMBEDDING", "").strip().lower() == "pca"
        return cls(
            device=env.get("GEOVIZ_DEVICE", "").strip().lower() or "auto",
            cache_dir=cache_dir,
            no_cache=_env_flag(env.get("GEOVIZ_NO_CACHE", "")),
            assets_dir=Path(assets).expanduser() if assets else None,
            embedding="pca" if pca else "umap",
        )


_configured: RuntimeSettings | None = None


def runtime_settings() -> RuntimeSettings:
    """The settings an entry point installed (:func:`configure`), else the environment's."""
    return _configured if _configured is not None else RuntimeSettings.from_env()


def configure(settings: RuntimeSettings | None) -> RuntimeSettings | None:
    """Install ``settings`` for this process (``None``: read the environment again);
    returns the settings installed before."""
    global _configured
    previous, _configured = _configured, settings
    return previous


@contextlib.contextmanager
def configured(settings: RuntimeSettings) -> Iterator[RuntimeSettings]:
    """``settings`` installed inside the block (a command's run), the previous ones after."""
    previous = configure(settings)
    try:
        yield settings
    finally:
        configure(previous)


def resolve_device(device: DeviceName | str | torch.device | None = None) -> torch.device:
    """Return the torch device to compute on.

    Parameters
    ----------
    device
        ``"auto"``/``None`` picks CUDA when available, else CPU; the
        setting ``device`` (``GEOVIZ_DEVICE``, :class:`RuntimeSettings`) or
        :func:`set_device` overrides ``"auto"``. ``"cuda"`` without a GPU raises a clear
        error.
    """
    if isinstance(device, torch.device):
        chosen = device
    elif device in (None, "auto"):
        if _device_override is not None:
            return _device_override
        configured_device = runtime_settings().device
        if configured_device != "auto":
            return resolve_device(configured_device)
        chosen = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        try:
            chosen = torch.device(str(device).strip().lower())
        except RuntimeError as err:
            raise GeovizError(f"unknown device {device!r}: use 'auto', 'cpu' or 'cuda'") from err
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise GeovizError("device 'cuda' was requested but no CUDA GPU is available to torch")
    return chosen


def get_device() -> torch.device:
    """The default compute device (see :func:`resolve_device`)."""
    return resolve_device("auto")


def set_device(device: DeviceName | str | torch.device | None) -> None:
    """Override the default device for this process (``None`` restores auto)."""
    global _device_override
    _device_override = None if device in (None, "auto") else resolve_device(device)


@dataclass(frozen=True)
class TorchSettings:
    """torch's process-wide CPU settings that :func:`configure_torch` sets.

    Attributes
    ----------
    threads
        Intra-op threads of torch's CPU pool (``torch.get_num_threads()``).
    flush_denormal
        Whether subnormal floats are flushed to zero on the CPU
        (``torch.set_flush_denormal``); on CPUs without the SSE3 flag it stays ``False``.
    """

    threads: int
    flush_denormal: bool


_torch_settings_lock = threading.Lock()
_flush_denormal = False  # torch offers no getter: the last value configure_torch set


def torch_settings() -> TorchSettings:
    """The current :class:`TorchSettings` of this process."""
    return TorchSettings(threads=torch.get_num_threads(), flush_denormal=_flush_denormal)


def configure_torch(threads: int | None = None, flush_denormal: bool = True) -> TorchSettings:
    """Set torch's process-wide CPU settings; call it from an entry point, before computing.

    torch has one intra-op thread pool and one denormal mode per process: a
    library function that changed them while running in one of the app's job
    threads would change them under a fit running in another. So no function of
    geoviz does; the entry points (the CLIs' ``main``, the benchmark scripts, the
    app's start) call this once.

    Parameters
    ----------
    threads
        Intra-op CPU threads (``torch.set_num_threads``); ``None`` keeps the
        current count. 1 suits the small networks of :mod:`geoviz.nn` on a
        shared machine (:data:`geoviz.nn.training.CPU_TRAIN_THREADS`).
    flush_denormal
        Flush subnormal floats to zero on the CPU. Subnormal Adam moments and
        activations made CPU training steps of the neural map ~10x slower; the
        flushed values (below ~1e-38 in float32) change no result that matters.

    Returns
    -------
    TorchSettings
        The settings before the call (pass them back to restore, e.g. in tests).

    Raises
    ------
    GeovizError
        ``threads`` is not a positive integer.
    """
    global _flush_denormal
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1
    ):
        raise GeovizError(f"threads must be a positive integer or None, got {threads!r}")
    with _torch_settings_lock:
        before = torch_settings()
        if threads is not None:
            torch.set_num_threads(int(threads))
        # set_flush_denormal returns False where the CPU cannot flush (then nothing changed)
        _flush_denormal = bool(torch.set_flush_denormal(bool(flush_denormal))) and flush_denormal
    return before


def resolve_dtype(dtype: DTypeName | torch.dtype | None = None) -> torch.dtype:
    """Map a dtype name to a torch dtype; the default is float32."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "float32"):
        return torch.float32
    if dtype == "float64":
        return torch.float64
    raise GeovizError(f"unsupported dtype {dtype!r}: use 'float32' or 'float64'")


def usable_cores() -> int:
    """The CPU cores this process may use: its affinity (a container's or ``taskset``'s
    share), or the machine's count where affinity is unknown (not Linux); at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def available_memory_bytes(device: torch.device) -> int | None:
    """Memory ``device`` can still give this process, in bytes, or ``None`` when unknown.

    CUDA: the free memory of the GPU. CPU: :func:`geoviz.memory.memory_limit_bytes`, the
    smallest of the ``RLIMIT_AS`` room, the memory cgroup's room and ``MemAvailable``.
    """
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    return memory_limit_bytes()


def check_memory(n_bytes: int, device: torch.device, what: str) -> None:
    """Raise :class:`~geoviz.errors.ResourceError` if ``n_bytes`` will not fit.

    A safety factor of 2 leaves room for temporaries.
    """
    free = available_memory_bytes(device)
    if free is not None and 2 * n_bytes > free:
        raise ResourceError(
            f"{what} needs about {n_bytes / 2**30:.2f} GiB on {device}, but only "
            f"{free / 2**30:.2f} GiB is free; use a smaller sample or the batched mode"
        )


# --------------------------------------------------------------------------- cache


def default_cache_dir() -> Path:
    """``$GEOVIZ_CACHE_DIR``, else ``$XDG_CACHE_HOME/geoviz``, else ``~/.cache/geoviz``
    (:attr:`RuntimeSettings.cache_dir`)."""
    return runtime_settings().cache_dir


def _canonical(obj: Any) -> Any:
    """Make parameters JSON-serialisable in a stable way (for hashing keys)."""
    if isinstance(obj, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, (list, tuple)):
        return [_canonical(v) for v in obj]
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, (np.ndarray, torch.Tensor)):
        arr = obj.detach().cpu().numpy() if isinstance(obj, torch.Tensor) else obj
        # dtype and shape are part of the key: the same bytes as (2, 3) and (3, 2) are different inputs
        return {
            "__array_sha256__": hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest(),
            "dtype": arr.dtype.str,
            "shape": list(arr.shape),
        }
    if isinstance(obj, (torch.device, torch.dtype, Path)):
        return str(obj)
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    raise TypeError(f"cannot use {type(obj).__name__} in a cache key")


def jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON values: dict keys as strings, tuples as lists, NumPy scalars as
    Python numbers, anything else as its ``str`` (for metadata and checkpoint keys)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (np.integer, np.floating, np.bool_)):
        return obj.item()
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


#: how :func:`digest` writes a value as JSON before hashing it
DigestLayout = Literal["canonical", "plain"]


def digest_bytes(parts: Iterable[bytes], *, length: int | None = None) -> str:
    """Hex sha256 of the concatenated ``parts``, cut to its first ``length`` characters.

    The one hash under every key of geoviz (:func:`digest` and so :func:`fingerprint`,
    :func:`cache_key`; the dataset fingerprint
    :attr:`geoviz.data.dataset.LabeledDataset.fingerprint`; uploads by their bytes,
    :class:`geoviz.data.choice.Upload`; the transfer study's checkpoint keys; the app's
    scenario keys). Feeding parts one by one hashes large tensors without copying them
    into one buffer.

    Parameters
    ----------
    parts
        The bytes to hash, in order (no separator is added between them).
    length
        Keep the first ``length`` hex characters (``None``: all 64).
    """
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(part)
    text = hasher.hexdigest()
    return text if length is None else text[: int(length)]


def digest(obj: Any, *, length: int | None = None, layout: DigestLayout = "canonical") -> str:
    """Hex sha256 of ``obj`` written as JSON with sorted keys (:func:`digest_bytes`).

    Parameters
    ----------
    obj
        The key's payload.
    length
        Keep the first ``length`` hex characters (``None``: all 64).
    layout
        ``"canonical"`` (keys of cache entries and checkpoints): the canonical form
        of :func:`fingerprint` (arrays by content, NumPy scalars as numbers, paths as
        strings; anything else is a ``TypeError``), compact separators ``,`` and ``:``.
        ``"plain"`` (the app's scenario keys, kept as they are stored on disk):
        ``json.dumps(obj, sort_keys=True, default=str)``, the JSON module's separators
        ``", "`` and ``": "`` and ``str()`` of any value JSON cannot write.

    Raises
    ------
    TypeError
        ``layout="canonical"`` and a value that has no canonical form.
    """
    if layout == "canonical":
        text = json.dumps(_canonical(obj), sort_keys=True, separators=(",", ":"))
    else:
        text = json.dumps(obj, sort_keys=True, default=str)
    return digest_bytes([text.encode("utf-8")], length=length)


def fingerprint(
    namespace: str, params: Mapping[str, Any], *, version: str = CACHE_FORMAT_VERSION
) -> str:
    """The key of a computation: hex sha256 of ``namespace``, ``params`` and ``version``
    (:func:`digest` of ``{"ns": namespace, "v": version, "params": params}``).

    The hashed text is the compact JSON (sorted keys, separators ``,`` and ``:``) of
    ``{"ns": namespace, "v": version, "params": canonical(params)}``, where the canonical
    form turns mappings into key-sorted objects, tuples into lists, NumPy scalars into
    numbers, paths/devices/dtypes into strings, and arrays and tensors into
    ``{"__array_sha256__", "dtype", "shape"}`` (so large inputs are hashed by content, and
    the same bytes as ``(2, 3)`` and ``(3, 2)`` differ). Every key of the
    :class:`DiskCache` is one (:func:`cache_key`), so a stored entry is found again by the
    same namespace and parameters, and :data:`CACHE_FORMAT_VERSION` retires old entries.

    Parameters
    ----------
    namespace
        What is computed (``"otdd"``, ``"barycentric_map"``, ``"app-upload"``, ...).
    params
        Everything the result depends on: dataset fingerprints, configurations, seeds.
    version
        Format version of the stored result (default :data:`CACHE_FORMAT_VERSION`).

    Raises
    ------
    TypeError
        A value that has no canonical form (e.g. an arbitrary object).
    """
    return digest({"ns": namespace, "v": version, "params": params})


def cache_key(namespace: str, params: Mapping[str, Any]) -> str:
    """The :class:`DiskCache` key of ``(namespace, params)``: :func:`fingerprint` at
    :data:`CACHE_FORMAT_VERSION`."""
    return fingerprint(namespace, params)


Payload = dict[str, Any]


class CacheCorruptWarning(UserWarning):
    """A :class:`DiskCache` entry failed a check on read: it was ignored, removed and
    recomputed (the message names the file and what was wrong)."""


@dataclass(frozen=True)
class ArraySpec:
    """What a caller knows of one cached array (:meth:`DiskCache.get_or_compute`'s ``expect``).

    Attributes
    ----------
    shape
        One entry per dimension: an ``int`` (that size), a ``str`` (a name: every
        dimension of the payload with the same name has the same size) or ``None``
        (any size); ``None`` for any shape.
    finite
        Every value is finite (no NaN or infinity).
    optional
        The payload may lack the array (checked when present).
    """

    shape: tuple[int | str | None, ...] | None = None
    finite: bool = True
    optional: bool = False


#: what :meth:`DiskCache.get_or_compute` may expect of one payload value: an array, or
#: the type (or types) of a plain value
ValueSpec = ArraySpec | type | tuple[type, ...]

#: name of the per-folder secret that signs the entries (:class:`DiskCache`)
CACHE_SECRET_NAME = ".geoviz-cache-secret"
_SECRET_BYTES = 32


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
        self.directory = Path(directory) if directory is not None else default_cache_dir()
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
                data = path.read_bytes()
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
            raw = path.read_bytes()
        except OSError:  # missing (FileNotFoundError, NotADirectoryError) or unreadable
            return None
        stored, problem = self._read(raw, namespace, key)
        if problem is None:
            problem = _expect_problem(stored["payload"], expect)
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
        return stored, _envelope_problem(stored, namespace, key)

    def store(self, namespace: str, key: str, payload: Payload) -> Path | None:
        """Atomically write ``payload`` (a dict of tensors/arrays/plain values)."""
        if not self.enabled:
            return None
        path = self.path_for(namespace, key)
        storable = _to_storable(payload)
        envelope = {
            "namespace": str(namespace),
            "key": str(key),
            "version": CACHE_FORMAT_VERSION,
            "structure": _describe(storable, str(namespace), str(key)),
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
        payload = _to_storable(compute())
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


_ENVELOPE_FIELDS = frozenset({"namespace", "key", "version", "structure", "payload"})


def _envelope_problem(stored: Any, namespace: str, key: str) -> str | None:
    """Why ``stored`` is not the entry ``namespace/key`` of this format, or None if it is."""
    if not isinstance(stored, dict) or not {"namespace", "key", "version"} <= set(stored):
        return "it is not a geoviz cache entry of this version"
    if stored["version"] != CACHE_FORMAT_VERSION:
        return f"it was written by another cache format version (this is {CACHE_FORMAT_VERSION})"
    if set(stored) != _ENVELOPE_FIELDS:
        return "it is not a geoviz cache entry of this version"
    if stored["namespace"] != str(namespace) or stored["key"] != str(key):
        return "it was stored under another namespace or key"
    if not isinstance(stored["payload"], dict):
        return "its payload is not a dictionary"
    return _structure_problem(
        stored["structure"], _describe(stored["payload"], str(namespace), str(key)), ""
    )


def _all_finite(tensor: torch.Tensor) -> bool:
    if not (tensor.is_floating_point() or tensor.is_complex()):
        return True
    try:  # NumPy's check is several times faster than torch's on one thread
        return bool(np.isfinite(tensor.numpy()).all())
    except (TypeError, RuntimeError):  # bfloat16 and other dtypes NumPy lacks
        return bool(torch.isfinite(tensor).all())


def _leaf_checksum(
    namespace: str, key: str, where: str, head: str, data: bytes | memoryview
) -> str:
    # bound to the entry and the place in it: the same array under another key or name differs
    hasher = hashlib.sha256(f"{namespace}\0{key}\0{where}\0{head}\0".encode())
    hasher.update(data)
    return hasher.hexdigest()[:32]


def _describe(obj: Any, namespace: str, key: str, where: str = "") -> Any:
    """The structure of a storable payload: keys, and per array its dtype, shape, whether it
    is finite and a checksum bound to ``namespace``/``key``/``where`` (per plain value its
    type and a checksum)."""
    if isinstance(obj, torch.Tensor):
        head = f"{obj.dtype}{list(obj.shape)}"
        if obj.layout == torch.strided:
            flat = obj.detach().cpu().contiguous().reshape(-1)
            data = flat.view(torch.uint8).numpy().data if flat.numel() else b""
            checksum = _leaf_checksum(namespace, key, where, head, data)
        else:  # sparse tensors are not hashed (geoviz stores none)
            checksum = ""
        return {"array": [str(obj.dtype), list(obj.shape), _all_finite(obj), checksum]}
    if isinstance(obj, dict):
        return {
            "dict": {str(k): _describe(v, namespace, key, _join(where, k)) for k, v in obj.items()}
        }
    if isinstance(obj, (list, tuple)):
        return {"list": [_describe(v, namespace, key, _join(where, i)) for i, v in enumerate(obj)]}
    text = repr(obj)
    finite = not isinstance(obj, float) or bool(np.isfinite(obj))
    return {
        "value": [
            type(obj).__name__,
            finite,
            _leaf_checksum(namespace, key, where, type(obj).__name__, text.encode()),
        ]
    }


def _join(where: str, part: Any) -> str:
    return (
        f"{where}[{part}]" if isinstance(part, int) else (f"{where}.{part}" if where else str(part))
    )


def _shape_text(shape: Any) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _structure_problem(recorded: Any, actual: Any, where: str) -> str | None:
    """The first difference between the recorded and the actual structure, in words."""
    name = f"'{where}'" if where else "the payload"
    if not isinstance(recorded, dict) or len(recorded) != 1:
        return "its recorded structure is not one of this version"
    (kind,) = recorded
    if kind not in actual:
        return f"{name} is a {next(iter(actual))}, recorded as a {kind}"
    rec, act = recorded[kind], actual[kind]
    if kind == "dict":
        if not isinstance(rec, dict):
            return "its recorded structure is not one of this version"
        for k in rec:
            if k not in act:
                return f"it lacks {_join(where, k)!r}"
        for k in act:
            if k not in rec:
                return f"it holds {_join(where, k)!r}, which was not stored"
        for k in rec:
            problem = _structure_problem(rec[k], act[k], _join(where, k))
            if problem is not None:
                return problem
        return None
    if kind == "list":
        if not isinstance(rec, list) or len(rec) != len(act):
            return f"{name} has {len(act)} items, not the number stored"
        for i, (r, a) in enumerate(zip(rec, act, strict=True)):
            problem = _structure_problem(r, a, _join(where, i))
            if problem is not None:
                return problem
        return None
    if not isinstance(rec, list) or len(rec) != len(act):
        return "its recorded structure is not one of this version"
    if kind == "array":
        if rec[:2] != act[:2]:
            return (
                f"its array {name} is {act[0]} of shape {_shape_text(act[1])}, stored as "
                f"{rec[0]} of shape {_shape_text(rec[1]) if isinstance(rec[1], list) else rec[1]}"
            )
        if rec[2] and not act[2]:
            return f"its array {name} holds NaN or infinite values, which it did not when stored"
        if rec[3] != act[3]:
            return f"its array {name} is not the one stored (its checksum differs)"
        return None
    if rec[0] != act[0]:
        return f"its value {name} is a {act[0]}, stored as a {rec[0]}"
    if rec != act:
        return f"its value {name} is not the one stored (its checksum differs)"
    return None


def _expect_problem(payload: Payload, expect: Mapping[str, ValueSpec] | None) -> str | None:
    """Why ``payload`` does not meet the caller's ``expect``, or None."""
    if not expect:
        return None
    sizes: dict[str, int] = {}
    for name, spec in expect.items():
        if name not in payload:
            if isinstance(spec, ArraySpec) and spec.optional:
                continue
            return f"it lacks {name!r}"
        value = payload[name]
        if not isinstance(spec, ArraySpec):
            kinds = spec if isinstance(spec, tuple) else (spec,)
            if float in kinds:  # a float may have been stored from an int
                kinds = (*kinds, int)
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                wanted = " or ".join(k.__name__ for k in kinds)
                return f"its value {name!r} is a {type(value).__name__}, not a {wanted}"
            continue
        if not isinstance(value, torch.Tensor):
            return f"its value {name!r} is a {type(value).__name__}, not an array"
        if spec.shape is not None:
            problem = _shape_problem(name, tuple(value.shape), spec.shape, sizes)
            if problem is not None:
                return problem
        if spec.finite and not _all_finite(value):
            return f"its array {name!r} holds NaN or infinite values"
    return None


def _shape_problem(
    name: str, shape: tuple[int, ...], spec: tuple[int | str | None, ...], sizes: dict[str, int]
) -> str | None:
    wanted = _shape_text(["?" if s is None else s for s in spec])
    bad = f"its array {name!r} has shape {_shape_text(shape)}, expected {wanted}"
    if len(shape) != len(spec):
        return bad
    for size, want in zip(shape, spec, strict=True):
        if isinstance(want, str):
            if sizes.setdefault(want, size) != size:
                return f"{bad} with {want} = {sizes[want]}"
        elif want is not None and size != want:
            return bad
    return None


def _to_storable(obj: Any) -> Any:
    """numpy arrays -> CPU tensors (weights_only loading accepts tensors, not ndarrays)."""
    if isinstance(obj, np.ndarray):
        arr = np.ascontiguousarray(obj)
        if not arr.flags.writeable or not arr.dtype.isnative:  # torch.from_numpy needs both
            arr = arr.astype(arr.dtype.newbyteorder("="), copy=True)
        return torch.from_numpy(arr)
    if isinstance(obj, np.generic):  # numpy scalars are refused by weights_only loading
        return obj.item()
    if isinstance(obj, torch.Tensor):
        tensor = obj.detach().cpu()
        # torch.save writes the whole storage: do not store a huge buffer for a small view
        if (
            tensor.layout == torch.strided
            and tensor.untyped_storage().nbytes() != tensor.numel() * tensor.element_size()
        ):
            tensor = tensor.clone()
        return tensor
    if isinstance(obj, Mapping):
        return {str(k): _to_storable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_storable(v) for v in obj]
    return obj


_default_cache: DiskCache | None = None


def get_cache() -> DiskCache:
    """The process-wide default cache (:attr:`RuntimeSettings.cache_dir`, off with
    :attr:`RuntimeSettings.no_cache`); a new one when the configured folder changes."""
    global _default_cache
    settings = runtime_settings()
    if _default_cache is None or _default_cache.directory != settings.cache_dir:
        _default_cache = DiskCache(settings.cache_dir, enabled=not settings.no_cache)
    return _default_cache
