"""Every value the browser sends the server, checked once where it arrives.

The explorer component (:mod:`geoviz.app.explorer_host.component`) posts an event when the
pointer is released: ``{"weights": [a_1, ..., a_m], "seq": n, "id": "..."}`` on the Geodesic
page, ``{"t": 0.4, "seq": n, "id": "..."}`` on the McCann page. It sends the event as its
JSON *text* (a string), which :func:`component_value` parses with its own bounds. Streamlit
parses every component value before any page code runs, and it reads a string flat, so a
value nested thousands deep cannot fail there (issue 41; the frame's guards,
``frontend/streamlit.js``, hold what other scripts post to the same form). Anyone can post
anything there (the value is the visitor's to set), so
nothing from it reaches a ``float()``, a cache key or a message before it went through
:func:`component_value`, :func:`released_event`, :func:`released_weights` or
:func:`released_t`:

* the text is at most :data:`MAX_VALUE_CHARS` characters and nested at most
  :data:`MAX_VALUE_DEPTH` deep, checked before it is parsed; anything but a text is refused;
* only JSON numbers count as numbers (no strings, ``null``, booleans, nested lists,
  objects), and only finite ones;
* lengths are checked before anything is iterated (a 10^6-entry list is refused at once);
* a refusal is one :class:`BrowserValueError` whose text is at most
  :data:`MAX_MESSAGE_CHARS` characters and quotes at most :data:`EXCERPT_CHARS` characters
  of the input.

The weights then go through the library's value type
(:meth:`geoviz.geodesic.weights.SimplexWeights.from_input`) and ``t`` through
:func:`geoviz.geodesic.interpolate.check_t`, so the browser is held to the same rules as a
link or the command line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Real

from geoviz.errors import GeovizError
from geoviz.geodesic.interpolate import check_t
from geoviz.geodesic.weights import SimplexWeights

__all__ = [
    "EXCERPT_CHARS",
    "MAX_MESSAGE_CHARS",
    "MAX_VALUE_CHARS",
    "MAX_VALUE_DEPTH",
    "BrowserValueError",
    "ReleasedEvent",
    "component_value",
    "excerpt",
    "released_event",
    "released_t",
    "released_weights",
]

#: longest message a refused browser value produces (the sender's page shows it)
MAX_MESSAGE_CHARS = 200

#: most characters of the sent value quoted in a refusal
EXCERPT_CHARS = 24

#: longest ``id`` of an event (the explorer sends ``<scenario key>-geodesic``, ~40 characters)
MAX_ID_CHARS = 128

#: longest JSON text of an event (64 weights and the longest id take under 2,000 characters;
#: the frame's guard, ``frontend/streamlit.js``, holds values to the same length)
MAX_VALUE_CHARS = 4096

#: deepest nesting of an event's JSON text: an object holding a list of numbers
MAX_VALUE_DEPTH = 2


class BrowserValueError(GeovizError):
    """A value sent by the browser that the server does not take (the last good one is kept)."""

    def __init__(self, message: str) -> None:
        text = str(message)
        if len(text) > MAX_MESSAGE_CHARS:
            text = text[: MAX_MESSAGE_CHARS - 1] + "…"
        super().__init__(text)


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """A short description of ``value`` for a message: its kind, and its start for scalars.

    Never builds the ``repr`` of a whole container (a 1 MB list would take as long as the
    message is long), never more than ``limit`` characters of the value itself.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return f"an object with {len(value)} keys"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} entries"
    if isinstance(value, str):
        text = value if len(value) <= limit else value[: limit - 1] + "…"
        return f"the text {text!r}" + (
            f" ({len(value):,} characters)" if len(value) > limit else ""
        )
    if isinstance(value, Real):
        try:
            return repr(float(value))[:limit]
        except OverflowError:  # a JSON integer of hundreds of digits
            return "a number too large for a float"
    return f"a value of type {type(value).__name__}"[: limit + 20]


def _json_number(value: object) -> float | None:
    """``value`` as a float if it is a finite JSON number (not a bool), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, Real):
        return None
    try:
        number = float(value)
    except OverflowError:  # a JSON integer such as 10**400
        return None
    return number if math.isfinite(number) else None


def _deeper_than(text: str, limit: int) -> bool:
    """Whether JSON ``text`` nests arrays or objects more than ``limit`` deep: one pass over
    the characters, brackets inside strings not counted (no parser, no recursion)."""
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def _no_constant(name: str) -> object:
    """``json.loads``'s hook for ``NaN`` and ``Infinity``, which JSON does not have."""
    raise ValueError(f"{name} is not JSON")


def component_value(raw: object) -> object:
    """The explorer's value as sent: ``None`` (nothing released yet), or the event its JSON
    text holds (checked next by :func:`released_event`).

    The text's length and nesting are checked before it is parsed, so no value reaches a
    recursive parser or a long loop.

    Raises
    ------
    BrowserValueError
        Not a text (the explorer sends only texts: a list or an object was posted by
        something else), longer than :data:`MAX_VALUE_CHARS` characters, nested deeper than
        :data:`MAX_VALUE_DEPTH`, or not JSON.
    """
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise BrowserValueError(
            f"The explorer sent {excerpt(raw)} instead of the text of an event; ignored."
        )
    if len(raw) > MAX_VALUE_CHARS:
        raise BrowserValueError(
            f"The explorer sent {len(raw):,} characters, more than an event takes "
            f"({MAX_VALUE_CHARS:,}); ignored."
        )
    if _deeper_than(raw, MAX_VALUE_DEPTH):
        raise BrowserValueError(
            f"The explorer sent a value nested more than {MAX_VALUE_DEPTH} deep, not an event; "
            "ignored."
        )
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except ValueError:  # not JSON, or NaN / Infinity
        raise BrowserValueError(
            f"The explorer sent {excerpt(raw)}, which is not JSON; ignored."
        ) from None


@dataclass(frozen=True)
class ReleasedEvent:
    """One release posted by the explorer: its payload ``id`` and sequence number, and the
    raw fields (checked by :func:`released_weights` / :func:`released_t`)."""

    id: str
    seq: int
    fields: Mapping[str, object]

    @property
    def marker(self) -> tuple[str, int]:
        """What the page remembers to handle each release once."""
        return (self.id, self.seq)


def released_event(value: object) -> ReleasedEvent | None:
    """The component's value as an event, or ``None`` when nothing was released yet.

    Raises
    ------
    BrowserValueError
        The value is not an object with a short text ``id`` and an integer ``seq``.
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise BrowserValueError(f"The explorer sent {excerpt(value)}, not an event; ignored.")
    if len(value) > 8:
        raise BrowserValueError(f"The explorer sent {excerpt(value)}; ignored.")
    seq, ident = value.get("seq"), value.get("id", "")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2**53:
        raise BrowserValueError(f"The explorer's event number is {excerpt(seq)}; ignored.")
    if not isinstance(ident, str) or len(ident) > MAX_ID_CHARS:
        raise BrowserValueError(f"The explorer's event id is {excerpt(ident)}; ignored.")
    return ReleasedEvent(id=ident, seq=int(seq), fields=value)


def released_weights(value: object, m: int) -> SimplexWeights:
    """Weights ``a`` sent by the browser for ``m`` references, validated and rounded once
    (:meth:`SimplexWeights.from_input <geoviz.geodesic.weights.SimplexWeights.from_input>`).

    Raises
    ------
    BrowserValueError
        Not a flat list of ``m`` finite JSON numbers, or numbers off the simplex.
    """
    if not isinstance(value, (list, tuple)):
        raise BrowserValueError(
            f"Weights must be a list of {m} numbers, got {excerpt(value)}; the last pick is kept."
        )
    if len(value) != m:
        raise BrowserValueError(
            f"Weights must have {m} entries (one per reference), got {excerpt(value)}; "
            "the last pick is kept."
        )
    numbers = [_json_number(v) for v in value]
    bad = next((i for i, v in enumerate(numbers) if v is None), None)
    if bad is not None:
        raise BrowserValueError(
            f"Weight {bad + 1} is {excerpt(value[bad])}, not a finite number; "
            "the last pick is kept."
        )
    try:
        return SimplexWeights.from_input([float(v) for v in numbers if v is not None], m)
    except GeovizError as err:
        raise BrowserValueError(f"{err}; the last pick is kept.") from None


def released_t(value: object) -> float:
    """McCann's ``t`` sent by the browser: a finite JSON number in ``[0, 1]``
    (:func:`geoviz.geodesic.interpolate.check_t`).

    Raises
    ------
    BrowserValueError
        Anything else (``"nan"``, ``null``, a text, a list, an object, a number outside
        ``[0, 1]``).
    """
    number = _json_number(value)
    if number is None:
        raise BrowserValueError(
            f"t must be a number in [0, 1], got {excerpt(value)}; the last t is kept."
        )
    try:
        return check_t(number)
    except GeovizError as err:
        raise BrowserValueError(f"{err}; the last t is kept.") from None
