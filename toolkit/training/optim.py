"""Optimizers (SGD with momentum, Adam, AdamW, LARS) and learning-rate schedules (linear
warm-up, then constant, cosine or step decay) from a recipe's ``optimizer`` / ``schedule``."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from toolkit import recipe as rc


class LARS(Optimizer):
    """LARS (You et al. 2017) as used by SimCLR: SGD with momentum whose per-layer step is
    scaled by ``trust * ||w|| / (||g|| + wd * ||w||)``. Parameters with ``ndim <= 1``
    (biases, batch-norm) get neither weight decay nor the trust ratio."""

    def __init__(
        self,
        params: Iterable,
        lr: float,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        trust_coefficient: float = 0.001,
    ) -> None:
        super().__init__(
            params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, trust_coefficient=trust_coefficient)
        )

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = closure() if closure is not None else None
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
        return loss


def build_optimizer(params: Iterable[nn.Parameter], cfg: rc.Optimizer, batch_size: int) -> Optimizer:
    lr = cfg.lr * batch_size / 256 if cfg.scale_lr_by_batch else cfg.lr
    params = [p for p in params if p.requires_grad]
    if cfg.name == "sgd":
        return torch.optim.SGD(
            params,
            lr=lr,
            momentum=cfg.momentum,
            weight_decay=cfg.weight_decay,
            nesterov=cfg.nesterov and cfg.momentum > 0,
        )
    if cfg.name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    if cfg.name == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    return LARS(
        params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, trust_coefficient=cfg.trust_coefficient
    )


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
    wall-time budget fixes the run's length after the schedule is built)."""
    total = total_steps if callable(total_steps) else (lambda: total_steps)
    return LambdaLR(optimizer, lambda s: lr_factor(s, cfg, total(), steps_per_epoch))
