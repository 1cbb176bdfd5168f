"""``geoviz --help`` and every command's ``--help`` import no torch (issue 36).

The parsers are built from :mod:`geoviz.vocabulary` and light modules; each command
imports the library it runs when it runs. Each check starts a fresh interpreter, runs
``python -m geoviz ... --help`` in it (:mod:`runpy`) and lists the heavy modules loaded.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: modules the parser must not load (torch and the heavy optional stacks)
HEAVY = ("torch", "sklearn", "ot", "umap", "pandas", "scipy", "ray")

#: every command of ``geoviz`` (the parser's own list is compared below)
COMMANDS = ("datasets", "show", "transfer", "distance", "project", "grid", "screen", "app")

#: the modules a command imports when it runs (they import the library, torch included): each
#: ``*_run`` module once, lazily, by its command's handler (``geodesic_run`` by the handlers of
#: ``distance``, ``project`` and ``grid``, one each); the checks and report modules that import
#: the library by their run, at its top
RUN_MODULES = (
    "transfer_run",
    "transfer_checks",
    "screen_run",
    "geodesic_run",
    "geodesic_checks",
    "geodesic_report",
)

_PROBE = """
import json, runpy, sys
argv, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sys.argv = ["geoviz", *argv]
try:
    runpy.run_module("geoviz", run_name="__main__", alter_sys=True)
except SystemExit as exit:
    status = exit.code
else:
    status = None
loaded = sorted(m for m in heavy if m in sys.modules)
print(json.dumps({"status": status, "heavy": loaded}), file=sys.stderr)
"""


def _help_run(argv: list[str]) -> tuple[dict[str, object], str]:
    """Run ``python -m geoviz *argv`` in a fresh interpreter: (status and the modules of
    :data:`HEAVY` and :data:`RUN_MODULES` loaded, stdout)."""
    loaded = [*HEAVY, *(f"geoviz.cli.{name}" for name in RUN_MODULES)]
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv), json.dumps(loaded)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report, done.stdout


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_imports_no_torch(command: str | None) -> None:
    argv = ["--help"] if command is None else [command, "--help"]
    report, out = _help_run(argv)
    assert report == {"status": 0, "heavy": []}, (argv, report)
    assert out.startswith("usage: geoviz"), out[:200]


def test_the_version_imports_no_torch() -> None:
    report, out = _help_run(["--version"])
    assert report == {"status": 0, "heavy": []} and out.startswith("geoviz ")


def test_every_command_is_checked() -> None:
    from geoviz.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    assert set(subparsers.choices) == set(COMMANDS)


def test_format_choices_are_the_registry_s() -> None:
    """``--format`` accepts every registered format and lists the built-in ones first."""
    from geoviz.cli.args import ExportFormatChoices
    from geoviz.export import export_formats
    from geoviz.vocabulary import EXPORT_FORMATS

    choices = ExportFormatChoices()
    assert tuple(choices) == export_formats()
    assert tuple(choices)[: len(EXPORT_FORMATS)] == EXPORT_FORMATS
    assert all(name in choices for name in export_formats())
    assert "gif" not in choices and None not in choices


# --------------------------------------------------------------------------- issue 44 item 4

CLI = ROOT / "geoviz" / "cli"


def _tree(name: str) -> ast.Module:
    return ast.parse((CLI / f"{name}.py").read_text(encoding="utf-8"))


def _imported_modules(node: ast.AST) -> list[str]:
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Import):
            out += [alias.name for alias in sub.names]
        elif isinstance(sub, ast.ImportFrom) and sub.module:
            out.append(sub.module)
    return out


def _lazy_imports(tree: ast.Module) -> list[str]:
    """The modules imported in the function bodies of ``tree``."""
    return [
        module
        for function in ast.walk(tree)
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
        for module in _imported_modules(function)
    ]


def test_the_light_cli_modules_import_no_heavy_module() -> None:
    """Every module of ``geoviz/cli/`` but :data:`RUN_MODULES`, imported in a fresh
    interpreter, loads none of :data:`HEAVY`: their geoviz imports are at the top."""
    light = sorted(
        f"geoviz.cli.{p.stem}"
        for p in CLI.glob("*.py")
        if p.stem != "__init__" and p.stem not in RUN_MODULES
    )
    assert "geoviz.cli.geodesic" in light and "geoviz.cli.args" in light
    probe = (
        "import importlib, json, sys\n"
        f"for name in {light!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in {list(HEAVY)!r} if m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_commands_are_registered_by_plain_imports() -> None:
    """No ``importlib`` or ``__import__`` in the CLI: its imports are all visible."""
    for path in sorted(CLI.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert "importlib" not in _imported_modules(tree), path.name
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        assert "__import__" not in names, path.name


def test_each_run_module_is_imported_once_by_its_command() -> None:
    """A ``*_run`` module imports the library at its top and nothing in a function body; it
    is imported in one place only, the body of its command's handler."""
    sites: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(CLI.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = [
            module
            for node in tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom))  # TYPE_CHECKING: types only
            for module in _imported_modules(node)
        ]
        if path.stem not in RUN_MODULES:
            run = [m for m in top if m.removeprefix("geoviz.cli.") in RUN_MODULES]
            assert not run, f"{path.name} imports {run} at its top"
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for module in _imported_modules(function):
                    sites.setdefault(module, []).append((path.stem, function.name))
    for name in RUN_MODULES:
        lazy = _lazy_imports(_tree(name))
        assert not lazy, f"{name} imports in a function body: {lazy}"
    assert sites["geoviz.cli.transfer_run"] == [("transfer", "_cmd_transfer")]
    assert sites["geoviz.cli.screen_run"] == [("screen", "_cmd_screen")]
    assert sites["geoviz.cli.geodesic_run"] == [
        ("geodesic", "_cmd_distance"),
        ("geodesic", "_cmd_project"),
        ("geodesic", "_cmd_grid"),
    ]
    # at the top of their run module only (no light module imports a run module at its top)
    for name in ("transfer_checks", "geodesic_checks", "geodesic_report"):
        assert f"geoviz.cli.{name}" not in sites, name


def test_the_geodesic_commands_import_only_their_run_module_when_they_run() -> None:
    """``distance``, ``project`` and ``grid``: no library import in a function body of their
    modules but the handlers' one import of ``geodesic_run`` (22 before issue 44 item 4)."""
    for path in sorted(CLI.glob("geodesic*.py")):
        lazy = set(_lazy_imports(ast.parse(path.read_text(encoding="utf-8"))))
        allowed = {"geoviz.cli.geodesic_run"} if path.stem == "geodesic" else set()
        assert lazy == allowed, (path.name, lazy)


def test_the_common_options_have_one_declaration() -> None:
    """``--features``, ``--n``, ``--size`` and ``--seed`` are declared only by their
    ``add_*_option`` of :mod:`geoviz.cli.args` (with the command's default and help)."""
    common = {"--features", "--n", "--size", "--seed"}
    for path in sorted(CLI.glob("*.py")):
        for call in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "add_argument"
                and call.args
                and isinstance(call.args[0], ast.Constant)
                and call.args[0].value in common
            ):
                assert path.name == "args.py", (path.name, call.args[0].value, call.lineno)
