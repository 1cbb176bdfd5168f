"""``geoviz --help`` and every command's ``--help`` import no torch (issue 36).

The parsers are built from :mod:`geoviz.vocabulary` and light modules; each command
imports the library it runs when it runs. Each check starts a fresh interpreter, runs
``python -m geoviz ... --help`` in it (:mod:`runpy`) and lists the heavy modules loaded.
"""

from __future__ import annotations

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
    """Run ``python -m geoviz *argv`` in a fresh interpreter: (status and heavy modules, stdout)."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv), json.dumps(HEAVY)],
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
