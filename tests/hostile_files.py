"""Hostile paths for loaders (a FIFO, ``/dev/zero``, a directory, a sparse over-size file),
tried in a child interpreter so that a loader that blocks or reads without end fails its
test instead of hanging the suite or filling the machine's memory (imported as a plain
module, like ``synthetic_data``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: each case is stopped after this many seconds (SIGALRM in the child)
CASE_SECONDS = 20
#: the child's data segment: reading /dev/zero stops here with a MemoryError
CHILD_DATA_BYTES = 2 * 1024**3

_RUNNER = """
import json, resource, signal, sys
resource.setrlimit(resource.RLIMIT_DATA, ({limit}, {limit}))

class Hung(BaseException):  # not caught by a loader's "except Exception"
    pass

def alarm(signum, frame):
    raise Hung()

signal.signal(signal.SIGALRM, alarm)
{setup}
results = {{}}
for name, call in CASES.items():
    signal.alarm({seconds})
    try:
        call()
        results[name] = ["returned", ""]
    except Hung:
        results[name] = ["hung", ""]
    except MemoryError:
        results[name] = ["out of memory", ""]
    except Exception as err:
        results[name] = [type(err).__name__, str(err)]
    finally:
        signal.alarm(0)
print("RESULTS " + json.dumps(results))
"""


def needs_posix_files() -> None:
    """Skip where FIFOs, /dev/zero or RLIMIT_DATA are missing."""
    if not hasattr(os, "mkfifo") or not Path("/dev/zero").exists():
        pytest.skip("needs FIFOs and /dev/zero")
    try:
        import resource  # noqa: F401
    except ImportError:
        pytest.skip("needs the resource module")


def make_fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def make_sparse(path: Path, n_bytes: int) -> Path:
    with open(path, "wb") as fh:
        fh.truncate(n_bytes)  # no disk used
    return path


def run_cases(setup: str, timeout: float = 240) -> dict[str, tuple[str, str]]:
    """Run ``setup`` (which defines ``CASES = {name: zero-argument callable}``) in a child;
    each case's outcome: ``(exception type name, message)``, ``("hung", "")``,
    ``("out of memory", "")`` or ``("returned", "")``."""
    code = _RUNNER.format(
        limit=CHILD_DATA_BYTES, seconds=CASE_SECONDS, setup=textwrap.dedent(setup)
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULTS ")]
    assert lines, f"the child did not report (rc {run.returncode}): {run.stderr[-2000:]}"
    return {k: (v[0], v[1]) for k, v in json.loads(lines[-1][len("RESULTS ") :]).items()}
