// The ternary's drawing (geoviz/explorer/frontend/simplex_draw.js) in node, on a hand-made
// explorer state, for three things a newcomer met (issue 45 item 5):
// - the corners name a reference once where the dataset is named by its role ("P1", not
//   "P1 · P1");
// - the colour bar spans the objective at the three vertices and â, not only at the pixel
//   centres (it topped out at 73.41 under a P1 corner of 73.77);
// - the region as good as â is stated as a share of the simplex counted on a fixed
//   barycentric lattice: the same at two canvas sizes (it was "1 cell" at 1280 px and
//   "4 cells" at 1920).
//
// Run by tests/test_explorer_js.py (node --test tests/js/); needs no fixtures.

import { test } from "node:test";
import assert from "node:assert/strict";
import { cpSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const FRONTEND = join(HERE, "..", "..", "geoviz", "explorer", "frontend");

/** The frontend's modules as ES modules on any node (a copy beside a package.json of type
 *  module: node before 20.19 reads a bare .js file as CommonJS). */
async function loadFrontend(names) {
  const dir = mkdtempSync(join(tmpdir(), "geoviz-simplex-"));
  try {
    cpSync(FRONTEND, dir, { recursive: true });
    writeFileSync(join(dir, "package.json"), '{"type": "module"}');
    const out = {};
    for (const n of names) out[n] = await import(pathToFileURL(join(dir, n)).href);
    return out;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
const mods = await loadFrontend(["maths.js", "drawing_kit.js", "simplex_draw.js"]);
const { objective, objectiveRange, regionShare, shareText, simplexLattice, SHARE_LATTICE } = mods["maths.js"];
const { roleLabel } = mods["drawing_kit.js"];
const { buildHeatmap, buildRegion, drawSimplex, regionNoteText } = mods["simplex_draw.js"];

globalThis.ImageData ??= class {
  constructor(w, h) { this.width = w; this.height = h; this.data = new Uint8ClampedArray(4 * w * h); }
};

/** A 2-D context that accepts every call and keeps the text it was asked to draw. */
function recordingContext(texts) {
  const base = { measureText: (t) => ({ width: 6 * String(t).length }), fillText: (t) => texts.push(String(t)) };
  return new Proxy(base, { get: (o, k) => (k in o ? o[k] : () => undefined), set: (o, k, v) => { o[k] = v; return true; } });
}
function fakeDocument(texts) {
  return { createElement: () => ({ width: 0, height: 0, getContext: () => recordingContext(texts || []) }) };
}
function canvas(w, h) { return { width: w, height: h, cssW: w, cssH: h, dpr: 1 }; }

/** A deterministic uniform in [0, 1) */
function lcg(seed) {
  let s = seed >>> 0;
  return () => { s = (Math.imul(s, 1664525) + 1013904223) >>> 0; return s / 4294967296; };
}

// W_i and W_ij of three references: P1 the farthest from Q (73.77), the W_ij large enough that
// the objective dips inside the triangle (its minimum well away from the vertices)
const W = [73.77, 61.2, 66.5];
const WB = [0, 90, 95, 90, 0, 80, 95, 80, 0];

/** A hand-made explorer state of m = 3 at a canvas of w x h CSS px; with ``boot``, B
 *  replicates of the W_i and W_ij (each a few percent off), level 0.9. */
function explorerState(w, h, opts) {
  const o = opts || {};
  const texts = [];
  const aHat = [0.2, 0.45, 0.35];
  const ex = {
    doc: fakeDocument(texts),
    P: {
      header: { m: 3, mode: "geodesic", names: o.names || ["P1", "P2", "P3"] },
      arrays: {
        a_hat: { data: Float64Array.from(aHat) },
        w_to_target: { data: Float64Array.from(W) },
        w_between: { data: Float64Array.from(WB) },
      },
    },
    B: null,
    pick: o.pick || [0.3, 0.3, 0.4],
    ui: { simplex: canvas(w, h) },
    texts: texts,
  };
  if (o.boot) {
    const B = 60, rnd = lcg(7), wt = new Float64Array(B * 3), wb = new Float64Array(B * 9);
    for (let b = 0; b < B; b++) {
      for (let i = 0; i < 3; i++) wt[b * 3 + i] = W[i] * (1 + o.boot * (rnd() - 0.5));
      for (let i = 0; i < 3; i++) for (let j = i + 1; j < 3; j++) {
        const v = WB[i * 3 + j] * (1 + o.boot * (rnd() - 0.5));
        wb[b * 9 + i * 3 + j] = v; wb[b * 9 + j * 3 + i] = v;
      }
    }
    ex.B = {
      header: { boot: { method: "test", level: 0.9, replicates: B, seed: 7, flat: false } },
      arrays: { boot_w_to_target: { data: wt }, boot_w_between: { data: wb } },
    };
  }
  return ex;
}

test("roleLabel names a reference once where its name is its role", () => {
  assert.equal(roleLabel("P1", "P1"), "P1");
  assert.equal(roleLabel("P3", "P3"), "P3");
  assert.equal(roleLabel("P1", "fashion_mnist"), "P1 · fashion_mnist");
  assert.equal(roleLabel("P2", "P1"), "P2 · P1");  // another role's name: both said
  assert.equal(roleLabel("P1", "p1"), "P1 · p1");
});

test("the ternary's corners read P1, P2, P3 on a vector preset, role · name otherwise", () => {
  for (const [names, expected] of [
    [["P1", "P2", "P3"], ["P1", "P2", "P3"]],
    [["mnist", "P2", "usps"], ["P1 · mnist", "P2", "P3 · usps"]],
  ]) {
    const ex = explorerState(320, 280, { names: names });
    ex.ui.heat = {};
    drawSimplex(ex, recordingContext(ex.texts));
    const corners = ex.texts.filter((t) => /^P\d/.test(t));
    assert.deepEqual(corners, expected);
    assert.ok(!ex.texts.some((t) => /P(\d) · P\1$/.test(t)), ex.texts);
  }
});

test("the colour bar's range holds the objective at the three vertices, â and the pick", () => {
  for (const [w, h] of [[120, 100], [333, 291]]) {
    const ex = explorerState(w, h);
    buildHeatmap(ex);
    const [lo, hi] = ex.ui.range;
    assert.deepEqual(ex.ui.colorArgs.slice(0, 2), [lo, hi]);
    const marked = [[1, 0, 0], [0, 1, 0], [0, 0, 1], Array.from(ex.P.arrays.a_hat.data), ex.pick];
    for (const a of marked) {
      const v = objective(a, W, WB);
      assert.ok(lo <= v && v <= hi, `${a}: ${v} outside [${lo}, ${hi}] at ${w}x${h}`);
    }
    // the P1 corner is the largest value: the bar's top is exactly it (pixel centres alone
    // stop short of the vertex)
    assert.equal(hi, W[0]);
  }
  // objectiveRange itself: NaN (outside the triangle) skipped, the points widen the range
  assert.deepEqual(objectiveRange([NaN, 5, 3, NaN], [], W, WB), [3, 5]);
  assert.deepEqual(objectiveRange([NaN, 70], [[1, 0, 0]], W, WB), [70, 73.77]);
});

test("simplexLattice: n² equal triangles' centroids, each inside the simplex", () => {
  for (const n of [1, 2, 5, SHARE_LATTICE]) {
    const pts = simplexLattice(n);
    assert.equal(pts.length, n * n);
    for (const a of pts) {
      assert.ok(a.every((x) => x > 0), a);
      assert.ok(Math.abs(a[0] + a[1] + a[2] - 1) < 1e-12, a);
    }
  }
  // the corner triangle a1 > 1/2 is a quarter of the simplex: exactly, on an even lattice
  assert.equal(regionShare((a) => a[0] > 0.5, SHARE_LATTICE).share, 0.25);
  assert.deepEqual(regionShare(() => true, 4), { count: 16, total: 16, share: 1 });
});

test("shareText: a percentage of the simplex, never zero", () => {
  assert.equal(shareText(1600, 6400), "25% of the simplex");
  assert.equal(shareText(100, 6400), "1.6% of the simplex");
  assert.equal(shareText(10, 6400), "0.16% of the simplex");
  assert.equal(shareText(1, 6400), "0.016% of the simplex");
  assert.equal(shareText(0, 6400), "<0.02% of the simplex");
});

test("the region as good as â: the same share and caption at two canvas sizes", () => {
  for (const spread of [0.02, 0.3]) {  // a small region and a large one
    const seen = [];
    for (const [w, h] of [[300, 262], [620, 540]]) {
      const ex = explorerState(w, h, { boot: spread });
      buildRegion(ex, w, h);
      ex.ui.inset = { zoom: 3 };  // the caption is written where an inset is shown
      seen.push({ cells: ex.ui.regionCells, share: ex.ui.regionShare, note: regionNoteText(ex) });
    }
    const [small, large] = seen;
    assert.ok(large.share.count > 0, JSON.stringify(seen));
    assert.deepEqual(small.share, large.share);
    assert.equal(small.note, large.note);
    assert.match(small.note, /^The region as good as â is small: [\d.]+% of the simplex, zoomed ×3\.0 in the inset\.$/);
    assert.ok(!/cell/.test(small.note), small.note);
    // the 4-px cells are what changed with the size (about 4.5x the area)
    assert.ok(large.cells > small.cells, JSON.stringify(seen));
  }
});
