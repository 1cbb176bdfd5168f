"""Built-in feature spaces that need no training: pixels, PCA and the digit box.

* :class:`PixelSpace` — the datasets as they are (today's behaviour, the default; right for
  aligned grey digits).
* :class:`PCASpace` — principal components of the union (:class:`geoviz.data.preprocess.PCAFeatures`).
* :class:`BoxSpace` — MNIST's own size normalisation of every grey image
  (:func:`geoviz.data.preprocess.box_normalise`: ink cropped, scaled into a 20x20 box, centred
  by mass on 28x28), the largest single factor of the transfer study (``benchmarks/README.md``),
  then pixels. The couplings see aligned digits; ``P_a``'s images come back through the plan
  from the references' own images.
"""

from __future__ import annotations

from typing import Any

import torch

from geoviz import limits
from geoviz.data.dataset import LabeledDataset
from geoviz.data.preprocess import PCAFeatures, box_images
from geoviz.errors import DatasetError
from geoviz.features.base import FeatureSpace, FittedFeatures, Progress

__all__ = ["BoxSpace", "PCASpace", "PixelSpace"]


class _Affine:
    """``(x - mean) @ axes.T``: a module-level callable, so a fitted space pickles (a
    background job sends its geodesic to a child process)."""

    def __init__(self, mean: torch.Tensor, axes: torch.Tensor) -> None:
        self.mean, self.axes = mean, axes

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return (x.to(torch.float32) - self.mean) @ self.axes.T


class _BoxEncode:
    """Grey ``h x w`` images -> their digit box, flattened (picklable, as :class:`_Affine`)."""

    def __init__(self, h: int, w: int, box: int, canvas: int) -> None:
        self.h, self.w, self.box, self.canvas = h, w, box, canvas

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = box_images(x.numpy().reshape(-1, self.h, self.w), self.box, self.canvas)
        return torch.from_numpy(out.reshape(len(out), -1))


class PixelSpace(FeatureSpace):
    """The identity: costs on raw features (pixels for images)."""

    name = "pixels"

    def params(self) -> dict[str, Any]:
        return {}

    def _fit(
        self, datasets: list[LabeledDataset], digest_: str, progress: Progress | None
    ) -> FittedFeatures:
        # one digest for every pixel space: fitting it learns nothing from the data
        return FittedFeatures(name="pixels", digest="pixels", dim=None, encode=None)


class PCASpace(FeatureSpace):
    """``n_components`` principal axes of the union of the datasets (seeded)."""

    name = "pca"

    def __init__(self, n_components: int = 50, seed: int = 0) -> None:
        self.n_components = limits.check_int(n_components, "n_components", 1, 4096)
        self.seed = limits.check_int(seed, "seed", 0, limits.MAX_SEED)

    def params(self) -> dict[str, Any]:
        return {"n_components": self.n_components, "seed": self.seed}

    def _fit(
        self, datasets: list[LabeledDataset], digest_: str, progress: Progress | None
    ) -> FittedFeatures:
        if progress is not None:
            progress("PCA", 0.0)
        pca = PCAFeatures(self.n_components, seed=self.seed).fit(datasets)
        encode = _Affine(pca.mean_, pca.components_)
        if progress is not None:
            progress("PCA", 1.0)
        explained = float(pca.explained_variance_ratio_.sum())
        return FittedFeatures(
            name=f"pca{self.n_components}",
            digest=digest_,
            dim=self.n_components,
            encode=encode,
            info={"explained_variance": round(explained, 4)},
        )


class BoxSpace(FeatureSpace):
    """Grey images box-normalised like MNIST (:func:`~geoviz.data.preprocess.box_normalise`)."""

    name = "box"

    def __init__(self, box: int = 20, canvas: int = 28) -> None:
        self.box = limits.check_int(box, "box", 1, limits.MAX_IMAGE_SIZE)
        self.canvas = limits.check_int(canvas, "canvas", self.box, limits.MAX_IMAGE_SIZE)

    def params(self) -> dict[str, Any]:
        return {"box": self.box, "canvas": self.canvas}

    def _fit(
        self, datasets: list[LabeledDataset], digest_: str, progress: Progress | None
    ) -> FittedFeatures:
        shape = datasets[0].image_shape
        if shape is None or shape[0] != 1:
            raise DatasetError(
                "the digit box aligns grey digit images; these datasets are "
                + ("vectors" if shape is None else f"{shape[0]}-channel images")
                + " (use the encoder for colour images)"
            )

        _, h, w = shape
        encode = _BoxEncode(h, w, self.box, self.canvas)
        return FittedFeatures(
            name="box", digest=digest_, dim=self.canvas * self.canvas, encode=encode
        )
