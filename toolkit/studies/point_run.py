"""One point of a sweep, wherever it runs: what a worker needs (:class:`PointSpec`, plain data
that pickles to any machine), what it gives back (:class:`Outcome`) and :func:`run_point`, which
runs, skips or resumes the point and never raises for the point's own failure.

A point that raises is recorded FAILED with its traceback as the artifact
``error/traceback.txt``. A point that is interrupted (Ctrl-C in this process, Ray's cancel in a
worker) ends KILLED, and its run too, whatever it was doing when the interrupt came (creating
its run, training, evaluating, ending it): see :func:`run_point`.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.errors import CtkError
from toolkit.studies.sweeps import POINT_TAG, decide, find_point_runs
from toolkit.tracking.tracker import was_interrupted

__all__ = ["PointSpec", "Outcome", "LaunchError", "run_point", "point_env", "RAY_TASK_TAG"]

RAY_TASK_TAG = "ctk.ray_task"


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
    spec: PointSpec,
    lookup: Callable[[str], Any],
    progress: bool = False,
    task_id: str | None = None,
    where: dict[str, str] | None = None,
) -> Outcome:
    """Run (or skip, or resume) one point; never raises for the point's own failure. ``where``:
    the Ray node it runs on (``toolkit.runs.execute`` records it on the run)."""
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
            recipe, resume=resume, progress=progress, extra_tags=tags, fixed_steps=spec.fixed_steps, where=where
        )
        return Outcome(
            spec.label, "finished", run_id, time.perf_counter() - start, "resumed" if resume else "", metrics
        )
    except (KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - a failing point must not end the sweep
        if was_interrupted(exc):  # Ctrl-C / Ray's cancel, or an error raised while it was handled
            first = (str(exc).splitlines() or [""])[0]
            return Outcome(
                spec.label,
                "killed",
                _point_run_id(client, spec) or run_id,
                time.perf_counter() - start,
                first if isinstance(exc, KeyboardInterrupt) and first else "interrupted",
            )
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


def point_env(uri: str, cpus: float) -> dict[str, str]:
    """The environment every worker gets: the store, the checkpoint and data folders (absolute,
    so any working folder finds them), this checkout on the import path, the thread budget."""
    root = str(Path(__file__).resolve().parents[2])
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
