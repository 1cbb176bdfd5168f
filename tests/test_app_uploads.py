"""The upload store (geoviz.app.uploads) and the app's uploads through it.

Issue 25: row 1 (uploads piled up: bounded by count in memory, never cleaned on disk, the
raw bytes held in every session) and row 9 (an upload's sha256 worked as a permanent key
that anyone knowing a file's hash could use, or use to learn whether it was uploaded).
"""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest

from geoviz.app import services
from geoviz.app.state import DatasetChoice, SessionModel, default_scenario
from geoviz.app.uploads import UploadRef, UploadStore, dataset_bytes
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
    services.add_upload(owner, "a.npz", data)
    for i in (1, 2):
        services.add_upload(owner, f"r{i}.npz", npz_bytes(seed=i))
    owner.scenario = _upload_scenario(owner, list(owner.uploads.values()))

    # a visitor who was sent the link: the scenario names the upload by its key
    visitor = SessionModel({})
    visitor.restore(owner.query_state())
    assert visitor.uploads == {}
    services.store().clear()
    services.upload_store().clear_memory()  # after a restart too
    loaded = services.scenario_data(visitor).target
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
            services.scenario_data(model)
        texts.append(str(info.value))
    assert texts[0] == texts[1]  # nothing tells an existing file from a missing one


def test_a_scenario_never_parses_an_upload_twice(fresh_server):
    model = SessionModel({})
    refs = [services.add_upload(model, f"u{i}.npz", npz_bytes(seed=i))[0] for i in range(3)]
    uploads = services.upload_store()
    parses = uploads.parses_
    assert parses == 3
    model.scenario = _upload_scenario(model, refs)
    services.scenario_data(model)
    assert uploads.parses_ == parses
    services.add_upload(model, "u0.npz", npz_bytes(seed=0))  # the same file again
    assert uploads.parses_ == parses


def test_the_session_holds_no_file_bytes(fresh_server):
    """Row 1: each session kept the raw bytes of its uploads (and Streamlit kept them for
    two minutes after the tab closed, for every closed tab)."""
    model = SessionModel({})
    data = npz_bytes(n=2000)
    services.add_upload(model, "a.npz", data)

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

    legacy = services.disk_cache().directory / LEGACY_UPLOAD_NAMESPACE
    legacy.mkdir(parents=True)
    (legacy / "old.pt").write_bytes(b"x" * 1000)
    _UPLOADS.clear()
    services.upload_store()
    assert not legacy.exists()
