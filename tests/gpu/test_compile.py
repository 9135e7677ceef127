"""``compile: auto`` and compiled training on a GPU (``pytest -m gpu``; skipped where torch sees no
CUDA device): the real trial (eager passes, then ``torch.compile`` in ``reduce-overhead``: inductor
and CUDA graphs) on the quickstart's conv net leaves the model, its BatchNorm statistics, the
optimizer, the views generator and the random states as they were and says what it chose with
its figures; and a run compiled in ``reduce-overhead`` trains as the eager run does over a few
steps, within the tolerance stated at the comparison. The CPU tests of the same code inject
their timings (``tests/vision/test_compile_auto.py``); these run the compiler."""

from __future__ import annotations

import copy
import importlib.util
import re
from pathlib import Path

import pytest
import torch

from toolkit.tracking.runlog import RunLog
from toolkit.training import speed
from toolkit.training.trainer import RunOptions

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "recipes" / "vision" / "quickstart.yaml"
CUDA = torch.device("cuda")
# the quickstart's conv net at batch 64 on synthetic images held on the GPU (no data needed), fp32
# so that the comparison below is of the compiler, not of bf16 rounding
SMALL = ["budget.minutes=null", "budget.batch_size=64", "budget.log_every=1", "precision=fp32", "device=cuda"]


def _bench():
    spec = importlib.util.spec_from_file_location("gpu_step", ROOT / "bench" / "gpu_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Losses(RunLog):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def log_metrics(self, metrics, step, flush=True):
        if "train/loss" in metrics:
            self.losses.append(float(metrics["train/loss"]))


def _trainer(sets: list[str], log: RunLog | None = None):
    bench = _bench()
    plan = bench.load(QUICKSTART, [*SMALL, *sets], "cuda")
    domain = bench.synthetic_domain(plan, resident=True)
    return domain.trainer(plan.recipe, log or RunLog(), RunOptions(device=plan.device, progress=False))


def _state(trainer) -> dict:
    return {
        "encoder": copy.deepcopy(trainer.encoder.state_dict()),
        "grads": [p.grad for p in trainer.encoder.parameters()],
        "optimizer": copy.deepcopy(trainer.optimizer.state_dict()),
        "views": trainer.views_gen.get_state(),
        "cpu": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(),
    }


def test_the_real_trial_leaves_the_run_as_it_was_and_says_what_it_chose():
    trainer = _trainer(["compile=off", "budget.steps=2000"])  # built eager: the trial is run by hand below
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in trainer.encoder.modules())
    before = _state(trainer)
    modes = []

    def measure(model, mode):
        modes.append(mode)
        return speed.time_passes(model, trial, CUDA)

    trial = trainer._compile_trial()
    try:
        choice = speed.choose_compile("auto", trainer.model, CUDA, trial, measure, steps=trainer.total)
        assert modes == ["off", "reduce-overhead"], choice.reason  # the eager step is launch-bound here
        assert "failed" not in choice.reason, choice.reason  # inductor and CUDA graphs work on this machine
        figures = re.search(
            r"([\d.]+) ms/step against ([\d.]+) ms eager, \d+% (faster|slower) \(10% needed\)", choice.reason
        )
        assert figures and "compiled in" in choice.reason and "by 2000 steps (2x needed)" in choice.reason, (
            choice.reason
        )
        assert (choice.step_model is not None) == (choice.mode == "reduce-overhead")
        after = _state(trainer)
        for k, v in before["encoder"].items():  # weights and BatchNorm statistics, bit for bit
            assert torch.equal(v, after["encoder"][k]), k
        assert all(g is None for g in after["grads"])
        assert after["optimizer"] == before["optimizer"] and not after["optimizer"]["state"]
        for k in ("views", "cpu", "cuda"):
            assert torch.equal(before[k], after[k]), k
    finally:
        torch.compiler.reset()


def test_a_cuda_trainer_with_auto_prints_its_choice_and_records_it(capsys):
    trainer = _trainer(["budget.steps=4000"])
    try:
        assert trainer.recipe.compile == "auto" and trainer.speed.compile in ("off", "reduce-overhead")
        assert trainer.speed.compile_reason.startswith("auto: ")
        err = capsys.readouterr().err
        assert f"[ctk] {trainer.speed.line()}" in err
        if trainer.speed.compile == "reduce-overhead":  # the trial's compiled model is the one the run steps with
            assert isinstance(trainer.model, torch._dynamo.eval_frame.OptimizedModule)
        trainer.total = trainer.state.planned_steps = 3
        trainer.fit()  # and it trains
    finally:
        torch.compiler.reset()


def test_compiled_and_eager_training_agree_over_a_few_steps(monkeypatch):
    """Six SGD steps of the conv net eager and compiled in ``reduce-overhead`` from the same seed
    on the same views, in fp32 with TF32 off (so that what differs is the compiler, not cuDNN's
    TF32 rounding): inductor fuses and reorders fp32 arithmetic (about 1e-6 of each value per
    op), so the two runs are not bit for bit alike; they must agree to 1e-3 of each step's loss,
    and the compiled weights must lie within 1% of the distance the eager ones moved from the
    start (a wrong gradient, a stale CUDA graph input or a skipped update is far outside both).
    The same comparison on a CPU (compile: default, inductor's CPU code) agreed to 1e-5 in the
    losses and 0.05% in the weights."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    sets = ["budget.steps=6", "optimizer.name=sgd", "optimizer.lr=0.05"]
    runs = {}
    try:
        for mode in ("off", "reduce-overhead"):
            log = Losses()
            trainer = _trainer([*sets, f"compile={mode}"], log)
            start = {k: v.detach().clone() for k, v in trainer.encoder.state_dict().items()}
            trainer.fit()
            runs[mode] = (log.losses, start, trainer.encoder.state_dict())
            assert trainer.speed.compile == mode
    finally:
        torch.compiler.reset()
    (eager_losses, start, eager), (compiled_losses, start_c, compiled) = runs["off"], runs["reduce-overhead"]
    assert len(eager_losses) == len(compiled_losses) == 6
    torch.testing.assert_close(torch.tensor(compiled_losses), torch.tensor(eager_losses), rtol=1e-3, atol=1e-5)
    floats = [k for k, v in eager.items() if v.is_floating_point()]
    assert all(torch.equal(start[k], start_c[k]) for k in floats)  # one seed, one start
    moved = torch.cat([(eager[k] - start[k]).flatten().float() for k in floats]).norm()
    apart = torch.cat([(compiled[k] - eager[k]).flatten().float() for k in floats]).norm()
    assert moved > 0 and apart <= 0.01 * moved, (float(apart), float(moved))
