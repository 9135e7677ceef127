"""The losses of one SAC + CURL update against the textbook formulas, term by term.

The reference values are computed here from the agent's networks with the formulas written
out (torch.distributions for the policy density, explicit TD target, explicit cross-entropy),
on the network states each term must see: the critic's TD target with the *target* critic
and the pre-update actor; the actor's loss with the critic *after* its step; the contrastive
term with the online encoder after the critic step and the key encoder after the EMA step.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from domains.rl.agent import CurlSacAgent
from domains.rl.config import AgentConfig, EncoderConfig
from toolkit.objective import build
from toolkit.recipe import ObjectiveSection as Objective

ENC = EncoderConfig(feature_dim=8, num_layers=2, num_filters=4)
OBS, ACTIONS, N = (9, 20, 20), 2, 6


def make_agent(with_objective: bool, **agent_kw) -> CurlSacAgent:
    obj = build(Objective.model_validate({"loss": {"name": "info_nce"}})) if with_objective else None
    torch.manual_seed(0)
    cfg = AgentConfig(hidden_dim=16, init_temperature=0.3, **agent_kw)
    return CurlSacAgent(OBS, ACTIONS, encoder=ENC, agent=cfg, objective=obj, lr=1e-3)


def make_batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    img = lambda: torch.randint(0, 256, (N, *OBS), generator=g, dtype=torch.uint8)  # noqa: E731
    not_done = torch.ones(N, 1)
    not_done[1] = not_done[4] = 0.0  # two terminal transitions: no bootstrap there
    return {
        "obs": img(),
        "pos": img(),
        "next_obs": img(),
        "action": torch.rand(N, ACTIONS, generator=g) * 2 - 1,
        "reward": torch.rand(N, 1, generator=g) * 3 - 1,
        "not_done": not_done,
    }


def policy(agent: CurlSacAgent, conv_features: torch.Tensor, noise: torch.Tensor):
    """Squashed Gaussian sample and its log-density, written out with torch.distributions."""
    raw_mu, raw_log_std = agent.actor.trunk(agent.actor.project(conv_features)).chunk(2, dim=-1)
    lo, hi = agent.cfg.actor_log_std_range
    log_std = lo + 0.5 * (hi - lo) * (torch.tanh(raw_log_std) + 1)
    u = raw_mu + noise * log_std.exp()
    log_pi = torch.distributions.Normal(raw_mu, log_std.exp()).log_prob(u).sum(-1, keepdim=True)
    log_pi = log_pi - torch.log(F.relu(1 - torch.tanh(u) ** 2) + 1e-6).sum(-1, keepdim=True)
    return torch.tanh(u), log_pi


def test_critic_actor_and_contrastive_losses_match_the_formulas():
    gamma = 0.9
    full, plain = make_agent(True, discount=gamma), make_agent(False, discount=gamma)
    for agent in (full, plain):  # targets that differ from the online networks, as after training
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in agent.critic_target.parameters():
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    before = copy.deepcopy(full)  # the networks as they are when the update starts
    batch = make_batch()
    alpha = before.log_alpha.exp().item()
    # the update draws the next action's noise first, then the actor step's
    torch.manual_seed(11)
    noise_next, noise_actor = torch.randn(N, ACTIONS), torch.randn(N, ACTIONS)
    torch.manual_seed(11)
    out = full.update(batch)
    torch.manual_seed(11)
    plain.update(batch)  # no contrastive term: its critic and targets are the full agent's mid-update

    with torch.no_grad():
        # critic: y = r + gamma * not_done * (min_i Q'_i(o', a') - alpha log pi(a'|o')), a' ~ pi(.|o')
        next_action, next_log_pi = policy(before, before.critic.encoder.conv(batch["next_obs"]), noise_next)
        zt = before.critic_target.encoder(batch["next_obs"])
        xt = torch.cat([zt, next_action], -1)
        soft_v = torch.min(before.critic_target.q1(xt), before.critic_target.q2(xt)) - alpha * next_log_pi
        y = batch["reward"] + batch["not_done"] * gamma * soft_v
        assert torch.equal(y[[1, 4]], batch["reward"][[1, 4]])  # terminal rows: the reward alone
        x = torch.cat([before.critic.encoder(batch["obs"]), batch["action"]], -1)
        critic_loss = ((before.critic.q1(x) - y) ** 2).mean() + ((before.critic.q2(x) - y) ** 2).mean()
        assert out["critic_loss"].item() == pytest.approx(critic_loss.item(), rel=1e-5, abs=1e-6)

        # actor: mean(alpha log pi(a|o) - min_i Q_i(o, a)), Q after the critic step, actor before
        h = plain.critic.encoder.conv(batch["obs"])
        pi, log_pi = policy(before, h, noise_actor)
        xa = torch.cat([plain.critic.encoder.project(h), pi], -1)
        actor_loss = (alpha * log_pi - torch.min(plain.critic.q1(xa), plain.critic.q2(xa))).mean()
        assert out["actor_loss"].item() == pytest.approx(actor_loss.item(), rel=1e-5, abs=1e-6)
        alpha_loss = (alpha * (-log_pi - before.target_entropy)).mean()
        assert out["alpha_loss"].item() == pytest.approx(alpha_loss.item(), rel=1e-5, abs=1e-6)
        assert out["entropy"].item() == pytest.approx(-log_pi.mean().item(), rel=1e-5, abs=1e-6)

        # contrastive: cross-entropy of z_a W z_pos^T with the diagonal as labels; z_a from the
        # online encoder after the critic step, z_pos from the key encoder after its EMA step,
        # of the *positive* crop
        z_a = plain.critic.encoder(batch["obs"])
        key_encoder = copy.deepcopy(before.critic_target.encoder)  # theta' <- 0.05 theta + 0.95 theta'
        for k, online in zip(key_encoder.parameters(), plain.critic.encoder.parameters()):
            k.copy_(0.05 * online + 0.95 * k)
        z_pos = key_encoder(batch["pos"])
        logits = z_a @ before.curl.W @ z_pos.t()
        contrastive = F.cross_entropy(logits, torch.arange(N))
        assert out["contrastive_loss"].item() == pytest.approx(contrastive.item(), rel=1e-5, abs=1e-6)
        # the key encoder is not the online one, and pos is not obs: the value depends on both
        wrong = F.cross_entropy(z_a @ before.curl.W @ plain.critic.encoder(batch["pos"]).t(), torch.arange(N))
        assert abs(wrong.item() - contrastive.item()) > 1e-6


def test_temperature_step_follows_its_own_optimizer():
    agent = make_agent(False, alpha_lr=0.05, alpha_betas=(0.5, 0.999))
    log_alpha = agent.log_alpha.item()
    out = agent.update(make_batch())
    # Adam's first step moves a parameter by lr * sign(gradient) (to within eps); the
    # gradient of alpha * (-log pi - H) w.r.t. log alpha is alpha * mean(-log pi - H)
    grad_sign = 1.0 if out["alpha_loss"].item() > 0 else -1.0
    assert agent.log_alpha.item() == pytest.approx(log_alpha - 0.05 * grad_sign, abs=1e-6)
