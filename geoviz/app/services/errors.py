"""What a visitor reads when something fails."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from geoviz.errors import GeovizError

if TYPE_CHECKING:
    pass


_log = logging.getLogger("geoviz.app")


def error_text(err: BaseException) -> str:
    """What the app shows a visitor for an exception: one sentence, never a traceback.

    Input errors (:class:`~geoviz.errors.GeovizError`) carry the library's message, written
    for users. Anything else may hold server paths or file contents: the visitor reads only
    its kind, and the full traceback goes to the server's log (``geoviz.app`` logger).
    """
    if isinstance(err, GeovizError):
        return str(err)
    if isinstance(err, MemoryError):
        return "The server ran out of memory for this request; try fewer samples."
    _log.error("unexpected error shown to a visitor as a sentence", exc_info=err)
    if isinstance(err, OSError):
        return "The server could not read or write a file for this request (details in its log)."
    return f"Something went wrong on the server ({type(err).__name__}); details are in its log."
