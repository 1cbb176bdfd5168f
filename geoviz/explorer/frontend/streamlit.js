/* geoviz explorer: the Streamlit host (components v1 protocol by hand: componentReady ->
 * render -> setComponentValue / setFrameHeight) around one explorer (explorer.js) in this
 * frame's #root. Loaded by index.html as a module; not part of the anywidget bundle. */
import { createExplorer } from "./explorer.js";

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
/** the explorer in this frame (its header decides which values are documented) */
let explorer = null;
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
/** The explorer's payload header, or null before its first payload. */
function currentHeader() {
  try { return explorer ? explorer.hooks.header() : null; } catch (err) { return null; }
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
  const header = currentHeader();
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

const root = document.getElementById("root");
/** the frame's height: the explorer's content and 8 px of margin */
const FRAME_MARGIN = 8;
explorer = createExplorer(root, {
  // false when the guard dropped it (the explorer then does not count it as sent)
  send: (value) => post("streamlit:setComponentValue", { value: value, dataType: "json" }),
  resized: (h) => { post("streamlit:setFrameHeight", { height: h + FRAME_MARGIN }); },
});
explorer.hooks.dropped = () => dropped;
window.geovizExplorer = explorer.hooks;

window.addEventListener("message", (ev) => {
  const d = ev.data;
  if (!d || d.type !== "streamlit:render") return;
  try { explorer.render(d.args || {}); }
  catch (err) {
    root.textContent = "explorer error: " + err;
    post("streamlit:setFrameHeight", { height: Math.ceil(root.getBoundingClientRect().height) + FRAME_MARGIN });
    throw err;
  }
});
post("streamlit:componentReady", { apiVersion: 1 });
