"""``ctk runs``: the newest runs of a store, with their status, heartbeat, last checkpoint and
the command that resumes them."""
from __future__ import annotations

import time

from toolkit import checkpoint as ckpt
from toolkit.studies.tables import aligned
from toolkit.tracking.health import mark_dead_runs
from toolkit.tracking.store import client_for


def runs_table(experiment: str | None = None, uri: str | None = None, limit: int = 30) -> str:
    """The newest runs (of ``experiment``, else of every experiment): status, heartbeat age,
    last checkpoint and the command that resumes a KILLED or FAILED one. Dead RUNNING runs are
    marked first."""
    client = client_for(uri)
    if experiment is not None:
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            names = ", ".join(sorted(e.name for e in client.search_experiments())) or "(none)"
            raise ValueError(f"no experiment {experiment!r} in {client.tracking_uri}; expected one of: {names}")
        ids = [exp.experiment_id]
    else:
        ids = [e.experiment_id for e in client.search_experiments()]
    if not ids:
        return f"no runs in {client.tracking_uri}"
    mark_dead_runs(client, ids)
    runs = client.search_runs(ids, order_by=["attributes.start_time DESC"], max_results=limit)
    now = time.time()
    rows = [["run id", "name", "status", "heartbeat", "checkpoint", "resume with"]]
    for run in runs:
        tags = run.data.tags
        beat = tags.get("ctk.heartbeat")
        age = f"{max(0.0, now - float(beat)) / 60:.0f} min ago" if beat else "-"
        step = tags.get("ctk.checkpoint_step", "-")
        on_disk = ckpt.find(run.info.run_id, tags)  # newer than the tag after a kill
        if on_disk is not None and on_disk.stem.startswith("step-"):
            step = str(int(on_disk.stem.split("-", 1)[1]))
        status = run.info.status + (f" ({tags['ctk.killed_reason']})" if "ctk.killed_reason" in tags else "")
        recipe = tags.get("ctk.recipe", "RECIPE")
        resumable = "ctk.checkpoint" in tags or on_disk is not None
        resume = (f"ctk run {recipe} --resume {run.info.run_id}"
                  if run.info.status in ("KILLED", "FAILED") and resumable else "")
        rows.append([run.info.run_id, run.info.run_name or "", status, age, f"step {step}" if step != "-" else "-",
                     resume])
    return aligned(rows)
