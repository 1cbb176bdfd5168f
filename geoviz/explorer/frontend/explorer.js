/* geoviz explorer: the generalized geodesic (and McCann's interpolation) redrawn in the
 * browser at frame rate. Plain JS ES modules, no build step, no network; the payload layout
 * is documented in geoviz/explorer/payload.py, the modules and their rules in MODULES.md.
 *
 * The host-independent entry: createExplorer(root, host) draws one explorer inside ``root``
 * and talks to its host only through ``host``: send(value) for what the user released
 * ({weights, seq, id}, {t, seq, id}) and the polls ({poll, seq, id}); resized(px) when the
 * content's height changed. The Streamlit component (streamlit.js) and the Jupyter widget are
 * two such hosts. Every explorer keeps its own state: two on one page share nothing. */
import { decode, mixShownImages, roundToSimplex } from "./maths.js";
import { LEGEND_W, el, fmt, pixelRatio, sizeCanvas, w2Decimals } from "./drawing_kit.js";
import { bootHeader, fitHeight, headerOf, listen, newExplorerState, objectiveAt, payloadArray, readoutAt, availableWidth, requestDraw } from "./explorer_state.js";
import { buildHeatmap, drawSimplex, scheduleRegion, toXY } from "./simplex_draw.js";
import { drawMass, drawSamples, layoutTiles } from "./tiles_and_mass.js";
import { buildTeachingControls, drawView, followedX, hoverView, mixupPointsAt, pointsDrawn, setupView, viewPoints } from "./embedding_view.js";
import { bindMcCann, bindSimplex } from "./interaction.js";
import { buildPlayControls, playInfo } from "./play.js";
import { downloadFigure, figureLayout, figureOf } from "./figure_export.js";
import { arrangeStage, mccannPlan, stageInfo, stagePlan } from "./stage_layout.js";

// polls for the parts computed in the background (issue 26): the next one this long after a
// render, and again after POLL_RETRY_MS if no render answered (a lost poll)
const POLL_MS = 300, POLL_RETRY_MS = 8000;
/** most pending parts one poll names */
const MAX_POLL_PARTS = 4;

/** One explorer inside ``root`` (an HTMLElement it owns), talking to ``host``
 *  ({send(value), resized(heightPx)}): returns {render(args), hooks, destroy()}. */
export function createExplorer(root, host) {
  const ex = newExplorerState(root, host);
  ex.hooks = explorerHooks(ex);
  ex.redraw = () => drawExplorer(ex);
  // laid out again (presenter mode's larger view): the pick, the switches and the zoom stay
  ex.relayout = () => { if (!ex.ui) return; rebuildExplorer(ex); drawExplorer(ex); fitHeight(ex); ex.hooks.relayouts += 1; };
  watchWidth(ex);
  return {
    render: (args) => renderExplorer(ex, args || {}),
    hooks: ex.hooks,
    destroy: () => destroyExplorer(ex),
  };
}

/** The explorer's test and inspection hooks (window.geovizExplorer in the Streamlit frame). */
function explorerHooks(ex) {
  const hooks = {
    frameTimes: [], valuesSent: 0, renders: 0, playFrames: 0, playFps: null, ready: false, polls: 0,
    /** times the explorer was laid out again for a new width */
    relayouts: 0,
    /** values the host refused (its send returned false); the Streamlit host replaces this
     *  with its guard's count of every message it dropped */
    dropped: () => ex.refused,
    objective: (a) => objectiveAt(ex, a), mix: (a) => Array.from(mixShownImages(ex.P, a)),
    pick: () => ex.pick.slice(), t: () => ex.t,
    /** the view ("embedding", "scatter", "pending": the embedding is still being computed, "none") */
    view: () => headerOf(ex).view,
    /** what the server still computes in the background (the browser polls for it) */
    pending: () => ex.pendingParts.slice(),
    header: () => { const h = Object.assign({}, ex.P.header); delete h.arrays; return h; },
    /** the P_a (or P^M_t) points the view draws: [[x, y], ...] */
    points: () => (ex.ui && ex.ui.view ? viewPoints(ex).map((p) => [p[0], p[1]]) : []),
    /** the bootstrap readout at a: {value: [lo, hi], gap: [lo, hi], good}, or null */
    uncertainty: (a) => (bootHeader(ex) ? readoutAt(ex, a) : null),
    /** canvas pixels of weights a on the ternary (m = 3), as the explorer draws them */
    simplexXY: (a) => toXY(ex, a),
    /** the current view as a figure: "svg" text or a "png" data URL */
    figure: (kind) => figureOf(ex, kind),
    /** where each canvas lies in that figure (CSS px): {width, height, parts: {id: {x, y, width, height}}} */
    figureLayout: () => figureLayout(ex),
    /** open the inspector on shown sample j (as a click on its tile does) */
    inspect: (j) => { ex.inspect = j; drawExplorer(ex); fitHeight(ex); },
    /** the view's P_a points in canvas pixels, and the legend column's width */
    viewXY: () => (ex.ui && ex.ui.view ? viewPoints(ex).map((p) => [ex.ui.X(p[0]), ex.ui.Y(p[1])]) : []),
    legendWidth: () => LEGEND_W,
    /** the teaching view's naive-mixup points at a: [[x, y], ...] (data coordinates) */
    mixupPoints: (a) => mixupPointsAt(ex, a),
    /** the teaching view's caption */
    teachingCaption: () => (ex.ui && ex.ui.teach ? ex.ui.teach.textContent : ""),
    /** Play's state: {kind, playing, label, progress, speed, loop, loops, path, durationMs, lastRunMs, frames} */
    play: () => playInfo(ex),
    /** how many points each layer of the view drew in the last frame */
    pointsDrawn: () => pointsDrawn(ex),
    /** the teaching scatter's followed x: {index, sample, a, x, T, pa} (data coordinates), or null */
    followed: () => (ex.ui && ex.ui.view ? followedX(ex) : null),
    /** the teaching step (0: free view, 1..3) */
    teachingStep: () => ex.teachStep || 0,
    /** the bootstrap's header ({method, level, replicates, seed, flat}), or null before it arrives */
    bootstrap: () => bootHeader(ex),
    /** lattice cells of the region as good as â drawn on the triangle (m = 3) */
    regionCells: () => (ex.ui ? ex.ui.regionCells || 0 : 0),
    /** the region as good as â's share of the simplex ({count, total, share} on the fixed
     *  barycentric lattice: the same at every canvas size), or null before it is built */
    regionShare: () => (ex.ui && ex.ui.regionShare ? Object.assign({}, ex.ui.regionShare) : null),
    /** the zoomed inset of a small region as good as â ({cells, share, zoom, x, y, size} in the
     *  simplex canvas's CSS px) and its caption, or null when the region is not small */
    regionInset: () => (ex.ui && ex.ui.inset ? { cells: ex.ui.regionCells, share: ex.ui.regionShare ? ex.ui.regionShare.share : null, zoom: ex.ui.inset.zoom, x: ex.ui.inset.x, y: ex.ui.inset.y,
      size: ex.ui.inset.s, caption: ex.ui.regionNote ? ex.ui.regionNote.textContent : "" } : null),
    /** the tiles' caption size (CSS px), or null without tiles */
    captionPx: () => (ex.ui && ex.ui.samples ? ex.ui.captionPx || null : null),
    /** the followed x's labels as drawn last: [{text, x, y, w, h, moved}] (the view's CSS px, y the top) */
    followLabels: () => (ex.ui && ex.ui.followLabels ? ex.ui.followLabels.map((b) => Object.assign({}, b)) : []),
    /** the layout: {mode: "wide" | "beside" | "stacked", width, simplex, colorbar, view, side, presenter, dpr} */
    layout: () => stageInfo(ex),
    /** mix(a) as base64 (compact for tests) */
    mix64: (a) => {
      const px = mixShownImages(ex.P, a); let s = "";
      for (let k = 0; k < px.length; k += 8192) s += String.fromCharCode.apply(null, px.subarray(k, k + 8192));
      return btoa(s);
    },
  };
  return hooks;
}

/** Listeners, timers and animation frames stopped; the root emptied. */
function destroyExplorer(ex) {
  if (ex.destroyed) return;
  ex.destroyed = true;
  ex.abort.abort();
  clearTimeout(ex.pollTimer); clearTimeout(ex.regionTimer);
  if (ex.frameRaf !== null) cancelAnimationFrame(ex.frameRaf);
  if (ex.playRaf !== null) cancelAnimationFrame(ex.playRaf);
  ex.pollTimer = ex.regionTimer = ex.frameRaf = ex.playRaf = null;
  ex.root.replaceChildren();
  ex.ui = null;
}

// ------------------------------------------------------------------ layout
function simplexHint(ex) {
  const m = headerOf(ex).m, bt = bootHeader(ex);
  const base = m === 3
    ? "Colour: W²(P_a, Q) computed here from W_i and W_ij (darker is lower); ★ â, ● the picked a."
    : m === 2 ? "The geodesic from P1 (t = 0) to P2 (t = 1): W²(P_a, Q) along it; ★ â."
    : "Linked bars: drag a bar (the others rescale) · arrows: ←/→ choose, ↑/↓ move.";
  if (!bt) return base + " Intervals: computing the bootstrap…";
  if (bt.flat) return base + " The references are identical as seen from Q: every a is as good as â.";
  const what = m === 3 ? " Dotted outline: the weights as good as â at this sample size"
    : m === 2 ? " Band: the interval of W²(P_a, Q); green ticks: the weights as good as â at this sample size"
    : " Whiskers: â's interval";
  return base + what + " (" + Math.round(100 * bt.level) + "% bootstrap, B = " + bt.replicates + ", " +
    (bt.method === "q-resample" ? "Q's samples drawn again with the maps fixed: the maps' own noise is not in it"
      : "Q and the references drawn again, maps refitted") + ")" + (m <= 3 ? "; dots: the replicates' â." : ".");
}
/** A bootstrap arrived (or changed): redraw what depends on it, in place (never mid-drag rebuild). */
function bootChanged(ex) {
  if (!ex.ui || headerOf(ex).mode === "mccann") return;
  ex.bootHat = null; ex.ui.band = null;
  scheduleRegion(ex);
  if (ex.ui.hint) ex.ui.hint.textContent = simplexHint(ex);
}
/** The explorer's elements for the current payload (once per payload, or embedding). */
function buildExplorer(ex) {
  const root = ex.root;
  root.replaceChildren(ex.tip);
  const h = headerOf(ex);
  const ui = (ex.ui = {});
  const top = el("div", { class: "row" }, root);
  const left = el("div", { class: "panel" }, top);
  const right = el("div", { class: "panel readout" }, top);
  if (h.mode === "mccann") {
    mccannPlan(ex);  // the view beside the slider when there is room (stage_layout.js)
    el("h4", { text: "t: from Q (t = 0) to " + h.ref_name + " (t = 1)" }, left);
    const line = el("div", {}, left);
    ui.slider = el("input", { type: "range", min: "0", max: "1", step: "0.01", id: "t-slider" }, line);
    ui.slider.value = String(ex.t);
    bindMcCann(ex, ui.slider);
    buildPlayControls(ex, left, "mccann");
    ui.value = el("div", { class: "big", id: "value" }, right);
    ui.w2 = el("div", { class: "gap", id: "mccann-w2" }, right);
    ui.caption = el("div", { class: "hint" }, right);
  } else {
    el("h4", { text: "Weights a (drag, click or use the arrow keys)" }, left);
    const m = h.m;
    // m > 3: each bar as wide as its reference's name needs (up to 200 px), so names are whole
    const probe = ex.doc.createElement("canvas").getContext("2d"); probe.font = "11px sans-serif";
    const barW = Math.min(200, Math.max(70, ...h.names.map((n) => probe.measureText(String(n)).width + 14)));
    const size = stagePlan(ex, Math.max(360, 40 + barW * m)).simplex;  // sized from the width (stage_layout.js)
    const simplexRow = el("div", { class: "row", style: "gap: 4px" }, left);
    ui.simplex = el("canvas", { id: "simplex", width: size[0], height: size[1], tabindex: "0" }, simplexRow);
    if (m === 3) ui.colorbar = el("canvas", { id: "colorbar", width: 86, height: size[1] }, simplexRow);
    ui.hint = el("div", { class: "hint", id: "simplex-hint" }, left);
    ui.hint.textContent = simplexHint(ex);
    buildPlayControls(ex, left, "geodesic");
    ui.weights = el("div", { id: "weights" }, right);
    ui.value = el("div", { class: "big", id: "value" }, right);
    ui.gap = el("div", { class: "gap", id: "gap" }, right);
    ui.interval = el("div", { id: "interval" }, right);
    ui.verdict = el("div", { class: "verdict", id: "verdict" }, right);
    ui.ahat = el("div", { class: "hint" }, right);
    ui.ahat.textContent = "â = (" + Array.from(payloadArray(ex, "a_hat").data).map((x) => fmt(x, 3)).join(", ") +
      ") · W²(P_â, Q) = " + w2Text(ex, h.w2_hat);
    bindSimplex(ex, ui.simplex, () => { if (ex.embWaiting) { applyEmbedding(ex); requestDraw(ex, null); } });
  }
  const figs = el("div", { class: "row", style: "gap: 6px; margin: 4px 0" }, right);
  el("span", { class: "hint", text: "This view as a figure:" }, figs);
  listen(ex, el("button", { id: "figure-png", text: "⤓ PNG" }, figs), "click", () => downloadFigure(ex, "png"));
  listen(ex, el("button", { id: "figure-svg", text: "⤓ SVG" }, figs), "click", () => downloadFigure(ex, "svg"));
  ui.figureNote = el("span", { class: "hint", id: "figure-note" }, figs);
  el("h4", { text: "Label mass per class (block total = " + (h.mode === "mccann" ? "1 − t | t" : "a_i") + ")" }, right);
  ui.mass = el("canvas", { id: "mass", width: 420, height: 150 }, right);
  if (payloadArray(ex, "images")) {
    el("h4", { text: (h.mode === "mccann" ? "P^M_t" : "P_a") +
      " of " + h.n_shown + " fixed target samples — caption: top soft label and its mass" }, root);
    if (h.pa_note) el("div", { class: "hint", id: "pa-note", text: h.pa_note }, root);  // why P_a is grey
    const [, hh, ww] = h.image_shape;
    const bar = el("div", { class: "row", style: "gap: 8px; align-items: center" }, root);
    el("span", { class: "hint", text: "Tile size" }, bar);
    ui.zoom = el("input", { type: "range", min: "1", max: "4", step: "1", id: "zoom", style: "width: 120px" }, bar);
    ui.zoom.value = "1";
    el("span", { class: "hint", text: "· click a tile to inspect it: x, every T_i(x) and " +
      (h.mode === "mccann" ? "P^M_t(x)" : "P_a(x)") + " side by side" }, bar);
    ui.baseScale = Math.max(1, Math.floor(56 / Math.max(hh, ww)));
    ui.samples = el("canvas", { id: "samples" }, root);
    layoutTiles(ex, 1);
    listen(ex, ui.zoom, "input", () => { layoutTiles(ex, Number(ui.zoom.value)); requestDraw(ex, null); fitHeight(ex); });
    listen(ex, ui.samples, "click", (ev) => {
      const r = ui.samples.getBoundingClientRect(), cols = ui.cols;
      const col = Math.floor((ev.clientX - r.left) / ui.tileW), row = Math.floor((ev.clientY - r.top) / ui.tileH);
      const j = row * cols + col;
      if (col >= 0 && col < cols && j >= 0 && j < h.n_shown) { ex.inspect = j; requestDraw(ex, null); fitHeight(ex); }
    });
    ui.inspector = el("canvas", { id: "inspector", width: 10, height: 10, style: "display: none" }, root);
    ui.tile = ex.doc.createElement("canvas");
    ui.tile.width = ww; ui.tile.height = hh;
  }
  if (h.view === "embedding" || h.view === "scatter") {
    el("h4", { text: h.view === "embedding"
      ? (h.embedding_method || "").toUpperCase() + " of Q and the references (faded) with " +
        (h.mode === "mccann" ? "P^M_t" : "P_a") + " moving (hover a point for its image)"
      : "The datasets: references and Q faded, " + (h.mode === "mccann" ? "P^M_t" : "P_a") + " moving point by point" }, root);
    if (h.view === "scatter" && h.mode !== "mccann") buildTeachingControls(ex, root);  // the teaching view's switches
    // as wide as the page allows (a projector at 1280 px leaves the iframe ~820 px)
    ui.view = el("canvas", { id: "view" }, root);
    sizeCanvas(ui.view, ui.plan ? ui.plan.view[0] : Math.max(LEGEND_W + 300, Math.min(820, availableWidth(ex))),
      ui.plan ? ui.plan.view[1] : 460, pixelRatio(ex.doc));
    if (h.view === "scatter" && h.mode !== "mccann") ui.teach = el("div", { class: "hint", id: "teach-caption" }, root);
    setupView(ex);
    listen(ex, ui.view, "pointermove", (ev) => hoverView(ex, ev));
    listen(ex, ui.view, "pointerleave", () => { ex.tip.style.display = "none"; });
  }
  if (h.view === "pending") {  // the embedding comes later, by itself (issue 26)
    el("h4", { text: "Embedding of Q and the references, with " + (h.mode === "mccann" ? "P^M_t" : "P_a") + " moving" }, root);
    ui.pendingNote = el("div", { class: "hint", id: "view-pending" }, root);
    ui.pendingNote.textContent = pendingText(ex);
  }
  arrangeStage(ex);
  if (ui.defaultZoom && ui.samples) layoutTiles(ex, ui.defaultZoom);  // the layout's tile size
  fitHeight(ex);
  if (h.mode !== "mccann" && h.m === 3) buildHeatmap(ex);
}
function pendingText(ex) {
  return ex.embError ? "No embedding view: " + ex.embError
    : "The embedding (UMAP, or PCA) is computed in the background: it appears here when ready, no click needed.";
}
/** The embedding view's arrays and header keys into the payload (the view is drawn by build). */
function mergeEmbedding(ex, id, data) {
  const e = decode(data);
  ex.embId = id;
  for (const k of ["view", "embedding_method", "axis_titles", "grid_res"]) if (k in e.header) ex.P.header[k] = e.header[k];
  Object.assign(ex.P.arrays, e.arrays);
}
/** The embedding view arrived: add its header fields and arrays to the payload and rebuild
 * (after a drag, never during one). */
function applyEmbedding(ex) {
  const waiting = ex.embWaiting; ex.embWaiting = null;
  mergeEmbedding(ex, waiting.id, waiting.data);
  rebuildExplorer(ex);
}
/** The explorer built again (a new layout or a new view); the tile zoom the user chose, the
 *  pick, the bootstrap and the teaching switches (kept on ``ex``) stay. */
function rebuildExplorer(ex) {
  const zoom = ex.ui && ex.ui.zoom ? ex.ui.zoom.value : null;
  ex.ui = null;
  buildExplorer(ex);
  if (zoom && ex.ui.zoom && zoom !== ex.ui.zoom.value) { ex.ui.zoom.value = zoom; layoutTiles(ex, Number(zoom)); }
  bootChanged(ex);
}
/** Width (CSS px) the explorer's layout may be off by before it is laid out again. */
const RELAYOUT_PX = 24;
/** The explorer's width changed (a window resized, a projector plugged in, a sidebar closed, a
 *  notebook cell widened): laid out again for the new width once the resizing settles, never
 *  in the middle of a drag or a play (then right after it). */
function watchWidth(ex) {
  const View = ex.doc.defaultView;
  if (!View || typeof View.ResizeObserver !== "function") return;
  let timer = null;
  const check = () => {
    timer = null;
    if (ex.destroyed || !ex.ui || !ex.ui.plan) return;
    if (ex.dragging || ex.playing) { timer = setTimeout(check, 300); return; }
    if (Math.abs(availableWidth(ex) - ex.ui.plan.width) <= RELAYOUT_PX) return;
    rebuildExplorer(ex);
    drawExplorer(ex);
    fitHeight(ex);
    ex.hooks.relayouts += 1;
  };
  const observer = new View.ResizeObserver(() => { clearTimeout(timer); timer = setTimeout(check, 150); });
  observer.observe(ex.root);
  ex.abort.signal.addEventListener("abort", () => { observer.disconnect(); clearTimeout(timer); });
}
/** Ask the host again for the parts still pending (in Streamlit, a rerun of the page's fragment). */
function schedulePoll(ex) {
  clearTimeout(ex.pollTimer); ex.pollTimer = null;
  if (!ex.pendingParts.length || ex.destroyed) return;
  ex.pollTimer = setTimeout(function poll() {
    ex.pollTimer = null;
    if (!ex.pendingParts.length || ex.destroyed) return;
    // after the drag, and after the host has handled the last release: Streamlit keeps only
    // a component's latest value until its script reads it, so a poll sent right behind a
    // release could replace it (the release lost, the pick put back); a release unanswered
    // for POLL_RETRY_MS is taken as lost and no longer holds the polls
    const unanswered = ex.valueSeq > 0 && !(ex.handledSeq >= ex.valueSeq)
      && Date.now() - ex.valueSentAt < POLL_RETRY_MS;
    if (ex.dragging || unanswered) { ex.pollTimer = setTimeout(poll, POLL_MS); return; }
    ex.seq += 1; ex.hooks.polls += 1;  // a poll is not a value the user sent (hooks.valuesSent)
    ex.host.send({ poll: ex.pendingParts.slice(0, MAX_POLL_PARTS), seq: ex.seq, id: ex.payloadId });
    ex.pollTimer = setTimeout(poll, POLL_RETRY_MS);
  }, POLL_MS);
}

/** A W² of this view, with the view's one number of decimals (drawing_kit.js w2Decimals). */
function w2Text(ex, x) {
  const h = headerOf(ex);
  if (ex.w2For !== ex.payloadId) {
    ex.w2d = w2Decimals(h.mode === "mccann" ? payloadArray(ex, "w_to_target").data[h.ref] : h.w2_hat);
    ex.w2For = ex.payloadId;
  }
  return Number(x).toFixed(ex.w2d);
}

// ------------------------------------------------------------------ drawing per frame
/** Everything at the current pick (or t): the readout, the simplex, the bars, tiles, view. */
function drawExplorer(ex) {
  const h = headerOf(ex), ui = ex.ui;
  if (!ui) return;
  if (h.mode === "mccann") {
    ui.slider.value = String(ex.t);
    ui.value.textContent = "t = " + fmt(ex.t, 2);
    // McCann's path is the generalized geodesic of {Q (T = Id), P_i}: eq. (ds_eq) at
    // a = (1 − t, t) with W_Q = 0 and W_{Q,i} = W_i gives t W_i − (1 − t) t W_i = t² W_i
    const wi = payloadArray(ex, "w_to_target").data[h.ref], w2 = ex.t * ex.t * wi;
    ui.w2.textContent = "W²(P^M_t, Q) = t² · W_" + (h.ref + 1) + " = " + w2Text(ex, w2);
    ui.w2.setAttribute("data-value", String(w2));
    ui.caption.textContent = "P^M_t = ((1 − t) Id + t T_" + (h.ref + 1) + ")#Q; W_" + (h.ref + 1) + " = W²(P_" + (h.ref + 1) +
      ", Q) = " + w2Text(ex, wi) + " (paper Def. 2); the server hears t on release.";
  } else {
    drawSimplex(ex);
    const v = objectiveAt(ex, ex.pick), gap = v - h.w2_hat;
    ui.weights.textContent = "a = (" + ex.pick.map((x) => fmt(x, h.weight_decimals)).join(", ") + ")";
    ui.value.textContent = "W²(P_a, Q) = " + w2Text(ex, v);
    ui.value.setAttribute("data-value", String(v));
    const ahatShown = roundToSimplex(Array.from(payloadArray(ex, "a_hat").data), h.weight_decimals);
    if (ex.pick.every((x, i) => Math.abs(x - ahatShown[i]) < 1e-12)) {
      ui.gap.textContent = "at â (its weights rounded to " + h.weight_decimals + " decimals)";  // not a red "+4.5e-7"
      ui.gap.className = "gap down";
    } else {
      ui.gap.textContent = (gap >= 0 ? "+" : "") + Number(gap).toPrecision(3) + " vs â";
      ui.gap.className = "gap " + (gap > 1e-12 ? "up" : "down");
    }
    const bt = bootHeader(ex);
    if (!bt) { ui.interval.textContent = ""; ui.verdict.textContent = ""; ui.verdict.removeAttribute("data-distinguishable"); }
    else {
      const r = readoutAt(ex, ex.pick), pct = Math.round(100 * bt.level) + "%";
      ui.interval.textContent = pct + " interval [" + w2Text(ex, r.value[0]) + ", " + w2Text(ex, r.value[1]) + "] · gap to â [" +
        Number(r.gap[0]).toPrecision(3) + ", " + Number(r.gap[1]).toPrecision(3) + "] (" + bt.method + ", B = " + bt.replicates + ")";
      const good = bt.flat || r.good;
      ui.verdict.textContent = bt.flat ? "identical references: every a is as good as â"
        : good ? "as good as â at this sample size" : "distinguishable from â: worse beyond the sampling noise";
      ui.verdict.className = "verdict " + (good ? "same" : "worse");
      ui.verdict.setAttribute("data-distinguishable", String(!good));
    }
    if (ex.hover) ui.ahat.dataset.hover = "";
  }
  drawMass(ex);
  if (ui.samples) drawSamples(ex);
  if (ui.view) drawView(ex);
}

// ------------------------------------------------------------------ render
/** The host's arguments (the Streamlit component's args): a new payload is decoded and built,
 *  the pick follows the server unless the user moved it since, the bootstrap and the
 *  embedding are merged when they arrive, the polls are scheduled; then one frame is drawn. */
function renderExplorer(ex, args) {
  if (ex.destroyed) return;
  ex.hooks.renders += 1;
  if (Number.isInteger(args.handled_seq)) ex.handledSeq = args.handled_seq;
  if (args.payload_id !== ex.payloadId) {
    ex.P = decode(args.payload);
    ex.payloadId = args.payload_id;
    ex.bootHat = null; ex.B = null; ex.bootId = null; ex.inspect = null;
    ex.embId = null; ex.embWaiting = null;
    ex.pick = null;
    ex.ui = null;
  }
  const h = headerOf(ex);
  if (h.mode === "mccann") {
    if (!ex.playing && args.t !== undefined && args.t !== null && ex.ui == null) ex.t = Number(args.t);
  } else if (!ex.dragging && !ex.playing && !(Number.isInteger(args.handled_seq) && args.handled_seq < ex.seq)) {
    // (a render that has not seen this page's last release yet keeps the browser's pick)
    const picked = args.picked && args.picked.length === h.m ? Array.from(args.picked, Number) : Array.from(payloadArray(ex, "a_hat").data);
    if (!ex.pick || !ex.sentPick || picked.some((x, i) => Math.abs(x - ex.sentPick[i]) > 1e-9)) ex.pick = roundToSimplex(picked, h.weight_decimals);
    ex.sentPick = ex.pick.slice();
  }
  const embId = args.emb ? args.emb_id : null;
  // an embedding already there at the first render (a restarted server) goes into the one
  // first build, instead of a second build right after it
  if (!ex.ui && embId && embId !== ex.embId && !ex.dragging) { ex.embWaiting = null; mergeEmbedding(ex, embId, args.emb); }
  if (!ex.ui) buildExplorer(ex);
  const bootId = args.boot ? args.boot_id : null;
  if (bootId !== ex.bootId) {
    ex.bootId = bootId;
    ex.B = args.boot ? decode(args.boot) : null;
    bootChanged(ex);
  }
  ex.embError = args.emb_error || null;
  if (embId && embId !== ex.embId && (!ex.embWaiting || ex.embWaiting.id !== embId)) ex.embWaiting = { id: embId, data: args.emb };
  if (ex.embWaiting && !ex.dragging) applyEmbedding(ex);
  else if (ex.ui.pendingNote) ex.ui.pendingNote.textContent = pendingText(ex);
  ex.pendingParts = Array.isArray(args.pending) ? args.pending.map(String) : [];
  schedulePoll(ex);
  drawExplorer(ex);
  fitHeight(ex);
  ex.hooks.ready = true;
}
