"""ctk sweep on Ray and in-process: one child run per point under one parent, nothing run twice,
failures isolated, Ctrl-C resumable (issue 17)."""

import re
from types import SimpleNamespace

import pytest

from tests.sweeps.conftest import TOY, Ctk, runs_of, stop, wait_for
from toolkit.studies.launch import LaunchError, refuse_local_store
from toolkit.studies.sweeps import decide

pytest.importorskip("ray")
FAST = ["--set", "budget.steps=40", "--set", "budget.log_every=20", "--quiet"]


def _split(runs):
    parents = [r for r in runs if "ctk.sweep_parent" in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return parents, children


@pytest.mark.slow
def test_four_points_on_local_ray_then_nothing(ctk):
    args = [
        "sweep",
        TOY,
        "--grid",
        "objective.loss.temperature=0.5,1.0",
        "--grid",
        "seed=0,1",
        *FAST,
        "--jobs",
        "2",
        "--experiment",
        "grid",
    ]
    first = ctk(*args)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "0 skipped (finished), 0 resumed, 4 launched" in first.stderr
    runs = runs_of(ctk.store(), "grid")
    parents, children = _split(runs)
    assert len(parents) == 1 and len(children) == 4 and len(runs) == 5
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    assert all(c.info.status == "FINISHED" for c in children)
    assert sorted(c.info.run_name for c in children) == [
        "nt_xent-t0.5-s0",
        "nt_xent-t0.5-s1",
        "nt_xent-t1.0-s0",
        "nt_xent-t1.0-s1",
    ]
    assert len({c.data.tags["ctk.point"] for c in children}) == 4
    assert len({c.data.tags["ctk.pid"] for c in children}) >= 2  # worker processes, not the driver
    assert all(c.data.tags.get("ctk.ray_task") for c in children)
    # where each point ran (issue 48): the local instance's one node, on loopback
    assert {c.data.params["env.ray_node_address"] for c in children} == {"127.0.0.1"}
    assert len({c.data.params["env.ray_node_id"] for c in children}) == 1
    assert all(c.data.tags["ctk.ray_node"] == c.data.params["env.ray_node"] for c in children)
    listing = ctk.here("runs", "grid").stdout
    assert "ran on" in listing and listing.count("127.0.0.1/") == 4, listing
    client = ctk.store()
    summary = client.download_artifacts(parents[0].info.run_id, "sweep/summary.txt", str(ctk.folder))
    with open(summary) as fh:
        assert fh.read().count("finished") == 4
    assert client.get_run(parents[0].info.run_id).info.status == "FINISHED"

    again = ctk.here(*args)  # in this process: the rerun only has to find the four points finished
    assert again.returncode == 0, again.stderr[-3000:]
    assert "4 skipped (finished), 0 resumed, 0 launched" in again.stderr
    assert "ray:" in first.stderr and "ray:" not in again.stderr  # nothing to run: no Ray started
    assert len(runs_of(ctk.store(), "grid")) == 5  # nothing new


def test_nothing_to_run_starts_no_ray(monkeypatch):
    from toolkit.studies import launch

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray was started for a sweep with nothing to run")

    monkeypatch.setattr(launch, "_start_ray", no_ray)
    asked = []
    assert launch.run_points([], lambda name: None, jobs=2, before=asked.append, echo=asked.append) == ([], False)
    assert launch.run_points([], lambda name: None, jobs=2, address="auto", echo=asked.append) == ([], False)
    assert asked == []


@pytest.mark.slow
def test_failing_point_is_isolated_and_retried_only_when_asked(ctk):
    args = ["sweep", TOY, "--grid", "optimizer.lr=0.001,1e38", *FAST, "--experiment", "bad"]
    res = ctk(*args)
    assert res.returncode == 1, res.stderr[-3000:]
    assert re.search(r"1 finished, 1 failed", res.stderr)
    client = ctk.store()
    _, children = _split(runs_of(client, "bad"))
    by_lr = {c.data.params["optimizer.lr"]: c for c in children if "optimizer.lr" in c.data.params}
    assert by_lr["0.001"].info.status == "FINISHED" and by_lr["1e+38"].info.status == "FAILED"
    path = client.download_artifacts(by_lr["1e+38"].info.run_id, "error/traceback.txt", str(ctk.folder))
    with open(path) as fh:
        text = fh.read()
    # the cause, as the run met it: the optimizer's overflow, or (fused optimizers take any lr) the
    # non-finite loss it led to
    assert text.startswith("Traceback") and re.search(r"overflow|NonFiniteLoss: the loss is (nan|-?inf)", text), text

    kept = ctk.here(*args)  # the reruns in this process (the first run was the real command line)
    assert kept.returncode == 1 and "0 launched, 1 failed earlier" in kept.stderr
    retried = ctk.here(*args, "--retry-failed")
    assert retried.returncode == 1 and "1 skipped (finished), 0 resumed, 1 launched" in retried.stderr
    _, children = _split(runs_of(ctk.store(), "bad"))
    assert len(children) == 2  # the retried point replaced its failed run


@pytest.mark.slow
def test_sigint_then_rerun_gives_one_finished_run_per_point(ctk):
    args = [
        "sweep",
        TOY,
        "--grid",
        "seed=0,1,2,3",
        "--set",
        "budget.steps=400",
        "--set",
        "budget.checkpoint_every=20",
        "--set",
        "budget.log_every=20",
        "--quiet",
        "--jobs",
        "2",
        "--experiment",
        "stop",
    ]
    proc = ctk.popen(*args)
    client = ctk.store()

    def two_running_with_checkpoint():
        assert proc.poll() is None, f"the sweep ended before it was interrupted:\n{proc.communicate()[1][-3000:]}"
        try:
            runs = [r for r in runs_of(client, "stop") if "ctk.point" in r.data.tags]
        except Exception:  # noqa: BLE001 - the store is still being created
            return False
        return len([r for r in runs if r.info.status == "RUNNING" and "ctk.checkpoint" in r.data.tags]) >= 2

    wait_for(two_running_with_checkpoint, timeout=180)
    _, err = stop(proc, timeout=180)  # the sweep waits up to STOP_WAIT_S (120 s) for its points
    assert proc.returncode == 130, err[-3000:]
    killed = [r for r in runs_of(client, "stop") if r.info.status == "KILLED" and "ctk.point" in r.data.tags]
    assert killed, "the interrupted points end KILLED"

    res = ctk.here(*args)  # the rerun in this process, Ray started from here as the sweep starts it
    assert res.returncode == 0, res.stderr[-3000:]
    assert re.search(r"[1-9] resumed", res.stderr)
    _, children = _split(runs_of(ctk.store(), "stop"))
    assert sorted(c.data.tags["ctk.seed"] for c in children) == ["0", "1", "2", "3"]
    assert all(c.info.status == "FINISHED" for c in children)


@pytest.mark.slow
def test_killed_ray_worker_is_retried_from_its_checkpoint(ctk):
    import os
    import signal

    args = [
        "sweep",
        TOY,
        "--grid",
        "seed=0,1",
        "--set",
        "budget.steps=500",
        "--set",
        "budget.checkpoint_every=50",
        "--quiet",
        "--jobs",
        "2",
        "--experiment",
        "k9",
    ]
    proc = ctk.popen(*args)
    client = ctk.store()

    def checkpointed_run():
        try:
            runs = runs_of(client, "k9")
        except Exception:  # noqa: BLE001 - the store is still being created
            return None
        return next((r for r in runs if r.info.status == "RUNNING" and "ctk.checkpoint" in r.data.tags), None)

    victim = wait_for(checkpointed_run, timeout=90)
    os.kill(int(victim.data.tags["ctk.pid"]), signal.SIGKILL)  # the Ray worker running that point
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    assert re.search(rf"{victim.info.run_name}\s+finished\s+{victim.info.run_id}.*resumed", err)
    _, children = _split(runs_of(client, "k9"))
    assert len(children) == 2 and all(c.info.status == "FINISHED" for c in children)


@pytest.mark.slow
def test_a_killed_point_resumes_when_the_sweep_runs_again_from_another_directory(ctk):
    """The point's run records where its checkpoints are: the sweep run again from another
    working directory, on the same store, resumes the point in the same run (its checkpoint is
    found through the run) instead of deleting the run and training the point from scratch."""
    ctk.env["MLFLOW_TRACKING_URI"] = f"sqlite:///{ctk.folder / 'mlflow.db'}"
    args = [
        "sweep",
        TOY,
        "--grid",
        "seed=0",
        "--set",
        "budget.steps=600",
        "--set",
        "budget.checkpoint_every=20",
        "--set",
        "budget.log_every=20",
        "--quiet",
        "--experiment",
        "moved",
    ]
    client = ctk.store()
    assert runs_of(client, "moved") == []  # the store's tables exist before the sweep opens it
    proc = ctk.popen(*args)  # serial: the point runs in the sweep's process

    def checkpointed_run():
        assert proc.poll() is None, f"the sweep ended before it was interrupted:\n{proc.communicate()[1][-3000:]}"
        try:
            runs = runs_of(client, "moved")
        except Exception:  # noqa: BLE001 - the store is still being created
            return None
        return next((r for r in runs if r.info.status == "RUNNING" and "ctk.checkpoint" in r.data.tags), None)

    victim = wait_for(checkpointed_run, timeout=120)
    _, err = stop(proc, timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert client.get_run(victim.info.run_id).info.status == "KILLED"
    assert list((ctk.folder / "checkpoints" / victim.info.run_id).glob("step-*.pt"))

    elsewhere = ctk.folder / "elsewhere"
    elsewhere.mkdir()
    res = Ctk(elsewhere, ctk.env).here(*args)  # in this process: the point's run finds its checkpoint
    assert res.returncode == 0, res.stderr[-3000:]
    assert "0 skipped (finished), 1 resumed, 0 launched" in res.stderr
    assert re.search(rf"{victim.info.run_name}\s+finished\s+{victim.info.run_id}.*resumed", res.stderr)
    from mlflow.entities import ViewType

    exp = client.get_experiment_by_name("moved")
    points = [
        r for r in client.search_runs([exp.experiment_id], run_view_type=ViewType.ALL) if "ctk.point" in r.data.tags
    ]
    assert [(r.info.run_id, r.info.status, r.info.lifecycle_stage) for r in points] == [
        (victim.info.run_id, "FINISHED", "active")
    ]  # kept, not deleted and trained again
    steps = [m.step for m in client.get_metric_history(victim.info.run_id, "train/loss")]
    assert sorted(steps) == list(range(20, 601, 20))  # each step logged once: continued, not retrained
    assert list((elsewhere / "checkpoints" / victim.info.run_id).glob("step-000000600.pt"))


def _run(status, run_id="r1"):
    return SimpleNamespace(info=SimpleNamespace(status=status, run_id=run_id), data=SimpleNamespace(tags={}))


def test_decide_follows_the_table(tmp_path, monkeypatch):
    monkeypatch.setenv("CTK_CHECKPOINTS", str(tmp_path))
    assert decide(None, False) == ("launch", None)
    assert decide(_run("FINISHED"), True) == ("skip", "r1")
    assert decide(_run("RUNNING"), False) == ("running", "r1")
    assert decide(_run("FAILED"), False) == ("failed", "r1")
    assert decide(_run("FAILED"), True) == ("restart", "r1")
    assert decide(_run("KILLED"), False) == ("restart", "r1")  # killed before its first checkpoint
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "step-000000020.pt").write_bytes(b"x")
    assert decide(_run("KILLED"), False) == ("resume", "r1")
    moved = _run("KILLED", "r2")  # its checkpoints are where the run recorded them, not here
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "step-000000020.pt").write_bytes(b"x")
    assert decide(moved, False) == ("restart", "r2")
    moved.data.tags["ctk.checkpoint_dir"] = str(tmp_path / "elsewhere")
    assert decide(moved, False) == ("resume", "r2")


def test_remote_cluster_refuses_a_local_store():
    import socket

    here = socket.gethostname()
    refuse_local_store("sqlite:////tmp/mlflow.db", [here])  # one machine: fine
    refuse_local_store("http://head:5000", [here, "gpu-node-7"])
    with pytest.raises(LaunchError, match="ctk server"):
        refuse_local_store("sqlite:////tmp/mlflow.db", [here, "gpu-node-7"])
