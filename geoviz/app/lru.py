"""The app's in-memory caches below the result store: a byte-bounded LRU map
(:class:`LRUCache`), what a value weighs (:func:`nbytes_of`) and memory handed back to the
system after large evictions (:func:`release_freed_memory`). The store of
:mod:`geoviz.app.jobs` keeps its two tiers in these."""

from __future__ import annotations

import ctypes
import sys
import threading
import time
import types
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

__all__ = [
    "EVICTION_TRIM_BYTES",
    "NBYTES_MAX_NODES",
    "LRUCache",
    "nbytes_of",
    "release_freed_memory",
]

T = TypeVar("T")


#: objects :func:`nbytes_of` visits at most in one value (a bound on its own cost)
NBYTES_MAX_NODES = 200_000

_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def nbytes_of(obj: Any, *, max_nodes: int = NBYTES_MAX_NODES) -> int:
    """Bytes of memory ``obj`` keeps alive: its arrays' buffers and its containers, walked.

    Counts torch tensors (their storage, once however many views share it), NumPy arrays
    (the buffer of the array that owns it, once), ``bytes``/``str``/``memoryview``, and
    walks dicts, lists, tuples, sets, dataclasses and other objects' attributes (``__dict__``
    and ``__slots__``; a torch module's parameters and buffers this way). Classes, modules
    and functions are not walked (they are shared, not part of one value). Each object
    counts once, so a dataset referenced twice costs once; at most ``max_nodes`` objects
    are visited (what lies beyond is not counted).
    """
    torch = sys.modules.get("torch")  # no tensor exists unless torch was imported
    seen: set[int] = set()
    storages: set[int] = set()
    total = 0
    stack = [obj]
    visited = 0
    while stack and visited < max_nodes:
        item = stack.pop()
        if item is None or isinstance(item, (bool, int, float, complex)) or id(item) in seen:
            continue
        seen.add(id(item))
        visited += 1
        if isinstance(item, np.ndarray):
            owner = item
            while isinstance(owner.base, np.ndarray):
                owner = owner.base
            if id(owner) not in storages:
                storages.add(id(owner))
                # a view of a foreign buffer (bytes, mmap, a tensor's) counts its own size
                total += int(owner.nbytes)
            continue
        if torch is not None and isinstance(item, torch.Tensor):
            try:
                storage = item.untyped_storage()
                ptr, size = int(storage.data_ptr()), int(storage.nbytes())
            except (RuntimeError, NotImplementedError):  # meta or sparse tensors
                ptr, size = id(item), int(item.element_size() * item.nelement())
            if ptr not in storages:
                storages.add(ptr)
                total += size
            if item.grad is not None:
                stack.append(item.grad)
            continue
        if isinstance(item, (bytes, bytearray, str)):
            total += sys.getsizeof(item)
            continue
        if isinstance(item, memoryview):
            total += int(item.nbytes)
            continue
        if isinstance(item, _OPAQUE) or (callable(item) and not hasattr(item, "__dict__")):
            continue
        total += sys.getsizeof(item, 64)
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        else:
            attrs = getattr(item, "__dict__", None)
            if isinstance(attrs, dict):
                stack.append(attrs)
            for cls in type(item).__mro__:
                for name in getattr(cls, "__slots__", ()):
                    value = getattr(item, name, None)
                    if value is not None:
                        stack.append(value)
    return total


def release_freed_memory() -> bool:
    """Hand memory freed by Python back to the operating system (glibc's ``malloc_trim``).

    Arrays above glibc's mmap threshold go back when freed; smaller ones (a few MB each: a
    plan, a figure's arrays) stay in the heap, and the server's resident size would not fall
    after a large eviction. Returns ``False`` where there is no glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        return False
    return True


#: bytes one :meth:`LRUCache.put` must evict before the freed memory is handed back to the
#: operating system (:func:`release_freed_memory`)
EVICTION_TRIM_BYTES = 16 * 2**20


@dataclass
class _Entry:
    value: Any
    nbytes: int
    used: float


class LRUCache:
    """A thread-safe least-recently-used map bounded by entries and by bytes.

    Concurrent :meth:`get_or_compute` calls for one key compute once; the others wait.

    Parameters
    ----------
    max_entries
        Most values kept.
    max_bytes
        Most bytes the kept values hold together (``sizeof`` of each, measured once when
        stored); ``None``: no byte bound. A value larger than this alone is returned to its
        caller and not kept.
    sizeof
        Bytes a value holds (:func:`nbytes_of`).
    clock
        Seconds, for :meth:`idle_keys` (tests pass a fake one).
    """

    def __init__(
        self,
        max_entries: int,
        max_bytes: int | None = None,
        *,
        sizeof: Callable[[Any], int] = nbytes_of,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = int(max_entries)
        self.max_bytes = None if max_bytes is None else int(max_bytes)
        self._sizeof = sizeof
        self._clock = clock
        self._data: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._bytes = 0
        self._reserved = 0
        self._lock = threading.Lock()
        self._key_locks: dict[Hashable, threading.Lock] = {}
        self.hits_ = 0
        self.misses_ = 0
        self.evicted_bytes_ = 0

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    @property
    def nbytes(self) -> int:
        """Bytes the kept values hold (as measured when they were stored)."""
        return self._bytes

    @property
    def reserved(self) -> int:
        """Bytes kept free for values being computed (:meth:`reserve`)."""
        return self._reserved

    def items(self) -> list[tuple[Hashable, Any]]:
        """``[(key, value), ...]`` oldest first (a copy)."""
        with self._lock:
            return [(k, e.value) for k, e in self._data.items()]

    def ordered_keys(self) -> list[Hashable]:
        """The keys, least recently used first (a copy)."""
        with self._lock:
            return list(self._data)

    def _hit(self, key: Hashable) -> Any:
        entry = self._data[key]
        entry.used = self._clock()
        self._data.move_to_end(key)
        return entry.value

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            if key in self._data:
                return self._hit(key)
        return default

    def _drop(self, key: Hashable) -> int:
        entry = self._data.pop(key)
        self._bytes -= entry.nbytes
        self.evicted_bytes_ += entry.nbytes
        return entry.nbytes

    def put(self, key: Hashable, value: Any) -> bool:
        """Keep ``value`` under ``key``, evicting the least recently used values until both
        bounds hold (the room :meth:`reserve` keeps included). Returns ``False`` when the value
        alone is over the byte bound (not kept; an older value of ``key`` is dropped)."""
        nbytes = int(self._sizeof(value)) if self.max_bytes is not None else 0
        evicted = 0
        with self._lock:
            if key in self._data:
                self._drop(key)
            if self.max_bytes is not None and nbytes > self.max_bytes:
                return False
            self._data[key] = _Entry(value, nbytes, self._clock())
            self._bytes += nbytes
            evicted = self._evict_over_bounds()
        if evicted >= EVICTION_TRIM_BYTES:  # the memory goes back, not only out of the count
            release_freed_memory()
        return True

    def _evict_over_bounds(self) -> int:
        """Drop the least recently used values until both bounds hold, room reserved included
        (with the lock held); the bytes dropped."""
        evicted = 0
        while self._data and (
            len(self._data) > self.max_entries
            or (self.max_bytes is not None and self._bytes + self._reserved > self.max_bytes)
        ):
            evicted += self._drop(next(iter(self._data)))
        return evicted

    def reserve(self, nbytes: int) -> None:
        """Keep room for ``nbytes`` that a computation in flight will store: the least recently
        used values leave now, not once its result is stored, so the memory it fills while it
        runs is within the bound too. The room stays counted until :meth:`release`."""
        with self._lock:
            self._reserved += max(0, int(nbytes))
            evicted = self._evict_over_bounds()
        if evicted >= EVICTION_TRIM_BYTES:
            release_freed_memory()

    def release(self, nbytes: int) -> None:
        """Give back room kept by :meth:`reserve` (the computation stored or dropped its
        result)."""
        with self._lock:
            self._reserved = max(0, self._reserved - max(0, int(nbytes)))

    def pop(self, key: Hashable) -> bool:
        """Forget ``key``; ``True`` if it was kept."""
        with self._lock:
            if key not in self._data:
                return False
            self._drop(key)
            return True

    def idle_keys(self, seconds: float) -> list[Hashable]:
        """Keys not read or stored for more than ``seconds``."""
        now = self._clock()
        with self._lock:
            return [k for k, e in self._data.items() if now - e.used > seconds]

    def get_or_compute(self, key: Hashable, compute: Callable[[], T]) -> T:
        with self._lock:
            if key in self._data:
                self.hits_ += 1
                hit: T = self._hit(key)
                return hit
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                if key in self._data:  # computed by another thread meanwhile
                    self.hits_ += 1
                    meanwhile: T = self._hit(key)
                    return meanwhile
            value = compute()
            self.put(key, value)
            with self._lock:
                self.misses_ += 1
                self._key_locks.pop(key, None)
            return value

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._bytes = 0
