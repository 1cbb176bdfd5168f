"""A user's model (geoviz.features.models): it is the user's code, so it gets copies of the
data, its output is checked, its failures are quoted, and its file is read only when it is
a regular file of bounded size (issue 32)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hostile_files import make_fifo, make_sparse, needs_posix_files, run_cases
from synthetic_data import bars, ring_blobs

from geoviz import files
from geoviz.errors import GeovizError, ResourceError
from geoviz.features import ModelSpace
from geoviz.features.models import MAX_INPUT_SIZE
from geoviz.geodesic.pipeline import fit_in_space


class _InPlace(torch.nn.Module):
    """The reported model: shifts its input in place, then returns it flattened."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.sub_(0.5)
        return x.reshape(x.shape[0], -1)


class _Raises(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 0:
            raise RuntimeError("boom: cause here")
        return x


class _Complex(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(x.shape[0], -1)
        return torch.complex(flat, flat)


def _scripted(module: torch.nn.Module, path: Path) -> Path:
    torch.jit.save(torch.jit.script(module), str(path))
    return path


@pytest.fixture
def problem():
    """Q and two references, 1x16x16 images, 40 samples each."""
    return [bars(40, seed) for seed in (0, 1, 2)]


# ----------------------------------------------------------------- the model gets a copy
@pytest.mark.parametrize("channels", [None, 3])
def test_an_in_place_model_leaves_the_datasets_unchanged(problem, tmp_path, channels):
    saved = [ds.features.clone() for ds in problem]
    path = _scripted(_InPlace(), tmp_path / "inplace.pt")
    space = ModelSpace.from_torchscript(path, channels=channels, batch_size=16)
    fitted = space.fit(problem)
    feats = [fitted.transform(ds).features for ds in problem]
    for ds, before in zip(problem, saved, strict=True):
        assert torch.equal(ds.features, before)  # not one pixel moved
    # the features are those of the model on fresh copies of the data
    fresh = ModelSpace.from_torchscript(path, channels=channels)
    for ds, before, got in zip(problem, saved, feats, strict=True):
        copy = type(ds)(before.clone(), ds.labels, ds.classes, image_shape=ds.image_shape)
        expected = fresh.fit([copy]).transform(copy).features
        torch.testing.assert_close(got, expected)
        assert float(got.min()) >= -0.5 - 1e-6 and float(got.max()) <= 0.5 + 1e-6


def test_an_in_place_model_leaves_vector_datasets_unchanged(tmp_path):
    data = [ring_blobs(30, seed, 3, f"d{seed}") for seed in (0, 1)]
    saved = [ds.features.clone() for ds in data]
    fitted = ModelSpace(_InPlace(), name="inplace").fit(data)
    for ds, before in zip(data, saved, strict=True):
        torch.testing.assert_close(fitted.transform(ds).features, before - 0.5)
        assert torch.equal(ds.features, before)


def test_the_mapped_images_stay_in_range_with_an_in_place_model(problem):
    """The reported symptom: P_a's images ranged from -2 to 1.87 with rc 0."""
    q, *refs = problem
    result = fit_in_space(q, refs, None, ModelSpace(_InPlace(), name="inplace"))
    for ds in (q, *refs):
        assert float(ds.features.min()) >= 0.0 and float(ds.features.max()) <= 1.0
    for mapped in result.mapped_features:
        assert float(mapped.min()) >= -1e-5 and float(mapped.max()) <= 1.0 + 1e-5


# ----------------------------------------------------------------- the output is checked
def test_complex_output_is_refused_not_truncated(problem, tmp_path):
    path = _scripted(_Complex(), tmp_path / "cplx.pt")
    with pytest.raises(GeovizError, match=r"complex features .* real numbers"):
        ModelSpace.from_torchscript(path).fit(problem)
    with pytest.raises(GeovizError, match="complex"):
        ModelSpace(lambda x: np.ones((x.shape[0], 3), dtype=np.complex64)).fit(problem)


def test_non_finite_output_names_the_model_and_the_batch(problem):
    def late_nan(x: torch.Tensor) -> torch.Tensor:
        out = x.reshape(x.shape[0], -1)[:, :4].clone()
        if out.shape[0] == 8:  # the last batch of 40 = 16 + 16 + 8
            out[0, 0] = float("inf")
        return out

    fitted = ModelSpace(late_nan, name="late", batch_size=16).fit(problem)
    with pytest.raises(GeovizError) as info:
        fitted.transform(problem[1])
    message = str(info.value)
    assert "the model late" in message and "NaN or infinite" in message
    assert "batch 3 of 3 (samples 32-39 of" in message


def test_a_feature_width_that_changes_between_batches_is_refused(problem):
    def ragged(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], -1)[:, : 3 + (x.shape[0] % 16)]

    fitted = ModelSpace(ragged, name="ragged", batch_size=16).fit(problem)
    with pytest.raises(GeovizError, match=r"same number for every batch") as info:
        fitted.transform(problem[0])
    assert "batch 1 of 3" in str(info.value)  # 3 features here, 5 at the probe


@pytest.mark.parametrize(
    ("output", "pattern"),
    [
        (lambda x: x.reshape(-1)[: x.shape[0]], r"returned shape \(2,\) for 2 inputs"),
        (lambda x: torch.tensor(1.0), r"returned shape \(\) for 2 inputs"),
        (lambda x: np.array([["a"]] * x.shape[0]), "not numbers"),
        (lambda x: torch.zeros(x.shape[0], 3).to_sparse(), "dense tensor"),
    ],
)
def test_outputs_of_the_wrong_rank_or_kind_are_refused(problem, output, pattern):
    with pytest.raises(GeovizError, match=pattern):
        ModelSpace(output, name="odd").fit(problem)


# ----------------------------------------------------------------- failures are quoted
def test_a_torchscript_failure_quotes_the_last_line_of_its_error(problem, tmp_path):
    path = _scripted(_Raises(), tmp_path / "raises.pt")
    with pytest.raises(GeovizError) as info:
        ModelSpace.from_torchscript(path).fit(problem)
    message = str(info.value)
    assert "cause here" in message and "the model raises failed" in message
    assert "\n" not in message and "Traceback" not in message


# ----------------------------------------------------------------- the input size is bounded
def test_the_model_input_size_is_bounded_and_names_the_option():
    with pytest.raises(GeovizError, match=r"--features-size.*between 1 and 512, got 2,000"):
        ModelSpace(lambda x: x, input_size=2000)
    assert ModelSpace(lambda x: x, input_size=MAX_INPUT_SIZE).input_size == MAX_INPUT_SIZE


def test_one_batch_is_made_smaller_and_checked_against_memory(problem, monkeypatch):
    space = ModelSpace(lambda x: x.mean(dim=(2, 3)), input_size=512, channels=3, batch_size=256)
    fitted = space.fit(problem)
    per_image = 4 * 3 * 512 * 512
    assert fitted.batch_size * per_image <= 256 * 2**20 < 256 * per_image
    monkeypatch.setattr("geoviz.memory.memory_limit", lambda: (10 * 2**20, "a test limit"))
    with pytest.raises(ResourceError, match="one batch of the model"):
        space.fit(problem)


# ----------------------------------------------------------------- only regular files
def test_model_files_that_are_not_regular_files_are_refused_quickly(tmp_path):
    """A FIFO blocked open() and /dev/zero was read until the memory limit (issue 32)."""
    needs_posix_files()
    fifo = make_fifo(tmp_path / "model.pt")
    huge = make_sparse(tmp_path / "huge.pt", 3 * 1024**3)
    results = run_cases(
        f"""
        from geoviz.features import ModelSpace
        CASES = {{
            name: (lambda p=p: ModelSpace.from_torchscript(p))
            for name, p in [
                ("fifo", {str(fifo)!r}),
                ("dev-zero", "/dev/zero"),
                ("directory", {str(tmp_path)!r}),
                ("sparse", {str(huge)!r}),
            ]
        }}
        """
    )
    expected = {
        "fifo": "the model file model.pt is a named pipe (FIFO), not a regular file",
        "dev-zero": "the model file zero is a character device, not a regular file",
        "directory": f"the model file {tmp_path.name} is a directory, not a regular file",
        "sparse": "the model file huge.pt is 3.00 GiB, larger than the 2.00 GiB geoviz reads",
    }
    for case, start in expected.items():
        kind, message = results[case]
        assert kind == "GeovizError" and message.startswith(start), (case, kind, message)


def test_weights_files_go_through_the_same_check(tmp_path):
    pytest.importorskip("torchvision")
    with pytest.raises(GeovizError, match="is a directory, not a regular file"):
        ModelSpace.from_torchvision("resnet18", weights=tmp_path)


def test_the_model_size_bound_can_be_changed(tmp_path, monkeypatch):
    path = _scripted(torch.nn.Flatten(), tmp_path / "flat.pt")
    monkeypatch.setattr(files, "MAX_MODEL_BYTES", 100)
    with pytest.raises(GeovizError, match=r"the model file flat\.pt is .* larger than"):
        ModelSpace.from_torchscript(path)


def test_the_cli_reports_a_models_cause_and_the_size_bound(tmp_path, capsys):
    from geoviz.cli import main

    digits = [
        "--target",
        "mnist",
        "--refs",
        "usps,fashion_mnist",
        "--n",
        "30",
        "--size",
        "16",
        "--quiet",
    ]
    path = _scripted(_Raises(), tmp_path / "raises.pt")
    assert main(["project", *digits, "--features-model", str(path)]) == 2
    err = capsys.readouterr().err
    assert "RuntimeError: boom: cause here" in err and "Traceback" not in err
    args = ["project", *digits, "--features-model", str(path), "--features-size", "2000"]
    assert main(args) == 2
    assert "--features-size) must be between 1 and 512, got 2,000" in capsys.readouterr().err
