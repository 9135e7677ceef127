"""kill -9 in the middle of an epoch of a streamed image folder (two decoding workers), then
--resume: the same weights and metrics as the run that was never killed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import cli
from tests.pipeline.test_survival import _client, _final, _toy, _wait_for_checkpoint

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "vision" / "imagefolder.yaml"


def _sets(folder: Path) -> list[str]:
    # 48 images, batch 8: 6 steps an epoch; checkpoints every 2 steps, so step 4 is mid-epoch 0
    return [
        f"data.path={folder}",
        "data.augment.size=24",
        "data.augment.blur_kernel=3",
        "data.loader.workers=2",
        "encoder.width=8",
        "encoder.blocks=3",
        "encoder.head.hidden=[32]",
        "encoder.head.out_dim=16",
        "budget.epochs=null",
        "budget.steps=12",
        "budget.batch_size=8",
        "budget.checkpoint_every=2",
        "budget.log_every=2",
        "evaluation.baselines=[]",
        "evaluation.linear.epochs=1",
        "evaluation.diagnostics.enabled=false",
        "evaluation.knn.k=10",
        "tracking.log_model=false",
        "tracking.experiment=survive-folder",
    ]


@pytest.mark.slow
def test_kill_9_mid_epoch_then_resume_matches_the_uninterrupted_run(tmp_path, photo_folder):
    store = tmp_path / "mlflow.db"
    sets = _sets(photo_folder)
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    out, _ = _toy(ref_dir, recipe=RECIPE, sets=sets, store=store).communicate(timeout=300)
    assert "run " in out, out
    ref_id = out.split("run ", 1)[1].split()[0]
    ref_metrics, ref_weights = _final(ref_dir, ref_id, store)
    assert ref_metrics["data_bad_images"] == 0 and "knn_top1" in ref_metrics and "linear_top5" in ref_metrics
    for kill_at in (4,):
        cwd = tmp_path / f"kill{kill_at}"
        cwd.mkdir()
        proc = _toy(cwd, recipe=RECIPE, sets=sets, store=store)
        _wait_for_checkpoint(cwd, kill_at, proc)
        proc.kill()
        proc.wait()
        run_id = next((cwd / "checkpoints").iterdir()).name
        assert _client(cwd, store).get_run(run_id).info.status == "RUNNING"
        out, _ = _toy(cwd, "--resume", run_id, recipe=RECIPE, sets=sets, store=store).communicate(timeout=300)
        assert f"run {run_id}" in out, out
        metrics, weights = _final(cwd, run_id, store)
        assert metrics == ref_metrics, kill_at
        assert all(torch.equal(weights[k], ref_weights[k]) for k in ref_weights), kill_at
    listing = CliRunner(env={"MLFLOW_TRACKING_URI": f"sqlite:///{store}"}).invoke(cli.main, ["runs", "survive-folder"])
    assert listing.exit_code == 0 and listing.output.count("FINISHED") == 2, listing.output
