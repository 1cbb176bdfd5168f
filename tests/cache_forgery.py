"""Forged disk-cache entries for the cache's tests (imported as a plain module, like
``synthetic_data``): an entry rewritten and signed again the way a forger could."""

from __future__ import annotations

import hashlib
import io

import torch

from geoviz.backend import DiskCache
from geoviz.backend.cache_entries import describe


def forge_entry(cache: DiskCache, namespace: str, key: str, mutate, *, sign: str) -> None:
    """Rewrite the entry ``namespace/key``: ``mutate(envelope)`` edits the stored object, then
    the file is re-signed with a plain sha256 (``sign="sha256"``, the old envelope), with the
    folder's secret and the old recorded structure (``"secret"``), or with the secret and a
    structure recomputed for the forged payload (``"secret+structure"``: only the caller's
    checks can tell)."""
    path = cache.path_for(namespace, key)
    envelope = torch.load(io.BytesIO(path.read_bytes()[64:]), weights_only=True)
    mutate(envelope)
    if sign == "secret+structure":
        envelope["structure"] = describe(envelope["payload"], namespace, key)
    buf = io.BytesIO()
    torch.save(envelope, buf)
    body = buf.getvalue()
    if sign == "sha256":
        signature = hashlib.sha256(body).hexdigest().encode("ascii")
    else:
        signature = cache.signature(body)
    path.write_bytes(signature + body)
