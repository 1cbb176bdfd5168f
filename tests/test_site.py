"""Where the app and its data are found (geoviz.site), the app's settings as flags, and
``geoviz app``'s options (issue 43). The installed wheel itself is checked by
``scripts/smoke_install.py`` in ``.ci/run``."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from geoviz import site
from geoviz.app import serve
from geoviz.cli import app as app_command
from geoviz.cli import main
from geoviz.data.bundled import assets_dir, bundled_path, load_bundled
from geoviz.errors import GeovizError

ROOT = Path(__file__).resolve().parents[1]


def test_the_build_copies_what_the_site_names():
    tree = ast.parse((ROOT / "setup.py").read_text())
    (copied,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "SITE_FILES"
    ]
    assert ast.literal_eval(copied) == site.SITE_FILES
    for name in site.SITE_FILES:
        assert (ROOT / name).exists(), name
    manifest = (ROOT / "MANIFEST.in").read_text()  # the sdist carries them too
    for name in ("app.py", "pages", ".streamlit/config.toml", "assets", "setup.py"):
        assert name in manifest, name


def test_a_checkout_reads_its_top_level():
    assert not (site.INSTALLED_SITE / "app.py").exists()  # a checkout has no geoviz/_site
    assert site.site_dir() == ROOT
    assert site.app_script() == ROOT / "app.py" and serve.APP_SCRIPT == ROOT / "app.py"
    assert site.streamlit_config() == ROOT / ".streamlit" / "config.toml"


def test_an_install_reads_its_own_copy(tmp_path, monkeypatch):
    installed = tmp_path / "_site"
    (installed / "assets" / "nist").mkdir(parents=True)
    (installed / "app.py").write_text("# the installed start page\n")
    source = ROOT / "assets" / "nist" / "usps.npz"
    (installed / "assets" / "nist" / "usps.npz").write_bytes(source.read_bytes())
    monkeypatch.setattr(site, "INSTALLED_SITE", installed)
    monkeypatch.delenv("GEOVIZ_ASSETS_DIR", raising=False)
    assert site.site_dir() == installed
    assert assets_dir() == installed / "assets"
    assert bundled_path("usps") == installed / "assets" / "nist" / "usps.npz"
    assert len(load_bundled("usps")) > 0


def test_the_assets_variable_still_wins(tmp_path, monkeypatch):
    from geoviz.backend import RuntimeSettings, configured

    with configured(RuntimeSettings(assets_dir=tmp_path)):
        assert assets_dir() == tmp_path


def test_the_apps_settings_become_flags_the_command_line_overrides():
    config = site.streamlit_config()
    flags = serve.config_flags(config, [])
    assert "--client.showErrorDetails=none" in flags  # visitors never see tracebacks
    assert "--server.maxUploadSize=512" in flags
    assert "--client.showSidebarNavigation=false" in flags
    mine = serve.config_flags(config, ["--theme.base", "dark", "--server.maxUploadSize=100"])
    assert not any(f.startswith(("--theme.base=", "--server.maxUploadSize=")) for f in mine)
    argv = serve.streamlit_argv(["--theme.base", "dark"])
    assert argv[:3] == ["streamlit", "run", str(serve.APP_SCRIPT)]
    assert argv[-2:] == ["--theme.base", "dark"]


def test_damaged_settings_are_one_sentence(tmp_path):
    bad = tmp_path / "config.toml"
    bad.write_text("[server\nport = ")
    with pytest.raises(GeovizError, match=r"settings .* cannot be read .* reinstall geoviz"):
        serve.config_flags(bad, [])


def test_app_options_serve_this_machine_by_default():
    assert app_command.streamlit_options([]) == [
        "--server.address=127.0.0.1",
        "--server.port=8501",
        "--server.headless=true",
    ]
    options = app_command.streamlit_options(
        ["--port", "8600", "--address", "0.0.0.0", "--server.maxUploadSize", "100"]
    )
    assert options[:2] == ["--server.address=0.0.0.0", "--server.port=8600"]
    assert options[-2:] == ["--server.maxUploadSize", "100"]


@pytest.mark.parametrize(
    ("argv", "sentence"),
    [
        (["--port", "0"], "--port must be between 1 and 65535, got 0"),
        (["--port", "70000"], "--port must be between 1 and 65535, got 70000"),
        (["--address", " "], "--address must name an interface"),
        (["--server.port", "9000"], "give --port instead of --server.port"),
        (["--server.address=0.0.0.0"], "give --address instead of --server.address"),
    ],
)
def test_app_refuses_options_in_one_sentence(argv, sentence, capsys):
    assert main(["app", *argv]) == 2
    err = capsys.readouterr().err
    assert sentence in err and len(err.strip().splitlines()) == 1


def test_geoviz_app_starts_the_server_from_another_folder(tmp_path):
    """`geoviz app` answers on its port from a folder that is not the checkout, with the
    app's settings (read from its own folder, not the working directory)."""
    import socket
    import time
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "GEOVIZ_PREFETCH": "0",
        "GEOVIZ_CACHE_DIR": str(tmp_path / "cache"),
    }
    log = tmp_path / "server.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "geoviz", "app", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 120
            answered = False
            while time.monotonic() < deadline and not answered:
                assert proc.poll() is None, log.read_text()[-2000:]
                try:
                    with urllib.request.urlopen(
                        f"http://127.0.0.1:{port}/_stcore/health", timeout=2
                    ) as reply:
                        answered = reply.status == 200
                except OSError:
                    time.sleep(0.5)
            assert answered, log.read_text()[-2000:]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    text = log.read_text()
    assert f"127.0.0.1:{port}" in text
    assert "0.0.0.0" not in text  # this machine only
