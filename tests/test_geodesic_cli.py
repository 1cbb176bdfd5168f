"""``geoviz distance | project | grid`` through geoviz.cli.main (small n, offline datasets)."""

from __future__ import annotations

import csv
import re
import time

import numpy as np
import pytest

from geoviz.cli import main
from geoviz.geodesic.distances import objective
from geoviz.glossary import A_HAT, EPSILON_ABS, OBJECTIVE_AT_A_HAT, OTDD, W_BETWEEN, W_TARGET

COMMON = ["--target", "gmm2d", "--refs", "chessboard,gmm2d,gmm3d", "--n", "48", "--quiet"]
REFS_2D = ["--target", "gmm2d", "--refs", "chessboard,gmm2d", "--n", "48", "--quiet"]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "cache"))


def _a_hat(out: str) -> dict[str, float]:
    line = next(ln for ln in out.splitlines() if ln.startswith(f"{A_HAT}:"))
    return {k: float(v) for k, v in re.findall(r"(\S+?)=([0-9.]+)", line.split(":", 1)[1])}


def test_distance_prints_otdd_and_two_q_matrix(capsys):
    assert main(["distance", *REFS_2D]) == 0
    out = capsys.readouterr().out
    assert "OTDD" in out and "(2,Q) matrix" in out
    # the glossary's labels, the same strings as the app's
    assert f"(2,Q) matrix {W_BETWEEN} (last column: {W_TARGET}):" in out
    assert "W2Q" not in out and "W^2" not in out
    # duplicate names are disambiguated: gmm2d (the target's generator) and chessboard
    rows = [ln.split() for ln in out.splitlines() if ln.startswith(("chessboard", "gmm2d"))]
    matrix_rows = [r for r in rows if len(r) == 4]  # name, 2 matrix entries, Q
    assert len(matrix_rows) == 2
    assert float(matrix_rows[0][1]) == 0.0 and float(matrix_rows[1][2]) == 0.0
    assert float(matrix_rows[0][2]) == pytest.approx(float(matrix_rows[1][1]))


def test_workers_give_the_same_distances(capsys):
    assert main(["distance", *REFS_2D]) == 0
    serial = capsys.readouterr().out
    assert main(["distance", *REFS_2D, "--workers", "2", "--no-cache"]) == 0
    assert capsys.readouterr().out == serial


def _otdd_column(out: str) -> dict[str, float]:
    """Each map's OTDD from the maps table (the first number after the reference's name)."""
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[0] in ("chessboard", "gmm2d") and parts[-2] == "converged":
            rows[parts[0]] = float(parts[1])
    return rows


def test_stream_solves_the_same_one_problem(capsys):
    """``--stream`` (the full-size solver) against the stored cost: the same OTDD values
    to the solver's tolerance and the same a_hat to 3 decimals."""
    assert main(["project", *REFS_2D, "--no-cache"]) == 0
    stored = capsys.readouterr().out
    assert main(["project", *REFS_2D, "--no-cache", "--stream"]) == 0
    streamed = capsys.readouterr().out
    a, b = _otdd_column(stored), _otdd_column(streamed)
    assert set(a) == {"chessboard", "gmm2d"} and set(b) == set(a)
    for name in a:
        assert b[name] == pytest.approx(a[name], rel=1e-3)
    for name, value in _a_hat(stored).items():
        assert _a_hat(streamed)[name] == pytest.approx(value, abs=2e-3)


def test_batches_run_in_order_and_say_so(capsys):
    """``--batch-size`` with the sequential engine: the maps come from 3 batches each."""
    assert (
        main(["distance", *REFS_2D, "--no-cache", "--batch-size", "16", "--backend", "sequential"])
        == 0
    )
    out = capsys.readouterr().out
    assert set(_otdd_column(out)) == {"chessboard", "gmm2d"}


def test_project_exports_p_a_hat(tmp_path, capsys):
    out_path = tmp_path / "synth.npz"
    assert main(["project", *REFS_2D, "--out", str(out_path)]) == 0
    out = capsys.readouterr().out
    a_hat = _a_hat(out)
    assert set(a_hat) == {"chessboard", "gmm2d"}
    assert sum(a_hat.values()) == pytest.approx(1.0, abs=1e-3)
    assert f"{OBJECTIVE_AT_A_HAT} = " in out
    # the target is a sample of gmm2d itself: the closest reference by W_i
    assert f"best single reference: gmm2d ({W_TARGET} = " in out
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
    assert "--weights: weights sum to 1.1" in capsys.readouterr().err
    # one validator (check_weights) for the length too
    assert main(["project", *REFS_2D, "--weights", "1"]) == 2
    assert "--weights: weights must have 2 entries" in capsys.readouterr().err


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
    assert rows[0] == ["a_chessboard", "a_gmm2d", "a_chessboard#2", "objective"]
    values = np.array(rows[1:], dtype=float)
    assert values.shape == (15, 4)
    np.testing.assert_allclose(values[:, :3].sum(1), 1.0)
    # the reference twice gives identical columns: W^2 is symmetric in a_1 <-> a_3
    lookup = {tuple(np.round(r[:3] * 4).astype(int)): r[3] for r in values}
    for (i, j, k), v in lookup.items():
        assert lookup[(k, j, i)] == pytest.approx(v, rel=1e-6)
    qp = float(re.search(re.escape(f"{A_HAT} (QP):") + r".*= (\S+)$", out, re.M).group(1))
    assert qp <= values[:, 3].min() + 1e-6
    assert main([*args, "--out", str(out_path)]) == 2  # exists
    assert main([*args, "--out", str(out_path), "--overwrite", "--resolution", "2"]) == 0
    with open(out_path, newline="") as fh:
        assert len(list(csv.reader(fh))) == 1 + 6


def test_bad_input_exits_2(capsys):
    assert (
        main(["distance", "--target", "gmm2d", "--refs", "chessboard", "--n", "48", "--quiet"]) == 2
    )
    assert "needs 2 to 10 reference datasets" in capsys.readouterr().err
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


def _map_rows(out: str, names: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """The per-map table: ``{reference: {column: cell}}`` (header line starts with 'reference')."""
    lines = out.splitlines()
    start = next(
        k for k, ln in enumerate(lines) if ln.startswith("reference ") and "neighbours" in ln
    )
    # columns are separated by at least two spaces; a label such as W_TARGET has one inside
    header = re.split(r"\s{2,}", lines[start].strip())
    rows = {}
    for ln in lines[start + 2 :]:
        cells = re.split(r"\s{2,}", ln.strip()) if ln.strip() else []
        if not cells or cells[0] not in names:
            break
        rows[cells[0]] = dict(zip(header, cells, strict=True))
    return rows


def test_every_command_prints_otdd_neighbours_and_confidence_of_each_map(tmp_path, capsys):
    from geoviz.data.registry import load_dataset
    from geoviz.geodesic import fit_geodesic

    names = ("chessboard", "gmm2d")
    assert main(["distance", *REFS_2D]) == 0
    out = capsys.readouterr().out
    assert "epsilon = 0.001 x mean ground cost" in out
    rows = _map_rows(out, names)
    assert set(rows) == set(names)
    # the printed numbers are those of the fitted geodesic (same default cache)
    res = fit_geodesic(load_dataset("gmm2d", n=48), [load_dataset(n, n=48) for n in names])
    for i, name in enumerate(names):
        assert float(rows[name][OTDD]) == pytest.approx(res.otdd[i], rel=1e-5)
        assert float(rows[name][W_TARGET]) == pytest.approx(res.w_to_target[i], rel=1e-5)
        assert float(rows[name]["effective neighbours"]) == pytest.approx(
            res.effective_neighbours[i], abs=0.006
        )
        assert float(rows[name]["label confidence"]) == pytest.approx(
            res.label_confidence[i], abs=6e-4
        )
        assert float(rows[name][EPSILON_ABS]) == pytest.approx(res.epsilon_abs[i], rel=2e-3)
        assert (
            1.0 <= float(rows[name]["effective neighbours"]) <= 10.0
        )  # sharp at the default epsilon
    assert "BLURRY" not in out

    for cmd in (["project", *REFS_2D], ["grid", *REFS_2D, "--out", str(tmp_path / "g.csv")]):
        assert main(cmd) == 0
        again = _map_rows(capsys.readouterr().out, names)
        assert {n: r["effective neighbours"] for n, r in again.items()} == {
            n: r["effective neighbours"] for n, r in rows.items()
        }


def test_blurry_maps_are_reported_with_the_fix_and_exported_in_the_manifest(tmp_path, capsys):
    import json

    out_path = tmp_path / "blurry.npz"
    assert main(["project", *REFS_2D, "--epsilon", "0.5", "--out", str(out_path)]) == 0
    captured = capsys.readouterr()
    out = captured.out
    rows = _map_rows(out, ("chessboard", "gmm2d"))
    blurry_lines = [ln for ln in out.splitlines() if ln.startswith("BLURRY MAP")]
    assert (
        len(blurry_lines) == sum(float(r["effective neighbours"]) > 10 for r in rows.values()) >= 1
    )
    assert all("lower --epsilon (default 0.001)" in ln for ln in blurry_lines)
    assert "BlurWarning" not in captured.err  # one clear line instead of a Python warning
    manifest = json.loads((tmp_path / "blurry.manifest.json").read_text())
    maps = manifest["metadata"]["maps"]
    assert [m["reference"] for m in maps] == ["chessboard", "gmm2d"]
    for m in maps:
        assert float(rows[m["reference"]]["effective neighbours"]) == pytest.approx(
            m["effective_neighbours"], abs=0.006
        )
        assert 0 < m["label_confidence"] <= 1 and m["epsilon_abs"] > 0
        assert m["blurry"] == (m["effective_neighbours"] > 10)
    assert manifest["metadata"]["config"]["otdd"]["epsilon"] == 0.5


def test_epsilon_help_says_relative_to_mean_cost_with_default(capsys):
    assert main(["distance", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "relative to the mean ground cost" in text and "Default 0.001" in text


def test_neural_method_prints_the_neural_table_and_exports(tmp_path, capsys):
    out_path = tmp_path / "neural.npz"
    args = [*REFS_2D, "--method", "neural", "--neural-preset", "tiny", "--neural-iterations", "20"]
    assert main(["project", *args, "--out", str(out_path)]) == 0
    out = capsys.readouterr().out
    assert "neural map" in out and "held-out OT" in out and "nearest-reference ratio" in out
    assert "plan-row perplexity" not in out  # the barycentric legend is not printed
    a_hat = _a_hat(out)
    assert sum(a_hat.values()) == pytest.approx(1.0, abs=1e-3)
    with np.load(out_path, allow_pickle=False) as npz:
        assert npz["features"].shape == (48, 2)
    # the manifest records the method and the neural diagnostics
    import json

    manifest = json.loads(next(tmp_path.glob("*.json")).read_text())
    text = json.dumps(manifest)
    assert '"method": "neural"' in text and "heldout_ot" in text
    assert main(["distance", *REFS_2D, "--method", "mlp"]) == 2
    assert "'mlp'" in capsys.readouterr().err


# --------------------------------------------------------------------------- issue 15


@pytest.fixture
def no_loading(monkeypatch):
    """Fail the test if a dataset is loaded or a map fitted."""
    import geoviz.cli.screen_run as screen_run
    import geoviz.cli.transfer_run as transfer_run
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


@pytest.mark.parametrize("epsilon", ["1e-20", "1e-100", "1e-40", "1e-12"])
def test_issue_epsilons_are_refused_at_once(epsilon, capsys, no_loading):
    """1e-20: LinAlgError, 1e-100: RuntimeError, 1e-40: IndexError after 88 s, 1e-12: 3 min."""
    start = time.perf_counter()
    assert main(["distance", *REFS_2D, "--epsilon", epsilon]) == 2
    assert time.perf_counter() - start < 5
    err = capsys.readouterr().err
    assert err.startswith(f"error: --epsilon {float(epsilon):g} is below 0.0001 (relative to the ")
    assert err.endswith("; use --epsilon >= 0.0001\n")
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("command", "extra", "message"),
    [
        (
            "distance",
            ["--n", "1000000000"],
            "--n must be between 10 and 100,000, got 1,000,000,000",
        ),
        ("distance", ["--size", "700"], "--size must be between 4 and 128, got 700"),
        ("distance", ["--size", "100000"], "--size must be between 4 and 128, got 100,000"),
        ("distance", ["--seed", "-3"], "--seed must be between 0 and 2,147,483,647, got -3"),
        ("distance", ["--workers", "0"], "--workers must be between 1 and 64, got 0"),
        ("distance", ["--epsilon", "50"], "--epsilon 50 is above 10"),
        ("distance", ["--epsilon", "nan"], "--epsilon must be a positive number"),
        ("distance", ["--batch-size", "1"], "--batch-size must be between 2 and 100,000, got 1"),
        (
            "distance",
            ["--neural-iterations", "1000000000"],
            "--neural-iterations must be between 1 and 100,000",
        ),
        ("distance", ["--solver", "nope"], "unknown QP solver 'nope': available are"),
        ("distance", ["--lambda-x", "-1"], "--lambda-x and --lambda-y must be >= 0"),
        # issue 32: the messages name the options, not the library's config fields
        ("distance", ["--lambda-x", "nan"], "--lambda-x must be a finite number"),
        ("distance", ["--device", "tpu"], "--device must be 'auto', 'cpu' or 'cuda'"),
        ("project", ["--weights", "0.5,0.6"], "--weights: weights sum to 1.1"),
        ("project", ["--weights", "1"], "--weights: weights must have 2 entries"),
        ("project", ["--weights", "nan,1"], "--weights: "),
        ("project", ["--n-out", "1000000000"], "--n-out must be between 1 and 100,000"),
        ("grid", ["--resolution", "1000000"], "--resolution: grid resolution must be between 1"),
    ],
)
def test_options_are_checked_before_loading_or_fitting(
    command, extra, message, tmp_path, capsys, no_loading
):
    """The issue: '--weights and grid-size errors come only after the full fit'."""
    out = ["--out", str(tmp_path / "grid.csv")] if command == "grid" else []
    assert main([command, *REFS_2D, *out, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1


def test_reference_count_and_grid_size_for_m_are_checked_first(tmp_path, capsys, no_loading):
    eleven = ",".join(["chessboard"] * 11)
    assert main(["distance", "--target", "gmm2d", "--refs", eleven, "--quiet"]) == 2
    assert capsys.readouterr().err == (
        "error: --refs: a generalized geodesic needs 2 to 10 reference datasets P_i, got 11 "
        "(one OTDD map is fitted per reference) (comma-separated names)\n"
    )
    # resolution 100 is fine for m = 2 but 4e12 points for m = 10
    ten = ",".join(["chessboard"] * 10)
    args = ["grid", "--target", "gmm2d", "--refs", ten, "--out", str(tmp_path / "g.csv")]
    assert main([*args, "--resolution", "100", "--quiet"]) == 2
    assert "on the simplex of m = 10 references has" in capsys.readouterr().err


def test_existing_outputs_are_refused_before_the_fit(tmp_path, capsys, no_loading):
    for command, name in (("project", "synth.npz"), ("grid", "grid.csv")):
        path = tmp_path / name
        path.write_text("keep me")
        assert main([command, *REFS_2D, "--out", str(path)]) == 2
        assert capsys.readouterr().err == (
            f"error: {path} already exists; pass --overwrite to replace it\n"
        )
        assert path.read_text() == "keep me"


def test_batch_size_selects_the_batched_otdd_mode(capsys):
    assert main(["distance", *REFS_2D, "--batch-size", "16", "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "(2,Q) matrix" in out and "neighbours" in out


def test_batches_run_in_this_process_unless_ray_is_asked_for(monkeypatch):
    """An embedded Ray cluster started inside the caller's process ends that process when
    its GCS dies (it ended the test run in CI): batches are sequential unless --backend,
    --ray-address or $RAY_ADDRESS asks for Ray."""
    import geoviz.tasks as tasks

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    started = []

    def no_ray(*args, **kwargs):
        started.append(args)
        raise AssertionError("Ray was started")

    monkeypatch.setattr(tasks, "_ray_start", no_ray)
    assert main(["distance", *REFS_2D, "--batch-size", "16", "--no-cache"]) == 0
    assert started == []


def test_out_of_memory_refusal_names_the_batch_size_flag(capsys, monkeypatch):
    """The 60000-sample refusal suggested a 'batched mode' the CLI could not select."""
    import geoviz.backend as backend

    # room for a 16 x 16 float32 cost block (with check_memory's factor 2), not for 48 x 48
    monkeypatch.setattr(backend, "available_memory_bytes", lambda device: 2 * 4 * 48 * 48 - 1)
    assert main(["distance", *REFS_2D, "--no-cache"]) == 2
    err = capsys.readouterr().err
    # the stored cost does not fit (then the CLI streams it, which does not fit either)
    assert err.startswith(("error: the OTDD cost matrix (48 x 48)", "error: the streamed OTDD"))
    assert "needs about" in err
    assert "--batch-size B" in err and "batched mode" not in err and err.count("\n") == 1
    # and the flag it names is the fix
    assert main(["distance", *REFS_2D, "--no-cache", "--batch-size", "16"]) == 0
    assert "(2,Q) matrix" in capsys.readouterr().out


def test_progress_on_a_pipe_is_a_few_plain_lines(tmp_path):
    """With stderr not a terminal (CI logs, Ray workers) no bar is redrawn."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "GEOVIZ_CACHE_DIR": str(tmp_path / "cache"), "GEOVIZ_DEVICE": "cpu"}
    argv = ["project", "--target", "gmm2d", "--refs", "chessboard,gmm2d,chessboard", "--n", "48"]
    proc = subprocess.run(
        [sys.executable, "-m", "geoviz", *argv, "--no-cache"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert "\r" not in proc.stderr and 5 <= len(lines) <= 40, proc.stderr
    assert all(re.match(r"\[\s*\d+%\] ", line) for line in lines), proc.stderr
    assert lines[-1] == "[100%] done"


def test_a_long_cold_fit_says_its_cost_before_and_what_it_took_after(tmp_path, capsys):
    """Issue 45 item 1: a cold fit estimated above ANNOUNCE_SECONDS (a calibration with a
    tiny rate forces it) is announced on stderr, and says after what it took; the same fit
    again reads its maps from the cache and says nothing; --quiet says nothing; stdout is
    the same in every case (scripts parse it)."""
    import torch

    from geoviz.backend.cost_model import CostModel

    CostModel(rate=1e-3, threads=torch.get_num_threads()).save(tmp_path / "cache")
    argv = ["project", "--target", "gmm2d", "--refs", "chessboard,gmm2d", "--n", "48"]
    assert main(argv) == 0
    cold = capsys.readouterr()
    lines = [ln for ln in cold.err.splitlines() if ln.startswith("fitting the maps")]
    assert len(lines) == 2, cold.err
    assert re.fullmatch(r"fitting the maps: about .+ on this machine \(cost model\)", lines[0])
    assert re.match(r"fitting the maps took \d+\.\d s \(estimated about .+\)", lines[1])
    assert cold.err.index(lines[0]) < cold.err.index("[") < cold.err.index(lines[1])
    assert main(argv) == 0  # warm: its maps are in the cache
    warm = capsys.readouterr()
    assert "fitting the maps" not in warm.err and warm.out == cold.out
    assert main([*argv, "--no-cache", "--quiet"]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == "" and quiet.out == cold.out


DIGITS = ["--target", "mnist", "--refs", "usps,fashion_mnist", "--n", "60", "--size", "16"]


def test_project_in_a_feature_space_exports_images_and_names_the_space(tmp_path, capsys):
    """Issue 22: --features pca computes the maps in PCA space; the export holds images
    lifted through the plans and its manifest names the space and its digest."""
    import json

    out_path = tmp_path / "synth.npz"
    assert main(["project", *DIGITS, "--quiet", "--features", "pca", "--out", str(out_path)]) == 0
    out = capsys.readouterr().out
    assert "in the pca50 space" in out
    with np.load(out_path, allow_pickle=False) as npz:
        assert npz["features"].shape == (60, 256)  # 16x16 images, not 50 components
    manifest = json.loads((tmp_path / "synth.manifest.json").read_text())
    text = json.dumps(manifest)
    assert '"pca50"' in text and '"digest"' in text


def test_project_with_a_users_torchscript_model(tmp_path, capsys):
    import torch

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(256, 8))
    model = tmp_path / "my_net.pt"
    torch.jit.save(torch.jit.script(module), str(model))
    args = ["project", *DIGITS, "--quiet", "--features-model", str(model)]
    assert main(args) == 0
    assert "in the model:my_net space" in capsys.readouterr().out
    (tmp_path / "bad.pt").write_bytes(b"junk")
    assert main(["project", *DIGITS, "--quiet", "--features-model", str(tmp_path / "bad.pt")]) == 2
    assert "bad.pt is not a TorchScript model" in capsys.readouterr().err
    assert main([*args, "--features", "pca"]) == 2
    assert "not both" in capsys.readouterr().err


# --------------------------------------------------------------------------- --bootstrap (issue 23)

REFS_3 = ["--target", "gmm2d", "--refs", "chessboard,gmm2d,chessboard", "--n", "48", "--quiet"]


def test_project_bootstrap_prints_intervals_and_writes_them_into_the_manifest(tmp_path, capsys):
    import json

    from geoviz.export import load_export

    out_path = tmp_path / "p.npz"
    args = ["project", *REFS_3, "--bootstrap", "40", "--bootstrap-seed", "3"]
    assert main([*args, "--weights", "1,0,0", "--out", str(out_path)]) == 0
    out = capsys.readouterr().out
    assert "95% bootstrap intervals (q-resample" in out and "B = 40, seed 3" in out
    assert "weights 1,0,0:" in out
    ds = load_export(out_path)
    manifest = json.loads(out_path.with_suffix(".manifest.json").read_text())
    unc = manifest["uncertainty"]
    assert unc["method"] == "q-resample" and unc["replicates"] == 40
    for key in ("a_hat_low", "a_hat_high", "w_to_target_low", "w_to_target_high"):
        assert len(unc[key]) == 3
    # the interval brackets the printed a_hat, and the library gives the same numbers
    a_hat = list(_a_hat(out).values())
    for lo, a, hi in zip(unc["a_hat_low"], a_hat, unc["a_hat_high"], strict=True):
        assert lo - 1e-4 <= a <= hi + 1e-4
    assert ds.metadata["uncertainty"] == unc


def test_grid_bootstrap_adds_interval_and_region_columns(tmp_path, capsys):
    out_path = tmp_path / "grid.csv"
    args = ["grid", *REFS_3, "--resolution", "4", "--bootstrap", "30", "--out", str(out_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    with open(out_path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0][-4:] == ["objective", "objective_low", "objective_high", "as_good_as_a_hat"]
    values = np.array(rows[1:], dtype=float)
    assert (values[:, 4] <= values[:, 5]).all()  # low <= high
    assert set(values[:, 6]) <= {0.0, 1.0}
    inside = int(values[:, 6].sum())
    assert f"{inside} of 15 grid points are as good as â" in out
    # the grid point nearest a_hat is inside the region
    assert values[int(np.argmin(values[:, 3])), 6] == 1.0


def test_distance_bootstrap_refit_runs_sequentially(capsys):
    args = ["distance", *REFS_2D, "--bootstrap", "20", "--bootstrap-method", "refit"]
    assert main([*args, "--backend", "sequential"]) == 0
    out = capsys.readouterr().out
    assert "(refit: Q and every reference drawn again, maps refitted; B = 20" in out
    assert "bias-corrected" in out  # refits see the maps' bias


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--bootstrap", "5"], "--bootstrap must be"),
        (["--bootstrap", "100000"], "--bootstrap must be"),
        (["--bootstrap", "50", "--bootstrap-seed", "-1"], "--bootstrap-seed"),
        (["--bootstrap", "50", "--bootstrap-method", "refit", "--method", "neural"], "refit needs"),
    ],
)
def test_bad_bootstrap_options_are_one_sentence(extra, message, capsys, no_loading):
    assert main(["distance", *REFS_2D, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_default_space_is_chosen_from_the_data_and_said_with_the_reason(tmp_path, capsys):
    """Issue 33: with no --features the CLI chooses the space from the data, says which and
    why, and the manifest records the choice; --features pixels stays available by name."""
    import json

    out_path = tmp_path / "synth.npz"
    assert main(["project", *DIGITS, "--quiet", "--out", str(out_path)]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("space: "))
    # 60 samples of each: the measured space and its numbers (issue 42)
    assert line.startswith("space: ") and "(chosen automatically: measured on 60 samples" in line
    assert "keeps Q's classes apart (5-NN κ" in line or "keep Q's classes apart (5-NN κ" in line
    manifest = json.loads((tmp_path / "synth.manifest.json").read_text())
    space = json.dumps(manifest)
    chosen = {"digit box": "box", "pixels": "pixels", "pretrained encoder": "encoder"}
    name = chosen[line.split(" (")[0].removeprefix("space: ")]
    assert '"chosen_by": "auto"' in space and f'"space": "{name}"' in space
    assert '"measurements": [' in space and '"caveat": ' in space
    # a caveat is its own line, right after the space line
    caution = [ln for ln in out.splitlines() if ln.startswith("caution: ")]
    assert ('"caveat": null' in space) == (not caution)

    assert main(["distance", *REFS_2D]) == 0  # vectors: their raw features
    out = capsys.readouterr().out
    assert "space: raw features (chosen automatically: measured on 48 samples" in out

    assert main(["project", *DIGITS, "--quiet", "--features", "pixels"]) == 0
    out = capsys.readouterr().out
    assert "space: pixels (named, not chosen automatically)" in out


def test_a_full_size_problem_is_streamed_by_the_cli_and_the_app_alike():
    """Both size a problem by its entry count (OTDDConfig.sized_for), so a full-size fit
    of the CLI is the app's computation too, whatever memory each process sees."""
    from geoviz.app.scenario import Scenario
    from geoviz.cli.geodesic_checks import otdd_config
    from geoviz.data.choice import DatasetChoice
    from geoviz.limits import STREAM_ABOVE_ENTRIES
    from geoviz.ot.otdd_cost import OTDDConfig

    full = 60_000
    assert full * full > STREAM_ABOVE_ENTRIES
    scenario = Scenario(
        DatasetChoice("mnist"),
        (DatasetChoice("usps"), DatasetChoice("kmnist")),
        n_target=full,
        n_reference=full,
    )
    app_otdd = scenario.spec.config.otdd
    args = _parsed(["distance", "--target", "mnist", "--refs", "usps,kmnist", "--n", str(full)])
    assert app_otdd.stream_reference and app_otdd == otdd_config(args)
    # small problems keep the stored cost; batches and streamed configs are left as they are
    assert not OTDDConfig().sized_for(2000, 2000).stream_reference
    batched = OTDDConfig(batch_size=100)
    assert batched.sized_for(full, full) is batched


def _parsed(argv):
    import argparse

    from geoviz.cli import geodesic
    from geoviz.cli.geodesic_checks import check_args

    parser = argparse.ArgumentParser()
    geodesic.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    check_args(args)
    return args


def test_the_cli_prints_a_link_that_opens_its_fit_in_the_app_from_the_cache(
    tmp_path, monkeypatch, capsys
):
    """Issue 34: the app opens a fit the CLI computed (server datasets, same options):
    the link's scenario loads the same data and every map is found in the disk cache."""
    import functools
    import shutil
    from pathlib import Path
    from urllib.parse import parse_qs, urlparse

    from geoviz.app.services import caches as cache_services
    from geoviz.app.services import datasets as dataset_services
    from geoviz.app.session import SessionModel
    from geoviz.app.settings import AppSettings
    from geoviz.geodesic import spec as geodesic_spec
    from geoviz.geodesic.pipeline import fit_geodesic
    from geoviz.ot.sinkhorn import Sinkhorn

    assets = Path(__file__).resolve().parents[1] / "assets" / "nist"
    served = tmp_path / "digits"
    served.mkdir()
    for name in ("mnist", "usps", "fashion_mnist"):
        shutil.copy(assets / f"{name}.npz", served / f"{name}.npz")
    monkeypatch.setenv("GEOVIZ_DATA_DIRS", str(served))
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "cache"))
    fitted = []
    fit = geodesic_spec.fit_spec  # the CLI's fit (looked up there when the command runs)
    monkeypatch.setattr(
        geodesic_spec, "fit_spec", lambda *a, **k: fitted.append(fit(*a, **k)) or fitted[-1]
    )
    paths = [str(served / f"{n}.npz") for n in ("mnist", "usps", "fashion_mnist")]
    argv = ["distance", "--target", paths[0], "--refs", ",".join(paths[1:]), "--n", "60"]
    assert main([*argv, "--quiet"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("app ")]
    assert len(lines) == 1, lines
    url = urlparse(lines[0].rsplit(" ", 1)[-1])
    assert url.path == "/geodesic"
    params = {k: v[0] for k, v in parse_qs(url.query).items()}
    # the app reads the link as a visitor's browser gives it (SessionModel.restore)
    model = SessionModel({}, AppSettings.from_env())
    assert (
        model.restore(params, load=functools.partial(dataset_services.scenario_data, model)) == []
    )
    scenario = model.scenario
    assert [c.name for c in scenario.choices] == [
        "digits/mnist.npz",
        "digits/usps.npz",
        "digits/fashion_mnist.npz",
    ]
    # the app's loading of the link's scenario, then its fit, with no solve allowed
    data = dataset_services.scenario_data(model, scenario)

    def no_solve(*args, **kwargs):
        raise AssertionError("the app solved a problem the CLI had cached")

    with monkeypatch.context() as patch:
        patch.setattr(Sinkhorn, "__call__", no_solve)
        opened = fit_geodesic(
            data.target,
            list(data.references),
            scenario.spec.config,
            cache=cache_services.disk_cache(),
        )
    np.testing.assert_allclose(opened.w_between, fitted[0].w_between, rtol=1e-6)
    np.testing.assert_allclose(opened.a_hat, fitted[0].a_hat, atol=1e-6)
    # options the app cannot state give no link
    for other in (["--lambda-x", "0.5"], ["--stream"], ["--batch-size", "30"]):
        assert main([*argv, "--quiet", *other]) == 0
        assert "app " not in capsys.readouterr().out, other


def test_no_app_link_for_files_outside_the_served_folders(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("GEOVIZ_DATA_DIRS", raising=False)
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["distance", *REFS_2D]) == 0
    out = capsys.readouterr().out
    # registry datasets of a vector kind: the app's scenarios are image datasets here
    assert "app " not in out


def test_the_app_line_names_the_memory_a_full_size_fit_needs(tmp_path, monkeypatch, capsys):
    """At full size the app's default bound of one scenario (GEOVIZ_APP_MAX_MB = 1024) is too
    small: the line says the value that admits it, and that value is the tight one."""
    import argparse
    import shlex
    from urllib.parse import parse_qs, urlparse

    from geoviz.app.links import scenario_from_query
    from geoviz.app.settings import AppSettings
    from geoviz.cli import geodesic_run
    from geoviz.errors import DatasetError

    served = tmp_path / "digits"
    served.mkdir()
    for name in ("mnist", "usps", "kmnist"):
        (served / f"{name}.npz").write_bytes(b"")
    monkeypatch.setenv("GEOVIZ_DATA_DIRS", str(served))
    query = {
        "target": "digits/mnist.npz",
        "refs": "digits/usps.npz,digits/kmnist.npz",
        "n": "60000",
        "size": "28",
        "split": "train",  # app_query names every field
    }
    monkeypatch.setattr(geodesic_run, "app_query", lambda args, result: query)
    geodesic_run.print_app_link(argparse.Namespace(no_cache=False, n=60_000), None)
    line = capsys.readouterr().out.strip()
    words = shlex.split(line.split(": ", 1)[1])
    env = dict(w.split("=", 1) for w in words if w.startswith("GEOVIZ_"))
    assert env["GEOVIZ_DATA_DIRS"] == str(served)
    need_mb = int(env["GEOVIZ_APP_MAX_MB"])
    url = urlparse(words[-1])
    scenario = scenario_from_query({k: v[0] for k, v in parse_qs(url.query).items()})
    data_dirs = (("digits", served.resolve()),)
    assert AppSettings(data_dirs=data_dirs, max_scenario_mb=need_mb).admit(scenario) == scenario
    with pytest.raises(DatasetError, match="GEOVIZ_APP_MAX_MB"):
        AppSettings(data_dirs=data_dirs, max_scenario_mb=need_mb - 1).admit(scenario)
