"""Writes replace only regular files (issue 41, item 1).

Every writer of geoviz (the atomic writer under all of them, the CLI's ``--out`` and
``--grid``, dataset exports, the widget's ``save_figure``, IDX files, cache entries) is
pointed at a scratch character device (``mknod``, the same numbers as ``/dev/null``), a
FIFO (``mkfifo``), a symbolic link and a folder made in ``tmp_path`` — never the machine's
own — and must refuse in one sentence, before writing anything, leaving the target as it was.
"""

from __future__ import annotations

import base64
import os
import stat
import warnings
from pathlib import Path

import numpy as np
import pytest

from geoviz.atomic import (
    AtomicWriteError,
    NotReplaceableError,
    atomic_write_bytes,
    atomic_write_many,
    check_replaceable,
)
from geoviz.backend import CACHE_SECRET_NAME, CacheCorruptWarning, DiskCache
from geoviz.cli import main
from geoviz.data.dataset import LabeledDataset
from geoviz.data.formats.idx import save_idx
from geoviz.errors import ExportError, ExportExistsError
from geoviz.export.dispatch import export_dataset

pytestmark = pytest.mark.timeout(60)  # a FIFO opened for writing would block: fail, not hang


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _char_device(path: Path) -> Path:
    """A scratch character device with /dev/null's numbers (needs root or CAP_MKNOD)."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root here")
    return path


def _symlink(path: Path) -> Path:
    target = path.with_name(path.name + ".target")
    target.write_bytes(b"linked")
    path.symlink_to(target)
    return path


def _folder(path: Path) -> Path:
    path.mkdir()
    (path / "keep.txt").write_text("mine")
    return path


SPECIALS = {
    "character device": _char_device,
    "FIFO": _fifo,
    "symbolic link": _symlink,
    "folder": _folder,
}


def _snapshot(path: Path) -> tuple[int, int, int]:
    st = os.lstat(path)
    return st.st_mode, st.st_ino, st.st_rdev


def _visible(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("kind", SPECIALS)
@pytest.mark.parametrize("overwrite", [True, False])
def test_atomic_write_bytes_refuses_what_is_not_a_regular_file(tmp_path, kind, overwrite):
    target = SPECIALS[kind](tmp_path / "out.png")
    before, listing = _snapshot(target), _visible(tmp_path)
    with pytest.raises(NotReplaceableError, match=f"out.png is a {kind.split()[0]}"):
        atomic_write_bytes(target, b"data", overwrite=overwrite)
    assert _snapshot(target) == before
    assert _visible(tmp_path) == listing  # no temporary left beside it
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_the_sentence_says_what_the_target_is_and_that_it_is_kept(tmp_path):
    fifo = _fifo(tmp_path / "pipe")
    with pytest.raises(NotReplaceableError) as err:
        check_replaceable(fifo)
    assert str(err.value) == (
        f"{fifo} is a FIFO (named pipe), not a regular file; refusing to replace it"
    )
    check_replaceable(tmp_path / "missing")  # nothing there: fine
    (tmp_path / "file").write_bytes(b"x")
    check_replaceable(tmp_path / "file")
    check_replaceable(_folder(tmp_path / "tree"), tree=True)
    with pytest.raises(NotReplaceableError, match="is a regular file, not a folder"):
        check_replaceable(tmp_path / "file", tree=True)


def test_a_regular_file_is_still_replaced(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    atomic_write_bytes(target, b"new", overwrite=True)
    assert target.read_bytes() == b"new"


@pytest.mark.parametrize("kind", ["character device", "FIFO", "folder"])
def test_atomic_write_many_writes_nothing_when_one_target_is_special(tmp_path, kind):
    first = tmp_path / "data.npz"
    first.write_bytes(b"old data")
    special = SPECIALS[kind](tmp_path / "data.manifest.json")
    before = _snapshot(special)
    with pytest.raises(AtomicWriteError) as err:
        atomic_write_many([(first, b"new data"), (special, b"{}")], overwrite=True)
    assert isinstance(err.value.cause, NotReplaceableError)
    assert first.read_bytes() == b"old data"  # checked before anything was written
    assert _snapshot(special) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_an_export_over_a_fifo_or_a_device_is_one_sentence(tmp_path):
    ds = LabeledDataset(
        np.random.default_rng(0).normal(size=(12, 2)).astype(np.float32),
        np.arange(12) % 3,
        ["a", "b", "c"],
        name="toy",
    )
    for make in (_fifo, _char_device):
        target = make(tmp_path / f"toy-{make.__name__}.npz")
        before = _snapshot(target)
        with pytest.raises(ExportError, match="not a regular file; refusing to replace it"):
            export_dataset(ds, target, format="npz", overwrite=True)
        assert _snapshot(target) == before
        assert not target.with_name(target.stem + ".manifest.json").exists()


def test_save_idx_refuses_a_fifo_and_a_device(tmp_path):
    images = np.zeros((2, 3, 3), dtype=np.uint8)
    for make in (_fifo, _char_device):
        target = make(tmp_path / f"images-{make.__name__}.idx")
        before = _snapshot(target)
        with pytest.raises(ExportError, match="refusing to replace it"):
            save_idx(target, images, overwrite=True)
        assert _snapshot(target) == before


def test_cli_show_grid_refuses_a_device_before_any_work(tmp_path, capsys):
    device = _char_device(tmp_path / "grid.png")
    before = _snapshot(device)
    code = main(["show", "mnist", "--grid", str(device), "--overwrite"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--grid" in err and "is a character device, not a regular file" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert _snapshot(device) == before


def test_cli_grid_out_refuses_a_fifo_before_any_work(tmp_path, capsys):
    fifo = _fifo(tmp_path / "grid.csv")
    before = _snapshot(fifo)
    args = ["grid", "--target", "mnist", "--refs", "usps,fashion_mnist", "--n", "60"]
    code = main([*args, "--out", str(fifo), "--overwrite"])
    err = capsys.readouterr().err
    assert code == 2 and "--out" in err and "is a FIFO (named pipe)" in err
    assert "Traceback" not in err
    assert _snapshot(fifo) == before


def test_cli_transfer_out_refuses_a_fifo_inside_its_folder(tmp_path, capsys):
    out = tmp_path / "results"
    out.mkdir()
    fifo = _fifo(out / "manifest.json")
    code = main(
        ["transfer", "--target", "mnist", "--refs", "usps,fashion_mnist", "--out", str(out)]
    )
    err = capsys.readouterr().err
    assert code == 2 and "manifest.json is a FIFO" in err and "Traceback" not in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_cache_entry_that_is_a_fifo_is_recomputed_not_read(tmp_path):
    cache = DiskCache(tmp_path / "cache")
    stored = cache.store("ns", "k", {"x": np.arange(3)})
    assert stored is not None
    stored.unlink()
    _fifo(stored)
    with pytest.warns(CacheCorruptWarning, match="cannot be read"):
        assert cache.load("ns", "k") is None  # at once: a FIFO is never opened to read
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.store("ns", "k", {"x": np.arange(3)}) is None
    assert any("refusing to replace it" in str(w.message) for w in caught)
    assert stat.S_ISFIFO(os.lstat(stored).st_mode)


def test_a_cache_secret_that_is_a_fifo_does_not_hang(tmp_path):
    folder = tmp_path / "cache"
    folder.mkdir()
    _fifo(folder / CACHE_SECRET_NAME)
    cache = DiskCache(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cache.store("ns", "k", {"x": np.arange(3)}) is None
        assert cache.load("ns", "k") is None


@pytest.fixture
def widget(monkeypatch):
    from geoviz.explorer.widget import GeodesicExplorer

    w = GeodesicExplorer.__new__(GeodesicExplorer)
    import threading

    w._lock = threading.Lock()
    w._figure_seq = 0
    w._figures = {}
    sent: list[dict] = []
    monkeypatch.setattr(
        w, "send", lambda content, buffers=None: sent.append(content), raising=False
    )
    w.sent = sent
    return w


def _answer_png(w, ident: int) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"0" * 8
    data = "data:image/png;base64," + base64.b64encode(png).decode()
    w._receive_figure({"kind": "figure", "id": ident, "data": data})


def test_save_figure_follows_the_cli_overwrite_rule(widget, tmp_path):
    target = tmp_path / "view.png"
    target.write_bytes(b"mine")
    with pytest.raises(ExportExistsError, match="pass overwrite=True"):
        widget.save_figure(target)
    assert widget.sent == [] and target.read_bytes() == b"mine"  # the browser was not asked
    future = widget.save_figure(target, overwrite=True)
    _answer_png(widget, 1)
    assert future.result(0) == target and target.read_bytes().startswith(b"\x89PNG")


def test_save_figure_refuses_a_device_a_fifo_and_a_late_arrival(widget, tmp_path):
    for make in (_char_device, _fifo):
        target = make(tmp_path / f"view-{make.__name__}.png")
        before = _snapshot(target)
        with pytest.raises(ExportError, match="not a regular file"):
            widget.save_figure(target, overwrite=True)
        assert _snapshot(target) == before
    assert widget.sent == []
    late = tmp_path / "late.png"
    future = widget.save_figure(late)
    _fifo(late)  # appears before the browser answers
    _answer_png(widget, widget._figure_seq)
    with pytest.raises(ExportError, match="is a FIFO"):
        future.result(0)
    assert stat.S_ISFIFO(os.lstat(late).st_mode)
