"""The ``geoviz`` command line (datasets, show) and its plug-in hook."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from geoviz.cli import GRID_BACKGROUND, GRID_PAD, main, render_grid
from geoviz.data.dataset import LabeledDataset
from geoviz.data.registry import load_dataset
from geoviz.errors import GeovizError


def test_datasets_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["name", "kind", "train", "test", "classes", "shape", "availability"]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert rows["mnist"] == ["mnist", "bundled", "2000", "500", "10", "1x28x28", "offline"]
    assert rows["usps"][5] == "1x16x16"
    assert rows["iris"][5] == "vector(4)"
    assert rows["torchvision:emnist_letters"][-1] == "download"
    assert main(["datasets", "--offline"]) == 0
    assert "torchvision:" not in capsys.readouterr().out


def test_show_prints_summary_with_counts_and_fingerprint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["show", "fashion_mnist", "--split", "test", "--n", "100", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    ds = load_dataset("fashion_mnist", split="test", n=100, seed=2)
    assert f"fingerprint: {ds.fingerprint}" in out
    assert "samples:     100" in out and "1x28x28" in out
    assert any(line.split()[-2:] == ["boot", "10"] for line in out.splitlines())  # "Ankle boot  10"


@pytest.mark.parametrize(
    ("name", "per_class", "zoom", "hw"), [("mnist", 5, 1, 28), ("usps", 3, 2, 16)]
)
def test_show_grid_writes_png_of_expected_size(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    per_class: int,
    zoom: int,
    hw: int,
) -> None:
    out = tmp_path / "grid.png"
    argv = ["show", name, "--grid", str(out), "--per-class", str(per_class), "--zoom", str(zoom)]
    assert main(argv) == 0
    assert out.is_file() and str(out) in capsys.readouterr().out
    with Image.open(out) as image:
        assert image.format == "PNG" and image.mode == "L"
        cell = hw * zoom
        assert image.size == (
            per_class * cell + (per_class + 1) * GRID_PAD,
            10 * cell + 11 * GRID_PAD,
        )


def test_render_grid_places_each_class_on_its_row() -> None:
    # 2 classes, 3x2 RGB images: class 0 all red-ish, class 1 all blue-ish
    n = 6
    colours = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    labels = torch.tensor([0, 1, 0, 1, 1, 1])
    x = colours[labels].view(n, 3, 1, 1).expand(n, 3, 3, 2).reshape(n, -1)
    ds = LabeledDataset(x, labels, ("red", "blue"), name="rgb", image_shape=(3, 3, 2))
    image = render_grid(ds, per_class=3, zoom=1, pad=1)
    assert image.mode == "RGB" and image.size == (3 * 2 + 4, 2 * 3 + 3)
    arr = np.asarray(image)
    assert (arr[1:4, 1:3] == [255, 0, 0]).all() and (arr[1:4, 4:6] == [255, 0, 0]).all()
    assert (arr[1:4, 7:9] == GRID_BACKGROUND).all()  # class 0 has only two samples
    assert (arr[5:8, 1:3] == [0, 0, 255]).all() and (arr[5:8, 7:9] == [0, 0, 255]).all()
    assert (arr[0] == GRID_BACKGROUND).all() and (arr[:, 0] == GRID_BACKGROUND).all()


def test_bad_input_prints_error_and_returns_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", "mnsit"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Did you mean 'mnist'" in err
    assert main(["show", "iris", "--grid", str(tmp_path / "iris.png")]) == 2
    captured = capsys.readouterr()
    assert "needs an image dataset" in captured.err and captured.out == ""
    assert not (tmp_path / "iris.png").exists()
    assert main(["show", "mnist", "--grid", str(tmp_path / "missing" / "g.png")]) == 2
    assert "cannot write grid image" in capsys.readouterr().err
    assert main(["show", "mnist", "--n", "0"]) == 2  # argparse rejects it
    assert main(["frobnicate"]) == 2
    assert main([]) == 2
    assert main(["--help"]) == 0
    capsys.readouterr()


def test_plugin_commands_are_registered(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = []

    def handler(args):
        seen.append(args.target)
        if args.target == "bad":
            raise GeovizError("target 'bad' is not usable")
        return 0

    def register(subparsers):
        p = subparsers.add_parser("distance", help="plug-in command")
        p.add_argument("target")
        p.set_defaults(func=handler)

    monkeypatch.setitem(
        sys.modules, "geoviz.geodesic.cli", types.SimpleNamespace(register=register)
    )
    assert main(["distance", "mnist"]) == 0 and seen == ["mnist"]
    assert main(["distance", "bad"]) == 2
    assert capsys.readouterr().err == "error: target 'bad' is not usable\n"
    assert main(["datasets"]) == 0


def test_missing_plugin_is_silent(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "geoviz.geodesic.cli", None)  # import -> ModuleNotFoundError
    assert main(["datasets", "--offline"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["distance", "x"]) == 2  # unknown command without the plug-in


def test_broken_plugin_warns_but_builtin_commands_work(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import geoviz.cli as cli

    def failing_import(name):
        raise ModuleNotFoundError("No module named 'qpsolvers'", name="qpsolvers")

    monkeypatch.setattr(cli.importlib, "import_module", failing_import)
    assert main(["datasets", "--offline"]) == 0
    err = capsys.readouterr().err
    assert "warning: commands from geoviz.geodesic.cli unavailable" in err and "qpsolvers" in err


def test_glossary_labels_never_crash_a_legacy_encoded_stdout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``W²₂,Q`` and ``â`` (geoviz.glossary) printed to an ASCII stream are replaced, not fatal."""
    import io

    from geoviz.glossary import A_HAT, W_TARGET

    def register(subparsers):
        p = subparsers.add_parser("distance", help="plug-in command")
        p.set_defaults(func=lambda args: print(f"{W_TARGET} {A_HAT}") or 0)

    monkeypatch.setitem(
        sys.modules, "geoviz.geodesic.cli", types.SimpleNamespace(register=register)
    )
    raw = io.BytesIO()
    ascii_out = io.TextIOWrapper(raw, encoding="ascii", write_through=True)
    monkeypatch.setattr(sys, "stdout", ascii_out)
    assert main(["distance"]) == 0
    ascii_out.flush()
    assert raw.getvalue().decode("ascii") == "W??,Q(P_i, Q) ?\n"
