"""geoviz: synthetic labeled datasets along generalized geodesics in OT dataset space.

Implements Fan & Alvarez-Melis, "Generating Synthetic Datasets by Interpolating
along Generalized Geodesics" (UAI 2023).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("geoviz")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.2.0"

__all__ = ["__version__"]
