"""No dead end on a bad file (issue 46 item 6): a few unreadable files train (the limit has a
floor in files), each is named once in one ``[ctk]`` line whatever the number of workers, a
resume may change the loader's keys, and the command a stop prints goes on."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import warnings
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from domains.vision.image_folders import FolderSource
from domains.vision.streaming import (
    BAD_IMAGE_FLOOR,
    CropSpec,
    StreamBatches,
    allowed_bad_images,
    suggested_limit,
)
from tests.conftest import run_here
from toolkit.checkpoint import RecipeMismatch, check_recipe
from toolkit.training.batches import DataStop

ROOT = Path(__file__).resolve().parents[2]


def _break(folder: Path, count: int) -> list[Path]:
    """``count`` train JPEGs of ``folder`` made unreadable (alternately truncated and corrupt)."""
    jpegs = sorted(folder.glob("train/*/*.jpg"))[:count]
    assert len(jpegs) == count
    for i, path in enumerate(jpegs):
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3] if i % 2 else b"\xff\xd8\xff\xe0" + os.urandom(2000))
    return jpegs


def test_the_limit_has_a_floor_in_files_and_zero_means_none():
    assert allowed_bad_images(0.001, 48) == BAD_IMAGE_FLOOR == 10
    assert allowed_bad_images(0.001, 1_281_167) == pytest.approx(1281.167)
    assert allowed_bad_images(0.001, 1_281_167, world_size=8) == pytest.approx(1281.167 / 8)
    assert allowed_bad_images(0.0, 1_281_167) == 0
    assert suggested_limit(11, 50, 0.001) == 0.5  # twice 22% -> the next rung above 44%
    assert suggested_limit(1, 10_000, 0.001) == 0.002  # always above the current limit
    assert suggested_limit(900, 1000, 0.1) == 1.0


def test_a_few_unreadable_files_train_each_named_once_whatever_the_workers(tmp_path, photo_folder, capfd):
    folder = tmp_path / "f"
    shutil.copytree(photo_folder, folder)
    bad = _break(folder, 2)
    split = FolderSource("imagefolder", folder).split("train")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no Python warning with a source line
        for workers in (2, 0):
            loader = StreamBatches(split, CropSpec(16), 8, seed=1, workers=workers, rank=0, world_size=1)
            for epoch in range(2):  # the default limit (0.1%) of 48 images: the floor lets them pass
                loader.set_epoch(epoch)
                assert len(list(loader.iter_from(0))) == 6
            assert loader.bad_total >= 4 and set(loader.bad_paths) == {str(p) for p in bad}
            loader.close()
    err = capfd.readouterr().err
    for path in bad:
        lines = [ln for ln in err.splitlines() if str(path) in ln]
        assert len(lines) == 1 and lines[0].startswith("[ctk] unreadable image replaced by a seeded redraw: ")


def test_a_limit_of_zero_stops_at_the_first_with_the_remedy(tmp_path, photo_folder):
    folder = tmp_path / "f"
    shutil.copytree(photo_folder, folder)
    bad = _break(folder, 1)
    loader = StreamBatches(
        FolderSource("imagefolder", folder).split("train"),
        CropSpec(16),
        8,
        seed=1,
        rank=0,
        world_size=1,
        bad_image_limit=0.0,
    )
    with pytest.raises(DataStop) as err:
        list(loader.iter_from(0))
    assert str(bad[0]) in str(err.value) and err.value.resume_args.startswith(" --set data.loader.bad_image_limit=")


def test_a_resume_may_change_how_the_loader_reads_not_what_it_reads(tmp_path):
    saved = {
        "recipe": {
            "seed": 0,
            "data": {
                "dataset": "imagefolder",
                "loader": {"workers": 2, "prefetch": 2, "bad_image_limit": 0.001, "decode": "cpu"},
            },
        }
    }
    changed = {
        "seed": 0,
        "data": {
            "dataset": "imagefolder",
            "loader": {"workers": 8, "prefetch": 4, "bad_image_limit": 0.5, "decode": "cpu"},
        },
    }
    check_recipe(saved, changed, tmp_path / "c.pt")
    other = {"seed": 0, "data": {"dataset": "imagefolder", "loader": {**changed["data"]["loader"], "decode": "device"}}}
    with pytest.raises(RecipeMismatch, match="data.loader.decode"):
        check_recipe(saved, other, tmp_path / "c.pt")


@pytest.mark.slow
def test_the_command_a_bad_file_stop_prints_goes_on(tmp_path, photo_folder):
    """12 unreadable files among 48: over the floor of 10 in epoch 0, the run checkpoints and
    stops; the command it prints (run as printed) continues the same run to its end."""
    folder = tmp_path / "photos"
    shutil.copytree(photo_folder, folder)
    _break(folder, 12)
    work = tmp_path / "work"
    work.mkdir()
    env = {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "CTK_CHECKPOINTS": None}
    sets = [
        f"data.path={folder}",
        "data.augment.size=16",
        "data.augment.blur_kernel=3",
        "data.loader.workers=0",
        "encoder.width=4",
        "encoder.blocks=2",
        "encoder.head.hidden=[]",
        "encoder.head.out_dim=8",
        "budget.epochs=null",
        "budget.steps=8",
        "budget.batch_size=8",
        "budget.checkpoint_every=2",
        "evaluation.baselines=[]",
        "evaluation.linear.epochs=1",
        "evaluation.diagnostics.enabled=false",
        "evaluation.knn.k=5",
        "evaluation.monitor.train_samples=8",
        "evaluation.monitor.test_samples=8",
        "tracking.log_model=false",
    ]
    args = ["run", str(ROOT / "recipes" / "vision" / "imagefolder.yaml")]
    first = run_here(work, env, *args, *[a for s in sets for a in ("--set", s)])
    assert first.returncode == 1, first.stdout + first.stderr
    printed = re.search(r"continue with: (ctk run --resume \S+( --set \S+)*)", first.stderr)
    assert printed and "--set data.loader.bad_image_limit=" in printed.group(1), first.stderr
    command = shlex.split(printed.group(1))
    again = run_here(work, env, *command[1:])
    assert again.returncode == 0, again.stdout + again.stderr
    run_id = command[3]
    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.metrics["data_bad_images"] > 0
    assert "knn_top1" in run.data.metrics
