"""A short 2-process vision run through the CLI (``ctk run --nproc 2``, gloo on CPU): Ctrl-C
stops every rank and marks the run KILLED, ``--resume`` continues it from rank 0's checkpoint
under DDP, and the experiment holds exactly one run whose metrics were logged once (rank 0)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from domains.vision.catalogue import locate
from tests.conftest import default_signals_in_child
from toolkit.tracking.store import client_for

ROOT = Path(__file__).resolve().parents[2]
STEPS_PER_EPOCH = 3072 // 64

RECIPE = {
    "name": "ddp-tiny",
    "domain": "vision",
    "seed": 0,
    "device": "cpu",
    "data": {"dataset": "fashion-mnist", "train_subset": 3072, "augment": {"preset": "grey"}},
    "encoder": {"arch": "convnet", "width": 8, "head": {"hidden": [32], "out_dim": 16}},
    "objective": {"loss": {"name": "nt_xent", "temperature": 0.2}, "views": 2},
    "optimizer": {"name": "adam", "lr": 0.002},
    "schedule": {"name": "constant"},
    "budget": {"epochs": 4, "batch_size": 64, "log_every": 4, "checkpoint_every": 8},
    "evaluation": {"probe_train_subset": 512, "test_subset": 256, "diagnostics": {"samples": 256}},
    "tracking": {"experiment": "ddp-tiny"},
}


def _cli(*args: str, cwd: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "CTK_DATA": str(Path(locate("fashion-mnist")).parent),
    }
    return subprocess.Popen(
        [sys.executable, str(ROOT / "cli.py"), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=default_signals_in_child,
    )


def _runs(cwd: Path):
    os.chdir(cwd)
    client = client_for()
    exp = client.get_experiment_by_name("ddp-tiny")
    return client, client.search_runs([exp.experiment_id]) if exp else []


@pytest.mark.slow
def test_two_process_run_interrupts_resumes_and_logs_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(RECIPE))

    proc = _cli("run", "tiny.yaml", "--nproc", "2", "--quiet", cwd=tmp_path)
    deadline = time.monotonic() + 240
    while not list((tmp_path / "checkpoints").glob("*/step-*.pt")):
        assert proc.poll() is None, f"the run ended before its first checkpoint:\n{proc.stdout.read()}"
        assert time.monotonic() < deadline, "no checkpoint within 240 s"
        time.sleep(0.05)
    # Ctrl-C to the launcher's group (the launcher alone: torchrun runs in a session of its own);
    # the launcher forwards it to torchrun's group, and the agent to both ranks
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out
    assert "KILLED" in out and "--resume" in out, out

    client, runs = _runs(tmp_path)
    assert len(runs) == 1, [r.info.run_id for r in runs]
    killed = runs[0]
    assert killed.info.status == "KILLED"
    logged_before = {m.step for m in client.get_metric_history(killed.info.run_id, "train/loss")}
    assert logged_before and max(logged_before) < 4 * STEPS_PER_EPOCH
    # every rank stopped after the same step, and rank 0 checkpointed it: nothing logged is lost
    from toolkit import checkpoint as ckpt

    saved = ckpt.load(ckpt.latest(tmp_path / "checkpoints" / killed.info.run_id))["trainer"]
    assert f"stopped after step {saved['loop']['step']} of" in out, out
    assert saved["loop"]["step"] >= max(logged_before)

    resumed = _cli("run", "tiny.yaml", "--nproc", "2", "--quiet", "--resume", killed.info.run_id, cwd=tmp_path)
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out
    assert out.count(f"run {killed.info.run_id}") == 1, out  # rank 0 alone reports

    client, runs = _runs(tmp_path)
    assert [r.info.run_id for r in runs] == [killed.info.run_id]
    run = client.get_run(killed.info.run_id)
    assert run.info.status == "FINISHED"
    assert "linear_top1" in run.data.metrics
    history = client.get_metric_history(run.info.run_id, "train/loss")
    steps = [m.step for m in history]
    assert len(steps) == len(set(steps)), "a step was logged twice (more than one rank logging?)"
    # the global batch is 64 images (32 per rank), so an epoch is 3072 / 64 optimisation steps
    assert set(steps) == set(range(4, 4 * STEPS_PER_EPOCH + 1, 4))
