"""The public API's examples run: the docstring examples (``>>>``) of ``geoviz.ot``,
``geoviz.geodesic``, ``geoviz.maps``, ``geoviz.export`` and ``geoviz.atomic`` are doctests,
and their outputs are checked (they are in the fast tier, ``make test-fast``).

Every module of those packages whose source has an example is run by :mod:`doctest` (an
example marked ``# doctest: +SKIP``, e.g. one that trains a network, is shown but not
run; a module whose examples are all skipped fails here, so each module shown has one
that runs). :data:`WITH_EXAMPLES` names the public functions and classes that must keep
an example. The examples run in a temporary folder with an empty disk cache, and with
``ELLIPSIS`` on (``...`` in an expected output matches anything).
"""

from __future__ import annotations

import doctest
import importlib
import io
import pkgutil
from pathlib import Path

import pytest

import geoviz

PACKAGES = ("geoviz.ot", "geoviz.geodesic", "geoviz.maps", "geoviz.export")
MODULES = ("geoviz.atomic",)

#: public names whose docstring must hold an example that runs (``module:qualified name``)
WITH_EXAMPLES = (
    "geoviz.ot.sinkhorn:sinkhorn",
    "geoviz.ot.otdd:otdd",
    "geoviz.ot.labels:gaussian_w2",
    "geoviz.ot.labels:label_distances",
    "geoviz.ot.sliced:sliced_otdd",
    "geoviz.geodesic.weights:check_weights",
    "geoviz.geodesic.weights:project_to_simplex",
    "geoviz.geodesic.weights:SimplexWeights",
    "geoviz.geodesic.distances:objective",
    "geoviz.geodesic.distances:optimal_weights",
    "geoviz.geodesic.interpolate:generalized_geodesic_dataset",
    "geoviz.maps.barycentric:BarycentricMap",
    "geoviz.maps.barycentric:EntropicMap",
    "geoviz.export.dispatch:export_dataset",
    "geoviz.atomic:atomic_write_bytes",
)

_ROOT = Path(geoviz.__file__).resolve().parent


def _module_names() -> list[str]:
    names = list(MODULES)
    for package in PACKAGES:
        folder = _ROOT.joinpath(*package.split(".")[1:])
        names.append(package)
        names += [f"{package}.{m.name}" for m in pkgutil.iter_modules([str(folder)])]
    return sorted(names)


def _source(name: str) -> Path:
    path = _ROOT.joinpath(*name.split(".")[1:])
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


#: the modules whose source shows an example, read without importing them
EXAMPLE_MODULES = [n for n in _module_names() if ">>>" in _source(n).read_text(encoding="utf-8")]


@pytest.fixture
def example_folder(tmp_path, monkeypatch):
    """The examples write files and cache entries here, never in the checkout or the
    user's cache."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


@pytest.mark.filterwarnings("error::geoviz.errors.ConvergenceWarning")
@pytest.mark.parametrize("name", EXAMPLE_MODULES)
def test_examples_run_and_give_the_shown_output(name, example_folder):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    out = io.StringIO()
    for test in finder.find(module, name):
        runner.run(test, out=out.write)
    assert runner.failures == 0, f"{name}: examples that fail\n{out.getvalue()}"
    assert runner.tries > 0, f"{name}: every example is skipped; show one that runs"


@pytest.mark.parametrize("where", WITH_EXAMPLES)
def test_public_name_has_an_example(where):
    module_name, qualname = where.split(":")
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    tests = doctest.DocTestFinder(recurse=False).find(obj, qualname)
    runnable = [e for t in tests for e in t.examples if not e.options.get(doctest.SKIP, False)]
    assert runnable, f"{where}: its docstring has no example that runs"


def test_every_package_is_searched():
    assert set(EXAMPLE_MODULES) >= {w.split(":")[0] for w in WITH_EXAMPLES}
    for package in PACKAGES:
        assert any(n.startswith(f"{package}.") for n in EXAMPLE_MODULES), package
