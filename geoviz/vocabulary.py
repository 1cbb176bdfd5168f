"""The choices every front end offers, in one light module (plain data, no torch).

The CLI builds its ``--features`` and ``--encoder-preset`` choices from here, so
``geoviz --help`` does not import torch to list them; :mod:`geoviz.features` checks names
against the same tuples.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["AUTO", "BUILTIN_SPACES", "ENCODER_PRESET_NAMES", "BuiltinSpace"]

#: the name of the default space: chosen from the data (:func:`geoviz.features.choose_space`)
AUTO = "auto"

BuiltinSpace = Literal["auto", "pixels", "pca", "box", "encoder"]

#: the spaces every link and command may name (``auto``, the default, first)
BUILTIN_SPACES: tuple[BuiltinSpace, ...] = ("auto", "pixels", "pca", "box", "encoder")

#: the encoder's weights: the shipped ones (default), or a training budget here
ENCODER_PRESET_NAMES: tuple[str, ...] = ("pretrained", "tiny", "cpu")
