/* geoviz explorer: the current view as a figure (PNG, or SVG drawn by the page's own drawing
 * code through a recording context). */
import { drawColorbar, drawSimplex } from "./simplex_draw.js";
import { drawMass, drawSamples } from "./tiles_and_mass.js";
import { drawView } from "./embedding_view.js";
import { headerOf } from "./explorer_state.js";
import { cssSize, pixelRatio } from "./drawing_kit.js";

/** A PNG figure has at least this many pixels per CSS px (more on a high-DPI screen). */
export const FIGURE_SCALE = 2;

/** A recording 2-D context that writes SVG: the subset of CanvasRenderingContext2D the
 * explorer draws with, so a figure comes from the page's own drawing code (issue 26).
 * Raster layers the page keeps off-screen (heatmap, region, tiles) are embedded as PNG
 * images; marks, lines and text (the faded background too) are vectors. Every method and
 * property the drawing modules use on a context is here (tests/js/svg_context.test.mjs
 * reads them from the modules' source, so a new one fails there, not silently in a mode). */
export class SvgContext {
  /** ``doc``: the document whose canvases measure text and turn pixels into PNG images
   *  (the page's by default). */
  constructor(width, height, doc) {
    this.width = width; this.height = height; this.out = []; this.stack = []; this.path = [];
    this.fillStyle = "#000"; this.strokeStyle = "#000"; this.lineWidth = 1; this.globalAlpha = 1;
    this.font = "10px sans-serif"; this.textAlign = "start"; this.textBaseline = "alphabetic";
    this.lineJoin = "miter"; this.lineCap = "butt"; this.dash = []; this.imageSmoothingEnabled = true;
    this.tf = [1, 0, 0, 1, 0, 0];
    this.doc = doc || document;
    this.probe = this.doc.createElement("canvas").getContext("2d");
  }
  static esc(t) { return String(t).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;"); }
  num(x) { return Math.round(Number(x) * 100) / 100; }
  attrs() {
    const t = this.tf.map((v) => this.num(v)).join(" ");
    return ` transform="matrix(${t})"` + (this.globalAlpha < 1 ? ` opacity="${this.num(this.globalAlpha)}"` : "");
  }
  save() { this.stack.push({ fillStyle: this.fillStyle, strokeStyle: this.strokeStyle, lineWidth: this.lineWidth,
    globalAlpha: this.globalAlpha, font: this.font, textAlign: this.textAlign, textBaseline: this.textBaseline,
    lineJoin: this.lineJoin, lineCap: this.lineCap, dash: this.dash.slice(), tf: this.tf.slice(),
    imageSmoothingEnabled: this.imageSmoothingEnabled }); }
  restore() { const st = this.stack.pop(); if (st) Object.assign(this, st); }
  setTransform(a, b, c, d, e, f) {
    this.tf = typeof a === "object" && a !== null ? [a.a, a.b, a.c, a.d, a.e, a.f] : [a, b, c, d, e, f].map(Number);
  }
  resetTransform() { this.tf = [1, 0, 0, 1, 0, 0]; }
  getTransform() { const [a, b, c, d, e, f] = this.tf; return { a, b, c, d, e, f }; }
  transform(a2, b2, c2, d2, e2, f2) {
    const [a, b, c, d, e, f] = this.tf;
    this.tf = [a * a2 + c * b2, b * a2 + d * b2, a * c2 + c * d2, b * c2 + d * d2, a * e2 + c * f2 + e, b * e2 + d * f2 + f];
  }
  translate(x, y) { this.transform(1, 0, 0, 1, x, y); }
  scale(x, y) { this.transform(x, 0, 0, y, 0, 0); }
  rotate(r) { const cs = Math.cos(r), sn = Math.sin(r); this.transform(cs, sn, -sn, cs, 0, 0); }
  setLineDash(d) { this.dash = Array.from(d); }
  getLineDash() { return this.dash.slice(); }
  measureText(t) { this.probe.font = this.font; return this.probe.measureText(t); }
  createImageData(w, h) { return this.probe.createImageData(w, h); }
  /** Nothing to clear: the figure's background is painted first. */
  clearRect() {}
  stroked() {
    return ` fill="none" stroke="${SvgContext.esc(this.strokeStyle)}" stroke-width="${this.num(this.lineWidth)}"` +
      (this.lineJoin !== "miter" ? ` stroke-linejoin="${SvgContext.esc(this.lineJoin)}"` : "") +
      (this.lineCap !== "butt" ? ` stroke-linecap="${SvgContext.esc(this.lineCap)}"` : "") +
      (this.dash.length ? ` stroke-dasharray="${this.dash.join(" ")}"` : "");
  }
  fillRect(x, y, w, h) { this.out.push(`<rect x="${this.num(x)}" y="${this.num(y)}" width="${this.num(w)}" height="${this.num(h)}" fill="${SvgContext.esc(this.fillStyle)}"${this.attrs()}/>`); }
  strokeRect(x, y, w, h) { this.out.push(`<rect x="${this.num(x)}" y="${this.num(y)}" width="${this.num(w)}" height="${this.num(h)}"${this.stroked()}${this.attrs()}/>`); }
  beginPath() { this.path = []; this.cur = null; }
  moveTo(x, y) { this.path.push(`M${this.num(x)} ${this.num(y)}`); this.cur = [x, y]; }
  lineTo(x, y) { this.path.push((this.path.length ? "L" : "M") + `${this.num(x)} ${this.num(y)}`); this.cur = [x, y]; }
  closePath() { this.path.push("Z"); }
  /** A closed rectangle as a sub-path (as the canvas's rect: the next point starts a new one). */
  rect(x, y, w, h) {
    this.path.push(`M${this.num(x)} ${this.num(y)}h${this.num(w)}v${this.num(h)}h${this.num(-w)}Z`);
    this.cur = [x, y];
  }
  quadraticCurveTo(cx, cy, x, y) {
    this.path.push((this.path.length ? "" : `M${this.num(cx)} ${this.num(cy)}`) + `Q${this.num(cx)} ${this.num(cy)} ${this.num(x)} ${this.num(y)}`);
    this.cur = [x, y];
  }
  bezierCurveTo(c1x, c1y, c2x, c2y, x, y) {
    this.path.push((this.path.length ? "" : `M${this.num(c1x)} ${this.num(c1y)}`) +
      `C${this.num(c1x)} ${this.num(c1y)} ${this.num(c2x)} ${this.num(c2y)} ${this.num(x)} ${this.num(y)}`);
    this.cur = [x, y];
  }
  arc(x, y, r, a0, a1) {
    if (Math.abs(a1 - a0) >= 2 * Math.PI - 1e-6) {
      this.path.push(`M${this.num(x + r)} ${this.num(y)}A${this.num(r)} ${this.num(r)} 0 1 1 ${this.num(x - r)} ${this.num(y)}` +
        `A${this.num(r)} ${this.num(r)} 0 1 1 ${this.num(x + r)} ${this.num(y)}`);
      this.cur = [x + r, y];
      return;
    }
    const sx = x + r * Math.cos(a0), sy = y + r * Math.sin(a0), ex = x + r * Math.cos(a1), ey = y + r * Math.sin(a1);
    this.path.push((this.path.length ? "L" : "M") + `${this.num(sx)} ${this.num(sy)}` +
      `A${this.num(r)} ${this.num(r)} 0 ${a1 - a0 > Math.PI ? 1 : 0} 1 ${this.num(ex)} ${this.num(ey)}`);
    this.cur = [ex, ey];
  }
  fill() { if (this.path.length) this.out.push(`<path d="${this.path.join("")}" fill="${SvgContext.esc(this.fillStyle)}"${this.attrs()}/>`); }
  stroke() { if (this.path.length) this.out.push(`<path d="${this.path.join("")}"${this.stroked()}${this.attrs()}/>`); }
  /** ``<text ...`` with the font, anchor and baseline (the paint attributes follow). */
  textTag(x, y) {
    const m = /(bold\s+)?(\d+(?:\.\d+)?)px\s+(.*)/.exec(this.font) || [];
    const anchor = { center: "middle", right: "end", end: "end" }[this.textAlign] || "start";
    const base = { top: "hanging", hanging: "hanging", middle: "middle", bottom: "text-after-edge", ideographic: "text-after-edge" }[this.textBaseline];
    return `<text x="${this.num(x)}" y="${this.num(y)}" font-size="${m[2] || 10}" font-family="${SvgContext.esc(m[3] || "sans-serif")}"` +
      (m[1] ? ` font-weight="bold"` : "") + ` text-anchor="${anchor}"` + (base ? ` dominant-baseline="${base}"` : "");
  }
  fillText(text, x, y) {
    this.out.push(this.textTag(x, y) + ` fill="${SvgContext.esc(this.fillStyle)}"${this.attrs()}>${SvgContext.esc(text)}</text>`);
  }
  /** The text's outline (a halo under a fillText of the same text). */
  strokeText(text, x, y) {
    this.out.push(this.textTag(x, y) + `${this.stroked()}${this.attrs()}>${SvgContext.esc(text)}</text>`);
  }
  drawImage(img, x, y, w, h) {
    const url = img.toDataURL ? img.toDataURL("image/png") : "";
    w = w === undefined ? img.width : w; h = h === undefined ? img.height : h;
    this.out.push(`<image href="${url}" x="${this.num(x)}" y="${this.num(y)}" width="${this.num(w)}" height="${this.num(h)}" preserveAspectRatio="none"` +
      (this.imageSmoothingEnabled ? "" : ` style="image-rendering: pixelated"`) + `${this.attrs()}/>`);
  }
  /** Pixels as an image at (x, y), one CSS px each (as the canvas's putImageData: no scale,
   *  no rotation, no alpha; the translation kept, so a figure's part stays in its place). */
  putImageData(img, x, y) {
    const c = this.doc.createElement("canvas");
    c.width = img.width; c.height = img.height;
    c.getContext("2d").putImageData(img, 0, 0);
    const [tf, alpha] = [this.tf, this.globalAlpha];
    this.tf = [1, 0, 0, 1, tf[4], tf[5]]; this.globalAlpha = 1;  // a figure's part keeps its place
    this.drawImage(c, x, y);
    this.tf = tf; this.globalAlpha = alpha;
  }
  toString() {
    return `<svg xmlns="http://www.w3.org/2000/svg" width="${this.width}" height="${this.height}" viewBox="0 0 ${this.width} ${this.height}">` +
      this.out.join("") + "</svg>";
  }
}

/** Where each part of the current view goes in a figure, and the text lines beside it. */
function figureParts(ex) {
  const ui = ex.ui, h = headerOf(ex), parts = [], pad = 16;
  const y = 34;
  let x = pad;
  const lines = [];
  const W = (c) => cssSize(c)[0], H = (c) => cssSize(c)[1];
  if (ui.simplex) {
    parts.push({ canvas: ui.simplex, draw: (ctx) => drawSimplex(ex, ctx), x, y });
    x += W(ui.simplex);
    if (ui.colorbar && ui.colorArgs) { parts.push({ canvas: ui.colorbar, draw: (ctx) => drawColorbar(ex, ...ui.colorArgs, ctx), x, y }); x += W(ui.colorbar); }
    lines.push(ui.weights.textContent, ui.value.textContent, ui.gap.textContent);
    if (ui.interval && ui.interval.textContent) lines.push(ui.interval.textContent, ui.verdict.textContent);
  } else {
    lines.push(ui.value.textContent);
    if (ui.w2) lines.push(ui.w2.textContent);  // McCann: W²(P^M_t, Q) = t² · W_i
  }
  const textX = x + 24, massY = y + 18 * lines.length + 16;
  parts.push({ canvas: ui.mass, draw: (ctx) => drawMass(ex, ctx), x: textX, y: massY });
  let bottom = Math.max(ui.simplex ? y + H(ui.simplex) : 0, massY + H(ui.mass)) + 20;
  const probe = ex.doc.createElement("canvas").getContext("2d"); probe.font = "13px sans-serif";
  const textW = Math.max(0, ...lines.map((line) => probe.measureText(line).width));
  let right = Math.max(x, textX + W(ui.mass), textX + textW);
  if (ui.samples) { parts.push({ canvas: ui.samples, draw: (ctx) => drawSamples(ex, ctx), x: pad, y: bottom }); bottom += H(ui.samples) + 20; right = Math.max(right, pad + W(ui.samples)); }
  if (ui.view) { parts.push({ canvas: ui.view, draw: (ctx) => drawView(ex, ctx), x: pad, y: bottom }); bottom += H(ui.view) + 20; right = Math.max(right, pad + W(ui.view)); }
  const title = "geoviz · " + (h.mode === "mccann" ? "McCann: Q → " + h.ref_name : "P_a on the generalized geodesic of " + h.names.join(", ")) + " (target " + (h.target_name || "Q") + ")";
  return { parts, lines, textX, textY: y + 14, title, width: Math.ceil(right + pad), height: Math.ceil(bottom) };
}
/** Where each canvas of the current view lies in its figure, in CSS px (a PNG has
 *  FIGURE_SCALE or more pixels per CSS px): {width, height, parts: {id: {x, y, width, height}}}. */
export function figureLayout(ex) {
  const f = figureParts(ex), parts = {};
  for (const p of f.parts) { const [w, h] = cssSize(p.canvas); parts[p.canvas.id] = { x: p.x, y: p.y, width: w, height: h }; }
  return { width: f.width, height: f.height, parts };
}
/** The figure's background, title, text lines and parts: vectors into an SvgContext; into a
 *  PNG (``scale`` pixels per CSS px) each part drawn again by the page's own code at that
 *  scale (sharp text and lines whatever the screen's pixel ratio), then copied in. */
function paintFigure(ctx, f, vector, scale, doc) {
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, f.width, f.height);
  ctx.fillStyle = "#262730"; ctx.font = "bold 14px sans-serif"; ctx.textAlign = "left";
  ctx.fillText(f.title, 16, 20);
  ctx.font = "13px sans-serif";
  f.lines.forEach((line, k) => ctx.fillText(line, f.textX, f.textY + 18 * k));
  for (const part of f.parts) {
    if (vector) { ctx.save(); ctx.translate(part.x, part.y); part.draw(ctx); ctx.restore(); continue; }
    const [w, h] = cssSize(part.canvas), off = doc.createElement("canvas");
    off.width = Math.round(w * scale); off.height = Math.round(h * scale);
    const octx = off.getContext("2d");
    octx.setTransform(scale, 0, 0, scale, 0, 0);
    part.draw(octx);  // at the figure's scale, never the screen's canvas upscaled
    ctx.drawImage(off, part.x, part.y, w, h);
  }
}
/** The explorer's current view as "svg" (text) or "png" (a data URL). */
export function figureOf(ex, kind) {
  const f = figureParts(ex);
  if (kind === "svg") { const ctx = new SvgContext(f.width, f.height, ex.doc); paintFigure(ctx, f, true); return ctx.toString(); }
  const scale = Math.max(FIGURE_SCALE, Math.ceil(pixelRatio(ex.doc)));
  const c = ex.doc.createElement("canvas"); c.width = f.width * scale; c.height = f.height * scale;
  const ctx = c.getContext("2d");
  ctx.setTransform(scale, 0, 0, scale, 0, 0);
  paintFigure(ctx, f, false, scale, ex.doc);
  return c.toDataURL("image/png");
}
/** Save the current view as geoviz-geodesic.png/.svg (geoviz-mccann.* in McCann mode); a
 *  figure that cannot be drawn says why beside the buttons (never silently nothing). */
export function downloadFigure(ex, kind) {
  const note = ex.ui && ex.ui.figureNote;
  let data;
  try { data = figureOf(ex, kind); } catch (err) {
    if (note) note.textContent = "The " + kind.toUpperCase() + " figure could not be drawn: " + String(err && err.message || err) + ".";
    throw err;
  }
  if (note) note.textContent = "";
  const a = ex.doc.createElement("a");
  a.download = "geoviz-" + (headerOf(ex).mode === "mccann" ? "mccann" : "geodesic") + "." + kind;
  a.href = kind === "svg" ? URL.createObjectURL(new Blob([data], { type: "image/svg+xml" })) : data;
  ex.doc.body.appendChild(a); a.click(); a.remove();
}
