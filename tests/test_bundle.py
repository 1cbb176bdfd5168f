"""The widget's JavaScript bundle (geoviz.explorer.bundle): the explorer's ES modules joined
into one ES module that node parses, with no import left; clear errors for a missing module,
a missing export, a name declared twice, a cycle and unsupported forms."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from geoviz.explorer import bundle as xb

NODE = shutil.which("node") or "/usr/bin/node"


def _node_check(source: str) -> subprocess.CompletedProcess[str]:
    if not Path(NODE).exists():
        pytest.skip(
            "node is not installed (apt-get install nodejs): the bundle's syntax check needs it"
        )
    return subprocess.run(
        [NODE, "--input-type=module", "--check"],
        input=source,
        text=True,
        capture_output=True,
        timeout=60,
    )


def _no_module_syntax_left(source: str) -> None:
    assert not re.search(r"^\s*import[\s{*\"']", source, re.M), "an import statement is left"
    exports = re.findall(r"^\s*export\b.*$", source, re.M)
    assert exports == [line for line in exports if line.strip().startswith("export default")]
    assert len(exports) == 1


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


HOST = (
    'import { createExplorer } from "./explorer.js";\n'
    "export default { render({ model, el }) { const e = createExplorer(el, {});"
    " return () => e.destroy(); } };\n"
)
EXPLORER = (
    "/* the explorer */\n"
    'import { add, TAU } from "./maths.js";\n'
    'import { draw } from "./draw.js";\n'
    "\n"
    "export function createExplorer(root, host) {\n"
    "  const local = add(1, TAU);\n"
    "  return { render(args) { draw(local); }, hooks: {}, destroy() {} };\n"
    "}\n"
)
MATHS = "export function add(a, b) { return a + b; }\nexport const TAU = 6.28, HALF = 0.5;\n"
DRAW = (
    'import { add } from "./maths.js";\n'
    "const PRIVATE = 2;\n"
    "export class Painter { paint() { return add(PRIVATE, 1); } }\n"
    "export function draw(x) { return new Painter().paint() + x; }\n"
)


def test_the_real_bundle_is_one_es_module_without_imports():
    source = xb.bundle()
    assert source is xb.bundle()  # built once
    _no_module_syntax_left(source)
    assert "function createExplorer(" in source
    assert source.rstrip().endswith("};")  # the host's default export is last
    assert "// ---- streamlit.js" not in source  # the Streamlit host is not bundled
    assert "// ---- explorer.js" in source and "// ---- maths.js" in source
    result = _node_check(source)
    assert result.returncode == 0, result.stderr


def test_modules_come_after_what_they_import(tmp_path):
    folder = _tree(
        tmp_path,
        {"jupyter.js": HOST, "explorer.js": EXPLORER, "maths.js": MATHS, "draw.js": DRAW},
    )
    source = xb.build_bundle(folder)
    order = re.findall(r"^// ---- (\S+)$", source, re.M)
    assert order == ["maths.js", "draw.js", "explorer.js", "jupyter.js"]
    _no_module_syntax_left(source)
    result = _node_check(source)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"explorer.js": EXPLORER, "maths.js": MATHS}, "./draw.js, which does not exist"),
        (
            {"explorer.js": EXPLORER, "maths.js": MATHS.replace("TAU", "TWO_PI"), "draw.js": DRAW},
            "imports ['TAU'] from ./maths.js, which does not export them",
        ),
        (
            {
                "explorer.js": EXPLORER,
                "maths.js": MATHS + "function helper() {}\n",
                "draw.js": DRAW + "function helper() { return 1; }\n",
            },
            "'helper' is declared in both maths.js and draw.js",
        ),
        (
            {"explorer.js": EXPLORER, "maths.js": MATHS + "const PRIVATE = 3;\n", "draw.js": DRAW},
            "'PRIVATE' is declared in both maths.js and draw.js",
        ),
        (
            {
                "explorer.js": EXPLORER,
                "maths.js": 'import { draw } from "./draw.js";\n' + MATHS,
                "draw.js": DRAW,
            },
            "import cycle",
        ),
        (
            {
                "explorer.js": EXPLORER,
                "maths.js": "import * as m from './x.js';\n",
                "draw.js": DRAW,
            },
            "unsupported import",
        ),
        (
            {
                "explorer.js": EXPLORER,
                "maths.js": MATHS + "export { add as plus };\n",
                "draw.js": DRAW,
            },
            "unsupported export",
        ),
        (
            {"explorer.js": EXPLORER, "maths.js": MATHS + "export default 1;\n", "draw.js": DRAW},
            "`export default` only in the host module",
        ),
        (
            {
                "explorer.js": EXPLORER,
                "maths.js": MATHS,
                "draw.js": DRAW.replace('"./maths.js"', '"./maths2.js"'),
            },
            "./maths2.js, which does not exist",
        ),
    ],
    ids=[
        "missing-module",
        "renamed-export",
        "function-clash",
        "const-clash",
        "cycle",
        "namespace-import",
        "export-list",
        "default-in-module",
        "renamed-module",
    ],
)
def test_clear_errors(tmp_path, files, message):
    folder = _tree(tmp_path, {"jupyter.js": HOST, **files})
    with pytest.raises(xb.BundleError, match=re.escape(message)):
        xb.build_bundle(folder)


def test_a_missing_host_is_named(tmp_path):
    with pytest.raises(xb.BundleError, match=r"jupyter\.js is missing"):
        xb.build_bundle(tmp_path)


def test_imports_only_at_the_top(tmp_path):
    late = "export const A = 1;\n" + 'import { add } from "./maths.js";\n'
    folder = _tree(tmp_path, {"jupyter.js": HOST, "explorer.js": late, "maths.js": MATHS})
    with pytest.raises(xb.BundleError, match="unsupported import"):
        xb.build_bundle(folder)


def test_the_streamlit_page_preloads_every_module_it_imports():
    """index.html lists, as modulepreload links, exactly the modules streamlit.js reaches."""
    import re

    from geoviz.explorer.bundle import FRONTEND, module_files

    html = (FRONTEND / "index.html").read_text(encoding="utf-8")
    preloaded = re.findall(r'<link rel="modulepreload" href="([^"]+)">', html)
    assert preloaded == module_files(entry="streamlit.js")[:-1]
    assert '<script type="module" src="streamlit.js">' in html
