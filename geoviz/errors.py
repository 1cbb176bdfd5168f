"""Exception hierarchy of geoviz.

Every error a user can trigger with bad input derives from :class:`GeovizError`
(a ``ValueError``), carries a specific, human-readable message and, where a file
is involved, names that file. The app shows ``str(err)`` inline; the CLI prints
it and exits with status 2, so neither shows a traceback for bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def short_repr(value: Any, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters: error texts never echo a whole input.

    Containers longer than ``limit`` entries are described by their length instead of
    being turned into text (a 10^6-entry list would cost seconds to ``repr``). A value whose
    ``repr`` fails (a list nested thousands deep, an integer of more than 4,300 digits, an
    object whose ``__repr__`` raises) is described by its type: a message about a bad value
    never fails itself.
    """
    if isinstance(value, (list, tuple, dict, set)) and len(value) > limit:
        return f"<{type(value).__name__} of {len(value):,} entries>"
    if isinstance(value, (str, bytes)) and len(value) > 4 * limit:
        value = value[: 4 * limit]
    try:
        text = repr(value)
    except Exception:  # RecursionError, ValueError (int digits), or a hostile __repr__
        text = f"<{type(value).__name__} that cannot be shown>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class GeovizError(ValueError):
    """Base class of every error caused by user input or environment."""


class DatasetError(GeovizError):
    """A labeled dataset is invalid (empty, one class, NaN features, bad labels...).

    Parameters
    ----------
    message
        What is wrong, in words.
    source
        The file (or upload name) the dataset came from, if any; it is prefixed
        to the message so the user knows which input to fix.
    """

    def __init__(self, message: str, source: str | Path | None = None) -> None:
        self.source = None if source is None else str(source)
        self.problem = message
        super().__init__(f"{self.source}: {message}" if self.source else message)


class DatasetFormatError(DatasetError):
    """A file could not be parsed: truncated, corrupt, wrong keys, mismatched counts."""


class UnknownDatasetError(GeovizError, KeyError):
    """A dataset name is not in the registry."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class DownloadUnavailableError(GeovizError):
    """A dataset needs a download, but torchvision or the network is unavailable."""


class WeightsError(GeovizError):
    """Interpolation weights are not a point of the probability simplex."""


class ExportError(GeovizError):
    """An export cannot be written (target exists, bad format, ...)."""


class ExportExistsError(ExportError):
    """An export's file already exists and ``overwrite`` was not given; nothing was written."""


class ResourceError(GeovizError):
    """A computation would need more memory than is available."""


class AssetError(GeovizError):
    """A file that ships with geoviz (the pretrained encoder's weights or manifest) is not
    installed."""


class DamagedAssetError(AssetError):
    """A shipped file is there but unusable: not a regular file, larger than geoviz reads,
    unreadable, or not what its manifest says (the message names the file and says to
    reinstall geoviz)."""


class ConvergenceWarning(UserWarning):
    """An iterative solver stopped before reaching its tolerance."""


class BlurWarning(UserWarning):
    """An entropic OTDD plan is blurry: its rows average many reference points.

    Raised when the median plan-row perplexity (``effective_neighbours``) is above
    :data:`geoviz.ot.otdd_cost.BLUR_NEIGHBOURS`; the message says how to sharpen the map
    (a smaller relative ``epsilon``).
    """
