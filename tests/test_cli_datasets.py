"""``geoviz datasets`` says which entries cannot load here, and why (issue 32, item 3).

The table listed the ``torchvision:*`` downloads as "download" on a machine without
torchvision, where every one of them fails to load. In an install without a bundled
sample, its entries now say "missing" instead of "offline" (issue 41).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from geoviz.cli import main
from geoviz.data import registry, torchvision_sets

ROOT = Path(__file__).resolve().parents[1]


def _table(out: str) -> tuple[dict[str, list[str]], list[str]]:
    """The table's rows by name, and the lines under it."""
    lines = out.splitlines()
    width = len(lines[0].split())
    rows = {ln.split()[0]: ln.split() for ln in lines[2:] if len(ln.split()) == width}
    notes = [ln for ln in lines[2:] if ln.startswith("unavailable:")]
    return rows, notes


def test_datasets_marks_torchvision_entries_unavailable_without_torchvision(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torchvision", None)  # `import torchvision` fails
    assert main(["datasets"]) == 0
    rows, notes = _table(capsys.readouterr().out)
    downloads = [n for n in rows if n.startswith("torchvision:")]
    assert downloads, rows
    for name in downloads:
        assert rows[name][-1] == "unavailable", rows[name]
    assert rows["mnist"][-1] == "offline" and rows["iris"][-1] == "offline"
    # the reason, once, as the registry gives it
    reason = registry.unavailable_reason("torchvision:mnist")
    assert reason is not None and "torchvision" in reason
    assert notes == [f"unavailable: {reason}."]


def test_datasets_lists_downloads_where_torchvision_is_installed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torchvision_sets, "torchvision_installed", lambda: True)
    assert main(["datasets"]) == 0
    rows, notes = _table(capsys.readouterr().out)
    assert rows["torchvision:usps"][-1] == "download" and notes == []


def test_datasets_says_which_bundled_files_are_missing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An install without the MNIST sample listed ``mnist`` as "bundled ... offline" (issue 41):
    the entries that read a missing file (``mnist_m`` and ``mnist_tex`` are built from it)
    now say "missing", and one line names the file and the remedy."""
    (tmp_path / "nist").mkdir()
    shutil.copy(ROOT / "assets" / "nist" / "usps.npz", tmp_path / "nist" / "usps.npz")
    (tmp_path / "nist" / "kmnist.npz").mkdir()  # not a file either
    monkeypatch.setenv("GEOVIZ_ASSETS_DIR", str(tmp_path))
    assert main(["datasets", "--offline"]) == 0
    out = capsys.readouterr().out
    rows, _ = _table(out)
    for name in ("mnist", "fashion_mnist", "kmnist", "mnist_m", "mnist_tex"):
        assert rows[name][-1] == "missing", rows[name]
    assert rows["usps"][-1] == "offline" and rows["iris"][-1] == "offline"
    notes = [ln for ln in out.splitlines() if ln.startswith("missing (")]
    mnist_file = tmp_path / "nist" / "mnist.npz"
    assert notes[0] == (
        f"missing (mnist, mnist_m, mnist_tex): the bundled file {mnist_file} is missing from "
        "this install: reinstall geoviz, or set GEOVIZ_ASSETS_DIR to a folder holding "
        "nist/<name>.npz."
    )
    assert len(notes) == 3 and "kmnist.npz is not a regular file" in notes[2]
    # the full install says nothing of the kind
    monkeypatch.delenv("GEOVIZ_ASSETS_DIR")
    assert main(["datasets", "--offline"]) == 0
    out = capsys.readouterr().out
    assert "missing" not in out and _table(out)[0]["mnist"][-1] == "offline"
