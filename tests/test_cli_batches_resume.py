"""Issue 41 item 3: a ``geoviz project --batch-size`` run killed with SIGKILL resumes from
the batches it had finished, at the CLI's default cache settings (its folder in
``$GEOVIZ_CACHE_DIR``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from geoviz.cli import main
from geoviz.ot.otdd_batches import BatchSolve

# two maps of 4 batches each (80 target points, batches of 20), at an epsilon at which
# each batch converges in a fraction of a second
ARGV = [
    "project",
    "--target",
    "gmm2d",
    "--refs",
    "chessboard,gmm2d",
    "--n",
    "80",
    "--batch-size",
    "20",
    "--epsilon",
    "0.05",
    "--quiet",
]
N_BATCHES = 8
KILL_AFTER = 2


def _batch_entries(cache: Path) -> dict[str, os.stat_result]:
    """The finished batches on disk (temporaries of a write in progress are not ``*.pt``)."""
    return {p.name: p.stat() for p in (cache / "otdd_batch").glob("*.pt")}


def _project(
    cache: Path, out: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    """``geoviz project`` in this process, its default cache in ``cache``, export to
    ``out``; its stdout, with ``out``'s path as ``OUT``."""
    capsys.readouterr()
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(cache))
    assert main([*ARGV, "--out", str(out)]) == 0
    assert out.is_file()
    return capsys.readouterr().out.replace(str(out.with_suffix("")), "OUT")


def test_a_killed_batched_run_computes_only_the_missing_batches(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    env = {**os.environ, "GEOVIZ_CACHE_DIR": str(cache)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "geoviz", *ARGV, "--out", str(tmp_path / "killed.npz")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while (
            len(_batch_entries(cache)) < KILL_AFTER
            and proc.poll() is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.005)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # pragma: no cover - only when the test itself failed
            proc.kill()
            proc.wait()
    # killed mid-way, with some batches on disk and some missing
    assert proc.returncode == -signal.SIGKILL, err.decode(errors="replace")
    finished = _batch_entries(cache)
    assert KILL_AFTER <= len(finished) < N_BATCHES
    assert not (tmp_path / "killed.npz").exists()

    solved: list[int] = []
    real = BatchSolve._solve

    def counting(self, bi, *args, **kwargs):
        solved.append(int(bi))
        return real(self, bi, *args, **kwargs)

    monkeypatch.setattr(BatchSolve, "_solve", counting)
    resumed_out = _project(cache, tmp_path / "resumed.npz", monkeypatch, capsys)
    assert len(solved) == N_BATCHES - len(finished)
    after = _batch_entries(cache)
    assert len(after) == N_BATCHES
    for name, stat in finished.items():  # read back, not solved and written again
        assert (after[name].st_ino, after[name].st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)

    # the same numbers as a run that was never killed
    monkeypatch.setattr(BatchSolve, "_solve", real)
    whole_out = _project(tmp_path / "fresh", tmp_path / "uninterrupted.npz", monkeypatch, capsys)
    assert whole_out == resumed_out
    with (
        np.load(tmp_path / "resumed.npz", allow_pickle=False) as resumed,
        np.load(tmp_path / "uninterrupted.npz", allow_pickle=False) as whole,
    ):
        assert sorted(resumed.files) == sorted(whole.files)
        for name in whole.files:
            if name.endswith("_json"):  # the same manifest and metadata, but for the time
                a, b = (json.loads(str(npz[name])) for npz in (resumed, whole))
                a.pop("created", None), b.pop("created", None)
                assert a == b
            elif np.issubdtype(whole[name].dtype, np.floating):
                np.testing.assert_allclose(resumed[name], whole[name], rtol=1e-6, atol=1e-7)
            else:  # labels, class names
                np.testing.assert_array_equal(resumed[name], whole[name])
