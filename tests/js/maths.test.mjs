// The explorer's pure maths (geoviz/explorer/frontend/maths.js) against the numbers the Python
// library writes (tests/js/write_fixtures.py), with node's built-in test runner:
//
//   .venv/bin/python tests/js/write_fixtures.py /tmp/fx
//   GEOVIZ_JS_FIXTURES=/tmp/fx/fixtures.json node --test tests/js/
//
// (tests/test_explorer_js.py does both.) No npm package: node:test and node:assert only.
//
// Tolerances (everything else is compared exactly):
// - objective, replicate objectives: |js - py| <= 1e-12 * (sum_i |a_i W_i| + 1/2 sum_{i!=j}
//   |a_i a_j W_ij|), i.e. 1e-12 relative to the size of the terms (numpy sums them in another
//   order than the loop in maths.js; relative to the value itself would fail where the terms
//   cancel);
// - quantiles and percentile intervals: 1e-14 * max |values| (numpy's linear interpolation
//   evaluates b - (b - a)(1 - t) for t >= 1/2, maths.js a + t(b - a): a few ulps apart);
// - bootstrap intervals: 1e-12 * the largest term size over the replicates; the "as good as
//   a_hat" flag exactly, except where Python's gap low end is within that tolerance of 0;
// - uint8 mixing: exact, except one level where Python's float64 sum lies within 1e-11 of a
//   half level (numpy's dot and the loop in maths.js sum in different orders; the rounding
//   error of <= 5 terms of at most 255 is below 1e-12, so a different rounding can only
//   happen there);
// - grid interpolation: weights and reconstruction to 1e-12;
// - viridis: 6 levels against plotly's "Viridis" (maths.js interpolates 9 stops, plotly 10:
//   the two piecewise-linear curves are at most 5.44 levels apart, at t = 0.89); the end
//   colours exactly.

import { test } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const MATHS = join(HERE, "..", "..", "geoviz", "explorer", "frontend", "maths.js");

/** maths.js is an ES module in a folder without package.json: node >= 20.19 detects that;
 *  older node (Debian 12's 18) reads a .js file as CommonJS and fails (a SyntaxError, or
 *  ERR_REQUIRE_ESM with detection off), so import a .mjs copy there. */
async function loadMaths() {
  try {
    return await import(pathToFileURL(MATHS).href);
  } catch (err) {
    const dir = mkdtempSync(join(tmpdir(), "geoviz-maths-"));
    try {
      copyFileSync(MATHS, join(dir, "maths.mjs"));
      return await import(pathToFileURL(join(dir, "maths.mjs")).href);
    } catch (again) {
      throw new Error(`cannot import ${MATHS}: ${err.message}`, { cause: again });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
}

const M = await loadMaths();

const FIXTURE_PATH = process.env.GEOVIZ_JS_FIXTURES;
if (!FIXTURE_PATH) {
  throw new Error(
    "GEOVIZ_JS_FIXTURES is not set: write the fixtures with `.venv/bin/python tests/js/write_fixtures.py DIR` " +
      "and run `GEOVIZ_JS_FIXTURES=DIR/fixtures.json node --test tests/js/` (or run pytest tests/test_explorer_js.py)"
  );
}
const FX = JSON.parse(readFileSync(FIXTURE_PATH, "utf8"));
const FX_DIR = dirname(FIXTURE_PATH);
const payloadFile = (name) => FX.payloads.find((p) => p.name === name);
const loadPayload = (name) => M.decode(readFileSync(join(FX_DIR, payloadFile(name).file)));

// ------------------------------------------------------------------ helpers

function assertClose(actual, expected, tol, what) {
  assert.ok(Number.isFinite(actual), `${what}: got ${actual}`);
  const d = Math.abs(actual - expected);
  assert.ok(d <= tol, `${what}: got ${actual}, Python ${expected}, |diff| ${d} > tolerance ${tol}`);
}

function assertArrayEqual(actual, expected, what) {
  const a = Array.from(actual);
  assert.equal(a.length, expected.length, `${what}: length ${a.length}, Python ${expected.length}`);
  for (let i = 0; i < a.length; i++) {
    assert.ok(a[i] === expected[i], `${what}[${i}]: got ${a[i]}, Python ${expected[i]}`);
  }
}

/** sum_i |a_i W_i| + 1/2 sum_{i!=j} |a_i a_j W_ij|: the size of the objective's terms. */
function termScale(a, wt, wb, m, offT = 0, offB = 0) {
  let s = 0;
  for (let i = 0; i < m; i++) {
    s += Math.abs(a[i] * wt[offT + i]);
    for (let j = 0; j < m; j++) if (j !== i) s += 0.5 * Math.abs(a[i] * a[j] * wb[offB + i * m + j]);
  }
  return s;
}

/** A seeded generator (mulberry32) for the property checks. */
function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomSimplex(r, m) {
  const e = Array.from({ length: m }, () => -Math.log(1 - r()));
  const s = e.reduce((p, x) => p + x, 0);
  return e.map((x) => x / s);
}

const sum = (xs) => Array.from(xs).reduce((p, x) => p + x, 0);

// ------------------------------------------------------------------ the fixture itself

test("the fixture is the layout this test reads", () => {
  assert.equal(FX.version, 1, "fixture version: rewrite it with tests/js/write_fixtures.py");
});

// ------------------------------------------------------------------ payload

test("decode gives exactly the arrays and header Python encoded", () => {
  const typed = { float64: Float64Array, float32: Float32Array, uint8: Uint8Array };
  for (const rec of FX.payloads) {
    const bytes = readFileSync(join(FX_DIR, rec.file));
    assert.equal(bytes.length, rec.bytes, `${rec.name}: file size`);
    const { header, arrays } = M.decode(bytes);
    assert.deepEqual(header, rec.header, `${rec.name}: header`);
    assert.deepEqual(Object.keys(arrays).sort(), Object.keys(rec.arrays).sort(), `${rec.name}: array names`);
    for (const [name, want] of Object.entries(rec.arrays)) {
      const got = arrays[name];
      const what = `${rec.name}.${name}`;
      assert.ok(got.data instanceof typed[want.dtype], `${what}: ${got.data.constructor.name} for ${want.dtype}`);
      assert.deepEqual(got.shape, want.shape, `${what}: shape`);
      assert.equal(got.data.length, want.values.length, `${what}: length`);
      for (let i = 0; i < want.values.length; i++) {
        // Object.is: -0 and 0 differ, the bytes must be the very same
        assert.ok(Object.is(got.data[i], want.values[i]), `${what}[${i}]: got ${got.data[i]}, Python ${want.values[i]}`);
      }
    }
  }
});

test("payloadBytes and decode take every form of bytes, at any offset", () => {
  const raw = new Uint8Array(readFileSync(join(FX_DIR, payloadFile("synthetic").file)));
  const want = M.decode(raw);
  const shifted = new ArrayBuffer(raw.length + 3);
  new Uint8Array(shifted, 3).set(raw);
  const plain = raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.length);
  const forms = {
    "Uint8Array at offset 3": new Uint8Array(shifted, 3, raw.length),
    ArrayBuffer: plain,
    DataView: new DataView(shifted, 3, raw.length),
    Buffer: Buffer.from(raw),
  };
  for (const [form, data] of Object.entries(forms)) {
    const bytes = M.payloadBytes(data);
    assert.ok(bytes instanceof Uint8Array, form);
    assertArrayEqual(bytes, Array.from(raw), `payloadBytes(${form})`);
    const got = M.decode(data);
    assert.deepEqual(got.header, want.header, form);
    for (const name of Object.keys(want.arrays)) {
      assert.deepEqual(Array.from(got.arrays[name].data), Array.from(want.arrays[name].data), `${form}: ${name}`);
    }
  }
  assert.throws(() => M.payloadBytes("GVZX"), /not an explorer payload/);
  const bad = raw.slice();
  bad[0] = 0x58;
  assert.throws(() => M.decode(bad), /not an explorer payload/);
});

// ------------------------------------------------------------------ the objective

test("objective equals the library's W^2(P_a, Q) on grids of the simplex (m = 2, 3, 4, fitted)", (t) => {
  const geo = loadPayload("geodesic");
  for (const c of FX.objective) {
    let worst = 0;
    c.points.forEach((a, k) => {
      const got = M.objective(a, c.w_to_target, c.w_between);
      const scale = termScale(a, c.w_to_target, c.w_between, c.m);
      assertClose(got, c.values[k], 1e-12 * scale, `${c.name}, a = [${a}]`);
      worst = Math.max(worst, Math.abs(got - c.values[k]) / scale);
    });
    t.diagnostic(`${c.name}: ${c.points.length} points, largest |diff| / term size ${worst.toExponential(2)}`);
  }
  // the fitted case's matrices are the payload's (the browser evaluates from those)
  const fitted = FX.objective.find((c) => c.name.startsWith("fitted"));
  assertArrayEqual(geo.arrays.w_to_target.data, fitted.w_to_target, "payload w_to_target");
  assertArrayEqual(geo.arrays.w_between.data, fitted.w_between, "payload w_between");
});

// ------------------------------------------------------------------ weights on the simplex

test("roundToSimplex equals the app's rounding (SimplexWeights.from_input) exactly", () => {
  for (const c of FX.rounding.on_simplex) {
    assertArrayEqual(M.roundToSimplex(c.a, c.decimals), c.expected, `${c.name} (${c.decimals} decimals)`);
  }
});

test("off the triangle, roundToSimplex rounds the clipped point as the library rounds it", (t) => {
  for (const c of FX.rounding.off_simplex) {
    if (c.v.every((x) => x <= 0)) continue; // nothing left after clipping: the next test
    assertArrayEqual(M.roundToSimplex(c.v, c.decimals), c.round_of_clip, `roundToSimplex([${c.v}])`);
    if (c.round_of_clip.some((x, i) => x !== c.round_to_simplex[i])) {
      t.diagnostic(`[${c.v}]: round_to_simplex (projection first) gives [${c.round_to_simplex}], maths.js [${c.round_of_clip}]`);
    }
  }
});

// (it once divided 0 by 0 here and gave NaN weights)
test("roundToSimplex of a point with no positive entry is the barycentre, rounded", () => {
  const c = FX.rounding.off_simplex.find((x) => x.v.every((y) => y <= 0));
  assertArrayEqual(M.roundToSimplex(c.v, c.decimals), c.round_of_clip, `roundToSimplex([${c.v}])`);
});

test("clipAndRenormalise equals its reference and, near the simplex, the library's check_weights", () => {
  for (const c of FX.rounding.off_simplex) {
    assertArrayEqual(M.clipAndRenormalise(c.v), c.clip_renormalise, `clipAndRenormalise([${c.v}])`);
  }
  for (const c of FX.rounding.check_weights) {
    assertArrayEqual(M.clipAndRenormalise(c.v), c.expected, `clipAndRenormalise([${c.v}]) vs check_weights`);
  }
});

test("clipAndRenormalise is not the Euclidean projection (project_to_simplex)", () => {
  // (0.8, 0.6, -0.4): projection shifts by theta = 0.2 -> (0.6, 0.4, 0); clipping divides
  // by 1.4 -> (4/7, 3/7, 0)
  const c = FX.rounding.off_simplex.find((x) => x.v.join() === "0.8,0.6,-0.4");
  [0.6, 0.4, 0].forEach((x, i) => assertClose(c.project_to_simplex[i], x, 1e-15, `project_to_simplex[${i}]`));
  const clipped = M.clipAndRenormalise(c.v);
  [4 / 7, 3 / 7, 0].forEach((x, i) => assertClose(clipped[i], x, 1e-15, `clipAndRenormalise[${i}]`));
  assert.ok(Math.abs(clipped[0] - c.project_to_simplex[0]) > 0.02, "the two operations differ here");
  // all negative: uniform for the pointer, the largest entry's vertex for the projection
  const neg = FX.rounding.off_simplex.find((x) => x.v.join() === "-1,-2,-3");
  assertArrayEqual(neg.project_to_simplex, [1, 0, 0], "project_to_simplex([-1,-2,-3])");
  assertArrayEqual(M.clipAndRenormalise(neg.v), [1 / 3, 1 / 3, 1 / 3], "clipAndRenormalise([-1,-2,-3])");
  // where the projection is a vertex or the point is a multiple of the barycentre, they agree
  for (const v of ["1.3,-0.1,-0.2", "0.2,0.2,0.2"]) {
    const x = FX.rounding.off_simplex.find((y) => y.v.join() === v);
    M.clipAndRenormalise(x.v).forEach((w, i) => assertClose(w, x.project_to_simplex[i], 1e-15, `[${v}][${i}]`));
  }
});

test("property: roundToSimplex sums to exactly 1 at its decimals and moves each entry by < one unit", () => {
  const r = rng(1);
  for (let k = 0; k < 400; k++) {
    const m = 2 + (k % 5), d = k % 7;
    const a = randomSimplex(r, m);
    if (k % 3 === 0) a[k % m] -= 1e-9; // a pointer's float error off the simplex
    const out = M.roundToSimplex(a, d), scale = Math.pow(10, d);
    const units = out.map((x) => x * scale);
    units.forEach((u, i) => {
      assert.ok(Math.abs(u - Math.round(u)) < 1e-9, `[${a}] at ${d}: entry ${i} ${out[i]} is not on the grid`);
      assert.ok(u >= 0, `negative entry ${out[i]}`);
      assert.ok(Math.abs(out[i] - a[i]) < 1 / scale + 1e-9, `[${a}] at ${d}: entry ${i} moved to ${out[i]}`);
    });
    assert.equal(sum(units.map((u) => Math.round(u))), scale, `[${a}] at ${d} decimals: [${out}]`);
  }
});

test("property: clipAndRenormalise lands on the simplex and keeps simplex points", () => {
  const r = rng(2);
  for (let k = 0; k < 400; k++) {
    const m = 2 + (k % 4);
    const v = Array.from({ length: m }, () => 4 * r() - 2);
    const out = M.clipAndRenormalise(v);
    assert.ok(out.every((x) => x >= 0 && x <= 1), `[${v}] -> [${out}]`);
    assertClose(sum(out), 1, 1e-12, `sum of clipAndRenormalise([${v}])`);
    const a = randomSimplex(r, m);
    M.clipAndRenormalise(a).forEach((x, i) => assertClose(x, a[i], 1e-15, `simplex point [${a}]`));
  }
});

test("property: setWeightKeepSum sets a_i (clipped) and rescales the others, sum 1", () => {
  const r = rng(3);
  for (let k = 0; k < 300; k++) {
    const m = 2 + (k % 4), i = k % m;
    const a = randomSimplex(r, m), v = 1.4 * r() - 0.2;
    const out = M.setWeightKeepSum(a, i, v);
    const want = Math.min(1, Math.max(0, v));
    assert.equal(out[i], want);
    assertClose(sum(out), 1, 1e-12, `sum of setWeightKeepSum([${a}], ${i}, ${v})`);
    for (let j = 0; j < m; j++) if (j !== i) assertClose(out[j], (a[j] * (1 - want)) / (1 - a[i]), 1e-12, `entry ${j}`);
  }
  // the others all 0: equal shares
  assertArrayEqual(M.setWeightKeepSum([1, 0, 0], 0, 0.4), [0.4, 0.3, 0.3], "from a vertex");
});

// ------------------------------------------------------------------ the ternary triangle

test("property: simplexTriangle is equilateral and inside its canvas; bary <-> xy round trip", () => {
  const r = rng(4);
  for (const [w, h] of [[480, 420], [300, 600], [900, 300], [200, 200]]) {
    const V = M.simplexTriangle(w, h);
    const side = (p, q) => Math.hypot(p[0] - q[0], p[1] - q[1]);
    const s = side(V[0], V[1]);
    assertClose(side(V[1], V[2]), s, 1e-9 * s, `${w}x${h}: side`);
    assertClose(side(V[2], V[0]), s, 1e-9 * s, `${w}x${h}: side`);
    for (const [x, y] of V) assert.ok(x >= 27.999 && x <= w - 27.999 && y >= 0 && y <= h, `${w}x${h}: vertex (${x}, ${y})`);
    V.forEach((p, k) => M.xyToBary(p[0], p[1], V).forEach((x, i) => assertClose(x, i === k ? 1 : 0, 1e-12, `vertex ${k}`)));
    for (let k = 0; k < 200; k++) {
      // inside and outside the triangle (negative entries)
      const a0 = randomSimplex(r, 3);
      const a = k % 2 ? a0 : [a0[0] * 2 - 0.5, a0[1] * 2 - 0.5, 0];
      a[2] = 1 - a[0] - a[1];
      const [x, y] = M.baryToXY(a, V);
      M.xyToBary(x, y, V).forEach((b, i) => assertClose(b, a[i], 1e-12, `${w}x${h}: [${a}] -> (${x}, ${y}) -> entry ${i}`));
      const px = w * r(), py = h * r();
      const back = M.baryToXY(M.xyToBary(px, py, V), V);
      assertClose(back[0], px, 1e-9, "xy -> bary -> x");
      assertClose(back[1], py, 1e-9, "xy -> bary -> y");
    }
  }
});

// ------------------------------------------------------------------ P_a's pixels and label mass

function checkMix(t, name, P, records, coefOf) {
  let allowed = 0, used = 0, total = 0;
  for (const rec of records) {
    const got = M.mixShownImages(P, coefOf(rec));
    assert.ok(got instanceof Uint8ClampedArray, `${name}: a Uint8ClampedArray`);
    assert.equal(got.length, rec.pixels.length, `${name}: length`);
    const near = new Set(rec.near_half);
    allowed += near.size;
    total += got.length;
    for (let k = 0; k < got.length; k++) {
      if (got[k] === rec.pixels[k]) continue;
      assert.ok(
        near.has(k) && Math.abs(got[k] - rec.pixels[k]) === 1,
        `${name} at [${rec.weights}]: pixel ${k} is ${got[k]}, numpy ${rec.pixels[k]}`
      );
      used += 1;
    }
  }
  t.diagnostic(`${name}: ${total} pixels, ${allowed} within 1e-11 of a half level, ${used} of them one level apart`);
}

test("mixShownImages equals numpy's round(sum_i a_i images[i + 1]) of the same payload", (t) => {
  const geo = loadPayload("geodesic");
  checkMix(t, "geodesic", geo, FX.mixing.geodesic, (rec) => rec.weights);
  const mc = loadPayload("mccann");
  assert.equal(mc.header.mode, "mccann");
  checkMix(t, "mccann", mc, FX.mixing.mccann, (rec) => rec.weights[1]);
  assert.equal(M.mixShownImages({ header: geo.header, arrays: {} }, [1, 0, 0]).length, 0, "no images");
});

test("labelMass is a_i * mass[i] of the payload's mass, exactly", () => {
  const geo = loadPayload("geodesic");
  const mass = geo.arrays.mass, [m, C] = mass.shape;
  const rows = Array.from({ length: m }, (_, i) => mass.data.subarray(i * C, (i + 1) * C));
  for (const c of FX.label_mass.geodesic) {
    const got = M.labelMass(c.weights, rows);
    got.forEach((row, i) => assertArrayEqual(row, c.expected[i], `labelMass([${c.weights}])[${i}]`));
  }
  const rg = FX.label_mass.ragged;
  M.labelMass(rg.weights, rg.mass).forEach((row, i) => assertArrayEqual(row, rg.expected[i], `ragged row ${i}`));
});

// ------------------------------------------------------------------ the bootstrap

test("quantileSorted and percentileInterval equal numpy's linear quantile and the library's interval", () => {
  for (const c of FX.quantiles.cases) {
    const s = Float64Array.from(c.values).sort();
    const tol = 1e-14 * Math.max(...c.values.map(Math.abs));
    c.q.forEach((q, k) => assertClose(M.quantileSorted(s, q), c.quantile[k], tol, `quantile ${q} of ${c.values.length} values`));
    for (const iv of c.intervals) {
      const [lo, hi] = M.percentileInterval(c.values, iv.level);
      assertClose(lo, iv.low, tol, `low end at ${iv.level} of ${c.values.length} values`);
      assertClose(hi, iv.high, tol, `high end at ${iv.level} of ${c.values.length} values`);
    }
  }
});

test("the bootstrap readout equals the library's objective_interval, gap_interval and as_good_as_a_hat", (t) => {
  const boot = loadPayload("bootstrap"), geo = loadPayload("geodesic");
  const B = FX.bootstrap;
  const wt = boot.arrays.boot_w_to_target.data, wb = boot.arrays.boot_w_between.data;
  const [nRep, m] = boot.arrays.boot_w_to_target.shape;
  const aHat = Array.from(geo.arrays.a_hat.data);
  assertArrayEqual(aHat, B.a_hat, "the payload's a_hat is the bootstrap's");
  const repScale = (a) => {
    const out = [];
    for (let b = 0; b < nRep; b++) out.push(termScale(a, wt, wb, m, b * m, b * m * m));
    return out;
  };
  const hat = M.replicateObjectives(aHat, wt, wb);
  const hatScale = repScale(aHat);
  B.hat_objectives.forEach((v, b) => assertClose(hat[b], v, 1e-12 * hatScale[b], `replicate ${b} at a_hat`));
  let borderline = 0;
  B.points.forEach((a, k) => {
    const reps = M.replicateObjectives(a, wt, wb), sc = repScale(a);
    assert.equal(reps.length, nRep);
    B.replicate_objectives[k].forEach((v, b) => assertClose(reps[b], v, 1e-12 * sc[b], `replicate ${b} at [${a}]`));
    const tol = 1e-12 * Math.max(...sc, ...hatScale);
    for (const L of B.levels) {
      const what = `[${a}] at level ${L.level}`;
      const r = M.bootstrapReadout(a, wt, wb, hat, L.level);
      assertClose(r.value[0], L.value_low[k], tol, `${what}: value low`);
      assertClose(r.value[1], L.value_high[k], tol, `${what}: value high`);
      assertClose(r.gap[0], L.gap_low[k], tol, `${what}: gap low`);
      assertClose(r.gap[1], L.gap_high[k], tol, `${what}: gap high`);
      assert.equal(M.asGoodAsHat(a, wt, wb, hat, L.level), r.good, `${what}: asGoodAsHat is the readout's flag`);
      // a low end within rounding of 0 (but not exactly 0, as at a_hat) may fall either side
      if (L.gap_low[k] !== 0 && Math.abs(L.gap_low[k]) <= tol) borderline += 1;
      else assert.equal(r.good, L.good[k], `${what}: as good as a_hat (gap low ${L.gap_low[k]})`);
    }
  });
  // at a_hat itself every paired gap is 0: as good as itself
  assertArrayEqual(M.replicateGaps(aHat, wt, wb, hat), new Array(nRep).fill(0), "gaps at a_hat");
  assert.equal(M.bootstrapReadout(aHat, wt, wb, hat, 0.95).good, true);
  const goods = B.levels.map((L) => L.good.filter(Boolean).length).join("/");
  t.diagnostic(`${B.points.length} points x ${B.levels.length} levels, ${nRep} replicates; as good as a_hat: ${goods}; flags within tolerance of 0 (not compared): ${borderline}`);
});

// ------------------------------------------------------------------ the embedding's grid

test("gridNodeIndex and gridWeights over the library's simplex_compositions", (t) => {
  for (const c of FX.grid.cases) {
    const { m, r } = c, K = c.compositions.length;
    const flat = c.compositions.flat();
    const index = M.gridNodeIndex(flat, m);
    assert.equal(index.size, K, `m=${m} r=${r}: one entry per node`);
    c.compositions.forEach((comp, k) => assert.equal(index.get(comp.join(",")), k, `m=${m} r=${r}: node ${comp}`));
    // at a node: that node alone, weight exactly 1
    c.compositions.forEach((comp, k) => {
      assert.deepEqual(M.gridWeights(comp.map((x) => x / r), r, index), [[k, 1]], `m=${m} r=${r}: at node ${comp}`);
    });
    c.points.forEach((a, p) => {
      const ws = M.gridWeights(a, r, index);
      const what = `m=${m} r=${r} at [${a}]`;
      assert.ok(ws.length >= 1 && ws.length <= m, `${what}: ${ws.length} nodes`);
      assertClose(sum(ws.map((x) => x[1])), 1, 1e-12, `${what}: weights' sum`);
      const back = new Array(m).fill(0);
      for (const [k, w] of ws) {
        assert.ok(w > 0, `${what}: weight ${w}`);
        c.compositions[k].forEach((x, i) => (back[i] += (w * x) / r));
        // a node of a's cell: its cumulative sums are those of r a rounded down or up
        let cs = 0, ca = 0;
        for (let j = 0; j < m - 1; j++) {
          cs += c.compositions[k][j];
          ca += a[j] * r;
          assert.ok(cs === Math.floor(ca) || cs === Math.floor(ca) + 1, `${what}: node ${c.compositions[k]} is not in a's cell`);
        }
      }
      back.forEach((x, i) => assertClose(x, a[i], 1e-12, `${what}: sum_k w_k node_k / r, entry ${i}`));
      if (c.delaunay_weights) {
        const want = Object.entries(c.delaunay_weights[p]).filter(([, w]) => w > 1e-12);
        assert.deepEqual(ws.map(([k]) => k).sort((x, y) => x - y), want.map(([k]) => Number(k)).sort((x, y) => x - y), `${what}: the cell's nodes (scipy Delaunay)`);
        for (const [k, w] of want) assertClose(ws.find((x) => x[0] === Number(k))[1], w, 1e-12, `${what}: weight of node ${k}`);
      }
    });
    t.diagnostic(`m=${m} r=${r}: ${K} nodes, ${c.points.length} points`);
  }
  // the payload's uint8 grid gives the same index as the compositions
  const syn = loadPayload("synthetic");
  const g = syn.arrays.grid;
  const fromPayload = M.gridNodeIndex(g.data, g.shape[1]);
  const c3 = FX.grid.cases.find((c) => c.m === g.shape[1] && c.compositions.length === g.shape[0]);
  assert.deepEqual([...fromPayload.entries()], [...M.gridNodeIndex(c3.compositions.flat(), c3.m).entries()]);
});

// ------------------------------------------------------------------ colour

test("viridis follows plotly's Viridis (the library figures' scale)", () => {
  const { t: ts, rgb } = FX.viridis;
  assertArrayEqual(M.viridis(0), rgb[0], "viridis(0)");
  assertArrayEqual(M.viridis(1), rgb[rgb.length - 1], "viridis(1)");
  assertArrayEqual(M.viridis(-0.5), M.viridis(0), "clipped below");
  assertArrayEqual(M.viridis(1.5), M.viridis(1), "clipped above");
  ts.forEach((x, k) => M.viridis(x).forEach((v, c) => assertClose(v, rgb[k][c], 6, `viridis(${x}) channel ${c}`)));
  M.VIRIDIS.forEach((stop, k) => assertArrayEqual(M.viridis(k / (M.VIRIDIS.length - 1)), stop, `stop ${k}`));
});
