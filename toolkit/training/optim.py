"""Optimizers (SGD with momentum, Adam, AdamW, LARS) and learning-rate schedules (linear
warm-up, then constant, cosine or step decay) from a recipe's ``optimizer`` / ``schedule``."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from toolkit import recipe as rc

# Devices where LARS takes its multi-tensor update by default (``foreach=None``);
# ``toolkit.training.syncs.cuda_branches`` adds ``cpu`` to check that path here.
FOREACH_DEVICES = ("cuda",)


class LARS(Optimizer):
    """LARS (You et al. 2017) as SimCLR uses it: SGD with momentum on the decayed gradient
    d = g + wd * w scaled per layer by the trust ratio ``trust * ||w|| / ||d||`` (1 where
    either norm is 0): the norm of the decayed gradient, SimCLR's form, not You et al.'s
    ``||g|| + wd * ||w||``. Parameters with ``ndim <= 1`` (biases, batch-norm) get neither weight
    decay nor the trust ratio.

    ``foreach`` (default: on CUDA): each step is a handful of ``torch._foreach_*`` kernels over
    all the parameters of a device and dtype (a ResNet-50 has 161) instead of a dozen small
    kernels per parameter, nothing read back to the host. The trust ratios are one vector, and
    they reach the parameters as one vector too, spread to one factor per element
    (``repeat_interleave`` with the output size given: no read of the counts) and viewed in each
    parameter's shape: torch's multi-tensor kernels take a list of per-tensor factors only in
    the parameters' own shapes (a 0-dim factor per tensor sends ``_foreach_mul`` to its loop of
    one kernel per tensor), at the price of a temporary factor (and int64 index) per element of
    the wide parameters, freed within the step. On the CPU, where a kernel launch costs
    nothing, the per-parameter loop is faster (it works on one parameter while it is in cache:
    ResNet-18 at 16 px, batch 8, a 2-core Xeon: 103 against 112 ms a step), so it stays there.
    ``tests/core/test_optim.py`` holds the two forms equal to 1e-6."""

    def __init__(
        self,
        params: Iterable,
        lr: float,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        trust_coefficient: float = 0.001,
        foreach: bool | None = None,
    ) -> None:
        super().__init__(
            params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, trust_coefficient=trust_coefficient)
        )
        self.foreach = foreach
        self._counts: dict[tuple, Tensor] = {}  # element counts of a list of wide parameters, on their device

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            kinds: dict[tuple[torch.device, torch.dtype], list[Tensor]] = {}
            for p in group["params"]:
                if p.grad is not None:
                    kinds.setdefault((p.device, p.dtype), []).append(p)
            for (device, _), params in kinds.items():
                if self.foreach or (self.foreach is None and device.type in FOREACH_DEVICES):
                    self._step(params, group)
                else:
                    self._step_each(params, group)
        return loss

    def _step_each(self, params: list[Tensor], group: dict) -> None:
        """One update of ``params``, parameter by parameter."""
        for p in params:
            d = p.grad
            if p.ndim > 1:
                if group["weight_decay"]:
                    d = d.add(p, alpha=group["weight_decay"])
                w_norm, d_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(d)
                trust = torch.where(
                    (w_norm > 0) & (d_norm > 0), group["trust_coefficient"] * w_norm / d_norm, torch.ones_like(w_norm)
                )
                d = d.mul(trust)
            state = self.state[p]
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = torch.clone(d).detach()
            else:
                buf.mul_(group["momentum"]).add_(d)
            p.add_(buf, alpha=-group["lr"])

    def _step(self, params: list[Tensor], group: dict) -> None:
        """One update of ``params`` (one device and dtype, all with gradients), multi-tensor."""
        steps: list[Tensor] = [p.grad for p in params]  # type: ignore[misc]
        wide = [i for i, p in enumerate(params) if p.ndim > 1]
        if wide:
            w = [params[i] for i in wide]
            g = [steps[i] for i in wide]
            d = torch._foreach_add(g, w, alpha=group["weight_decay"]) if group["weight_decay"] else g
            w_norm = torch.stack(torch._foreach_norm(w))
            d_norm = torch.stack(torch._foreach_norm(d))
            trust = torch.where(
                (w_norm > 0) & (d_norm > 0), group["trust_coefficient"] * w_norm / d_norm, torch.ones_like(w_norm)
            )
            for i, scaled in zip(wide, torch._foreach_mul(d, self._per_element(trust, w)), strict=True):
                steps[i] = scaled
        bufs: list[Tensor] = []
        old: list[Tensor] = []
        new: list[Tensor] = []
        for p, d in zip(params, steps, strict=True):
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.clone(d).detach()
            else:
                old.append(state["momentum_buffer"])
                new.append(d)
            bufs.append(state["momentum_buffer"])
        if old:
            torch._foreach_mul_(old, group["momentum"])
            torch._foreach_add_(old, new)
        torch._foreach_add_(params, bufs, alpha=-group["lr"])

    def _per_element(self, factors: Tensor, tensors: list[Tensor]) -> list[Tensor]:
        """``factors[i]`` repeated over every element of ``tensors[i]``, one vector of the
        tensors' dtype, as views in their shapes (the multi-tensor kernels' operands)."""
        sizes = [t.numel() for t in tensors]
        key = (factors.device, *sizes)
        counts = self._counts.get(key)
        if counts is None:  # copied to the device once: no host-to-device copy in later steps
            counts = self._counts[key] = torch.tensor(sizes, device=factors.device)
        flat = factors.to(tensors[0].dtype).repeat_interleave(counts, output_size=sum(sizes))
        return [part.view(t.shape) for part, t in zip(flat.split(sizes), tensors, strict=True)]


def build_optimizer(
    params: Iterable[nn.Parameter], cfg: rc.Optimizer, batch_size: int, fixed_lr: Iterable[nn.Parameter] = ()
) -> Optimizer:
    """The recipe's optimizer over ``params`` (on their device already): SGD, Adam and AdamW
    fused where torch has the kernel (CUDA and CPU, float parameters: one kernel for every
    parameter), LARS multi-tensor. Those of ``params`` also in ``fixed_lr`` form a second
    parameter group marked ``fixed_lr``, which :func:`build_scheduler` leaves at the base rate."""
    lr = cfg.lr * batch_size / 256 if cfg.scale_lr_by_batch else cfg.lr
    params = [p for p in params if p.requires_grad]
    fast = {"fused": True} if _fusable(params) else {}
    fixed_ids = {id(p) for p in fixed_lr}
    if fixed_ids:  # two groups; torch keeps the extra key in the group (and in the state_dict)
        params = [
            {"params": [p for p in params if id(p) not in fixed_ids]},
            {"params": [p for p in params if id(p) in fixed_ids], "fixed_lr": True},
        ]
    if cfg.name == "sgd":
        return torch.optim.SGD(
            params,
            lr=lr,
            momentum=cfg.momentum,
            weight_decay=cfg.weight_decay,
            nesterov=cfg.nesterov and cfg.momentum > 0,
            **fast,
        )
    if cfg.name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=cfg.betas, weight_decay=cfg.weight_decay, **fast)
    if cfg.name == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=cfg.betas, weight_decay=cfg.weight_decay, **fast)
    return LARS(
        params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, trust_coefficient=cfg.trust_coefficient
    )


def _fusable(params: list[nn.Parameter]) -> bool:
    """torch's fused SGD / Adam / AdamW take these: floating parameters on one CUDA or CPU device."""
    devices = {p.device for p in params}
    return (
        len(devices) == 1
        and next(iter(devices)).type in ("cuda", "cpu")
        and all(p.dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64) for p in params)
    )


def implementation(optimizer: Optimizer) -> str:
    """How ``optimizer`` steps, in words: ``adam fused``, ``lars multi-tensor``, ``sgd``..."""
    name = type(optimizer).__name__.lower()
    if isinstance(optimizer, LARS):
        devices = {p.device.type for group in optimizer.param_groups for p in group["params"]}
        multi = optimizer.foreach or (optimizer.foreach is None and bool(devices) and devices <= set(FOREACH_DEVICES))
        return f"{name} {'multi-tensor' if multi else 'per-parameter'}"
    return f"{name} fused" if optimizer.defaults.get("fused") else name


def lr_factor(step: int, cfg: rc.LRScheduleSection, total_steps: int, steps_per_epoch: int) -> float:
    """Multiplier of the base learning rate at ``step`` (0-based)."""
    warmup = cfg.warmup_steps + int(round(cfg.warmup_epochs * steps_per_epoch))
    if warmup and step < warmup:
        return (step + 1) / warmup
    if cfg.name == "constant":
        return 1.0
    if cfg.name == "step":
        epoch = step / max(1, steps_per_epoch)
        return cfg.gamma ** sum(epoch >= m for m in cfg.milestones)
    span = max(1, total_steps - warmup)
    progress = min(1.0, (step - warmup) / span)
    floor = cfg.final_lr_fraction
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def build_scheduler(
    optimizer: Optimizer, cfg: rc.LRScheduleSection, total_steps: int | Callable[[], int], steps_per_epoch: int
) -> LambdaLR:
    """The learning-rate schedule; ``total_steps`` may be a callable, read at every step (a
    wall-time budget fixes the run's length after the schedule is built). A group marked
    ``fixed_lr`` (SimSiam's predictor) keeps its base rate: factor 1 at every step."""
    total = total_steps if callable(total_steps) else (lambda: total_steps)

    def scheduled(s: int) -> float:
        return lr_factor(s, cfg, total(), steps_per_epoch)

    def fixed(s: int) -> float:
        return 1.0

    return LambdaLR(optimizer, [fixed if g.get("fixed_lr") else scheduled for g in optimizer.param_groups])
