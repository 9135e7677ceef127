"""``budget.minutes``: a run's length fixed from the speed of the machine it runs on.

:func:`fix_steps_from_speed` times a few steps of the trainer, puts every piece of state back as
it was (weights, optimizer, scheduler, scaler, random streams, loop position: the trainer's
checkpoint state), and fixes the run's length to the steps (and online monitors) that fit the
minutes, at most the budget's steps / epochs. The run is then the same as one with
``budget.steps`` = that number (the timed steps leave no trace), which is printed and logged as
``budget_steps_fixed`` for replay. The time of logging and checkpoints is not counted.
"""
from __future__ import annotations

import copy
import itertools
import sys
import time
from typing import Any

import torch

__all__ = ["CALIBRATION_STEPS", "fix_steps_from_speed", "steps_that_fit"]

# steps timed to fix a run's length, after untimed warm-up steps
CALIBRATION_STEPS = (12, 3)
_clock = time.perf_counter  # the calibration's clock (tests replace it)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def steps_that_fit(seconds: float, per_step: float, monitor_every: int | None, monitor_seconds: float) -> int:
    """The most steps whose training and online monitors (one after every ``monitor_every``-th
    step, each ``monitor_seconds`` long) fit in ``seconds``: only the monitors those steps reach
    are counted."""
    if not monitor_every or monitor_seconds <= 0:
        return int(seconds / per_step + 1e-6)
    cycle = monitor_every * per_step + monitor_seconds
    cycles = int(seconds // cycle)
    rest = int((seconds - cycles * cycle) / per_step + 1e-6)
    return cycles * monitor_every + min(rest, monitor_every - 1)


def fix_steps_from_speed(trainer: Any, monitor_seconds: float) -> int:
    """Fix ``trainer.total`` (a :class:`~toolkit.training.pretrainer.Pretrainer` at step 0) from
    the speed of timed steps; ``monitor_seconds`` is what one online monitor took. Returns the
    number of steps (the same on every rank)."""
    budget, dist = trainer.recipe.budget, trainer.options.distributed
    snapshot = copy.deepcopy(trainer.state_dict())
    bad = trainer._bad
    timed, warm = CALIBRATION_STEPS
    start = 0.0
    for i, batch in enumerate(itertools.islice(itertools.cycle(trainer.data.train), timed + warm)):
        if i == warm:
            _sync(trainer.device)
            start = _clock()
        trainer._train_step(batch, i)
    _sync(trainer.device)
    per_step = (_clock() - start) / timed
    trainer.load_state_dict(snapshot)
    trainer._bad = bad
    ceiling = trainer.total
    steps = max(1, min(ceiling, steps_that_fit(budget.minutes * 60.0, per_step, budget.monitor_every,
                                               monitor_seconds)))
    if dist:
        steps = int(dist.broadcast_object(steps))
    trainer.total = trainer.state.planned_steps = steps
    for group, factor in zip(trainer.optimizer.param_groups, trainer.scheduler.lr_lambdas):
        group["lr"] = group["initial_lr"] * factor(trainer.state.step)
    ceiling_note = " (the budget's ceiling)" if steps == ceiling else f" of at most {ceiling}"
    print(f"[ctk] budget.minutes {budget.minutes:g}: {per_step * 1e3:.1f} ms/step over {timed} timed "
          f"steps -> {steps} steps{ceiling_note}, {steps / trainer.steps_per_epoch:.2f} epochs; replay "
          f"with --set budget.steps={steps}", file=sys.stderr, flush=True)
    trainer.tracker.log_params({"budget_steps_fixed": steps, "budget_ms_per_step": round(per_step * 1e3, 2)})
    return steps
