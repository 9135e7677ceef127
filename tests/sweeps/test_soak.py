"""Soak (issue 30, item 4): a 16-point toy sweep on local Ray (--jobs 2) whose workers are killed
(SIGKILL) at random moments, several times, and which is run again until it completes. At the
end every point has exactly one run, FINISHED, with the metrics of the same point swept without
interruption, and every checkpoint folder belongs to one of those runs."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from tests.sweeps.conftest import TOY, runs_of
from toolkit.tracking.health import pid_alive

pytest.importorskip("ray")

POINTS = 16
GRID = ["--grid", f"seed={','.join(str(s) for s in range(POINTS))}"]
FAST = [
    "--set",
    "budget.steps=1000",
    "--set",
    "budget.checkpoint_every=50",
    "--set",
    "budget.log_every=50",
    "--quiet",
    "--jobs",
    "2",
]  # a point: about 6 s on a CI core
ROUNDS = 8  # sweeps started at most
KILLS = 6  # workers killed in all, in the first rounds


def _children(client, experiment):
    return [r for r in runs_of(client, experiment) if "ctk.point" in r.data.tags]


def _running_workers(client, sweep) -> list[int]:
    """The live worker pids of the RUNNING points (none while the store is busy)."""
    try:
        running = [r for r in _children(client, "soak") if r.info.status == "RUNNING"]
    except Exception:  # noqa: BLE001 - the store may be busy
        return []
    pids = [int(r.data.tags["ctk.pid"]) for r in running if r.data.tags.get("ctk.pid", "").isdigit()]
    return [p for p in pids if p != sweep.pid and pid_alive(p)]


def _kill_some(sweep, client, rng: random.Random, kills: int) -> int:
    """``kills`` times: once a point runs, wait a random moment (0-3 s: start-up, training,
    checkpointing or evaluation) and SIGKILL the Ray worker of a random RUNNING point; returns
    how many were killed."""
    done = 0
    for _ in range(kills):
        while sweep.poll() is None and not _running_workers(client, sweep):
            time.sleep(0.2)
        time.sleep(rng.uniform(0.0, 3.0))
        pids = _running_workers(client, sweep)
        if sweep.poll() is not None:
            break
        if pids:
            os.kill(rng.choice(pids), signal.SIGKILL)
            done += 1
    return done


@pytest.mark.soak
def test_killed_workers_then_reruns_give_one_uninterrupted_result_per_point(ctk):
    reference = ctk("sweep", TOY, *GRID, *FAST, "--experiment", "ref", timeout=600)
    assert reference.returncode == 0, reference.stderr[-3000:]
    client = ctk.store()
    expected = {r.data.tags["ctk.point"]: r.data.metrics for r in _children(client, "ref")}
    assert len(expected) == POINTS

    rng = random.Random(30)
    kills, codes = 0, []
    for _ in range(ROUNDS):
        proc = ctk.popen("sweep", TOY, *GRID, *FAST, "--experiment", "soak")
        if kills < KILLS:
            kills += _kill_some(proc, client, rng, KILLS - kills)
        _, err = proc.communicate(timeout=600)
        codes.append(proc.returncode)
        if proc.returncode == 0 and f"{POINTS} skipped (finished)" in err:
            assert "Traceback" not in err, err[-3000:]
            break
    else:
        raise AssertionError(f"the sweep did not complete in {ROUNDS} rounds: exit codes {codes}\n{err[-3000:]}")
    assert kills == KILLS, f"only {kills} workers were killed"

    runs = _children(client, "soak")
    by_point: dict[str, list] = {}
    for r in runs:
        by_point.setdefault(r.data.tags["ctk.point"], []).append(r)
    assert set(by_point) == set(expected)  # the point keys ignore the experiment name
    for point, found in by_point.items():
        assert [r.info.status for r in found] == ["FINISHED"], (point, [r.info.status for r in found])
        got, want = found[0].data.metrics, expected[point]
        final = {k: v for k, v in want.items() if not k.startswith(("train/", "online_"))}
        for key, value in final.items():
            assert got.get(key) == pytest.approx(value, rel=1e-6, abs=1e-9), (point, key, got.get(key), value)

    owners = {r.info.run_id for r in runs} | {r.info.run_id for r in _children(client, "ref")}
    folders = [p.name for p in (ctk.folder / "checkpoints").iterdir() if p.is_dir()]
    orphans = sorted(set(folders) - owners)
    assert not orphans, f"checkpoint folders of no live point run: {orphans}"
