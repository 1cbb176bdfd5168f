"""One visitor's session: the scenario, uploads and picked weights over a mapping.

Pages keep one :class:`~geoviz.app.scenario.Scenario` in ``st.session_state`` (through
:class:`SessionModel`, which only needs a mutable mapping) so every page works on the
same choice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np

from geoviz.app.links import (
    QUERY_MCCANN_REF,
    QUERY_MCCANN_T,
    QUERY_SCENARIO,
    QUERY_WEIGHTS,
    scenario_from_query,
    scenario_from_token,
    scenario_to_token,
    weights_from_text,
)
from geoviz.app.scenario import Scenario
from geoviz.app.settings import AppSettings, default_scenario
from geoviz.app.uploads import UploadRef
from geoviz.errors import GeovizError
from geoviz.geodesic.interpolate import check_t
from geoviz.geodesic.weights import ENTRY_DECIMALS, SimplexWeights


def sync_form_state(
    state: MutableMapping[str, Any],
    scenario: Scenario,
    values: Mapping[str, Any],
    marker: str = "geoviz_form_synced",
) -> bool:
    """Write a form's widget ``values`` (widget key -> value shown for ``scenario``) into ``state``.

    Call before the widgets are created. When the scenario changed since the form was last
    synced (a preset was loaded, another page changed epsilon, ...) every value is written, so
    the widgets show the active scenario instead of the browser's stale values; otherwise only
    missing keys are filled and the user's unsubmitted edits are kept. Returns ``True`` when
    the whole form was rewritten. Deleting ``state[marker]`` forces the next call to rewrite.
    """
    changed = state.get(marker) != scenario.key()
    for key, value in values.items():
        if changed or key not in state:
            state[key] = value
    state[marker] = scenario.key()
    return changed


class SessionModel:
    """Typed access to the app's entries of a session-state mapping.

    Parameters
    ----------
    state
        ``st.session_state`` in the app, a plain ``dict`` in tests.

    The model keeps: the current :class:`Scenario`, the session's uploads
    (``key -> UploadRef``: names and sizes, no bytes), and the weights picked by the user per scenario
    key (so changing the scenario starts again from ``a_hat``).
    """

    SCENARIO = "geoviz_scenario"
    UPLOADS = "geoviz_uploads"
    WEIGHTS = "geoviz_weights"
    SETTINGS = "geoviz_settings"
    MCCANN = "geoviz_mccann"

    def __init__(
        self, state: MutableMapping[str, Any], settings: AppSettings | None = None
    ) -> None:
        self.state = state
        if self.SETTINGS not in state:
            state[self.SETTINGS] = settings or AppSettings.from_env()
        if self.UPLOADS not in state:
            state[self.UPLOADS] = {}
        if self.WEIGHTS not in state:
            state[self.WEIGHTS] = {}
        if self.MCCANN not in state:
            state[self.MCCANN] = {}
        if self.SCENARIO not in state:
            state[self.SCENARIO] = default_scenario(state[self.SETTINGS])

    def detached(self) -> SessionModel:
        """A copy over a plain ``dict`` (settings, scenario, uploads, weights; the mappings
        copied one level deep) for a background job: ``st.session_state`` cannot be read
        from a job's thread, and the job must not see later changes of the session."""
        keys = (self.SETTINGS, self.SCENARIO, self.UPLOADS, self.WEIGHTS, self.MCCANN)
        state = {
            k: dict(self.state[k]) if isinstance(self.state[k], dict) else self.state[k]
            for k in keys
        }
        return SessionModel(state)

    @property
    def settings(self) -> AppSettings:
        settings: AppSettings = self.state[self.SETTINGS]
        return settings

    @property
    def scenario(self) -> Scenario:
        scenario: Scenario = self.state[self.SCENARIO]
        return scenario

    @scenario.setter
    def scenario(self, value: Scenario) -> None:
        if not isinstance(value, Scenario):
            raise TypeError(f"expected a Scenario, got {type(value).__name__}")
        self.state[self.SCENARIO] = value

    def admit(self, scenario: Scenario) -> Scenario:
        """``scenario`` as this server runs it: admitted by its settings
        (:meth:`AppSettings.admit <geoviz.app.settings.AppSettings.admit>`), its served
        datasets stamped by their files as they are now (:meth:`Scenario.stamped`), so its
        keys are those of the files it will load.

        Raises
        ------
        DatasetError
            The server does not run it (:meth:`AppSettings.admit`).
        """
        return self.settings.admit(scenario).stamped(self.settings.data_dirs)

    def restamp(self) -> None:
        """Stamp the session's scenario by its served files as they are now (a ``stat`` each,
        never a read; :meth:`Scenario.stamped`). Every page run starts with it
        (:func:`geoviz.app.widgets.app_page`), so a file replaced or broken since the last
        run changes every key the page reads: its new numbers are computed, or its loader's
        sentence shown, never the old numbers."""
        stamped = self.scenario.stamped(self.settings.data_dirs)
        if stamped is not self.scenario:
            self.scenario = stamped

    @property
    def uploads(self) -> dict[str, UploadRef]:
        """This session's uploads, ``key -> UploadRef`` (the bytes live in the server's
        :class:`~geoviz.app.uploads.UploadStore`, never in the session)."""
        uploads: dict[str, UploadRef] = self.state[self.UPLOADS]
        return uploads

    def add_upload(self, ref: UploadRef) -> UploadRef:
        if not isinstance(ref, UploadRef):
            raise TypeError(f"expected an UploadRef, got {type(ref).__name__}")
        self.uploads[ref.key] = ref
        return ref

    def picked_weights(self, m: int) -> SimplexWeights | None:
        """Weights the user picked for the current scenario (validated and rounded once,
        by :meth:`set_weights`), or ``None``."""
        w = self.state[self.WEIGHTS].get(self.scenario.key())
        if not isinstance(w, SimplexWeights) or w.m != m:
            return None
        return w

    def set_weights(self, weights: SimplexWeights | Sequence[float] | np.ndarray) -> SimplexWeights:
        """Validate ``weights`` once, where they enter the app, and keep them rounded.

        The stored value is :meth:`SimplexWeights.from_input
        <geoviz.geodesic.weights.SimplexWeights.from_input>` of the input (what
        :func:`~geoviz.app.links.entry_weights` returns as an array): on the simplex and
        rounded to :data:`ENTRY_DECIMALS` places, so the cache key, the URL and the
        computed ``P_a`` use the very same numbers, and nothing downstream checks them again.

        Raises
        ------
        WeightsError
            Wrong length, NaN, negative entries or a sum other than 1.
        """
        w = SimplexWeights.from_input(weights, self.scenario.m, ENTRY_DECIMALS)
        self.state[self.WEIGHTS][self.scenario.key()] = w
        return w

    def clear_weights(self) -> None:
        self.state[self.WEIGHTS].pop(self.scenario.key(), None)

    def current_weights(self, a_hat: SimplexWeights | np.ndarray) -> SimplexWeights:
        """The picked weights, or ``a_hat`` (rounded like picked ones) when none were picked."""
        w = self.picked_weights(len(a_hat))
        return SimplexWeights.from_input(a_hat, len(a_hat), ENTRY_DECIMALS) if w is None else w

    # ------------------------------------------------------------------ URL state
    def mccann_pick(self) -> tuple[int | None, float | None]:
        """The McCann page's reference index and ``t`` for the current scenario (``None``:
        not chosen yet)."""
        pick = self.state[self.MCCANN].get(self.scenario.key(), {})
        return pick.get("ref"), pick.get("t")

    def set_mccann(self, *, ref: int | None = None, t: float | None = None) -> None:
        """Store the McCann page's reference (``0..m-1``) and/or ``t`` (in ``[0, 1]``, kept to
        2 decimals as the slider sends it), checked once here."""
        pick = dict(self.state[self.MCCANN].get(self.scenario.key(), {}))
        if ref is not None:
            m = self.scenario.m
            if isinstance(ref, bool) or not isinstance(ref, (int, np.integer)) or not 0 <= ref < m:
                raise GeovizError(f"the reference must be an index in 0..{m - 1}, got {ref!r}")
            pick["ref"] = int(ref)
        if t is not None:
            pick["t"] = round(check_t(t), 2)
        self.state[self.MCCANN][self.scenario.key()] = pick

    def query_state(self) -> dict[str, str]:
        """The session as URL query parameters: ``{"scenario": token}`` plus ``{"a": "0.5,0.3,0.2"}``
        when weights were picked (see :func:`scenario_to_token`), and the McCann page's
        ``{"ref": "1", "t": "0.3"}`` once chosen."""
        out = {QUERY_SCENARIO: scenario_to_token(self.scenario)}
        picked = self.picked_weights(self.scenario.m)
        if picked is not None:
            out[QUERY_WEIGHTS] = picked.to_text()
        ref, t = self.mccann_pick()
        if ref is not None:
            out[QUERY_MCCANN_REF] = str(ref)
        if t is not None:
            out[QUERY_MCCANN_T] = f"{t:.2f}".rstrip("0").rstrip(".") or "0"
        return out

    def restore(
        self, params: Mapping[str, str], load: Callable[[Scenario], object] | None = None
    ) -> list[str]:
        """Take the scenario and picked weights from URL query ``params``.

        A missing parameter keeps the session's value. The scenario comes as a token
        (``scenario=``) or, from the CLI's ``app`` line, as readable fields (``target=``,
        ``refs=``, ..., :func:`~geoviz.app.links.scenario_from_query`). The link's scenario is admitted by
        the server's settings and its datasets are loaded by ``load`` (the app passes its
        cached :func:`geoviz.app.services.datasets.scenario_data`, so the page that follows
        reuses them; ``None``: not loaded, only admitted) *before* it replaces the
        session's, as Apply does
        (:func:`~geoviz.app.services.datasets.apply_scenario`): a link naming a dataset that
        is offered but cannot load here (a download without network, a file that does not
        parse, an upload that is gone) keeps the working scenario.

        Returns the problems found (a corrupt scenario token, datasets that do not load,
        weights that do not fit), each as a sentence for the user; the session keeps its
        values for those.
        """
        problems: list[str] = []
        token = params.get(QUERY_SCENARIO)
        readable = not token and bool(params.get("target") or params.get("refs"))
        if token or readable:
            try:
                # a token wins over readable fields (readable: the link has no token)
                read = scenario_from_token(token) if token else scenario_from_query(params)
                linked = self.admit(read)
            except GeovizError as err:
                problems.append(
                    f"The link's scenario could not be read ({err}); keeping the current scenario."
                )
            else:
                problem = self._load_linked(linked, load)
                if problem is None:
                    self.scenario = linked
                else:
                    problems.append(problem)
        text = params.get(QUERY_WEIGHTS)
        if text:
            try:
                self.set_weights(weights_from_text(text))
            except GeovizError as err:
                problems.append(f"The link's weights were ignored: {err}")
        ref_text, t_text = params.get(QUERY_MCCANN_REF), params.get(QUERY_MCCANN_T)
        if ref_text:
            try:
                self.set_mccann(ref=int(ref_text[:6]))
            except (ValueError, GeovizError):
                problems.append(
                    f"The link's McCann reference was ignored: expected an index in "
                    f"0..{self.scenario.m - 1}."
                )
        if t_text:
            try:
                self.set_mccann(t=float(t_text[:12]))
            except (ValueError, GeovizError):
                problems.append("The link's McCann t was ignored: expected a number in [0, 1].")
        return problems

    def _load_linked(
        self, scenario: Scenario, load: Callable[[Scenario], object] | None
    ) -> str | None:
        """Load a link's (admitted) ``scenario``; ``None`` when it loaded, else the sentence
        saying why it did not. The session's own scenario needs no check here: its page
        shows its state."""
        if scenario == self.scenario or load is None:
            return None
        try:
            load(scenario)
        except GeovizError as err:
            return (
                f"The link's datasets could not be loaded on this server ({err}); "
                "keeping the current scenario."
            )
        return None
