"""The RL domain: CURL agents (SAC from pixels) on the DeepMind Control suite.

A recipe names the task and observations (``data``), the pixel encoder (``encoder``), the
evaluation (``evaluation``), SAC's hyper-parameters (``agent``) and, as every recipe does,
the contrastive ``objective`` (CURL's InfoNCE, DCL, HCL, + distance polarization...), the
``optimizer`` (Adam; its ``lr`` and ``betas`` serve the actor, critic, encoder and W) and
the ``budget`` in environment steps. Without an ``objective`` section the agent is plain
pixel SAC (no contrastive term). The domain owns its loop (:mod:`domains.rl.workspace`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from domains.base import Domain
from domains.rl.config import AgentConfig, DataConfig, EncoderConfig, EvaluationConfig
from domains.rl.workspace import Settings, Workspace
from toolkit.objective import build as build_objective
from toolkit.training import checkpoint as ckpt

__all__ = ["RLDomain", "settings_from_recipe"]


def settings_from_recipe(recipe: Any) -> Settings:
    """The loop's settings; a ``ValueError`` names the recipe key that does not fit RL."""
    budget, common = recipe.budget, recipe.common
    if budget is None or budget.steps is None:
        raise ValueError("budget.steps is required for rl recipes: the number of environment steps")
    if budget.epochs is not None:
        raise ValueError(f"budget.epochs has no meaning in rl (got {budget.epochs!r}); give budget.steps in environment steps")
    if budget.eval_every is not None:
        raise ValueError(f"budget.eval_every is not used by rl (got {budget.eval_every!r}); "
                         "set evaluation.every_env_steps")
    if recipe.optimizer.name != "adam":
        raise ValueError(f"optimizer.name must be 'adam' for rl (CURL trains with Adam), got {recipe.optimizer.name!r}")
    if "schedule" in common.model_fields_set and recipe.schedule.name != "constant":
        raise ValueError(f"schedule.name must be 'constant' for rl, got {recipe.schedule.name!r}")
    obj = recipe.objective
    if obj is not None and obj.negatives.source != "in_batch":
        raise ValueError(f"objective.negatives.source must be 'in_batch' for rl (CURL's negatives are "
                         f"the other keys of the batch), got {obj.negatives.source!r}")
    return Settings(data=recipe.data, encoder=recipe.encoder, evaluation=recipe.evaluation,
                    agent=recipe.agent, total_env_steps=budget.steps, batch_size=budget.batch_size,
                    lr=recipe.optimizer.lr, betas=tuple(recipe.optimizer.betas), seed=recipe.seed,
                    log_every=budget.log_every, checkpoint_every=budget.checkpoint_every,
                    name=recipe.run_name)


class RLDomain(Domain):
    """CURL: SAC from pixels on DMControl, any core loss as the contrastive term."""

    name = "rl"
    description = "CURL agents (SAC from pixels) on the DeepMind Control suite; any core loss as the contrastive term"
    DataConfig = DataConfig
    EncoderConfig = EncoderConfig
    EvaluationConfig = EvaluationConfig
    ExtraSections = {"agent": AgentConfig}
    owns_loop = True

    def run(self, recipe: Any, tracker: Any, *, resume_from: str | None = None,
            device: torch.device | None = None) -> dict[str, float]:
        """Train and evaluate; returns the final metrics (``return_mean``, ``return_std``,
        ``random_return_mean``, ...). Snapshots go to ``checkpoints/<run id>/last.pt``
        (``resume_from`` continues from one)."""
        settings = settings_from_recipe(recipe)
        objective = build_objective(recipe.objective) if recipe.objective is not None else None
        if resume_from is not None:
            snapshot = Path(resume_from)
        else:
            snapshot = ckpt.checkpoint_dir(getattr(tracker, "run_id", None) or "local") / "last.pt"
        device = torch.device(device) if device is not None else torch.device("cpu")
        if objective is not None:
            objective = objective.to(device)
        workspace = Workspace(settings, tracker, objective, snapshot, device)
        metrics = workspace.train(resume_from)
        if recipe.tracking.log_model:
            tracker.log_model(workspace.agent.critic.encoder, "encoder")
        return metrics
