"""Tests of geoviz.data.formats.archive: limits set on the package, temporary folder clean-up."""

from __future__ import annotations

import io
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from geoviz.data import formats
from geoviz.data.formats import load_upload
from geoviz.errors import DatasetError, DatasetFormatError


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
