"""geoviz.glossary: every code name exists, labels are used, the docs carry the current table."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from pathlib import Path
from typing import Any

import pytest

from geoviz import glossary
from geoviz.glossary import GLOSSARY, markdown_table

ROOT = Path(__file__).resolve().parents[1]
ALL_CODE_NAMES = [name for entry in GLOSSARY for name in entry.code]


def _resolve(dotted: str) -> Any:
    """Import the longest module prefix of ``dotted``, then getattr the rest.

    A field of a dataclass without a default is not a class attribute; it
    counts when it is one of the class's :func:`dataclasses.fields`.
    """
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        module_name = ".".join(parts[:k])
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name is not None and module_name.startswith(err.name):
                continue
            raise
        break
    else:
        raise LookupError(f"no importable module in {dotted!r}")
    for attr in parts[k:]:
        if hasattr(obj, attr):
            obj = getattr(obj, attr)
        elif dataclasses.is_dataclass(obj) and attr in {f.name for f in dataclasses.fields(obj)}:
            obj = next(f for f in dataclasses.fields(obj) if f.name == attr)
        else:
            raise LookupError(f"{dotted!r}: {obj!r} has no attribute {attr!r}")
    return obj


@pytest.mark.parametrize("name", ALL_CODE_NAMES)
def test_every_code_name_in_the_glossary_exists(name):
    assert name.startswith("geoviz.")
    _resolve(name)


@pytest.mark.parametrize(
    "name",
    [
        "geoviz.geodesic.result.GeodesicResult.w2q",  # a renamed attribute
        "geoviz.geodesic.weights.project_simplex",  # a renamed function
        "geoviz.viz.compare.naive_mixup",
        "geoviz.geodesic.no_such_module.objective",  # a moved module
    ],
)
def test_the_resolver_rejects_names_that_do_not_exist(name):
    with pytest.raises(LookupError):
        _resolve(name)


def test_dataclass_fields_resolve_to_fields():
    # w_to_target is now a property of GeodesicResult (read off its distances): a_hat is a field
    field = _resolve("geoviz.geodesic.result.GeodesicResult.a_hat")
    assert isinstance(field, dataclasses.Field) and field.name == "a_hat"
    assert callable(_resolve("geoviz.geodesic.mixup.mixup_interpolation"))


def test_entries_are_complete_and_unique():
    for entry in GLOSSARY:
        assert entry.symbol and entry.text and entry.ascii and entry.meaning and entry.code
    for attr in ("symbol", "text", "ascii"):
        values = [getattr(entry, attr) for entry in GLOSSARY]
        assert len(set(values)) == len(values), attr
    names = [n for n in glossary.__all__ if n.isupper() and n != "GLOSSARY"]
    texts = {entry.text for entry in GLOSSARY}
    # every label constant is the label of an entry, except the bare symbol W_SYMBOL and
    # the short OTDD label, which are prefixes of entries' labels
    for name in names:
        value = getattr(glossary, name)
        assert value in texts or any(t.startswith(value) for t in texts), name


def test_w_spellings():
    """W_i / W_ij: one label each, and the short docstring forms."""
    by_code = {name: entry for entry in GLOSSARY for name in entry.code}
    w_i = by_code["geoviz.geodesic.result.GeodesicResult.w_to_target"]
    w_ij = by_code["geoviz.geodesic.result.GeodesicResult.w_between"]
    assert w_i.text == glossary.W_TARGET == "W²₂,Q(P_i, Q)"
    assert w_ij.text == glossary.W_BETWEEN == "W²₂,Q(P_i, P_j)"
    assert w_i.ascii.startswith("W_i = ") and w_ij.ascii.startswith("W_ij = ")
    assert glossary.W_TARGET.startswith(glossary.W_SYMBOL)


def test_figures_use_the_glossary_labels():
    from geoviz.viz import plots

    default = inspect.signature(plots.otdd_heatmap).parameters["value_label"].default
    assert default == glossary.OTDD_SHORT


@pytest.mark.parametrize("doc", ["README.md", "docs/architecture.md"])
def test_docs_carry_the_current_table(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert "## Glossary" in text
    assert markdown_table() in text, f"regenerate the Glossary table of {doc}"


def test_no_stray_w_spellings_in_the_package_and_docs():
    stray = ("W2Q", "W2_Q", "W^2_2,Q", "W_{2,Q}^2", "W2^2")
    files = [
        *sorted((ROOT / "geoviz").rglob("*.py")),
        ROOT / "README.md",
        ROOT / "docs/architecture.md",
    ]
    found = [
        f"{path.relative_to(ROOT)}: {s}"
        for path in files
        for s in stray
        if s in path.read_text(encoding="utf-8")
    ]
    assert not found
