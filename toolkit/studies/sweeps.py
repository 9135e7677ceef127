"""Sweeps that can be run again: every point has one run, found by the hash of its recipe.

A point is one resolved recipe (seed included). Its key (:func:`point_key`) is the sha256 of
the resolved recipe without the keys that do not change what is computed (``tracking``,
``device``, ``precision``, ``resources``, names, paper figures); the run carries it as the tag
``ctk.point``. Before launching, :func:`decide` reads the point's run from the store:

=============================  ============================================================
run of the point               action
=============================  ============================================================
none                           ``launch``
FINISHED                       ``skip``
RUNNING (its process alive)    ``running`` (another sweep runs it; not launched twice)
KILLED, with a checkpoint      ``resume`` from it, in the same run (found where the run
                               recorded it, or in this directory: ``toolkit.checkpoint.find``)
KILLED, no checkpoint yet      ``restart``: the empty run is deleted, a new one starts
FAILED                         ``failed`` (kept); with ``--retry-failed`` ``restart``
=============================  ============================================================

so a point never has two live runs. The sweep itself is a parent run (tag ``ctk.sweep_parent``
= the hash of experiment and sweep name, so a grown grid keeps its parent): children carry ``mlflow.parentRunId``; the parent holds the
grid, the summary table and the comparison plot.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, field
from typing import Any

import yaml

from toolkit import checkpoint as ckpt
from toolkit.errors import CtkError

__all__ = [
    "Point",
    "point_key",
    "decide",
    "find_point_runs",
    "open_parent",
    "close_parent",
    "summary_table",
    "POINT_TAG",
    "PARENT_TAG",
    "SWEEP_TAG",
]

POINT_TAG = "ctk.point"
PARENT_TAG = "mlflow.parentRunId"
SWEEP_TAG = "ctk.sweep_parent"
_RANK = {"FINISHED": 0, "RUNNING": 1, "KILLED": 2, "SCHEDULED": 3, "FAILED": 4}


@dataclass
class Point:
    """One run of a sweep: its label (run name), validated recipe, the ``--set`` values that make
    it a point (for notes) and the tags the launcher adds (table row, note...)."""

    label: str
    recipe: Any
    values: list[str] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    budget_group: str = ""  # points that share budget.minutes' step count (a study: per domain)

    @property
    def key(self) -> str:
        return point_key(self.recipe.resolved)


def point_key(resolved: dict[str, Any]) -> str:
    """The point's identity: sha256 (first 20 hex digits) of the resolved recipe minus the keys
    that change nothing computed (``RESUME_FREE_KEYS``)."""
    return ckpt.recipe_hash({k: v for k, v in resolved.items() if k not in ckpt.RESUME_FREE_KEYS})[:20]


def find_point_runs(client: Any, experiment: str) -> dict[str, Any]:
    """``{point key: run}`` for the active runs of ``experiment`` that carry a point tag (dead
    RUNNING runs are marked KILLED first). Two runs for a key (never written by ctk) keep the
    most advanced one: FINISHED, then RUNNING, KILLED, FAILED."""
    from toolkit.tracking.health import mark_dead_runs

    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return {}
    mark_dead_runs(client, [exp.experiment_id])
    out: dict[str, Any] = {}
    for run in client.search_runs([exp.experiment_id], f"tags.`{POINT_TAG}` != ''", max_results=50000):
        key = run.data.tags[POINT_TAG]
        if key not in out or _RANK.get(run.info.status, 9) < _RANK.get(out[key].info.status, 9):
            out[key] = run
    return out


def decide(run: Any | None, retry_failed: bool) -> tuple[str, str | None]:
    """(action, run id) for a point whose current run is ``run`` (see the module's table)."""
    if run is None:
        return "launch", None
    status, run_id = run.info.status, run.info.run_id
    if status == "FINISHED":
        return "skip", run_id
    if status in ("RUNNING", "SCHEDULED"):
        return "running", run_id
    if status == "FAILED" and not retry_failed:
        return "failed", run_id
    if status == "KILLED" and ckpt.find(run_id, run.data.tags) is not None:  # from any working directory
        return "resume", run_id
    return "restart", run_id


def _parent_key(experiment: str, name: str) -> str:
    return hashlib.sha256(f"{experiment}\n{name}".encode()).hexdigest()[:20]


def parent_run_id(client: Any, experiment: str, name: str) -> str | None:
    """The run id of the sweep ``name``'s parent in ``experiment``, if it was ever opened."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return None
    found = client.search_runs(
        [exp.experiment_id], f"tags.`{SWEEP_TAG}` = '{_parent_key(experiment, name)}'", max_results=1
    )
    return found[0].info.run_id if found else None


def open_parent(
    client: Any, experiment: str, name: str, points: list[Point], grid: dict[str, Any], children: list[str] = ()
) -> str:
    """The sweep's parent run (the same one when the sweep runs again), RUNNING, with the grid
    as ``sweep/grid.yaml``; the points' existing runs (``children``) are nested under it."""
    from toolkit.tracking.store import experiment_id

    eid = experiment_id(client, experiment)
    key = _parent_key(experiment, name)
    found = client.search_runs([eid], f"tags.`{SWEEP_TAG}` = '{key}'", max_results=1)
    if found:
        run_id = found[0].info.run_id
        client.update_run(run_id, status="RUNNING")
    else:
        run_id = client.create_run(eid, run_name=name, tags={SWEEP_TAG: key, "ctk.sweep": experiment}).info.run_id
        for k, v in grid.items():
            client.log_param(run_id, f"grid.{k}"[:250], str(v)[:6000])
    for child in children:
        client.set_tag(child, PARENT_TAG, run_id)
    listing = {"grid": grid, "points": [{"run_name": p.label, "point": p.key, "values": p.values} for p in points]}
    client.log_text(run_id, yaml.safe_dump(listing, sort_keys=False), "sweep/grid.yaml")
    client.log_metric(run_id, "sweep/points", len(points))
    return run_id


def close_parent(client: Any, run_id: str, summary: str, counts: dict[str, int], figure: Any = None) -> None:
    """Log the summary table (and the comparison figure) to the parent and end it: FINISHED
    when every point finished, KILLED when stopped, else FAILED."""
    client.log_text(run_id, summary, "sweep/summary.txt")
    for k, v in counts.items():
        client.log_metric(run_id, f"sweep/{k}", v)
    if figure is not None:
        client.log_figure(run_id, figure, "figures/comparison.png")
    status = "KILLED" if counts.get("killed") else "FAILED" if counts.get("failed") else "FINISHED"
    client.set_terminated(run_id, status, end_time=int(time.time() * 1000))


def summary_table(rows: list[tuple[str, str, str, str, str]]) -> str:
    """Aligned text: point, outcome, run id, seconds, note (error's first line)."""
    from toolkit.studies.tables import aligned

    return aligned([("point", "outcome", "run", "seconds", "note"), *rows])


# -- the points of ``ctk sweep`` and ``ctk reproduce`` --------------------------------------
# ``load(path, overrides, extra)`` validates a recipe (a RecipeError names every problem).


def grid_points(recipe: str, grid: list[list[str]], sets: list[str], experiment: str, load: Any) -> list[Point]:
    """One point per grid combination, named by its swept values (a run name the recipe sets wins)."""
    from toolkit.recipe import point_run_name
    from toolkit.runs import with_run_name
    from toolkit.studies.ui_view import run_note

    out = []
    for values in grid:
        extra = [*values, f"tracking.experiment={experiment}"]
        r = load(recipe, sets, extra)  # validated once; the name is added to the validated recipe
        if not r.common.tracking.run_name:
            r = with_run_name(r, point_run_name(r, values))
        out.append(
            Point(
                r.run_name,
                r,
                values,
                {"ctk.sweep": experiment, "mlflow.note.content": run_note(f"sweep {experiment}", values)},
            )
        )
    return out


def select_rows(table: Any, name: str, rows: list[str]) -> None:
    """Keep only ``rows`` of a paper table; a CtkError (exit status 2) names the rows there are."""
    labels = [row.label for row in table.rows]
    unknown = [r for r in rows if r not in labels]
    if unknown:
        raise CtkError(
            f"--row {unknown[0]!r} is not a row of {name}; expected one of: {', '.join(repr(lab) for lab in labels)}", 2
        )
    table.rows = [row for row in table.rows if row.label in rows]


def table_points(table: Any, name: str, sets: list[str], experiment: str, load: Any) -> list[Point]:
    """One point per row and seed of a paper table."""
    from toolkit.studies.ui_view import run_note

    out = []
    for row in table.rows:
        for seed in table.seeds:
            r = load(str(row.recipe), (*row.overrides, *sets), [f"seed={seed}", f"tracking.experiment={experiment}"])
            note = run_note(f"{name}, row {row.label}", [*row.overrides, *sets, f"seed={seed}"])
            out.append(
                Point(
                    f"{row.label} s{seed}",
                    r,
                    [f"seed={seed}"],
                    {"ctk.table": name, "ctk.row": row.label, "mlflow.note.content": note},
                    budget_group=r.domain,
                )
            )
    return out


def fill_measured(table: Any, points: list[Point], outcomes: list[Any]) -> None:
    """Put each finished (or skipped: finished earlier) point's metrics into its table row,
    with the point's seed beside each value (``table.measured_seeds``: the claims pair by it)."""
    measured = {o.label: o.metrics for o in outcomes}
    for point in points:
        got = table.measured.setdefault(point.tags["ctk.row"], {})
        seeds = table.measured_seeds.setdefault(point.tags["ctk.row"], {})
        for m in table.metrics:
            if m in measured.get(point.label, {}):
                got.setdefault(m, []).append(measured[point.label][m])
                seeds.setdefault(m, []).append(point.recipe.seed)


def _slug(label: str) -> str:
    return re.sub(r"[^\w.\- ]", "_", label.replace(", ", " ").replace("=", "_"))


def log_answer(client: Any, parent: str, comp: Any, directions: dict[str, str] | None = None) -> str | None:
    """The sweep's answer on its parent run, so the first row the UI shows is the comparison:
    per group of settings, ``group/<group>/n`` and ``group/<group>/<metric>`` (its mean) for each
    metric of record; the best group (by the first metric of record) with its mean of every
    evaluation metric as the parent's own metrics (under the metrics' names, to 6 digits: the
    runs table's columns show them in the parent's row) and named in its description
    with the other groups and what else differs. ``directions``: metric -> max | min (the
    domain's ``result_metrics``; max when unknown). Returns the best group's label."""
    from toolkit.studies import stats
    from toolkit.studies.differs import differs_line
    from toolkit.studies.tables import interval, num
    from toolkit.studies.ui_view import NOTE_TAG
    from toolkit.tracking.store import RECORD_TAG

    record = [
        m for g in comp.groups for r in g.runs for m in r.data.tags.get(RECORD_TAG, "").split(",") if m in comp.metrics
    ]
    metrics = list(dict.fromkeys(record)) or comp.metrics[:3]
    if not metrics:
        return None
    first, sign = metrics[0], -1.0 if (directions or {}).get(metrics[0]) == "min" else 1.0
    summaries = {g.label: {m: stats.summarize(g.metric(m)) for m in metrics} for g in comp.groups}
    ranked = sorted(
        (g for g in comp.groups if summaries[g.label][first] is not None),
        key=lambda g: -sign * summaries[g.label][first].mean,
    )
    if not ranked:
        return None
    batch = []
    for g in comp.groups:
        batch.append((f"group/{_slug(g.label)}/n", len(g.runs)))
        batch += [(f"group/{_slug(g.label)}/{m}", s.mean) for m, s in summaries[g.label].items() if s]
    best = ranked[0]
    means = {m: stats.summarize(best.metric(m)) for m in comp.metrics}  # every column of the row
    batch += [(m, s.mean) for m, s in means.items() if s] + [("best/n", len(best.runs))]
    for name, value in batch:
        client.log_metric(parent, name, float(f"{value:.6g}"))
    rows = [
        f"| {g.label} | {len(g.runs)} | "
        + " | ".join(
            "-" if s is None else f"{num(s.mean)} {interval(s.low, s.high)}" for s in summaries[g.label].values()
        )
        + " |"
        for g in ranked
    ]
    s = summaries[best.label][first]
    text = (
        f"**sweep answer**: best {best.label}: {first} {num(s.mean)} (n={s.n}, 95% CI "
        f"{interval(s.low, s.high)}; {'lower' if sign < 0 else 'higher'} is better)\n\n"
        f"| group | n | {' | '.join(metrics)} |\n|{'---|' * (2 + len(metrics))}\n"
        + "\n".join(rows)
        + f"\n\n{differs_line([(g.label, g.runs) for g in comp.groups])}"
    )
    client.set_tag(parent, NOTE_TAG, text)
    return best.label


def log_sweep_answer(comp: Any, experiment: str, name: str, recipe: Any) -> str | None:
    """:func:`log_answer` on the parent of the sweep ``name`` (directions from ``recipe``'s domain);
    the line that says so, or None."""
    from toolkit.tracking.store import client_for

    client = client_for(recipe.tracking.uri)
    parent = parent_run_id(client, experiment, name)
    best = log_answer(client, parent, comp, recipe.domain_class.result_metrics(recipe)) if parent else None
    return f"sweep answer on the parent run {parent}: best {best}" if best else None


def log_sweep_figure(comp: Any, experiment: str) -> None:
    """The comparison plot, logged to the sweep's parent run; nothing when no swept key is numeric."""
    import re
    import tempfile
    from pathlib import Path

    from toolkit.studies.comparison import write_figure

    with tempfile.TemporaryDirectory() as folder:
        try:
            write_figure(comp, str(Path(folder) / (re.sub(r"[^A-Za-z0-9._-]+", "_", experiment) + ".png")))
        except ValueError:
            pass
