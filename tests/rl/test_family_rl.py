"""The non-contrastive family as CURL's auxiliary: BYOL (a predictor on the query against the
momentum key encoder), Barlow Twins and VICReg (the online encoder on both crops) in place of
the bilinear InfoNCE, with everything else of the agent unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as nnf

from domains import installed
from domains.rl.agent import CurlSacAgent
from domains.rl.config import AgentConfig
from tests.rl.test_agent import ENC, OBS, make_batch, params
from toolkit.losses import functional as F
from toolkit.objective import build
from toolkit.recipe import ObjectiveSection
from toolkit.runs import load_recipe

ROOT = Path(__file__).resolve().parents[2]

SECTIONS = {
    "info_nce": {"loss": {"name": "info_nce", "temperature": 1.0}},
    "byol": {
        "loss": {"name": "byol"},
        "predictor": {"hidden": [16]},
        "target": {"momentum": 0.95, "schedule": "constant"},
    },
    "barlow_twins": {"loss": {"name": "barlow_twins"}},
    "vicreg": {"loss": {"name": "vicreg"}},
}


def agent_with(name, seed=0, **agent_kw):
    torch.manual_seed(seed)
    obj = build(ObjectiveSection.model_validate(SECTIONS[name]))
    return CurlSacAgent(OBS, 2, encoder=ENC, agent=AgentConfig(hidden_dim=16, **agent_kw), objective=obj, lr=1e-3)


@pytest.mark.parametrize("name", ["byol", "barlow_twins", "vicreg"])
def test_other_updates_are_unchanged_when_the_auxiliary_is_swapped_at_weight_zero(name):
    """With the auxiliary's weight at 0, the critic, actor, temperature and targets of an agent
    whose auxiliary is ``name`` follow CURL's exactly: same initial networks (the predictor is
    drawn from a forked random state) and the same updates."""
    curl, other = agent_with("info_nce", contrastive_weight=0.0), agent_with(name, contrastive_weight=0.0)
    for part in ("critic", "actor", "critic_target"):
        for (k, v), w in zip(getattr(curl, part).named_parameters(), getattr(other, part).parameters()):
            assert torch.equal(v, w), (part, k)
    for step in range(3):
        for agent in (curl, other):
            torch.manual_seed(50 + step)
            agent.update(make_batch(step))
    for part in ("critic", "actor", "critic_target"):
        for (k, v), w in zip(getattr(curl, part).named_parameters(), getattr(other, part).parameters()):
            assert torch.equal(v, w), (part, k)
    assert curl.log_alpha.item() == other.log_alpha.item()


@pytest.mark.parametrize("name", ["byol", "barlow_twins", "vicreg"])
def test_the_auxiliary_trains_the_encoder_and_its_own_parts_never_the_target(name):
    agent = agent_with(name)
    target_before = params(agent.critic_target)
    enc_before = params(agent.critic.encoder)
    w_before = agent.curl.W.detach().clone()
    torch.manual_seed(3)
    out = agent.update(make_batch(1))
    assert torch.isfinite(out["contrastive_loss"])
    assert all(p.grad is None for p in agent.critic_target.parameters())
    assert any(not torch.equal(v, enc_before[k]) for k, v in agent.critic.encoder.named_parameters())
    assert torch.equal(agent.curl.W, w_before)  # the bilinear W is CURL's only
    # the target moved by its EMA (step 3) alone: tau * online + (1 - tau) * target
    online = dict(agent.critic.named_parameters())
    for k, v in agent.critic_target.encoder.named_parameters():
        assert not torch.equal(v, target_before[f"encoder.{k}"]) or torch.equal(online[f"encoder.{k}"], v)
    if name == "byol":
        pred = agent.objective.predictor
        assert pred is not None and all(
            p in set(agent.contrastive_opt.param_groups[0]["params"]) for p in pred.parameters()
        )


def test_byol_auxiliary_is_the_papers_loss_on_the_two_crops():
    agent = agent_with("byol")
    batch = make_batch(2)
    obs, pos = agent.critic.encoder.prepare(batch["obs"]), agent.critic.encoder.prepare(batch["pos"])
    z_a = agent.critic.encoder(obs)
    cb = agent._two_branch_batch(z_a, pos, obs, step=0)
    with torch.no_grad():
        k_a, k_b = agent.critic_target.encoder(obs), agent.critic_target.encoder(pos)
    torch.testing.assert_close(cb.keys, torch.stack([k_a, k_b], 1))
    torch.testing.assert_close(cb.views[:, 1], agent.critic.encoder(pos))
    out = agent.objective(cb)
    p = agent.objective.predictor(cb.views.flatten(0, 1)).view_as(cb.views)

    def reg(a, b):
        return (2 - 2 * (nnf.normalize(a, dim=-1) * nnf.normalize(b, dim=-1)).sum(-1)).mean()

    torch.testing.assert_close(out.loss, reg(p[:, 0], k_b) + reg(p[:, 1], k_a))
    vic = agent_with("vicreg")
    cb2 = vic._two_branch_batch(vic.critic.encoder(obs), pos, obs, step=0)
    assert cb2.keys is None
    torch.testing.assert_close(vic.objective(cb2).loss, F.vicreg(cb2.views[:, 0], cb2.views[:, 1]))


def test_rl_target_must_be_the_key_encoders_ema():
    path = ROOT / "recipes/rl/family/cartpole_swingup_cpu_byol.yaml"
    load_recipe(path, [], installed.get)  # the shipped recipe: momentum 0.95 = 1 - encoder_tau
    with pytest.raises(Exception, match="encoder_tau"):
        load_recipe(path, ["objective.target.momentum=0.99"], installed.get)
    with pytest.raises(Exception, match="encoder_tau"):
        load_recipe(path, ["objective.target.schedule=cosine"], installed.get)
