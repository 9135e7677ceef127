"""What a set of runs from the store holds: their seeds, which are sweep parents, which metrics
are evaluation results and which settings vary. Read by comparisons and the UI's saved view."""

from __future__ import annotations

from typing import Any

from toolkit.tracking.measured import settings
from toolkit.tracking.store import RECORD_TAG

PARENT_TAG = "mlflow.parentRunId"
_NOT_EVAL = ("train/", "online_", "system/")  # training curves, monitors, system metrics


def run_seed(run: Any) -> str | None:
    return run.data.params.get("seed", run.data.tags.get("ctk.seed"))


def split_parents(runs: list[Any]) -> tuple[list[Any], list[Any]]:
    """(runs that are nobody's parent, sweep parent runs): a parent carries no recipe."""
    parent_ids = {r.data.tags[PARENT_TAG] for r in runs if PARENT_TAG in r.data.tags}
    return ([r for r in runs if r.info.run_id not in parent_ids], [r for r in runs if r.info.run_id in parent_ids])


def eval_metrics(runs: list[Any]) -> list[str]:
    """The evaluation metrics of ``runs`` (training curves and monitors left out): their metrics
    of record first (the ``ctk.record`` tag, in its order), then the others by name."""
    names = {k for r in runs for k in r.data.metrics if not k.startswith(_NOT_EVAL)}
    record = [m for r in runs for m in r.data.tags.get(RECORD_TAG, "").split(",") if m in names]
    first = list(dict.fromkeys(record))
    return first + sorted(names - set(first))


def varying_params(runs: list[Any], seed: bool = False) -> list[str]:
    """The settings (recipe keys as the user set them, :mod:`toolkit.tracking.measured`) whose
    values differ between ``runs``: what a comparison groups by. ``tracking.*`` never counts, nor
    ``seed`` unless asked, nor anything a run measured or ran on (``measured.*``, ``env.*`` and
    their old names)."""
    per_run = [settings(r) for r in runs]
    keys = sorted({k for s in per_run for k in s})
    return [
        k
        for k in keys
        if not k.startswith("tracking.") and (seed or k != "seed") and len({s.get(k) for s in per_run}) > 1
    ]
