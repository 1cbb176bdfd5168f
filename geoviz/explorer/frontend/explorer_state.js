/* geoviz explorer: one explorer's state (one object per createExplorer, nothing global) and
 * what every part reads from it: the payload's arrays, the bootstrap at a pick, the frame
 * scheduler, the content height, the value sent to the host. */
import { asGoodAsHat, bootstrapReadout, objective, percentileInterval, replicateObjectives } from "./maths.js";

/** A new explorer's state in ``root``, talking to ``host`` ({send(value), resized(px)}).
 *  ``hooks`` is the explorer's test/inspection object (window.geovizExplorer in Streamlit);
 *  ``redraw`` is set by the explorer (draws everything once). */
export function newExplorerState(root, host) {
  const doc = root.ownerDocument || document;
  // the hover tooltip: this explorer's own, inside its root, styled here (no page CSS needed)
  const tip = doc.createElement("div");
  tip.className = "geoviz-tip";
  Object.assign(tip.style, {
    position: "fixed", pointerEvents: "none", background: "#fff", border: "1px solid #ccc",
    padding: "3px", fontSize: "11px", display: "none", boxShadow: "0 1px 4px #0003", zIndex: "9",
  });
  root.appendChild(tip);
  return {
    root: root, host: host, tip: tip, doc: doc,
    /** every listener this explorer adds goes with this signal (destroy aborts it) */
    abort: new AbortController(), destroyed: false, frameRaf: null, playRaf: null,
    hooks: null, redraw: null, refused: 0, lastHeight: -1,
    payloadId: null, P: null, pick: null, t: 0.5, dragging: false, pending: [],
    rafQueued: false, seq: 0, hover: null, ui: null,
    embId: null, embWaiting: null, embError: null, pendingParts: [], pollTimer: null, regionTimer: null,
    B: null, bootId: null, bootHat: null, inspect: null, teach: undefined,
    activeBar: undefined, keyMoved: false, sentPick: null, playing: false,
    /** the last value sent (its seq and Date.now()) and the last seq the host said it handled */
    valueSeq: 0, valueSentAt: 0, handledSeq: null,
  };
}

/** ``target.addEventListener(type, fn)``, removed when the explorer is destroyed. */
export function listen(ex, target, type, fn) {
  target.addEventListener(type, fn, { signal: ex.abort.signal });
}

/** The payload's array ``name`` ({data, shape}), or undefined. */
export function payloadArray(ex, name) { return ex.P.arrays[name]; }
/** The payload's header. */
export function headerOf(ex) { return ex.P.header; }
/** The bootstrap's header ({method, level, replicates, seed, flat}), or null (none yet). */
export function bootHeader(ex) { return ex.B ? ex.B.header.boot : null; }
/** The bootstrap payload's array ``name``. */
export function bootArray(ex, name) { return ex.B.arrays[name]; }

/** W²(P_a, Q) from the payload's W_i and W_ij. */
export function objectiveAt(ex, a) {
  return objective(a, payloadArray(ex, "w_to_target").data, payloadArray(ex, "w_between").data);
}
/** Each replicate's W²(P_â, Q), computed once per bootstrap. */
function hatReplicates(ex) {
  if (!ex.bootHat) {
    ex.bootHat = replicateObjectives(Array.from(payloadArray(ex, "a_hat").data),
      bootArray(ex, "boot_w_to_target").data, bootArray(ex, "boot_w_between").data);
  }
  return ex.bootHat;
}
/** The interval of W²(P_a, Q) over the replicates. */
export function valueIntervalAt(ex, a) {
  return percentileInterval(replicateObjectives(a, bootArray(ex, "boot_w_to_target").data,
    bootArray(ex, "boot_w_between").data), bootHeader(ex).level);
}
/** As good as â at this sample size (the gap's interval holds 0). */
export function asGoodAt(ex, a) {
  return asGoodAsHat(a, bootArray(ex, "boot_w_to_target").data, bootArray(ex, "boot_w_between").data,
    hatReplicates(ex), bootHeader(ex).level);
}
/** The readout's numbers at ``a``: {value: [lo, hi], gap: [lo, hi], good}. */
export function readoutAt(ex, a) {
  return bootstrapReadout(a, bootArray(ex, "boot_w_to_target").data, bootArray(ex, "boot_w_between").data,
    hatReplicates(ex), bootHeader(ex).level);
}

/** The mixing coefficients now: the weights, or McCann's [1 − t, t]. */
export function currentCoef(ex) {
  return headerOf(ex).mode === "mccann" ? [1 - ex.t, ex.t] : ex.pick;
}

/** Draw on the next animation frame (once, however often asked); a pointer move or slider
 *  input's time stamp is kept, to measure its latency to the frame (hooks.frameTimes). */
export function requestDraw(ex, ev) {
  if (ex.destroyed) return;
  if (ev && ev.timeStamp !== undefined && (ev.type === "pointermove" || ev.type === "input")) ex.pending.push(ev.timeStamp);
  if (ex.rafQueued) return;
  ex.rafQueued = true;
  ex.frameRaf = requestAnimationFrame(() => {
    ex.rafQueued = false; ex.frameRaf = null;
    if (ex.destroyed) return;
    ex.redraw();
    const now = performance.now();
    for (const ts of ex.pending) ex.hooks.frameTimes.push(now - ts);
    ex.pending = [];
  });
}

/** Tell the host the content's height when it changed. */
export function fitHeight(ex) {
  if (ex.destroyed) return;
  const h = Math.ceil(ex.root.getBoundingClientRect().height);
  if (h !== ex.lastHeight) { ex.lastHeight = h; ex.host.resized(h); }
}

/** Width the explorer's canvases may use: the root's (or the frame's), less the padding. */
export function availableWidth(ex) {
  const page = ex.doc.documentElement.clientWidth, own = ex.root.clientWidth;
  return Math.max(320, (own > 0 ? Math.min(own, page) : page) - 12);
}

/** Send a value the user made (weights or t) to the host; counted in hooks.valuesSent unless
 *  the host refuses it (its send returns false). */
export function sendValue(ex, value) {
  if (ex.destroyed) return;
  if (ex.host.send(value) !== false) {
    ex.hooks.valuesSent += 1;
    ex.valueSeq = value.seq; ex.valueSentAt = Date.now();
  } else ex.refused += 1;
}
