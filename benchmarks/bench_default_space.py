"""The default space's first answers and their cost, through the CLI as a user runs it (issue 33).

Each row is one ``geoviz project`` process with its own empty cache (a cold first run):

* the app's default scenario (``--target mnist --refs fashion_mnist,usps,kmnist``, the
  bundled samples, N = 2000) at the default space and with ``--features pixels``;
* the bundled colour target ``mnist_m`` (MNIST-M-style photo digits) against MNIST,
  Fashion-MNIST and USPS (``--n 2000``: the target has 400 training samples, all used), at the
  default space (the shipped encoder: nothing is trained) and with ``--features pixels``,
  the yardstick of the ratio the issue bounds (cold default run <= 2.5x the pixel run).

It prints the space line the CLI printed, ``a_hat``, the best single reference, the wall
time of each run, and the ratio of each default run to its pixel run.

Run: ``python benchmarks/bench_default_space.py`` (about 2 min on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBLEMS = {
    "default scenario (grey digits)": ["--target", "mnist", "--refs", "fashion_mnist,usps,kmnist"],
    "colour target mnist_m": ["--target", "mnist_m", "--refs", "mnist,fashion_mnist,usps"],
}


def run(args: list[str]) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, GEOVIZ_CACHE_DIR=cache)
        cmd = [sys.executable, "-m", "geoviz", "project", *args, "--n", "2000", "--quiet"]
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    out = done.stdout
    space = next(ln for ln in out.splitlines() if ln.startswith("space: "))
    a_hat_line = next(ln for ln in out.splitlines() if ln.startswith("â:"))
    best = next(ln for ln in out.splitlines() if ln.startswith("best single reference: "))
    return {
        "space": space,
        "a_hat": dict(re.findall(r"(\S+?)=([0-9.]+)", a_hat_line.split(":", 1)[1])),
        "best_single": best.split(": ", 1)[1].split(" ")[0],
        "wall_s": round(wall, 1),
        "command": "geoviz project " + " ".join(args) + " --n 2000",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="JSON results")
    args = parser.parse_args()
    rows = []
    for problem, base in PROBLEMS.items():
        pixels = run([*base, "--features", "pixels"])
        default = run(base)
        rows.append((problem, pixels, default))
        print(json.dumps({"problem": problem, "pixels": pixels, "default": default}), flush=True)
    print()
    print("| problem | space | a_hat | best single reference | wall | vs pixels |")
    print("|---|---|---|---|---:|---:|")
    for problem, pixels, default in rows:
        for label, row in (("pixels (named)", pixels), ("default", default)):
            ratio = float(row["wall_s"]) / float(pixels["wall_s"])
            space = str(row["space"]).split(" (")[0].removeprefix("space: ")
            shown = label if label != "default" else f"default: {space}"
            a_hat = " / ".join(f"{k} {float(v):.2f}" for k, v in dict(row["a_hat"]).items())
            print(
                f"| {problem} | {shown} | {a_hat} | {row['best_single']} | "
                f"{row['wall_s']} s | {ratio:.2f} |"
            )
    for problem, _, default in rows:
        print(f"{problem}: {default['space']}")
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
