"""Device/dtype resolution, memory checks and the on-disk cache of geoviz.backend."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from cache_forgery import forge_entry

import geoviz.backend as backend
from geoviz.backend import (
    DiskCache,
    cache_key,
    check_memory,
    get_cache,
    get_device,
    resolve_device,
    resolve_dtype,
    set_device,
)
from geoviz.errors import GeovizError, ResourceError

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")


@pytest.fixture(autouse=True)
def _clean_device(monkeypatch):
    monkeypatch.delenv("GEOVIZ_DEVICE", raising=False)
    monkeypatch.setattr(backend, "_device_override", None)


# ----------------------------------------------------------------------------- devices


@no_cuda
def test_auto_is_cpu_without_gpu():
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device(None) == torch.device("cpu")
    assert get_device() == torch.device("cpu")


def test_auto_prefers_cuda_when_available(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto").type == "cuda"


@no_cuda
def test_cuda_without_gpu_is_a_clear_error(monkeypatch):
    with pytest.raises(GeovizError, match="no CUDA GPU"):
        resolve_device("cuda")
    with pytest.raises(GeovizError, match="no CUDA GPU"):
        resolve_device(torch.device("cuda", 0))
    monkeypatch.setenv("GEOVIZ_DEVICE", "cuda")
    with pytest.raises(GeovizError, match="no CUDA GPU"):
        get_device()


def test_env_and_override(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("GEOVIZ_DEVICE", " CPU ")
    assert get_device() == torch.device("cpu")
    monkeypatch.setenv("GEOVIZ_DEVICE", "auto")
    assert get_device().type == "cuda"
    monkeypatch.delenv("GEOVIZ_DEVICE")
    set_device("cpu")
    assert get_device() == torch.device("cpu")
    assert resolve_device("cuda").type == "cuda"  # an explicit request ignores the override
    set_device(None)
    assert get_device().type == "cuda"


def test_unknown_device_is_a_geoviz_error(monkeypatch):
    with pytest.raises(GeovizError, match="unknown device 'gpu'"):
        resolve_device("gpu")
    monkeypatch.setenv("GEOVIZ_DEVICE", "tpu")
    with pytest.raises(GeovizError, match="unknown device 'tpu'"):
        get_device()
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


def test_dtype_resolution():
    assert resolve_dtype(None) is torch.float32
    assert resolve_dtype("float32") is torch.float32
    assert resolve_dtype("float64") is torch.float64
    assert resolve_dtype(torch.float16) is torch.float16
    with pytest.raises(GeovizError, match="unsupported dtype 'float16'"):
        resolve_dtype("float16")


def test_check_memory():
    check_memory(1024, torch.device("cpu"), "a tiny buffer")
    with pytest.raises(ResourceError, match=r"a huge coupling needs about .* GiB on cpu"):
        check_memory(2**62, torch.device("cpu"), "a huge coupling")


def test_check_memory_unknown_free_memory_passes(monkeypatch):
    monkeypatch.setattr(backend, "available_memory_bytes", lambda device: None)
    check_memory(2**62, torch.device("cpu"), "anything")


# ----------------------------------------------------------------------------- cache keys


def test_cache_key_is_stable_and_discriminating():
    params = {"eps": 0.05, "n": 10, "names": ("a", "b"), "nested": {"x": 1, "y": [1.5, None]}}
    same_other_order = {
        "nested": {"y": [1.5, None], "x": 1},
        "names": ["a", "b"],
        "n": 10,
        "eps": 0.05,
    }
    key = cache_key("otdd", params)
    assert len(key) == 64 and int(key, 16) >= 0
    assert cache_key("otdd", same_other_order) == key
    assert cache_key("otdd", {**params, "n": np.int64(10), "eps": np.float64(0.05)}) == key
    assert cache_key("maps", params) != key
    assert cache_key("otdd", {**params, "eps": 0.0500001}) != key
    assert cache_key("otdd", {**params, "extra": None}) != key
    assert cache_key("otdd", {**params, "flag": np.bool_(True)}) == cache_key(
        "otdd", {**params, "flag": True}
    )


def test_cache_key_arrays_include_shape_and_dtype():
    zeros = np.zeros(6)
    assert cache_key("k", {"a": zeros.reshape(2, 3)}) != cache_key("k", {"a": zeros.reshape(3, 2)})
    assert cache_key("k", {"a": np.zeros(4, np.float32)}) != cache_key(
        "k", {"a": np.zeros(2, np.float64)}
    )
    assert cache_key("k", {"a": torch.arange(3.0)}) == cache_key(
        "k", {"a": np.arange(3, dtype=np.float32)}
    )
    assert cache_key("k", {"a": np.arange(3.0)}) != cache_key("k", {"a": np.arange(1.0, 4.0)})
    with pytest.raises(TypeError, match="cannot use object"):
        cache_key("k", {"a": object()})


def test_cache_key_is_stable_across_processes():
    code = (
        "import numpy as np; from geoviz.backend import cache_key; "
        "print(cache_key('otdd', {'eps': 0.05, 'w': [0.5, 0.25], 'a': np.arange(5.0), 's': 'ü'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    assert out == cache_key("otdd", {"s": "ü", "a": np.arange(5.0), "w": [0.5, 0.25], "eps": 0.05})


# ----------------------------------------------------------------------------- DiskCache


class Counter:
    def __init__(self, value=None):
        self.calls = 0
        self.value = value

    def __call__(self):
        self.calls += 1
        if self.value is not None:
            return self.value
        return {"coupling": np.arange(6.0).reshape(2, 3), "cost": 1.25, "names": ["a", "b"]}


def _assert_payload(payload):
    assert torch.equal(payload["coupling"], torch.arange(6.0, dtype=torch.float64).reshape(2, 3))
    assert payload["cost"] == 1.25 and payload["names"] == ["a", "b"]


def test_hit_and_miss_counts(tmp_path):
    cache = DiskCache(tmp_path)
    compute = Counter()
    first = cache.get_or_compute("otdd", {"n": 1}, compute)
    second = cache.get_or_compute("otdd", {"n": 1}, compute)
    _assert_payload(first)
    _assert_payload(second)
    assert type(first["coupling"]) is type(second["coupling"])  # a miss returns what a hit does
    assert (compute.calls, cache.hits_, cache.misses_) == (1, 1, 1)
    cache.get_or_compute("otdd", {"n": 2}, compute)
    cache.get_or_compute("maps", {"n": 1}, compute)
    assert (compute.calls, cache.hits_, cache.misses_) == (3, 1, 3)
    assert cache.path_for("otdd", cache_key("otdd", {"n": 1})).is_file()
    # a fresh cache object on the same directory (a new process) hits too
    other = DiskCache(tmp_path)
    _assert_payload(other.get_or_compute("otdd", {"n": 1}, compute))
    assert (compute.calls, other.hits_) == (3, 1)


def _corrupt_flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x55
    path.write_bytes(bytes(data))


def _corrupt_truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def _corrupt_digest(path: Path) -> None:
    path.write_bytes(b"\xff" * 64 + path.read_bytes()[64:])


def _corrupt_empty(path: Path) -> None:
    path.write_bytes(b"")


@pytest.mark.parametrize(
    "damage", [_corrupt_flip, _corrupt_truncate, _corrupt_digest, _corrupt_empty]
)
def test_corrupt_entry_is_detected_deleted_and_recomputed(tmp_path, damage):
    cache = DiskCache(tmp_path)
    compute = Counter()
    cache.get_or_compute("otdd", {"n": 1}, compute)
    path = cache.path_for("otdd", cache_key("otdd", {"n": 1}))
    damage(path)
    with pytest.warns(UserWarning, match="corrupt"):
        payload = cache.get_or_compute("otdd", {"n": 1}, compute)
    _assert_payload(payload)
    assert (compute.calls, cache.corrupt_, cache.misses_, cache.hits_) == (2, 1, 2, 0)
    # the bad entry was replaced by a good one
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _assert_payload(cache.get_or_compute("otdd", {"n": 1}, compute))
    assert (compute.calls, cache.hits_) == (2, 1)


def test_corrupt_entry_is_deleted_on_load(tmp_path):
    cache = DiskCache(tmp_path)
    cache.store("ns", "k" * 64, {"x": torch.ones(3)})
    path = cache.path_for("ns", "k" * 64)
    _corrupt_truncate(path)
    with pytest.warns(UserWarning, match="corrupt"):
        assert cache.load("ns", "k" * 64) is None
    assert not path.exists()


def test_disabled_cache_computes_every_time(tmp_path):
    cache = DiskCache(tmp_path / "c", enabled=False)
    compute = Counter()
    for _ in range(3):
        _assert_payload(cache.get_or_compute("otdd", {"n": 1}, compute))
    assert compute.calls == 3 and cache.hits_ == 0
    assert not (tmp_path / "c").exists()


def test_unwritable_directory_does_not_break_compute(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    cache = DiskCache(blocker / "cache")  # cannot be created, even as root
    compute = Counter()
    with pytest.warns(UserWarning, match="could not write"):
        _assert_payload(cache.get_or_compute("otdd", {"n": 1}, compute))
    with pytest.warns(UserWarning, match="could not write"):
        _assert_payload(cache.get_or_compute("otdd", {"n": 1}, compute))
    assert compute.calls == 2
    assert list(tmp_path.iterdir()) == [blocker]


def test_numpy_scalars_and_views_are_stored_usefully(tmp_path):
    cache = DiskCache(tmp_path)
    big = torch.arange(100_000.0)
    compute = Counter(
        {"cost": np.float64(2.5), "n": np.int64(3), "head": big[:4], "ok": np.bool_(True)}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "corrupt" warning for a numpy scalar payload
        first = cache.get_or_compute("ns", {}, compute)
        second = cache.get_or_compute("ns", {}, compute)
    assert compute.calls == 1 and cache.hits_ == 1
    assert set(first) == set(second) == {"cost", "n", "head", "ok"}
    for payload in (first, second):
        assert type(payload["cost"]) is float and payload["cost"] == 2.5
        assert type(payload["n"]) is int and payload["n"] == 3
        assert payload["ok"] is True
        assert torch.equal(payload["head"], torch.arange(4.0))
    assert (
        cache.path_for("ns", cache_key("ns", {})).stat().st_size < 10_000
    )  # not the 400 kB storage


def test_clear_removes_entries(tmp_path):
    cache = DiskCache(tmp_path)
    for n in range(3):
        cache.get_or_compute("ns", {"n": n}, Counter())
    assert cache.clear() == 3
    assert not list(tmp_path.rglob("*.pt"))


def test_get_cache_follows_environment(tmp_path, monkeypatch):
    monkeypatch.setattr(backend, "_default_cache", None)
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "one"))
    monkeypatch.setenv("GEOVIZ_NO_CACHE", "1")
    cache = get_cache()
    assert cache.directory == tmp_path / "one" and cache.enabled is False
    assert get_cache() is cache
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "two"))
    monkeypatch.delenv("GEOVIZ_NO_CACHE")
    other = get_cache()
    assert other.directory == tmp_path / "two" and other.enabled is True


# ----------------------------------------------------------------------------- entries bound to keys


def _raw_entry(obj, cache: DiskCache) -> bytes:
    """An entry file around ``torch.save(obj)`` signed as ``cache`` signs (a forger who
    has the folder's secret)."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    body = buf.getvalue()
    return cache.signature(body, create=True) + body


def test_entry_copied_under_another_key_is_ignored_removed_and_recomputed(tmp_path):
    cache = DiskCache(tmp_path)
    one = cache.get_or_compute("otdd", {"n": 1}, Counter({"value": torch.tensor(1.0)}))
    two_compute = Counter({"value": torch.tensor(2.0)})
    cache.get_or_compute("otdd", {"n": 2}, two_compute)
    path_one = cache.path_for("otdd", cache_key("otdd", {"n": 1}))
    path_two = cache.path_for("otdd", cache_key("otdd", {"n": 2}))
    shutil.copyfile(path_one, path_two)  # checksum intact, wrong place
    with pytest.warns(UserWarning, match=r"corrupt \(it was stored under another .*ignored"):
        again = cache.get_or_compute("otdd", {"n": 2}, two_compute)
    assert float(again["value"]) == 2.0 and float(one["value"]) == 1.0
    assert two_compute.calls == 2 and cache.corrupt_ == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert float(cache.load("otdd", cache_key("otdd", {"n": 2}))["value"]) == 2.0
    # the same key under another namespace is another entry too
    other = cache.path_for("maps", cache_key("otdd", {"n": 1}))
    other.parent.mkdir()
    shutil.copyfile(path_one, other)
    with pytest.warns(UserWarning, match="ignored and removed"):
        assert cache.load("maps", cache_key("otdd", {"n": 1})) is None
    assert not other.exists() and path_one.exists()


@pytest.mark.parametrize(
    ("stored", "reason"),
    [
        ({"value": torch.ones(2)}, "not a geoviz cache entry"),  # a bare payload (format 1)
        ([1, 2, 3], "not a geoviz cache entry"),
        (
            {"namespace": "ns", "key": "k" * 64, "version": "1", "payload": {}},
            "another cache format",
        ),
        (
            {
                "namespace": "ns",
                "key": "k" * 64,
                "version": backend.CACHE_FORMAT_VERSION,
                "structure": {"dict": {}},
                "payload": 5,
            },
            "payload is not a dictionary",
        ),
        (  # format 2: no recorded structure
            {
                "namespace": "ns",
                "key": "k" * 64,
                "version": backend.CACHE_FORMAT_VERSION,
                "payload": {},
            },
            "not a geoviz cache entry",
        ),
    ],
)
def test_entry_with_unexpected_content_is_ignored_and_removed(tmp_path, stored, reason):
    cache = DiskCache(tmp_path)
    path = cache.path_for("ns", "k" * 64)
    path.parent.mkdir()
    path.write_bytes(_raw_entry(stored, cache))
    with pytest.warns(UserWarning, match=f"corrupt \\(.*{reason}.*ignored and removed"):
        assert cache.load("ns", "k" * 64) is None
    assert not path.exists() and cache.corrupt_ == 1


def test_store_removes_stale_temps_of_killed_writes(tmp_path):
    cache = DiskCache(tmp_path)
    cache.store("ns", "a" * 64, {"x": torch.ones(1)})
    folder = cache.path_for("ns", "a" * 64).parent
    stale = folder / f".{'b' * 64}.pt.0123456789ab.tmp"
    stale.write_bytes(b"half an entry")
    fresh = folder / f".{'c' * 64}.pt.0123456789ab.tmp"
    fresh.write_bytes(b"being written")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    cache.store("ns", "d" * 64, {"x": torch.ones(1)})
    assert not stale.exists() and fresh.exists()


def test_cpu_memory_comes_from_the_process_limit(monkeypatch):
    monkeypatch.setattr(backend, "memory_limit_bytes", lambda: 3 * 2**30)
    assert backend.available_memory_bytes(torch.device("cpu")) == 3 * 2**30
    check_memory(2**30, torch.device("cpu"), "one GiB")  # the safety factor 2: 2 <= 3 GiB
    with pytest.raises(ResourceError, match=r"two GiB needs about 2.00 GiB on cpu.*3.00 GiB"):
        check_memory(2 * 2**30, torch.device("cpu"), "two GiB")


def test_concurrent_cold_processes_agree_and_leave_no_temps(tmp_path):
    code = (
        "import sys, warnings, torch\n"
        "warnings.simplefilter('error')\n"
        "from geoviz.backend import DiskCache\n"
        "cache = DiskCache(sys.argv[1])\n"
        "out = cache.get_or_compute('ns', {'n': 1}, lambda: {'x': torch.arange(100000.0)})\n"
        "print(float(out['x'].sum()), cache.hits_ + cache.misses_)\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    expected = str(float(torch.arange(100000.0).sum()))
    assert outputs == [[expected, "1"]] * 4
    assert [p.name for p in (tmp_path / "ns").iterdir()] == [f"{cache_key('ns', {'n': 1})}.pt"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert DiskCache(tmp_path).load("ns", cache_key("ns", {"n": 1}))["x"].shape == (100000,)


# --------------------------------------------------------------------------- one digest for every key


def _old_sha256_json(obj, **dumps) -> str:
    """The formula each key site used before it called :func:`geoviz.backend.digest`."""
    import json

    return hashlib.sha256(json.dumps(obj, sort_keys=True, **dumps).encode()).hexdigest()


def test_fingerprint_is_the_digest_of_its_old_payload():
    import json

    params = {"b": (1, 2), "a": np.float32(0.5), "x": np.arange(6).reshape(2, 3), "p": Path("/t")}
    old_payload = json.dumps(
        {"ns": "otdd", "v": backend.CACHE_FORMAT_VERSION, "params": backend._canonical(params)},
        sort_keys=True,
        separators=(",", ":"),
    )
    old = hashlib.sha256(old_payload.encode()).hexdigest()
    assert backend.fingerprint("otdd", params) == old == backend.cache_key("otdd", params)
    assert (
        backend.digest({"ns": "otdd", "v": backend.CACHE_FORMAT_VERSION, "params": params}) == old
    )


def test_digest_layouts_and_length():
    obj = {"b": [1, 2.5], "a": {"z": None, "y": "s"}}
    assert backend.digest(obj) == _old_sha256_json(obj, separators=(",", ":"))
    assert backend.digest(obj, layout="plain") == _old_sha256_json(obj)  # ", " and ": "
    assert backend.digest(obj) != backend.digest(obj, layout="plain")
    assert backend.digest(obj, length=24) == backend.digest(obj)[:24]
    assert backend.digest_bytes([b"ab", b"c"]) == hashlib.sha256(b"abc").hexdigest()
    with pytest.raises(TypeError):
        backend.digest({"x": object()})


def test_checkpoint_keys_keep_their_stored_values():
    from geoviz.transfer.checkpoints import checkpoint_key

    scenario = {"version": 2, "target": "mnist", "references": ["usps", "kmnist"], "k": 5}
    old_payload = {**scenario, "weights": [0.25, 0.75], "seed": 3}
    old = _old_sha256_json(old_payload, separators=(",", ":"))
    assert checkpoint_key(scenario, (0.25, 0.75), 3) == old


def test_dataset_fingerprint_and_upload_digest_keep_their_values():
    import json

    from geoviz.data.choice import Upload
    from geoviz.data.dataset import LabeledDataset

    ds = LabeledDataset(
        np.arange(12, dtype=np.float32).reshape(3, 4), np.array([0, 1, 0]), ("a", "b")
    )
    old = hashlib.sha256()
    for part in (ds.features, ds.labels):
        arr = part.contiguous().numpy()
        old.update(str(arr.dtype).encode() + str(arr.shape).encode())
        old.update(arr.tobytes())
        old.update(b"\x00")
    for part in (["a", "b"], []):
        old.update(json.dumps(part, sort_keys=True, default=str).encode())
        old.update(b"\x00")
    assert ds.fingerprint == old.hexdigest()
    assert Upload("x.csv", b"1,2\n").digest == hashlib.sha256(b"1,2\n").hexdigest()


def test_disk_cache_pickles_by_its_folder(tmp_path):
    """A cache goes to Ray tasks by pickle: the copy reads and writes the same folder."""
    import pickle

    cache = DiskCache(tmp_path)
    cache.get_or_compute("ns", {"k": 1}, lambda: {"v": torch.ones(2)})
    copy = pickle.loads(pickle.dumps(cache))
    assert copy.directory == cache.directory and copy.enabled
    payload = copy.get_or_compute("ns", {"k": 1}, lambda: {"v": torch.zeros(2)})
    assert torch.equal(payload["v"], torch.ones(2))  # read back, not recomputed
    assert copy.hits_ == 1


# ----------------------------------------------------------------------------- forged entries


def _reshape(env):
    env["payload"]["coupling"] = env["payload"]["coupling"].reshape(3, 2)


def _drop_cost(env):
    del env["payload"]["cost"]


def _nan(env):
    env["payload"]["coupling"][0, 1] = float("nan")


def _scale(env):
    env["payload"]["coupling"] = env["payload"]["coupling"] * 2.0


def _scale_scalar(env):
    env["payload"]["cost"] = 2.5


_EXPECT = {"coupling": backend.ArraySpec((2, 3)), "cost": float, "names": list}


_FORGERIES = [
    (_reshape, r"shape \(3, 2\)"),
    (_drop_cost, "lacks 'cost'"),
    (_nan, "NaN"),
    (_scale, "checksum"),
    (_scale_scalar, "checksum"),
]


@pytest.mark.parametrize(
    ("mutate", "reason", "sign"),
    [(m, r, s) for m, r in _FORGERIES for s in ("sha256", "secret")]
    # a forger who has the secret and rewrites the structure: the caller's expectations
    # still catch shapes, keys and NaN (a consistent rescaling is then an entry like any)
    + [(m, r, "secret+structure") for m, r in _FORGERIES[:3]],
)
def test_forged_entry_is_detected_warned_and_recomputed(tmp_path, mutate, reason, sign):
    cache = DiskCache(tmp_path)
    compute = Counter()
    cache.get_or_compute("otdd", {"n": 1}, compute, expect=_EXPECT)
    key = cache_key("otdd", {"n": 1})
    path = cache.path_for("otdd", key)
    forge_entry(cache, "otdd", key, mutate, sign=sign)
    if sign == "sha256":
        reason = "signature does not match"
    with pytest.warns(backend.CacheCorruptWarning, match=rf"{path}.*corrupt \(.*{reason}"):
        payload = cache.get_or_compute("otdd", {"n": 1}, compute, expect=_EXPECT)
    _assert_payload(payload)  # the fresh computation's value, not the forged one
    assert (compute.calls, cache.corrupt_, cache.hits_) == (2, 1, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _assert_payload(cache.get_or_compute("otdd", {"n": 1}, compute, expect=_EXPECT))
    assert compute.calls == 2


@pytest.mark.parametrize("sign", ["sha256", "secret"])
def test_arrays_swapped_between_entries_are_detected(tmp_path, sign):
    cache = DiskCache(tmp_path)
    one = Counter({"x": torch.arange(6.0), "y": torch.ones(2)})
    two = Counter({"x": torch.arange(6.0) * 3, "y": torch.ones(2)})
    cache.get_or_compute("maps", {"n": 1}, one)
    cache.get_or_compute("maps", {"n": 2}, two)
    key_one, key_two = cache_key("maps", {"n": 1}), cache_key("maps", {"n": 2})
    other = torch.load(io.BytesIO(cache.path_for("maps", key_two).read_bytes()[64:]))

    def swap(env):  # entry two's payload and structure, entry one's place
        env["payload"] = other["payload"]
        env["structure"] = other["structure"]

    forge_entry(cache, "maps", key_one, swap, sign=sign)
    reason = "signature" if sign == "sha256" else r"array 'x' is not the one stored"
    with pytest.warns(backend.CacheCorruptWarning, match=reason):
        again = cache.get_or_compute("maps", {"n": 1}, one)
    assert torch.equal(again["x"], torch.arange(6.0)) and one.calls == 2


def test_the_callers_check_runs_on_read(tmp_path):
    cache = DiskCache(tmp_path)
    compute = Counter({"x": torch.ones(2)})
    cache.get_or_compute("ns", {}, compute)

    def rebuild(payload):
        raise KeyError("w")

    with pytest.warns(backend.CacheCorruptWarning, match=r"cannot be used: KeyError: 'w'"):
        cache.get_or_compute("ns", {}, compute, check=rebuild)
    assert compute.calls == 2


@pytest.mark.parametrize(
    ("expect", "reason"),
    [
        ({"x": backend.ArraySpec(("n", "n"))}, r"shape \(2, 3\), expected \(n, n\) with n = 2"),
        ({"x": backend.ArraySpec((2, 3, 1))}, r"shape \(2, 3\), expected \(2, 3, 1\)"),
        ({"x": float}, "is a Tensor, not a float"),
        ({"y": backend.ArraySpec()}, "lacks 'y'"),
        ({"c": int}, "is a bool, not a int"),
    ],
)
def test_expectations_are_checked(tmp_path, expect, reason):
    cache = DiskCache(tmp_path)
    compute = Counter({"x": torch.zeros(2, 3), "c": True})
    cache.get_or_compute("ns", {}, compute)
    with pytest.warns(backend.CacheCorruptWarning, match=reason):
        cache.get_or_compute("ns", {}, compute, expect=expect)
    assert compute.calls == 2
    # met expectations (an optional array may be missing, a float may be an int): a hit
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok = {"x": backend.ArraySpec((2, None)), "z": backend.ArraySpec(optional=True)}
        cache.get_or_compute("ns", {}, compute, expect=ok)
    assert compute.calls == 2


def test_nan_stored_as_computed_is_not_corrupt(tmp_path):
    """A value that was NaN when computed is read back as it was (only a change is corrupt)."""
    cache = DiskCache(tmp_path)
    compute = Counter({"x": torch.tensor([float("nan"), 1.0]), "cost": float("nan")})
    cache.get_or_compute("ns", {}, compute)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = cache.get_or_compute("ns", {}, compute)
    assert compute.calls == 1 and torch.isnan(again["x"][0])


def test_the_secret_is_private_and_stays_in_its_folder(tmp_path):
    import pickle

    cache = DiskCache(tmp_path)
    cache.get_or_compute("ns", {}, Counter({"x": torch.ones(1)}))
    secret = tmp_path / backend.CACHE_SECRET_NAME
    assert secret.stat().st_mode & 0o777 == 0o600 and len(secret.read_bytes()) == 32
    assert secret.read_bytes() not in pickle.dumps(cache)
    # a folder whose secret changed cannot vouch for the old entries: recomputed
    secret.unlink()
    fresh = DiskCache(tmp_path)
    compute = Counter({"x": torch.ones(1)})
    with pytest.warns(backend.CacheCorruptWarning, match="no readable secret"):
        fresh.get_or_compute("ns", {}, compute)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DiskCache(tmp_path).get_or_compute("ns", {}, compute)
    assert compute.calls == 1
