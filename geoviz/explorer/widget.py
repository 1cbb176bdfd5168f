"""The app's live explorer of a generalized geodesic as a Jupyter widget (anywidget).

:class:`GeodesicExplorer` (usually opened with :meth:`GeodesicResult.explore
<geoviz.geodesic.result.GeodesicResult.explore>`) draws what the app's Geodesic page draws,
from the same payload (:func:`geoviz.explorer.payload.build_geodesic`) and the same
JavaScript (``frontend/``, joined into one ES module by :mod:`geoviz.explorer.bundle`, shipped
inside the package: no network, no CDN): the weight simplex and ``W^2(P_a, Q)`` over it,
``P_a``'s samples, the label mass, the bootstrap intervals and, for images, the embedding view.

The pick is the synced trait :attr:`GeodesicExplorer.weights`: a release of the pointer in the
browser sets it, and assigning it from Python moves the pick in the browser. Either way it is
validated by :func:`geoviz.geodesic.weights.check_weights` and rounded on the simplex to
:data:`~geoviz.geodesic.weights.ENTRY_DECIMALS` places, as the app rounds its picks; a value
that is not a point of the simplex is refused (:class:`WeightsTraitError`) and the previous
pick stays.

The bootstrap (intervals at the pick, the region as good as ``a_hat``) and the embedding view
are computed in a background thread started with the widget; until they arrive the explorer
draws without them, and a failure becomes one sentence in :attr:`GeodesicExplorer.error`
(shown under the explorer), never a traceback in the kernel.
"""

from __future__ import annotations

import base64
import logging
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anywidget
import traitlets

from geoviz.atomic import NotReplaceableError, atomic_write_bytes, check_replaceable
from geoviz.backend import digest_bytes
from geoviz.errors import ExportError, ExportExistsError, GeovizError, WeightsError, short_repr
from geoviz.explorer.bundle import bundle
from geoviz.explorer.payload import Payload, build_bootstrap, build_embedding, build_geodesic
from geoviz.geodesic.weights import ENTRY_DECIMALS, SimplexWeights
from geoviz.viz.embedding import fit_embedding

if TYPE_CHECKING:
    from geoviz.data.dataset import SoftLabeledDataset
    from geoviz.geodesic.result import GeodesicResult
    from geoviz.geodesic.uncertainty import GeodesicBootstrap, Interval

LOG = logging.getLogger(__name__)

__all__ = [
    "BOOTSTRAP_REPLICATES",
    "EMBED_PER_DATASET",
    "FIGURE_KINDS",
    "FigureKind",
    "GeodesicExplorer",
    "WeightsTraitError",
    "figure_kind",
    "has_embedding_view",
]

#: Q-resampling replicates of the widget's bootstrap (the app's explorer uses as many)
BOOTSTRAP_REPLICATES = 200
#: points per dataset of the embedding view's fit (the app's default)
EMBED_PER_DATASET = 300
#: what :meth:`GeodesicExplorer.save_figure` writes
FigureKind = Literal["png", "svg"]
FIGURE_KINDS: tuple[FigureKind, ...] = ("png", "svg")
#: the first bytes of every PNG file
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: most characters of a refused value quoted in a refusal (:class:`WeightsTraitError`)
QUOTE_CHARS = 40
#: most characters of the library's reason in a refusal
REASON_CHARS = 160


def _exists_sentence(path: Path) -> str:
    return f"{path} already exists; pass overwrite=True to replace it"


def _refuse_target(path: Path, overwrite: bool) -> None:
    """The CLI's rule for an output file: never a non-regular file, an existing one only
    with ``overwrite``."""
    try:
        check_replaceable(path)
    except NotReplaceableError as err:
        raise ExportError(str(err)) from None
    if path.exists() and not overwrite:
        raise ExportExistsError(_exists_sentence(path))


def figure_kind(path: Path, kind: str | None = None) -> FigureKind:
    """The format of a figure written to ``path``: its extension's (``.png`` or ``.svg``,
    any case), which ``kind`` may only repeat.

    Raises
    ------
    GeovizError
        ``kind`` is not ``"png"``, ``"svg"`` or ``None``.
    ExportError
        The extension is neither ``.png`` nor ``.svg``, or it is not ``kind``.
    """
    if kind is not None and kind not in FIGURE_KINDS:
        raise GeovizError(f"figure kind must be one of {FIGURE_KINDS}, got {short_repr(kind)}")
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in FIGURE_KINDS:
        raise ExportError(
            f"a figure's format is its file's extension: name it .png or .svg, not {path.name!r}"
        )
    if kind is not None and kind != suffix:
        raise ExportError(
            f"{path.name!r} is a .{suffix} file but kind={kind!r} was asked: drop kind, or name "
            f"the file .{kind}"
        )
    return suffix


class WeightsTraitError(traitlets.TraitError, WeightsError):
    """Weights refused by :attr:`GeodesicExplorer.weights`: a :class:`traitlets.TraitError`
    (what traitlets raises for a bad value) and a :class:`~geoviz.errors.WeightsError`
    (a ``ValueError``), with the library's message."""


class _WeightsTrait(traitlets.Any):
    """Any value (a list, an array, :class:`SimplexWeights`), ``None`` included: the widget's
    validator (:meth:`GeodesicExplorer._valid_weights`) decides, for every value."""

    allow_none = False
    info_text = "weights on the probability simplex"


def has_embedding_view(result: GeodesicResult) -> bool:
    """Whether the explorer shows ``P_a`` in an embedding (images, or more than 3 features;
    2-D/3-D data are drawn as they are): the app's rule."""
    return result.image_shape is not None or result.target.features.shape[1] not in (2, 3)


def _sentence(what: str, err: BaseException) -> str:
    """One sentence for a failed background part (the library's message for its own errors,
    the kind and message of anything else)."""
    detail = str(err) if isinstance(err, GeovizError) else f"{type(err).__name__}: {err}"
    detail = " ".join(detail.split())[:300] or type(err).__name__
    return f"The {what} could not be computed ({detail.rstrip('.')})."


class GeodesicExplorer(anywidget.AnyWidget):
    """The live explorer of ``result``'s generalized geodesic in a notebook.

    Parameters
    ----------
    result
        A fitted :class:`~geoviz.geodesic.result.GeodesicResult`.
    weights
        The first pick (default: ``a_hat``), validated and rounded like every pick.
    bootstrap
        Q-resampling replicates for the intervals (:meth:`GeodesicResult.bootstrap`, seed
        ``seed``), computed in a background thread; ``0``: no intervals.
    embedding
        Fit the embedding view in the background (image or high-dimensional data, as the
        app; UMAP, or PCA with ``GEOVIZ_EMBEDDING=pca``).
    seed
        Seed of the bootstrap, of the embedding and of the naive-mixup pairs (2-D/3-D data).

    Attributes
    ----------
    weights
        The pick, ``[a_1, ..., a_m]`` (synced with the browser; assign to move it).
    error
        Why a background part (intervals, embedding) or a browser value was refused, in
        words; ``""`` when all is well.

    Notes
    -----
    :meth:`save_figure` asks the browser for the figure; the file is written when the
    browser's answer reaches the kernel, which reads it only while it is idle: after the
    cell that called it has finished.
    """

    #: the bundled JavaScript (:func:`geoviz.explorer.bundle.bundle`), set by the first widget
    _esm = traitlets.Unicode("").tag(sync=True)

    weights = _WeightsTrait().tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    _payload = traitlets.Bytes(b"").tag(sync=True)
    _payload_id = traitlets.Unicode("").tag(sync=True)
    _boot = traitlets.Bytes(b"").tag(sync=True)
    _boot_id = traitlets.Unicode(None, allow_none=True).tag(sync=True)
    _emb = traitlets.Bytes(b"").tag(sync=True)
    _emb_id = traitlets.Unicode(None, allow_none=True).tag(sync=True)
    _emb_error = traitlets.Unicode(None, allow_none=True).tag(sync=True)
    _pending = traitlets.List(traitlets.Unicode()).tag(sync=True)
    _handled_seq = traitlets.Int(None, allow_none=True).tag(sync=True)

    def __init__(
        self,
        result: GeodesicResult,
        *,
        weights: Any = None,
        bootstrap: int = BOOTSTRAP_REPLICATES,
        embedding: bool = True,
        seed: int = 0,
        **kwargs: Any,
    ) -> None:
        self._result = result
        self._seed = int(seed)
        self._bootstrap: GeodesicBootstrap | None = None
        self._errors: dict[str, str] = {}
        self._figures: dict[int, tuple[Path, str, bool, Future[Path]]] = {}
        self._figure_seq = 0
        self._lock = threading.Lock()
        with_embedding = bool(embedding) and has_embedding_view(result)
        payload = build_geodesic(
            result, mixup_seed=self._seed, embedding_pending=has_embedding_view(result)
        )
        pending = [
            part
            for part, wanted in (("intervals", bootstrap > 0), ("embedding", with_embedding))
            if wanted
        ]
        first = result.a_hat if weights is None else weights
        super().__init__(
            _esm=bundle(),
            weights=first,  # validated (and refused) as every pick
            _payload=payload.data,
            _payload_id=self._payload_key(payload, "geodesic"),
            _pending=pending,
            **kwargs,
        )
        self.on_msg(self._on_frontend_msg)
        self._thread = threading.Thread(
            target=self._background,
            args=(int(bootstrap), with_embedding),
            name="geoviz-explorer-background",
            daemon=True,
        )
        self._thread.start()

    # ------------------------------------------------------------------ the pick
    @traitlets.validate("weights")
    def _valid_weights(self, proposal: dict[str, Any]) -> list[float]:
        """The pick, validated and rounded; anything else is one :class:`WeightsTraitError`
        that quotes at most :data:`QUOTE_CHARS` characters of the value (a refused 10^7-entry
        list is not copied into the message, nor into :attr:`error` in the browser)."""
        value = proposal["value"]
        try:
            picked = SimplexWeights.from_input(value, self._result.m, ENTRY_DECIMALS)
        except WeightsError as err:
            reason = str(err)
        except Exception as err:  # a hostile __array__ or __float__: refused all the same
            LOG.debug("weights refused", exc_info=err)
            reason = f"they are not numbers ({type(err).__name__})"
        else:
            return picked.tolist()
        raise WeightsTraitError(
            f"refused weights {short_repr(value, QUOTE_CHARS)}: "
            f"{reason[:REASON_CHARS].rstrip('.')} (the pick stays at {self.weights})"
        )

    @property
    def result(self) -> GeodesicResult:
        """The explored :class:`~geoviz.geodesic.result.GeodesicResult`."""
        return self._result

    @property
    def a_hat(self) -> list[float]:
        """``a_hat``, the minimiser of ``W^2(P_a, Q)`` (as the solver found it)."""
        return [float(x) for x in self._result.a_hat]

    @property
    def value(self) -> float:
        """``W^2(P_a, Q)`` at the pick (:meth:`GeodesicResult.objective`)."""
        return float(self._result.objective(self.weights))

    @property
    def bootstrap_result(self) -> GeodesicBootstrap | None:
        """The bootstrap once its background computation is done (else ``None``)."""
        return self._bootstrap

    @property
    def intervals(self) -> dict[str, Interval] | None:
        """The bootstrap intervals at the pick, once the bootstrap is done (else ``None``):
        ``{"value": ...}`` for ``W^2(P_a, Q)`` and ``{"gap": ...}`` for
        ``W^2(P_a, Q) - W^2(P_a_hat, Q)`` (:class:`~geoviz.geodesic.uncertainty.Interval`)."""
        boot = self._bootstrap
        if boot is None:
            return None
        return {
            "value": boot.objective_interval(self.weights),
            "gap": boot.gap_interval(self.weights),
        }

    def dataset(self, n: int | None = None, seed: int = 0) -> SoftLabeledDataset:
        """``P_a`` at the pick (:meth:`GeodesicResult.interpolate`), ready for
        :func:`geoviz.export.export_dataset`."""
        return self._result.interpolate(SimplexWeights(tuple(self.weights)), n=n, seed=seed)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the background parts (intervals, embedding); ``True`` when they are
        done (successfully or not, see :attr:`error`)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # ------------------------------------------------------------------ figures
    def save_figure(
        self, path: str | Path, kind: FigureKind | None = None, *, overwrite: bool = False
    ) -> Future[Path]:
        """Ask the browser for the current view as a figure (simplex with its scale, readout,
        label mass, samples, embedding) and write it to ``path``.

        The format is the extension's: ``view.png`` gets a PNG, ``view.svg`` an SVG.
        ``kind`` (``"png"`` or ``"svg"``) may say it again; a ``kind`` the extension
        contradicts, or another extension, is refused (:class:`~geoviz.errors.ExportError`),
        so a ``.svg`` file never receives PNG bytes.

        As the CLI's ``--out``: an existing ``path`` is replaced only with ``overwrite=True``,
        and only when it is a regular file; a folder, a device, a FIFO or a link is refused
        (:class:`~geoviz.errors.ExportError`) now, before the browser is asked, and again
        when the file is written.

        The file is written when the browser answers, which the kernel reads only when it
        is idle: *after the cell that called this has finished* (wait on the returned future
        in a later cell, not in the same one). Nothing is written while the widget is not
        displayed.

        Returns
        -------
        concurrent.futures.Future
            Resolves to the written path, or fails with the browser's reason (or with
            :class:`~geoviz.errors.ExportExistsError` when ``path`` appeared meanwhile).

        Raises
        ------
        ExportExistsError
            ``path`` exists and ``overwrite`` is false.
        ExportError
            ``path`` exists and is not a regular file, or its extension is not the
            ``kind`` asked (or neither ``.png`` nor ``.svg``).
        GeovizError
            ``kind`` is not ``"png"``, ``"svg"`` or ``None``.
        """
        target = Path(path)
        kind = figure_kind(target, kind)
        _refuse_target(target, overwrite)
        future: Future[Path] = Future()
        with self._lock:
            self._figure_seq += 1
            ident = self._figure_seq
            self._figures[ident] = (target, kind, overwrite, future)
        self.send({"kind": "figure", "id": ident, "format": kind})
        return future

    def _receive_figure(self, content: dict[str, Any]) -> None:
        ident = content.get("id")
        if isinstance(ident, bool) or not isinstance(ident, int):  # a list would not hash
            return
        with self._lock:
            entry = self._figures.pop(ident, None)
        if entry is None:  # another view of this widget answered first
            return
        path, kind, overwrite, future = entry
        try:
            if content.get("error"):
                reason = content["error"]
                reason = reason[:REASON_CHARS] if isinstance(reason, str) else short_repr(reason)
                raise GeovizError(f"the browser could not draw the figure: {reason}")
            data = content.get("data")
            if not isinstance(data, str):
                raise GeovizError("the browser sent no figure")
            if kind == "png":
                head, _, b64 = data.partition(",")
                if head != "data:image/png;base64":
                    raise GeovizError("the browser's figure is not a PNG data URL")
                raw = base64.b64decode(b64, validate=True)
                if not raw.startswith(PNG_SIGNATURE):
                    raise GeovizError("the browser's figure is not a PNG image")
            else:
                if not data.lstrip().startswith(("<svg", "<?xml")):
                    raise GeovizError("the browser's figure is not an SVG document")
                raw = data.encode("utf-8")
            _refuse_target(path, overwrite)  # again: it may have appeared meanwhile
            atomic_write_bytes(path, raw, overwrite=overwrite)
        except FileExistsError:
            future.set_exception(ExportExistsError(_exists_sentence(path)))
        except Exception as err:
            LOG.debug("figure not written", exc_info=err)
            future.set_exception(err)
        else:
            future.set_result(path)

    # ------------------------------------------------------------------ the browser
    def _on_frontend_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """A message of the JavaScript host (``frontend/jupyter.js``): ``{"kind": "pick",
        "weights", "seq"}`` on a pointer release, ``{"kind": "figure", ...}`` answering
        :meth:`save_figure`. Never raises (a refused value becomes :attr:`error`)."""
        if not isinstance(content, dict):
            return
        if content.get("kind") == "pick":
            self.receive_pick(content.get("weights"), content.get("seq"))
        elif content.get("kind") == "figure":
            self._receive_figure(content)

    def receive_pick(self, weights: Any, seq: Any = None) -> bool:
        """Weights released in the browser (the path the JavaScript host's messages take):
        validated as an assignment to :attr:`weights`; a refused value leaves the pick where
        it was, says why in :attr:`error` and puts the browser's pick back. ``True`` when
        accepted."""
        handled = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
        with self.hold_sync():
            try:
                self.weights = weights
            except traitlets.TraitError as err:
                self._errors["pick"] = f"The browser's pick was refused: {err}"
                accepted = False
            else:
                self._errors.pop("pick", None)
                accepted = True
            self.error = " ".join(self._errors.values())
            # a new number on every release: the browser re-renders with the kept pick
            self._handled_seq = handled
            if handled is None:
                self.send_state("weights")
        return accepted

    # ------------------------------------------------------------------ background
    def _background(self, replicates: int, with_embedding: bool) -> None:
        if replicates > 0:
            try:
                boot = self._result.bootstrap(replicates, seed=self._seed)
                payload = build_bootstrap(boot)
            except Exception as err:
                self._failed("intervals", "bootstrap intervals", err)
            else:
                self._bootstrap = boot
                with self.hold_sync():
                    self._boot = payload.data
                    self._boot_id = self._payload_key(payload, f"boot-{replicates}")
                    self._done("intervals")
        if with_embedding:
            try:
                result = self._result
                emb = fit_embedding(
                    [result.target, *result.references],
                    max_per_dataset=EMBED_PER_DATASET,
                    seed=self._seed,
                )
                payload = build_embedding(result, emb, emb.place)
            except Exception as err:
                self._failed("embedding", "embedding view", err)
                self._emb_error = self._errors["embedding"]
            else:
                with self.hold_sync():
                    self._emb = payload.data
                    self._emb_id = self._payload_key(payload, "embedding")
                    self._done("embedding")

    def _done(self, part: str) -> None:
        self._pending = [p for p in self._pending if p != part]

    def _failed(self, part: str, what: str, err: Exception) -> None:
        LOG.debug("explorer widget: %s failed", what, exc_info=err)
        self._errors[part] = _sentence(what, err)
        with self.hold_sync():
            self.error = " ".join(self._errors.values())
            self._done(part)

    @staticmethod
    def _payload_key(payload: Payload, kind: str) -> str:
        return f"{kind}-{digest_bytes([payload.data], length=16)}"
