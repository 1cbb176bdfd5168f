"""What a visitor names is shown as text (issue 32, item 6).

Dataset and class names come from links (the synthetic sets' ``name`` and ``class_names``
options), uploads and files. Rendered as Markdown, ``![x](http://host/track.png)`` made
every visitor's browser fetch that URL, and ``[Log in again](...)`` became a link inside
the app's red error box. Every page now escapes them
(:func:`geoviz.viz.report.markdown_literal`); Plotly titles get
:func:`geoviz.viz.report.plotly_literal`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict

from geoviz.app.links import scenario_to_token
from geoviz.app.scenario import Scenario
from geoviz.app.settings import AppSettings
from geoviz.data.choice import DatasetChoice
from geoviz.viz.report import markdown_literal, plotly_literal

ROOT = Path(__file__).resolve().parents[1]
N = 120

IMAGE = "![x](http://127.0.0.1:8699/track.png)"
LINK = "[Log in again](http://evil.example/login)"
HOSTILE = [
    IMAGE,
    LINK,
    "[a](javascript:x)",
    "<img src=x onerror=alert(1)>",
    "$x$ and $$y$$",
    "**b** _i_ ~~s~~",
    "`code` ``more``",
    "line1\nline2\r\n# heading",
    "http://a.example/x www.b.example c@d.example",
    ":red[alert] :material/home:",
    "&lt;b&gt; &#60;",
    "| a | b |",
    "\\![x](y)",
]


def _plain(text: str) -> str:
    """What a visitor reads: CommonMark's backslash escapes of ASCII punctuation dropped."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text)


def _unescaped_constructs(text: str) -> list[str]:
    """Markdown constructs in ``text`` not preceded by an (unescaped) backslash."""
    out = []
    for m in re.finditer(r"!\[|\]\(|<[a-z/!]|\$|\*\*|`|https?:|www\.|:[a-z/]+[\[:]", text):
        backslashes = len(text[: m.start()]) - len(text[: m.start()].rstrip("\\"))
        if backslashes % 2 == 0:
            out.append(m.group(0))
    return out


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_literal_reads_back_as_typed_and_makes_no_markup(text):
    shown = markdown_literal(text)
    assert _unescaped_constructs(shown) == [], shown
    assert "\n" not in shown and "\r" not in shown
    # read back, it is the text as typed (line breaks as spaces)
    assert _plain(shown) == " ".join(text.splitlines())


def test_markdown_literal_is_idempotent_in_what_it_shows():
    once = markdown_literal(IMAGE)
    assert _plain(markdown_literal(once)) == once  # escaping twice shows the escapes


@pytest.mark.parametrize("text", HOSTILE)
def test_plotly_literal_leaves_no_tag_or_entity(text):
    shown = plotly_literal(text)
    assert "<" not in shown and ">" not in shown and "\n" not in shown
    unescaped = shown.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    assert unescaped == " ".join(text.splitlines())


# ---------------------------------------------------------------- the pages


@pytest.fixture
def small_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GEOVIZ_APP_N", str(N))
    monkeypatch.setenv("GEOVIZ_APP_GRID", "10")
    monkeypatch.setenv("GEOVIZ_EMBEDDING", "pca")
    monkeypatch.setenv("GEOVIZ_TRANSFER_BACKEND", "sequential")
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "exports").mkdir()
    monkeypatch.setenv("GEOVIZ_EXPORT_ROOT", str(tmp_path / "exports"))
    return tmp_path


def _hostile_scenario() -> Scenario:
    classes = ("**b**", "$x$", "`c`", "<b>d</b>")
    opts = lambda name: (("name", name), ("class_names", classes))  # noqa: E731
    return Scenario(
        target=DatasetChoice("gmm2d", seed=0, options=opts(IMAGE)),
        references=tuple(
            DatasetChoice("gmm2d", seed=s, options=opts(name))
            for s, name in ((1, LINK), (2, "<img src=x>"), (3, "P3"))
        ),
        n_target=N,
        n_reference=N,
    )


#: widgets whose options are plain text (names show there as typed, unescaped)
_PLAIN_OPTIONS = {"selectbox", "multiselect"}


def _markdown_strings(at) -> list[str]:
    """Every string the page hands Streamlit's Markdown renderer: bodies of markdown,
    captions and alerts, labels and help of widgets, metrics, tabs and expanders, radio
    options, progress texts."""
    out: list[str] = []

    def collect(value: Any, key: str, kind: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                collect(v, k, kind)
        elif isinstance(value, list):
            for v in value:
                collect(v, key, kind)
        elif isinstance(value, str) and (
            key in ("body", "label", "help", "text")
            or (key == "options" and kind not in _PLAIN_OPTIONS)
        ):
            out.append(value)

    for root in (at.main, at.sidebar):
        for node in root:
            proto = getattr(node, "proto", None)
            kind = getattr(node, "type", "")
            # the app's own HTML (st.html) and non-Markdown payloads are not scanned
            if proto is None or kind in (
                "plotly_chart",
                "code",
                "json",
                "arrow_data_frame",
                "html",
            ):
                continue
            collect(MessageToDict(proto), "", kind)
    return out


def _check_page(at, where: str, names: tuple[str, ...]) -> str:
    assert not at.exception, (where, [e.value for e in at.exception])
    strings = _markdown_strings(at)
    for text in strings:
        # no link, image or HTML tag that Markdown would act on (the pages' own bold,
        # code and math stay theirs)
        made = [c for c in _unescaped_constructs(text) if c in ("![", "](") or c[0] == "<"]
        assert made == [], (where, text)
    plain = _plain("\n".join(strings))
    for name in names:  # shown, as typed
        assert name in plain, (where, name)
    return plain


def test_hostile_names_from_a_link_show_as_text_on_every_page(small_app):
    from streamlit.testing.v1 import AppTest

    token = scenario_to_token(AppSettings().admit(_hostile_scenario()))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params["scenario"] = token
    at.switch_page("pages/1_datasets.py")
    at.run()
    assert not at.warning, [w.value for w in at.warning]  # the link was taken
    _check_page(at, "datasets", (IMAGE, LINK))
    for page in ("pages/3_geodesic.py", "pages/2_maps.py", "pages/4_mccann.py"):
        at.switch_page(page)
        at.run()
        _check_page(at, page, (LINK,))
    at.switch_page("pages/5_export.py")
    at.run()
    _check_page(at, "export", ())


def test_an_upload_name_in_a_link_is_text_in_the_error_box(small_app):
    """The issue's own case: a link naming an upload (gone, or never there) whose name is
    an image and a link; the link's warning (its scenario is not taken: its datasets do not
    load), then the error box and the sidebar of a session whose upload went, quote it as
    text."""
    from streamlit.testing.v1 import AppTest

    from geoviz.app.session import SessionModel

    base = _hostile_scenario()
    name = f"{IMAGE} {LINK}.npz"
    gone = DatasetChoice(name, source="upload", digest="0" * 64)
    broken = base.with_(references=(gone, *base.references[1:]))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params["scenario"] = scenario_to_token(broken)
    at.switch_page("pages/1_datasets.py")
    at.run()
    assert not at.exception
    warnings = [w.value for w in at.warning]
    assert warnings and "could not be loaded on this server" in warnings[0], warnings
    _check_page(at, "datasets (link to an upload that is gone)", (name,))
    # a session whose scenario's upload went away since: the page's error box
    at.session_state[SessionModel.SCENARIO] = AppSettings.from_env().admit(broken)
    at.run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert errors and "Could not load the scenario's datasets" in errors[0], errors
    plain = _check_page(at, "datasets (upload gone)", (name,))
    assert f"upload: {name}" in plain  # the sidebar's Q/P lines


def test_a_hostile_upload_name_is_text_in_the_upload_notes(small_app):
    import io

    import numpy as np
    from streamlit.testing.v1 import AppTest

    buf = io.BytesIO()
    rng = np.random.default_rng(0)
    np.savez(buf, x=rng.random((40, 4)).astype(np.float32), y=np.repeat([0, 1], 20))
    name = f"{IMAGE}.npz"
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.switch_page("pages/1_datasets.py")
    at.run()
    at.file_uploader(key="dataset_upload").set_value(
        (name, buf.getvalue(), "application/octet-stream")
    )
    at.run()
    plain = _check_page(at, "upload", (name,))
    assert f"{name}: 40 samples, 2 classes" in plain
