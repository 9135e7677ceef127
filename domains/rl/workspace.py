"""The RL loop: environment, replay, agent, step accounting, evaluation, logging, snapshots.

Step accounting (the papers' budgets are environment steps): one agent step is one action,
held for ``action_repeat`` environment steps. ``budget.steps``, ``budget.log_every``,
``budget.checkpoint_every``, ``evaluation.every_env_steps`` and ``agent.init_env_steps`` are
all environment steps; every metric is logged at ``step = environment steps`` and the agent
step is logged beside it as ``agent_steps``.

The loop follows CURL's (Alg. 1): uniformly random actions for the first ``init_env_steps``;
after that, each agent step samples an action from the policy (centre crop), makes
``updates_per_step`` updates, then steps the environment. Evaluation uses its own environment
and fixed episode seeds (:mod:`domains.rl.evaluation`).

Snapshots (``budget.checkpoint_every``) are written at the first episode end after each
multiple, so the environment needs no mid-episode state: agent, optimizers, replay buffer,
step counters and every random state (python, numpy, torch, the sampler's generator, the
training task's random state). A killed run resumed from its last snapshot continues exactly
as if it had not stopped.
"""
from __future__ import annotations

import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from domains.rl.agent import CurlSacAgent
from domains.rl.config import AgentConfig, DataConfig, EncoderConfig, EvaluationConfig
from domains.rl.curl import Objective
from domains.rl.envs import make_env
from domains.rl.evaluation import (episode_seeds, random_policy, return_curve, run_episodes,
                                   save_episode_frames)
from domains.rl.replay import FrameReplayBuffer

__all__ = ["Settings", "Counters", "Workspace"]


@dataclass
class Settings:
    """Everything the loop needs, taken from a validated recipe (see ``RLDomain.run``)."""

    data: DataConfig
    encoder: EncoderConfig
    evaluation: EvaluationConfig
    agent: AgentConfig
    total_env_steps: int
    batch_size: int = 512
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    seed: int = 0
    log_every: int = 1000
    checkpoint_every: int | None = None
    name: str = "rl"


@dataclass
class Counters:
    agent_steps: int = 0
    env_steps: int = 0
    episodes: int = 0
    next_eval: int = 0
    next_log: int = 0
    next_checkpoint: int | None = None
    random_return: tuple[float, float] | None = None
    history: list[tuple[int, float, float]] = field(default_factory=list)


class Workspace:
    """Owns one run: ``Workspace(settings, tracker, objective, snapshot_path).train()``."""

    def __init__(self, settings: Settings, tracker: Any, objective: Objective | None,
                 snapshot_path: str | Path | None = None, device: torch.device | None = None,
                 step_hook: Callable[["Workspace"], None] | None = None) -> None:
        self.s, self.tracker = settings, tracker
        self.device = device or torch.device("cpu")
        self.snapshot_path = Path(snapshot_path) if snapshot_path else None
        self.step_hook = step_hook
        d = settings.data
        random.seed(settings.seed)
        np.random.seed(settings.seed)
        torch.manual_seed(settings.seed)
        env_args = dict(action_repeat=d.repeat, frame_stack=d.frame_stack, image_size=d.image_size,
                        camera_id=d.camera_id, renderer=d.renderer)
        self.env = make_env(d.task, seed=settings.seed, **env_args)
        self.eval_env = make_env(d.task, seed=settings.seed + 1, **env_args)
        self.action_dim = self.env.action_space.shape[0]
        obs_shape = (3 * d.frame_stack, d.crop_size, d.crop_size)
        self.agent = CurlSacAgent(obs_shape, self.action_dim, encoder=settings.encoder,
                                  agent=settings.agent, objective=objective, lr=settings.lr,
                                  betas=settings.betas).to(self.device)
        self.rng = np.random.default_rng(settings.seed)
        self.buffer = FrameReplayBuffer(self._buffer_frames(), (3, d.image_size, d.image_size),
                                        self.action_dim, d.frame_stack)
        init = settings.agent.init_env_steps
        self.init_env_steps = 1000 * d.repeat if init is None else init
        self.c = Counters(next_checkpoint=settings.checkpoint_every)
        self._records: dict[str, float] = {}
        self._num_records = 0

    def _buffer_frames(self) -> int:
        """Frame slots: the capacity, or what the whole run can fill if that is less (one
        frame per agent step plus one per episode; DMC episodes are 1000 environment steps)."""
        agent_steps = -(-self.s.total_env_steps // self.s.data.repeat)
        episodes = -(-self.s.total_env_steps // 1000) + 1
        return max(self.s.data.frame_stack + 1, min(self.s.agent.replay_capacity, agent_steps + episodes + 1))

    # -- the loop --------------------------------------------------------------------------
    def train(self, resume_from: str | Path | None = None) -> dict[str, float]:
        if resume_from is not None:
            self.restore(resume_from)
        else:
            self.tracker.log_metrics({"buffer_bytes": self.buffer.nbytes,
                                      "buffer_frames": self.buffer.capacity}, step=0)
        s, c, agent = self.s, self.c, self.agent
        obs, episode_return, started = None, 0.0, time.perf_counter()
        steps_at_start = c.env_steps
        while c.env_steps < s.total_env_steps:
            if c.env_steps >= c.next_eval:
                self.evaluate()
                c.next_eval += s.evaluation.every_env_steps
            if obs is None:
                obs, info = self.env.reset()
                self.buffer.start_episode(info["frame"])
                episode_return = 0.0
            if c.env_steps < self.init_env_steps:
                action = self.rng.uniform(-1.0, 1.0, size=self.action_dim).astype(np.float32)
            else:
                action = agent.act(obs, sample=True)
                for _ in range(s.agent.updates_per_step):
                    self._accumulate(agent.update(self._sample()))
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.buffer.add(action, reward, terminated, info["frame"])
            c.env_steps += info["env_steps"]
            c.agent_steps += 1
            episode_return += reward
            if c.env_steps >= c.next_log:
                rate = (c.env_steps - steps_at_start) / max(time.perf_counter() - started, 1e-9)
                self._log_train(rate)
                c.next_log += s.log_every
            if terminated or truncated:
                c.episodes += 1
                self.tracker.log_metrics({"train/episode_return": episode_return,
                                          "train/episodes": c.episodes}, step=c.env_steps)
                obs = None
                if c.next_checkpoint is not None and c.env_steps >= c.next_checkpoint:
                    self.save()
                    while c.next_checkpoint <= c.env_steps:
                        c.next_checkpoint += s.checkpoint_every
            if self.step_hook is not None:
                self.step_hook(self)
        if not c.history or c.history[-1][0] != c.env_steps:
            self.evaluate()
        return self.finish()

    def _sample(self) -> dict[str, torch.Tensor]:
        batch = self.buffer.sample(self.rng, self.s.batch_size, self.s.data.crop_size)
        return {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    def _accumulate(self, records: dict[str, torch.Tensor]) -> None:
        for k, v in records.items():
            self._records[k] = self._records.get(k, 0.0) + float(v)
        self._num_records += 1

    def _log_train(self, env_steps_per_s: float) -> None:
        out = {f"train/{k}": v / self._num_records for k, v in self._records.items()} if self._num_records else {}
        out.update({"agent_steps": self.c.agent_steps, "train/env_steps_per_s": env_steps_per_s,
                    "train/updates": self.agent.num_updates})
        self.tracker.log_metrics(out, step=self.c.env_steps)
        self._records, self._num_records = {}, 0

    # -- evaluation ------------------------------------------------------------------------
    def evaluate(self) -> tuple[float, float]:
        """Mean and std of the deterministic policy's return over the evaluation episodes;
        the random baseline on the same seeds the first time."""
        ev, c = self.s.evaluation, self.c
        seeds = episode_seeds(self.s.seed, ev.episodes)
        if ev.random_baseline and c.random_return is None:
            rets, _, _ = run_episodes(self.eval_env, random_policy(self.action_dim, self.s.seed), seeds)
            c.random_return = (float(np.mean(rets)), float(np.std(rets)))
            self.tracker.log_metrics({"random_return_mean": c.random_return[0],
                                      "random_return_std": c.random_return[1]}, step=c.env_steps)
        self.agent.eval()
        rets, lengths, frames = run_episodes(self.eval_env, lambda o: self.agent.act(o, sample=False),
                                             seeds, keep_frames=ev.save_frames)
        self.agent.train()
        mean, std = float(np.mean(rets)), float(np.std(rets))
        c.history.append((c.env_steps, mean, std))
        self.tracker.log_metrics({"return_mean": mean, "return_std": std, "agent_steps": c.agent_steps,
                                  "eval/episode_env_steps": float(np.mean(lengths))}, step=c.env_steps)
        if frames:
            with tempfile.TemporaryDirectory() as tmp:
                for path in save_episode_frames(frames, tmp, f"eval_{c.env_steps:08d}"):
                    self.tracker.log_artifact(path, "eval_frames")
        return mean, std

    def finish(self) -> dict[str, float]:
        c = self.c
        final = {"return_mean": c.history[-1][1], "return_std": c.history[-1][2],
                 "env_steps": float(c.env_steps), "agent_steps": float(c.agent_steps),
                 "buffer_bytes": float(self.buffer.nbytes)}
        if c.random_return is not None:
            final.update(random_return_mean=c.random_return[0], random_return_std=c.random_return[1])
        self.tracker.log_figure(return_curve(c.history, c.random_return and c.random_return[0],
                                             self.s.name), "return_curve")
        if self.snapshot_path is not None:
            self.save()
        return final

    # -- snapshots -------------------------------------------------------------------------
    def save(self) -> Path | None:
        """Write the snapshot (buffer folder first, then the file that names it)."""
        if self.snapshot_path is None:
            return None
        path = self.snapshot_path
        path.parent.mkdir(parents=True, exist_ok=True)
        buffer_dir = path.parent / f"{path.stem}.buffer-{self.c.env_steps}"
        self.buffer.save(buffer_dir)
        state = {"agent": self.agent.snapshot(), "counters": asdict(self.c), "buffer": buffer_dir.name,
                 "rng": {"python": random.getstate(), "numpy": np.random.get_state(),
                         "torch": torch.get_rng_state(), "sampler": self.rng.bit_generator.state,
                         "task": self.env.unwrapped.task_random_state()}}
        tmp = path.with_suffix(path.suffix + ".tmp")
        torch.save(state, tmp)
        tmp.replace(path)
        for old in path.parent.glob(f"{path.stem}.buffer-*"):
            if old.name != buffer_dir.name:
                shutil.rmtree(old, ignore_errors=True)
        return path

    def restore(self, path: str | Path) -> None:
        path = Path(path)
        state = torch.load(path, map_location=self.device, weights_only=False)
        self.agent.restore(state["agent"])
        self.buffer.load(path.parent / state["buffer"])
        counters = state["counters"]
        counters["history"] = [tuple(h) for h in counters["history"]]
        if counters["random_return"] is not None:
            counters["random_return"] = tuple(counters["random_return"])
        self.c = Counters(**counters)
        rng = state["rng"]
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        torch.set_rng_state(rng["torch"])
        self.rng.bit_generator.state = rng["sampler"]
        self.env.unwrapped.set_task_random_state(rng["task"])
