"""``compile: auto`` (the default): eager off CUDA with nothing timed; on CUDA a timed trial on
copies of the step model, whose three outcomes are checked here with injected timings (no GPU
is needed); the trial leaves the model, its buffers and the random state as they were, and a
CPU run with ``auto`` trains exactly as one with ``off``."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest
import torch
from torch import nn

from toolkit.tracking.runlog import RunLog
from toolkit.training import speed

ROOT = Path(__file__).resolve().parents[2]
CUDA = torch.device("cuda")  # only its type is read: the timings are injected


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.ReLU(), nn.Linear(8, 3))


def _pass(model: nn.Module) -> None:
    model.zero_grad(set_to_none=True)
    model(torch.randn(16, 6)).sum().backward()


class Timings:
    """An injected ``measure``: (ms per pass, seconds of warm-up) by mode; notes what it was given."""

    def __init__(self, by_mode: dict[str, tuple[float, float]]) -> None:
        self.by_mode = by_mode
        self.seen: list[tuple[nn.Module, str]] = []

    def __call__(self, model: nn.Module, mode: str) -> tuple[float, float]:
        self.seen.append((model, mode))
        return self.by_mode[mode]


def _line(choice: speed.CompileChoice) -> str:
    return speed.Speed("channels_last", True, "lars multi-tensor", choice.mode, choice.reason).line()


def test_auto_off_cuda_is_eager_and_times_nothing():
    def trial(model: nn.Module) -> None:
        raise AssertionError("nothing is timed off CUDA")

    choice = speed.choose_compile("auto", _net(), torch.device("cpu"), trial)
    assert (choice.mode, choice.reason, choice.measured) == ("off", "auto: eager on cpu", "off")
    assert _line(choice).endswith("; not compiled (auto: eager on cpu)")


def test_auto_on_cuda_keeps_a_compute_bound_step_eager_without_compiling():
    timings = Timings({"off": (180.0, 0.5)})
    choice = speed.choose_compile("auto", _net(), CUDA, _pass, timings)
    assert choice.mode == "off"
    assert choice.reason == "auto: the step takes 180 ms, compute-bound; compile=default to try"
    assert [mode for _, mode in timings.seen] == ["off"]  # no compile tried
    assert _line(choice).endswith("; not compiled (auto: the step takes 180 ms, compute-bound; compile=default to try)")


def test_auto_on_cuda_compiles_a_launch_bound_step_when_the_graphs_are_faster():
    model = _net()
    timings = Timings({"off": (9.8, 0.2), "reduce-overhead": (2.1, 14.2)})
    choice = speed.choose_compile("auto", model, CUDA, _pass, timings)
    assert (choice.mode, choice.measured) == ("reduce-overhead", "reduce-overhead")
    assert _line(choice).endswith(
        "; torch.compile mode reduce-overhead (auto: 2.1 ms/step against 9.8 ms eager, compiled in 14 s)"
    )
    assert [mode for _, mode in timings.seen] == ["off", "reduce-overhead"]
    # each timing ran on a copy of its own, never on the run's model
    copies = [m for m, _ in timings.seen]
    assert all(m is not model for m in copies) and copies[0] is not copies[1]


@pytest.mark.parametrize("compiled_ms", [12.0, 9.8])  # slower, and a tie
def test_auto_on_cuda_stays_eager_when_the_graphs_are_not_faster(compiled_ms):
    timings = Timings({"off": (9.8, 0.2), "reduce-overhead": (compiled_ms, 31.0)})
    choice = speed.choose_compile("auto", _net(), CUDA, _pass, timings)
    assert choice.mode == "off"
    assert choice.reason == (
        f"auto: reduce-overhead {compiled_ms:.1f} ms/step against 9.8 ms eager, compiled in 31 s, not faster"
    )


def test_auto_on_cuda_stays_eager_when_the_compile_fails():
    def measure(model: nn.Module, mode: str) -> tuple[float, float]:
        if mode == "off":
            return 4.0, 0.1
        raise RuntimeError("no triton here\nlong traceback")

    choice = speed.choose_compile("auto", _net(), CUDA, _pass, measure)
    assert choice.mode == "off"
    assert choice.reason == "auto: reduce-overhead failed (RuntimeError: no triton here), eager"


def test_the_trial_leaves_the_model_its_statistics_and_the_random_state_alone():
    """The eager timing is the real one (:func:`speed.time_passes`, on the CPU here): a model with
    BatchNorm and dropout comes back with the same weights, running statistics and no gradients,
    and the global generator draws what it would have drawn."""
    model = _net()
    before = copy.deepcopy(model.state_dict())
    rng = torch.get_rng_state()

    def measure(copy_: nn.Module, mode: str) -> tuple[float, float]:
        if mode == "off":
            return speed.time_passes(copy_, mode, _pass, torch.device("cpu"), warmup=1, passes=2)
        return 1e9, 0.0

    speed.choose_compile("auto", model, CUDA, _pass, measure)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in model.parameters())
    assert torch.equal(torch.get_rng_state(), rng)


def test_explicit_modes_are_taken_as_asked_and_unknown_ones_are_refused():
    assert speed.choose_compile("default", _net(), CUDA, _pass) == speed.CompileChoice("default")
    assert speed.choose_compile("off", _net(), CUDA, _pass).reason == ""
    cpu_graphs = speed.choose_compile("reduce-overhead", _net(), torch.device("cpu"), None)
    assert cpu_graphs.mode.startswith("default (") and cpu_graphs.measured == "default"
    with pytest.raises(ValueError, match=r"compile must be one of auto, off, .* got 'fast'"):
        speed.choose_compile("fast", _net(), CUDA, _pass)


# -- the trainer -----------------------------------------------------------------------------
def _bench():
    spec = importlib.util.spec_from_file_location("gpu_step", ROOT / "bench" / "gpu_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _trainer(sets, log=None):
    from toolkit.training.trainer import RunOptions

    bench = _bench()
    plan = bench.load(bench.RECIPE, [*bench.TINY, "budget.steps=3", "budget.log_every=1", *sets], "cpu")
    domain = bench.synthetic_domain(plan)
    return domain.trainer(plan.recipe, log or RunLog(), RunOptions(device=plan.device, progress=False))


class Kept(RunLog):
    """A run record that keeps the params and the training losses."""

    def __init__(self) -> None:
        self.params: dict[str, str] = {}
        self.losses: list[float] = []

    def log_params(self, params):
        self.params.update(params)

    def log_metrics(self, metrics, step, flush=True):
        if "train/loss" in metrics:
            self.losses.append(float(metrics["train/loss"]))


def test_a_cpu_trainer_with_the_default_auto_runs_eager_says_why_and_records_it(capsys):
    kept = Kept()
    trainer = _trainer([], kept)
    assert trainer.recipe.compile == "auto"
    assert trainer.model is trainer.encoder  # nothing compiled
    assert (trainer.speed.compile, trainer.speed.compile_reason) == ("off", "auto: eager on cpu")
    assert "[ctk] speed: encoder channels_last; optimizer lars per-parameter; not compiled (auto: eager on cpu)" in (
        capsys.readouterr().err
    )
    assert kept.params["measured.compile"] == "off"
    assert "compile" not in kept.params  # the setting is logged by the run, not the trainer


def test_the_trainer_trial_is_a_forward_and_backward_pass_that_touches_only_its_copy():
    trainer = _trainer([])
    before = copy.deepcopy(trainer.encoder.state_dict())
    views_state = trainer.views_gen.get_state()
    twin = copy.deepcopy(trainer.encoder)
    trainer._compile_trial()(twin)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in twin.parameters())
    assert all(p.grad is None for p in trainer.encoder.parameters())
    assert all(torch.equal(v, trainer.encoder.state_dict()[k]) for k, v in before.items())
    assert torch.equal(trainer.views_gen.get_state(), views_state)


def test_a_cpu_run_with_auto_trains_exactly_as_one_with_off():
    runs = {}
    for mode in ("auto", "off"):
        kept = Kept()
        trainer = _trainer([f"compile={mode}"], kept)
        trainer.fit()
        runs[mode] = (kept.losses, trainer.encoder.state_dict(), kept.params["measured.compile"])
    (auto_losses, auto_state, auto_chose), (off_losses, off_state, off_chose) = runs["auto"], runs["off"]
    assert len(auto_losses) == 3 and auto_losses == off_losses
    assert all(torch.equal(auto_state[k], off_state[k]) for k in off_state)
    assert auto_chose == off_chose == "off"
