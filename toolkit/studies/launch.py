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

A worker that dies (``kill -9``, a lost node) is retried once (``max_retries=1``); the retry
finds the point's run RUNNING under its own Ray task id, marks it KILLED and resumes it from its
checkpoint. A point that raises is recorded FAILED with its traceback as the artifact
``error/traceback.txt``; the others go on. Ctrl-C stops launching, asks the running points to
checkpoint and stop (Ray's cancel raises the SIGINT that the trainer turns into "stop after this
step"), and they end KILLED; running the sweep again resumes them.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.errors import CtkError
from toolkit.studies.sweeps import POINT_TAG, decide, find_point_runs

__all__ = ["PointSpec", "Outcome", "LaunchError", "run_point", "run_points", "refuse_local_store"]

RAY_TASK_TAG = "ctk.ray_task"
STOP_WAIT_S = 120.0


class LaunchError(CtkError, RuntimeError):
    """The sweep cannot be launched as asked (the message says what to change; exit status 2)."""

    exit_code = 2


@dataclass
class PointSpec:
    """What a worker needs to run a point: plain data that pickles to any machine."""

    label: str
    key: str
    source: str
    raw: dict[str, Any]
    tags: dict[str, str] = field(default_factory=dict)
    retry_failed: bool = False
    cpus: float = 1.0
    gpus: float = 0.0
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    fixed_steps: int | None = None  # budget.minutes' steps, fixed once for the sweep
    calibrate: bool = False  # only fix those steps (toolkit.runs.calibrate): no run


@dataclass
class Outcome:
    label: str
    outcome: str  # finished | failed | killed | skipped | running
    run_id: str | None = None
    seconds: float = 0.0
    note: str = ""
    metrics: dict[str, float] = field(default_factory=dict)


def run_point(
    spec: PointSpec, lookup: Callable[[str], Any], progress: bool = False, task_id: str | None = None
) -> Outcome:
    """Run (or skip, or resume) one point; never raises for the point's own failure."""
    from toolkit.runs import calibrate, execute, load_recipe
    from toolkit.tracking.store import client_for

    start = time.perf_counter()
    client = run_id = None
    try:
        recipe = load_recipe(spec.source, [], lookup, data=spec.raw)
        if spec.calibrate:
            found = calibrate(recipe)
            return Outcome(
                spec.label,
                "calibrated" if found else "not calibrated",
                None,
                time.perf_counter() - start,
                metrics=found or {},
            )
        client = client_for(recipe.tracking.uri)
        run = find_point_runs(client, recipe.tracking.experiment).get(spec.key)
        if run is not None and run.info.status == "RUNNING" and task_id and run.data.tags.get(RAY_TASK_TAG) == task_id:
            client.set_tag(run.info.run_id, "ctk.killed_reason", "its Ray worker died; retried")
            client.set_terminated(run.info.run_id, "KILLED")  # this task's earlier attempt died
            run = client.get_run(run.info.run_id)
        action, run_id = decide(run, spec.retry_failed)
        if action in ("skip", "running", "failed"):
            note = {
                "skip": "",
                "running": "running elsewhere",
                "failed": "failed earlier (--retry-failed runs it again)",
            }[action]
            return Outcome(spec.label, {"skip": "skipped"}.get(action, action), run_id, note=note)
        if action == "restart":
            client.delete_run(run_id)
        tags = {**spec.tags, POINT_TAG: spec.key, **({RAY_TASK_TAG: task_id} if task_id else {})}
        resume = run_id if action == "resume" else None
        run_id, metrics = execute(
            recipe, resume=resume, progress=progress, extra_tags=tags, fixed_steps=spec.fixed_steps
        )
        return Outcome(
            spec.label, "finished", run_id, time.perf_counter() - start, "resumed" if resume else "", metrics
        )
    except KeyboardInterrupt as exc:
        return Outcome(
            spec.label,
            "killed",
            _point_run_id(client, spec) or run_id,
            time.perf_counter() - start,
            str(exc).splitlines()[0] if str(exc) else "interrupted",
        )
    except Exception as exc:  # noqa: BLE001 - a failing point must not end the sweep
        text = traceback.format_exc()
        run_id = _record_failure(client, spec, text, f"{type(exc).__name__}: {exc}")
        first = (str(exc).splitlines() or [""])[0]
        return Outcome(
            spec.label, "failed", run_id, time.perf_counter() - start, f"{type(exc).__name__}: {first}"[:200]
        )


def _point_run_id(client: Any, spec: PointSpec) -> str | None:
    if client is None:
        return None
    try:
        run = find_point_runs(client, spec.raw.get("tracking", {}).get("experiment", "ctk")).get(spec.key)
    except Exception:  # noqa: BLE001 - only for the summary
        return None
    return run.info.run_id if run is not None else None


def _record_failure(client: Any, spec: PointSpec, text: str, error: str) -> str | None:
    """Attach the traceback to the point's FAILED run (created FAILED when the point failed
    before its run existed)."""
    from toolkit.tracking.store import client_for, experiment_id

    try:
        client = client or client_for(spec.env.get("MLFLOW_TRACKING_URI"))
        experiment = spec.raw.get("tracking", {}).get("experiment", "ctk")
        run = find_point_runs(client, experiment).get(spec.key)
        if run is None or run.info.status == "FINISHED":
            eid = experiment_id(client, experiment)
            run = client.create_run(eid, run_name=spec.label, tags={**spec.tags, POINT_TAG: spec.key})
        run_id = run.info.run_id
        client.log_text(run_id, text, "error/traceback.txt")
        client.set_tag(run_id, "error", error[:5000])
        if client.get_run(run_id).info.status != "FAILED":
            client.set_terminated(run_id, "FAILED")
        return run_id
    except Exception as exc:  # noqa: BLE001 - the store itself may be what failed
        print(f"[ctk] could not record the failure of {spec.label}: {exc}", file=sys.stderr, flush=True)
        return None


def _ray_task(spec: PointSpec, lookup: Callable[[str], Any]) -> Outcome:
    """The body of a Ray task: this point's environment, working folder and thread budget."""
    import ray
    import torch

    os.environ.update(spec.env)
    if spec.cwd and Path(spec.cwd).is_dir():
        os.chdir(spec.cwd)
    torch.set_num_threads(max(1, int(spec.cpus)))
    return run_point(spec, lookup, task_id=ray.get_runtime_context().get_task_id())


def refuse_local_store(uri: str, hosts: list[str]) -> None:
    """Raise LaunchError when workers on other hosts would have to write a local file store."""
    local = uri.startswith(("sqlite:", "file:")) or "://" not in uri
    others = sorted({h for h in hosts if h != socket.gethostname()})
    if local and others:
        raise LaunchError(
            f"the tracking store {uri} is a file on this machine, but the Ray cluster has workers on "
            f"{', '.join(others[:3])}{' ...' if len(others) > 3 else ''} that cannot write it. Start a "
            "tracking server that every node reaches (ctk server --host 0.0.0.0 --port 5000 on this "
            "machine, or with --backend-store-uri postgresql://...) and run the sweep with "
            "MLFLOW_TRACKING_URI=http://THIS_HOST:5000"
        )


def _start_ray(jobs: int, address: str | None, cpus: float, env: dict[str, str]) -> tuple[Any, bool]:
    """(ray, whether we started a local instance): quiet, no dashboard."""
    try:
        import ray
    except ImportError:
        raise LaunchError(
            "--jobs > 1 and --address need Ray: pip install 'ctk[sweep]' (or pip install 'ray[default]==2.60.*')"
        ) from None
    runtime_env = {"env_vars": env}
    common = {
        "include_dashboard": False,
        "log_to_driver": False,
        "logging_level": "ERROR",
        "runtime_env": runtime_env,
        "ignore_reinit_error": True,
    }
    if address:
        common.pop("include_dashboard")
        ray.init(address=address, **common)
        return ray, False
    ray.init(num_cpus=max(os.cpu_count() or 1, int(jobs * cpus + 0.999)), **common)
    return ray, True


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
            alone = ray.remote(max_retries=1, retry_exceptions=False)(_ray_task)
            before(
                lambda spec: _collect(
                    ray,
                    alone.options(num_cpus=spec.cpus, num_gpus=spec.gpus, name=spec.label).remote(spec, lookup),
                    spec,
                )
            )
        return _ray_loop(ray, specs, lookup, jobs if jobs > 1 else len(specs), echo)
    finally:
        if started:
            ray.shutdown()


def _ray_loop(
    ray: Any, specs: list[PointSpec], lookup: Any, limit: int, echo: Callable[[str], None]
) -> tuple[list[Outcome], bool]:
    task = ray.remote(max_retries=1, retry_exceptions=False)(_ray_task)
    pending, running, outcomes = list(specs), {}, []
    try:
        while pending or running:
            while pending and len(running) < limit:
                spec = pending.pop(0)
                echo(f"-> {spec.label}")
                ref = task.options(num_cpus=spec.cpus, num_gpus=spec.gpus, name=spec.label).remote(spec, lookup)
                running[ref] = spec
            done, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
            for ref in done:
                outcomes.append(_collect(ray, ref, running.pop(ref)))
                echo(f"<- {outcomes[-1].label}: {outcomes[-1].outcome}")
        return outcomes, False
    except KeyboardInterrupt:
        echo(f"interrupted: launching nothing more; asking {len(running)} running point(s) to checkpoint and stop")
        for ref in running:
            ray.cancel(ref)
        deadline = time.monotonic() + STOP_WAIT_S
        while running and time.monotonic() < deadline:
            done, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
            for ref in done:
                outcomes.append(_collect(ray, ref, running.pop(ref)))
        outcomes += [Outcome(s.label, "killed", note="did not stop in time") for s in running.values()]
        return outcomes, True


def _collect(ray: Any, ref: Any, spec: PointSpec) -> Outcome:
    from ray.exceptions import RayError, TaskCancelledError

    try:
        return ray.get(ref)
    except TaskCancelledError:
        return Outcome(spec.label, "killed", note="stopped (Ctrl-C); resumed by the next run of the sweep")
    except RayError as exc:  # the worker died twice, or its node went away
        first = (str(exc).strip().splitlines() or [""])[0]
        return Outcome(spec.label, "failed", note=f"{type(exc).__name__}: {first}"[:200])


def point_env(uri: str, cpus: float) -> dict[str, str]:
    """The environment every worker gets: the store, the checkpoint and data folders (absolute,
    so any working folder finds them), this checkout on the import path, the thread budget."""
    root = str(Path(__file__).resolve().parent.parent)
    env = {
        "MLFLOW_TRACKING_URI": uri,
        "OMP_NUM_THREADS": str(max(1, int(cpus))),
        "CTK_CHECKPOINTS": str(Path(os.environ.get("CTK_CHECKPOINTS", "checkpoints")).resolve()),
        "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    for name in ("CTK_DATA", "HF_HUB_OFFLINE", "MUJOCO_GL", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


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
    0, 1 when a point failed, 130 when stopped by Ctrl-C; the outcomes)."""
    from toolkit.studies.sweeps import (
        PARENT_TAG,
        close_parent,
        open_parent,
        summary_table,
    )
    from toolkit.tracking.store import client_for, tracking_uri

    unique: dict[str, Any] = {}
    for p in points:
        if p.key in unique:
            echo(f"note: {p.label} is the same recipe as {unique[p.key].label}; it runs once")
        unique.setdefault(p.key, p)
    points = list(unique.values())
    missing = data_problems(points)
    if missing:  # before the parent run exists: a sweep that cannot read its data leaves nothing
        raise LaunchError("the data of the sweep cannot be read (nothing was run):\n" + "\n".join(missing))
    uri = tracking_uri(points[0].recipe.tracking.uri)
    client = client_for(uri)
    existing = find_point_runs(client, experiment)
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
    parent = open_parent(client, experiment, parent_name, points, grid, [rid for _, _, rid in plan if rid])
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
    from toolkit.studies.budget_steps import fix_for_points

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
    done = {o.label for o in outcomes}
    outcomes += [
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
    outcomes.sort(key=lambda o: order.get(o.label, len(order)))
    table = summary_table(
        [(o.label, o.outcome, o.run_id or "-", f"{o.seconds:.0f}" if o.seconds else "-", o.note) for o in outcomes]
    )
    counts = {k: sum(1 for o in outcomes if o.outcome == k) for k in ("finished", "failed", "skipped", "killed")}
    echo(table)
    echo("summary: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    close_parent(client, parent, table, {**counts, "killed": counts["killed"] + (1 if interrupted else 0)})
    code = 130 if interrupted else 1 if counts["failed"] else 0
    return code, outcomes


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
