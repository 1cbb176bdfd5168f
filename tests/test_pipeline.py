"""fit_geodesic end to end on small synthetic labelled datasets."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

import geoviz.geodesic.pipeline as pipeline
import geoviz.maps.barycentric as barycentric
from geoviz.backend import DiskCache
from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.data.preprocess import stratified_subsample
from geoviz.errors import DatasetError, GeovizError, WeightsError
from geoviz.features import make_space
from geoviz.geodesic import GeodesicConfig, GeodesicResult, fit_geodesic, simplex_grid
from geoviz.geodesic.pipeline import fit_in_space
from geoviz.ot.otdd_cost import OTDDConfig


def _mixture(
    name: str, n_classes: int, seed: int, n: int = 60, shift: float = 0.0
) -> LabeledDataset:
    """``n`` points of a 2-D Gaussian mixture, one component per class."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(n_classes, 2)) + shift
    labels = np.arange(n) % n_classes
    x = centres[labels] + 0.4 * rng.normal(size=(n, 2))
    return LabeledDataset(
        features=x, labels=labels, classes=tuple(f"c{k}" for k in range(n_classes)), name=name
    )


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    # anything that falls back to the default cache writes under tmp_path
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "default_cache"))


@pytest.fixture
def data():
    target = _mixture("Q", 3, seed=0)
    refs = [
        _mixture("P1", 2, seed=1, shift=1.0),
        _mixture("P2", 3, seed=2),
        _mixture("P3", 4, seed=3, shift=-1.0),
    ]
    return target, refs


@pytest.fixture
def cache(tmp_path):
    return DiskCache(tmp_path / "cache")


def _relabel(ds: LabeledDataset, perm: list[int]) -> LabeledDataset:
    """Same samples and class names, classes listed in another order: new index of class k is perm[k]."""
    classes = [""] * ds.n_classes
    for k, name in enumerate(ds.classes):
        classes[perm[k]] = name
    labels = torch.tensor(perm)[ds.labels]
    return LabeledDataset(features=ds.features, labels=labels, classes=tuple(classes), name=ds.name)


def test_fit_geodesic_structure_and_consistency(data, cache):
    target, refs = data
    stages: list[tuple[str, float]] = []
    res = fit_geodesic(
        target, refs, GeodesicConfig(), cache=cache, progress=lambda s, f: stages.append((s, f))
    )
    assert isinstance(res, GeodesicResult)
    m = 3
    assert len(res.mapped_features) == m and len(res.soft_labels) == m
    for i, ref in enumerate(refs):
        assert res.mapped_features[i].shape == (target.n_samples, 2)
        assert res.soft_labels[i].shape == (target.n_samples, ref.n_classes)
        torch.testing.assert_close(
            res.soft_labels[i].sum(1), torch.ones(target.n_samples), atol=1e-4, rtol=0
        )
    assert res.otdd.shape == (m,) and (res.otdd > 0).all()
    assert res.w_between.shape == (m, m)
    np.testing.assert_array_equal(res.w_between, res.w_between.T)
    np.testing.assert_array_equal(np.diag(res.w_between), 0.0)
    assert res.class_names == (
        "P1/c0",
        "P1/c1",
        "P2/c0",
        "P2/c1",
        "P2/c2",
        "P3/c0",
        "P3/c1",
        "P3/c2",
        "P3/c3",
    )
    assert res.block_slices == (slice(0, 2), slice(2, 5), slice(5, 9))
    assert res.a_hat.sum() == pytest.approx(1.0) and (res.a_hat >= 0).all()
    grid = simplex_grid(m, 30)
    assert res.w2_hat <= float(res.objective(grid).min()) + 1e-9
    # progress is monotone and ends at 1
    fractions = [f for _, f in stages]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(stages) >= m

    # P_a: one-hot weights give T_i#Q with labels in block i only
    for i in range(m):
        ds = res.interpolate(np.eye(m)[i])
        torch.testing.assert_close(ds.features, res.mapped_features[i])
        outside = torch.ones(len(res.class_names), dtype=torch.bool)
        outside[res.block_slices[i]] = False
        assert float(ds.soft_labels[:, outside].abs().max()) == 0.0
    p_hat = res.interpolate(res.a_hat, n=25, seed=1)
    assert isinstance(p_hat, SoftLabeledDataset) and p_hat.n_samples == 25
    assert p_hat.metadata["target"]["fingerprint"] == target.fingerprint
    assert [r["name"] for r in p_hat.metadata["references"]] == ["P1", "P2", "P3"]
    assert p_hat.metadata["objective"] == pytest.approx(res.w2_hat)

    # the feature part of eq. (ds_eq) is exactly mean ||x_a - x||^2 of the sampled P_a (Prop. 1 algebra)
    dist = res.distances
    a = np.array([0.2, 0.5, 0.3])
    x_a = res.interpolate(a).features.double()
    direct = float(((x_a - target.features.double()) ** 2).sum(1).mean())
    feat_obj = a @ dist.feature_to_target - 0.5 * a @ dist.feature_between @ a
    assert feat_obj == pytest.approx(direct, rel=1e-5)

    # McCann: t = 0 is Q (labels in the Q block), t = 1 is T_i#Q
    start = res.mccann(1, 0.0)
    torch.testing.assert_close(start.features, target.features)
    torch.testing.assert_close(start.soft_labels[:, :3], target.one_hot())
    end = res.mccann(1, 1.0)
    torch.testing.assert_close(end.features, res.mapped_features[1])
    assert float(end.soft_labels[:, :3].abs().max()) == 0.0
    assert end.class_names[3:] == ("P2/c0", "P2/c1", "P2/c2")


def test_relabelling_a_reference_permutes_its_block_only(data, cache):
    target, refs = data
    perm = [2, 0, 3, 1]  # class k of P3 gets index perm[k]
    permuted = [refs[0], refs[1], _relabel(refs[2], perm)]
    assert permuted[2].fingerprint != refs[2].fingerprint
    base = fit_geodesic(target, refs, cache=cache)
    other = fit_geodesic(target, permuted, cache=cache)
    for i in range(3):
        torch.testing.assert_close(
            other.mapped_features[i], base.mapped_features[i], atol=1e-5, rtol=1e-5
        )
    torch.testing.assert_close(
        other.soft_labels[2][:, perm], base.soft_labels[2], atol=1e-5, rtol=1e-5
    )
    for i in range(2):
        torch.testing.assert_close(other.soft_labels[i], base.soft_labels[i], atol=1e-6, rtol=0)
    np.testing.assert_allclose(other.otdd, base.otdd, rtol=1e-5)
    np.testing.assert_allclose(other.w_to_target, base.w_to_target, rtol=1e-5)
    np.testing.assert_allclose(other.w_between, base.w_between, rtol=1e-5)
    np.testing.assert_allclose(other.a_hat, base.a_hat, atol=1e-4)
    # the class names follow the samples
    names = other.class_names[other.block_slices[2]]
    assert [names[perm[k]] for k in range(4)] == list(base.class_names[base.block_slices[2]])


def test_second_call_hits_the_cache_and_solves_nothing(data, cache, monkeypatch):
    target, refs = data
    first = fit_geodesic(target, refs, cache=cache)
    misses, hits = cache.misses_, cache.hits_
    assert misses == 3 + 3  # 3 maps + 3 reference-pair label distances

    def boom(*args, **kwargs):
        raise AssertionError("a coupling or label distance was recomputed")

    monkeypatch.setattr(barycentric, "otdd", boom)  # the OTDD solve behind BarycentricMap.fit
    # geoviz.ot re-exports the function otdd, which shadows the submodule as an attribute
    monkeypatch.setattr(importlib.import_module("geoviz.ot.otdd"), "_otdd", boom)
    monkeypatch.setattr(pipeline, "label_distances", boom)
    second = fit_geodesic(target, refs, cache=cache)
    assert cache.misses_ == misses
    assert cache.hits_ - hits == misses
    for i in range(3):
        torch.testing.assert_close(second.mapped_features[i], first.mapped_features[i])
        torch.testing.assert_close(second.soft_labels[i], first.soft_labels[i])
    np.testing.assert_array_equal(second.w_between, first.w_between)
    np.testing.assert_array_equal(second.a_hat, first.a_hat)
    # a different configuration is a different entry
    with pytest.raises(AssertionError, match="recomputed"):
        fit_geodesic(stratified_subsample(target, 30, seed=0), refs, cache=cache)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"qp_solver": "no_such_qp"}, r"unknown QP solver 'no_such_qp': available are .*enumerate"),
    ],
)
def test_config_bounds(kwargs, match):
    with pytest.raises(GeovizError, match=match):
        GeodesicConfig(**kwargs)


@pytest.mark.parametrize("epsilon", [1e-12, 1e-20, 1e-40, 1e-100])
def test_tiny_epsilon_refused_before_fitting(data, cache, monkeypatch, epsilon):
    """The issue's epsilons never reach a solver: the config refuses them."""
    target, refs = data

    def boom(*args, **kwargs):
        raise AssertionError("fitted")

    monkeypatch.setattr(pipeline, "map_estimator", boom)
    with pytest.raises(GeovizError, match=r"epsilon .* is below 0\.0001"):
        fit_geodesic(target, refs, GeodesicConfig(otdd=OTDDConfig(epsilon=epsilon)), cache=cache)


def test_reference_count_refused_before_fitting(data, cache, monkeypatch):
    target, refs = data

    def boom(*args, **kwargs):
        raise AssertionError("fitted")

    monkeypatch.setattr(pipeline, "map_estimator", boom)
    monkeypatch.setattr(pipeline, "space_of", boom)
    many = [refs[k % 3] for k in range(11)]
    with pytest.raises(DatasetError, match="needs 2 to 10 reference datasets P_i, got 11"):
        fit_geodesic(target, many, cache=cache)
    with pytest.raises(DatasetError, match=r"needs 2 to 10 reference datasets P_i, got [01]"):
        fit_geodesic(target, [], cache=cache)


def test_bad_inputs(data, cache):
    target, refs = data
    with pytest.raises(DatasetError, match=r"needs 2 to 10 reference datasets P_i, got [01]"):
        fit_geodesic(target, refs[:1], cache=cache)
    with pytest.raises(DatasetError, match="single dataset"):
        fit_geodesic(target, refs[0], cache=cache)
    wide = LabeledDataset(
        features=np.zeros((6, 3)) + np.arange(6)[:, None],
        labels=[0, 1] * 3,
        classes=("a", "b"),
        name="W",
    )
    with pytest.raises(DatasetError, match=r"same feature dimension.*'W' has 3"):
        fit_geodesic(target, [refs[0], wide], cache=cache)
    for eps in (0.0, -1.0):
        with pytest.raises(GeovizError, match=r"(?i)epsilon"):
            fit_geodesic(target, refs, GeodesicConfig(otdd=OTDDConfig(epsilon=eps)), cache=cache)
    for name in ("n_target", "n_reference", "subsample_seed"):  # the spec's, once
        with pytest.raises(TypeError, match=name):
            GeodesicConfig(**{name: 30})  # type: ignore[arg-type]
    assert GeodesicConfig().to_dict()["n_target"] is None  # keys of before (checkpoints)

    res = fit_geodesic(target, refs[:2], cache=cache)
    assert res.target.n_samples == target.n_samples  # the datasets as given
    with pytest.raises(WeightsError, match="negative"):
        res.interpolate([1.5, -0.5])
    with pytest.raises(WeightsError, match="sum to"):
        res.interpolate([0.5, 0.4])
    with pytest.raises(WeightsError, match="2 entries"):
        res.objective([0.2, 0.3, 0.5])
    with pytest.raises(WeightsError, match=r"\[0, 1\]"):
        res.mccann(0, 1.5)
    with pytest.raises(GeovizError, match="reference index"):
        res.mccann(2, 0.5)


def test_duplicate_reference_names_are_disambiguated(data, cache):
    target, refs = data
    twin = LabeledDataset(
        features=refs[1].features + 0.5, labels=refs[1].labels, classes=refs[1].classes, name="P2"
    )
    res = fit_geodesic(target, [refs[1], twin], cache=cache)
    assert res.reference_names == ("P2", "P2#2")
    assert res.class_names == ("P2/c0", "P2/c1", "P2/c2", "P2#2/c0", "P2#2/c1", "P2#2/c2")


def test_map_sharpness_fields_are_consistent_and_round_trip_the_cache(data, cache, monkeypatch):
    """effective neighbours, label confidence, epsilon_abs and the plan neighbours of every map."""
    import json
    import warnings

    from geoviz.ot.otdd_cost import BLUR_NEIGHBOURS, mean_ground_cost
    from geoviz.vocabulary import DEFAULT_EPSILON

    target, refs = data
    n_q, m = target.n_samples, len(refs)
    res = fit_geodesic(target, refs, cache=cache)
    assert pipeline.PIPELINE_CACHE_VERSION >= 2
    for arr in (res.effective_neighbours, res.label_confidence, res.epsilon_abs):
        assert isinstance(arr, np.ndarray) and arr.shape == (m,) and np.isfinite(arr).all()
    assert len(res.row_perplexity) == len(res.neighbour_index) == len(res.neighbour_weight) == m
    for i, ref in enumerate(refs):
        perp, idx, w = res.row_perplexity[i], res.neighbour_index[i], res.neighbour_weight[i]
        assert perp.shape == (n_q,) and perp.dtype == torch.float32
        assert idx.shape == (n_q, 8) and idx.dtype == torch.int64
        assert w.shape == (n_q, 8) and w.dtype == torch.float32
        # 1 <= perplexity <= N_P; the scalar is its median
        assert float(perp.min()) >= 1 - 1e-4 and float(perp.max()) <= ref.n_samples * (1 + 1e-4)
        assert res.effective_neighbours[i] == pytest.approx(float(perp.double().median()), rel=1e-5)
        # indices valid, padding (-1) carries no weight, weights descending and a sub-distribution
        assert bool(((idx == -1) | ((idx >= 0) & (idx < ref.n_samples))).all())
        assert bool((w[idx == -1] == 0).all()) and bool((w >= 0).all())
        assert bool((w[:, :-1] >= w[:, 1:] - 1e-7).all())
        assert float(w.sum(1).max()) <= 1 + 1e-5
        # perplexity exp(H) >= 1 / (largest weight), as Shannon entropy >= min-entropy
        assert bool((perp * w[:, 0] >= 1 - 1e-3).all())
        # label confidence: mean largest soft-label entry, between 1/C and 1
        conf = float(res.soft_labels[i].max(1).values.double().mean())
        assert res.label_confidence[i] == pytest.approx(conf, rel=1e-5)
        assert 1 / ref.n_classes - 1e-6 <= res.label_confidence[i] <= 1 + 1e-6
        # epsilon_abs = epsilon x mean ground cost (cost ||x - x'||^2 + W2^2, no 1/2)
        mean_c = mean_ground_cost(target, ref, res.label_distances_to_target[i])
        assert res.epsilon_abs[i] == pytest.approx(DEFAULT_EPSILON * mean_c, rel=1e-6)
        # T_i(x) = mass * (average of the kept neighbours) + (1 - mass) * (average of the rest),
        # so the kept neighbours rebuild T_i(x) up to (1 - mass) x the reference's diameter
        mass = w.sum(1)
        kept = (w[:, :, None] * ref.features[idx.clamp_min(0)]).sum(1) / mass[:, None]
        err = (kept - res.mapped_features[i]).norm(dim=1)
        diameter = float(torch.cdist(ref.features, ref.features).max())
        assert bool((err <= (1 - mass) * diameter + 1e-4).all())
        assert float(mass.median()) > 0.9  # sharp by default: 8 neighbours hold most of a row
        # GeodesicResult.neighbours picks rows
        rows = np.array([3, 0, 7])
        nb_i, nb_w, nb_p = res.neighbours(i, rows)
        np.testing.assert_array_equal(nb_i, idx[rows].numpy())
        np.testing.assert_array_equal(nb_w, w[rows].numpy())
        np.testing.assert_array_equal(nb_p, perp[rows].numpy())
    with pytest.raises(GeovizError, match="target indices"):
        res.neighbours(0, [n_q])
    with pytest.raises(GeovizError, match="reference index"):
        res.neighbours(m, [0])

    # the numbers reach the summary (JSON-able) and every P_a / McCann manifest
    summary = json.loads(json.dumps(res.summary()))
    assert summary["effective_neighbours"] == pytest.approx(res.effective_neighbours.tolist())
    assert summary["label_confidence"] == pytest.approx(res.label_confidence.tolist())
    assert summary["epsilon_abs"] == pytest.approx(res.epsilon_abs.tolist())
    assert summary["epsilon"] == DEFAULT_EPSILON
    assert summary["blurry"] == (res.effective_neighbours > BLUR_NEIGHBOURS).tolist()
    maps = res.interpolate(res.a_hat).metadata["maps"]
    assert [d["reference"] for d in maps] == ["P1", "P2", "P3"]
    assert [d["effective_neighbours"] for d in maps] == res.effective_neighbours.tolist()
    assert res.mccann(1, 0.5).metadata["maps"] == [maps[1]]

    # read back from the cache: the same arrays, nothing solved
    def boom(*args, **kwargs):
        raise AssertionError("a coupling was recomputed")

    with monkeypatch.context() as mp:
        mp.setattr(barycentric, "otdd", boom)
        mp.setattr(importlib.import_module("geoviz.ot.otdd"), "_otdd", boom)
        again = fit_geodesic(target, refs, cache=cache)
    for name in ("effective_neighbours", "label_confidence", "epsilon_abs"):
        np.testing.assert_array_equal(getattr(again, name), getattr(res, name))
    for name in ("row_perplexity", "neighbour_index", "neighbour_weight"):
        for a, b in zip(getattr(again, name), getattr(res, name), strict=True):
            assert torch.equal(a, b)

    # a larger epsilon averages more reference points with less confident labels
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        blurry = fit_geodesic(
            target, refs, GeodesicConfig(otdd=OTDDConfig(epsilon=1.0)), cache=cache
        )
    assert (blurry.effective_neighbours > res.effective_neighbours).all()
    assert (blurry.label_confidence < res.label_confidence + 1e-9).all()
    assert blurry.blurry.any() and not res.blurry.any()
    np.testing.assert_allclose(blurry.epsilon_abs, res.epsilon_abs / DEFAULT_EPSILON, rtol=1e-9)


# --------------------------------------------------------------------------- neural maps

_NEURAL_TINY = {"iterations": 40, "eval_every": 20, "classifier_iterations": 30}


def _neural_config(**changes) -> GeodesicConfig:
    import dataclasses

    from geoviz.maps.neural_config import NEURAL_PRESETS

    neural = dataclasses.replace(NEURAL_PRESETS["tiny"], **{**_NEURAL_TINY, **changes})
    return GeodesicConfig(method="neural", neural=neural)


def test_neural_method_gives_a_full_geodesic(data, cache):
    target, refs = data
    res = fit_geodesic(target, refs, _neural_config(), cache=cache)
    assert res.method == "neural" and res.m == 3
    for i, ref in enumerate(refs):
        assert res.mapped_features[i].shape == (target.n_samples, 2)
        assert res.soft_labels[i].shape == (target.n_samples, ref.n_classes)
        torch.testing.assert_close(res.soft_labels[i].sum(1), torch.ones(target.n_samples))
        d = res.map_details[i]
        assert d["transport_cost"] + d["label_term"] == pytest.approx(res.otdd[i])
    # no plan: NaN sharpness, no neighbours, but nearest references work
    assert np.isnan(res.effective_neighbours).all() and not res.blurry.any()
    with pytest.raises(GeovizError, match="no plan neighbours"):
        res.neighbours(0)
    idx, dist = res.nearest_references(1, [0, 5], k=3)
    assert idx.shape == dist.shape == (2, 3) and (np.diff(dist, axis=1) >= 0).all()
    brute = torch.cdist(res.mapped_features[1][[0, 5]], refs[1].features).argmin(1).numpy()
    np.testing.assert_array_equal(idx[:, 0], brute)
    # the geodesic machinery is method-agnostic: P_a, a_hat, McCann
    pa = res.interpolate(res.a_hat)
    mixed = sum(a * x for a, x in zip(res.a_hat, res.mapped_features, strict=True))
    torch.testing.assert_close(pa.features, mixed.float(), atol=1e-5, rtol=0)
    assert res.objective(res.a_hat) <= res.w_to_target.min() + 1e-9
    mc = res.mccann(0, 1.0)
    torch.testing.assert_close(mc.features, res.mapped_features[0])
    summary = res.summary()
    assert summary["method"] == "neural"
    assert res.map_summaries()[0]["method"] == "neural"
    assert "heldout_ot" in res.map_summaries()[0]


def test_method_is_part_of_the_config_and_cache(data, cache):
    target, refs = data
    assert "neural" not in GeodesicConfig().to_dict()
    assert GeodesicConfig(method="neural").to_dict()["neural"]["iterations"] > 0
    assert GeodesicConfig(method="neural", neural="tiny").neural.iterations == 200
    with pytest.raises(GeovizError, match="method"):
        GeodesicConfig(method="mlp")  # type: ignore[arg-type]
    with pytest.raises(GeovizError, match="preset"):
        GeodesicConfig(method="neural", neural="huge")
    bary = fit_geodesic(target, refs, GeodesicConfig(), cache=cache)
    neural = fit_geodesic(target, refs, _neural_config(), cache=cache)
    assert bary.method == "barycentric" and neural.method == "neural"
    assert not torch.equal(bary.mapped_features[0], neural.mapped_features[0])
    hits = cache.hits_
    again = fit_geodesic(target, refs, _neural_config(), cache=cache)
    assert cache.hits_ > hits
    torch.testing.assert_close(again.mapped_features[2], neural.mapped_features[2])
    np.testing.assert_allclose(again.a_hat, neural.a_hat)


# ---------------------------------------------------------------- feature spaces (issue 22)


def _grey_problem(n: int = 150):
    from geoviz.data.preprocess import harmonize
    from geoviz.data.registry import load_dataset

    q = load_dataset("mnist", split="test", n=n, seed=0)
    refs = [load_dataset(name, n=n, seed=0) for name in ("mnist", "fashion_mnist", "usps")]
    return harmonize([q, *refs], size=16, channels="grey")


def test_images_come_back_through_the_plan(tmp_path):
    """In pixel space the lift of the references' images through each plan's largest
    entries equals the barycentric projection the map computed (up to the mass outside)."""
    from geoviz.backend import DiskCache
    from geoviz.geodesic.config import GeodesicConfig
    from geoviz.geodesic.pipeline import fit_geodesic, lift_through_plan

    q, *refs = _grey_problem()
    pixels = GeodesicConfig(features="pixels")  # the default would choose the digit box
    result = fit_geodesic(q, refs, pixels, cache=DiskCache(tmp_path))
    for fitted, ref in zip(result.maps, refs, strict=True):
        lifted = lift_through_plan(fitted, ref.features)
        exact = fitted.mapped_features_
        rel = float((lifted - exact).norm() / exact.norm())
        assert rel < 0.02, rel


def test_geodesic_in_a_feature_space_keeps_images_and_names_the_space(tmp_path):
    from geoviz.backend import DiskCache
    from geoviz.features import PCASpace
    from geoviz.geodesic.config import GeodesicConfig
    from geoviz.geodesic.pipeline import fit_geodesic

    q, *refs = _grey_problem()
    cache = DiskCache(tmp_path)
    result = fit_geodesic(q, refs, GeodesicConfig(features="pca"), cache=cache)
    assert result.features_name == "pca50" and result.image_shape == q.image_shape
    assert result.maps[0].mapped_features_.shape[1] == 50  # the plan lives in PCA space
    assert result.mapped_features[0].shape == (q.n_samples, q.n_features)  # images
    pa = result.interpolate(result.a_hat)
    assert pa.image_shape == q.image_shape
    assert float(pa.features.min()) >= -1e-6 and float(pa.features.max()) <= 1 + 1e-6
    meta = pa.metadata["features"]
    assert meta["name"] == "pca50" and len(meta["digest"]) == 64
    assert result.summary()["features"] == "pca50"
    # the same space object gives the same result; pixels keep the old config keys
    again = fit_in_space(q, refs, None, PCASpace(50), cache=cache)
    np.testing.assert_allclose(again.a_hat, result.a_hat)
    assert "features" not in GeodesicConfig(features="pixels").to_dict()
    assert GeodesicConfig().to_dict()["features"] == "auto"
    assert GeodesicConfig(features="pca").to_dict()["features"] == "pca"


def test_default_space_is_chosen_from_the_data_and_kept_with_the_result(tmp_path):
    """Issue 33: grey glyphs get the digit box, and the result and P_a's manifest say so;
    the costs are those of the box space named explicitly."""
    from geoviz.backend import DiskCache
    from geoviz.geodesic.config import GeodesicConfig
    from geoviz.geodesic.pipeline import fit_geodesic

    q, *refs = _grey_problem()
    cache = DiskCache(tmp_path)
    auto = fit_geodesic(q, refs, cache=cache)
    assert auto.space_choice is not None and auto.space_choice.name == "box"
    assert auto.space_sentence.startswith("space: digit box (chosen automatically: ")
    named = fit_geodesic(q, refs, GeodesicConfig(features="box"), cache=cache)
    assert named.space_choice is None and "named" in named.space_sentence
    np.testing.assert_allclose(auto.w_to_target, named.w_to_target, rtol=1e-9)
    np.testing.assert_allclose(auto.a_hat, named.a_hat, atol=1e-9)
    meta = auto.interpolate(auto.a_hat).metadata["features"]
    assert meta["chosen_by"] == "auto" and meta["space"] == "box" and "digit box" in meta["reason"]
    assert {m["space"] for m in meta["measurements"]} >= {"pixels", "box"}
    # neural maps generate images: auto is pixels for them, and says why
    neural = GeodesicConfig(method="neural", neural="tiny")
    from geoviz.geodesic.config import space_choice_for

    choice = space_choice_for(neural, [q, *refs])
    assert choice is not None and choice.name == "pixels" and "neural" in choice.reason


def test_feature_space_names_and_neural_maps_are_checked():
    from geoviz.errors import GeovizError
    from geoviz.geodesic.config import GeodesicConfig

    for bad in ("/tmp/model.pt", "resnet", 3):
        with pytest.raises(GeovizError, match="features must be one of"):
            GeodesicConfig(features=bad)  # type: ignore[arg-type]
    # refused where it enters: the configuration, before any data
    with pytest.raises(GeovizError, match="pca feature space are barycentric"):
        GeodesicConfig(features="pca", method="neural", neural="tiny")
    # a space given beside the configuration is checked by the fit
    q, *refs = _grey_problem(60)
    with pytest.raises(GeovizError, match="pca feature space are barycentric"):
        fit_in_space(q, refs, GeodesicConfig(method="neural", neural="tiny"), make_space("pca"))


def test_parts_on_threads_give_the_same_geodesic(data, tmp_path):
    target, refs = data
    serial = fit_geodesic(target, refs, cache=DiskCache(tmp_path / "serial"))
    stages: list[tuple[str, float]] = []
    threaded = fit_geodesic(
        target,
        refs,
        cache=DiskCache(tmp_path / "threads"),
        workers=3,
        progress=lambda s, f: stages.append((s, f)),
    )
    for i in range(3):
        torch.testing.assert_close(threaded.mapped_features[i], serial.mapped_features[i])
        torch.testing.assert_close(threaded.soft_labels[i], serial.soft_labels[i])
    # the same arithmetic per part; tolerances, since a BLAS may split a product differently
    # when several threads call it at once
    np.testing.assert_allclose(threaded.w_to_target, serial.w_to_target, rtol=1e-10)
    np.testing.assert_allclose(threaded.w_between, serial.w_between, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(threaded.a_hat, serial.a_hat, atol=1e-6)
    fractions = [f for _, f in stages]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    # every map and every reference pair said where it was
    said = " ".join(s for s, _ in stages)
    assert all(f"-> {ref.name}" in said for ref in refs)
    assert "label distances (3/3)" in said


def test_a_failing_part_on_a_thread_reaches_the_caller(data, cache, monkeypatch):
    target, refs = data

    def broken(*args, **kwargs):
        raise GeovizError("label distances broke")

    monkeypatch.setattr(pipeline, "label_distances", broken)
    with pytest.raises(GeovizError, match="label distances broke"):
        fit_geodesic(target, refs, cache=cache, workers=2)


def test_part_workers_are_capped_by_parts_and_memory(data, monkeypatch):
    target, refs = data
    monkeypatch.setattr(pipeline, "memory_budget_bytes", lambda: None)
    assert pipeline._part_workers(8, 6, target.n_samples, refs) == 6
    assert pipeline._part_workers(1, 6, target.n_samples, refs) == 1
    one_map = target.n_samples * max(r.n_samples for r in refs) * pipeline._MAP_BYTES_PER_PAIR
    monkeypatch.setattr(pipeline, "memory_budget_bytes", lambda: 2 * one_map + 1)
    assert pipeline._part_workers(8, 6, target.n_samples, refs) == 2
    monkeypatch.setattr(pipeline, "memory_budget_bytes", lambda: one_map // 2)
    assert pipeline._part_workers(8, 6, target.n_samples, refs) == 1
