"""The default feature space (geoviz.features.choice): the rule, on data of every kind."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from geoviz.data.colour import textured_digits
from geoviz.data.dataset import LabeledDataset
from geoviz.data.preprocess import harmonize
from geoviz.data.registry import load_dataset
from geoviz.features import choose_space
from geoviz.features.choice import dark_plain_background, is_grey


def _bundled(*names: str, size: int | None = 32) -> list[LabeledDataset]:
    sets = [load_dataset(n) for n in names]
    return harmonize(sets, size=size) if size else sets


@pytest.mark.parametrize("size", [None, 32])
def test_grey_glyphs_are_measured_and_unrelated_references_are_flagged(size: int | None) -> None:
    """mnist vs fashion_mnist, kmnist: pixels and the box keep Q's classes apart equally and
    relate Q to neither reference: the cheapest is chosen, with the references' caveat."""
    choice = choose_space(_bundled("mnist", "fashion_mnist", "kmnist", size=size))
    assert choice.name in ("pixels", "box") and choice.kind == "grey glyphs"
    assert choice.reason.startswith("measured on 200 samples per dataset")
    assert choice.caveat is not None
    assert choice.caveat.startswith("The references look unrelated to Q in ")
    assert choice.caveat.endswith("the answer is computed, but do not trust it.")
    assert {m.space for m in choice.measurements} == {"pixels", "box"}  # no encoder pass


def test_grey_digits_with_usps_get_the_digit_box() -> None:
    """The default scenario: pixels and the box tie on Q, the box relates Q to usps."""
    choice = choose_space(_bundled("mnist", "fashion_mnist", "usps", "kmnist", size=28))
    assert choice.name == "box" and choice.kind == "grey glyphs"
    assert choice.label == "digit box" and choice.caveat is None
    assert "the digit box keeps Q's classes apart (5-NN κ" in choice.reason
    assert "relates Q to usps (agreement κ" in choice.reason and "pixels κ" in choice.reason
    record = choice.as_dict()
    json.dumps(record)
    assert record["caveat"] is None and record["measured_per_dataset"] == 200
    spaces = {m["space"]: m for m in record["measurements"]}
    assert spaces["box"]["agreement_kappa"]["usps"] > spaces["pixels"]["agreement_kappa"]["usps"]
    # the same datasets give the same choice
    assert choose_space(_bundled("mnist", "fashion_mnist", "usps", "kmnist", size=28)) == choice


def test_usps_alone_at_its_own_size_is_glyphs() -> None:
    usps = load_dataset("usps")  # 16x16, strokes near the edge
    assert is_grey(usps) and dark_plain_background(usps)


def test_colour_target_gets_the_pretrained_encoder() -> None:
    sets = _bundled("mnist_m", "mnist", "fashion_mnist", "usps")
    choice = choose_space(sets)
    assert choice.name == "encoder" and choice.encoder_preset == "pretrained"
    assert (
        choice.kind == "images" and "the shipped encoder keeps Q's classes apart" in choice.reason
    )
    encoder = next(m for m in choice.measurements if m.space == "encoder")
    # its scores on the references whose labels it learned are recorded, not compared
    assert set(encoder.unclean) == {"fashion_mnist", "usps"}


def test_inverted_grey_glyphs_are_not_glyphs_on_dark_but_are_measured() -> None:
    """Dark ink on white fails the plain-dark-background test (a description now): the
    space is chosen by the measurements, the box among the candidates (grey)."""
    mnist, usps, kmnist = _bundled("mnist", "usps", "kmnist")
    inverted = mnist.with_features(1.0 - mnist.features, image_shape=mnist.image_shape)
    assert is_grey(inverted) and not dark_plain_background(inverted)
    choice = choose_space([inverted, usps, kmnist])
    assert choice.kind == "images" and choice.reason.startswith("measured on 200 samples")
    assert {"pixels", "box"} <= {m.space for m in choice.measurements}


def test_grey_given_as_three_equal_channels_is_still_grey() -> None:
    sets = harmonize(
        [load_dataset(n) for n in ("mnist", "usps", "kmnist")], size=32, channels="rgb"
    )
    assert sets[0].image_shape == (3, 32, 32)
    choice = choose_space(sets)
    assert choice.kind == "grey glyphs"  # grey, so the box is a candidate ...
    # ... which refuses three channels: said, and the space is measured among the others
    assert "the digit box could not be measured" in choice.reason
    assert choice.name == "pixels"


def test_vectors_keep_their_raw_features() -> None:
    x = torch.randn(50, 5)
    ds = LabeledDataset(features=x, labels=torch.arange(50) % 2, classes=("a", "b"), name="vec")
    choice = choose_space([ds, ds, ds])
    assert choice.name == "pixels" and choice.kind == "vectors"
    assert choice.label == "raw features"
    # random labels on random vectors: measured, and flagged
    assert choice.caveat is not None and choice.caveat.startswith("None of the spaces")


def test_a_target_whose_labels_trained_the_encoder_gets_one_trained_here() -> None:
    """No leakage: the shipped encoder learned USPS's labels, so a colour USPS target gets an
    encoder trained on the references only."""
    usps_colour = textured_digits(load_dataset("usps"), size=32, seed=0, name="usps")
    refs = _bundled("mnist", "fashion_mnist")
    refs = harmonize(refs, size=32, channels="rgb")
    choice = choose_space([usps_colour, *refs])
    assert choice.name == "encoder" and choice.encoder_preset == "cpu"
    assert "usps" in choice.reason and "not measured" in choice.reason
    # the same images under another name are not known to the encoder
    renamed = dataclasses.replace(usps_colour, name="my_digits")
    assert choose_space([renamed, *refs]).encoder_preset == "pretrained"


def test_without_the_shipped_encoder_images_fall_back_to_pixels(tmp_path: Path) -> None:
    from geoviz.backend import configured, runtime_settings

    sets = _bundled("mnist_m", "mnist", "usps")
    with configured(dataclasses.replace(runtime_settings(), assets_dir=tmp_path)):
        choice = choose_space(sets)
    assert choice.name == "pixels" and "not installed" in choice.reason


@pytest.mark.parametrize("damage", ["manifest", "weights"])
def test_a_damaged_shipped_encoder_falls_back_to_pixels_saying_it_is_damaged(
    tmp_path: Path, damage: str
) -> None:
    """A damaged manifest used to read "the shipped encoder is not installed"; damaged
    weights were chosen and failed later. Both now fall back with the damage named."""
    import hashlib
    import json
    import shutil

    from geoviz.backend import configured, runtime_settings
    from geoviz.features.pretrained import encoder_path

    folder = tmp_path / "encoders"
    folder.mkdir()
    shutil.copy(encoder_path(), folder / "glyphs.npz")
    manifest = json.loads(encoder_path().with_suffix(".json").read_text())
    if damage == "manifest":
        (folder / "glyphs.json").write_text("{not json")
    else:  # junk that matches the manifest's digest and size
        junk = b"junk" * 100
        (folder / "glyphs.npz").write_bytes(junk)
        manifest.update(sha256=hashlib.sha256(junk).hexdigest(), bytes=len(junk))
        (folder / "glyphs.json").write_text(json.dumps(manifest))
    sets = _bundled("mnist_m", "mnist", "usps")
    with configured(dataclasses.replace(runtime_settings(), assets_dir=tmp_path)):
        choice = choose_space(sets)
    assert choice.name == "pixels" and "not installed" not in choice.reason
    assert f"the shipped encoder's {damage} at {folder}" in choice.reason
    assert "damaged" in choice.reason and "reinstall geoviz" in choice.reason
    assert "distances are on pixels" in choice.reason


def test_no_datasets_is_an_error() -> None:
    from geoviz.errors import GeovizError

    with pytest.raises(GeovizError, match="at least one dataset"):
        choose_space([])


# --------------------------------------------------------------------------- measurements


def test_kappa_of_separated_clusters_is_one_and_of_shuffled_labels_about_zero() -> None:
    from geoviz.features.structure import kappa, loo_knn_kappa

    gen = torch.Generator().manual_seed(0)
    labels = torch.arange(300) % 3
    z = torch.randn(300, 4, generator=gen) * 0.1 + 10.0 * labels[:, None].float()
    assert loo_knn_kappa(z, labels) == pytest.approx(1.0)
    shuffled = labels[torch.randperm(300, generator=gen)]
    assert abs(loo_knn_kappa(z, shuffled)) < 0.15
    assert kappa(0.1, 10) == pytest.approx(0.0) and kappa(1.0, 10) == pytest.approx(1.0)
    # relabelling the classes changes nothing
    relabelled = torch.tensor([2, 0, 1])[shuffled]
    assert loo_knn_kappa(z, relabelled) == pytest.approx(loo_knn_kappa(z, shuffled))


def test_ami_is_sklearns_and_invariant_to_relabelling() -> None:
    from sklearn.metrics import adjusted_mutual_info_score

    from geoviz.features.structure import adjusted_mutual_info, agreement_kappa, nearest_ami

    rng = np.random.default_rng(0)
    a = rng.integers(0, 10, 200)
    for b in (a, (a + 3) % 10, rng.integers(0, 10, 200), np.where(rng.random(200) < 0.6, a, 0)):
        assert adjusted_mutual_info(a, b) == pytest.approx(
            adjusted_mutual_info_score(a, b), abs=1e-4
        )
    assert adjusted_mutual_info(a, (a + 3) % 10) == pytest.approx(1.0)
    assert abs(adjusted_mutual_info(a, rng.integers(0, 10, 200))) < 0.05
    # Q and a reference of the same clusters: agreement 1, AMI 1, under any class numbering
    labels = torch.arange(100) % 4
    z = 10.0 * labels[:, None].float() + 0.01 * torch.randn(100, 3)
    names = [f"c{int(i)}" for i in labels]
    assert agreement_kappa(z, names, z + 0.001, names) == pytest.approx(1.0)
    assert nearest_ami(z, labels, z, (labels + 1) % 4) == pytest.approx(1.0)


def test_a_colour_style_gets_the_shipped_encoder_by_measurement() -> None:
    from geoviz.data.styles import render

    mnist = load_dataset("mnist")
    ink = mnist.features.reshape(-1, 1, 28, 28)
    rgb = render(ink, "gradient", torch.Generator().manual_seed(0))
    styled = mnist.with_features(rgb.reshape(len(rgb), -1), image_shape=(3, 28, 28))
    styled = dataclasses.replace(styled, name="mnist:gradient")
    refs = harmonize([load_dataset(n) for n in ("mnist", "fashion_mnist", "usps")], size=28)
    refs = harmonize(refs, size=28, channels="rgb")
    choice = choose_space([styled, *refs])
    assert choice.name == "encoder" and choice.label == "pretrained encoder"
    assert choice.caveat is None and "relates Q to mnist" in choice.reason
    pixels = next(m for m in choice.measurements if m.space == "pixels")
    encoder = next(m for m in choice.measurements if m.space == "encoder")
    assert encoder.q_kappa is not None and pixels.q_kappa is not None
    assert encoder.q_kappa > pixels.q_kappa + 0.15


def test_shuffled_labels_get_the_no_structure_caveat() -> None:
    mnist, usps, fashion = _bundled("mnist", "usps", "fashion_mnist", size=28)
    perm = torch.randperm(mnist.n_samples, generator=torch.Generator().manual_seed(0))
    shuffled = dataclasses.replace(mnist, labels=mnist.labels[perm], name="shuffled")
    choice = choose_space([shuffled, usps, fashion])
    assert choice.caveat is not None
    assert choice.caveat.startswith("None of the spaces shows class structure in Q (best 5-NN κ")
    assert "below 0.2): the answer is computed, but do not trust it." in choice.caveat
    assert choice.as_dict()["caveat"] == choice.caveat


def _photo_regions(n: int = 200) -> LabeledDataset:
    """32x32 crops of scikit-learn's two sample photos, 5 vertical regions each (10 classes),
    as bench_space_choice.py."""
    from sklearn.datasets import load_sample_images

    rng = np.random.default_rng(0)
    crops, labels, classes = [], [], []
    for i, img in enumerate(load_sample_images().images):
        photo = img.astype(np.float32) / 255.0
        h, w = photo.shape[:2]
        for r in range(5):
            classes.append(f"photo{i}_{r}")
            for _ in range(n // 10):
                y0 = int(rng.integers(0, h - 32))
                x0 = r * w // 5 + int(rng.integers(0, w // 5 - 32))
                crops.append(photo[y0 : y0 + 32, x0 : x0 + 32].transpose(2, 0, 1))
                labels.append(len(classes) - 1)
    x = np.stack(crops)
    return LabeledDataset(
        features=torch.from_numpy(x.reshape(len(x), -1)),
        labels=torch.tensor(labels),
        classes=tuple(classes),
        name="photo_regions",
        image_shape=(3, 32, 32),
    )


def test_photos_never_get_the_glyph_encoders_claim() -> None:
    refs = harmonize(_bundled("mnist", "fashion_mnist"), size=32, channels="rgb")
    choice = choose_space([_photo_regions(), *refs])
    assert choice.reason.startswith("measured on 200 samples per dataset")
    assert "shape, not colour" not in choice.reason
    assert choice.caveat is not None
    assert choice.caveat.startswith("The references look unrelated to Q in ")


def test_a_few_shot_target_is_scored_on_its_labelled_points_only() -> None:
    sets = _bundled("mnist", "usps", "fashion_mnist", size=28)
    labelled = np.concatenate([np.flatnonzero(sets[0].labels.numpy() == c)[:10] for c in range(10)])
    choice = choose_space(sets, labelled=labelled)
    assert all(m.q_score == "labelled 1-NN" for m in choice.measurements)
    assert choice.name == "box"
