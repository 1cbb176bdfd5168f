"""Ray addresses on the command line (issue 32): a malformed ``--ray-address`` is refused
before any work, a cluster that does not answer within the bounded wait is refused naming
the address, and ``--backend auto`` falls back to running the refits in this process."""

from __future__ import annotations

import socket
import warnings

import numpy as np
import pytest

from geoviz.cli import main

REFIT = [
    "distance",
    "--target",
    "gmm2d",
    "--refs",
    "chessboard,gmm2d",
    "--n",
    "48",
    "--quiet",
    "--bootstrap",
    "20",
    "--bootstrap-method",
    "refit",
]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(autouse=True)
def _no_cluster_in_the_environment(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("GEOVIZ_RAY_CONNECT_TIMEOUT", "5")


@pytest.mark.parametrize("command", ["geodesic", "transfer"])
def test_a_malformed_ray_address_is_one_sentence_before_any_work(monkeypatch, capsys, command):
    import geoviz.geodesic.pipeline as pipeline

    def no_fit(*args, **kwargs):
        raise AssertionError("the address must be refused before the fit")

    monkeypatch.setattr(pipeline, "fit_geodesic", no_fit)
    args = (
        [*REFIT, "--ray-address", "garbage!!"]
        if command == "geodesic"
        else [
            "transfer",
            "--target",
            "mnist",
            "--refs",
            "usps,kmnist",
            "--ray-address",
            "garbage!!",
        ]
    )
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "--ray-address 'garbage!!' is not a Ray address" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1
    monkeypatch.setenv("RAY_ADDRESS", "ray://")
    assert main([*REFIT]) == 2
    assert "RAY_ADDRESS 'ray://' is not a Ray address" in capsys.readouterr().err


def test_a_ray_address_that_does_not_answer_is_refused_naming_it(capsys):
    address = f"127.0.0.1:{_closed_port()}"
    assert main([*REFIT, "--backend", "ray", "--ray-address", address]) == 2
    err = capsys.readouterr().err.strip()
    assert f"the Ray address '{address}' does not answer (connection refused" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1


def _cheap_replicate(b, *, target, references, config, seed, cache):
    """A replicate in microseconds (what is tested is where the refits run, not their values)."""
    m = len(references)
    return np.full(m, 1.0 + 0.01 * b), np.ones((m, m)) - np.eye(m), np.full(m, 1.0 / m)


def test_backend_auto_falls_back_to_sequential_when_the_cluster_does_not_answer(
    monkeypatch, capsys
):
    import geoviz.geodesic.refit as refit

    monkeypatch.setattr(refit, "refit_replicate", _cheap_replicate)
    address = f"127.0.0.1:{_closed_port()}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main([*REFIT, "--backend", "auto", "--ray-address", address]) == 0
    out, err = capsys.readouterr()
    # the fallback is said once: as a warning, or printed by the CLI as a "warning:" line
    said = [str(w.message) for w in caught] + err.splitlines()
    assert any(
        f"'{address}' does not answer" in line and "running the tasks sequentially" in line
        for line in said
    ), said
    assert "(refit: Q and every reference drawn again, maps refitted; B = 20" in out
