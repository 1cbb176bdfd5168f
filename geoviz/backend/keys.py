"""Content keys of geoviz: the one hash under every key, and the canonical form it hashes.

:func:`digest_bytes` is the sha256 under every key; :func:`digest` hashes a value written
as JSON (its canonical form, :func:`_canonical`: arrays by content, NumPy scalars as
numbers); :func:`fingerprint` and :func:`cache_key` are the keys of the
:class:`~geoviz.backend.DiskCache`, bound to :data:`CACHE_FORMAT_VERSION`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

__all__ = [
    "CACHE_FORMAT_VERSION",
    "DigestLayout",
    "cache_key",
    "digest",
    "digest_bytes",
    "fingerprint",
    "jsonable",
]

#: Bumped whenever a cached payload layout or an algorithm changes its output,
#: so stale entries are never read back. "2": entries record their namespace, key and
#: this version (:class:`DiskCache`). "3": entries are signed with the folder's secret
#: and record their structure (keys, dtypes, shapes, finiteness, checksums).
CACHE_FORMAT_VERSION = "3"


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
