"""examples/explore_geodesic.ipynb runs headless (nbclient, a fresh kernel of this Python):
it fits a small geodesic on the bundled data, displays ``result.explore()`` (a widget needs no
front end to be created), reads the pick, its value and interval, exports ``P_a``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "explore_geodesic.ipynb"


@pytest.mark.slow
def test_the_example_notebook_runs(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (dev extra)")
    nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (dev extra)")
    pytest.importorskip("ipykernel", reason="ipykernel is not installed (jupyterlab brings it)")
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GEOVIZ_EMBEDDING", "pca")  # no UMAP compilation in a test
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    # the kernel is this interpreter (jupyter_client runs the "python3" kernel as sys.executable)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{__import__('os').environ['PATH']}")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=240,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    outputs = {
        k: "".join(
            o.get("text", "") or str(o.get("data", {}).get("text/plain", "")) for o in cell.outputs
        )
        for k, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
    }
    text = "\n".join(outputs.values())
    assert "Traceback" not in text and "Error" not in text.replace("TraitError", "")
    widget_cell = next(
        c for c in nb.cells if c.cell_type == "code" and "result.explore()" in c.source
    )
    assert any(
        "application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in widget_cell.outputs
    )
    assert "refused weights" in text  # the off-simplex assignment, printed
    assert "([0.5, 0.25, 0.25]," in text
    assert "interval [" in text
    assert "P_a(0.5,0.25,0.25)" in text or "(120, " in text
    assert seconds < 120, f"the example took {seconds:.0f} s"
