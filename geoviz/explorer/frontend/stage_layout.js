/* geoviz explorer: the layout (issue 35). The weight simplex beside what moves with it (P_a's
 * tiles, the embedding or the teaching scatter, the label mass), sized from the width the
 * explorer has, so that cause and effect are on one screen: at a projector's 1280 x 800 the
 * simplex, the view and the tiles; at 1920 px the page's width used (the readout and the
 * label mass in a third column). Narrow (a notebook cell, a phone): stacked, as before. */
import { LEGEND_W, el, pixelRatio, sizeCanvas } from "./drawing_kit.js";
import { availableWidth, headerOf } from "./explorer_state.js";

const STAGE_GAP = 16;
/** from this width (CSS px) on, the readout and the label mass get a column of their own */
const STAGE_WIDE_PX = 1100;
const COLORBAR_W = 72;
/** the least plot width (beside the legend column) for the view to go beside the simplex */
const STAGE_MIN_PLOT = 220;
/** presenter mode's tallest view (CSS px): with its caption it fits a 1280x800 projector */
const PRESENTER_VIEW_H = 540;
/** McCann's controls column (the t slider is 360 px wide) beside its view */
const MCCANN_LEFT_W = 380;

function clampPx(x, lo, hi) { return Math.max(lo, Math.min(hi, Math.round(x))); }

/** The layout's sizes for this payload at the explorer's width (CSS px), kept on ex.ui.plan:
 *  {width, mode: "wide" | "beside" | "stacked", simplex: [w, h], colorbar: [w, h], view: [w, h],
 *  side (the third column's width, wide only)}. ``barsW``: the width the bars need (m > 3). */
export function stagePlan(ex, barsW) {
  const h = headerOf(ex), W = availableWidth(ex), m = h.m, ui = ex.ui;
  const hasView = h.view === "embedding" || h.view === "scatter" || h.view === "pending";
  const simplexOf = (blockW) => (m === 3 ? [blockW - COLORBAR_W - 4, Math.round((blockW - COLORBAR_W - 4) * 0.875)]
    : m === 2 ? [blockW, clampPx(blockW * 0.6, 240, 340)] : [Math.max(barsW || 360, blockW), 260]);
  // presenter mode (the teaching scatter): the view takes the room, the readout goes below
  const presenter = !!ex.presenter && h.view === "scatter";
  let wide = W >= STAGE_WIDE_PX && !presenter;
  const side = wide ? clampPx(W * 0.25, 300, 400) : 0;
  let simplex = simplexOf(presenter ? clampPx(W * 0.32, 250, 460) : clampPx(W * (wide ? 0.34 : 0.44), 300, 560));
  let blockW = simplex[0] + (m === 3 ? COLORBAR_W + 4 : 0);
  let viewW = W - blockW - STAGE_GAP - (wide ? side + STAGE_GAP : 0);
  const beside = hasView && viewW >= LEGEND_W + STAGE_MIN_PLOT;
  let mode = beside ? (wide ? "wide" : "beside") : "stacked";
  let viewH = presenter ? Math.max(simplex[1], clampPx(viewW * 0.7, 320, PRESENTER_VIEW_H)) : Math.max(simplex[1], 280);
  if (!beside) {  // one column: the simplex as before (400 px), the view as wide as the page allows
    wide = false;
    simplex = simplexOf(Math.min(W, m === 3 ? 400 + COLORBAR_W + 4 : 460));
    if (m === 3 && W < 400 + COLORBAR_W + 4) simplex = [Math.max(240, W - COLORBAR_W - 4), Math.round(Math.max(240, W - COLORBAR_W - 4) * 0.875)];
    viewW = Math.max(LEGEND_W + 300, presenter ? W : Math.min(820, W)); viewH = presenter ? clampPx(viewW * 0.7, 360, PRESENTER_VIEW_H) : 460;
    mode = "stacked";
  }
  const plan = { width: W, mode: mode, simplex: simplex, colorbar: [COLORBAR_W, simplex[1]], view: [viewW, viewH], side: side, presenter: presenter };
  ui.plan = plan;
  ui.tilesWidth = W;
  return plan;
}

/** The explorer's elements (as buildExplorer made them) put into the plan's layout; the
 *  simplex's canvases sized for the screen's pixel ratio. Call once per build, before the
 *  heatmap is drawn. McCann's explorer keeps its one column. */
export function arrangeStage(ex) {
  const ui = ex.ui, plan = ui.plan;
  if (!plan) return;
  ex.root.classList.toggle("presenter", !!plan.presenter);
  if (!ui.simplex) { arrangeMcCann(ex); return; }
  const dpr = pixelRatio(ex.doc);
  sizeCanvas(ui.simplex, plan.simplex[0], plan.simplex[1], dpr);
  if (ui.colorbar) sizeCanvas(ui.colorbar, plan.colorbar[0], plan.colorbar[1], dpr);
  const simplexRow = ui.simplex.parentElement, left = simplexRow.parentElement, top = left.parentElement;
  const right = ui.weights.parentElement;
  // the caption of a small region as good as â, right under the triangle (simplex_draw.js fills it)
  ui.regionNote = el("div", { class: "hint region-note", id: "region-note", style: "display: none" });
  simplexRow.after(ui.regionNote);
  const massW = plan.mode === "wide" ? plan.side - 8 : Math.min(420, plan.width);
  sizeCanvas(ui.mass, massW, 150, dpr);
  ex.root.dataset.layout = plan.mode;
  if (plan.mode === "stacked") { left.style.maxWidth = Math.max(plan.simplex[0] + COLORBAR_W + 8, 320) + "px"; return; }
  // the parts below the first row: the tiles (up to the inspector), then the view
  const below = [];
  for (let e = top.nextElementSibling; e; e = e.nextElementSibling) below.push(e);
  const cut = ui.inspector ? below.indexOf(ui.inspector) + 1 : 0;
  const tiles = below.slice(0, cut), view = below.slice(cut);
  top.classList.add("stage");
  left.style.width = (plan.simplex[0] + (ui.colorbar ? COLORBAR_W + 4 : 0)) + "px";
  left.style.flex = "none";
  // under the triangle only the triangle's own caption: the hints (the colours' legend,
  // what Play does) go with the readout, so the tiles start higher
  const hints = Array.from(left.children).filter((e) => e.classList.contains("hint") && e !== ui.regionNote);
  const playButton = left.querySelector("#play"), playBar = playButton && playButton.parentElement !== left ? playButton.parentElement : null;
  if (view.length) {
    const viewBox = el("div", { class: "panel stage-view", style: "flex: none; width: " + plan.view[0] + "px" });
    viewBox.append(...view);
    right.before(viewBox);
  }
  if (tiles.length) {
    const tilesBox = el("div", { class: "stage-tiles" });
    // the tile-size bar under the tiles: the tiles themselves come right after their title
    const bar = ui.zoom ? ui.zoom.parentElement : null;
    tilesBox.append(...tiles);
    if (bar && ui.samples) ui.samples.after(bar);
    top.after(tilesBox);
  }
  const massTitle = ui.mass.previousElementSibling;
  if (plan.mode === "wide") {  // the readout and the label mass: a third column; the hints under the tiles
    right.style.width = plan.side + "px"; right.style.flex = "none"; right.style.maxWidth = "none"; right.style.minWidth = "0";
    const notes = el("div", { class: "stage-extras", style: "max-width: " + Math.min(plan.width, 1100) + "px" });
    notes.append(...hints);
    ex.root.appendChild(notes);
    // room enough: larger tiles (2x) when they still take at most 3 rows
    if (ui.zoom && ui.samples) {
      const [, hh, ww] = headerOf(ex).image_shape, n = headerOf(ex).n_shown;
      const perRow = Math.floor(plan.width / Math.max(ww * ui.baseScale * 2 + 24, 80));
      if (perRow > 0 && Math.ceil(n / perRow) <= 3 && hh * ui.baseScale * 2 <= 96) { ui.zoom.value = "2"; ui.defaultZoom = 2; }
    }
    return;
  }
  // beside: the pick's numbers in a strip above, the rest of the readout, the label mass and
  // the simplex's legend in a row under the tiles
  const strip = el("div", { class: "row stage-strip", id: "stage-strip" });
  // two rows, whatever the texts' widths: the pick and its value, then how it compares to â
  strip.append(ui.weights, ui.value, el("div", { style: "flex-basis: 100%; height: 0" }), ui.gap, ui.verdict);
  if (playBar && playBar.parentElement === left) { playBar.style.margin = "0"; strip.append(playBar); }
  top.before(strip);
  const extras = el("div", { class: "row stage-extras" });
  const massBox = el("div", { class: "panel" });
  if (massTitle && massTitle.tagName === "H4") massBox.append(massTitle);
  massBox.append(ui.mass);
  right.append(...hints);
  right.style.maxWidth = Math.max(300, plan.width - massW - STAGE_GAP - 4) + "px";
  extras.append(right, massBox);
  ex.root.appendChild(extras);
}

/** McCann's layout at the explorer's width (CSS px), kept on ex.ui.plan: "beside" (the t
 *  slider, Play and the readout in a column, the view beside it, the tiles under both) when
 *  the view gets its least plot width there, else "stacked" (one column, as before). */
export function mccannPlan(ex) {
  const h = headerOf(ex), W = availableWidth(ex), ui = ex.ui;
  const hasView = h.view === "embedding" || h.view === "scatter" || h.view === "pending";
  const viewW = W - MCCANN_LEFT_W - STAGE_GAP;
  const beside = hasView && viewW >= LEGEND_W + STAGE_MIN_PLOT;
  const view = beside ? [viewW, clampPx(viewW * 0.7, 260, 320)] : [Math.max(LEGEND_W + 300, Math.min(820, W)), 460];
  const plan = { width: W, mode: beside ? "beside" : "stacked", simplex: null, colorbar: null, view: view, side: 0, presenter: false };
  ui.plan = plan;
  ui.tilesWidth = W;
  return plan;
}

/** McCann's elements into its plan: the slider, Play, t and W² on the left, the view beside
 *  them, the tiles under both (their size bar under them); the caption, the figure buttons
 *  and the label mass last. So at a projector's 1280 x 800 the slider, the moving tiles and
 *  the view are on one screen during Play (issue 45). */
function arrangeMcCann(ex) {
  const ui = ex.ui, plan = ui.plan;
  ex.root.dataset.layout = plan.mode;
  if (plan.mode !== "beside") return;
  const left = ui.slider.closest(".panel"), top = left.parentElement, right = ui.value.parentElement;
  const below = [];
  for (let e = top.nextElementSibling; e; e = e.nextElementSibling) below.push(e);
  const cut = ui.inspector ? below.indexOf(ui.inspector) + 1 : 0;
  const tiles = below.slice(0, cut), view = below.slice(cut);
  top.classList.add("stage");
  left.style.width = MCCANN_LEFT_W + "px"; left.style.flex = "none";
  left.append(ui.value, ui.w2);
  if (view.length) {
    const viewBox = el("div", { class: "panel stage-view", style: "flex: none; width: " + plan.view[0] + "px" });
    viewBox.append(...view);
    top.append(viewBox);
  }
  if (tiles.length) {
    const tilesBox = el("div", { class: "stage-tiles" });
    const bar = ui.zoom ? ui.zoom.parentElement : null;
    tilesBox.append(...tiles);
    if (bar && ui.samples) ui.samples.after(bar);
    top.after(tilesBox);
  }
  const extras = el("div", { class: "row stage-extras" });
  extras.append(right);
  ex.root.appendChild(extras);
}

/** The layout's summary for tests: the plan and the pixel ratio the canvases use. */
export function stageInfo(ex) {
  const ui = ex.ui;
  if (!ui || !ui.plan) return null;
  return Object.assign({ dpr: ui.simplex ? ui.simplex.dpr || 1 : 1 }, ui.plan);
}
