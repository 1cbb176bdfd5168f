"""The built-in export formats, registered in the order they are offered.

Each format is one module with its :class:`~geoviz.export.registry.ExportFormatSpec`
(:mod:`~geoviz.export.npz`, :mod:`~geoviz.export.pt`, :mod:`~geoviz.export.imagefolder`,
:mod:`~geoviz.export.parquet`) and one line below; another format is one more module and one
more :func:`~geoviz.export.registry.register_format` call (from here, or from a plug-in).
"""

from __future__ import annotations

from typing import Literal

from geoviz.export import imagefolder, npz, parquet, pt
from geoviz.export.registry import format_spec, register_format

#: the built-in formats' names (any registered format's name is accepted where this is)
ExportFormat = Literal["npz", "pt", "imagefolder", "parquet"]

for _spec in (npz.SPEC, pt.SPEC, imagefolder.SPEC, parquet.SPEC):
    register_format(_spec, replace=True)

__all__ = ["ExportFormat", "format_description", "load_snippet"]


def format_description(fmt: str, *, images: bool = True) -> str:
    """One line describing export format ``fmt`` for users, with its fidelity.

    ``images`` says whether the dataset holds images: Parquet stores those as
    uint8 PNGs (``"lossy (uint8)"``) and vectors as float32 (lossless).
    """
    return format_spec(fmt).describe(images=images)


def load_snippet(format: str, filename: str) -> str:
    """One line of Python that loads an exported file (numpy, torch or HF ``datasets``)."""
    spec = format_spec(format)
    if spec.snippet is None:
        return f"# {spec.name}: see the geoviz documentation of this format"
    return spec.snippet(filename)
