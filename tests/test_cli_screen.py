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
    assert "next: geoviz project --target gmm2d --refs gmm2d,chessboard --n 200" in out


@pytest.mark.parametrize(
    ("refs", "message"),
    [("chessboard", "2 to 64"), ("chessboard,chessboard", "twice")],
)
def test_screen_refuses_bad_candidate_lists(capsys, refs, message):
    assert main(["screen", "--target", "gmm2d", "--refs", refs, "--n", "50"]) == 2
    assert message in capsys.readouterr().err
