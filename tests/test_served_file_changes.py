"""Results keyed by what a file is, not by its name (issue 41, item 2).

The link ``/geodesic?target=digits/changing.npz&refs=...`` showed the same W² after the
served file was replaced by another dataset, by junk, by a FIFO or by an npz claiming
78 GB: the app's result cache was keyed by dataset names. A served dataset's choice is now
stamped on every page run by what its file is (``stat``: type, device, inode, size,
modification and change times; :func:`geoviz.data.formats.path_stamp`), and every key of
the app (:meth:`Scenario.key`, :meth:`Scenario.data_key`, :meth:`Scenario.otdd_key`) and so
every cache (fit tier, derived tier, the disk entries keyed by them) follows the file. The
command line's in-process dataset cache (:func:`geoviz.data.registry.load_dataset`) uses
the same stamp.
"""

from __future__ import annotations

import io
import os
import shutil
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

from geoviz.app.links import scenario_from_token, scenario_to_token
from geoviz.app.scenario import UNAVAILABLE_STAMP, Scenario, served_stamp
from geoviz.app.services import datasets as dataset_services
from geoviz.app.services import geodesic as geodesic_services
from geoviz.app.session import SessionModel
from geoviz.app.settings import AppSettings, default_scenario
from geoviz.data.choice import DatasetChoice, FewShotOptions
from geoviz.data.formats import path_stamp
from geoviz.data.registry import clear_cache, load_dataset
from geoviz.errors import DatasetError

ROOT = Path(__file__).resolve().parents[1]


def _vectors(path: Path, seed: int, shift: float = 0.0) -> None:
    """A small 3-class vector dataset; the same seed and size always give the same bytes
    count (float32 features, int64 labels), other seeds other values."""
    rng = np.random.default_rng(seed)
    y = np.arange(60) % 3
    x = (rng.normal(size=(60, 4)) + shift + y[:, None]).astype(np.float32)
    np.savez(path, x=x, y=y.astype(np.int64))


def _replace(path: Path, write, *, keep_mtime: bool = False) -> None:
    """Put new content at ``path`` by renaming a new file over it (as ``cp`` + ``mv`` and
    most deploy tools do); ``keep_mtime`` gives it the old file's modification time."""
    old = os.stat(path)
    fresh = path.with_name("fresh-" + path.name)
    write(fresh)
    if keep_mtime:
        os.utime(fresh, ns=(old.st_atime_ns, old.st_mtime_ns))
    os.replace(fresh, path)


def _npz_declaring(shape: tuple[int, ...]) -> bytes:
    """An .npz whose ``x`` member is only a .npy header declaring ``shape`` (float64)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": shape}
    )
    labels = io.BytesIO()
    np.save(labels, np.arange(10) % 2)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("x.npy", header.getvalue())
        archive.writestr("y.npy", labels.getvalue())
    return out.getvalue()


# ---------------------------------------------------------------- the stamp itself


def test_path_stamp_follows_the_file_and_never_opens_it(tmp_path):
    f = tmp_path / "d.npz"
    _vectors(f, 0)
    first, size = path_stamp(f), os.stat(f).st_size
    assert path_stamp(f) == first  # nothing changed: the same stamp

    # another dataset of exactly the same size, renamed over it with the old mtime put back
    _replace(f, lambda p: _vectors(p, 1), keep_mtime=True)
    assert os.stat(f).st_size == size
    second = path_stamp(f)
    assert second != first

    # rewritten in place (same inode, same size), its modification time moved on
    before = os.stat(f)
    _vectors(f, 2)
    os.utime(f, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    assert os.stat(f).st_ino == before.st_ino and os.stat(f).st_size == before.st_size
    third = path_stamp(f)
    assert third not in (first, second)

    # a FIFO: stamped by stat, never opened (an open would block this test for ever)
    f.unlink()
    os.mkfifo(f)
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(path_stamp(f)), daemon=True)
    worker.start()
    worker.join(10)
    assert done and done[0] not in (first, second, third)
    f.unlink()
    assert path_stamp(f) not in (first, second, third, done[0])  # gone: a stamp of its own


def test_a_folder_stamp_follows_every_file_below_it(tmp_path):
    folder = tmp_path / "set"
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "x.txt").write_text("1")
    (folder / "loop").symlink_to(folder)  # links are followed, each real folder once
    first = path_stamp(folder)
    before = os.stat(folder / "a" / "x.txt")
    (folder / "a" / "x.txt").write_text("2")
    os.utime(folder / "a" / "x.txt", ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    assert path_stamp(folder) != first
    with pytest.raises(DatasetError, match="more than 2 entries"):
        path_stamp(folder, max_entries=2)


# ---------------------------------------------------------------- keys and links


def test_the_pseudo_label_method_keys_only_few_shot_scenarios():
    """Label spreading gives other pseudo-labels than the kNN vote, so a few-shot scenario's
    keys follow the method; without a few-shot target (or with kNN, the method of before)
    the keys are those of before the option existed."""
    s = default_scenario(AppSettings())
    off = s.with_(few_shot=FewShotOptions(enabled=False, pseudo_labels="knn"))
    assert (off.key(), off.data_key()) == (s.key(), s.data_key())
    knn = s.with_(few_shot=FewShotOptions(enabled=True, k=5, pseudo_labels="knn"))
    spread = s.with_(few_shot=FewShotOptions(enabled=True, k=5, pseudo_labels="spread"))
    assert knn.key() != spread.key() and knn.data_key() != spread.data_key()
    assert knn.key() != s.key()
    assert scenario_from_token(scenario_to_token(spread)).key() == spread.key()


def test_registry_and_unstamped_keys_are_those_of_before():
    """Stamps change only the keys of stamped (served) datasets: registry scenarios keep
    the keys they are stored under on disk (values of eb7d397)."""
    s = default_scenario(AppSettings())
    assert s.stamped(()) is s
    assert (s.key(), s.data_key(), s.otdd_key()) == (
        "e4623601a9b71d6ff0c43cb0",
        "24498037f86ccf1affe70cda",
        "251bcd2624ef90632b75e367",
    )
    served = Scenario(
        DatasetChoice("served/a.npz", source="server"),
        (DatasetChoice("iris"), DatasetChoice("gmm2d", seed=1)),
        n_target=40,
        n_reference=40,
    )
    assert (served.key(), served.data_key()) == (
        "8d366a33246e4a62776d932f",
        "2ea9588a2bdfda8ac490be6f",
    )


def test_stamps_key_the_scenario_but_never_travel_in_a_link(tmp_path):
    folder = tmp_path / "served"
    folder.mkdir()
    _vectors(folder / "a.npz", 0)
    dirs = (("served", folder.resolve()),)
    plain = Scenario(
        DatasetChoice("served/a.npz", source="server"),
        (DatasetChoice("iris"), DatasetChoice("iris", seed=1)),
        n_target=40,
        n_reference=40,
    )
    stamped = plain.stamped(dirs)
    assert (
        stamped.target.stamp == served_stamp("served/a.npz", dirs) == path_stamp(folder / "a.npz")
    )
    assert stamped.stamped(dirs) is stamped  # unchanged file: the same scenario, keys kept
    assert stamped.key() != plain.key() and stamped.data_key() != plain.data_key()
    assert stamped.otdd_key() != plain.otdd_key()
    # the link names the file, not what it was on this server
    assert scenario_to_token(stamped) == scenario_to_token(plain)
    assert scenario_from_token(scenario_to_token(stamped)) == plain
    # and a link cannot bring a stamp of its own (say, the file as it was before)
    import base64
    import json
    import zlib

    forged = plain.to_dict()
    forged["target"]["stamp"] = stamped.target.stamp
    raw = json.dumps(forged, default=list).encode()
    token = base64.urlsafe_b64encode(zlib.compress(raw)).decode().rstrip("=")
    with pytest.raises(DatasetError, match="bad dataset entry"):
        scenario_from_token(token)
    # a file the server cannot serve now has a stamp of its own
    assert served_stamp("served/gone.npz", dirs) == UNAVAILABLE_STAMP
    with pytest.raises(DatasetError, match="stamp"):
        DatasetChoice("iris", stamp=stamped.target.stamp)


# ---------------------------------------------------------------- the app's services


def _w2(model: SessionModel) -> float:
    """W² of the session's scenario as a page computes it (loaded datasets, background fit)."""
    data = dataset_services.scenario_data(model)
    job = geodesic_services.start_geodesic(model.scenario, data)
    assert job.wait(120), "the fit did not finish"
    assert job.error_ is None, job.error_
    geodesic_services.finish_geodesic(model.scenario)
    result = geodesic_services.geodesic_if_ready(model.scenario)
    assert result is not None
    return float(result.w2_hat)


def test_a_served_file_replaced_gives_new_numbers_and_a_broken_one_a_sentence(fresh_server):
    folder = fresh_server / "served"
    folder.mkdir()
    changing = folder / "changing.npz"
    _vectors(changing, 0)
    _vectors(folder / "other.npz", 5, shift=3.0)
    settings = AppSettings(n_default=40, data_dirs=(("served", folder.resolve()),))

    def linked(name: str) -> Scenario:
        return Scenario(
            DatasetChoice(name, source="server"),
            (DatasetChoice("iris"), DatasetChoice("iris", seed=1)),
            n_target=40,
            n_reference=40,
        )

    model = SessionModel({}, settings)
    assert model.restore({"scenario": scenario_to_token(linked("served/changing.npz"))}) == []
    first = _w2(model)

    # the same size, another dataset, its modification time moved on: a page run restamps
    before = os.stat(changing)
    _vectors(changing, 5, shift=3.0)  # other.npz's bytes, in place
    os.utime(changing, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    assert os.stat(changing).st_size == before.st_size
    model.restamp()
    assert geodesic_services.geodesic_if_ready(model.scenario) is None  # no old number
    second = _w2(model)
    other = SessionModel({}, settings)
    other.scenario = other.admit(linked("served/other.npz"))
    assert second != pytest.approx(first)
    assert second == pytest.approx(_w2(other))  # the number of the file it now is

    # junk where the file was: the loader's sentence, not the last numbers
    _replace(changing, lambda p: p.write_bytes(b"junk " * 40))
    model.restamp()
    assert geodesic_services.geodesic_if_ready(model.scenario) is None
    assert dataset_services.scenario_data_if_ready(model.scenario) is None
    with pytest.raises(DatasetError, match=r"served/changing\.npz.*not an \.npz archive"):
        dataset_services.scenario_data(model)

    # an npz claiming 78 GB: refused from its headers, in a sentence
    _replace(changing, lambda p: p.write_bytes(_npz_declaring((975_000_000, 10))))
    model.restamp()
    assert geodesic_services.geodesic_if_ready(model.scenario) is None
    with pytest.raises(DatasetError, match=r"served/changing\.npz.*declare 72\.64 GiB"):
        dataset_services.scenario_data(model)

    # a FIFO: refused by stat, in a sentence, without blocking the page
    changing.unlink()
    os.mkfifo(changing)
    model.restamp()
    assert geodesic_services.geodesic_if_ready(model.scenario) is None
    with pytest.raises(DatasetError, match=r"named pipe \(FIFO\)"):
        dataset_services.scenario_data(model)

    # the first dataset back (a new file): its numbers again
    changing.unlink()
    _vectors(changing, 0)
    model.restamp()
    assert _w2(model) == pytest.approx(first)


# ---------------------------------------------------------------- the page, through the link


@pytest.fixture
def served_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "digits"
    folder.mkdir()
    monkeypatch.setenv("GEOVIZ_DATA_DIRS", str(folder))
    monkeypatch.setenv("GEOVIZ_EMBEDDING", "pca")
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GEOVIZ_TRANSFER_BACKEND", "sequential")
    return folder


def _nist(name: str, path: Path) -> None:
    """200 training images of a bundled sample as an npz of ``x`` (uint8, N x 28 x 28), ``y``."""
    with np.load(ROOT / "assets" / "nist" / f"{name}.npz") as data:
        np.savez(path, x=data["x_train"][:200], y=data["y_train"][:200])


def _open_link(target: str):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    link = {"target": target, "refs": "fashion_mnist,usps", "n": "40", "size": "16"}
    for key, value in {**link, "seed": "0", "epsilon": "0.01"}.items():
        at.query_params[key] = value
    at.switch_page("pages/3_geodesic.py")
    at.run()
    return at


def _page_w2(at) -> float | None:
    assert not at.exception, [e.value for e in at.exception]
    result = geodesic_services.geodesic_if_ready(at.session_state[SessionModel.SCENARIO])
    return None if result is None else float(result.w2_hat)


def test_the_geodesic_link_follows_its_served_file(served_app):
    """The issue's link: a replaced file gives the new file's W², junk and a FIFO the
    loader's sentence on the next page run, never the W² of before."""
    changing = served_app / "changing.npz"
    _nist("kmnist", changing)
    _nist("mnist", served_app / "mnist_copy.npz")
    at = _open_link("digits/changing.npz")
    first = _page_w2(at)
    assert first is not None and [e.value for e in at.error] == []

    _replace(changing, lambda p: shutil.copyfile(served_app / "mnist_copy.npz", p))
    at.run()
    second = _page_w2(at)
    expected = _page_w2(_open_link("digits/mnist_copy.npz"))  # a fresh link to those bytes
    assert second is not None and expected is not None
    assert second != pytest.approx(first) and second == pytest.approx(expected)

    for broken, words in (
        (lambda p: p.write_bytes(b"PK\x03\x04 junk, not a zip archive"), "\\.npz archive"),
        (lambda p: os.mkfifo(p), "named pipe \\(FIFO\\)"),
    ):
        changing.unlink()
        broken(changing)
        at.run()
        assert _page_w2(at) is None
        errors = [e.value for e in at.error]
        assert len(errors) == 1 and "Could not load the scenario's datasets" in errors[0], errors
        assert words in errors[0] and str(served_app) not in errors[0]
        sidebar = " ".join(m.value for m in at.sidebar.markdown)
        assert "**â** =" not in sidebar  # no weights of the file that was


# ---------------------------------------------------------------- the command line's cache


def test_load_dataset_reloads_a_file_replaced_with_the_same_size_and_mtime(tmp_path):
    """The in-process cache of path loads (the CLI's, the library's) was keyed by mtime and
    size: a file renamed over another of the same size with the old mtime was not read."""
    clear_cache()
    f = tmp_path / "d.npz"
    _vectors(f, 0)
    first = load_dataset(f)
    assert load_dataset(f) is first  # cached while the file is the same
    _replace(f, lambda p: _vectors(p, 1), keep_mtime=True)
    second = load_dataset(f)
    assert second.fingerprint != first.fingerprint
    clear_cache()


def test_a_file_that_changes_while_it_is_read_is_kept_under_no_key(fresh_server, monkeypatch):
    folder = fresh_server / "served"
    folder.mkdir()
    changing = folder / "changing.npz"
    _vectors(changing, 0)
    settings = AppSettings(n_default=40, data_dirs=(("served", folder.resolve()),))
    model = SessionModel({}, settings)
    model.scenario = model.admit(
        Scenario(
            DatasetChoice("served/changing.npz", source="server"),
            (DatasetChoice("iris"), DatasetChoice("iris", seed=1)),
            n_target=40,
            n_reference=40,
        )
    )
    read = dataset_services.load_path

    def read_then_replace(path, **kwargs):
        ds = read(path, **kwargs)
        _replace(changing, lambda p: _vectors(p, 1))  # another file arrives meanwhile
        return ds

    monkeypatch.setattr(dataset_services, "load_path", read_then_replace)
    with pytest.raises(DatasetError, match="changed on the server while it was loaded"):
        dataset_services.scenario_data(model)
    monkeypatch.undo()
    assert dataset_services.scenario_data_if_ready(model.scenario) is None
    model.restamp()
    assert dataset_services.scenario_data_if_ready(model.scenario) is None
    assert dataset_services.scenario_data(model).data_key == model.scenario.data_key()
