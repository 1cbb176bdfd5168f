"""Served folders: the server folders (``GEOVIZ_DATA_DIRS``) whose datasets the app loads.

Each folder is named by its last path component (``digits`` for ``/data/digits``; a
repeated name gets ``_`` appended), and a served dataset by ``<folder name>/<path
inside>``. The app reads these names from links and forms (and confines every one to its
folder); the command line names its files by path and uses :func:`served_name` to say
which served dataset a file is, so that the app can open a fit the CLI computed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from geoviz.data.choice import DatasetChoice
from geoviz.errors import GeovizError
from geoviz.vocabulary import Split

__all__ = ["DATA_DIRS_VARIABLE", "link_choice", "served_folders", "served_name"]

#: the environment variable listing the served folders (``os.pathsep``-separated)
DATA_DIRS_VARIABLE = "GEOVIZ_DATA_DIRS"


def served_folders(env: Mapping[str, str] | None = None) -> tuple[tuple[str, Path], ...]:
    """``(name, folder)`` of every folder in ``$GEOVIZ_DATA_DIRS`` (resolved), in order;
    ``()`` when unset.

    Raises
    ------
    GeovizError
        An entry that is not a folder.
    """
    env = os.environ if env is None else env
    raw = env.get(DATA_DIRS_VARIABLE, "").strip()
    out: dict[str, Path] = {}
    for part in filter(None, (p.strip() for p in raw.split(os.pathsep))):
        folder = Path(part).expanduser().resolve()
        if not folder.is_dir():
            raise GeovizError(f"{DATA_DIRS_VARIABLE} names {part!r}, which is not a folder")
        label = folder.name or "data"
        while label in out:
            label += "_"
        out[label] = folder
    return tuple(out.items())


def served_name(path: str | Path, folders: Sequence[tuple[str, Path]]) -> str | None:
    """The served dataset name (``<folder name>/<path inside>``) of the file or folder
    ``path``, or ``None`` when it lies in none of ``folders``."""
    resolved = Path(path).expanduser().resolve()
    for label, root in folders:
        if resolved != root and resolved.is_relative_to(root):
            return f"{label}/{resolved.relative_to(root).as_posix()}"
    return None


def link_choice(name: str, split: Split = "train") -> DatasetChoice:
    """The dataset a readable link names: a served dataset when ``name`` has a ``/``
    (``<folder name>/<path inside>``, :func:`served_name`), else a registry name. The
    CLI writes links by this rule and the app reads them by it."""
    return DatasetChoice(name, source="server" if "/" in name else "registry", split=split)
