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
 * Raster layers the page keeps off-screen (heatmap, region, faded background, tiles) are
 * embedded as PNG images; marks, lines and text are vectors. */
export class SvgContext {
  constructor(width, height) {
    this.width = width; this.height = height; this.out = []; this.stack = []; this.path = [];
    this.fillStyle = "#000"; this.strokeStyle = "#000"; this.lineWidth = 1; this.globalAlpha = 1;
    this.font = "10px sans-serif"; this.textAlign = "start"; this.dash = []; this.imageSmoothingEnabled = true;
    this.tf = [1, 0, 0, 1, 0, 0];
    this.probe = document.createElement("canvas").getContext("2d");
  }
  static esc(t) { return String(t).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;"); }
  num(x) { return Math.round(Number(x) * 100) / 100; }
  attrs() {
    const t = this.tf.map((v) => this.num(v)).join(" ");
    return ` transform="matrix(${t})"` + (this.globalAlpha < 1 ? ` opacity="${this.num(this.globalAlpha)}"` : "");
  }
  save() { this.stack.push({ fillStyle: this.fillStyle, strokeStyle: this.strokeStyle, lineWidth: this.lineWidth,
    globalAlpha: this.globalAlpha, font: this.font, textAlign: this.textAlign, dash: this.dash.slice(), tf: this.tf.slice() }); }
  restore() { const st = this.stack.pop(); if (st) Object.assign(this, st); }
  translate(x, y) { const [a, b, c, d, e, f] = this.tf; this.tf = [a, b, c, d, a * x + c * y + e, b * x + d * y + f]; }
  rotate(r) {
    const [a, b, c, d, e, f] = this.tf, cs = Math.cos(r), sn = Math.sin(r);
    this.tf = [a * cs + c * sn, b * cs + d * sn, c * cs - a * sn, d * cs - b * sn, e, f];
  }
  setLineDash(d) { this.dash = Array.from(d); }
  measureText(t) { this.probe.font = this.font; return this.probe.measureText(t); }
  createImageData(w, h) { return this.probe.createImageData(w, h); }
  clearRect() {}
  stroked() {
    return ` fill="none" stroke="${SvgContext.esc(this.strokeStyle)}" stroke-width="${this.num(this.lineWidth)}"` +
      (this.dash.length ? ` stroke-dasharray="${this.dash.join(" ")}"` : "");
  }
  fillRect(x, y, w, h) { this.out.push(`<rect x="${this.num(x)}" y="${this.num(y)}" width="${this.num(w)}" height="${this.num(h)}" fill="${SvgContext.esc(this.fillStyle)}"${this.attrs()}/>`); }
  strokeRect(x, y, w, h) { this.out.push(`<rect x="${this.num(x)}" y="${this.num(y)}" width="${this.num(w)}" height="${this.num(h)}"${this.stroked()}${this.attrs()}/>`); }
  beginPath() { this.path = []; this.cur = null; }
  moveTo(x, y) { this.path.push(`M${this.num(x)} ${this.num(y)}`); this.cur = [x, y]; }
  lineTo(x, y) { this.path.push((this.path.length ? "L" : "M") + `${this.num(x)} ${this.num(y)}`); this.cur = [x, y]; }
  closePath() { this.path.push("Z"); }
  arc(x, y, r, a0, a1) {
    if (Math.abs(a1 - a0) >= 2 * Math.PI - 1e-6) {
      this.path.push(`M${this.num(x + r)} ${this.num(y)}A${this.num(r)} ${this.num(r)} 0 1 1 ${this.num(x - r)} ${this.num(y)}` +
        `A${this.num(r)} ${this.num(r)} 0 1 1 ${this.num(x + r)} ${this.num(y)}`);
      return;
    }
    const sx = x + r * Math.cos(a0), sy = y + r * Math.sin(a0), ex = x + r * Math.cos(a1), ey = y + r * Math.sin(a1);
    this.path.push((this.path.length ? "L" : "M") + `${this.num(sx)} ${this.num(sy)}` +
      `A${this.num(r)} ${this.num(r)} 0 ${a1 - a0 > Math.PI ? 1 : 0} 1 ${this.num(ex)} ${this.num(ey)}`);
  }
  fill() { if (this.path.length) this.out.push(`<path d="${this.path.join("")}" fill="${SvgContext.esc(this.fillStyle)}"${this.attrs()}/>`); }
  stroke() { if (this.path.length) this.out.push(`<path d="${this.path.join("")}"${this.stroked()}${this.attrs()}/>`); }
  fillText(text, x, y) {
    const m = /(bold\s+)?(\d+(?:\.\d+)?)px\s+(.*)/.exec(this.font) || [];
    const anchor = { center: "middle", right: "end", end: "end" }[this.textAlign] || "start";
    this.out.push(`<text x="${this.num(x)}" y="${this.num(y)}" font-size="${m[2] || 10}" font-family="${SvgContext.esc(m[3] || "sans-serif")}"` +
      (m[1] ? ` font-weight="bold"` : "") + ` text-anchor="${anchor}" fill="${SvgContext.esc(this.fillStyle)}"${this.attrs()}>${SvgContext.esc(text)}</text>`);
  }
  drawImage(img, x, y, w, h) {
    const url = img.toDataURL ? img.toDataURL("image/png") : "";
    w = w === undefined ? img.width : w; h = h === undefined ? img.height : h;
    this.out.push(`<image href="${url}" x="${this.num(x)}" y="${this.num(y)}" width="${this.num(w)}" height="${this.num(h)}" preserveAspectRatio="none"` +
      (this.imageSmoothingEnabled ? "" : ` style="image-rendering: pixelated"`) + `${this.attrs()}/>`);
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
    try { part.draw(octx); } catch (err) { octx.setTransform(1, 0, 0, 1, 0, 0); octx.drawImage(part.canvas, 0, 0, off.width, off.height); }
    ctx.drawImage(off, part.x, part.y, w, h);
  }
}
/** The explorer's current view as "svg" (text) or "png" (a data URL). */
export function figureOf(ex, kind) {
  const f = figureParts(ex);
  if (kind === "svg") { const ctx = new SvgContext(f.width, f.height); paintFigure(ctx, f, true); return ctx.toString(); }
  const scale = Math.max(FIGURE_SCALE, Math.ceil(pixelRatio(ex.doc)));
  const c = ex.doc.createElement("canvas"); c.width = f.width * scale; c.height = f.height * scale;
  const ctx = c.getContext("2d");
  ctx.setTransform(scale, 0, 0, scale, 0, 0);
  paintFigure(ctx, f, false, scale, ex.doc);
  return c.toDataURL("image/png");
}
/** Save the current view as geoviz-geodesic.png/.svg (geoviz-mccann.* in McCann mode). */
export function downloadFigure(ex, kind) {
  const data = figureOf(ex, kind);
  const a = ex.doc.createElement("a");
  a.download = "geoviz-" + (headerOf(ex).mode === "mccann" ? "mccann" : "geodesic") + "." + kind;
  a.href = kind === "svg" ? URL.createObjectURL(new Blob([data], { type: "image/svg+xml" })) : data;
  ex.doc.body.appendChild(a); a.click(); a.remove();
}
