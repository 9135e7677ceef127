"""Running the points of a sweep: in this process one after another (the default, nothing to
set up), or on Ray, several at once, each in its own worker process.

* ``jobs=1`` and no address: serial, in-process; Ctrl-C stops the running point (checkpointed,
  KILLED) and launches nothing more.
* ``jobs=N>1``: a local Ray instance is started quietly (no dashboard, worker logs kept off the
  terminal) with room for N points; each point runs in a worker with ``cpus`` cores and as many
  torch threads (default cores / N).
* ``address`` (or ``$RAY_ADDRESS``): joins that Ray cluster; every point asks for its
  ``resources`` (``cpus``, ``gpus``), so a GPU cluster packs one point per GPU. Workers on other
  machines cannot write a local SQLite file: such a sweep is refused before anything runs.

The points themselves: :mod:`toolkit.studies.point_run` (what a worker runs, FAILED and KILLED
as recorded); on Ray: :mod:`toolkit.studies.ray_points` (a local instance on loopback, joining a
cluster with one clear error, where each point ran, Ctrl-C). A sweep checks its tracking store
before anything starts (one line naming the URI, exit status 2, as ``ctk run`` does).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolkit.errors import CtkError
from toolkit.studies.point_run import RAY_TASK_TAG, LaunchError, Outcome, PointSpec, point_env, run_point
from toolkit.studies.ray_points import check_answers, collect, ray_loop, ray_task, refuse_local_store
from toolkit.studies.ray_points import start_ray as _start_ray
from toolkit.studies.sweeps import decide, find_point_runs

__all__ = [
    "PointSpec",
    "Outcome",
    "LaunchError",
    "RAY_TASK_TAG",
    "run_point",
    "run_points",
    "refuse_local_store",
    "point_env",
    "run_sweep",
    "sweep_grid",
]


def run_points(
    specs: list[PointSpec],
    lookup: Callable[[str], Any],
    *,
    jobs: int = 1,
    address: str | None = None,
    progress: bool = True,
    echo: Callable[[str], None] = print,
    before: Callable[[Callable[[PointSpec], Outcome]], None] | None = None,
) -> tuple[list[Outcome], bool]:
    """Run the points; returns their outcomes (in completion order) and whether Ctrl-C
    stopped the sweep. ``before(run_alone)`` is called before any point starts, with a function
    that runs one spec where the points run (this process, or a Ray worker with its resources),
    alone, and returns its outcome: the sweep fixes ``budget.minutes``' steps through it.
    With nothing to run (every point finished before), no Ray is started or joined."""
    if not specs:
        return [], False
    address = address or os.environ.get("RAY_ADDRESS") or None
    if jobs <= 1 and not address:
        if before is not None:
            before(lambda spec: run_point(spec, lookup))
        outcomes = []
        for spec in specs:
            echo(f"-> {spec.label}")
            outcome = run_point(spec, lookup, progress=progress)
            outcomes.append(outcome)
            if outcome.outcome == "killed":
                return outcomes, True
        return outcomes, False
    start = time.perf_counter()
    ray, started = _start_ray(jobs, address, max((s.cpus for s in specs), default=1.0), specs[0].env if specs else {})
    try:
        echo(
            f"ray: {'local instance' if started else address} up in {time.perf_counter() - start:.1f} s, "
            f"{int(ray.cluster_resources().get('CPU', 0))} CPUs, {int(ray.cluster_resources().get('GPU', 0))} GPUs"
        )
        if specs:
            refuse_local_store(
                specs[0].env["MLFLOW_TRACKING_URI"], [n["NodeManagerHostname"] for n in ray.nodes() if n.get("Alive")]
            )
        if before is not None:
            alone = ray.remote(max_retries=1, retry_exceptions=False)(ray_task)
            before(
                lambda spec: collect(
                    ray,
                    alone.options(num_cpus=spec.cpus, num_gpus=spec.gpus, name=spec.label).remote(spec, lookup),
                    spec,
                )
            )
        return ray_loop(ray, specs, lookup, jobs if jobs > 1 else len(specs), echo)
    finally:
        if started:
            ray.shutdown()


def data_problems(points: list[Any]) -> list[str]:
    """``Domain.check_data`` of every point (each problem once, with the first point it
    concerns), as ``ctk run`` checks it before creating its run."""
    seen: set[tuple[str, str]] = set()
    out = []
    for p in points:
        recipe = p.recipe
        for path, message in recipe.domain_class(recipe).check_data(recipe):
            if (path, message) not in seen:
                seen.add((path, message))
                out.append(f"  {p.label}: {path}: {message}")
    return out


def run_sweep(
    points: list[Any],
    lookup: Callable[[str], Any],
    *,
    experiment: str,
    parent_name: str,
    grid: dict[str, Any],
    jobs: int = 1,
    address: str | None = None,
    retry_failed: bool = False,
    cpus: float | None = None,
    gpus: float | None = None,
    progress: bool = True,
    echo: Callable[[str], None] = print,
) -> tuple[int, list[Outcome]]:
    """Plan, launch and summarise a sweep of :class:`toolkit.studies.sweeps.Point`; returns (exit code:
    0, 1 when a point failed, 130 when stopped by Ctrl-C; the outcomes). The steps: one point per
    distinct recipe, everything it needs checked before anything is written, each point's action
    decided from the store, the parent run opened, the points to run launched, the table."""
    from toolkit.studies.budget_steps import fix_for_points
    from toolkit.studies.sweeps import open_parent
    from toolkit.tracking.store import client_for

    points = _distinct(points, echo)
    uri, address = _ready(points, address, echo)
    client = client_for(uri)
    existing = find_point_runs(client, experiment)
    plan = _plan(points, existing, retry_failed, experiment, echo)
    parent = open_parent(client, experiment, parent_name, points, grid, [rid for _, _, rid in plan if rid])
    specs = _specs(plan, parent, uri, jobs, cpus, gpus, retry_failed)
    try:
        outcomes, interrupted = run_points(
            specs,
            lookup,
            jobs=jobs,
            address=address,
            progress=progress,
            echo=echo,
            before=lambda alone: fix_for_points(client, parent, points, specs, alone, echo),
        )
    except KeyboardInterrupt:
        outcomes, interrupted = [], True
    except LaunchError:  # the cluster refused us (its token): nothing ran; the parent says so
        client.set_terminated(parent, "KILLED")
        raise
    outcomes = _every_outcome(outcomes, plan, specs, points, existing)
    return _summarise(client, parent, outcomes, interrupted, echo), outcomes


def _distinct(points: list[Any], echo: Callable[[str], None]) -> list[Any]:
    """One point per distinct recipe (a grid that names one recipe twice runs it once, said)."""
    unique: dict[str, Any] = {}
    for p in points:
        if p.key in unique:
            echo(f"note: {p.label} is the same recipe as {unique[p.key].label}; it runs once")
        unique.setdefault(p.key, p)
    return list(unique.values())


def _ready(points: list[Any], address: str | None, echo: Callable[[str], None]) -> tuple[str, str | None]:
    """(tracking URI, Ray address) once the store answers, the head answers and every point's
    data can be read: each a one-line error before anything is written (as ``ctk run``)."""
    from toolkit.tracking.health import check_store
    from toolkit.tracking.store import tracking_uri

    uri = tracking_uri(points[0].recipe.tracking.uri)
    check_store(uri, say=echo)
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address and address != "auto":
        check_answers(address)  # a head that does not answer: said within seconds, nothing written
    missing = data_problems(points)
    if missing:  # before the parent run exists: a sweep that cannot read its data leaves nothing
        raise LaunchError("the data of the sweep cannot be read (nothing was run):\n" + "\n".join(missing))
    return uri, address


def _plan(
    points: list[Any], existing: dict[str, Any], retry_failed: bool, experiment: str, echo: Callable[[str], None]
) -> list[tuple[Any, str, str | None]]:
    """(point, action, earlier run id) for every point (:func:`toolkit.studies.sweeps.decide`),
    and the line that counts them."""
    plan = [(p, *decide(existing.get(p.key), retry_failed)) for p in points]
    count = {
        a: sum(1 for _, act, _ in plan if act == a)
        for a in ("skip", "running", "failed", "resume", "restart", "launch")
    }
    echo(
        f"sweep: {len(points)} points in experiment {experiment!r}: {count['skip']} skipped (finished), "
        f"{count['resume']} resumed, {count['launch'] + count['restart']} launched"
        + (f", {count['failed']} failed earlier (not retried without --retry-failed)" if count["failed"] else "")
        + (f", {count['running']} running elsewhere" if count["running"] else "")
    )
    return plan


def _specs(
    plan: list[tuple[Any, str, str | None]],
    parent: str,
    uri: str,
    jobs: int,
    cpus: float | None,
    gpus: float | None,
    retry_failed: bool,
) -> list[PointSpec]:
    """What each point to launch, resume or restart needs to run anywhere: its recipe, tags, the
    cores and GPUs it asks for (``--cpus`` / ``--gpus``, else its recipe's ``resources``, else
    the cores shared between the jobs) and the environment it runs in."""
    from toolkit.studies.sweeps import PARENT_TAG

    local_cores = os.cpu_count() or 1
    specs = []
    for p, action, _ in plan:
        if action not in ("launch", "resume", "restart"):
            continue
        res = p.recipe.common.resources
        each = cpus or res.cpus or (max(1, local_cores // jobs) if jobs > 1 else 1)
        specs.append(
            PointSpec(
                p.label,
                p.key,
                p.recipe.source,
                p.recipe.raw,
                {**p.tags, PARENT_TAG: parent},
                retry_failed,
                float(each),
                float(res.gpus if gpus is None else gpus),
                point_env(uri, each),
                os.getcwd(),
            )
        )
    return specs


def _every_outcome(
    outcomes: list[Outcome],
    plan: list[tuple[Any, str, str | None]],
    specs: list[PointSpec],
    points: list[Any],
    existing: dict[str, Any],
) -> list[Outcome]:
    """The launched points' outcomes with those of the points not launched (skipped, running
    elsewhere, failed earlier) and of the ones Ctrl-C kept from starting, in the grid's order."""
    done = {o.label for o in outcomes}
    outcomes = outcomes + [
        Outcome(
            p.label,
            {"skip": "skipped"}.get(a, a),
            rid,
            note="failed earlier" if a == "failed" else "",
            metrics=dict(existing[p.key].data.metrics) if a == "skip" else {},
        )
        for p, a, rid in plan
        if a in ("skip", "running", "failed") and p.label not in done
    ]
    outcomes += [Outcome(s.label, "not run") for s in specs if s.label not in {o.label for o in outcomes}]
    order = {p.label: i for i, p in enumerate(points)}
    return sorted(outcomes, key=lambda o: order.get(o.label, len(order)))


def _summarise(
    client: Any, parent: str, outcomes: list[Outcome], interrupted: bool, echo: Callable[[str], None]
) -> int:
    """The table and the counts, printed and kept on the parent run (closed); the exit code."""
    from toolkit.studies.sweeps import close_parent, summary_table

    table = summary_table(
        [(o.label, o.outcome, o.run_id or "-", f"{o.seconds:.0f}" if o.seconds else "-", o.note) for o in outcomes]
    )
    counts = {k: sum(1 for o in outcomes if o.outcome == k) for k in ("finished", "failed", "skipped", "killed")}
    echo(table)
    echo("summary: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    close_parent(client, parent, table, {**counts, "killed": counts["killed"] + (1 if interrupted else 0)})
    return 130 if interrupted else 1 if counts["failed"] else 0


def sweep_grid(
    recipe: str,
    grid: list[str],
    sets: list[str],
    experiment: str | None,
    load: Callable[..., Any],
    lookup: Callable[[str], Any],
    echo: Callable[[str], None],
    note: Callable[[str], None],
    progress: bool = True,
    **launch: Any,
) -> int:
    """``ctk sweep``: one point per combination of ``grid`` (``key=v1,v2``), run as
    :func:`run_sweep` (``launch``: its jobs, address, cpus, gpus, retry_failed), then the
    comparison printed with ``echo`` and its plot logged to the parent run; returns the exit status."""
    import shutil

    from toolkit.recipe import expand_grid
    from toolkit.studies.comparison import comparison_text
    from toolkit.studies.sweeps import grid_points, log_sweep_answer, log_sweep_figure

    try:
        points = expand_grid(grid)
        experiment = experiment or f"sweep-{Path(recipe).stem}"
        todo = grid_points(recipe, points, sets, experiment, load)
        code, _ = run_sweep(
            todo,
            lookup,
            experiment=experiment,
            parent_name=f"sweep-{Path(recipe).stem}",
            grid={"recipe": recipe, "grid": grid, "set": sets},
            progress=progress,
            echo=note,
            **launch,
        )
        try:
            text, comp = comparison_text(
                experiment, todo[0].recipe.tracking.uri, "table", shutil.get_terminal_size().columns
            )
        except ValueError as exc:  # nothing finished yet: said, and the sweep's own status stands
            note(f"(no comparison: {exc})")
            return code
        echo(text)
        log_sweep_figure(comp, experiment)
        answer = log_sweep_answer(comp, experiment, f"sweep-{Path(recipe).stem}", todo[0].recipe)
        if answer:
            note(answer)
        return code
    except KeyboardInterrupt:  # Ctrl-C outside the points (loading, comparing): no traceback
        raise CtkError("stopped (Ctrl-C); run the same command again to go on", 130, label="interrupted") from None
