"""The upload store (geoviz.app.uploads) and the app's uploads through it.

Issue 25: row 1 (uploads piled up: bounded by count in memory, never cleaned on disk, the
raw bytes held in every session) and row 9 (an upload's sha256 worked as a permanent key
that anyone knowing a file's hash could use, or use to learn whether it was uploaded).
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from geoviz.app.services import caches as cache_services
from geoviz.app.services import datasets as dataset_services
from geoviz.app.session import SessionModel
from geoviz.app.settings import AppSettings, default_scenario
from geoviz.app.uploads import UploadRef, UploadStore, dataset_bytes
from geoviz.data.choice import DatasetChoice
from geoviz.data.formats import load_upload
from geoviz.errors import DatasetError, GeovizError, ResourceError


def npz_bytes(n: int = 200, d: int = 50, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    np.savez(buf, x=rng.normal(size=(n, d)).astype(np.float32), y=np.arange(n) % 2)
    return buf.getvalue()


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def one_size() -> tuple[int, int]:
    """(file bytes, parsed bytes) of one npz_bytes() upload."""
    data = npz_bytes()
    return len(data), dataset_bytes(load_upload(data, "x.npz"))


def test_parsed_uploads_are_bounded_by_bytes_not_count(tmp_path):
    _, parsed_size = one_size()
    store = UploadStore(tmp_path, memory_bytes=int(2.5 * parsed_size), disk_bytes=10**9)
    refs = [store.add(f"u{i}.npz", npz_bytes(seed=i))[0] for i in range(4)]
    assert store.memory_used <= 2.5 * parsed_size
    assert store.memory_used == 2 * parsed_size  # the two most recent
    assert store.parses_ == 4
    # the evicted one comes back from disk (parsed again), the kept one does not
    store.dataset(refs[3].key)
    assert store.parses_ == 4
    ds = store.dataset(refs[0].key)
    assert store.parses_ == 5
    expected = load_upload(npz_bytes(seed=0), "u0.npz")
    np.testing.assert_array_equal(ds.features.numpy(), expected.features.numpy())
    assert store.memory_used <= 2.5 * parsed_size


def test_a_dataset_larger_than_the_memory_budget_is_not_kept(tmp_path):
    _, parsed_size = one_size()
    store = UploadStore(tmp_path, memory_bytes=parsed_size // 2)
    ref, ds = store.add("big.npz", npz_bytes())
    assert ds.n_samples == 200 and store.memory_used == 0
    assert store.dataset(ref.key).n_samples == 200 and store.memory_used == 0


def test_disk_quota_evicts_the_least_recently_used(tmp_path):
    file_size, _ = one_size()
    clock = Clock()
    store = UploadStore(tmp_path, disk_bytes=int(2.5 * file_size), clock=clock)
    a, _ = store.add("a.npz", npz_bytes(seed=1))
    clock.now += 10
    b, _ = store.add("b.npz", npz_bytes(seed=2))
    clock.now += 10
    store.clear_memory()
    store.dataset(a.key)  # a is used again: b is now the least recently used
    clock.now += 10
    c, _ = store.add("c.npz", npz_bytes(seed=3))
    assert store.disk_used <= 2.5 * file_size
    assert store.ref(a.key) is not None and store.ref(c.key) is not None
    assert store.ref(b.key) is None
    store.clear_memory()
    with pytest.raises(DatasetError, match="not on this server"):
        store.dataset(b.key)


def test_uploads_expire_and_idle_datasets_leave_memory(tmp_path):
    clock = Clock()
    store = UploadStore(tmp_path, ttl_seconds=3600, idle_seconds=60, clock=clock)
    ref, _ = store.add("a.npz", npz_bytes())
    assert store.memory_used > 0
    clock.now += 61
    store.sweep()
    assert store.memory_used == 0 and store.disk_used == ref.size  # memory back, disk kept
    assert store.dataset(ref.key).n_samples == 200  # a use renews the expiry
    clock.now += 3000
    store.sweep()
    assert store.ref(ref.key) is not None
    clock.now += 3601
    store.sweep()
    assert store.disk_used == 0 and store.memory_used == 0
    assert list(tmp_path.glob("*.data")) == []
    with pytest.raises(DatasetError, match="deleted after 1 hours unused, or sooner"):
        store.dataset(ref.key)


def test_bad_or_oversized_files_leave_nothing(tmp_path):
    store = UploadStore(tmp_path, disk_bytes=10_000)
    with pytest.raises(GeovizError):
        store.add("bad.npz", b"not an archive")
    with pytest.raises(ResourceError, match="GEOVIZ_UPLOAD_DISK_MB"):
        store.add("big.npz", npz_bytes())
    assert store.disk_used == 0 and store.memory_used == 0 and store.parses_ == 1


def test_keys_are_private_not_content_hashes(tmp_path):
    """Row 9: the bare sha256 of an uploaded file named it in a link."""
    data = npz_bytes()
    store = UploadStore(tmp_path / "one")
    ref, _ = store.add("a.npz", data)
    sha = hashlib.sha256(data).hexdigest()
    assert ref.key != sha and len(ref.key) == 64
    assert store.key_for("a.npz", data) == ref.key  # the same file, the same key
    assert UploadStore(tmp_path / "other").key_for("a.npz", data) != ref.key  # other secret
    # a restart keeps the secret (links survive) and finds the file on disk
    again = UploadStore(tmp_path / "one")
    assert again.key_for("a.npz", data) == ref.key and again.dataset(ref.key).n_samples == 200
    # the content hash, a random key and a malformed key give the one same sentence
    texts = set()
    for key in (sha, "0" * 64, "not a key", ref.key[:-1] + "x"):
        with pytest.raises(DatasetError) as info:
            again.dataset(key)
        texts.add(str(info.value))
    assert len(texts) == 1


def _upload_scenario(model: SessionModel, refs: list[UploadRef]):
    return default_scenario().with_(
        target=DatasetChoice.from_upload(refs[0]),
        references=tuple(DatasetChoice.from_upload(r) for r in refs[1:]),
        n_target=200,
        n_reference=200,
    )


def test_a_link_to_an_upload_works_in_another_session_and_its_hash_does_not(fresh_server):
    data = npz_bytes()
    owner = SessionModel({})
    dataset_services.add_upload(owner, "a.npz", data)
    for i in (1, 2):
        dataset_services.add_upload(owner, f"r{i}.npz", npz_bytes(seed=i))
    owner.scenario = _upload_scenario(owner, list(owner.uploads.values()))

    # a visitor who was sent the link: the scenario names the upload by its key
    visitor = SessionModel({})
    visitor.restore(owner.query_state())
    assert visitor.uploads == {}
    cache_services.store().clear()
    cache_services.upload_store().clear_memory()  # after a restart too
    loaded = dataset_services.scenario_data(visitor).target
    np.testing.assert_array_equal(
        loaded.features.numpy(), load_upload(data, "a.npz").features.numpy()
    )

    # someone who knows the file's sha256 but has no link
    snoop = SessionModel({})
    snoop.scenario = default_scenario().with_(
        target=DatasetChoice("a.npz", source="upload", digest=hashlib.sha256(data).hexdigest())
    )
    never = SessionModel({})
    never.scenario = default_scenario().with_(
        target=DatasetChoice("a.npz", source="upload", digest="1" * 64)
    )
    texts = []
    for model in (snoop, never):
        with pytest.raises(DatasetError, match="not on this server") as info:
            dataset_services.scenario_data(model)
        texts.append(str(info.value))
    assert texts[0] == texts[1]  # nothing tells an existing file from a missing one


def test_a_scenario_never_parses_an_upload_twice(fresh_server):
    model = SessionModel({})
    refs = [dataset_services.add_upload(model, f"u{i}.npz", npz_bytes(seed=i))[0] for i in range(3)]
    uploads = cache_services.upload_store()
    parses = uploads.parses_
    assert parses == 3
    model.scenario = _upload_scenario(model, refs)
    dataset_services.scenario_data(model)
    assert uploads.parses_ == parses
    dataset_services.add_upload(model, "u0.npz", npz_bytes(seed=0))  # the same file again
    assert uploads.parses_ == parses


def test_the_session_holds_no_file_bytes(fresh_server):
    """Row 1: each session kept the raw bytes of its uploads (and Streamlit kept them for
    two minutes after the tab closed, for every closed tab)."""
    model = SessionModel({})
    data = npz_bytes(n=2000)
    dataset_services.add_upload(model, "a.npz", data)

    def sizes(obj, depth=0):
        if isinstance(obj, (bytes, bytearray, memoryview)):
            yield len(obj)
        elif isinstance(obj, dict) and depth < 6:
            for v in obj.values():
                yield from sizes(v, depth + 1)
        elif isinstance(obj, (list, tuple, set)) and depth < 6:
            for v in obj:
                yield from sizes(v, depth + 1)
        elif hasattr(obj, "__dict__") and depth < 6:
            yield from sizes(vars(obj), depth + 1)

    assert max(sizes(model.state), default=0) < 1000
    (ref,) = model.uploads.values()
    assert ref.size == len(data) and ref.filename == "a.npz"


def test_the_operator_can_set_the_secret(tmp_path):
    data = npz_bytes()
    a = UploadStore(tmp_path / "a", secret=b"s" * 32)
    b = UploadStore(tmp_path / "b", secret=b"s" * 32)
    assert a.key_for("x.npz", data) == b.key_for("x.npz", data)
    assert not (tmp_path / "a" / "secret").exists()
    with pytest.raises(GeovizError, match="16 bytes"):
        UploadStore(tmp_path / "c", secret=b"short")


def test_uploads_of_the_old_disk_cache_are_removed(fresh_server):
    """Row 1: uploads kept by sha256 in the disk cache were never cleaned."""
    from geoviz.app.services.caches import _UPLOADS, LEGACY_UPLOAD_NAMESPACE

    legacy = cache_services.disk_cache().directory / LEGACY_UPLOAD_NAMESPACE
    legacy.mkdir(parents=True)
    (legacy / "old.pt").write_bytes(b"x" * 1000)
    _UPLOADS.clear()
    cache_services.upload_store()
    assert not legacy.exists()


# ---------------------------------------------------------------- issue 32


def _npz_files(folder) -> tuple[set[str], set[str]]:
    """Keys of the ``.data`` and of the ``.json`` files in an upload folder."""
    return (
        {p.stem for p in folder.glob("*.data")},
        {p.stem for p in folder.glob("*.json")},
    )


def test_the_notice_says_a_full_upload_space_removes_files_early(tmp_path):
    """The notice promised "kept 24 hours" while quota pressure removed files in minutes."""
    text = dataset_services.upload_notice(AppSettings(upload_ttl_hours=24, upload_disk_mb=100), 50)
    assert "Files up to 50 MB" in text and "at most 24 hours" in text
    assert "100 MB of uploads for all visitors together" in text
    assert "possibly within minutes" in text
    # and that is what happens: with room for two files, the third removes the first
    file_size, _ = one_size()
    clock = Clock()
    store = UploadStore(
        tmp_path, disk_bytes=int(2.5 * file_size), ttl_seconds=24 * 3600.0, clock=clock
    )
    first, _ = store.add("a.npz", npz_bytes(seed=1))
    for i in (2, 3):
        clock.now += 60
        store.add(f"{i}.npz", npz_bytes(seed=i))
    assert store.ref(first.key) is None  # two minutes, not 24 hours


def test_a_changed_secret_breaks_old_links_with_a_sentence(tmp_path):
    """The README says changing GEOVIZ_UPLOAD_SECRET breaks earlier links; they still opened."""
    ref, _ = UploadStore(tmp_path, secret=b"a" * 32).add("a.npz", npz_bytes())
    rotated = UploadStore(tmp_path, secret=b"b" * 32)
    with pytest.raises(DatasetError, match="GEOVIZ_UPLOAD_SECRET was changed"):
        rotated.dataset(ref.key)
    # an upload stored before uploads recorded their secret: its key gives it away
    meta_path = tmp_path / f"{ref.key}.json"
    meta = json.loads(meta_path.read_text())
    del meta["secret"]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="GEOVIZ_UPLOAD_SECRET was changed"):
        UploadStore(tmp_path, secret=b"b" * 32).dataset(ref.key)
    assert UploadStore(tmp_path, secret=b"a" * 32).dataset(ref.key).n_samples == 200


class _Usage(NamedTuple):
    total: int
    used: int
    free: int


def test_a_full_disk_evicts_older_uploads_and_leaves_no_orphans(tmp_path, monkeypatch):
    """On a nearly full disk the older upload was not evicted to make room, and the new one
    left a .json without its data."""
    import geoviz.app.uploads as uploads_module

    folder = tmp_path / "up"
    size = len(npz_bytes(seed=1))
    capacity = int(2.5 * size)  # the disk holds two uploads

    def used() -> int:
        return sum(p.stat().st_size for p in folder.glob("*.data"))

    real_write = uploads_module.atomic_write_bytes

    def write(path, data, *, overwrite, mode=0o666):
        if str(path).endswith(".data") and used() + len(data) > capacity:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(path, data, overwrite=overwrite, mode=mode)

    monkeypatch.setattr(uploads_module, "atomic_write_bytes", write)
    monkeypatch.setattr(uploads_module, "DISK_HEADROOM", 0)
    disk = {"free": lambda: capacity - used()}
    monkeypatch.setattr(
        uploads_module.shutil, "disk_usage", lambda path: _Usage(capacity, used(), disk["free"]())
    )
    evicted: list[str] = []
    store = UploadStore(folder, disk_bytes=10**9, on_evict=evicted.append)  # the quota is no limit
    a, _ = store.add("a.npz", npz_bytes(seed=1))
    b, _ = store.add("b.npz", npz_bytes(seed=2))
    c, _ = store.add("c.npz", npz_bytes(seed=3))
    assert evicted == [a.key]
    assert _npz_files(folder) == ({b.key, c.key}, {b.key, c.key})
    # the disk says it has room, and then has not: one more upload goes, the write is retried
    disk["free"] = lambda: 10 * capacity
    d, _ = store.add("d.npz", npz_bytes(seed=4))
    assert evicted == [a.key, b.key]
    assert _npz_files(folder) == ({c.key, d.key}, {c.key, d.key})
    assert store.dataset(d.key).n_samples == 200
    # a file the disk cannot hold even empty: a sentence, and the others stay
    disk["free"] = lambda: capacity - used()
    with pytest.raises(ResourceError, match="no room"):
        store.add("huge.npz", npz_bytes(n=2000, seed=9))
    assert _npz_files(folder) == ({c.key, d.key}, {c.key, d.key})
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []
    # a .json left by an older version's failed write is removed by the next sweep
    (folder / ("e" * 64 + ".json")).write_text("{}")
    store.sweep()
    assert _npz_files(folder) == ({c.key, d.key}, {c.key, d.key})


def test_results_of_an_evicted_upload_go_with_it(fresh_server, monkeypatch):
    """An upload evicted under quota pressure was still served through the fit cache."""
    monkeypatch.setenv("GEOVIZ_UPLOAD_DISK_MB", "1")
    model = SessionModel({})
    refs = [
        dataset_services.add_upload(model, f"u{i}.npz", npz_bytes(n=1500, seed=i))[0]
        for i in range(3)
    ]
    model.scenario = _upload_scenario(model, refs)
    with cache_services.session_scope(model):
        data = dataset_services.scenario_data(model)
    key = ("data", model.scenario.data_key())
    assert key in cache_services.store() and data.target.n_samples == 200
    # another visitor's three uploads fill the 1 MB quota: this visitor's are evicted
    other = SessionModel({})
    for i in range(3, 6):
        dataset_services.add_upload(other, f"u{i}.npz", npz_bytes(n=1500, seed=i))
    assert all(cache_services.upload_store().ref(r.key) is None for r in refs)
    assert key not in cache_services.store()
    with (
        cache_services.session_scope(model),
        pytest.raises(DatasetError, match="not on this server"),
    ):
        dataset_services.scenario_data(model)


def test_the_upload_box_states_the_configured_limit_and_lets_go_of_the_file(fresh_server):
    """The box said "1GB per file" while .streamlit/config.toml sets maxUploadSize = 512; after
    each accepted file the uploader took a new key and Streamlit kept the old file's bytes."""
    import tomllib
    from streamlit.testing.v1 import AppTest

    root = Path(__file__).resolve().parents[1]
    config = tomllib.loads((root / ".streamlit" / "config.toml").read_text())
    configured = int(config["server"]["maxUploadSize"])
    limit = min(configured, AppSettings.from_env().upload_disk_mb)
    at = AppTest.from_file(str(root / "app.py"), default_timeout=300)
    at.switch_page("pages/1_datasets.py")
    at.run()
    (box,) = at.get("file_uploader")
    assert box.proto.max_upload_size_mb == limit
    assert any(f"Files up to {limit:,} MB" in c.value for c in at.caption)
    at.file_uploader(key="dataset_upload").set_value(
        ("tiny.npz", npz_bytes(n=60, d=4), "application/octet-stream")
    )
    at.run()
    assert not at.exception
    # the note quotes the upload's name as text (Markdown escapes dropped here)
    plain = [re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", s.value) for s in at.success]
    assert any("tiny.npz: 60 samples" in text for text in plain), plain
    # one key for the box (a new file replaces the last), and the page asks the browser to
    # remove the stored file from it, which deletes Streamlit's copy
    assert [u.key for u in at.get("file_uploader")] == ["dataset_upload"]
    scripts = [h.proto.body for h in at.get("html")]
    assert any(
        "stFileChipDeleteBtn" in body and "st-key-dataset_upload" in body for body in scripts
    )
