"""Feature spaces (geoviz.features): the contract on small data, and bad models."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from geoviz.backend import DiskCache
from geoviz.data.colour import photo_digits, textured_digits
from geoviz.data.dataset import LabeledDataset
from geoviz.data.preprocess import harmonize
from geoviz.data.registry import load_dataset
from geoviz.errors import DatasetError, GeovizError
from geoviz.features import (
    BoxSpace,
    EncoderSpace,
    ModelSpace,
    PCASpace,
    PixelSpace,
    check_feature_output,
    make_space,
    register_model,
)
from geoviz.geodesic.config import GeodesicConfig
from geoviz.geodesic.pipeline import fit_geodesic


@pytest.fixture(scope="module")
def grey_problem():
    """Q = 120 MNIST test digits, references 120 MNIST / Fashion-MNIST / USPS (16x16 grey)."""
    q = load_dataset("mnist", split="test", n=120, seed=0)
    refs = [load_dataset(n, n=120, seed=0) for n in ("mnist", "fashion_mnist", "usps")]
    return harmonize([q, *refs], size=16, channels="grey")


@pytest.fixture(scope="module")
def colour_problem(grey_problem):
    q, *refs = grey_problem
    colour = photo_digits(q, size=16, seed=1)
    return harmonize([colour, *refs], size=16, channels="rgb")


def test_pixel_space_is_the_identity(grey_problem):
    fitted = PixelSpace().fit(grey_problem)
    assert fitted.is_identity and fitted.name == "pixels" and fitted.digest == "pixels"
    assert fitted.transform(grey_problem[0]) is grey_problem[0]


def test_an_identity_model_gives_pixel_space_results(grey_problem, tmp_path):
    cache = DiskCache(tmp_path)
    fitted = ModelSpace(lambda x: x, name="identity").fit(grey_problem)
    feats = [fitted.transform(ds) for ds in grey_problem]
    for a, b in zip(feats, grey_problem, strict=True):
        torch.testing.assert_close(a.features, b.features)
        assert torch.equal(a.labels, b.labels) and a.classes == b.classes
    in_model = fit_geodesic(feats[0], feats[1:], cache=cache)
    pixels = GeodesicConfig(features="pixels")
    in_pixels = fit_geodesic(grey_problem[0], grey_problem[1:], pixels, cache=cache)
    np.testing.assert_allclose(in_model.w_to_target, in_pixels.w_to_target, rtol=1e-6)
    np.testing.assert_allclose(in_model.a_hat, in_pixels.a_hat, atol=1e-6)


@pytest.mark.parametrize("make", [lambda c: PCASpace(8), lambda c: EncoderSpace("tiny", cache=c)])
def test_fitted_twice_same_digest_and_features(grey_problem, tmp_path, make):
    cache = DiskCache(tmp_path)
    first = make(cache).fit(grey_problem)
    second = make(cache).fit(grey_problem)
    assert first.digest == second.digest and len(first.digest) == 64
    torch.testing.assert_close(
        first.transform(grey_problem[0]).features, second.transform(grey_problem[0]).features
    )
    # other data, another digest
    other = make(cache).fit(grey_problem[:3])
    assert other.digest != first.digest


def test_encoder_is_cached_on_disk(grey_problem, tmp_path):
    cache = DiskCache(tmp_path)
    EncoderSpace("tiny", cache=cache).fit(grey_problem)
    misses = cache.misses_
    EncoderSpace("tiny", cache=DiskCache(tmp_path)).fit(grey_problem)  # a restart
    assert cache.misses_ == misses
    assert any((tmp_path / "feature_encoder").iterdir())


def test_encoder_features_of_a_dataset_are_read_back_not_recomputed(grey_problem, tmp_path):
    """A second run on the same pixels reads the vectors from the cache; other pixels or
    another fitted space run the network."""
    from dataclasses import replace

    fitted = EncoderSpace("tiny", cache=DiskCache(tmp_path)).fit(grey_problem)
    first = fitted.transform(grey_problem[1])

    def must_not_run(x: torch.Tensor) -> torch.Tensor:
        raise AssertionError("the network ran for features that are cached")

    restarted = replace(fitted, encode=must_not_run, cache=DiskCache(tmp_path))
    again = restarted.transform(grey_problem[1])
    assert torch.equal(again.features, first.features)
    # relabelled: same pixels, same vectors (labels never enter the key)
    relabelled = replace(grey_problem[1], labels=(grey_problem[1].labels + 1) % 10)
    assert torch.equal(restarted.transform(relabelled).features, first.features)
    with pytest.raises(AssertionError, match="network ran"):
        restarted.transform(grey_problem[2])
    with pytest.raises(AssertionError, match="network ran"):
        replace(restarted, digest="another fit").transform(grey_problem[1])


@pytest.mark.parametrize(
    "make",
    [lambda: PCASpace(6), lambda: EncoderSpace("tiny", cache=DiskCache(enabled=False))],
    ids=["pca", "encoder"],
)
def test_features_follow_a_permutation_of_the_samples(colour_problem, make):
    fitted = make().fit(colour_problem)
    q = colour_problem[0]
    perm = torch.randperm(q.n_samples, generator=torch.Generator().manual_seed(0))
    permuted = q.subset(perm)
    torch.testing.assert_close(
        fitted.transform(permuted).features, fitted.transform(q).features[perm], atol=1e-5, rtol=0
    )


def test_encoder_features_are_unit_vectors_and_the_space_says_what_it_is(colour_problem):
    fitted = EncoderSpace("tiny", cache=DiskCache(enabled=False)).fit(colour_problem)
    z = fitted.transform(colour_problem[0])
    assert z.image_shape is None and z.n_features == 16
    torch.testing.assert_close(z.features.norm(dim=1), torch.ones(z.n_samples))
    assert z.name == colour_problem[0].name and torch.equal(z.labels, colour_problem[0].labels)
    manifest = fitted.manifest()
    assert manifest["name"] == "encoder" and manifest["digest"] == fitted.digest
    assert manifest["trained_on"] > 0


def test_box_space_needs_grey_images(grey_problem, colour_problem):
    fitted = BoxSpace().fit(grey_problem)
    assert fitted.transform(grey_problem[1]).n_features == 28 * 28
    with pytest.raises(DatasetError, match="grey digit images"):
        BoxSpace().fit(colour_problem)


def test_bad_models_give_clear_errors(grey_problem, tmp_path):
    n = grey_problem[0].n_samples
    with pytest.raises(GeovizError, match=r"returned shape \(1, 4\)"):
        ModelSpace(lambda x: torch.zeros(1, 4), name="short").fit(grey_problem)
    with pytest.raises(GeovizError, match="NaN or infinite features"):
        ModelSpace(lambda x: torch.full((x.shape[0], 3), float("nan")), name="nan").fit(
            grey_problem
        )
    with pytest.raises(GeovizError, match="not a tensor"):
        ModelSpace(lambda x: "features", name="text").fit(grey_problem)
    with pytest.raises(GeovizError, match="failed on inputs of shape"):
        ModelSpace(torch.nn.Linear(5, 3), name="wrong-width").fit(grey_problem)
    with pytest.raises(GeovizError, match="must be callable"):
        ModelSpace("not a model")  # type: ignore[arg-type]
    garbage = tmp_path / "model.pt"
    garbage.write_bytes(b"\x00not a torchscript file")
    with pytest.raises(GeovizError, match=r"model\.pt is not a TorchScript model"):
        ModelSpace.from_torchscript(garbage)
    with pytest.raises(GeovizError, match="cannot read the model file"):
        ModelSpace.from_torchscript(tmp_path / "missing.pt")
    with pytest.raises(GeovizError):
        ModelSpace.from_torchvision("resnet18")  # no weights offline (or no torchvision)
    assert check_feature_output(torch.ones(n, 7, 1, 1), n, "m").shape == (n, 7)


def test_a_torchscript_file_gives_the_modules_features(grey_problem, tmp_path):
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(256, 5), torch.nn.Tanh())
    path = tmp_path / "tiny_net.pt"
    torch.jit.save(torch.jit.script(module), str(path))
    direct = ModelSpace(module, name="tiny_net", channels=1).fit(grey_problem)
    loaded = ModelSpace.from_torchscript(path, channels=1).fit(grey_problem)
    assert loaded.name == "model:tiny_net" and loaded.dim == 5
    torch.testing.assert_close(
        loaded.transform(grey_problem[2]).features, direct.transform(grey_problem[2]).features
    )


def test_names_never_open_paths():
    assert isinstance(make_space("pixels"), PixelSpace)
    for bad in ("/etc/passwd", "../model.pt", "model:unregistered", "resnet18", ""):
        with pytest.raises(GeovizError, match="unknown feature space"):
            make_space(bad)
    register_model("identity-test", lambda: ModelSpace(lambda x: x, name="identity-test"))
    assert make_space("model:identity-test").name == "model:identity-test"
    with pytest.raises(GeovizError):
        register_model("../x", lambda: ModelSpace(lambda x: x))


def test_spaces_refuse_mixed_shapes(grey_problem, colour_problem):
    with pytest.raises(DatasetError, match="one shape"):
        PCASpace(4).fit([grey_problem[0], colour_problem[0]])
    with pytest.raises(DatasetError, match="at least one"):
        PCASpace(4).fit([])


def test_colour_targets_keep_labels_and_are_deterministic():
    digits = load_dataset("mnist", split="test", n=50, seed=0)
    for build in (photo_digits, textured_digits):
        a, b = build(digits, size=16, seed=3), build(digits, size=16, seed=3)
        assert a.image_shape == (3, 16, 16) and torch.equal(a.features, b.features)
        assert torch.equal(a.labels, digits.labels) and a.classes == digits.classes
        assert not torch.equal(a.features, build(digits, size=16, seed=4).features)
        assert float(a.features.min()) >= 0.0 and float(a.features.max()) <= 1.0
        # the colour varies between samples (not a grey copy)
        rgb = a.features.reshape(-1, 3, 256)
        assert float((rgb[:, 0] - rgb[:, 1]).abs().mean()) > 0.02
    vectors = LabeledDataset(features=np.zeros((4, 3)), labels=[0, 1, 0, 1], classes=("a", "b"))
    with pytest.raises(DatasetError, match="image datasets"):
        photo_digits(vectors)


def test_digests_ignore_the_labels_a_space_does_not_read(grey_problem):
    """Q with true labels and Q with pseudo-labels fit the same space (one cache entry);
    the references' labels train the encoder's heads, so they count there."""
    q, *refs = grey_problem
    relabelled_q = LabeledDataset(
        features=q.features,
        labels=torch.roll(q.labels, 1),
        classes=q.classes,
        name=q.name,
        image_shape=q.image_shape,
    )
    relabelled_ref = LabeledDataset(
        features=refs[0].features,
        labels=torch.roll(refs[0].labels, 1),
        classes=refs[0].classes,
        name=refs[0].name,
        image_shape=refs[0].image_shape,
    )
    encoder = EncoderSpace("tiny", cache=DiskCache(enabled=False))
    assert encoder._digest_of([q, *refs]) == encoder._digest_of([relabelled_q, *refs])
    assert encoder._digest_of([q, *refs]) != encoder._digest_of([q, relabelled_ref, *refs[1:]])
    pca = PCASpace(4)
    assert pca._digest_of([q, *refs]) == pca._digest_of([relabelled_q, relabelled_ref, *refs[1:]])


def test_few_shot_pseudo_labels_in_a_given_embedding(grey_problem):
    from geoviz.data.preprocess import few_shot

    q = grey_problem[0]
    # an embedding that is the true class: every pseudo-label is right
    onehot = torch.nn.functional.one_hot(q.labels, q.n_classes).float()
    fs = few_shot(q, 2, seed=0, embedding=onehot)
    assert fs.pseudo_label_accuracy == 1.0
    torch.testing.assert_close(fs.dataset.features, q.features)  # its own features
    with pytest.raises(DatasetError, match="rows for"):
        few_shot(q, 2, seed=0, embedding=onehot[:-1])


def test_few_shot_targets_are_pseudo_labelled_in_the_feature_space(tmp_path, monkeypatch):
    from geoviz.data.choice import DatasetChoice, FewShotOptions
    from geoviz.data.preprocess import few_shot
    from geoviz.geodesic.config import GeodesicConfig
    from geoviz.geodesic.spec import GeodesicSpec, load_spec_datasets

    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path))
    spec = GeodesicSpec(
        target=DatasetChoice("mnist_m"),
        references=(DatasetChoice("mnist"), DatasetChoice("usps")),
        n_target=200,
        n_reference=200,
        image_size=16,
        few_shot=FewShotOptions(enabled=True, k=3),
        config=GeodesicConfig(features="pca"),
    )
    loaded = load_spec_datasets(spec)
    target, refs = loaded.target_true, list(loaded.references)
    z = PCASpace(50).fit([target, *refs]).transform(target).features
    expected = few_shot(target, 3, seed=spec.seed, embedding=z)
    assert torch.equal(loaded.target.labels, expected.dataset.labels)
    in_pixels = few_shot(target, 3, seed=spec.seed)
    assert loaded.pseudo_label_accuracy == pytest.approx(expected.pseudo_label_accuracy)
    assert not torch.equal(loaded.target.labels, in_pixels.dataset.labels)


@pytest.mark.parametrize("name", ["pca", "box", "encoder"])
def test_a_fitted_space_pickles_and_encodes_the_same_after(name, tmp_path):
    """A background job sends its geodesic, fitted space included, to a child process."""
    import pickle

    from geoviz.data.preprocess import harmonize
    from geoviz.data.registry import load_dataset

    sets = harmonize([load_dataset(n, n=60) for n in ("mnist", "usps")], size=16)
    fitted = make_space(name, cache=DiskCache(tmp_path)).fit(sets)
    again = pickle.loads(pickle.dumps(fitted))
    torch.testing.assert_close(
        again.transform(sets[0]).features, fitted.transform(sets[0]).features
    )
