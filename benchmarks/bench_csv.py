"""CSV uploads: geoviz's parser against ``numpy.loadtxt`` on the same bytes (issue 25, row 2).

A 16 MB CSV of 10 rows and 10^6 columns used to cost 114 s of server CPU: the parser looked
up every column on its own. The parser now reads the header first and refuses more than
:data:`geoviz.limits.MAX_CSV_COLUMNS` columns before parsing a row, and parses the rest in
time linear in the table (``numpy.loadtxt`` for all-numeric tables, ``pandas.read_csv`` with
column checks done at once otherwise). For every shape below it prints the best of
``--repeat`` runs of ``geoviz.data.formats.load_upload`` and of ``numpy.loadtxt`` (the
yardstick: numbers only, no labels, no checks) and their ratio; the target is a ratio of at
most 3, or a refusal from the header in under a second.

Run: ``.venv/bin/python benchmarks/bench_csv.py`` (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import io
import time

import numpy as np

from geoviz.data.formats import load_upload
from geoviz.errors import GeovizError

SHAPES = [  # (rows, columns, label kind)
    (10, 1_000_000, "numeric"),
    (10, 65_535, "numeric"),
    (10, 65_535, "text"),
    (100, 20_000, "numeric"),
    (20_000, 785, "numeric"),
    (20_000, 785, "text"),
    (200_000, 20, "numeric"),
]


def table(rows: int, cols: int, labels: str) -> bytes:
    """``rows`` x ``cols`` CSV: ``cols - 1`` integer pixel columns and a label column."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(rows, cols - 1))
    lab = np.arange(rows) % 10
    buf = io.StringIO()
    buf.write(",".join([f"p{i}" for i in range(cols - 1)] + ["label"]) + "\n")
    lab_text = [f"class{v}" for v in lab] if labels == "text" else [str(v) for v in lab]
    body = np.char.add(np.char.add([",".join(map(str, r)) for r in x], ","), lab_text)
    buf.write("\n".join(body.tolist()) + "\n")
    return buf.getvalue().encode()


def best(fn, repeat: int) -> tuple[float, str]:
    times, outcome = [], ""
    for _ in range(repeat):
        start = time.perf_counter()
        try:
            fn()
            outcome = "parsed"
        except GeovizError as err:
            outcome = "refused: " + str(err).split(": ", 1)[-1][:60]
        times.append(time.perf_counter() - start)
    return min(times), outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("| rows x columns | labels | MB | numpy.loadtxt | geoviz | ratio | geoviz did |")
    print("|---|---|---:|---:|---:|---:|---|")
    for rows, cols, labels in SHAPES:
        data = table(rows, cols, labels)

        def yardstick(data: bytes = data, labels: str = labels, cols: int = cols) -> None:
            use = None if labels == "numeric" else range(cols - 1)
            np.loadtxt(io.BytesIO(data), delimiter=",", skiprows=1, usecols=use)

        t_np, _ = best(yardstick, args.repeat)
        t_gv, outcome = best(lambda data=data: load_upload(data, "bench.csv"), args.repeat)
        print(
            f"| {rows:,} x {cols:,} | {labels} | {len(data) / 1e6:.1f} | {t_np:.3f} s | "
            f"{t_gv:.3f} s | {t_gv / t_np:.2f} | {outcome} |"
        )


if __name__ == "__main__":
    main()
