"""Snapshots: a round trip restores everything, and a killed run resumes exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from domains.rl.workspace import Workspace
from toolkit import checkpoint as ckpt
from toolkit.training.trainer import RunOptions

from .conftest import RecordingTracker, tiny_recipe


class Killed(Exception):
    pass


CURL_DP = "objective={loss: {name: info_nce}, regularizers: [{name: distance_polarization, weight: 0.1}]}"
# BYOL in place of InfoNCE: a predictor (with BatchNorm statistics) and the key encoder as its target
BYOL = "objective={loss: {name: byol}, predictor: {hidden: [32], batch_norm: true}, target: {momentum: 0.95, schedule: constant}}"


def recipe(*sets: str, objective: str = CURL_DP):
    # action repeat 25: 40 agent steps per 1000-step episode, so three runs stay cheap
    return tiny_recipe(
        "data.action_repeat=25",
        "evaluation.random_baseline=false",
        "budget.steps=2000",
        "budget.checkpoint_every=1000",
        objective,
        *sets,
    )


def test_snapshot_round_trip(cheap_render, tmp_path):
    one_episode = recipe("budget.steps=1000")
    ws = Workspace(one_episode, RecordingTracker(), RunOptions(checkpoint_dir=tmp_path / "a"))
    ws.fit()
    path = ws.save_checkpoint()
    fresh = Workspace(one_episode, RecordingTracker(), RunOptions(checkpoint_dir=tmp_path / "b"))
    fresh.resume(path)
    for (k, v), w in zip(ws.agent.state_dict().items(), fresh.agent.state_dict().values()):
        if torch.is_tensor(v):
            assert torch.equal(v, w), k
    for name, opt in ws.agent.optimizers().items():
        a, b = opt.state_dict()["state"], fresh.agent.optimizers()[name].state_dict()["state"]
        assert a.keys() == b.keys() and all(torch.equal(a[i]["exp_avg"], b[i]["exp_avg"]) for i in a)
    for name in ("frames", "start", "action", "reward", "terminated", "has_next"):
        assert np.array_equal(getattr(ws.buffer, name), getattr(fresh.buffer, name)), name
    assert fresh.buffer.num_frames == ws.buffer.num_frames
    assert fresh.counters == ws.counters and fresh.agent.num_updates == ws.agent.num_updates > 0
    assert fresh.rng.bit_generator.state == ws.rng.bit_generator.state
    assert torch.equal(torch.get_rng_state(), ckpt.load(path)["trainer"]["rng"]["torch"])
    assert str(fresh.env.unwrapped.task_random_state()) == str(ws.env.unwrapped.task_random_state())


@pytest.mark.parametrize("objective", [CURL_DP, BYOL], ids=["curl+dp", "byol"])
def test_killed_run_resumes_as_if_uninterrupted(cheap_render, tmp_path, objective):
    reference = RecordingTracker()
    full = Workspace(recipe(objective=objective), reference, RunOptions(checkpoint_dir=tmp_path / "a"))
    full.fit()
    expected = full.evaluate()

    def kill(ws):
        if ws.counters.env_steps >= 1400:
            raise Killed

    killed = Workspace(
        recipe(objective=objective), RecordingTracker(), RunOptions(checkpoint_dir=tmp_path / "b"), step_hook=kill
    )
    with pytest.raises(Killed):
        killed.fit()
    assert killed.counters.env_steps == 1400
    resumed_tracker = RecordingTracker()
    resumed = Workspace(recipe(objective=objective), resumed_tracker, RunOptions(checkpoint_dir=tmp_path / "b"))
    resumed.resume(ckpt.latest(tmp_path / "b"))
    resumed.fit()
    got = resumed.evaluate()
    assert got == expected
    for (k, v), w in zip(full.agent.named_parameters(), resumed.agent.parameters()):
        assert torch.equal(v, w), k
    for (k, v), w in zip(full.agent.state_dict().items(), resumed.agent.state_dict().values()):
        if torch.is_tensor(v):  # buffers too: the predictor's BatchNorm statistics
            assert torch.equal(v, w), k
    # the snapshot was written at the first episode end after 1000 environment steps
    assert resumed_tracker.series("train/episode_return")[0][0] == 2000
    assert resumed_tracker.series("train/episode_return") == reference.series("train/episode_return")[1:]
    # only the newest buffer folder is kept
    assert len(list((tmp_path / "b").glob("buffer-*"))) == 1


def test_sigterm_mid_episode_checkpoints_and_the_run_finishes_on_resume(cheap_render, tmp_path, default_signals):
    import os
    import signal

    def term(ws):
        if ws.counters.env_steps == 1200:  # mid-episode (episodes are 1000 environment steps)
            os.kill(os.getpid(), signal.SIGTERM)

    ws = Workspace(recipe(), RecordingTracker(), RunOptions(checkpoint_dir=tmp_path), step_hook=term)
    with pytest.raises(KeyboardInterrupt, match="after environment step 1200 of 2000"):
        ws.fit()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler is restored
    saved = ckpt.load(ckpt.latest(tmp_path))["trainer"]
    assert saved["counters"]["env_steps"] == 1200
    resumed = Workspace(recipe(), RecordingTracker(), RunOptions(checkpoint_dir=tmp_path))
    resumed.resume(ckpt.latest(tmp_path))
    assert resumed.agent.num_updates == ws.agent.num_updates
    resumed.fit()
    metrics = resumed.evaluate()
    assert metrics["env_steps"] == 2000
