"""Periodic evaluations on fewer episodes, and the training clock behind time to accuracy:
evaluations are not training time, and a resumed run continues the clock."""

from __future__ import annotations

import math
import time

import pytest

from domains.rl import workspace as ws_mod
from domains.rl.evaluation import episode_seeds
from domains.rl.workspace import Workspace
from toolkit import checkpoint as ckpt
from toolkit.training.trainer import RunOptions

from .conftest import RecordingTracker, tiny_recipe


class Killed(Exception):
    pass


class FigureTracker(RecordingTracker):
    """Keeps the time-to-accuracy figure's lines (label -> (x, y)) before closing it."""

    def log_figure(self, figure, name):
        if name == "time_to_accuracy":
            self.tta = {
                line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
                for line in figure.axes[0].get_lines()
            }
        super().log_figure(figure, name)


def slow_evaluations(monkeypatch, seconds: float) -> list[list[int]]:
    """Every evaluation call takes ``seconds`` more; returns the seed lists it was called with."""
    calls: list[list[int]] = []
    real = ws_mod.run_episodes

    def run_episodes(env, policy, seeds, **kw):
        calls.append(list(seeds))
        time.sleep(seconds)
        return real(env, policy, seeds, **kw)

    monkeypatch.setattr(ws_mod, "run_episodes", run_episodes)
    return calls


def recipe(*sets: str):
    # action repeat 25: 40 agent steps per 1000-step episode
    return tiny_recipe(
        "data.action_repeat=25",
        "evaluation.every_env_steps=500",
        "budget.steps=2000",
        "budget.checkpoint_every=1000",
        *sets,
    )


def test_periodic_evaluations_play_the_first_periodic_episodes_and_the_final_one_all(cheap_render, monkeypatch):
    calls = slow_evaluations(monkeypatch, 0.0)
    tracker = RecordingTracker()
    ws = Workspace(recipe("evaluation.episodes=3", "evaluation.periodic_episodes=1"), tracker)
    ws.fit()
    ws.evaluate()
    seeds = episode_seeds(0, 3)
    # the random baseline on every final seed first, then the policy: 1 episode at 0, 500,
    # 1000, 1500 and all 3 at the end
    assert calls == [seeds, *[seeds[:1]] * 4, seeds]
    assert [s for s, _ in tracker.series("eval/episodes")] == [0, 500, 1000, 1500, 2000]
    assert [v for _, v in tracker.series("eval/episodes")] == [1, 1, 1, 1, 3]
    # None: every evaluation plays `episodes`
    calls.clear()
    none = Workspace(recipe("evaluation.episodes=2", "budget.steps=500"), RecordingTracker())
    none.fit()
    none.evaluate()
    assert calls == [episode_seeds(0, 2)] * 3  # random baseline, at 0, at the end


def test_evaluations_are_not_training_time_and_points_grow_with_it(cheap_render, monkeypatch):
    slow_evaluations(monkeypatch, 0.3)
    tracker = FigureTracker()
    ws = Workspace(recipe(), tracker)
    start = time.perf_counter()
    ws.fit()
    wall = time.perf_counter() - start
    ws.evaluate()
    seconds = [h[3] for h in ws.counters.history]
    assert [h[0] for h in ws.counters.history] == [0, 500, 1000, 1500, 2000]
    assert seconds[0] < 0.05 and all(a < b for a, b in zip(seconds, seconds[1:]))
    # fit() slept 0.3 s in each of 5 evaluation calls (random baseline, 0, 500, 1000, 1500)
    assert ws.counters.train_seconds == seconds[-1] <= wall - 5 * 0.3
    assert ws.counters.train_seconds > 0
    logged = tracker.series("train/wall_seconds")
    assert all(a[1] <= b[1] for a, b in zip(logged, logged[1:]))  # logged at steps in order
    assert {s: v for s, v in logged if s in (0, 500, 1000, 1500, 2000)} == dict(
        zip([0, 500, 1000, 1500, 2000], seconds)
    )
    # the figure: returns against those seconds, the random policy's return as a flat line
    x, y = tracker.tta["policy (mean action)"]
    assert x == seconds and y == [h[1] for h in ws.counters.history]
    assert tracker.tta["random policy"][1] == [ws.counters.random_return[0]] * 2


def test_a_resumed_run_continues_the_clock(cheap_render, tmp_path, monkeypatch):
    slow_evaluations(monkeypatch, 0.0)

    def kill(ws):
        if ws.counters.env_steps >= 1400:
            raise Killed

    killed = Workspace(recipe(), RecordingTracker(), RunOptions(checkpoint_dir=tmp_path), step_hook=kill)
    with pytest.raises(Killed):
        killed.fit()
    saved = ckpt.load(ckpt.latest(tmp_path))["trainer"]["counters"]
    assert saved["env_steps"] == 1000 and saved["train_seconds"] > 0  # written at the episode end,
    assert [h[0] for h in saved["history"]] == [0, 500]  # before the evaluation due at 1000
    resumed = Workspace(recipe(), RecordingTracker(), RunOptions(checkpoint_dir=tmp_path))
    resumed.resume(ckpt.latest(tmp_path))
    assert resumed.counters.train_seconds == saved["train_seconds"]
    time.sleep(0.2)  # time between the processes is not training time
    resumed.fit()
    resumed.evaluate()
    seconds = [h[3] for h in resumed.counters.history]
    assert [h[0] for h in resumed.counters.history] == [0, 500, 1000, 1500, 2000]
    assert seconds[:2] == [h[3] for h in saved["history"]]
    assert all(a < b for a, b in zip(seconds, seconds[1:]))
    # the evaluation at 1000 is the resumed run's first act: the clock went on from the
    # checkpoint's, not from 0 and not counting the pause before the resume
    assert saved["train_seconds"] <= seconds[2] < saved["train_seconds"] + 0.1
    assert seconds[-1] > seconds[2]


def test_history_from_a_checkpoint_without_the_clock_still_loads(cheap_render, tmp_path):
    one_episode = recipe("budget.steps=1000")
    ws = Workspace(one_episode, RecordingTracker(), RunOptions(checkpoint_dir=tmp_path))
    ws.fit()
    state = ws.state_dict()
    state["counters"]["history"] = [h[:3] for h in state["counters"]["history"]]
    del state["counters"]["train_seconds"]
    fresh = Workspace(one_episode, FigureTracker(), RunOptions(checkpoint_dir=tmp_path))
    fresh.load_state_dict(state)
    assert all(len(h) == 4 and math.isnan(h[3]) for h in fresh.counters.history) and fresh.counters.train_seconds == 0.0
    fresh.evaluate()  # the unknown points are left out of the figure
    assert fresh.tracker.tta["policy (mean action)"][0] == [0.0]


class TickingTime:
    """The workspace's clock advancing 10 ms at every reading: a deterministic 'wall time'."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 0.01
        return self.now


def test_budget_minutes_stop_training_and_the_run_equals_its_replay(cheap_render, monkeypatch):
    monkeypatch.setattr(ws_mod, "time", TickingTime())
    timed = RecordingTracker()
    ws = Workspace(tiny_recipe("budget.steps=4000", "budget.minutes=0.01"), timed)  # 0.6 s of ticks
    ws.fit()
    reached = ws.counters.env_steps
    assert 160 < reached < 4000 and ws.counters.train_seconds >= 0.6
    assert timed.params == {"measured.budget_steps_reached": str(reached)}
    timed_metrics = ws.evaluate()

    monkeypatch.setattr(ws_mod, "time", TickingTime())
    replay = Workspace(tiny_recipe(f"budget.steps={reached}"), RecordingTracker())
    replay.fit()
    assert replay.counters.env_steps == reached and replay.agent.num_updates == ws.agent.num_updates
    # the same learning; only the replay buffer, sized from the step budget, is smaller
    learned = lambda m: {k: v for k, v in m.items() if not k.startswith("buffer_")}  # noqa: E731
    assert learned(replay.evaluate()) == learned(timed_metrics) and "return_mean" in timed_metrics


def test_calibration_fixes_the_steps_a_timed_run_reaches(cheap_render, monkeypatch):
    """On a clock that ticks the same at every reading, the steps a sweep's calibration fixes
    (seed phase timed whole, then updates) are the steps a run stopped by budget.minutes reaches
    (to within one agent step at each of the two evaluations the clock skips)."""
    monkeypatch.setattr(ws_mod, "time", TickingTime())
    timed = Workspace(tiny_recipe("budget.steps=4000", "budget.minutes=0.01"), RecordingTracker())
    timed.fit()
    reached = timed.counters.env_steps
    monkeypatch.setattr(ws_mod, "time", TickingTime())
    found = Workspace(tiny_recipe("budget.steps=4000", "budget.minutes=0.01"), RecordingTracker()).calibrate()
    repeat = 8
    assert found["steps"] % repeat == 0 and abs(found["steps"] - reached) <= 2 * repeat, (found, reached)
    assert found["ms_per_step"] == pytest.approx(10.0 / repeat)  # one 10 ms tick per agent step
    assert Workspace(tiny_recipe("budget.steps=4000"), RecordingTracker()).calibrate() is None  # no minutes


def test_a_fixed_step_count_overrides_the_clock_and_equals_its_replay(cheap_render, monkeypatch):
    """A sweep point (RunOptions.fixed_steps) trains exactly the fixed environment steps although
    its minutes would stop it far sooner, logs them as measurements, and learns what a run with
    budget.steps = that count learns."""
    monkeypatch.setattr(ws_mod, "time", TickingTime())
    tracker = RecordingTracker()
    ws = Workspace(
        tiny_recipe("budget.steps=4000", "budget.minutes=0.001"),
        tracker,  # 0.06 s of ticks
        RunOptions(fixed_steps=400, fixed_by="sweep"),
    )
    ws.fit()
    assert ws.counters.env_steps == 400
    assert tracker.params == {"measured.budget_steps_fixed": "400", "measured.budget_steps_by": "sweep"}
    monkeypatch.setattr(ws_mod, "time", TickingTime())
    replay = Workspace(tiny_recipe("budget.steps=400"), RecordingTracker())
    replay.fit()
    assert replay.agent.num_updates == ws.agent.num_updates
    learned = lambda m: {k: v for k, v in m.items() if not k.startswith("buffer_")}  # noqa: E731
    assert learned(replay.evaluate()) == learned(ws.evaluate())
