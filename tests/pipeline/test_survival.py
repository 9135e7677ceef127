"""Runs that survive: kill -9 and SIGTERM then resume, default checkpoints, dead runs marked,
resume refusals that leave the store unchanged, damaged checkpoints, store outages and races."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import cli
from tests.conftest import default_signals_in_child, run_here
from toolkit import checkpoint as ckpt
from toolkit.runs import execute, load_recipe
from toolkit.tracking.store import client_for
from toolkit.tracking.tracker import Tracker

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("CTK_DATA") or ROOT / "data").resolve()
TOY = ROOT / "recipes" / "toy" / "lmcl_three_bars_dp.yaml"
TOY_SETS = ["budget.steps=600", "budget.checkpoint_every=50", "evaluation.histogram=false"]
VISION = ROOT / "recipes" / "vision" / "quickstart.yaml"
VISION_SETS = [
    "data.train_subset=1024",
    "encoder.arch=convnet",
    "encoder.width=8",
    "encoder.head.hidden=[32]",
    "encoder.head.out_dim=16",
    "budget.epochs=null",
    "budget.minutes=null",
    "budget.steps=64",
    "budget.batch_size=64",
    "budget.checkpoint_every=8",
    "budget.log_every=8",
    "budget.monitor_every=null",
    "budget.eval_every=null",
    "evaluation.probe_train_subset=512",
    "evaluation.test_subset=256",
    "tracking.log_model=false",
    "tracking.experiment=survive-vision",
]


def _cli(cwd: Path, *args: str, store: Path | None = None) -> subprocess.Popen:
    """``ctk ARGS`` in ``cwd`` (its checkpoints go there), logging to ``store`` (default
    ``cwd/mlflow.db``)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "CTK_DATA": str(DATA),
        "MLFLOW_TRACKING_URI": f"sqlite:///{store or cwd / 'mlflow.db'}",
    }
    env.pop("CTK_CHECKPOINTS", None)
    return subprocess.Popen(
        [sys.executable, str(ROOT / "cli.py"), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=default_signals_in_child,
    )  # the SIGTERM test's run


def _toy(
    cwd: Path, *extra: str, recipe: Path = TOY, sets: list[str] = TOY_SETS, store: Path | None = None
) -> subprocess.Popen:
    args = [a for s in sets for a in ("--set", s)]
    return _cli(cwd, "run", str(recipe), "--quiet", *args, *extra, store=store)


def _here(cwd: Path, recipe: Path, sets: list[str], store: Path, *extra: str) -> str:
    """``ctk run RECIPE --set SETS EXTRA`` in this process (one thread, as the CLI processes),
    in ``cwd`` (its checkpoints go there), logging to ``store``: its output."""
    res = run_here(
        cwd,
        {"MLFLOW_TRACKING_URI": f"sqlite:///{store}", "CTK_DATA": str(DATA), "CTK_CHECKPOINTS": None},
        "run",
        str(recipe),
        "--quiet",
        *[a for s in sets for a in ("--set", s)],
        *extra,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout + res.stderr


def _reference(tmp_path: Path, recipe: Path, sets: list[str], store: Path) -> tuple[Path, str]:
    """The run never interrupted, made in this process by the same command in ``tmp_path/ref``:
    its folder and run id."""
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    return ref_dir, _here(ref_dir, recipe, sets, store).split("run ", 1)[1].split()[0]


def _wait_for_checkpoint(cwd: Path, step: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not list(cwd.glob(f"checkpoints/*/step-{step:09d}.pt")):
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, f"no checkpoint at step {step}"
        time.sleep(0.02)


def _client(cwd: Path, store: Path | None = None):
    return client_for(f"sqlite:///{store or cwd / 'mlflow.db'}")


def _final(cwd: Path, run_id: str, store: Path | None = None) -> tuple[dict, dict]:
    run = _client(cwd, store).get_run(run_id)
    weights = ckpt.load(ckpt.latest(cwd / "checkpoints" / run_id))["trainer"]["encoder"]
    return {
        k: v for k, v in run.data.metrics.items() if k not in ("train/samples_per_s", "train/wall_seconds")
    }, weights


@pytest.mark.parametrize(
    "recipe, sets, experiment, points",
    [
        (TOY, TOY_SETS, "toy-lmcl", (100, 250, 400)),
        (VISION, VISION_SETS, "survive-vision", (8, 24, 48)),
    ],
    ids=["toy", "vision"],
)
@pytest.mark.slow
def test_kill_9_at_three_points_then_resume_matches_the_uninterrupted_run(tmp_path, recipe, sets, experiment, points):
    """One run killed with SIGKILL at each point in turn (the first kill, then a resumed run
    killed again, twice) and resumed to the end (in this process) equals the run never interrupted
    (run in this process too: the same command, one thread), metric for metric and weight for
    weight."""
    store = tmp_path / "mlflow.db"  # one store for both runs (each in a folder of its own)
    ref_dir, ref_id = _reference(tmp_path, recipe, sets, store)
    ref_metrics, ref_weights = _final(ref_dir, ref_id, store)
    cwd = tmp_path / "killed"
    cwd.mkdir()
    proc, run_id = _toy(cwd, recipe=recipe, sets=sets, store=store), None
    for kill_at in points:
        _wait_for_checkpoint(cwd, kill_at, proc)
        proc.kill()  # SIGKILL: no handler runs, the run is left RUNNING in the store
        proc.wait()
        run_id = run_id or next((cwd / "checkpoints").iterdir()).name
        assert _client(cwd, store).get_run(run_id).info.status == "RUNNING"
        listing = CliRunner(env={"MLFLOW_TRACKING_URI": f"sqlite:///{store}"}).invoke(cli.main, ["runs", experiment])
        assert listing.exit_code == 0, listing.output
        assert "KILLED (process" in listing.output and f"--resume {run_id}" in listing.output, kill_at
        if kill_at != points[-1]:  # a resumed process, to be killed at the next point
            proc = _toy(cwd, "--resume", run_id, recipe=recipe, sets=sets, store=store)
    out = _here(cwd, recipe, sets, store, "--resume", run_id)  # to the end, in this process
    assert f"run {run_id}" in out, out
    assert [p.name for p in (cwd / "checkpoints").iterdir()] == [run_id]  # every resume continued the one run
    metrics, weights = _final(cwd, run_id, store)
    assert _client(cwd, store).get_run(run_id).info.status == "FINISHED"
    assert metrics == ref_metrics
    assert all(torch.equal(weights[k], ref_weights[k]) for k in ref_weights)


@pytest.mark.slow
def test_sigterm_checkpoints_the_step_and_the_run_resumes(tmp_path):
    proc = _toy(tmp_path)
    _wait_for_checkpoint(tmp_path, 100, proc)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "KILLED" in out, out
    run_id = next((tmp_path / "checkpoints").iterdir()).name
    assert _client(tmp_path).get_run(run_id).info.status == "KILLED"
    step = ckpt.load(ckpt.latest(tmp_path / "checkpoints" / run_id))["trainer"]["loop"]["step"]
    assert f"stopped after step {step} of 600" in out
    out = _here(tmp_path, TOY, TOY_SETS, tmp_path / "mlflow.db", "--resume", run_id)  # in this process
    assert _client(tmp_path).get_run(run_id).info.status == "FINISHED", out


def test_checkpoints_are_on_by_default_and_the_last_k_are_kept(points_domain, points_recipe):
    r = load_recipe(points_recipe, ["budget.checkpoint_every=null"], points_domain)
    run_id, _ = execute(r, progress=False)
    kept = sorted(p.name for p in ckpt.checkpoint_dir(run_id).glob("*.pt"))
    assert kept == ["step-000000020.pt", "step-000000024.pt"]  # 4 steps per epoch, keep 2
    off = load_recipe(points_recipe, ["budget.checkpoint_every=0"], points_domain)
    run_off, _ = execute(off, progress=False)
    assert [p.name for p in ckpt.checkpoint_dir(run_off).glob("*.pt")] == ["step-000000024.pt"]  # the final one


def _stored(client, run_id):
    run = client.get_run(run_id)
    history = {k: [(m.step, m.value) for m in client.get_metric_history(run_id, k)] for k in run.data.metrics}
    return run.info.status, run.info.end_time, run.data.tags, history


def test_resume_refusals_leave_the_stored_run_unchanged(points_domain, points_recipe):
    r = load_recipe(points_recipe, [], points_domain)
    run_id, _ = execute(r, progress=False)
    client = client_for()
    before = _stored(client, run_id)
    runner = CliRunner()
    cases = [
        ([], "FINISHED"),
        (["--set", "objective.loss.temperature=0.3"], "objective.loss.temperature"),
        (["--set", "budget.steps=40"], "--extend"),
    ]
    for extra, message in cases:
        result = runner.invoke(cli.main, ["run", str(points_recipe), "--resume", run_id, "--quiet", *extra])
        assert result.exit_code == 2, result.output
        assert message in result.output and "Traceback" not in result.output
        assert _stored(client, run_id) == before
    result = runner.invoke(
        cli.main, ["run", str(points_recipe), "--resume", run_id, "--quiet", "--set", "budget.steps=40", "--extend"]
    )
    assert result.exit_code == 0, result.output
    assert ckpt.load(ckpt.latest(ckpt.checkpoint_dir(run_id)))["trainer"]["loop"]["step"] == 40


def _killed_after(step: int, r) -> str:
    """Run ``r`` in this process until a simulated Ctrl-C after ``step``; the killed run's id."""

    def stop(at):
        if at == step:
            raise KeyboardInterrupt("simulated")

    with pytest.raises(KeyboardInterrupt):
        execute(r, progress=False, hooks=[stop])
    client = client_for()
    return client.search_runs(
        [client.get_experiment_by_name(r.tracking.experiment).experiment_id], order_by=["attributes.start_time DESC"]
    )[0].info.run_id


def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(points_domain, points_recipe, capsys):
    r = load_recipe(points_recipe, [], points_domain)
    ref_id, ref_metrics = execute(r, progress=False)
    killed = _killed_after(18, r)
    newest = ckpt.latest(ckpt.checkpoint_dir(killed))
    assert newest.name == "step-000000016.pt"
    newest.write_bytes(newest.read_bytes()[:200])  # truncated, e.g. by a full disk
    run_id, metrics = execute(r, progress=False, resume=killed)
    assert "step-000000016.pt" in capsys.readouterr().err  # named, then skipped
    assert metrics == ref_metrics


def test_a_killed_run_is_listed_and_resumed_from_another_working_directory(
    points_domain, points_recipe, workdir, monkeypatch
):
    """The checkpoint folder is recorded on the run before the first checkpoint: a kill right
    after a checkpoint file appears (before its ``ctk.checkpoint`` tag) still lists the step and
    the resume command, and ``--resume RUN_ID`` finds the folder from elsewhere."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'mlflow.db'}")
    r = load_recipe(points_recipe, [], points_domain)
    ref_id, ref_metrics = execute(r, progress=False)
    with monkeypatch.context() as m:
        m.setattr(Tracker, "note_checkpoint", lambda self, path, step: None)  # killed before the tag
        killed = _killed_after(18, r)
    assert "ctk.checkpoint" not in client_for().get_run(killed).data.tags
    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    listing = CliRunner().invoke(cli.main, ["runs", "pipeline-test"])
    assert listing.exit_code == 0, listing.output
    row = next(line for line in listing.output.splitlines() if line.startswith(killed))
    assert "step 16" in row and f"--resume {killed}" in row and "-0 min" not in row
    run_id, metrics = execute(r, progress=False, resume=killed)
    assert run_id == killed and metrics == ref_metrics
    assert ckpt.latest(ckpt.checkpoint_dir(killed)) is not None  # new checkpoints: this directory's folder


def test_a_store_outage_during_a_run_loses_no_metric(points_domain, points_recipe, monkeypatch, capsys):
    from mlflow.tracking import MlflowClient

    real = MlflowClient.log_batch
    calls = {"n": 0}

    def flaky(self, run_id, metrics=(), params=(), tags=(), **kw):
        calls["n"] += 1
        if metrics and 3 <= calls["n"] <= 8:
            raise ConnectionError("connection refused (simulated outage)")
        return real(self, run_id, metrics=metrics, params=params, tags=tags, **kw)

    monkeypatch.setattr(MlflowClient, "log_batch", flaky)
    r = load_recipe(points_recipe, [], points_domain)
    run_id, _ = execute(r, progress=False)
    err = capsys.readouterr().err
    assert err.count("did not take the metrics") == 1 and "answers again" in err
    steps = [m.step for m in client_for().get_metric_history(run_id, "train/loss")]
    assert sorted(steps) == [4, 8, 12, 16, 20, 24]


def test_an_unreachable_store_is_one_line_within_seconds(points_domain, points_recipe):
    start = time.monotonic()
    result = CliRunner(env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}).invoke(
        cli.main, ["run", str(points_recipe), "--quiet"]
    )
    assert time.monotonic() - start < 15
    assert result.exit_code == 2 and "did not answer" in result.output
    assert len(result.output.strip().splitlines()) == 1
    bad = CliRunner(env={"MLFLOW_TRACKING_URI": "nonsense://x"}).invoke(cli.main, ["run", str(points_recipe)])
    assert bad.exit_code == 2 and "unknown scheme" in bad.output


_RACE = """
import sys
from toolkit.tracking.tracker import Tracker
with Tracker("race", "r" + sys.argv[1], sys.argv[2]) as t:
    t.log_metrics({"x": float(sys.argv[1])}, 0)
"""


@pytest.mark.slow
def test_eight_processes_create_one_experiment_at_once(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with Tracker("warm-up", "w", uri):  # the schema exists; the race is on the experiment
        pass
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACE, str(i), uri],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(8)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, outs
    client = client_for(uri)
    runs = client.search_runs([client.get_experiment_by_name("race").experiment_id])
    assert sorted(r.data.metrics["x"] for r in runs) == [float(i) for i in range(8)]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(folder: Path, port: int) -> subprocess.Popen:
    import urllib.request

    from toolkit.tracking.servers import mlflow_command, server_env

    cmd = mlflow_command(
        "server",
        f"sqlite:///{folder / 'server.db'}",
        host="127.0.0.1",
        port=port,
        artifacts=str(folder / "art"),
        basic_auth=False,
        serve_artifacts=True,
        workers=1,
    )
    proc = subprocess.Popen(
        cmd, env=server_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )  # as ctk server starts it
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return proc
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "mlflow server did not start"
            time.sleep(0.2)


def _stop_server(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


@pytest.mark.slow
def test_a_real_server_stopped_mid_run_and_restarted_gets_every_metric(
    points_domain, points_recipe, monkeypatch, capsys
):
    port = _free_port()
    folder = points_recipe.parent
    uri = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    server = {"proc": _start_server(folder, port)}

    def outage(step):
        if step == 6:
            _stop_server(server["proc"])
        if step == 15:
            server["proc"] = _start_server(folder, port)

    try:
        r = load_recipe(points_recipe, ["budget.checkpoint_every=0"], points_domain)
        run_id, _ = execute(r, progress=False, hooks=[outage])
        client = client_for(uri)
        steps = [m.step for m in client.get_metric_history(run_id, "train/loss")]
        assert sorted(steps) == [4, 8, 12, 16, 20, 24]  # 8 and 12 were logged while it was down
        assert client.get_run(run_id).info.status == "FINISHED"
        err = capsys.readouterr().err
        assert "did not take the metrics" in err and "answers again" in err
    finally:
        _stop_server(server["proc"])
