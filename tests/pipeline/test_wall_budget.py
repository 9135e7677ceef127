"""``budget.minutes``: the run's length is fixed from timed steps that leave no trace, so the
run equals one given that many steps; the length is logged, capped by the budget's steps, and
kept by a resume."""

from __future__ import annotations

from pathlib import Path

import pytest

import cli
from domains import installed
from toolkit import checkpoint as ckpt
from toolkit.runs import execute, load_recipe
from toolkit.tracking.store import client_for
from toolkit.training import budget, pretrainer

QUICKSTART = Path(cli.__file__).resolve().parent / "recipes" / "vision" / "quickstart.yaml"
TINY = [
    "data.train_subset=256",
    "encoder.width=8",
    "encoder.head.hidden=[32]",
    "encoder.head.out_dim=16",
    "budget.batch_size=64",
    "budget.log_every=1",
    "budget.epochs=null",
    "budget.monitor_every=null",
    "evaluation.probe_train_subset=256",
    "evaluation.test_subset=128",
    "evaluation.baselines=[]",
    "evaluation.diagnostics.samples=64",
    "evaluation.linear.epochs=5",
    "evaluation.knn.k=10",
    "tracking.log_model=false",
    "precision=fp32",
    "schedule.warmup_steps=2",
]


class Stop(Exception):
    pass


def _run(sets, **kwargs):
    recipe = load_recipe(QUICKSTART, [*TINY, *sets], installed.get)
    return execute(recipe, progress=False, **kwargs)


def _losses(run_id):
    history = client_for().get_metric_history(run_id, "train/loss")
    return [m.value for m in sorted(history, key=lambda m: m.step)]


@pytest.fixture
def fixed_speed(monkeypatch):
    """Every step 'takes' 0.1 s on the calibration's clock, so the fixed length does not depend
    on this machine's load."""
    now = [0.0]
    real = pretrainer.Pretrainer._train_step

    def step(self, batch, index):
        now[0] += 0.1
        return real(self, batch, index)

    monkeypatch.setattr(pretrainer.Pretrainer, "_train_step", step)
    monkeypatch.setattr(budget, "_clock", lambda: now[0])


@pytest.mark.slow
def test_minutes_fix_the_length_and_the_run_equals_its_replay(data_workdir, fixed_speed):
    # 0.1 s a step: 0.02 minutes (1.2 s) fix 12 of at most 400 steps
    run_id, metrics = _run(["budget.steps=400", "budget.minutes=0.02", "tracking.experiment=timed"])
    steps = 12
    run = client_for().get_run(run_id)
    assert run.data.params["measured.budget_steps_fixed"] == str(steps)
    final = ckpt.load(ckpt.latest(ckpt.checkpoint_dir(run_id)))["trainer"]["loop"]
    assert final["step"] == final["planned_steps"] == steps

    replay_id, replay = _run([f"budget.steps={steps}", "tracking.experiment=replay"])
    assert _losses(run_id) == _losses(replay_id) and len(_losses(run_id)) == steps
    assert metrics == replay


def test_the_budget_steps_cap_the_minutes(data_workdir):
    run_id, _ = _run(["budget.steps=5", "budget.minutes=60", "tracking.experiment=capped"])
    assert client_for().get_run(run_id).data.params["measured.budget_steps_fixed"] == "5"
    assert len(_losses(run_id)) == 5


@pytest.mark.slow
def test_a_resume_keeps_the_fixed_length(data_workdir, fixed_speed):
    """With each timed step at 0.1 s, 0.02 minutes (1.2 s) fix 12 steps; the run is stopped at
    step 5 and resumed: it ends at 12, not at the ceiling, and calibrates once."""

    def stop_at_5(step):
        if step == 5:
            raise Stop

    sets = ["budget.steps=300", "budget.minutes=0.02", "budget.checkpoint_every=1", "tracking.experiment=resumed"]
    with pytest.raises(Stop):
        _run(sets, hooks=[stop_at_5])
    client = client_for()
    [killed] = client.search_runs([client.get_experiment_by_name("resumed").experiment_id])
    assert killed.data.params["measured.budget_steps_fixed"] == "12"
    run_id, _ = _run(sets, resume=killed.info.run_id)
    final = ckpt.load(ckpt.latest(ckpt.checkpoint_dir(run_id)))["trainer"]["loop"]
    assert final["step"] == 12 and final["planned_steps"] == 12
    assert len(_losses(run_id)) == 12


def test_minutes_need_a_ceiling():
    from toolkit.recipe import RecipeError

    with pytest.raises(RecipeError) as info:
        load_recipe(QUICKSTART, ["budget.epochs=null", "budget.minutes=3"], installed.get)
    assert "budget" in str(info.value) and "give epochs or steps" in str(info.value)


def _fits_by_counting(seconds, per_step, every, monitor):
    """The plain answer: add steps one by one, with a monitor after every ``every``-th."""
    steps, spent = 0, 0.0
    while True:
        cost = per_step + (monitor if every and (steps + 1) % every == 0 else 0.0)
        if spent + cost > seconds + 1e-9:
            return steps
        steps, spent = steps + 1, spent + cost


@pytest.mark.parametrize("seconds", [0.05, 1.0, 7.3, 40.0, 165.0])
@pytest.mark.parametrize(
    "per_step,every,monitor",
    [(0.2, 400, 3.0), (0.07, 400, 2.0), (0.5, 7, 1.3), (0.1, 5, 0.0), (0.1, None, 4.0), (0.3, 1, 0.2)],
)
def test_steps_that_fit_count_only_the_monitors_they_reach(seconds, per_step, every, monitor):
    # a slow machine reaching 2 of the ceiling's 9 monitors is charged for those 2, not all 9
    assert budget.steps_that_fit(seconds, per_step, every, monitor) == _fits_by_counting(
        seconds, per_step, every, monitor
    )
