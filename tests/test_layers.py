"""The import layers hold: pages -> geoviz.app.widgets -> services -> state -> library.

Read from the source with ``ast`` (nothing is imported), so a new import that
breaks a layer fails here with the file and the module it imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = sorted(
    p
    for p in (ROOT / "geoviz").rglob("*.py")
    if "app" not in p.relative_to(ROOT / "geoviz").parts[:1]
)
APP = sorted(p for p in (ROOT / "geoviz" / "app").rglob("*.py") if "frontend" not in p.parts)
#: the app's state (no services, no widgets) and its services (no widgets)
STATE = {"state.py", "scenario.py", "settings.py", "links.py", "session.py", "jobs.py"}
PAGES = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def _hits(path: Path, prefix: str) -> list[str]:
    return sorted(m for m in _imports(path) if m == prefix or m.startswith(prefix + "."))


def test_the_files_exist():
    assert len(LIBRARY) > 30 and len(APP) == 21 and len(PAGES) == 8


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(ROOT)))
def test_library_never_imports_the_app_or_streamlit(path):
    assert not _hits(path, "geoviz.app"), path
    assert not _hits(path, "streamlit"), path


@pytest.mark.parametrize("path", APP, ids=lambda p: str(p.relative_to(ROOT / "geoviz" / "app")))
def test_only_widgets_import_streamlit_and_state_imports_no_services(path):
    if path.name not in ("widgets.py", "component.py"):  # the Streamlit parts
        assert not _hits(path, "streamlit"), path
    if path.parent.name == "app" and path.name in STATE:
        assert not _hits(path, "geoviz.app.services") and not _hits(path, "geoviz.app.widgets")
    if path.parent.name == "services":
        assert not _hits(path, "geoviz.app.widgets") and not _hits(path, "geoviz.app.explorer")


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_pages_use_the_app_services_not_the_solvers(path):
    """Pages lay out widgets: no solver, pipeline, export writer or embedding fit of their own."""
    used = _imports(path)
    assert "geoviz.app.widgets" in used or "geoviz.app" in used, path
    forbidden = (
        "geoviz.ot.sinkhorn",
        "geoviz.ot.otdd.otdd",
        "geoviz.geodesic.pipeline",
        "geoviz.geodesic.mixup",
        "geoviz.export.export_dataset",
        "geoviz.export.export_bytes",
        "geoviz.viz.embedding",
        "geoviz.data.registry.load_dataset",
        "geoviz.app_compute",
        "geoviz.app_state",
    )
    bad = sorted(m for m in used for f in forbidden if m == f or m.startswith(f + "."))
    assert not bad, f"{path.name} imports {bad}: call geoviz.app.services instead"
