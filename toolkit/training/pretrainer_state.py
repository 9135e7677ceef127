"""The pretrainer's state: what a checkpoint holds and the finite-loss watch.

:class:`LoopState` is the loop's position and running sums; :class:`CheckpointedState` (a base of
:class:`~toolkit.training.pretrainer.Pretrainer`) turns the trainer into a checkpoint and back
(model, objective, optimizer, scheduler, grad scaler, loop, every generator and, under
torchrun, every rank's random state) and remembers the first non-finite loss on the device, so
a step reads nothing back and a poisoned state is never saved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from toolkit import checkpoint as ckpt
from toolkit.training.trainer import NonFiniteLoss

__all__ = ["LoopState", "CheckpointedState"]


@dataclass
class LoopState:
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    sums: dict[str, Any] = field(default_factory=dict)  # floats, or device tensors between log steps
    count: int = 0
    history: list[tuple[int, float]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    train_seconds: float = 0.0  # wall time spent in fit(), across resumes
    progress: list[list[Any]] = field(default_factory=list)  # [seconds, step, metric, value]
    planned_steps: int | None = None  # the length budget.minutes fixed (None: the budget's steps / epochs)


class CheckpointedState:
    """State dict, checkpoint and finite-loss watch of the pretrainer (its attributes: ``encoder``,
    ``objective``, ``optimizer``, ``scheduler``, ``scaler``, ``state``, ``options``, ``total``,
    ``steps_per_epoch``, ``views_gen``, ``_generators``, ``_views_seed``)."""

    _bad: tuple[torch.Tensor, torch.Tensor] | None = None  # (first non-finite step, its loss)
    _rank_rng: list[Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        self._settle_sums()
        loop = asdict(self.state)
        loop["history"] = [list(h) for h in loop["history"]]
        state = {
            "encoder": self.encoder.state_dict(),
            "objective": self.objective.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "loop": loop,
            "rng": ckpt.rng_state(self._generators()),
        }
        if self._rank_rng is not None:
            state["rng_ranks"] = self._rank_rng
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.encoder.load_state_dict(state["encoder"])
        self.objective.load_state_dict(state["objective"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler.is_enabled() and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        loop = dict(state["loop"])
        loop["history"] = [tuple(h) for h in loop.get("history", [])]
        self.state = LoopState(**loop)
        if self.state.planned_steps:
            self.total = self.state.planned_steps
        dist = self.options.distributed
        rank = dist.rank if dist else 0
        ranks = state.get("rng_ranks") or [state["rng"]]
        if rank < len(ranks):
            ckpt.set_rng_state(ranks[rank], self._generators())
        else:  # more ranks than the checkpoint knew: this rank's own views, from its step
            ckpt.set_rng_state(ranks[0], self._generators())
            self.views_gen.manual_seed(self._views_seed() + 1_000_003 * self.state.step)

    def save_checkpoint(self, name: str | None = None, keep: int | None = None) -> Any:
        """Every rank calls this (rank 0 writes): the loss is checked finite first, and rank 0's
        file gets every rank's random state."""
        self._check_finite()
        dist = self.options.distributed
        self._rank_rng = dist.all_gather_object(ckpt.rng_state(self._generators())) if dist else None
        return super().save_checkpoint(name, keep)

    def _settle_sums(self) -> None:
        """The accumulated records as floats (one host sync for all of them)."""
        sums = self.state.sums
        keys = [k for k, v in sums.items() if isinstance(v, torch.Tensor)]
        if keys:
            values = torch.stack([sums[k].float() for k in keys]).tolist()
            sums.update(zip(keys, values))

    def _check_finite(self) -> None:
        """Raise NonFiniteLoss when a loss since the last check was NaN / inf (one sync)."""
        if self._bad is None:
            return
        step_t, loss_t = self._bad
        bad_step = int(step_t)
        if bad_step < 0:
            return
        self._settle_sums()
        recs = ", ".join(f"{k}={v / max(self.state.count, 1):.4g}" for k, v in self.state.sums.items())
        last = ckpt.latest(self.options.checkpoint_dir) if self.options.checkpoint_dir is not None else None
        raise NonFiniteLoss(
            f"the loss is {float(loss_t)} at step {bad_step} (epoch {bad_step // self.steps_per_epoch}); "
            f"records since the last log step: {recs}. It was found at step {self.state.step} (the loss is "
            f"checked on log steps, without host syncs in between); no state after step {bad_step} was "
            f"saved, the last good checkpoint is {last or '(none)'}. "
            "Lower the learning rate, raise the temperature, or check the inputs."
        )

    def _note_finite(self, loss: torch.Tensor) -> None:
        """Remember the first non-finite loss (step and value) on the device, without a sync."""
        if self._bad is None:
            self._bad = (
                torch.full((), -1, dtype=torch.long, device=loss.device),
                torch.zeros((), dtype=torch.float32, device=loss.device),
            )
        prev_step, prev_loss = self._bad
        first = (prev_step < 0) & ~torch.isfinite(loss)
        self._bad = (torch.where(first, self.state.step, prev_step), torch.where(first, loss.float(), prev_loss))
