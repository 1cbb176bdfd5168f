"""Atomic writes (geoviz.atomic): all or nothing, no clobbering, nothing left behind."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import geoviz.atomic as atomic
from geoviz.atomic import AtomicWriteError, atomic_write_bytes, atomic_write_many


def _listing(root: Path) -> dict[str, bytes | None]:
    """Every path below ``root`` (hidden ones too): file bytes, or None for a folder."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def _fail_on_call(monkeypatch: pytest.MonkeyPatch, name: str, n: int, err: BaseException) -> dict:
    """Make ``atomic.<name>`` raise ``err`` on its ``n``-th call (1-based); count the calls."""
    real = getattr(atomic, name)
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == n:
            raise err
        return real(*args, **kwargs)

    monkeypatch.setattr(atomic, name, flaky)
    return calls


# ----------------------------------------------------------------------------- atomic_write_bytes


def test_write_bytes_creates_file_and_missing_parents(tmp_path):
    path = tmp_path / "a" / "b" / "out.csv"
    atomic_write_bytes(path, b"x,y\n1,2\n", overwrite=False)
    assert path.read_bytes() == b"x,y\n1,2\n"
    assert _listing(tmp_path) == {"a": None, "a/b": None, "a/b/out.csv": b"x,y\n1,2\n"}


def test_write_bytes_uses_umask_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_bytes(tmp_path / "f", b"data", overwrite=False)
    finally:
        os.umask(old)
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600


def test_write_bytes_refuses_existing_path_without_overwrite(tmp_path):
    path = tmp_path / "keep.bin"
    path.write_bytes(b"old")
    with pytest.raises(FileExistsError, match="already exists") as info:
        atomic_write_bytes(path, b"new", overwrite=False)
    assert info.value.errno == errno.EEXIST and info.value.filename == str(path)
    assert _listing(tmp_path) == {"keep.bin": b"old"}


def test_write_bytes_overwrite_replaces(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")
    atomic_write_bytes(path, b"new", overwrite=True)
    assert _listing(tmp_path) == {"f.bin": b"new"}


def test_interrupted_write_keeps_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")

    def half_then_crash(target: Path, data: bytes, **kwargs) -> None:
        with open(target, "xb") as fh:
            fh.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic, "_write_bytes", half_then_crash)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_bytes(path, b"new content", overwrite=True)
    assert _listing(tmp_path) == {"f.bin": b"old"}


def test_keyboard_interrupt_while_writing_leaves_nothing(tmp_path, monkeypatch):
    _fail_on_call(monkeypatch, "_write_bytes", 1, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        atomic_write_bytes(tmp_path / "new" / "f.bin", b"data", overwrite=False)
    assert _listing(tmp_path) == {}  # the temp file and the folder made for it are gone


def test_failed_rename_keeps_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")

    def broken_replace(src, dst):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(atomic.os, "replace", broken_replace)
    with pytest.raises(OSError, match="I/O error"):
        atomic_write_bytes(path, b"new", overwrite=True)
    assert _listing(tmp_path) == {"f.bin": b"old"}


def test_path_appearing_while_writing_is_not_clobbered(tmp_path, monkeypatch):
    path = tmp_path / "f.bin"
    real = atomic._write_bytes

    def racing(target: Path, data: bytes, **kwargs) -> None:
        real(target, data, **kwargs)
        path.write_bytes(b"someone else")  # appears after the existence check

    monkeypatch.setattr(atomic, "_write_bytes", racing)
    with pytest.raises(FileExistsError):
        atomic_write_bytes(path, b"mine", overwrite=False)
    assert _listing(tmp_path) == {"f.bin": b"someone else"}


def test_unwritable_parent_is_an_oserror(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_bytes(b"")
    with pytest.raises(OSError):
        atomic_write_bytes(blocker / "sub" / "f.bin", b"x", overwrite=True)
    assert _listing(tmp_path) == {"a_file": b""}


# ----------------------------------------------------------------------------- atomic_write_many


def test_write_many_files_and_tree(tmp_path):
    out = tmp_path / "out"
    atomic_write_many(
        [
            (out / "tree", {"a/1.png": b"one", "b/2.png": b"two", "labels.csv": b"csv"}),
            (out / "tree.manifest.json", b"{}"),
        ],
        overwrite=False,
    )
    assert _listing(out) == {
        "tree": None,
        "tree/a": None,
        "tree/a/1.png": b"one",
        "tree/b": None,
        "tree/b/2.png": b"two",
        "tree/labels.csv": b"csv",
        "tree.manifest.json": b"{}",
    }


def test_write_many_refuses_existing_targets_before_writing(tmp_path):
    (tmp_path / "m.json").write_bytes(b"old")
    with pytest.raises(AtomicWriteError) as info:
        atomic_write_many(
            [(tmp_path / "d.bin", b"data"), (tmp_path / "m.json", b"new")], overwrite=False
        )
    err = info.value
    assert isinstance(err, OSError) and isinstance(err.cause, FileExistsError)
    assert err.path == tmp_path / "m.json" and "already exists" in str(err)
    assert _listing(tmp_path) == {"m.json": b"old"}


def test_directory_replacement_restores_backup_on_failure(tmp_path, monkeypatch):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "old.png").write_bytes(b"old image")
    sidecar = tmp_path / "tree.json"
    sidecar.write_bytes(b"old manifest")
    before = _listing(tmp_path)
    # the tree is already swapped in when placing the second entry fails
    calls = _fail_on_call(monkeypatch, "_place", 2, OSError(errno.EIO, "I/O error"))
    with pytest.raises(AtomicWriteError, match="I/O error") as info:
        atomic_write_many(
            [(tree, {"new.png": b"new image"}), (sidecar, b"new manifest")], overwrite=True
        )
    assert calls["n"] == 2
    assert info.value.path == sidecar and info.value.__cause__ is info.value.cause
    assert _listing(tmp_path) == before  # old tree back, no temp or backup left


def test_directory_replacement_succeeds_and_drops_backup(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "old.png").write_bytes(b"old")
    atomic_write_many([(tree, {"new.png": b"new"})], overwrite=True)
    assert _listing(tmp_path) == {"tree": None, "tree/new.png": b"new"}


def test_failed_tree_write_removes_created_parents(tmp_path, monkeypatch):
    _fail_on_call(monkeypatch, "_write_bytes", 2, OSError(errno.ENOSPC, "No space left"))
    target = tmp_path / "new" / "deeper" / "tree"
    with pytest.raises(AtomicWriteError, match="No space left") as info:
        atomic_write_many([(target, {"a.png": b"a", "b.png": b"b"})], overwrite=False)
    assert info.value.path == target
    assert _listing(tmp_path) == {}


def test_unsafe_member_paths_are_refused(tmp_path):
    for rel in ("../escape.png", "/abs.png", ""):
        with pytest.raises(ValueError, match="unsafe member path"):
            atomic_write_many([(tmp_path / "tree", {"ok.png": b"x", rel: b"y"})], overwrite=False)
    assert _listing(tmp_path) == {}


# ----------------------------------------------------------------------------- stale temporaries


def _age(path: Path, seconds: float) -> None:
    """Set the modification time of ``path`` (and of everything below it) ``seconds`` back."""
    when = time.time() - seconds
    for p in [path, *(path.rglob("*") if path.is_dir() else [])]:
        os.utime(p, (when, when), follow_symlinks=False)


def test_next_write_removes_stale_temps_of_killed_writes_only(tmp_path):
    hour = atomic.STALE_TEMP_SECONDS
    stale_file = tmp_path / ".f.bin.0123456789ab.tmp"
    stale_file.write_bytes(b"half a write")
    stale_tree = tmp_path / ".tree.abcdef012345.tmp"
    (stale_tree / "cls").mkdir(parents=True)
    (stale_tree / "cls" / "0.png").write_bytes(b"png")
    fresh = tmp_path / ".f.bin.fedcba987654.tmp"  # a write in progress in another process
    fresh.write_bytes(b"being written")
    live_tree = tmp_path / ".tree.0000000000aa.tmp"  # old folder, but a file written just now
    (live_tree / "cls").mkdir(parents=True)
    backup = tmp_path / ".tree.111111111111.old"  # may be the only copy of replaced data
    backup.write_bytes(b"old data")
    lookalikes = [tmp_path / ".notes.tmp", tmp_path / "f.bin.0123456789ab.tmp"]
    for p in lookalikes:
        p.write_bytes(b"user file")
    for p in (stale_file, stale_tree, backup, live_tree, *lookalikes):
        _age(p, hour + 60)
    (live_tree / "cls" / "1.png").write_bytes(b"new")
    os.utime(live_tree / "cls", (time.time() - hour - 60,) * 2)

    atomic_write_bytes(tmp_path / "g.bin", b"data", overwrite=False)
    left = {p.name for p in tmp_path.iterdir()}
    assert stale_file.name not in left and stale_tree.name not in left
    assert left == {
        "g.bin",
        fresh.name,
        live_tree.name,
        backup.name,
        *(p.name for p in lookalikes),
    }
    # the tree writer sweeps its folder too
    _age(fresh, hour + 60)
    atomic_write_many([(tmp_path / "t", {"a": b"a"})], overwrite=False)
    assert not fresh.exists() and backup.exists() and live_tree.exists()
    assert atomic.remove_stale_temps(tmp_path / "missing-folder") == 0


def test_temp_left_by_kill_9_is_removed_by_a_later_write(tmp_path):
    target = tmp_path / "entry.pt"
    code = (
        "import sys, time, geoviz.atomic as a\n"
        "real = a._write_bytes\n"
        "def slow(path, data, **kw):\n"
        "    with open(path, 'xb') as fh:\n"
        "        fh.write(data[:10]); fh.flush()\n"
        "        print('writing', flush=True); time.sleep(60)\n"
        "a._write_bytes = slow\n"
        f"a.atomic_write_bytes({str(target)!r}, b'x' * 100, overwrite=True)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "writing"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    (temp,) = tmp_path.iterdir()
    assert temp.name.startswith(".entry.pt.") and temp.name.endswith(
        f".p{child.pid}h{atomic._MACHINE}.tmp"
    )
    assert not target.exists()
    # its writer is gone: the next write removes it at once, not an hour later
    atomic_write_bytes(target, b"complete", overwrite=True)
    assert _listing(tmp_path) == {"entry.pt": b"complete"}


def test_temps_of_running_writers_and_other_machines_are_kept_until_old(tmp_path):
    hour = atomic.STALE_TEMP_SECONDS
    mine = tmp_path / f".a.bin.0123456789ab.p{os.getpid()}h{atomic._MACHINE}.tmp"  # running
    elsewhere = tmp_path / ".b.bin.0123456789ab.p999999h00000000.tmp"  # another machine
    dead_pid = _dead_pid()
    gone = tmp_path / f".c.bin.0123456789ab.p{dead_pid}h{atomic._MACHINE}.tmp"
    for p in (mine, elsewhere, gone):
        p.write_bytes(b"part")
    assert atomic.remove_stale_temps(tmp_path) == 1
    assert mine.exists() and elsewhere.exists() and not gone.exists()
    _age(elsewhere, hour + 60)
    assert atomic.remove_stale_temps(tmp_path) == 1
    assert not elsewhere.exists() and mine.exists()


def _dead_pid() -> int:
    """The id of a process that has ended (and was reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=60)
    return child.pid
