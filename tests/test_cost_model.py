"""The cost model of long steps (geoviz.backend.cost_model): calibration in the cache, the
formulas' scaling, corrupt files, and the time left from a progress fraction."""

from __future__ import annotations

import dataclasses
import json
import warnings
from dataclasses import replace

import numpy as np
import pytest
import torch

from geoviz.backend import cost_model
from geoviz.backend.cost_model import (
    CALIBRATION_FILE,
    CostModel,
    Estimate,
    EtaClock,
    eta_seconds,
    format_seconds,
    load_cost_model,
    took_sentence,
    work,
)


def _measure(calls: list[str]):
    def measure(device: str) -> float:
        calls.append(device)
        return 40.0

    return measure


def test_calibration_round_trips_through_the_cache(tmp_path):
    calls: list[str] = []
    first = load_cost_model(tmp_path, threads=2, measure=_measure(calls))
    assert calls == ["cpu"] and (tmp_path / CALIBRATION_FILE).exists()
    learned = first.learn("sinkhorn", 10.0, n=1000, m=1000, d=64)
    learned.save(tmp_path)
    again = load_cost_model(tmp_path, threads=2, measure=_measure(calls))
    assert calls == ["cpu"]  # not measured again
    assert (again.rate, again.factors) == (learned.rate, learned.factors)
    assert again.contention >= 1.0  # the load now, not kept
    # another thread count is another machine: measured, the first entry kept
    load_cost_model(tmp_path, threads=1, measure=_measure(calls))
    assert calls == ["cpu", "cpu"]
    kept = load_cost_model(tmp_path, threads=2, measure=_measure(calls))
    assert kept.factors == learned.factors


def test_the_estimate_is_immutable_and_scales_as_the_formula_says():
    model = CostModel(rate=50.0)
    small = model.estimate("sinkhorn", n=2000, m=2000, d=64)
    big = model.estimate("sinkhorn", n=8000, m=8000, d=64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        small.seconds = 1.0  # type: ignore[misc]
    # n * m * (d + 300), plus each iteration's pass on the plan's entries
    per_entry = 364 + cost_model.DEFAULT_ITERATIONS * 50
    assert small.work == pytest.approx(2000.0**2 * per_entry)
    assert big.work == pytest.approx(16 * small.work)
    twice = model.estimate("sinkhorn", n=500, m=500, d=64, iterations=500).work
    assert twice == pytest.approx(500.0**2 * (364 + 500 * 50))
    overhead = model.estimate("sinkhorn", n=0, m=0, d=64).seconds
    per_work = (big.seconds - small.seconds) / (big.work - small.work)
    assert small.seconds - overhead == pytest.approx(per_work * small.work)
    # the encoder is linear in n, and a twice faster machine takes half the time
    enc = [model.estimate("encoder", n=n, pixels=2352).work for n in (1000, 3000)]
    assert enc[1] == pytest.approx(3 * enc[0])
    assert CostModel(rate=100.0).estimate("labels", n=1000, m=1000, d=64).seconds == (
        pytest.approx(model.estimate("labels", n=1000, m=1000, d=64).seconds / 2)
    )
    with pytest.raises(ValueError, match="unknown step"):
        work("nope", n=1)  # type: ignore[arg-type]


def test_learning_moves_the_estimate_toward_the_measured_time():
    model = CostModel(rate=50.0)
    sizes = {"iterations": 300, "batch": 64, "params": 6e4}
    before = model.estimate("training", **sizes).seconds
    measured = 4 * before
    after = model
    for _ in range(6):
        after = after.learn("training", measured, **sizes)
    assert after.estimate("training", **sizes).seconds == pytest.approx(measured, rel=0.05)
    assert after.estimate("sinkhorn", n=10, m=10, d=2) == model.estimate(
        "sinkhorn", n=10, m=10, d=2
    )
    assert model.learn("training", float("nan"), **sizes) is model
    assert model.factors == {}  # the original is unchanged


@pytest.mark.parametrize(
    "content", ["{not json", json.dumps([1, 2]), json.dumps({"version": 99, "machines": {}})]
)
def test_a_corrupt_calibration_is_ignored_with_a_warning(tmp_path, content):
    (tmp_path / CALIBRATION_FILE).write_text(content)
    calls: list[str] = []
    with pytest.warns(RuntimeWarning, match="ignoring the cost model's calibration"):
        model = load_cost_model(tmp_path, threads=1, measure=_measure(calls))
    assert model.rate == 40.0 and calls == ["cpu"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # measured again and saved: read cleanly now
        assert load_cost_model(tmp_path, threads=1, measure=_measure(calls)).rate == model.rate


def test_an_unreadable_entry_is_measured_again(tmp_path):
    bad = {"version": 1, "machines": {"cpu:1": {"rate": -3, "factors": {}}}}
    (tmp_path / CALIBRATION_FILE).write_text(json.dumps(bad))
    with pytest.warns(RuntimeWarning, match="unreadable"):
        model = load_cost_model(tmp_path, threads=1, measure=_measure([]))
    assert model.rate == 40.0


def test_eta_from_the_progress_fraction_is_sane_at_0_and_1():
    assert eta_seconds(5.0, 0.0) is None
    assert eta_seconds(5.0, 0.0, estimate=40.0) == 35.0
    assert eta_seconds(50.0, 0.0, estimate=40.0) == 0.0  # never negative
    assert eta_seconds(5.0, 1.0) == 0.0 and eta_seconds(5.0, 1.0, estimate=40.0) == 0.0
    assert eta_seconds(10.0, 0.5) == pytest.approx(10.0)
    assert eta_seconds(10.0, 0.25) == pytest.approx(30.0)
    # the estimate weighs less as the run goes on
    assert eta_seconds(10.0, 0.5, estimate=100.0) == pytest.approx(0.5 * 10 + 0.5 * 90)
    assert eta_seconds(1.0, -3.0) is None and eta_seconds(1.0, 7.0) == 0.0


def test_eta_clock_text():
    now = [0.0]
    clock = EtaClock(clock=lambda: now[0])
    assert clock.text(0.1) == ""  # too early to say
    now[0] = 10.0
    assert clock.text(0.5) == " · about 10 s left"
    assert clock.text(1.0) == ""
    assert EtaClock(40.0, clock=lambda: 0.0).text(0.0) == " · about 40 s left"


def test_sentences():
    assert format_seconds(0.3) == "under a second"
    assert format_seconds(7.4) == "about 7 s"
    assert format_seconds(41) == "about 40 s"
    assert format_seconds(200) == "about 3 min"
    assert format_seconds(4000) == "about 1 h 7 min"
    assert format_seconds(float("inf")) == "an unknown time"
    est = Estimate("sinkhorn", 41.0) + Estimate("labels", 2.0)
    assert est.step == "sinkhorn + labels" and est.sentence() == "about 45 s on this machine"
    assert took_sentence(38.2, Estimate("x", 41.0)) == "took 38 s (estimated about 40 s)"
    assert took_sentence(3.21) == "took 3.2 s"


def test_the_micro_benchmark_is_quick_and_positive():
    assert cost_model.measure_rate(size=64, repeats=1) > 0


# ---------------------------------------------------------------- where the estimates show


def test_a_job_says_its_time_left_then_what_it_took():
    import threading

    from geoviz.app.jobs import BackgroundJob

    gate = threading.Event()

    def run(progress):
        progress("maps", 0.0)
        assert gate.wait(10)
        return 1

    job = BackgroundJob(run, estimate=40.0)
    assert job.eta_text().endswith("s left") and job.snapshot()[0] == "maps"
    assert 0 < job.remaining() <= 40.0
    gate.set()
    assert job.wait(10)
    assert job.remaining() == 0.0 and job.eta_text().startswith(" · took ")
    assert BackgroundJob(lambda p: None).eta_text() in ("", " · took 0.0 s")


def test_the_fit_bar_says_the_stage_and_the_time_left():
    """The app's fit bar (widgets.geodesic_with_status): the escaped stage and the job's time
    left, which is part of the text its redraws compare (issue 45 item 1)."""
    import threading

    from geoviz.app.jobs import BackgroundJob
    from geoviz.app.widgets import fit_bar_text
    from geoviz.viz.report import markdown_literal

    gate = threading.Event()

    def run(progress):
        progress("barycentric 1/3: mnist -> usps_*", 0.0)
        assert gate.wait(10)
        return 1

    job = BackgroundJob(run, estimate=40.0)
    stage = job.snapshot()[0]
    text = fit_bar_text(stage, job)
    assert text.startswith(markdown_literal(stage)) and "usps\\_\\*" in text  # escaped
    assert text.endswith(" s left") and "about 40 s left" in text
    gate.set()
    assert job.wait(10)
    assert fit_bar_text("done", job).startswith("done · took ")


def test_plain_progress_lines_say_the_time_left_and_ignore_iteration_counts():
    import io

    from geoviz.cli.output import PlainProgress

    stream = io.StringIO()
    progress = PlainProgress(stream, estimate=40.0)
    progress("OTDD map 1/2 (sinkhorn)", 0.0)
    for it in range(0, 3000, 100):  # the iteration count changes, not the stage
        progress(f"OTDD map 1/2 (sinkhorn: iteration {it})", 0.01)
    lines = stream.getvalue().splitlines()
    assert lines == ["[  0%] OTDD map 1/2 (sinkhorn) · about 40 s left"]
    encoding = io.StringIO()
    progress = PlainProgress(encoding, estimate=40.0)
    for done in range(0, 3001, 250):  # the images encoded are counted, not new stages
        progress(f"encoder: encoding {done:,}/3,000 images", 0.001 * done / 3000)
    assert encoding.getvalue().splitlines() == [
        "[  0%] encoder: encoding 0/3,000 images · about 40 s left"
    ]


def test_otdd_sinkhorn_says_its_iteration():
    from geoviz.data.dataset import LabeledDataset
    from geoviz.ot.otdd import otdd
    from geoviz.ot.otdd_cost import OTDDConfig

    gen = np.random.default_rng(0)

    def ds(seed: int) -> LabeledDataset:
        x = torch.from_numpy(np.random.default_rng(seed).normal(size=(60, 2)).astype(np.float32))
        y = torch.from_numpy(gen.integers(0, 3, size=60))
        y[:3] = torch.arange(3)
        return LabeledDataset(x, y, ("a", "b", "c"), name=f"d{seed}")

    stages: list[str] = []
    otdd(ds(1), ds(2), OTDDConfig(), progress=lambda s, f: stages.append(s))
    counted = [s for s in stages if s.startswith("sinkhorn: iteration ")]
    assert counted and len(set(counted)) <= 2 + len(counted) // 50  # renewed, not every call
    assert stages[0] == "labels" and stages[-1] == "done"


def test_the_evidence_estimate_grows_with_the_seeds_and_the_grid(monkeypatch):
    from geoviz.app.services.evidence import EvidenceRequest, evidence_cost_sentence
    from geoviz.backend.cost_model import training_estimate

    idle = CostModel(rate=40.0)
    one = training_estimate((300, 64), (100, 64), points=10, seeds=1, model=idle)
    three = training_estimate((300, 64), (100, 64), points=10, seeds=3, model=idle)
    assert three.seconds == pytest.approx(3 * one.seconds)
    more = training_estimate((300, 64), (100, 64), points=21, seeds=1, model=idle)
    assert more.seconds > one.seconds
    pre = idle.estimate("training", iterations=300, batch=64).seconds
    fine = idle.estimate("training", iterations=100, batch=64).seconds
    assert one.seconds == pytest.approx(12 * (pre + fine) + fine)  # 2 methods + 10 points
    monkeypatch.setattr(cost_model, "load_cost_model", lambda *a, **k: idle)
    sentence = evidence_cost_sentence(EvidenceRequest(preset="cpu", resolution=3), 3)
    assert sentence.startswith("The training should take about") and "on this machine" in sentence


def test_a_geodesic_fit_sums_its_steps_and_the_encoder_adds_its_own():
    model = CostModel(rate=40.0)
    plain = model.geodesic_fit(1000, (1000, 1000, 1000))
    one = model.estimate("sinkhorn", n=1000, m=1000, d=64).seconds
    lab = model.estimate("labels", n=1000, m=1000, d=64, c_q=10, c_p=10).seconds
    setup = model.fixed("fit set-up", cost_model._FIT_OVERHEAD).seconds
    assert plain.seconds == pytest.approx(setup + 3 * one + 6 * lab)  # 3 maps, 3 pairs
    coloured = model.geodesic_fit(1000, (1000, 1000, 1000), encoded_images=4000, pixels=2352)
    enc = model.estimate("encoder", n=4000, pixels=2352).seconds
    assert coloured.seconds == pytest.approx(plain.seconds + enc)
    learned = model.learn_total(plain, 2 * plain.seconds, ("sinkhorn", "labels"))
    assert learned.geodesic_fit(1000, (1000, 1000, 1000)).seconds > plain.seconds
    assert learned.estimate("encoder", n=10).seconds == model.estimate("encoder", n=10).seconds


def test_the_cli_announces_a_long_run_and_says_what_it_took(tmp_path, monkeypatch):
    import io

    from geoviz.cli.output import announced, fit_estimate

    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path))
    stream = io.StringIO()
    with announced(Estimate("geodesic fit", 40.0), "fitting the maps", stream=stream):
        pass
    lines = stream.getvalue().splitlines()
    assert lines[0] == "fitting the maps: about 40 s on this machine (cost model)"
    assert lines[1].startswith("fitting the maps took 0.0 s (estimated about 40 s)")
    quiet = io.StringIO()
    with announced(Estimate("geodesic fit", 3.0), "fitting the maps", stream=quiet):
        pass
    assert quiet.getvalue() == ""  # a short run is not announced

    from geoviz.data.dataset import LabeledDataset

    def ds(n: int, channels: int) -> LabeledDataset:
        x = torch.zeros(n, channels * 16)
        y = torch.arange(n) % 2
        shape = (channels, 4, 4)
        return LabeledDataset(x, y, ("a", "b"), name="d", image_shape=shape)

    grey = fit_estimate(ds(100, 1), [ds(100, 1), ds(100, 1)])
    colour = fit_estimate(ds(100, 3), [ds(100, 3), ds(100, 3)])
    assert colour.seconds > grey.seconds  # the colour target's space is the encoder


def test_a_loaded_machine_makes_the_estimate_longer(monkeypatch):
    monkeypatch.setattr(cost_model.os, "getloadavg", lambda: (7.0, 2.0, 1.0))
    monkeypatch.setattr(cost_model.os, "cpu_count", lambda: 2)
    assert cost_model.contention(1) == 2.0  # ((7 + 1) / 2) ** 0.5
    assert cost_model.contention(1, "cuda") == 1.0
    idle = CostModel(rate=40.0)
    loaded = idle.now()
    assert loaded.contention == 2.0
    sizes = {"n": 1000, "m": 1000, "d": 64}
    assert (
        loaded.estimate("sinkhorn", **sizes).seconds
        == 2 * idle.estimate("sinkhorn", **sizes).seconds
    )
    # what a loaded run teaches is the idle machine's factor
    measured = 2 * idle.estimate("sinkhorn", **sizes).seconds
    assert loaded.learn("sinkhorn", measured, **sizes).factors["sinkhorn"] == pytest.approx(1.0)
    monkeypatch.setattr(cost_model.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert cost_model.contention(1) == 1.0


def test_sinkhorn_iterations_are_a_prior_per_space_then_learned_and_kept(tmp_path):
    """Issue 45 item 1: the digit box needs more iterations than pixels, the encoder on colour
    digits more again; a fit's maps teach the model their space's iterations (kept in the
    calibration file), and the other spaces keep their prior."""
    model = CostModel(rate=50.0)
    fits = {
        space: model.geodesic_fit(1000, (1000, 1000, 1000), d=784, space=space).seconds
        for space in ("pixels", "box", "encoder")
    }
    assert fits["pixels"] < fits["box"] < fits["encoder"]
    learned = model.learn_iterations("box", [600, 600, 600])
    assert model.iterations_of("box") < learned.iterations_of("box") < 600
    assert learned.iterations_of("pixels") == model.iterations_of("pixels")
    assert model.learn_iterations("box", []) == model
    replace(learned, threads=torch.get_num_threads()).save(tmp_path)  # this process's entry
    kept = load_cost_model(tmp_path, measure=lambda device: 1.0)
    assert kept.iterations_of("box") == pytest.approx(learned.iterations_of("box"))
    cost_model.remember_iterations("box", [50, 50], folder=tmp_path)
    assert load_cost_model(tmp_path).iterations_of("box") < kept.iterations_of("box")


def test_the_fit_estimate_names_the_space_it_expects():
    from geoviz.data.dataset import LabeledDataset

    def ds(channels: int, side: int = 16) -> LabeledDataset:
        x = torch.zeros(10, channels * side * side)
        return LabeledDataset(
            x, torch.arange(10) % 2, ("a", "b"), name="d", image_shape=(channels, side, side)
        )

    assert cost_model.fit_space(ds(1)) == ("box", 784)
    assert cost_model.fit_space(ds(3)) == ("encoder", 64)
    assert cost_model.fit_space(ds(1), "pixels") == ("pixels", 256)
    vectors = LabeledDataset(torch.zeros(10, 5), torch.arange(10) % 2, ("a", "b"), name="v")
    assert cost_model.fit_space(vectors) == ("pixels", 5)
