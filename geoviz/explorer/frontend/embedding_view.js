/* geoviz explorer: the embedding view (UMAP/PCA of Q and the references, P_a's points placed
 * by the simplex grid) and the scatter view of 2-D/3-D data with its teaching overlays
 * (coupling lines, the T_i(x), naive mixup); the hover tooltip. */
import { gridNodeIndex, gridWeights } from "./maths.js";
import { LEGEND_W, PALETTE, SET_COLORS, cssSize, el, fillImage, fitText, fmt } from "./drawing_kit.js";
import { currentCoef, fitHeight, headerOf, listen, payloadArray, requestDraw } from "./explorer_state.js";

/** The view's scales (data -> canvas pixels) and its faded background with the legend
 *  column, drawn once per build. */
export function setupView(ex) {
  const h = headerOf(ex), ui = ex.ui, A = (name) => payloadArray(ex, name), pts = [];
  const push = (arr) => { for (let k = 0; k + 1 < arr.data.length; k += arr.shape[arr.shape.length - 1]) pts.push([arr.data[k], arr.data[k + 1]]); };
  if (h.view === "embedding") { push(A("bg")); push(A("place")); }
  else { push(A("ref_coords")); push(A("coords")); }
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  for (const [x, y] of pts) { x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y); }
  // the legends get their own column on the right, so no point hides them (issue 26, item 5)
  const c = ui.view, pad = 20, [cw, ch] = cssSize(c), plotW = cw - LEGEND_W;
  const sx = (plotW - 2 * pad) / (x1 - x0 || 1), sy = (ch - 2 * pad) / (y1 - y0 || 1);
  ui.X = (x) => pad + (x - x0) * sx;
  ui.Y = (y) => ch - pad - (y - y0) * sy;
  drawViewBackground(ex, 1);
  // a click on the teaching scatter picks the target sample x that is followed
  if (ex.teach && h.view === "scatter") listen(ex, c, "pointerdown", (ev) => followAt(ex, ev));
  if (h.view === "embedding") {
    const grid = A("grid");
    ui.node = gridNodeIndex(grid.data, grid.shape[1]);
  }
}

/** The faded background (every ``stride``-th point of each dataset) and the legend column,
 *  drawn once per build and again when the stride changes (kept off-screen at the view's
 *  backing resolution, the screen's pixel ratio). */
function drawViewBackground(ex, stride) {
  const c = ex.ui.view, off = ex.doc.createElement("canvas"), dpr = c.dpr || 1;
  off.width = c.width; off.height = c.height;
  const ctx = off.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  paintViewBackground(ex, ctx, stride);
  ex.ui.bg = off; ex.ui.bgStride = stride;
}
/** The faded background and the legend column into ``ctx``, in CSS px: the screen's
 *  off-screen copy, or a figure's context (vectors in an SVG, at the PNG's own scale). */
function paintViewBackground(ex, ctx, stride) {
  const h = headerOf(ex), ui = ex.ui, A = (name) => payloadArray(ex, name);
  const c = ui.view, [cw, ch] = cssSize(c), plotW = cw - LEGEND_W;
  ctx.save();
  ctx.globalAlpha = 0.18;
  const bg = h.view === "embedding" ? A("bg") : A("ref_coords"), set = h.view === "embedding" ? A("bg_set") : A("ref_set");
  const d = bg.shape[1];
  for (let k = 0; k < bg.shape[0]; k += stride) {
    const s = set.data[k];
    ctx.fillStyle = h.view === "embedding" ? (s === 0 ? "#000" : SET_COLORS[(s - 1) % SET_COLORS.length])
                                             : SET_COLORS[(h.mode === "mccann" ? h.ref : s) % SET_COLORS.length];
    ctx.fillRect(ui.X(bg.data[k * d]) - 2, ui.Y(bg.data[k * d + 1]) - 2, 4, 4);
  }
  if (h.view === "scatter") {  // Q itself, faded
    const co = A("coords"), n = co.shape[1], dd = co.shape[2];
    ctx.fillStyle = "#000";
    for (let k = 0; k < n; k += stride) ctx.fillRect(ui.X(co.data[k * dd]) - 1.5, ui.Y(co.data[k * dd + 1]) - 1.5, 3, 3);
  }
  ctx.globalAlpha = 1;
  const lx = plotW + 6, lw = LEGEND_W - 12;
  ctx.fillStyle = "#fff"; ctx.fillRect(plotW, 0, LEGEND_W, ch);
  ctx.strokeStyle = "#ddd"; ctx.beginPath(); ctx.moveTo(plotW + 0.5, 4); ctx.lineTo(plotW + 0.5, ch - 4); ctx.stroke();
  ctx.fillStyle = "#262730"; ctx.textAlign = "left";
  // presenter mode: the legend's text larger too (its rows further apart)
  const k2 = legendScale(ex), fz = Math.round(12 * k2);
  ctx.font = "bold " + fz + "px sans-serif"; ctx.fillText("Datasets (faded)", lx, Math.round(16 * k2)); ctx.font = fz + "px sans-serif";
  const legend = h.mode === "mccann" ? ["Q", h.ref_name] : ["Q", ...h.names];
  legend.forEach((name, i) => {
    ctx.fillStyle = i === 0 ? "#000" : SET_COLORS[(h.mode === "mccann" ? h.ref : i - 1) % SET_COLORS.length];
    const yy = Math.round((24 + 16 * i) * k2);
    ctx.fillRect(lx, yy, 10, 10); ctx.fillStyle = "#262730";
    fitText(ctx, String(name), lx + 14, yy + 5 + Math.round(fz * 0.35), lw - 14, fz);  // left-aligned
  });
  // P_a's colours: the class of its target sample
  const classes = (h.mode === "mccann" ? (h.class_names || [[]])[0] : h.target_classes) || [];
  const y = Math.round((40 + 16 * legend.length) * k2);
  ctx.font = "bold " + fz + "px sans-serif"; ctx.textAlign = "left";
  ctx.fillText((h.mode === "mccann" ? "P^M_t" : "P_a") + " by Q's class", lx, y); ctx.font = fz + "px sans-serif";
  classes.slice(0, 20).forEach((name, k) => {
    const yy = y + Math.round((8 + 15 * k) * k2);
    ctx.beginPath(); ctx.arc(lx + 5, yy + 5, 4, 0, 2 * Math.PI); ctx.fillStyle = PALETTE[k % PALETTE.length]; ctx.fill();
    ctx.strokeStyle = "#000"; ctx.lineWidth = 0.8; ctx.stroke();
    ctx.fillStyle = "#262730"; fitText(ctx, String(name), lx + 14, yy + 5 + Math.round(fz * 0.35), lw - 14, Math.round(11 * k2));
  });
  ctx.restore();
}

/** The view's legend text scale: 1.25 in presenter mode (the layout's plan says), else 1. */
function legendScale(ex) { return ex.ui && ex.ui.plan && ex.ui.plan.presenter ? 1.25 : 1; }

/** P_a's (or P^M_t's) points in the view's data coordinates: [[x, y, class, sample], ...]. */
export function viewPoints(ex) {
  const h = headerOf(ex), out = [];
  if (h.view === "embedding") {
    const pl = payloadArray(ex, "place"), P = pl.shape[1], ws = gridWeights(currentCoef(ex), h.grid_res, ex.ui.node);
    for (let p = 0; p < P; p++) {
      let x = 0, y = 0;
      for (const [k, w] of ws) { x += w * pl.data[(k * P + p) * 2]; y += w * pl.data[(k * P + p) * 2 + 1]; }
      out.push([x, y, h.sample_label[p], p]);
    }
  } else {
    const co = payloadArray(ex, "coords"), n = co.shape[1], d = co.shape[2], coef = currentCoef(ex), lab = payloadArray(ex, "labels").data;
    for (let p = 0; p < n; p++) {
      let x = 0, y = 0;
      for (let i = 0; i < coef.length; i++) {
        const base = ((h.mode === "mccann" ? i : i + 1) * n + p) * d;
        x += coef[i] * co.data[base]; y += coef[i] * co.data[base + 1];
      }
      out.push([x, y, lab[p], p]);
    }
  }
  return out;
}

/** The teaching view's naive-mixup points at ``a``: [[x, y], ...] (data coordinates). */
export function mixupPointsAt(ex, a) {
  const mx = payloadArray(ex, "mixup_coords"); if (!mx) return [];
  const m = mx.shape[0], n = mx.shape[1], d = mx.shape[2], out = [];
  for (let p = 0; p < n; p++) {
    let x = 0, y = 0;
    for (let i = 0; i < m; i++) { x += a[i] * mx.data[(i * n + p) * d]; y += a[i] * mx.data[(i * n + p) * d + 1]; }
    out.push([x, y]);
  }
  return out;
}

/** The naive mixup's own style: hollow grey diamonds (never P_a's class colours). */
export const MIXUP_COLOUR = "#6f6f6f";
/** Points drawn per dataset at most: presenter mode, or three or more teaching layers on
 *  (two layers: MANY_LAYERS_CAP2). */
export const PRESENTER_CAP = 150;
const MANY_LAYERS_CAP2 = 300;
/** at most this many targets' coupling lines (per reference) */
const MAX_LINES = 60;
/** The teaching steps' one-sentence captions (step 0 is the free view, the switches decide). */
export const TEACH_STEPS = [
  "",
  "Step 1 of 3 · the coupling: each target sample x (black) is joined to T_i(x), the point its OT map sends it to in reference P_i (one coloured line per reference).",
  "Step 2 of 3 · each T_i(x): the squares are the images T_i(x) — Q carried onto each reference by its map, every x keeping its place in its class.",
  "Step 3 of 3 · the weighted mix: each filled dot is P_a(x) = Σ_i a_i T_i(x), the squares averaged with the weights a you pick — drag the pick or press ▶ Play.",
];

/** The teaching switches, presenter mode and the step-by-step buttons, above the scatter. */
export function buildTeachingControls(ex, parent) {
  const bar = el("div", { class: "row", style: "gap: 14px; align-items: center" }, parent);
  const boxes = {};
  const toggle = (id, label, on, onChange) => {
    const lab = el("label", { class: "hint" }, bar);
    const box = el("input", { type: "checkbox", id: id }, lab);
    box.checked = on; lab.appendChild(ex.doc.createTextNode(" " + label));
    listen(ex, box, "change", () => { onChange(box.checked); requestDraw(ex, null); });
    boxes[id] = box;
    return box;
  };
  const old = ex.teach || {};
  ex.teach = {};
  for (const [id, label] of [["teach-lines", "coupling x → T_i(x) (thinned)"], ["teach-maps", "T_i(x) of each reference"],
    ["teach-mixup", "naive mixup (random partners)"]]) {
    ex.teach[id] = !!old[id];
    toggle(id, label, ex.teach[id], (on) => { ex.teach[id] = on; });
  }
  // presenter mode lays the whole explorer out again: a larger view, larger text (stage_layout.js)
  toggle("presenter", "presenter (large text, ≤" + PRESENTER_CAP + " points, follow one x)", !!ex.presenter, (on) => {
    ex.presenter = on;
    if (ex.relayout) ex.relayout();
  });
  const steps = el("div", { class: "row", style: "gap: 8px; align-items: center; margin: 2px 0" }, parent);
  const back = el("button", { id: "teach-back", text: "◀ Back" }, steps);
  const label = el("span", { class: "hint", id: "teach-step" }, steps);
  const next = el("button", { id: "teach-next", text: "Next ▶" }, steps);
  const show = () => {
    const k = ex.teachStep || 0;
    label.textContent = k === 0 ? "Step by step: off (the switches decide)" : "Step " + k + " of 3: " + ["", "coupling", "each T_i(x)", "Σ_i a_i T_i(x)"][k];
    back.disabled = k === 0; next.disabled = k === 3;
    for (const id of ["teach-lines", "teach-maps", "teach-mixup"]) boxes[id].disabled = k > 0;
  };
  const go = (d) => { ex.teachStep = Math.min(3, Math.max(0, (ex.teachStep || 0) + d)); show(); requestDraw(ex, null); };
  listen(ex, back, "click", () => go(-1));
  listen(ex, next, "click", () => go(1));
  show();
}

/** What the teaching scatter draws now: the layers (with their strength), the stride
 *  (one point in ``stride`` of each dataset) and the followed x; null outside it. */
function teachingPlan(ex) {
  const h = headerOf(ex), T = ex.teach;
  if (!T || h.view !== "scatter" || h.mode === "mccann") return null;
  const n = payloadArray(ex, "coords").shape[1], k = ex.teachStep || 0;
  let L;
  if (k === 1) L = { x: true, lines: 1, maps: 0, mixup: false, pa: false, follow: false };
  else if (k === 2) L = { x: true, lines: 0.3, maps: 1, mixup: false, pa: false, follow: false };
  else if (k === 3) L = { x: false, lines: 0, maps: 0.3, mixup: false, pa: true, follow: true };
  else L = { x: false, lines: T["teach-lines"] ? 1 : 0, maps: T["teach-maps"] ? 1 : 0, mixup: !!T["teach-mixup"], pa: true, follow: !!ex.presenter };
  L.layers = (L.lines > 0) + (L.maps > 0) + L.mixup + L.x + L.pa;
  const cap = ex.presenter || L.layers >= 3 ? PRESENTER_CAP : L.layers === 2 ? MANY_LAYERS_CAP2 : Infinity;
  L.n = n; L.stride = Math.max(1, Math.ceil(n / cap));
  L.lineStride = Math.max(L.stride, Math.ceil(n / MAX_LINES));
  L.shown = Math.ceil(n / L.stride);
  return L;
}

/** The followed target sample: the one clicked, else the one whose x and images T_i(x) lie
 *  furthest apart from each other (the clearest to narrate; among every PRESENTER_CAP-th). */
function followIndex(ex) {
  if (Number.isInteger(ex.followIdx) && ex.followIdx < payloadArray(ex, "coords").shape[1]) return ex.followIdx;
  const ui = ex.ui;
  if (ui.followDefault === undefined) {
    const co = payloadArray(ex, "coords"), rows = co.shape[0], n = co.shape[1], d = co.shape[2];
    let best = -1, bestP = 0;
    for (let p = 0; p < n; p += Math.max(1, Math.ceil(n / PRESENTER_CAP))) {
      let near = Infinity;
      for (let i = 0; i < rows; i++) for (let j = i + 1; j < rows; j++) {
        near = Math.min(near, Math.hypot(ui.X(co.data[(i * n + p) * d]) - ui.X(co.data[(j * n + p) * d]),
          ui.Y(co.data[(i * n + p) * d + 1]) - ui.Y(co.data[(j * n + p) * d + 1])));
      }
      if (near > best) { best = near; bestP = p; }
    }
    ui.followDefault = bestP;
  }
  return ui.followDefault;
}
/** The followed x at the pick, in data coordinates: {index, sample, a, x, T: [T_1(x), ...],
 *  pa: Σ_i a_i T_i(x)}; null outside the teaching scatter. */
export function followedX(ex) {
  if (!teachingPlan(ex)) return null;
  const co = payloadArray(ex, "coords"), m = co.shape[0] - 1, n = co.shape[1], d = co.shape[2], p = followIndex(ex), a = ex.pick;
  const row = (r) => Array.from(co.data.subarray((r * n + p) * d, (r * n + p) * d + d));
  const T = Array.from({ length: m }, (_, i) => row(i + 1));
  const pa = T[0].map((_, k) => T.reduce((acc, t, i) => acc + a[i] * t[k], 0));
  const h = headerOf(ex);
  return { index: p, sample: h.sample_index ? h.sample_index[Math.min(p, h.sample_index.length - 1)] : p, a: a.slice(), x: row(0), T: T, pa: pa };
}
/** A click on the scatter: the nearest drawn P_a point's x is followed from now on. */
function followAt(ex, ev) {
  const ui = ex.ui;
  if (!ui || !ui.points || !teachingPlan(ex)) return;
  const r = ui.view.getBoundingClientRect(), mx = ev.clientX - r.left, my = ev.clientY - r.top;
  let best = null, bd = 144;
  for (const p of ui.points) {
    const dd = (ui.X(p[0]) - mx) ** 2 + (ui.Y(p[1]) - my) ** 2;
    if (dd < bd) { bd = dd; best = p; }
  }
  if (best) { ex.followIdx = best[3]; requestDraw(ex, null); }
}

function diamond(ctx, x, y, r) {
  ctx.beginPath(); ctx.moveTo(x, y - r); ctx.lineTo(x + r, y); ctx.lineTo(x, y + r); ctx.lineTo(x - r, y); ctx.closePath();
}
/** Text with a white halo (readable over the points). */
function haloText(ctx, text, x, y, px) {
  ctx.font = "bold " + px + "px sans-serif"; ctx.lineWidth = 3; ctx.strokeStyle = "#fff"; ctx.lineJoin = "round";
  ctx.strokeText(text, x, y); ctx.fillStyle = "#262730"; ctx.fillText(text, x, y); ctx.lineWidth = 1;
}

/** Teaching view (2-D/3-D data): lines x -> T_i(x), the T_i(x), the naive mixup (one point in
 *  plan.stride of each); returns the counts drawn. */
function drawTeaching(ex, ctx, plan) {
  const h = headerOf(ex), ui = ex.ui, pick = ex.pick;
  const co = payloadArray(ex, "coords"), n = co.shape[1], d = co.shape[2], m = h.m;
  const at = (row, p) => [ui.X(co.data[(row * n + p) * d]), ui.Y(co.data[(row * n + p) * d + 1])];
  const drawn = { lines: 0, maps: 0, mixup: 0, x: 0 };
  if (plan.lines > 0) {
    ctx.lineWidth = 1;
    for (let i = 0; i < m; i++) {
      if (pick[i] <= 0 && !plan.x) continue;
      ctx.strokeStyle = SET_COLORS[i % SET_COLORS.length];
      ctx.globalAlpha = plan.lines * (plan.x ? 0.55 : 0.25 + 0.6 * pick[i]);
      ctx.beginPath();
      for (let p = 0; p < n; p += plan.lineStride) { const [x0, y0] = at(0, p), [x1, y1] = at(i + 1, p); ctx.moveTo(x0, y0); ctx.lineTo(x1, y1); drawn.lines += 1; }
      ctx.stroke();
    }
    ctx.globalAlpha = 1;
  }
  if (plan.maps > 0) {
    ctx.globalAlpha = plan.maps; ctx.lineWidth = 1.2;
    for (let i = 0; i < m; i++) {
      ctx.strokeStyle = SET_COLORS[i % SET_COLORS.length]; ctx.beginPath();
      for (let p = 0; p < n; p += plan.stride) { const [x, y] = at(i + 1, p); ctx.rect(x - 2.5, y - 2.5, 5, 5); drawn.maps += 1; }
      ctx.stroke();
    }
    ctx.globalAlpha = 1;
  }
  if (plan.x) {
    ctx.fillStyle = "#000"; ctx.beginPath();
    for (let p = 0; p < n; p += plan.stride) { const [x, y] = at(0, p); ctx.moveTo(x + 2.5, y); ctx.arc(x, y, 2.5, 0, 2 * Math.PI); drawn.x += 1; }
    ctx.fill();
  }
  if (plan.mixup) {
    const mx = payloadArray(ex, "mixup_coords");
    ctx.strokeStyle = MIXUP_COLOUR; ctx.lineWidth = 1.3; ctx.beginPath();
    for (let p = 0; p < n; p += plan.stride) {
      let x = 0, y = 0;
      for (let i = 0; i < m; i++) { x += pick[i] * mx.data[(i * n + p) * d]; y += pick[i] * mx.data[(i * n + p) * d + 1]; }
      const X = ui.X(x), Y = ui.Y(y);
      ctx.moveTo(X, Y - 4); ctx.lineTo(X + 4, Y); ctx.lineTo(X, Y + 4); ctx.lineTo(X - 4, Y); ctx.closePath();
      drawn.mixup += 1;
    }
    ctx.stroke(); ctx.lineWidth = 1;
  }
  drawTeachingLegend(ex, ctx, plan);
  return drawn;
}

/** The overlays' own legend, at the bottom of the legend column. */
function drawTeachingLegend(ex, ctx, plan) {
  const ui = ex.ui, [vw, vh] = cssSize(ui.view), lx = vw - LEGEND_W + 6, items = [];
  if (plan.lines > 0) items.push(["line", "x → T_i(x), by reference"]);
  if (plan.maps > 0) items.push(["square", "T_i(x), by reference"]);
  if (plan.x) items.push(["dot", "x, Q's samples"]);
  if (plan.mixup) items.push(["diamond", "naive mixup (grey)"]);
  if (plan.follow) { items.push(["dash", "McCann Q → P_i: x → T_i(x)"]); items.push(["path", "P_a(x) as a moves"]); }
  if (plan.stride > 1) items.push(["note", "1 point in " + plan.stride + " drawn (" + plan.shown + " of " + plan.n + ")"]);
  const k2 = legendScale(ex), fz = Math.round(11 * k2);
  items.forEach(([kind, text], k) => {
    const y = vh - 14 - Math.round(16 * k2) * (items.length - 1 - k);
    ctx.strokeStyle = "#262730"; ctx.fillStyle = "#262730"; ctx.lineWidth = 1.4;
    if (kind === "line") { ctx.beginPath(); ctx.moveTo(lx, y - 4); ctx.lineTo(lx + 10, y - 4); ctx.stroke(); }
    else if (kind === "square") ctx.strokeRect(lx + 2.5, y - 6.5, 5, 5);
    else if (kind === "dot") { ctx.beginPath(); ctx.arc(lx + 5, y - 4, 2.5, 0, 2 * Math.PI); ctx.fill(); }
    else if (kind === "diamond") { ctx.strokeStyle = MIXUP_COLOUR; diamond(ctx, lx + 5, y - 4, 4); ctx.stroke(); }
    else if (kind === "dash") { ctx.setLineDash([3, 2]); ctx.beginPath(); ctx.moveTo(lx, y - 4); ctx.lineTo(lx + 10, y - 4); ctx.stroke(); ctx.setLineDash([]); }
    else if (kind === "path") { ctx.strokeStyle = "#999"; ctx.lineWidth = 3; ctx.beginPath(); ctx.moveTo(lx, y - 4); ctx.lineTo(lx + 10, y - 4); ctx.stroke(); }
    ctx.lineWidth = 1; ctx.fillStyle = kind === "note" ? "#808495" : "#262730"; ctx.textAlign = "left";
    fitText(ctx, text, kind === "note" ? lx : lx + 14, y, LEGEND_W - (kind === "note" ? 12 : 26), fz);
  });
}

/** The followed x, large: x, its T_i(x) (the McCann paths x -> T_i(x) dashed), P_a(x)'s path as
 *  a moves (the play path, else the edge of the two largest weights) and P_a(x) itself. */
function drawFollow(ex, ctx, play) {
  const f = followedX(ex), ui = ex.ui, h = headerOf(ex), m = h.m, big = !!ex.presenter;
  const px = (v) => [ui.X(v[0]), ui.Y(v[1])], X = px(f.x), Ts = f.T.map(px), P = px(f.pa);
  const mix = (w) => px(f.T[0].map((_, k) => f.T.reduce((acc, t, i) => acc + w[i] * t[k], 0)));
  // P_a(x)'s path: along the play path's waypoints, else along the picked edge
  const order = f.a.map((w, i) => [w, i]).sort((u, v) => v[0] - u[0]);
  const edge = [order[0][1], order.length > 1 ? order[1][1] : order[0][1]];
  const way = play || edge.map((i) => Array.from({ length: m }, (_, k) => (k === i ? 1 : 0)));
  ctx.strokeStyle = "#999"; ctx.lineWidth = big ? 4 : 3; ctx.globalAlpha = 0.55; ctx.lineJoin = "round";
  ctx.beginPath(); way.forEach((w, k) => { const [x, y] = mix(w); if (k) ctx.lineTo(x, y); else ctx.moveTo(x, y); }); ctx.stroke();
  // McCann's 2-dataset paths x -> (1 - t) x + t T_i(x), for the picked edge's references
  ctx.globalAlpha = 0.8; ctx.lineWidth = big ? 2 : 1.5; ctx.setLineDash([5, 4]);
  for (const i of new Set(edge)) { ctx.strokeStyle = SET_COLORS[i % SET_COLORS.length]; ctx.beginPath(); ctx.moveTo(X[0], X[1]); ctx.lineTo(Ts[i][0], Ts[i][1]); ctx.stroke(); }
  ctx.setLineDash([]); ctx.globalAlpha = 1;
  // thin spokes T_i(x) -> P_a(x): the mix is their weighted average
  ctx.lineWidth = 1; ctx.strokeStyle = "#262730"; ctx.globalAlpha = 0.5; ctx.beginPath();
  Ts.forEach(([x, y], i) => { if (f.a[i] > 0) { ctx.moveTo(x, y); ctx.lineTo(P[0], P[1]); } }); ctx.stroke(); ctx.globalAlpha = 1;
  const r = big ? 9 : 7, fs = big ? 17 : 13;
  Ts.forEach(([x, y], i) => {
    ctx.fillStyle = "#fff"; ctx.fillRect(x - r, y - r, 2 * r, 2 * r);
    ctx.strokeStyle = SET_COLORS[i % SET_COLORS.length]; ctx.lineWidth = 3; ctx.strokeRect(x - r, y - r, 2 * r, 2 * r); ctx.lineWidth = 1;
  });
  ctx.beginPath(); ctx.arc(X[0], X[1], r, 0, 2 * Math.PI); ctx.fillStyle = "#000"; ctx.fill();
  ctx.strokeStyle = "#fff"; ctx.lineWidth = 2; ctx.stroke(); ctx.lineWidth = 1;

  const lab = payloadArray(ex, "labels").data[f.index];
  ctx.beginPath(); ctx.arc(P[0], P[1], r + 3, 0, 2 * Math.PI); ctx.fillStyle = PALETTE[lab % PALETTE.length]; ctx.fill();
  ctx.strokeStyle = "#000"; ctx.lineWidth = 3; ctx.stroke(); ctx.lineWidth = 1;
  ctx.textAlign = "left";
  const [vw, vh] = cssSize(ui.view);
  const items = [["P_a(x)", P, r + 3], ["x", X, r], ...Ts.map((t, i) => ["T" + (i + 1) + "(x)", t, r])];
  ui.followLabels = placeLabels(ctx, items, fs, vw - LEGEND_W, vh);
  for (const b of ui.followLabels) {
    if (b.moved) {  // a leader line from the mark to the nearest point of its label's box
      const lx = Math.max(b.x, Math.min(b.mx, b.x + b.w)), ly = Math.max(b.y, Math.min(b.my, b.y + b.h));
      const d = Math.hypot(lx - b.mx, ly - b.my) || 1;
      ctx.strokeStyle = "#262730"; ctx.lineWidth = 1; ctx.beginPath();
      ctx.moveTo(b.mx + (lx - b.mx) * b.mr / d, b.my + (ly - b.my) * b.mr / d); ctx.lineTo(lx, ly); ctx.stroke();
    }
    haloText(ctx, b.text, b.x, b.y + fs, fs);
  }
}

/** The followed x's labels placed apart (issue 45): each label tries places around its mark
 *  (right, left, above, below, the corners; then further out) and takes the first that stays
 *  inside the plot (``right`` x ``bottom`` CSS px) and clear of the labels placed before and of
 *  every mark; a label moved off its first ring gets a leader line. ``items``: [text, [x, y],
 *  mark radius]. Returns [{text, x, y (top), w, h, moved, mx, my, mr}]. */
function placeLabels(ctx, items, fs, right, bottom) {
  ctx.font = "bold " + fs + "px sans-serif";
  const h = fs + 4, placed = [];
  const marks = items.map(([, [x, y], mr]) => ({ x: x - mr, y: y - mr, w: 2 * mr, h: 2 * mr }));
  const hit = (a, b) => a.x < b.x + b.w + 1 && b.x < a.x + a.w + 1 && a.y < b.y + b.h + 1 && b.y < a.y + a.h + 1;
  for (const [text, [mx, my], mr] of items) {
    const w = ctx.measureText(text).width;
    let best = null, bestCost = Infinity;
    for (let ring = 0; ring < 6 && bestCost >= 1; ring++) {
      const g = mr + 3 + ring * (fs * 0.8);
      const tries = [[mx + g, my - h / 2], [mx - g - w, my - h / 2], [mx - w / 2, my - g - h], [mx - w / 2, my + g],
        [mx + g * 0.7, my - g * 0.7 - h], [mx - g * 0.7 - w, my - g * 0.7 - h], [mx + g * 0.7, my + g * 0.7], [mx - g * 0.7 - w, my + g * 0.7]];
      for (const [x, y] of tries) {
        const box = { x: x, y: y, w: w, h: h };
        const out = x < 2 || x + w > right - 2 || y < 0 || y + h > bottom - 2;
        const cost = (out ? 100 : 0) + 10 * placed.filter((b) => hit(b, box)).length + marks.filter((b) => hit(b, box)).length + ring * 0.01;
        if (cost < bestCost) { bestCost = cost; best = Object.assign(box, { ring: ring }); }
        if (cost < 1) break;
      }
    }
    placed.push({ text: text, x: best.x, y: best.y, w: w, h: h, moved: best.ring > 0, mx: mx, my: my, mr: mr });
  }
  return placed;
}

/** What the teaching view shows at the current weights, in words. */
export function teachingCaption(ex) {
  const h = headerOf(ex), T = ex.teach || {}, a = ex.pick, plan = teachingPlan(ex);
  const k = ex.teachStep || 0;
  let text;
  if (k > 0) text = TEACH_STEPS[k];
  else {
    const parts = a.map((w, i) => Math.round(100 * w) + "% of the way to T" + (i + 1) + "(x) in " + h.names[i]);
    text = "Each filled dot is a target sample x moved to Σ a_i T_i(x): " + parts.join(", ") +
      ". Its colour is x's class in Q.";
    if (T["teach-lines"]) text += " Lines join x to its images T_i(x) (one point in " + (plan ? plan.lineStride : 1) + "), darker for larger a_i.";
    if (T["teach-maps"]) text += " Squares are the T_i(x), coloured by reference.";
    if (T["teach-mixup"]) text += " Grey diamonds are naive mixup at the same a: random partners instead of T_i(x), so a class no longer stays together.";
  }
  if (plan && plan.follow) {
    const f = followedX(ex);
    text += " Followed x (#" + f.sample + ", click a dot to change): P_a(x) = " +
      f.a.map((w, i) => fmt(w, 2) + "·T" + (i + 1) + "(x)").join(" + ") +
      ". Dashed: McCann's path x → (1 − t) x + t T_i(x) to one reference; grey: P_a(x) as a moves.";
  }
  if (plan && plan.stride > 1) text += " " + plan.shown + " of " + plan.n + " points per dataset drawn" +
    (ex.presenter ? " (presenter mode)." : ", as " + plan.layers + " layers are on.");
  return text;
}

/** The view at the pick (into ``into``, a figure's context, when given: the faded
 *  background is then drawn into it too, never the screen's copy scaled). */
export function drawView(ex, into) {
  const ui = ex.ui, c = ui.view, ctx = into || c.getContext("2d"), plan = teachingPlan(ex);
  const stride = plan ? plan.stride : 1;
  if (ui.bgStride !== stride) drawViewBackground(ex, stride);
  const [cw, ch] = cssSize(c);
  ctx.clearRect(0, 0, cw, ch);
  if (into) paintViewBackground(ex, ctx, stride);  // a figure: drawn at its own scale (issue 45)
  else ctx.drawImage(ui.bg, 0, 0, cw, ch);
  const drawn = plan ? drawTeaching(ex, ctx, plan) : {};
  if (ui.teach && !into) {
    // presenter mode's larger text is the root's "presenter" class (stage_layout.js); a caption
    // that grows a line grows the frame with it, so nothing under it is cut off (issue 45)
    const text = teachingCaption(ex);
    if (ui.teach.textContent !== text) { ui.teach.textContent = text; fitHeight(ex); }
  }
  const all = viewPoints(ex), pts = (ui.points = stride > 1 ? all.filter((p) => p[3] % stride === 0) : all);
  drawn.pa = 0;
  if (!plan || plan.pa) {
    const dot = plan && ex.presenter ? 5 : 3.5;  // presenter mode: larger points, seen from the back
    for (const [x, y, lab] of pts) {
      ctx.beginPath(); ctx.arc(ui.X(x), ui.Y(y), dot, 0, 2 * Math.PI);
      ctx.fillStyle = PALETTE[lab % PALETTE.length]; ctx.fill();
      ctx.strokeStyle = "#000"; ctx.lineWidth = 0.8; ctx.stroke();
    }
    drawn.pa = pts.length;
  }
  if (plan && !plan.pa) ui.points = [];
  drawn.follow = 0;
  if (plan && plan.follow) { drawFollow(ex, ctx, ex.playPath ? ex.playPath() : null); drawn.follow = 1; }
  drawn.stride = stride; drawn.n = all.length; drawn.background = plan ? Math.ceil(payloadArray(ex, "ref_coords").shape[0] / stride) : null;
  ui.drawn = drawn;
}

/** How many points each layer drew in the last frame ({pa, lines, maps, mixup, x, follow,
 *  stride, n, background}). */
export function pointsDrawn(ex) { return ex.ui && ex.ui.drawn ? Object.assign({}, ex.ui.drawn) : null; }

/** The tooltip of the point under the pointer: its target sample and (embedding of images)
 *  its mixed image. */
export function hoverView(ex, ev) {
  const ui = ex.ui, tip = ex.tip, h = headerOf(ex);
  if (!ui.points) return;
  const r = ui.view.getBoundingClientRect(), mx = ev.clientX - r.left, my = ev.clientY - r.top;
  let best = null, bd = 64;
  for (const p of ui.points) {
    const d = (ui.X(p[0]) - mx) ** 2 + (ui.Y(p[1]) - my) ** 2;
    if (d < bd) { bd = d; best = p; }
  }
  if (!best) { tip.style.display = "none"; return; }
  const idx = best[3];
  tip.innerHTML = "";
  const what = (h.mode === "mccann" ? "P^M_t" : "P_a") + " of target #" + h.sample_index[Math.min(idx, h.sample_index.length - 1)];
  el("div", { text: what }, tip);
  if (payloadArray(ex, "images") && h.view === "embedding") {
    const [ch, hh, ww] = h.image_shape, D = ch * hh * ww, im = payloadArray(ex, "images"), Sn = im.shape[1];
    const acc = new Uint8ClampedArray(D);
    const tmp = new Float32Array(D);
    const off = h.mode === "mccann" ? 0 : 1;
    currentCoef(ex).forEach((a, i) => { const base = ((i + off) * Sn + idx) * D; for (let k = 0; k < D; k++) tmp[k] += a * im.data[base + k]; });
    for (let k = 0; k < D; k++) acc[k] = Math.round(tmp[k]);
    const cv = el("canvas", { width: ww, height: hh }, tip);
    cv.style.width = 3 * ww + "px"; cv.style.imageRendering = "pixelated";
    const cx = cv.getContext("2d"), img = cx.createImageData(ww, hh);
    fillImage(img, acc, 0, ch, hh, ww); cx.putImageData(img, 0, 0);
  } else {
    el("div", { text: "(" + fmt(best[0], 2) + ", " + fmt(best[1], 2) + ")" }, tip);
  }
  const win = ex.doc.defaultView || window;
  tip.style.left = Math.min(ev.clientX + 12, win.innerWidth - 120) + "px";
  tip.style.top = ev.clientY + 12 + "px";
  tip.style.display = "block";
}
