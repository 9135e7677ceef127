"""Recipes validate, RL-specific recipe errors are reported, and a short real run completes."""

from __future__ import annotations

from pathlib import Path

import pytest

from domains import installed
from domains.rl import RLDomain
from toolkit import checkpoint as ckpt
from toolkit.recipe import RecipeError
from toolkit.runs import load_recipe
from toolkit.studies.reproduce import load_table
from toolkit.training.trainer import RunOptions

RECIPES = Path(__file__).resolve().parents[2] / "recipes" / "rl"


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.stem)
def test_recipes_validate(path):
    recipe = load_recipe(path, [], installed.get)
    data, budget = recipe.data, recipe.budget
    assert data.repeat == {"cartpole": 8, "finger": 2, "walker": 2}.get(data.task.split("-")[0], 4)
    if "cpu" not in path.stem and path.stem != "study":  # the paper-scale recipes
        assert budget.steps == 100_000 and budget.batch_size == 512 and data.crop_size == 84
        assert recipe.optimizer.lr == (2e-4 if "cheetah" in path.stem else 1e-3)
        assert recipe.paper.metrics["return_mean"] > 0


@pytest.mark.parametrize("path", sorted((RECIPES / "tables").glob("*.yaml")), ids=lambda p: p.stem)
def test_table_rows_validate(path):
    table = load_table(path)
    assert table.rows
    for row in table.rows:
        recipe = load_recipe(row.recipe, row.overrides, installed.get)
        assert recipe.domain == "rl"
        if "DCL" in row.label or "HCL" in row.label:
            assert recipe.objective.loss.name in ("dcl", "hcl")
        if "DP" in row.label:
            assert [r.name for r in recipe.objective.regularizers] == ["distance_polarization"]


@pytest.mark.parametrize(
    "override, message",
    [
        ("budget.epochs=3", "budget.epochs"),
        ("budget.eval_every=5", "evaluation.every_env_steps"),
        ("optimizer.name=sgd", "optimizer.name"),
        ("schedule.name=cosine", "schedule.name"),
        ("objective.negatives.source=queue", "objective.negatives.source"),
        ("precision=fp16", "precision"),
    ],
)
def test_rl_specific_recipe_errors(override, message):
    # reported when the recipe is loaded (ctk show rejects it), before anything is built
    with pytest.raises(RecipeError, match=message) as info:
        load_recipe(RECIPES / "cartpole_swingup_cpu.yaml", [override], installed.get)
    assert [p for p, _ in info.value.problems] == [override.split("=")[0]]


def test_three_rl_mistakes_give_three_messages():
    bad = ["budget.epochs=3", "optimizer.name=sgd", "objective.negatives.source=queue"]
    with pytest.raises(RecipeError) as info:
        load_recipe(RECIPES / "cartpole_swingup_cpu.yaml", bad, installed.get)
    assert sorted(p for p, _ in info.value.problems) == sorted(b.split("=")[0] for b in bad)


def test_rl_rules_run_once_when_the_recipe_loads(tracker, monkeypatch):
    """The workspace reads the validated recipe; nothing checks the rl rules again."""
    from domains.rl import domain as rl_domain

    from .conftest import tiny_recipe

    calls = []
    rules = rl_domain.rl_problems
    monkeypatch.setattr(rl_domain, "rl_problems", lambda raw: calls.append(1) or rules(raw))
    recipe = tiny_recipe("budget.steps=800", "budget.checkpoint_every=300")
    ws = RLDomain(recipe).trainer(recipe, tracker)
    assert len(calls) == 1
    assert (ws.total_env_steps, ws.checkpoint_every, ws.counters.next_checkpoint) == (800, 300, 300)
    assert ws.agent.critic.encoder.feature_dim == recipe.encoder.feature_dim == 8
    assert RLDomain(recipe).trainer(tiny_recipe("budget.checkpoint_every=null"), tracker).checkpoint_every == 10_000
    assert RLDomain(recipe).trainer(tiny_recipe(), tracker).checkpoint_every is None  # 0: none


def _fit(recipe, tracker, folder):
    trainer = RLDomain(recipe).trainer(recipe, tracker, RunOptions(checkpoint_dir=folder))
    trainer.fit()
    metrics = trainer.evaluate()
    trainer.save_checkpoint()
    return trainer, metrics


def test_short_real_run_completes_and_logs(tracker, tmp_path, monkeypatch):
    monkeypatch.setenv("CTK_CHECKPOINTS", str(tmp_path))
    overrides = [
        "data.image_size=32",
        "data.crop_size=28",
        "data.action_repeat=25",
        "encoder.num_layers=2",
        "encoder.num_filters=8",
        "agent.hidden_dim=32",
        "agent.init_env_steps=100",
        "budget.steps=300",
        "budget.batch_size=8",
        "budget.log_every=100",
        "budget.checkpoint_every=null",
        "evaluation.episodes=2",
        "evaluation.every_env_steps=100000",
        "evaluation.save_frames=true",
        "objective.regularizers=[{name: distance_polarization, weight: 0.1}]",
    ]
    recipe = load_recipe(RECIPES / "cartpole_swingup_cpu.yaml", overrides, installed.get)
    trainer, metrics = _fit(recipe, tracker, tmp_path / "run")
    # 300 environment steps at action repeat 25: 12 agent steps, updates after the first 100
    assert metrics["env_steps"] == 300 and metrics["agent_steps"] == 12
    assert {"return_mean", "return_std", "random_return_mean", "random_return_std"} <= set(metrics)
    assert 0 <= metrics["random_return_mean"] <= 1000 and 0 <= metrics["return_mean"] <= 1000
    # evaluations at 0 and at the end, logged by environment step with the agent step beside
    assert [s for s, _ in tracker.series("return_mean")] == [0, 300]
    assert dict(tracker.series("agent_steps"))[300] == 12
    logged = {k for _, m in tracker.metrics for k in m}
    assert {
        "train/critic_loss",
        "train/contrastive_loss",
        "train/curl_distance_polarization",
        "train/env_steps_per_s",
    } <= logged
    assert tracker.series("train/updates")[-1] == (300, 8.0)  # agent steps 4..11 update
    assert tracker.figures == ["return_curve", "time_to_accuracy"]
    assert any(a.endswith(".gif") for a in tracker.artifacts)
    saved = ckpt.load(ckpt.latest(tmp_path / "run"))
    assert saved["trainer"]["counters"]["env_steps"] == 300
    assert (tmp_path / "run" / saved["trainer"]["buffer"] / "frames.npy").is_file()
    assert trainer.encoder is trainer.agent.critic.encoder


def test_loop_counts_environment_and_agent_steps_separately(cheap_render, tracker):
    # action repeat 3: the first episode is 334 agent steps for 1000 environment steps (its
    # last agent step holds the action for 1 step); one more agent step ends the budget
    from domains.rl.workspace import Workspace

    from .conftest import tiny_recipe

    recipe = tiny_recipe(
        "data.action_repeat=3", "agent.init_env_steps=990", "budget.steps=1003", "budget.log_every=500"
    )
    ws = Workspace(recipe, tracker)
    ws.fit()
    metrics = ws.evaluate()
    assert (ws.counters.env_steps, ws.counters.agent_steps, ws.counters.episodes) == (1003, 335, 1)
    assert metrics["env_steps"] == 1003 and metrics["agent_steps"] == 335
    assert ws.buffer.num_transitions == 335
    # the episode's return and the evaluations are logged at environment steps
    assert [step for step, _ in tracker.series("train/episode_return")] == [1000]
    assert [step for step, _ in tracker.series("return_mean")] == [0, 1003]
    agent_steps = dict(tracker.series("agent_steps"))
    assert agent_steps[1003] == 335 and agent_steps[0] == 0
    # training logs at the first agent step reaching each multiple of log_every
    assert {step: agent_steps[step] for step in (501, 1000)} == {501: 167, 1000: 334}
    # updates start once 990 environment steps were taken: agent steps 330..334 update,
    # four of them before the log at 1000
    assert tracker.series("train/updates")[-1] == (1000, 4.0)
    assert ws.agent.num_updates == 5
