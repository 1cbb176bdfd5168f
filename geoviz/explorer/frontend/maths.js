/* geoviz explorer: the pure maths (no DOM, no window, no state), shared by the browser
 * explorer and the node tests (`node --test` imports this module directly).
 *
 * Every function takes plain arrays, typed arrays or a decoded payload ({header, arrays},
 * see decode) and returns new values; nothing here keeps state between calls. The payload
 * layout is documented in geoviz/explorer/payload.py. */

// ------------------------------------------------------------------ payload

/** The bytes of a payload as a Uint8Array view: a Uint8Array (Streamlit), an ArrayBuffer or
 *  a DataView (anywidget's bytes traits), or any other typed array. */
export function payloadBytes(data) {
  if (Object.prototype.toString.call(data) === "[object ArrayBuffer]") return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  throw new Error("not an explorer payload: expected a Uint8Array, an ArrayBuffer or a DataView");
}

/** The payload ``b"GVZX" | uint32 header length | header JSON | arrays`` as
 *  ``{header, arrays: {name: {data: TypedArray, shape: [...]}}}`` (geoviz.explorer.payload.decode). */
export function decode(data) {
  const bytes = payloadBytes(data);
  // a copy starting at offset 0, so every array's 8-byte aligned offset is aligned in memory
  const buf = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  const dv = new DataView(buf);
  const magic = String.fromCharCode(dv.getUint8(0), dv.getUint8(1), dv.getUint8(2), dv.getUint8(3));
  if (magic !== "GVZX") throw new Error("not an explorer payload");
  const n = dv.getUint32(4, true);
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 8, n)));
  const base = 8 + n;
  const types = { float64: Float64Array, float32: Float32Array, uint8: Uint8Array, int64: null };
  const arrays = {};
  for (const [name, spec] of Object.entries(header.arrays)) {
    const T = types[spec.dtype];
    const count = spec.shape.reduce((p, s) => p * s, 1);
    arrays[name] = { data: new T(buf, base + spec.offset, count), shape: spec.shape };
  }
  return { header, arrays };
}

// ------------------------------------------------------------------ the objective

/** W²(P_a, Q) = sum_i a_i W_i − 1/2 sum_{i≠j} a_i a_j W_ij, from ``wToTarget`` (m) and
 *  ``wBetween`` (m × m, row-major, flat); m is ``wToTarget.length``. */
export function objective(a, wToTarget, wBetween) {
  const w = wToTarget, b = wBetween, m = w.length;
  let v = 0;
  for (let i = 0; i < m; i++) {
    v += a[i] * w[i];
    for (let j = 0; j < m; j++) if (j !== i) v -= 0.5 * a[i] * a[j] * b[i * m + j];
  }
  return v;
}

// ------------------------------------------------------------------ weights on the simplex

/** Largest-remainder rounding on the simplex at ``decimals``
 *  (as geoviz.geodesic.weights.round_to_simplex on the simplex; off it, Python projects and this
 *  clips): negatives clipped, renormalised, then rounded so the entries sum to exactly 1. */
export function roundToSimplex(a, decimals) {
  const scale = Math.pow(10, decimals);
  const w = clipAndRenormalise(a);  // the barycentre when no entry is positive
  const raw = w.map((x) => x * scale), fl = raw.map((x) => Math.floor(x + 1e-9));
  const missing = Math.round(scale - fl.reduce((p, x) => p + x, 0));
  const order = raw.map((x, i) => i).sort((i, j) => (raw[j] - fl[j]) - (raw[i] - fl[i]) || i - j);
  for (let k = 0; k < missing; k++) fl[order[k]] += 1;
  return fl.map((x) => x / scale);
}

/** Negatives clipped to 0, then divided by the sum (uniform when nothing is left): a pointer
 *  position outside the triangle onto the simplex. Not the Euclidean projection
 *  (Python's project_to_simplex). */
export function clipAndRenormalise(a) {
  const w = a.map((x) => Math.max(0, x));
  const s = w.reduce((p, x) => p + x, 0);
  return s > 0 ? w.map((x) => x / s) : a.map(() => 1 / a.length);
}

/** ``a`` with a_i set to ``v`` (clipped to [0, 1]) and the other weights rescaled in
 *  proportion so the sum stays 1 (equal shares when they were all 0): the linked bars. */
export function setWeightKeepSum(a, i, v) {
  v = Math.min(1, Math.max(0, v));
  const rest = 1 - a[i], out = a.slice();
  out[i] = v;
  for (let j = 0; j < a.length; j++) {
    if (j === i) continue;
    out[j] = rest > 1e-12 ? a[j] * (1 - v) / rest : (1 - v) / (a.length - 1);
  }
  return out;
}

// ------------------------------------------------------------------ barycentric <-> ternary

/** The ternary triangle's vertices [P1 top, P2 bottom left, P3 bottom right] in a
 *  ``width`` × ``height`` canvas (28 px padding), as [[x, y], [x, y], [x, y]]. */
export function simplexTriangle(width, height) {
  const pad = 28;
  const side = Math.min(width - 2 * pad, (height - 2 * pad) * 2 / Math.sqrt(3));
  const hgt = side * Math.sqrt(3) / 2, cx = width / 2, top = (height - hgt) / 2 + 4;
  return [[cx, top], [cx - side / 2, top + hgt], [cx + side / 2, top + hgt]];
}

/** Weights ``a`` (3) to the point [x, y] of the triangle ``V``. */
export function baryToXY(a, V) {
  return [a[0] * V[0][0] + a[1] * V[1][0] + a[2] * V[2][0], a[0] * V[0][1] + a[1] * V[1][1] + a[2] * V[2][1]];
}

/** The point (x, y) to barycentric coordinates [l1, l2, l3] of the triangle ``V`` (negative
 *  entries outside it). */
export function xyToBary(x, y, V) {
  const [x1, y1] = V[0], [x2, y2] = V[1], [x3, y3] = V[2];
  const det = (y2 - y3) * (x1 - x3) + (x3 - x2) * (y1 - y3);
  const l1 = ((y2 - y3) * (x - x3) + (x3 - x2) * (y - y3)) / det;
  const l2 = ((y3 - y1) * (x - x3) + (x1 - x3) * (y - y3)) / det;
  return [l1, l2, 1 - l1 - l2];
}

/** The colour scale's range [lo, hi]: the finite ``values`` (the heatmap's pixel centres,
 *  NaN outside the triangle) widened to the objective at each of ``points`` (the three
 *  vertices, â, the pick). Pixel centres alone miss the vertices, whose values the corners
 *  read: the bar topped out at 73.41 under a P1 corner of 73.77 (issue 45). */
export function objectiveRange(values, points, wToTarget, wBetween) {
  let lo = Infinity, hi = -Infinity;
  for (const v of values) if (!Number.isNaN(v)) { if (v < lo) lo = v; if (v > hi) hi = v; }
  for (const a of points) {
    const v = objective(a, wToTarget, wBetween);
    if (v < lo) lo = v; if (v > hi) hi = v;
  }
  return [lo, hi];
}

/** Subdivisions per edge of the lattice a region's share of the simplex is counted on. */
export const SHARE_LATTICE = 80;

/** The centroids of the ``n`` × ``n`` equal triangles that divide the simplex ``n`` times
 *  along each edge (n(n+1)/2 upright, n(n-1)/2 upside down): the same points whatever the
 *  canvas, so a share counted on them does not change with the viewport. */
export function simplexLattice(n) {
  const pts = [];
  for (let i = 0; i < n; i++) for (let j = 0; i + j < n; j++) {
    pts.push([(i + 1 / 3) / n, (j + 1 / 3) / n, (n - 1 - i - j + 1 / 3) / n]);
    if (i + j < n - 1) pts.push([(i + 2 / 3) / n, (j + 2 / 3) / n, (n - 2 - i - j + 2 / 3) / n]);
  }
  return pts;
}

/** The share of the simplex's area where ``inside(a)`` holds, on simplexLattice(n):
 *  ``{count, total, share}`` (total = n², each lattice point one equal triangle). */
export function regionShare(inside, n) {
  const pts = simplexLattice(n || SHARE_LATTICE);
  let count = 0;
  for (const a of pts) if (inside(a)) count++;
  return { count: count, total: pts.length, share: count / pts.length };
}

/** A share as the captions print it: "0.16% of the simplex" (two significant digits under
 *  1%, one decimal under 10%), "<0.02% of the simplex" where no lattice point is in. */
export function shareText(count, total) {
  const p = 100 * count / total;
  if (count === 0) return "<" + Number((100 / total).toPrecision(1)) + "% of the simplex";
  const s = p >= 10 ? p.toFixed(0) : p >= 1 ? p.toFixed(1) : String(Number(p.toPrecision(2)));
  return s + "% of the simplex";
}

// ------------------------------------------------------------------ P_a's pixels and label mass

/** round(sum_i coef_i images[i + offset]) over the first ``rows`` samples: ``images`` is the
 *  flat uint8 array of shape ``shape`` = [rows in all, S, D]. Returns Uint8ClampedArray(rows * D). */
export function mixImages(images, shape, coef, offset, rows) {
  const D = shape[2], Sn = shape[1], src = images;
  const acc = new Float64Array(rows * D);
  for (let i = 0; i < coef.length; i++) {
    const c = coef[i], base = (i + offset) * Sn * D;
    if (c === 0) continue;
    for (let k = 0; k < rows * D; k++) acc[k] += c * src[base + k];
  }
  const out = new Uint8ClampedArray(rows * D);
  for (let k = 0; k < rows * D; k++) out[k] = Math.round(acc[k]);
  return out;
}

/** P_a's pixels of the payload's shown samples: round(sum_i a_i images[i + 1]) (geodesic,
 *  ``a`` the weights) or round((1 − t) x + t T_i(x)) (McCann, ``a`` is t, a number).
 *  Uint8ClampedArray(n_shown * D), empty when the payload has no images. */
export function mixShownImages(payload, a) {
  const im = payload.arrays.images, h = payload.header;
  if (!im) return new Uint8ClampedArray(0);
  const rows = h.n_shown;
  if (h.mode === "mccann") { const t = Number(a); return mixImages(im.data, im.shape, [1 - t, t], 0, rows); }
  return mixImages(im.data, im.shape, a, 1, rows);
}

/** The label-mass bars: ``weights[i] * mass[i][c]`` for each block i (a reference's mean
 *  soft label, or McCann's [Q's, the reference's]) and class c. */
export function labelMass(weights, mass) {
  return mass.map((row, i) => Array.from(row, (v) => weights[i] * v));
}

// ------------------------------------------------------------------ the bootstrap (issue 23)

/** numpy.quantile's default ("linear") of an ascending array. */
export function quantileSorted(s, q) {
  const pos = q * (s.length - 1), lo = Math.floor(pos), hi = Math.min(lo + 1, s.length - 1);
  return s[lo] + (pos - lo) * (s[hi] - s[lo]);
}

/** The equal-tailed percentile interval [lo, hi] of ``values`` at ``level`` (e.g. 0.9). */
export function percentileInterval(values, level) {
  const s = Float64Array.from(values).sort(), al = 1 - level;
  return [quantileSorted(s, al / 2), quantileSorted(s, 1 - al / 2)];
}

/** W²_b(P_a, Q) of every replicate b: Float64Array(B), from the flat ``wToTarget`` (B × m)
 *  and ``wBetween`` (B × m × m); m is ``a.length``. */
export function replicateObjectives(a, wToTarget, wBetween) {
  const m = a.length, B = Math.floor(wToTarget.length / m);
  const out = new Float64Array(B);
  for (let b = 0; b < B; b++) {
    let v = 0;
    for (let i = 0; i < m; i++) {
      v += a[i] * wToTarget[b * m + i];
      for (let j = 0; j < m; j++) if (j !== i) v -= 0.5 * a[i] * a[j] * wBetween[(b * m + i) * m + j];
    }
    out[b] = v;
  }
  return out;
}

/** The paired gaps W²_b(P_a, Q) − W²_b(P_â, Q): ``hatObjectives`` is
 *  replicateObjectives(â, wToTarget, wBetween). Float64Array(B). */
export function replicateGaps(a, wToTarget, wBetween, hatObjectives) {
  const g = replicateObjectives(a, wToTarget, wBetween);
  for (let b = 0; b < g.length; b++) g[b] -= hatObjectives[b];
  return g;
}

/** As good as â at this sample size: the gap's interval at ``level`` holds 0 (its low end is
 *  at most 0). One point of the region drawn on the triangle. */
export function asGoodAsHat(a, wToTarget, wBetween, hatObjectives, level) {
  return percentileInterval(replicateGaps(a, wToTarget, wBetween, hatObjectives), level)[0] <= 0;
}

/** The readout at ``a``: ``{value: [lo, hi]`` (the interval of W²(P_a, Q)), ``gap: [lo, hi]``
 *  (of the gap to â), ``good`` (as good as â)}. */
export function bootstrapReadout(a, wToTarget, wBetween, hatObjectives, level) {
  const gap = percentileInterval(replicateGaps(a, wToTarget, wBetween, hatObjectives), level);
  return { value: percentileInterval(replicateObjectives(a, wToTarget, wBetween), level), gap: gap, good: gap[0] <= 0 };
}

// ------------------------------------------------------------------ the embedding's grid

/** The simplex grid's nodes by their integer composition: Map "c1,...,cm" -> node index,
 *  from the flat ``grid`` (K × m). */
export function gridNodeIndex(grid, m) {
  const K = Math.floor(grid.length / m), index = new Map();
  for (let k = 0; k < K; k++) index.set(Array.from(grid.slice(k * m, k * m + m)).join(","), k);
  return index;
}

/** Barycentric (Kuhn) interpolation weights of ``a`` over the simplex grid of resolution
 *  ``r``: [[node index, weight], ...], the weights summing to 1 (``nodeIndex`` from
 *  gridNodeIndex; nodes it lacks are left out). */
export function gridWeights(a, r, nodeIndex) {
  const m = a.length;
  const c = [];
  let s = 0;
  for (let j = 0; j < m - 1; j++) { s += a[j] * r; c.push(Math.min(r, Math.max(0, s))); }
  const fl = c.map((x) => Math.min(r, Math.floor(x + 1e-12))), fr = c.map((x, j) => x - fl[j]);
  // ties: the higher coordinate first keeps the vertices monotone
  const order = fr.map((x, j) => j).sort((i, j) => fr[j] - fr[i] || j - i);
  const out = [];
  const vert = fl.slice();
  const node = (v) => {
    const comp = []; let prev = 0;
    for (let j = 0; j < m - 1; j++) { comp.push(v[j] - prev); prev = v[j]; }
    comp.push(r - prev);
    return nodeIndex.get(comp.join(","));
  };
  let wPrev = 1;
  for (let k = 0; k <= m - 1; k++) {
    const next = k < m - 1 ? fr[order[k]] : 0;
    const w = wPrev - next;
    if (w > 1e-12) { const idx = node(vert); if (idx !== undefined) out.push([idx, w]); }
    if (k < m - 1) { vert[order[k]] += 1; wPrev = next; }
  }
  const tot = out.reduce((p, x) => p + x[1], 0);
  return out.map(([i, w]) => [i, w / tot]);
}

// ------------------------------------------------------------------ colour

/** viridis, 9 stops, linearly interpolated */
export const VIRIDIS = [[68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
                        [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37]];

/** viridis at ``t`` in [0, 1] (clipped) as [r, g, b] (floats, 0..255). */
export function viridis(t) {
  t = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(t)), f = t - i;
  const a = VIRIDIS[i], b = VIRIDIS[i + 1];
  return [a[0] + f * (b[0] - a[0]), a[1] + f * (b[1] - a[1]), a[2] + f * (b[2] - a[2])];
}
