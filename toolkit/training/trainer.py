"""The one face every trainer shows the command line.

A domain hands back a trainer for a validated recipe (``domain.trainer(recipe, tracker,
options)``): the toolkit's :class:`~toolkit.training.pretrainer.Pretrainer` for representation
learning, the RL workspace, the toy domain's one-shot runs. ``toolkit.runs.execute`` drives
every one of them the same way::

    trainer = domain.trainer(recipe, tracker, options)
    trainer.resume(path)           # optional: load_state_dict of a checkpoint
    trainer.fit()                  # train to the budget (periodic evaluation / checkpoints inside)
    metrics = trainer.evaluate()   # final metrics, logged
    trainer.save_checkpoint()      # the final state

A trainer supplies ``state_dict`` / ``load_state_dict``; :mod:`toolkit.checkpoint` does the rest
(data only, atomic, device-portable files; the envelope with the format version and the recipe,
so a resume can say which recipe keys changed; finding a run's checkpoints).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from toolkit import checkpoint as ckpt
from toolkit import recipe as rc
from toolkit.tracking.runlog import RunLog

__all__ = ["RunOptions", "Trainer", "NonFiniteLoss", "StopAfterStep", "select_device"]


@dataclass
class RunOptions:
    """How a run is executed (not what it computes: that is the recipe)."""

    device: torch.device | None = None
    distributed: Any = None  # toolkit.training.distributed.Context, or None
    progress: bool = True
    checkpoint_dir: Path | None = None  # None: no checkpoints
    keep_checkpoints: int = 2
    hooks: list[Callable[[int], None]] = field(default_factory=list)  # called with the step
    fixed_steps: int | None = None  # budget.minutes' step count, fixed before the run
    fixed_by: str = "sweep"  # who fixed it: the sweep, or an earlier run ("run <id>")


class Trainer:
    """Base of trainers. Subclasses implement :meth:`fit`, :meth:`evaluate`,
    :meth:`state_dict` and :meth:`load_state_dict`, and set ``step`` (the counter their
    checkpoints are named by) and ``encoder`` (the representation logged as the run's model,
    or None). ``tracker`` is the :class:`~toolkit.tracking.runlog.RunLog` the run is recorded
    through (None: one that keeps nothing, e.g. on the ranks other than 0)."""

    step: int = 0
    encoder: nn.Module | None = None

    def __init__(self, recipe: rc.Recipe, tracker: RunLog | None, options: RunOptions | None = None) -> None:
        self.recipe = recipe
        self.tracker = tracker if tracker is not None else RunLog()
        self.options = options or RunOptions()
        budget = recipe.budget if recipe is not None else None
        if budget is not None:
            self.options.keep_checkpoints = budget.keep_checkpoints
        self.last_checkpoint_time = time.monotonic()

    # -- the face ---------------------------------------------------------------------------
    def fit(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def evaluate(self) -> dict[str, float]:  # pragma: no cover - abstract
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def load_state_dict(self, state: Mapping[str, Any]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def calibrate(self) -> dict[str, float] | None:
        """``budget.minutes``' length on this machine, measured by training this trainer (which
        is thrown away afterwards: a sweep calls it once, in a process of its own, before its
        points): ``{"steps": ..., "ms_per_step": ...}`` in the trainer's own steps, or None when
        it does not calibrate (the default). :func:`toolkit.runs.calibrate` asks here."""
        return None

    # -- checkpoints (shared) ----------------------------------------------------------------
    @property
    def is_main(self) -> bool:
        dist = self.options.distributed
        return dist is None or dist.is_main

    def checkpoint_path(self, name: str | None = None) -> Path | None:
        folder = self.options.checkpoint_dir
        if folder is None:
            return None
        return Path(folder) / (name or f"step-{self.step:09d}.pt")

    def save_checkpoint(self, name: str | None = None, keep: int | None = None) -> Path | None:
        """Write the trainer's state (rank 0 only); keep the newest ``keep_checkpoints``."""
        path = self.checkpoint_path(name)
        if path is None or not self.is_main:
            return None
        self.last_checkpoint_time = time.monotonic()
        saved = ckpt.write(
            path,
            self.state_dict(),
            self._resolved(),
            self.tracker.run_id,
            keep=self.options.keep_checkpoints if keep is None else keep,
        )
        if path.suffix == ".pt":
            self.tracker.note_checkpoint(saved, self.step)
        return saved

    def stop_now(self, position: str) -> None:
        """Checkpoint now and raise KeyboardInterrupt saying where the run stopped (``position``,
        e.g. "step 13 of 24") and how to continue it."""
        path = self.save_checkpoint()
        folder = self.options.checkpoint_dir
        raise KeyboardInterrupt(
            f"stopped after {position}, checkpointed in {path}; continue with: ctk run --resume {folder.name}"
            if folder is not None
            else f"stopped after {position} (no checkpoint folder, so no resume)"
        )

    def _resolved(self) -> dict[str, Any]:
        return self.recipe.resolved if self.recipe is not None else {}

    def resume(self, path: str | Path, saved: Mapping[str, Any] | None = None) -> None:
        """Load a checkpoint written for this recipe (``RecipeMismatch`` otherwise);
        ``saved`` is the file's content when the caller already read and checked it."""
        if saved is None:
            saved = ckpt.read(path, self._resolved())
        self.load_state_dict(saved["trainer"])


class NonFiniteLoss(RuntimeError):
    """The loss became NaN or infinite; the message says where and what was saved."""


class StopAfterStep:
    """Ctrl-C (SIGINT) or SIGTERM (a scheduler pre-empting the job) during training asks the
    trainer to stop after the current step.

    The trainer checkpoints that step and raises KeyboardInterrupt, so ``--resume`` continues
    exactly where the run stopped. With ``allow_force`` (one process) a second Ctrl-C stops at
    once; under torchrun the launcher's own timeout ends a rank that does not stop.

    The handlers are installed even where SIGINT was inherited ignored (a background job of a
    non-interactive shell), on purpose: supervisors ask a trainer to stop with SIGINT (Ray's
    cancel, which interrupts only a process that has a Python handler; torchrun's agent), and a
    stop after a checkpointed step loses nothing. The previous dispositions, SIG_IGN included,
    are put back on exit.
    """

    def __init__(self, allow_force: bool = True) -> None:
        self.requested = False
        self.allow_force = allow_force
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopAfterStep:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested and self.allow_force:
            raise KeyboardInterrupt("stopped at once (second Ctrl-C); the last periodic checkpoint is kept")
        if not self.requested:
            what = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            print(
                f"\n[ctk] {what}: stopping after this step and checkpointing it (Ctrl-C again stops at once)",
                file=sys.stderr,
                flush=True,
            )
        self.requested = True

    def __exit__(self, *exc: Any) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)


def select_device(name: str = "auto") -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: 'cuda' was asked for but torch sees no CUDA device; use cpu or auto")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
