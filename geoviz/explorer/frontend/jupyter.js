/*
 * geoviz explorer: the Jupyter host (anywidget). Joined after the explorer's modules into one
 * ES module by geoviz/explorer/bundle.py (GeodesicExplorer._esm); not loaded by Streamlit.
 *
 * Python -> browser: traits (weights, _payload, _boot, _emb, _pending, _handled_seq, error)
 * and the custom message {kind: "figure", id, format}.
 * Browser -> Python: custom messages {kind: "pick", weights, seq} on a pointer release and
 * {kind: "figure", id, format, data | error} answering a figure request.
 */
import { createExplorer } from "./explorer.js";

const WIDGET_TRAITS = [
  "weights", "error", "_payload", "_payload_id", "_boot", "_boot_id", "_emb", "_emb_id",
  "_emb_error", "_pending", "_handled_seq",
];

const WIDGET_CSS = `
.geoviz-widget { font: 13px "Source Sans Pro", system-ui, sans-serif; color: #262730; background: #fff; padding: 2px 4px; }
.geoviz-widget .row { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
.geoviz-widget h4 { margin: 6px 0 4px; font-size: 14px; font-weight: 600; }
.geoviz-widget canvas { display: block; touch-action: none; }
.geoviz-widget canvas:focus { outline: 2px solid #ff4b4b55; }
.geoviz-widget .readout { min-width: 300px; max-width: 520px; line-height: 1.6; }
.geoviz-widget .big { font-size: 26px; font-weight: 600; }
.geoviz-widget .gap { font-size: 14px; }
.geoviz-widget .gap.up { color: #d33; } .geoviz-widget .gap.down { color: #090; }
.geoviz-widget .verdict { font-size: 14px; font-weight: 600; }
.geoviz-widget .verdict.same { color: #090; } .geoviz-widget .verdict.worse { color: #d33; }
.geoviz-widget .hint { color: #555867; font-size: 14px; line-height: 1.4; }
.geoviz-widget #interval { line-height: 1.3; min-height: 2.6em; }
.geoviz-widget .stage { flex-wrap: nowrap; }
.geoviz-widget .stage-strip { align-items: baseline; gap: 4px 18px; margin: 0 0 2px; line-height: 1.3; }
.geoviz-widget .stage-strip .big { font-size: 22px; }
.geoviz-widget .stage-strip #weights { font-size: 15px; font-weight: 600; }
.geoviz-widget .region-note { color: #262730; background: #fff3c4; padding: 2px 6px; border-radius: 4px; margin-top: 2px; }
.geoviz-widget button { font: inherit; padding: 3px 12px; border: 1px solid #ccc; border-radius: 6px; background: #fff; cursor: pointer; }
.geoviz-widget input[type=range] { width: 360px; }
.geoviz-widget .presenter { font-size: 16px; }
.geoviz-widget .presenter h4 { font-size: 18px; }
.geoviz-widget .presenter .hint { font-size: 17px; }
.geoviz-widget .presenter .big, .geoviz-widget .presenter .stage-strip .big { font-size: 28px; }
.geoviz-widget .presenter .gap, .geoviz-widget .presenter .verdict, .geoviz-widget .presenter .stage-strip #weights { font-size: 18px; }
.geoviz-widget .presenter #teach-caption { font-size: 20px; color: #262730; line-height: 1.35; }
.geoviz-widget-error { color: #b00; font-size: 13px; margin: 4px 0; }
.geoviz-widget-error:empty { display: none; }
`;

/** Bytes of a trait (DataView, ArrayBuffer, Uint8Array), or null when empty. */
function widgetBytes(value) {
  if (value === null || value === undefined) return null;
  return value.byteLength > 0 ? value : null;
}

/** The explorer's render args (those the Streamlit component gets) from the model.
 *  ``sent``: ``{last, pick}``, the numbers of the explorer's last value (polls included) and of
 *  its last pick. Python answers picks only (``_handled_seq``), polls need no answer here: once
 *  Python has handled the last pick, every value sent so far counts as handled, so a pick
 *  assigned from Python is not taken for an answer older than a poll. */
function widgetArgs(model, sent) {
  const picked = model.get("weights");
  const answered = model.get("_handled_seq");
  const caughtUp = sent.pick === null || (Number.isInteger(answered) && answered >= sent.pick);
  const handled = caughtUp ? sent.last : answered;
  return {
    payload: widgetBytes(model.get("_payload")),
    payload_id: model.get("_payload_id"),
    picked: Array.isArray(picked) && picked.length ? picked.map(Number) : null,
    boot: widgetBytes(model.get("_boot")),
    boot_id: model.get("_boot_id") || null,
    emb: widgetBytes(model.get("_emb")),
    emb_id: model.get("_emb_id") || null,
    emb_error: model.get("_emb_error") || null,
    pending: model.get("_pending") || [],
    handled: String(handled),
    handled_seq: Number.isInteger(handled) ? handled : null,
  };
}

export default {
  render({ model, el }) {
    el.classList.add("geoviz-widget");
    const style = document.createElement("style");
    style.textContent = WIDGET_CSS;
    const root = document.createElement("div");
    const note = document.createElement("div");
    note.className = "geoviz-widget-error";
    el.append(style, root, note);
    const sent = { last: null, pick: null };
    const host = {
      send(value) {
        if (value && Number.isInteger(value.seq)) sent.last = value.seq;
        // polls are the Streamlit host's: here Python pushes background parts itself
        if (value && Array.isArray(value.weights)) {
          sent.pick = value.seq;
          model.send({ kind: "pick", weights: value.weights.map(Number), seq: value.seq });
        }
      },
      resized() {},
    };
    const explorer = createExplorer(root, host);
    el.geovizExplorer = explorer.hooks;
    let queued = false;
    const render = () => {
      queued = false;
      note.textContent = model.get("error") || "";
      try { explorer.render(widgetArgs(model, sent)); }
      catch (err) { note.textContent = "explorer error: " + err; throw err; }
    };
    const schedule = () => { if (!queued) { queued = true; queueMicrotask(render); } };
    const onMessage = (msg) => {
      if (!msg || msg.kind !== "figure") return;
      try {
        model.send({ kind: "figure", id: msg.id, format: msg.format, data: explorer.hooks.figure(msg.format) });
      } catch (err) {
        model.send({ kind: "figure", id: msg.id, format: msg.format, error: String(err) });
      }
    };
    for (const name of WIDGET_TRAITS) model.on("change:" + name, schedule);
    model.on("msg:custom", onMessage);
    render();
    return () => {
      for (const name of WIDGET_TRAITS) model.off("change:" + name, schedule);
      model.off("msg:custom", onMessage);
      delete el.geovizExplorer;
      explorer.destroy();
    };
  },
};
