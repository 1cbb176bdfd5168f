"""``GeodesicExplorer.save_figure``: the format is the file's extension (issue 45, item 3).

``w.save_figure("x.svg")`` wrote PNG bytes into ``x.svg`` (the kind defaulted to PNG). Now the
extension decides, a ``kind`` that contradicts it is refused in one sentence before the
browser is asked, and what the browser answers must be the format the file is named for.
The browser's drawing of each mode is tests/test_figure_export_browser.py's.
"""

from __future__ import annotations

import base64
import threading
from pathlib import Path

import pytest

from geoviz.errors import ExportError, ExportExistsError, GeovizError
from geoviz.explorer.widget import PNG_SIGNATURE, GeodesicExplorer, figure_kind

PNG = PNG_SIGNATURE + b"\x00\x00\x00\rIHDR" + b"0" * 16
SVG = '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><text>é</text></svg>'


@pytest.fixture
def widget(monkeypatch: pytest.MonkeyPatch) -> GeodesicExplorer:
    """A widget with only what save_figure needs (no fit, no kernel): it records its sends."""
    w = GeodesicExplorer.__new__(GeodesicExplorer)
    w._lock = threading.Lock()
    w._figure_seq = 0
    w._figures = {}
    sent: list[dict] = []
    monkeypatch.setattr(
        w, "send", lambda content, buffers=None: sent.append(content), raising=False
    )
    w.sent = sent  # type: ignore[attr-defined]
    return w


def _answer(w: GeodesicExplorer, data: str) -> None:
    w._receive_figure({"kind": "figure", "id": w._figure_seq, "data": data})


def _png_url(raw: bytes = PNG) -> str:
    return "data:image/png;base64," + base64.b64encode(raw).decode()


@pytest.mark.parametrize(
    ("name", "kind", "expected"),
    [
        ("x.svg", None, "svg"),
        ("x.png", None, "png"),
        ("X.SVG", None, "svg"),
        ("x.svg", "svg", "svg"),
        ("view.tar.png", "png", "png"),
    ],
)
def test_the_format_is_the_extension(name: str, kind: str | None, expected: str) -> None:
    assert figure_kind(Path(name), kind) == expected


def test_svg_by_its_name_gets_the_svg_the_browser_draws(widget, tmp_path):
    target = tmp_path / "x.svg"
    future = widget.save_figure(target)
    assert widget.sent == [{"kind": "figure", "id": 1, "format": "svg"}]
    _answer(widget, SVG)
    assert future.result(0) == target
    assert target.read_text(encoding="utf-8") == SVG
    assert not target.read_bytes().startswith(PNG_SIGNATURE)
    png = tmp_path / "x.png"
    later = widget.save_figure(png)
    assert widget.sent[-1]["format"] == "png"
    _answer(widget, _png_url())
    assert later.result(0).read_bytes() == PNG


@pytest.mark.parametrize(
    ("name", "kind", "words"),
    [
        (
            "x.svg",
            "png",
            "'x.svg' is a .svg file but kind='png' was asked: drop kind, or name the file .png",
        ),
        ("x.png", "svg", "'x.png' is a .png file but kind='svg' was asked"),
        ("x.pdf", None, "name it .png or .svg, not 'x.pdf'"),
        ("x", "png", "name it .png or .svg, not 'x'"),
        ("x.svg.bak", "svg", "not 'x.svg.bak'"),
    ],
)
def test_a_mismatch_is_refused_in_one_sentence_before_the_browser_is_asked(
    widget, tmp_path, name, kind, words
):
    target = tmp_path / name
    with pytest.raises(ExportError) as caught:
        widget.save_figure(target, kind=kind)
    text = str(caught.value)
    assert words in text and "\n" not in text and text.count(". ") == 0, text
    assert widget.sent == [] and not target.exists()


def test_an_unknown_kind_is_still_refused(widget, tmp_path):
    with pytest.raises(GeovizError, match="figure kind must be one of"):
        widget.save_figure(tmp_path / "f.pdf", kind="pdf")  # type: ignore[arg-type]
    assert widget.sent == []


def test_the_overwrite_rule_is_kept(widget, tmp_path):
    target = tmp_path / "mine.svg"
    target.write_text("mine", encoding="utf-8")
    with pytest.raises(ExportExistsError, match="pass overwrite=True"):
        widget.save_figure(target)
    assert widget.sent == [] and target.read_text(encoding="utf-8") == "mine"
    future = widget.save_figure(target, overwrite=True)
    _answer(widget, SVG)
    assert future.result(0) == target and target.read_text(encoding="utf-8") == SVG
    folder = tmp_path / "folder.png"
    folder.mkdir()
    with pytest.raises(ExportError, match="not a regular file"):
        widget.save_figure(folder, overwrite=True)


@pytest.mark.parametrize(
    ("name", "answer", "reason"),
    [
        ("a.svg", _png_url(), "not an SVG document"),
        ("b.png", SVG, "not a PNG data URL"),
        ("c.png", _png_url(b"GIF89a" + b"0" * 20), "not a PNG image"),
    ],
)
def test_an_answer_in_another_format_writes_nothing(widget, tmp_path, name, answer, reason):
    target = tmp_path / name
    future = widget.save_figure(target)
    _answer(widget, answer)
    with pytest.raises(GeovizError, match=reason):
        future.result(0)
    assert not target.exists()
