"""``geoviz distance | project | grid`` through geoviz.cli.main (small n, offline datasets)."""

from __future__ import annotations

import csv
import re

import numpy as np
import pytest

from geoviz.cli import main
from geoviz.geodesic.distances import objective

COMMON = ["--target", "gmm2d", "--refs", "chessboard,gmm2d,gmm3d", "--n", "48", "--quiet"]
REFS_2D = ["--target", "gmm2d", "--refs", "chessboard,gmm2d", "--n", "48", "--quiet"]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "cache"))


def _a_hat(out: str) -> dict[str, float]:
    line = next(ln for ln in out.splitlines() if ln.startswith("a_hat"))
    return {k: float(v) for k, v in re.findall(r"(\S+?)=([0-9.]+)", line.split(":", 1)[1])}


def test_distance_prints_otdd_and_two_q_matrix(capsys):
    assert main(["distance", *REFS_2D]) == 0
    out = capsys.readouterr().out
    assert "OTDD" in out and "(2,Q) matrix" in out
    # duplicate names are disambiguated: gmm2d (the target's generator) and chessboard
    rows = [ln.split() for ln in out.splitlines() if ln.startswith(("chessboard", "gmm2d"))]
    matrix_rows = [r for r in rows if len(r) == 4]  # name, 2 matrix entries, Q
    assert len(matrix_rows) == 2
    assert float(matrix_rows[0][1]) == 0.0 and float(matrix_rows[1][2]) == 0.0
    assert float(matrix_rows[0][2]) == pytest.approx(float(matrix_rows[1][1]))


def test_project_exports_p_a_hat(tmp_path, capsys):
    out_path = tmp_path / "synth.npz"
    assert main(["project", *REFS_2D, "--out", str(out_path)]) == 0
    out = capsys.readouterr().out
    a_hat = _a_hat(out)
    assert set(a_hat) == {"chessboard", "gmm2d"}
    assert sum(a_hat.values()) == pytest.approx(1.0, abs=1e-3)
    assert "W^2(P_a_hat, Q)" in out
    with np.load(out_path, allow_pickle=False) as npz:
        assert npz["features"].shape == (48, 2)
        assert npz["soft_labels"].shape[0] == 48
        np.testing.assert_allclose(npz["soft_labels"].sum(1), 1.0, atol=1e-5)
        assert str(npz["class_names"][0]).startswith("chessboard/")
    # never overwrite silently
    assert main(["project", *REFS_2D, "--out", str(out_path)]) == 2
    assert "exist" in capsys.readouterr().err
    # explicit weights
    assert (
        main(["project", *REFS_2D, "--weights", "0.25,0.75", "--out", str(tmp_path / "w.pt")]) == 0
    )
    assert main(["project", *REFS_2D, "--weights", "0.5,0.6"]) == 2
    assert "sum to" in capsys.readouterr().err


def test_grid_writes_objective_over_simplex(tmp_path, capsys):
    out_path = tmp_path / "grid.csv"
    args = [
        "grid",
        "--target",
        "gmm2d",
        "--refs",
        "chessboard,gmm2d,chessboard",
        "--n",
        "48",
        "--quiet",
    ]
    assert main([*args, "--resolution", "4", "--out", str(out_path)]) == 0
    out = capsys.readouterr().out
    with open(out_path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["a_chessboard", "a_gmm2d", "a_chessboard#2", "w2"]
    values = np.array(rows[1:], dtype=float)
    assert values.shape == (15, 4)
    np.testing.assert_allclose(values[:, :3].sum(1), 1.0)
    # the reference twice gives identical columns: W^2 is symmetric in a_1 <-> a_3
    lookup = {tuple(np.round(r[:3] * 4).astype(int)): r[3] for r in values}
    for (i, j, k), v in lookup.items():
        assert lookup[(k, j, i)] == pytest.approx(v, rel=1e-6)
    qp = float(re.search(r"a_hat \(QP\):.*W\^2 = (\S+)", out).group(1))
    assert qp <= values[:, 3].min() + 1e-6
    assert main([*args, "--out", str(out_path)]) == 2  # exists
    assert main([*args, "--out", str(out_path), "--overwrite", "--resolution", "2"]) == 0
    with open(out_path, newline="") as fh:
        assert len(list(csv.reader(fh))) == 1 + 6


def test_bad_input_exits_2(capsys):
    assert (
        main(["distance", "--target", "gmm2d", "--refs", "chessboard", "--n", "48", "--quiet"]) == 2
    )
    assert "at least 2" in capsys.readouterr().err
    assert main(["distance", *COMMON]) == 2  # gmm3d has 3 features
    assert "same feature dimension" in capsys.readouterr().err
    assert main(["distance", *REFS_2D, "--epsilon", "0"]) == 2
    assert "epsilon" in capsys.readouterr().err
    assert main(["distance", *REFS_2D, "--epsilon", "-0.1"]) == 2
    assert main(["distance", "--target", "no_such_set", "--refs", "a,b", "--quiet"]) == 2


def test_images_of_different_sizes_are_harmonised(capsys):
    assert (
        main(
            ["project", "--target", "mnist", "--refs", "usps,fashion_mnist", "--n", "30", "--quiet"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert set(_a_hat(out)) == {"usps", "fashion_mnist"}


def test_objective_column_matches_result(tmp_path):
    """The CSV values are W^2(P_a, Q) of eq. (ds_eq) for the printed (2,Q) matrices."""
    from geoviz.data.registry import load_dataset
    from geoviz.geodesic import fit_geodesic

    out_path = tmp_path / "g.csv"
    assert main(["grid", *REFS_2D, "--resolution", "3", "--out", str(out_path)]) == 0
    values = np.loadtxt(out_path, delimiter=",", skiprows=1)
    target = load_dataset("gmm2d", n=48)
    refs = [load_dataset("chessboard", n=48), load_dataset("gmm2d", n=48)]
    res = fit_geodesic(target, refs)  # same default cache: no recomputation
    np.testing.assert_allclose(
        values[:, 2], objective(values[:, :2], res.w_to_target, res.w_between), rtol=1e-9
    )
