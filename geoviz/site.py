"""Where the app and its data live: inside an installed wheel, or in a checkout.

The repository keeps one copy of each run-time file at its top level: the app's start page
``app.py``, its ``pages/``, Streamlit's settings ``.streamlit/config.toml`` and ``assets/``
(the bundled samples with their credits, the shipped encoder and the stored evidence). The
wheel's build (``setup.py``) copies them into the package as ``geoviz/_site/``; an editable
install or a source tree reads them where they are. :func:`site_dir` answers which.

Nothing here imports more than the standard library: ``geoviz --help`` and the app's
launcher read it before torch.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["INSTALLED_SITE", "SITE_FILES", "app_script", "site_dir", "streamlit_config"]

#: the folder the wheel's build fills (``setup.py``)
INSTALLED_SITE = Path(__file__).resolve().parent / "_site"

#: what the build copies from the checkout's top level into :data:`INSTALLED_SITE`
SITE_FILES: tuple[str, ...] = ("app.py", "pages", ".streamlit", "assets")


def site_dir() -> Path:
    """The folder holding ``app.py``, ``pages/``, ``.streamlit/`` and ``assets/``.

    ``geoviz/_site`` in an installed wheel; the checkout's top level otherwise (a source
    tree, ``pip install -e .``), where the package sits beside them.
    """
    if (INSTALLED_SITE / "app.py").is_file():
        return INSTALLED_SITE
    return Path(__file__).resolve().parents[1]


def app_script() -> Path:
    """The app's start page (what ``streamlit run`` is given)."""
    return site_dir() / "app.py"


def streamlit_config() -> Path:
    """The app's Streamlit settings (``.streamlit/config.toml`` beside :func:`app_script`)."""
    return site_dir() / ".streamlit" / "config.toml"
