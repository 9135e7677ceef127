"""``ctk runs``: the newest runs of a store, with their status, where they ran (host, or the Ray
node of a sweep's point, and the GPU), heartbeat, last checkpoint and the command that resumes them."""

from __future__ import annotations

import time

from toolkit.studies.tables import aligned
from toolkit.tracking.health import mark_dead_runs
from toolkit.tracking.store import find_experiment, no_store, reading_client, tracking_uri


def runs_table(experiment: str | None = None, uri: str | None = None, limit: int = 30) -> str:
    """The newest runs (of ``experiment``, else of every experiment): status, heartbeat age,
    last checkpoint and the command that resumes a KILLED or FAILED one. Dead RUNNING runs are
    marked first. A local store that does not exist is not created (NoSuchExperiment when
    ``experiment`` is named)."""
    client = reading_client(uri)
    if experiment is not None:
        ids = [find_experiment(client, experiment, uri).experiment_id]
    else:
        ids = [e.experiment_id for e in client.search_experiments()] if client is not None else []
    if client is None:
        return no_store(uri)
    if not ids:
        return f"no runs in {tracking_uri(uri)}"
    from toolkit import checkpoint as ckpt  # (torch) only when there are runs whose checkpoints to find

    mark_dead_runs(client, ids)
    runs = client.search_runs(ids, order_by=["attributes.start_time DESC"], max_results=limit)
    now = time.time()
    rows = [["run id", "name", "status", "ran on", "heartbeat", "checkpoint", "resume with"]]
    for run in runs:
        tags = run.data.tags
        beat = tags.get("ctk.heartbeat")
        age = f"{max(0.0, now - float(beat)) / 60:.0f} min ago" if beat else "-"
        step = tags.get("ctk.checkpoint_step", "-")
        on_disk = ckpt.find(run.info.run_id, tags)  # newer than the tag after a kill
        if on_disk is not None and on_disk.stem.startswith("step-"):
            step = str(int(on_disk.stem.split("-", 1)[1]))
        status = run.info.status + (f" ({tags['ctk.killed_reason']})" if "ctk.killed_reason" in tags else "")
        resumable = "ctk.checkpoint" in tags or on_disk is not None
        resume = f"ctk run --resume {run.info.run_id}" if run.info.status in ("KILLED", "FAILED") and resumable else ""
        rows.append(
            [
                run.info.run_id,
                run.info.run_name or "",
                status,
                ran_on(run),
                age,
                f"step {step}" if step != "-" else "-",
                resume,
            ]
        )
    return aligned(rows)


def ran_on(run) -> str:
    """Where a run ran: the Ray node of its latest attempt (a sweep's point on Ray: address/node
    id), else its host; and its GPU when it had one (``-`` when it recorded neither)."""
    tags, params = run.data.tags, run.data.params
    where = tags.get("ctk.ray_node") or params.get("env.ray_node") or tags.get("ctk.host") or "-"
    gpu = params.get("env.gpu", "none")
    return where if gpu in ("none", "") else f"{where}, {gpu}"
