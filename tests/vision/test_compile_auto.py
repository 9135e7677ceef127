"""``compile: auto`` (the default): eager off CUDA with nothing timed, and for a domain whose
batches change shape; on CUDA a timed trial of the run's step model, eager then compiled, whose
outcomes are checked here with injected timings, compilers and failures (no GPU is needed): the
10% margin and the twice-repaid compile time, the slowest rank's time and any rank's failure
(the other ranks simulated by ``agree``; two real gloo ranks in
``tests/distributed/test_compile_agreement.py``), every exception leaving the run eager with its
name on the speed line, the compiled model handed to the run. The trial leaves the model, its
buffers, its gradients and the random state as they were, and a CPU run with ``auto`` trains
exactly as one with ``off``."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
from pathlib import Path

import pytest
import torch
from torch import nn

from toolkit.losses.base import ContrastiveBatch
from toolkit.tracking.runlog import RunLog
from toolkit.training import speed
from toolkit.training.distributed import Context

ROOT = Path(__file__).resolve().parents[2]
CUDA = torch.device("cuda")  # only its type is read: the timings are injected
GRAPHS = "reduce-overhead"


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.ReLU(), nn.Linear(8, 3))


def _pass(model: nn.Module) -> None:
    model.zero_grad(set_to_none=True)
    model(torch.randn(16, 6)).sum().backward()


class Compiled(nn.Module):
    """What the injected compiler returns: the model itself, wrapped (no inductor on the CPU)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.inner = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


class Compiler:
    """An injected compiler: notes the modes asked for and the models it returned."""

    def __init__(self) -> None:
        self.made: list[tuple[nn.Module, str]] = []

    def __call__(self, model: nn.Module, mode: str) -> nn.Module:
        made = Compiled(model)
        self.made.append((made, mode))
        return made


class Timings:
    """An injected ``measure``: (ms per pass, seconds of warm-up) by mode; notes what it was given."""

    def __init__(self, by_mode: dict[str, tuple[float, float]]) -> None:
        self.by_mode = by_mode
        self.seen: list[tuple[nn.Module, str]] = []

    def __call__(self, model: nn.Module, mode: str) -> tuple[float, float]:
        self.seen.append((model, mode))
        return self.by_mode[mode]


def _choose(timings, steps=100_000, **kw) -> speed.CompileChoice:
    kw.setdefault("compiler", Compiler())
    return speed.choose_compile("auto", kw.pop("model", None) or _net(), CUDA, _pass, timings, steps=steps, **kw)


def _line(choice: speed.CompileChoice) -> str:
    return speed.Speed("channels_last", True, "lars multi-tensor", choice.mode, choice.reason).line()


def test_auto_off_cuda_is_eager_and_times_nothing():
    def trial(model: nn.Module) -> None:
        raise AssertionError("nothing is timed off CUDA")

    choice = speed.choose_compile("auto", _net(), torch.device("cpu"), trial)
    assert (choice.mode, choice.reason, choice.measured) == ("off", "auto: eager on cpu", "off")
    assert choice.step_model is None
    assert _line(choice).endswith("; not compiled (auto: eager on cpu)")


def test_a_domain_whose_batches_change_shape_stays_eager_and_says_why():
    def trial(model: nn.Module) -> None:
        raise AssertionError("nothing is timed when the shapes vary")

    from domains.text.domain import TextDomain

    assert TextDomain.variable_shapes  # text pads each batch to its longest sentence
    choice = speed.choose_compile("auto", _net(), CUDA, trial, variable_shapes=TextDomain.variable_shapes)
    assert choice.mode == "off"
    assert _line(choice).endswith(f"; not compiled (auto: eager, {TextDomain.variable_shapes})")
    assert "longest sentence" in choice.reason


def test_auto_on_cuda_keeps_a_compute_bound_step_eager_without_compiling():
    compiler = Compiler()
    timings = Timings({"off": (180.0, 0.5)})
    choice = _choose(timings, compiler=compiler)
    assert choice.mode == "off"
    assert choice.reason == "auto: the step takes 180 ms, compute-bound; compile=default to try"
    assert [mode for _, mode in timings.seen] == ["off"] and compiler.made == []  # no compile tried
    assert _line(choice).endswith("; not compiled (auto: the step takes 180 ms, compute-bound; compile=default to try)")


def test_auto_compiles_a_launch_bound_step_and_hands_the_compiled_model_to_the_run():
    model, compiler = _net(), Compiler()
    timings = Timings({"off": (9.8, 0.2), GRAPHS: (2.1, 14.0)})
    choice = _choose(timings, model=model, compiler=compiler, steps=5000)
    assert (choice.mode, choice.measured) == (GRAPHS, GRAPHS)
    # saved: 5000 steps x 7.7 ms = 38.5 s, against 14 s of compiling (and the first pass's
    # microseconds here): 2.7x
    assert choice.reason == (
        "auto: 2.1 ms/step against 9.8 ms eager, 79% faster (10% needed); "
        "compiled in 14 s, repaid 2.7x by 5000 steps (2x needed)"
    )
    assert _line(choice).startswith("speed: encoder channels_last, cudnn.benchmark; optimizer lars multi-tensor; ")
    assert "; torch.compile mode reduce-overhead (auto: 2.1 ms/step against 9.8 ms eager" in _line(choice)
    # the eager timing ran on the model itself, the compiled one on what the compiler made of
    # it, which is what the run steps with (one compile)
    assert [(m, mode) for m, mode in timings.seen] == [(model, "off"), (compiler.made[0][0], GRAPHS)]
    assert compiler.made[0][1] == GRAPHS and choice.step_model is compiler.made[0][0]


@pytest.mark.parametrize(
    ("compiled_ms", "kept"),
    [(9.0, True), (9.01, False), (9.8, False), (12.0, False)],  # 10% faster exactly, 9.9%, a tie, slower
)
def test_the_compiled_step_must_be_at_least_ten_percent_faster(compiled_ms, kept):
    choice = _choose(Timings({"off": (10.0, 0.2), GRAPHS: (compiled_ms, 1.0)}))
    assert (choice.mode == GRAPHS) is kept
    assert (choice.step_model is not None) is kept
    if not kept:
        assert choice.reason.startswith(f"auto: eager; reduce-overhead {compiled_ms:.1f} ms/step against 10.0 ms eager")
        assert "(10% needed)" in choice.reason
    if compiled_ms > 10.0:
        assert "20% slower" in choice.reason and "repaid 0.0x" in choice.reason


@pytest.mark.parametrize(("steps", "kept"), [(2801, True), (2799, False), (100, False)])
def test_the_run_must_repay_the_compile_time_twice(steps, kept):
    """5 ms saved a step against 7 s of compiling (and the first pass's microseconds here):
    2,800 steps save 14 s, twice the compile."""
    choice = _choose(Timings({"off": (10.0, 0.2), GRAPHS: (5.0, 7.0)}), steps=steps)
    assert (choice.mode == GRAPHS) is kept
    assert f"repaid {steps * 5.0 / 1000 / 7.0:.1f}x by {steps} steps (2x needed)" in choice.reason


def test_a_time_budget_caps_the_steps_that_repay_the_compile():
    """``budget.minutes`` 0.1: 6 s of 10 ms eager steps is 600 steps, whatever the epochs say."""
    choice = _choose(Timings({"off": (10.0, 0.2), GRAPHS: (5.0, 7.0)}), steps=100_000, minutes=0.1)
    assert choice.mode == "off" and "by 600 steps" in choice.reason


def test_the_slowest_rank_decides():
    """Another rank (simulated by ``agree``) times 11 ms compiled where this one times 5 ms:
    the gathered figures (11 against 12 ms eager, 8%) keep every rank eager."""

    def agree(mine: speed.Timed) -> list[speed.Timed]:
        if mine.error is None and mine.ms == 0.0:  # the first pass's report
            return [mine, speed.Timed(seconds=mine.seconds)]
        other = speed.Timed(12.0 if mine.ms == 10.0 else 11.0, mine.seconds)
        return [mine, other]

    choice = _choose(Timings({"off": (10.0, 0.2), GRAPHS: (5.0, 1.0)}), agree=agree)
    assert choice.mode == "off"
    assert choice.reason.startswith("auto: eager; reduce-overhead 11.0 ms/step against 12.0 ms eager, 8% faster")
    assert choice.reason.endswith("on the slowest of 2 ranks")


def test_a_failure_on_another_rank_leaves_every_rank_eager_and_names_the_rank():
    calls = []

    def agree(mine: speed.Timed) -> list[speed.Timed]:
        calls.append(mine)
        if len(calls) == 3:  # the compiled trial's first pass: rank 1 ran out of memory
            return [mine, speed.Timed(error="OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")]
        return [mine, mine]

    timings = Timings({"off": (4.0, 0.1), GRAPHS: (1.0, 1.0)})
    choice = _choose(timings, agree=agree)
    assert choice.mode == "off" and choice.step_model is None
    assert choice.reason == (
        "auto: reduce-overhead failed (rank 1: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB), eager"
    )
    # this rank's compiled pass went well, yet it timed nothing more: the ranks stopped together
    assert [mode for _, mode in timings.seen] == ["off"] and len(calls) == 3


class _Raising(nn.Module):
    def __init__(self, exc: Exception) -> None:
        super().__init__()
        self.exc = exc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise self.exc


@pytest.mark.parametrize(
    ("where", "exc", "said"),
    [
        (
            "compile",
            RuntimeError("no triton here\nlong traceback"),
            "reduce-overhead failed (RuntimeError: no triton here)",
        ),
        (
            "compiled pass",
            torch.OutOfMemoryError("CUDA out of memory"),
            "reduce-overhead failed (OutOfMemoryError: CUDA",
        ),
        (
            "compiled timing",
            RuntimeError("graph break storm"),
            "reduce-overhead failed (RuntimeError: graph break storm)",
        ),
        ("eager pass", torch.OutOfMemoryError("CUDA out of memory"), "the trial's eager pass failed (OutOfMemoryError"),
        ("eager timing", ValueError("no views"), "the trial's eager pass failed (ValueError: no views)"),
    ],
)
def test_any_failure_in_the_trial_leaves_the_run_eager_and_names_it(where, exc, said):
    model = _net()
    before = copy.deepcopy(model.state_dict())
    rng = torch.get_rng_state()

    def compiler(m: nn.Module, mode: str) -> nn.Module:
        if where == "compile":
            raise exc
        return _Raising(exc) if where == "compiled pass" else Compiled(m)

    def trial(m: nn.Module) -> None:
        if where == "eager pass" and m is model:
            raise exc
        _pass(m)

    def measure(m: nn.Module, mode: str) -> tuple[float, float]:
        if (where, mode) in (("compiled timing", GRAPHS), ("eager timing", "off")):
            raise exc
        return {"off": (4.0, 0.1), GRAPHS: (1.0, 1.0)}[mode]

    choice = speed.choose_compile("auto", model, CUDA, trial, measure, compiler=compiler, steps=100_000)
    assert choice.mode == "off" and choice.step_model is None
    assert choice.reason.startswith("auto: ") and said in choice.reason, choice.reason
    assert "long traceback" not in choice.reason  # one line
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert torch.equal(torch.get_rng_state(), rng)


@pytest.mark.parametrize("kept", [True, False])
def test_the_trial_leaves_the_model_its_statistics_and_the_random_state_alone(kept):
    """The timings are the real ones (:func:`speed.time_passes`, on the CPU here) of a model with
    BatchNorm and dropout, whose passes move its running statistics and fill its gradients: it
    comes back with the same weights, statistics (in the same storage), modes and no gradients,
    and the global generator draws what it would have drawn, whether the compiled model is kept
    (the run steps with it) or not."""
    model = _net()
    before = copy.deepcopy(model.state_dict())
    storage = {k: v.data_ptr() for k, v in model.state_dict().items()}
    model.eval()
    model[1].train()  # mixed modes come back as they were
    rng = torch.get_rng_state()

    def measure(m: nn.Module, mode: str) -> tuple[float, float]:
        m.train()  # a trial may change modes: they come back too
        ms, warm = speed.time_passes(m, _pass, torch.device("cpu"), warmup=1, rounds=2, passes=2)
        assert model[1].num_batches_tracked > 0  # the passes did move the statistics
        return (1.0 if kept else 1e9) if mode == GRAPHS else 10.0, warm

    choice = speed.choose_compile("auto", model, CUDA, _pass, measure, compiler=Compiler(), steps=10**9)
    assert (choice.mode == GRAPHS) is kept
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert {k: v.data_ptr() for k, v in after.items()} == storage
    assert all(p.grad is None for p in model.parameters())
    assert [m.training for m in model.modules()] == [False, False, True, False, False, False]
    assert torch.equal(torch.get_rng_state(), rng)


def test_time_passes_takes_the_median_round(monkeypatch):
    """A clock that each pass moves by the pass's own time: rounds of 1, 100 and 2 ms a pass
    (one round slowed by something else) give 2 ms, the warm-up's 50 ms its seconds."""
    now = [0.0]
    costs = iter([0.050] + [0.001] * 2 + [0.100] * 2 + [0.002] * 2)

    class Clock:
        @staticmethod
        def perf_counter() -> float:
            return now[0]

    def trial(model: nn.Module) -> None:
        now[0] += next(costs)

    monkeypatch.setattr(speed, "time", Clock)
    ms, warm = speed.time_passes(_net(), trial, torch.device("cpu"), warmup=1, rounds=3, passes=2)
    assert ms == pytest.approx(2.0) and warm == pytest.approx(0.050)


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
    err = capsys.readouterr().err
    assert "[ctk] speed: encoder channels_last; optimizer lars " in err and "; not compiled (auto: eager on cpu)" in err
    assert kept.params["measured.compile"] == "off"
    assert "compile" not in kept.params  # the setting is logged by the run, not the trainer


def test_the_trainer_asks_with_its_step_model_length_and_shapes_and_steps_with_what_the_trial_compiled(monkeypatch):
    asked = {}
    warmed = nn.Linear(2, 2)

    def choose(mode, model, device, trial, measure=None, **kw):
        asked.update(kw, mode=mode, model=model, trial=trial)
        return speed.CompileChoice(GRAPHS, "auto: injected", warmed)

    monkeypatch.setattr(speed, "choose_compile", choose)
    trainer = _trainer(["budget.steps=40"])
    assert asked["model"] is trainer.encoder and asked["mode"] == "auto" and callable(asked["trial"])
    assert (asked["steps"], asked["minutes"], asked["variable_shapes"], asked["agree"]) == (40, None, None, None)
    assert trainer.model is warmed  # not compiled again
    assert trainer.speed.compile == GRAPHS


def test_the_trainer_trial_is_a_forward_and_backward_pass_that_touches_nothing_of_the_run():
    trainer = _trainer([])
    before = copy.deepcopy(trainer.encoder.state_dict())
    views_state = trainer.views_gen.get_state()
    twin = copy.deepcopy(trainer.encoder)
    trainer._compile_trial()(twin)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in twin.parameters())
    assert all(p.grad is None for p in trainer.encoder.parameters())
    assert all(torch.equal(v, trainer.encoder.state_dict()[k]) for k, v in before.items())
    assert torch.equal(trainer.views_gen.get_state(), views_state)


def test_the_trainer_trial_through_choose_compile_leaves_the_run_as_it_was():
    """The real trial (the domain's views, forward, backward) on the run's own model, eager and
    'compiled' (the injected wrapper), with the real timer: weights, BN statistics, gradients,
    the views generator and the random state come back as they were."""
    trainer = _trainer([])
    before = copy.deepcopy(trainer.encoder.state_dict())
    views_state, rng = trainer.views_gen.get_state(), torch.get_rng_state()

    def measure(m: nn.Module, mode: str) -> tuple[float, float]:
        _, warm = speed.time_passes(m, trial, torch.device("cpu"), warmup=1, rounds=1, passes=1)
        return {"off": 10.0, GRAPHS: 5.0}[mode], warm  # the passes real, the figures injected

    trial = trainer._compile_trial()
    choice = speed.choose_compile("auto", trainer.model, CUDA, trial, measure, compiler=Compiler(), steps=3)
    assert choice.mode == "off" and "repaid 0.0x by 3 steps" in choice.reason  # 3 steps repay nothing
    assert all(torch.equal(v, trainer.encoder.state_dict()[k]) for k, v in before.items())
    assert all(p.grad is None for p in trainer.encoder.parameters())
    assert torch.equal(trainer.views_gen.get_state(), views_state) and torch.equal(torch.get_rng_state(), rng)


def test_under_torchrun_the_trial_times_the_batch_this_rank_trains_on(monkeypatch):
    """A step shards an in-memory global batch; so does the trial: rank 1 of 2 encodes the second
    half of the first batch (8 images, 2 views: 8 rows, not 16)."""
    trainer = _trainer([])
    first = next(iter(trainer.data.train))
    trainer.options = dataclasses.replace(trainer.options, distributed=Context(1, 2, 1, torch.device("cpu")))
    seen = {}
    real = trainer.domain.contrastive_batch

    def contrastive_batch(batch, model, *args):
        seen["x"] = batch["x"]
        return real(batch, model, *args)

    monkeypatch.setattr(trainer.domain, "contrastive_batch", contrastive_batch)
    rows = []
    hook = trainer.encoder.register_forward_pre_hook(lambda m, args: rows.append(args[0].shape[0]))
    trainer._compile_trial()(trainer.encoder)
    hook.remove()
    assert torch.equal(seen["x"], first["x"][4:]) and rows == [8]


def test_a_domain_that_returns_no_views_leaves_the_run_eager_with_the_reason(monkeypatch):
    trainer = _trainer([])
    monkeypatch.setattr(trainer.domain, "contrastive_batch", lambda *a, **k: ContrastiveBatch())
    choice = speed.choose_compile(
        "auto", trainer.model, CUDA, trainer._compile_trial(), Timings({}), compiler=Compiler(), steps=3
    )
    assert choice.mode == "off"
    assert choice.reason.startswith("auto: eager; the trial's eager pass failed (ValueError: domain 'vision' returned")


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
