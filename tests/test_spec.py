"""GeodesicSpec, load_spec_datasets, DatasetChoice.named, as_simplex_weights, RuntimeSettings
and fingerprint (issue 17: one spec for every front-end, values validated once)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

import geoviz.geodesic.weights as weights_module
from geoviz import backend
from geoviz.app.scenario import Scenario
from geoviz.app.settings import AppSettings, default_scenario
from geoviz.data.choice import DatasetChoice, FewShotOptions, load_choice
from geoviz.data.preprocess import few_shot
from geoviz.data.registry import load_dataset
from geoviz.errors import DatasetError, GeovizError, WeightsError
from geoviz.features import ModelSpace
from geoviz.features.choice import SpaceChoice
from geoviz.geodesic.config import GeodesicConfig
from geoviz.geodesic.pipeline import fit_in_space
from geoviz.geodesic.spec import GeodesicSpec, fit_spec, load_spec_datasets
from geoviz.geodesic.weights import SimplexWeights, as_simplex_weights
from geoviz.ot.otdd_cost import OTDDConfig

NIST = ("fashion_mnist", "usps", "kmnist")
REFS = (DatasetChoice("usps"), DatasetChoice("kmnist"))


def _spec(**changes) -> GeodesicSpec:
    base = {
        "target": DatasetChoice("mnist"),
        "references": tuple(DatasetChoice(n) for n in NIST),
        "n_target": 30,
        "n_reference": 30,
    }
    return GeodesicSpec(**{**base, **changes})


# --------------------------------------------------------------------------- GeodesicSpec


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"references": (DatasetChoice("usps"),)}, "2 to 10 reference datasets P_i, got 1"),
        ({"n_target": 1}, "n_target must be between 10"),
        ({"seed": -1}, "seed must be between 0"),
        ({"image_size": 1000}, "image_size must be between 4 and 128"),
        ({"channels": "cmyk"}, "channels must be 'auto', 'grey' or 'rgb'"),
        ({"target": "mnist"}, "must be DatasetChoice values"),
        ({"config": {"epsilon": 0.01}}, "config must be a GeodesicConfig"),
        ({"features_model": "model.pt"}, "features_model must be a FeatureSpace"),
    ],
)
def test_spec_refuses_bad_values(changes, message) -> None:
    with pytest.raises(DatasetError, match=message):
        _spec(**changes)


def _linear_model_space() -> ModelSpace:
    """A user's model: a fixed random linear projection of 16x16 grey images to 6 features."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(256, 6))
    return ModelSpace(net.eval(), name="mine", input_size=16, channels=1, device="cpu")


def test_a_users_model_travels_in_the_spec_and_is_checked_there() -> None:
    model = _linear_model_space()
    with pytest.raises(DatasetError, match=r"config\.features='pca'.*not both"):
        _spec(config=GeodesicConfig(features="pca"), features_model=model)
    with pytest.raises(DatasetError, match="model:mine feature space are barycentric"):
        _spec(config=GeodesicConfig(method="neural", neural="tiny"), features_model=model)
    # a named space with a neural map is refused by the config, before any spec or data
    with pytest.raises(GeovizError, match="box feature space are barycentric"):
        GeodesicConfig(features="box", method="neural")
    spec = _spec(features_model=model, image_size=16)
    assert spec.features_model is model and hash(spec)  # still a hashable value


def test_fit_spec_fits_in_the_users_space_and_few_shot_labels_there() -> None:
    """fit_spec is fit_geodesic with the spec's space; the few-shot pseudo-labels are the kNN
    labels in the user's space (computed independently here with few_shot(embedding=...))."""
    model = _linear_model_space()
    spec = _spec(
        references=(DatasetChoice("usps"), DatasetChoice("kmnist")),
        features_model=model,
        image_size=16,
        few_shot=FewShotOptions(enabled=True, k=2),
        config=GeodesicConfig(otdd=OTDDConfig(epsilon=0.01)),
    )
    data = load_spec_datasets(spec)
    fitted = model.fit([data.target_true, *data.references])
    expected = few_shot(
        data.target_true, 2, seed=spec.seed, embedding=fitted.transform(data.target_true).features
    )
    assert torch.equal(data.target.labels, expected.dataset.labels)
    assert data.labelled_indices is not None
    result = fit_spec(spec, data, cache=backend.DiskCache(enabled=False))
    direct = fit_in_space(
        data.target,
        list(data.references),
        spec.config,
        model,
        cache=backend.DiskCache(enabled=False),
    )
    assert result.feature_space is not None and result.feature_space.name == "model:mine"
    np.testing.assert_allclose(result.w_to_target, direct.w_to_target, rtol=1e-6)
    np.testing.assert_allclose(result.a_hat, direct.a_hat, atol=1e-6)


def test_a_few_shot_target_s_space_is_chosen_once_on_its_labelled_points(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ "auto" for a few-shot Q is measured on the k labelled points per class (never the
    true labels of the others), the pseudo-labels are found in that space, and the fit
    reuses that one choice instead of choosing again on the pseudo-labels."""
    import geoviz.features.choice as choice_module
    import geoviz.geodesic.config as config_module
    from geoviz.data.dataset import LabeledDataset
    from geoviz.geodesic.config import space_sentence

    calls: list[np.ndarray | None] = []
    real = choice_module.choose_space

    def spy(datasets, *, labelled=None):  # type: ignore[no-untyped-def]
        calls.append(None if labelled is None else np.asarray(labelled).copy())
        return real(datasets, labelled=labelled)

    monkeypatch.setattr(choice_module, "_MEMO", {})
    monkeypatch.setattr(config_module, "choose_space", spy)
    spec = _spec(
        references=(DatasetChoice("usps"), DatasetChoice("kmnist")),
        image_size=16,
        few_shot=FewShotOptions(enabled=True, k=2),
        config=GeodesicConfig(otdd=OTDDConfig(epsilon=0.01)),
    )
    data = load_spec_datasets(spec)
    labelled = data.labelled_indices
    assert labelled is not None and data.space_choice is not None
    assert len(calls) == 1 and np.array_equal(calls[0], labelled)
    choice = data.space_choice
    assert all(m.q_score == "labelled 1-NN" for m in choice.measurements if m.q_kappa is not None)
    # corrupt the true labels of the unlabelled points: nothing a run can see changes
    truth = data.target_true
    y = truth.labels.numpy().copy()
    others = np.setdiff1d(np.arange(truth.n_samples), labelled)
    y[others] = np.random.default_rng(1).permutation((y[others] + 3) % len(truth.classes))
    corrupted = LabeledDataset(
        features=truth.features,
        labels=torch.from_numpy(y),
        classes=truth.classes,
        name=truth.name,
        image_shape=truth.image_shape,
    )
    again = real([corrupted, *data.references], labelled=labelled)

    def untimed(c: SpaceChoice) -> tuple[object, ...]:
        return (
            c.name,
            c.reason,
            c.caveat,
            [dataclasses.replace(m, seconds=0.0) for m in c.measurements],
        )

    assert untimed(again) == untimed(choice)
    # the pseudo-labels were found in the chosen space, and the fit uses that choice
    assert data.chosen_space(spec.config) is choice
    result = fit_spec(spec, data, cache=backend.DiskCache(enabled=False))
    assert len(calls) == 1  # not chosen again on the pseudo-labels
    assert result.space_choice is choice
    assert result.space_sentence == space_sentence(choice, spec.config.features)
    assert result.space_caution == (None if choice.caveat is None else f"caution: {choice.caveat}")


def test_spec_normalises_references_to_a_tuple() -> None:
    spec = _spec(references=[DatasetChoice("usps"), DatasetChoice("kmnist")])
    assert spec.references == (DatasetChoice("usps"), DatasetChoice("kmnist"))
    assert spec.m == 2 and spec.choices[0] == DatasetChoice("mnist")
    assert hash(spec) == hash(_spec(references=(DatasetChoice("usps"), DatasetChoice("kmnist"))))


def test_load_spec_datasets_keeps_sizes_unless_they_differ() -> None:
    """image_size None: USPS (16x16) with MNIST (28x28) go to the target's height."""
    data = load_spec_datasets(_spec())
    assert data.target.image_shape == (1, 28, 28)
    assert {ds.image_shape for ds in data.references} == {(1, 28, 28)}
    assert data.target.n_samples == 30 and data.target_true is data.target
    same = load_spec_datasets(_spec(references=(DatasetChoice("fashion_mnist"),) * 2))
    raw = load_dataset("fashion_mnist", n=30, seed=0)
    assert same.references[0].fingerprint == raw.fingerprint  # nothing resized


def test_load_spec_datasets_is_the_old_cli_and_transfer_loading() -> None:
    """The spec's datasets are those the three front-ends loaded by hand before."""
    from geoviz.data.preprocess import harmonize

    spec = _spec(image_size=32, target_test=DatasetChoice("mnist", split="test"), n_test=20)
    data = load_spec_datasets(spec)
    by_hand = harmonize(
        [load_dataset(n, n=30, seed=0) for n in ("mnist", *NIST)]
        + [load_dataset("mnist", split="test", n=20, seed=0)],
        size=32,
    )
    loaded = [data.target, *data.references, data.target_test]
    assert [ds.fingerprint for ds in loaded] == [ds.fingerprint for ds in by_hand]


def test_load_spec_datasets_few_shot_and_distinct_names() -> None:
    spec = _spec(
        references=(DatasetChoice("mnist", split="test"), DatasetChoice("usps")),
        few_shot=FewShotOptions(enabled=True, k=2),
        image_size=16,
    )
    plain = load_spec_datasets(spec)
    assert plain.target.name == plain.references[0].name == "mnist"
    data = load_spec_datasets(spec, distinct_names=True)
    assert [ds.name for ds in (data.target, *data.references)] == ["mnist", "mnist#2", "usps"]
    assert data.labelled_indices is not None and data.labelled_indices.size == 2 * 10
    assert data.pseudo_label_accuracy is not None and 0.0 <= data.pseudo_label_accuracy <= 1.0
    # the true labels are kept aside; the geodesic's target is pseudo-labelled
    assert torch.equal(
        data.target_true.labels[data.labelled_indices], data.target.labels[data.labelled_indices]
    )


def test_paths_and_uploads_need_their_front_end(tmp_path: Path) -> None:
    from geoviz.export import export_dataset

    export_dataset(load_dataset("usps", n=20), tmp_path / "usps.npz")
    choice = DatasetChoice.named(str(tmp_path / "usps.npz"))
    assert choice.source == "path" and DatasetChoice.named("usps").source == "registry"
    assert load_choice(choice, 10, 0).n_samples == 10
    with pytest.raises(DatasetError, match="not by path"):
        load_choice(choice, 10, 0, allow_paths=False)
    upload = DatasetChoice("a.npz", source="upload", digest="0" * 64)
    with pytest.raises(DatasetError, match="loaded by the app"):
        load_choice(upload, 10, 0)
    raw = load_dataset("usps", n=40)
    assert load_choice(upload, 10, 0, resolve=lambda c: raw).n_samples == 10


def test_a_link_never_names_a_path(tmp_path: Path) -> None:
    refs = (DatasetChoice("usps"), DatasetChoice("kmnist"))
    with pytest.raises(DatasetError, match="not local paths"):
        Scenario(target=DatasetChoice(str(tmp_path), source="path"), references=refs)
    with pytest.raises(DatasetError, match="not local paths"):
        Scenario.from_dict(
            {
                **default_scenario(AppSettings()).to_dict(),
                "target": {"name": "/etc", "source": "path"},
            }
        )


def test_scenario_spec_forwards_every_option() -> None:
    scenario = default_scenario(AppSettings(n_default=50)).with_(
        epsilon=0.005, seed=3, map_method="neural", neural_preset="tiny", image_size=20
    )
    spec = scenario.spec
    assert spec.choices == scenario.choices
    assert (spec.n_target, spec.n_reference, spec.seed, spec.image_size) == (50, 50, 3, 20)
    assert spec.few_shot == FewShotOptions()  # not enabled: Q's own labels
    assert spec.config.otdd.epsilon == 0.005 and spec.config.otdd.seed == 3
    from geoviz.maps.neural_config import get_neural_preset

    assert spec.config.method == "neural" and spec.config.neural == get_neural_preset("tiny")
    few = scenario.with_(few_shot=FewShotOptions(enabled=True, k=3))
    assert few.spec.few_shot == FewShotOptions(enabled=True, k=3)
    assert isinstance(GeodesicSpec(scenario.target, scenario.references).config, GeodesicConfig)


def test_a_scenario_is_its_spec_and_the_apps_policy() -> None:
    """Issue 44: the scenario holds the spec and nothing else; its views read the spec."""
    scenario = default_scenario(AppSettings(n_default=50)).with_(epsilon=0.01, features="pca")
    assert [f.name for f in dataclasses.fields(Scenario)] == ["spec"]
    assert scenario.epsilon == scenario.spec.config.otdd.epsilon == 0.01
    assert scenario.features == scenario.spec.config.features == "pca"
    assert scenario.n_target == scenario.spec.n_target == 50
    assert scenario == default_scenario(AppSettings(n_default=50)).with_(
        epsilon=0.01, features="pca"
    )


@pytest.mark.parametrize(
    ("changes", "library"),
    [
        ({"epsilon": 1e-9}, lambda: OTDDConfig(epsilon=1e-9)),
        ({"epsilon": -1.0}, lambda: OTDDConfig(epsilon=-1.0)),
        ({"map_method": "sliced"}, lambda: GeodesicConfig(method="sliced")),  # type: ignore[arg-type]
        ({"neural_preset": "huge"}, lambda: GeodesicConfig(neural="huge")),
        ({"features": "resnet"}, lambda: GeodesicConfig(features="resnet")),
        ({"encoder_preset": "big"}, lambda: GeodesicConfig(encoder="big")),
        ({"seed": -1}, lambda: GeodesicSpec(DatasetChoice("mnist"), REFS, seed=-1)),
        ({"n_target": 3}, lambda: GeodesicSpec(DatasetChoice("mnist"), REFS, n_target=3)),
        ({"channels": "cmyk"}, lambda: GeodesicSpec(DatasetChoice("mnist"), REFS, channels="cmyk")),  # type: ignore[arg-type]
    ],
)
def test_a_scenarios_values_are_checked_once_by_the_library(changes, library) -> None:
    """No second check in the app: a bad value gives the spec's or config's own sentence."""
    with pytest.raises(GeovizError) as own:
        library()
    with pytest.raises(DatasetError) as app:
        default_scenario(AppSettings(n_default=50)).with_(**changes)
    assert str(app.value) == str(own.value)


# --------------------------------------------------------------------------- weights


def test_as_simplex_weights_checks_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    original = weights_module.check_weights

    def counting(weights, m, *args, **kwargs):
        calls.append(isinstance(weights, SimplexWeights))
        return original(weights, m, *args, **kwargs)

    monkeypatch.setattr(weights_module, "check_weights", counting)
    a = as_simplex_weights(np.array([0.25, 0.75]), 2)
    assert a.values == (0.25, 0.75) and a.decimals is None and calls == [False]
    rounded = SimplexWeights.from_input([0.3, 0.7], 2)
    calls.clear()
    assert as_simplex_weights(rounded, 2) is rounded and calls == [True]  # length only
    with pytest.raises(WeightsError, match="must have 3 entries"):
        as_simplex_weights(rounded, 3)
    with pytest.raises(WeightsError, match="one weight vector"):
        as_simplex_weights(np.full((2, 2), 0.5), 2)


# --------------------------------------------------------------------------- settings, keys


def test_runtime_settings_from_env_reads_every_variable(tmp_path: Path) -> None:
    env = {
        "GEOVIZ_DEVICE": " CPU ",
        "GEOVIZ_CACHE_DIR": str(tmp_path / "c"),
        "GEOVIZ_NO_CACHE": "1",
        "GEOVIZ_ASSETS_DIR": str(tmp_path / "a"),
        "GEOVIZ_EMBEDDING": "PCA",
    }
    settings = backend.RuntimeSettings.from_env(env)
    assert settings == backend.RuntimeSettings(
        device="cpu",
        cache_dir=tmp_path / "c",
        no_cache=True,
        assets_dir=tmp_path / "a",
        embedding="pca",
    )
    xdg = backend.RuntimeSettings.from_env({"XDG_CACHE_HOME": str(tmp_path)})
    assert xdg.cache_dir == tmp_path / "geoviz" and xdg.embedding == "umap"
    assert xdg.device == "auto" and xdg.no_cache is False and xdg.assets_dir is None


def test_configured_settings_win_over_the_environment_and_are_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from geoviz.data.bundled import assets_dir
    from geoviz.viz.embedding import auto_method

    monkeypatch.setenv("GEOVIZ_EMBEDDING", "pca")
    installed = backend.RuntimeSettings(cache_dir=tmp_path / "x", assets_dir=tmp_path)
    with backend.configured(installed):
        assert backend.default_cache_dir() == tmp_path / "x"
        assert assets_dir() == tmp_path and auto_method() == "umap"
        assert backend.get_cache().directory == tmp_path / "x"
    assert auto_method() == "pca"  # the environment again
    assert backend.runtime_settings() == backend.RuntimeSettings.from_env()


def test_fingerprint_is_the_disk_cache_key() -> None:
    """The formula of every stored key (a change would orphan the cache: bump the version)."""
    params = {"a": 1, "b": np.arange(3), "c": (1.5, None)}
    key = backend.fingerprint("ns", params)
    assert key == backend.cache_key("ns", params)
    # the cache's format 3 (issue 32: entries record their structure); format 2's key, the
    # value cache_key gave before fingerprint existed, is kept by version="2"
    assert key == "11ea90eba308ebe53fa94037e819b35a9d83e4491ae1b91b9ece7d9289b85ce0"
    assert backend.fingerprint("ns", params, version="2") == (
        "9b3e85cd2d2af3e190ae5fb5daaeda2f08898cbe60c3b7294e1ac61acd5203d7"
    )
    assert backend.fingerprint("ns", params, version="0") != key
    assert backend.fingerprint("ns", {**params, "b": np.arange(3).reshape(1, 3)}) != key
