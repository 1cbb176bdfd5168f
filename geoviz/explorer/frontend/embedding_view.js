/* geoviz explorer: the embedding view (UMAP/PCA of Q and the references, P_a's points placed
 * by the simplex grid) and the scatter view of 2-D/3-D data with its teaching overlays
 * (coupling lines, the T_i(x), naive mixup); the hover tooltip. */
import { gridNodeIndex, gridWeights } from "./maths.js";
import { LEGEND_W, PALETTE, SET_COLORS, el, fillImage, fitText, fmt } from "./drawing_kit.js";
import { currentCoef, headerOf, payloadArray } from "./explorer_state.js";

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
  const c = ui.view, pad = 20, plotW = c.width - LEGEND_W;
  const sx = (plotW - 2 * pad) / (x1 - x0 || 1), sy = (c.height - 2 * pad) / (y1 - y0 || 1);
  ui.X = (x) => pad + (x - x0) * sx;
  ui.Y = (y) => c.height - pad - (y - y0) * sy;
  // the faded background, drawn once
  const off = ex.doc.createElement("canvas");
  off.width = c.width; off.height = c.height;
  const ctx = off.getContext("2d");
  ctx.globalAlpha = 0.18;
  const bg = h.view === "embedding" ? A("bg") : A("ref_coords"), set = h.view === "embedding" ? A("bg_set") : A("ref_set");
  const d = bg.shape[1];
  for (let k = 0; k < bg.shape[0]; k++) {
    const s = set.data[k];
    ctx.fillStyle = h.view === "embedding" ? (s === 0 ? "#000" : SET_COLORS[(s - 1) % SET_COLORS.length])
                                             : SET_COLORS[(h.mode === "mccann" ? h.ref : s) % SET_COLORS.length];
    ctx.fillRect(ui.X(bg.data[k * d]) - 2, ui.Y(bg.data[k * d + 1]) - 2, 4, 4);
  }
  if (h.view === "scatter") {  // Q itself, faded
    const co = A("coords"), n = co.shape[1], dd = co.shape[2];
    ctx.fillStyle = "#000";
    for (let k = 0; k < n; k++) ctx.fillRect(ui.X(co.data[k * dd]) - 1.5, ui.Y(co.data[k * dd + 1]) - 1.5, 3, 3);
  }
  ctx.globalAlpha = 1;
  const lx = plotW + 6, lw = LEGEND_W - 12;
  ctx.fillStyle = "#fff"; ctx.fillRect(plotW, 0, LEGEND_W, c.height);
  ctx.strokeStyle = "#ddd"; ctx.beginPath(); ctx.moveTo(plotW + 0.5, 4); ctx.lineTo(plotW + 0.5, c.height - 4); ctx.stroke();
  ctx.fillStyle = "#262730"; ctx.textAlign = "left";
  ctx.font = "bold 12px sans-serif"; ctx.fillText("Datasets (faded)", lx, 16); ctx.font = "12px sans-serif";
  const legend = h.mode === "mccann" ? ["Q", h.ref_name] : ["Q", ...h.names];
  legend.forEach((name, i) => {
    ctx.fillStyle = i === 0 ? "#000" : SET_COLORS[(h.mode === "mccann" ? h.ref : i - 1) % SET_COLORS.length];
    ctx.fillRect(lx, 24 + 16 * i, 10, 10); ctx.fillStyle = "#262730";
    fitText(ctx, String(name), lx + 14, 33 + 16 * i, lw - 14, 12);  // left-aligned
  });
  // P_a's colours: the class of its target sample
  const classes = (h.mode === "mccann" ? (h.class_names || [[]])[0] : h.target_classes) || [];
  const y = 40 + 16 * legend.length;
  ctx.font = "bold 12px sans-serif"; ctx.textAlign = "left";
  ctx.fillText((h.mode === "mccann" ? "P^M_t" : "P_a") + " by Q's class", lx, y); ctx.font = "12px sans-serif";
  classes.slice(0, 20).forEach((name, k) => {
    const yy = y + 8 + 15 * k;
    ctx.beginPath(); ctx.arc(lx + 5, yy + 5, 4, 0, 2 * Math.PI); ctx.fillStyle = PALETTE[k % PALETTE.length]; ctx.fill();
    ctx.strokeStyle = "#000"; ctx.lineWidth = 0.8; ctx.stroke();
    ctx.fillStyle = "#262730"; fitText(ctx, String(name), lx + 14, yy + 9, lw - 14, 11);
  });
  ctx.textAlign = "left";
  ui.bg = off;
  if (h.view === "embedding") {
    const grid = A("grid");
    ui.node = gridNodeIndex(grid.data, grid.shape[1]);
  }
}

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

/** Teaching view (2-D/3-D data): lines x -> T_i(x), the T_i(x), the naive mixup. */
function drawTeaching(ex, ctx) {
  const h = headerOf(ex), ui = ex.ui, T = ex.teach, pick = ex.pick;
  if (!T || h.view !== "scatter" || h.mode === "mccann") return;
  const co = payloadArray(ex, "coords"), n = co.shape[1], d = co.shape[2], m = h.m;
  const at = (row, p) => [ui.X(co.data[(row * n + p) * d]), ui.Y(co.data[(row * n + p) * d + 1])];
  const step = Math.max(1, Math.ceil(n / 60));  // at most 60 points' lines
  if (T["teach-lines"]) {
    ctx.lineWidth = 1;
    for (let p = 0; p < n; p += step) {
      const [x0, y0] = at(0, p);
      for (let i = 0; i < m; i++) {
        if (pick[i] <= 0) continue;
        const [x1, y1] = at(i + 1, p);
        ctx.strokeStyle = SET_COLORS[i % SET_COLORS.length]; ctx.globalAlpha = 0.25 + 0.6 * pick[i];
        ctx.beginPath(); ctx.moveTo(x0, y0); ctx.lineTo(x1, y1); ctx.stroke();
      }
    }
    ctx.globalAlpha = 1;
  }
  if (T["teach-maps"]) {
    for (let i = 0; i < m; i++) {
      ctx.strokeStyle = SET_COLORS[i % SET_COLORS.length]; ctx.lineWidth = 1.2;
      for (let p = 0; p < n; p++) { const [x, y] = at(i + 1, p); ctx.strokeRect(x - 2.5, y - 2.5, 5, 5); }
    }
  }
  // the overlays' own legend, at the bottom of the legend column
  const lx = ui.view.width - LEGEND_W + 6, items = [];
  if (T["teach-lines"]) items.push(["line", "x → T_i(x), by reference"]);
  if (T["teach-maps"]) items.push(["square", "T_i(x), by reference"]);
  if (T["teach-mixup"]) items.push(["ring", "naive mixup, by Q's class"]);
  items.forEach(([kind, text], k) => {
    const y = ui.view.height - 14 - 16 * (items.length - 1 - k);
    ctx.strokeStyle = "#262730"; ctx.lineWidth = 1.4;
    if (kind === "line") { ctx.beginPath(); ctx.moveTo(lx, y - 4); ctx.lineTo(lx + 10, y - 4); ctx.stroke(); }
    else if (kind === "square") ctx.strokeRect(lx + 2.5, y - 6.5, 5, 5);
    else { ctx.beginPath(); ctx.arc(lx + 5, y - 4, 3.5, 0, 2 * Math.PI); ctx.stroke(); }
    ctx.lineWidth = 1; ctx.fillStyle = "#262730"; ctx.textAlign = "left";
    fitText(ctx, text, lx + 14, y, LEGEND_W - 26, 11);
  });
  if (T["teach-mixup"]) {
    const mx = payloadArray(ex, "mixup_coords"), lab = payloadArray(ex, "labels").data;
    for (let p = 0; p < n; p++) {
      let x = 0, y = 0;
      for (let i = 0; i < m; i++) { x += pick[i] * mx.data[(i * n + p) * d]; y += pick[i] * mx.data[(i * n + p) * d + 1]; }
      ctx.beginPath(); ctx.arc(ui.X(x), ui.Y(y), 3.5, 0, 2 * Math.PI);
      ctx.strokeStyle = PALETTE[lab[p] % PALETTE.length]; ctx.lineWidth = 1.6; ctx.stroke();
    }
    ctx.lineWidth = 1;
  }
}

/** What the teaching view shows at the current weights, in words. */
export function teachingCaption(ex) {
  const h = headerOf(ex), T = ex.teach || {}, a = ex.pick;
  const parts = a.map((w, i) => Math.round(100 * w) + "% of the way to T" + (i + 1) + "(x) in " + h.names[i]);
  let text = "Each filled dot is a target sample x moved to Σ a_i T_i(x): " + parts.join(", ") +
    ". Its colour is x's class in Q.";
  if (T["teach-lines"]) text += " Lines join x to its images T_i(x) (one point in " + Math.max(1, Math.ceil(payloadArray(ex, "coords").shape[1] / 60)) + "), darker for larger a_i.";
  if (T["teach-maps"]) text += " Squares are the T_i(x), coloured by reference.";
  if (T["teach-mixup"]) text += " Rings are naive mixup at the same a: random partners instead of T_i(x), so a class no longer stays together.";
  return text;
}

/** The view at the pick (into ``into``, a figure's context, when given). */
export function drawView(ex, into) {
  const ui = ex.ui, c = ui.view, ctx = into || c.getContext("2d");
  ctx.clearRect(0, 0, c.width, c.height);
  ctx.drawImage(ui.bg, 0, 0);
  drawTeaching(ex, ctx);
  if (ui.teach) ui.teach.textContent = teachingCaption(ex);
  const pts = (ui.points = viewPoints(ex));
  for (const [x, y, lab] of pts) {
    ctx.beginPath(); ctx.arc(ui.X(x), ui.Y(y), 3.5, 0, 2 * Math.PI);
    ctx.fillStyle = PALETTE[lab % PALETTE.length]; ctx.fill();
    ctx.strokeStyle = "#000"; ctx.lineWidth = 0.8; ctx.stroke();
  }
}

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
