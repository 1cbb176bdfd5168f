"""The shipped encoder (geoviz.features.pretrained): integrity, determinism, meaning."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from geoviz.backend import configured, runtime_settings
from geoviz.data.dataset import LabeledDataset
from geoviz.data.preprocess import harmonize
from geoviz.data.registry import load_dataset
from geoviz.data.styles import STYLES, render
from geoviz.errors import GeovizError
from geoviz.features import PretrainedEncoderSpace, make_space
from geoviz.features.encoder import EncoderConfig, EncoderNet
from geoviz.features.pretrained import (
    DEFAULT_ENCODER,
    encoder_manifest,
    encoder_path,
    fitted_encoder,
    save_encoder,
)


def test_manifest_matches_the_weights_and_names_its_data() -> None:
    manifest = encoder_manifest()
    blob = encoder_path().read_bytes()
    assert hashlib.sha256(blob).hexdigest() == manifest["sha256"]
    assert manifest["bytes"] == len(blob) < 4_000_000  # "small"
    # never an MNIST label: every bundled colour target is made of MNIST digits
    assert "mnist" not in manifest["labels_from"]
    assert manifest["command"].startswith("python scripts/train_encoder.py")
    assert set(manifest["config"]["styles"]) == set(STYLES)


def test_digest_depends_on_the_weights_not_the_data() -> None:
    a, b = harmonize([load_dataset("mnist_m"), load_dataset("mnist")], size=32, channels="rgb")
    space = make_space("encoder")
    assert isinstance(space, PretrainedEncoderSpace)
    fa, fb = space.fit([a, b]), space.fit([b, a])
    assert fa.digest == fb.digest and fa.info["preset"] == "pretrained"
    za = fa.transform(a).features
    assert za.shape == (a.n_samples, fa.dim)
    assert torch.allclose(za.norm(dim=1), torch.ones(len(za)), atol=1e-4)  # L2-normalised


def test_damaged_weights_are_refused_with_a_sentence(tmp_path: Path) -> None:
    folder = tmp_path / "encoders"
    folder.mkdir()
    shutil.copy(encoder_path(), folder / f"{DEFAULT_ENCODER}.npz")
    shutil.copy(encoder_path().with_suffix(".json"), folder / f"{DEFAULT_ENCODER}.json")
    blob = bytearray((folder / f"{DEFAULT_ENCODER}.npz").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (folder / f"{DEFAULT_ENCODER}.npz").write_bytes(bytes(blob))
    mnist = harmonize([load_dataset("mnist")], size=32)[0]
    with configured(dataclasses.replace(runtime_settings(), assets_dir=tmp_path)):
        with pytest.raises(GeovizError, match="do not match their manifest"):
            PretrainedEncoderSpace().fit([mnist])
        (folder / f"{DEFAULT_ENCODER}.json").write_text("{not json")
        with pytest.raises(GeovizError, match="unreadable"):
            PretrainedEncoderSpace().fit([mnist])


def test_save_then_load_round_trip_gives_the_same_embeddings(tmp_path: Path) -> None:
    config = EncoderConfig(size=16, width=4, dim=8, epochs=1)
    torch.manual_seed(0)
    net = EncoderNet(config.width, config.dim).eval()
    state = net.state_dict()
    save_encoder(state, config, "roundtrip", folder=tmp_path / "encoders", extra={"x": 1})
    x = torch.rand(5, 3 * 16 * 16)
    with configured(dataclasses.replace(runtime_settings(), assets_dir=tmp_path)):
        images = LabeledDataset(
            features=x, labels=[0, 1, 0, 1, 0], classes=("a", "b"), image_shape=(3, 16, 16)
        )
        fitted = PretrainedEncoderSpace("roundtrip").fit([images])
        manifest = json.loads((tmp_path / "encoders" / "roundtrip.json").read_text())
    direct = fitted_encoder(state, config, (3, 16, 16), digest="d", info={})
    assert manifest["x"] == 1
    assert fitted.encode is not None and direct.encode is not None
    assert torch.allclose(fitted.encode(x), direct.encode(x), atol=1e-6)
    with torch.no_grad():
        expected = torch.nn.functional.normalize(net(x.reshape(5, 3, 16, 16)), dim=1)
    assert torch.allclose(direct.encode(x), expected, atol=1e-5)


def test_bad_encoder_names_are_refused() -> None:
    with pytest.raises(GeovizError, match="encoder name"):
        PretrainedEncoderSpace("../../etc/passwd")


@pytest.mark.parametrize("style", ["photo", "outline", "noise"])
def test_shipped_encoder_puts_coloured_digits_near_grey_ones_of_their_class(style: str) -> None:
    """Meaning, checked against labels the encoder never saw (it learned no MNIST label):
    1-NN from coloured MNIST test digits to grey MNIST training digits in its space keeps
    the class far more often than in pixel space (measured 0.72-0.80 against 0.09-0.51;
    the OTDD maps, which also weigh the labels, keep it for 0.99)."""
    train = harmonize([load_dataset("mnist")], size=32)[0]
    test = harmonize([load_dataset("mnist", split="test")], size=32)[0]
    rgb = render(test.features.reshape(-1, 1, 32, 32), style, torch.Generator().manual_seed(5))
    colour = test.with_features(rgb.reshape(len(rgb), -1), image_shape=(3, 32, 32))
    grey = harmonize([train], size=32, channels="rgb")[0]
    fitted = PretrainedEncoderSpace().fit([colour, grey])

    def one_nn(a: torch.Tensor, b: torch.Tensor) -> float:
        nearest = torch.cdist(a, b).argmin(dim=1)
        return float((grey.labels[nearest] == colour.labels).float().mean())

    encoded = one_nn(fitted.transform(colour).features, fitted.transform(grey).features)
    pixels = one_nn(colour.features, grey.features)
    assert encoded >= 0.65 and encoded >= pixels + 0.2, (encoded, pixels)


def test_folded_batch_norm_is_the_same_function() -> None:
    """Inference folds each conv + batch norm into one conv: same embeddings, to rounding."""
    from geoviz.features.encoder import fold_batch_norm

    torch.manual_seed(0)
    net = EncoderNet(8, 16)
    with torch.no_grad():  # non-trivial running statistics, as after training
        for module in net.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
    net.eval()
    folded = fold_batch_norm(net)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())  # not mutated
    x = torch.rand(6, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(folded(x), net(x), atol=1e-4, rtol=1e-4)
