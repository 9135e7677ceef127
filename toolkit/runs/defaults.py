"""The defaults an objective's components apply, written into a resolved recipe for ``ctk show``
(the loss's and regularizers' constructor defaults, the selector's and its schedule's); the
recipe itself, and its hash, keep what was written."""

from __future__ import annotations

from typing import Any

from toolkit.losses import LOSSES
from toolkit.registry import constructor_args
from toolkit.regularizers import REGULARIZERS
from toolkit.samplers import SELECTORS


def with_defaults(objective: dict[str, Any]) -> dict[str, Any]:
    """A resolved ``objective`` mapping with the defaults its components apply written in: the
    loss's and each regularizer's constructor defaults, the selector's (the ring's official
    thresholds; not the argument a schedule drives) and the schedule's. For ``ctk show``; the
    recipe itself (and its hash) keeps what was written."""
    import copy

    from toolkit.samplers.schedules import SELECTOR_SCHEDULES

    out = copy.deepcopy(objective)

    def fill(spec: dict[str, Any] | None, registry: Any, skip: tuple[str, ...] = ()) -> None:
        if not isinstance(spec, dict) or spec.get("name") not in registry:
            return
        for arg, param in constructor_args(registry.get(spec["name"])).items():
            if arg not in spec and arg not in skip and param.default is not param.empty:
                spec[arg] = param.default

    fill(out.get("loss"), LOSSES)
    for reg in out.get("regularizers") or []:
        fill(reg, REGULARIZERS)
    sel = out.get("selector")
    if isinstance(sel, dict) and sel.get("name") in SELECTORS:
        given = {k: v for k, v in sel.items() if k not in ("name", "schedule")}
        try:
            selector = SELECTORS.get(sel["name"])(given)
        except (ValueError, TypeError):
            return out
        schedule = sel.get("schedule")
        driven = (schedule.get("param") or selector.default_param()) if isinstance(schedule, dict) else None
        for arg, value in selector.args.items():
            if arg not in sel and arg != driven:
                sel[arg] = value
        fill(schedule, SELECTOR_SCHEDULES, skip=("param",))
    return out


def recipe_with_defaults(resolved: dict[str, Any]) -> dict[str, Any]:
    """A resolved recipe as ``ctk show`` prints it: its objective :func:`with_defaults`."""
    return {**resolved, "objective": with_defaults(resolved["objective"])} if resolved.get("objective") else resolved
