"""A 64x64 RGB image folder against three references through the CLI: pixels vs encoder.

Issue 22: a colour folder of 2000 images at 64x64 against 3 references took 1 min 21 s and
2.6 GB end to end in pixel space. This script writes such a folder (MNIST-M-style digits,
:func:`geoviz.data.colour.photo_digits` of MNIST *test* digits from ``../shared/data/nist``,
as PNG files in ``<class>/`` sub-folders), then runs, in one go and with one fresh cache,

1. ``geoviz project --target FOLDER --refs mnist,fashion_mnist,usps --n 2000 --size 64``
   in pixel space (the yardstick);
2. the same with ``--features encoder`` (the encoder trained: its first run);
3. the same again (the encoder read from the cache);

each as its own process, and prints wall time, peak RSS of the process and ``a_hat``.

Run: ``.venv/bin/python benchmarks/bench_features_cli.py`` (about 5 min on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_features import nist  # noqa: E402


def write_folder(folder: Path, n: int, size: int) -> None:
    from PIL import Image

    from geoviz.data.colour import photo_digits

    ds = photo_digits(nist("mnist", "test", n), size=size, seed=0)
    images = (ds.features.numpy().reshape(-1, 3, size, size).transpose(0, 2, 3, 1) * 255).round()
    for k, (img, label) in enumerate(zip(images.astype(np.uint8), ds.labels.numpy(), strict=True)):
        sub = folder / ds.classes[int(label)]
        sub.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(sub / f"{k:05d}.png")


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):  # the process's own peak resident size
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MB, polled from /proc) and stdout of ``cmd``."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        peak = 0.0
        while proc.poll() is None:
            peak = max(peak, _rss_mb(proc.pid))
            time.sleep(0.2)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{stderr[-3000:]}")
    return wall, peak, stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--size", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="geoviz-bench-cli-") as tmp_name:
        tmp = Path(tmp_name)
        folder = tmp / "colour_digits"
        write_folder(folder, args.n, args.size)
        env = {**os.environ, "GEOVIZ_CACHE_DIR": str(tmp / "cache")}
        base = [
            sys.executable, "-m", "geoviz", "project", "--target", str(folder),
            "--refs", "mnist,fashion_mnist,usps", "--n", str(args.n),
            "--size", str(args.size), "--quiet",
        ]  # fmt: skip
        rows = []
        for label, extra in (
            ("pixels", []),
            ("encoder, first run (trains it)", ["--features", "encoder"]),
            ("encoder, second run (cached)", ["--features", "encoder"]),
        ):
            wall, peak, out = run(base + extra, env)
            a_hat = re.search(r"^â:\s*(.*)$", out, flags=re.M)
            rows.append((label, wall, peak, a_hat.group(1) if a_hat else "?"))
            print(rows[-1], flush=True)
        print()
        print(f"{args.n} RGB images {args.size}x{args.size} (a folder of PNGs) against 3 references "
              f"(bundled samples, {args.n} each), `geoviz project`, one process each")  # fmt: skip
        print("| run | wall | peak RSS | vs pixels | â |")
        print("|---|---:|---:|---:|---|")
        for label, wall, peak, a_hat in rows:
            print(
                f"| {label} | {wall:.1f} s | {peak:,.0f} MB | {wall / rows[0][1]:.2f} | {a_hat} |"
            )


if __name__ == "__main__":
    main()
