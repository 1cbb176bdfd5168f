"""The server's settings: what its operator decides, read once from the environment.

Environment variables (read by :func:`AppSettings.from_env`):

``GEOVIZ_APP_N``
    Samples per dataset of the default scenario (default 2000; tests use ~200).
``GEOVIZ_APP_GRID``
    Resolution of the ternary heatmap grid (default 30).
``GEOVIZ_APP_EMBED_N``
    Points per dataset in the UMAP embedding (default 300; placing P_a costs time per point).
``GEOVIZ_TRANSFER_BACKEND``
    How the Evidence page runs its trainings: ``auto`` (Ray when installed and able to
    start, else sequential; default), ``ray`` or ``sequential``.
``GEOVIZ_NEURAL_PRESET``
    Training budget of neural OTDD maps in new scenarios: ``tiny`` (seconds on small data;
    tests), ``cpu`` (default, minutes per map at 32x32) or ``paper`` (GPU scale).
``GEOVIZ_ENCODER_PRESET``
    Weights of the encoder feature space: ``pretrained`` (default: shipped in
    ``assets/encoders``, nothing trained), or a budget to train one on each scenario's
    references: ``cpu`` (a few minutes on 2 cores) or ``tiny`` (seconds; tests).
``GEOVIZ_TORCH_THREADS``
    torch's CPU threads for the whole server process, set once when the first page runs
    (default 0: torch's own default).
``GEOVIZ_FIT_WORKERS``
    Threads for the independent parts of one geodesic fit, its maps and label distances
    (``fit_geodesic(workers=...)``; default 0: the CPU cores this process may use).
``GEOVIZ_DATA_DIRS``, ``GEOVIZ_EXPORT_ROOT``, ``GEOVIZ_APP_MAX_MB``
    Server folders a link may name, the server-side export folder, and the memory one
    scenario's datasets may take.
``GEOVIZ_UPLOAD_MEMORY_MB``, ``GEOVIZ_UPLOAD_DISK_MB``, ``GEOVIZ_UPLOAD_TTL_HOURS``, ``GEOVIZ_UPLOAD_IDLE_MINUTES``
    The upload store (:class:`geoviz.app.uploads.UploadStore`): parsed uploads kept in
    memory (default 256 MB, dropped after 10 idle minutes), uploaded files kept on disk
    (default 2048 MB), and how long an upload (and a link naming it) lasts after its last
    use (default 24 hours).
``GEOVIZ_FIT_CACHE_MB``, ``GEOVIZ_FIT_IDLE_MINUTES``
    The server's in-memory results (:class:`geoviz.app.jobs.ResultStore`): at most this many
    MB (default 2048; an eighth of it for values derived from fits, ``P_a``, figures,
    export bytes), each result measured by its arrays' bytes, least recently used out; a
    result no open session uses leaves after this many idle minutes (default 10). A fit
    larger than the whole budget is computed for its page and not kept.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from geoviz import limits
from geoviz.app.scenario import (
    DEFAULT_REFERENCES,
    DEFAULT_TARGET,
    Scenario,
    scenario_feature_bytes,
    served_path,
)
from geoviz.backend import usable_cores
from geoviz.data.choice import DatasetChoice
from geoviz.data.served import served_folders
from geoviz.errors import DatasetError, GeovizError
from geoviz.vocabulary import ENCODER_PRESET_NAMES, NEURAL_PRESET_NAMES, NeuralPresetName


def _env_int(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError as err:
        raise GeovizError(
            f"environment variable {name} must be an integer >= {minimum}, got {raw!r}"
        ) from err
    if value < minimum:
        raise GeovizError(f"environment variable {name} must be >= {minimum}, got {value}")
    return value


def _env_data_dirs(env: Mapping[str, str]) -> tuple[tuple[str, Path], ...]:
    """``GEOVIZ_DATA_DIRS``: folders (``os.pathsep``-separated) whose datasets a link may
    name, each as ``<folder name>/<path inside>``; unset, the app reads no server path
    (:func:`geoviz.data.served.served_folders`)."""
    return served_folders(env)


def _env_folder(env: Mapping[str, str], name: str) -> Path | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    folder = Path(raw).expanduser().resolve()
    if not folder.is_dir():
        raise GeovizError(f"environment variable {name} names {raw!r}, which is not a folder")
    return folder


@dataclass(frozen=True)
class AppSettings:
    """Knobs of the app that are not part of a scenario (display sizes, defaults)."""

    n_default: int = 2000
    grid_resolution: int = 30
    embed_per_dataset: int = 300
    transfer_backend: Literal["auto", "ray", "sequential"] = "auto"
    neural_preset: NeuralPresetName = "cpu"
    data_dirs: tuple[tuple[str, Path], ...] = ()
    export_root: Path | None = None
    max_scenario_mb: int = limits.APP_MAX_SCENARIO_MB
    torch_threads: int = 0
    fit_workers: int = 0
    upload_memory_mb: int = 256
    upload_disk_mb: int = 2048
    upload_ttl_hours: int = 24
    upload_idle_minutes: int = 10
    encoder_preset: str = "pretrained"
    fit_cache_mb: int = 2048
    fit_idle_minutes: int = 10

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AppSettings:
        env = os.environ if env is None else env
        return cls(
            n_default=_env_int(env, "GEOVIZ_APP_N", 2000, minimum=10),
            grid_resolution=_env_int(env, "GEOVIZ_APP_GRID", 30, minimum=2),
            embed_per_dataset=_env_int(env, "GEOVIZ_APP_EMBED_N", 300, minimum=10),
            transfer_backend=_env_backend(env),
            neural_preset=_env_neural_preset(env),
            data_dirs=_env_data_dirs(env),
            export_root=_env_folder(env, "GEOVIZ_EXPORT_ROOT"),
            max_scenario_mb=_env_int(
                env, "GEOVIZ_APP_MAX_MB", limits.APP_MAX_SCENARIO_MB, minimum=16
            ),
            torch_threads=_env_int(env, "GEOVIZ_TORCH_THREADS", 0, minimum=0),
            fit_workers=_env_int(env, "GEOVIZ_FIT_WORKERS", 0, minimum=0),
            upload_memory_mb=_env_int(env, "GEOVIZ_UPLOAD_MEMORY_MB", 256, minimum=1),
            upload_disk_mb=_env_int(env, "GEOVIZ_UPLOAD_DISK_MB", 2048, minimum=1),
            upload_ttl_hours=_env_int(env, "GEOVIZ_UPLOAD_TTL_HOURS", 24, minimum=1),
            upload_idle_minutes=_env_int(env, "GEOVIZ_UPLOAD_IDLE_MINUTES", 10, minimum=1),
            encoder_preset=_env_encoder_preset(env),
            **fit_cache_knobs(env),
        )

    def fit_workers_used(self) -> int:
        """Threads of one geodesic fit: :attr:`fit_workers`, or with 0 the CPU cores this
        process may use (:func:`geoviz.backend.usable_cores`). On 2 cores the default
        scenario's cold first view came about 0.9 s sooner with 2 than with 1 (issue 26,
        3 interleaved probes each): the label distances' LAPACK calls and the solver's small
        steps leave a core idle that another map can use."""
        return self.fit_workers if self.fit_workers > 0 else usable_cores()

    def admit(self, scenario: Scenario) -> Scenario:
        """``scenario`` if this server runs it for anyone who asks (a link, the form), else
        :class:`DatasetError` saying which switch of the operator it would need.

        Beyond the bounds every :class:`Scenario` meets (:mod:`geoviz.limits`): datasets
        from the server's disk only from the folders in ``GEOVIZ_DATA_DIRS``, neural maps
        at most at this server's budget (``GEOVIZ_NEURAL_PRESET``: a link cannot start a
        GPU-scale training), and the features of all datasets together within
        ``GEOVIZ_APP_MAX_MB`` (:func:`scenario_feature_bytes`).
        """
        for choice in scenario.choices:
            if choice.source == "server":
                served_path(choice.name, self.data_dirs)
        if scenario.map_method == "neural" and NEURAL_PRESET_NAMES.index(
            scenario.neural_preset
        ) > NEURAL_PRESET_NAMES.index(self.neural_preset):
            raise DatasetError(
                f"this server trains neural maps at most at the {self.neural_preset!r} budget "
                f"(GEOVIZ_NEURAL_PRESET), not {scenario.neural_preset!r}"
            )
        need = scenario_feature_bytes(scenario)
        if need > self.max_scenario_mb * 2**20:
            raise DatasetError(
                f"this scenario's datasets take about {need / 2**20:,.0f} MB as float32 features, "
                f"more than the {self.max_scenario_mb:,} MB this server allows per scenario "
                "(GEOVIZ_APP_MAX_MB); use fewer samples or a smaller image size"
            )
        return scenario


def fit_cache_knobs(env: Mapping[str, str] | None = None) -> dict[str, int]:
    """``{"fit_cache_mb": ..., "fit_idle_minutes": ...}`` from ``GEOVIZ_FIT_CACHE_MB`` and
    ``GEOVIZ_FIT_IDLE_MINUTES`` (the result store is made before any page reads the rest)."""
    env = os.environ if env is None else env
    return {
        "fit_cache_mb": _env_int(env, "GEOVIZ_FIT_CACHE_MB", 2048, minimum=64),
        "fit_idle_minutes": _env_int(env, "GEOVIZ_FIT_IDLE_MINUTES", 10, minimum=1),
    }


def _env_backend(env: Mapping[str, str]) -> Literal["auto", "ray", "sequential"]:
    raw = env.get("GEOVIZ_TRANSFER_BACKEND", "").strip().lower() or "auto"
    if raw not in ("auto", "ray", "sequential"):
        raise GeovizError(
            f"environment variable GEOVIZ_TRANSFER_BACKEND must be auto, ray or sequential, got {raw!r}"
        )
    return raw  # type: ignore[return-value]


def _env_choice(env: Mapping[str, str], name: str, choices: Sequence[str], default: str) -> str:
    """``env[name]`` (lower-cased, ``default`` when unset), one of ``choices``."""
    raw = env.get(name, "").strip().lower() or default
    if raw not in choices:
        raise GeovizError(
            f"environment variable {name} must be one of {', '.join(choices)}, got {raw!r}"
        )
    return raw


def _env_encoder_preset(env: Mapping[str, str]) -> str:
    return _env_choice(env, "GEOVIZ_ENCODER_PRESET", ENCODER_PRESET_NAMES, "pretrained")


def _env_neural_preset(env: Mapping[str, str]) -> NeuralPresetName:
    return _env_choice(env, "GEOVIZ_NEURAL_PRESET", NEURAL_PRESET_NAMES, "cpu")  # type: ignore[return-value]


def default_scenario(settings: AppSettings | None = None) -> Scenario:
    """Target MNIST sample, references Fashion-MNIST, USPS and KMNIST (bundled, offline)."""
    settings = settings or AppSettings.from_env()
    return Scenario(
        target=DatasetChoice(DEFAULT_TARGET),
        references=tuple(DatasetChoice(n) for n in DEFAULT_REFERENCES),
        n_target=settings.n_default,
        n_reference=settings.n_default,
        neural_preset=settings.neural_preset,
    )


def preset_scenarios(settings: AppSettings | None = None) -> dict[str, Scenario]:
    """Ready-made scenarios for the datasets page (all offline).

    * ``*NIST`` — the default: Q = MNIST, P = Fashion-MNIST, USPS, KMNIST
      (paper Sec. 5.1 uses the *NIST family the same way).
    * ``2-D Gaussian mixtures`` / ``3-D Gaussian mixtures`` — Q and three
      references drawn from different random mixtures (paper Fig. 3b style).
    * ``Chess-board`` — the 16-Gaussian chess board with the classes
      permuted differently in each reference (paper appendix, OTDD maps).
    * :data:`COLOUR_PRESET` — Q = MNIST-M-style colour digits built offline
      (:func:`geoviz.data.colour.photo_digits`), P = MNIST, Fashion-MNIST, USPS, with the
      costs in the encoder's feature space (paper Sec. 5.3).
    """
    settings = settings or AppSettings.from_env()
    out = {"*NIST (MNIST ← Fashion-MNIST, USPS, KMNIST)": default_scenario(settings)}
    for dim in (2, 3):
        base = f"gmm{dim}d"
        out[f"{dim}-D Gaussian mixtures"] = Scenario(
            target=DatasetChoice(base, seed=0, options=(("name", "Q"),)),
            references=tuple(
                DatasetChoice(base, seed=s, options=(("name", f"P{s}"),)) for s in (1, 2, 3)
            ),
            n_target=min(settings.n_default, 800),
            n_reference=min(settings.n_default, 800),
            neural_preset=settings.neural_preset,
        )
    perms = ((0, 1, 2, 3), (1, 0, 3, 2), (2, 3, 0, 1))
    out["Chess-board (permuted classes)"] = Scenario(
        target=DatasetChoice("chessboard", seed=0, options=(("name", "Q"),)),
        references=tuple(
            DatasetChoice(
                "chessboard", seed=i + 1, options=(("name", f"P{i + 1}"), ("permutation", p))
            )
            for i, p in enumerate(perms)
        ),
        n_target=min(settings.n_default, 800),
        n_reference=min(settings.n_default, 800),
        neural_preset=settings.neural_preset,
    )
    out[COLOUR_PRESET] = Scenario(
        target=DatasetChoice("mnist_m"),
        references=tuple(DatasetChoice(n) for n in ("mnist", "fashion_mnist", "usps")),
        n_target=settings.n_default,
        n_reference=settings.n_default,
        neural_preset=settings.neural_preset,
        encoder_preset=settings.encoder_preset,
    )
    return out


#: the preset whose target is in colour: the default space chooses the pretrained encoder
COLOUR_PRESET = "Colour digits (MNIST-M-style ← MNIST, Fashion-MNIST, USPS)"
