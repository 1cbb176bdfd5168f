"""Figure builders of geoviz.viz: structure, values and closed forms."""

from __future__ import annotations

import json
import sys

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from synthetic_data import ring_blobs

from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError
from geoviz.viz.compare import side_by_side_scatter
from geoviz.viz.embedding import fit_embedding
from geoviz.viz.images import (
    as_display_images,
    image_grid,
    mapped_samples_grid,
    sample_captions,
    soft_label_captions,
    tile_images,
)
from geoviz.viz.plots import (
    class_histograms,
    label_mass_bars,
    label_transition,
    label_transition_heatmap,
    otdd_heatmap,
    soft_label_bars,
)
from geoviz.viz.point_sets import point_set, soft_label_summary
from geoviz.viz.sample_card import sample_card
from geoviz.viz.scatter import scatter_sets, selected_samples
from geoviz.viz.schematic import method_schematic


def _blobs(
    name: str, centers, n: int = 40, dim: int = 2, seed: int = 0, scale: float = 0.3
) -> LabeledDataset:
    rng = np.random.default_rng(seed)
    centers = np.asarray(centers, dtype=float)
    x = np.concatenate([c + scale * rng.normal(size=(n, dim)) for c in centers])
    y = np.repeat(np.arange(len(centers)), n)
    return LabeledDataset(x, y, tuple(f"c{k}" for k in range(len(centers))), name=name)


# ---------------------------------------------------------------- images


def test_as_display_images_grey_rgb_and_rescale():
    x = torch.rand(5, 3 * 4 * 6)
    rgb = as_display_images(x, (3, 4, 6))
    assert rgb.shape == (5, 4, 6, 3)
    np.testing.assert_allclose(rgb[2, 1, 3], x[2].reshape(3, 4, 6)[:, 1, 3].numpy(), atol=1e-6)
    grey = as_display_images(torch.rand(2, 16), (1, 4, 4))
    assert grey.shape == (2, 4, 4)
    wide = as_display_images(np.array([[-3.0, 0.0, 3.0, 1.0]]), (1, 2, 2))
    np.testing.assert_allclose(wide[0].ravel(), [0.0, 0.5, 1.0, 4 / 6])
    with pytest.raises(DatasetError):
        as_display_images(torch.rand(2, 15), (1, 4, 4))


def test_tile_images_places_every_tile():
    imgs = np.stack([np.full((3, 2), k / 10) for k in range(5)])
    mosaic = tile_images(imgs, ncols=2, pad=1, caption_pad=2, fill=1.0)
    assert mosaic.shape == (3 * (3 + 1 + 2), 2 * (2 + 1))
    for k in range(5):
        r, c = divmod(k, 2)
        y0, x0 = r * 6 + 2, c * 3
        np.testing.assert_allclose(mosaic[y0 : y0 + 3, x0 : x0 + 2], k / 10)
    # the empty sixth cell is background
    np.testing.assert_allclose(mosaic[2 * 6 + 2 :, 3:], 1.0)


def test_image_grid_with_captions_on_bundled_like_data():
    ds = LabeledDataset(
        torch.rand(12, 28 * 28),
        torch.arange(12) % 3,
        ("T-shirt/top", "Trouser", "Bag"),
        image_shape=(1, 28, 28),
    )
    caps = sample_captions(ds.labels, ds.classes)
    fig = image_grid(as_display_images(ds.features, ds.image_shape), caps, ncols=5, title="t")
    assert len(fig.data) == 1
    assert [a.text for a in fig.layout.annotations] == caps
    assert caps[0] == "T-shirt/top"
    assert fig.layout.height > 120
    with pytest.raises(DatasetError):
        image_grid(np.zeros((3, 4, 4)), ["a"], ncols=2)


def test_soft_label_captions_and_mapped_grid():
    soft = torch.tensor([[0.1, 0.62, 0.28], [1.0, 0.0, 0.0]])
    caps = soft_label_captions(soft, ["usps/1", "usps/3", "usps/7"])
    assert caps == ["usps/3 .62", "usps/1 1.00"]
    imgs = np.random.default_rng(0).random((2, 8, 8))
    fig = mapped_samples_grid(imgs, ["a", "b"], [("T1(x)", imgs, caps), ("T2(x)", imgs, caps)])
    texts = [a.text for a in fig.layout.annotations]
    assert "<b>Q sample<br>x</b>" in texts and "<b>T2(x)</b>" in texts
    with pytest.raises(DatasetError):
        mapped_samples_grid(imgs, ["a", "b"], [("T1(x)", imgs[:1], caps[:1])])


# ---------------------------------------------------------------- plots


def test_label_transition_closed_form():
    """Q classes sent deterministically by a permutation: the matrix is a permuted diag of class fractions."""
    y = np.array([0, 0, 1, 2, 2, 2])
    perm = np.array([2, 0, 1])  # class c of Q -> class perm[c] of P
    soft = np.eye(3)[perm[y]]
    mat = label_transition(y, soft, 3)
    expected = np.zeros((3, 3))
    for c, frac in enumerate([2 / 6, 1 / 6, 3 / 6]):
        expected[c, perm[c]] = frac
    np.testing.assert_allclose(mat, expected)
    assert mat.sum() == pytest.approx(1.0)
    fig = label_transition_heatmap(mat, ["0", "1", "2"], ["a", "b", "c"], reference_name="P")
    np.testing.assert_allclose(np.asarray(fig.data[0].z).sum(axis=1), 1.0)  # rows normalised
    assert fig.data[0].colorbar.title.text == "fraction of row"
    with pytest.raises(DatasetError):
        label_transition(y, soft[:-1], 3)
    with pytest.raises(DatasetError):
        label_transition(y, soft, 2)


def test_scatter_sets_2d_3d_and_colouring():
    a = _blobs("A", [[0, 0], [3, 3]])
    b = _blobs("B", [[0, 3], [3, 0], [6, 6]])
    fig = scatter_sets(
        [point_set(a, prefix_labels=True), point_set(b, prefix_labels=True)], color_by="label"
    )
    assert len(fig.data) == 5 and all(isinstance(t, go.Scatter) for t in fig.data)
    assert fig.layout.xaxis.title.text == "x₁"
    fig = scatter_sets([point_set(a), point_set(b)], color_by="dataset")
    assert [t.name for t in fig.data] == ["A", "B"]
    c3 = _blobs("C", [[0, 0, 0], [2, 2, 2]], dim=3)
    fig3 = scatter_sets([point_set(c3)], color_by="label")
    assert all(isinstance(t, go.Scatter3d) for t in fig3.data)
    assert fig3.layout.scene.zaxis.title.text == "x₃"
    with pytest.raises(DatasetError):
        scatter_sets([point_set(a), point_set(c3)])


def test_class_histograms_match_counts():
    a = _blobs("A", [[0, 0], [3, 3]], n=7)
    b = LabeledDataset(
        np.zeros((5, 2)) + np.arange(5)[:, None], [0, 0, 1, 1, 1], ("x", "y"), name="B"
    )
    fig = class_histograms([a, b])
    assert list(fig.data[0].y) == [7, 7]
    assert list(fig.data[1].y) == [2, 3]
    assert fig.layout.yaxis.title.text == "samples"


def test_otdd_heatmap_and_errors():
    mat = np.array([[0.0, 1.5], [1.5, 0.0]])
    fig = otdd_heatmap(mat, ["Q", "P"])
    assert fig.data[0].text[0][1] == "1.5"
    assert fig.data[0].colorbar.title.text == "OTDD d²"
    with pytest.raises(DatasetError):
        otdd_heatmap(mat, ["Q"])


def test_soft_label_bars_merge_small_classes():
    soft = np.array([[0.7, 0.29, 0.01], [0.5, 0.49, 0.01]])
    fig = soft_label_bars(soft, ["a/0", "a/1", "a/2"], ["s1", "s2"])
    names = [t.name for t in fig.data]
    assert names == ["a/0", "a/1", "other"]
    total = sum(np.asarray(t.x) for t in fig.data)
    np.testing.assert_allclose(total, 1.0)


# ---------------------------------------------------------------- OT maps vs Mixup panels


def test_label_mass_bars_of_mixup_blocks_are_the_weights():
    """The Mixup baseline (geoviz.geodesic.mixup) puts mass a_i in block i: the bars show it."""
    from geoviz.geodesic.mixup import mixup_interpolation

    q = _blobs("Q", [[0, 0], [5, 5]], n=20, seed=1)
    p1 = _blobs("P1", [[10, 0], [10, 5]], n=30, seed=2)
    p2 = _blobs("P2", [[0, 10], [5, 10], [9, 9]], n=30, seed=3)
    mix = mixup_interpolation(q, [p1, p2], [0.3, 0.7], seed=0)
    fig = label_mass_bars(mix.soft_labels.numpy(), mix.class_names)
    assert [float(np.sum(t.y)) for t in fig.data] == pytest.approx([0.3, 0.7], abs=1e-6)


def test_side_by_side_scatter_colours_classes_consistently():
    q = _blobs("Q", [[0, 0], [5, 5]], n=10)
    p = _blobs("P", [[10, 0], [10, 5]], n=10)
    fig = side_by_side_scatter(
        [("Q", [point_set(q)]), ("P", [point_set(p, name="ref"), point_set(q, name="Q2")])],
        faded=["ref"],
    )
    colours = {}
    for t in fig.data:
        colours.setdefault(t.name, set()).add(t.marker.color)
    assert all(len(c) == 1 for c in colours.values())
    assert "references" in colours  # short: "reference samp…" was cut off (issue 26)
    assert sum(1 for t in fig.data if t.showlegend) == len(colours)


# ---------------------------------------------------------------- embedding


def _embedding_sets(dim: int = 10):
    rng = np.random.default_rng(0)

    def ds(name, offsets):
        x = np.concatenate([rng.normal(size=(60, dim)) + o for o in offsets])
        return LabeledDataset(
            x,
            np.repeat(np.arange(len(offsets)), 60),
            tuple(f"c{k}" for k in range(len(offsets))),
            name=name,
        )

    return ds("A", [0.0, 12.0]), ds("B", [-12.0, 24.0])


def test_pca_embedding_transform_reproduces_fit():
    a, b = _embedding_sets()
    emb = fit_embedding([a, b], method="pca", max_per_dataset=50)
    assert emb.method == "pca" and emb.axis_titles == ("PC 1", "PC 2")
    assert set(emb.points) == {"A", "B"} and emb.points["A"].shape == (50, 2)
    again = emb.transform(a.features[emb.indices["A"]])
    np.testing.assert_allclose(again, emb.points["A"], atol=1e-4)
    with pytest.raises(DatasetError):
        fit_embedding(
            [a, LabeledDataset(np.zeros((4, 3)) + np.arange(4)[:, None], [0, 1, 0, 1], ("x", "y"))]
        )


def test_embedding_falls_back_to_pca_with_a_note(monkeypatch):
    a, b = _embedding_sets()
    monkeypatch.setitem(sys.modules, "umap", None)  # import umap -> ImportError
    emb = fit_embedding([a, b], method="umap", max_per_dataset=40)
    assert emb.method == "pca"
    assert emb.note and "UMAP failed" in emb.note and "PCA" in emb.note
    assert emb.transform(b.features[:5]).shape == (5, 2)


@pytest.mark.slow
def test_umap_embedding_separates_clusters_and_places_new_points():
    """Numba compiles UMAP on first use (~20 s on 2 cores), hence `slow`."""
    a, b = _embedding_sets()
    emb = fit_embedding([a, b], method="umap", max_per_dataset=120, seed=0)
    assert emb.method == "umap" and emb.note is None
    pts = np.concatenate([emb.points["A"], emb.points["B"]])
    labels = np.concatenate(
        [a.labels.numpy()[emb.indices["A"]], 2 + b.labels.numpy()[emb.indices["B"]]]
    )
    centroids = np.stack([pts[labels == k].mean(axis=0) for k in range(4)])
    # new samples of cluster A/c1 land nearest to that cluster's centroid
    rng = np.random.default_rng(5)
    new = rng.normal(size=(20, 10)) + 12.0
    placed = emb.transform(new)
    nearest = np.argmin(np.linalg.norm(placed[:, None, :] - centroids[None], axis=2), axis=1)
    assert np.mean(nearest == 1) >= 0.9


def test_schematic_builds():
    fig = method_schematic()
    names = [t.name for t in fig.data]
    assert "target Q" in names and "P̂_a" in names
    assert any("generalized geodesic" in (n or "") for n in names)


def test_soft_labeled_point_set_uses_argmax():
    soft = SoftLabeledDataset(
        np.zeros((2, 2)), np.array([[0.2, 0.8], [0.9, 0.1]]), ("p/a", "p/b"), name="P_a"
    )
    ps = point_set(soft)
    assert ps.labels == ("p/b", "p/a")
    np.testing.assert_allclose(ps.confidence, [0.8, 0.9])


def test_umap_warm_up_then_fit():
    """The warm-up runs UMAP's code path on a tiny problem; a real fit works after it."""
    from geoviz.viz.embedding import warm_up_umap

    seconds = warm_up_umap()
    assert seconds is not None and seconds >= 0.0
    a, b = _embedding_sets()
    emb = fit_embedding([a, b], method="umap", max_per_dataset=60, seed=1)
    assert emb.method == "umap" and emb.note is None
    assert np.isfinite(emb.transform(a.features[:5].numpy())).all()


# ---------------------------------------------------------------- plan neighbours (sharp vs blurry)


def test_neighbour_weight_caption():
    from geoviz.viz.neighbours import neighbour_weight_caption

    assert [neighbour_weight_caption(w) for w in (0.62, 0.999, 0.001, 0.05)] == [
        "w .62",
        "w 1.00",
        "w <.01",
        "w .05",
    ]


def test_plan_neighbours_grid_rows_weights_and_padding():
    from geoviz.viz.neighbours import plan_neighbours_grid

    rng = np.random.default_rng(0)
    n, k, h = 2, 3, 6
    weights = np.array([[0.7, 0.2, 0.1], [1.0, 0.0, 0.0]])  # row 2: one neighbour, two padded
    fig = plan_neighbours_grid(
        rng.random((n, h, h)),
        ["#4 · 7", "#9 · 1"],
        rng.random((n, k, h, h)),
        weights,
        rng.random((n, h, h)),
        np.array([2.3, 1.0]),
        neighbour_captions=[["Bag", "Coat", "Bag"], ["Shirt", "x", "x"]],
        mapped_captions=["Bag .80", "Shirt 1.00"],
        map_name="T1(x)",
        title="where T1(x) comes from",
    )
    assert len(fig.data) == 1  # one tiled image
    texts = [a.text for a in fig.layout.annotations]
    cells, titles = texts[: n * (k + 2)], texts[n * (k + 2) :]
    assert titles == ["<b>x ∈ Q</b>", "<b>#1</b>", "<b>#2</b>", "<b>#3</b>", "<b>T1(x)</b>"]
    assert cells[:5] == [
        "#4 · 7",
        "Bag<br>w .70",
        "Coat<br>w .20",
        "Bag<br>w .10",
        "2.3 neighb.<br>Bag .80",
    ]
    # padded entries (weight 0) are blank tiles without a caption
    assert cells[5:] == ["#9 · 1", "Shirt<br>w 1.00", "", "", "1.0 neighb.<br>Shirt 1.00"]
    # captions sit under their tiles: below the first row's images, above the second row's
    ys = [a.y for a in fig.layout.annotations[: n * (k + 2)]]
    assert h < ys[0] < ys[k + 2] and ys[0] == ys[1] == ys[k + 1]
    with pytest.raises(DatasetError, match="neighbour images"):
        plan_neighbours_grid(
            rng.random((n, h, h)),
            ["a", "b"],
            rng.random((n, k + 1, h, h)),
            weights,
            rng.random((n, h, h)),
            np.ones(n),
        )
    with pytest.raises(DatasetError, match="perplexity"):
        plan_neighbours_grid(
            rng.random((n, h, h)),
            ["a", "b"],
            rng.random((n, k, h, h)),
            weights,
            rng.random((n, h, h)),
            np.ones(n + 1),
        )


def test_image_grid_captions_below_leave_room_under_each_row():
    imgs = np.zeros((4, 10, 10))
    above = tile_images(imgs, 2, pad=1, caption_pad=5)
    below = tile_images(imgs, 2, pad=1, caption_pad=5, caption_below=True)
    assert above.shape == below.shape == (2 * 16, 2 * 11)
    # the first image row starts after the caption band (above) or at the top (below)
    assert above[:5].min() == 1.0 and above[5:15, :10].max() == 0.0
    assert below[:10, :10].max() == 0.0 and below[10:16].min() == 1.0


def test_plan_neighbours_scatter_marker_sizes_follow_the_weights():
    from geoviz.viz.neighbours import plan_neighbours_scatter

    x = np.array([[0.0, 0.0], [5.0, 5.0]])
    nb = np.array([[[1.0, 0.0], [0.0, 1.0]], [[5.0, 6.0], [9.0, 9.0]]])
    w = np.array([[0.75, 0.25], [1.0, 0.0]])
    mapped = (w[:, :, None] * nb).sum(1)
    fig = plan_neighbours_scatter(
        x, nb, w, mapped, np.array([1.8, 1.0]), reference_points=nb.reshape(-1, 2)
    )
    by_name = {t.name: t for t in fig.data if t.name}
    assert set(by_name) == {"P", "plan neighbours", "x ∈ Q", "T(x)"}
    pts = by_name["plan neighbours"]
    assert len(pts.x) == 3  # the padded entry is not drawn
    sizes = np.asarray(pts.marker.size, dtype=float)
    assert sizes[0] > sizes[1] and sizes[2] == sizes.max()
    np.testing.assert_allclose(np.c_[by_name["T(x)"].x, by_name["T(x)"].y], mapped)
    assert "1.8 neighbours" in by_name["T(x)"].text[0]
    with pytest.raises(DatasetError):
        plan_neighbours_scatter(x, nb[:, :1], w, mapped, np.ones(2))


# ---------------------------------------------------------------- issue 7 (browser review)


def test_weights_are_formatted_with_one_rounding_rule():
    from geoviz.geodesic.weights import (
        WEIGHT_DECIMALS,
        display_weights,
        format_weights,
    )

    for w in ([1 / 3, 1 / 3, 1 / 3], [0.045, 0.455, 0.5], [0.046, 0.3, 0.654], [0.125, 0.875]):
        w = np.asarray(w)
        shown = np.round(w, WEIGHT_DECIMALS)  # each the nearest 2-decimal value (issue 26)
        np.testing.assert_allclose(display_weights(w), shown)
        assert format_weights(w) == "(" + ", ".join(f"{x:.2f}" for x in shown) + ")"
        names = [f"d{k}" for k in range(len(w))]
        assert format_weights(w, names) == " · ".join(
            f"{n} {x:.2f}" for n, x in zip(names, shown, strict=True)
        )
    assert format_weights([1 / 3, 1 / 3, 1 / 3]) == "(0.33, 0.33, 0.33)"


def test_scatter_legend_sorted_unique_and_bounded():
    rng = np.random.default_rng(0)
    sets = []
    for name in ("Q", "fashion_mnist", "usps", "kmnist"):
        ds = LabeledDataset(
            rng.normal(size=(60, 2)),
            np.arange(60) % 10,
            tuple(str(k) for k in range(10)),
            name=name,
        )
        sets.append(point_set(ds, prefix_labels=True))
    soft = np.zeros((60, 20))
    soft[np.arange(60), np.arange(60) % 20] = 1.0
    pa = SoftLabeledDataset(
        torch.tensor(rng.normal(size=(60, 2)), dtype=torch.float32),
        torch.tensor(soft, dtype=torch.float32),
        tuple(f"{d}/{k}" for d in ("usps", "kmnist") for k in range(10)),
        name="P_a",
    )
    sets.append(point_set(pa, name="P_a"))  # shares class names with usps / kmnist
    fig = scatter_sets(sets, color_by="label", max_legend=20)
    shown = [t for t in fig.data if t.showlegend is not False]
    names = [t.name for t in shown]
    assert len(names) == len(set(names)), "a class is listed twice"
    assert len(names) <= 20
    ordered = [t.name for t in sorted(shown, key=lambda t: t.legendrank)]
    assert ordered[-1].startswith("other")
    assert ordered[:-1] == sorted(ordered[:-1])
    assert all(t.legendgroup == t.name for t in fig.data)
    # every point is still drawn
    assert sum(len(t.x) for t in fig.data) == 300
    # few classes: every class listed once, no "other"
    small = scatter_sets(sets[3:], color_by="label")
    small_names = [t.name for t in small.data if t.showlegend is not False]
    assert small_names == sorted(set(small_names)) and "kmnist/0" in small_names
    assert not any(n.startswith("other") for n in small_names)


# ---------------------------------------------------------------- scatter exploration


def _soft_pa() -> SoftLabeledDataset:
    """12 soft-labelled points; rows 5, 9 and 11 have hand-picked soft labels."""
    soft = np.full((12, 4), 0.25)
    soft[5] = [0.62, 0.21, 0.10, 0.07]
    soft[9] = [0.0, 0.0, 1.0, 0.0]
    soft[11] = [0.25, 0.25, 0.1, 0.4]
    return SoftLabeledDataset(
        np.arange(24.0).reshape(12, 2),
        soft,
        ("kmnist/tsu", "fashion_mnist/Bag", "usps/3", "usps/7"),
        name="P_a",
    )


def test_scatter_hover_names_set_index_class_and_top_soft_labels():
    pa = point_set(_soft_pa(), name="P_a", indices=np.array([5, 9, 11]))
    assert pa.hover[0] == "kmnist/tsu 0.62 · fashion_mnist/Bag 0.21 · usps/3 0.10"
    assert pa.hover[1] == "usps/3 1.00"  # zero masses are not listed
    assert soft_label_summary(np.array([[0.5, 0.5]]), ["a", "b"], top=1) == ["a 0.50"]
    q = point_set(_blobs("Q", [[0, 0], [3, 3]], n=4), prefix_labels=True)
    fig = scatter_sets([q, pa], color_by="dataset")
    trace = next(t for t in fig.data if t.name == "P_a")
    text = trace.text[0]
    assert "P_a" in text and "#5" in text and "kmnist/tsu (0.62)" in text
    assert "kmnist/tsu 0.62" in text.split("<br>")[-1]
    assert [list(c) for c in trace.customdata] == [["P_a", 5], ["P_a", 9], ["P_a", 11]]
    qt = next(t for t in fig.data if t.name == "Q")
    assert "Q/c1" in qt.text[5] and "#5" in qt.text[5] and "(1.00)" not in qt.text[5]
    assert [int(c[1]) for c in qt.customdata] == list(range(8))


def _points_by_opacity(fig) -> dict[float, int]:
    out: dict[float, int] = {}
    for t in fig.data:
        out[t.marker.opacity] = out.get(t.marker.opacity, 0) + len(t.x)
    return out


def test_scatter_highlight_fades_exactly_the_other_points():
    a = point_set(_blobs("A", [[0, 0], [3, 3]], n=10), prefix_labels=True)
    b = point_set(_blobs("B", [[0, 3], [3, 0], [6, 6]], n=10), prefix_labels=True)
    plain = scatter_sets([a, b], color_by="label")
    assert _points_by_opacity(plain) == {0.75: 50}
    # class part "c1" matches A/c1 and B/c1 in every dataset
    fig = scatter_sets([a, b], color_by="label", highlight_classes=["c1"])
    assert _points_by_opacity(fig) == {0.75: 20, 0.2: 30}
    dim = [t for t in fig.data if t.marker.opacity == 0.2]
    assert all(t.showlegend is False and t.marker.color == "#909090" for t in dim)
    assert fig.data[0] in dim and fig.data[1] in dim  # greyed points lie underneath
    assert sorted(t.name for t in fig.data if t.marker.opacity == 0.75) == ["A/c1", "B/c1"]
    for t in dim:  # customdata kept on greyed points too: none of them is of class c1
        s = a if t.customdata[0][0] == "A" else b
        assert all(s.labels[int(i)] != f"{s.name}/c1" for _, i in t.customdata)
    # full name, set filter, and both
    assert _points_by_opacity(scatter_sets([a, b], highlight_classes=["B/c1"]))[0.75] == 10
    both = scatter_sets([a, b], highlight_sets=["B"], highlight_classes=["c1", "c2"])
    assert _points_by_opacity(both) == {0.75: 20, 0.2: 30}
    only_b = scatter_sets([a, b], color_by="dataset", highlight_sets=["B"])
    assert _points_by_opacity(only_b) == {0.75: 30, 0.2: 20}
    # hide_others leaves them out
    hidden = scatter_sets([a, b], highlight_classes=["c1"], hide_others=True)
    assert _points_by_opacity(hidden) == {0.75: 20}
    assert {t.name for t in hidden.data} == {"A/c1", "B/c1"}
    legend = [t.name for t in hidden.data if t.showlegend is not False]
    assert legend == ["A/c1", "B/c1"]
    none = scatter_sets([a, b], highlight_classes=["nope"], hide_others=True)
    assert len(none.data) == 0 and "no point" in none.layout.annotations[0].text


def test_scatter_emphasis_set_is_drawn_last_and_stands_out():
    q = point_set(_blobs("Q", [[0, 0], [3, 3]], n=5), prefix_labels=True)
    pa = point_set(_soft_pa(), name="P_a")
    p1 = point_set(_blobs("P1", [[0, 3], [3, 0]], n=5), prefix_labels=True)
    for color_by in ("label", "dataset"):
        fig = scatter_sets([q, pa, p1], color_by=color_by, emphasis="P_a")
        owners = [t.customdata[0][0] for t in fig.data]
        n_pa = owners.count("P_a")
        assert n_pa >= 1 and owners[-n_pa:] == ["P_a"] * n_pa
        last, first = fig.data[-1], fig.data[0]
        assert last.marker.size > first.marker.size
        assert last.marker.line.color == "#111111" and last.marker.line.width > 0
    # with a highlight the emphasised set's greyed points stay underneath
    fig = scatter_sets([q, pa, p1], emphasis="P_a", highlight_classes=["usps/3"])
    assert fig.data[-1].customdata[0][0] == "P_a" and fig.data[-1].marker.opacity > 0.5
    c3 = _blobs("C", [[0, 0, 0], [2, 2, 2]], n=5, dim=3)
    fig3 = scatter_sets([point_set(c3), point_set(c3, name="D")], emphasis="C")
    assert fig3.data[-1].customdata[0][0] == "C" and fig3.data[-1].marker.line.width > 0


def test_selected_samples_round_trip_through_customdata():
    q = point_set(_blobs("Q", [[0, 0], [3, 3]], n=6), prefix_labels=True)
    pa = point_set(_soft_pa(), name="P_a", indices=np.array([5, 9, 11]))
    fig = scatter_sets([q, pa], color_by="label")
    data = json.loads(fig.to_json())["data"]  # what the browser (and Streamlit) sees
    picks = [(k, j) for k, t in enumerate(data) for j in range(len(t["x"])) if j % 3 == 0]
    state = {
        "selection": {
            "points": [
                {"curve_number": k, "point_index": j, "customdata": data[k]["customdata"][j]}
                for k, j in picks
            ],
            "point_indices": [],
        }
    }
    expected = [tuple(data[k]["customdata"][j]) for k, j in picks]
    assert selected_samples(state) == expected
    assert {n for n, _ in expected} == {"Q", "P_a"}
    assert all(isinstance(i, int) for _, i in selected_samples(state))
    # the inner selection or the bare points are accepted too
    assert selected_samples(state["selection"]) == expected
    assert selected_samples(state["selection"]["points"]) == expected
    one = {"selection": {"points": [{"customdata": ["P_a", 11]}, {"customdata": ["P_a", 11.0]}]}}
    assert selected_samples(one) == [("P_a", 11)]  # listed once
    assert selected_samples({"selection": {"points": [{"customdata": {"0": "Q", "1": 3}}]}}) == [
        ("Q", 3)
    ]
    for empty in (None, {}, {"selection": {}}, {"selection": {"points": None}}, []):
        assert selected_samples(empty) == []
    ternary_click = {"customdata": [1.0, 0.0, 0.0, 2.5]}  # weights + value, no set name
    junk = {"selection": {"points": [{"x": 1.0}, ternary_click, {"customdata": ["Q", 0.5]}, 5]}}
    assert selected_samples(junk) == []


def test_sample_card_image_and_top_soft_labels():
    soft = np.array([0.05, 0.6, 0.0, 0.2, 0.15])
    names = ["a/0", "a/1", "b/0", "b/1", "b/2"]
    img = np.linspace(0, 1, 64).reshape(8, 8)
    fig = sample_card(img, "P_a · sample #3", soft, names, top=3)
    assert isinstance(fig.data[0], go.Image)
    z = np.asarray(fig.data[0].z)
    assert z.shape == (8, 8, 3) and z.dtype == np.uint8 and z[0, 0, 0] == 0 and z[-1, -1, 2] == 255
    bar = fig.data[1]
    assert list(bar.y) == ["a/1", "b/1", "b/2", "other (2 classes)"]
    np.testing.assert_allclose(bar.x, [0.6, 0.2, 0.15, 0.05])
    assert fig.layout.title.text == "P_a · sample #3"
    rgb = sample_card((np.ones((4, 4, 3)) * 200).astype(np.uint8), "t", soft, names)
    assert np.asarray(rgb.data[0].z)[0, 0, 0] == 200
    hard = sample_card(None, "Q · sample #0", None, ["T-shirt/top", "Bag"], label="Bag")
    assert len(hard.data) == 1 and list(hard.data[0].y) == ["Bag"] and list(hard.data[0].x) == [1.0]
    with pytest.raises(DatasetError):
        sample_card(None, "t", soft[:3], names)
    with pytest.raises(DatasetError):
        sample_card(None, "t", None, names)


# --------------------------------------------------------------------------- map tables


@pytest.fixture
def map_data() -> tuple[LabeledDataset, list[LabeledDataset]]:
    return ring_blobs(36, 0, 3, "Q"), [
        ring_blobs(30, 1, 4, "P", 1.0),
        ring_blobs(30, 2, 2, "P2", -1.0),
    ]


def test_field_formats_follow_the_diagnostics_type_not_the_method():
    from geoviz import glossary
    from geoviz.maps.base import MapDiagnostics, NeuralDiagnostics, PlanDiagnostics
    from geoviz.viz.report import NO_PLAN, field_format, field_text

    # a subclass overrides its base's entry; otherwise it inherits it
    assert field_format(PlanDiagnostics, "converged").label == "converged"
    assert field_format(NeuralDiagnostics, "converged").label == "stopped early"
    assert field_format(PlanDiagnostics, "converged").warn_when_false
    assert not field_format(NeuralDiagnostics, "converged").warn_when_false
    assert field_format(PlanDiagnostics, "otdd").label == glossary.OTDD
    assert field_format(NeuralDiagnostics, "otdd").note == "Monge cost"
    # a field the type lacks reads its declaring type's "missing" text
    assert field_format(NeuralDiagnostics, "marginal_error").missing == NO_PLAN
    assert field_format(PlanDiagnostics, "heldout_ot").missing == "n/a (not trained)"
    # a field nobody knows reads by its own name
    assert field_format(MapDiagnostics, "mean_displacement").label == "mean displacement"

    plan = PlanDiagnostics(1.23456, 0.9, 2.25, False, 7, epsilon_abs=0.01, marginal_error=3e-6)
    assert field_text(plan, "otdd") == "1.235"
    assert field_text(plan, "effective_neighbours") == "2.2"  # ".1f", round half to even
    assert field_text(plan, "marginal_error") == "3.00e-06"
    assert field_text(plan, "converged") == "not converged"
    assert field_text(plan, "heldout_ot") == "n/a (not trained)"
    neural = NeuralDiagnostics(0.5, 0.75, None, True, 20, 0.1, 0.4, 0.3, 0.6, 0.875, 1.5, 10, 2.0)
    assert field_text(neural, "effective_neighbours") == NO_PLAN
    assert field_text(neural, "converged") == "stopped early"
    assert field_text(neural, "classifier_accuracy") == "87.5%"
    assert field_text(neural, "otdd", with_note=True) == "0.5 (Monge cost)"
    assert field_text(neural, "epsilon_abs") == NO_PLAN


def test_plan_map_table_keeps_the_numbers_of_the_diagnostics(map_data, tmp_path):
    from geoviz import glossary
    from geoviz.backend import DiskCache
    from geoviz.geodesic.pipeline import fit_geodesic
    from geoviz.viz.fitted_maps import has_plan_neighbours
    from geoviz.viz.report import map_table, map_table_notes

    q, refs = map_data
    res = fit_geodesic(q, refs, cache=DiskCache(tmp_path))
    table = map_table(res)
    assert list(table.columns) == [
        "reference P_i",
        glossary.OTDD,
        glossary.W_TARGET,
        "effective neighbours",
        "label confidence",
        "ε_abs",
        "marginal error",
        "converged",
        "iterations",
    ]
    assert list(table["reference P_i"]) == ["P", "P2"]
    np.testing.assert_array_equal(table[glossary.OTDD], res.otdd)
    np.testing.assert_array_equal(table["effective neighbours"], res.effective_neighbours)
    np.testing.assert_array_equal(table[glossary.W_TARGET], res.w_to_target)
    assert list(table["converged"]) == list(res.converged)
    assert has_plan_neighbours(res)
    captions, warnings = map_table_notes(res)
    assert captions == [] and bool(warnings) == (not all(res.converged))


def test_a_new_map_kind_needs_no_change_in_the_app_tables(
    map_data, tmp_path, monkeypatch, identity_map_kind
):
    """A third kind of map with its own diagnostics: columns, rows and texts follow them."""

    from geoviz.backend import DiskCache
    from geoviz.errors import GeovizError
    from geoviz.geodesic import pipeline
    from geoviz.geodesic.config import GeodesicConfig
    from geoviz.geodesic.pipeline import fit_geodesic
    from geoviz.viz.fitted_maps import has_plan_neighbours, require_plan
    from geoviz.viz.report import (
        NO_PLAN,
        check_pair,
        map_comparison_tables,
        map_table,
        map_table_notes,
        nearest_reference_ratio,
    )

    q, refs = map_data
    plan = fit_geodesic(q, refs, cache=DiskCache(tmp_path))
    monkeypatch.setattr(pipeline, "map_estimator", lambda *args: identity_map_kind)
    third = fit_geodesic(q, refs, GeodesicConfig(method="neural"), cache=DiskCache(tmp_path))

    table = map_table(third)
    assert list(table.columns)[-1] == "mean displacement"
    assert list(table["mean displacement"]) == [0.25, 0.25]
    assert (table["effective neighbours"] == NO_PLAN).all()
    assert "ε_abs" not in table and "nan" not in table.to_string().lower()
    assert list(table["converged"]) == [False, False]
    # no warning: the base type's "converged" has none (only Sinkhorn's does)
    assert map_table_notes(third) == ([], [])
    assert not has_plan_neighbours(third)
    with pytest.raises(GeovizError, match="no plan neighbours"):
        require_plan(third)

    tables = map_comparison_tables(plan, third)
    assert len(tables) == 2
    for i, t in enumerate(tables):
        rows = {r[0]: r[1:] for r in t.itertuples(index=False)}
        assert list(t.columns) == ["quantity", "barycentric", "neural"]
        assert rows["effective neighbours"][1] == NO_PLAN
        assert "held-out OT" not in rows  # neither map has it
        assert "mean displacement" not in rows  # not a comparison row
        # computed for both maps, since neither reports it
        assert rows["nearest-reference ratio"] == tuple(
            f"{nearest_reference_ratio(r, i):.2f}" for r in (plan, third)
        )
        assert "nan" not in t.to_string().lower()
    with pytest.raises(GeovizError, match="two different map methods"):
        check_pair(plan, plan)


def test_blur_warning_says_only_what_is_true_of_the_map():
    """Issue 26, item 1: points are not images, sharp labels do not "mix", and at the default
    epsilon the fix is not "lower it to the default"."""
    from geoviz.viz.report import blur_warning

    kwargs = {"default_epsilon": 1e-3, "blur_neighbours": 10.0}
    points = blur_warning(0, 14.2, 0.99, 1e-3, images=False, **kwargs)
    assert "T1(x) averages a median of 14" in points
    assert "images" not in points and "points are pulled" in points
    assert "labels stay sharp (confidence 0.99)" in points and "mix" not in points
    assert "default" in points and "lower it further" in points and "Lower ε above" not in points
    blurry = blur_warning(2, 80, 0.41, 0.1, images=True, **kwargs)
    assert "T3(x)" in blurry and "blurred mean" in blurry
    assert "labels mix classes (confidence 0.41)" in blurry
    assert "Lower ε above (default 0.001)" in blurry


def test_mixup_comparison_uses_the_explorers_colours_by_q_class():
    """Issue 26, item 5: the mixup comparison colours every point by the class in Q of its
    target sample with the browser explorer's palette; the faded references' legend is short."""
    import re
    from pathlib import Path

    from geoviz.data.registry import load_dataset
    from geoviz.geodesic.mixup import mixup_interpolation
    from geoviz.geodesic.pipeline import fit_geodesic
    from geoviz.viz.compare import EXPLORER_PALETTE, mixup_comparison

    q = load_dataset("gmm2d", n=60, seed=0)
    refs = [load_dataset("gmm2d", n=60, seed=s) for s in (1, 2)]
    result = fit_geodesic(q, refs)
    a = [0.4, 0.6]
    pa, naive = result.interpolate(a), mixup_interpolation(q, refs, a, seed=0)
    fig = mixup_comparison(q, refs, pa, naive, ["P1", "P2"], "t")
    js = (
        Path(__file__).resolve().parents[1] / "geoviz/explorer/frontend/drawing_kit.js"
    ).read_text()
    palette = re.search(r"const PALETTE = \[(.*?)\];", js, re.S).group(1)
    assert tuple(re.findall(r'"(#[0-9a-f]{6})"', palette)) == EXPLORER_PALETTE
    for trace in fig.data:
        if trace.name in q.classes:
            assert trace.marker.color == EXPLORER_PALETTE[q.classes.index(trace.name)]
    names = {t.name for t in fig.data}
    assert "references" in names and "reference samples" not in names
    assert fig.layout.legend.title.text == "class in Q of the target sample"
    # P_a's points of Q's class 0 are exactly the images of Q's class-0 samples
    pa_trace = next(t for t in fig.data if t.name == q.classes[0] and t.xaxis == "x2")
    idx = (q.labels == 0).numpy()
    np.testing.assert_allclose(pa_trace.x, pa.features.numpy()[idx, 0])


def _markdown_cells(line: str) -> list[str]:
    """The cells of a Markdown table row, unescaped (a ``\\|`` stays in its cell)."""
    cells, cell, chars = [], "", iter(line.strip()[1:-1])
    for c in chars:
        if c == "\\":
            cell += next(chars)
        elif c == "|":
            cells.append(cell.strip())
            cell = ""
        else:
            cell += c
    return [*cells, cell.strip()]


def test_two_q_markdown_reads_back_as_the_table_whatever_the_names():
    from geoviz.viz.report import two_q_markdown, two_q_table

    mat = np.array([[0.0, 12.3456, 7.0], [12.3456, 0.0, 31415.9], [7.0, 31415.9, 0.0]])
    names = ["Q", "a|b $x$", "**bold** _it_\nnext"]
    text = two_q_markdown(mat, names)
    lines = text.splitlines()
    assert len(lines) == 2 + len(names)  # header, alignment, one row per dataset
    shown = [n.replace("\n", " ") for n in names]
    assert _markdown_cells(lines[0]) == ["", *shown]
    table = two_q_table(mat, names)
    for name, line, row in zip(shown, lines[2:], table.to_numpy(), strict=True):
        assert _markdown_cells(line) == [f"**{name}**", *row]
    assert "$x$" not in text and "a|b" not in text  # escaped: no math, no extra cell


def test_two_q_table_shows_every_entry_of_the_matrix_with_its_names():
    from geoviz.errors import GeovizError
    from geoviz.viz.report import two_q_table

    mat = np.array([[0.0, 12.3456, 7.0], [12.3456, 0.0, 31415.9], [7.0, 31415.9, 0.0]])
    table = two_q_table(mat, ["Q", "P1", "P2"])
    assert list(table.index) == ["Q", "P1", "P2"] and list(table.columns) == ["Q", "P1", "P2"]
    # 4 significant digits, read back: every cell is its matrix entry, symmetric like it
    back = table.map(float).to_numpy()
    np.testing.assert_allclose(back, mat, rtol=5e-4)
    assert table.loc["P1", "P2"] == "3.142e+04" and table.loc["Q", "P1"] == "12.35"
    with pytest.raises(GeovizError, match="3 names"):
        two_q_table(mat[:2, :2], ["Q", "P1", "P2"])
