"""A user's vision model from local weights (geoviz.features.models, issue 42 item 3): a
state dict of a torchvision or timm architecture or of the user's module, a TorchScript
file told apart from a state dict, and every file that is not a vision model, not a state
dict or not one of the named architecture refused in one sentence naming the file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from synthetic_data import bars

from geoviz.errors import GeovizError
from geoviz.features.models import ModelSpace, model_file_kind, parse_arch


def _net(d: int = 8) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(256, d), torch.nn.ReLU())


class _NoInput(torch.nn.Module):
    def forward(self) -> torch.Tensor:
        return torch.zeros(1)


class _Scalar(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> float:
        return float(x.sum())


class _Text(torch.nn.Module):
    def forward(self, s: str) -> torch.Tensor:
        return torch.zeros(1)


class _Two(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


class _Sum(torch.nn.Module):
    """Takes images and returns a tensor, but one number for the whole batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum()


@pytest.fixture
def problem():
    return [bars(30, seed) for seed in (0, 1)]


def _refused(make, match: str) -> str:
    with pytest.raises(GeovizError, match=match) as info:
        make()
    text = str(info.value)
    assert "\n" not in text and "Traceback" not in text
    return text


def _saved(obj, path: Path) -> Path:
    torch.save(obj, path)
    return path


# --------------------------------------------------------------------------- state dicts
def test_a_state_dict_of_the_users_module_gives_that_modules_features(problem, tmp_path):
    torch.manual_seed(0)
    trained = _net()
    path = _saved(trained.state_dict(), tmp_path / "net.pt")
    space = ModelSpace.from_state_dict(_net(), path, arch="mynet")
    assert space.name == "model:mynet"
    fitted = space.fit(problem)
    with torch.no_grad():
        expected = trained(problem[1].features.reshape(-1, 1, 16, 16))
    torch.testing.assert_close(fitted.transform(problem[1]).features, expected)
    # a training checkpoint and DataParallel's prefix are taken too
    nested = {"state_dict": {f"module.{k}": v for k, v in trained.state_dict().items()}}
    again = ModelSpace.from_state_dict(_net(), _saved(nested, tmp_path / "ckpt.pt"))
    torch.testing.assert_close(again.fit(problem).transform(problem[1]).features, expected)


def test_a_state_dict_of_another_architecture_names_its_keys(tmp_path):
    other = _saved(torch.nn.Linear(3, 3).state_dict(), tmp_path / "other.pt")
    assert _refused(
        lambda: ModelSpace.from_state_dict(_net(), other, arch="mynet"),
        r"^other\.pt is not a mynet state dict: ",
    ) == (
        "other.pt is not a mynet state dict: 2 missing keys such as '1.weight', '1.bias'; "
        "2 unexpected keys such as 'weight', 'bias'"
    )
    state = _net().state_dict()
    del state["1.bias"]
    one = _saved(state, tmp_path / "one.pt")
    _refused(
        lambda: ModelSpace.from_state_dict(_net(), one, arch="mynet"),
        r"^one\.pt is not a mynet state dict: 1 missing key such as '1\.bias'$",
    )
    wide = _saved(_net(16).state_dict(), tmp_path / "wide.pt")
    _refused(
        lambda: ModelSpace.from_state_dict(_net(), wide, arch="mynet"),
        r"2 tensors of another shape, such as '1\.weight': \(16, 256\) in the file, "
        r"\(8, 256\) in mynet",
    )


def test_files_that_are_not_state_dicts_are_sentences(tmp_path):
    plain = _saved({"lr": 0.1, "epoch": 3}, tmp_path / "plain.pt")
    _refused(
        lambda: ModelSpace.from_state_dict(_net(), plain),
        r"^plain\.pt is not a state dict: 2 of its 2 entries, such as 'lr', are not",
    )
    (tmp_path / "junk.pt").write_bytes(b"junk")
    _refused(
        lambda: ModelSpace.from_state_dict(_net(), tmp_path / "junk.pt"),
        r"^junk\.pt is not a state dict saved with torch\.save \(",
    )
    empty = _saved({}, tmp_path / "empty.pt")
    _refused(lambda: ModelSpace.from_state_dict(_net(), empty), r"holds a dict with nothing")


# --------------------------------------------------------------------------- the file's kind
def test_the_kind_of_a_model_file_is_told_from_its_bytes(tmp_path):
    script = tmp_path / "net_ts.pt"
    torch.jit.save(torch.jit.script(_net()), str(script))
    state = _saved(_net().state_dict(), tmp_path / "net.pt")
    assert model_file_kind(script.read_bytes()) == "torchscript"
    assert model_file_kind(state.read_bytes()) == "state_dict"
    assert ModelSpace.from_file(script).name == "model:net_ts"
    text = _refused(
        lambda: ModelSpace.from_file(state, arch_hint="--features-arch torchvision:NAME"),
        r"^net\.pt holds weights \(a state dict of 2 tensors\) but no architecture",
    )
    assert "--features-arch torchvision:NAME" in text
    _refused(
        lambda: ModelSpace.from_torchscript(state),
        r"^net\.pt holds weights \(a state dict\), not a TorchScript model",
    )
    _refused(
        lambda: ModelSpace.from_file(script, "timm:resnet18"),
        r"net_ts\.pt is a TorchScript model, which carries its own architecture",
    )
    _refused(lambda: ModelSpace.from_file(state, "keras:resnet18"), r"torchvision:NAME or timm")
    (tmp_path / "junk.pt").write_bytes(b"junk")
    _refused(lambda: ModelSpace.from_file(tmp_path / "junk.pt"), r"^junk\.pt is not a TorchScript")
    plain = _saved({"lr": 0.1}, tmp_path / "plain.pt")
    _refused(lambda: ModelSpace.from_file(plain), r"^plain\.pt is not a state dict: 1 of its 1")


@pytest.mark.parametrize(
    ("module", "problem_text"),
    [
        (_NoInput(), "its forward takes no input"),
        (_Scalar(), "its forward returns float, not a tensor of features"),
        (_Text(), "its forward takes str 's', not a tensor of images"),
        (_Two(), r"its forward takes 2 inputs \(x, y\), not one"),
    ],
)
def test_a_torchscript_file_that_is_not_a_vision_model_is_a_sentence(
    module, problem_text, tmp_path
):
    path = tmp_path / "odd.pt"
    torch.jit.save(torch.jit.script(module), str(path))
    for load in (ModelSpace.from_torchscript, ModelSpace.from_file):
        _refused(lambda load=load: load(path), rf"^odd\.pt is not a vision model: {problem_text}")


def test_a_model_that_returns_one_number_is_refused_on_the_first_samples(problem, tmp_path):
    path = tmp_path / "sum.pt"
    torch.jit.save(torch.jit.script(_Sum()), str(path))
    space = ModelSpace.from_file(path)
    _refused(
        lambda: space.fit(problem),
        r"the model sum returned shape \(\) for 2 inputs; expected \(2, d\) "
        r"\(on the first samples of dataset\)",
    )


# --------------------------------------------------------------------------- packages
def test_a_missing_timm_or_torchvision_is_a_sentence(tmp_path, monkeypatch):
    state = _saved(_net().state_dict(), tmp_path / "net.pt")
    monkeypatch.setitem(sys.modules, "timm", None)  # as where timm is not installed
    text = _refused(
        lambda: ModelSpace.from_file(state, "timm:resnet18"),
        r"^timm is not installed .* the timm architecture resnet18 cannot be built: pip "
        r"install timm",
    )
    assert "TorchScript" in text
    monkeypatch.setitem(sys.modules, "torchvision", None)
    for make in (
        lambda: ModelSpace.from_file(state, "torchvision:resnet18"),
        lambda: ModelSpace.from_torchvision("resnet18", state),
        lambda: ModelSpace.from_torchvision("resnet18"),
    ):
        _refused(make, r"^torchvision is not installed .*: pip install 'geoviz\[vision\]'")


def test_architecture_names_are_checked():
    assert parse_arch("torchvision:resnet18") == ("torchvision", "resnet18")
    assert parse_arch("timm:vit_small_patch16_224.augreg_in21k") == (
        "timm",
        "vit_small_patch16_224.augreg_in21k",
    )
    for bad in ("resnet18", "torchvision:", "keras:x", "timm:../x", "torchvision:a b"):
        with pytest.raises(GeovizError, match="an architecture is torchvision:NAME or timm:NAME"):
            parse_arch(bad)


def test_a_torchvision_state_dict_loads_without_its_classifier(problem, tmp_path):
    torchvision = pytest.importorskip("torchvision")
    fine_tuned = torchvision.models.resnet18(num_classes=10)  # any class count
    path = _saved(fine_tuned.state_dict(), tmp_path / "r18.pt")
    space = ModelSpace.from_file(path, "torchvision:resnet18", input_size=32)
    assert (space.channels, space.mean) == (3, (0.485, 0.456, 0.406))
    assert space.fit(problem).dim == 512
    state = fine_tuned.state_dict()
    del state["layer4.1.bn2.weight"]
    bad = _saved(state, tmp_path / "bad.pt")
    _refused(
        lambda: ModelSpace.from_file(bad, "torchvision:resnet18"),
        r"^bad\.pt is not a resnet18 state dict: 1 missing key such as 'layer4\.1\.bn2\.weight'$",
    )
    _refused(
        lambda: ModelSpace.from_file(path, "torchvision:resnet34"),
        r"^r18\.pt is not a resnet34 state dict: \d+ missing keys such as",
    )


def test_a_timm_state_dict_loads_without_its_classifier(problem, tmp_path):
    timm = pytest.importorskip("timm")
    path = _saved(timm.create_model("resnet18", num_classes=7).state_dict(), tmp_path / "t.pt")
    space = ModelSpace.from_file(path, "timm:resnet18", input_size=32)
    assert space.fit(problem).dim == 512
    _refused(lambda: ModelSpace.from_file(path, "timm:no_such_net"), r"timm cannot build")


# --------------------------------------------------------------------------- the CLI
DIGITS = ["--target", "mnist", "--refs", "usps,fashion_mnist", "--n", "30", "--size", "16"]


def test_the_cli_tells_a_state_dict_from_torchscript(tmp_path, capsys, monkeypatch):
    from geoviz.cli import main

    script = tmp_path / "net_ts.pt"
    torch.jit.save(torch.jit.script(_net()), str(script))
    state = _saved(_net().state_dict(), tmp_path / "net.pt")
    assert main(["distance", *DIGITS, "--quiet", "--features-model", str(script)]) == 0
    assert "in the model:net_ts space" in capsys.readouterr().out
    assert main(["distance", *DIGITS, "--quiet", "--features-model", str(state)]) == 2
    err = capsys.readouterr().err
    assert "net.pt holds weights (a state dict of 2 tensors) but no architecture" in err
    assert "--features-arch torchvision:NAME or timm:NAME" in err
    monkeypatch.setitem(sys.modules, "timm", None)
    args = ["--features-model", str(state), "--features-arch", "timm:resnet18"]
    assert main(["distance", *DIGITS, "--quiet", *args]) == 2
    assert "timm is not installed" in capsys.readouterr().err
    args = ["--features-model", str(script), "--features-arch", "torchvision:resnet18"]
    assert main(["distance", *DIGITS, "--quiet", *args]) == 2
    assert "carries its own architecture" in capsys.readouterr().err
    odd = tmp_path / "odd.pt"
    torch.jit.save(torch.jit.script(_NoInput()), str(odd))
    assert main(["distance", *DIGITS, "--quiet", "--features-model", str(odd)]) == 2
    assert "odd.pt is not a vision model: its forward takes no input" in capsys.readouterr().err
    assert main(["distance", *DIGITS, "--quiet", "--features-arch", "timm:x"]) == 2
    assert "--features-arch only applies with --features-model" in capsys.readouterr().err
    both = ["--features-model", str(script), "--features-embeddings", str(tmp_path / "e.npz")]
    assert main(["distance", *DIGITS, "--quiet", *both]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_the_help_names_the_options_of_your_own_space(capsys):
    from geoviz.cli import main

    assert main(["project", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for option in ("--features-model FILE", "--features-embeddings FILE[:COLUMN]"):
        assert option in text
    assert "--features-arch FAMILY:NAME" in text and "timm:NAME (needs timm)" in text
