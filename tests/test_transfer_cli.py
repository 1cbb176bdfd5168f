"""``geoviz transfer`` through geoviz.cli.main (bundled datasets, tiny preset, sequential)."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from geoviz import __version__
from geoviz.cli import main

TINY = ["--preset", "tiny", "--n", "40", "--n-test", "40", "--size", "16", "--k", "2"]
SEQ = ["--backend", "sequential", "--quiet"]


@pytest.fixture(autouse=True, scope="module")
def _isolated_cache(tmp_path_factory):
    """One cache for the module: the geodesic of the shared tiny scenario is fitted once.

    One torch thread: with two on a busy 2-core machine the OTDD fit's sparse
    Sinkhorn stage was seen to take 30 s instead of 1.5 s (thread contention).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GEOVIZ_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield
    torch.set_num_threads(threads)


def test_transfer_writes_results_and_prints_all_methods(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["transfer", *TINY, "--seeds", "0", "--out", str(out), *SEQ]) == 0
    text = capsys.readouterr().out
    table = text[text.index("method") :].splitlines()
    assert table[0].split()[:2] == ["method", "accuracy"]
    assert [line.split()[0] for line in table[2:6]] == ["otdd", "mixup", "fewshot", "1nn"]
    assert "seed 0" in table[0] and "±" in table[2]
    assert "â: fashion_mnist=" in text

    results = json.loads((out / "results.json").read_text())
    assert set(results["summary"]) == {"otdd", "mixup", "fewshot", "1nn"}
    assert [r["method"] for r in results["runs"]] == ["otdd", "mixup", "fewshot", "1nn"]
    assert all(0.0 <= r["accuracy"] <= 1.0 and r["seed"] == 0 for r in results["runs"])
    assert sum(results["weights"]) == pytest.approx(1.0)
    with open(out / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["method"] for r in rows] == ["otdd", "mixup", "fewshot", "1nn"]
    assert float(rows[3]["accuracy"]) == results["runs"][3]["accuracy"]

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["geoviz_version"] == __version__
    assert [d["name"] for d in manifest["datasets"]] == [
        "mnist",
        "fashion_mnist",
        "usps",
        "kmnist",
        "mnist",
    ]
    assert [d["split"] for d in manifest["datasets"]][-1] == "test"
    assert all(
        len(d["fingerprint"]) == 64 and d["shape"] == [1, 16, 16] for d in manifest["datasets"]
    )
    assert [d["n_samples"] for d in manifest["datasets"]] == [40, 40, 40, 40, 40]
    assert manifest["task"]["k"] == 2 and manifest["seeds"] == [0]
    assert manifest["preset"]["name"] == "tiny"
    assert manifest["preset"]["pretrain"]["iterations"] > 0


def test_transfer_one_method_explicit_weights_two_seeds(capsys) -> None:
    argv = ["transfer", *TINY, "--method", "mixup", "--weights", "0.5,0.3,0.2", "--seeds", "0,1"]
    assert main([*argv, *SEQ]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith(("mixup", "otdd", "1nn"))]
    assert len(rows) == 1 and rows[0][0] == "mixup" and len(rows[0]) == 6  # mean ± std, 2 seeds
    assert "weights a: fashion_mnist=0.5000, usps=0.3000, kmnist=0.2000" in out


def test_transfer_grid_writes_study_and_resumes(tmp_path, capsys) -> None:
    out = tmp_path / "grid"
    argv = ["transfer", *TINY, "--seeds", "0", "--grid", "1", "--out", str(out), *SEQ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "3 runs trained, 0 loaded from checkpoints" in text
    assert "Pearson r = " in text and "Spearman rho = " in text
    header = next(line for line in text.splitlines() if line.startswith("#"))
    assert header.split()[:4] == ["#", "a_fashion_mnist", "a_usps", "a_kmnist"]
    study = json.loads((out / "grid.json").read_text())
    assert len(study["points"]) == 3 and study["resolution"] == 1
    assert (out / "grid.csv").read_text().startswith("index,a_fashion_mnist")
    assert "scatterternary" in (out / "correlation.html").read_text()
    assert len(list((out / "checkpoints").glob("*.json"))) == 3
    assert json.loads((out / "manifest.json").read_text())["grid_resolution"] == 1
    # a rerun loads every checkpoint
    assert main(argv) == 0
    assert "0 runs trained, 3 loaded from checkpoints" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--weights", "0.5,0.6,0.2"], "error: --weights: weights sum to"),
        (["--weights", "0.5,0.5"], "error: --weights: weights must have 3 entries"),
        (["--weights", "half,half"], "error: --weights: expected 'a_hat' or 3"),
        (["--seeds", "0,x"], "error: --seeds: expected comma-separated integers"),
        (["--preset", "huge"], "error: unknown transfer preset 'huge'"),
        (["--grid", "1", "--method", "1nn"], "error: --grid trains on P_a"),
        (["--epsilon", "-1"], "error: --epsilon must be a positive number"),
        # issue 15: bounds checked before any dataset is loaded
        (["--epsilon", "1e-20"], "error: --epsilon 1e-20 is below 0.0001 (relative to the mean"),
        (["--epsilon", "1e-100"], "error: --epsilon 1e-100 is below 0.0001"),
        (["--n", "1000000000"], "error: --n must be between 10 and 100,000, got 1,000,000,000"),
        (["--n-test", "5"], "error: --n-test must be between 10 and 100,000, got 5"),
        (["--size", "700"], "error: --size must be between 16 and 128, got 700"),
        # issue 32: the transfer network needs 16 pixels (a message naming harmonize(size=...)
        # came after the datasets were loaded)
        (["--size", "8"], "error: --size must be between 16 and 128, got 8"),
        (["--k", "100000"], "error: --k must be between 1 and 1,000, got 100,000"),
        (["--seed", "-1"], "error: --seed must be between 0 and 2,147,483,647, got -1"),
        (["--seeds", "0,-5"], "error: --seeds: every seed must be between 0 and"),
        (["--seeds", ",".join(map(str, range(101)))], "error: --seeds: at most 100 seeds, got 101"),
        (["--grid", "1000"], "error: --grid: grid resolution must be between 1 and 500, got 1,000"),
        (
            ["--refs", "usps"],
            "error: --refs: a generalized geodesic needs 2 to 10 reference datasets P_i, got 1",
        ),
        (
            ["--refs", ",".join(["usps"] * 11)],
            "error: --refs: a generalized geodesic needs 2 to 10 reference",
        ),
    ],
)
def test_bad_options_give_one_line_error_and_status_2(extra, message, capsys, monkeypatch) -> None:
    import geoviz.data.registry as registry

    def boom(*args, **kwargs):
        raise AssertionError("a dataset was loaded")

    monkeypatch.setattr(registry, "load_dataset", boom)  # every check comes first
    assert main(["transfer", *TINY, *extra, *SEQ]) == 2
    captured = capsys.readouterr()
    err_lines = captured.err.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0].startswith(message), captured.err
    assert captured.out == ""


def test_transfer_is_listed_in_help(capsys) -> None:
    assert main(["--help"]) == 0
    assert "transfer" in capsys.readouterr().out
    assert main(["transfer", "--help"]) == 0
    help_text = capsys.readouterr().out
    for option in ("--grid", "--backend", "--ray-address", "--weights", "--preset", "--out"):
        assert option in help_text


def test_progress_on_a_log_is_plain_lines(capsys) -> None:
    """stderr captured (not a terminal): one line per stage and per tenth, no redraws."""
    from geoviz.cli.transfer_report import transfer_progress

    with transfer_progress(True, "simplex study") as (fit, runs):
        for i in range(1001):
            fit("OTDD map 1/3: mnist -> usps (sinkhorn)", 0.3 * i / 1000)
        fit("done", 1.0)
        for done in range(109):  # 36 grid points x 3 seeds
            runs(done, 108)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert "\r" not in err and len(lines) <= 5 + 11, err
    assert lines[0] == "geodesic: [  0%] OTDD map 1/3: mnist -> usps (sinkhorn)"
    assert "geodesic: [100%] done" in lines
    assert lines[-1] == "[100%] simplex study 108/108 runs"
