"""The import layers hold, from the bottom up (a module imports only its own layer or lower):

    errors, glossary, geoviz (the package face) -> limits, memory, atomic -> backend
    -> data -> ot -> nn -> maps -> geodesic -> transfer -> export -> viz
    -> the CLIs (geoviz/cli/, geoviz/__main__.py, geoviz/*/cli.py) -> app -> pages

and inside the app: pages -> geoviz.app.widgets -> services -> state -> library.
Imports in function bodies count like those at module top; ``if TYPE_CHECKING``
imports too. Lazy imports (in function bodies) are for optional third-party dependencies
only, in the library as in the app: everything else is imported at module top. Read from the source with ``ast`` (nothing is imported), so a new
import that breaks a layer fails here with the file and the module it imported.

No import cycle either, inside a layer too (module top, function bodies and
``if TYPE_CHECKING`` all count): what two modules share lives in a third below both. The
one exception is the front door ``GeodesicResult.explore`` (:data:`FRONT_DOORS`).
"""

from __future__ import annotations

import ast
import itertools
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
STATE = {
    "scenario.py",
    "settings.py",
    "links.py",
    "session.py",
    "jobs.py",
    "browser.py",
}
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


#: Rank of every layer (a module may import modules of its own rank or lower).
LAYER_RANKS: dict[str, int] = {
    "geoviz": 0,  # the package face (its version)
    "geoviz.errors": 0,
    "geoviz.glossary": 0,
    "geoviz.vocabulary": 0,
    "geoviz.site": 0,  # where the app and assets are: standard library only
    "geoviz.limits": 1,
    "geoviz.memory": 1,
    "geoviz.atomic": 1,
    "geoviz.files": 1,
    "geoviz.backend": 2,
    "geoviz.tasks": 2,
    "geoviz.isolation": 2,
    "geoviz.data": 3,
    "geoviz.ot": 4,
    "geoviz.nn": 5,
    "geoviz.features": 6,
    "geoviz.maps": 6,
    "geoviz.geodesic": 7,
    "geoviz.transfer": 8,
    "geoviz.export": 9,
    "geoviz.viz": 10,
    "geoviz.explorer": 10,  # the live explorer outside any host: payload, JS, the Jupyter widget
    "cli": 11,
    "geoviz.app": 12,
    "pages": 13,
}

#: Known edges that break the order (none left). An exception added here must be removed
#: again: a listed edge that no longer exists fails the test, so this list only shrinks.
KNOWN_UPWARD_EDGES: set[tuple[str, str]] = set()

#: Imports of another layer inside a function body, outside the app and the CLIs (lazy
#: imports are for optional third-party dependencies only); none left, same rule as above.
KNOWN_LAZY_CROSS_LAYER: set[tuple[str, str]] = set()

#: Front doors: a result object's method that opens a view of a higher layer, imported in
#: the method's body (and under ``if TYPE_CHECKING`` for its annotation), as pandas'
#: ``DataFrame.plot`` opens matplotlib. A design decision, not a debt: the edge is allowed
#: upward and lazily, only from this file to this module (``GeodesicResult.explore()``
#: returns the Jupyter widget), and it must exist; nothing else is allowed.
FRONT_DOORS: set[tuple[str, str]] = {("geoviz/geodesic/result.py", "geoviz.explorer.widget")}


def _layer_of_module(module: str) -> str | None:
    """The :data:`LAYER_RANKS` key of an imported ``geoviz`` module (``None``: not geoviz)."""
    parts = module.split(".")
    if parts[0] != "geoviz":
        return None
    if parts[-1] in ("cli", "__main__") or parts[1:2] == ["cli"]:  # geoviz/cli/*.py
        return "cli"
    return "geoviz" if len(parts) == 1 else ".".join(parts[:2])


def _layer_of_file(path: Path) -> str:
    rel = path.relative_to(ROOT)
    if rel.parts[0] == "pages" or rel == Path("app.py"):
        return "pages"
    module = ".".join(rel.with_suffix("").parts)
    layer = _layer_of_module(module.removesuffix(".__init__"))
    assert layer is not None and layer in LAYER_RANKS, f"{rel} has no layer in LAYER_RANKS"
    return layer


def _geoviz_imports(path: Path, *, in_functions_only: bool = False) -> set[str]:
    """The ``geoviz`` modules ``path`` imports (``from geoviz.x import y``: ``geoviz.x``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    scopes: list[ast.AST] = [tree]
    if in_functions_only:
        scopes = [
            n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]
    out: set[str] = set()
    for scope in scopes:
        for node in ast.walk(scope):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name.split(".")[0] == "geoviz")
            elif (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.level == 0
                and node.module.split(".")[0] == "geoviz"
            ):
                out.add(node.module)
    return out


SOURCES = sorted(p for p in (ROOT / "geoviz").rglob("*.py") if "frontend" not in p.parts)


def _upward_edges() -> set[tuple[str, str]]:
    edges = set()
    for path in [*SOURCES, *PAGES]:
        rank = LAYER_RANKS[_layer_of_file(path)]
        for module in _geoviz_imports(path):
            layer = _layer_of_module(module)
            if layer is not None and LAYER_RANKS[layer] > rank:
                edges.add((str(path.relative_to(ROOT)), module))
    return edges


def test_every_layer_imports_only_its_own_or_lower_layers():
    edges = _upward_edges() - FRONT_DOORS
    new = sorted(edges - KNOWN_UPWARD_EDGES)
    assert not new, f"imports of a higher layer (file, module): {new}"
    gone = sorted(KNOWN_UPWARD_EDGES - edges)
    assert not gone, f"fixed, remove from KNOWN_UPWARD_EDGES: {gone}"


def test_front_doors_exist_and_are_the_only_exceptions():
    """Each front door is an upward edge and a lazy import in a function body of its file
    (a listed edge that went away fails), and the explorer stays the only one."""
    upward = _upward_edges()
    for file, module in FRONT_DOORS:
        assert (file, module) in upward, f"front door {file} -> {module} no longer exists"
        lazy = _geoviz_imports(ROOT / file, in_functions_only=True)
        assert module in lazy, f"{file} must import {module} in a method body, not at the top"
        tree = ast.parse((ROOT / file).read_text(encoding="utf-8"))
        top = {
            node.module
            for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.module is not None
        }
        assert module not in top, f"{file} imports {module} at module top"
    assert {module for _, module in FRONT_DOORS} == {"geoviz.explorer.widget"}


def test_the_rule_catches_an_upward_import(tmp_path):
    """The check itself: nn importing maps (in a function body) is an upward edge."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from geoviz.maps.neural import NeuralOTDDMap\n")
    (module,) = _geoviz_imports(bad, in_functions_only=True)
    assert LAYER_RANKS[_layer_of_module(module)] > LAYER_RANKS["geoviz.nn"]
    assert _layer_of_module("geoviz.transfer.cli") == "cli"
    assert _layer_of_module("geoviz.cli.args") == "cli"
    assert _layer_of_file(ROOT / "geoviz" / "cli" / "geodesic.py") == "cli"
    assert _layer_of_file(ROOT / "geoviz" / "nn" / "training.py") == "geoviz.nn"


def test_no_lazy_imports_across_layers_outside_the_app_and_the_clis():
    found = set()
    for path in SOURCES:
        layer = _layer_of_file(path)
        if layer in ("cli", "geoviz.app"):
            continue
        for module in _geoviz_imports(path, in_functions_only=True):
            if _layer_of_module(module) != layer:
                found.add((str(path.relative_to(ROOT)), module))
    new = sorted(found - KNOWN_LAZY_CROSS_LAYER - FRONT_DOORS)
    assert not new, f"import these at module top (or fix the layering): {new}"
    gone = sorted(KNOWN_LAZY_CROSS_LAYER - found)
    assert not gone, f"fixed, remove from KNOWN_LAZY_CROSS_LAYER: {gone}"


#: Optional third-party dependencies (pyproject extras, or degraded without): the only
#: imports the app may keep in a function body, so that it starts without them.
OPTIONAL_DEPENDENCIES = frozenset({"ray", "torchvision", "umap"})


def _function_body_imports(path: Path) -> set[tuple[int, str]]:
    """``(line, module)`` of every import inside a function body of ``path`` (relative
    imports as ``.module``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[tuple[int, str]] = set()
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Import):
                out.update((node.lineno, alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                out.add((node.lineno, "." * node.level + (node.module or "")))
    return out


def _non_optional_lazy_imports(path: Path) -> list[tuple[int, str]]:
    return sorted(
        (line, module)
        for line, module in _function_body_imports(path)
        if module.split(".")[0] not in OPTIONAL_DEPENDENCIES
    )


@pytest.mark.parametrize("path", APP, ids=lambda p: str(p.relative_to(ROOT / "geoviz" / "app")))
def test_the_app_imports_at_module_top_except_optional_dependencies(path):
    """No import of geoviz (nor of any required module) in an app function body: tools
    (import graphs, the layer tests above, mypy) see every dependency of the app."""
    lazy = _non_optional_lazy_imports(path)
    assert not lazy, f"{path.relative_to(ROOT)}: import at module top (line, module): {lazy}"


def test_the_lazy_import_rule_catches_a_geoviz_import_and_allows_optional_ones(tmp_path):
    """The check itself: a geoviz, relative or stdlib import in a function body is
    reported (also nested in a method); ``ray`` and ``umap`` are not."""
    source = tmp_path / "services.py"
    source.write_text(
        "import numpy as np\n"
        "def f():\n"
        "    import ray\n"
        "    from umap import UMAP\n"
        "    from geoviz.data.formats import load_path\n"
        "class C:\n"
        "    def g(self):\n"
        "        from . import state\n"
        "        import math\n"
    )
    assert _non_optional_lazy_imports(source) == [
        (5, "geoviz.data.formats"),
        (8, "."),
        (9, "math"),
    ]


def _hits(path: Path, prefix: str) -> list[str]:
    return sorted(m for m in _imports(path) if m == prefix or m.startswith(prefix + "."))


def test_the_files_exist():
    assert len(LIBRARY) > 30 and len(APP) == 24 and len(PAGES) == 8


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
        assert not _hits(path, "geoviz.app.widgets") and not _hits(path, "geoviz.app.explorer_host")


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


# --------------------------------------------------------------------------- cycles
#
# No import cycle among geoviz's modules (issue 44). An edge ``a -> b`` is any import of
# module ``b`` by module ``a``: at module top, in a function body (it runs when the
# function does, and then closes the cycle) and under ``if TYPE_CHECKING`` (mypy and
# readers follow it: a cycle there is a cycle of meaning). ``from pkg import sub`` of a
# submodule is an edge to ``pkg.sub`` only: the package ``pkg`` is imported first by Python
# itself (its ``__init__`` importing its own submodules is no cycle); ``from pkg import
# name`` of anything else is an edge to ``pkg``. The one exception is the front door in
# :data:`FRONT_DOORS` (``GeodesicResult.explore`` imports the explorer in its body).


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(root: Path, paths: list[Path]) -> dict[str, set[str]]:
    """``module -> the modules of ``paths`` it imports`` (anywhere in the file)."""
    names = {_module_name(p, root): p for p in paths}
    graph: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base_parts = package[: len(package) - node.level + 1] if node.level else []
                base = ".".join([*base_parts, *([node.module] if node.module else [])])
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in names]
                targets = subs + ([base] if len(subs) < len(node.names) else [])
            else:
                continue
            graph[name].update(t for t in targets if t in names and t != name)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), each as one cycle
    through its first module (sorted)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for component in components:
        start = min(component)
        # the shortest way back to start inside the component (breadth first)
        paths = {start: [start]}
        queue = [start]
        cycle: list[str] = []
        while queue and not cycle:
            v = queue.pop(0)
            for w in sorted(graph[v] & component):
                if w == start:
                    cycle = [*paths[v], start]
                    break
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    queue.append(w)
        out.append(cycle)
    return sorted(out)


def _geoviz_graph() -> dict[str, set[str]]:
    graph = _import_graph(ROOT, SOURCES)
    for file, module in FRONT_DOORS:
        graph[_module_name(ROOT / file, ROOT)].discard(module)
    return graph


def test_no_import_cycles_among_geoviz_modules():
    cycles = _cycles(_geoviz_graph())
    assert not cycles, "import cycles (move what both sides share below them): " + "; ".join(
        " -> ".join(cycle) for cycle in cycles
    )


def test_the_front_door_is_a_real_cycle():
    """Without its exception the explorer's front door closes a cycle (it is a door up:
    ``geoviz.explorer`` reads the geodesic's result); with it, none is left (above)."""
    cycles = _cycles(_import_graph(ROOT, SOURCES))
    door = ("geoviz.geodesic.result", "geoviz.explorer.widget")
    assert cycles and all(door in set(itertools.pairwise(cycle)) for cycle in cycles), cycles


def test_the_cycle_check_sees_lazy_type_checking_and_relative_imports(tmp_path):
    """The check itself: a cycle closed in a function body, under ``TYPE_CHECKING`` or by
    a relative import is found; a package importing its own submodule (which imports a
    sibling) is not a cycle."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg.a import f\n")
    (pkg / "a.py").write_text("def f():\n    from pkg.b import g\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import h\n"
    )
    (pkg / "c.py").write_text("from pkg import a\n")
    (pkg / "d.py").write_text("from pkg import c\n")
    paths = sorted(pkg.glob("*.py"))
    graph = _import_graph(tmp_path, paths)
    assert graph["pkg.c"] == {"pkg.a"} and graph["pkg.d"] == {"pkg.c"}
    assert _cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]
    (pkg / "c.py").write_text("from pkg import f\n")  # the package face: a cycle through it
    assert _cycles(_import_graph(tmp_path, paths)) == [["pkg", "pkg.a", "pkg.b", "pkg.c", "pkg"]]
