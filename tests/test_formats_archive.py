"""Tests of geoviz.data.formats.archive: limits, refusals before extracting, temporary folder clean-up."""

from __future__ import annotations

import io
import shutil
import struct
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from geoviz import memory
from geoviz.data import formats
from geoviz.data.formats import archive, imagefolder, load_upload
from geoviz.errors import DatasetError, DatasetFormatError, ResourceError


def _imagefolder_zip(classes: str) -> bytes:
    """A zip of ``<class>/<i>.png`` 2x2 grey images, one per letter of ``classes``."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for i, cls in enumerate(classes):
            png = io.BytesIO()
            Image.fromarray(np.full((2, 2), 40 * i, dtype=np.uint8)).save(png, format="PNG")
            zf.writestr(f"{cls}/{i}.png", png.getvalue())
    return buf.getvalue()


def test_zip_member_cap_is_read_from_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _imagefolder_zip("aab")
    assert load_upload(data, "ok.zip").n_samples == 3
    monkeypatch.setattr(formats, "MAX_ZIP_MEMBERS", 2)
    with pytest.raises(DatasetFormatError, match=r"many.zip.*3 members.*limit of 2"):
        load_upload(data, "many.zip")


def test_zip_temp_folder_is_removed_after_load_and_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ds = load_upload(_imagefolder_zip("ab"), "two.zip")
    assert ds.classes == ("a", "b") and ds.name == "two"
    assert not any(tmp_path.iterdir())
    # an error raised while loading the extracted folder, not while extracting it
    with pytest.raises(DatasetError, match=r"one.zip.*only one class") as info:
        load_upload(_imagefolder_zip("aa"), "one.zip")
    assert str(tmp_path) not in str(info.value)
    assert not any(tmp_path.iterdir())


# ----------------------------------------------------------------------------- hostile archives


def _zeros_zip(size: int) -> bytes:
    """A zip of ``a/x.png`` and ``b/y.png`` of ``size`` zero bytes each (tiny compressed)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("a/x.png", bytes(size))
        zf.writestr("b/y.png", bytes(size))
    return buf.getvalue()


@pytest.fixture
def no_extraction(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any zip member is opened for reading (extracted)."""
    real = zipfile.ZipFile.open

    def opened(self: zipfile.ZipFile, name: object, mode: str = "r", *args: object, **kw: object):
        if mode == "r":
            raise AssertionError("a zip member was extracted before the refusal")
        return real(self, name, mode, *args, **kw)

    monkeypatch.setattr(zipfile.ZipFile, "open", opened)


def _limit_memory(monkeypatch: pytest.MonkeyPatch, n_bytes: int) -> None:
    monkeypatch.setattr(memory, "memory_limit", lambda: (n_bytes, "a test limit"))


def test_declared_sizes_over_the_cap_are_refused_before_extracting(
    monkeypatch: pytest.MonkeyPatch, no_extraction: None
) -> None:
    data = _zeros_zip(3 * 2**20)
    assert len(data) < 20_000
    monkeypatch.setattr(formats, "MAX_UNCOMPRESSED_BYTES", 4 * 2**20)
    with pytest.raises(DatasetFormatError, match=r"^big.zip: zip archive expands to more than 4"):
        load_upload(data, "big.zip")


def test_declared_sizes_over_memory_are_refused_before_extracting(
    monkeypatch: pytest.MonkeyPatch, no_extraction: None
) -> None:
    _limit_memory(monkeypatch, 4 * 2**20)
    with pytest.raises(
        ResourceError,
        match=r"^loading the dataset in big.zip \(6.0 MiB uncompressed\) needs at least 6.0 MiB "
        r"but this process can allocate at most 4.0 MiB \(limit: a test limit",
    ):
        load_upload(_zeros_zip(3 * 2**20), "big.zip")


def test_declared_sizes_over_free_disk_are_refused_before_extracting(
    monkeypatch: pytest.MonkeyPatch, no_extraction: None
) -> None:
    usage = shutil.disk_usage(tempfile.gettempdir())
    monkeypatch.setattr(archive.shutil, "disk_usage", lambda path: usage._replace(free=2**20))
    with pytest.raises(
        ResourceError,
        match=r"^big.zip: extracting the zip archive needs 6.0 MiB of disk space but the "
        r"temporary folder has only 1.0 MiB free",
    ):
        load_upload(_zeros_zip(3 * 2**20), "big.zip")


def test_zip_of_huge_pngs_is_refused_from_the_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    png = io.BytesIO()
    Image.new("1", (9000, 9000)).save(png, format="PNG")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for i in range(12):
            zf.writestr(f"{'ab'[i % 2]}/{i:02d}.png", png.getvalue())
    assert len(buf.getvalue()) < 1_000_000
    monkeypatch.setattr(imagefolder, "_read_image", lambda *a: pytest.fail("an image was decoded"))
    with pytest.raises(DatasetFormatError) as info:
        load_upload(buf.getvalue(), "bomb.zip")
    assert str(info.value) == (
        "bomb.zip/a/00.png: image a/00.png is 9000x9000 pixels, larger than 4096x4096 (the "
        "largest image geoviz decodes); resize the images first"
    )


def test_resource_errors_inside_the_archive_name_it_not_the_temp_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for i, cls in enumerate("aabb"):
            png = io.BytesIO()
            Image.new("L", (100, 100), 40 * i).save(png, format="PNG")
            zf.writestr(f"set/{cls}/{i}.png", png.getvalue())
    # room for the files (a few kB), not for 40,000 decoded pixels
    _limit_memory(monkeypatch, 200 * 2**10)
    with pytest.raises(ResourceError) as info:
        load_upload(buf.getvalue(), "up.zip")
    text = str(info.value)
    assert text.startswith("decoding the 4 images of up.zip/set (40,000 pixels) needs")
    assert str(tmp_path) not in text and "geoviz-zip-" not in text
    assert not any(tmp_path.iterdir())  # the extraction folder is gone


def test_idx_members_are_checked_from_their_headers_before_extracting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    n = 50_000  # 39 MB of zero pixels, 40 kB zipped; its dataset needs 13 times that
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(
            "set/train-images-idx3-ubyte",
            bytes([0, 0, 8, 3]) + struct.pack(">3I", n, 28, 28) + bytes(n * 28 * 28),
        )
        zf.writestr(
            "set/train-labels-idx1-ubyte",
            bytes([0, 0, 8, 1]) + struct.pack(">I", n) + bytes(range(10)) * (n // 10),
        )
    assert len(buf.getvalue()) < 100_000
    _limit_memory(monkeypatch, 256 * 2**20)  # room for the 39 MB of files, not the dataset
    monkeypatch.setattr(
        archive, "open", lambda *a, **k: pytest.fail("a member was extracted"), raising=False
    )
    with pytest.raises(
        ResourceError,
        match=r"^loading mnist.zip/set/train-images-idx3-ubyte \(IDX dimensions \(50000, 28, 28\) "
        r"of uint8\) needs 486.0 MiB but",
    ):
        load_upload(buf.getvalue(), "mnist.zip")


def test_zip_extraction_errors_name_no_server_path() -> None:
    """Row 8: "[Errno 17] File exists: '/tmp/geoviz-zip-…/set/link'" reached the visitor."""
    from geoviz.data.formats import load_upload
    from geoviz.errors import DatasetError

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        link = zipfile.ZipInfo("set/link")
        link.external_attr = (0o120777 << 16) | 0x20  # a symbolic link member
        zf.writestr(link, "../../etc")
        zf.writestr("set/link/x.png", b"not reached")
    with pytest.raises(DatasetError) as info:
        load_upload(buf.getvalue(), "set.zip")
    text = str(info.value)
    assert "set.zip" in text and "set/link" in text
    assert tempfile.gettempdir() not in text and "geoviz-zip-" not in text
