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

The workspace is the RL domain's :class:`~toolkit.training.trainer.Trainer` (``fit``,
``evaluate``, ``state_dict`` / ``load_state_dict``), built by ``RLDomain.trainer`` from the
validated recipe, which is the one source of what it does: it reads the recipe's sections
(``data``, ``encoder``, ``agent``, ``evaluation``, ``objective``, ``optimizer``, ``budget``,
``seed``, the resolved ``precision``) where it needs them.

Time to accuracy: ``Workspace.counters.train_seconds`` is the wall time spent training in ``fit``,
evaluations excluded, kept in the checkpoint so a resumed run continues the clock. Each
evaluation is kept as ``(env_steps, mean, std, train_seconds)``; ``train/wall_seconds`` is
logged with the training metrics and with each evaluation, and the final ``evaluate`` logs a
``time_to_accuracy`` figure (return against training wall time, the random policy dashed).

Checkpoints (``budget.checkpoint_every``) are written at the first episode end after each
multiple; what they hold and how: :mod:`domains.rl.checkpoints` (the workspace's base class).
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from domains.rl.agent import CurlSacAgent
from domains.rl.augment import center_crop
from domains.rl.checkpoints import Counters, RLCheckpoints
from domains.rl.envs import make_env
from domains.rl.evaluation import episode_seeds, random_policy, return_curve, run_episodes, save_episode_frames
from domains.rl.replay import FrameReplayBuffer
from toolkit import objective as objective_mod
from toolkit import recipe as rc
from toolkit.evaluation.collapse import collapse_figures, collapse_warning
from toolkit.training.precision import autocast_dtype
from toolkit.training.trainer import RunOptions, StopAfterStep

__all__ = ["Counters", "Workspace", "DEFAULT_CHECKPOINT_EVERY"]

# budget.checkpoint_every unset: a checkpoint every this many environment steps (0: none)
DEFAULT_CHECKPOINT_EVERY = 10_000
# Agent steps with updates that Workspace.calibrate times after the seed phase (the first
# CALIBRATION_UPDATES[0] are warm-up: allocations, first autograd graphs), then CALIBRATION_UPDATES[1]
CALIBRATION_UPDATES = (5, 30)


class _Measured(Exception):
    """Raised by the calibration's step hook once it has timed what it needs."""


class Workspace(RLCheckpoints):
    """Owns one run: ``Workspace(recipe, tracker, options).fit()``, then ``evaluate()`` for the
    final metrics. ``recipe`` is a validated rl recipe with its precision resolved (without an
    ``objective`` the agent is plain pixel SAC); ``options.checkpoint_dir`` (None: no
    checkpoints) holds the checkpoints and their buffer folders; ``step_hook`` is called after
    every agent step (tests use it to stop a run part-way, as a kill would)."""

    def __init__(
        self,
        recipe: rc.Recipe,
        tracker: Any,
        options: RunOptions | None = None,
        step_hook: Callable[[Workspace], None] | None = None,
    ) -> None:
        super().__init__(recipe, tracker, options)
        self.device = self.options.device or torch.device("cpu")
        # built before anything is seeded (building draws no random numbers)
        objective = objective_mod.from_recipe(recipe).to(self.device) if recipe.objective is not None else None
        self.step_hook = step_hook
        self._buffer_name: str | None = None
        self._resume_folder: Path | None = None
        d, agent, seed = recipe.data, recipe.section("agent"), recipe.seed
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        env_args = dict(
            action_repeat=d.repeat,
            frame_stack=d.frame_stack,
            image_size=d.image_size,
            camera_id=d.camera_id,
            renderer=d.renderer,
            shadow_size=d.shadow_size,
        )
        self.env = make_env(d.task, seed=seed, **env_args)
        self.eval_env = make_env(d.task, seed=seed + 1, **env_args)
        self.action_dim = self.env.action_space.shape[0]
        obs_shape = (3 * d.frame_stack, d.crop_size, d.crop_size)
        self.agent = CurlSacAgent(
            obs_shape,
            self.action_dim,
            encoder=recipe.encoder,
            agent=agent,
            objective=objective,
            lr=recipe.optimizer.lr,
            betas=tuple(recipe.optimizer.betas),
            compute_dtype=autocast_dtype(recipe.precision) or torch.float32,
        ).to(self.device)
        self.rng = np.random.default_rng(seed)
        self.buffer = FrameReplayBuffer(
            self._buffer_frames(), (3, d.image_size, d.image_size), self.action_dim, d.frame_stack
        )
        self.init_env_steps = 1000 * d.repeat if agent.init_env_steps is None else agent.init_env_steps
        self.counters = Counters(next_checkpoint=self.checkpoint_every)
        self._records: dict[str, float] = {}
        self._collapse_said = False
        self._num_records = 0

    @property
    def total_env_steps(self) -> int:
        """The budget: ``budget.steps``, in environment steps, or the count a sweep (or an
        earlier run) fixed for ``budget.minutes`` (``RunOptions.fixed_steps``), if fewer."""
        fixed = self.options.fixed_steps
        return min(self.recipe.budget.steps, int(fixed)) if fixed else self.recipe.budget.steps

    @property
    def checkpoint_every(self) -> int | None:
        """Environment steps between checkpoints (``budget.checkpoint_every``; unset:
        :data:`DEFAULT_CHECKPOINT_EVERY`; 0: None, no periodic checkpoints)."""
        every = self.recipe.budget.checkpoint_every
        return (DEFAULT_CHECKPOINT_EVERY if every is None else every) or None

    def _buffer_frames(self) -> int:
        """Frame slots: the capacity, or what the whole run can fill if that is less (one
        frame per agent step plus one per episode; DMC episodes are 1000 environment steps)."""
        data = self.recipe.data
        agent_steps = -(-self.total_env_steps // data.repeat)
        episodes = -(-self.total_env_steps // 1000) + 1
        return max(data.frame_stack + 1, min(self.recipe.section("agent").replay_capacity, agent_steps + episodes + 1))

    @property
    def step(self) -> int:  # type: ignore[override]
        return self.counters.env_steps

    @property
    def encoder(self) -> torch.nn.Module:  # type: ignore[override]
        """The representation: the critic's pixel encoder (the actor shares its convolutions)."""
        return self.agent.critic.encoder

    # -- the loop --------------------------------------------------------------------------
    def fit(self) -> None:
        """Train to ``total_env_steps`` (periodic evaluations, logs and checkpoints inside)."""
        if self.counters.env_steps == 0 and self.counters.agent_steps == 0:
            self.tracker.log_metrics(
                {"buffer_bytes": self.buffer.nbytes, "buffer_frames": self.buffer.capacity}, step=0
            )
        budget, ev, counts, agent = self.recipe.budget, self.recipe.evaluation, self.counters, self.agent
        updates_per_step, total = self.recipe.section("agent").updates_per_step, self.total_env_steps
        if self.options.fixed_steps and budget.minutes and counts.env_steps == 0:
            print(
                f"[ctk] budget.minutes {budget.minutes:g}: {total} environment steps (fixed by "
                f"{self.options.fixed_by}); replay with --set budget.steps={total}",
                file=sys.stderr,
                flush=True,
            )
            self.tracker.log_params(
                {"measured.budget_steps_fixed": total, "measured.budget_steps_by": self.options.fixed_by}
            )
        obs, episode_return = None, 0.0
        steps_at_start, seconds_at_start = counts.env_steps, counts.train_seconds
        clock = (time.perf_counter(), counts.train_seconds)  # train_seconds = clock[1] + now - clock[0]
        with StopAfterStep() as stop:
            while counts.env_steps < total and not self._out_of_time():
                if counts.env_steps >= counts.next_eval:
                    counts.train_seconds = clock[1] + time.perf_counter() - clock[0]
                    self.evaluate_policy(ev.periodic_episodes)
                    counts.next_eval += ev.every_env_steps
                    clock = (time.perf_counter(), counts.train_seconds)  # the evaluation is not training time
                if obs is None:
                    obs, info = self.env.reset()
                    self.buffer.start_episode(info["frame"])
                    episode_return = 0.0
                if counts.env_steps < self.init_env_steps:
                    action = self.rng.uniform(-1.0, 1.0, size=self.action_dim).astype(np.float32)
                else:
                    action = agent.act(obs, sample=True)
                    for _ in range(updates_per_step):
                        self._accumulate(agent.update(self._sample()))
                obs, reward, terminated, truncated, info = self.env.step(action)
                self.buffer.add(action, reward, terminated, info["frame"])
                counts.env_steps += info["env_steps"]
                counts.agent_steps += 1
                counts.train_seconds = clock[1] + time.perf_counter() - clock[0]
                episode_return += reward
                if counts.env_steps >= counts.next_log:
                    rate = (counts.env_steps - steps_at_start) / max(counts.train_seconds - seconds_at_start, 1e-9)
                    self._log_train(rate)
                    counts.next_log += budget.log_every
                if terminated or truncated:
                    counts.episodes += 1
                    self.tracker.log_metrics(
                        {"train/episode_return": episode_return, "train/episodes": counts.episodes},
                        step=counts.env_steps,
                    )
                    obs = None
                    if counts.next_checkpoint is not None and counts.env_steps >= counts.next_checkpoint:
                        while counts.next_checkpoint <= counts.env_steps:
                            counts.next_checkpoint += self.checkpoint_every
                        self.save_checkpoint()
                if self.step_hook is not None:
                    self.step_hook(self)
                if stop.requested:  # the episode in progress restarts on --resume (its simulator
                    # state is not saved): no update is lost, but the run is no longer step for
                    # step the uninterrupted one
                    self.stop_now(f"environment step {counts.env_steps} of {total}")

        if self._out_of_time() and counts.env_steps < total:
            print(
                f"[ctk] budget.minutes {budget.minutes:g}: training stopped at environment step "
                f"{counts.env_steps} of {total} after {counts.train_seconds / 60:.1f} min (evaluations not "
                f"counted); replay with --set budget.steps={counts.env_steps} --set budget.minutes=null",
                file=sys.stderr,
                flush=True,
            )
            self.tracker.log_params({"measured.budget_steps_reached": counts.env_steps})

    def _out_of_time(self) -> bool:
        """``budget.minutes`` of training wall time spent (evaluations excluded). The schedule is
        constant in RL, so a run stopped here is the run with ``budget.steps`` = the steps reached."""
        minutes = self.recipe.budget.minutes
        return minutes is not None and not self.options.fixed_steps and self.counters.train_seconds >= 60.0 * minutes

    def calibrate(self) -> dict[str, float] | None:
        """``budget.minutes``' environment steps on this machine, from this workspace's own loop
        (thrown away afterwards): the seed phase (random actions, no updates) timed whole, then
        agent steps with their updates (:data:`CALIBRATION_UPDATES`); the steps are those that
        fit in the minutes at those two rates (evaluations not counted, as a run counts them),
        at most ``budget.steps``. ``ms_per_step``: per environment step once updates run."""
        minutes = self.recipe.budget.minutes
        if not minutes:
            return None
        seconds, repeat = 60.0 * minutes, self.recipe.data.repeat
        warm, timed = CALIBRATION_UPDATES
        marks: list[tuple[int, float]] = []  # (environment steps, training seconds) after each agent step

        def measure(ws: Workspace) -> None:
            marks.append((ws.counters.env_steps, ws.counters.train_seconds))
            if ws.counters.env_steps >= ws.init_env_steps + (warm + timed) * repeat:
                raise _Measured

        self.step_hook = measure
        try:
            self.fit()
        except _Measured:
            pass
        if marks[-1][0] < self.init_env_steps + (warm + timed) * repeat:  # the budget ended first
            return {
                "steps": min(self.total_env_steps, marks[-1][0]),
                "ms_per_step": 1e3 * marks[-1][1] / max(1, marks[-1][0]),
            }
        seed_steps, seed_seconds = next(m for m in marks if m[0] >= self.init_env_steps)
        start = next(m for m in marks if m[0] >= self.init_env_steps + warm * repeat)
        per_step = (marks[-1][1] - start[1]) / (marks[-1][0] - start[0])
        fit = (
            seed_steps * seconds / seed_seconds
            if seconds <= seed_seconds
            else seed_steps + (seconds - seed_seconds) / per_step
        )
        steps = max(repeat, int(fit) // repeat * repeat)
        return {"steps": min(self.total_env_steps, steps), "ms_per_step": per_step * 1e3}

    def _sample(self) -> dict[str, torch.Tensor]:
        batch = self.buffer.sample(self.rng, self.recipe.budget.batch_size, self.recipe.data.crop_size)
        return {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    def _accumulate(self, records: dict[str, torch.Tensor]) -> None:
        for k, v in records.items():
            self._records[k] = self._records.get(k, 0.0) + float(v)
        self._num_records += 1

    def _log_train(self, env_steps_per_s: float) -> None:
        out = {f"train/{k}": v / self._num_records for k, v in self._records.items()} if self._num_records else {}
        out.update(
            {
                "agent_steps": self.counters.agent_steps,
                "train/env_steps_per_s": env_steps_per_s,
                "train/updates": self.agent.num_updates,
                "train/wall_seconds": self.counters.train_seconds,
            }
        )
        self.tracker.log_metrics(out, step=self.counters.env_steps)
        self._records, self._num_records = {}, 0

    # -- evaluation ------------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        """The final metrics: evaluates the policy on ``evaluation.episodes`` episodes (periodic
        evaluations stop below the budget, so this one is always made), logs the return
        curve and the time-to-accuracy figure and returns ``return_mean``, ``return_std``, the
        random baseline..."""
        counts = self.counters
        if not counts.history or counts.history[-1][0] != counts.env_steps:
            self.evaluate_policy()
        final = {
            "return_mean": counts.history[-1][1],
            "return_std": counts.history[-1][2],
            "env_steps": float(counts.env_steps),
            "agent_steps": float(counts.agent_steps),
            "buffer_bytes": float(self.buffer.nbytes),
        }
        if counts.random_return is not None:
            final.update(random_return_mean=counts.random_return[0], random_return_std=counts.random_return[1])
        random_mean = counts.random_return and counts.random_return[0]
        self.tracker.log_figure(return_curve(counts.history, random_mean, self.recipe.run_name), "return_curve")
        from toolkit.evaluation.plots import time_to_accuracy_figure  # matplotlib: only when a run ends

        points = {"policy (mean action)": [(h[3], h[1]) for h in counts.history if not np.isnan(h[3])]}
        baseline = {"random policy": random_mean} if random_mean is not None else None
        self.tracker.log_figure(
            time_to_accuracy_figure(points, self.recipe.run_name, baselines=baseline, ylabel="episode return"),
            "time_to_accuracy",
        )
        return final

    COLLAPSE_OBSERVATIONS = 1000  # replayed observations the collapse figures are computed on

    @torch.no_grad()
    def embedding_collapse(self) -> dict[str, float]:
        """The collapse figures (:mod:`toolkit.evaluation.collapse`) of the critic encoder's
        features (what the contrastive term trains) on replayed observations, drawn with a
        generator of their own so the run's random stream is untouched; none before the buffer
        holds a transition."""
        try:
            frames = self.buffer.sample_frames(np.random.default_rng(self.recipe.seed + 97), self.COLLAPSE_OBSERVATIONS)
        except ValueError:
            return {}
        crop = self.recipe.data.crop_size
        stacks = self.buffer.stacks(np.unique(frames))
        obs = torch.from_numpy(np.ascontiguousarray(center_crop(stacks, crop))).to(self.device)
        if obs.shape[0] < 2:
            return {}
        encoder = self.agent.critic.encoder
        z = torch.cat([encoder(encoder.prepare(chunk)).float().cpu() for chunk in obs.split(256)])
        return collapse_figures(z)

    def evaluate_policy(self, episodes: int | None = None) -> tuple[float, float]:
        """Mean and std of the deterministic policy's return over the first ``episodes``
        evaluation episodes (None: ``evaluation.episodes``); the random baseline on all
        ``evaluation.episodes`` seeds the first time."""
        ev, counts, seed = self.recipe.evaluation, self.counters, self.recipe.seed
        seeds = episode_seeds(seed, ev.episodes)
        if ev.random_baseline and counts.random_return is None:
            rets, _, _ = run_episodes(self.eval_env, random_policy(self.action_dim, seed), seeds)
            counts.random_return = (float(np.mean(rets)), float(np.std(rets)))
            self.tracker.log_metrics(
                {"random_return_mean": counts.random_return[0], "random_return_std": counts.random_return[1]},
                step=counts.env_steps,
            )
        self.agent.eval()
        rets, lengths, frames = run_episodes(
            self.eval_env, lambda o: self.agent.act(o, sample=False), seeds[:episodes], keep_frames=ev.save_frames
        )
        collapse = self.embedding_collapse()
        self.agent.train()
        mean, std = float(np.mean(rets)), float(np.std(rets))
        counts.history.append((counts.env_steps, mean, std, counts.train_seconds))
        if collapse:
            self.tracker.log_metrics(collapse, step=counts.env_steps)
            line = collapse_warning(collapse, where=f"at {counts.env_steps} environment steps")
            if line is not None and not self._collapse_said:
                print(line, file=sys.stderr, flush=True)
                self._collapse_said = True
        self.tracker.log_metrics(
            {
                "return_mean": mean,
                "return_std": std,
                "agent_steps": counts.agent_steps,
                "eval/episodes": len(rets),
                "eval/episode_env_steps": float(np.mean(lengths)),
                "train/wall_seconds": counts.train_seconds,
            },
            step=counts.env_steps,
        )
        if frames:
            with tempfile.TemporaryDirectory() as tmp:
                for path in save_episode_frames(frames, tmp, f"eval_{counts.env_steps:08d}"):
                    self.tracker.log_artifact(path, "eval_frames")
        return mean, std
