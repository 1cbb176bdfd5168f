/* geoviz explorer: Play. The geodesic page plays a closed path on the weight simplex
 * (the pick -> P1 -> â -> P2 -> â -> ... -> Pm -> â -> the pick); McCann's page plays t from
 * 0 to 1. Both: Play/Pause on one button, Loop, a speed (0.5x, 1x, 2x); everything redraws
 * at frame rate and the host hears the released value once, when the play pauses or ends. */
import { roundToSimplex } from "./maths.js";
import { el } from "./drawing_kit.js";
import { headerOf, listen, payloadArray } from "./explorer_state.js";
import { sendT, sendWeights } from "./interaction.js";

/** weight-space units (Euclidean length on the simplex) per second at 1x */
const PLAY_UNITS_PER_S = 0.5;
/** McCann's t from 0 to 1 takes this long at 1x */
const MCCANN_PLAY_MS = 2000;
export const PLAY_SPEEDS = [0.5, 1, 2];

/** The geodesic's play path from ``start``: start -> e_1 -> â -> e_2 -> â -> ... -> e_m -> â
 *  -> start (closed, so Loop goes round without a jump); equal points are merged. */
export function geodesicPlayPath(start, aHat) {
  const m = start.length, pts = [start.slice()];
  const vertex = (i) => Array.from({ length: m }, (_, k) => (k === i ? 1 : 0));
  for (let i = 0; i < m; i++) { pts.push(vertex(i)); pts.push(aHat.slice()); }
  pts.push(start.slice());
  const out = [pts[0]];
  for (const p of pts.slice(1)) if (playDistance(p, out[out.length - 1]) > 1e-9) out.push(p);
  if (out.length === 1) out.push(out[0].slice());
  return out;
}
function playDistance(a, b) { let s = 0; for (let i = 0; i < a.length; i++) s += (a[i] - b[i]) ** 2; return Math.sqrt(s); }

/** The point a fraction ``f`` (0..1) of the way along ``path`` (by length). */
export function pointOnPath(path, f) {
  const seg = [];
  let total = 0;
  for (let k = 1; k < path.length; k++) { const d = playDistance(path[k - 1], path[k]); seg.push(d); total += d; }
  let s = Math.min(1, Math.max(0, f)) * total;
  for (let k = 0; k < seg.length; k++) {
    if (s <= seg[k] || k === seg.length - 1) {
      const u = seg[k] > 0 ? Math.min(1, s / seg[k]) : 1;
      return path[k].map((x, i) => (1 - u) * x + u * path[k + 1][i]);
    }
    s -= seg[k];
  }
  return path[path.length - 1].slice();
}
function pathLength(path) { let t = 0; for (let k = 1; k < path.length; k++) t += playDistance(path[k - 1], path[k]); return t; }

/** The play's state on the explorer (one per explorer, kept across rebuilds). */
function playerOf(ex) {
  if (!ex.player) {
    ex.player = { kind: null, playing: false, progress: 0, speed: 1, loop: false, loops: 0, path: null,
      pausedAt: null, runStart: 0, runFrames: 0, lastRunMs: null, lastTick: 0, ui: null };
  }
  return ex.player;
}
/** One full run's length at the current speed, in ms. */
function playDuration(ex) {
  const pl = playerOf(ex);
  const base = pl.kind === "mccann" ? MCCANN_PLAY_MS : 1000 * pathLength(pl.path || [[0], [0]]) / PLAY_UNITS_PER_S;
  return Math.max(1, base / pl.speed);
}
function playLabel(pl) { return pl.playing ? "‖ Pause" : "▶ Play"; }

/** The Play/Pause button, Loop and speed for ``kind`` ("geodesic" or "mccann") in ``parent``;
 *  a caption says what is played (geodesic). */
export function buildPlayControls(ex, parent, kind) {
  const pl = playerOf(ex);
  pl.kind = kind;
  ex.stopPlay = () => pausePlay(ex, false);
  ex.playPath = () => activePlayPath(ex);
  const bar = el("div", { class: "row", style: "gap: 8px; align-items: center; margin: 4px 0" }, parent);
  const button = el("button", { id: "play", text: playLabel(pl) }, bar);
  const loopLabel = el("label", { class: "hint" }, bar);
  const loop = el("input", { type: "checkbox", id: "play-loop" }, loopLabel);
  loop.checked = pl.loop; loopLabel.appendChild(ex.doc.createTextNode(" Loop"));
  const speed = el("select", { id: "play-speed", title: "speed" }, bar);
  for (const s of PLAY_SPEEDS) {
    const o = el("option", { value: String(s), text: s + "×" }, speed);
    if (s === pl.speed) o.selected = true;
  }
  pl.ui = { button: button, loop: loop, speed: speed };
  listen(ex, button, "click", () => (pl.playing ? pausePlay(ex, true) : startPlay(ex)));
  listen(ex, loop, "change", () => { pl.loop = loop.checked; });
  listen(ex, speed, "change", () => setPlaySpeed(ex, Number(speed.value)));
  if (kind === "geodesic") {
    el("div", { class: "hint", id: "play-caption", text: "▶ Play tours the simplex: from your pick out to each " +
      "reference's corner and back through â (P1 → â → P2 → â → …), then home to your pick; " +
      "the server hears the weights once, when it pauses or ends." }, parent);
  }
  return bar;
}

/** A new speed: the run keeps its place (progress) and goes on at the new rate. */
export function setPlaySpeed(ex, s) {
  const pl = playerOf(ex);
  if (!(s > 0)) return;
  pl.speed = s;
  if (pl.ui && pl.ui.speed.value !== String(s)) pl.ui.speed.value = String(s);
}

/** Play (or resume where it paused, if the pick or t has not moved since). */
export function startPlay(ex) {
  const pl = playerOf(ex);
  if (pl.playing || ex.destroyed || !ex.P) return;
  const h = headerOf(ex);
  if (pl.kind === "mccann") {
    const resume = pl.pausedAt !== null && pl.pausedAt === ex.t && ex.t < 1;
    pl.progress = resume ? ex.t : 0;
  } else {
    const resume = pl.path && pl.pausedAt && pl.progress < 1 && ex.pick.every((x, i) => Math.abs(x - pl.pausedAt[i]) < 1e-9);
    if (!resume) {
      const aHat = roundToSimplex(Array.from(payloadArray(ex, "a_hat").data), h.weight_decimals);
      pl.path = geodesicPlayPath(ex.pick.slice(), aHat);
      pl.progress = 0;
    }
  }
  pl.pausedAt = null; pl.payloadId = ex.payloadId;
  pl.playing = ex.playing = true;
  pl.runStart = performance.now(); pl.lastTick = pl.runStart; pl.runFrames = 0; pl.loops = 0;
  if (pl.ui) pl.ui.button.textContent = playLabel(pl);
  const step = (now) => {
    ex.playRaf = null;
    if (ex.destroyed || !pl.playing) return;
    if (pl.payloadId !== ex.payloadId || !ex.ui) { pl.path = null; pausePlay(ex, false); return; }  // a new payload
    const dt = Math.max(0, now - pl.lastTick); pl.lastTick = now;
    pl.progress += dt / playDuration(ex);
    let ended = false;
    if (pl.progress >= 1) {
      if (pl.loop) { pl.progress -= Math.floor(pl.progress); pl.loops += 1; }
      else { pl.progress = 1; ended = true; }
    }
    applyPlayProgress(ex);
    ex.redraw(); pl.runFrames += 1; ex.hooks.playFrames += 1;
    if (ended) { pl.lastRunMs = performance.now() - pl.runStart; pausePlay(ex, true); }
    else ex.playRaf = requestAnimationFrame(step);
  };
  ex.playRaf = requestAnimationFrame(step);
}
function applyPlayProgress(ex) {
  const pl = playerOf(ex);
  if (pl.kind === "mccann") ex.t = pl.progress;
  else ex.pick = pointOnPath(pl.path, pl.progress);
}

/** Stop playing where it is; ``send``: the host hears the value (once), else (a drag or a
 *  key took over) nothing is sent. */
export function pausePlay(ex, send) {
  const pl = playerOf(ex);
  if (!pl.playing) return;
  pl.playing = ex.playing = false;
  if (ex.playRaf !== null) { cancelAnimationFrame(ex.playRaf); ex.playRaf = null; }
  const secs = (performance.now() - pl.runStart) / 1000;
  if (secs > 0 && pl.runFrames > 1) ex.hooks.playFps = pl.runFrames / secs;
  if (pl.ui) pl.ui.button.textContent = playLabel(pl);
  if (pl.kind === "mccann") {
    if (send) { sendT(ex); pl.pausedAt = ex.t; }
  } else if (send) { sendWeights(ex); pl.pausedAt = ex.pick.slice(); }
  if (pl.progress >= 1) pl.pausedAt = null;
  if (!send) ex.redraw();
}

/** What the tests and the figure read: {kind, playing, label, progress, speed, loop, loops,
 *  path, durationMs, lastRunMs, frames}. */
export function playInfo(ex) {
  const pl = playerOf(ex);
  return {
    kind: pl.kind, playing: pl.playing, label: pl.ui ? pl.ui.button.textContent : playLabel(pl),
    progress: pl.progress, speed: pl.speed, loop: pl.loop, loops: pl.loops,
    path: pl.path ? pl.path.map((p) => p.slice()) : null,
    durationMs: pl.kind === "mccann" || pl.path ? playDuration(ex) : null, lastRunMs: pl.lastRunMs, frames: pl.runFrames,
  };
}
/** The geodesic's play path, while one is under way or paused (the view draws P_a(x)'s trail). */
export function activePlayPath(ex) {
  const pl = ex.player;
  return pl && pl.kind === "geodesic" && pl.path && (pl.playing || pl.pausedAt) ? pl.path : null;
}
