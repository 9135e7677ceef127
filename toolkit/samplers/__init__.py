"""Negative sources, selectors and their schedules.

A selector keeps a subset of each anchor's candidate negatives: it maps similarities
``[N, M]`` and the training step to a boolean keep-mask (``None`` from :func:`build_selector`
means keep all). Recipes name them: ``selector: {name: hard, num_hard: 4095}``,
``selector: {name: ring, lower: 50, upper: 90, schedule: {...}}``. The names live in one
registry, :data:`SELECTORS` (plug-ins add theirs with ``@SELECTORS.register``).

Modules: ``masks`` (the keep-mask functions: all, hard, ring), ``selectors`` (the registered
selector rules built on them), ``schedules`` (step schedules), ``scheduled`` (:class:`ScheduledSelector`: a selector whose
argument follows a schedule),
``sources`` (MoCo queue, memory bank, momentum encoder).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor

from toolkit.samplers.masks import all_mask, hard_mask, ring_mask  # noqa: F401
from toolkit.samplers.scheduled import ScheduledSelector  # noqa: F401
from toolkit.samplers.schedules import SELECTOR_SCHEDULES, make_schedule  # noqa: F401
from toolkit.samplers.selectors import SELECTORS, NegativeSelector, make_selector  # noqa: F401
from toolkit.samplers.sources import MemoryBank, MoCoQueue, MomentumEncoder  # noqa: F401


def build_selector(
    name: str, args: dict[str, Any], schedule: str | None = None, schedule_args: dict[str, Any] | None = None
) -> Callable[[Tensor, int], Tensor] | None:
    """A ``(sims, step) -> keep-mask`` callable (a :class:`ScheduledSelector`), or ``None``
    for a selector that keeps everything (``all``). ``schedule_args`` may name the scheduled
    selector argument as ``param`` (default: the selector's own)."""
    selector = make_selector(name, args)
    if selector.keeps_all:
        if args or schedule:
            raise ValueError(f"selector {name!r} takes no arguments, got {sorted(args) or schedule!r}")
        return None
    spec = None
    param = None
    if schedule is not None:
        spec = dict(schedule_args or {})
        param = spec.pop("param", None)
        spec["name"] = schedule
    return ScheduledSelector(selector, None, spec, param)
