"""The explorer (geoviz/explorer/frontend/explorer.js) against a scripted host, in Chromium.

No Streamlit and no server: the explorer's modules, bundled, run in a blank page whose host
records what the explorer sends, and the test renders the arguments a host would. This makes
the order of events exact where the app's own timing would make it a race.

Streamlit keeps only a component's latest value until its script reads it, so a poll sent
right behind a release could replace the release: the release is lost and the next render
puts the pick back. The explorer therefore holds its polls until the host has answered the
release (``handled_seq``), or until the release counts as lost.
"""

from __future__ import annotations

import base64
import json
import time

import pytest
from browser_support import (  # the shared Chromium set-up (skips without it)
    RECORDING_HOST,
    browser,  # noqa: F401 - a fixture
    harness_html,
    sync_playwright,  # noqa: F401 - a fixture
)

from geoviz.data.preprocess import harmonize
from geoviz.data.registry import load_dataset
from geoviz.explorer.payload import build_geodesic
from geoviz.geodesic.pipeline import fit_geodesic

pytestmark = pytest.mark.browser

#: explorer.js's POLL_MS and POLL_RETRY_MS
POLL_MS = 300
POLL_RETRY_MS = 8000


@pytest.fixture(scope="module")
def payload() -> dict:
    """A small fitted geodesic's explorer payload, with its embedding pending."""
    q, *refs = harmonize(
        [load_dataset("mnist", n=60)]
        + [load_dataset(name, n=40) for name in ("fashion_mnist", "usps", "kmnist")]
    )
    result = fit_geodesic(q, refs)
    built = build_geodesic(result, embedding_pending=True)
    return {
        "data": base64.b64encode(built.data).decode("ascii"),
        "a_hat": [float(x) for x in result.a_hat],
    }


@pytest.fixture
def harness(browser, payload):  # noqa: F811 - the fixture imported above
    pg = browser.new_page(viewport={"width": 1300, "height": 1400})
    try:
        errors: list[str] = []
        pg.on("pageerror", lambda err: errors.append(str(err)))
        pg.set_content(harness_html(RECORDING_HOST))
        pg.wait_for_function("() => window.harnessReady === true", timeout=30_000)
        yield pg, payload, errors
    finally:
        pg.close()


def _render(pg, payload: dict, *, picked: list[float], handled_seq: int | None) -> None:
    args = {
        "payload": payload["data"],
        "payload_id": "harness-geodesic",
        "picked": picked,
        "boot": None,
        "boot_id": None,
        "emb": None,
        "emb_id": None,
        "emb_error": None,
        "pending": ["embedding"],
        "handled": str(handled_seq),
        "handled_seq": handled_seq,
    }
    pg.evaluate(f"() => window.renderArgs({json.dumps(args)})")


def _sent(pg) -> list[dict]:
    return pg.evaluate("() => window.sent")


def _drag(pg, dx: float) -> None:
    box = pg.locator("canvas#simplex").bounding_box()
    assert box is not None
    x, y = box["x"] + 200, box["y"] + 230
    pg.mouse.move(x, y)
    pg.mouse.down()
    for k in range(8):
        pg.mouse.move(x + dx * k, y + 3 * k)
        pg.wait_for_timeout(30)
    pg.mouse.up()


def _polls(pg) -> list[dict]:
    return [v for v in _sent(pg) if "poll" in v]


def test_a_poll_waits_for_the_hosts_answer_to_a_release(harness):
    pg, payload, errors = harness
    _render(pg, payload, picked=payload["a_hat"], handled_seq=None)
    pg.wait_for_function("() => window.explorer.hooks.ready === true")
    # the first render asks for the pending embedding after POLL_MS
    pg.wait_for_function("() => window.sent.some((v) => 'poll' in v)", timeout=5_000)
    first_poll = _polls(pg)[-1]
    # the host answers that poll: nothing new yet, still pending
    _render(pg, payload, picked=payload["a_hat"], handled_seq=first_poll["seq"])

    _drag(pg, 6)
    released = [v for v in _sent(pg) if "weights" in v]
    assert len(released) == 1, _sent(pg)
    release = released[0]
    pick = pg.evaluate("() => window.explorer.hooks.pick()")
    assert pick == release["weights"] and pick != payload["a_hat"]
    polls_before = len(_polls(pg))

    # no answer to the release yet: no poll, for many times POLL_MS
    pg.wait_for_timeout(6 * POLL_MS)
    assert len(_polls(pg)) == polls_before, _sent(pg)
    # a late answer to the earlier poll (handled_seq < the release's) keeps the browser's pick
    _render(pg, payload, picked=payload["a_hat"], handled_seq=first_poll["seq"])
    assert pg.evaluate("() => window.explorer.hooks.pick()") == pick
    pg.wait_for_timeout(3 * POLL_MS)
    assert len(_polls(pg)) == polls_before, _sent(pg)

    # the host answers the release: the poll follows, numbered after it
    _render(pg, payload, picked=release["weights"], handled_seq=release["seq"])
    pg.wait_for_function(
        f"() => window.sent.filter((v) => 'poll' in v).length > {polls_before}", timeout=5_000
    )
    poll = _polls(pg)[-1]
    assert poll["seq"] == release["seq"] + 1 and poll["poll"] == ["embedding"]
    # its answer keeps the pick
    _render(pg, payload, picked=release["weights"], handled_seq=poll["seq"])
    assert pg.evaluate("() => window.explorer.hooks.pick()") == pick
    assert errors == []


def test_a_release_never_answered_holds_the_polls_for_a_while_only(harness):
    pg, payload, errors = harness
    _render(pg, payload, picked=payload["a_hat"], handled_seq=None)
    pg.wait_for_function("() => window.explorer.hooks.ready === true")
    pg.wait_for_function("() => window.sent.some((v) => 'poll' in v)", timeout=5_000)
    _render(pg, payload, picked=payload["a_hat"], handled_seq=_polls(pg)[-1]["seq"])

    _drag(pg, -5)
    released_at = time.monotonic()
    release = [v for v in _sent(pg) if "weights" in v][-1]
    polls_before = len(_polls(pg))
    # the host never answers (the release was lost): the polls resume after POLL_RETRY_MS
    pg.wait_for_function(
        f"() => window.sent.filter((v) => 'poll' in v).length > {polls_before}",
        timeout=POLL_RETRY_MS + 10_000,
    )
    waited = time.monotonic() - released_at
    assert waited >= POLL_RETRY_MS / 1000 - 0.5, waited
    assert _polls(pg)[-1]["seq"] == release["seq"] + 1
    assert errors == []
