"""Names as Plotly shows them: text, never markup or a template placeholder.

Dataset, class, reference and file names come from links, uploads and files (issue 32,
item 6). Plotly reads a subset of HTML in every text it draws (titles, legend entries,
tick labels, annotations, hover labels: ``<a href>``, ``<b>``, ``<span style>``,
``<br>``, entities) and fills ``%{...}`` placeholders in hover templates (and, once a
figure carries ``meta``, in titles, names and annotations too). A name therefore goes
into a figure through :func:`plotly_name`; text the code composes itself (titles with
``<br>``, captions) through :func:`plotly_markup`, with the names in it already passed
through :func:`plotly_name` (or :func:`geoviz.viz.report.plotly_literal`).

The figure builders of :mod:`geoviz.viz` take names as typed and escape them where they
draw them; parameters that are Plotly text (``title``, ``captions``, ``column_titles``,
``map_name``, the ``target_name``/``reference_name`` of
:func:`~geoviz.viz.plots.label_transition_heatmap`) are the caller's markup, with its names
escaped by the caller. Identifiers that Plotly never draws (``customdata``, which
:func:`~geoviz.viz.scatter.selected_samples` reads back) keep the names as typed.
"""

from __future__ import annotations

__all__ = ["plotly_markup", "plotly_name"]

#: ``%`` as a character reference: Plotly decodes it where it draws text, after it has
#: filled the template placeholders, so a ``%{x}`` in a name shows as typed
_PERCENT = "&#37;"


def plotly_name(text: object) -> str:
    """``text`` (a name a visitor gave) as Plotly shows it literally, in any text field.

    ``&``, ``<`` and ``>`` become entities (no tag, no entity of the name's own), line
    breaks spaces, and ``%`` the reference ``&#37;`` so that no ``%{...}`` of the name
    is a placeholder of a hover template. The same escaping as
    :func:`geoviz.viz.report.plotly_literal`, plus ``%``.
    """
    flat = " ".join(str(text).splitlines())
    flat = flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return flat.replace("%", _PERCENT)


def plotly_markup(text: object) -> str:
    """Plotly text the code composed (its tags kept) with every ``%`` as ``&#37;``.

    For a caller's title or caption put into a hover template (or beside names in one):
    it shows the same, and no ``%{...}`` in it, a name's included, is filled in. Applying
    it twice changes nothing more (``&#37;`` has no ``%``).
    """
    return str(text).replace("%", _PERCENT)
