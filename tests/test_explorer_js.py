"""The explorer's JavaScript maths (geoviz/explorer/frontend/maths.js) checked by node's
built-in test runner (tests/js/maths.test.mjs) against numbers the Python library writes
(tests/js/write_fixtures.py), no browser needed.

Without ``node`` these tests skip and say why; with ``GEOVIZ_REQUIRE_NODE=1`` (CI sets it)
they fail instead.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

JS_DIR = Path(__file__).parent / "js"
#: oldest node whose built-in test runner (node:test, --test) this suite uses
MIN_NODE = 18
NODE_TIMEOUT_S = 120


def _writer() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "geoviz_js_write_fixtures", JS_DIR / "write_fixtures.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _node() -> str:
    """The node executable, or a skip (a failure under ``GEOVIZ_REQUIRE_NODE=1``)."""
    node = shutil.which("node")
    problem = None
    if node is None:
        problem = "node is not installed"
    else:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
        match = re.match(r"v(\d+)\.", out.stdout.strip())
        if out.returncode != 0 or match is None or int(match.group(1)) < MIN_NODE:
            problem = f"node {out.stdout.strip() or '(unknown version)'} is older than {MIN_NODE}"
    if problem is None:
        assert node is not None
        return node
    if os.environ.get("GEOVIZ_REQUIRE_NODE") == "1":
        pytest.fail(
            f"{problem}, and GEOVIZ_REQUIRE_NODE=1 requires it for the explorer's JavaScript "
            f"tests: install node {MIN_NODE} or newer, e.g. `apt-get install nodejs` on Debian or Ubuntu"
        )
    pytest.skip(
        f"{problem}: the explorer's JavaScript maths is not tested (install node {MIN_NODE}+, "
        "e.g. `apt-get install nodejs`; set GEOVIZ_REQUIRE_NODE=1 to fail instead of skipping)"
    )


def _run_node(node: str, fixture: Path) -> subprocess.CompletedProcess[str]:
    # the test files of tests/js/ by name: the same as `node --test tests/js/` on node 18 and
    # 20, and still right on node 22+, where --test takes file patterns
    files = sorted(str(p) for p in JS_DIR.glob("*.test.mjs"))
    assert files, f"no *.test.mjs in {JS_DIR}"
    env = {**os.environ, "GEOVIZ_JS_FIXTURES": str(fixture)}
    return subprocess.run(
        # TAP (the default for a pipe before node 23, which prints "spec"): parsed below
        [node, "--test", "--test-reporter=tap", *files],
        capture_output=True,
        text=True,
        env=env,
        cwd=JS_DIR.parent.parent,
        timeout=NODE_TIMEOUT_S,
    )


def _counts(output: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"^# (tests|pass|fail|todo) (\d+)$", output, re.M)}


@pytest.fixture(scope="module")
def node() -> str:
    return _node()


@pytest.fixture(scope="module")
def fixture_file(node: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # after `node`: no fixtures written where node is missing
    path: Path = _writer().write_fixtures(tmp_path_factory.mktemp("js_fixtures"))
    return path


def test_maths_js_matches_the_library(node: str, fixture_file: Path) -> None:
    proc = _run_node(node, fixture_file)
    output = proc.stdout + proc.stderr
    print(output)
    if proc.returncode != 0:
        pytest.fail(f"node --test tests/js/ exited with {proc.returncode}:\n{output}")
    counts = _counts(proc.stdout)
    assert counts.get("fail") == 0 and counts.get("pass", 0) >= 15, (counts, output)


def _perturb_objective(fx: dict[str, Any]) -> None:
    fx["objective"][1]["values"][5] += 1e-6


def _perturb_rounding(fx: dict[str, Any]) -> None:
    case = fx["rounding"]["on_simplex"][0]
    case["expected"][0] = round(case["expected"][0] + 0.01, 2)


def _perturb_pixel(fx: dict[str, Any]) -> None:
    rec = fx["mixing"]["geodesic"][-1]
    k = next(i for i in range(len(rec["pixels"])) if i not in set(rec["near_half"]))
    rec["pixels"][k] = (rec["pixels"][k] + 1) % 256


def _perturb_payload_value(fx: dict[str, Any]) -> None:
    values = fx["payloads"][1]["arrays"]["w_to_target"]["values"]
    values[0] = float(np.nextafter(values[0], np.inf))  # one ulp


@pytest.mark.parametrize(
    ("perturb", "failing"),
    [
        (_perturb_objective, "objective equals the library's"),
        (_perturb_rounding, "roundToSimplex equals the app's rounding"),
        (_perturb_pixel, "mixShownImages equals numpy's"),
        (_perturb_payload_value, "decode gives exactly the arrays"),
    ],
    ids=["objective+1e-6", "rounding+0.01", "pixel+1", "payload+1ulp"],
)
def test_node_fails_on_a_perturbed_fixture(
    node: str, fixture_file: Path, perturb: Any, failing: str
) -> None:
    """Proof the node test can fail: one number of the library's changed, node exits
    non-zero and names the check."""
    fx = json.loads(fixture_file.read_text(encoding="utf-8"))
    perturb(fx)
    bad = fixture_file.with_name(f"perturbed_{perturb.__name__}.json")  # next to the payloads
    bad.write_text(json.dumps(fx), encoding="utf-8")
    proc = _run_node(node, bad)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"node passed a perturbed fixture:\n{output}"
    not_ok = [
        line
        for line in proc.stdout.splitlines()
        if line.startswith("not ok") and "# TODO" not in line
    ]
    assert len(not_ok) == 1 and failing in not_ok[0], output


def test_project_to_simplex_is_the_euclidean_projection() -> None:
    """The library's project_to_simplex against its own reference, the optimality condition
    of a projection onto a convex set: ``(v - p) . (b - p) <= 0`` for every b of the simplex,
    i.e. for every vertex b = e_k (the explorer's clipAndRenormalise is another operation:
    tests/js/maths.test.mjs shows them differ at (0.8, 0.6, -0.4))."""
    from geoviz.geodesic.weights import project_to_simplex

    rng = np.random.default_rng(17)
    for k in range(300):
        m = 2 + k % 5
        v = rng.normal(0.3, 1.0, size=m) * rng.choice([0.01, 1.0, 10.0])
        p = project_to_simplex(v)
        assert (p >= 0).all() and abs(p.sum() - 1) < 1e-12
        slack = (v - p) @ (np.eye(m) - p).T  # (v - p) . (e_k - p) for every k
        assert slack.max() <= 1e-12 * max(1.0, np.abs(v).max()), (v, p, slack)
    p = project_to_simplex([0.8, 0.6, -0.4])
    np.testing.assert_allclose(p, [0.6, 0.4, 0.0], atol=1e-15)
    clipped = np.clip([0.8, 0.6, -0.4], 0, None) / 1.4
    assert np.abs(p - clipped).max() > 0.02
