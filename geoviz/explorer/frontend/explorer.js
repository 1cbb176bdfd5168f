/* geoviz explorer: the generalized geodesic (and McCann's interpolation) redrawn in the
 * browser at frame rate. Plain JS, no build step, no network: Streamlit components v1
 * protocol by hand (componentReady -> render -> setComponentValue / setFrameHeight).
 * The payload layout is documented in geoviz/app/explorer/payload.py. */
(function () {
  "use strict";

  // ------------------------------------------------------------------ Streamlit protocol
  // Everything this frame posts to the page goes through sanitiseMessage (issue 32): Streamlit
  // parses a component's value with Python's JSON parser before geoviz sees it, so a value
  // nested ~1,000 deep fails there, outside the page's code, on every later rerun of the
  // session. Only the documented messages pass, rebuilt field by field from checked
  // primitives; anything else is dropped here and counted (geovizExplorer.dropped).
  const REAL_PARENT = window.parent;
  const LIMITS = {
    /** longest event id (geoviz.app.browser.MAX_ID_CHARS) */
    idChars: 128,
    /** most references a weight vector may have (the library's limit is far below this) */
    weights: 64,
    /** most pending parts a poll names, and the longest name */
    pollParts: 4, pollChars: 32,
    /** tallest frame the page is asked for, px */
    height: 100000,
  };
  let dropped = 0;
  /** A finite JSON number (not a boolean, not a string), or undefined. */
  function finite(x) { return typeof x === "number" && Number.isFinite(x) ? x : undefined; }
  /** A short string, or undefined. */
  function shortText(x, max) { return typeof x === "string" && x.length <= max ? x : undefined; }
  /** ``x`` if it is a plain array of at most ``max`` entries (read once), else undefined. */
  function smallArray(x, max) {
    if (!Array.isArray(x)) return undefined;
    const n = x.length;
    return Number.isInteger(n) && n <= max ? Array.prototype.slice.call(x, 0, n) : undefined;
  }
  /** The component value as the documented event, rebuilt from its checked fields; null when
   *  it is anything else: ``{weights: [m finite numbers], seq, id}`` (geodesic mode),
   *  ``{t: finite number, seq, id}`` (McCann mode) or ``{poll: [short names], seq, id}``. */
  function sanitiseValue(value) {
    if (value === null || typeof value !== "object" || Array.isArray(value)) return null;
    const keys = Object.keys(value);
    if (keys.length > 3 || keys.some((k) => k !== "weights" && k !== "t" && k !== "poll" && k !== "seq" && k !== "id")) return null;
    const seq = value.seq, id = shortText(value.id, LIMITS.idChars);
    if (!Number.isSafeInteger(seq) || seq < 0 || id === undefined) return null;
    const header = S && S.P ? S.P.header : null;
    if (!header) return null;
    if ("weights" in value) {
      const w = smallArray(value.weights, LIMITS.weights);
      if (header.mode === "mccann" || !w || w.length !== header.m) return null;
      const out = w.map(finite);
      return out.every((x) => x !== undefined) ? { weights: out, seq: seq, id: id } : null;
    }
    if ("t" in value) {
      const t = finite(value.t);
      return header.mode === "mccann" && t !== undefined ? { t: t, seq: seq, id: id } : null;
    }
    if ("poll" in value) {
      const parts = smallArray(value.poll, LIMITS.pollParts);
      if (!parts) return null;
      const out = parts.map((p) => shortText(p, LIMITS.pollChars));
      return out.every((p) => p !== undefined) ? { poll: out, seq: seq, id: id } : null;
    }
    return null;
  }
  /** The message to post to the page, rebuilt, or null to drop it. */
  function sanitiseMessage(msg) {
    try {
      if (msg === null || typeof msg !== "object" || msg.isStreamlitMessage !== true) return null;
      const type = msg.type;
      if (type === "streamlit:componentReady") return { isStreamlitMessage: true, type: type, apiVersion: 1 };
      if (type === "streamlit:setFrameHeight") {
        const h = finite(msg.height);
        return h !== undefined && h >= 0 && h <= LIMITS.height ? { isStreamlitMessage: true, type: type, height: Math.ceil(h) } : null;
      }
      if (type === "streamlit:setComponentValue" && msg.dataType === "json") {
        const value = sanitiseValue(msg.value);
        return value === null ? null : { isStreamlitMessage: true, type: type, value: value, dataType: "json" };
      }
    } catch (err) { /* a hostile getter or proxy: dropped */ }
    return null;
  }
  function guardedPost(msg) {
    const safe = sanitiseMessage(msg);
    if (safe === null) { dropped += 1; return false; }
    REAL_PARENT.postMessage(safe, "*");
    return true;
  }
  // ``parent`` is a replaceable attribute: a script in this frame that posts through
  // ``window.parent`` (as the explorer's own code does) gets the same checks.
  try {
    Object.defineProperty(window, "parent", {
      value: Object.freeze({ postMessage: guardedPost }), writable: false, configurable: false,
    });
  } catch (err) { /* an older browser: the explorer's own posts are still checked */ }
  function post(type, extra) {
    return guardedPost(Object.assign({ isStreamlitMessage: true, type: type }, extra || {}));
  }
  function setValue(value) {
    if (post("streamlit:setComponentValue", { value: value, dataType: "json" })) G.valuesSent += 1;
  }
  let lastHeight = -1;
  function fitHeight() {
    const h = Math.ceil(document.getElementById("root").getBoundingClientRect().height) + 8;
    if (h !== lastHeight) { lastHeight = h; post("streamlit:setFrameHeight", { height: h }); }
  }

  // ------------------------------------------------------------------ payload
  function decode(bytes) {
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

  // ------------------------------------------------------------------ helpers
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                   "#7f7f7f", "#bcbd22", "#17becf"];
  /** width of the embedding/scatter view's legend column, px */
  const LEGEND_W = 190;
  const SET_COLORS = ["#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3"];
  // viridis, 9 stops
  const VIRIDIS = [[68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
                   [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37]];
  function viridis(t) {
    t = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
    const i = Math.min(VIRIDIS.length - 2, Math.floor(t)), f = t - i;
    const a = VIRIDIS[i], b = VIRIDIS[i + 1];
    return [a[0] + f * (b[0] - a[0]), a[1] + f * (b[1] - a[1]), a[2] + f * (b[2] - a[2])];
  }
  function el(tag, attrs, parent) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") e.textContent = v; else if (k === "html") e.innerHTML = v; else e.setAttribute(k, v);
    }
    if (parent) parent.appendChild(e);
    return e;
  }
  function fmt(x, d) { return Number(x).toFixed(d === undefined ? 2 : d); }
  function tick(x) { const a = Math.abs(x); return a !== 0 && (a < 1e-3 || a >= 1e5) ? Number(x).toExponential(2) : Number(x).toPrecision(4); }
  /** Text that fits ``width`` px: the font shrinks to 9 px, then the text is cut with an ellipsis. */
  function fitText(ctx, text, x, y, width, px) {
    let size = px || 12;
    ctx.font = size + "px sans-serif";
    while (ctx.measureText(text).width > width && size > 9) { size -= 1; ctx.font = size + "px sans-serif"; }
    let t = String(text);
    while (ctx.measureText(t).width > width && t.length > 2) t = t.slice(0, -2) + "…";
    ctx.fillText(t, x, y);
    ctx.font = "12px sans-serif";
  }
  function sig(x) { return Number(x).toPrecision(7); }
  function mass2(x) { return x.toFixed(2).replace(/^0\./, "."); }

  /** Largest-remainder rounding on the simplex (geoviz.geodesic.weights.round_to_simplex). */
  function roundToSimplex(a, decimals) {
    const scale = Math.pow(10, decimals);
    let s = 0;
    const w = a.map((x) => { const v = Math.max(0, x); s += v; return v; }).map((x) => x / s);
    const raw = w.map((x) => x * scale), fl = raw.map((x) => Math.floor(x + 1e-9));
    const missing = Math.round(scale - fl.reduce((p, x) => p + x, 0));
    const order = raw.map((x, i) => i).sort((i, j) => (raw[j] - fl[j]) - (raw[i] - fl[i]) || i - j);
    for (let k = 0; k < missing; k++) fl[order[k]] += 1;
    return fl.map((x) => x / scale);
  }
  function project(a) {
    // clip negatives and renormalise (pointer positions outside the triangle)
    const w = a.map((x) => Math.max(0, x));
    const s = w.reduce((p, x) => p + x, 0);
    return s > 0 ? w.map((x) => x / s) : a.map(() => 1 / a.length);
  }
  function syncWeights(a, i, v) {
    v = Math.min(1, Math.max(0, v));
    const rest = 1 - a[i], out = a.slice();
    out[i] = v;
    for (let j = 0; j < a.length; j++) {
      if (j === i) continue;
      out[j] = rest > 1e-12 ? a[j] * (1 - v) / rest : (1 - v) / (a.length - 1);
    }
    return out;
  }

  // ------------------------------------------------------------------ state
  const G = (window.geovizExplorer = {
    frameTimes: [], valuesSent: 0, dropped: () => dropped, renders: 0, playFrames: 0, playFps: null,
    objective: (a) => objective(a), mix: (a) => Array.from(mixAll(a)),
    pick: () => S.pick.slice(), t: () => S.t, ready: false, polls: 0,
    /** the view ("embedding", "scatter", "pending": the embedding is still being computed, "none") */
    view: () => H().view,
    /** what the server still computes in the background (the browser polls for it) */
    pending: () => S.pendingParts.slice(),
    header: () => { const h = Object.assign({}, S.P.header); delete h.arrays; return h; },
    /** the P_a (or P^M_t) points the view draws: [[x, y], ...] */
    points: () => (S.ui && S.ui.view ? viewPoints().map((p) => [p[0], p[1]]) : []),
    /** the bootstrap readout at a: {value: [lo, hi], gap: [lo, hi], good}, or null */
    uncertainty: (a) => (boot() ? bootReadout(a) : null),
    /** canvas pixels of weights a on the ternary (m = 3), as the explorer draws them */
    simplexXY: (a) => toXY(a),
    /** the current view as a figure: "svg" text or a "png" data URL */
    figure: (kind) => figure(kind),
    /** open the inspector on shown sample j (as a click on its tile does) */
    inspect: (j) => { S.inspect = j; draw(); fitHeight(); },
    /** the view's P_a points in canvas pixels, and the legend column's width */
    viewXY: () => (S.ui && S.ui.view ? viewPoints().map((p) => [S.ui.X(p[0]), S.ui.Y(p[1])]) : []),
    legendWidth: () => LEGEND_W,
    /** the teaching view's naive-mixup points at a: [[x, y], ...] (data coordinates) */
    mixupPoints: (a) => {
      const mx = A("mixup_coords"); if (!mx) return [];
      const m = mx.shape[0], n = mx.shape[1], d = mx.shape[2], out = [];
      for (let p = 0; p < n; p++) {
        let x = 0, y = 0;
        for (let i = 0; i < m; i++) { x += a[i] * mx.data[(i * n + p) * d]; y += a[i] * mx.data[(i * n + p) * d + 1]; }
        out.push([x, y]);
      }
      return out;
    },
    /** the teaching view's caption */
    teachingCaption: () => (S.ui && S.ui.teach ? S.ui.teach.textContent : ""),
    /** the bootstrap's header ({method, level, replicates, seed, flat}), or null before it arrives */
    bootstrap: () => boot(),
    /** lattice cells of the region as good as â drawn on the triangle (m = 3) */
    regionCells: () => (S.ui ? S.ui.regionCells || 0 : 0),
    /** mix(a) as base64 (compact for tests) */
    mix64: (a) => { const px = mixAll(a); let s = ""; for (let k = 0; k < px.length; k += 8192) s += String.fromCharCode.apply(null, px.subarray(k, k + 8192)); return btoa(s); },
  });
  const S = { payloadId: null, P: null, pick: null, t: 0.5, dragging: false, pending: [],
              rafQueued: false, seq: 0, hover: null, ui: null,
              embId: null, embWaiting: null, embError: null, pendingParts: [], pollTimer: null, regionTimer: null };
  // polls for the parts computed in the background (issue 26): the next one this long after a
  // render, and again after POLL_RETRY_MS if no render answered (a lost poll)
  const POLL_MS = 300, POLL_RETRY_MS = 8000;

  function A(name) { return S.P.arrays[name]; }
  function H() { return S.P.header; }

  function objective(a) {
    const w = A("w_to_target").data, b = A("w_between").data, m = w.length;
    let v = 0;
    for (let i = 0; i < m; i++) {
      v += a[i] * w[i];
      for (let j = 0; j < m; j++) if (j !== i) v -= 0.5 * a[i] * a[j] * b[i * m + j];
    }
    return v;
  }

  // ------------------------------------------------------------------ bootstrap (issue 23)
  /** The payload's bootstrap header, or null (no replicates shipped). */
  function boot() { return S.B ? S.B.header.boot : null; }
  function BA(name) { return S.B.arrays[name]; }
  /** numpy.quantile's default ("linear") of an ascending array. */
  function quantileSorted(s, q) {
    const pos = q * (s.length - 1), lo = Math.floor(pos), hi = Math.min(lo + 1, s.length - 1);
    return s[lo] + (pos - lo) * (s[hi] - s[lo]);
  }
  /** W²(P_a, Q) of every replicate: Float64Array(B). */
  function repObjectives(a) {
    const W = BA("boot_w_to_target"), Wb = BA("boot_w_between").data, m = a.length, B = W.shape[0];
    const out = new Float64Array(B);
    for (let b = 0; b < B; b++) {
      let v = 0;
      for (let i = 0; i < m; i++) {
        v += a[i] * W.data[b * m + i];
        for (let j = 0; j < m; j++) if (j !== i) v -= 0.5 * a[i] * a[j] * Wb[(b * m + i) * m + j];
      }
      out[b] = v;
    }
    return out;
  }
  function percentile(vals) {
    const s = Float64Array.from(vals).sort(), al = 1 - boot().level;
    return [quantileSorted(s, al / 2), quantileSorted(s, 1 - al / 2)];
  }
  /** Paired gaps W²_b(P_a, Q) − W²_b(P_â, Q) over the replicates. */
  function gapReplicates(a) {
    if (!S.bootHat) S.bootHat = repObjectives(Array.from(A("a_hat").data));
    const g = repObjectives(a);
    for (let b = 0; b < g.length; b++) g[b] -= S.bootHat[b];
    return g;
  }
  /** As good as â at this sample size: the gap's interval holds 0. */
  function asGood(a) { return percentile(gapReplicates(a))[0] <= 0; }
  /** The readout's numbers at ``a``: objective interval, gap interval, verdict. */
  function bootReadout(a) {
    return { value: percentile(repObjectives(a)), gap: percentile(gapReplicates(a)), good: asGood(a) };
  }

  /** Mixed uint8 pixels of the shown samples: round(sum_i a_i images[i+1]) (McCann: a = [1-t, t]
   * over [x, T_i(x)]). Returns Uint8ClampedArray (S * D). */
  function mixRows(coef, offset, rows) {
    const im = A("images"), D = im.shape[2], Sn = im.shape[1], src = im.data;
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
  /** Geodesic: ``a`` the weights; McCann: ``a`` is t (a number). */
  function mixAll(a) {
    if (!A("images")) return new Uint8ClampedArray(0);
    const rows = H().n_shown;
    if (H().mode === "mccann") { const t = Number(a); return mixRows([1 - t, t], 0, rows); }
    return mixRows(a, 1, rows);
  }

  // ------------------------------------------------------------------ layout
  function simplexHint() {
    const m = H().m, bt = boot();
    const base = m === 3
      ? "Colour: W²(P_a, Q) computed here from W_i and W_ij (darker is lower); ★ â, ● the picked a."
      : m === 2 ? "The geodesic from P1 (t = 0) to P2 (t = 1): W²(P_a, Q) along it; ★ â."
      : "Linked bars: drag a bar (the others rescale) · arrows: ←/→ choose, ↑/↓ move.";
    if (!bt) return base + " Intervals: computing the bootstrap…";
    if (bt.flat) return base + " The references are identical as seen from Q: every a is as good as â.";
    const what = m === 3 ? " Dotted outline: the weights as good as â at this sample size"
      : m === 2 ? " Band: the interval of W²(P_a, Q); green ticks: the weights as good as â at this sample size"
      : " Whiskers: â's interval";
    return base + what + " (" + Math.round(100 * bt.level) + "% bootstrap, B = " + bt.replicates + ", " +
      (bt.method === "q-resample" ? "Q's samples drawn again with the maps fixed: the maps' own noise is not in it"
        : "Q and the references drawn again, maps refitted") + ")" + (m <= 3 ? "; dots: the replicates' â." : ".");
  }
  /** A bootstrap arrived (or changed): redraw what depends on it, in place (never mid-drag rebuild). */
  function bootChanged() {
    if (!S.ui || H().mode === "mccann") return;
    S.bootHat = null; S.ui.band = null;
    scheduleRegion();
    if (S.ui.hint) S.ui.hint.textContent = simplexHint();
  }
  function build() {
    const root = document.getElementById("root");
    root.innerHTML = "";
    const h = H();
    const ui = (S.ui = {});
    const top = el("div", { class: "row" }, root);
    const left = el("div", { class: "panel" }, top);
    const right = el("div", { class: "panel readout" }, top);
    if (h.mode === "mccann") {
      el("h4", { text: "t: from Q (t = 0) to " + h.ref_name + " (t = 1)" }, left);
      const line = el("div", {}, left);
      ui.slider = el("input", { type: "range", min: "0", max: "1", step: "0.01", id: "t-slider" }, line);
      ui.play = el("button", { id: "play", text: "▶ Play" }, line);
      ui.slider.value = String(S.t);
      ui.slider.addEventListener("input", (ev) => { S.t = Number(ui.slider.value); request(ev); });
      ui.slider.addEventListener("change", () => sendT());
      ui.play.addEventListener("click", play);
      ui.value = el("div", { class: "big", id: "value" }, right);
      ui.w2 = el("div", { class: "gap", id: "mccann-w2" }, right);
      ui.caption = el("div", { class: "hint" }, right);
    } else {
      el("h4", { text: "Weights a (drag, click or use the arrow keys)" }, left);
      const m = h.m;
      // m > 3: each bar as wide as its reference's name needs (up to 200 px), so names are whole
      const probe = document.createElement("canvas").getContext("2d"); probe.font = "11px sans-serif";
      const barW = Math.min(200, Math.max(70, ...h.names.map((n) => probe.measureText(String(n)).width + 14)));
      const size = m === 3 ? [400, 350] : m === 2 ? [460, 260] : [Math.max(360, 40 + barW * m), 260];
      const simplexRow = el("div", { class: "row", style: "gap: 4px" }, left);
      ui.simplex = el("canvas", { id: "simplex", width: size[0], height: size[1], tabindex: "0" }, simplexRow);
      if (m === 3) ui.colorbar = el("canvas", { id: "colorbar", width: 86, height: size[1] }, simplexRow);
      ui.hint = el("div", { class: "hint", id: "simplex-hint" }, left);
      ui.hint.textContent = simplexHint();
      ui.weights = el("div", { id: "weights" }, right);
      ui.value = el("div", { class: "big", id: "value" }, right);
      ui.gap = el("div", { class: "gap", id: "gap" }, right);
      ui.interval = el("div", { id: "interval" }, right);
      ui.verdict = el("div", { class: "verdict", id: "verdict" }, right);
      ui.ahat = el("div", { class: "hint" }, right);
      ui.ahat.textContent = "â = (" + Array.from(A("a_hat").data).map((x) => fmt(x, 3)).join(", ") +
        ") · W²(P_â, Q) = " + sig(h.w2_hat);
      bindSimplex(ui.simplex);
    }
    const figs = el("div", { class: "row", style: "gap: 6px; margin: 4px 0" }, right);
    el("span", { class: "hint", text: "This view as a figure:" }, figs);
    el("button", { id: "figure-png", text: "⤓ PNG" }, figs).addEventListener("click", () => download("png"));
    el("button", { id: "figure-svg", text: "⤓ SVG" }, figs).addEventListener("click", () => download("svg"));
    el("h4", { text: "Label mass per class (block total = " + (h.mode === "mccann" ? "1 − t | t" : "a_i") + ")" }, right);
    ui.mass = el("canvas", { id: "mass", width: 420, height: 150 }, right);
    if (A("images")) {
      el("h4", { text: (h.mode === "mccann" ? "P^M_t" : "P_a") +
        " of " + h.n_shown + " fixed target samples — caption: top soft label and its mass" }, root);
      const [c, hh, ww] = h.image_shape;
      const bar = el("div", { class: "row", style: "gap: 8px; align-items: center" }, root);
      el("span", { class: "hint", text: "Tile size" }, bar);
      ui.zoom = el("input", { type: "range", min: "1", max: "4", step: "1", id: "zoom", style: "width: 120px" }, bar);
      ui.zoom.value = "1";
      el("span", { class: "hint", text: "· click a tile to inspect it: x, every T_i(x) and " +
        (h.mode === "mccann" ? "P^M_t(x)" : "P_a(x)") + " side by side" }, bar);
      ui.baseScale = Math.max(1, Math.floor(56 / Math.max(hh, ww)));
      ui.samples = el("canvas", { id: "samples" }, root);
      layoutTiles(1);
      ui.zoom.addEventListener("input", () => { layoutTiles(Number(ui.zoom.value)); request(null); fitHeight(); });
      ui.samples.addEventListener("click", (ev) => {
        const r = ui.samples.getBoundingClientRect(), cols = ui.cols;
        const col = Math.floor((ev.clientX - r.left) / ui.tileW), row = Math.floor((ev.clientY - r.top) / ui.tileH);
        const j = row * cols + col;
        if (col >= 0 && col < cols && j >= 0 && j < h.n_shown) { S.inspect = j; request(null); fitHeight(); }
      });
      ui.inspector = el("canvas", { id: "inspector", width: 10, height: 10, style: "display: none" }, root);
      ui.tile = document.createElement("canvas");
      ui.tile.width = ww; ui.tile.height = hh;
    }
    if (h.view === "embedding" || h.view === "scatter") {
      el("h4", { text: h.view === "embedding"
        ? (h.embedding_method || "").toUpperCase() + " of Q and the references (faded) with " +
          (h.mode === "mccann" ? "P^M_t" : "P_a") + " moving (hover a point for its image)"
        : "The datasets: references and Q faded, " + (h.mode === "mccann" ? "P^M_t" : "P_a") + " moving point by point" }, root);
      if (h.view === "scatter" && h.mode !== "mccann") {  // the teaching view's switches
        const bar = el("div", { class: "row", style: "gap: 14px; align-items: center" }, root);
        const toggle = (id, label, on) => {
          const lab = el("label", { class: "hint" }, bar);
          const box = el("input", { type: "checkbox", id: id }, lab);
          box.checked = on; lab.appendChild(document.createTextNode(" " + label));
          box.addEventListener("change", () => { S.teach[id] = box.checked; request(null); });
          S.teach[id] = on;
        };
        S.teach = {};
        toggle("teach-lines", "coupling x → T_i(x) (thinned)", false);
        toggle("teach-maps", "T_i(x) of each reference", false);
        toggle("teach-mixup", "naive mixup (random partners)", false);
      }
      // as wide as the page allows (a projector at 1280 px leaves the iframe ~820 px)
      ui.view = el("canvas", { id: "view", width: Math.max(LEGEND_W + 300, Math.min(820, availableWidth())), height: 460 }, root);
      if (h.view === "scatter" && h.mode !== "mccann") ui.teach = el("div", { class: "hint", id: "teach-caption" }, root);
      setupView();
      ui.view.addEventListener("pointermove", hoverView);
      ui.view.addEventListener("pointerleave", () => { document.getElementById("tip").style.display = "none"; });
    }
    if (h.view === "pending") {  // the embedding comes later, by itself (issue 26)
      el("h4", { text: "Embedding of Q and the references, with " + (h.mode === "mccann" ? "P^M_t" : "P_a") + " moving" }, root);
      ui.pendingNote = el("div", { class: "hint", id: "view-pending" }, root);
      ui.pendingNote.textContent = pendingText();
    }
    fitHeight();
    if (h.mode !== "mccann" && h.m === 3) buildHeatmap();
  }
  function pendingText() {
    return S.embError ? "No embedding view: " + S.embError
      : "The embedding (UMAP, or PCA) is computed in the background: it appears here when ready, no click needed.";
  }
  /** The embedding view's arrays and header keys into the payload (the view is drawn by build). */
  function mergeEmbedding(id, data) {
    const e = decode(data);
    S.embId = id;
    for (const k of ["view", "embedding_method", "axis_titles", "grid_res"]) if (k in e.header) S.P.header[k] = e.header[k];
    Object.assign(S.P.arrays, e.arrays);
  }
  /** The embedding view arrived: add its header fields and arrays to the payload and rebuild
   * (after a drag, never during one). */
  function applyEmbedding() {
    const waiting = S.embWaiting; S.embWaiting = null;
    mergeEmbedding(waiting.id, waiting.data);
    const zoom = S.ui && S.ui.zoom ? S.ui.zoom.value : null;
    S.ui = null;
    build();
    if (zoom && S.ui.zoom && zoom !== "1") { S.ui.zoom.value = zoom; layoutTiles(Number(zoom)); }
    bootChanged();
  }
  /** Ask the server again for the parts still pending (a rerun of the page's fragment). */
  function schedulePoll() {
    clearTimeout(S.pollTimer); S.pollTimer = null;
    if (!S.pendingParts.length) return;
    S.pollTimer = setTimeout(function poll() {
      if (!S.pendingParts.length) return;
      if (S.dragging) { S.pollTimer = setTimeout(poll, POLL_MS); return; }  // after the drag
      S.seq += 1; G.polls += 1;  // a poll is not a value the user sent (G.valuesSent)
      post("streamlit:setComponentValue", { value: { poll: S.pendingParts.slice(0, LIMITS.pollParts), seq: S.seq, id: S.payloadId }, dataType: "json" });
      S.pollTimer = setTimeout(poll, POLL_RETRY_MS);
    }, POLL_MS);
  }

  // ------------------------------------------------------------------ simplex widget
  function triangle() {
    const c = S.ui.simplex, pad = 28;
    const side = Math.min(c.width - 2 * pad, (c.height - 2 * pad) * 2 / Math.sqrt(3));
    const hgt = side * Math.sqrt(3) / 2, cx = c.width / 2, top = (c.height - hgt) / 2 + 4;
    return [[cx, top], [cx - side / 2, top + hgt], [cx + side / 2, top + hgt]];
  }
  function toXY(a) {
    const V = triangle();
    return [a[0] * V[0][0] + a[1] * V[1][0] + a[2] * V[2][0], a[0] * V[0][1] + a[1] * V[1][1] + a[2] * V[2][1]];
  }
  function toBary(x, y) {
    const V = triangle();
    const [x1, y1] = V[0], [x2, y2] = V[1], [x3, y3] = V[2];
    const det = (y2 - y3) * (x1 - x3) + (x3 - x2) * (y1 - y3);
    const l1 = ((y2 - y3) * (x - x3) + (x3 - x2) * (y - y3)) / det;
    const l2 = ((y3 - y1) * (x - x3) + (x1 - x3) * (y - y3)) / det;
    return [l1, l2, 1 - l1 - l2];
  }
  function lineGeom() {
    const c = S.ui.simplex;
    return { x0: 50, x1: c.width - 20, y0: 20, y1: c.height - 40 };
  }
  function barGeom() {
    const c = S.ui.simplex, m = H().m;
    const w = (c.width - 40) / m;
    return { w, x: (i) => 20 + i * w, y0: 24, y1: c.height - 40 };
  }
  function weightsAt(x, y) {
    const m = H().m;
    if (m === 3) return project(toBary(x, y));
    if (m === 2) {
      const g = lineGeom(), t = Math.min(1, Math.max(0, (x - g.x0) / (g.x1 - g.x0)));
      return [1 - t, t];
    }
    const g = barGeom();
    const i = Math.min(m - 1, Math.max(0, Math.floor((x - 20) / g.w)));
    S.activeBar = i;
    const v = Math.min(1, Math.max(0, (g.y1 - y) / (g.y1 - g.y0)));
    return syncWeights(S.pick, i, v);
  }

  function buildHeatmap() {
    const c = S.ui.simplex, W = c.width, Hh = c.height;
    const img = new ImageData(W, Hh);
    const vals = new Float64Array(W * Hh).fill(NaN);
    let lo = Infinity, hi = -Infinity;
    for (let y = 0; y < Hh; y++) for (let x = 0; x < W; x++) {
      const b = toBary(x + 0.5, y + 0.5);
      if (b[0] < -1e-9 || b[1] < -1e-9 || b[2] < -1e-9) continue;
      const v = objective(b);
      vals[y * W + x] = v;
      if (v < lo) lo = v; if (v > hi) hi = v;
    }
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
    const off = document.createElement("canvas");
    off.width = W; off.height = Hh;
    off.getContext("2d").putImageData(img, 0, 0);
    S.ui.heat = off; S.ui.range = [lo, hi]; S.ui.colorArgs = [lo, hi, levels];
    drawColorbar(lo, hi, levels);
    scheduleRegion();
  }

  /** The region as good as â, built in a task of its own just after the frame that asked for
   *  it: ~0.1 s of work that would otherwise hold back the first drawn simplex (issue 26). */
  function scheduleRegion() {
    const ui = S.ui;
    ui.region = null; ui.regionCells = 0;
    clearTimeout(S.regionTimer); S.regionTimer = null;
    if (H().mode === "mccann" || H().m !== 3 || !ui.simplex || !boot() || boot().flat) return;
    S.regionTimer = setTimeout(() => {
      S.regionTimer = null;
      if (S.ui !== ui) return;  // rebuilt since: the new one asked for its own
      ui.region = buildRegion(ui.simplex.width, ui.simplex.height);
      request(null);
    }, 0);
  }

  /** The heatmap's colour scale: W²(P_a, Q) from lo (dark) to hi, with the contour levels. */
  function drawColorbar(lo, hi, levels, into) {
    const c = S.ui.colorbar; if (!c) return;
    const ctx = into || c.getContext("2d"), V = triangle(), top = V[0][1], bottom = V[1][1], x0 = 4, w = 14;
    ctx.clearRect(0, 0, c.width, c.height);
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
    ctx.save(); ctx.translate(c.width - 4, (top + bottom) / 2); ctx.rotate(-Math.PI / 2); ctx.textAlign = "center";
    ctx.fillText("W²(P_a, Q) · " + levels + " levels", 0, 0); ctx.restore();
  }

  /** The region as good as â on a 4-px lattice: a light fill and a dotted white outline. */
  function buildRegion(W, Hh) {
    const step = 4, nx = Math.ceil(W / step), ny = Math.ceil(Hh / step);
    const mask = new Int8Array(nx * ny).fill(-1);  // -1 outside the triangle, 0 worse, 1 as good
    for (let j = 0; j < ny; j++) for (let i = 0; i < nx; i++) {
      const b = toBary(i * step + step / 2, j * step + step / 2);
      if (b[0] < 0 || b[1] < 0 || b[2] < 0) continue;
      mask[j * nx + i] = asGood(b) ? 1 : 0;
    }
    const off = document.createElement("canvas");
    off.width = W; off.height = Hh;
    const ctx = off.getContext("2d");
    for (let j = 0; j < ny; j++) for (let i = 0; i < nx; i++) {
      if (mask[j * nx + i] !== 1) continue;
      ctx.fillStyle = "rgba(255,255,255,0.16)"; ctx.fillRect(i * step, j * step, step, step);
      const worse = [[1, 0], [-1, 0], [0, 1], [0, -1]].some(([di, dj]) => {
        const ii = i + di, jj = j + dj;
        return ii >= 0 && jj >= 0 && ii < nx && jj < ny && mask[jj * nx + ii] === 0;
      });
      if (worse) { ctx.fillStyle = "rgba(255,255,255,0.95)"; ctx.fillRect(i * step + 1, j * step + 1, 2, 2); }
    }
    S.ui.regionCells = mask.reduce((n, v) => n + (v === 1 ? 1 : 0), 0);
    return off;
  }
  function drawCloud(ctx, xy) {
    if (!boot()) return;
    const C = BA("boot_a_hat");
    const m = C.shape[1];
    ctx.fillStyle = "rgba(255,255,255,0.55)";
    for (let b = 0; b < C.shape[0]; b++) {
      const a = Array.from(C.data.subarray(b * m, (b + 1) * m));
      const [x, y] = xy(a);
      ctx.fillRect(x - 1.5, y - 1.5, 3, 3);
    }
  }

  function star(ctx, x, y, r, fill) {
    ctx.beginPath();
    for (let k = 0; k < 10; k++) {
      const rr = k % 2 ? r * 0.45 : r, ang = -Math.PI / 2 + k * Math.PI / 5;
      ctx.lineTo(x + rr * Math.cos(ang), y + rr * Math.sin(ang));
    }
    ctx.closePath(); ctx.fillStyle = fill; ctx.fill(); ctx.strokeStyle = "#000"; ctx.lineWidth = 1; ctx.stroke();
  }
  function dot(ctx, x, y, r, fill) {
    ctx.beginPath(); ctx.arc(x, y, r, 0, 2 * Math.PI); ctx.fillStyle = fill; ctx.fill();
    ctx.strokeStyle = "#000"; ctx.lineWidth = 2; ctx.stroke();
  }

  function drawSimplex(into) {
    const c = S.ui.simplex, ctx = into || c.getContext("2d"), h = H(), m = h.m, names = h.names;
    const ahat = Array.from(A("a_hat").data);
    ctx.clearRect(0, 0, c.width, c.height);
    ctx.font = "12px sans-serif"; ctx.fillStyle = "#262730";
    if (m === 3) {
      ctx.drawImage(S.ui.heat, 0, 0);
      const V = triangle();
      ctx.beginPath(); ctx.moveTo(...V[0]); ctx.lineTo(...V[1]); ctx.lineTo(...V[2]); ctx.closePath();
      ctx.strokeStyle = "#444"; ctx.lineWidth = 1; ctx.stroke();
      ctx.textAlign = "center";
      ctx.fillText("P1 · " + names[0], V[0][0], V[0][1] - 8);
      ctx.textAlign = "left"; ctx.fillText("P2 · " + names[1], 2, V[1][1] + 18);
      ctx.textAlign = "right"; ctx.fillText("P3 · " + names[2], c.width - 2, V[2][1] + 18);
      if (S.ui.region) ctx.drawImage(S.ui.region, 0, 0);
      if (boot()) drawCloud(ctx, toXY);
      const [sx, sy] = toXY(ahat);
      if (S.hover) { const [hx, hy] = toXY(S.hover); ctx.beginPath(); ctx.arc(hx, hy, 4, 0, 7); ctx.strokeStyle = "#fff"; ctx.stroke(); }
      const [px, py] = toXY(S.pick);
      if (Math.hypot(px - sx, py - sy) < 12) {  // the pick at â: a ring around the star, both seen
        ctx.beginPath(); ctx.arc(sx, sy, 13, 0, 2 * Math.PI); ctx.strokeStyle = "#ff4b4b"; ctx.lineWidth = 3; ctx.stroke(); ctx.lineWidth = 1;
        star(ctx, sx, sy, 9, "#fff");
      } else { star(ctx, sx, sy, 9, "#fff"); dot(ctx, px, py, 6, "#ff4b4b"); }
    } else if (m === 2) {
      const g = lineGeom(), n = 200, vals = [];
      let lo = Infinity, hi = -Infinity;
      for (let k = 0; k <= n; k++) { const v = objective([1 - k / n, k / n]); vals.push(v); lo = Math.min(lo, v); hi = Math.max(hi, v); }
      let band = null;
      if (boot()) {
        if (!S.ui.band) S.ui.band = vals.map((_, k) => { const a = [1 - k / n, k / n]; return [...percentile(repObjectives(a)), asGood(a)]; });
        band = S.ui.band;
        band.forEach((q) => { lo = Math.min(lo, q[0]); hi = Math.max(hi, q[1]); });
      }
      const Y = (v) => g.y1 - (v - lo) / (hi - lo || 1) * (g.y1 - g.y0);
      const X = (t) => g.x0 + t * (g.x1 - g.x0);
      if (band) {
        ctx.fillStyle = "rgba(99,110,250,0.18)"; ctx.beginPath();
        band.forEach((q, k) => (k ? ctx.lineTo(X(k / n), Y(q[1])) : ctx.moveTo(X(0), Y(q[1]))));
        for (let k = n; k >= 0; k--) ctx.lineTo(X(k / n), Y(band[k][0]));
        ctx.closePath(); ctx.fill();
        if (!boot().flat) {
          ctx.fillStyle = "rgba(0,153,0,0.55)";
          band.forEach((q, k) => { if (q[2]) ctx.fillRect(X(k / n) - 1.2, g.y1 - 3, 2.4, 6); });
        }
        const C = BA("boot_a_hat");
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
      ctx.textAlign = "left"; ctx.fillText("P1 · " + names[0], g.x0 - 30, g.y1 + 18);
      ctx.textAlign = "right"; ctx.fillText("P2 · " + names[1], g.x1, g.y1 + 18);
      ctx.textAlign = "center"; ctx.fillText("t = a2", (g.x0 + g.x1) / 2, g.y1 + 30);
      star(ctx, X(ahat[1]), Y(objective(ahat)), 9, "#fff");
      dot(ctx, X(S.pick[1]), Y(objective(S.pick)), 6, "#ff4b4b");
    } else {
      const g = barGeom();
      for (let i = 0; i < m; i++) {
        const x = g.x(i) + 8, w = g.w - 16, v = S.pick[i];
        ctx.fillStyle = "#eee"; ctx.fillRect(x, g.y0, w, g.y1 - g.y0);
        ctx.fillStyle = SET_COLORS[i % SET_COLORS.length];  // its own colour, always
        ctx.fillRect(x, g.y1 - v * (g.y1 - g.y0), w, v * (g.y1 - g.y0));
        if (S.activeBar === i) {  // the keyboard's bar: a thick outline, not another colour
          ctx.strokeStyle = "#262730"; ctx.lineWidth = 3; ctx.strokeRect(x - 2, g.y0 - 2, w + 4, g.y1 - g.y0 + 4); ctx.lineWidth = 1;
        }
        ctx.strokeStyle = "#000"; ctx.setLineDash([4, 3]); ctx.beginPath();
        const yh = g.y1 - ahat[i] * (g.y1 - g.y0); ctx.moveTo(x - 3, yh); ctx.lineTo(x + w + 3, yh); ctx.stroke(); ctx.setLineDash([]);
        if (boot()) {  // whiskers: â_i's interval
          const ylo = g.y1 - BA("boot_a_low").data[i] * (g.y1 - g.y0), yhi = g.y1 - BA("boot_a_high").data[i] * (g.y1 - g.y0);
          const xc = x + w / 2;
          ctx.strokeStyle = "#262730"; ctx.lineWidth = 1.5; ctx.beginPath();
          ctx.moveTo(xc, ylo); ctx.lineTo(xc, yhi); ctx.moveTo(xc - 6, ylo); ctx.lineTo(xc + 6, ylo);
          ctx.moveTo(xc - 6, yhi); ctx.lineTo(xc + 6, yhi); ctx.stroke(); ctx.lineWidth = 1;
        }
        ctx.fillStyle = "#262730"; ctx.textAlign = "center";
        ctx.fillText(fmt(v, 3), x + w / 2, g.y0 - 6);
        ctx.fillText("P" + (i + 1), x + w / 2, g.y1 + 16);
        fitText(ctx, String(names[i]), x + w / 2, g.y1 + 30, g.w - 4, 11);
      }
    }
  }

  function bindSimplex(c) {
    const pos = (ev) => { const r = c.getBoundingClientRect(); return [ev.clientX - r.left, ev.clientY - r.top]; };
    c.addEventListener("pointerdown", (ev) => {
      S.dragging = true; S.hover = null; c.setPointerCapture(ev.pointerId); c.focus();
      S.pick = weightsAt(...pos(ev)); request(ev);
    });
    c.addEventListener("pointermove", (ev) => {
      if (S.dragging) S.pick = weightsAt(...pos(ev));
      else if (H().m === 3) { const b = toBary(...pos(ev)); S.hover = b.every((x) => x >= 0) ? b : null; }
      else return;
      request(ev);
    });
    const release = (ev) => {
      if (!S.dragging) return;
      S.dragging = false; S.activeBar = undefined;
      S.pick = weightsAt(...pos(ev)); S.activeBar = undefined;
      sendWeights();
      if (S.embWaiting) { applyEmbedding(); request(null); }
    };
    c.addEventListener("pointerup", release);
    c.addEventListener("pointercancel", release);
    c.addEventListener("pointerleave", () => { if (S.hover) { S.hover = null; request(null); } });
    c.addEventListener("keydown", (ev) => {
      const m = H().m, step = ev.shiftKey ? 0.1 : 0.02;
      let a = S.pick.slice();
      if (m === 3) {
        const [x, y] = toXY(a), V = triangle(), side = V[2][0] - V[1][0];
        const d = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, -1], ArrowDown: [0, 1] }[ev.key];
        if (!d) return;
        a = project(toBary(x + d[0] * step * side, y + d[1] * step * side));
      } else if (m === 2) {
        const dt = { ArrowLeft: -step, ArrowDown: -step, ArrowRight: step, ArrowUp: step }[ev.key];
        if (dt === undefined) return;
        const t = Math.min(1, Math.max(0, a[1] + dt)); a = [1 - t, t];
      } else {
        S.activeBar = S.activeBar === undefined ? 0 : S.activeBar;
        if (ev.key === "ArrowLeft") S.activeBar = (S.activeBar + m - 1) % m;
        else if (ev.key === "ArrowRight") S.activeBar = (S.activeBar + 1) % m;
        else if (ev.key === "ArrowUp" || ev.key === "ArrowDown") {
          const i = S.activeBar; a = syncWeights(a, i, a[i] + (ev.key === "ArrowUp" ? step : -step));
        } else return;
      }
      ev.preventDefault();
      S.pick = roundToSimplex(a, H().weight_decimals); S.keyMoved = true; request(ev);
    });
    c.addEventListener("keyup", (ev) => {
      if (S.keyMoved && ev.key.startsWith("Arrow")) { S.keyMoved = false; sendWeights(); }
    });
  }

  function sendWeights() {
    S.pick = roundToSimplex(S.pick, H().weight_decimals);
    S.sentPick = S.pick.slice();
    S.seq += 1;
    request(null);
    setValue({ weights: S.pick, seq: S.seq, id: S.payloadId });
  }
  function sendT() {
    S.t = Math.round(S.t * 100) / 100;
    S.seq += 1;
    request(null);
    setValue({ t: S.t, seq: S.seq, id: S.payloadId });
  }

  // ------------------------------------------------------------------ drawing per frame
  function request(ev) {
    if (ev && ev.timeStamp !== undefined && (ev.type === "pointermove" || ev.type === "input")) S.pending.push(ev.timeStamp);
    if (S.rafQueued) return;
    S.rafQueued = true;
    requestAnimationFrame(() => {
      S.rafQueued = false;
      draw();
      const now = performance.now();
      for (const ts of S.pending) G.frameTimes.push(now - ts);
      S.pending = [];
    });
  }

  function currentCoef() {
    return H().mode === "mccann" ? [1 - S.t, S.t] : S.pick;
  }

  function draw() {
    const h = H(), ui = S.ui;
    if (h.mode === "mccann") {
      ui.slider.value = String(S.t);
      ui.value.textContent = "t = " + fmt(S.t, 2);
      // McCann's path is the generalized geodesic of {Q (T = Id), P_i}: eq. (ds_eq) at
      // a = (1 − t, t) with W_Q = 0 and W_{Q,i} = W_i gives t W_i − (1 − t) t W_i = t² W_i
      const wi = A("w_to_target").data[h.ref], w2 = S.t * S.t * wi;
      ui.w2.textContent = "W²(P^M_t, Q) = t² · W_" + (h.ref + 1) + " = " + sig(w2);
      ui.w2.setAttribute("data-value", String(w2));
      ui.caption.textContent = "P^M_t = ((1 − t) Id + t T_" + (h.ref + 1) + ")#Q; W_" + (h.ref + 1) + " = W²(P_" + (h.ref + 1) +
        ", Q) = " + sig(wi) + " (paper Def. 2); the server hears t on release.";
    } else {
      drawSimplex();
      const v = objective(S.pick), gap = v - h.w2_hat;
      ui.weights.textContent = "a = (" + S.pick.map((x) => fmt(x, h.weight_decimals)).join(", ") + ")";
      ui.value.textContent = "W²(P_a, Q) = " + sig(v);
      ui.value.setAttribute("data-value", String(v));
      const ahatShown = roundToSimplex(Array.from(A("a_hat").data), h.weight_decimals);
      if (S.pick.every((x, i) => Math.abs(x - ahatShown[i]) < 1e-12)) {
        ui.gap.textContent = "at â (its weights rounded to " + h.weight_decimals + " decimals)";  // not a red "+4.5e-7"
        ui.gap.className = "gap down";
      } else {
        ui.gap.textContent = (gap >= 0 ? "+" : "") + Number(gap).toPrecision(3) + " vs â";
        ui.gap.className = "gap " + (gap > 1e-12 ? "up" : "down");
      }
      if (!boot()) { ui.interval.textContent = ""; ui.verdict.textContent = ""; ui.verdict.removeAttribute("data-distinguishable"); }
      else {
        const bt = boot(), r = bootReadout(S.pick), pct = Math.round(100 * bt.level) + "%";
        ui.interval.textContent = pct + " interval [" + sig(r.value[0]) + ", " + sig(r.value[1]) + "] · gap to â [" +
          Number(r.gap[0]).toPrecision(3) + ", " + Number(r.gap[1]).toPrecision(3) + "] (" + bt.method + ", B = " + bt.replicates + ")";
        const good = bt.flat || r.good;
        ui.verdict.textContent = bt.flat ? "identical references: every a is as good as â"
          : good ? "as good as â at this sample size" : "distinguishable from â: worse beyond the sampling noise";
        ui.verdict.className = "verdict " + (good ? "same" : "worse");
        ui.verdict.setAttribute("data-distinguishable", String(!good));
      }
      if (S.hover) ui.ahat.dataset.hover = "";
    }
    drawMass();
    if (ui.samples) drawSamples();
    if (ui.view) drawView();
  }

  function topLabel(j) {
    const h = H(), soft = A("soft");
    if (h.mode === "mccann") {
      const C = soft.shape[1], t = S.t;
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
        const v = S.pick[i] * soft.data[(i * Sn + j) * C + c];
        if (v > best) { best = v; name = h.names[i] + "/" + names[c]; }
      }
    }
    return [name, best];
  }

  function drawSamples(into) {
    const h = H(), ui = S.ui, ctx = into || ui.samples.getContext("2d");
    const [ch, hh, ww] = h.image_shape, D = ch * hh * ww;
    const px = mixAll(h.mode === "mccann" ? S.t : S.pick);
    G.lastMix = px;
    const tctx = ui.tile.getContext("2d"), img = tctx.createImageData(ww, hh);
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, ui.samples.width, ui.samples.height);
    ctx.imageSmoothingEnabled = false;
    ctx.font = "10px sans-serif"; ctx.textAlign = "center";
    for (let j = 0; j < h.n_shown; j++) {
      fillImage(img, px, j * D, ch, hh, ww);
      tctx.putImageData(img, 0, 0);
      const col = j % ui.cols, row = Math.floor(j / ui.cols);
      const x = col * ui.tileW + (ui.tileW - ww * ui.scale) / 2, y = row * ui.tileH + 2;
      ctx.drawImage(ui.tile, x, y, ww * ui.scale, hh * ui.scale);
      const [name, v] = topLabel(j);
      ctx.fillStyle = "#262730";
      const cut = name.indexOf("/"), xc = x + ww * ui.scale / 2, yc = y + hh * ui.scale + 12;
      fitText(ctx, name.slice(0, cut), xc, yc, ui.tileW - 4, 10);
      fitText(ctx, name.slice(cut + 1) + " " + mass2(v), xc, yc + 11, ui.tileW - 4, 10);
      if (S.inspect === j) { ctx.strokeStyle = "#ff4b4b"; ctx.lineWidth = 2; ctx.strokeRect(x - 2, y - 2, ww * ui.scale + 4, hh * ui.scale + 4); ctx.lineWidth = 1; }
    }
    if (!into) drawInspector();
  }
  /** Width the explorer's canvases may use: the frame's, less the root's padding. */
  function availableWidth() { return Math.max(320, document.documentElement.clientWidth - 12); }

  /** Tiles at ``zoom`` x the default size; 10 per row at 1x, fewer when larger. */
  function layoutTiles(zoom) {
    const h = H(), ui = S.ui, [, hh, ww] = h.image_shape;
    ui.scale = ui.baseScale * zoom;
    ui.tileW = Math.max(ww * ui.scale + 30, 92); ui.tileH = hh * ui.scale + 34;
    ui.cols = Math.max(1, Math.min(10, Math.floor(Math.min(1000, availableWidth()) / ui.tileW)));
    ui.samples.width = ui.cols * ui.tileW; ui.samples.height = Math.ceil(h.n_shown / ui.cols) * ui.tileH;
  }

  /** The inspected sample large: x, T_1(x) .. T_m(x) and the mix, each with its top label. */
  function drawInspector() {
    const h = H(), ui = S.ui, j = S.inspect, c = ui.inspector;
    if (j === undefined || j === null) return;
    const [ch, hh, ww] = h.image_shape, D = ch * hh * ww, im = A("images"), Sn = im.shape[1];
    const big = Math.max(2, Math.floor(120 / Math.max(hh, ww))), W = ww * big, cellW = Math.max(W + 16, 130);
    const mccann = h.mode === "mccann", m = mccann ? 1 : h.m;
    const panels = m + 2;
    c.style.display = "block"; c.width = panels * cellW; c.height = hh * big + 58;
    const ctx = c.getContext("2d");
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, c.width, c.height);
    ctx.imageSmoothingEnabled = false;
    const tctx = ui.tile.getContext("2d"), img = tctx.createImageData(ww, hh);
    const coef = mccann ? [1 - S.t, S.t] : S.pick;
    const rows = [];  // [pixels, offset, title, caption]
    const qClass = (mccann ? h.class_names[0] : h.target_classes)[h.sample_label[j]];
    rows.push([im.data, j * D, "x (target sample #" + h.sample_index[j] + ")", "Q: " + qClass]);
    const soft = A("soft");
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
    const mixed = mixRows(coef, mccann ? 0 : 1, h.n_shown);
    const [name, v] = topLabel(j);
    rows.push([mixed, j * D, (mccann ? "P^M_t(x), t = " + fmt(S.t, 2) : "P_a(x), a = (" + S.pick.map((x) => fmt(x, 2)).join(", ") + ")"),
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
    fitText(ctx, "inspecting tile " + (j + 1) + " · its mass is the top soft label's", c.width / 2, c.height - 8, c.width - 8, 10);
  }

  function fillImage(img, px, off, ch, hh, ww) {
    const n = hh * ww, d = img.data;
    for (let k = 0; k < n; k++) {
      if (ch === 3) { d[4 * k] = px[off + k]; d[4 * k + 1] = px[off + n + k]; d[4 * k + 2] = px[off + 2 * n + k]; }
      else if (ch === 1) { d[4 * k] = d[4 * k + 1] = d[4 * k + 2] = px[off + k]; }
      else { let s = 0; for (let c = 0; c < ch; c++) s += px[off + c * n + k]; d[4 * k] = d[4 * k + 1] = d[4 * k + 2] = s / ch; }
      d[4 * k + 3] = 255;
    }
  }

  function drawMass(into) {
    const h = H(), c = S.ui.mass, ctx = into || c.getContext("2d");
    ctx.clearRect(0, 0, c.width, c.height);
    const blocks = [];
    if (h.mode === "mccann") {
      blocks.push({ name: h.target_name, w: 1 - S.t, vals: Array.from(A("target_mass").data) });
      blocks.push({ name: h.ref_name, w: S.t, vals: Array.from(A("mass").data) });
    } else {
      const mass = A("mass"), C = mass.shape[1];
      for (let i = 0; i < h.m; i++) {
        blocks.push({ name: h.names[i], w: S.pick[i], vals: Array.from(mass.data.slice(i * C, i * C + h.class_names[i].length)) });
      }
    }
    const total = blocks.reduce((p, b) => p + b.vals.length, 0) + blocks.length - 1;
    // scale: the largest class mass any weights can give (a block at weight 1)
    const top = Math.max(1e-12, ...blocks.flatMap((b) => b.vals));
    const bw = (c.width - 10) / total, y1 = c.height - 28, y0 = 14;
    let x = 5;
    ctx.font = "11px sans-serif"; ctx.textAlign = "center";
    blocks.forEach((b, i) => {
      const x0 = x;
      ctx.fillStyle = SET_COLORS[(h.mode === "mccann" ? (i === 0 ? 5 : h.ref) : i) % SET_COLORS.length];
      for (const v of b.vals) {
        const hgt = b.w * v / top * (y1 - y0);
        ctx.fillRect(x + 1, y1 - hgt, Math.max(1, bw - 2), hgt);
        x += bw;
      }
      ctx.fillStyle = "#262730";
      fitText(ctx, b.name + " · " + fmt(b.w, 2), (x0 + x) / 2, y1 + 16, x - x0 - 2, 11);
      x += bw;
    });
    ctx.strokeStyle = "#999"; ctx.beginPath(); ctx.moveTo(0, y1); ctx.lineTo(c.width, y1); ctx.stroke();
  }

  // ------------------------------------------------------------------ embedding / scatter
  function setupView() {
    const h = H(), pts = [];
    const push = (arr) => { for (let k = 0; k + 1 < arr.data.length; k += arr.shape[arr.shape.length - 1]) pts.push([arr.data[k], arr.data[k + 1]]); };
    if (h.view === "embedding") { push(A("bg")); push(A("place")); }
    else { push(A("ref_coords")); push(A("coords")); }
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const [x, y] of pts) { x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y); }
    // the legends get their own column on the right, so no point hides them (issue 26, item 5)
    const c = S.ui.view, pad = 20, plotW = c.width - LEGEND_W;
    const sx = (plotW - 2 * pad) / (x1 - x0 || 1), sy = (c.height - 2 * pad) / (y1 - y0 || 1);
    S.ui.X = (x) => pad + (x - x0) * sx;
    S.ui.Y = (y) => c.height - pad - (y - y0) * sy;
    // the faded background, drawn once
    const off = document.createElement("canvas");
    off.width = c.width; off.height = c.height;
    const ctx = off.getContext("2d");
    ctx.globalAlpha = 0.18;
    const bg = h.view === "embedding" ? A("bg") : A("ref_coords"), set = h.view === "embedding" ? A("bg_set") : A("ref_set");
    const d = bg.shape[1];
    for (let k = 0; k < bg.shape[0]; k++) {
      const s = set.data[k];
      ctx.fillStyle = h.view === "embedding" ? (s === 0 ? "#000" : SET_COLORS[(s - 1) % SET_COLORS.length])
                                               : SET_COLORS[(h.mode === "mccann" ? h.ref : s) % SET_COLORS.length];
      ctx.fillRect(S.ui.X(bg.data[k * d]) - 2, S.ui.Y(bg.data[k * d + 1]) - 2, 4, 4);
    }
    if (h.view === "scatter") {  // Q itself, faded
      const co = A("coords"), n = co.shape[1], dd = co.shape[2];
      ctx.fillStyle = "#000";
      for (let k = 0; k < n; k++) ctx.fillRect(S.ui.X(co.data[k * dd]) - 1.5, S.ui.Y(co.data[k * dd + 1]) - 1.5, 3, 3);
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
    let y = 40 + 16 * legend.length;
    ctx.font = "bold 12px sans-serif"; ctx.textAlign = "left";
    ctx.fillText((h.mode === "mccann" ? "P^M_t" : "P_a") + " by Q's class", lx, y); ctx.font = "12px sans-serif";
    classes.slice(0, 20).forEach((name, k) => {
      const yy = y + 8 + 15 * k;
      ctx.beginPath(); ctx.arc(lx + 5, yy + 5, 4, 0, 2 * Math.PI); ctx.fillStyle = PALETTE[k % PALETTE.length]; ctx.fill();
      ctx.strokeStyle = "#000"; ctx.lineWidth = 0.8; ctx.stroke();
      ctx.fillStyle = "#262730"; fitText(ctx, String(name), lx + 14, yy + 9, lw - 14, 11);
    });
    ctx.textAlign = "left";
    S.ui.bg = off;
    if (h.view === "embedding") {
      const grid = A("grid"), K = grid.shape[0], m = grid.shape[1];
      S.ui.node = new Map();
      for (let k = 0; k < K; k++) S.ui.node.set(Array.from(grid.data.slice(k * m, k * m + m)).join(","), k);
    }
  }

  /** Barycentric (Kuhn) interpolation weights over the simplex grid of resolution r:
   * returns [[node index, weight], ...] with the weights summing to 1. */
  function gridWeights(a) {
    const r = H().grid_res, m = a.length;
    const c = [], acc = [0];
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
      return S.ui.node.get(comp.join(","));
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

  function viewPoints() {
    const h = H(), out = [];
    if (h.view === "embedding") {
      const pl = A("place"), P = pl.shape[1], ws = gridWeights(currentCoef());
      for (let p = 0; p < P; p++) {
        let x = 0, y = 0;
        for (const [k, w] of ws) { x += w * pl.data[(k * P + p) * 2]; y += w * pl.data[(k * P + p) * 2 + 1]; }
        out.push([x, y, h.sample_label[p], p]);
      }
    } else {
      const co = A("coords"), n = co.shape[1], d = co.shape[2], coef = currentCoef(), lab = A("labels").data;
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

  /** Teaching view (2-D/3-D data): lines x -> T_i(x), the T_i(x), the naive mixup. */
  function drawTeaching(ctx) {
    const h = H(), ui = S.ui, T = S.teach;
    if (!T || h.view !== "scatter" || h.mode === "mccann") return;
    const co = A("coords"), n = co.shape[1], d = co.shape[2], m = h.m;
    const at = (row, p) => [ui.X(co.data[(row * n + p) * d]), ui.Y(co.data[(row * n + p) * d + 1])];
    const step = Math.max(1, Math.ceil(n / 60));  // at most 60 points' lines
    if (T["teach-lines"]) {
      ctx.lineWidth = 1;
      for (let p = 0; p < n; p += step) {
        const [x0, y0] = at(0, p);
        for (let i = 0; i < m; i++) {
          if (S.pick[i] <= 0) continue;
          const [x1, y1] = at(i + 1, p);
          ctx.strokeStyle = SET_COLORS[i % SET_COLORS.length]; ctx.globalAlpha = 0.25 + 0.6 * S.pick[i];
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
      const mx = A("mixup_coords"), lab = A("labels").data;
      for (let p = 0; p < n; p++) {
        let x = 0, y = 0;
        for (let i = 0; i < m; i++) { x += S.pick[i] * mx.data[(i * n + p) * d]; y += S.pick[i] * mx.data[(i * n + p) * d + 1]; }
        ctx.beginPath(); ctx.arc(ui.X(x), ui.Y(y), 3.5, 0, 2 * Math.PI);
        ctx.strokeStyle = PALETTE[lab[p] % PALETTE.length]; ctx.lineWidth = 1.6; ctx.stroke();
      }
      ctx.lineWidth = 1;
    }
  }
  /** What the teaching view shows at the current weights, in words. */
  function teachingCaption() {
    const h = H(), T = S.teach || {}, a = S.pick;
    const parts = a.map((w, i) => Math.round(100 * w) + "% of the way to T" + (i + 1) + "(x) in " + h.names[i]);
    let text = "Each filled dot is a target sample x moved to Σ a_i T_i(x): " + parts.join(", ") +
      ". Its colour is x's class in Q.";
    if (T["teach-lines"]) text += " Lines join x to its images T_i(x) (one point in " + Math.max(1, Math.ceil(A("coords").shape[1] / 60)) + "), darker for larger a_i.";
    if (T["teach-maps"]) text += " Squares are the T_i(x), coloured by reference.";
    if (T["teach-mixup"]) text += " Rings are naive mixup at the same a: random partners instead of T_i(x), so a class no longer stays together.";
    return text;
  }

  function drawView(into) {
    const ui = S.ui, c = ui.view, ctx = into || c.getContext("2d");
    ctx.clearRect(0, 0, c.width, c.height);
    ctx.drawImage(ui.bg, 0, 0);
    drawTeaching(ctx);
    if (ui.teach) ui.teach.textContent = teachingCaption();
    const pts = (ui.points = viewPoints());
    for (const [x, y, lab] of pts) {
      ctx.beginPath(); ctx.arc(ui.X(x), ui.Y(y), 3.5, 0, 2 * Math.PI);
      ctx.fillStyle = PALETTE[lab % PALETTE.length]; ctx.fill();
      ctx.strokeStyle = "#000"; ctx.lineWidth = 0.8; ctx.stroke();
    }
  }

  function hoverView(ev) {
    const ui = S.ui, tip = document.getElementById("tip"), h = H();
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
    if (A("images") && h.view === "embedding") {
      const [ch, hh, ww] = h.image_shape, D = ch * hh * ww, im = A("images"), Sn = im.shape[1];
      const acc = new Uint8ClampedArray(D);
      const tmp = new Float32Array(D);
      const off = h.mode === "mccann" ? 0 : 1;
      currentCoef().forEach((a, i) => { const base = ((i + off) * Sn + idx) * D; for (let k = 0; k < D; k++) tmp[k] += a * im.data[base + k]; });
      for (let k = 0; k < D; k++) acc[k] = Math.round(tmp[k]);
      const cv = el("canvas", { width: ww, height: hh }, tip);
      cv.style.width = 3 * ww + "px"; cv.style.imageRendering = "pixelated";
      const cx = cv.getContext("2d"), img = cx.createImageData(ww, hh);
      fillImage(img, acc, 0, ch, hh, ww); cx.putImageData(img, 0, 0);
    } else {
      el("div", { text: "(" + fmt(best[0], 2) + ", " + fmt(best[1], 2) + ")" }, tip);
    }
    tip.style.left = Math.min(ev.clientX + 12, window.innerWidth - 120) + "px";
    tip.style.top = ev.clientY + 12 + "px";
    tip.style.display = "block";
  }

  // ------------------------------------------------------------------ McCann play
  function play() {
    const dur = 2000, start = performance.now();
    let frames = 0;
    S.playing = true;
    const step = (now) => {
      const f = Math.min(1, (now - start) / dur);
      S.t = f; draw(); frames += 1; G.playFrames += 1;
      if (f < 1) requestAnimationFrame(step);
      else { S.playing = false; G.playFps = frames / ((performance.now() - start) / 1000); sendT(); }
    };
    requestAnimationFrame(step);
  }


  // ------------------------------------------------------------------ figures out (PNG, SVG)
  /** A recording 2-D context that writes SVG: the subset of CanvasRenderingContext2D the
   * explorer draws with, so a figure comes from the page's own drawing code (issue 26).
   * Raster layers the page keeps off-screen (heatmap, region, faded background, tiles) are
   * embedded as PNG images; marks, lines and text are vectors. */
  class SvgContext {
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
  function figureParts() {
    const ui = S.ui, h = H(), parts = [], pad = 16;
    let y = 34, x = pad;
    const lines = [];
    if (ui.simplex) {
      parts.push({ canvas: ui.simplex, draw: (ctx) => drawSimplex(ctx), x, y });
      x += ui.simplex.width;
      if (ui.colorbar && ui.colorArgs) { parts.push({ canvas: ui.colorbar, draw: (ctx) => drawColorbar(...ui.colorArgs, ctx), x, y }); x += ui.colorbar.width; }
      lines.push(ui.weights.textContent, ui.value.textContent, ui.gap.textContent);
      if (ui.interval && ui.interval.textContent) lines.push(ui.interval.textContent, ui.verdict.textContent);
    } else {
      lines.push(ui.value.textContent);
    }
    const textX = x + 24, massY = y + 18 * lines.length + 16;
    parts.push({ canvas: ui.mass, draw: (ctx) => drawMass(ctx), x: textX, y: massY });
    let bottom = Math.max(ui.simplex ? y + ui.simplex.height : 0, massY + ui.mass.height) + 20;
    const probe = document.createElement("canvas").getContext("2d"); probe.font = "13px sans-serif";
    const textW = Math.max(0, ...lines.map((line) => probe.measureText(line).width));
    let right = Math.max(x, textX + ui.mass.width, textX + textW);
    if (ui.samples) { parts.push({ canvas: ui.samples, draw: (ctx) => drawSamples(ctx), x: pad, y: bottom }); bottom += ui.samples.height + 20; right = Math.max(right, pad + ui.samples.width); }
    if (ui.view) { parts.push({ canvas: ui.view, draw: (ctx) => drawView(ctx), x: pad, y: bottom }); bottom += ui.view.height + 20; right = Math.max(right, pad + ui.view.width); }
    const title = "geoviz · " + (h.mode === "mccann" ? "McCann: Q → " + h.ref_name : "P_a on the generalized geodesic of " + h.names.join(", ")) + " (target " + (h.target_name || "Q") + ")";
    return { parts, lines, textX, textY: y + 14, title, width: Math.ceil(right + pad), height: Math.ceil(bottom) };
  }
  function paintFigure(ctx, f, vector) {
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, f.width, f.height);
    ctx.fillStyle = "#262730"; ctx.font = "bold 14px sans-serif"; ctx.textAlign = "left";
    ctx.fillText(f.title, 16, 20);
    ctx.font = "13px sans-serif";
    f.lines.forEach((line, k) => ctx.fillText(line, f.textX, f.textY + 18 * k));
    for (const part of f.parts) {
      if (vector) { ctx.save(); ctx.translate(part.x, part.y); part.draw(ctx); ctx.restore(); }
      else ctx.drawImage(part.canvas, part.x, part.y);
    }
  }
  /** The explorer's current view as "svg" (text) or "png" (a data URL). */
  function figure(kind) {
    const f = figureParts();
    if (kind === "svg") { const ctx = new SvgContext(f.width, f.height); paintFigure(ctx, f, true); return ctx.toString(); }
    const c = document.createElement("canvas"); c.width = f.width; c.height = f.height;
    paintFigure(c.getContext("2d"), f, false);
    return c.toDataURL("image/png");
  }
  function download(kind) {
    const data = figure(kind);
    const a = document.createElement("a");
    a.download = "geoviz-" + (H().mode === "mccann" ? "mccann" : "geodesic") + "." + kind;
    a.href = kind === "svg" ? URL.createObjectURL(new Blob([data], { type: "image/svg+xml" })) : data;
    document.body.appendChild(a); a.click(); a.remove();
  }

  // ------------------------------------------------------------------ render
  function onRender(args) {
    G.renders += 1;
    if (args.payload_id !== S.payloadId) {
      S.P = decode(args.payload);
      S.payloadId = args.payload_id;
      S.bootHat = null; S.B = null; S.bootId = null; S.inspect = null;
      S.embId = null; S.embWaiting = null;
      S.pick = null;
      S.ui = null;
    }
    const h = H();
    if (h.mode === "mccann") {
      if (!S.playing && args.t !== undefined && args.t !== null && S.ui == null) S.t = Number(args.t);
    } else if (!S.dragging && !(Number.isInteger(args.handled_seq) && args.handled_seq < S.seq)) {
      // (a render that has not seen this page's last release yet keeps the browser's pick)
      const picked = args.picked && args.picked.length === h.m ? args.picked.map(Number) : Array.from(A("a_hat").data);
      if (!S.pick || !S.sentPick || picked.some((x, i) => Math.abs(x - S.sentPick[i]) > 1e-9)) S.pick = roundToSimplex(picked, h.weight_decimals);
      S.sentPick = S.pick.slice();
    }
    const embId = args.emb ? args.emb_id : null;
    // an embedding already there at the first render (a restarted server) goes into the one
    // first build, instead of a second build right after it
    if (!S.ui && embId && embId !== S.embId && !S.dragging) { S.embWaiting = null; mergeEmbedding(embId, args.emb); }
    if (!S.ui) build();
    const bootId = args.boot ? args.boot_id : null;
    if (bootId !== S.bootId) {
      S.bootId = bootId;
      S.B = args.boot ? decode(args.boot) : null;
      bootChanged();
    }
    S.embError = args.emb_error || null;
    if (embId && embId !== S.embId && (!S.embWaiting || S.embWaiting.id !== embId)) S.embWaiting = { id: embId, data: args.emb };
    if (S.embWaiting && !S.dragging) applyEmbedding();
    else if (S.ui.pendingNote) S.ui.pendingNote.textContent = pendingText();
    S.pendingParts = Array.isArray(args.pending) ? args.pending.map(String) : [];
    schedulePoll();
    draw();
    fitHeight();
    G.ready = true;
  }

  window.addEventListener("message", (ev) => {
    const d = ev.data;
    if (!d || d.type !== "streamlit:render") return;
    try { onRender(d.args || {}); }
    catch (err) { document.getElementById("root").textContent = "explorer error: " + err; fitHeight(); throw err; }
  });
  post("streamlit:componentReady", { apiVersion: 1 });
})();
