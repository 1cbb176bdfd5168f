"""One import path per public name (issue 44 item 1).

Code and tests import each name from the module that defines it. A module that is not a
package's ``__init__.py`` offers no name defined elsewhere: none in its ``__all__``, and
no import that it does not read itself (a compatibility re-export). A package that wants
one face has it in its ``__init__.py`` (over private ``_x.py`` modules, as in POT).

An alias made by assignment is a second face too: a module-level ``_x = y`` (``y`` imported
from geoviz) or ``_x = module.y`` (``module`` imported from geoviz) offers a name defined
elsewhere under a name of its own (:func:`aliases`).

Read from the source with ``ast`` (nothing is imported). No module is exempt: 19 modules
re-exported 132 names before issue 44, and the 8 assignment aliases found when that check
was added are deleted.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(p for p in (ROOT / "geoviz").rglob("*.py") if p.name != "__init__.py")

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _dunder_all(tree: ast.Module) -> set[str]:
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            value = node.value
            if isinstance(value, (ast.List, ast.Tuple)):
                return {e.value for e in value.elts if isinstance(e, ast.Constant)}
    return set()


def _imported(tree: ast.Module) -> dict[str, int]:
    """Names bound by ``from x import y`` at module top (``if`` blocks too): name -> line."""
    out: dict[str, int] = {}
    for node in tree.body:
        nodes = [node]
        if isinstance(node, ast.If):
            nodes = [*node.body, *node.orelse]
        for sub in nodes:
            if isinstance(sub, ast.ImportFrom) and sub.module != "__future__":
                for alias in sub.names:
                    out[alias.asname or alias.name] = sub.lineno
    return out


def _read(tree: ast.Module) -> set[str]:
    """Names the module reads: loaded names, and words in strings (quoted annotations)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.update(_WORD.findall(node.value))
    return out


def offered_elsewhere(path: Path) -> list[str]:
    """The names ``path`` offers that are defined in another module, sorted."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = _imported(tree)
    exported = _dunder_all(tree)
    # a docstring or __all__ string is no reader; strings elsewhere (annotations) are
    body = [n for n in tree.body if not _is_all_or_docstring(n)]
    read = _read(ast.Module(body=body, type_ignores=[]))
    return sorted(n for n in imported if n in exported or n not in read)


def _is_all_or_docstring(node: ast.stmt) -> bool:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return True
    targets = node.targets if isinstance(node, ast.Assign) else []
    return any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """The module's statements, those of its top-level ``if`` blocks included."""
    out: list[ast.stmt] = []
    for node in tree.body:
        out += [*node.body, *node.orelse] if isinstance(node, ast.If) else [node]
    return out


def _geoviz_imports(tree: ast.Module) -> set[str]:
    """Names bound at module top by an import of geoviz (``from geoviz.x import y``,
    ``from geoviz import x``, ``import geoviz.x as y``, relative imports)."""
    out: set[str] = set()
    for node in _top_level(tree):
        if isinstance(node, ast.ImportFrom) and (
            node.level > 0 or (node.module or "").split(".")[0] == "geoviz"
        ):
            out.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            out.update(
                alias.asname or alias.name.split(".")[0]
                for alias in node.names
                if alias.name.split(".")[0] == "geoviz"
            )
    return out


def aliases(path: Path) -> list[str]:
    """The module-level names ``path`` binds by assignment to a geoviz name defined
    elsewhere (``x = y`` with ``y`` imported, ``x = module.y`` with ``module`` imported), sorted."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = _geoviz_imports(tree)
    out = []
    for node in _top_level(tree):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        root = value
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in imported:
            out += [t.id for t in targets if isinstance(t, ast.Name)]
    return sorted(out)


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_module_but_a_package_face_offers_a_name_defined_elsewhere():
    offending = {_rel(p): names for p in MODULES if (names := offered_elsewhere(p))}
    assert not offending, (
        "import these names from the module that defines them and delete the re-export: "
        f"{offending}"
    )


def test_no_module_aliases_a_name_defined_elsewhere():
    """``_old = new`` or ``NAME = module.NAME`` keeps a second name for one value: readers
    import the name from the module that defines it."""
    offending = {_rel(p): extra for p in MODULES if (extra := sorted(aliases(p)))}
    assert not offending, (
        f"import these names from the module that defines them and delete the alias: {offending}"
    )


def test_the_alias_check_sees_both_forms(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text(
        "from geoviz import limits\n"
        "from geoviz.cli.output import progress_callback as progress\n"
        "from numpy import pi\n"
        "_progress = progress\n"
        "MAX: int = limits.MAX_SAMPLES\n"
        "TAU = 2 * pi\n"
        "ROUND = pi\n"
        "NAMES = limits.names()\n",
        encoding="utf-8",
    )
    assert aliases(module) == ["MAX", "_progress"]
