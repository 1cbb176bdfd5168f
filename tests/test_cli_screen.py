"""``geoviz screen``: candidates ranked by sliced OTDD, then the command for the geodesic."""

from __future__ import annotations

import pytest

from geoviz.cli import main


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "cache"))


def test_screen_ranks_the_target_itself_first(capsys):
    """gmm2d against gmm2d's own generator and chessboard: the same distribution is nearest."""
    args = ["screen", "--target", "gmm2d", "--refs", "chessboard,gmm2d", "--n", "200"]
    assert main(args) == 0
    out = capsys.readouterr().out
    ranked = [ln.split() for ln in out.splitlines() if ln.strip()[:1].isdigit()]
    assert [row[1] for row in ranked[:2]] == ["gmm2d", "chessboard"]
    assert float(ranked[0][2]) < float(ranked[1][2])
    assert "space: " in out and "screened 2 candidates in" in out
    # the target's own generator is its lineage: marked, and proposed only when asked
    assert "same source as the target (gmm2d)" in out
    assert "next: no command, fewer than 2 candidates of another source than the target." in out
    assert main([*args, "--include-related"]) == 0
    out = capsys.readouterr().out
    assert "next: geoviz project --target gmm2d --refs gmm2d,chessboard --n 200" in out
    assert "proposed as --include-related asks" in out


def test_screen_marks_and_leaves_out_the_targets_lineage(capsys):
    """Issue 45: mnist_m and mnist_tex are MNIST digits. For an MNIST target they are marked
    in the table, and the suggested command names only candidates of other sources, saying
    why; --include-related puts them back in rank order."""
    refs = "mnist_m,usps,mnist_tex,fashion_mnist,kmnist"
    args = ["screen", "--target", "mnist", "--refs", refs, "--n", "100", "--features", "pixels"]
    assert main([*args, "--top", "2"]) == 0
    out = capsys.readouterr().out
    rows = {ln.split()[1]: ln for ln in out.splitlines() if ln.strip()[:1].isdigit()}
    assert set(rows) == set(refs.split(","))
    for name in ("mnist_m", "mnist_tex"):
        assert rows[name].endswith("same source as the target (mnist)"), rows[name]
    for name in ("usps", "fashion_mnist", "kmnist"):
        assert "same source" not in rows[name]
    ranked = [ln.split()[1] for ln in out.splitlines() if ln.strip()[:1].isdigit()]
    others = [name for name in ranked if name not in ("mnist_m", "mnist_tex")]
    related = ", ".join(name for name in ranked if name in ("mnist_m", "mnist_tex"))
    assert f"{related}: made from mnist, as the target is" in out
    assert "not proposed (--include-related proposes them)." in out
    assert f"next: geoviz project --target mnist --refs {','.join(others[:2])} --n 100" in out
    assert main([*args, "--top", "2", "--include-related"]) == 0
    out = capsys.readouterr().out
    assert f"next: geoviz project --target mnist --refs {','.join(ranked[:2])} --n 100" in out


def test_lineage_follows_the_registry():
    from geoviz.cli.screen_run import related_to_target
    from geoviz.data.registry import lineage

    assert lineage("MNIST-M") == lineage("mnist_tex") == lineage("torchvision:mnist") == "mnist"
    assert lineage("fashion") == lineage("torchvision:fashion_mnist") == "fashion_mnist"
    assert lineage("digits") == "digits" and lineage("no/such/file.npz") is None
    assert related_to_target("torchvision:mnist", ["mnist_m", "usps", "mnist", "x.npz"]) == {
        "mnist_m": "mnist",
        "mnist": "mnist",
    }
    assert related_to_target("./my_digits", ["mnist_m", "mnist"]) == {}


@pytest.mark.parametrize(
    ("refs", "message"),
    [("chessboard", "2 to 64"), ("chessboard,chessboard", "twice")],
)
def test_screen_refuses_bad_candidate_lists(capsys, refs, message):
    assert main(["screen", "--target", "gmm2d", "--refs", refs, "--n", "50"]) == 2
    assert message in capsys.readouterr().err
