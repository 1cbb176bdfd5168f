"""What a visitor reads when something fails."""

from __future__ import annotations

import logging
import re

from geoviz.errors import GeovizError

_log = logging.getLogger("geoviz.app")

#: longest text a visitor reads for one error
MAX_ERROR_CHARS = 600

#: an absolute POSIX path of two or more parts (``/tmp/x/y``), not a ratio such as ``28/28``
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~-])(?:/[\w.~@%+=,-]+){2,}/?")


def scrub_paths(text: str) -> str:
    """``text`` with every absolute path replaced by ``…/<last part>``.

    The last guard of :func:`error_text`: the library names files by what the visitor
    gave (an upload's name, ``<data folder>/<path inside>``), but a message from a
    dependency may still carry a server path (a temporary folder, the cache).
    """
    return _ABSOLUTE_PATH.sub(lambda m: "…/" + m.group(0).rstrip("/").rsplit("/", 1)[-1], text)


def error_text(err: BaseException) -> str:
    """What the app shows a visitor for an exception: one sentence, never a traceback.

    Input errors (:class:`~geoviz.errors.GeovizError`) carry the library's message, written
    for users, with any absolute path cut to its last part (:func:`scrub_paths`) and at
    most :data:`MAX_ERROR_CHARS` characters. Anything else may hold server paths or file contents: the visitor reads only
    its kind, and the full traceback goes to the server's log (``geoviz.app`` logger).
    """
    if isinstance(err, GeovizError):
        text = scrub_paths(str(err))
        return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"
    if isinstance(err, MemoryError):
        return "The server ran out of memory for this request; try fewer samples."
    _log.error("unexpected error shown to a visitor as a sentence", exc_info=err)
    if isinstance(err, OSError):
        return "The server could not read or write a file for this request (details in its log)."
    return f"Something went wrong on the server ({type(err).__name__}); details are in its log."
