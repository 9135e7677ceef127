"""LARS in both its forms (multi-tensor, the CUDA default, and per-parameter, the CPU's) computes
what the per-parameter LARS of before computed (kept here as the plain reference), step after
step, and reads its checkpoints."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.optim import Optimizer

from toolkit import recipe as rc
from toolkit.training.optim import LARS, build_optimizer, build_scheduler, lr_factor

from .test_family_parts import _built


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


def test_lars_step_is_the_simclr_trust_ratio():
    """One step from rest, momentum 0: w <- w - lr * tc ||w|| / ||g + wd w|| * (g + wd w), the
    norm of the decayed gradient (SimCLR's form; You et al.'s ||g|| + wd ||w|| differs here)."""
    for foreach in (False, True):
        w = torch.tensor([[3.0, 4.0]], requires_grad=True)  # ||w|| = 5
        opt = LARS([w], lr=0.5, momentum=0.0, weight_decay=0.2, trust_coefficient=0.01, foreach=foreach)
        w.grad = torch.tensor([[0.4, -2.2]])
        d = w.grad + 0.2 * w.detach()  # [1.0, -1.4]
        expected = w.detach() - 0.5 * (0.01 * 5.0 / float(d.norm())) * d
        paper = w.detach() - 0.5 * (0.01 * 5.0 / (float(w.grad.norm()) + 0.2 * 5.0)) * d
        opt.step()
        torch.testing.assert_close(w.detach(), expected, rtol=1e-6, atol=1e-7)
        assert not torch.allclose(w.detach(), paper, rtol=1e-6, atol=1e-7)


class _Kernels(torch.utils._python_dispatch.TorchDispatchMode):
    """Every operator call that is not a view, and whether each multi-tensor call of two or more tensor lists
    could take CUDA's fast path (ATen's ``can_use_fast_route``: one device and dtype, and in
    each position tensors of one size and stride, dense); otherwise CUDA runs it as one kernel
    per tensor."""

    def __init__(self):
        super().__init__()
        self.calls, self.slow = [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not func.is_view and not name.startswith("_record_function"):  # views launch nothing
            self.calls.append(name)
        lists = [a for a in args if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)]
        if name.startswith("_foreach_") and len(lists) > 1:
            for column in zip(*lists, strict=True):
                first = column[0]
                alike = all(
                    t.shape == first.shape and t.stride() == first.stride() and t.dtype == first.dtype for t in column
                )
                if not alike or not first.is_contiguous():
                    self.slow.append((name, [tuple(t.shape) for t in column]))
        return func(*args, **(kwargs or {}))


def _mlp(layers: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(6, 6), nn.LayerNorm(6)) for _ in range(layers)])


@pytest.mark.parametrize("weight_decay", [0.0, 1e-4])
def test_multi_tensor_lars_is_a_few_kernels_whatever_the_parameter_count(weight_decay):
    """The multi-tensor step runs as many operators for 3 layers as for 12 (none per parameter
    beyond the first step's buffers) and every multi-tensor call can take CUDA's fast path (the
    0-dim trust ratios of before sent _foreach_mul to one kernel per parameter)."""
    counted = {}
    for layers in (3, 12):
        net = _mlp(layers)
        opt = LARS(net.parameters(), lr=0.1, weight_decay=weight_decay, foreach=True)
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
        for step in range(2):
            opt.zero_grad(set_to_none=True)
            net(x).square().mean().backward()
            if step == 0:
                opt.step()  # the first step clones a buffer per parameter
                continue
            with _Kernels() as kernels:
                opt.step()
        assert not kernels.slow, kernels.slow
        counted[layers] = kernels.calls
    assert counted[3] == counted[12], (counted[3], counted[12])


# -- SimSiam's fixed predictor learning rate ----------------------------------------------------


def test_a_fixed_lr_predictor_keeps_its_base_rate_while_the_rest_follows_the_schedule():
    obj, enc = _built(loss={"name": "simsiam"}, predictor={"hidden": [4], "fixed_lr": True}, target={"momentum": 0.0})
    fixed = obj.fixed_lr_parameters()
    assert {id(p) for p in fixed} == {id(p) for p in obj.predictor.parameters()} and fixed
    trained = [*enc.parameters(), *obj.trainable_parameters()]
    sched_cfg = rc.LRScheduleSection(name="cosine", warmup_steps=2)
    opt = build_optimizer(trained, rc.Optimizer(name="adam", lr=0.01), 128, fixed_lr=fixed)
    rest, pred = opt.param_groups
    assert pred["fixed_lr"] and not rest.get("fixed_lr")
    assert {id(p) for p in pred["params"]} == {id(p) for p in fixed}
    assert len(rest["params"]) + len(pred["params"]) == len(trained)  # every parameter once
    scheduler = build_scheduler(opt, sched_cfg, 10, 5)
    for step in range(10):
        assert rest["lr"] == pytest.approx(0.01 * lr_factor(step, sched_cfg, 10, 5))
        assert pred["lr"] == 0.01
        opt.step()
        scheduler.step()
    assert rest["lr"] < 1e-4  # the cosine reached its end; the predictor did not move
    again = build_optimizer(trained, rc.Optimizer(name="adam", lr=0.01), 128, fixed_lr=fixed)
    again.load_state_dict(opt.state_dict())  # a resumed run: the same two groups
    assert again.param_groups[1]["fixed_lr"] and again.param_groups[1]["lr"] == 0.01


def test_without_fixed_lr_the_predictor_is_scheduled_with_the_encoder():
    obj, enc = _built(loss={"name": "simsiam"}, predictor={"hidden": [4]}, target={"momentum": 0.0})
    assert obj.fixed_lr_parameters() == []
    opt = build_optimizer([*enc.parameters(), *obj.trainable_parameters()], rc.Optimizer(name="sgd"), 128)
    assert len(opt.param_groups) == 1
