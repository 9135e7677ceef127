"""The training step reads nothing back from the device: records and the non-finite check are
read on log steps and before checkpoints only (counted with ``toolkit.training.syncs``)."""

from __future__ import annotations

from collections import Counter

from toolkit.runs import load_recipe
from toolkit.tracking.runlog import RunLog
from toolkit.training.pretrainer import Pretrainer
from toolkit.training.syncs import SyncCounter
from toolkit.training.trainer import RunOptions


class NoTracker(RunLog):
    """Keeps nothing (the declared face's defaults)."""


def _reads_per_step(lookup, recipe_path, sets):
    """{step: Counter of host reads made during that step and its after-step work}."""
    recipe = load_recipe(recipe_path, sets, lookup)
    counter, per_step = SyncCounter(), {}

    def hook(step):
        per_step[step] = Counter(counter.calls)
        counter.calls.clear()

    trainer = Pretrainer(recipe, lookup(recipe.domain)(recipe), NoTracker(), RunOptions(progress=False, hooks=[hook]))
    with counter:
        trainer.fit()
    return per_step


def test_reads_happen_on_log_and_checkpoint_steps_only(points_domain, points_recipe):
    # 64 points in batches of 16: an epoch is 4 steps; log every 4, checkpoint every 8
    sets = ["objective.loss={name: spectral, mu: 1.0}", "budget.steps=12"]
    per_step = _reads_per_step(points_domain, points_recipe, sets)
    assert sorted(per_step) == list(range(1, 13))
    for step, calls in per_step.items():
        expected = Counter()
        if step % 4 == 1:
            expected["tolist"] += 1  # the epoch's order, drawn on the host by the sampler
        if step % 4 == 0:
            expected["__int__"] += 1  # the first non-finite step, read at the log step
            expected["tolist"] += 1  # every record at once
        if step == 8:
            expected["__int__"] += 1  # checked again before the checkpoint
        assert calls == expected, (step, dict(calls))


def test_the_loop_adds_no_reads_to_the_objectives(points_domain, points_recipe):
    """nt_xent + distance polarization: a non-log step reads exactly what one objective
    forward and backward reads on its own (the fused kernel's underflow guard)."""
    import torch

    from toolkit import objective as objective_mod
    from toolkit.losses.base import ContrastiveBatch

    recipe = load_recipe(points_recipe, ["budget.steps=7"], points_domain)
    objective = objective_mod.from_recipe(recipe)
    views = torch.nn.functional.normalize(torch.randn(16, 2, 3, requires_grad=True), dim=-1)
    with SyncCounter() as alone:
        objective(ContrastiveBatch(views=views, step=0)).loss.backward()
    per_step = _reads_per_step(points_domain, points_recipe, ["budget.steps=7"])
    assert sum(alone.calls.values()) > 0
    for step in (2, 3, 6):  # neither a log step nor an epoch's first
        assert per_step[step] == alone.calls, (step, dict(per_step[step]), dict(alone.calls))


def test_moco_queue_enqueues_without_reading_its_pointer():
    """The queue keeps its pointer on the host; a loaded state is read once, then followed."""
    import torch

    from toolkit.samplers.sources import MoCoQueue

    queue = MoCoQueue(10, 3, torch.Generator().manual_seed(0))
    keys = torch.nn.functional.normalize(torch.randn(4, 3), dim=1)
    with SyncCounter() as reads:
        for _ in range(3):
            queue.enqueue(keys)
    assert reads.total == 0, dict(reads.calls)
    assert int(queue.ptr) == 12 % 10 and int(queue.filled) == 10
    restored = MoCoQueue(10, 3, torch.Generator().manual_seed(1))
    restored.load_state_dict(queue.state_dict())
    with SyncCounter() as reads:
        restored.enqueue(keys[:3])
        restored.enqueue(keys[:3])
    assert reads.calls == Counter({"__int__": 2})  # ptr and filled, once after the load
    assert int(restored.ptr) == (2 + 6) % 10
    torch.testing.assert_close(restored.queue[2:8], torch.cat([keys[:3], keys[:3]]))
