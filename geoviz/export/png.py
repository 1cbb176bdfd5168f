"""uint8 quantisation and PNG encoding/decoding, shared by the image-holding formats."""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from geoviz.data.dataset import SoftLabeledDataset
from geoviz.errors import DatasetFormatError, ExportError

_PNG_MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}


@dataclass(frozen=True)
class _Quantised:
    images: np.ndarray  # (N, H, W) or (N, H, W, C) uint8
    features: np.ndarray  # (N, D) float32: what a reader recovers (uint8 / 255)
    max_abs_error: float
    n_clipped: int


def _quantise(ds: SoftLabeledDataset) -> _Quantised:
    """uint8 images of an image dataset: ``round(255 * clip(x, 0, 1))``, channel-last."""
    assert ds.image_shape is not None
    c, h, w = ds.image_shape
    x = ds.features.numpy()
    scaled = x.astype(np.float64) * 255.0
    n_clipped = int(np.count_nonzero((scaled < -0.5) | (scaled > 255.5)))
    q = np.clip(np.rint(scaled), 0, 255).astype(np.uint8)
    recovered = q.astype(np.float32) / np.float32(255)
    images = q.reshape(-1, c, h, w).transpose(0, 2, 3, 1)
    if c == 1:
        images = images[..., 0]
    return _Quantised(
        images=np.ascontiguousarray(images),
        features=recovered,
        max_abs_error=float(np.abs(recovered - x).max()),
        n_clipped=n_clipped,
    )


def _encode_png(image: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


def _decode_png(data: bytes, channels: int | None, where: str) -> np.ndarray:
    """PNG bytes -> uint8 ``(C, H, W)``; ``channels`` forces the mode (None: keep L/LA/RGB/RGBA)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            if channels is None:
                channels = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}.get(img.mode, 3)
            arr = np.asarray(img.convert(_PNG_MODES[channels]), dtype=np.uint8)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        raise DatasetFormatError(f"not a readable PNG image: {err}", where) from err
    return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)


def _png_payload(ds: SoftLabeledDataset, fmt: str) -> tuple[list[bytes], _Quantised]:
    if ds.image_shape is None:
        raise ExportError(
            f"format {fmt!r} stores images, but dataset {ds.name!r} holds vectors "
            f"(no image_shape); use 'npz', 'pt' or 'parquet'"
        )
    if ds.image_shape[0] not in _PNG_MODES:
        raise ExportError(
            f"format {fmt!r} writes PNG images, which need 1-4 channels; dataset {ds.name!r} has "
            f"image_shape {ds.image_shape}; use 'npz' or 'pt'"
        )
    quant = _quantise(ds)
    if quant.n_clipped:
        warnings.warn(
            f"{quant.n_clipped} feature value(s) of {ds.name!r} lie outside [0, 1] and were clipped "
            f"when writing PNG images (max error {quant.max_abs_error:.4g}); use 'npz' or 'pt' "
            "to keep exact features",
            UserWarning,
            stacklevel=4,
        )
    return [_encode_png(img) for img in quant.images], quant


def _lossy_dataset(ds: SoftLabeledDataset, quant: _Quantised) -> SoftLabeledDataset:
    return SoftLabeledDataset(
        features=torch.from_numpy(quant.features),
        soft_labels=ds.soft_labels,
        class_names=ds.class_names,
        name=ds.name,
        image_shape=ds.image_shape,
        metadata=ds.metadata,
    )


def _stack_images(
    images: list[np.ndarray], image_shape: Any, where: Path
) -> tuple[np.ndarray, list[int]]:
    """uint8 ``(C, H, W)`` images -> float32 features ``uint8 / 255`` and the shape."""
    if not images:
        raise DatasetFormatError("export holds no images", where)
    shape = list(images[0].shape)
    if image_shape and list(image_shape) != shape:
        raise DatasetFormatError(
            f"images have shape {shape}, manifest says {list(image_shape)}", where
        )
    if any(list(img.shape) != shape for img in images):
        raise DatasetFormatError("images have different sizes", where)
    stacked = np.stack(images).reshape(len(images), -1)
    return stacked.astype(np.float32) / np.float32(255), shape
