"""The shared pretraining loop: determinism, kill-and-resume, the non-finite guard, sources."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from toolkit import checkpoint as ckpt
from toolkit.runs import execute, load_recipe
from toolkit.tracking.store import client_for
from toolkit.training.trainer import NonFiniteLoss, StopAfterStep


class Stop(Exception):
    pass


def _stop_at(step_to_stop):
    def hook(step):
        if step == step_to_stop:
            raise Stop(f"simulated kill at step {step}")

    return hook


def _state(run_id):
    """The trainer state of a run's newest checkpoint."""
    return ckpt.load(ckpt.latest(ckpt.checkpoint_dir(run_id)))["trainer"]


def _final_weights(run_id):
    return _state(run_id)["encoder"]


def test_same_seed_same_result(points_domain, points_recipe):
    r = load_recipe(points_recipe, [], points_domain)
    id_a, m_a = execute(r, progress=False)
    id_b, m_b = execute(r, progress=False)
    assert id_a != id_b
    assert m_a == m_b
    for k, v in _final_weights(id_a).items():
        assert torch.equal(v, _final_weights(id_b)[k]), k


def test_kill_and_resume_matches_uninterrupted(points_domain, points_recipe):
    r = load_recipe(points_recipe, [], points_domain)
    ref_id, ref_metrics = execute(r, progress=False)
    with pytest.raises(Stop):
        execute(r, progress=False, hooks=[_stop_at(13)])
    client = client_for()
    runs = client.search_runs(
        [client.get_experiment_by_name("pipeline-test").experiment_id], order_by=["attributes.start_time DESC"]
    )
    killed = runs[0]
    assert killed.info.status == "FAILED"
    assert "simulated kill" in killed.data.tags["error"]
    saved = _state(killed.info.run_id)
    assert saved["loop"]["step"] == 8  # the last periodic checkpoint before the kill
    run_id, metrics = execute(r, progress=False, resume=killed.info.run_id)
    assert run_id == killed.info.run_id
    assert metrics == ref_metrics
    for k, v in _final_weights(ref_id).items():
        assert torch.equal(v, _final_weights(run_id)[k]), k
    resumed = client.get_run(run_id)
    assert resumed.info.status == "FINISHED"
    ref_loss = {m.step: m.value for m in client.get_metric_history(ref_id, "train/loss")}
    got_loss = [(m.step, m.value) for m in client.get_metric_history(run_id, "train/loss")]
    assert {s for s, _ in got_loss} == set(ref_loss) == {4, 8, 12, 16, 20, 24}
    assert len(got_loss) == len(ref_loss)  # step 12, logged before the kill and replayed, once
    for step, value in got_loss:  # logged before the kill and after the resume alike
        assert value == ref_loss[step], step


def _ctrl_c_at(step_to_stop, times=1):
    def hook(step):
        if step == step_to_stop:
            for _ in range(times):
                os.kill(os.getpid(), signal.SIGINT)

    return hook


def _latest_run(client):
    exp = client.get_experiment_by_name("pipeline-test").experiment_id
    return client.search_runs([exp], order_by=["attributes.start_time DESC"])[0]


def test_ctrl_c_checkpoints_the_current_step_and_resume_matches(points_domain, points_recipe, default_signals):
    r = load_recipe(points_recipe, [], points_domain)
    ref_id, ref_metrics = execute(r, progress=False)
    with pytest.raises(KeyboardInterrupt, match="after step 13 of 24") as info:
        execute(r, progress=False, hooks=[_ctrl_c_at(13)])
    client = client_for()
    killed = _latest_run(client)
    assert killed.info.status == "KILLED" and f"--resume {killed.info.run_id}" in str(info.value)
    saved = _state(killed.info.run_id)
    assert saved["loop"]["step"] == 13  # not the periodic checkpoint at 8: no step is lost
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is restored
    run_id, metrics = execute(r, progress=False, resume=killed.info.run_id)
    assert metrics == ref_metrics
    for k, v in _final_weights(ref_id).items():
        assert torch.equal(v, _final_weights(run_id)[k]), k
    steps = [m.step for m in client.get_metric_history(run_id, "train/loss")]
    assert sorted(steps) == [4, 8, 12, 16, 20, 24]


def test_second_ctrl_c_stops_at_once(points_domain, points_recipe, default_signals):
    r = load_recipe(points_recipe, [], points_domain)
    with pytest.raises(KeyboardInterrupt, match="second Ctrl-C"):
        execute(r, progress=False, hooks=[_ctrl_c_at(13, times=2)])
    killed = _latest_run(client_for())
    assert killed.info.status == "KILLED"
    assert _state(killed.info.run_id)["loop"]["step"] == 8


def test_stop_after_step_takes_sigint_even_where_it_was_inherited_ignored(default_signals):
    # a background job inherits SIGINT ignored; the supervisors that stop a trainer (Ray's cancel,
    # torchrun's agent) still send SIGINT, so the trainer's handler goes in, and SIG_IGN comes back
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with StopAfterStep() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_nonfinite_loss_stops_with_message_and_checkpoint(points_domain, points_recipe, workdir):
    # log_every 4, checkpoint_every 8: the NaN of step 10 is found at the log step 12 (the step
    # reads nothing back from the device in between); the good checkpoint of step 8 is named and
    # kept, and no state after the poisoned step is ever written.
    r = load_recipe(points_recipe, ["data.poison_at_step=10"], points_domain)
    with pytest.raises(NonFiniteLoss) as info:
        execute(r, progress=False)
    msg = str(info.value)
    assert "at step 10 " in msg and "nan" in msg.lower() and "found at step 12" in msg, msg
    client = client_for()
    run = client.search_runs([client.get_experiment_by_name("pipeline-test").experiment_id])[0]
    assert run.info.status == "FAILED"
    folder = ckpt.checkpoint_dir(run.info.run_id)
    assert "step-000000008.pt" in msg
    assert sorted(p.name for p in folder.iterdir()) == ["step-000000008.pt"]
    saved = ckpt.load(folder / "step-000000008.pt")["trainer"]
    assert saved["loop"]["step"] == 8
    assert all(torch.isfinite(v).all() for v in saved["encoder"].values())
    assert ckpt.latest(folder).name == "step-000000008.pt"  # what --resume picks: the last good state


# Noise-free views and a vanishing learning rate keep the encoder at its initial weights (to
# ~1e-12), so every key / bank row must be the unit embedding W x_i + b of one instance.
_FROZEN = ["data.noise=0", "optimizer.lr=1e-12"]


def _instance_embeddings(run_id, prefix):
    enc = _state(run_id)["encoder"]
    g = torch.Generator().manual_seed(1234)  # the points domain's data draw
    y = torch.arange(64) % 2
    x = torch.randn(64, 4, generator=g) + 3 * y[:, None].float()
    z = x @ enc[f"{prefix}weight"].T + enc[f"{prefix}bias"]
    return torch.nn.functional.normalize(z, dim=1)


def test_queue_gets_keys_after_the_loss(points_domain, points_recipe):
    r = load_recipe(
        points_recipe,
        [
            "objective.loss={name: moco_infonce, temperature: 0.2}",
            "objective.regularizers=[]",
            "objective.negatives={source: queue, size: 40, momentum: 0.9}",
            "budget.steps=5",
            *_FROZEN,
        ],
        points_domain,
    )
    run_id, _ = execute(r, progress=False)
    state = _state(run_id)["objective"]
    assert state["queue.ptr"].item() == (5 * 16) % 40
    assert state["queue.filled"].item() == 40
    queue = state["queue.queue"]
    assert "key_encoder.module.lin.weight" in state
    emb = _instance_embeddings(run_id, "lin.")
    # every queue row is the key of one instance (to float32 round-off, not 1%)
    err, who = (queue[:, None] - emb[None]).norm(dim=-1).min(dim=1)
    assert float(err.max()) < 1e-5
    # the 16 keys of the last step (rows 24..39, ptr wrapped to 0) are 16 distinct instances
    assert len(set(who[24:].tolist())) == 16


def test_memory_bank_updates_the_batch_slots(points_domain, points_recipe):
    r = load_recipe(
        points_recipe,
        [
            "objective.loss={name: wl_contrastive, temperature: 0.2}",
            "objective.regularizers=[]",
            "objective.views=1",
            "objective.negatives={source: memory_bank, bank_momentum: 0.0}",
            "budget.steps=4",
            *_FROZEN,
        ],
        points_domain,
    )
    run_id, _ = execute(r, progress=False)
    bank = _state(run_id)["objective"]["bank.bank"]
    assert bank.shape == (64, 3)
    # 4 steps of 16 = one epoch: with m = 0 slot i holds exactly instance i's embedding
    torch.testing.assert_close(bank, _instance_embeddings(run_id, "lin."), rtol=0, atol=1e-6)
