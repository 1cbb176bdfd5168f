"""Should the explorer move to Streamlit components v2? (issue 35, item 6)

The app's explorer is a components-v1 iframe (``geoviz.app.explorer_host.component._component``:
``index.html`` + ``streamlit.js``, the v1 postMessage protocol written by hand, with issue 32's
sanitising guard). Streamlit >= 1.51 also has ``st.components.v2.component(name, html=, css=,
js=)``: no iframe, the JS is an ES module (run from a blob URL) whose default export gets
``{parentElement, data, setStateValue, setTriggerValue}``; ``data`` is JSON, or bytes when the
whole of ``data`` is ``bytes`` (a dict holding bytes is *not* JSON-serialisable and Streamlit
then silently sends ``json.dumps(str(data))``, the Python repr), or Arrow for dataframes.

This script writes a minimal multipage Streamlit app into a temp dir (never into ``pages/``),
with the same payload (the default scenario's geodesic and embedding payloads as the app
builds them, ``--n`` samples per dataset) drawn four ways:

* ``v1``: the app's real v1 component (``_component`` from ``geoviz.app.explorer_host.component``:
  the payload as bytes args, natively);
* ``v2``: a v2 component whose js is the explorer's modules joined by
  ``geoviz.explorer.bundle.build_bundle`` with a small v2 host as entry (below); the render
  args travel as one ``bytes`` envelope (``b"GVZ2" | uint32 n | JSON args | blobs``), since
  bytes are carried only as the whole ``data``; the release is one ``setTriggerValue``;
* ``v2-b64``: the same, the payloads base64 strings in JSON ``data`` (what a dict needs);
* ``v2-both``: as ``v2``, but the release calls ``setStateValue`` *and* ``setTriggerValue``
  (is that still one rerun?).

Measured with Playwright in Debian's Chromium, the variants interleaved (v1, v2, v2-b64,
v2-both, v1, ...; each load in a new browser context, so a cold HTTP cache):

(a) from ``page.goto`` to the explorer's first drawn view (``hooks.ready``), and the same
    counted in the page (``performance.now()`` when ready, from navigation start);
(b) the frame time per pointer move during a drag (``hooks.frameTimes``, median and p95);
(c) Streamlit script runs during the drag and after the release (``data-test-script-state``
    going to ``running``, as ``bench_app.py`` counts them), and whether Python got the
    released weights;
(d) bytes received until the first view (CDP: HTTP ``encodedDataLength`` + WebSocket
    frames), and the WebSocket bytes of the rerun after a release;
(e) once per variant, after the timed runs: a hostile value sent *around* the host's checks
    (v1: ``window.top.postMessage`` from the frame; v2: the raw ``setStateValue`` /
    ``setTriggerValue``), nested 5,000 deep (past Python's JSON parser) and 400 deep
    (parsed, but past ``copy.deepcopy``): exceptions on the page, and whether a good release
    afterwards still reaches Python. The pages have no app-level checks (no ``_forget``).

Run: ``.venv/bin/python benchmarks/bench_components_v2.py`` (``--n 2000``, ``--repeat 7``,
``--moves 120``, ``--cache-dir`` to reuse a fitted scenario). Needs ``/usr/bin/chromium``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_app import _RUN_DONE, _WATCH_DOM, _drag_path, _percentile  # noqa: E402
from test_browser import CHROMIUM, CHROMIUM_ARGS, _free_port, _healthy, _wait_idle  # noqa: E402

VARIANTS = ("v1", "v2", "v2-b64", "v2-both")

# ------------------------------------------------------------------ the v2 host (bundle entry)
V2_HOST = r"""/* geoviz explorer: a Streamlit components-v2 host (benchmark only, issue 35). No iframe,
 * no postMessage: Streamlit imports this module and calls its default export on every render
 * with {parentElement, data, setStateValue, setTriggerValue}; the explorer is kept per
 * parentElement and re-rendered. */
import { createExplorer } from "./explorer.js";

const V2_EXPLORERS = new WeakMap();
/** base64 text -> Uint8Array */
function v2FromBase64(text) {
  if (typeof Uint8Array.fromBase64 === "function") return Uint8Array.fromBase64(text);
  const s = atob(text), out = new Uint8Array(s.length);
  for (let k = 0; k < s.length; k += 1) out[k] = s.charCodeAt(k);
  return out;
}
/** The explorer's render args from v2 data: bytes b"GVZ2" | uint32 n | JSON | blobs (a
 *  blob named {"$blob": [offset, length]}), or JSON with the payloads as base64 text. */
function v2Args(data) {
  if (data && ArrayBuffer.isView(data)) {
    const u8 = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    const n = new DataView(u8.buffer, u8.byteOffset, u8.byteLength).getUint32(4, true);
    const args = JSON.parse(new TextDecoder().decode(u8.subarray(8, 8 + n)));
    for (const [k, v] of Object.entries(args)) {
      if (v && typeof v === "object" && Array.isArray(v.$blob)) args[k] = u8.subarray(8 + n + v.$blob[0], 8 + n + v.$blob[0] + v.$blob[1]);
    }
    return args;
  }
  const args = Object.assign({}, data || {});
  for (const k of ["payload", "boot", "emb"]) if (typeof args[k] === "string") args[k] = v2FromBase64(args[k]);
  return args;
}

export default function (component) {
  const { parentElement, data } = component;
  let entry = V2_EXPLORERS.get(parentElement);
  if (!entry) {
    const root = document.createElement("div");
    root.className = "geoviz-v2";
    parentElement.appendChild(root);
    entry = { component: component, explorer: null, both: false };
    entry.explorer = createExplorer(root, {
      send(value) {
        const c = entry.component;
        if (entry.both && value && Array.isArray(value.weights)) c.setStateValue("weights", value.weights);
        c.setTriggerValue("released", value);
        return true;
      },
      resized() {},
    });
    // benchmark hooks: the explorer's, and the raw senders (for the hostile-value check)
    window.geovizExplorer = entry.explorer.hooks;
    window.geovizV2Raw = {
      state: (name, v) => entry.component.setStateValue(name, v),
      trigger: (name, v) => entry.component.setTriggerValue(name, v),
    };
    V2_EXPLORERS.set(parentElement, entry);
  }
  entry.component = component;
  const args = v2Args(data);
  entry.both = args.send === "both";
  entry.explorer.render(args);
  return () => {
    if (V2_EXPLORERS.get(parentElement) === entry) V2_EXPLORERS.delete(parentElement);
    entry.explorer.destroy();
  };
}
"""

# index.html's styles, scoped to the v2 root (inside the component's shadow root)
V2_CSS = """
.geoviz-v2 { font: 13px "Source Sans Pro", system-ui, sans-serif; color: #262730; background: #fff; padding: 2px 4px; }
.row { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
.panel h4 { margin: 6px 0 4px; font-size: 14px; font-weight: 600; }
canvas { display: block; touch-action: none; }
canvas:focus { outline: 2px solid #ff4b4b55; }
.readout { min-width: 300px; max-width: 520px; line-height: 1.6; }
.big { font-size: 26px; font-weight: 600; }
.gap { font-size: 14px; }
.gap.up { color: #d33; } .gap.down { color: #090; }
.verdict { font-size: 14px; font-weight: 600; } .verdict.same { color: #090; } .verdict.worse { color: #d33; }
.hint { color: #808495; font-size: 12px; }
button { font: inherit; padding: 3px 12px; border: 1px solid #ccc; border-radius: 6px; background: #fff; cursor: pointer; }
input[type=range] { width: 360px; }
"""

# ------------------------------------------------------------------ the page scripts
COMMON_PY = '''
"""Shared by the benchmark's pages: the payloads (read once), and what Python got."""
import json
import math
from pathlib import Path

import streamlit as st

HERE = Path(__file__).resolve().parent


@st.cache_resource
def load():
    return ((HERE / "payload.bin").read_bytes(), (HERE / "emb.bin").read_bytes(),
            json.loads((HERE / "meta.json").read_text()))


def released(event):
    """A well-formed release {weights: [m numbers], seq, id} -> (weights, seq), else None."""
    if not isinstance(event, dict) or not isinstance(event.get("seq"), int):
        return None
    w = event.get("weights")
    if not isinstance(w, list) or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in w):
        return None
    return [float(x) for x in w], event["seq"]


def show(event, variant):
    good = released(event)
    if good is not None:
        st.session_state["last"] = good
    last = st.session_state.get("last")
    runs = st.session_state["runs"] = st.session_state.get("runs", 0) + 1
    text = "none" if last is None else ",".join(f"{x:.6f}" for x in last[0]) + f" seq={last[1]}"
    st.markdown(f"{variant} · run {runs} · released: <span id='released'>{text}</span>",
                unsafe_allow_html=True)
    return last
'''

V1_PY = """
from common import load, show
from v1component import _component  # the app's v1 component, on the frontend snapshot
import geoviz.app.explorer_host.component  # noqa: F401  (the app's module, as the app imports it)
import streamlit as st

payload, emb, meta = load()
last = show(st.session_state.get("ex"), "v1")
_component(
    payload=payload, payload_id=meta["payload_id"],
    picked=meta["picked"] if last is None else last[0],
    boot=None, boot_id=None, emb=emb, emb_id=meta["emb_id"], emb_error=None, pending=[],
    handled=str(None if last is None else last[1]), handled_seq=None if last is None else last[1],
    key="ex", default=None,
)
"""

V1_COMPONENT_PY = """
\"\"\"The app's v1 component (as geoviz.app.explorer_host.component declares it) on the snapshot.\"\"\"
from pathlib import Path

import streamlit.components.v1 as components

_component = components.declare_component(
    "geoviz_explorer", path=str(Path(__file__).resolve().parent / "frontend_v1")
)
"""

V2_PY = """
import base64, json, struct
from common import load, show
import geoviz.app.explorer_host.component  # noqa: F401  (the same imports as the v1 page)
from v2component import explorer_v2
import streamlit as st

VARIANT = "{variant}"
payload, emb, meta = load()
result = st.session_state.get("_v2_released")  # set by the callback below
last = show(result, VARIANT)
args = dict(payload_id=meta["payload_id"], picked=meta["picked"] if last is None else last[0],
            boot=None, boot_id=None, emb_id=meta["emb_id"], emb_error=None, pending=[],
            handled=str(None if last is None else last[1]),
            handled_seq=None if last is None else last[1],
            send="both" if VARIANT == "v2-both" else "trigger")
if VARIANT == "v2-b64":
    data = dict(args, payload=base64.b64encode(payload).decode(), emb=base64.b64encode(emb).decode())
else:  # the whole of data as bytes: b"GVZ2" | uint32 n | JSON args | payload | emb
    args.update(payload={{"$blob": [0, len(payload)]}}, emb={{"$blob": [len(payload), len(emb)]}})
    head = json.dumps(args).encode()
    data = b"GVZ2" + struct.pack("<I", len(head)) + head + payload + emb


def _on_release():
    st.session_state["_v2_released"] = st.session_state["ex"].get("released")


out = explorer_v2(key="ex", data=data, default={{"weights": None}},
                  on_released_change=_on_release, on_weights_change=lambda: None)
st.session_state["_v2_released"] = None  # a trigger is one run's
st.markdown(f"state weights: <span id='state'>{{out.get('weights')}}</span>", unsafe_allow_html=True)
"""

V2_COMPONENT_PY = '''
"""The v2 component, registered once per process (not on every run)."""
from pathlib import Path

import streamlit as st

HERE = Path(__file__).resolve().parent
explorer_v2 = st.components.v2.component(
    "geoviz_explorer_v2",
    js=(HERE / "explorer_v2.js").read_text(),
    css=(HERE / "explorer_v2.css").read_text(),
)
'''

MAIN_PY = """
import streamlit as st

st.navigation([st.Page("home.py", default=True), st.Page("v1.py", url_path="v1"),
               st.Page("v2.py", url_path="v2"), st.Page("v2_b64.py", url_path="v2-b64"),
               st.Page("v2_both.py", url_path="v2-both")], position="hidden").run()
"""


def _prepare(tmp: Path, n: int, cache_dir: Path, rev: str) -> dict[str, Any]:
    """The default scenario's payloads as the app builds them, the pages and the v2 bundle."""
    os.environ["GEOVIZ_CACHE_DIR"] = str(cache_dir)
    os.environ.setdefault("GEOVIZ_EMBEDDING", "pca")
    from geoviz.app.explorer_host.service import embedding_payload, geodesic_payload
    from geoviz.app.services import datasets as dataset_services
    from geoviz.app.services import geodesic as geodesic_services
    from geoviz.app.session import SessionModel
    from geoviz.app.settings import default_scenario
    from geoviz.explorer.bundle import FRONTEND, build_bundle

    model = SessionModel({})
    model.scenario = default_scenario().with_(n_target=n, n_reference=n)
    t0 = time.perf_counter()
    data = dataset_services.scenario_data(model)
    job = geodesic_services.start_geodesic(model.scenario, data)
    job.wait()
    if job.error_ is not None:
        raise SystemExit(f"the geodesic failed: {job.error_}")
    result = job.result_
    payload = geodesic_payload(model, result)
    emb, err = embedding_payload(model, result, None)
    if emb is None:
        raise SystemExit(f"no embedding view: {err}")
    print(f"prepared in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    (tmp / "payload.bin").write_bytes(payload.data)
    (tmp / "emb.bin").write_bytes(emb.data)
    meta = {
        "payload_id": f"{model.scenario.key()}-geodesic",
        "emb_id": f"{model.scenario.key()}-embedding",
        "picked": [float(x) for x in result.a_hat],
    }
    (tmp / "meta.json").write_text(json.dumps(meta))
    # one snapshot of the explorer's frontend for both (others edit the working tree): the
    # files of git revision ``rev``; v1 serves it as the app does, v2 bundles it with its host
    rel = FRONTEND.relative_to(ROOT).as_posix()
    names = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{rev}:{rel}"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    front = tmp / "frontend"
    front.mkdir()
    for name in names:
        text = subprocess.run(
            ["git", "show", f"{rev}:{rel}/{name}"], cwd=ROOT, check=True, capture_output=True
        ).stdout
        (front / name).write_bytes(text)
    shutil.copytree(front, tmp / "frontend_v1")
    (front / "v2host.js").write_text(V2_HOST)
    js = build_bundle(front, "v2host.js")
    (tmp / "explorer_v2.js").write_text(js)
    (tmp / "explorer_v2.css").write_text(V2_CSS)
    for name, text in {
        "home.py": "import streamlit as st\n\nst.write('home')\n", "common.py": COMMON_PY, "v1.py": V1_PY, "main.py": MAIN_PY,
        "v2component.py": V2_COMPONENT_PY, "v1component.py": V1_COMPONENT_PY, "v2.py": V2_PY.format(variant="v2"),
        "v2_b64.py": V2_PY.format(variant="v2-b64"), "v2_both.py": V2_PY.format(variant="v2-both"),
    }.items():  # fmt: skip
        (tmp / name).write_text(textwrap.dedent(text).lstrip())
    return {
        "payload": len(payload.data),
        "emb": len(emb.data),
        "bundle_chars": len(js),
        "rev": rev,
        "b64": len(base64.b64encode(payload.data)) + len(base64.b64encode(emb.data)),
    }


def _start(tmp: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [
        sys.executable, "-m", "streamlit", "run", str(tmp / "main.py"),
        "--server.port", str(port), "--server.address", "127.0.0.1",
        "--server.headless", "true", "--browser.gatherUsageStats", "false",
        "--server.fileWatcherType", "none",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while not _healthy(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"streamlit did not start: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    return proc, url


# the hooks (v1: in the component's iframe; v2: on the page's window)
_READY = """() => {
  const ok = (w) => { try { return !!(w && w.geovizExplorer && w.geovizExplorer.ready); } catch (e) { return false; } };
  if (ok(window)) return performance.now();
  for (const f of document.querySelectorAll("iframe")) if (ok(f.contentWindow)) return performance.now();
  return false;
}"""


def _hooks_frame(page, variant: str):
    if variant != "v1":
        return page.main_frame
    for frame in page.frames:
        if "geoviz_explorer" in (frame.url or ""):
            return frame
    raise AssertionError("no explorer frame")


def _laid_out(page, frame, variant: str) -> None:
    """v1: wait until the iframe is as tall as the explorer (its setFrameHeight applied)."""
    if variant != "v1":
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        outer = frame.frame_element().bounding_box()
        inner = frame.locator("canvas#simplex").bounding_box()
        if outer and inner and inner["y"] + inner["height"] <= outer["y"] + outer["height"]:
            return
        page.wait_for_timeout(50)
    raise AssertionError("the explorer's frame never got its height")


class _Wire:
    """Bytes received by a page (CDP): HTTP bodies as sent (encodedDataLength) and WebSocket
    frames (binary frames' payloadData is base64)."""

    def __init__(self, page) -> None:
        self.http = 0
        self.ws = 0
        cdp = page.context.new_cdp_session(page)
        cdp.on("Network.loadingFinished", self._http)
        cdp.on("Network.webSocketFrameReceived", self._ws)
        cdp.send("Network.enable")
        self.cdp = cdp

    def _http(self, ev: dict) -> None:
        self.http += int(ev.get("encodedDataLength", 0))

    def _ws(self, ev: dict) -> None:
        r = ev.get("response", {})
        data = r.get("payloadData", "")
        self.ws += len(base64.b64decode(data)) if r.get("opcode") == 2 else len(data.encode())


def _one(browser, url: str, variant: str, moves: int, phase: float) -> dict[str, Any]:
    """Open the variant's page in a new context, time the first view, drag once, release."""
    context = browser.new_context(viewport={"width": 1500, "height": 1900})
    page = context.new_page()
    page.set_default_timeout(120_000)
    wire = _Wire(page)
    t0 = time.monotonic()
    page.goto(f"{url}/{variant}")
    handle = page.wait_for_function(_READY, polling=20)
    ready_s = time.monotonic() - t0
    in_page_ms = float(handle.json_value())
    first_bytes = (wire.http, wire.ws)
    _wait_idle(page, settle_ms=500)
    frame = _hooks_frame(page, variant)
    _laid_out(page, frame, variant)
    box = frame.locator("canvas#simplex").bounding_box()
    path = _drag_path(box, moves + 1, phase)
    n_before = frame.evaluate("() => geovizExplorer.frameTimes.length")
    page.mouse.move(*path[0])
    page.evaluate(_WATCH_DOM)
    page.mouse.down()
    for x, y in path[1:]:
        page.mouse.move(x, y)
        page.wait_for_timeout(10)  # about a 60 Hz pointer
    page.wait_for_timeout(300)
    during = page.evaluate("() => window.__geovizRuns")
    page.evaluate(_WATCH_DOM)
    ws_before = wire.ws
    t_up = time.monotonic()
    page.mouse.up()
    with contextlib.suppress(Exception):
        page.wait_for_function(_RUN_DONE, timeout=30_000)
    release_s = time.monotonic() - t_up
    _wait_idle(page, settle_ms=1000)
    after = page.evaluate("() => window.__geovizRuns")
    times = frame.evaluate(f"() => geovizExplorer.frameTimes.slice({n_before})")
    pick = frame.evaluate("() => geovizExplorer.pick()")
    got = page.locator("#released").inner_text()
    python_got = got != "none" and all(
        abs(float(a) - float(b)) < 1e-6
        for a, b in zip(got.split(" ")[0].split(","), pick, strict=True)
    )
    exceptions = page.locator("[data-testid='stException']").count()
    out = {
        "ready_s": ready_s, "ready_in_page_s": in_page_ms / 1000.0,
        "http_bytes": first_bytes[0], "ws_bytes": first_bytes[1],
        "frames": times, "during": during, "after": after, "release_s": release_s,
        "rerun_ws_bytes": wire.ws - ws_before, "python_got": python_got,
        "exceptions": exceptions,
    }  # fmt: skip
    context.close()
    return out


_HOSTILE = {
    # nested arrays: past Python's JSON parser (RecursionError), and short of it (deepcopy)
    "deep5000": "(() => { let v = 0; for (let k = 0; k < 5000; k++) v = [v]; return v; })()",
    "deep2000": "(() => { let v = 0; for (let k = 0; k < 2000; k++) v = [v]; return v; })()",
    "deep400": "(() => { let v = 0; for (let k = 0; k < 400; k++) v = [v]; return v; })()",
}


def _send_hostile(frame, variant: str, expr: str, seq: int) -> None:
    if variant == "v1":  # from the frame, around its guard on window.parent
        frame.evaluate(
            "([expr, seq]) => window.top.postMessage({isStreamlitMessage: true,"
            " type: 'streamlit:setComponentValue', value: {weights: eval(expr), seq: seq,"
            " id: 'hostile'}, dataType: 'json'}, '*')",
            [expr, seq],
        )
    else:  # both raw senders, around the host (as any script on the page could)
        frame.evaluate(f"() => geovizV2Raw.state('weights', {expr})")
        frame.evaluate(f"() => geovizV2Raw.trigger('released', {{weights: {expr}, seq: {seq}}})")


def _hostile(browser, url: str, variant: str) -> dict[str, str]:
    """Send each hostile value around the host's checks (a new session each), then make one
    good release with the explorer: what happened."""
    report = {}
    for k, (name, expr) in enumerate(_HOSTILE.items()):
        context = browser.new_context(viewport={"width": 1500, "height": 1900})
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.goto(f"{url}/{variant}")
        page.wait_for_function(_READY, polling=50)
        _wait_idle(page, settle_ms=500)
        frame = _hooks_frame(page, variant)
        _laid_out(page, frame, variant)
        sent = "sent"
        try:
            _send_hostile(frame, variant, expr, 90_000 + k)
        except Exception as err:  # the browser refused to send it
            sent = f"not sent ({str(err).splitlines()[0].split(': ', 1)[-1][:70]})"
        page.wait_for_timeout(1500)
        _wait_idle(page, settle_ms=500)
        exc = page.locator("[data-testid='stException']")
        text = exc.first.inner_text()[:120].replace("\n", " ") if exc.count() else ""
        # then one good release through the explorer itself
        outcome = "the explorer is gone"
        with contextlib.suppress(Exception):
            frame = _hooks_frame(page, variant)
            box = frame.locator("canvas#simplex").bounding_box(timeout=10_000)
            before = page.locator("#released").inner_text(timeout=5_000)
            for j, (x, y) in enumerate(_drag_path(box, 9, 0.37)[2:6]):  # a short drag
                page.mouse.move(x, y)
                if j == 0:
                    page.mouse.down()
                page.wait_for_timeout(20)
            page.mouse.up()
            outcome = "a good release did NOT reach Python"
            page.wait_for_function(
                "(b) => { const e = document.querySelector('#released');"
                " return e && e.textContent !== b; }",
                arg=before,
                timeout=20_000,
            )
            _wait_idle(page, settle_ms=500)
            outcome = "a good release reached Python"
        still = page.locator("[data-testid='stException']").count()
        report[name] = (
            f"{sent}; {'exception: ' + text if text else 'no exception'}; {outcome}"
            f"{f' ({still} exception(s) shown)' if still else ''}"
        )
        print(f"  hostile {variant} {name}: {report[name]}", file=sys.stderr, flush=True)
        context.close()
    return report


def _host_lines(tmp: Path) -> dict[str, int]:
    """Non-blank, non-comment lines of each host's code."""

    def count(text: str) -> int:
        lines, block = 0, False
        for raw in text.splitlines():
            s = raw.strip()
            if block:
                block = "*/" not in s
                continue
            if not s or s.startswith("//"):
                continue
            if s.startswith("/*"):
                block = "*/" not in s
                continue
            lines += 1
        return lines

    front = tmp / "frontend_v1"
    return {
        "v1": count((front / "streamlit.js").read_text())
        + count((front / "index.html").read_text()),
        "v2": count(V2_HOST) + count(V2_CSS),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2000, help="samples per dataset")
    p.add_argument("--repeat", type=int, default=7, help="page loads + drags per variant")
    p.add_argument("--moves", type=int, default=120, help="pointer moves per drag")
    p.add_argument("--cache-dir", type=Path, default=None, help="the app's disk cache to reuse")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument(
        "--rev", default="HEAD", help="git revision of the explorer's frontend (both variants)"
    )
    args = p.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="geoviz-bench-cv2-") as tmp_name:
        tmp = Path(tmp_name)
        rev = subprocess.run(
            ["git", "rev-parse", "--short", args.rev], cwd=ROOT, check=True,
            capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        sizes = _prepare(tmp, args.n, args.cache_dir or tmp / "cache", rev)
        load_before = os.getloadavg()
        proc, url = _start(tmp, tmp / "server.log")
        runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
        hostile: dict[str, dict[str, str]] = {}
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
                )
                try:
                    for v in variants:  # warm-up (imports, caches), not counted
                        _one(browser, url, v, 20, 0.0)
                    for k in range(args.repeat):
                        for v in variants:
                            r = _one(browser, url, v, args.moves, 0.13 * k)
                            runs[v].append(r)
                            print(
                                f"{k} {v}: ready {r['ready_s']:.2f} s, frames "
                                f"{statistics.median(r['frames']):.1f} ms, runs "
                                f"{r['during']}/{r['after']}, got {r['python_got']}",
                                file=sys.stderr, flush=True,
                            )  # fmt: skip
                    load_mid = os.getloadavg()
                    for v in variants:
                        hostile[v] = _hostile(browser, url, v)
                finally:
                    browser.close()
        finally:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)
            if proc.poll() is None:
                proc.kill()
        load_after = os.getloadavg()
        sizes["lines"] = _host_lines(tmp)
    _report(args, sizes, runs, hostile, (load_before, load_mid, load_after))
    return 0


def _report(args, sizes, runs, hostile, loads) -> None:
    med = statistics.median
    lines = sizes["lines"]
    print(
        f"\nStreamlit components v1 vs v2 for the explorer (issue 35, item 6): default scenario, "
        f"N = {args.n} per dataset, PCA embedding; payload {sizes['payload'] / 1e6:.2f} MB + "
        f"embedding {sizes['emb'] / 1e6:.2f} MB (base64: {sizes['b64'] / 1e6:.2f} MB); "
        f"frontend of {sizes['rev']}; v2 bundle {sizes['bundle_chars'] / 1e3:.0f} k chars; {os.cpu_count()} CPUs, headless "
        f"Chromium; variants interleaved, {args.repeat} runs each (median), drags of "
        f"{args.moves} moves; load average (1 min) before / after the timed runs / at the end: "
        + " / ".join(f"{x[0]:.2f}" for x in loads)
        + "\n"
    )
    cols = list(runs)
    print("| what | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))

    def row(what: str, fn) -> None:
        print(f"| {what} | " + " | ".join(fn(runs[v]) for v in cols) + " |")

    row(
        "(a) goto -> first drawn view (median)", lambda r: f"{med([x['ready_s'] for x in r]):.2f} s"
    )
    row(
        "(a) min - max",
        lambda r: f"{min(x['ready_s'] for x in r):.2f} - {max(x['ready_s'] for x in r):.2f} s",
    )
    row(
        "(a) in the page: navigation start -> view",
        lambda r: f"{med([x['ready_in_page_s'] for x in r]):.2f} s",
    )
    row(
        "(b) frame time per move, median",
        lambda r: f"{med([t for x in r for t in x['frames']]):.1f} ms",
    )
    row(
        "(b) frame time per move, p95",
        lambda r: f"{_percentile([t for x in r for t in x['frames']], 95):.1f} ms",
    )
    row("(c) script runs during a drag (each)", lambda r: ", ".join(str(x["during"]) for x in r))
    row("(c) script runs after the release (each)", lambda r: ", ".join(str(x["after"]) for x in r))
    row(
        "(c) Python got the released weights",
        lambda r: f"{sum(x['python_got'] for x in r)}/{len(r)}",
    )
    row(
        "(c) release -> script run done (median)",
        lambda r: f"{med([x['release_s'] for x in r]):.2f} s",
    )
    row(
        "(d) HTTP bytes to the first view",
        lambda r: f"{med([x['http_bytes'] for x in r]) / 1e6:.2f} MB",
    )
    row(
        "(d) WebSocket bytes to the first view",
        lambda r: f"{med([x['ws_bytes'] for x in r]) / 1e6:.2f} MB",
    )
    row(
        "(d) WebSocket bytes of the rerun after a release",
        lambda r: f"{med([x['rerun_ws_bytes'] for x in r]) / 1e6:.2f} MB",
    )
    row("exceptions on the page after the runs", lambda r: str(sum(x["exceptions"] for x in r)))

    def host(v: str) -> str:
        return (
            f"{lines['v1']} (streamlit.js + index.html)"
            if v == "v1"
            else f"{lines['v2']} (v2 host + css)"
        )

    print("| (e) host code, non-blank lines | " + " | ".join(host(v) for v in cols) + " |")
    for name in _HOSTILE:
        print(f"| (e) hostile value {name}, around the host | " + " | ".join(hostile.get(v, {}).get(name, "") for v in cols) + " |")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
