"""geoviz.isolation: work in a supervised child process fails alone (issue 32), and
BackgroundJob turns any failure of its thread into an error the page can say."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from geoviz.app.jobs import BackgroundJob
from geoviz.app.services.errors import error_text
from geoviz.errors import DatasetError
from geoviz.isolation import WorkerExitedError, run_in_child

HERE = Path(__file__).resolve().parent
#: the child imports the functions below from this module
CHILD_ENV = {"PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
ADVICE = "Start it again to resume from the checkpoints."


def _steps(n: int, progress) -> dict:
    for i in range(n):
        progress(f"step ({i + 1}/{n})", (i + 1) / n)
    return {"pid": os.getpid(), "n": n}


def _raise_dataset_error(progress) -> None:
    raise DatasetError("the target has no test split", "upload:x.npz")


def _raise_value_error(progress) -> None:
    raise ValueError("first line\nthe last line says why")


def _exit_quietly(progress) -> None:
    print(  # the last line a Ray driver writes when its cluster's coordinator is gone
        "[2026-11-27 10:10:27,932 E 21824 21985] rpc_client.h:204: Failed to connect to GCS "
        "within 15 seconds. GCS may have been killed.",
        flush=True,
    )
    os._exit(3)


def _wait_forever(progress) -> None:
    # a process of the child's own (as Ray's raylet would be): it must end with the child
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    progress(f"helper {helper.pid}", 0.5)
    time.sleep(600)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone(pid: int, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_the_value_and_the_progress_come_back_from_the_child():
    seen: list[tuple[str, float]] = []
    out = run_in_child(
        functools.partial(_steps, 3), progress=lambda s, f: seen.append((s, f)), env=CHILD_ENV
    )
    assert out["n"] == 3 and out["pid"] != os.getpid()
    assert [s for s, _ in seen] == ["step (1/3)", "step (2/3)", "step (3/3)"]
    assert seen[-1][1] == pytest.approx(1.0)


def test_an_error_of_the_library_comes_back_as_itself():
    with pytest.raises(DatasetError, match="the target has no test split"):
        run_in_child(_raise_dataset_error, env=CHILD_ENV)


def test_any_other_end_of_the_child_is_one_sentence():
    with pytest.raises(WorkerExitedError) as err:
        run_in_child(_raise_value_error, what="The transfer run", advice=ADVICE, env=CHILD_ENV)
    assert str(err.value) == (
        "The transfer run stopped: its worker process failed (ValueError: the last line says "
        f"why). {ADVICE}"
    )
    with pytest.raises(WorkerExitedError) as err:
        run_in_child(_exit_quietly, what="The transfer run", advice=ADVICE, env=CHILD_ENV)
    assert str(err.value) == (
        "The transfer run stopped: its worker process exited with status 3 (Failed to connect "
        f"to GCS within 15 seconds) before it finished. {ADVICE}"
    )
    assert err.value.returncode == 3


def test_a_child_killed_with_sigkill_fails_with_a_sentence_and_can_run_again():
    started: list[int] = []
    helpers: list[int] = []

    def progress(stage: str, fraction: float) -> None:
        if stage.startswith("helper "):
            helpers.append(int(stage.split()[1]))
            os.kill(started[0], signal.SIGKILL)  # mid-run, as the OOM killer would

    with pytest.raises(WorkerExitedError) as err:
        run_in_child(
            _wait_forever,
            progress=progress,
            what="The transfer run",
            advice=ADVICE,
            env=CHILD_ENV,
            on_start=started.append,
        )
    assert str(err.value) == (
        "The transfer run stopped: its worker process was ended by signal 9 (SIGKILL) before "
        f"it finished. {ADVICE}"
    )
    assert err.value.returncode == -signal.SIGKILL
    assert "SIGKILL" in error_text(err.value)  # what the page shows: the sentence itself
    # what the child started ends with it (its process group), and the same job runs again
    assert helpers and _gone(helpers[0])
    assert run_in_child(functools.partial(_steps, 1), env=CHILD_ENV)["n"] == 1


def test_the_child_ends_when_its_parent_dies(tmp_path):
    """A server killed mid-run leaves no worker (nor its Ray cluster) behind, nor the job's
    temporary folder."""
    pids = tmp_path / "pids"
    temp = tmp_path / "tmp"
    temp.mkdir()
    code = (
        f"import os, sys; sys.path.insert(0, {str(HERE)!r})\n"
        "from geoviz.isolation import run_in_child\n"
        "import test_isolation as t\n"
        "def note(stage, fraction):\n"
        f"    open({str(pids)!r}, 'a').write(stage.split()[1] + '\\n')\n"
        "run_in_child(t._wait_forever, progress=note, env=t.CHILD_ENV,\n"
        f"             on_start=lambda pid: open({str(pids)!r}, 'a').write(str(pid) + '\\n'))\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "TMPDIR": str(temp)})
    try:
        deadline = time.monotonic() + 120
        while len(pids.read_text().split() if pids.exists() else []) < 2:
            assert time.monotonic() < deadline and parent.poll() is None, "no child started"
            time.sleep(0.2)
        child, helper = (int(p) for p in pids.read_text().split()[:2])
        assert list(temp.glob("geoviz-child-*")), "the job's folder is under TMPDIR"
        parent.kill()
        parent.wait()
        assert _gone(child) and _gone(helper)
        assert not list(temp.glob("geoviz-child-*"))  # the child removed it before it ended
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


# --------------------------------------------------------------------------- BackgroundJob


def test_a_job_whose_thread_raises_is_failed_with_its_error():
    def fails(progress):
        progress("maps (fitting)", 0.3)
        raise DatasetError("the scenario cannot be loaded", "mnist")

    job = BackgroundJob(fails, name="failing-job")
    assert job.wait(30) and job.done()
    assert isinstance(job.error_, DatasetError) and job.result_ is None
    assert job.snapshot()[0] == "maps (fitting)"
    assert "the scenario cannot be loaded" in error_text(job.error_)


def test_a_job_whose_worker_is_killed_is_failed_with_a_sentence():
    started = threading.Event()
    pid: list[int] = []

    def on_start(p: int) -> None:
        pid.append(p)
        started.set()

    job = BackgroundJob(
        lambda progress: run_in_child(
            _wait_forever,
            progress=progress,
            what="The transfer run",
            advice=ADVICE,
            env=CHILD_ENV,
            on_start=on_start,
        ),
        name="killed-job",
    )
    assert started.wait(60)
    os.kill(pid[0], signal.SIGKILL)
    assert job.wait(60)
    assert isinstance(job.error_, WorkerExitedError)
    assert error_text(job.error_).startswith("The transfer run stopped: its worker process was")
