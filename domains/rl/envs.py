"""DeepMind Control suite tasks rendered headless, behind gymnasium's ``Env`` API.

The dm_control -> gymnasium bridge is shimmy's ``DmControlCompatibilityV0`` (seeding through the
task's random state, ``terminated``/``truncated`` from the time step's discount, pixels from
``physics.render``); this module adds what CURL needs on top: pixels as observations, action
scaling to ``[-1, 1]``, action repeat and frame stacking.

``make_env("cartpole-swingup", action_repeat=8, ...)`` gives what CURL trains on: pixel
observations ``[3k, H, W]`` (uint8, channels first, the last k rendered frames), actions in
``[-1, 1]^d``, rewards summed over the repeated environment steps, and ``info["env_steps"]``,
the environment steps the call took (``action_repeat`` except at the end of an episode).

Two pitfalls of this stack, both handled here (see docs/data.md, section Reinforcement learning):

* The OpenGL backend is chosen by ``$MUJOCO_GL`` when ``dm_control`` is first imported, so
  :func:`select_renderer` must run before that import: EGL by default, OSMesa as fallback.
* torch (and torchvision, which may pull in triton) must be imported before the first
  environment starts rendering, or the process can crash later; this module imports them first.

Environments run in the training process (rendering is ~20-35 ms of CPU a frame, shadows most
of it). Rendering environments in worker processes need the ``spawn`` or ``forkserver`` start
method: with ``fork`` an EGL context inherited from the parent hangs.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np
import torch  # noqa: F401  - imported before dm_control on purpose (see the module docstring)

try:  # torchvision may import triton; do it before any EGL context exists
    import torchvision  # noqa: F401
except ImportError:  # pragma: no cover - torchvision is a dependency, but RL does not need it
    pass

__all__ = ["select_renderer", "task_problem", "DMCPixelEnv", "FrameStack", "make_env"]

_LIBRARIES = {"egl": ("EGL",), "osmesa": ("OSMesa",)}
_INSTALL_HINT = "install headless Mesa: apt-get install -y libegl1 libegl-mesa0 libgl1-mesa-dri libopengl0 libosmesa6"


def select_renderer(preference: str = "auto") -> str:
    """Set ``$MUJOCO_GL`` before dm_control is imported and return the backend in force.

    ``$MUJOCO_GL`` wins when already set. ``auto`` takes EGL when ``libEGL`` is present, else
    OSMesa. Raises ``ValueError`` for an unknown preference and ``RuntimeError`` when the
    backend's library is missing or dm_control was already imported with another backend.
    """
    if preference not in ("auto", "egl", "osmesa"):
        raise ValueError(f"renderer must be 'auto', 'egl' or 'osmesa', got {preference!r}")
    chosen = os.environ.get("MUJOCO_GL")
    if not chosen:
        options = ("egl", "osmesa") if preference == "auto" else (preference,)
        found = [b for b in options if any(ctypes.util.find_library(n) for n in _LIBRARIES[b])]
        if not found:
            raise RuntimeError(f"no headless OpenGL library for {'/'.join(options)}; {_INSTALL_HINT}")
        chosen = found[0]
        if "dm_control" in sys.modules:
            raise RuntimeError(
                "dm_control was imported before the renderer was chosen; call "
                "select_renderer() (or set MUJOCO_GL) before importing it"
            )
        os.environ["MUJOCO_GL"] = chosen
    return chosen


def task_problem(task: str, renderer: str = "auto") -> str | None:
    """Why ``task`` (``domain-task``) is not a task of dm_control's suite (its own ``ALL_TASKS``),
    or None when it is. The renderer is chosen first, as dm_control's import requires
    (:func:`select_renderer`); a machine without one is the problem then."""
    try:
        select_renderer(renderer)
    except RuntimeError as exc:
        return f"cannot list the DMControl tasks: {exc}"
    from dm_control import suite  # after select_renderer, on purpose

    domain, _, name = task.partition("-")
    if (domain, name) in suite.ALL_TASKS:
        return None
    by_domain: dict[str, list[str]] = {}
    for d, t in suite.ALL_TASKS:
        by_domain.setdefault(d, []).append(t)
    if domain in by_domain:
        return (
            f"unknown DMControl task {task!r}: domain {domain!r} has the tasks "
            f"{', '.join(by_domain[domain])}; expected {domain}-TASK with one of them"
        )
    return (
        f"unknown DMControl task {task!r}: no domain {domain!r} in the suite; expected DOMAIN-TASK "
        f"with DOMAIN one of {', '.join(sorted(by_domain))}"
    )


class DMCPixelEnv(gym.Env):
    """One dm_control task with rendered pixels and action repeat.

    Observations are single frames ``[3, H, W]`` uint8; wrap with :class:`FrameStack` for
    CURL's stacked observations. ``reset(seed=s)`` reseeds the task's random state, so an
    episode is a function of ``s`` (evaluation re-uses fixed episode seeds).
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        task: str,
        *,
        action_repeat: int = 1,
        image_size: int = 100,
        camera_id: int = 0,
        seed: int = 0,
        renderer: str = "auto",
        shadow_size: int | None = None,
    ) -> None:
        if action_repeat < 1:
            raise ValueError(f"action_repeat must be an integer >= 1, got {action_repeat!r}")
        domain, _, task_name = task.partition("-")
        select_renderer(renderer)
        from dm_control import suite  # after select_renderer, on purpose

        if (domain, task_name) not in suite.ALL_TASKS:
            raise ValueError(task_problem(task, renderer))
        self.task = task
        self.action_repeat = int(action_repeat)
        self.image_size = int(image_size)
        self.camera_id = int(camera_id)
        from shimmy.dm_control_compatibility import DmControlCompatibilityV0  # imports dm_control

        self._env = suite.load(domain, task_name, task_kwargs={"random": seed})
        if shadow_size is not None:  # read when the rendering context is made, at the first render
            if shadow_size < 0:
                raise ValueError(f"shadow_size must be an integer >= 0 or None, got {shadow_size!r}")
            self._env.physics.model.vis.quality.shadowsize = int(shadow_size)
        self._gym = DmControlCompatibilityV0(
            self._env,
            render_mode="rgb_array",
            render_kwargs={"height": self.image_size, "width": self.image_size, "camera_id": self.camera_id},
        )
        spec = self._env.action_spec()
        self._low, self._high = spec.minimum.astype(np.float64), spec.maximum.astype(np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=spec.shape, dtype=np.float32)
        self.observation_space = gym.spaces.Box(0, 255, shape=(3, image_size, image_size), dtype=np.uint8)

    @property
    def physics(self) -> Any:
        return self._env.physics

    def task_random_state(self) -> tuple:
        """The task's random state (it draws the initial state of every episode)."""
        return self._gym.np_random.get_state()

    def set_task_random_state(self, state: tuple) -> None:
        self._gym.np_random.set_state(state)

    def render(self) -> np.ndarray:
        """The current frame, ``[H, W, 3]`` uint8."""
        return self._gym.render()

    def _observe(self) -> np.ndarray:
        return self.render().transpose(2, 0, 1)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._gym.reset(seed=seed)  # a seed gives the task a fresh RandomState(seed)
        return self._observe(), {"env_steps": 0}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        action = np.asarray(action, dtype=np.float64)
        if action.shape != self.action_space.shape or not np.all(np.isfinite(action)):
            raise ValueError(f"action must be finite with shape {self.action_space.shape}, got {action!r}")
        scaled = self._low + (np.clip(action, -1.0, 1.0) + 1.0) * 0.5 * (self._high - self._low)
        reward, steps, terminated, truncated = 0.0, 0, False, False
        for _ in range(self.action_repeat):
            _, r, terminated, truncated, _ = self._gym.step(scaled)
            reward += float(r)
            steps += 1
            if terminated or truncated:
                break
        return self._observe(), reward, terminated, truncated, {"env_steps": steps}

    def close(self) -> None:
        self._gym.close()


class FrameStack(gym.Wrapper):
    """Stack the last ``k`` frames along channels: ``[3k, H, W]``; on reset the first frame
    fills all ``k`` slots (CURL's ``FrameStack``). ``info["frame"]`` is the newest frame."""

    def __init__(self, env: gym.Env, k: int) -> None:
        if k < 1:
            raise ValueError(f"frame_stack must be an integer >= 1, got {k!r}")
        super().__init__(env)
        self.k = k
        self._frames: deque[np.ndarray] = deque(maxlen=k)
        c, h, w = env.observation_space.shape
        self.observation_space = gym.spaces.Box(0, 255, shape=(c * k, h, w), dtype=np.uint8)

    def _stacked(self) -> np.ndarray:
        return np.concatenate(list(self._frames), axis=0)

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict]:
        frame, info = self.env.reset(**kwargs)
        for _ in range(self.k):
            self._frames.append(frame)
        return self._stacked(), {**info, "frame": frame}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        frame, reward, terminated, truncated, info = self.env.step(action)
        self._frames.append(frame)
        return self._stacked(), reward, terminated, truncated, {**info, "frame": frame}


def make_env(
    task: str,
    *,
    action_repeat: int,
    frame_stack: int = 3,
    image_size: int = 100,
    camera_id: int = 0,
    seed: int = 0,
    renderer: str = "auto",
    shadow_size: int | None = None,
) -> FrameStack:
    """CURL's environment: rendered ``image_size`` pixels, action repeat, ``frame_stack`` frames
    (``shadow_size``: see :class:`~domains.rl.config.DataConfig`)."""
    env = DMCPixelEnv(
        task,
        action_repeat=action_repeat,
        image_size=image_size,
        camera_id=camera_id,
        seed=seed,
        renderer=renderer,
        shadow_size=shadow_size,
    )
    return FrameStack(env, frame_stack)
