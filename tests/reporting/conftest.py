"""Small mlflow stores made directly with mlflow's client (no training): known metric values
so every statistic can be checked against scipy.stats computed from the same numbers."""

from __future__ import annotations

import numpy as np
import pytest
from mlflow.entities import Metric, Param

from toolkit.tracking.store import client_for, experiment_id

# 3 methods x 4 seeds; "hcl" ran other seeds (no pairing with the baseline: Welch)
STATS = {
    "nt_xent": ({0: 0.70, 1: 0.72, 2: 0.69, 3: 0.73}),
    "dcl": ({0: 0.74, 1: 0.75, 2: 0.73, 3: 0.77}),
    "hcl": ({4: 0.71, 5: 0.78, 6: 0.66, 7: 0.75}),
}
LOSS_KEY = "objective.loss.name"
TEMP_KEY = "objective.loss.temperature"


def log_run(
    client,
    eid: str,
    params: dict,
    metrics: dict,
    history: dict | None = None,
    tags: dict | None = None,
    status: str = "FINISHED",
) -> str:
    run = client.create_run(eid, run_name=params.get("name"), tags={"ctk.domain": "toy", **(tags or {})})
    rid = run.info.run_id
    client.log_batch(
        rid,
        params=[Param(k, str(v)) for k, v in params.items()],
        metrics=[Metric(k, float(v), 0, 0) for k, v in metrics.items()]
        + [Metric(k, float(v), 0, step) for k, vals in (history or {}).items() for step, v in enumerate(vals)],
    )
    client.set_terminated(rid, status)
    return rid


@pytest.fixture
def store(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    return uri


@pytest.fixture
def stats_experiment(store):
    client = client_for(store)
    eid = experiment_id(client, "stats")
    for method, by_seed in STATS.items():
        for seed, top1 in by_seed.items():
            log_run(
                client,
                eid,
                {LOSS_KEY: method, "seed": seed, "data.dataset": "mix"},
                {"linear_top1": top1, "uniformity": -2.0 - top1 * seed / 10},
                {"train/loss": [3.0 - 0.1 * seed, 2.0 - 0.1 * seed, 1.5]},
            )
    # an unfinished run: never part of the statistics
    log_run(client, eid, {LOSS_KEY: "nt_xent", "seed": 9, "data.dataset": "mix"}, {"linear_top1": 0.1}, status="FAILED")
    return store


@pytest.fixture
def sweep_experiment(store):
    """2 methods x 3 temperatures x 2 seeds under one parent run (as a sweep logs them)."""
    client = client_for(store)
    eid = experiment_id(client, "sweep")
    parent = client.create_run(eid, run_name="sweep-parent").info.run_id
    rng = np.random.default_rng(0)
    for method in ("nt_xent", "dcl"):
        for t in (0.1, 0.5, 1.0):
            for seed in (0, 1):
                log_run(
                    client,
                    eid,
                    {LOSS_KEY: method, TEMP_KEY: t, "seed": seed, "data.dataset": "mix"},
                    {"linear_top1": 0.5 + t / 4 + rng.normal(0, 0.01)},
                    tags={"mlflow.parentRunId": parent},
                )
    client.set_terminated(parent, "FINISHED")
    return store, parent
