"""MomentumEncoder against a plain loop of theta_k <- m theta_k + (1 - m) theta_q, buffers copied
(MoCo, He et al. 2020, Eq. 2), and its state_dict as a submodule of the Objective."""

from __future__ import annotations

import torch
from torch import nn

from toolkit.samplers.sources import MomentumEncoder


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.BatchNorm1d(7), nn.ReLU(), nn.Linear(7, 3))


def test_key_parameters_follow_the_loop_reference_and_buffers_are_copied():
    query, m = _net(), 0.9
    key = MomentumEncoder(query, m)
    ref = {n: p.detach().clone().double() for n, p in query.named_parameters()}
    opt = torch.optim.SGD(query.parameters(), lr=0.5)
    g = torch.Generator().manual_seed(1)
    for _ in range(7):
        opt.zero_grad()
        query(torch.randn(16, 5, generator=g)).pow(2).sum().backward()  # also moves BN statistics
        opt.step()
        key.update(query)
        for n, p in query.named_parameters():
            ref[n] = m * ref[n] + (1 - m) * p.detach().double()
    for n, p in key.module.named_parameters():
        torch.testing.assert_close(p.double(), ref[n], rtol=1e-5, atol=1e-6)
        assert not p.requires_grad
    for (n, b), bq in zip(key.module.named_buffers(), query.buffers()):
        assert torch.equal(b, bq), n
    assert not torch.allclose(key.module[0].weight, query[0].weight)  # it lags: m < 1


def test_momentum_one_freezes_and_zero_copies():
    query = _net()
    frozen, copied = MomentumEncoder(query, 1.0), MomentumEncoder(query, 0.0)
    start = query[0].weight.detach().clone()
    with torch.no_grad():
        query[0].weight.add_(1.0)
    frozen.update(query)
    copied.update(query)
    assert torch.equal(frozen.module[0].weight, start)
    assert torch.equal(copied.module[0].weight, query[0].weight)


def test_state_dict_round_trips_as_a_submodule():
    query = _net()
    holder = nn.Module()
    holder.key_encoder = MomentumEncoder(query, 0.99)
    state = holder.state_dict()
    assert set(state) == {f"key_encoder.module.{k}" for k in query.state_dict()}
    other = nn.Module()
    other.key_encoder = MomentumEncoder(_net(), 0.99)
    with torch.no_grad():
        other.key_encoder.module[0].weight.zero_()
    other.load_state_dict(state)  # strict
    assert torch.equal(other.key_encoder.module[0].weight, holder.key_encoder.module[0].weight)
