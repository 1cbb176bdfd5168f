"""The checkpoint store of the simplex study: one small JSON file per (grid point, seed).

A file is named by a hash of everything its result depends on
(:func:`study_scenario`: the fingerprints of the task's datasets and of the
geodesic's inputs, the geodesic configuration, ``k``, the preset, the method;
:func:`checkpoint_key` adds the weights and the seed), so an interrupted or
repeated study recomputes only what is missing and a point shared by two grid
resolutions is trained once. Files are written atomically.

The key's bytes are a stored format: the checkpoints under
``benchmarks/results/study-box*/checkpoints`` are found by them (a test checks
one). Change :data:`CHECKPOINT_VERSION` when a result's meaning changes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geoviz.atomic import atomic_write_bytes
from geoviz.backend import digest, jsonable
from geoviz.errors import ExportError
from geoviz.nn.training import TransferPreset, get_preset

__all__ = [
    "CHECKPOINT_VERSION",
    "CheckpointStore",
    "checkpoint_key",
    "preset_spec",
    "result_record",
    "study_scenario",
]

#: Bumped when the meaning of a checkpoint changes (old files are then ignored).
CHECKPOINT_VERSION = 1
#: Decimals of the weights in a checkpoint key (grid weights are ``k / R``).
_KEY_DECIMALS = 12


def preset_spec(preset: TransferPreset | str) -> tuple[str, Any]:
    """``(name, JSON-able training budgets)`` of a preset given by name or object."""
    preset = get_preset(preset)
    spec = {
        "name": preset.name,
        "pretrain": dataclasses.asdict(preset.pretrain),
        "finetune": dataclasses.asdict(preset.finetune),
    }
    return str(preset.name), jsonable(spec)


def study_scenario(
    task: Any, geodesic: Any, preset: TransferPreset | str, method: str
) -> dict[str, Any]:
    """Everything a (point, seed) result depends on, except the weights and the seed.

    Parameters
    ----------
    task
        A :class:`~geoviz.transfer.experiment.TransferTask` (its ``k``,
        ``seed`` and the fingerprints of its splits and references are used).
    geodesic
        Anything with ``target``, ``references`` (datasets with a
        ``fingerprint``) and ``config.to_dict()``, e.g. a
        :class:`~geoviz.geodesic.result.GeodesicResult`.
    preset, method
        The training preset and the transfer method.
    """
    _, spec = preset_spec(preset)
    return {
        "version": CHECKPOINT_VERSION,
        "method": str(method),
        "k": int(task.k),
        "task_seed": int(task.seed),
        "target_train": task.target_train.fingerprint,
        "target_fewshot": task.target_fewshot.fingerprint,
        "target_test": task.target_test.fingerprint,
        "references": [ref.fingerprint for ref in task.references],
        "geodesic_target": geodesic.target.fingerprint,
        "geodesic_references": [ref.fingerprint for ref in geodesic.references],
        "geodesic_config": jsonable(geodesic.config.to_dict()),
        "preset": spec,
    }


def checkpoint_key(scenario: dict[str, Any], weights: Sequence[float], seed: int) -> str:
    """sha256 (hex) of a scenario (:func:`study_scenario`'s), the weights and the seed.

    :func:`geoviz.backend.digest`: the canonical JSON (sorted keys, no spaces) of the scenario plus
    ``weights`` rounded to 12 decimals (``-0.0`` as ``0.0``) and ``seed``.
    """
    payload = {
        **scenario,
        "weights": [round(float(w), _KEY_DECIMALS) + 0.0 for w in weights],
        "seed": int(seed),
    }
    return digest(payload)


def result_record(result: Any, key: str, weights: Sequence[float], seed: int) -> dict[str, Any]:
    """The JSON content of one checkpoint: a :class:`~geoviz.transfer.experiment.MethodResult`
    (``method``, ``accuracy``, ``seconds``, ``n_pretrain``) under its key."""
    n_pretrain = getattr(result, "n_pretrain", None)
    return {
        "key": key,
        "version": CHECKPOINT_VERSION,
        "method": str(result.method),
        "seed": int(seed),
        "weights": [float(w) for w in weights],
        "accuracy": float(result.accuracy),
        "seconds": float(result.seconds),
        "n_pretrain": None if n_pretrain is None else int(n_pretrain),
    }


@dataclass(frozen=True)
class CheckpointStore:
    """The folder of one study's checkpoints: ``<directory>/<method>-seed<s>-<key[:24]>.json``.

    Attributes
    ----------
    directory
        Created on the first :meth:`save`.
    method
        The transfer method (part of every file name).
    """

    directory: Path
    method: str

    def path(self, seed: int, key: str) -> Path:
        """Where the run of ``seed`` under ``key`` is stored."""
        return self.directory / f"{self.method}-seed{int(seed)}-{key[:24]}.json"

    def load(self, seed: int, key: str) -> dict[str, Any] | None:
        """The stored run, or ``None`` when absent, unreadable or of another key."""
        try:
            data = json.loads(self.path(seed, key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("key") != key:
            return None
        try:
            float(data["accuracy"]), float(data["seconds"])
        except (KeyError, TypeError, ValueError):
            return None
        return data

    def save(self, record: dict[str, Any]) -> Path:
        """Write ``record`` (:func:`result_record`) atomically; returns its path.

        Raises
        ------
        ExportError
            The file cannot be written.
        """
        path = self.path(int(record["seed"]), str(record["key"]))
        data = json.dumps(record, indent=1, allow_nan=True).encode("utf-8")
        try:
            atomic_write_bytes(path, data, overwrite=True)
        except OSError as err:
            raise ExportError(f"cannot write checkpoint {path}: {err}") from err
        return path
