"""Moved to :mod:`geoviz.nn.training` (issue 17); kept for importers not yet updated."""

from geoviz.nn.training import *  # noqa: F403
from geoviz.nn.training import __all__  # noqa: F401
