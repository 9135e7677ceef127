"""The RL loop's checkpoints: what one holds and how it is written and read back.

Checkpoints go through :mod:`toolkit.checkpoint` and are written at an episode's end, so the
environment needs no mid-episode state: agent, optimizers, step counters (:class:`Counters`) and
every random state (python, numpy, torch CPU and CUDA, the sampler's generator, the training
task's random state); the replay buffer is written beside the checkpoint as one ``.npy`` per
array (``buffer-<env steps>/``, read back without pickle; one is kept, a buffer can be
gigabytes). A killed run resumed from its last checkpoint continues exactly as if it had not
stopped.

:class:`RLCheckpoints` is the :class:`~domains.rl.workspace.Workspace`'s base: the trainer face's
checkpoint methods over the attributes the workspace builds (``agent``, ``buffer``, ``env``,
``rng``, ``counters``).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from toolkit import checkpoint as ckpt
from toolkit.training.trainer import Trainer

__all__ = ["Counters", "RLCheckpoints"]


@dataclass
class Counters:
    agent_steps: int = 0
    env_steps: int = 0
    episodes: int = 0
    next_eval: int = 0
    next_log: int = 0
    next_checkpoint: int | None = None
    random_return: tuple[float, float] | None = None
    history: list[tuple[int, float, float, float]] = field(default_factory=list)  # steps, mean, std, seconds
    train_seconds: float = 0.0  # wall time in fit() outside evaluations, across resumes


class RLCheckpoints(Trainer):
    """The checkpoint methods of the RL trainer (see the module's docstring)."""

    _buffer_name: str | None = None
    _resume_folder: Path | None = None

    def state_dict(self) -> dict[str, Any]:
        counters = asdict(self.counters)
        counters["history"] = [list(h) for h in counters["history"]]
        counters["random_return"] = list(self.counters.random_return) if self.counters.random_return else None
        rng = ckpt.rng_state()
        rng["sampler"] = ckpt.numpy_state(self.rng.bit_generator.state)
        rng["task"] = ckpt.numpy_state(self.env.unwrapped.task_random_state())
        return {"agent": self.agent.snapshot(), "counters": counters, "buffer": self._buffer_name, "rng": rng}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.agent.restore(state["agent"])
        if state.get("buffer"):
            folder = self._resume_folder or self.options.checkpoint_dir
            self.buffer.load(Path(folder) / state["buffer"])
        counters = dict(state["counters"])
        # checkpoints written before the clock existed have (steps, mean, std): seconds unknown
        counters["history"] = [tuple(h) + (float("nan"),) * (4 - len(h)) for h in counters["history"]]
        if counters["random_return"] is not None:
            counters["random_return"] = tuple(counters["random_return"])
        self.counters = Counters(**counters)
        rng = state["rng"]
        ckpt.set_rng_state(rng)
        self.rng.bit_generator.state = ckpt.set_numpy_state(rng["sampler"])
        self.env.unwrapped.set_task_random_state(ckpt.set_numpy_state(rng["task"]))

    def resume(self, path: str | Path, saved: Mapping[str, Any] | None = None) -> None:
        """Continue from a checkpoint (its buffer folder lies beside it)."""
        self._resume_folder = Path(path).parent
        super().resume(path, saved)

    def save_checkpoint(self, name: str | None = None, keep: int | None = None) -> Path | None:
        """The buffer folder first, then the checkpoint that names it; older ones removed (a
        buffer can be gigabytes, so one is kept)."""
        folder = self.options.checkpoint_dir
        if folder is None:
            return None
        self._buffer_name = f"buffer-{self.counters.env_steps:09d}"
        self.buffer.save(Path(folder) / self._buffer_name)
        path = super().save_checkpoint(name, keep=1 if keep is None else keep)
        for old in Path(folder).glob("buffer-*"):
            if old.name != self._buffer_name:
                shutil.rmtree(old, ignore_errors=True)
        return path
