"""One step count for all the points of a sweep, a study or a reproduction that train for
``budget.minutes``.

A run alone fixes its length from the speed of a few timed steps (:mod:`toolkit.training.budget`).
Points of a sweep doing so would each train their own count, measured while other points ran
beside them, and a difference between two arms would mix the swept key with how long each arm
happened to train. So the sweep fixes the count once, before any point starts: one calibration
(:func:`toolkit.runs.calibrate`) of the first point of each *budget group* (every point of a
sweep; a study's points per domain; a reproduction's per domain; and apart per value of
``budget.minutes`` when the grid sweeps it), run alone where the points run (this process, or a
Ray worker with a point's resources). Every point of the group then trains exactly that many
steps (at most its own ceiling), and logs it as ``measured.budget_steps_fixed`` with
``measured.budget_steps_by = sweep``.

The count is recorded on the parent run (tag ``ctk.budget_steps``, JSON per group, and the
metric ``sweep/budget_steps_fixed``) and printed. Running the sweep again (new points, killed
ones resumed) reads it back instead of calibrating again, so a point resumed later keeps it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from typing import Any

__all__ = ["TAG", "METRIC", "group_key", "fix_for_points"]

TAG = "ctk.budget_steps"
METRIC = "sweep/budget_steps_fixed"


def group_key(point: Any) -> str | None:
    """The budget group of a sweep point (None: its recipe has no ``budget.minutes``)."""
    budget = point.recipe.budget
    if budget is None or not budget.minutes:
        return None
    return f"{point.budget_group}|minutes={budget.minutes:g}"


def _metric_name(key: str, many: bool) -> str:
    return METRIC if not many else f"{METRIC}/" + re.sub(r"[^A-Za-z0-9_\-. /]", "_", key.strip("|"))


def fix_for_points(
    client: Any,
    parent: str,
    points: list[Any],
    specs: list[Any],
    alone: Callable[[Any], Any],
    echo: Callable[[str], None],
) -> dict[str, dict[str, Any]]:
    """Fix the steps of every spec to launch whose point trains for ``budget.minutes``: read from
    the parent run, else calibrated with ``alone`` (runs one spec alone, where the points run);
    recorded on the parent, printed with ``echo``. Returns {group: record}."""
    to_run = {s.label: s for s in specs}
    groups: dict[str, list[Any]] = {}
    for p in points:
        key = group_key(p)
        if key is not None and p.label in to_run:
            groups.setdefault(key, []).append(p)
    if not groups:
        return {}
    recorded = json.loads(client.get_run(parent).data.tags.get(TAG) or "{}")
    many = len({group_key(p) for p in points} - {None}) > 1
    for key, members in groups.items():
        first = members[0]
        where = f" of {first.budget_group}" if first.budget_group else ""
        minutes = first.recipe.budget.minutes
        entry = recorded.get(key)
        if entry is not None:
            echo(
                f"sweep: budget.minutes {minutes:g} -> {entry['steps']:,} steps for every point{where}, "
                f"as this sweep fixed them before ({entry['ms_per_step']:.1f} ms/step on {entry['on']})"
            )
        else:
            outcome = alone(dataclasses.replace(to_run[first.label], calibrate=True))
            if outcome.outcome != "calibrated":
                why = f": {outcome.note}" if outcome.note else ""
                echo(
                    f"sweep: budget.minutes {minutes:g}{where}: no calibration ({outcome.outcome}{why}); "
                    "each point fixes its own steps"
                )
                continue
            entry = {
                "steps": int(outcome.metrics["steps"]),
                "ms_per_step": float(outcome.metrics["ms_per_step"]),
                "minutes": minutes,
                "on": first.label,
                "precision": outcome.metrics.get("precision"),
            }
            recorded[key] = entry
            client.set_tag(parent, TAG, json.dumps(recorded, sort_keys=True))
            client.log_metric(parent, _metric_name(key, many), entry["steps"])
            echo(
                f"sweep: budget.minutes {minutes:g} -> {entry['steps']:,} steps for every point{where} "
                f"({entry['ms_per_step']:.1f} ms/step, {entry['precision']}, timed on {first.label} alone before "
                f"the points start, in {outcome.seconds:.0f} s); replay a point with --set "
                f"budget.steps={entry['steps']}"
            )
        for p in members:
            to_run[p.label].fixed_steps = entry["steps"]
    return recorded
