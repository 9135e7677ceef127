"""The recipe sections the RL domain owns: ``data``, ``encoder``, ``evaluation`` and ``agent``.

Every count in these sections is in **environment steps** (physics control steps, what the
papers' "100k steps" mean) unless its name says ``agent``: one agent step is one action, held
for ``action_repeat`` environment steps. Defaults are CURL's Table 3 (Laskin et al., 2020).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from domains.base import Section

__all__ = ["ACTION_REPEAT", "DataConfig", "EncoderConfig", "EvaluationConfig", "AgentConfig"]

# CURL Table 3 / Sec. 6: the action repeat of each DMControl task of the benchmark.
ACTION_REPEAT: dict[str, int] = {
    "cartpole-swingup": 8,
    "finger-spin": 2,
    "walker-walk": 2,
    "cheetah-run": 4,
    "reacher-easy": 4,
    "ball_in_cup-catch": 4,
}


class DataConfig(Section):
    """The environment and its observations.

    task:          ``domain-task`` of the DeepMind Control suite (``cartpole-swingup``).
    action_repeat: environment steps per agent step; ``None`` takes CURL's value for the task.
    frame_stack:   frames stacked along channels (3 in CURL: observations are ``[3k, H, W]``).
    image_size:    rendered square size (100 in CURL).
    crop_size:     random crop for training, centre crop for acting and evaluation (84).
    camera_id:     the rendering camera (0 for the six tasks, as CURL's dmc2gym).
    renderer:      headless OpenGL: ``auto`` (EGL, else OSMesa), ``egl`` or ``osmesa``;
                   ``$MUJOCO_GL`` wins when set.
    shadow_size:   side of the light's shadow map (MuJoCo's ``visual/quality/shadowsize``);
                   ``None`` keeps the task's (2048 in DMControl), 0 renders no shadows.
                   Drawing the 2048x2048 map is most of a small frame's cost on a software
                   renderer: 512 renders cartpole's 64x64 frames ~3x faster, and a frame
                   differs from the default's by 0.004 of 255 per pixel on average (a few
                   shadow-edge pixels).
    """

    task: str = "cartpole-swingup"
    action_repeat: int | None = Field(None, ge=1)
    frame_stack: int = Field(3, ge=1)
    image_size: int = Field(100, ge=16)
    crop_size: int = Field(84, ge=16)
    camera_id: int = Field(0, ge=0)
    renderer: Literal["auto", "egl", "osmesa"] = "auto"
    shadow_size: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _check(self) -> DataConfig:
        if "-" not in self.task:
            raise ValueError(f"task must look like 'domain-task' (e.g. cartpole-swingup), got {self.task!r}")
        if self.crop_size > self.image_size:
            raise ValueError(f"crop_size ({self.crop_size}) must not exceed image_size ({self.image_size})")
        return self

    @property
    def repeat(self) -> int:
        """The action repeat in force (the recipe's, else CURL's for the task, else 4)."""
        if self.action_repeat is not None:
            return self.action_repeat
        return ACTION_REPEAT.get(self.task, 4)


class EncoderConfig(Section):
    """CURL's pixel encoder: ``num_layers`` 3x3 convolutions of ``num_filters`` channels (the
    first with stride 2), a linear layer to ``feature_dim`` and a LayerNorm."""

    feature_dim: int = Field(50, ge=1)
    num_layers: int = Field(4, ge=1)
    num_filters: int = Field(32, ge=1)


class EvaluationConfig(Section):
    """Evaluation of the deterministic policy (tanh of the mean action, centre crop).

    every_env_steps:  environment steps between evaluations (one more at the end).
    episodes:         episodes of the final evaluation (the run's ``return_mean`` and
                      ``return_std``: mean and std of their returns).
    periodic_episodes: episodes of the evaluations during training (at 0 and every
                      ``every_env_steps``); ``None``: ``episodes``. Fewer make the curves
                      cheaper (an episode renders 126 frames). Episode ``i`` has the same
                      seed in every evaluation, so a periodic evaluation plays the first
                      ``periodic_episodes`` episodes of the final one.
    random_baseline:  also evaluate a uniform random policy on the final evaluation's
                      ``episodes`` seeds (logged once as ``random_return_mean`` /
                      ``random_return_std``).
    save_frames:      save the first episode of each evaluation as a GIF and a PNG strip.

    Every evaluation is logged at its environment step with ``train/wall_seconds``, the
    training wall time so far (evaluations excluded; a resumed run continues the clock), and
    the run logs a ``time_to_accuracy`` figure: return against that time.
    """

    every_env_steps: int = Field(10000, ge=1)
    episodes: int = Field(10, ge=1)
    periodic_episodes: int | None = Field(None, ge=1)
    random_baseline: bool = True
    save_frames: bool = False


class AgentConfig(Section):
    """SAC + CURL hyper-parameters (CURL Table 3 and its reference code's defaults).

    The learning rate and Adam betas of the actor, critic, encoder and bilinear W come from
    the recipe's ``optimizer`` section (``lr: 1e-3``; ``2e-4`` for cheetah); the batch size
    from ``budget.batch_size`` (512).

    init_env_steps:          environment steps of uniformly random actions before updates
                             start; ``None``: CURL's 1000 agent steps (8000 on cartpole).
    replay_capacity:         transitions kept (agent steps).
    hidden_dim:              width of the actor and critic MLPs.
    discount:                gamma.
    init_temperature:        initial entropy temperature alpha.
    alpha_lr, alpha_betas:   Adam for log alpha.
    actor_log_std_range:     bounds of the actor's log standard deviation.
    critic_tau, encoder_tau: EMA rates of the target Q heads and the key (target) encoder.
    actor_update_every:      updates between actor / alpha steps.
    target_update_every:     updates between target-network EMA steps.
    updates_per_step:        gradient updates per agent step once training has started.
    contrastive_weight:      weight of the contrastive term in its own update.
    code_double_encoder_step: CURL's reference code steps the encoder twice per contrastive
                             update (its encoder and CURL optimizers both hold it); ``false``
                             (default) steps every parameter once, as the paper describes.
    """

    init_env_steps: int | None = Field(None, ge=0)
    replay_capacity: int = Field(100000, ge=1)
    hidden_dim: int = Field(1024, ge=1)
    discount: float = Field(0.99, ge=0, le=1)
    init_temperature: float = Field(0.1, gt=0)
    alpha_lr: float = Field(1e-4, gt=0)
    alpha_betas: tuple[float, float] = (0.5, 0.999)
    actor_log_std_range: tuple[float, float] = (-10.0, 2.0)
    critic_tau: float = Field(0.01, gt=0, le=1)
    encoder_tau: float = Field(0.05, gt=0, le=1)
    actor_update_every: int = Field(2, ge=1)
    target_update_every: int = Field(2, ge=1)
    updates_per_step: int = Field(1, ge=1)
    contrastive_weight: float = Field(1.0, ge=0)
    code_double_encoder_step: bool = False

    @model_validator(mode="after")
    def _check(self) -> AgentConfig:
        lo, hi = self.actor_log_std_range
        if not lo < hi:
            raise ValueError(f"actor_log_std_range must be (low, high) with low < high, got {self.actor_log_std_range}")
        return self
