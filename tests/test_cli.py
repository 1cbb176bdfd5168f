"""The ``geoviz`` command line (datasets, show) and its registered commands."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from geoviz.cli import main
from geoviz.cli.otdd import GRID_BACKGROUND, GRID_PAD, render_grid
from geoviz.data.dataset import LabeledDataset
from geoviz.data.registry import load_dataset
from geoviz.errors import GeovizError


def test_datasets_table(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from geoviz.data import torchvision_sets

    # as where torchvision is installed (tests/test_cli_datasets.py: where it is not)
    monkeypatch.setattr(torchvision_sets, "torchvision_installed", lambda: True)
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
    (tmp_path / "a_file").write_text("x")
    assert main(["show", "mnist", "--grid", str(tmp_path / "a_file" / "g.png")]) == 2
    assert "cannot write grid image" in capsys.readouterr().err
    assert main(["show", "mnist", "--grid", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert main(["show", "mnist", "--n", "0"]) == 2  # argparse rejects it
    assert main(["frobnicate"]) == 2
    assert main([]) == 2
    assert main(["--help"]) == 0
    capsys.readouterr()


def _stand_in(monkeypatch: pytest.MonkeyPatch, register: Callable[..., None]) -> None:
    """``register`` in place of the geodesic commands' in :data:`geoviz.cli.COMMANDS` (it
    adds a test's own ``distance``); the other commands stay."""
    import geoviz.cli as cli
    from geoviz.cli import geodesic

    # (a stand-in of an earlier call of this test is replaced too)
    replaced = (geodesic.register, *(r for r in cli.COMMANDS if r.__module__ == __name__))
    commands = tuple(register if r in replaced else r for r in cli.COMMANDS)
    assert register in commands and geodesic.register not in commands
    monkeypatch.setattr(cli, "COMMANDS", commands)


def test_every_command_module_is_registered_in_order() -> None:
    """The commands come from plain imports of their modules, registered in the order of
    :data:`geoviz.cli.COMMANDS` (``geoviz --help`` lists them so)."""
    from geoviz.cli import COMMANDS, build_parser, geodesic, otdd, screen, transfer
    from geoviz.cli import app as app_command

    assert (
        otdd.register,
        transfer.register,
        geodesic.register,
        screen.register,
        app_command.register,
    ) == COMMANDS
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    assert list(subparsers.choices) == [
        "datasets",
        "show",
        "transfer",
        "distance",
        "project",
        "grid",
        "screen",
        "app",
    ]


def test_registered_commands_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = []

    def handler(args):
        seen.append(args.target)
        if args.target == "bad":
            raise GeovizError("target 'bad' is not usable")
        return 0

    def register(subparsers):
        p = subparsers.add_parser("distance", help="a test command")
        p.add_argument("target")
        p.set_defaults(func=handler)

    _stand_in(monkeypatch, register)
    assert main(["distance", "mnist"]) == 0 and seen == ["mnist"]
    assert main(["distance", "bad"]) == 2
    assert capsys.readouterr().err == "error: target 'bad' is not usable\n"
    assert main(["datasets"]) == 0
    assert main(["project", "x"]) == 2  # the geodesic commands are not registered here


def test_glossary_labels_never_crash_a_legacy_encoded_stdout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``W²₂,Q`` and ``â`` (geoviz.glossary) printed to an ASCII stream are replaced, not fatal."""
    import io

    from geoviz.glossary import A_HAT, W_TARGET

    def register(subparsers):
        p = subparsers.add_parser("distance", help="a test command")
        p.set_defaults(func=lambda args: print(f"{W_TARGET} {A_HAT}") or 0)

    _stand_in(monkeypatch, register)
    raw = io.BytesIO()
    ascii_out = io.TextIOWrapper(raw, encoding="ascii", write_through=True)
    monkeypatch.setattr(sys, "stdout", ascii_out)
    assert main(["distance"]) == 0
    ascii_out.flush()
    assert raw.getvalue().decode("ascii") == "W??,Q(P_i, Q) ?\n"


# --------------------------------------------------------------------------- issue 15


def _no_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    import geoviz.data.registry as registry

    def boom(*args, **kwargs):
        raise AssertionError("a dataset was loaded")

    monkeypatch.setattr(registry, "load_dataset", boom)


def test_show_grid_never_replaces_a_file_without_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue: ``--grid notes.txt`` turned a text file into a PNG."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    with monkeypatch.context() as mp:
        _no_loading(mp)  # refused before the dataset is read
        assert main(["show", "mnist", "--grid", str(notes)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {notes} already exists; pass --overwrite to replace it\n"
    assert captured.out == "" and notes.read_text() == "my notes\n"
    assert main(["show", "mnist", "--n", "20", "--grid", str(notes), "--overwrite"]) == 0
    with Image.open(notes) as image:
        assert image.format == "PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # no temporaries left


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            ["--n", "1000000000"],
            "--n must be between 10 and 100,000, got 1,000,000,000 (samples to show)",
        ),
        (["--seed", "-1"], "--seed must be between 0 and 2,147,483,647, got -1"),
        (["--zoom", "100000"], "--zoom must be between 1 and 16, got 100,000"),
        (["--per-class", "1000000"], "--per-class must be between 1 and 100, got 1,000,000"),
    ],
)
def test_show_options_are_bounded_before_loading(
    option: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _no_loading(monkeypatch)
    assert main(["show", "mnist", *option]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"


def test_render_grid_checks_memory_before_drawing(monkeypatch: pytest.MonkeyPatch) -> None:
    import geoviz.cli.otdd as cli
    from geoviz.errors import ResourceError

    def refuse(n_bytes: int, what: str, **kwargs) -> None:
        raise ResourceError(f"{what} needs {n_bytes} bytes")

    monkeypatch.setattr(cli, "check_bytes", refuse)
    ds = load_dataset("usps", n=20)
    with pytest.raises(ResourceError, match=r"a \d+x\d+ sample grid needs \d+ bytes"):
        render_grid(ds, per_class=3, zoom=2)


def _command(monkeypatch: pytest.MonkeyPatch, handler) -> None:
    def register(subparsers):
        p = subparsers.add_parser("distance", help="a test command")
        p.add_argument("--batch-size", default=None)
        p.set_defaults(func=handler)

    _stand_in(monkeypatch, register)


def test_memory_error_is_one_sentence_with_status_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def handler(args):
        raise MemoryError("Unable to allocate 8.00 TiB for an array with shape (10**12,)")

    _command(monkeypatch, handler)
    assert main(["distance"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: geoviz distance ran out of memory: asked for 8.00 TiB")
    assert err.count("\n") == 1 and "Traceback" not in err

    def torch_oom(args):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 8796093022208 bytes"
        )

    _command(monkeypatch, torch_oom)
    assert main(["distance"]) == 2
    assert "ran out of memory" in capsys.readouterr().err


def test_library_messages_name_the_cli_flags(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from geoviz.errors import ExportExistsError, ResourceError

    raised: list[Exception] = []

    def handler(args):
        raise raised[-1]

    _command(monkeypatch, handler)
    raised.append(ExportExistsError("out.npz already exists; pass overwrite=True to replace it"))
    assert main(["distance"]) == 2
    assert capsys.readouterr().err == (
        "error: out.npz already exists; pass --overwrite to replace it\n"
    )
    # the memory refusal of the OTDD cost points to the batched mode the CLI can select
    raised.append(
        ResourceError(
            "the OTDD cost matrix (60000 x 60000) needs about 13.41 GiB on cpu, but only "
            "3.00 GiB is free; use a smaller sample or the batched mode"
        )
    )
    assert main(["distance"]) == 2
    err = capsys.readouterr().err
    assert err.endswith(
        "use a smaller --n, or --batch-size B (e.g. 2000: batches of B target "
        "points, each against B reference points)\n"
    )
    assert "the batched mode" not in err


def test_plain_progress_writes_one_line_per_stage_and_tenth() -> None:
    import io

    from geoviz.cli.output import PlainProgress, progress_callback

    stream = io.StringIO()
    with progress_callback(True, stream=stream) as progress:
        assert isinstance(progress, PlainProgress)  # StringIO is not a terminal
        for i in range(1001):  # a solver reporting every iteration
            progress("OTDD map 1/2 (sinkhorn)", 0.5 * i / 1000)
        progress("OTDD map 2/2 (labels)", 0.5)
        for i in range(1001):
            progress("OTDD map 2/2 (sinkhorn)", 0.5 + 0.5 * i / 1000)
    lines = stream.getvalue().splitlines()
    assert len(lines) == progress.lines <= 13 and "\r" not in stream.getvalue()
    assert lines[0] == "[  0%] OTDD map 1/2 (sinkhorn)"
    assert "[ 50%] OTDD map 2/2 (labels)" in lines and lines[-1].startswith("[100%]")
    with progress_callback(False) as nothing:
        assert nothing is None


def test_progress_on_a_terminal_is_a_bar() -> None:
    import io

    from geoviz.cli.output import PlainProgress, progress_callback

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    with progress_callback(True, stream=stream) as progress:
        assert not isinstance(progress, PlainProgress)
        for i in range(11):
            progress("stage", i / 10)
    assert "\r" in stream.getvalue() and "100%" in stream.getvalue()
