"""The default feature space (geoviz.features.choice): the rule, on data of every kind."""

from __future__ import annotations

import dataclasses
from pathlib import Path

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
def test_grey_glyphs_get_the_digit_box(size: int | None) -> None:
    for names in (("mnist", "fashion_mnist", "kmnist"), ("usps", "mnist", "kmnist")):
        if size is None and "usps" in names:
            continue  # different sizes: the fit harmonises first
        choice = choose_space(_bundled(*names, size=size))
        assert choice.name == "box" and choice.kind == "grey glyphs"
        assert "digit box" in choice.reason and choice.label == "digit box"


def test_usps_alone_at_its_own_size_is_glyphs() -> None:
    usps = load_dataset("usps")  # 16x16, strokes near the edge
    assert is_grey(usps) and dark_plain_background(usps)


def test_colour_target_gets_the_pretrained_encoder() -> None:
    sets = _bundled("mnist_m", "mnist", "fashion_mnist", "usps")
    choice = choose_space(sets)
    assert choice.name == "encoder" and choice.encoder_preset == "pretrained"
    assert choice.kind == "images" and "colour" in choice.reason


def test_inverted_grey_glyphs_are_not_glyphs_on_dark() -> None:
    """Dark ink on white fails the plain-dark-background test: the encoder, not the box."""
    mnist, usps, kmnist = _bundled("mnist", "usps", "kmnist")
    inverted = mnist.with_features(1.0 - mnist.features, image_shape=mnist.image_shape)
    assert is_grey(inverted) and not dark_plain_background(inverted)
    choice = choose_space([inverted, usps, kmnist])
    assert choice.name == "encoder" and "not plain dark-background" in choice.reason


def test_grey_given_as_three_equal_channels_is_still_grey() -> None:
    sets = harmonize(
        [load_dataset(n) for n in ("mnist", "usps", "kmnist")], size=32, channels="rgb"
    )
    assert sets[0].image_shape == (3, 32, 32)
    assert choose_space(sets).name == "box"


def test_vectors_keep_their_raw_features() -> None:
    x = torch.randn(50, 5)
    ds = LabeledDataset(features=x, labels=torch.arange(50) % 2, classes=("a", "b"), name="vec")
    choice = choose_space([ds, ds, ds])
    assert choice.name == "pixels" and choice.kind == "vectors"
    assert choice.label == "raw features"


def test_a_target_whose_labels_trained_the_encoder_gets_one_trained_here() -> None:
    """No leakage: the shipped encoder learned USPS's labels, so a colour USPS target gets an
    encoder trained on the references only."""
    usps_colour = textured_digits(load_dataset("usps"), size=32, seed=0, name="usps")
    refs = _bundled("mnist", "fashion_mnist")
    refs = harmonize(refs, size=32, channels="rgb")
    choice = choose_space([usps_colour, *refs])
    assert choice.name == "encoder" and choice.encoder_preset == "cpu"
    assert "usps" in choice.reason
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
