"""Evaluation episodes on fixed seeds, the random-policy baseline, and saved frames.

Every evaluation of a run plays the same episodes: episode ``i`` resets the evaluation
environment with seed ``episode_seeds(seed, n)[i]``, so curves compare policies on the same
initial states, and the uniform random policy is measured on exactly those episodes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

__all__ = ["episode_seeds", "run_episodes", "random_policy", "save_episode_frames", "return_curve"]

Policy = Callable[[np.ndarray], np.ndarray]


def episode_seeds(seed: int, episodes: int) -> list[int]:
    """The evaluation episode seeds of a run with recipe seed ``seed`` (disjoint from the
    training environment's seed)."""
    return [1_000_003 * (seed + 1) + i for i in range(episodes)]


def run_episodes(
    env, policy: Policy, seeds: list[int], *, keep_frames: bool = False
) -> tuple[list[float], list[int], list[np.ndarray]]:
    """Play one episode per seed; returns (returns, environment steps per episode, the
    first episode's frames ``[H, W, 3]`` when ``keep_frames``)."""
    returns, lengths, frames = [], [], []
    for i, s in enumerate(seeds):
        obs, info = env.reset(seed=s)
        total, steps, done = 0.0, 0, False
        if keep_frames and i == 0:
            frames.append(info["frame"].transpose(1, 2, 0))
        while not done:
            obs, reward, terminated, truncated, info = env.step(policy(obs))
            total += reward
            steps += info["env_steps"]
            done = terminated or truncated
            if keep_frames and i == 0:
                frames.append(info["frame"].transpose(1, 2, 0))
        returns.append(total)
        lengths.append(steps)
    return returns, lengths, frames


def random_policy(action_dim: int, seed: int) -> Policy:
    """Uniform actions in ``[-1, 1]^d`` from their own generator."""
    rng = np.random.default_rng(seed)
    return lambda obs: rng.uniform(-1.0, 1.0, size=action_dim).astype(np.float32)


def save_episode_frames(frames: list[np.ndarray], folder: str | Path, name: str, fps: int = 15) -> list[Path]:
    """Write an animated GIF and a PNG strip of every 10th frame; returns the paths."""
    from PIL import Image

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    images = [Image.fromarray(f) for f in frames]
    gif = folder / f"{name}.gif"
    images[0].save(gif, save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    strip = folder / f"{name}.png"
    Image.fromarray(np.concatenate(frames[::10][:12], axis=1)).save(strip)
    return [gif, strip]


def return_curve(history: list[tuple], random_mean: float | None, title: str):
    """Evaluation return (mean +- std) against environment steps, the random policy dashed;
    ``history`` holds ``(env_steps, mean, std, ...)`` per evaluation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    if history:
        steps, mean, std = (np.array(v, dtype=float) for v in list(zip(*history))[:3])
        ax.plot(steps, mean, marker="o", label="policy (mean action)")
        ax.fill_between(steps, mean - std, mean + std, alpha=0.25)
    if random_mean is not None:
        ax.axhline(random_mean, ls="--", color="grey", label="random policy")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episode return")
    ax.set_title(title)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return fig
