"""The shipped encoder's embedding pass (:class:`geoviz.features.encoder.NetEncode`):
channels-last layout, chunks, and the per-process memory of embedded images."""

from __future__ import annotations

import pickle

import pytest
import torch

from geoviz.features import encoder as encoder_module
from geoviz.features.encoder import ENCODE_CHUNK, EncoderNet, NetEncode, _to_rgb, fold_batch_norm
from geoviz.features.pretrained import DEFAULT_ENCODER, load_encoder


def _shipped(shape: tuple[int, int, int] = (3, 28, 28)) -> NetEncode:
    enc = load_encoder(DEFAULT_ENCODER)
    net = EncoderNet(enc.config.width, enc.config.dim)
    net.load_state_dict(enc.state)
    return NetEncode(net, shape, enc.config.size, torch.device("cpu"))


@pytest.mark.parametrize("threads", [1, 2])
def test_an_images_embedding_does_not_depend_on_its_batch_or_the_memo(threads: int):
    """Bit for bit: the memo may hand back an embedding computed in another batch (with 2
    threads a short chunk's convolutions round differently unless it is padded)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        _check_batch_independence()
    finally:
        torch.set_num_threads(before)


def _check_batch_independence() -> None:
    encode = _shipped()
    x = torch.rand(3 * ENCODE_CHUNK + 5, 3 * 28 * 28, generator=torch.Generator().manual_seed(0))
    encoder_module._MEMO.clear()
    whole = encode(x)
    encoder_module._MEMO.clear()
    part = encode(x[40:150])
    assert torch.equal(whole[40:150], part)
    # now mostly remembered: the same rows, in the caller's order
    again = encode(x.flip(0))
    assert torch.equal(again, whole.flip(0))


def test_channels_last_pass_is_the_nchw_function_to_rounding():
    """The fast layout computes what the plain folded network computes (float32 rounding)."""
    enc = load_encoder(DEFAULT_ENCODER)
    net = EncoderNet(enc.config.width, enc.config.dim)
    net.load_state_dict(enc.state)
    plain = fold_batch_norm(net)
    encode = NetEncode(net, (1, 28, 28), enc.config.size, torch.device("cpu"))
    x = torch.rand(70, 28 * 28, generator=torch.Generator().manual_seed(1))
    encoder_module._MEMO.clear()
    with torch.no_grad():
        ref = torch.nn.functional.normalize(plain(_to_rgb(x, (1, 28, 28), enc.config.size)), dim=1)
    assert float((encode(x) - ref).abs().max()) < 1e-4


def test_memo_is_keyed_by_the_weights_and_survives_pickling():
    """Another network never receives this one's embeddings; a pickled encoder still works."""
    first = _shipped()
    other_net = EncoderNet(8, 64)
    other = NetEncode(other_net, (3, 28, 28), 32, torch.device("cpu"))
    assert first.key != other.key
    x = torch.rand(4, 3 * 28 * 28, generator=torch.Generator().manual_seed(2))
    a, b = first(x), other(x)
    assert not torch.allclose(a, b)
    copy = pickle.loads(pickle.dumps(first))
    assert torch.equal(copy(x), a)


def test_the_chunk_loop_reports_the_images_done():
    """``progress(done)`` after each chunk of ENCODE_CHUNK, the remembered images at once."""
    encode = _shipped()
    assert encode.reports_progress
    x = torch.rand(2 * ENCODE_CHUNK + 5, 3 * 28 * 28, generator=torch.Generator().manual_seed(3))
    encoder_module._MEMO.clear()
    counts: list[int] = []
    plain = encode(x[:10])  # remembered from now on
    z = encode(x, progress=counts.append)
    assert counts == [10 + ENCODE_CHUNK, x.shape[0]]  # 123 new images: chunks of 64 and 59
    assert torch.equal(z[:10], plain)


def test_the_fit_says_how_many_images_are_encoded(tmp_path, monkeypatch):
    """The feature stage of a fit: "encoder: encoding N/M images" over all its datasets, to
    the last image, through the progress the pipeline passes (issue 45 item 1)."""
    from geoviz.data.dataset import LabeledDataset
    from geoviz.features.pretrained import PretrainedEncoderSpace
    from geoviz.geodesic import pipeline
    from geoviz.geodesic.config import GeodesicConfig

    gen = torch.Generator().manual_seed(4)

    def images(n: int, name: str) -> LabeledDataset:
        x = torch.rand(n, 3 * 28 * 28, generator=gen)
        return LabeledDataset(
            x, torch.arange(n) % 2, ("a", "b"), name=name, image_shape=(3, 28, 28)
        )

    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "cache"))  # the vectors are encoded
    encoder_module._MEMO.clear()
    datasets = [images(1100, "q"), images(150, "p1"), images(90, "p2")]
    seen: list[tuple[str, float]] = []
    _fitted, q, refs = pipeline._into_feature_space(
        PretrainedEncoderSpace(),
        GeodesicConfig(features="encoder"),
        datasets[0],
        tuple(datasets[1:]),
        lambda stage, f: seen.append((stage, f)),
    )
    encoding = [(s, f) for s, f in seen if "encoding" in s]
    assert encoding[-1] == ("encoder: encoding 1,340/1,340 images", 0.3)
    # one report at least at each dataset's end, none going back
    for count in ("1,100/", "1,250/"):
        assert any(count in s for s, _ in encoding)
    assert [f for _, f in encoding] == sorted(f for _, f in encoding)
    assert q.n_samples == 1100 and [r.n_samples for r in refs] == [150, 90]
