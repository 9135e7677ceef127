"""Interrupted and resumed runs end where uninterrupted ones do, in the real domains: a tiny
vision run (bitwise) and a tiny text run (to 1e-6), each stopped at a step between two
checkpoints, as a kill would, and resumed from the newest checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from domains import installed
from toolkit import checkpoint as ckpt
from toolkit.runs import execute, load_recipe
from toolkit.tracking.store import client_for

ROOT = Path(__file__).resolve().parents[2]

VISION = [
    "data.train_subset=512",
    "encoder.arch=convnet",
    "encoder.width=8",
    "encoder.head.hidden=[32]",
    "encoder.head.out_dim=16",
    "budget.epochs=null",
    "budget.minutes=null",
    "budget.steps=16",
    "budget.batch_size=64",
    "budget.checkpoint_every=5",
    "budget.log_every=4",
    "budget.monitor_every=null",
    "budget.eval_every=null",
    "evaluation.probe_train_subset=512",
    "evaluation.test_subset=256",
    "tracking.log_model=false",
    "tracking.experiment=resume-vision",
]
TEXT = [
    "data.max_books=3",
    "data.tokenizer.vocab_size=1500",
    "encoder.embedding_dim=16",
    "encoder.hidden_size=16",
    "budget.epochs=null",
    "budget.steps=12",
    "budget.batch_size=32",
    "budget.checkpoint_every=4",
    "budget.log_every=4",
    "evaluation.tasks=[mr]",
    "evaluation.max_examples=200",
    "evaluation.baselines=[]",
    "evaluation.diagnostics=false",
    "tracking.log_model=false",
    "tracking.experiment=resume-text",
]


class Killed(Exception):
    pass


def _kill_at(step_to_stop):
    def hook(step):
        if step == step_to_stop:
            raise Killed

    return hook


@pytest.fixture
def here(data_workdir):
    return data_workdir


def _stable(metrics):
    return {k: v for k, v in metrics.items() if not k.endswith("_seconds")}


@pytest.mark.parametrize(
    "recipe, sets, kill_at, exact",
    [
        ("recipes/vision/quickstart.yaml", VISION, 12, True),
        ("recipes/text/cpu/qt_austen.yaml", TEXT, 7, False),
    ],
    ids=["vision", "text"],
)
def test_killed_and_resumed_run_ends_like_the_uninterrupted_one(here, recipe, sets, kill_at, exact):
    r = load_recipe(ROOT / recipe, sets, installed.get)
    ref_id, ref = execute(r, progress=False)
    with pytest.raises(Killed):
        execute(r, progress=False, hooks=[_kill_at(kill_at)])
    client = client_for()
    exp = client.get_experiment_by_name(r.tracking.experiment).experiment_id
    killed = client.search_runs([exp], order_by=["attributes.start_time DESC"])[0].info.run_id
    assert killed != ref_id
    run_id, got = execute(r, progress=False, resume=killed)
    assert run_id == killed
    a = ckpt.load(ckpt.latest(ckpt.checkpoint_dir(ref_id)))["trainer"]["encoder"]
    b = ckpt.load(ckpt.latest(ckpt.checkpoint_dir(run_id)))["trainer"]["encoder"]
    if exact:
        assert _stable(got) == _stable(ref)
        assert all(torch.equal(a[k], b[k]) for k in a)
    else:
        assert _stable(got) == pytest.approx(_stable(ref), abs=1e-6)
        tensors = [k for k in a if torch.is_tensor(a[k]) and a[k].is_floating_point()]
        assert tensors and all(torch.allclose(a[k].double(), b[k].double(), atol=1e-6) for k in tensors)
