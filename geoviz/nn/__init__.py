"""Networks and their training loop, below both :mod:`geoviz.maps` and :mod:`geoviz.transfer`.

* :mod:`~geoviz.nn.init` — seeded initialisation without global random state
  (:func:`seeded_generator`, :func:`reset_parameters`, :func:`build_seeded`).
* :mod:`~geoviz.nn.models` — :class:`LeNet5`, :class:`MLPNet`,
  :func:`make_model`, :func:`replace_head`.
* :mod:`~geoviz.nn.training` — budgets (:class:`TrainConfig`, :data:`PRESETS`),
  :func:`soft_cross_entropy`, :func:`pretrain`, :func:`finetune`,
  :func:`train_from_scratch`, :func:`evaluate`.

Plain torch; nothing here changes torch's process-wide settings.
"""

from __future__ import annotations

from geoviz.nn.init import build_seeded, reset_parameters, seeded_generator
from geoviz.nn.models import MIN_LENET_SIZE, LeNet5, MLPNet, make_model, replace_head
from geoviz.nn.training import (
    CPU_TRAIN_THREADS,
    PRESETS,
    PresetName,
    ProgressCallback,
    TrainConfig,
    TransferPreset,
    evaluate,
    finetune,
    get_preset,
    pretrain,
    soft_cross_entropy,
    train_from_scratch,
)

__all__ = [
    "CPU_TRAIN_THREADS",
    "MIN_LENET_SIZE",
    "PRESETS",
    "LeNet5",
    "MLPNet",
    "PresetName",
    "ProgressCallback",
    "TrainConfig",
    "TransferPreset",
    "build_seeded",
    "evaluate",
    "finetune",
    "get_preset",
    "make_model",
    "pretrain",
    "replace_head",
    "reset_parameters",
    "seeded_generator",
    "soft_cross_entropy",
    "train_from_scratch",
]
