"""Labeled datasets: the types, loaders, registry and preprocessing."""

from geoviz.data.dataset import ImageShape, LabeledDataset, SoftLabeledDataset

__all__ = ["ImageShape", "LabeledDataset", "SoftLabeledDataset"]
