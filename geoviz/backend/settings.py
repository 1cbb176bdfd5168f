"""The process settings of the library (:class:`RuntimeSettings`), each with its environment
variable, and the one place that installs and reads them (:func:`configure`,
:func:`runtime_settings`).

:mod:`geoviz.backend` (the device, the default cache) and :mod:`geoviz.backend.disk_cache`
(the default folder of a :class:`~geoviz.backend.disk_cache.DiskCache`) both read them here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "EmbeddingMethod",
    "RuntimeSettings",
    "configure",
    "configured",
    "default_cache_dir",
    "runtime_settings",
]

EmbeddingMethod = Literal["umap", "pca"]


def _env_flag(raw: str) -> bool:
    return raw in ("1", "true", "yes")


@dataclass(frozen=True)
class RuntimeSettings:
    """Process-wide settings of the library, each with its environment variable.

    Attributes
    ----------
    device
        ``GEOVIZ_DEVICE``: what ``"auto"`` means (``"auto"``: CUDA when available, else
        CPU; ``"cpu"``, ``"cuda"``), checked when a device is resolved.
    cache_dir
        ``GEOVIZ_CACHE_DIR``, else ``$XDG_CACHE_HOME/geoviz``, else ``~/.cache/geoviz``:
        the folder of the default :class:`DiskCache`.
    no_cache
        ``GEOVIZ_NO_CACHE`` in ``1``/``true``/``yes``: the default cache computes every time.
    assets_dir
        ``GEOVIZ_ASSETS_DIR``: folder of the bundled datasets (``None``: the install's
        ``assets``, :func:`geoviz.site.site_dir`), see :func:`geoviz.data.bundled.assets_dir`.
    embedding
        ``GEOVIZ_EMBEDDING=pca``: ``"pca"``, else ``"umap"``: what
        :func:`geoviz.viz.embedding.auto_method` means by ``"auto"``.
    """

    device: str = "auto"
    cache_dir: Path = Path.home() / ".cache" / "geoviz"
    no_cache: bool = False
    assets_dir: Path | None = None
    embedding: EmbeddingMethod = "umap"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RuntimeSettings:
        """The settings the environment ``env`` (default ``os.environ``) asks for."""
        env = os.environ if env is None else env
        cache_env = env.get("GEOVIZ_CACHE_DIR")
        if cache_env:
            cache_dir = Path(cache_env).expanduser()
        else:
            xdg = env.get("XDG_CACHE_HOME")
            cache_dir = (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "geoviz"
        assets = env.get("GEOVIZ_ASSETS_DIR")
        pca = env.get("GEOVIZ_EMBEDDING", "").strip().lower() == "pca"
        return cls(
            device=env.get("GEOVIZ_DEVICE", "").strip().lower() or "auto",
            cache_dir=cache_dir,
            no_cache=_env_flag(env.get("GEOVIZ_NO_CACHE", "")),
            assets_dir=Path(assets).expanduser() if assets else None,
            embedding="pca" if pca else "umap",
        )


_configured: RuntimeSettings | None = None


def runtime_settings() -> RuntimeSettings:
    """The settings an entry point installed (:func:`configure`), else the environment's."""
    return _configured if _configured is not None else RuntimeSettings.from_env()


def configure(settings: RuntimeSettings | None) -> RuntimeSettings | None:
    """Install ``settings`` for this process (``None``: read the environment again);
    returns the settings installed before."""
    global _configured
    previous, _configured = _configured, settings
    return previous


@contextlib.contextmanager
def configured(settings: RuntimeSettings) -> Iterator[RuntimeSettings]:
    """``settings`` installed inside the block (a command's run), the previous ones after."""
    previous = configure(settings)
    try:
        yield settings
    finally:
        configure(previous)


def default_cache_dir() -> Path:
    """``$GEOVIZ_CACHE_DIR``, else ``$XDG_CACHE_HOME/geoviz``, else ``~/.cache/geoviz``
    (:attr:`RuntimeSettings.cache_dir`)."""
    return runtime_settings().cache_dir
