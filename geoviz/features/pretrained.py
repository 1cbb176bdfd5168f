"""The encoder that ships with geoviz: trained once, offline, loaded in a fraction of a second.

:class:`PretrainedEncoderSpace` embeds images with the weights in
``assets/encoders/<name>.npz`` (see ``assets/encoders/README.md`` for the command that made
them, the data and their sha256). Fitting it learns nothing from the data: its digest is the
weights' digest, so the first run on a new colour dataset costs one pass of the network over
the images, not a training (paper Sec. 5.3 embeds with a pretrained MAE; this is the small,
CPU-sized counterpart).

**What it was trained on.** The weights file's manifest (``<name>.json``) lists the datasets
whose images trained it and the ones whose *labels* did. The shipped ``glyphs`` encoder
learned from the bundled training samples of USPS, Fashion-MNIST and KMNIST with their
labels, drawn in the colour styles of :mod:`geoviz.data.styles`; it never saw an MNIST label
nor an MNIST image. Every bundled colour target is made of MNIST digits, so the encoder used
for it never saw its labels (:func:`labels_seen_for`). A target whose lineage is one of the
labelled training sets gets the encoder trained here on the references instead
(:func:`geoviz.features.choice.choose_space`).

The file is a NumPy ``.npz`` of float32 arrays (no pickle) and a JSON manifest; the
manifest's ``sha256`` of the ``.npz`` is checked on load.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from geoviz.atomic import atomic_write_bytes
from geoviz.backend import DiskCache, get_cache, resolve_device
from geoviz.backend import digest as json_digest
from geoviz.data.bundled import assets_dir, load_bundled
from geoviz.data.dataset import LabeledDataset
from geoviz.data.preprocess import harmonize
from geoviz.errors import GeovizError
from geoviz.features.base import FeatureSpace, FittedFeatures, Progress
from geoviz.features.encoder import (
    EncoderConfig,
    EncoderNet,
    NetEncode,
    encoder_input_shape,
    train_encoder,
)

__all__ = [
    "DEFAULT_ENCODER",
    "PretrainedEncoderSpace",
    "encoder_manifest",
    "encoder_path",
    "fitted_encoder",
    "labels_seen_for",
    "save_encoder",
]

#: the shipped encoder's file stem under ``assets/encoders/``
DEFAULT_ENCODER = "glyphs"

#: lineage of dataset names: a target built from MNIST digits is an MNIST target
_LINEAGE = {"mnist_m": "mnist", "mnist_textured": "mnist", "mnist_tex": "mnist"}


def encoder_path(name: str = DEFAULT_ENCODER) -> Path:
    """``assets/encoders/<name>.npz`` (``GEOVIZ_ASSETS_DIR`` respected)."""
    if not name.replace("_", "").replace("-", "").isalnum() or len(name) > 64:
        raise GeovizError(f"an encoder name is letters, digits, '-' or '_', got {name[:40]!r}")
    return assets_dir() / "encoders" / f"{name}.npz"


def encoder_manifest(name: str = DEFAULT_ENCODER) -> dict[str, Any]:
    """The JSON manifest of a shipped encoder: config, data, labels seen, sha256, command.

    Raises
    ------
    GeovizError
        The manifest is missing or not a JSON object.
    """
    path = encoder_path(name).with_suffix(".json")
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise GeovizError(
            f"the pretrained encoder {name!r} is not installed (no {path.name} in "
            f"{path.parent}); train one with `python scripts/train_encoder.py` or use "
            "--encoder-preset cpu to train on your references"
        ) from None
    except (OSError, ValueError) as err:
        raise GeovizError(
            f"the pretrained encoder's manifest {path.name} is unreadable: {err}"
        ) from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("config"), dict):
        raise GeovizError(f"the pretrained encoder's manifest {path.name} has no config")
    return manifest


def _lineage(name: str) -> str:
    base = name.split(":")[0].strip().lower()
    return _LINEAGE.get(base, base)


def labels_seen_for(target: LabeledDataset, name: str = DEFAULT_ENCODER) -> list[str]:
    """The labelled training sets of encoder ``name`` that ``target`` descends from.

    Empty when the encoder never saw the target's labels (judged by the dataset's name and
    its known lineage: ``mnist_m`` is MNIST). A user's own dataset of another name is
    judged unseen; the manifest says what the encoder saw.
    """
    seen = {_lineage(str(n)) for n in encoder_manifest(name).get("labels_from", [])}
    return sorted(seen & {_lineage(target.name)})


def _config_of(manifest: dict[str, Any]) -> EncoderConfig:
    known = {f.name for f in fields(EncoderConfig)}
    raw = {k: v for k, v in manifest["config"].items() if k in known}
    if "styles" in raw:
        raw["styles"] = tuple(raw["styles"])
    try:
        return EncoderConfig(**raw)
    except TypeError as err:
        raise GeovizError(f"the pretrained encoder's config is invalid: {err}") from None


def _load_weights(name: str, manifest: dict[str, Any]) -> dict[str, torch.Tensor]:
    path = encoder_path(name)
    try:
        blob = path.read_bytes()
    except OSError as err:
        raise GeovizError(
            f"the pretrained encoder's weights {path.name} are unreadable: {err}"
        ) from None
    digest = hashlib.sha256(blob).hexdigest()
    if digest != manifest.get("sha256"):
        raise GeovizError(
            f"the pretrained encoder's weights {path.name} do not match their manifest "
            f"(sha256 {digest[:12]}..., expected {str(manifest.get('sha256'))[:12]}...): "
            "the file is damaged or was replaced; restore it from the repository"
        )
    with np.load(io.BytesIO(blob), allow_pickle=False) as arrays:
        return {k: torch.from_numpy(arrays[k].copy()) for k in arrays.files}


def fitted_encoder(
    state: dict[str, torch.Tensor],
    config: EncoderConfig,
    shape: tuple[int, int, int],
    *,
    digest: str,
    info: dict[str, Any],
    device: str | torch.device | None = None,
    cache: DiskCache | None = None,
) -> FittedFeatures:
    """A :class:`FittedFeatures` that embeds images of ``shape`` with the given weights."""
    net = EncoderNet(config.width, config.dim)
    try:
        net.load_state_dict(state)
    except (RuntimeError, KeyError) as err:
        raise GeovizError(f"the encoder's weights do not fit its config: {err}") from None
    encode = NetEncode(net, shape, config.size, resolve_device(device))
    return FittedFeatures(
        name="encoder", digest=digest, dim=config.dim, encode=encode, info=info, cache=cache
    )


def save_encoder(
    state: dict[str, torch.Tensor],
    config: EncoderConfig,
    name: str,
    *,
    folder: Path | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write ``<name>.npz`` (float32 weights) and ``<name>.json`` (config, sha256, ``extra``)."""
    target = (folder or encoder_path(name).parent) / f"{name}.npz"
    target.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    arrays: dict[str, Any] = {k: v.detach().cpu().numpy() for k, v in state.items()}
    np.savez(buffer, **arrays)
    blob = buffer.getvalue()
    atomic_write_bytes(target, blob, overwrite=True)
    config_json = {f.name: getattr(config, f.name) for f in fields(EncoderConfig)}
    config_json["styles"] = list(config.styles)
    manifest = {
        "name": name,
        "config": config_json,
        "sha256": hashlib.sha256(blob).hexdigest(),
        "bytes": len(blob),
        **(extra or {}),
    }
    manifest_bytes = (json.dumps(manifest, indent=1) + "\n").encode("utf-8")
    atomic_write_bytes(target.with_suffix(".json"), manifest_bytes, overwrite=True)
    return target


class PretrainedEncoderSpace(FeatureSpace):
    """The shipped encoder (``assets/encoders/<name>.npz``): nothing is trained on the data.

    Parameters
    ----------
    weights
        File stem under ``assets/encoders`` (default :data:`DEFAULT_ENCODER`).
    device
        ``None``: CUDA when available, else the CPU.
    """

    name = "encoder"

    def __init__(
        self, weights: str = DEFAULT_ENCODER, *, device: str | torch.device | None = None
    ) -> None:
        encoder_path(weights)  # checks the name
        self.weights = weights
        self.device = device

    def params(self) -> dict[str, Any]:
        return {"weights": self.weights, "sha256": encoder_manifest(self.weights)["sha256"]}

    def _digest_of(self, datasets: Sequence[LabeledDataset]) -> str:
        # the space does not depend on the data it is "fitted" on: one digest per weights file
        return json_digest({"space": "encoder", "pretrained": self.weights, **self.params()})

    def _fit(
        self, datasets: list[LabeledDataset], digest_: str, progress: Progress | None
    ) -> FittedFeatures:
        shape = encoder_input_shape(datasets)
        manifest = encoder_manifest(self.weights)
        config = _config_of(manifest)
        state = _load_weights(self.weights, manifest)
        info = {
            "preset": "pretrained",
            "weights": self.weights,
            "sha256": manifest["sha256"],
            "trained_on": manifest.get("images_from", []),
            "labels_from": manifest.get("labels_from", []),
            "styles": list(config.styles),
        }
        # the vectors are cached per dataset, as for the trained encoder
        return fitted_encoder(
            state, config, shape, digest=digest_, info=info, device=self.device, cache=get_cache()
        )


#: the bundled training sets whose labels the shipped encoder learned (never MNIST: every
#: bundled colour target is made of MNIST digits)
GLYPH_TRAINING_SETS: tuple[str, ...] = ("usps", "fashion_mnist", "kmnist")

#: the shipped encoder's training settings (all styles; ``max_per_dataset`` covers the
#: 2000 bundled training samples of each set)
GLYPH_CONFIG = EncoderConfig(epochs=12, labels="all", max_per_dataset=2000)


def train_glyph_encoder(
    config: EncoderConfig = GLYPH_CONFIG,
    sets: Sequence[str] = GLYPH_TRAINING_SETS,
    *,
    device: str | torch.device | None = None,
    progress: Progress | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Train an encoder on the bundled training samples of ``sets`` (labels of all of them).

    Images are brought to ``config.size`` grey first. Returns the weights (``EncoderNet``
    state dict) and the facts its manifest records (``images_from``, ``labels_from``,
    ``train_seconds``, ``final_loss``, ``trained_on``).
    """
    datasets = harmonize(
        [load_bundled(name, "train") for name in sets], size=config.size, channels="grey"
    )
    payload = train_encoder(datasets, config, device=device, progress=progress)
    state = {k[4:]: v for k, v in payload.items() if k.startswith("net.")}
    facts = {
        "images_from": [f"{name} (bundled train split)" for name in sets],
        "labels_from": list(sets) if config.labels == "all" else list(sets[1:]),
        "train_seconds": round(float(payload["train_seconds"]), 1),
        "final_loss": round(float(payload["final_loss"]), 4),
        "trained_on": int(payload["trained_on"]),
    }
    return state, facts
