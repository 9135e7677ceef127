"""The RL domain: CURL agents (SAC from pixels) on the DeepMind Control suite.

A recipe names the task and observations (``data``), the pixel encoder (``encoder``), the
evaluation (``evaluation``), SAC's hyper-parameters (``agent``) and, as every recipe does,
the contrastive ``objective`` (CURL's InfoNCE, DCL, HCL, + distance polarization...), the
``optimizer`` (Adam; its ``lr`` and ``betas`` serve the actor, critic, encoder and W) and
the ``budget`` in environment steps. Without an ``objective`` section the agent is plain
pixel SAC (no contrastive term). The domain owns its loop (:mod:`domains.rl.workspace`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from domains.base import Domain
from domains.rl.config import AgentConfig, DataConfig, EncoderConfig, EvaluationConfig
from domains.rl.envs import task_problem
from domains.rl.workspace import Workspace
from toolkit import recipe as rc
from toolkit.training.trainer import RunOptions

__all__ = ["RLDomain"]


def rl_problems(raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What an rl recipe must say beyond the schema (all problems, each at its YAML path)."""
    problems = []
    steps, epochs = rc.get_path(raw, "budget.steps"), rc.get_path(raw, "budget.epochs")
    if raw.get("budget") is None or steps is None:
        problems.append(("budget.steps", "required for rl recipes: the number of environment steps"))
    if epochs is not None:
        problems.append(
            ("budget.epochs", f"has no meaning in rl (got {epochs!r}); give budget.steps in environment steps")
        )
    eval_every = rc.get_path(raw, "budget.eval_every")
    if eval_every is not None:
        problems.append(
            ("budget.eval_every", f"is not used by rl (got {eval_every!r}); set evaluation.every_env_steps")
        )
    opt = rc.get_path(raw, "optimizer.name", "sgd")
    if opt != "adam":
        problems.append(("optimizer.name", f"must be 'adam' for rl (CURL trains with Adam), got {opt!r}"))
    sched = rc.get_path(raw, "schedule.name", "cosine") if raw.get("schedule") is not None else "constant"
    if sched != "constant":
        problems.append(("schedule.name", f"must be 'constant' for rl, got {sched!r}"))
    precision = rc.get_path(raw, "precision", "auto")
    if precision not in ("auto", "fp32", "bf16"):
        problems.append(
            ("precision", f"must be 'auto', 'fp32' or 'bf16' for rl (fp16 would need loss scaling), got {precision!r}")
        )
    target = rc.get_path(raw, "objective.target", None)
    if isinstance(target, dict):
        tau = rc.get_path(raw, "agent.encoder_tau", 0.05)
        momentum, schedule = target.get("momentum", 0.996), target.get("schedule", "cosine")
        if schedule != "constant" or not isinstance(momentum, (int, float)) or abs(momentum - (1 - tau)) > 1e-12:
            problems.append(
                (
                    "objective.target",
                    "in rl the target is CURL's key encoder, an EMA with agent.encoder_tau: expected "
                    f"{{momentum: {1 - tau:g}, schedule: constant}} (1 - encoder_tau), got {target!r}",
                )
            )
    source = rc.get_path(raw, "objective.negatives.source", "in_batch")
    if raw.get("objective") is not None and source != "in_batch":
        problems.append(
            (
                "objective.negatives.source",
                f"must be 'in_batch' for rl (CURL's negatives are the other keys of the batch), got {source!r}",
            )
        )
    return problems


def task_problems(raw: Mapping[str, Any], sections: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``data.task`` against dm_control's suite (read as written when the data section has other
    problems, so that they are all listed together)."""
    data = sections.get("data")
    task = data.task if data is not None else rc.get_path(raw, "data.task", "cartpole-swingup")
    renderer = data.renderer if data is not None else rc.get_path(raw, "data.renderer", "auto")
    if not isinstance(task, str) or "-" not in task or renderer not in ("auto", "egl", "osmesa"):
        return []  # the schema reports these
    problem = task_problem(task, renderer)
    if problem is None:
        return []
    return [("data.renderer" if problem.startswith("cannot list") else "data.task", problem)]


class RLDomain(Domain):
    """CURL: SAC from pixels on DMControl, any core loss as the contrastive term."""

    name = "rl"
    description = "CURL agents (SAC from pixels) on the DeepMind Control suite; any core loss as the contrastive term"
    DataConfig = DataConfig
    precisions = ("fp32", "bf16")
    EncoderConfig = EncoderConfig
    EvaluationConfig = EvaluationConfig
    ExtraSections = {"agent": AgentConfig}
    recipe_defaults = {"schedule": {"name": "constant"}}  # CURL keeps its learning rates
    single_process_only = (
        "rl runs in one process: more would train independent copies of the agent; "
        "run several seeds with ctk sweep instead"
    )

    @classmethod
    def result_metrics(cls, recipe: Any) -> dict[str, str]:
        """The final evaluation's mean episode return (and its spread), beside a random policy's."""
        out = {"return_mean": "max", "return_std": ""}
        if recipe.evaluation.random_baseline:
            out.update(random_return_mean="", random_return_std="")
        return out

    @classmethod
    def record_metrics(cls, recipe: Any) -> dict[str, tuple[str, ...]]:
        """The mean evaluation return, beside a random policy's."""
        return {"return_mean": ("random_return_mean",) if recipe.evaluation.random_baseline else ()}

    @classmethod
    def check(cls, raw: Mapping[str, Any], sections: Mapping[str, Any]) -> list[tuple[str, str]]:
        """rl needs a budget in environment steps, Adam, a constant schedule and in-batch
        negatives; the objective is optional (without it the agent is plain pixel SAC). The task
        must be one of dm_control's suite."""
        return rl_problems(raw) + task_problems(raw, sections)

    def encoder_extras(self, encoder: torch.nn.Module) -> dict[str, Any]:
        """Whether the projection's columns are in channels-last order (see PixelEncoder)."""
        return {"channels_last": encoder.memory_format is torch.channels_last}

    def rebuild_encoder(self, extras: Mapping[str, Any]) -> torch.nn.Module:
        """The critic's pixel encoder: stacked frames cropped to ``data.crop_size``."""
        from domains.rl.networks import PixelEncoder

        d, e = self.recipe.data, self.recipe.encoder
        return PixelEncoder(
            3 * d.frame_stack,
            d.crop_size,
            e.feature_dim,
            e.num_layers,
            e.num_filters,
            channels_last=bool(extras.get("channels_last", True)),
        )

    def trainer(self, recipe: rc.Recipe, tracker: Any, options: RunOptions | None = None) -> Workspace:
        """The RL workspace, reading the validated recipe (checkpoints in ``options.checkpoint_dir``)."""
        options = options or RunOptions()
        if options.distributed is not None:
            raise ValueError(self.single_process_only)
        if options.device is None:
            options.device = torch.device("cpu")
        return Workspace(recipe, tracker, options)
