"""One import path per public name (issue 44 item 1).

Code and tests import each name from the module that defines it. A module that is not a
package's ``__init__.py`` offers no name defined elsewhere: none in its ``__all__``, and
no import that it does not read itself (a compatibility re-export). A package that wants
one face has it in its ``__init__.py`` (over private ``_x.py`` modules, as in POT).

Read from the source with ``ast`` (nothing is imported). :data:`NOT_YET_CLEAN` lists the
modules that still offer names defined elsewhere; it only shrinks.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(p for p in (ROOT / "geoviz").rglob("*.py") if p.name != "__init__.py")

#: Modules (relative to the repository root) that still re-export names defined elsewhere,
#: to be cleaned; none remain (19 before issue 44). The set only shrinks: a module that offers
#: a name defined elsewhere fails the test above, and is fixed, not listed here.
NOT_YET_CLEAN: frozenset[str] = frozenset()

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


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_module_but_a_package_face_offers_a_name_defined_elsewhere():
    offending = {
        _rel(p): names
        for p in MODULES
        if _rel(p) not in NOT_YET_CLEAN and (names := offered_elsewhere(p))
    }
    assert not offending, (
        "import these names from the module that defines them and delete the re-export: "
        f"{offending}"
    )


def test_the_allow_list_names_only_modules_that_still_re_export():
    """A module cleaned leaves :data:`NOT_YET_CLEAN` (the list only shrinks)."""
    rels = {_rel(p) for p in MODULES}
    assert not NOT_YET_CLEAN - rels, NOT_YET_CLEAN - rels
    clean = sorted(m for m in NOT_YET_CLEAN if not offered_elsewhere(ROOT / m))
    assert not clean, f"clean now, remove from NOT_YET_CLEAN: {clean}"
