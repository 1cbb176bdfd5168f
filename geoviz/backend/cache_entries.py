"""What a :class:`~geoviz.backend.DiskCache` entry holds, and how a read of one is checked.

An entry is an envelope ``{"namespace", "key", "version", "structure", "payload"}``: the
payload made storable (:func:`to_storable`: arrays as CPU tensors), and its structure
(:func:`describe`: keys, and per array its dtype, shape, finiteness and a checksum bound
to the entry). A read is refused, in words, when the envelope is not this entry of this
version (:func:`envelope_problem`), when the payload no longer matches its recorded
structure (:func:`_structure_problem`), or when it does not meet what the caller expects
(:func:`expect_problem` against :class:`ArraySpec` / :data:`ValueSpec`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from geoviz.backend.keys import CACHE_FORMAT_VERSION

__all__ = [
    "ArraySpec",
    "Payload",
    "ValueSpec",
    "describe",
    "envelope_problem",
    "expect_problem",
    "to_storable",
]

Payload = dict[str, Any]


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


_ENVELOPE_FIELDS = frozenset({"namespace", "key", "version", "structure", "payload"})


def envelope_problem(stored: Any, namespace: str, key: str) -> str | None:
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
        stored["structure"], describe(stored["payload"], str(namespace), str(key)), ""
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


def describe(obj: Any, namespace: str, key: str, where: str = "") -> Any:
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
            "dict": {str(k): describe(v, namespace, key, _join(where, k)) for k, v in obj.items()}
        }
    if isinstance(obj, (list, tuple)):
        return {"list": [describe(v, namespace, key, _join(where, i)) for i, v in enumerate(obj)]}
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


def expect_problem(payload: Payload, expect: Mapping[str, ValueSpec] | None) -> str | None:
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


def to_storable(obj: Any) -> Any:
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
        return {str(k): to_storable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_storable(v) for v in obj]
    return obj
