"""Interrupted and resumed runs end where uninterrupted ones do, in the real domains: a tiny
vision run (bitwise) and a tiny text run (to 1e-6), each stopped at a step between two
checkpoints, as a kill would, and resumed from the newest checkpoint; and tiny runs of the
non-contrastive family (bitwise, the whole trainer state: encoder, objective, optimizer), whose
cases between them carry every state the family added, with every schedule crossing a boundary
after the checkpoint the resumed run starts from."""

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


# The family on the VISION list's tiny run, shortened to 8 steps (8 per epoch: 512 images, batch
# 64), checkpoints at 3 and 6, killed after step 7: the resumed run takes step indices 6 and 7.
# Every schedule turns inside them: DINO's last layer frozen until step 7 and its teacher
# temperature warmed up over 7 steps (0.875 epochs), SwAV's prototypes frozen until step 7; the
# target networks' momentum is cosine over the 8 steps. SwAV's queue (160 rows) is read from
# step 4, so the rows it holds at the checkpoint make step 6's codes; it and NNCLR's support set
# (256 rows) have wrapped around by then, their write pointers off 0 (384 rows written).
FAMILY_BASE = [s for s in VISION if not s.startswith(("encoder.head.", "budget.steps", "budget.checkpoint_every"))] + [
    "budget.steps=8",
    "budget.checkpoint_every=3",
    "encoder.head.hidden=[32]",
    "evaluation.baselines=[]",
    "evaluation.linear.select_c=false",
    "evaluation.linear.epochs=20",
    "evaluation.diagnostics.enabled=false",
    "tracking.experiment=resume-family",
]
FAMILY_KILL = 7
FAMILY = {
    # target network (EMA, cosine momentum) and the predictor with its batch norm
    "byol": (["encoder.head.out_dim=16", "objective.predictor.hidden=[32]"], ["key_encoder.module.", "predictor.net."]),
    # DINO head with its frozen last layer, the centre, the teacher temperature's warm-up, the teacher
    "dino": (
        [
            "encoder.head.bottleneck=16",
            "encoder.head.out_dim=64",
            "encoder.head.freeze_last_layer_steps=7",
            "objective.loss.warmup_epochs=0.875",
            "objective.loss.teacher_temperature=0.07",  # the recipe keeps 0.04 throughout: make the warm-up move
        ],
        ["key_encoder.module.", "loss.center"],
    ),
    # no EMA, the predictor in a parameter group of its own that the schedule leaves at its base lr
    "simsiam": (["encoder.head.out_dim=16", "objective.predictor.hidden=[8]"], ["predictor.net."]),
    # prototypes (frozen, then trained and renormalised) and the queue
    "swav": (
        [
            "encoder.head.out_dim=16",
            "objective.loss.prototypes=20",
            "objective.loss.freeze_prototypes_steps=7",
            "objective.loss.queue_size=160",
            "objective.loss.queue_start_step=4",
        ],
        ["loss.prototypes.weight", "loss.queue.queue", "loss.queue.ptr"],
    ),
    # the support set (and a predictor)
    "nnclr": (
        ["encoder.head.out_dim=16", "objective.predictor.hidden=[32]", "objective.negatives.size=256"],
        ["support.queue", "support.ptr", "predictor.net."],
    ),
}


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


def _same(a, b):
    """Bitwise equality of nested checkpoint state (tensors, dicts, lists, plain values)."""
    if torch.is_tensor(a):
        return torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _killed_and_resumed(recipe, sets, kill_at):
    """(reference run id, its metrics, resumed run id, its metrics): ``recipe`` run once
    uninterrupted, once killed after step ``kill_at`` and resumed from its newest checkpoint."""
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
    return ref_id, ref, run_id, got


@pytest.mark.parametrize(
    "recipe, sets, kill_at, exact",
    [
        ("recipes/vision/quickstart.yaml", VISION, 12, True),
        ("recipes/text/cpu/qt_austen.yaml", TEXT, 7, False),
    ],
    ids=["vision", "text"],
)
def test_killed_and_resumed_run_ends_like_the_uninterrupted_one(here, recipe, sets, kill_at, exact):
    ref_id, ref, run_id, got = _killed_and_resumed(recipe, sets, kill_at)
    a = ckpt.load(ckpt.latest(ckpt.checkpoint_dir(ref_id)))["trainer"]["encoder"]
    b = ckpt.load(ckpt.latest(ckpt.checkpoint_dir(run_id)))["trainer"]["encoder"]
    if exact:
        assert _stable(got) == _stable(ref)
        assert all(torch.equal(a[k], b[k]) for k in a)
    else:
        assert _stable(got) == pytest.approx(_stable(ref), abs=1e-6)
        tensors = [k for k in a if torch.is_tensor(a[k]) and a[k].is_floating_point()]
        assert tensors and all(torch.allclose(a[k].double(), b[k].double(), atol=1e-6) for k in tensors)


@pytest.mark.slow
@pytest.mark.parametrize("method", list(FAMILY))
def test_family_killed_and_resumed_run_ends_bitwise_like_the_uninterrupted_one(here, method):
    """A family run killed between checkpoints and resumed ends with the uninterrupted run's
    metrics and, bit for bit, its whole trainer state: the encoder (DINO's head), the objective
    (target network, predictor and its batch-norm statistics, DINO's centre, SwAV's prototypes
    and queue, NNCLR's support set), the optimizer's moments, the scheduler and the random states."""
    sets, states = FAMILY[method]
    ref_id, ref, run_id, got = _killed_and_resumed(
        f"recipes/vision/family/{method}.yaml", FAMILY_BASE + sets, FAMILY_KILL
    )
    a = ckpt.load(ckpt.latest(ckpt.checkpoint_dir(ref_id)))["trainer"]
    b = ckpt.load(ckpt.latest(ckpt.checkpoint_dir(run_id)))["trainer"]
    assert a["loop"]["step"] == b["loop"]["step"] == 8
    for prefix in states:  # the case carries the state it is meant to check
        assert any(k.startswith(prefix) for k in a["objective"]), (prefix, list(a["objective"]))
    assert _stable(got) == _stable(ref)
    # Python's random state aside: it differs only when the reference is the first run in the
    # process (something outside training draws from it once), and no training draw reads it
    a["rng"].pop("python"), b["rng"].pop("python")
    for part in ("encoder", "objective", "optimizer", "scheduler", "scaler", "rng"):
        bad = [k for k in a[part] if not _same(a[part][k], b[part].get(k))]
        assert a[part].keys() == b[part].keys() and not bad, (part, bad)
    if method == "simsiam":  # the resumed predictor group kept its base rate; the rest decayed
        rest, predictor = b["optimizer"]["param_groups"]
        assert predictor["fixed_lr"] and predictor["lr"] == predictor["initial_lr"]
        assert rest["lr"] < rest["initial_lr"]
