"""Mixed precision on CPU (autocast honours bf16 there): ``ctk run --precision bf16`` finishes
the quickstart recipe on a tiny budget, and a checkpoint written under bf16 resumes under fp32.

These runs ask for bf16 on purpose, so they declare the CPU bf16-capable (``CTK_CPU_BF16=native``):
on a CPU without native bf16 they then exercise the emulated path (slower, same code) instead of
being refused at load."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import cli
from domains import installed
from toolkit import checkpoint as ckpt
from toolkit.runs import execute, load_recipe
from toolkit.tracking.store import client_for

QUICKSTART = Path(cli.__file__).resolve().parent / "recipes" / "vision" / "quickstart.yaml"
TINY = [
    "data.train_subset=256",
    "budget.minutes=null",
    "budget.steps=6",
    "budget.batch_size=64",
    "budget.log_every=2",
    "budget.monitor_every=null",
    "evaluation.probe_train_subset=256",
    "evaluation.test_subset=128",
    "evaluation.baselines=[]",
    "evaluation.diagnostics.samples=64",
    "evaluation.linear.epochs=5",
    "evaluation.knn.k=10",
    "tracking.experiment=precision",
    "tracking.log_model=false",
]


@pytest.fixture
def workdir(data_workdir, monkeypatch):
    monkeypatch.setenv("CTK_CPU_BF16", "native")
    return data_workdir


def _only_run(client):
    return client.search_runs([client.get_experiment_by_name("precision").experiment_id])[0]


@pytest.mark.slow
def test_quickstart_runs_in_bf16_on_cpu(workdir):
    sets = [a for s in TINY for a in ("--set", s)]
    result = CliRunner().invoke(cli.main, ["run", str(QUICKSTART), "--precision", "bf16", "--quiet", *sets])
    assert result.exit_code == 0, result.output
    run = _only_run(client_for())
    assert run.info.status == "FINISHED"
    assert run.data.params["precision"] == "bf16"
    assert "linear_top1" in run.data.metrics and "knn_top1" in run.data.metrics
    losses = [m.value for m in client_for().get_metric_history(run.info.run_id, "train/loss")]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    saved = ckpt.load(ckpt.latest(ckpt.checkpoint_dir(run.info.run_id)))
    assert saved["recipe"]["precision"] == "bf16"
    # autocast trains fp32 master weights: the state is fp32 whatever the precision
    assert all(v.dtype == torch.float32 for v in saved["trainer"]["encoder"].values() if v.is_floating_point())


class Stop(Exception):
    pass


def _stop_at(n):
    def hook(step):
        if step == n:
            raise Stop(f"simulated kill at step {step}")

    return hook


def test_bf16_checkpoint_resumes_under_fp32(workdir):
    sets = [*TINY, "budget.checkpoint_every=2"]
    bf16 = load_recipe(QUICKSTART, [*sets, "precision=bf16"], installed.get)
    with pytest.raises(Stop):
        execute(bf16, progress=False, hooks=[_stop_at(4)])
    killed = _only_run(client_for())
    folder = ckpt.checkpoint_dir(killed.info.run_id)
    at_four = ckpt.load(folder / "step-000000004.pt")["trainer"]

    fp32 = load_recipe(QUICKSTART, [*sets, "precision=fp32"], installed.get)
    run_id, metrics = execute(fp32, progress=False, resume=killed.info.run_id)
    assert run_id == killed.info.run_id and "linear_top1" in metrics
    final = ckpt.load(ckpt.latest(folder))
    assert final["recipe"]["precision"] == "fp32" and final["trainer"]["loop"]["step"] == 6
    moved = [
        k
        for k, v in at_four["encoder"].items()
        if v.is_floating_point() and not torch.equal(v, final["trainer"]["encoder"][k])
    ]
    assert moved, "the resumed run did not train"
    assert all(torch.isfinite(v).all() for v in final["trainer"]["encoder"].values() if v.is_floating_point())
    steps = [m.step for m in client_for().get_metric_history(run_id, "train/loss")]
    assert sorted(steps) == [2, 4, 6]
