"""A shared link is not a key to the server (issue 15): hostile ``?scenario=`` tokens.

Every token here is built the way a visitor could build one (JSON -> zlib -> base64url),
bypassing the form. Each must be refused with a sentence before anything is loaded,
allocated or fitted; nothing outside the operator's folders is read.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from geoviz import limits
from geoviz.app.links import scenario_from_token, scenario_to_token
from geoviz.app.scenario import Scenario, served_path
from geoviz.app.services import datasets as dataset_services
from geoviz.app.services import export as export_services
from geoviz.app.services.errors import error_text
from geoviz.app.session import SessionModel
from geoviz.app.settings import AppSettings, default_scenario
from geoviz.data.choice import DatasetChoice
from geoviz.errors import DatasetError, GeovizError

ROOT = Path(__file__).resolve().parents[1]


def _token(d: dict) -> str:
    raw = json.dumps(d).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


def _default_dict(**changes) -> dict:
    d = json.loads(json.dumps(default_scenario(AppSettings(n_default=200)).to_dict()))
    d.update(changes)
    return d


def _with_target(**target) -> dict:
    d = _default_dict()
    d["target"] = {**d["target"], **target}
    return d


def _restore(token: str, settings: AppSettings | None = None) -> tuple[SessionModel, list[str]]:
    model = SessionModel({}, settings or AppSettings(n_default=200))
    before = model.scenario
    problems = model.restore({"scenario": token})
    return model, problems if model.scenario == before else ["<accepted>"]


@pytest.fixture
def secret_npz(tmp_path: Path) -> Path:
    """A valid dataset file that no visitor should be able to load."""
    path = tmp_path / "secret" / "data.npz"
    path.parent.mkdir()
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.random((40, 4), dtype=np.float32), y=np.repeat([0, 1], 20))
    return path


def test_a_link_cannot_name_a_server_path(secret_npz, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path / "secret")
    relative = os.path.relpath(secret_npz, ROOT)
    messages = []
    for name in (
        str(secret_npz),  # absolute
        relative,  # ../-relative to the working directory
        "./data.npz",
        "~/data.npz",
        str(tmp_path / "secret" / "missing.npz"),  # does not exist: same answer
    ):
        _model, problems = _restore(_token(_with_target(name=name)))
        assert problems and problems != ["<accepted>"], name
        assert "unknown dataset" in problems[0]
        assert "file or folder" not in problems[0]  # never says whether the path exists
        messages.append(problems[0].replace(name[:57], "<name>"))
    # the existing and the missing file give the same sentence (no probing of the disk)
    assert messages[0] == messages[-1]
    # the library loader refuses too when the app asks it to
    from geoviz.data.registry import load_dataset

    with pytest.raises(GeovizError, match="unknown dataset") as err:
        load_dataset(str(secret_npz), allow_paths=False)
    assert "file or folder" not in str(err.value)


@pytest.mark.parametrize(
    ("name", "options", "match"),
    [
        ("torchvision:mnist", {"root": "/etc", "download": True}, "has no option"),
        ("mnist", {"kind": "npz"}, "has no option"),
        ("mnist", {"label_column": "password"}, "has no option"),
        ("gmm2d", {"n_per_class": 10**9}, "between"),
        ("gmm2d", {"n_classes": 100, "n_per_class": 100_000}, "more than"),
        ("gmm2d", {"std": float("nan")}, "between"),
        ("chessboard", {"n_per_component": 10**8}, "between"),
        ("chessboard", {"class_names": ["x" * 5000]}, "1 to 64 characters"),
        ("iris", {"standardize": "yes"}, "true or false"),
    ],
)
def test_link_loader_options_are_an_allow_list_with_bounds(name, options, match):
    with pytest.raises(DatasetError, match=match):
        scenario_from_token(_token(_with_target(name=name, options=list(options.items()))))


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"image_size": 700}, "image_size must be between"),
        ({"image_size": 100_000}, "image_size must be between"),
        ({"image_size": 32.5}, "must be an integer"),
        ({"n_target": 10**9}, "n_target must be between"),
        ({"n_reference": "many"}, "must be an integer"),
        ({"epsilon": 1e-100}, "below"),
        ({"epsilon": 1e-20}, "below"),
        ({"epsilon": 1e9}, "above"),
        ({"seed": -1}, "seed must be between"),
        ({"few_shot": {"enabled": True, "k": 10**7, "n_neighbors": 1}}, "few-shot k"),
        ({"few_shot": {"enabled": True, "k": 5, "n_neighbors": 10**6}}, "n_neighbors"),
        ({"surprise": 1}, "unknown field"),
    ],
)
def test_link_sizes_are_bounded_before_anything_is_loaded(changes, match):
    with pytest.raises(DatasetError, match=match):
        scenario_from_token(_token(_default_dict(**changes)))


def test_two_hundred_references_are_refused():
    d = _default_dict()
    d["references"] = [
        {**d["references"][0], "name": "gmm2d", "seed": s, "options": []} for s in range(200)
    ]
    with pytest.raises(DatasetError, match=f"2 to {limits.MAX_REFERENCES} reference datasets"):
        scenario_from_token(_token(d))


def test_token_size_is_bounded_before_and_while_inflating():
    with pytest.raises(DatasetError, match="characters"):
        scenario_from_token("A" * (limits.MAX_TOKEN_CHARS + 1))
    # a zip bomb that fits in the character limit: 3 MB of spaces compress to ~3 kB
    bomb = base64.urlsafe_b64encode(zlib.compress(b" " * 3_000_000, 9)).decode().rstrip("=")
    assert len(bomb) <= limits.MAX_TOKEN_CHARS
    with pytest.raises(DatasetError, match="inflates to more than"):
        scenario_from_token(bomb)
    # a valid token still decodes, and the honest scenario round-trips
    s = default_scenario(AppSettings(n_default=200))
    assert scenario_from_token(scenario_to_token(s)) == s


def test_server_neural_budget_caps_links():
    s = default_scenario(AppSettings(n_default=200)).with_(
        map_method="neural", neural_preset="paper"
    )
    model, problems = _restore(scenario_to_token(s), AppSettings(n_default=200))
    assert problems and "at most at the 'cpu' budget" in problems[0]
    # the same link on a server whose operator allows paper-scale training is accepted
    model, problems = _restore(scenario_to_token(s), AppSettings(neural_preset="paper"))
    assert problems == ["<accepted>"] and model.scenario.neural_preset == "paper"


def test_scenario_memory_budget_is_checked_before_loading(monkeypatch):
    from geoviz.data import torchvision_sets

    # as on a server with torchvision: the size, not the missing package, refuses it
    monkeypatch.setattr(torchvision_sets, "torchvision_installed", lambda: True)
    big = Scenario(
        target=DatasetChoice("torchvision:mnist"),  # 60,000 images: refused before a download
        references=(DatasetChoice("torchvision:kmnist"), DatasetChoice("usps")),
        n_target=100_000,
        n_reference=100_000,
        image_size=128,
    )
    with pytest.raises(DatasetError, match="GEOVIZ_APP_MAX_MB"):
        AppSettings().admit(big)
    model = SessionModel({}, AppSettings())
    model.scenario = big
    with pytest.raises(DatasetError, match="GEOVIZ_APP_MAX_MB"):
        dataset_services.scenario_data(model)


def test_served_folders_only_with_the_operators_allow_list(secret_npz, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    inside = data / "digits.npz"
    inside.write_bytes(secret_npz.read_bytes())
    (data / "other.npz").write_bytes(secret_npz.read_bytes())
    (data / "escape").symlink_to(secret_npz.parent, target_is_directory=True)
    dirs = (("data", data.resolve()),)

    choice = DatasetChoice("data/digits.npz", source="server")
    with pytest.raises(DatasetError, match="GEOVIZ_DATA_DIRS"):
        AppSettings().admit(Scenario(choice, (DatasetChoice("mnist"), DatasetChoice("usps"))))
    assert served_path("data/digits.npz", dirs) == inside.resolve()
    refusals = set()
    for name in ("data/escape/data.npz", "data/missing.npz", "other/digits.npz"):
        with pytest.raises(DatasetError, match="in this server's data folders") as err:
            served_path(name, dirs)
        refusals.add(str(err.value).replace(name, "<name>"))
    assert len(refusals) == 1  # a link learns nothing about what exists outside
    for name in ("data/../secret/data.npz", "/etc/passwd", "~/x", "data/./x"):
        with pytest.raises(DatasetError, match="<data folder>/<path inside it>"):
            DatasetChoice(name, source="server")

    # the app loads the allowed file, and only through the allow-list
    settings = AppSettings(n_default=40, data_dirs=dirs)
    model = SessionModel({}, settings)
    model.scenario = Scenario(
        DatasetChoice("data/digits.npz", source="server"),
        (DatasetChoice("iris"), DatasetChoice("data/other.npz", source="server")),
        n_target=40,
        n_reference=40,
    )
    got = dataset_services.scenario_data(model)
    assert got.target.n_samples == 40
    assert "data/digits.npz" in dataset_services.choice_options(model).keys().__str__()


def test_errors_shown_to_visitors_are_sentences():
    text = error_text(FileNotFoundError(2, "No such file", "/srv/secret/x.npz"))
    assert "/srv" not in text and "log" in text
    assert "KeyError" in error_text(KeyError("/home/user/.ssh/id_rsa"))
    assert "id_rsa" not in error_text(KeyError("/home/user/.ssh/id_rsa"))
    assert error_text(DatasetError("bad", "up.npz")) == "up.npz: bad"


def test_export_folder_stays_inside_the_root(tmp_path):
    root = tmp_path / "exports"
    root.mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (root / "link").symlink_to(outside, target_is_directory=True)
    assert export_services.export_folder(root) == root.resolve()
    made = export_services.export_folder(root, f"../../{outside}/deep")
    assert made.parent == root.resolve() and ".." not in made.name
    with pytest.raises(GeovizError, match="not a folder inside"):
        export_services.export_folder(root, "link")
    assert sorted(p.name for p in outside.iterdir()) == []
    with pytest.raises(GeovizError, match="does not exist"):
        export_services.export_folder(tmp_path / "nope")


_PEAK = """
import json, resource, sys
from geoviz.app.services import datasets as dataset_services
from geoviz.app.session import SessionModel
from geoviz.app.settings import AppSettings
settings = AppSettings(n_default=200)
if sys.argv[1] == "default":
    model = SessionModel({}, settings)
    dataset_services.scenario_data(model)
else:
    for token in json.loads(sys.stdin.read()):
        model = SessionModel({}, settings)
        problems = model.restore({"scenario": token})
        assert problems, "a hostile link was accepted"
        dataset_services.scenario_data(model)  # the default scenario stays in place
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


@pytest.mark.slow
def test_hostile_links_stay_within_500_mb_of_the_default_scenario(tmp_path):
    hostile = [
        _token(_default_dict(image_size=700)),
        _token(_default_dict(image_size=100_000)),
        _token(_with_target(name="gmm2d", options=[["n_per_class", 10**9]])),
        _token(_default_dict(n_target=10**9, n_reference=10**9)),
        base64.urlsafe_b64encode(zlib.compress(b" " * 3_000_000, 9)).decode().rstrip("="),
        "A" * 100_000,
    ]
    env = {**os.environ, "GEOVIZ_CACHE_DIR": str(tmp_path / "cache")}

    def peak(mode: str) -> int:
        out = subprocess.run(
            [sys.executable, "-c", _PEAK, mode],
            input=json.dumps(hostile),
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=True,
        )
        return int(out.stdout.split()[-1])

    default, attacked = peak("default"), peak("hostile")
    print(
        f"peak RSS: default scenario {default / 2**20:.0f} MiB, hostile links {attacked / 2**20:.0f} MiB"
    )
    assert attacked < default + 500 * 2**20, (default, attacked)


def test_link_weights_text_is_bounded():
    from geoviz.app.links import weights_from_text
    from geoviz.errors import WeightsError

    with pytest.raises(WeightsError, match="characters"):
        weights_from_text(",".join(["0.1"] * 100_000))
    with pytest.raises(WeightsError, match="comma-separated numbers"):
        weights_from_text("x" * 300)


def _image_folder(root: Path, classes=("a", "b"), per_class: int = 3, seed: int = 0) -> None:
    from PIL import Image

    rng = np.random.default_rng(seed)
    for c in classes:
        (root / c).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, size=(6, 6), dtype=np.uint8)
            Image.fromarray(pixels).save(root / c / f"{i}.png")


@pytest.mark.parametrize(
    "layout",
    ["absolute folder", "relative folder", "file", "via a sibling", "deep"],
)
def test_served_folders_never_follow_links_out(tmp_path, layout):
    """Row 3: served/ifold/a/ext -> /outside loaded 5 samples from outside the folder."""
    outside = tmp_path / "outside"
    _image_folder(outside, classes=("a",), per_class=5, seed=1)
    data = tmp_path / "served"
    ifold = data / "ifold"
    _image_folder(ifold)
    if layout == "absolute folder":
        (ifold / "a" / "ext").symlink_to(outside / "a", target_is_directory=True)
    elif layout == "relative folder":
        (ifold / "a" / "ext").symlink_to(Path("../../../outside/a"), target_is_directory=True)
    elif layout == "file":
        (ifold / "b" / "x.png").symlink_to(outside / "a" / "0.png")
    elif layout == "via a sibling":  # a link inside the root, to a folder holding a link out
        (data / "shelf").mkdir()
        (data / "shelf" / "far").symlink_to(outside / "a", target_is_directory=True)
        (ifold / "a" / "more").symlink_to(data / "shelf", target_is_directory=True)
    else:
        deep = ifold / "b" / "x" / "y" / "z"
        deep.mkdir(parents=True)
        (deep / "w").symlink_to(Path("../../../../../../outside"), target_is_directory=True)
    dirs = (("served", data.resolve()),)
    with pytest.raises(DatasetError, match="no dataset 'served/ifold' in this server's data"):
        served_path("served/ifold", dirs)

    model = SessionModel({}, AppSettings(n_default=40, data_dirs=dirs))
    with pytest.raises(DatasetError, match="in this server's data folders"):
        model.scenario = model.settings.admit(
            Scenario(
                DatasetChoice("served/ifold", source="server"),
                (DatasetChoice("iris"), DatasetChoice("wine")),
                n_target=40,
                n_reference=40,
            )
        )


def test_served_folders_may_link_inside_themselves(tmp_path):
    data = tmp_path / "served"
    ifold = data / "ifold"
    _image_folder(ifold)
    _image_folder(data / "extra", classes=("a",), per_class=2, seed=5)
    (ifold / "a" / "more").symlink_to(data / "extra" / "a", target_is_directory=True)
    (ifold / "b" / "loop").symlink_to(ifold, target_is_directory=True)  # walked once
    (ifold / "b" / "gone.png").symlink_to(data / "missing.png")  # dangling: skipped
    dirs = (("served", data.resolve()),)
    assert served_path("served/ifold", dirs) == ifold.resolve()


def test_error_text_names_no_server_path():
    from geoviz.app.services.errors import MAX_ERROR_CHARS, scrub_paths

    assert scrub_paths("cannot read /tmp/geoviz-zip-abc/set/link (File exists)") == (
        "cannot read …/link (File exists)"
    )
    assert scrub_paths("'/srv/data/x.npz': bad") == "'…/x.npz': bad"
    for kept in ("images 28/28", "a/b/c.png: bad", "P_a/Q", "1/2 of the samples"):
        assert scrub_paths(kept) == kept
    text = error_text(DatasetError("cannot decode", "/srv/secret/data/a.png"))
    assert "/srv" not in text and "a.png" in text
    assert len(error_text(DatasetError("z" * 10_000))) <= MAX_ERROR_CHARS


def test_served_dataset_errors_name_the_folder_label_not_its_place(tmp_path):
    data = tmp_path / "deep" / "place" / "served"
    ifold = data / "ifold"
    _image_folder(ifold)
    (ifold / "a" / "broken.png").write_bytes(b"not a png")
    dirs = (("served", data.resolve()),)
    model = SessionModel({}, AppSettings(n_default=40, data_dirs=dirs))
    model.scenario = Scenario(
        DatasetChoice("served/ifold", source="server"),
        (DatasetChoice("iris"), DatasetChoice("wine")),
        n_target=40,
        n_reference=40,
    )
    with pytest.raises(DatasetError) as info:
        dataset_services.scenario_data(model)
    text = error_text(info.value)
    assert "served/ifold" in text and str(tmp_path) not in text, text


@pytest.mark.parametrize(("args", "address"), [([], "127.0.0.1"), (["ADDRESS=0.0.0.0"], "0.0.0.0")])
def test_make_run_serves_this_machine_unless_given_an_address(tmp_path, args, address):
    """``make run`` listened on every interface with no way to choose (issue 25)."""
    import shutil

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        ["make", "-n", "-C", str(root), "run", f"VENV={tmp_path / 'venv'}", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    run_line = next(line for line in out.splitlines() if "geoviz app" in line)
    assert f"--address {address} " in run_line


def test_links_name_feature_spaces_never_paths():
    """Issue 22: a link may name a built-in space or a registered model, never a file."""
    model, problems = _restore(_token(_default_dict(features="encoder", encoder_preset="tiny")))
    assert problems == ["<accepted>"] and model.scenario.features == "encoder"
    for bad in ("/srv/models/x.pt", "model:../../x", "model:unregistered", "resnet18", 7):
        _, problems = _restore(_token(_default_dict(features=bad)))
        assert problems and "features must be one of" in problems[0], bad
    _, problems = _restore(_token(_default_dict(features="pca", map_method="neural")))
    assert problems and "barycentric" in problems[0]
    # pixel-space scenarios keep the keys of links made before feature spaces existed
    old = default_scenario(AppSettings(n_default=200)).with_(features="pixels")
    assert "features" not in old._key_dict()
    # the default space is part of the key (issue 33)
    assert default_scenario(AppSettings(n_default=200))._key_dict()["features"] == "auto"


def test_readable_query_round_trips_and_reads_like_a_token():
    """The CLI's ``app`` line names a scenario in plain fields (issue 34)."""
    from geoviz.app.links import scenario_from_query, scenario_query

    scenario = Scenario(
        DatasetChoice("mnist"),
        (DatasetChoice("usps"), DatasetChoice("kmnist")),
        n_target=500,
        n_reference=500,
        image_size=28,
        seed=3,
        epsilon=0.002,
    )
    query = scenario_query(scenario)
    assert query["refs"] == "usps,kmnist" and query["n"] == "500"
    assert scenario_from_query(query) == scenario
    # served datasets (a "/" in the name) keep their source
    served = scenario_from_query({"target": "digits/mnist.npz", "refs": "usps,kmnist"})
    assert served.target.source == "server" and served.references[0].source == "registry"


def test_readable_query_refuses_a_scenario_it_would_load_as_another():
    """The readable form has no encoder preset: a tiny-encoder scenario would come back
    with the pretrained encoder (another key) under the same link, so it is refused."""
    from geoviz.app.links import scenario_query

    tiny = Scenario(
        DatasetChoice("mnist"),
        (DatasetChoice("usps"), DatasetChoice("kmnist")),
        n_target=500,
        n_reference=500,
        features="encoder",
        encoder_preset="tiny",
    )
    with pytest.raises(DatasetError, match="options a readable link cannot state"):
        scenario_query(tiny)
    assert scenario_query(tiny.with_(encoder_preset="pretrained"))["features"] == "encoder"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"target": "mnist"}, "the link names no refs"),
        ({"refs": "usps,kmnist"}, "the link names no target"),
        ({"target": "mnist", "refs": "usps,kmnist", "n": "many"}, "the link's n is not a number"),
        ({"target": "mnist", "refs": "usps,kmnist", "n": "5"}, "n_target"),
        ({"target": "mnist", "refs": "usps,kmnist", "split": "all"}, "split must be"),
        ({"target": "x" * 5000, "refs": "usps,kmnist"}, "too many"),
        ({"target": "mnist", "refs": ",".join(["usps"] * 40)}, "reference datasets"),
        ({"target": "mnist", "refs": "usps,kmnist", "epsilon": "1e9"}, "epsilon"),
    ],
)
def test_readable_query_refusals_are_one_sentence(params, message):
    from geoviz.app.links import scenario_from_query

    with pytest.raises(DatasetError) as err:
        scenario_from_query(params)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_readable_link_with_a_bad_field_keeps_the_session_scenario():
    model = SessionModel({}, AppSettings(n_default=100))
    before = model.scenario
    problems = model.restore({"target": "mnist", "refs": "usps", "n": "200"})
    assert model.scenario == before
    assert len(problems) == 1 and problems[0].startswith("The link's scenario could not be read")
