"""``budget.minutes``: a run's length fixed from the speed of the machine it runs on.

:func:`fix_steps_from_speed` times steps of the trainer, puts every piece of state back as it was
(weights, optimizer, scheduler, scaler, random streams, loop position: the trainer's checkpoint
state), and fixes the run's length to the steps (and online monitors) that fit the minutes, at
most the budget's steps / epochs. The run is then the same as one with ``budget.steps`` = that
number (the timed steps leave no trace), which is printed and logged as the measurement
``measured.budget_steps_fixed`` (with ``measured.budget_ms_per_step``) for replay. The time of
logging and checkpoints is not counted.

The speed is steady enough that a second run on the same idle machine fixes the same length
within a few per cent (``bench/budget_calibration.py``): ``CALIBRATION_STEPS`` untimed warm-up
steps first (the first steps pay for allocations, oneDNN primitives and caches), then blocks of
timed steps; the speed is the median block's, so one slow block (another process, a page fault
storm) does not move it. The first online monitor, which the run does before calibrating, is
timed as a run's monitor costs.

A sweep, a study or a tune fixes the length once for all its points (:func:`toolkit.runs.calibrate`,
before any point starts) and hands it to every point (``RunOptions.fixed_steps``): the point trains
that many steps (at most its own ceiling) instead of calibrating beside the others, and logs
``measured.budget_steps_by = sweep``. A run alone takes the length an earlier run of its
experiment fixed with the same settings (seed aside) on the same machine, when there is one
(:func:`toolkit.tracking.measured.earlier_steps`; ``measured.budget_steps_by = run <id>``), so a
second seed trains as long as the first.
"""

from __future__ import annotations

import copy
import itertools
import statistics
import sys
import time
from typing import Any

import torch

from toolkit.tracking.measured import MEASURED
from toolkit.tracking.runlog import RunLog

__all__ = ["CALIBRATION_STEPS", "calibrate", "fix_steps_from_speed", "steps_that_fit", "speed"]

# (untimed warm-up steps, timed blocks, steps per block): the speed is the median block's
CALIBRATION_STEPS = (8, 5, 6)
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


def block_times(trainer: Any) -> list[float]:
    """Seconds per step of each of ``CALIBRATION_STEPS``' timed blocks of ``trainer`` (at step 0),
    after its untimed warm-up steps; every piece of state is put back afterwards."""
    snapshot = copy.deepcopy(trainer.state_dict())
    bad = trainer._bad
    warm, blocks, size = CALIBRATION_STEPS
    batches = itertools.cycle(trainer.data.train)
    for i in range(warm):
        trainer._train_step(next(batches), i)
    times = []
    for b in range(blocks):
        _sync(trainer.device)
        start = _clock()
        for i in range(size):
            trainer._train_step(next(batches), warm + b * size + i)
        _sync(trainer.device)
        times.append((_clock() - start) / size)
    trainer.load_state_dict(snapshot)
    trainer._bad = bad
    return times


def speed(trainer: Any) -> float:
    """Seconds per training step of ``trainer`` (at step 0), state put back afterwards: the
    median of :func:`block_times`."""
    return statistics.median(block_times(trainer))


def fix_steps_from_speed(trainer: Any, monitor_seconds: float) -> int:
    """Fix ``trainer.total`` (a :class:`~toolkit.training.pretrainer.Pretrainer` at step 0) from
    the speed of timed steps, or to ``trainer.options.fixed_steps`` when a sweep fixed it;
    ``monitor_seconds`` is what one online monitor took. Returns the number of steps (the same
    on every rank)."""
    budget, dist = trainer.recipe.budget, trainer.options.distributed
    ceiling = trainer.total
    given = trainer.options.fixed_steps
    if given:
        steps, per_step = max(1, min(ceiling, int(given))), None
    else:
        per_step = speed(trainer)
        steps = max(
            1, min(ceiling, steps_that_fit(budget.minutes * 60.0, per_step, budget.monitor_every, monitor_seconds))
        )
    if dist:
        steps = int(dist.broadcast_object(steps))
    trainer.total = trainer.state.planned_steps = steps
    for group, factor in zip(trainer.optimizer.param_groups, trainer.scheduler.lr_lambdas):
        group["lr"] = group["initial_lr"] * factor(trainer.state.step)
    ceiling_note = " (the budget's ceiling)" if steps == ceiling else f" of at most {ceiling}"
    warm, blocks, size = CALIBRATION_STEPS
    by = trainer.options.fixed_by
    how = (
        (
            f"{steps} steps (fixed once by the sweep for every point)"
            if by == "sweep"
            else f"{steps} steps (as {by} fixed them: the same settings on this machine)"
        )
        if per_step is None
        else f"{per_step * 1e3:.1f} ms/step (median of {blocks} blocks of {size} timed steps) -> {steps} steps"
    )
    print(
        f"[ctk] budget.minutes {budget.minutes:g}: {how}{ceiling_note}, {steps / trainer.steps_per_epoch:.2f} "
        f"epochs; replay with --set budget.steps={steps}",
        file=sys.stderr,
        flush=True,
    )
    logged = {f"{MEASURED}budget_steps_fixed": steps, f"{MEASURED}budget_steps_by": by if given else "run"}
    if per_step is not None:
        logged[f"{MEASURED}budget_ms_per_step"] = round(per_step * 1e3, 2)
    trainer.tracker.log_params(logged)
    return steps


class _Calibrated(Exception):
    """Raised by :func:`calibrate`'s hook after the first real step: the length is fixed by then."""


def calibrate(trainer: Any) -> dict[str, float]:
    """``budget.minutes``' length measured as a run measures it, on a pretrainer at step 0 that is
    thrown away afterwards (:meth:`~toolkit.training.pretrainer.Pretrainer.calibrate`): ``fit`` up
    to its first real step (the first online monitor timed, then :func:`fix_steps_from_speed`),
    the params it logs kept here and nothing else: ``{steps, ms_per_step}``."""
    logged: dict[str, Any] = {}

    class Kept(RunLog):
        def log_params(self, params: Any) -> None:
            logged.update(params)

    def stop(step: int) -> None:
        raise _Calibrated

    trainer.tracker = Kept()
    trainer.options.hooks.append(stop)
    try:
        trainer.fit()
    except _Calibrated:
        pass
    return {
        "steps": int(logged[f"{MEASURED}budget_steps_fixed"]),
        "ms_per_step": float(logged.get(f"{MEASURED}budget_ms_per_step", "nan")),
    }
