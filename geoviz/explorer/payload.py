"""The explorer's payload: everything the browser needs to redraw P_a at frame rate.

Built once per scenario and map method (cached in
:func:`geoviz.app.services.caches.store`) and shipped to the component as one ``bytes``
value::

    b"GVZX" | uint32 header length (LE) | header JSON (UTF-8, space-padded to 8 bytes)
    | packed little-endian arrays, each at an 8-byte aligned offset

The header names every array ``{"offset", "dtype", "shape"}`` (offset from the
start of the array section) plus scalars (names, class names, image shape).
:func:`decode` reads it back exactly as ``decode`` in ``frontend/maths.js`` does.

Arrays (``m`` maps, ``S`` fixed target samples, ``P`` placed points):

- ``w_to_target (m,)``, ``w_between (m, m)``, ``a_hat (m,)``: float64, so the
  browser's objective equals :meth:`GeodesicResult.objective` to rounding;
- ``images (m + 1, S, D)`` uint8: the target samples (row 0) and their images
  ``T_i(x)`` (rows ``1..m``), scaled by ``pixel_lo/pixel_hi`` of the header; the
  browser's ``P_a`` image is ``sum_i a_i images[i + 1]``;
- ``soft (m, S, C_max)`` float32: each map's soft label of each sample (zero padded);
- ``mass (m, C_max)`` float32: each map's mean soft label over all of Q (the live
  label-mass bars are ``a_i * mass[i]``);
- ``grid (K, m)`` uint8 integer compositions of ``grid_res`` and ``place (K, P, 2)``
  float32: P_a's embedding placements at the simplex grid nodes (image data);
- ``bg (B, 2)`` float32 + ``bg_set (B,)`` uint8: the fitted embedding's points of Q
  and every reference (drawn faded);
- ``coords (m + 1, N, d)`` float32 + ``labels (N,)`` uint8 + ``ref_coords``/``ref_set``:
  for 2-D/3-D data every target point and its images, so the whole scatter moves (the
  teaching view draws the coupling lines ``x -> T_i(x)`` from them); ``mixup_coords (m, N,
  d)``: each output's random partner in every reference (:func:`geoviz.geodesic.mixup.mixup_pairs`,
  seed ``mixup_seed``), so the naive-mixup comparison moves with the pick too;
- the bootstrap (issue 23; :func:`build_bootstrap`, its own small payload, sent when the
  background bootstrap is done): ``boot_w_to_target (B, m)``, ``boot_w_between (B, m, m)``
  float64 (the browser computes each replicate's objective, the interval of ``W^2(P_a, Q)``
  and of the gap to ``a_hat`` at the pick, and the region as good as ``a_hat``),
  ``boot_a_hat (B, m)`` float32 (the cloud), ``boot_a_low``/``boot_a_high (m,)`` float64;
  header ``boot`` = ``{"method", "level", "replicates", "seed", "flat"}``;
- McCann mode (:func:`build_mccann`): ``images (2, S, D)`` (x and ``T_i(x)``),
  ``soft (S, C_i)``, ``target_soft (S, C_Q)`` and for low-dimensional data
  ``coords (2, N, d)``.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from math import comb
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from geoviz.geodesic.distances import simplex_compositions
from geoviz.geodesic.mixup import mixup_pairs
from geoviz.geodesic.weights import ENTRY_DECIMALS
from geoviz.viz.images import example_indices

if TYPE_CHECKING:
    from geoviz.geodesic import GeodesicResult
    from geoviz.geodesic.uncertainty import GeodesicBootstrap
    from geoviz.viz.embedding import Embedding

#: Places features in an embedding's plane: ``features (n, D) -> (n, 2)``.
Place = Callable[[np.ndarray], np.ndarray]

MAGIC = b"GVZX"
VERSION = 1
#: fixed target samples shown as images (3 per class for 10 classes)
N_SAMPLES = 30
#: most placed P_a points in the embedding view
MAX_PLACED = 200
#: image bytes budget for the placed points' images
IMAGE_BUDGET = 1_500_000
#: most simplex grid nodes for the embedding placements
MAX_GRID_NODES = 66

__all__ = [
    "Payload",
    "build_bootstrap",
    "build_embedding",
    "build_geodesic",
    "build_mccann",
    "decode",
    "encode",
    "grid_resolution",
    "placed_indices",
    "quantize",
]


@dataclass(frozen=True)
class Payload:
    """The encoded bytes, the decoded header and the build time."""

    data: bytes
    header: dict[str, Any]
    seconds: float

    @property
    def size(self) -> int:
        return len(self.data)


def encode(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
    """Pack ``arrays`` (little endian, 8-byte aligned) after a JSON ``header``."""
    meta: dict[str, Any] = {}
    chunks: list[bytes] = []
    offset = 0
    for name, arr in arrays.items():
        a = np.ascontiguousarray(arr)
        dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
        raw = a.astype(dt, copy=False).tobytes()
        meta[name] = {"offset": offset, "dtype": dt.name, "shape": list(a.shape)}
        pad = (-len(raw)) % 8
        chunks.append(raw + b"\0" * pad)
        offset += len(raw) + pad
    head = json.dumps({**header, "arrays": meta}, separators=(",", ":")).encode()
    head += b" " * ((-(len(head) + 8)) % 8)
    return MAGIC + struct.pack("<I", len(head)) + head + b"".join(chunks)


def decode(data: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header and the arrays of :func:`encode` (as the browser reads them)."""
    if data[:4] != MAGIC:
        raise ValueError("not an explorer payload")
    (n,) = struct.unpack("<I", data[4:8])
    header = json.loads(data[8 : 8 + n].decode())
    base = 8 + n
    arrays = {}
    for name, spec in header["arrays"].items():
        dt = np.dtype(spec["dtype"]).newbyteorder("<")
        count = int(np.prod(spec["shape"])) if spec["shape"] else 1
        arrays[name] = np.frombuffer(
            data, dtype=dt, count=count, offset=base + spec["offset"]
        ).reshape(spec["shape"])
    return header, arrays


def quantize(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Pixels ``x`` -> uint8 ``round(255 * clip((x - lo) / (hi - lo), 0, 1))``."""
    y = (np.asarray(x, dtype=np.float64) - lo) / max(hi - lo, 1e-12)
    return np.rint(np.clip(y, 0.0, 1.0) * 255.0).astype(np.uint8)


def grid_resolution(m: int, max_nodes: int = MAX_GRID_NODES) -> int:
    """The finest resolution whose simplex grid has at most ``max_nodes`` nodes (>= 1)."""
    res = 1
    while comb(res + 1 + m - 1, m - 1) <= max_nodes and res < 40:
        res += 1
    return res


def _np(x: torch.Tensor | np.ndarray) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _pixel_range(values: list[np.ndarray]) -> tuple[float, float]:
    """``(0, 1)`` for data in about ``[0, 1]`` (clipped), else the data's min and max."""
    lo = min(float(v.min()) for v in values)
    hi = max(float(v.max()) for v in values)
    return (0.0, 1.0) if lo >= -0.1 and hi <= 1.1 else (lo, hi)


def _padded(blocks: list[np.ndarray], width: int) -> np.ndarray:
    out = np.zeros((len(blocks), *blocks[0].shape[:-1], width), dtype=np.float32)
    for i, b in enumerate(blocks):
        out[i, ..., : b.shape[-1]] = b
    return out


def sample_indices(result: GeodesicResult, n: int = N_SAMPLES, seed: int = 0) -> np.ndarray:
    """The fixed target samples the explorer shows (3 per class, as the old grid)."""
    return example_indices(result.target.labels, min(n, result.target.n_samples), seed=seed)


def _placed_indices(result: GeodesicResult, shown: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    rest = np.setdiff1d(np.arange(result.target.n_samples), shown)
    rng = np.random.default_rng(seed)
    extra = rng.permutation(rest)[: max(n - shown.size, 0)]
    return np.concatenate([shown, np.sort(extra)]).astype(np.int64)


def _common(result: GeodesicResult) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    header = {
        "version": VERSION,
        # decimals of a picked weight (the URL's and the cache key's): the browser rounds
        # its picks with this, never a number of its own
        "weight_decimals": int(ENTRY_DECIMALS),
        "m": int(result.m),
        "names": list(result.reference_names),
        "target_name": str(result.target.name),
        "w2_hat": float(result.w2_hat),
        "image_shape": None if result.image_shape is None else list(result.image_shape),
    }
    arrays = {
        "w_to_target": np.asarray(result.w_to_target, dtype="<f8"),
        "w_between": np.asarray(result.w_between, dtype="<f8"),
        "a_hat": np.asarray(result.a_hat, dtype="<f8"),
    }
    return header, arrays


def build_geodesic(
    result: GeodesicResult,
    embedding: Embedding | None = None,
    place: Place | None = None,
    *,
    grid_res: int | None = None,
    mixup_seed: int = 0,
    embedding_pending: bool = False,
) -> Payload:
    """The geodesic explorer's payload for ``result``.

    ``embedding`` (a :class:`~geoviz.viz.embedding.Embedding`) and ``place``
    (``features (n, D) -> (n, 2)``, e.g. a cached
    :func:`geoviz.app.services.embeddings.place_points`) add the embedding view for image or
    high-dimensional data; without them it is left out (header ``view = "none"``), or, with
    ``embedding_pending``, comes later as :func:`build_embedding`'s payload (``view =
    "pending"``: the browser draws everything else first, issue 26).
    """
    start = time.perf_counter()
    header, arrays = _common(result)
    header["mode"] = "geodesic"
    header["class_names"] = [list(r.classes) for r in result.references]
    header["target_classes"] = list(result.target.classes)
    header["pa_note"] = result.grey_note  # why P_a is grey for a colour target, or None
    mapped = [_np(f).astype(np.float32, copy=False) for f in result.mapped_features]
    soft = [_np(s).astype(np.float32, copy=False) for s in result.soft_labels]
    target = _np(result.target.features).astype(np.float32, copy=False)
    c_max = max(s.shape[1] for s in soft)
    shown = sample_indices(result)
    dim = target.shape[1]
    low_dim = result.image_shape is None and dim in (2, 3)
    placed = placed_indices(result)
    header["n_shown"] = int(shown.size)
    header["sample_index"] = placed.tolist()
    header["sample_label"] = _np(result.target.labels)[placed].astype(int).tolist()
    arrays["mass"] = _padded([s.mean(axis=0, keepdims=True)[0] for s in soft], c_max)
    arrays["soft"] = _padded([s[shown] for s in soft], c_max)
    if result.image_shape is not None:
        lo, hi = _pixel_range([target[placed], *(f[placed] for f in mapped)])
        header["pixel_lo"], header["pixel_hi"] = lo, hi
        arrays["images"] = np.stack(
            [quantize(target[placed], lo, hi), *(quantize(f[placed], lo, hi) for f in mapped)]
        )
    if low_dim:
        header["view"] = "scatter"
        arrays["coords"] = np.stack([target, *mapped]).astype("<f4")
        arrays["labels"] = _np(result.target.labels).astype(np.uint8)
        refs = [_np(r.features).astype(np.float32) for r in result.references]
        # the naive-mixup comparison: each output mixes random partners, the pairs of
        # geoviz.geodesic.mixup (same seed as the app's mixup view)
        pairs = mixup_pairs(target.shape[0], [len(r) for r in refs], seed=mixup_seed)
        arrays["mixup_coords"] = np.stack([r[pairs[i]] for i, r in enumerate(refs)]).astype("<f4")
        header["mixup_seed"] = int(mixup_seed)
        arrays["ref_coords"] = np.concatenate(refs).astype("<f4")
        arrays["ref_set"] = np.concatenate(
            [np.full(len(r), i, dtype=np.uint8) for i, r in enumerate(refs)]
        )
    elif embedding is not None and place is not None:
        emb_header, emb_arrays = _embedding_view(result, embedding, place, grid_res)
        header.update(emb_header)
        arrays.update(emb_arrays)
    else:
        header["view"] = "pending" if embedding_pending else "none"
    data = encode(header, arrays)
    return Payload(data, decode(data)[0], time.perf_counter() - start)


def placed_indices(result: GeodesicResult) -> np.ndarray:
    """The target samples whose ``P_a`` the view draws (and whose images the payload
    carries): the shown samples first, then random others, up to :data:`MAX_PLACED` within
    :data:`IMAGE_BUDGET` bytes of images; only the shown ones for 2-D/3-D data."""
    m = int(result.m)
    shown = sample_indices(result)
    dim = int(result.target.features.shape[1])
    if result.image_shape is None and dim in (2, 3):
        return shown
    if result.image_shape is not None:
        n_place = int(min(MAX_PLACED, max(shown.size, IMAGE_BUDGET // ((m + 1) * dim))))
    else:
        n_place = MAX_PLACED
    return _placed_indices(result, shown, n_place)


def _embedding_view(
    result: GeodesicResult, embedding: Embedding, place: Place, grid_res: int | None
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The embedding view's header fields and arrays: ``grid``, ``place`` (``P_a`` of the
    placed samples at every grid node, placed by ``place``), ``bg`` and ``bg_set``."""
    m = int(result.m)
    placed = placed_indices(result)
    mapped = [_np(f).astype(np.float32, copy=False) for f in result.mapped_features]
    dim = mapped[0].shape[1]
    res = int(grid_res or grid_resolution(m))
    comps = simplex_compositions(m, res)
    feats = np.stack([f[placed] for f in mapped])  # (m, P, D)
    nodes = comps.astype(np.float64) / res
    stacked = np.einsum("km,mpd->kpd", nodes, feats).reshape(-1, dim)
    pts = np.asarray(place(stacked), dtype=np.float32).reshape(len(comps), placed.size, 2)
    header = {
        "view": "embedding",
        "embedding_method": str(embedding.method),
        "axis_titles": list(embedding.axis_titles),
        "grid_res": res,
    }
    arrays = {
        "grid": comps.astype(np.uint8),
        "place": pts.astype("<f4"),
        "bg": np.concatenate([embedding.points[n] for n in embedding.names]).astype("<f4"),
        "bg_set": np.concatenate(
            [
                np.full(len(embedding.points[n]), k, dtype=np.uint8)
                for k, n in enumerate(embedding.names)
            ]
        ),
    }
    return header, arrays


def build_embedding(
    result: GeodesicResult, embedding: Embedding, place: Place, *, grid_res: int | None = None
) -> Payload:
    """The embedding view alone, for a geodesic payload built with ``embedding_pending``:
    sent when the embedding is ready, the browser adds its header fields and arrays to the
    payload it has (the same ones :func:`build_geodesic` with ``embedding`` carries)."""
    start = time.perf_counter()
    header, arrays = _embedding_view(result, embedding, place, grid_res)
    header = {"version": VERSION, "mode": "embedding", **header}
    data = encode(header, arrays)
    return Payload(data, decode(data)[0], time.perf_counter() - start)


def build_bootstrap(bootstrap: GeodesicBootstrap) -> Payload:
    """The bootstrap's payload (a :class:`~geoviz.geodesic.uncertainty.GeodesicBootstrap`):
    the replicates the browser draws the intervals, the region and the cloud from."""
    start = time.perf_counter()
    a_int = bootstrap.a_hat_interval()
    header = {
        "version": VERSION,
        "mode": "bootstrap",
        "boot": {
            "method": str(bootstrap.method),
            "level": float(bootstrap.level),
            "replicates": int(bootstrap.replicates),
            "seed": int(bootstrap.seed),
            "flat": bool(bootstrap.flat),
        },
    }
    arrays = {
        "boot_w_to_target": np.asarray(bootstrap.w_to_target_replicates, dtype="<f8"),
        "boot_w_between": np.asarray(bootstrap.w_between_replicates, dtype="<f8"),
        "boot_a_hat": np.asarray(bootstrap.a_hat_replicates, dtype="<f4"),
        "boot_a_low": np.asarray(a_int.low, dtype="<f8"),
        "boot_a_high": np.asarray(a_int.high, dtype="<f8"),
    }
    data = encode(header, arrays)
    return Payload(data, decode(data)[0], time.perf_counter() - start)


def build_mccann(
    result: GeodesicResult,
    i: int,
    embedding: Embedding | None = None,
    place: Place | None = None,
    *,
    grid_res: int = 10,
) -> Payload:
    """McCann mode: the fixed target samples ``x`` and ``T_i(x)`` (``P^M_t`` is their mix).

    For image data, ``embedding`` and ``place`` (as for :func:`build_geodesic`) add the
    embedding view: the shown samples' ``P^M_t`` placed at ``t = 0, 1/grid_res, ..., 1``
    (``grid (K, 2)``, ``place (K, S, 2)``; the browser interpolates between nodes), over the
    faded points of Q and ``P_i`` (issue 26, item 8).
    """
    start = time.perf_counter()
    header, arrays = _common(result)
    header["mode"] = "mccann"
    header["ref"] = int(i)
    header["ref_name"] = str(result.reference_names[i])
    header["class_names"] = [list(result.target.classes), list(result.references[i].classes)]
    mapped = _np(result.mapped_features[i]).astype(np.float32, copy=False)
    target = _np(result.target.features).astype(np.float32, copy=False)
    soft = _np(result.soft_labels[i]).astype(np.float32, copy=False)
    shown = sample_indices(result)
    header["n_shown"] = int(shown.size)
    header["sample_index"] = shown.tolist()
    labels = _np(result.target.labels).astype(int)
    header["sample_label"] = labels[shown].tolist()
    arrays["soft"] = soft[shown].astype("<f4")
    arrays["mass"] = soft.mean(axis=0).astype("<f4")
    counts = np.bincount(labels, minlength=len(result.target.classes))
    arrays["target_mass"] = (counts / counts.sum()).astype("<f4")
    if result.image_shape is not None:
        lo, hi = _pixel_range([target[shown], mapped[shown]])
        header["pixel_lo"], header["pixel_hi"] = lo, hi
        arrays["images"] = np.stack(
            [quantize(target[shown], lo, hi), quantize(mapped[shown], lo, hi)]
        )
        header["view"] = "none"
        if embedding is not None and place is not None:
            res = int(grid_res)
            comps = simplex_compositions(2, res)
            nodes = comps.astype(np.float64) / res  # (K, 2): (1 - t, t)
            feats = np.stack([target[shown], mapped[shown]])  # (2, S, D)
            stacked = np.einsum("km,msd->ksd", nodes, feats).reshape(-1, target.shape[1])
            pts = np.asarray(place(stacked), dtype=np.float32).reshape(len(comps), shown.size, 2)
            keep = [embedding.names[0], embedding.names[i + 1]]  # Q and P_i
            header["view"] = "embedding"
            header["embedding_method"] = str(embedding.method)
            header["axis_titles"] = list(embedding.axis_titles)
            header["grid_res"] = res
            arrays["grid"] = comps.astype(np.uint8)
            arrays["place"] = pts.astype("<f4")
            arrays["bg"] = np.concatenate([embedding.points[n] for n in keep]).astype("<f4")
            arrays["bg_set"] = np.concatenate(
                [
                    np.full(len(embedding.points[keep[0]]), 0, dtype=np.uint8),
                    np.full(len(embedding.points[keep[1]]), i + 1, dtype=np.uint8),
                ]
            )
    elif target.shape[1] in (2, 3):
        header["view"] = "scatter"
        arrays["coords"] = np.stack([target, mapped]).astype("<f4")
        arrays["labels"] = labels.astype(np.uint8)
        ref = _np(result.references[i].features).astype("<f4")
        arrays["ref_coords"] = ref
        arrays["ref_set"] = np.zeros(len(ref), dtype=np.uint8)
    else:
        header["view"] = "none"
    data = encode(header, arrays)
    return Payload(data, decode(data)[0], time.perf_counter() - start)
