/* geoviz explorer: the weight simplex drawn: the ternary heatmap of W²(P_a, Q) with its
 * colour bar and the region as good as â (m = 3), the curve along the geodesic with its band
 * (m = 2), the linked bars (m > 3); and the geometry the pointer reads back. */
import { baryToXY, objective, objectiveRange, regionShare, shareText, simplexTriangle, viridis, xyToBary } from "./maths.js";
import { SET_COLORS, cssSize, dot, fitText, fmt, roleLabel, star, tick } from "./drawing_kit.js";
import { asGoodAt, bootArray, bootHeader, fitHeight, headerOf, objectiveAt, payloadArray, requestDraw, valueIntervalAt } from "./explorer_state.js";

/** The ternary's vertices in the simplex canvas. */
export function triangleOf(ex) {
  const [w, hh] = cssSize(ex.ui.simplex);
  return simplexTriangle(w, hh);
}
/** Canvas CSS pixels of weights ``a`` (m = 3). */
export function toXY(ex, a) { return baryToXY(a, triangleOf(ex)); }
/** Barycentric coordinates of canvas CSS pixel (x, y) (m = 3). */
export function toBary(ex, x, y) { return xyToBary(x, y, triangleOf(ex)); }
/** The curve's box (m = 2). */
export function lineGeom(ex) {
  const [w, hh] = cssSize(ex.ui.simplex);
  return { x0: 50, x1: w - 20, y0: 20, y1: hh - 40 };
}
/** The bars' geometry (m > 3): bar width, left edge of bar i, top and bottom. */
export function barGeom(ex) {
  const [cw, ch] = cssSize(ex.ui.simplex), m = headerOf(ex).m;
  const w = (cw - 40) / m;
  return { w, x: (i) => 20 + i * w, y0: 24, y1: ch - 40 };
}

/** The heatmap of W²(P_a, Q) over the triangle with 12 contour levels (off-screen, once per
 *  build), its colour bar, then the region as good as â. The bar's range holds the pixel
 *  centres and the objective at the three vertices, â and the pick (objectiveRange). */
export function buildHeatmap(ex) {
  // one heatmap pixel per backing pixel (sharp at any devicePixelRatio)
  const c = ex.ui.simplex, W = c.width, Hh = c.height, r = c.dpr || 1;
  const V = triangleOf(ex).map(([x, y]) => [x * r, y * r]);
  const w = payloadArray(ex, "w_to_target").data, wb = payloadArray(ex, "w_between").data;
  const img = new ImageData(W, Hh);
  const vals = new Float64Array(W * Hh).fill(NaN);
  for (let y = 0; y < Hh; y++) for (let x = 0; x < W; x++) {
    const b = xyToBary(x + 0.5, y + 0.5, V);
    if (b[0] < -1e-9 || b[1] < -1e-9 || b[2] < -1e-9) continue;
    vals[y * W + x] = objective(b, w, wb);
  }
  const marked = [[1, 0, 0], [0, 1, 0], [0, 0, 1], Array.from(payloadArray(ex, "a_hat").data)];
  if (ex.pick && ex.pick.length === 3) marked.push(ex.pick);
  const [lo, hi] = objectiveRange(vals, marked, w, wb);
  const levels = 12, step = (hi - lo) / levels || 1;
  for (let y = 0; y < Hh; y++) for (let x = 0; x < W; x++) {
    const k = y * W + x, v = vals[k];
    if (Number.isNaN(v)) continue;
    const col = viridis((v - lo) / (hi - lo || 1));
    const band = Math.floor((v - lo) / step);
    const right = x + 1 < W ? vals[k + 1] : NaN, down = y + 1 < Hh ? vals[k + W] : NaN;
    const edge = (!Number.isNaN(right) && Math.floor((right - lo) / step) !== band) ||
                 (!Number.isNaN(down) && Math.floor((down - lo) / step) !== band);
    const f = edge ? 0.55 : 1;
    img.data[4 * k] = col[0] * f; img.data[4 * k + 1] = col[1] * f; img.data[4 * k + 2] = col[2] * f;
    img.data[4 * k + 3] = 255;
  }
  const off = ex.doc.createElement("canvas");
  off.width = W; off.height = Hh;
  off.getContext("2d").putImageData(img, 0, 0);
  ex.ui.heat = off; ex.ui.range = [lo, hi]; ex.ui.colorArgs = [lo, hi, levels];
  drawColorbar(ex, lo, hi, levels);
  scheduleRegion(ex);
}

/** The region as good as â, built in a task of its own just after the frame that asked for
 *  it: ~0.1 s of work that would otherwise hold back the first drawn simplex (issue 26). */
export function scheduleRegion(ex) {
  const ui = ex.ui;
  ui.region = null; ui.regionCells = 0; ui.regionShare = null; ui.inset = null; ui.regionBox = null;
  showRegionNote(ex);
  clearTimeout(ex.regionTimer); ex.regionTimer = null;
  const bt = bootHeader(ex);
  if (ex.destroyed || headerOf(ex).mode === "mccann" || headerOf(ex).m !== 3 || !ui.simplex || !bt || bt.flat) return;
  ex.regionTimer = setTimeout(() => {
    ex.regionTimer = null;
    if (ex.ui !== ui || ex.destroyed) return;  // rebuilt since: the new one asked for its own
    const [w, hh] = cssSize(ui.simplex);
    ui.region = buildRegion(ex, w, hh);
    ui.inset = ui.regionCells > 0 && ui.regionCells <= SMALL_REGION_CELLS ? buildInset(ex) : null;
    showRegionNote(ex);
    requestDraw(ex, null);
  }, 0);
}

/** The heatmap's colour scale: W²(P_a, Q) from lo (dark) to hi, with the contour levels
 *  (into ``into``, a figure's context, when given). */
export function drawColorbar(ex, lo, hi, levels, into) {
  const c = ex.ui.colorbar; if (!c) return;
  const [cw, ch] = cssSize(c);
  const ctx = into || c.getContext("2d"), V = triangleOf(ex), top = V[0][1], bottom = V[1][1], x0 = 4, w = 14;
  ctx.clearRect(0, 0, cw, ch);
  for (let y = Math.floor(top); y <= bottom; y++) {
    const col = viridis((bottom - y) / (bottom - top));
    ctx.fillStyle = "rgb(" + col[0] + "," + col[1] + "," + col[2] + ")"; ctx.fillRect(x0, y, w, 1);
  }
  ctx.strokeStyle = "#444"; ctx.strokeRect(x0, top, w, bottom - top);
  ctx.fillStyle = "#262730"; ctx.font = "11px sans-serif"; ctx.textAlign = "left";
  for (let k = 0; k <= 4; k++) {
    const v = lo + (hi - lo) * k / 4, y = bottom - (bottom - top) * k / 4;
    ctx.fillRect(x0 + w, y, 4, 1); ctx.fillText(tick(v), x0 + w + 6, y + 4);
  }
  ctx.save(); ctx.translate(cw - 4, (top + bottom) / 2); ctx.rotate(-Math.PI / 2); ctx.textAlign = "center";
  ctx.fillText("W²(P_a, Q) · " + levels + " levels", 0, 0); ctx.restore();
}

/** The region as good as â on a 4-px lattice: a light fill and a dotted white outline. Its
 *  share of the simplex (ui.regionShare, what the caption says) is counted on the fixed
 *  barycentric lattice of regionShare, the same at every canvas size: the 4-px cells
 *  (ui.regionCells) only decide how it is drawn ("1 cell" at 1280 px was "4 cells" at
 *  1920, issue 45). */
export function buildRegion(ex, W, Hh) {
  const step = 4, nx = Math.ceil(W / step), ny = Math.ceil(Hh / step), V = triangleOf(ex);
  const mask = new Int8Array(nx * ny).fill(-1);  // -1 outside the triangle, 0 worse, 1 as good
  for (let j = 0; j < ny; j++) for (let i = 0; i < nx; i++) {
    const b = xyToBary(i * step + step / 2, j * step + step / 2, V);
    if (b[0] < 0 || b[1] < 0 || b[2] < 0) continue;
    mask[j * nx + i] = asGoodAt(ex, b) ? 1 : 0;
  }
  const off = ex.doc.createElement("canvas"), r = ex.ui.simplex.dpr || 1;
  off.width = Math.round(W * r); off.height = Math.round(Hh * r);
  const ctx = off.getContext("2d");
  ctx.setTransform(r, 0, 0, r, 0, 0);
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (let j = 0; j < ny; j++) for (let i = 0; i < nx; i++) {
    if (mask[j * nx + i] !== 1) continue;
    x0 = Math.min(x0, i * step); y0 = Math.min(y0, j * step); x1 = Math.max(x1, (i + 1) * step); y1 = Math.max(y1, (j + 1) * step);
    ctx.fillStyle = "rgba(255,255,255,0.16)"; ctx.fillRect(i * step, j * step, step, step);
    const worse = [[1, 0], [-1, 0], [0, 1], [0, -1]].some(([di, dj]) => {
      const ii = i + di, jj = j + dj;
      return ii >= 0 && jj >= 0 && ii < nx && jj < ny && mask[jj * nx + ii] === 0;
    });
    if (worse) { ctx.fillStyle = "rgba(255,255,255,0.95)"; ctx.fillRect(i * step + 1, j * step + 1, 2, 2); }
  }
  ex.ui.regionCells = mask.reduce((n, v) => n + (v === 1 ? 1 : 0), 0);
  ex.ui.regionShare = regionShare((a) => asGoodAt(ex, a));
  ex.ui.regionBox = ex.ui.regionCells ? [x0, y0, x1, y1] : null;
  return off;
}

/** A region as good as â of at most this many 4 x 4 px lattice cells is hard to see under
 *  the star (radius 9 px: ~16 cells): it gets a zoomed inset and a dashed ring (issue 35). */
export const SMALL_REGION_CELLS = 60;
const REGION_STEP = 4;

/** The inset's square in the simplex canvas: the largest in the top-left corner clear of the
 *  triangle and of P1's label (64 to 150 CSS px). */
function insetSquare(ex) {
  const V = triangleOf(ex), h = headerOf(ex);
  const probe = ex.doc.createElement("canvas").getContext("2d"); probe.font = "12px sans-serif";
  const labelLeft = V[0][0] - probe.measureText(roleLabel("P1", h.names[0])).width / 2;
  const k = 1 + 1 / Math.sqrt(3);  // the square's corner (4 + s, 4 + s) left of the triangle's left edge
  const s = Math.floor(Math.min(150, labelLeft - 14, (V[0][0] + V[0][1] / Math.sqrt(3) - 6) / k - 4));
  return { x: 4, y: 4, s: Math.max(64, s) };
}

/** The zoomed inset around a small region as good as â: the heatmap (the same colour scale)
 *  and the region on a lattice 4 inset px fine, at the backing store's resolution; the star,
 *  the pick and the ring are drawn over it each frame (drawInset). */
export function buildInset(ex) {
  const ui = ex.ui, box = ui.regionBox, sq = insetSquare(ex), r = ui.simplex.dpr || 1;
  const ahatXY = toXY(ex, Array.from(payloadArray(ex, "a_hat").data));
  const cx = (box[0] + box[2]) / 2, cy = (box[1] + box[3]) / 2;
  const half = Math.max(box[2] - box[0], box[3] - box[1], Math.abs(ahatXY[0] - cx) * 2, Math.abs(ahatXY[1] - cy) * 2) / 2;
  const zoom = Math.min(12, Math.max(2, sq.s / (2 * Math.max(8, 2.2 * half))));
  const n = Math.round(sq.s * r), V = triangleOf(ex);
  const w = payloadArray(ex, "w_to_target").data, wb = payloadArray(ex, "w_between").data;
  const [lo, hi] = ui.range || [0, 1], step = (hi - lo) / 12 || 1;
  const at = (u, v) => xyToBary(cx + (u - sq.s / 2) / zoom, cy + (v - sq.s / 2) / zoom, V);  // inset CSS px -> weights
  const vals = new Float64Array(n * n).fill(NaN);
  for (let j = 0; j < n; j++) for (let i = 0; i < n; i++) {
    const b = at((i + 0.5) / r, (j + 0.5) / r);
    if (b[0] >= -1e-9 && b[1] >= -1e-9 && b[2] >= -1e-9) vals[j * n + i] = objective(b, w, wb);
  }
  const img = new ImageData(n, n);
  for (let k = 0; k < n * n; k++) {
    const v = vals[k];
    if (Number.isNaN(v)) { img.data[4 * k] = img.data[4 * k + 1] = img.data[4 * k + 2] = 245; img.data[4 * k + 3] = 255; continue; }
    const col = viridis((v - lo) / (hi - lo || 1)), band = Math.floor((v - lo) / step);
    const right = (k + 1) % n ? vals[k + 1] : NaN, down = k + n < n * n ? vals[k + n] : NaN;
    const edge = (!Number.isNaN(right) && Math.floor((right - lo) / step) !== band) || (!Number.isNaN(down) && Math.floor((down - lo) / step) !== band);
    const f = edge ? 0.55 : 1;
    img.data[4 * k] = col[0] * f; img.data[4 * k + 1] = col[1] * f; img.data[4 * k + 2] = col[2] * f; img.data[4 * k + 3] = 255;
  }
  const off = ex.doc.createElement("canvas");
  off.width = n; off.height = n;
  const ctx = off.getContext("2d");
  ctx.putImageData(img, 0, 0);
  ctx.setTransform(r, 0, 0, r, 0, 0);
  const st = REGION_STEP, m = Math.ceil(sq.s / st), mask = new Int8Array(m * m).fill(-1);
  for (let j = 0; j < m; j++) for (let i = 0; i < m; i++) {
    const b = at(i * st + st / 2, j * st + st / 2);
    if (b[0] < 0 || b[1] < 0 || b[2] < 0) continue;
    mask[j * m + i] = asGoodAt(ex, b) ? 1 : 0;
  }
  for (let j = 0; j < m; j++) for (let i = 0; i < m; i++) {
    if (mask[j * m + i] !== 1) continue;
    ctx.fillStyle = "rgba(255,255,255,0.3)"; ctx.fillRect(i * st, j * st, st, st);
    const worse = [[1, 0], [-1, 0], [0, 1], [0, -1]].some(([di, dj]) => {
      const ii = i + di, jj = j + dj;
      return ii >= 0 && jj >= 0 && ii < m && jj < m && mask[jj * m + ii] === 0;
    });
    if (worse) { ctx.fillStyle = "#fff"; ctx.fillRect(i * st + 1, j * st + 1, 2, 2); }
  }
  return { x: sq.x, y: sq.y, s: sq.s, cx: cx, cy: cy, zoom: zoom, img: off, ring: [cx, cy, half + 12] };
}

/** The inset over the simplex: a dashed ring around the region on the triangle, a line to
 *  the inset, the inset with its frame, â's star and (when inside it) the pick. */
function drawInset(ex, ctx, inset, xy) {
  const { x, y, s, cx, cy, zoom } = inset, [rx, ry, rr] = inset.ring;
  ctx.lineWidth = 2; ctx.strokeStyle = "#fff"; ctx.setLineDash([4, 3]);
  ctx.beginPath(); ctx.arc(rx, ry, rr, 0, 2 * Math.PI); ctx.stroke();
  const d = Math.hypot(x + s - rx, y + s - ry) || 1;
  ctx.beginPath(); ctx.moveTo(rx + (x + s - rx) * rr / d, ry + (y + s - ry) * rr / d); ctx.lineTo(x + s, y + s); ctx.stroke();
  ctx.setLineDash([]);
  ctx.drawImage(inset.img, x, y, s, s);
  ctx.strokeStyle = "#262730"; ctx.lineWidth = 2; ctx.strokeRect(x, y, s, s); ctx.lineWidth = 1;
  const map = (p) => [x + s / 2 + (p[0] - cx) * zoom, y + s / 2 + (p[1] - cy) * zoom];
  const inside = (p) => p[0] > x + 4 && p[0] < x + s - 4 && p[1] > y + 4 && p[1] < y + s - 4;
  const [sx, sy] = map(xy(Array.from(payloadArray(ex, "a_hat").data)));
  const pk = map(xy(ex.pick));
  if (inside(pk)) dot(ctx, pk[0], pk[1], 4, "#ff4b4b");
  if (inside([sx, sy])) star(ctx, sx, sy, 6, "#fff");
  const label = "×" + (zoom < 10 ? zoom.toFixed(1) : Math.round(zoom)) + " zoom";
  ctx.font = "11px sans-serif"; ctx.textAlign = "left";
  ctx.fillStyle = "rgba(255,255,255,0.85)"; ctx.fillRect(x + 2, y + s - 16, ctx.measureText(label).width + 6, 14);
  ctx.fillStyle = "#262730"; ctx.fillText(label, x + 5, y + s - 5);
  ctx.font = "12px sans-serif";
}

/** The caption of the region as good as â where it is small (empty otherwise). */
export function regionNoteText(ex) {
  const ui = ex.ui;
  if (!ui || !ui.inset) return "";
  // two lines under a 280 px triangle: on a projector the tiles start right below it (the
  // share "0.016% of the simplex" is longer than the "12 cells" it replaced: the dashed
  // ring, drawn on the triangle, goes unsaid)
  const share = ui.regionShare ? shareText(ui.regionShare.count, ui.regionShare.total) : "";
  return "The region as good as â is small: " + share + ", zoomed ×" +
    (ui.inset.zoom < 10 ? ui.inset.zoom.toFixed(1) : Math.round(ui.inset.zoom)) + " in the inset.";
}
function showRegionNote(ex) {
  const ui = ex.ui;
  if (!ui || !ui.regionNote) return;
  const text = regionNoteText(ex);
  if (ui.regionNote.textContent === text) return;
  ui.regionNote.textContent = text;
  ui.regionNote.style.display = text ? "" : "none";
  fitHeight(ex);  // the host's frame follows the caption
}

/** The replicates' â as small white dots, at ``xy(a)``. */
function drawCloud(ex, ctx, xy) {
  if (!bootHeader(ex)) return;
  const C = bootArray(ex, "boot_a_hat");
  const m = C.shape[1];
  ctx.fillStyle = "rgba(255,255,255,0.55)";
  for (let b = 0; b < C.shape[0]; b++) {
    const a = Array.from(C.data.subarray(b * m, (b + 1) * m));
    const [x, y] = xy(a);
    ctx.fillRect(x - 1.5, y - 1.5, 3, 3);
  }
}

/** The simplex canvas at the pick (into ``into``, a figure's context, when given). */
export function drawSimplex(ex, into) {
  const ui = ex.ui, c = ui.simplex, ctx = into || c.getContext("2d"), h = headerOf(ex), m = h.m, names = h.names;
  const ahat = Array.from(payloadArray(ex, "a_hat").data), pick = ex.pick, boot = bootHeader(ex);
  const [cw, ch] = cssSize(c);
  ctx.clearRect(0, 0, cw, ch);
  ctx.font = "12px sans-serif"; ctx.fillStyle = "#262730";
  if (m === 3) {
    const xy = (a) => toXY(ex, a);
    ctx.drawImage(ui.heat, 0, 0, cw, ch);
    const V = triangleOf(ex);
    ctx.beginPath(); ctx.moveTo(...V[0]); ctx.lineTo(...V[1]); ctx.lineTo(...V[2]); ctx.closePath();
    ctx.strokeStyle = "#444"; ctx.lineWidth = 1; ctx.stroke();
    ctx.textAlign = "center";
    ctx.fillText(roleLabel("P1", names[0]), V[0][0], V[0][1] - 8);
    ctx.textAlign = "left"; ctx.fillText(roleLabel("P2", names[1]), 2, V[1][1] + 18);
    ctx.textAlign = "right"; ctx.fillText(roleLabel("P3", names[2]), cw - 2, V[2][1] + 18);
    if (ui.region) ctx.drawImage(ui.region, 0, 0, cw, ch);
    if (boot) drawCloud(ex, ctx, xy);
    const [sx, sy] = xy(ahat);
    if (ex.hover) { const [hx, hy] = xy(ex.hover); ctx.beginPath(); ctx.arc(hx, hy, 4, 0, 7); ctx.strokeStyle = "#fff"; ctx.stroke(); }
    const [px, py] = xy(pick);
    if (Math.hypot(px - sx, py - sy) < 12) {  // the pick at â: a ring around the star, both seen
      ctx.beginPath(); ctx.arc(sx, sy, 13, 0, 2 * Math.PI); ctx.strokeStyle = "#ff4b4b"; ctx.lineWidth = 3; ctx.stroke(); ctx.lineWidth = 1;
      star(ctx, sx, sy, 9, "#fff");
    } else { star(ctx, sx, sy, 9, "#fff"); dot(ctx, px, py, 6, "#ff4b4b"); }
    if (ui.inset) drawInset(ex, ctx, ui.inset, xy);
  } else if (m === 2) {
    const g = lineGeom(ex), n = 200, vals = [];
    let lo = Infinity, hi = -Infinity;
    for (let k = 0; k <= n; k++) { const v = objectiveAt(ex, [1 - k / n, k / n]); vals.push(v); lo = Math.min(lo, v); hi = Math.max(hi, v); }
    let band = null;
    if (boot) {
      if (!ui.band) ui.band = vals.map((_, k) => { const a = [1 - k / n, k / n]; return [...valueIntervalAt(ex, a), asGoodAt(ex, a)]; });
      band = ui.band;
      band.forEach((q) => { lo = Math.min(lo, q[0]); hi = Math.max(hi, q[1]); });
    }
    const Y = (v) => g.y1 - (v - lo) / (hi - lo || 1) * (g.y1 - g.y0);
    const X = (t) => g.x0 + t * (g.x1 - g.x0);
    if (band) {
      ctx.fillStyle = "rgba(99,110,250,0.18)"; ctx.beginPath();
      band.forEach((q, k) => (k ? ctx.lineTo(X(k / n), Y(q[1])) : ctx.moveTo(X(0), Y(q[1]))));
      for (let k = n; k >= 0; k--) ctx.lineTo(X(k / n), Y(band[k][0]));
      ctx.closePath(); ctx.fill();
      if (!boot.flat) {
        ctx.fillStyle = "rgba(0,153,0,0.55)";
        band.forEach((q, k) => { if (q[2]) ctx.fillRect(X(k / n) - 1.2, g.y1 - 3, 2.4, 6); });
      }
      const C = bootArray(ex, "boot_a_hat");
      ctx.fillStyle = "rgba(38,39,48,0.5)";
      for (let b = 0; b < C.shape[0]; b++) ctx.fillRect(X(C.data[2 * b + 1]) - 0.5, g.y1 + 4, 1, 5);
    }
    ctx.strokeStyle = "#ccc"; ctx.beginPath(); ctx.moveTo(g.x0, g.y1); ctx.lineTo(g.x1, g.y1); ctx.stroke();
    // y axis: W²(P_a, Q) at three ticks
    ctx.strokeStyle = "#888"; ctx.beginPath(); ctx.moveTo(g.x0 - 6, g.y0); ctx.lineTo(g.x0 - 6, g.y1); ctx.stroke();
    ctx.fillStyle = "#262730"; ctx.font = "10px sans-serif"; ctx.textAlign = "right";
    for (let k = 0; k <= 2; k++) {
      const v = lo + (hi - lo) * k / 2, y = Y(v);
      ctx.fillRect(g.x0 - 9, y, 3, 1); ctx.fillText(tick(v), g.x0 - 11, y + 3);
    }
    ctx.save(); ctx.translate(10, (g.y0 + g.y1) / 2); ctx.rotate(-Math.PI / 2); ctx.textAlign = "center";
    ctx.fillText("W²(P_a, Q)", 0, 0); ctx.restore(); ctx.font = "12px sans-serif";
    ctx.strokeStyle = "#636efa"; ctx.lineWidth = 2; ctx.beginPath();
    vals.forEach((v, k) => (k ? ctx.lineTo(X(k / n), Y(v)) : ctx.moveTo(X(0), Y(v)))); ctx.stroke();
    ctx.textAlign = "left"; ctx.fillText(roleLabel("P1", names[0]), g.x0 - 30, g.y1 + 18);
    ctx.textAlign = "right"; ctx.fillText(roleLabel("P2", names[1]), g.x1, g.y1 + 18);
    ctx.textAlign = "center"; ctx.fillText("t = a2", (g.x0 + g.x1) / 2, g.y1 + 30);
    star(ctx, X(ahat[1]), Y(objectiveAt(ex, ahat)), 9, "#fff");
    dot(ctx, X(pick[1]), Y(objectiveAt(ex, pick)), 6, "#ff4b4b");
  } else {
    const g = barGeom(ex);
    for (let i = 0; i < m; i++) {
      const x = g.x(i) + 8, w = g.w - 16, v = pick[i];
      ctx.fillStyle = "#eee"; ctx.fillRect(x, g.y0, w, g.y1 - g.y0);
      ctx.fillStyle = SET_COLORS[i % SET_COLORS.length];  // its own colour, always
      ctx.fillRect(x, g.y1 - v * (g.y1 - g.y0), w, v * (g.y1 - g.y0));
      if (ex.activeBar === i) {  // the keyboard's bar: a thick outline, not another colour
        ctx.strokeStyle = "#262730"; ctx.lineWidth = 3; ctx.strokeRect(x - 2, g.y0 - 2, w + 4, g.y1 - g.y0 + 4); ctx.lineWidth = 1;
      }
      ctx.strokeStyle = "#000"; ctx.setLineDash([4, 3]); ctx.beginPath();
      const yh = g.y1 - ahat[i] * (g.y1 - g.y0); ctx.moveTo(x - 3, yh); ctx.lineTo(x + w + 3, yh); ctx.stroke(); ctx.setLineDash([]);
      if (boot) {  // whiskers: â_i's interval
        const ylo = g.y1 - bootArray(ex, "boot_a_low").data[i] * (g.y1 - g.y0), yhi = g.y1 - bootArray(ex, "boot_a_high").data[i] * (g.y1 - g.y0);
        const xc = x + w / 2;
        ctx.strokeStyle = "#262730"; ctx.lineWidth = 1.5; ctx.beginPath();
        ctx.moveTo(xc, ylo); ctx.lineTo(xc, yhi); ctx.moveTo(xc - 6, ylo); ctx.lineTo(xc + 6, ylo);
        ctx.moveTo(xc - 6, yhi); ctx.lineTo(xc + 6, yhi); ctx.stroke(); ctx.lineWidth = 1;
      }
      ctx.fillStyle = "#262730"; ctx.textAlign = "center";
      ctx.fillText(fmt(v, 3), x + w / 2, g.y0 - 6);
      ctx.fillText("P" + (i + 1), x + w / 2, g.y1 + 16);
      if (String(names[i]) !== "P" + (i + 1)) fitText(ctx, String(names[i]), x + w / 2, g.y1 + 30, g.w - 4, 11);  // named by its role: once
    }
  }
}
