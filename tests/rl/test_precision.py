"""``precision: bf16``: what runs in bf16 (convolutions, hidden MLP layers), what stays fp32, and
one update against its fp32 twin.

The references round to bf16 exactly where the networks do (``rb``) and compute the rest in
float64: the kernels accumulate in fp32 and round once, so they agree with the reference to
the last bf16 bit (up to rounding-boundary cases), while the fp32 path misses it by ~1e-3.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from domains.rl.agent import CurlSacAgent
from domains.rl.config import AgentConfig, EncoderConfig
from domains.rl.networks import MLP, PixelEncoder
from toolkit.objective import build
from toolkit.recipe import ObjectiveSection as Objective

ENC = EncoderConfig(feature_dim=8, num_layers=2, num_filters=4)
OBS = (9, 20, 20)
BF16_EPS = 2.0**-8  # spacing of bf16 numbers in [1, 2): one rounding moves a value by <= half of it


def rb(t: torch.Tensor) -> torch.Tensor:
    """Round to bf16, continue in float64."""
    return t.detach().to(torch.bfloat16).double()


def test_bf16_mlp_rounds_hidden_layers_only_and_keeps_the_output_layer_fp32():
    torch.manual_seed(0)
    mlp = MLP(10, 64, 3, torch.bfloat16)
    x = torch.randn(32, 10)
    with torch.no_grad():
        out = mlp(x)
        h = rb(torch.relu(rb(x) @ rb(mlp[0].weight).T + rb(mlp[0].bias)))
        h = rb(torch.relu(h @ rb(mlp[2].weight).T + rb(mlp[2].bias)))
        ref = h @ mlp[4].weight.double().T + mlp[4].bias.double()  # the output layer in full precision
        mlp.compute_dtype = torch.float32
        fp32 = mlp(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=1e-6)
    assert (fp32.double() - ref).abs().max() > 1e-4  # the test tells the two paths apart


def test_bf16_convolutions_match_a_rounded_reference_and_leave_fp32_features():
    torch.manual_seed(0)
    enc = PixelEncoder(9, 20, 8, 2, 4, conv_dtype=torch.bfloat16)
    obs = torch.randint(0, 256, (5, *OBS), dtype=torch.uint8)
    c0, c1 = enc.convs
    with torch.no_grad():
        got = enc.conv(obs)
        a = rb(F.relu(F.conv2d(obs.double(), rb(c0.weight / 255.0), rb(c0.bias), stride=2)))
        a = rb(F.relu(F.conv2d(a, rb(c1.weight), rb(c1.bias))))
        ref = a.permute(0, 2, 3, 1).flatten(1)  # channels-last flattening
        z = enc(obs)
    assert got.dtype == torch.float32 and z.dtype == torch.float32
    diff = (got.double() - ref).abs()
    assert (diff == 0).double().mean() > 0.99  # the same bf16 numbers...
    assert (diff <= BF16_EPS * ref.abs()).all()  # ...or one bf16 step apart at a rounding boundary
    assert torch.equal(got, got.bfloat16().float())  # the features came through bf16
    enc.conv_dtype = torch.float32
    with torch.no_grad():
        assert not torch.equal(enc.conv(obs), got)


def make_pair(hidden: int = 64):
    agents = []
    for dtype in (torch.float32, torch.bfloat16):
        obj = build(Objective.model_validate({"loss": {"name": "info_nce"}}))
        torch.manual_seed(0)
        agents.append(
            CurlSacAgent(
                OBS, 2, encoder=ENC, agent=AgentConfig(hidden_dim=hidden), objective=obj, lr=1e-3, compute_dtype=dtype
            )
        )
    return agents


def make_batch(n: int = 16):
    g = torch.Generator().manual_seed(1)
    img = lambda: torch.randint(0, 256, (n, *OBS), generator=g, dtype=torch.uint8)  # noqa: E731
    return {
        "obs": img(),
        "pos": img(),
        "next_obs": img(),
        "action": torch.rand(n, 2, generator=g) * 2 - 1,
        "reward": torch.rand(n, 1, generator=g),
        "not_done": torch.ones(n, 1),
    }


def test_one_bf16_update_is_finite_and_close_to_the_fp32_update():
    """The same seed, batch (64, the CPU recipe's) and sampling noise in fp32 and bf16.

    Tolerance: every value on the path to a loss goes through at most 4 bf16 roundings (2
    convolutions, 2 hidden layers), each within 2^-9 relative, so losses agree to ~1%; 3%
    leaves room for the squares and log-sum-exps on top. Gradients (the last each parameter
    got: Q heads from the critic loss, encoder and W from the contrastive loss, actor from the
    actor loss) point the same way (cosine > 0.99) with norms within 5%. Gradients amplify
    the roundings where they cancel: a gradient sums over the batch, where a sample whose
    ReLU pattern or min(Q1, Q2) flips under rounding moves it by ~1/B (at B = 16 the actor's
    projection, behind a LayerNorm's backward, was 8% off), and the first convolution's
    weight gradient sums pixels 0..255, all positive, against signed output gradients. At
    B = 64 every norm was within 1.7% but the first convolution's, 3.6% (seed 0)."""
    fp32, bf16 = make_pair()
    batch = make_batch(64)
    torch.manual_seed(5)
    out32 = fp32.update(batch)
    torch.manual_seed(5)
    out16 = bf16.update(batch)
    assert out16.keys() == out32.keys()
    for key in ("critic_loss", "q_mean", "actor_loss", "contrastive_loss", "entropy"):
        a, b = float(out32[key]), float(out16[key])
        assert math.isfinite(b), key
        assert abs(b - a) <= 0.03 * abs(a) + 1e-4, (key, a, b)
    for (name, p32), p16 in zip(fp32.named_parameters(), bf16.parameters()):
        assert p16.dtype == torch.float32 and torch.isfinite(p16).all(), name
        if p32.grad is None:
            assert p16.grad is None, name
            continue
        g32, g16 = p32.grad.flatten().double(), p16.grad.flatten().double()
        assert p16.grad.dtype == torch.float32, name
        if g32.norm() < 1e-8:
            continue
        assert F.cosine_similarity(g32, g16, dim=0) > 0.99, name
        assert abs(g16.norm() / g32.norm() - 1) < 0.05, name
    for opt in bf16.optimizers().values():  # Adam's moments are fp32 too
        assert all(v.dtype == torch.float32 for s in opt.state.values() for v in s.values() if v.dim() > 0)


def test_bf16_critic_outputs_and_policy_are_fp32_and_acting_is_fp32():
    fp32, bf16 = make_pair(hidden=16)
    batch = make_batch(4)
    with torch.no_grad():
        q1, q2 = bf16.critic(batch["obs"], batch["action"])
        mu, pi, log_pi, log_std = bf16.actor(bf16.critic.encoder.conv(batch["obs"]))
    assert {t.dtype for t in (q1, q2, mu, pi, log_pi, log_std)} == {torch.float32}
    assert not torch.equal(q1, q1.bfloat16().float())  # the output layer is not rounded to bf16
    action = bf16.act(batch["obs"][0].numpy(), sample=False)
    assert action.dtype.name == "float32" and action.shape == (2,)
    # acting computes in fp32 (the same weights give the fp32 twin's action to the bit) and
    # leaves the networks in bf16
    assert (action == fp32.act(batch["obs"][0].numpy(), sample=False)).all()
    assert bf16.critic.encoder.conv_dtype == bf16.actor.trunk.compute_dtype == torch.bfloat16
    with torch.no_grad():
        assert not torch.equal(
            bf16.actor(bf16.critic.encoder.conv(batch["obs"][:1]), sample=False)[0],
            fp32.actor(fp32.critic.encoder.conv(batch["obs"][:1]), sample=False)[0],
        )
