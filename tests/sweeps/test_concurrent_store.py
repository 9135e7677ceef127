"""Many processes opening one SQLite store at once (issue 30, item 1): a fresh store is created
and migrated once, an experiment is created once, and every run ends FINISHED.

Without the lock around mlflow's set-up (toolkit.tracking.client_for / experiment_id), four
``ctk run`` started together on a fresh store left one FINISHED run and three tracebacks from
alembic ("Online migration expected to match one row", UNIQUE constraint on experiments).

The default tests fork 8 processes from the test (mlflow already imported, so they start in
milliseconds) that open the store together behind a barrier, so the race is the same every
time; the slow test runs 8 real ``ctk run`` of the toy recipe. Eight processes creating one new
experiment of an existing store: tests/pipeline/test_survival.py
(test_eight_processes_create_one_experiment_at_once).
"""

from __future__ import annotations

import multiprocessing
import traceback
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.sweeps.conftest import ROOT, runs_of

PROCESSES = 8


def _one_run(folder: Path, uri: str, experiment: str, index: int, barrier) -> None:
    """One run through ctk's Tracker, opened when all processes are at the barrier; a failure
    leaves its traceback in ``error-INDEX.txt``."""
    from toolkit.tracking.tracker import Tracker

    try:
        barrier.wait(60)
        with Tracker(experiment=experiment, run_name=f"p{index}", uri=uri) as tracker:
            tracker.log_params({"index": index})
            tracker.log_metrics({"value": float(index)}, step=0)
    except BaseException:  # noqa: BLE001 - reported to the test through the file
        (folder / f"error-{index}.txt").write_text(traceback.format_exc())
        raise SystemExit(1) from None


def _race(folder: Path, uri: str, experiment: str) -> list[str]:
    """The errors of PROCESSES runs started together (forked: this process has never opened
    ``uri``, so each child sets the store up itself)."""
    fork = multiprocessing.get_context("fork")
    barrier = fork.Barrier(PROCESSES)
    procs = [fork.Process(target=_one_run, args=(folder, uri, experiment, i, barrier)) for i in range(PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    errors = [f"process {i}: exit {p.exitcode}" for i, p in enumerate(procs) if p.exitcode != 0]
    return errors + [f.read_text() for f in sorted(folder.glob("error-*.txt"))]


def _check(errors: list[str], client: MlflowClient, experiment: str) -> None:
    assert not errors, "\n".join(errors)[-4000:]
    runs = runs_of(client, experiment)
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * PROCESSES
    assert sorted(r.data.params["index"] for r in runs) == [str(i) for i in range(PROCESSES)]
    named = [e for e in client.search_experiments() if e.name == experiment]
    assert len(named) == 1


def test_processes_starting_together_on_a_fresh_store(ctk):
    db = ctk.folder / "mlflow.db"
    assert not db.exists()
    uri = f"sqlite:///{db}"
    errors = _race(ctk.folder, uri, "race")
    _check(errors, MlflowClient(uri), "race")


@pytest.mark.soak
def test_ctk_run_started_together_on_a_fresh_store(ctk):
    """The issue's reproduction, with 8 processes: every ``ctk run`` finishes."""
    recipe = str(ROOT / "recipes" / "toy" / "ring_mi_optimal.yaml")
    procs = [
        ctk.popen(
            "run", recipe, "--experiment", "race", "--seed", str(i), "--quiet", "--set", "data.ring_mi.num_points=200"
        )
        for i in range(PROCESSES)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        results.append((p.returncode, out, err))
    for code, _, err in results:
        assert code == 0 and "Traceback" not in err, err[-3000:]
    runs = runs_of(ctk.store(), "race")
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * PROCESSES
    assert sorted(int(r.data.params["seed"]) for r in runs) == list(range(PROCESSES))
