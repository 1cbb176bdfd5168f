"""Only regular files are read as datasets (geoviz.data.formats with geoviz.files): a FIFO
blocked ``open()`` and ``/dev/zero`` was read until the memory limit (issue 32). Every case
runs in a child interpreter with a bounded data segment and a per-case alarm
(:mod:`hostile_files`), so a regression fails instead of hanging the suite."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hostile_files import make_fifo, make_sparse, needs_posix_files, run_cases
from PIL import Image

from geoviz import files
from geoviz.data.formats import load_path
from geoviz.errors import DatasetError, GeovizError


def _png(path: Path, value: int) -> None:
    Image.fromarray(np.full((8, 8), value, dtype=np.uint8)).save(path)


@pytest.fixture
def hostile(tmp_path):
    """Paths that are not regular files, named as dataset files, and their expected text."""
    needs_posix_files()
    cases: dict[str, tuple[str, dict[str, str], str]] = {}
    for name in ("a.csv", "a.npz", "train-images-idx3-ubyte", "a.zip", "a_labels.txt"):
        fifo = make_fifo(tmp_path / name)
        cases[f"fifo {name}"] = (str(fifo), {}, "is a named pipe (FIFO), not a regular file")
    for kind in ("csv", "npz", "idx"):
        cases[f"/dev/zero as {kind}"] = (
            "/dev/zero",
            {"kind": kind},
            "is a character device, not a regular file",
        )
    cases["/dev/zero"] = ("/dev/zero", {}, "is a character device, not a regular file")
    # an ImageFolder whose class folder holds a FIFO named like an image
    root = tmp_path / "folder"
    for cls in ("zero", "one"):
        (root / cls).mkdir(parents=True)
        for i in range(3):
            _png(root / cls / f"{i}.png", 40 * i)
    make_fifo(root / "one" / "blocks.png")
    cases["fifo image"] = (
        str(root),
        {},
        "cannot read image one/blocks.png: is a named pipe (FIFO), not a regular file",
    )
    # an IDX pair whose labels file is a FIFO, named explicitly
    pair = tmp_path / "pair"
    pair.mkdir()
    images = pair / "t-images-idx3-ubyte"
    images.write_bytes(b"\x00\x00\x08\x03" + (1).to_bytes(4, "big") * 3 + b"\x00")
    make_fifo(pair / "t-labels-idx1-ubyte")
    cases["fifo idx labels"] = (
        str(pair / "t-labels-idx1-ubyte"),
        {},
        "is a named pipe (FIFO), not a regular file",
    )
    return cases


def test_datasets_that_are_not_regular_files_are_refused_quickly(hostile):
    setup = "from geoviz.data.formats import load_path\nCASES = {\n"
    for name, (path, options, _) in hostile.items():
        setup += f"    {name!r}: lambda: load_path({path!r}, **{options!r}),\n"
    setup += "}\n"
    results = run_cases(setup)
    for name, (_, _, expect) in hostile.items():
        kind, message = results[name]
        assert kind in ("DatasetError", "DatasetFormatError") and expect in message, (
            name,
            kind,
            message,
        )


def test_an_over_size_sparse_csv_is_refused_before_reading(tmp_path, monkeypatch):
    path = make_sparse(tmp_path / "huge.csv", 64 * 1024**3)
    monkeypatch.setattr("geoviz.memory.memory_limit", lambda: (2 * 1024**3, "a test limit"))
    with pytest.raises(GeovizError, match=r"reading .*huge\.csv needs 64\.0+ GiB"):
        load_path(path)


def test_a_directory_named_as_a_file_is_refused(tmp_path):
    (tmp_path / "d.npz").mkdir()
    with pytest.raises(DatasetError, match="got a directory"):
        load_path(tmp_path / "d.npz", kind="npz")


def test_regular_files_and_links_to_them_still_load(tmp_path):
    x = np.random.default_rng(0).random((20, 4)).astype(np.float32)
    y = np.arange(20) % 2
    buf = io.BytesIO()
    np.savez(buf, x=x, y=y)
    (tmp_path / "real.npz").write_bytes(buf.getvalue())
    os.symlink(tmp_path / "real.npz", tmp_path / "link.npz")
    assert load_path(tmp_path / "link.npz").n_samples == 20
    with zipfile.ZipFile(tmp_path / "folder.zip", "w") as zf:
        for cls in ("a", "b"):
            for i in range(3):
                img = io.BytesIO()
                Image.fromarray(np.full((8, 8), 50 * i, dtype=np.uint8)).save(img, "PNG")
                zf.writestr(f"{cls}/{i}.png", img.getvalue())
    assert load_path(tmp_path / "folder.zip").n_samples == 6


def test_the_helper_reads_within_its_bound(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 100)
    assert files.read_regular_file(path, max_bytes=100) == b"x" * 100
    with pytest.raises(GeovizError, match=r"f\.bin: is 100 bytes, larger than the 99 bytes"):
        files.read_regular_file(path, max_bytes=99)
    with pytest.raises(GeovizError, match=r"cannot read file"):
        files.check_regular_file(tmp_path / "missing")
