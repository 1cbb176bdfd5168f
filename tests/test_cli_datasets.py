"""``geoviz datasets`` says which entries cannot load here, and why (issue 32, item 3).

The table listed the ``torchvision:*`` downloads as "download" on a machine without
torchvision, where every one of them fails to load.
"""

from __future__ import annotations

import sys

import pytest

from geoviz.cli import main
from geoviz.data import registry, torchvision_sets


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
