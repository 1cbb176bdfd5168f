"""geoviz.memory: the process's real memory limit, refusals before allocating, allocator errors."""

from __future__ import annotations

import io
import json
import resource
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import geoviz.memory as memory
from geoviz.errors import GeovizError, ResourceError
from geoviz.memory import check_bytes, format_bytes, memory_guard, memory_limit_bytes

GiB = 2**30


def _fake_proc(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    vmsize_kib: int | None = None,
    cgroup: str | None = None,
    meminfo_kib: int | None = None,
    rlimit: int | None = None,
) -> Path:
    """Point geoviz.memory at fake /proc and /sys/fs/cgroup files under ``tmp_path``."""
    proc = tmp_path / "proc"
    proc.mkdir()
    if vmsize_kib is not None:
        (proc / "status").write_text(f"Name:\tpython\nVmPeak:\t 1 kB\nVmSize:\t {vmsize_kib} kB\n")
    if cgroup is not None:
        (proc / "cgroup").write_text(cgroup)
    if meminfo_kib is not None:
        (proc / "meminfo").write_text(
            f"MemTotal:       99999999 kB\nMemFree:  1 kB\nMemAvailable:   {meminfo_kib} kB\n"
        )
    monkeypatch.setattr(memory, "_PROC_STATUS", proc / "status")
    monkeypatch.setattr(memory, "_PROC_CGROUP", proc / "cgroup")
    monkeypatch.setattr(memory, "_PROC_MEMINFO", proc / "meminfo")
    sys_root = tmp_path / "cgroupfs"
    monkeypatch.setattr(memory, "_CGROUP_V2_ROOTS", (sys_root,))
    monkeypatch.setattr(memory, "_CGROUP_V1_ROOT", sys_root / "memory")
    infinity = resource.RLIM_INFINITY
    soft = infinity if rlimit is None else rlimit
    monkeypatch.setattr(resource, "getrlimit", lambda which: (soft, infinity))
    return sys_root


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_nothing_readable_means_no_limit_and_no_refusal(tmp_path, monkeypatch):
    _fake_proc(tmp_path, monkeypatch)
    assert memory.memory_limit() is None and memory_limit_bytes() is None
    assert memory.memory_budget_bytes() is None
    check_bytes(2**62, "anything")  # unknown limit: no check


def test_meminfo_alone(tmp_path, monkeypatch):
    _fake_proc(tmp_path, monkeypatch, meminfo_kib=4 * 2**20)
    assert memory.memory_limit() == (4 * GiB, "the machine's available memory (MemAvailable)")


def test_rlimit_as_minus_virtual_size(tmp_path, monkeypatch):
    _fake_proc(tmp_path, monkeypatch, vmsize_kib=2**20, meminfo_kib=64 * 2**20, rlimit=3 * GiB)
    room, source = memory.memory_limit()
    assert room == 2 * GiB and "RLIMIT_AS" in source
    # a virtual size above the limit leaves no room, never a negative one
    (tmp_path / "proc" / "status").write_text("VmSize:\t 8388608 kB\n")
    assert memory_limit_bytes() == 0


def test_cgroup_v2_takes_the_tightest_ancestor(tmp_path, monkeypatch):
    root = _fake_proc(
        tmp_path, monkeypatch, cgroup="0::/user.slice/app.scope\n", meminfo_kib=64 * 2**20
    )
    _write(root / "memory.max", "max\n")  # the root: no limit
    _write(root / "user.slice" / "memory.max", str(3 * GiB))
    _write(root / "user.slice" / "memory.current", str(2 * GiB))  # 1 GiB left in the slice
    _write(root / "user.slice" / "app.scope" / "memory.max", str(4 * GiB))
    _write(root / "user.slice" / "app.scope" / "memory.current", str(GiB // 2))
    assert memory.memory_limit() == (GiB, "the memory cgroup limit")
    _write(root / "user.slice" / "memory.max", "max\n")
    assert memory_limit_bytes() == 4 * GiB - GiB // 2
    _write(root / "user.slice" / "app.scope" / "memory.max", "garbage")  # unreadable: ignored
    assert memory.memory_limit()[1] == "the machine's available memory (MemAvailable)"


def test_cgroup_v1_memory_controller(tmp_path, monkeypatch):
    root = _fake_proc(
        tmp_path,
        monkeypatch,
        cgroup="12:pids:/x\n4:memory:/docker/abc\n0::/\n",
        meminfo_kib=64 * 2**20,
    )
    _write(root / "memory" / "memory.limit_in_bytes", str(2**63 - 4096))  # v1's "unlimited"
    _write(root / "memory" / "docker" / "abc" / "memory.limit_in_bytes", str(2 * GiB))
    _write(root / "memory" / "docker" / "abc" / "memory.usage_in_bytes", str(GiB // 4))
    assert memory.memory_limit() == (2 * GiB - GiB // 4, "the memory cgroup limit")


def test_check_bytes_refuses_with_one_sentence(monkeypatch):
    monkeypatch.setattr(memory, "memory_limit", lambda: (GiB, "a test limit"))
    check_bytes(int(0.8 * GiB), "a fitting request")  # HEADROOM = 0.8 of the limit
    with pytest.raises(ResourceError) as info:
        check_bytes(int(0.8 * GiB) + 1, "the array 'x' of a.npz")
    text = str(info.value)
    assert text.startswith("the array 'x' of a.npz needs 819.2 MiB but this process can")
    assert "1.00 GiB (limit: a test limit; geoviz uses at most 80% of it" in text
    assert "\n" not in text and isinstance(info.value, GeovizError)
    with pytest.raises(ResourceError, match=r"needs at least 2\.00 GiB"):
        check_bytes(2 * GiB, "a stream", at_least=True)
    with pytest.raises(ResourceError, match=r"at most 10\.0 MiB"):
        check_bytes(9 * 2**20, "x", limit=(10 * 2**20, "an earlier reading"))


def test_format_bytes():
    assert format_bytes(12) == "12 bytes"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(3 * 2**20) == "3.0 MiB"
    assert format_bytes(3.5 * GiB) == "3.50 GiB"
    assert format_bytes(80 * 10**12) == "72.8 TiB"


def test_memory_guard_turns_allocator_failures_into_resource_errors(monkeypatch):
    monkeypatch.setattr(memory, "memory_limit", lambda: (4 * GiB, "a test limit"))
    with pytest.raises(ResourceError) as info, memory_guard("building the plan"):
        np.empty(2**60, dtype=np.uint8)  # a real numpy MemoryError (1 EiB)
    assert str(info.value) == (
        "building the plan ran out of memory: asked for 1.00 EiB, this process can allocate "
        "at most 4.00 GiB (limit: a test limit); use a smaller input"
    )
    kernel = r"the kernel ran out of memory: asked for 1.*TiB"
    with pytest.raises(ResourceError, match=kernel), memory_guard("the kernel"):
        torch.empty(2**60, dtype=torch.uint8)  # torch's DefaultCPUAllocator RuntimeError
    gpu = r"on the GPU ran out of memory: asked for 20\.00 GiB"
    with pytest.raises(ResourceError, match=gpu), memory_guard("on the GPU"):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
    monkeypatch.setattr(memory, "memory_limit", lambda: None)
    unknown = r"^x ran out of memory: this process's memory limit is unknown"
    with pytest.raises(ResourceError, match=unknown), memory_guard("x"):
        raise MemoryError()


def test_memory_guard_lets_other_errors_through():
    with pytest.raises(RuntimeError, match="shape mismatch"), memory_guard("x"):
        raise RuntimeError("shape mismatch")
    with pytest.raises(ValueError, match="bad value"), memory_guard("x"):
        raise ValueError("bad value")
    with pytest.raises(KeyboardInterrupt), memory_guard("x"):
        raise KeyboardInterrupt
    with memory_guard("x"):
        value = 1
    assert value == 1


def _npz_declaring(shape: tuple[int, ...], descr: str = "|u1") -> bytes:
    """An .npz whose 'x' member is only a .npy header declaring ``shape`` (no data)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    labels = io.BytesIO()
    np.save(labels, np.arange(shape[0] if shape[0] < 100 else 10) % 2)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("x.npy", header.getvalue())
        zf.writestr("y.npy", labels.getvalue())
    return out.getvalue()


_CHILD = textwrap.dedent(
    """
    import json, re, resource, sys
    import numpy as np
    from geoviz import memory
    from geoviz.data.formats import load_path
    from geoviz.errors import ResourceError

    vm = int(re.search(r"VmSize:\\s*(\\d+) kB", open("/proc/self/status").read()).group(1)) * 1024
    limit = vm + 2**30  # one GiB of room above what the interpreter has mapped now
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    out = {"room": memory.memory_limit_bytes(), "source": memory.memory_limit()[1]}
    try:
        np.load(sys.argv[1])["x"]  # numpy alone: the header's 1.5 GiB is allocated
        out["numpy"] = "loaded"
    except MemoryError as err:
        out["numpy"] = type(err).__name__
    def guarded():
        with memory.memory_guard("ones"):
            np.ones(2**31, np.uint8)

    for name, run in (
        ("load", lambda: load_path(sys.argv[1])),
        ("check", lambda: memory.check_bytes(2**31, "two GiB")),
        ("guard", guarded),
    ):
        try:
            run()
            out[name] = "no error"
        except ResourceError as err:
            out[name] = "ResourceError: " + str(err)
        except BaseException as err:
            out[name] = type(err).__name__ + ": " + str(err)
    print(json.dumps(out))
    """
)


def test_real_rlimit_as_in_a_child_process(tmp_path):
    path = tmp_path / "declares-1.5GiB.npz"
    path.write_bytes(_npz_declaring((3 * 2**29,)))  # 1.5 GiB of uint8
    assert path.stat().st_size < 1000
    run = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["source"] == "the address-space limit RLIMIT_AS (ulimit -v)"
    assert 0.7 * GiB < out["room"] <= GiB  # what was mapped since the reading is not room
    assert out["numpy"] == "MemoryError"  # the hostile input really is one
    assert out["load"].startswith(f"ResourceError: loading {path} (")
    assert "but this process can allocate at most" in out["load"]
    assert "RLIMIT_AS" in out["load"] and "\n" not in out["load"]
    assert out["check"].startswith("ResourceError: two GiB needs 2.00 GiB")
    assert out["guard"].startswith("ResourceError: ones ran out of memory: asked for 2.00 GiB")
