"""Suggestions say their caveat (issue 45, item 4), and the manifest's weights are named.

* A colour target's ``P_a`` is grey when the references are: ``P_a`` is made of the
  references' images. :attr:`GeodesicResult.grey_note` says so, and ``geoviz project``, the
  manifest (``metadata.grey_note``), the explorer's payload and the Export page show it.
* The app link ``project`` prints is ``geoviz app`` at its own address (127.0.0.1), never a
  command that listens on every interface.
* A manifest's ``weights`` are keyed by reference name.

(``geoviz screen``'s lineage is tests/test_cli_screen.py's.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest
import torch

from geoviz.cli import main
from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.data.preprocess import harmonize
from geoviz.data.registry import load_dataset
from geoviz.explorer.payload import build_geodesic
from geoviz.export import export_dataset
from geoviz.geodesic.config import GeodesicConfig
from geoviz.geodesic.pipeline import fit_geodesic

#: the fits here need no feature space (the note reads the pixels): quick
PIXELS = GeodesicConfig(features="pixels")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "cache"))


def _images(channels: int, equal: bool) -> LabeledDataset:
    x = torch.rand(6, 1 if equal else channels, 4, 4).expand(6, channels, 4, 4)
    return LabeledDataset(
        x.reshape(6, -1).contiguous(),
        torch.tensor([0, 1] * 3),
        ("a", "b"),
        image_shape=(channels, 4, 4),
    )


def test_is_grey_reads_the_pixels():
    assert _images(1, True).is_grey and _images(3, True).is_grey
    assert not _images(3, False).is_grey
    vectors = LabeledDataset(torch.rand(4, 2), torch.tensor([0, 1, 0, 1]), ("a", "b"))
    assert not vectors.is_grey


@pytest.fixture(scope="module")
def colour_fit():
    q, *refs = harmonize(
        [load_dataset("mnist_m", n=40), load_dataset("mnist", n=40), load_dataset("usps", n=40)]
    )
    return fit_geodesic(q, refs, PIXELS)


def test_a_colour_target_of_grey_references_says_why_p_a_is_grey(colour_fit, tmp_path):
    note = colour_fit.grey_note
    assert note == (
        "P_a is grey because it is made of the references' images (Σ a_i T_i(x)) and the "
        "references (mnist, usps) are grey; the target's colours are not in it."
    )
    pa = colour_fit.interpolate(colour_fit.a_hat)
    assert pa.metadata["grey_note"] == note
    assert colour_fit.target.image_shape[0] == 3 and pa.image_shape == colour_fit.image_shape
    written = export_dataset(pa, tmp_path / "p_a.npz")
    manifest = json.loads(written.manifest_path.read_text(encoding="utf-8"))
    assert manifest["metadata"]["grey_note"] == note
    # the weights, keyed by reference name
    assert list(manifest["weights"]) == ["mnist", "usps"]
    assert list(manifest["weights"].values()) == pytest.approx(list(colour_fit.a_hat))
    header = build_geodesic(colour_fit).header
    assert header["pa_note"] == note


def test_grey_targets_and_colour_references_have_no_note(colour_fit):
    """A grey target (P_a grey like Q), or one colour reference (P_a has its colours): no
    note. The same fit with its datasets replaced (the note reads only the pixels)."""
    grey_q, textured, usps = harmonize(
        [load_dataset(n, n=40) for n in ("mnist", "mnist_tex", "usps")]
    )
    grey = dataclasses.replace(colour_fit, target=grey_q)
    assert grey.grey_note is None and "grey_note" not in grey.interpolate(grey.a_hat).metadata
    assert build_geodesic(grey).header["pa_note"] is None
    mixed = dataclasses.replace(colour_fit, references=(textured, usps))
    assert not textured.is_grey and mixed.grey_note is None


def test_project_prints_the_note_and_writes_it_to_the_manifest(tmp_path, capsys):
    out_file = tmp_path / "p_a.npz"
    args = ["project", "--target", "mnist_m", "--refs", "mnist,usps", "--n", "40"]
    assert main([*args, "--features", "pixels", "--out", str(out_file)]) == 0
    out = capsys.readouterr().out
    note = "P_a is grey because it is made of the references' images"
    assert note in out and "references (mnist, usps) are grey" in out
    manifest = json.loads((tmp_path / "p_a.manifest.json").read_text(encoding="utf-8"))
    assert manifest["metadata"]["grey_note"].startswith(note)
    assert set(manifest["weights"]) == {"mnist", "usps"}
    assert "streamlit run" not in out


def test_the_app_line_is_geoviz_app_on_this_machine(monkeypatch, capsys):
    from geoviz.cli import geodesic_run

    query = {"target": "mnist", "refs": "usps,kmnist", "n": "200", "size": "28", "split": "train"}
    monkeypatch.setattr(geodesic_run, "app_query", lambda args, result: query)
    geodesic_run.print_app_link(argparse.Namespace(no_cache=False, n=200), None)
    line = capsys.readouterr().out.strip()
    assert line.startswith("app (its maps are in the disk cache): geoviz app, then open ")
    assert "http://127.0.0.1:8501/geodesic?target=mnist&refs=usps,kmnist" in line
    assert "streamlit" not in line and "localhost" not in line


def test_manifest_weights_stay_a_list_when_the_names_do_not_match(tmp_path):
    meta = {"weights": [0.5, 0.5], "references": ["a", "a"]}  # two weights, one name twice
    soft = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [0.2, 0.8]])
    ds = SoftLabeledDataset(torch.rand(4, 2), soft, ("p", "q"), metadata=meta)
    manifest = export_dataset(ds, tmp_path / "d.npz").manifest
    assert manifest["weights"] == [0.5, 0.5]
