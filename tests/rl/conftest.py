"""Fixtures of the RL tests: a stand-in tracker, a cheap deterministic renderer, tiny recipes."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from domains.rl import envs
from toolkit.tracking.runlog import RunLog


class RecordingTracker(RunLog):
    """The tracker face ``run`` uses (log_metrics, log_figure, log_artifact, log_model)."""

    def __init__(self) -> None:
        self.run_id = None
        self.metrics: list[tuple[int, dict[str, float]]] = []
        self.figures: list[str] = []
        self.artifacts: list[str] = []
        self.models: list[str] = []

    def log_metrics(self, metrics, step):
        self.metrics.append((int(step), {k: float(v) for k, v in metrics.items()}))

    def log_params(self, params):
        self.params = {**getattr(self, "params", {}), **{k: str(v) for k, v in params.items()}}

    def log_figure(self, figure, name):
        import matplotlib.pyplot as plt

        self.figures.append(name)
        plt.close(figure)

    def log_artifact(self, path, artifact_path=None):
        self.artifacts.append(str(path))

    def log_model(self, module, recipe=None, extras=None, name="encoder"):
        self.models.append(name)

    def series(self, name):
        return [(s, m[name]) for s, m in self.metrics if name in m]


@pytest.fixture
def tracker():
    return RecordingTracker()


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def cheap_render(monkeypatch):
    """Replace OpenGL rendering by a deterministic picture of the physics state (positions
    and velocities written into pixels): the environment logic stays real, frames cost ~0."""

    def render(self):
        state = np.concatenate([self.physics.data.qpos, self.physics.data.qvel, [self.physics.data.time]])
        img = np.zeros((self.image_size, self.image_size, 3), dtype=np.uint8)
        flat = img.reshape(-1)
        code = np.frombuffer(state.astype(np.float32).tobytes(), dtype=np.uint8)
        flat[: min(len(code), flat.size)] = code[: flat.size]
        img[-1, :, 0] = np.arange(self.image_size) % 256  # a gradient so crops are distinguishable
        return img

    monkeypatch.setattr(envs.DMCPixelEnv, "render", render)


# small networks and images: a full update takes milliseconds; no periodic checkpoints
TINY = {
    "domain": "rl",
    "seed": 0,
    "device": "cpu",
    "precision": "fp32",
    "data": {"task": "cartpole-swingup", "action_repeat": 8, "image_size": 24, "crop_size": 20},
    "encoder": {"feature_dim": 8, "num_layers": 2, "num_filters": 4},
    "agent": {"init_env_steps": 160, "hidden_dim": 16, "replay_capacity": 10_000},
    "evaluation": {"every_env_steps": 100_000, "episodes": 1, "random_baseline": True},
    "optimizer": {"name": "adam", "lr": 1e-3},
    "budget": {"steps": 400, "batch_size": 8, "log_every": 80, "checkpoint_every": 0},
    "tracking": {"log_model": False},
}


def tiny_recipe(*sets: str):
    """A validated rl recipe (:data:`TINY`) under ``--set`` overrides (``"budget.steps=2000"``)."""
    from domains.rl import RLDomain
    from toolkit.runs import load_recipe

    return load_recipe("tiny rl recipe", list(sets), lambda _: RLDomain, data=copy.deepcopy(TINY))
