"""geoviz.vocabulary's tuples equal the library's own, so that the two cannot drift apart.

The CLI builds its choices from :mod:`geoviz.vocabulary` (plain data, no torch). The data,
OT, maps and app modules import their ``Literal`` types from it (checked as the same
objects); the tables that hold more than names (the neural and transfer presets, the encoder
presets, the export registry) keep their own, and each test below pins them to the
vocabulary, so a value added on one side only fails here.
"""

from __future__ import annotations

from typing import get_args

from geoviz import vocabulary as v


def test_every_tuple_is_its_literal_in_order() -> None:
    pairs = [
        (v.SPLITS, v.Split),
        (v.CHANNEL_MODES, v.ChannelMode),
        (v.BUILTIN_SPACES, v.BuiltinSpace),
        (v.ENCODER_PRESET_NAMES, v.EncoderPresetName),
        (v.LABEL_METHODS, v.LabelMethod),
        (v.MAP_METHODS, v.MapMethod),
        (v.NEURAL_PRESET_NAMES, v.NeuralPresetName),
        (v.BOOTSTRAP_METHODS, v.BootstrapMethod),
        (v.DEVICE_NAMES, v.DeviceName),
        (v.TASK_BACKENDS, v.TaskBackend),
        (v.TRANSFER_METHODS, v.TransferMethod),
        (v.TRANSFER_PRESET_NAMES, v.TransferPresetName),
        (v.EXPORT_FORMATS, v.ExportFormat),
    ]
    for values, literal in pairs:
        assert values == get_args(literal)
    assert v.AUTO == v.BUILTIN_SPACES[0] == v.CHANNEL_MODES[0] == v.TASK_BACKENDS[0]
    assert set(v.TABLE_METHODS) <= set(v.TRANSFER_METHODS)
    defaults = [
        (v.DEFAULT_ENCODER_PRESET, v.ENCODER_PRESET_NAMES),
        (v.DEFAULT_MAP_METHOD, v.MAP_METHODS),
        (v.DEFAULT_NEURAL_PRESET, v.NEURAL_PRESET_NAMES),
        (v.DEFAULT_BOOTSTRAP_METHOD, v.BOOTSTRAP_METHODS),
        (v.DEFAULT_TRANSFER_PRESET, v.TRANSFER_PRESET_NAMES),
    ]
    for default, values in defaults:
        assert default in values


def test_data_vocabularies_are_the_library_s() -> None:
    from geoviz.app import scenario
    from geoviz.data import bundled, choice, preprocess, registry, sklearn_sets, synthetic
    from geoviz.data import torchvision_sets as tv
    from geoviz.data.formats import _common
    from geoviz.geodesic import spec

    # the library's names are the vocabulary's own (one declaration, imported)
    assert preprocess.ChannelMode is spec.ChannelMode is scenario.ChannelMode is v.ChannelMode
    assert get_args(v.ChannelMode) == v.CHANNEL_MODES
    for module in (choice, registry, bundled, sklearn_sets, synthetic, tv, _common):
        assert module.Split is v.Split, module.__name__
    assert get_args(v.Split) == v.SPLITS


def test_feature_and_map_vocabularies_are_the_library_s() -> None:
    from geoviz.features import ENCODER_PRESETS
    from geoviz.geodesic.config import GeodesicConfig
    from geoviz.maps import methods
    from geoviz.maps.neural_config import NEURAL_PRESETS
    from geoviz.ot import labels

    assert set(v.ENCODER_PRESET_NAMES) == {"pretrained", *ENCODER_PRESETS}
    assert tuple(NEURAL_PRESETS) == v.NEURAL_PRESET_NAMES
    assert v.MAP_METHODS == methods.MAP_METHODS == get_args(methods.MapMethod)
    assert set(v.LABEL_METHODS) == set(get_args(labels.LabelMethod))
    config = GeodesicConfig()
    assert config.method == v.DEFAULT_MAP_METHOD
    assert config.encoder == v.DEFAULT_ENCODER_PRESET


def test_solver_and_run_vocabularies_are_the_library_s() -> None:
    from geoviz import backend, tasks
    from geoviz.geodesic import uncertainty
    from geoviz.ot import otdd_cost
    from geoviz.ot.otdd_cost import OTDDConfig

    assert v.DEFAULT_EPSILON == otdd_cost.DEFAULT_EPSILON == OTDDConfig().epsilon
    assert v.BOOTSTRAP_METHODS == uncertainty.BOOTSTRAP_METHODS
    assert get_args(uncertainty.BootstrapMethod) == v.BOOTSTRAP_METHODS
    assert v.TASK_BACKENDS == tasks.BACKENDS == get_args(tasks.Backend)
    assert get_args(backend.DeviceName) == v.DEVICE_NAMES


def test_transfer_and_export_vocabularies_are_the_library_s() -> None:
    from geoviz.export import export_formats
    from geoviz.export.formats import ExportFormat
    from geoviz.nn import training
    from geoviz.transfer import experiment, table

    assert v.TRANSFER_METHODS == table.ALL_METHODS == get_args(experiment.Method)
    assert v.TABLE_METHODS == table.METHODS
    assert v.TRANSFER_PRESET_NAMES == tuple(training.PRESETS) == get_args(training.PresetName)
    assert get_args(ExportFormat) == v.EXPORT_FORMATS
    # a plug-in may register more formats: the built-in ones come first, in this order
    assert export_formats()[: len(v.EXPORT_FORMATS)] == v.EXPORT_FORMATS


def test_the_cli_offers_the_vocabularies() -> None:
    """The parsers' choices are the vocabulary's tuples (the CLI hard-codes none)."""
    from geoviz.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    choices = {
        (command, action.dest): tuple(action.choices)
        for command, sub in subparsers.choices.items()
        for action in sub._actions
        if action.choices is not None
    }
    assert choices[("project", "split")] == v.SPLITS
    assert choices[("project", "method")] == v.MAP_METHODS
    assert choices[("distance", "neural_preset")] == v.NEURAL_PRESET_NAMES
    assert choices[("transfer", "neural_preset")] == v.NEURAL_PRESET_NAMES
    assert choices[("grid", "label_method")] == v.LABEL_METHODS
    assert choices[("grid", "bootstrap_method")] == v.BOOTSTRAP_METHODS
    assert choices[("transfer", "backend")] == v.TASK_BACKENDS
    assert choices[("transfer", "method")] == (*v.TRANSFER_METHODS, "all")
    assert choices[("screen", "features")] == v.BUILTIN_SPACES
    assert choices[("transfer", "encoder_preset")] == v.ENCODER_PRESET_NAMES
    assert choices[("project", "format")][: len(v.EXPORT_FORMATS)] == v.EXPORT_FORMATS
