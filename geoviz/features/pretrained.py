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

**A damaged asset is named as such** (:func:`load_encoder`). Both files are read only as
bounded regular files (a FIFO or a link to ``/dev/zero`` in their place is refused at once,
not waited on or read without end), the manifest must hold a config and the weights' sha256,
every array must have the shape and a numeric type the config implies (read array by array,
never more than its header declares), and the weights must be finite, not all zero, and map
different images to different points. Anything else raises
:class:`~geoviz.errors.DamagedAssetError`, one sentence naming the file; the default space
(:func:`geoviz.features.choice.choose_space`) then falls back to pixels with that sentence as
its reason.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, fields
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
from geoviz.errors import AssetError, DamagedAssetError, GeovizError
from geoviz.features.base import FeatureSpace, FittedFeatures, Progress
from geoviz.features.encoder import (
    EncoderConfig,
    EncoderNet,
    NetEncode,
    encoder_input_shape,
    train_encoder,
)
from geoviz.files import open_regular_file
from geoviz.memory import format_bytes

__all__ = [
    "DEFAULT_ENCODER",
    "MAX_MANIFEST_BYTES",
    "MAX_WEIGHTS_BYTES",
    "PretrainedEncoder",
    "PretrainedEncoderSpace",
    "encoder_manifest",
    "encoder_path",
    "fitted_encoder",
    "labels_seen_for",
    "load_encoder",
    "save_encoder",
]

#: the shipped encoder's file stem under ``assets/encoders/``
DEFAULT_ENCODER = "glyphs"

#: Largest weights file read: the largest :class:`EncoderConfig` (width 256, dim 1024) is
#: about 73 MB of float32 weights; the shipped one is 1.2 MB.
MAX_WEIGHTS_BYTES = 128 * 2**20

#: Largest manifest read (the shipped one is about 1 kB).
MAX_MANIFEST_BYTES = 2**20

#: Images (random, of this side) the weights are tried on: an encoder whose embeddings of
#: these all lie within :data:`_SAME_POINT` of each other maps every image to the same point
#: (zeroed weights). Small, so the check costs milliseconds (the shipped encoder's
#: embeddings of them differ by 0.3 or more).
_PROBE_IMAGES = 4
_PROBE_SIDE = 16
_SAME_POINT = 1e-6

#: lineage of dataset names: a target built from MNIST digits is an MNIST target
_LINEAGE = {"mnist_m": "mnist", "mnist_textured": "mnist", "mnist_tex": "mnist"}


def encoder_path(name: str = DEFAULT_ENCODER) -> Path:
    """``assets/encoders/<name>.npz`` (``GEOVIZ_ASSETS_DIR`` respected)."""
    if not name.replace("_", "").replace("-", "").isalnum() or len(name) > 64:
        raise GeovizError(f"an encoder name is letters, digits, '-' or '_', got {name[:40]!r}")
    return assets_dir() / "encoders" / f"{name}.npz"


def _asset_words(name: str) -> tuple[str, str]:
    """What messages call encoder ``name``, and what restores it."""
    if name == DEFAULT_ENCODER:
        return "the shipped encoder", "reinstall geoviz"
    return (
        f"the encoder {name!r}",
        f"save it again (`python scripts/train_encoder.py --name {name}`)",
    )


def _damaged(name: str, part: str, path: Path, problem: str) -> DamagedAssetError:
    """``the shipped encoder's weights at PATH are damaged: <problem>; reinstall geoviz``."""
    who, remedy = _asset_words(name)
    verb = "are" if part == "weights" else "is"
    return DamagedAssetError(f"{who}'s {part} at {path} {verb} damaged: {problem}; {remedy}")


def _not_installed(name: str, path: Path) -> AssetError:
    return AssetError(
        f"the pretrained encoder {name!r} is not installed (no {path.name} in "
        f"{path.parent}); train one with `python scripts/train_encoder.py` or use "
        "--encoder-preset cpu to train on your references"
    )


def _cut(err: BaseException, limit: int = 120) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _read_asset(name: str, part: str, path: Path, bound: int) -> bytes:
    """The bytes of one file of encoder ``name``: a regular file of at most ``bound`` bytes.

    Opened non-blocking and checked on its descriptor before anything is read
    (:func:`geoviz.files.open_regular_file`), then at most ``bound + 1`` bytes are read, so a
    FIFO never blocks and a link to a device is never read.

    Raises
    ------
    AssetError
        The file is missing (a stripped install).
    DamagedAssetError
        Anything else that keeps it from being read.
    """
    if not os.path.lexists(path):
        raise _not_installed(name, path)

    def damaged(problem: str) -> DamagedAssetError:
        reason = problem.removeprefix("cannot read file: ")
        if reason != problem:
            return _damaged(name, part, path, f"it cannot be read ({reason})")
        # files' advice to give another path does not apply to a shipped file
        return _damaged(name, part, path, f"it {problem.split('; ')[0]}")

    with open_regular_file(path, max_bytes=bound, error=damaged) as fh:
        try:
            blob = fh.read(bound + 1)
        except OSError as err:
            raise damaged(f"cannot read file: {err.strerror or err}") from None
    if len(blob) > bound:  # grew after its size was checked
        raise damaged(f"is larger than the {format_bytes(bound)} geoviz reads")
    return blob


def _check_manifest(name: str, path: Path, manifest: Any) -> tuple[dict[str, Any], EncoderConfig]:
    """``manifest`` and its config if it has what loading the weights needs, else
    :class:`DamagedAssetError`."""
    if not isinstance(manifest, dict):
        raise _damaged(name, "manifest", path, "it is not a JSON object")
    if not isinstance(manifest.get("config"), dict):
        raise _damaged(name, "manifest", path, "it has no config")
    sha = manifest.get("sha256")
    if sha is None:
        raise _damaged(name, "manifest", path, "it has no sha256 of the weights")
    if not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
        raise _damaged(name, "manifest", path, "its sha256 is not 64 hexadecimal digits")
    size = manifest.get("bytes")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise _damaged(name, "manifest", path, "its bytes is not a number of bytes")
    for key in ("images_from", "labels_from"):
        value = manifest.get(key, [])
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise _damaged(name, "manifest", path, f"its {key} is not a list of names")
    return manifest, _config_of(name, path, manifest)


def _manifest(name: str) -> tuple[dict[str, Any], EncoderConfig]:
    """Encoder ``name``'s manifest and config (see :func:`encoder_manifest`)."""
    path = encoder_path(name).with_suffix(".json")
    blob = _read_asset(name, "manifest", path, MAX_MANIFEST_BYTES)
    try:
        manifest = json.loads(blob.decode("utf-8"))
    except (ValueError, RecursionError) as err:  # RecursionError: deeply nested JSON
        raise _damaged(name, "manifest", path, f"it is not JSON ({_cut(err)})") from None
    return _check_manifest(name, path, manifest)


def encoder_manifest(name: str = DEFAULT_ENCODER) -> dict[str, Any]:
    """The JSON manifest of a shipped encoder: config, data, labels seen, sha256, command.

    Raises
    ------
    AssetError
        The manifest is missing.
    DamagedAssetError
        It is not a regular file of at most :data:`MAX_MANIFEST_BYTES`, is not a JSON
        object, or lacks a valid config or the weights' sha256.
    """
    return _manifest(name)[0]


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


def _config_of(name: str, path: Path, manifest: dict[str, Any]) -> EncoderConfig:
    known = {f.name for f in fields(EncoderConfig)}
    raw = {k: v for k, v in manifest["config"].items() if k in known}
    if isinstance(raw.get("styles"), list):
        raw["styles"] = tuple(raw["styles"])
    try:
        return EncoderConfig(**raw)
    except (GeovizError, TypeError) as err:
        raise _damaged(name, "manifest", path, f"its config is invalid ({_cut(err)})") from None


def _expected_state(config: EncoderConfig) -> dict[str, torch.Tensor]:
    """The state dict's entries (shape and dtype, no storage) of ``config``'s network."""
    with torch.device("meta"):
        return dict(EncoderNet(config.width, config.dim).state_dict())


def _read_array(archive: zipfile.ZipFile, member: str, want: torch.Tensor) -> np.ndarray:
    """One ``.npy`` member, checked against ``want`` before its data is read.

    ``np.load`` would allocate whatever shape a header declares; here a header must declare
    ``want``'s shape and a real numeric type, and no more data than that is read.
    """
    with archive.open(member) as fp:
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
        else:
            raise ValueError(f"{member} is a .npy file of version {version}")
        if dtype.hasobject or dtype.kind not in "fiu":
            raise ValueError(f"{member} holds {dtype} values, not numbers")
        if tuple(shape) != tuple(want.shape):
            raise ValueError(
                f"{member} has shape {tuple(shape)}, its config needs {tuple(want.shape)}"
            )
        nbytes = math.prod(shape) * dtype.itemsize
        data = fp.read(nbytes + 1)
    if len(data) != nbytes:
        more = "more" if len(data) > nbytes else f"{len(data):,} bytes of"
        raise ValueError(f"{member} holds {more} data than the {nbytes:,} bytes its header says")
    array = np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")
    # a writable copy in this machine's byte order (torch takes no other)
    return np.array(array, dtype=array.dtype.newbyteorder("="), order="C", copy=True)


def _arrays(blob: bytes, expected: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict in the ``.npz`` ``blob``: exactly the arrays of ``expected``.

    Raises
    ------
    ValueError
        Anything that is not such an archive (the caller names the file).
    """
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            members = set(archive.namelist())
            wanted = {f"{key}.npy": key for key in expected}
            missing = sorted(wanted.keys() - members)
            unexpected = sorted(members - wanted.keys())
            if missing or unexpected:
                names = ", ".join((missing or unexpected)[:3])
                word = "lacks" if missing else "has arrays its config does not have:"
                raise ValueError(f"it {word} {names}")
            state = {}
            for member, key in wanted.items():
                array = _read_array(archive, member, expected[key])
                state[key] = torch.from_numpy(array).to(expected[key].dtype)
            return state
    except ValueError:
        raise
    except (
        zipfile.BadZipFile,  # also a bad CRC
        zipfile.LargeZipFile,
        zlib.error,
        OSError,
        EOFError,
        RuntimeError,  # an encrypted member
        NotImplementedError,  # a compression method zipfile lacks
    ) as err:
        raise ValueError(f"it is not a NumPy archive ({_cut(err)})") from None


def _check_state(state: dict[str, torch.Tensor], config: EncoderConfig) -> str | None:
    """What makes ``state`` an encoder that measures nothing, in words, or ``None``.

    Zeroed (or NaN) weights load without error and embed every image at one point, so every
    distance is 0; that would be reported far downstream as a property of the datasets.
    """
    floats = [t for t in state.values() if t.is_floating_point()]
    if not all(bool(torch.isfinite(t).all()) for t in floats):
        return "some weights are not finite"
    if all(not bool(t.any()) for t in floats):
        return "every weight is zero"
    net = EncoderNet(config.width, config.dim)
    net.load_state_dict(state)
    net.eval()
    generator = torch.Generator().manual_seed(0)
    # the network ends in a global average pool: any side of at least 8 pixels goes through
    probe = torch.rand(_PROBE_IMAGES, 3, _PROBE_SIDE, _PROBE_SIDE, generator=generator)
    with torch.no_grad():
        z = torch.nn.functional.normalize(net(probe), dim=1)
    if not bool(torch.isfinite(z).all()):
        return "it embeds images as non-finite vectors"
    if float((z - z[:1]).abs().max()) <= _SAME_POINT:
        return f"it maps {_PROBE_IMAGES} different images to the same point"
    return None


def _load_weights(
    name: str, manifest: dict[str, Any], config: EncoderConfig
) -> dict[str, torch.Tensor]:
    """The checked weights of encoder ``name`` (see :func:`load_encoder`)."""
    path = encoder_path(name)
    blob = _read_asset(name, "weights", path, MAX_WEIGHTS_BYTES)
    declared = manifest.get("bytes")
    if declared is not None and declared != len(blob):
        raise _damaged(
            name, "weights", path, f"it is {len(blob):,} bytes, its manifest says {declared:,}"
        )
    digest = hashlib.sha256(blob).hexdigest()
    if digest != manifest["sha256"]:
        raise _damaged(
            name,
            "weights",
            path,
            f"its sha256 is {digest[:12]}..., its manifest says {manifest['sha256'][:12]}... "
            "(the file was changed or replaced)",
        )
    try:
        state = _arrays(blob, _expected_state(config))
    except ValueError as err:
        raise _damaged(name, "weights", path, _cut(err, 200)) from None
    problem = _check_state(state, config)
    if problem is not None:
        raise _damaged(name, "weights", path, problem)
    return state


@dataclass(frozen=True)
class PretrainedEncoder:
    """A pretrained encoder as loaded from its two files, every part checked.

    Attributes
    ----------
    name
        The file stem under ``assets/encoders``.
    manifest
        The manifest (:func:`encoder_manifest`).
    config
        The network's settings, from the manifest.
    state
        The network's weights (an ``EncoderNet`` state dict).
    """

    name: str
    manifest: dict[str, Any]
    config: EncoderConfig
    state: dict[str, torch.Tensor]


def load_encoder(name: str = DEFAULT_ENCODER) -> PretrainedEncoder:
    """Encoder ``name``'s manifest and weights, refused with a sentence when damaged.

    Raises
    ------
    AssetError
        The manifest or the weights file is missing (a stripped install).
    DamagedAssetError
        Either file is not a regular file (a FIFO, a link to a device), is larger than
        :data:`MAX_MANIFEST_BYTES` / :data:`MAX_WEIGHTS_BYTES` or unreadable; the manifest
        is not JSON or lacks a valid config or sha256; the weights do not match the
        manifest's sha256 or size, are not a NumPy archive of the config's arrays, or are
        not finite, all zero, or map different images to the same point.
    """
    manifest, config = _manifest(name)
    return PretrainedEncoder(name, manifest, config, _load_weights(name, manifest, config))


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
        encoder = load_encoder(self.weights)
        manifest, config = encoder.manifest, encoder.config
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
            encoder.state,
            config,
            shape,
            digest=digest_,
            info=info,
            device=self.device,
            cache=get_cache(),
        )


#: the bundled training sets whose labels the shipped encoder learned (never MNIST: every
#: bundled colour target is made of MNIST digits)
GLYPH_TRAINING_SETS: tuple[str, ...] = ("usps", "fashion_mnist", "kmnist")

#: the shipped encoder's training settings (the six styles of
#: :data:`geoviz.features.encoder.DEFAULT_STYLES`; ``max_per_dataset`` covers the
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
