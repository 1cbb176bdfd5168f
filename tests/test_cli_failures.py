"""Every failure of the command line is one sentence, and Ctrl-C exits quietly (issue 32).

Bad invocations (options that do nothing in the given combination, names the file system
cannot take, options out of range) are refused before any dataset is loaded, in one line
naming the option; library messages are worded with the command's options; an ``OSError``
or a bug is one line too; Ctrl-C during a fit is ``interrupted`` and status 130.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from geoviz.cli import INTERRUPTED_STATUS, cli_message, main
from geoviz.errors import ConvergenceWarning, GeovizError

ROOT = Path(__file__).resolve().parents[1]
REFS_2D = ["--target", "gmm2d", "--refs", "chessboard,gmm2d", "--n", "48", "--quiet"]
TINY = ["--preset", "tiny", "--n", "40", "--n-test", "40", "--size", "16", "--k", "2"]
SEQ = ["--backend", "sequential", "--quiet"]
LONG = "a" * 300
#: a cluster's address with the backend that joins none
RAY_SEQ = ["--backend", "sequential", "--ray-address", "127.0.0.1:1"]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def no_loading(monkeypatch):
    """Fail the test if a dataset is loaded or a map fitted."""
    import geoviz.cli.screen_run as screen_run
    import geoviz.cli.transfer_run as transfer_run
    import geoviz.data.registry as registry
    import geoviz.geodesic.pipeline as pipeline
    import geoviz.geodesic.spec as spec

    def boom(*args, **kwargs):
        raise AssertionError("loaded or fitted")

    monkeypatch.setattr(spec, "load_spec_datasets", boom)
    monkeypatch.setattr(pipeline, "fit_geodesic", boom)
    # the run modules bind these names when imported (before the patches above, so they keep
    # the real ones): patched where they are looked up too
    monkeypatch.setattr(transfer_run, "load_spec_datasets", boom)
    monkeypatch.setattr(transfer_run, "fit_geodesic", boom)
    monkeypatch.setattr(screen_run, "load_spec_datasets", boom)
    monkeypatch.setattr(registry, "load_dataset", boom)


def _out(tmp_path: Path, name: str) -> str:
    return str(tmp_path / name)


#: (argv with {tmp} for the test's folder, the option the sentence must name)
BAD = [
    # options that do nothing in the given combination
    (["distance", *REFS_2D, "--features-size", "32"], "--features-size"),
    (["distance", *REFS_2D, "--bootstrap-method", "refit"], "--bootstrap-method"),
    (["distance", *REFS_2D, "--bootstrap-method", "q-resample"], "--bootstrap-method"),
    (["distance", *REFS_2D, "--bootstrap-seed", "3"], "--bootstrap-seed"),
    (["distance", *REFS_2D, "--backend", "sequential"], "--backend"),
    (["distance", *REFS_2D, "--bootstrap", "50", "--backend", "ray"], "--backend"),
    (["distance", *REFS_2D, "--ray-address", "127.0.0.1:1"], "--ray-address"),
    # issue 41: batches or refits run in this process with sequential: no cluster to join
    (
        ["distance", *REFS_2D, "--batch-size", "20", *RAY_SEQ],
        "--ray-address",
    ),
    (
        ["project", *REFS_2D, "--bootstrap", "20", "--bootstrap-method", "refit", *RAY_SEQ],
        "--ray-address",
    ),
    (["distance", *REFS_2D, "--batch-size", "20", "--stream"], "--stream"),
    (["distance", *REFS_2D, "--neural-preset", "tiny"], "--neural-preset"),
    (["distance", *REFS_2D, "--neural-iterations", "5"], "--neural-iterations"),
    (["distance", *REFS_2D, "--encoder-preset", "tiny"], "--encoder-preset"),
    (["distance", *REFS_2D, "--features", "pca", "--method", "neural"], "--method barycentric"),
    (["project", *REFS_2D, "--format", "npz"], "--format"),
    (["project", *REFS_2D, "--n-out", "10"], "--n-out"),
    (["project", *REFS_2D, "--overwrite"], "--overwrite"),
    (["project", *REFS_2D, "--out", "{tmp}/p.npz", "--n-out", "100"], "--n-out"),
    (["show", "mnist", "--overwrite"], "--overwrite"),
    (["transfer", *TINY, "--method", "fewshot", "--weights", "0.5,0.3,0.2", *SEQ], "--weights"),
    (["transfer", *TINY, "--method", "otdd", "--neural", *SEQ], "--neural"),
    (["transfer", *TINY, "--grid", "2", "--neural", *SEQ], "--neural"),
    (["transfer", *TINY, "--method", "otdd", "--neural-preset", "tiny", *SEQ], "--neural-preset"),
    (["transfer", *TINY, "--encoder-preset", "tiny", *SEQ], "--encoder-preset"),
    (["transfer", *TINY, "--method", "fewshot", "--epsilon", "0.01", *SEQ], "--epsilon"),
    (["transfer", *TINY, "--method", "1nn", "--features", "pca", *SEQ], "--features"),
    (["transfer", *TINY, *SEQ, "--ray-address", "127.0.0.1:1"], "--ray-address"),
    (["transfer", *TINY[:-4], "--size", "8", "--k", "2", *SEQ], "--size"),
    # names the file system cannot take (ENAMETOOLONG after the fit, or a traceback)
    (["project", *REFS_2D, "--out", "{tmp}/" + LONG + ".npz"], "--out"),
    (["project", *REFS_2D, "--out", "{tmp}/" + "b" * 240 + ".npz"], "--out"),
    (["project", *REFS_2D, "--out", "{tmp}/" + LONG + "/p.npz"], "--out"),
    (["grid", *REFS_2D, "--out", "{tmp}/" + LONG + ".csv"], "--out"),
    (["project", *REFS_2D, "--out", "{tmp}/nul\0.npz"], "--out"),
    (["project", "--target", LONG, *REFS_2D[2:]], "--target"),
    (["project", *REFS_2D, "--features-model", "{tmp}/" + LONG + ".pt"], "--features-model"),
    (["show", LONG], "NAME"),
    (["show", "mnist", "--grid", "{tmp}/" + LONG + ".png"], "--grid"),
    (["transfer", *TINY, *SEQ, "--out", "{tmp}/" + LONG], "--out"),
]


@pytest.mark.parametrize(
    ("argv", "option"), BAD, ids=[f"{a[0]} {o} {k}" for k, (a, o) in enumerate(BAD)]
)
def test_bad_invocations_are_one_sentence_naming_the_option(
    argv, option, tmp_path, capsys, no_loading
):
    argv = [part.replace("{tmp}", str(tmp_path)) for part in argv]
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: ") and option in lines[0], lines[0]
    assert "Traceback" not in captured.err and len(lines[0]) < 400
    assert captured.out == ""


@pytest.mark.parametrize("raw", ["abc", "-5", "inf"])
@pytest.mark.parametrize(
    "argv",
    [
        ["distance", *REFS_2D, "--batch-size", "20"],
        ["transfer", *TINY, "--quiet"],
        ["datasets"],
    ],
    ids=["distance batches", "transfer", "datasets"],
)
def test_a_bad_ray_connect_timeout_is_refused_at_start(argv, raw, monkeypatch, capsys, no_loading):
    """Issue 41: ``GEOVIZ_RAY_CONNECT_TIMEOUT=abc`` was refused only when Ray was first
    needed, 22-106 s into the run; now at the command's start, before any work."""
    import time

    monkeypatch.setenv("GEOVIZ_RAY_CONNECT_TIMEOUT", raw)
    start = time.perf_counter()
    assert main(argv) == 2
    assert time.perf_counter() - start < 10
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        "error: environment variable GEOVIZ_RAY_CONNECT_TIMEOUT must be a number of seconds "
        f"in (0, 3600], got {raw!r}"
    ]
    assert captured.out == ""


def test_an_output_name_that_leaves_room_for_its_siblings_is_written(tmp_path, capsys):
    """191 bytes is the longest --out name: its temporary and manifest siblings fit in 255."""
    out = tmp_path / ("c" * 187 + ".npz")
    assert main(["project", *REFS_2D, "--out", str(out)]) == 0
    assert out.is_file()
    assert out.with_name("c" * 187 + ".manifest.json").is_file()


def test_a_300_character_out_through_python_m_geoviz_is_one_sentence(tmp_path):
    """The issue's row: an --out name of 300 characters gave an ENAMETOOLONG traceback."""
    env = {**os.environ, "GEOVIZ_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "geoviz", "project", *REFS_2D, "--out", str(tmp_path / LONG)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("error: --out: the name 'aaaa") and "300 bytes" in proc.stderr


# ---------------------------------------------------------------- messages for the CLI


@pytest.mark.parametrize(
    ("library", "cli"),
    [
        (
            "maps in the pca feature space are barycentric: a neural map there would generate "
            "features, not images (use method='barycentric')",
            "(use --method barycentric)",
        ),
        (
            "the mean ground cost is 0 (identical single-point datasets?), so a relative "
            "epsilon is undefined; give an absolute one",
            "the relative --epsilon is undefined",
        ),
        (
            "the Ray backend needs the optional dependency ray: pip install 'geoviz[ray]' "
            "(or use backend='sequential')",
            "(or use --backend sequential)",
        ),
        (
            "out.xyz: cannot infer the export format ...; use .npz or a directory, or pass format=",
            "--format",
        ),
        ("image sizes differ (a: 16x16, b: 28x28); pass size=... to resize them", "--size"),
        (
            "LeNet needs images of at least 16x16 pixels, got 8x8; resize them with "
            "geoviz.data.preprocess.harmonize(size=...)",
            "use a larger --size",
        ),
        (
            "cannot draw n=5000 samples: the interpolated dataset is the push-forward of the "
            "48 target samples; use n <= 48 or fit with more target samples",
            "cannot draw --n-out 5000 samples: the interpolated dataset is the push-forward of "
            "the 48 target samples; use --n-out <= 48 or a larger --n",
        ),
        ("k=9 labelled examples per class is more than the smallest class", "--k 9 labelled"),
        ("x already exists; pass overwrite=True to replace it", "pass --overwrite to replace"),
        ("with marginal error 0.1 > tol=1e-06; increase max_iter or epsilon", "larger --epsilon"),
    ],
)
def test_library_messages_name_the_cli_options(library, cli):
    text = cli_message(GeovizError(library))
    assert cli in text
    for python in ("method='", "backend='", "format=", "size=", "n=", "k=", "max_iter", "=True"):
        assert python not in text
    assert "absolute one" not in text


def test_the_library_messages_quoted_above_are_the_real_ones():
    """The wording table follows the library: each quoted phrase is still in its source."""
    sources = {
        "geoviz/geodesic/config.py": "(use method='barycentric')",
        "geoviz/ot/geometry.py": "give an absolute one",
        "geoviz/tasks.py": "(or use backend='sequential')",
        "geoviz/export/registry.py": "or pass format=",
        "geoviz/data/preprocess.py": "pass size=... to resize them",
        "geoviz/nn/models.py": "resize them with geoviz.data.preprocess.harmonize(size=...)",
        "geoviz/geodesic/interpolate.py": "or fit with more target samples",
        "geoviz/ot/sinkhorn.py": "increase max_iter or epsilon",
    }
    for path, phrase in sources.items():
        assert phrase in (ROOT / path).read_text(), (path, phrase)


def test_warnings_are_one_line_worded_for_the_cli(monkeypatch, capsys):
    import geoviz.data.registry as registry

    def warn(*args, **kwargs):
        warnings.warn(
            "Sinkhorn stopped after 10 iterations (max_iter=10) with marginal error 0.1 > "
            "tol=1e-06; increase max_iter or epsilon",
            ConvergenceWarning,
            stacklevel=2,
        )
        return []

    monkeypatch.setattr(registry, "list_datasets", warn)
    assert main(["datasets"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: Sinkhorn stopped") and err.count("\n") == 1, err
    assert "use a larger --epsilon" in err


# ---------------------------------------------------------------- OSError, bugs, Ctrl-C


def _raising(monkeypatch, exc: BaseException) -> None:
    import geoviz.data.registry as registry

    def fail(*args, **kwargs):
        raise exc

    monkeypatch.setattr(registry, "list_datasets", fail)


def test_an_os_error_is_one_sentence_with_status_2(monkeypatch, capsys):
    _raising(monkeypatch, OSError(errno.ENOSPC, "No space left on device", "/x/" + "y" * 500))
    assert main(["datasets"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: No space left on device: /x/yyy") and err.count("\n") == 1
    assert len(err) < 200


def test_a_bug_is_one_line_with_status_1_and_its_traceback_on_request(monkeypatch, capsys):
    _raising(monkeypatch, RuntimeError("boom\nsecond line"))
    assert main(["datasets"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: unexpected RuntimeError: boom (a bug in geoviz;")
    assert err.count("\n") == 1 and "Traceback" not in err
    monkeypatch.setenv("GEOVIZ_TRACEBACK", "1")
    assert main(["datasets"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_keyboard_interrupt_in_a_command_is_status_130_and_one_line(monkeypatch, capsys):
    _raising(monkeypatch, KeyboardInterrupt())
    assert main(["datasets"]) == INTERRUPTED_STATUS == 130
    assert capsys.readouterr().err == "interrupted\n"


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_during_a_fit_exits_quietly_with_130(tmp_path, workers):
    """The issue: Ctrl-C during a fit printed about 40 lines of traceback. SIGINT is sent
    once the fit reports progress (so the fit is running), not after a fixed delay. With
    parts on threads (``--workers 2``) the process leaves without joining them."""
    env = {**os.environ, "GEOVIZ_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    argv = ["distance", "--target", "mnist", "--refs", "fashion_mnist,usps", "--n", "2000"]
    argv += ["--workers", str(workers)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "geoviz", *argv, "--no-cache"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as from a terminal: a runner started in the background (no job control) hands its
        # children SIGINT ignored, and Python then never raises KeyboardInterrupt
        preexec_fn=_default_sigint,
    )
    try:
        assert proc.stderr is not None
        progress = []
        for line in proc.stderr:  # plain progress lines on a pipe: "[  0%] stage"
            progress.append(line)
            if line.startswith("[") and "%]" in line:
                break
        assert progress, "the fit reported no progress"
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        # read from the same buffered stream: communicate() reads the descriptor and would
        # miss what the loop above already buffered (the "interrupted" line, when it came fast)
        rest = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, rest
    tail = [line for line in rest.splitlines() if not (line.startswith("[") and "%]" in line)]
    assert "Traceback" not in rest and len(tail) <= 2, rest
    assert tail[-1] == "interrupted"
