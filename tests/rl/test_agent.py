"""SAC + CURL: the contrastive batch, the policy density, and what one update changes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from domains.rl.agent import CurlSacAgent
from domains.rl.config import AgentConfig, EncoderConfig
from domains.rl.curl import BilinearCURL
from domains.rl.networks import _FUSED_CONV_RELU, Actor, conv_relu
from toolkit.objective import build
from toolkit.recipe import ObjectiveSection as Objective

ENC = EncoderConfig(feature_dim=8, num_layers=2, num_filters=4)
OBS = (9, 20, 20)


def objective(loss="info_nce", **kw):
    return build(Objective.model_validate({"loss": {"name": loss, **kw}}))


def make_agent(obj=None, seed=0, **agent_kw):
    torch.manual_seed(seed)
    cfg = AgentConfig(hidden_dim=16, **agent_kw)
    return CurlSacAgent(OBS, 2, encoder=ENC, agent=cfg, objective=obj, lr=1e-3)


def make_batch(seed=0, n=6):
    g = torch.Generator().manual_seed(seed)
    img = lambda: torch.randint(0, 256, (n, *OBS), generator=g, dtype=torch.uint8)  # noqa: E731
    return {
        "obs": img(),
        "pos": img(),
        "next_obs": img(),
        "action": torch.rand(n, 2, generator=g) * 2 - 1,
        "reward": torch.rand(n, 1, generator=g),
        "not_done": torch.ones(n, 1),
    }


def params(module):
    return {k: v.detach().clone() for k, v in module.named_parameters()}


def changed(before, module):
    return {k for k, v in module.named_parameters() if not torch.equal(before[k], v)}


# -- the contrastive batch -------------------------------------------------------------------


def _raw_scores(za, W, zp):
    """s_ij = z_a_i^T W z_pos_j by plain loops (CURL Sec. 4.5), as python floats."""
    n, d = za.shape
    return [
        [sum(za[i, a].item() * W[a, b].item() * zp[j, b].item() for a in range(d) for b in range(d)) for j in range(n)]
        for i in range(n)
    ]


def test_bilinear_logits_and_curl_infonce_match_loops():
    torch.manual_seed(0)
    curl = BilinearCURL(5).double()
    za, zp = torch.randn(4, 5, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
    batch = curl.batch(za, zp)
    raw = _raw_scores(za, curl.W.detach(), zp)
    for i in range(4):
        for j in range(4):
            assert batch.scores[i, j].item() == pytest.approx(raw[i][j], abs=1e-12)
    assert torch.equal(batch.positive_mask, torch.eye(4, dtype=torch.bool))
    assert torch.allclose(batch.views.norm(dim=-1), torch.ones(4, 2, dtype=torch.float64))
    # CURL's loss: cross-entropy of the logits with the diagonal as labels (temperature 1)
    ref = sum(-(raw[i][i] - math.log(sum(math.exp(v) for v in raw[i]))) for i in range(4))
    out = objective("info_nce")(batch)
    assert out.loss.item() == pytest.approx(ref / 4, rel=1e-10)


def _plain_debiased(raw, tau, tp, beta=None):
    """DCL (beta None) / HCL per Chuang et al. 2020 and Robinson et al. 2021 on the unshifted
    scores: Ng = max((-tp N pos + R) / (1 - tp), N e^{-1/tau}), mean of -log(pos / (pos + Ng))."""
    n = len(raw)
    total = 0.0
    for i in range(n):
        pos = math.exp(raw[i][i] / tau)
        negs = [math.exp(raw[i][j] / tau) for j in range(n) if j != i]
        if beta is None:
            r = sum(negs)
        else:
            imp = [math.exp(beta * raw[i][j] / tau) for j in range(n) if j != i]
            r = sum(w * e for w, e in zip(imp, negs)) / (sum(imp) / len(imp))
        ng = max((-tp * (n - 1) * pos + r) / (1 - tp), (n - 1) * math.exp(-1 / tau))
        total += -math.log(pos / (pos + ng))
    return total / n


@pytest.mark.parametrize("scale", [1.0, 6.0])
@pytest.mark.parametrize("loss", ["dcl", "hcl"])
def test_debiased_losses_on_curl_scores_match_the_plain_formula(loss, scale):
    """On the unshifted bilinear scores. scale 6 gives scores of a few hundred: the plain
    float64 formula still holds, the clamp decides some rows, and a row-max shift (which would
    move every score below 0 and trip the clamp everywhere) fails this test."""
    torch.manual_seed(1)
    curl = BilinearCURL(6).double()
    za = scale * torch.randn(5, 6, dtype=torch.float64)
    zp = scale * torch.randn(5, 6, dtype=torch.float64)
    batch = curl.batch(za, zp)
    tau, tp = 1.0, 0.1
    args = {"temperature": tau, "tau_plus": tp} | ({"beta": 1.0} if loss == "hcl" else {})
    ref = _plain_debiased(_raw_scores(za, curl.W.detach(), zp), tau, tp, 1.0 if loss == "hcl" else None)
    out = objective(loss, **args)(batch)
    assert out.loss.item() == pytest.approx(ref, rel=1e-9)
    # float32 with the same scores: finite and equal to the float64 formula (log-space forms)
    out32 = objective(loss, **args)(curl.float().batch(za.float(), zp.float()))
    assert math.isfinite(out32.loss.item()) and out32.loss.item() == pytest.approx(ref, rel=1e-4)


def test_actor_log_density_matches_torch_distributions():
    torch.manual_seed(2)
    actor = Actor(conv_dim=12, feature_dim=4, action_dim=3, hidden_dim=8)
    h = torch.randn(5, 12)
    torch.manual_seed(3)
    mu, pi, log_pi, log_std = actor(h)
    # rebuild the pre-tanh mean and sample from the same noise
    raw_mu, _ = actor.trunk(actor.project(h)).chunk(2, dim=-1)
    torch.manual_seed(3)
    noise = torch.randn_like(raw_mu)
    u = raw_mu + noise * log_std.exp()
    base = torch.distributions.Normal(raw_mu, log_std.exp())
    ref = base.log_prob(u).sum(-1, keepdim=True) - torch.log(1 - torch.tanh(u) ** 2 + 1e-6).sum(-1, keepdim=True)
    assert torch.allclose(pi, torch.tanh(u), atol=1e-6) and torch.allclose(mu, torch.tanh(raw_mu))
    assert torch.allclose(log_pi, ref, atol=1e-4)
    assert (log_std >= -10).all() and (log_std <= 2).all()


# -- one update ----------------------------------------------------------------------------


def test_one_update_changes_what_it_should_and_targets_follow_the_ema():
    full, plain = make_agent(objective()), make_agent(None)
    target_before = params(full.critic_target)
    before = {name: params(getattr(full, name)) for name in ("critic", "actor", "curl")}
    alpha_before = full.log_alpha.item()
    torch.manual_seed(10)
    full.update(make_batch())
    torch.manual_seed(10)
    plain.update(make_batch())
    # update 0 makes every step: critic, actor + alpha, target EMA, contrastive
    assert changed(before["critic"], full.critic) == set(before["critic"])
    assert changed(before["actor"], full.actor) == set(before["actor"])
    assert changed(before["curl"], full.curl) == {"W"}
    assert full.log_alpha.item() != alpha_before
    # the actor, alpha, Q heads and target networks do not see the contrastive step ...
    for a, b in [
        (full.actor, plain.actor),
        (full.critic.q1, plain.critic.q1),
        (full.critic.q2, plain.critic.q2),
        (full.critic_target, plain.critic_target),
    ]:
        for (k, v), w in zip(a.named_parameters(), b.parameters()):
            assert torch.equal(v, w), k
    assert full.log_alpha.item() == plain.log_alpha.item()
    # ... but the encoder does, and W only moves with a contrastive term
    assert changed(params(plain.critic.encoder), full.critic.encoder) == set(params(full.critic.encoder))
    assert torch.equal(plain.curl.W, before["curl"]["W"])
    # targets: theta' <- tau theta + (1 - tau) theta', with theta after the critic step
    # (= plain's online critic, which nothing else changed)
    online = dict(plain.critic.named_parameters())
    for k, v in plain.critic_target.named_parameters():
        tau = 0.05 if k.startswith("encoder.") else 0.01
        assert torch.allclose(v, tau * online[k] + (1 - tau) * target_before[k], atol=1e-7), k
    # the shared convolutions are not the actor's to train
    assert not any(k.startswith("convs") for k in dict(full.actor.named_parameters()))


def test_odd_updates_leave_actor_alpha_and_targets_alone():
    agent = make_agent(objective())
    agent.update(make_batch(0))
    actor, target, alpha = params(agent.actor), params(agent.critic_target), agent.log_alpha.item()
    critic = params(agent.critic)
    records = agent.update(make_batch(1))
    assert not changed(actor, agent.actor) and not changed(target, agent.critic_target)
    assert agent.log_alpha.item() == alpha
    assert changed(critic, agent.critic)
    assert {"critic_loss", "contrastive_loss", "alpha"} <= set(records) and "actor_loss" not in records
    assert agent.num_updates == 2


def test_shared_encoder_pass_computes_the_same_update_as_separate_passes():
    fused, separate = make_agent(objective("hcl", temperature=1.0)), make_agent(objective("hcl", temperature=1.0))
    separate.fused = False
    for step in range(3):
        for agent in (fused, separate):
            torch.manual_seed(100 + step)
            agent.update(make_batch(step))
    for (k, v), w in zip(fused.named_parameters(), separate.parameters()):
        assert torch.allclose(v, w, rtol=1e-5, atol=1e-6), k


def test_reference_code_double_encoder_step_moves_the_encoder_twice():
    single, double, none = (
        make_agent(objective()),
        make_agent(objective(), code_double_encoder_step=True),
        make_agent(None),
    )
    for agent in (single, double, none):
        torch.manual_seed(5)
        agent.update(make_batch())
    mid = params(none.critic.encoder)  # the encoder after the critic step
    for (k, a), b in zip(single.critic.encoder.named_parameters(), double.critic.encoder.parameters()):
        # Adam's first step is the same for two fresh optimizers on one gradient
        assert torch.allclose(b - mid[k], 2 * (a - mid[k]), atol=1e-6), k
    assert torch.equal(single.curl.W, double.curl.W)


def test_acting_uses_the_centre_crop_of_the_rendered_stack():
    agent = make_agent(objective())
    g = torch.Generator().manual_seed(7)
    full = torch.randint(0, 256, (9, 26, 26), generator=g, dtype=torch.uint8)  # rendered 26, crop 20
    action = agent.act(full.numpy(), sample=False)
    assert action.shape == (2,) and np.all(np.abs(action) <= 1)
    with torch.no_grad():
        mu, _, _, _ = agent.actor(agent.critic.encoder.conv(full[None, :, 3:23, 3:23]), sample=False)
        shifted, _, _, _ = agent.actor(agent.critic.encoder.conv(full[None, :, 0:20, 0:20]), sample=False)
    assert np.allclose(action, mu[0].numpy(), atol=1e-6)
    assert not np.allclose(action, shifted[0].numpy(), atol=1e-6)  # the crop position matters


def test_fused_conv_relu_matches_conv_then_relu():
    """The oneDNN conv+ReLU (and its backward) against relu(conv2d(...)) by autograd: stride
    1 and 2, channels-last and NCHW inputs, with and without an input gradient."""
    assert _FUSED_CONV_RELU, "this torch build has no oneDNN fused convolution"
    g = torch.Generator().manual_seed(0)
    for stride, fmt, x_grad in [
        (1, torch.channels_last, True),
        (2, torch.contiguous_format, False),
        (1, torch.contiguous_format, True),
        (2, torch.channels_last, False),
    ]:
        x = torch.randn(3, 4, 11, 11, generator=g).contiguous(memory_format=fmt)
        w = torch.randn(5, 4, 3, 3, generator=g).contiguous(memory_format=fmt)
        b = torch.randn(5, generator=g)
        leaves = [t.clone().requires_grad_(need) for t, need in ((x, x_grad), (w, True), (b, True))]
        refs = [t.clone().requires_grad_(need) for t, need in ((x, x_grad), (w, True), (b, True))]
        y = conv_relu(*leaves, stride)
        y_ref = torch.relu(torch.nn.functional.conv2d(*refs, stride=stride))
        torch.testing.assert_close(y, y_ref)
        assert (y == 0).any() and (y > 0).any()  # the mask matters
        seed = torch.randn(y.shape, generator=g)
        got = torch.autograd.grad(y, [t for t in leaves if t.requires_grad], seed)
        want = torch.autograd.grad(y_ref, [t for t in refs if t.requires_grad], seed)
        for a, r in zip(got, want):
            torch.testing.assert_close(a, r, rtol=1e-5, atol=1e-5)
        with torch.no_grad():  # the no-gradient path
            torch.testing.assert_close(conv_relu(x, w, b, stride), y_ref.detach())


def test_channels_last_agent_computes_what_its_nchw_twin_computes():
    """Channels-last features flatten as (h, w, c); the projections' columns are permuted at
    initialisation, so the same seed gives the same critic, actor and encoder outputs as the
    NCHW (reference-order) agent."""
    torch.manual_seed(0)
    nhwc = CurlSacAgent(OBS, 2, encoder=ENC, agent=AgentConfig(hidden_dim=16), objective=None)
    torch.manual_seed(0)
    nchw = CurlSacAgent(
        OBS, 2, encoder=ENC, agent=AgentConfig(hidden_dim=16), objective=None, fused=False, channels_last=False
    )
    w_a, w_b = nhwc.critic.encoder.project.fc.weight, nchw.critic.encoder.project.fc.weight
    assert not torch.equal(w_a, w_b) and torch.equal(w_a.sort(dim=1).values, w_b.sort(dim=1).values)
    g = torch.Generator().manual_seed(1)
    obs = torch.randint(0, 256, (5, *OBS), generator=g, dtype=torch.uint8)
    action = torch.rand(5, 2, generator=g) * 2 - 1
    with torch.no_grad():
        for a, b in [
            (nhwc.critic.encoder(obs), nchw.critic.encoder(obs)),
            (nhwc.critic(obs, action)[0], nchw.critic(obs, action)[0]),
            (
                nhwc.actor(nhwc.critic.encoder.conv(obs), sample=False)[0],
                nchw.actor(nchw.critic.encoder.conv(obs), sample=False)[0],
            ),
        ]:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
