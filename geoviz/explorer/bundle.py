"""The Jupyter widget's JavaScript: the explorer's ES modules joined into one module.

anywidget loads one ES module (``_esm``) given as a string, so the explorer's modules in
``frontend/`` (``explorer.js`` and the modules it imports; ``frontend/MODULES.md``) are
joined here, at first use, with no build tool and no network:

1. from the entry module (``jupyter.js``, the widget's host) follow every
   ``import { a, b } from "./x.js";`` line (the only import form the modules use: one line,
   at the top, named imports of a sibling module);
2. order the modules so that each comes after the modules it imports (depth first);
3. drop the import lines and the leading ``export`` of each top-level declaration
   (``export function``, ``export const``, ``export class``, ...), and concatenate, the
   entry module last; only the entry keeps its ``export default`` (anywidget's
   ``{ render }``).

Since every module's top-level names end up in one scope, a name declared at the top level
of two modules is refused (:class:`BundleError`), as are a missing module, an imported name
its module does not export, an import cycle and any other ``import``/``export`` form. The
Streamlit host (``streamlit.js``) is not imported by the entry, so it is not bundled.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from geoviz.errors import GeovizError

__all__ = ["ENTRY", "FRONTEND", "BundleError", "Module", "build_bundle", "bundle", "read_module"]

#: the folder of the explorer's JavaScript modules (shipped as package data)
FRONTEND = Path(__file__).resolve().parent / "frontend"
#: the widget's host module, bundled last
ENTRY = "jupyter.js"

_IMPORT = re.compile(
    r"""^import\s*\{(?P<names>[^{}]*)\}\s*from\s*(?P<q>["'])\./(?P<file>[A-Za-z0-9_.-]+\.js)(?P=q)\s*;?\s*$"""
)
_EXPORT_DECL = re.compile(
    r"^export\s+(?=(?:async\s+function\*?|function\*?|const|let|var|class)\s)"
)
_DECL = re.compile(
    r"^(?:export\s+)?(?:async\s+function\*?|function\*?|class)\s+(?P<name>[A-Za-z_$][\w$]*)"
)
_BINDING = re.compile(r"^(?:export\s+)?(?:const|let|var)\s+(?P<rest>.*)$")
_NAME = re.compile(r"[A-Za-z_$][\w$]*")
_COMMENT = re.compile(r"^\s*(//.*)?$")


class BundleError(GeovizError):
    """The explorer's modules cannot be joined into one (a missing module, a name declared
    by two modules, an unsupported import or export, an import cycle)."""


@dataclass(frozen=True)
class Module:
    """One parsed module: its imports ``{file: names}``, exported and top-level names, and
    its body without import lines and ``export`` keywords."""

    file: str
    imports: dict[str, tuple[str, ...]]
    exports: frozenset[str]
    names: frozenset[str]
    body: str


def _binding_names(rest: str) -> list[str]:
    """Names bound by ``const a = ...`` or ``const { a, b: c } = ...`` / ``const [a, b] =``
    (the text after the keyword)."""
    rest = rest.strip()
    if rest[:1] in "{[":
        close = "}" if rest[0] == "{" else "]"
        inner = rest[1 : rest.find(close)] if close in rest else rest[1:]
        targets = (p.split(":")[-1].split("=")[0].strip().lstrip(".") for p in inner.split(","))
        return [t for t in targets if _NAME.fullmatch(t)]
    # `const a = 1, b = 2;`: the name before each top-level comma's declarator
    out: list[str] = []
    piece: list[str] = []
    depth = 0
    for ch in rest:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(piece))
            piece = []
        else:
            piece.append(ch)
    out.append("".join(piece))
    names: list[str] = []
    for declarator in out:
        match = _NAME.match(declarator.strip())
        if match and (declarator is out[0] or "=" in declarator):
            names.append(match.group(0))
    return names


def read_module(path: Path, *, entry: bool = False) -> Module:
    """Parse one module of ``frontend/`` (see the module docstring for the forms allowed).

    Raises
    ------
    BundleError
        The file is missing, or uses an import or export form the bundler does not join.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BundleError(
            f"explorer module {path.name} is missing (looked in {path.parent})"
        ) from None
    imports: dict[str, tuple[str, ...]] = {}
    exports: set[str] = set()
    names: set[str] = set()
    body: list[str] = []
    in_header = True
    for lineno, line in enumerate(text.splitlines(), start=1):
        where = f"{path.name}:{lineno}"
        stripped = line.strip()
        if stripped.startswith("import ") or stripped.startswith("import{") or stripped == "import":
            match = _IMPORT.match(stripped)
            if match is None or not in_header or line != line.lstrip():
                raise BundleError(
                    f"{where}: unsupported import {stripped[:80]!r}: the explorer's modules import "
                    'only as one top line `import { a, b } from "./x.js";`'
                )
            wanted = tuple(n.strip() for n in match["names"].split(",") if n.strip())
            bad = [n for n in wanted if not _NAME.fullmatch(n)]
            if bad:
                raise BundleError(f"{where}: import renames or odd names {bad} are not supported")
            imports[match["file"]] = (*imports.get(match["file"], ()), *wanted)
            continue
        if in_header and not _COMMENT.match(line) and not stripped.startswith(("/*", "*")):
            in_header = False
        if line.startswith("export "):
            if line.startswith("export default"):
                if not entry:
                    raise BundleError(
                        f"{where}: `export default` only in the host module ({ENTRY}), which is last"
                    )
                body.append(line)
                continue
            if not _EXPORT_DECL.match(line):
                raise BundleError(
                    f"{where}: unsupported export {stripped[:80]!r}: use `export function`, "
                    "`export const` or `export class` declarations"
                )
            declared = _declared(line)
            exports.update(declared)
            names.update(declared)
            body.append(_EXPORT_DECL.sub("", line, count=1))
            continue
        names.update(_declared(line))
        body.append(line)
    return Module(path.name, imports, frozenset(exports), frozenset(names), "\n".join(body))


def _declared(line: str) -> list[str]:
    """Top-level names a line at column 0 declares (none for other lines)."""
    match = _DECL.match(line)
    if match:
        return [match["name"]]
    binding = _BINDING.match(line)
    return _binding_names(binding["rest"]) if binding else []


def _ordered(folder: Path, entry: str) -> list[Module]:
    """The modules the entry reaches, each after the ones it imports (the entry last)."""
    modules: dict[str, Module] = {}
    order: list[Module] = []
    state: dict[str, str] = {}

    def visit(file: str, chain: tuple[str, ...]) -> None:
        if state.get(file) == "done":
            return
        if state.get(file) == "open":
            raise BundleError(f"import cycle: {' -> '.join((*chain, file))}")
        state[file] = "open"
        module = read_module(folder / file, entry=file == entry)
        modules[file] = module
        for dep, wanted in module.imports.items():
            if not (folder / dep).is_file():
                raise BundleError(
                    f"{file} imports from ./{dep}, which does not exist in {folder.name}/"
                )
            visit(dep, (*chain, file))
            missing = sorted(set(wanted) - modules[dep].exports)
            if missing:
                raise BundleError(
                    f"{file} imports {missing} from ./{dep}, which does not export them"
                )
        state[file] = "done"
        order.append(module)

    visit(entry, ())
    return order


def module_files(folder: Path = FRONTEND, entry: str = ENTRY) -> list[str]:
    """The files ``entry`` reaches, each after the ones it imports (``entry`` last): what a
    page preloads (``<link rel="modulepreload">``) so that the browser fetches them all at
    once instead of one import level after another."""
    return [module.file for module in _ordered(folder, entry)]


def build_bundle(folder: Path = FRONTEND, entry: str = ENTRY) -> str:
    """Join the modules ``entry`` reaches in ``folder`` into one ES module (not cached).

    Raises
    ------
    BundleError
        A missing module or imported name, a top-level name declared by two modules, an
        import cycle, or an import/export form other than the ones described above.
    """
    modules = _ordered(Path(folder), entry)
    seen: dict[str, str] = {}
    for module in modules:
        for name in sorted(module.names):
            if name in seen:
                raise BundleError(
                    f"top-level name {name!r} is declared in both {seen[name]} and {module.file}: "
                    "bundled modules share one scope, rename one of them"
                )
            seen[name] = module.file
    parts = [
        "// geoviz explorer: ES modules of geoviz/explorer/frontend joined by "
        "geoviz.explorer.bundle (do not edit)"
    ]
    for module in modules:
        parts.append(f"// ---- {module.file}\n{module.body.strip()}\n")
    return "\n".join(parts)


@functools.lru_cache(maxsize=4)
def bundle(folder: Path = FRONTEND, entry: str = ENTRY) -> str:
    """:func:`build_bundle`, built once per process (the widget's ``_esm``)."""
    return build_bundle(folder, entry)
