"""Negative sources, selectors and their schedules.

A selector keeps a subset of each anchor's candidate negatives: it maps similarities
``[N, M]`` and the training step to a boolean keep-mask (``None`` from :func:`build_selector`
means keep all). Recipes name them: ``selector: {name: hard, num_hard: 4095}``,
``selector: {name: ring, lower: 50, upper: 90, schedule: {...}}``.
"""
from __future__ import annotations

from typing import Any, Callable

from torch import Tensor

from toolkit.registry import Registry
from toolkit.samplers.schedules import SCHEDULES, ScheduledSelector, make_schedule  # noqa: F401
from toolkit.samplers.selectors import all_mask, hard_mask, ring_mask  # noqa: F401
from toolkit.samplers.sources import MemoryBank, MoCoQueue, MomentumEncoder  # noqa: F401

SELECTORS: Registry[Any] = Registry("selector")
SELECTORS.add("all", None, description="keep every candidate negative")
SELECTORS.add("hard", hard_mask, description="Wang & Liu hard negatives: the top-k (num_hard) or top alpha-fraction most similar")
SELECTORS.add("ring", ring_mask, description="Ring / CNCE: negatives between the lower and upper percentiles "
              "of similarity (or the official theta_outer / theta_inner)")


def build_selector(name: str, args: dict[str, Any], schedule: str | None = None,
                   schedule_args: dict[str, Any] | None = None) -> Callable[[Tensor, int], Tensor] | None:
    """A ``(sims, step) -> keep-mask`` callable (a :class:`ScheduledSelector`), or ``None``
    for ``all``. ``schedule_args`` may name the scheduled selector argument as ``param``
    (default ``theta_outer`` / ``lower`` for ring, ``alpha`` / ``num_hard`` for hard)."""
    SELECTORS.get(name)
    if name == "all":
        if args or schedule:
            raise ValueError(f"selector 'all' takes no arguments, got {sorted(args) or schedule!r}")
        return None
    spec = None
    param = None
    if schedule is not None:
        spec = dict(schedule_args or {})
        param = spec.pop("param", None)
        spec["name"] = schedule
    return ScheduledSelector(name, dict(args), spec, param)
