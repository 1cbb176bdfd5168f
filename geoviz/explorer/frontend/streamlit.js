/* geoviz explorer: the Streamlit host (components v1 protocol by hand: componentReady ->
 * render -> setComponentValue / setFrameHeight) around one explorer (explorer.js) in this
 * frame's #root. Loaded by index.html as a module; not part of the anywidget bundle. */
import { createExplorer } from "./explorer.js";

// Streamlit parses a component's value with Python's JSON parser in the server's
// SessionState.on_script_will_rerun, before any page code runs: a value nested ~1,000 deep
// raises RecursionError there, and the unparsed value stays in the session, so every later
// rerun fails the same way (issues 32 and 41). Two guards keep such values off the wire:
// 1. everything this frame posts goes through sanitiseMessage: only the documented
//    messages pass, rebuilt field by field from checked primitives, and a component value
//    travels as the JSON *text* of the event (a string: Python's parser reads it flat, and
//    geoviz.app.browser.component_value parses it with its own bounds);
// 2. on the page itself (installPageGuard), any component value that is not such a text
//    is hidden from Streamlit's listener, whoever posted it: a script in this frame that
//    posts through window.top, or reaches the page's postMessage by any other path,
//    bypasses guard 1 but not this one.
// Anything dropped is counted (geovizExplorer.dropped).
const REAL_PARENT = window.parent;
const LIMITS = {
  /** longest JSON text of a component value (geoviz.app.browser.MAX_VALUE_CHARS) */
  valueChars: 4096,
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
      const text = value === null ? null : JSON.stringify(value);
      return text === null || text.length > LIMITS.valueChars ? null
        : { isStreamlitMessage: true, type: type, value: text, dataType: "json" };
    }
  } catch (err) { /* a hostile getter or proxy: dropped */ }
  return null;
}
/** Whether a message the page received may reach Streamlit's listener: anything but a
 *  component value, or a component value that is a short JSON text (what guard 1 sends). */
function pageMayTake(data) {
  if (data === null || typeof data !== "object" || data.isStreamlitMessage !== true) return true;
  if (data.type !== "streamlit:setComponentValue") return true;
  return data.dataType === "json" && typeof data.value === "string" && data.value.length <= LIMITS.valueChars;
}
/** Guard 2, on the page: the page's MessageEvent.data answers null for a component value
 *  that pageMayTake refuses, so Streamlit's listener (which ignores a message without data)
 *  never reads it. A "message" listener could not do this: on a window, listeners run in the
 *  order they were added, and Streamlit's was added first. Installed once per page, by the
 *  first explorer frame, and not removable (the getter keeps working when that frame is
 *  gone); every component in this app is an explorer, so every component value is held to
 *  the explorer's form. Returns the page's count of values it stopped. */
function installPageGuard(page) {
  const proto = page.MessageEvent.prototype;
  const real = Object.getOwnPropertyDescriptor(proto, "data");
  if (real.configurable) {  // not yet installed (once installed, it cannot be changed)
    let stopped = 0;
    const counted = new WeakSet();  // every listener reads data: count each message once
    Object.defineProperty(proto, "data", {
      configurable: false, enumerable: real.enumerable,
      get: function data() {
        const d = real.get.call(this);
        let ok = false;
        try { ok = pageMayTake(d); } catch (err) { ok = false; }
        if (ok) return d;
        if (!counted.has(this)) { counted.add(this); stopped += 1; }
        return null;
      },
    });
    Object.defineProperty(page, "geovizPageGuard", {
      value: Object.freeze({ dropped: () => stopped }), configurable: false, writable: false,
    });
  }
  const guard = page.geovizPageGuard;
  return guard && typeof guard.dropped === "function" ? guard.dropped : () => 0;
}
let pageDropped = () => 0;
try { pageDropped = installPageGuard(REAL_PARENT); }
catch (err) { /* a parent of another origin is not Streamlit's page: guard 1 still holds */ }
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
explorer.hooks.dropped = () => dropped + pageDropped();
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
