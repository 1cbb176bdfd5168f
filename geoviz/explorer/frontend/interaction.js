/* geoviz explorer: the pointer and the keyboard on the simplex (drag, click, arrows), McCann's
 * slider; what is sent to the host on release (Play is play.js's). */
import { clipAndRenormalise, roundToSimplex, setWeightKeepSum } from "./maths.js";
import { headerOf, listen, requestDraw, sendValue } from "./explorer_state.js";
import { barGeom, lineGeom, toBary, toXY, triangleOf } from "./simplex_draw.js";

/** The weights under canvas pixel (x, y): the triangle's (clipped and renormalised, m = 3),
 *  the curve's (m = 2) or the bar's (m > 3, the others rescaled). */
export function weightsAt(ex, x, y) {
  const m = headerOf(ex).m;
  if (m === 3) return clipAndRenormalise(toBary(ex, x, y));
  if (m === 2) {
    const g = lineGeom(ex), t = Math.min(1, Math.max(0, (x - g.x0) / (g.x1 - g.x0)));
    return [1 - t, t];
  }
  const g = barGeom(ex);
  const i = Math.min(m - 1, Math.max(0, Math.floor((x - 20) / g.w)));
  ex.activeBar = i;
  const v = Math.min(1, Math.max(0, (g.y1 - y) / (g.y1 - g.y0)));
  return setWeightKeepSum(ex.pick, i, v);
}

/** Pointer and keyboard on the simplex canvas ``c``: the pick follows at frame rate and is
 *  sent on release (never mid-drag); ``afterRelease`` runs after each release. */
export function bindSimplex(ex, c, afterRelease) {
  const pos = (ev) => { const r = c.getBoundingClientRect(); return [ev.clientX - r.left, ev.clientY - r.top]; };
  listen(ex, c, "pointerdown", (ev) => {
    userTakesOver(ex);
    ex.dragging = true; ex.hover = null; c.setPointerCapture(ev.pointerId); c.focus();
    ex.pick = weightsAt(ex, ...pos(ev)); requestDraw(ex, ev);
  });
  listen(ex, c, "pointermove", (ev) => {
    if (ex.dragging) ex.pick = weightsAt(ex, ...pos(ev));
    else if (headerOf(ex).m === 3) { const b = toBary(ex, ...pos(ev)); ex.hover = b.every((x) => x >= 0) ? b : null; }
    else return;
    requestDraw(ex, ev);
  });
  const release = (ev) => {
    if (!ex.dragging) return;
    ex.dragging = false; ex.activeBar = undefined;
    ex.pick = weightsAt(ex, ...pos(ev)); ex.activeBar = undefined;
    sendWeights(ex);
    afterRelease();
  };
  listen(ex, c, "pointerup", release);
  listen(ex, c, "pointercancel", release);
  listen(ex, c, "pointerleave", () => { if (ex.hover) { ex.hover = null; requestDraw(ex, null); } });
  listen(ex, c, "keydown", (ev) => {
    const m = headerOf(ex).m, step = ev.shiftKey ? 0.1 : 0.02;
    let a = ex.pick.slice();
    if (m === 3) {
      const [x, y] = toXY(ex, a), V = triangleOf(ex), side = V[2][0] - V[1][0];
      const d = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, -1], ArrowDown: [0, 1] }[ev.key];
      if (!d) return;
      a = clipAndRenormalise(toBary(ex, x + d[0] * step * side, y + d[1] * step * side));
    } else if (m === 2) {
      const dt = { ArrowLeft: -step, ArrowDown: -step, ArrowRight: step, ArrowUp: step }[ev.key];
      if (dt === undefined) return;
      const t = Math.min(1, Math.max(0, a[1] + dt)); a = [1 - t, t];
    } else {
      ex.activeBar = ex.activeBar === undefined ? 0 : ex.activeBar;
      if (ev.key === "ArrowLeft") ex.activeBar = (ex.activeBar + m - 1) % m;
      else if (ev.key === "ArrowRight") ex.activeBar = (ex.activeBar + 1) % m;
      else if (ev.key === "ArrowUp" || ev.key === "ArrowDown") {
        const i = ex.activeBar; a = setWeightKeepSum(a, i, a[i] + (ev.key === "ArrowUp" ? step : -step));
      } else return;
    }
    ev.preventDefault();
    userTakesOver(ex);
    ex.pick = roundToSimplex(a, headerOf(ex).weight_decimals); ex.keyMoved = true; requestDraw(ex, ev);
  });
  listen(ex, c, "keyup", (ev) => {
    if (ex.keyMoved && ev.key.startsWith("Arrow")) { ex.keyMoved = false; sendWeights(ex); }
  });
}

/** The pick, rounded to the payload's decimals, sent to the host: {weights, seq, id}. */
export function sendWeights(ex) {
  ex.pick = roundToSimplex(ex.pick, headerOf(ex).weight_decimals);
  ex.sentPick = ex.pick.slice();
  ex.seq += 1;
  requestDraw(ex, null);
  sendValue(ex, { weights: ex.pick.slice(), seq: ex.seq, id: ex.payloadId });
}
/** McCann's t, rounded to 2 decimals, sent to the host: {t, seq, id}. */
export function sendT(ex) {
  ex.t = Math.round(ex.t * 100) / 100;
  ex.seq += 1;
  requestDraw(ex, null);
  sendValue(ex, { t: ex.t, seq: ex.seq, id: ex.payloadId });
}

/** A drag, a key or the slider takes over from a play under way: it stops where it is and
 *  sends nothing (the release that follows does). */
export function userTakesOver(ex) {
  if (ex.playing && ex.stopPlay) ex.stopPlay();
}

/** McCann's slider: t follows at frame rate and is sent on change (its Play is play.js's). */
export function bindMcCann(ex, slider) {
  listen(ex, slider, "pointerdown", () => userTakesOver(ex));
  listen(ex, slider, "input", (ev) => { userTakesOver(ex); ex.t = Number(slider.value); requestDraw(ex, ev); });
  listen(ex, slider, "change", () => sendT(ex));
}
