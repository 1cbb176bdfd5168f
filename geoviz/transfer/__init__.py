"""Transfer experiments (paper Sec. 5.2, Table 1): pretrain on ``P_a``, fine-tune, test.

* :mod:`~geoviz.nn.models` (re-exported) — :class:`LeNet5`, :class:`MLPNet`,
  :func:`make_model`, :func:`replace_head`.
* :mod:`~geoviz.nn.training` (re-exported) — budgets (:class:`TrainConfig`,
  :data:`PRESETS`), :func:`soft_cross_entropy`, :func:`pretrain`,
  :func:`finetune`, :func:`train_from_scratch`, :func:`evaluate`.
* :mod:`~geoviz.transfer.baselines` — :func:`one_nn_accuracy` and the Mixup
  pretraining set.
* :mod:`~geoviz.transfer.experiment` — :class:`TransferTask`,
  :func:`make_task`, :func:`run_method` (one row of Table 1).

Plain torch, no Streamlit.
"""

from __future__ import annotations

from geoviz.nn.models import LeNet5, MLPNet, make_model, replace_head
from geoviz.nn.training import (
    PRESETS,
    TrainConfig,
    TransferPreset,
    evaluate,
    finetune,
    get_preset,
    pretrain,
    soft_cross_entropy,
    train_from_scratch,
)
from geoviz.transfer.baselines import mixup_pretraining_set, one_nn_accuracy, one_nn_predict
from geoviz.transfer.experiment import (
    METHODS,
    Method,
    MethodResult,
    TransferTask,
    make_task,
    run_method,
)

__all__ = [
    "METHODS",
    "PRESETS",
    "LeNet5",
    "MLPNet",
    "Method",
    "MethodResult",
    "TrainConfig",
    "TransferPreset",
    "TransferTask",
    "evaluate",
    "finetune",
    "get_preset",
    "make_model",
    "make_task",
    "mixup_pretraining_set",
    "one_nn_accuracy",
    "one_nn_predict",
    "pretrain",
    "replace_head",
    "run_method",
    "soft_cross_entropy",
    "train_from_scratch",
]
