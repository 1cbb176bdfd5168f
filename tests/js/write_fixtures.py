"""The numbers the explorer's maths (``geoviz/explorer/frontend/maths.js``) is checked
against by ``tests/js/maths.test.mjs``, written by the Python library itself.

Every expected value here comes from geoviz (``GeodesicResult.objective``,
``geoviz.geodesic.distances.objective``, ``SimplexWeights.from_input`` /
``round_to_simplex``, ``check_weights``, ``project_to_simplex``, the bootstrap's
``objective_interval`` / ``gap_interval`` / ``as_good_as_a_hat``, ``simplex_compositions``,
``geoviz.explorer.payload.encode`` / ``build_*`` / ``decode``) or from numpy / scipy / plotly
where the library has no function of its own (P_a's uint8 pixels are numpy's
``round(sum_i a_i images[i + 1])`` of the decoded payload, as ``tests/test_explorer.py``
mixes them; the clip-and-renormalise of a pointer far off the triangle; the Kuhn cell of the
embedding grid for ``m = 3``, from scipy's Delaunay triangulation; viridis from plotly's
colour scale, the one the library's figures use).

Usage::

    .venv/bin/python tests/js/write_fixtures.py OUT_DIR
    GEOVIZ_JS_FIXTURES=OUT_DIR/fixtures.json node --test tests/js/

Floats go to JSON with ``repr`` precision (Python's ``json``), so ``JSON.parse`` gives back
the very same float64 values. The payloads are written as binary files next to the JSON
(``payload_*.bin``), and the JSON holds the arrays Python encoded in them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

#: the fixture file's name inside the folder given to write_fixtures
FIXTURE_NAME = "fixtures.json"
#: bump when the fixture's layout changes (the node test checks it)
FIXTURE_VERSION = 1


def _f(x: Any) -> Any:
    """numpy -> plain JSON (lists of Python floats / ints)."""
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    return x


# ------------------------------------------------------------------ a tiny fitted result


def _bars(n: int, seed: int, size: int, name: str) -> Any:
    """tests/synthetic_data.py's bar images (float32 features), named ``name``."""
    sys.path.insert(
        0, str(Path(__file__).resolve().parents[1])
    )  # tests/, also when run as a script
    from synthetic_data import bars

    data = bars(n, seed, size)
    return dataclasses.replace(data, features=data.features.float(), name=name)


def _fit() -> Any:
    """A small image GeodesicResult (3 references, 8x8 images): about 2 s on a CPU."""
    from geoviz.geodesic.config import GeodesicConfig
    from geoviz.geodesic.pipeline import fit_geodesic
    from geoviz.ot.otdd_cost import OTDDConfig

    target = _bars(40, 0, 8, "target")
    refs = [_bars(30, s, 8, f"ref{s}") for s in (1, 2, 3)]
    return fit_geodesic(target, refs, GeodesicConfig(otdd=OTDDConfig(epsilon=0.01)))


# ------------------------------------------------------------------ payloads


def _payload_record(name: str, data: bytes, folder: Path) -> dict[str, Any]:
    """The payload's bytes to ``payload_<name>.bin`` and what Python decodes from them."""
    from geoviz.explorer.payload import decode

    file = f"payload_{name}.bin"
    (folder / file).write_bytes(data)
    header, arrays = decode(data)
    return {
        "name": name,
        "file": file,
        "bytes": len(data),
        "header": header,
        "arrays": {
            k: {"dtype": v.dtype.name, "shape": list(v.shape), "values": _f(v.ravel())}
            for k, v in arrays.items()
        },
    }


def _synthetic_arrays() -> dict[str, np.ndarray]:
    """Every dtype the payload uses, odd lengths (padding), extreme and signed-zero floats,
    a big-endian input, an empty array and a uint8 simplex grid."""
    from geoviz.explorer.payload import grid_resolution
    from geoviz.geodesic.distances import simplex_compositions

    rng = np.random.default_rng(7)
    specials = [
        0.0,
        -0.0,
        1 / 3,
        -2.5,
        math.pi,
        5e-324,
        2.2250738585072014e-308,
        1.7976931348623157e308,
    ]
    return {
        "f8_specials": np.array(specials, dtype=np.float64),
        "u8_odd": np.arange(0, 256, 37, dtype=np.uint8),  # 7 bytes: the next array is padded
        "f4_block": rng.normal(size=(2, 3, 5)).astype(np.float32),
        "f8_big_endian": np.linspace(-1.0, 1.0, 5).astype(">f8"),
        "f8_empty": np.zeros(0, dtype=np.float64),
        "u8_all": np.arange(256, dtype=np.uint8).reshape(16, 16),
        "f4_specials": np.array([0.0, -0.0, 1e-45, 3.4028235e38, -1 / 3], dtype=np.float32),
        "grid": simplex_compositions(3, grid_resolution(3)).astype(np.uint8),
    }


# ------------------------------------------------------------------ sections


def _objective_cases(result: Any) -> list[dict[str, Any]]:
    """W^2(P_a, Q) over a grid of the simplex (plus random points) for random symmetric
    (2,Q) matrices, m = 2, 3, 4, and for the fitted result."""
    from geoviz.geodesic.distances import objective, simplex_grid

    rng = np.random.default_rng(2024)
    cases = []
    for m, res in ((2, 20), (3, 10), (4, 6)):
        w_t = rng.uniform(0.5, 10.0, size=m)
        upper = np.triu(rng.uniform(0.0, 12.0, size=(m, m)), 1)
        w_b = upper + upper.T
        if m == 4:  # a non-zero diagonal: both sides must ignore it
            w_b[np.diag_indices(m)] = rng.uniform(1.0, 5.0, size=m)
        points = np.concatenate([simplex_grid(m, res), rng.dirichlet(np.ones(m), size=10)])
        cases.append(
            {
                "name": f"random m={m}",
                "m": m,
                "w_to_target": _f(w_t),
                "w_between": _f(w_b.ravel()),
                "points": _f(points),
                "values": _f(objective(points, w_t, w_b)),
            }
        )
    points = np.concatenate(
        [simplex_grid(result.m, 10), np.asarray(result.a_hat, dtype=np.float64)[None]]
    )
    cases.append(
        {
            "name": "fitted result (GeodesicResult.objective)",
            "m": int(result.m),
            "w_to_target": _f(np.asarray(result.w_to_target, dtype=np.float64)),
            "w_between": _f(np.asarray(result.w_between, dtype=np.float64).ravel()),
            "points": _f(points),
            "values": _f(result.objective(points)),
        }
    )
    return cases


def _rounding_cases(result: Any) -> dict[str, Any]:
    """Largest-remainder rounding as the app does it: ``SimplexWeights.from_input`` (which
    is ``check_weights`` then ``round_to_simplex``) for inputs within ``WEIGHT_ATOL`` of the
    simplex; and pointer positions far off the triangle."""
    from geoviz.geodesic.weights import (
        ENTRY_DECIMALS,
        SimplexWeights,
        check_weights,
        project_to_simplex,
        round_to_simplex,
    )

    rng = np.random.default_rng(11)
    on: list[tuple[str, list[float], int]] = [
        ("tie at .5, lower index first", [0.125, 0.375, 0.5], 2),
        ("four-way tie", [0.25, 0.25, 0.25, 0.25], 1),
        ("thirds, 4 decimals", [1 / 3, 1 / 3, 1 / 3], 4),
        ("thirds, 2 decimals", [1 / 3, 1 / 3, 1 / 3], 2),
        ("halves, 0 decimals", [0.5, 0.5], 0),
        ("tie at the 5th decimal", [0.00005, 0.99995], 4),
        ("tie at the 5th decimal, 3 entries", [0.12345, 0.12345, 0.7531], 4),
        ("tiny negative first", [-1e-9, 0.3, 0.7 + 1e-9], 4),
        ("tiny negative last", [0.5, 0.5 + 5e-7, -5e-7], 4),
        ("sum 1 + 2 ulp", [0.1, 0.2, 0.7], 4),
        ("sum 1 - ulp", [0.7, 0.2, 0.1], 2),
        ("ten tenths", [0.1] * 10, 4),
        ("sum off by 1e-7", [0.2, 0.3, 0.5 + 1e-7], 4),
        ("vertex", [0.0, 1.0, 0.0], 4),
        ("a_hat at ENTRY_DECIMALS", [float(x) for x in result.a_hat], ENTRY_DECIMALS),
    ]
    for k in range(12):
        m = 3 if k < 8 else 4
        on.append((f"random m={m}", _f(rng.dirichlet(np.ones(m))), ENTRY_DECIMALS))
    on_simplex = []
    for name, a, d in on:
        app = SimplexWeights.from_input(a, len(a), d).tolist()
        lib = round_to_simplex(a, d)
        assert np.array_equal(lib, app), (name, lib, app)
        on_simplex.append({"name": name, "a": a, "decimals": d, "expected": app})

    # pointer positions off the triangle: the explorer clips and renormalises; the library's
    # project_to_simplex is the Euclidean projection, a different point
    off = [
        [0.8, 0.6, -0.4],
        [1.3, -0.1, -0.2],
        [-0.25, 0.5, 0.75],
        [0.2, 0.2, 0.2],
        [2.0, 1.0, 0.0, -1.0],
        [-1.0, -2.0, -3.0],
    ]
    off_simplex = []
    for v in off:
        clipped = [max(0.0, x) for x in v]
        total = sum(clipped)  # left to right, as the reference definition
        reference = [x / total for x in clipped] if total > 0 else [1 / len(v)] * len(v)
        off_simplex.append(
            {
                "v": v,
                "clip_renormalise": reference,
                "project_to_simplex": _f(project_to_simplex(v)),
                "round_of_clip": _f(round_to_simplex(reference, ENTRY_DECIMALS)),
                "round_to_simplex": _f(round_to_simplex(v, ENTRY_DECIMALS)),
                "decimals": ENTRY_DECIMALS,
            }
        )
    # within WEIGHT_ATOL of the simplex the library's check_weights is the same operation
    tiny = [[-1e-9, 0.3, 0.7 + 1e-9], [0.5, 0.5 + 5e-7, -5e-7], [0.1, 0.2, 0.7], [0.25] * 4]
    check = [{"v": v, "expected": _f(check_weights(v, len(v)))} for v in tiny]
    return {"on_simplex": on_simplex, "off_simplex": off_simplex, "check_weights": check}


def _shown_weights(m: int, a_hat: np.ndarray) -> list[list[float]]:
    from geoviz.geodesic.weights import ENTRY_DECIMALS, SimplexWeights

    rng = np.random.default_rng(5)
    picks = [np.eye(m)[i] for i in range(m)]
    picks += [np.full(m, 1 / m), a_hat, np.r_[0.5, np.full(m - 1, 0.5 / (m - 1))]]
    picks += list(rng.dirichlet(np.ones(m), size=6))
    return [SimplexWeights.from_input(p, m, ENTRY_DECIMALS).tolist() for p in picks]


def _mix_record(images: np.ndarray, coefs: list[list[float]], offset: int, rows: int) -> Any:
    """numpy's ``round(sum_i c_i images[i + offset])`` of the first ``rows`` samples, and
    the entries whose float64 sum lies within 1e-9 of a half level (where a different
    summation order may round to the neighbouring level)."""
    out = []
    for c in coefs:
        block = images[offset : offset + len(c), :rows].astype(np.float64)
        raw = np.tensordot(np.asarray(c, dtype=np.float64), block, axes=1).ravel()
        pixels = np.clip(np.floor(raw + 0.5), 0, 255).astype(np.uint8)
        near = np.flatnonzero(np.abs(raw - np.floor(raw) - 0.5) < 1e-9)
        out.append({"weights": c, "pixels": _f(pixels), "near_half": _f(near)})
    return out


def _bootstrap_section(result: Any, boot: Any) -> dict[str, Any]:
    from geoviz.geodesic.distances import simplex_grid

    rng = np.random.default_rng(3)
    m = result.m
    points = np.concatenate(
        [
            np.asarray(boot.a_hat, dtype=np.float64)[None],
            simplex_grid(m, 8),
            rng.dirichlet(np.ones(m), size=10),
        ]
    )
    levels = []
    for level in (boot.level, 0.9, 0.5):
        value = boot.objective_interval(points, level)
        gap = boot.gap_interval(points, level)
        good = boot.as_good_as_a_hat(points, level)
        levels.append(
            {
                "level": float(level),
                "value_low": _f(value.low),
                "value_high": _f(value.high),
                "gap_low": _f(gap.low),
                "gap_high": _f(gap.high),
                "good": _f(good),
            }
        )
    return {
        "points": _f(points),
        "a_hat": _f(np.asarray(boot.a_hat, dtype=np.float64)),
        "replicate_objectives": _f(boot.objective_replicates(points).T),  # (K, B)
        "hat_objectives": _f(boot.objective_replicates(boot.a_hat)),
        "levels": levels,
    }


def _quantile_section() -> dict[str, Any]:
    """numpy's quantile (method "linear", the one the bootstrap uses) and the library's own
    percentile interval (``geoviz.geodesic.uncertainty._quantiles``)."""
    from geoviz.geodesic.uncertainty import _quantiles

    rng = np.random.default_rng(9)
    samples = [
        [4.2],
        [1.0, -1.0],
        _f(rng.normal(size=7)),
        _f(rng.normal(3.0, 2.0, size=40)),
        _f(np.round(rng.normal(size=200), 1)),  # many ties
        _f(rng.exponential(1e-6, size=61)),
    ]
    qs = [0.0, 0.005, 0.025, 0.05, 0.1, 0.25, 0.3, 0.5, 0.7, 0.9, 0.975, 0.995, 1.0]
    levels = [0.5, 0.8, 0.9, 0.95, 0.99]
    out = []
    for s in samples:
        arr = np.asarray(s, dtype=np.float64)
        intervals = []
        for lvl in levels:
            lo, hi = _quantiles(arr, lvl)
            alpha = 1.0 - lvl
            pct = np.percentile(arr, [100 * alpha / 2, 100 * (1 - alpha / 2)], method="linear")
            assert np.allclose([lo, hi], pct, rtol=1e-13, atol=1e-300), (lvl, lo, hi, pct)
            intervals.append({"level": lvl, "low": float(lo), "high": float(hi)})
        out.append(
            {
                "values": s,
                "q": qs,
                "quantile": _f(np.quantile(np.sort(arr), qs, method="linear")),
                "intervals": intervals,
            }
        )
    return {"cases": out}


def _grid_section() -> dict[str, Any]:
    """The simplex grid's compositions, and for m = 3 the interpolation weights of random
    points over the grid's triangles (scipy's Delaunay triangulation of the grid drawn as an
    equilateral triangle: for m = 3 the grid's unique triangulation, the explorer's cells)."""
    from scipy.spatial import Delaunay

    from geoviz.explorer.payload import grid_resolution
    from geoviz.geodesic.distances import simplex_compositions

    rng = np.random.default_rng(13)
    cases = []
    for m, res in ((2, 10), (3, grid_resolution(3)), (3, 4), (4, grid_resolution(4)), (5, 2)):
        comps = simplex_compositions(m, res)
        points = rng.dirichlet(np.ones(m), size=12)
        case: dict[str, Any] = {
            "m": m,
            "r": int(res),
            "compositions": _f(comps),
            "points": _f(points),
        }
        if m == 3:
            corners = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, math.sqrt(3) / 2]])
            tri = Delaunay(comps / res @ corners)
            xy = points @ corners
            simplex = tri.find_simplex(xy)
            expected = []
            for p, s in zip(xy, simplex, strict=True):
                assert s >= 0
                t = tri.transform[s]
                b = t[:2] @ (p - t[2])
                w = np.r_[b, 1 - b.sum()]
                expected.append(
                    {str(int(k)): float(x) for k, x in zip(tri.simplices[s], w, strict=True)}
                )
            case["delaunay_weights"] = expected
        cases.append(case)
    return {"cases": cases}


def _viridis_section() -> dict[str, Any]:
    """plotly's "Viridis" (the colour scale of the library's objective figures) at 101 points."""
    from plotly.colors import sample_colorscale, unlabel_rgb

    ts = np.linspace(0.0, 1.0, 101)
    rgb = [list(unlabel_rgb(c)) for c in sample_colorscale("Viridis", _f(ts))]
    return {"t": _f(ts), "rgb": rgb}


# ------------------------------------------------------------------ the whole fixture


def write_fixtures(path: str | Path) -> Path:
    """Write ``fixtures.json`` and the payload files into the folder ``path`` (created);
    returns the JSON file's path (the value of ``GEOVIZ_JS_FIXTURES``)."""
    from geoviz.explorer.payload import (
        build_bootstrap,
        build_geodesic,
        build_mccann,
        decode,
        encode,
    )

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    result = _fit()
    boot = result.bootstrap(60, seed=4)
    geo = build_geodesic(result)
    mccann = build_mccann(result, 1)
    boot_payload = build_bootstrap(boot)
    synthetic = encode({"hello": "wörld ∆", "n": 3, "nested": {"x": [1, 2.5]}}, _synthetic_arrays())

    g_header, g_arrays = decode(geo.data)
    m = int(result.m)
    picks = _shown_weights(m, np.asarray(result.a_hat, dtype=np.float64))
    n_shown = int(g_header["n_shown"])
    mc_header, mc_arrays = decode(mccann.data)
    ts = [0.0, 0.25, 0.3, 0.5, 0.7, 0.9999, 1.0]
    mass = g_arrays["mass"].astype(np.float64)
    ragged = [np.array([0.25, 0.75]), np.array([0.1, 0.2, 0.3, 0.4]), np.array([1.0])]

    fixture = {
        "version": FIXTURE_VERSION,
        "payloads": [
            _payload_record("synthetic", synthetic, folder),
            _payload_record("geodesic", geo.data, folder),
            _payload_record("mccann", mccann.data, folder),
            _payload_record("bootstrap", boot_payload.data, folder),
        ],
        "objective": _objective_cases(result),
        "rounding": _rounding_cases(result),
        "mixing": {
            "geodesic": _mix_record(g_arrays["images"], picks, 1, n_shown),
            "mccann": _mix_record(
                mc_arrays["images"], [[1.0 - t, t] for t in ts], 0, int(mc_header["n_shown"])
            ),
            "mccann_t": ts,
        },
        "label_mass": {
            "geodesic": [
                {"weights": a, "expected": _f(np.asarray(a)[:, None] * mass)} for a in picks
            ],
            "ragged": {
                "weights": [0.2, 0.5, 0.3],
                "mass": [_f(r) for r in ragged],
                "expected": [_f(w * r) for w, r in zip([0.2, 0.5, 0.3], ragged, strict=True)],
            },
        },
        "quantiles": _quantile_section(),
        "bootstrap": _bootstrap_section(result, boot),
        "grid": _grid_section(),
        "viridis": _viridis_section(),
    }
    out = folder / FIXTURE_NAME
    # allow_nan=False: a NaN would not be JSON that JavaScript reads
    out.write_text(json.dumps(fixture, allow_nan=False), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: write_fixtures.py OUT_DIR", file=sys.stderr)
        return 2
    print(write_fixtures(args[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
