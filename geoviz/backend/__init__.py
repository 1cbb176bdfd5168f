"""Torch device/dtype selection, the process settings, and the face of the on-disk cache.

All heavy compute in geoviz goes through :func:`get_device`, so one switch
(the ``GEOVIZ_DEVICE`` environment variable or ``set_device``) moves every
solver between CUDA and CPU. Results that are expensive to recompute
(couplings, maps, label distances) are stored by :class:`DiskCache`, keyed by
:func:`fingerprint` (dataset fingerprints, parameters and a format version).

The package, by meaning:

* here — the device and dtype (:func:`resolve_device`, :func:`resolve_dtype`), torch's
  process-wide CPU settings (:func:`configure_torch`), memory checks (:func:`check_memory`) and the default
  cache (:func:`get_cache`);
* :mod:`geoviz.backend.settings` — the process settings (:class:`RuntimeSettings`,
  :func:`configure`, :func:`runtime_settings`, :func:`default_cache_dir`);
* :mod:`geoviz.backend.keys` — the content keys (:func:`digest`, :func:`fingerprint`,
  :func:`cache_key`, :data:`CACHE_FORMAT_VERSION`);
* :mod:`geoviz.backend.disk_cache` — the store (:class:`DiskCache`);
* :mod:`geoviz.backend.cache_entries` — what an entry holds and how a read is checked
  (:class:`ArraySpec`).

Every name stays importable from ``geoviz.backend``.

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

import os
import threading
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from geoviz.backend.cache_entries import ArraySpec, Payload, ValueSpec
from geoviz.backend.disk_cache import CACHE_SECRET_NAME, CacheCorruptWarning, DiskCache
from geoviz.backend.keys import (
    CACHE_FORMAT_VERSION,
    DigestLayout,
    cache_key,
    digest,
    digest_bytes,
    fingerprint,
    jsonable,
)

# an internal that tests reach through geoviz.backend (the old keys' formula)
from geoviz.backend.keys import _canonical as _canonical
from geoviz.backend.settings import (
    EmbeddingMethod,
    RuntimeSettings,
    configure,
    configured,
    default_cache_dir,
    runtime_settings,
)
from geoviz.errors import GeovizError, ResourceError
from geoviz.memory import memory_limit_bytes
from geoviz.vocabulary import DeviceName

__all__ = [
    "CACHE_FORMAT_VERSION",
    "CACHE_SECRET_NAME",
    "ArraySpec",
    "CacheCorruptWarning",
    "DTypeName",
    "DeviceName",
    "DigestLayout",
    "DiskCache",
    "EmbeddingMethod",
    "Payload",
    "RuntimeSettings",
    "TorchSettings",
    "ValueSpec",
    "available_memory_bytes",
    "cache_key",
    "check_memory",
    "configure",
    "configure_torch",
    "configured",
    "default_cache_dir",
    "digest",
    "digest_bytes",
    "fingerprint",
    "get_cache",
    "get_device",
    "jsonable",
    "resolve_device",
    "resolve_dtype",
    "runtime_settings",
    "set_device",
    "torch_settings",
    "usable_cores",
]

DTypeName = Literal["float32", "float64"]

_device_override: torch.device | None = None


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


_default_cache: DiskCache | None = None


def get_cache() -> DiskCache:
    """The process-wide default cache (:attr:`RuntimeSettings.cache_dir`, off with
    :attr:`RuntimeSettings.no_cache`); a new one when the configured folder changes."""
    global _default_cache
    settings = runtime_settings()
    if _default_cache is None or _default_cache.directory != settings.cache_dir:
        _default_cache = DiskCache(settings.cache_dir, enabled=not settings.no_cache)
    return _default_cache
