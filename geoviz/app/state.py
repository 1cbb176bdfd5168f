"""The app's state without Streamlit, one import for the pages and tests.

Re-exports the modules that hold it, split by concern:

* :mod:`geoviz.app.scenario` — the :class:`Scenario` value and its parts
  (:class:`DatasetChoice`, :class:`FewShotOptions`, :class:`Upload`), presets.
* :mod:`geoviz.app.settings` — :class:`AppSettings`, the operator's switches.
* :mod:`geoviz.app.links` — URL state: scenario tokens, weights as text, entry weights.
* :mod:`geoviz.app.session` — :class:`SessionModel`, one visitor's session.
* :mod:`geoviz.app.jobs` — :class:`BackgroundJob` and the tiered :class:`ResultStore`.
"""

from __future__ import annotations

from geoviz.app.jobs import BackgroundJob, CacheTier, ResultStore
from geoviz.app.links import (
    QUERY_SCENARIO,
    QUERY_WEIGHTS,
    WEIGHT_KEY_DECIMALS,
    entry_weights,
    scenario_from_token,
    scenario_to_token,
    weights_from_text,
    weights_to_text,
)
from geoviz.app.scenario import (
    DEFAULT_REFERENCES,
    DEFAULT_TARGET,
    EPSILON_CHOICES,
    MAP_METHODS,
    MAX_NAME_CHARS,
    NEURAL_PRESET_NAMES,
    ChannelMode,
    DatasetChoice,
    FewShotOptions,
    MapMethod,
    NeuralPreset,
    Scenario,
    SourceKind,
    Split,
    Upload,
    epsilon_choices,
    scenario_feature_bytes,
    served_datasets,
    served_path,
)
from geoviz.app.session import SessionModel, sync_form_state
from geoviz.app.settings import AppSettings, default_scenario, preset_scenarios

__all__ = [
    "DEFAULT_REFERENCES",
    "DEFAULT_TARGET",
    "EPSILON_CHOICES",
    "MAP_METHODS",
    "MAX_NAME_CHARS",
    "NEURAL_PRESET_NAMES",
    "QUERY_SCENARIO",
    "QUERY_WEIGHTS",
    "WEIGHT_KEY_DECIMALS",
    "AppSettings",
    "BackgroundJob",
    "CacheTier",
    "ChannelMode",
    "DatasetChoice",
    "FewShotOptions",
    "MapMethod",
    "NeuralPreset",
    "ResultStore",
    "Scenario",
    "SessionModel",
    "SourceKind",
    "Split",
    "Upload",
    "default_scenario",
    "entry_weights",
    "epsilon_choices",
    "preset_scenarios",
    "scenario_feature_bytes",
    "scenario_from_token",
    "scenario_to_token",
    "served_datasets",
    "served_path",
    "sync_form_state",
    "weights_from_text",
    "weights_to_text",
]
