// The SVG figure's recording context (SvgContext, geoviz/explorer/frontend/figure_export.js)
// in node: every method and property the explorer's drawing modules use on a 2-D context is
// recorded (a missing one made the SVG button do nothing in presenter and step-by-step mode,
// issue 45), and what it records is the SVG the canvas would draw. The figure in each mode
// of a real page is tests/test_figure_export_browser.py's.
//
// Run by tests/test_explorer_js.py (node --test tests/js/); needs no fixtures.

import { test } from "node:test";
import assert from "node:assert/strict";
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const FRONTEND = join(HERE, "..", "..", "geoviz", "explorer", "frontend");
/** the modules that draw into a figure's context (the hosts and the pure maths draw nothing) */
const DRAWING = readdirSync(FRONTEND).filter(
  (f) => f.endsWith(".js") && !["figure_export.js", "streamlit.js", "jupyter.js", "maths.js"].includes(f)
);

/** figure_export.js and the modules it imports, as ES modules on any node (a copy beside a
 *  package.json of type module: node before 20.19 reads a bare .js file as CommonJS). */
async function loadFigureExport() {
  const dir = mkdtempSync(join(tmpdir(), "geoviz-figure-"));
  try {
    cpSync(FRONTEND, dir, { recursive: true });
    writeFileSync(join(dir, "package.json"), '{"type": "module"}');
    return await import(pathToFileURL(join(dir, "figure_export.js")).href);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
const { SvgContext } = await loadFigureExport();

/** A document whose canvases measure text (6 px a character) and keep what was put in them. */
function fakeDocument() {
  const canvas = () => {
    const c = { width: 0, height: 0, put: null };
    c.getContext = () => ({
      font: "10px sans-serif",
      measureText: (t) => ({ width: 6 * String(t).length }),
      createImageData: (w, h) => ({ width: w, height: h, data: new Uint8ClampedArray(4 * w * h) }),
      putImageData: (img) => { c.put = img; },
    });
    c.toDataURL = () => "data:image/png;base64,AAAA" + c.width + "x" + c.height;
    return c;
  };
  return { createElement: (tag) => { assert.equal(tag, "canvas"); return canvas(); } };
}

/** What the drawing modules use on a context: methods called and properties assigned on a
 *  variable named ctx (the name every drawing function gives its context, a figure's too). */
function contextUses() {
  const methods = new Set(), props = new Set();
  for (const file of DRAWING) {
    const src = readFileSync(join(FRONTEND, file), "utf8");
    for (const m of src.matchAll(/\bctx\.([A-Za-z]+)\s*\(/g)) methods.add(m[1]);
    for (const m of src.matchAll(/\bctx\.([A-Za-z]+)\s*=[^=]/g)) props.add(m[1]);
  }
  return { methods, props };
}

test("SvgContext has every method and property the drawing modules use", () => {
  const { methods, props } = contextUses();
  // the scan finds what it must (so an empty scan cannot pass)
  for (const name of ["strokeText", "rect", "arc", "fillText", "setLineDash"]) assert.ok(methods.has(name), name);
  for (const name of ["lineJoin", "globalAlpha", "font", "textAlign"]) assert.ok(props.has(name), name);
  const ctx = new SvgContext(10, 10, fakeDocument());
  const missing = [...methods].filter((name) => typeof ctx[name] !== "function");
  assert.deepEqual(missing, [], "methods the SVG figure cannot record: " + missing.join(", "));
  const unknown = [...props].filter((name) => !(name in ctx) || typeof ctx[name] === "function");
  assert.deepEqual(unknown, [], "properties the SVG figure does not keep: " + unknown.join(", "));
});

test("SvgContext records rectangles, halo text, transforms and pixels as the canvas draws them", () => {
  const ctx = new SvgContext(200, 100, fakeDocument());
  ctx.save();
  ctx.translate(10, 20);
  ctx.strokeStyle = "#f00"; ctx.lineWidth = 1.2;
  ctx.beginPath(); ctx.rect(1, 2, 5, 5); ctx.rect(11, 2, 5, 5); ctx.stroke();
  ctx.font = "bold 17px sans-serif"; ctx.lineWidth = 3; ctx.strokeStyle = "#fff"; ctx.lineJoin = "round";
  ctx.strokeText("P_a(x) <&>", 30, 40); ctx.fillStyle = "#262730"; ctx.fillText("P_a(x) <&>", 30, 40);
  ctx.restore();
  ctx.setTransform(2, 0, 0, 2, 5, 6); ctx.scale(1.5, 1); ctx.fillRect(0, 0, 1, 1);
  assert.deepEqual(ctx.getTransform(), { a: 3, b: 0, c: 0, d: 2, e: 5, f: 6 });
  ctx.resetTransform(); ctx.translate(7, 8);
  const img = ctx.createImageData(3, 2);
  ctx.putImageData(img, 1, 1);
  const svg = ctx.toString();
  assert.match(svg, /^<svg xmlns="http:\/\/www.w3.org\/2000\/svg" width="200" height="100"/);
  assert.ok(svg.endsWith("</svg>"));
  // two closed squares in one path, stroked, at the translation
  assert.match(svg, /<path d="M1 2h5v5h-5ZM11 2h5v5h-5Z" fill="none" stroke="#f00" stroke-width="1.2" transform="matrix\(1 0 0 1 10 20\)"\/>/);
  // the halo: the text's outline (round joins) under the same text filled, both escaped
  const halo = svg.indexOf('stroke="#fff" stroke-width="3" stroke-linejoin="round"');
  const fill = svg.indexOf('fill="#262730"');
  assert.ok(halo > 0 && fill > halo, svg);
  assert.equal(svg.split("P_a(x) &lt;&amp;&gt;</text>").length - 1, 2, svg);
  assert.match(svg, /<text x="30" y="40" font-size="17" font-family="sans-serif" font-weight="bold" text-anchor="start" fill="none"/);
  // setTransform replaces, scale composes; restore gave back the fill
  assert.match(svg, /<rect x="0" y="0" width="1" height="1" fill="#000" transform="matrix\(3 0 0 2 5 6\)"\/>/);
  // pixels: an image of the data's size, where the translation puts it
  assert.match(svg, /<image href="data:image\/png;base64,AAAA3x2" x="1" y="1" width="3" height="2" preserveAspectRatio="none" transform="matrix\(1 0 0 1 7 8\)"\/>/);
  // every element closed: as many opening as closing text tags, no stray '<' in text
  assert.equal((svg.match(/<text /g) || []).length, (svg.match(/<\/text>/g) || []).length);
});

test("save and restore keep the text and line styles", () => {
  const ctx = new SvgContext(10, 10, fakeDocument());
  ctx.save();
  Object.assign(ctx, { lineJoin: "round", lineCap: "square", textBaseline: "middle", textAlign: "center", globalAlpha: 0.5 });
  ctx.setLineDash([3, 2]);
  ctx.restore();
  assert.deepEqual(
    [ctx.lineJoin, ctx.lineCap, ctx.textBaseline, ctx.textAlign, ctx.globalAlpha, ctx.getLineDash()],
    ["miter", "butt", "alphabetic", "start", 1, []]
  );
});
