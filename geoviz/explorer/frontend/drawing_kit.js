/* geoviz explorer: the shared drawing kit (colours, elements, text that fits, number formats,
 * markers, pixels into an ImageData). No explorer state here. */

/** D3 category10: P_a's points by Q's class (geoviz.viz.compare.EXPLORER_PALETTE) */
export const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                        "#7f7f7f", "#bcbd22", "#17becf"];
/** width of the embedding/scatter view's legend column, px */
export const LEGEND_W = 190;
/** one colour per dataset (reference i, or Q) */
export const SET_COLORS = ["#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3"];

/** A new element: ``attrs`` are attributes, except ``text`` (textContent) and ``html``. */
export function el(tag, attrs, parent) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") e.textContent = v; else if (k === "html") e.innerHTML = v; else e.setAttribute(k, v);
  }
  if (parent) parent.appendChild(e);
  return e;
}
/** A reference's label by its role: "P1 · fashion_mnist"; just "P1" where the dataset is
 *  named by its role (the vector presets' P1, P2, P3), not "P1 · P1" (issue 45; the rule of
 *  the Datasets page's role_title). */
export function roleLabel(role, name) {
  return String(name) === role ? role : role + " · " + name;
}
/** ``x`` with ``d`` decimals (2 by default). */
export function fmt(x, d) { return Number(x).toFixed(d === undefined ? 2 : d); }
/** An axis tick: 4 significant digits, exponent form for the very small and large. */
export function tick(x) { const a = Math.abs(x); return a !== 0 && (a < 1e-3 || a >= 1e5) ? Number(x).toExponential(2) : Number(x).toPrecision(4); }
/** The decimals every W² of one view is printed with: seven significant digits at ``least``
 *  (its smallest W²: W²(P_â, Q), or W_i in McCann mode), the same for every W² of the view,
 *  so the readout never changes its number of decimals as the pick moves (issue 45). */
export function w2Decimals(least) {
  const v = Math.abs(Number(least));
  return v > 0 && Number.isFinite(v) ? Math.min(9, Math.max(0, 6 - Math.floor(Math.log10(v)))) : 6;
}
/** A label mass with 2 decimals and no leading zero (".42"). */
/** The tiles' captions (CSS px): readable from the back of a room at a projector's 1280 px (issue 45) */
export const CAPTION_PX = 14;
export function mass2(x) { return x.toFixed(2).replace(/^0\./, "."); }
/** Text that fits ``width`` px: the font shrinks to ``least`` px (9 unless given), then the
 *  text is cut with an ellipsis. */
export function fitText(ctx, text, x, y, width, px, least) {
  let size = px || 12;
  const floor = Math.min(size, least || 9);
  ctx.font = size + "px sans-serif";
  while (ctx.measureText(text).width > width && size > floor) { size -= 1; ctx.font = size + "px sans-serif"; }
  let t = String(text);
  while (ctx.measureText(t).width > width && t.length > 2) t = t.slice(0, -2) + "…";
  ctx.fillText(t, x, y);
  ctx.font = "12px sans-serif";
}
/** A five-pointed star (â) centred at (x, y). */
export function star(ctx, x, y, r, fill) {
  ctx.beginPath();
  for (let k = 0; k < 10; k++) {
    const rr = k % 2 ? r * 0.45 : r, ang = -Math.PI / 2 + k * Math.PI / 5;
    ctx.lineTo(x + rr * Math.cos(ang), y + rr * Math.sin(ang));
  }
  ctx.closePath(); ctx.fillStyle = fill; ctx.fill(); ctx.strokeStyle = "#000"; ctx.lineWidth = 1; ctx.stroke();
}
/** A filled dot with a black ring (the pick). */
export function dot(ctx, x, y, r, fill) {
  ctx.beginPath(); ctx.arc(x, y, r, 0, 2 * Math.PI); ctx.fillStyle = fill; ctx.fill();
  ctx.strokeStyle = "#000"; ctx.lineWidth = 2; ctx.stroke();
}
/** Channel-first uint8 pixels ``px[off ..]`` (ch × hh × ww) into the RGBA ImageData ``img``
 *  (1 channel: grey; 3: RGB; otherwise the channels' mean). */
export function fillImage(img, px, off, ch, hh, ww) {
  const n = hh * ww, d = img.data;
  for (let k = 0; k < n; k++) {
    if (ch === 3) { d[4 * k] = px[off + k]; d[4 * k + 1] = px[off + n + k]; d[4 * k + 2] = px[off + 2 * n + k]; }
    else if (ch === 1) { d[4 * k] = d[4 * k + 1] = d[4 * k + 2] = px[off + k]; }
    else { let s = 0; for (let c = 0; c < ch; c++) s += px[off + c * n + k]; d[4 * k] = d[4 * k + 1] = d[4 * k + 2] = s / ch; }
    d[4 * k + 3] = 255;
  }
}

/** Device pixels per CSS pixel in ``doc``'s window (1 to 3): canvases keep this many backing
 *  pixels per CSS pixel, so they stay sharp on high-DPI screens and projectors. */
export function pixelRatio(doc) {
  const win = (doc && doc.defaultView) || (typeof window !== "undefined" ? window : null);
  const r = win && win.devicePixelRatio ? win.devicePixelRatio : 1;
  return Math.min(3, Math.max(1, r));
}
/** Canvas ``c`` shown at ``w`` x ``h`` CSS px with ``dpr`` backing pixels per CSS px; its 2-D
 *  context is scaled, so the drawing code (and the pointer's maths) works in CSS px
 *  (``cssSize(c)``). Setting a canvas's width resets its context: call this, not c.width = .. */
export function sizeCanvas(c, w, h, dpr) {
  const r = dpr || 1;
  w = Math.max(1, Math.round(w)); h = Math.max(1, Math.round(h));
  c.cssW = w; c.cssH = h; c.dpr = r;
  c.width = Math.round(w * r); c.height = Math.round(h * r);
  c.style.width = w + "px"; c.style.height = h + "px";
  c.getContext("2d").setTransform(r, 0, 0, r, 0, 0);
}
/** A canvas's size in CSS px: [width, height] (its backing store's for a canvas not sized
 *  with sizeCanvas). */
export function cssSize(c) { return [c.cssW || c.width, c.cssH || c.height]; }
