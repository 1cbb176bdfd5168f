"""How much memory this process may still allocate, and clear errors when it runs out.

A request that would not fit is refused *before* anything is allocated
(:func:`check_bytes`), with a :class:`~geoviz.errors.ResourceError` that says how much
was asked, how much is allowed and which limit applies. Where a size cannot be known in
advance, :func:`memory_guard` turns the allocator's own failure (``MemoryError``, torch's
CPU allocator ``RuntimeError``, ``torch.OutOfMemoryError``) into the same kind of error,
so neither the CLI nor the app ever shows an out-of-memory traceback.

Three limits are read, and the smallest applies (see :func:`memory_limit`):

* ``RLIMIT_AS`` (``ulimit -v``): the soft limit minus the process's current virtual size
  (``VmSize`` in ``/proc/self/status``);
* the memory cgroup of this process: cgroup v2 ``memory.max - memory.current`` (or v1
  ``memory.limit_in_bytes - memory.usage_in_bytes``), for this cgroup and every ancestor
  (a container's or a systemd slice's limit);
* ``MemAvailable`` in ``/proc/meminfo`` (what the machine can give without swapping).

Anything that cannot be read is ignored; with nothing readable (not Linux) no check is made.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from geoviz.errors import ResourceError

__all__ = [
    "HEADROOM",
    "check_bytes",
    "format_bytes",
    "memory_budget_bytes",
    "memory_guard",
    "memory_limit",
    "memory_limit_bytes",
]

#: Fraction of the allocatable memory one request may take. The rest is headroom for the
#: temporaries that come with an array (a copy while converting dtype, the decoder's
#: buffers, Python objects) and for the allocator's fragmentation.
HEADROOM = 0.8

# Where the limits are read (module attributes so tests can point them at fake files).
_PROC_STATUS = Path("/proc/self/status")
_PROC_CGROUP = Path("/proc/self/cgroup")
_PROC_MEMINFO = Path("/proc/meminfo")
_CGROUP_V2_ROOTS = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))
_CGROUP_V1_ROOT = Path("/sys/fs/cgroup/memory")

#: cgroup v1 reports "no limit" as a huge page-aligned number (2**63 - 4096 on x86-64)
_V1_UNLIMITED = 2**60


def format_bytes(n_bytes: float) -> str:
    """``n_bytes`` in TiB, GiB, MiB, KiB or bytes, for messages: ``"3.50 GiB"``."""
    if n_bytes < 2**10:
        return f"{int(n_bytes)} bytes"
    if n_bytes < 2**20:
        return f"{n_bytes / 2**10:.1f} KiB"
    if n_bytes >= 2**40:
        return f"{n_bytes / 2**40:,.1f} TiB"
    if n_bytes >= 2**30:
        return f"{n_bytes / 2**30:.2f} GiB"
    return f"{n_bytes / 2**20:.1f} MiB"


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except (OSError, ValueError):
        return None


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def _kib_field(text: str, field: str) -> int | None:
    """``field:   1234 kB`` of a ``/proc`` file, in bytes."""
    match = re.search(rf"^{re.escape(field)}:\s*(\d+)\s*kB", text, flags=re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def _rlimit_as_room() -> int | None:
    """RLIMIT_AS soft limit minus the current virtual size, or None if unlimited/unknown."""
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    status = _read_text(_PROC_STATUS)
    used = _kib_field(status, "VmSize") if status else None
    return max(0, int(soft) - (used or 0))


def _ancestors(root: Path, rel: str) -> Iterator[Path]:
    """``root/rel`` and each parent folder up to ``root`` itself (those that exist)."""
    parts = [p for p in rel.strip().split("/") if p and p not in (".", "..")]
    for depth in range(len(parts), -1, -1):
        folder = root.joinpath(*parts[:depth])
        if folder.is_dir():
            yield folder


def _cgroup_room() -> int | None:
    """Smallest ``limit - usage`` over this process's memory cgroup and its ancestors."""
    text = _read_text(_PROC_CGROUP)
    if not text:
        return None
    rooms: list[int] = []
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _hier, controllers, rel = fields
        if controllers == "":  # cgroup v2 (unified hierarchy)
            for root in _CGROUP_V2_ROOTS:
                for folder in _ancestors(root, rel):
                    limit_text = _read_text(folder / "memory.max")
                    if limit_text is None or limit_text.strip() == "max":
                        continue
                    try:
                        limit = int(limit_text.strip())
                    except ValueError:
                        continue
                    usage = _read_int(folder / "memory.current") or 0
                    rooms.append(max(0, limit - usage))
        elif "memory" in controllers.split(","):  # cgroup v1
            for folder in _ancestors(_CGROUP_V1_ROOT, rel):
                limit = _read_int(folder / "memory.limit_in_bytes")
                if limit is None or limit >= _V1_UNLIMITED:
                    continue
                usage = _read_int(folder / "memory.usage_in_bytes") or 0
                rooms.append(max(0, limit - usage))
    return min(rooms) if rooms else None


def _meminfo_available() -> int | None:
    text = _read_text(_PROC_MEMINFO)
    return _kib_field(text, "MemAvailable") if text else None


def memory_limit() -> tuple[int, str] | None:
    """The bytes this process may still allocate and which limit says so.

    Returns
    -------
    (int, str) or None
        The smallest of the readable limits (see the module docstring) with a short name
        of its source (``"RLIMIT_AS (ulimit -v)"``, ``"memory cgroup"``,
        ``"MemAvailable"``); ``None`` when none can be read.
    """
    candidates: list[tuple[int, str]] = []
    for reader, name in (
        (_rlimit_as_room, "the address-space limit RLIMIT_AS (ulimit -v)"),
        (_cgroup_room, "the memory cgroup limit"),
        (_meminfo_available, "the machine's available memory (MemAvailable)"),
    ):
        try:
            room = reader()
        except Exception:  # a read failure means "unknown", never an error
            room = None
        if room is not None:
            candidates.append((int(room), name))
    if not candidates:
        return None
    return min(candidates, key=lambda c: c[0])


def memory_limit_bytes() -> int | None:
    """The bytes this process may still allocate, or ``None`` when nothing is known.

    The smallest of ``RLIMIT_AS`` minus the current virtual size, the memory cgroup's
    limit minus its usage and ``MemAvailable`` (see :func:`memory_limit`).
    """
    found = memory_limit()
    return None if found is None else found[0]


def memory_budget_bytes() -> int | None:
    """What one request may take: :data:`HEADROOM` x :func:`memory_limit_bytes` (or None)."""
    limit = memory_limit_bytes()
    return None if limit is None else int(HEADROOM * limit)


def check_bytes(
    n_bytes: int,
    what: str,
    *,
    at_least: bool = False,
    limit: tuple[int, str] | None = None,
) -> None:
    """Refuse a request of ``n_bytes`` that would not fit, before allocating it.

    Parameters
    ----------
    n_bytes
        The size about to be allocated (an upper estimate).
    what
        What needs it, as a noun phrase (``"the array 'x' of data.npz (shape (10, 10))"``).
    at_least
        ``n_bytes`` is only a lower bound of the need (a stream that is still growing):
        the message says "needs at least".
    limit
        A limit read earlier with :func:`memory_limit` (to compare several sizes with
        the room there was before any of them was allocated); read now by default.

    Raises
    ------
    ResourceError
        ``n_bytes`` exceeds :data:`HEADROOM` (80 %) of the limit; the message names the
        size, the limit and its source. Nothing is raised when no limit can be read.
    """
    n_bytes = int(n_bytes)
    found = limit if limit is not None else memory_limit()
    if found is None:
        return
    room, source = found
    if n_bytes > HEADROOM * room:
        needs = "needs at least" if at_least else "needs"
        raise ResourceError(
            f"{what} {needs} {format_bytes(n_bytes)} but this process can allocate at most "
            f"{format_bytes(room)} (limit: {source}; geoviz uses at most "
            f"{HEADROOM:.0%} of it for one request), so it was refused before allocating; "
            "use a smaller input"
        )


_ASKED_PATTERNS = (
    re.compile(r"[Uu]nable to allocate ([\d.]+\s*[KMGTPE]?i?B)"),  # numpy
    re.compile(r"[Tt]ried to allocate ([\d.]+\s*[KMGTPE]?i?B)"),  # torch CUDA
    re.compile(r"allocate (\d+) bytes"),  # torch DefaultCPUAllocator
)
_CPU_ALLOCATOR_MARKERS = (
    "DefaultCPUAllocator: can't allocate memory",
    "DefaultCPUAllocator: not enough memory",
    "not enough memory",
    "can't allocate memory",
)


def _asked(message: str) -> str | None:
    """The size an allocator's message says was asked for, as text, if it says."""
    for pattern in _ASKED_PATTERNS:
        match = pattern.search(message)
        if match:
            size = match.group(1)
            return format_bytes(int(size)) if size.isdigit() else size
    return None


def _is_out_of_memory(err: BaseException) -> bool:
    if isinstance(err, MemoryError):
        return True
    torch = sys.modules.get("torch")  # never import torch just to check
    if torch is not None:
        oom_types = tuple(
            t
            for t in (
                getattr(torch, "OutOfMemoryError", None),
                getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None),
            )
            if isinstance(t, type)
        )
        if oom_types and isinstance(err, oom_types):
            return True
    if isinstance(err, RuntimeError):
        message = str(err)
        return any(marker in message for marker in _CPU_ALLOCATOR_MARKERS) or (
            "out of memory" in message.lower()
        )
    return False


@contextlib.contextmanager
def memory_guard(what: str) -> Iterator[None]:
    """Turn an allocation failure inside the block into a :class:`ResourceError`.

    ``MemoryError``, ``torch.OutOfMemoryError`` (CUDA) and torch's CPU allocator
    ``RuntimeError`` ("DefaultCPUAllocator: can't allocate memory" / "not enough
    memory") become one sentence naming ``what``, the size asked (when the allocator's
    message says it) and this process's limit. Every other exception passes through.

    Parameters
    ----------
    what
        What the block builds, as a noun phrase (``"decoding the images of a.zip"``).
    """
    try:
        yield
    except BaseException as err:
        if not _is_out_of_memory(err):
            raise
        asked = _asked(str(err))
        found = memory_limit()
        limit = (
            f"this process can allocate at most {format_bytes(found[0])} (limit: {found[1]})"
            if found is not None
            else "this process's memory limit is unknown"
        )
        needed = f" asked for {asked}," if asked else ""
        raise ResourceError(
            f"{what} ran out of memory:{needed} {limit}; use a smaller input"
        ) from err
