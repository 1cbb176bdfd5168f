"""The wheel's build step: the app and its data go into the package.

The repository keeps one copy of each run-time file at its top level (``app.py``,
``pages/``, ``.streamlit/``, ``assets/``: see :mod:`geoviz.site`). ``build_py`` copies them
into the built package as ``geoviz/_site/``, so ``pip install geoviz-*.whl`` gives the whole
product; everything else is configured in ``pyproject.toml``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
#: kept in step with geoviz.site.SITE_FILES (tests/test_site.py compares them)
SITE_FILES = ("app.py", "pages", ".streamlit", "assets")
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".*.tmp")


class BuildWithSite(build_py):
    """``build_py``, then the checkout's app and assets under ``geoviz/_site/``."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "geoviz" / "_site"
        for name in SITE_FILES:
            source = ROOT / name
            if not source.exists():  # a build from an incomplete tree must not pass
                raise SystemExit(f"cannot build geoviz: {source} is missing")
            if source.is_dir():
                shutil.copytree(source, target / name, dirs_exist_ok=True, ignore=_SKIP)
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target / name)


setup(cmdclass={"build_py": BuildWithSite})
