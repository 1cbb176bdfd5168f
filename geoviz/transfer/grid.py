"""The simplex study's former module: now :mod:`geoviz.transfer.study` (running the grid,
correlations, statistics), :mod:`geoviz.transfer.checkpoints` (the checkpoint store) and
:mod:`geoviz.viz.study` (the figure).

Kept for importers not yet updated (issue 17): ``geoviz/transfer/cli.py``,
``geoviz/app/services/evidence.py`` and ``pages/7_evidence.py``. ``correlation_figure``
is looked up on first use only, so that importing this module does not import the
plotting layer above it.
"""

from __future__ import annotations

from typing import Any

from geoviz.transfer.checkpoints import CHECKPOINT_VERSION, checkpoint_key
from geoviz.transfer.study import GridPoint, GridStudy, correlations, run_grid

__all__ = [
    "CHECKPOINT_VERSION",
    "GridPoint",
    "GridStudy",
    "checkpoint_key",
    "correlation_figure",  # noqa: F822 - provided by __getattr__
    "correlations",
    "run_grid",
]


def __getattr__(name: str) -> Any:
    # TODO(issue 17): remove with this module once transfer/cli.py and pages/7_evidence.py
    # import correlation_figure from geoviz.viz.study (a transfer -> viz edge, see test_layers)
    if name == "correlation_figure":
        from geoviz.viz.study import correlation_figure

        return correlation_figure
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
