/* geoviz explorer: P_a's image tiles (with their top soft label), the inspector of one tile,
 * and the label-mass bars. */
import { labelMass, mixImages, mixShownImages } from "./maths.js";
import { CAPTION_PX, SET_COLORS, cssSize, fillImage, fitText, fmt, mass2, pixelRatio, sizeCanvas } from "./drawing_kit.js";
import { availableWidth, headerOf, payloadArray } from "./explorer_state.js";

/** The top soft label of shown sample ``j`` at the pick (or t) and its mass: [name, mass]. */
export function topLabel(ex, j) {
  const h = headerOf(ex), soft = payloadArray(ex, "soft");
  if (h.mode === "mccann") {
    const C = soft.shape[1], t = ex.t;
    let best = 1 - t, name = h.target_name + "/" + h.class_names[0][h.sample_label[j]];
    for (let c = 0; c < C; c++) {
      const v = t * soft.data[j * C + c];
      if (v > best) { best = v; name = h.ref_name + "/" + h.class_names[1][c]; }
    }
    return [name, best];
  }
  const m = h.m, Sn = soft.shape[1], C = soft.shape[2];
  let best = -1, name = "";
  for (let i = 0; i < m; i++) {
    const names = h.class_names[i];
    for (let c = 0; c < names.length; c++) {
      const v = ex.pick[i] * soft.data[(i * Sn + j) * C + c];
      if (v > best) { best = v; name = h.names[i] + "/" + names[c]; }
    }
  }
  return [name, best];
}

/** The tiles of P_a's shown samples, each with its top label (into ``into``, a figure's
 *  context, when given; the inspector is redrawn only on the page). */
export function drawSamples(ex, into) {
  const h = headerOf(ex), ui = ex.ui, ctx = into || ui.samples.getContext("2d");
  const [ch, hh, ww] = h.image_shape, D = ch * hh * ww;
  const px = mixShownImages(ex.P, h.mode === "mccann" ? ex.t : ex.pick);
  ex.hooks.lastMix = px;
  const tctx = ui.tile.getContext("2d"), img = tctx.createImageData(ww, hh);
  const [sw, sh] = cssSize(ui.samples);
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, sw, sh);
  ctx.imageSmoothingEnabled = false;
  ctx.font = CAPTION_PX + "px sans-serif"; ctx.textAlign = "center";
  ui.captionPx = CAPTION_PX;
  for (let j = 0; j < h.n_shown; j++) {
    fillImage(img, px, j * D, ch, hh, ww);
    tctx.putImageData(img, 0, 0);
    const col = j % ui.cols, row = Math.floor(j / ui.cols);
    const x = col * ui.tileW + (ui.tileW - ww * ui.scale) / 2, y = row * ui.tileH + 2;
    ctx.drawImage(ui.tile, x, y, ww * ui.scale, hh * ui.scale);
    const [name, v] = topLabel(ex, j);
    ctx.fillStyle = "#262730";
    const cut = name.indexOf("/"), xc = x + ww * ui.scale / 2, yc = y + hh * ui.scale + CAPTION_PX - 1;
    fitText(ctx, name.slice(0, cut), xc, yc, ui.tileW - 4, CAPTION_PX, CAPTION_PX);
    fitText(ctx, name.slice(cut + 1) + " " + mass2(v), xc, yc + CAPTION_PX, ui.tileW - 4, CAPTION_PX, CAPTION_PX);
    if (ex.inspect === j) { ctx.strokeStyle = "#ff4b4b"; ctx.lineWidth = 2; ctx.strokeRect(x - 2, y - 2, ww * ui.scale + 4, hh * ui.scale + 4); ctx.lineWidth = 1; }
  }
  if (!into) drawInspector(ex);
}

/** Tiles at ``zoom`` x the default size in the width the layout gives them (``ui.tilesWidth``,
 *  else the page's): as few rows as the width allows (each tile 80 to 92 px wide at 1x, so
 *  its two caption lines stay readable), the rows' tiles spread over the width. */
export function layoutTiles(ex, zoom) {
  const h = headerOf(ex), ui = ex.ui, [, hh, ww] = h.image_shape, n = h.n_shown;
  const width = Math.min(ui.tilesWidth || availableWidth(ex), 1400);
  ui.scale = ui.baseScale * zoom;
  const least = Math.max(ww * ui.scale + 24, 80), most = Math.max(ww * ui.scale + 30, 92);
  const fit = Math.max(1, Math.floor(width / least)), rows = Math.ceil(n / fit);
  ui.cols = Math.max(1, Math.min(fit, Math.ceil(n / rows)));
  ui.tileW = Math.max(least, Math.min(most, Math.floor(width / ui.cols)));
  ui.tileH = hh * ui.scale + 2 * CAPTION_PX + 4;  // two caption lines, 14 px apart
  sizeCanvas(ui.samples, ui.cols * ui.tileW, Math.ceil(n / ui.cols) * ui.tileH, pixelRatio(ex.doc));
}

/** The inspected sample large: x, T_1(x) .. T_m(x) and the mix, each with its top label. */
export function drawInspector(ex) {
  const h = headerOf(ex), ui = ex.ui, j = ex.inspect, c = ui.inspector;
  if (j === undefined || j === null) return;
  const [ch, hh, ww] = h.image_shape, D = ch * hh * ww, im = payloadArray(ex, "images"), Sn = im.shape[1];
  const big = Math.max(2, Math.floor(120 / Math.max(hh, ww))), W = ww * big, cellW = Math.max(W + 16, 130);
  const mccann = h.mode === "mccann", m = mccann ? 1 : h.m;
  const panels = m + 2;
  c.style.display = "block";
  sizeCanvas(c, panels * cellW, hh * big + 58, pixelRatio(ex.doc));
  const [cw, chh] = cssSize(c), ctx = c.getContext("2d");
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, cw, chh);
  ctx.imageSmoothingEnabled = false;
  const tctx = ui.tile.getContext("2d"), img = tctx.createImageData(ww, hh);
  const coef = mccann ? [1 - ex.t, ex.t] : ex.pick;
  const rows = [];  // [pixels, offset, title, caption]
  const qClass = (mccann ? h.class_names[0] : h.target_classes)[h.sample_label[j]];
  rows.push([im.data, j * D, "x (target sample #" + h.sample_index[j] + ")", "Q: " + qClass]);
  const soft = payloadArray(ex, "soft");
  for (let i = 0; i < m; i++) {
    const names = mccann ? h.class_names[1] : h.class_names[i];
    let best = -1, cls = "";
    for (let k = 0; k < names.length; k++) {
      const v = mccann ? soft.data[j * soft.shape[1] + k] : soft.data[(i * soft.shape[1] + j) * soft.shape[2] + k];
      if (v > best) { best = v; cls = names[k]; }
    }
    const row = (mccann ? 1 : i + 1);
    rows.push([im.data, (row * Sn + j) * D, "T" + ((mccann ? h.ref : i) + 1) + "(x) → " + (mccann ? h.ref_name : h.names[i]),
               cls + " " + mass2(best)]);
  }
  const mixed = mixImages(im.data, im.shape, coef, mccann ? 0 : 1, h.n_shown);
  const [name, v] = topLabel(ex, j);
  rows.push([mixed, j * D, (mccann ? "P^M_t(x), t = " + fmt(ex.t, 2) : "P_a(x), a = (" + ex.pick.map((x) => fmt(x, 2)).join(", ") + ")"),
             name + " " + mass2(v)]);
  ctx.textAlign = "center";
  rows.forEach(([px, off, title, caption], k) => {
    fillImage(img, px, off, ch, hh, ww);
    tctx.putImageData(img, 0, 0);
    const x = k * cellW + (cellW - W) / 2;
    ctx.drawImage(ui.tile, x, 18, W, hh * big);
    ctx.strokeStyle = k === rows.length - 1 ? "#ff4b4b" : "#ccc"; ctx.lineWidth = k === rows.length - 1 ? 2 : 1;
    ctx.strokeRect(x - 1, 17, W + 2, hh * big + 2); ctx.lineWidth = 1;
    ctx.fillStyle = "#262730";
    fitText(ctx, title, k * cellW + cellW / 2, 12, cellW - 6, 11);
    fitText(ctx, caption, k * cellW + cellW / 2, 18 + hh * big + 16, cellW - 6, 11);
  });
  ctx.fillStyle = "#808495";
  fitText(ctx, "inspecting tile " + (j + 1) + " · its mass is the top soft label's", cw / 2, chh - 8, cw - 8, 10);
}

/** The label-mass bars: each block (a reference, or McCann's Q and reference) scaled by its
 *  weight (into ``into``, a figure's context, when given). */
export function drawMass(ex, into) {
  const h = headerOf(ex), c = ex.ui.mass, ctx = into || c.getContext("2d"), [cw, chh] = cssSize(c);
  ctx.clearRect(0, 0, cw, chh);
  const blocks = [];
  if (h.mode === "mccann") {
    blocks.push({ name: h.target_name, w: 1 - ex.t, vals: Array.from(payloadArray(ex, "target_mass").data) });
    blocks.push({ name: h.ref_name, w: ex.t, vals: Array.from(payloadArray(ex, "mass").data) });
  } else {
    const mass = payloadArray(ex, "mass"), C = mass.shape[1];
    for (let i = 0; i < h.m; i++) {
      blocks.push({ name: h.names[i], w: ex.pick[i], vals: Array.from(mass.data.slice(i * C, i * C + h.class_names[i].length)) });
    }
  }
  const weighted = labelMass(blocks.map((b) => b.w), blocks.map((b) => b.vals));
  const total = blocks.reduce((p, b) => p + b.vals.length, 0) + blocks.length - 1;
  // scale: the largest class mass any weights can give (a block at weight 1)
  const top = Math.max(1e-12, ...blocks.flatMap((b) => b.vals));
  const bw = (cw - 10) / total, y1 = chh - 28, y0 = 14;
  let x = 5;
  ctx.font = "11px sans-serif"; ctx.textAlign = "center";
  blocks.forEach((b, i) => {
    const x0 = x;
    ctx.fillStyle = SET_COLORS[(h.mode === "mccann" ? (i === 0 ? 5 : h.ref) : i) % SET_COLORS.length];
    for (const v of weighted[i]) {
      const hgt = v / top * (y1 - y0);
      ctx.fillRect(x + 1, y1 - hgt, Math.max(1, bw - 2), hgt);
      x += bw;
    }
    ctx.fillStyle = "#262730";
    fitText(ctx, b.name + " · " + fmt(b.w, 2), (x0 + x) / 2, y1 + 16, x - x0 - 2, 11);
    x += bw;
  });
  ctx.strokeStyle = "#999"; ctx.beginPath(); ctx.moveTo(0, y1); ctx.lineTo(cw, y1); ctx.stroke();
}
