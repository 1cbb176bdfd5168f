"""The declaration of the fast tier (``tests/conftest.py``) names files and tests that exist:
a renamed file or test fails here instead of silently leaving (or joining) the tier."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import FAST_FILES, SLOW_TESTS, fast_key

TESTS = Path(__file__).resolve().parent


def _test_functions(path: Path) -> set[str]:
    """The ``test_*`` functions of a test file, at module level or in a class."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name.startswith("test_")
    }


@pytest.mark.parametrize("name", sorted(FAST_FILES))
def test_every_fast_file_exists(name):
    assert (TESTS / name).is_file(), f"FAST_FILES names {name}, which is not in tests/"


@pytest.mark.parametrize("key", sorted(SLOW_TESTS))
def test_every_slow_exception_names_a_test_of_a_fast_file(key):
    name, function = key.split("::")
    assert name in FAST_FILES, f"SLOW_TESTS: {name} is not in FAST_FILES, so {key} is not needed"
    assert function in _test_functions(TESTS / name), f"SLOW_TESTS: {key} is not a test"


def test_this_file_is_in_the_fast_tier(request):
    assert request.node.get_closest_marker("fast") is not None
    assert fast_key(request.node) == "test_fast_tier.py::test_this_file_is_in_the_fast_tier"
