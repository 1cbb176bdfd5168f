"""The choices every front end offers, in one light module (plain data, no torch).

The CLI builds its options' choices and defaults from here (``--features``,
``--encoder-preset``, ``--method``, ``--neural-preset``, ``--split``, ``--backend``, ...), so
``geoviz --help`` does not import torch to list them; :mod:`geoviz.features` checks names
against the same tuples.

Each vocabulary is a ``Literal`` type and the tuple of its values, in the order offered.
The library modules that define the same values keep their own names for now;
``tests/test_vocabulary.py`` asserts that each tuple here equals the library's, so the two
cannot drift apart.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "AUTO",
    "BOOTSTRAP_METHODS",
    "BUILTIN_SPACES",
    "CHANNEL_MODES",
    "DEFAULT_BOOTSTRAP_METHOD",
    "DEFAULT_ENCODER_PRESET",
    "DEFAULT_EPSILON",
    "DEFAULT_MAP_METHOD",
    "DEFAULT_NEURAL_PRESET",
    "DEFAULT_TRANSFER_PRESET",
    "DEVICE_NAMES",
    "ENCODER_PRESET_NAMES",
    "EXPORT_FORMATS",
    "LABEL_METHODS",
    "MAP_METHODS",
    "NEURAL_PRESET_NAMES",
    "SPLITS",
    "TABLE_METHODS",
    "TASK_BACKENDS",
    "TRANSFER_METHODS",
    "TRANSFER_PRESET_NAMES",
    "BootstrapMethod",
    "BuiltinSpace",
    "ChannelMode",
    "DeviceName",
    "EncoderPresetName",
    "ExportFormat",
    "LabelMethod",
    "MapMethod",
    "NeuralPresetName",
    "Split",
    "TaskBackend",
    "TransferMethod",
    "TransferPresetName",
]

#: the name of the default space: chosen from the data (:func:`geoviz.features.choose_space`)
AUTO = "auto"

# --------------------------------------------------------------------------- data

Split = Literal["train", "test"]
#: the splits of a dataset (``--split``; ``train`` the default)
SPLITS: tuple[Split, ...] = ("train", "test")

ChannelMode = Literal["auto", "grey", "rgb"]
#: how datasets of mixed channels are brought to one (:func:`geoviz.data.preprocess.harmonize`):
#: ``auto`` (grey unless a dataset is colour), all ``grey``, or all ``rgb``
CHANNEL_MODES: tuple[ChannelMode, ...] = ("auto", "grey", "rgb")

# --------------------------------------------------------------------------- feature spaces

BuiltinSpace = Literal["auto", "pixels", "pca", "box", "encoder", "natural"]

#: the spaces every link and command may name (``auto``, the default, first; ``natural``:
#: EfficientNet-Lite0's ImageNet features, :mod:`geoviz.features.natural`)
BUILTIN_SPACES: tuple[BuiltinSpace, ...] = ("auto", "pixels", "pca", "box", "encoder", "natural")

EncoderPresetName = Literal["pretrained", "tiny", "cpu"]
#: the encoder's weights: the shipped ones (default), or a training budget here
ENCODER_PRESET_NAMES: tuple[EncoderPresetName, ...] = ("pretrained", "tiny", "cpu")
DEFAULT_ENCODER_PRESET: EncoderPresetName = "pretrained"

# --------------------------------------------------------------------------- OTDD and maps

#: default relative entropic regularisation of the OTDD (``eps_abs = DEFAULT_EPSILON *
#: mean(C)``): sharp maps, a few reference points per mapped point
#: (:data:`geoviz.vocabulary.DEFAULT_EPSILON`)
DEFAULT_EPSILON = 1e-3

LabelMethod = Literal["gaussian", "exact"]
#: how the label-to-label distances ``W_2(P_y, P_y')`` are computed (``--label-method``)
LABEL_METHODS: tuple[LabelMethod, ...] = ("gaussian", "exact")

MapMethod = Literal["barycentric", "neural"]
#: how the OTDD maps ``T_i`` are computed: barycentric projection of the entropic plan, or
#: the neural map of the paper's max-min problem (``--method``)
MAP_METHODS: tuple[MapMethod, ...] = ("barycentric", "neural")
DEFAULT_MAP_METHOD: MapMethod = "barycentric"

NeuralPresetName = Literal["tiny", "cpu", "paper"]
#: training budgets of the neural maps (:data:`geoviz.maps.neural_config.NEURAL_PRESETS`)
NEURAL_PRESET_NAMES: tuple[NeuralPresetName, ...] = ("tiny", "cpu", "paper")
DEFAULT_NEURAL_PRESET: NeuralPresetName = "cpu"

BootstrapMethod = Literal["q-resample", "refit"]
#: bootstrap replicates: Q's samples drawn again with the maps fixed, or everything drawn
#: again and the maps refitted (:mod:`geoviz.geodesic.uncertainty`)
BOOTSTRAP_METHODS: tuple[BootstrapMethod, ...] = ("q-resample", "refit")
DEFAULT_BOOTSTRAP_METHOD: BootstrapMethod = "q-resample"

# --------------------------------------------------------------------------- running

DeviceName = Literal["auto", "cpu", "cuda"]
#: compute devices by name (``auto``: CUDA when available, else CPU)
DEVICE_NAMES: tuple[DeviceName, ...] = ("auto", "cpu", "cuda")

TaskBackend = Literal["auto", "ray", "sequential"]
#: how independent tasks run (:mod:`geoviz.tasks`): Ray if installed, Ray, or in this process
TASK_BACKENDS: tuple[TaskBackend, ...] = ("auto", "ray", "sequential")

# --------------------------------------------------------------------------- transfer

TransferMethod = Literal["otdd", "otdd_neural", "mixup", "fewshot", "1nn"]
#: every transfer method (paper Sec. 5.2, Table 1's columns)
TRANSFER_METHODS: tuple[TransferMethod, ...] = ("otdd", "otdd_neural", "mixup", "fewshot", "1nn")
#: the methods of ``--method all`` (``otdd_neural`` only with ``--neural``: minutes per map)
TABLE_METHODS: tuple[TransferMethod, ...] = ("otdd", "mixup", "fewshot", "1nn")

TransferPresetName = Literal["paper", "cpu", "tiny"]
#: training budgets of the transfer networks (:data:`geoviz.nn.training.PRESETS`)
TRANSFER_PRESET_NAMES: tuple[TransferPresetName, ...] = ("paper", "cpu", "tiny")
DEFAULT_TRANSFER_PRESET: TransferPresetName = "cpu"

# --------------------------------------------------------------------------- export

ExportFormat = Literal["npz", "pt", "imagefolder", "parquet"]
#: the built-in export formats, in the order offered (a plug-in may register more:
#: :func:`geoviz.export.export_formats` lists every registered one)
EXPORT_FORMATS: tuple[ExportFormat, ...] = ("npz", "pt", "imagefolder", "parquet")
