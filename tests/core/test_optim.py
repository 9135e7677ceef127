"""LARS in both its forms (multi-tensor, the CUDA default, and per-parameter, the CPU's) computes
what the per-parameter LARS of before computed (kept here as the plain reference), step after
step, and reads its checkpoints."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.optim import Optimizer

from toolkit.training.optim import LARS


class ReferenceLARS(Optimizer):
    """The per-parameter LARS as ``toolkit/training/optim.py`` had it before the multi-tensor form."""

    def __init__(self, params, lr, momentum=0.9, weight_decay=0.0, trust_coefficient=0.001):
        super().__init__(
            params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, trust_coefficient=trust_coefficient)
        )

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                d = p.grad
                if p.ndim > 1:
                    if group["weight_decay"]:
                        d = d.add(p, alpha=group["weight_decay"])
                    w_norm, d_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(d)
                    trust = torch.where(
                        (w_norm > 0) & (d_norm > 0),
                        group["trust_coefficient"] * w_norm / d_norm,
                        torch.ones_like(w_norm),
                    )
                    d = d.mul(trust)
                state = self.state[p]
                buf = state.get("momentum_buffer")
                if buf is None:
                    buf = state["momentum_buffer"] = torch.clone(d).detach()
                else:
                    buf.mul_(group["momentum"]).add_(d)
                p.add_(buf, alpha=-group["lr"])


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4 * 4, 5), nn.Linear(5, 3)
        )
        with torch.no_grad():
            self.body[5].weight.zero_()  # ||w|| = 0: the trust ratio falls back to 1
        self.unused = nn.Linear(2, 2)  # never gets a gradient

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return _Net()


def _train(net: nn.Module, opt: Optimizer, steps: int, seed: int, start: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    for step in range(start + steps):
        x = torch.randn(4, 3, 6, 6, generator=g)
        if step < start:
            continue
        opt.zero_grad(set_to_none=True)
        net(x).square().mean().backward()
        for group in opt.param_groups:  # a schedule changes the rate between steps
            group["lr"] = 0.5 / (1 + step)
        opt.step()


@pytest.mark.parametrize("foreach", [True, False])
@pytest.mark.parametrize("weight_decay", [0.0, 1e-4])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_lars_equals_the_per_parameter_reference(weight_decay, momentum, foreach):
    nets = _net(0), _net(0)
    ref = ReferenceLARS(nets[0].parameters(), lr=0.5, momentum=momentum, weight_decay=weight_decay)
    new = LARS(nets[1].parameters(), lr=0.5, momentum=momentum, weight_decay=weight_decay, foreach=foreach)
    _train(nets[0], ref, 12, seed=1)
    _train(nets[1], new, 12, seed=1)
    moved = 0
    for (name, a), b in zip(nets[0].named_parameters(), nets[1].parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6, msg=name)
        if a.grad is not None:
            ba, bb = ref.state[a]["momentum_buffer"], new.state[b]["momentum_buffer"]
            torch.testing.assert_close(bb, ba, rtol=1e-6, atol=1e-6, msg=name)
            moved += 1
    assert moved == 8  # every parameter but the unused layer's took steps


def test_multi_tensor_lars_continues_a_per_parameter_checkpoint():
    nets = _net(2), _net(2)
    ref = ReferenceLARS(nets[0].parameters(), lr=0.5, weight_decay=1e-4)
    _train(nets[0], ref, 5, seed=3)
    nets[1].load_state_dict(nets[0].state_dict())
    new = LARS(nets[1].parameters(), lr=0.5, weight_decay=1e-4, foreach=True)
    new.load_state_dict(copy.deepcopy(ref.state_dict()))  # as from a file: no shared buffers
    _train(nets[0], ref, 5, seed=3, start=5)
    _train(nets[1], new, 5, seed=3, start=5)
    for a, b in zip(nets[0].parameters(), nets[1].parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)


def test_lars_is_multi_tensor_on_cuda_and_per_parameter_on_the_cpu():
    from toolkit.training.optim import implementation

    cpu = LARS(_net(0).parameters(), lr=0.1)
    assert implementation(cpu) == "lars per-parameter"
    assert implementation(LARS(_net(0).parameters(), lr=0.1, foreach=True)) == "lars multi-tensor"
    if torch.cuda.is_available():
        assert implementation(LARS(_net(0).cuda().parameters(), lr=0.1)) == "lars multi-tensor"
