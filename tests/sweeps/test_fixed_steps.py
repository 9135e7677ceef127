"""A sweep of a ``budget.minutes`` recipe fixes the step count once, before its points start, and
every point trains exactly that many steps, read back from the store; a sweep run again reads
the count back from its parent instead of calibrating; the parent run carries the sweep's
answer (issue 40)."""

import json
import re
from types import SimpleNamespace

import pytest

from tests.sweeps.conftest import TOY, runs_of
from toolkit.studies.budget_steps import METRIC, TAG, fix_for_points
from toolkit.studies.launch import Outcome, PointSpec
from toolkit.tracking.store import client_for, experiment_id

pytest.importorskip("ray")
# a wall-time budget far below the ceiling, so the steps come from the calibration
MINUTES = ["--set", "budget.minutes=0.01", "--set", "budget.steps=5000", "--set", "budget.log_every=25", "--quiet"]


def _children(client, experiment):
    runs = runs_of(client, experiment)
    parent = next(r for r in runs if "ctk.sweep_parent" in r.data.tags)
    return parent, [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]


def _last_step(client, run):
    return max(m.step for m in client.get_metric_history(run.info.run_id, "train/loss"))


@pytest.mark.slow
def test_a_minutes_sweep_on_two_jobs_trains_every_point_for_one_recorded_step_count(ctk):
    args = ["sweep", TOY, "--grid", "objective.loss.temperature=0.5,1.0", *MINUTES, "--experiment", "fixed"]
    first = ctk(*args, "--jobs", "2", timeout=240)
    assert first.returncode == 0, first.stderr[-3000:]
    said = re.search(r"budget\.minutes 0\.01 -> ([\d,]+) steps for every point", first.stderr)
    assert said, first.stderr[-3000:]
    steps = int(said.group(1).replace(",", ""))
    client = ctk.store()
    parent, children = _children(client, "fixed")
    recorded = json.loads(parent.data.tags["ctk.budget_steps"])
    assert [e["steps"] for e in recorded.values()] == [steps]
    assert parent.data.metrics["sweep/budget_steps_fixed"] == steps
    assert len(children) == 2 and all(c.info.status == "FINISHED" for c in children)
    for child in children:
        assert child.data.params["measured.budget_steps_fixed"] == str(steps)
        assert child.data.params["measured.budget_steps_by"] == "sweep"
        assert _last_step(client, child) == steps  # trained exactly that many
    assert len({c.data.tags["ctk.pid"] for c in children}) == 2  # on two Ray workers
    # the sweep's answer on its parent: a number in its row, the best group in its description
    assert parent.data.metrics["kmeans_accuracy"] == max(
        parent.data.metrics[f"group/temperature_{t}/kmeans_accuracy"] for t in ("0.5", "1.0")
    )
    assert "best temperature=" in parent.data.tags["mlflow.note.content"]


def _point(label, group="", minutes=0.5):
    return SimpleNamespace(
        label=label, budget_group=group, recipe=SimpleNamespace(budget=SimpleNamespace(minutes=minutes))
    )


def _spec(label):
    return PointSpec(label, label, "recipe.yaml", {})


def test_one_calibration_per_budget_group_recorded_then_read_back(tmp_path):
    client = client_for(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent = client.create_run(experiment_id(client, "study")).info.run_id
    points = [
        _point("vision/base/s0", "vision"),
        _point("vision/dp/s0", "vision"),
        _point("text/base/s0", "text"),
        _point("text/dp/s0", "text"),
        _point("toy/base/s0", "toy", minutes=None),
    ]
    calibrated = []

    def alone(spec):
        assert spec.calibrate
        calibrated.append(spec.label)
        return Outcome(
            spec.label, "calibrated", metrics={"steps": 100 + len(calibrated), "ms_per_step": 12.5, "precision": "fp32"}
        )

    specs = [_spec(p.label) for p in points]
    lines = []
    fix_for_points(client, parent, points, specs, alone, lines.append)
    assert calibrated == ["vision/base/s0", "text/base/s0"]  # the first point of each group, once
    assert [s.fixed_steps for s in specs] == [101, 101, 102, 102, None]
    run = client.get_run(parent)
    assert {k: v["steps"] for k, v in json.loads(run.data.tags[TAG]).items()} == {
        "vision|minutes=0.5": 101,
        "text|minutes=0.5": 102,
    }
    assert run.data.metrics[f"{METRIC}/text_minutes_0.5"] == 102
    assert any("-> 101 steps for every point of vision" in line for line in lines)

    def never(spec):
        raise AssertionError("a sweep run again must not calibrate again")

    resumed = [_spec("vision/dp/s0"), _spec("text/base/s0")]  # what is left to run
    fix_for_points(client, parent, points, resumed, never, lines.append)
    assert [s.fixed_steps for s in resumed] == [101, 102]
    assert "as this sweep fixed them before" in lines[-1]


def test_a_second_seed_alone_trains_as_long_as_the_first_on_the_same_machine(data_workdir, monkeypatch):
    """Each timed step 'takes' 0.1 s, so budget.minutes 0.02 (1.2 s) fixes 12 steps; then the
    machine 'slows' to 0.2 s a step (a calibration would fix 6): seed 1 in the same experiment
    still trains the 12 steps seed 0 fixed."""
    from click.testing import CliRunner

    import cli
    from toolkit.training import budget, pretrainer

    now, per_step = [0.0], [0.1]
    real = pretrainer.Pretrainer._train_step

    def step(self, batch, index):
        now[0] += per_step[0]
        return real(self, batch, index)

    monkeypatch.setattr(pretrainer.Pretrainer, "_train_step", step)
    monkeypatch.setattr(budget, "_clock", lambda: now[0])

    def run(seed, experiment):
        sets = [
            "budget.minutes=0.02",
            "budget.steps=400",
            "budget.log_every=1",
            "tracking.log_model=false",
            f"tracking.experiment={experiment}",
        ]
        out = CliRunner().invoke(
            cli.main, ["run", TOY, "--quiet", "--seed", str(seed), *(a for s in sets for a in ("--set", s))]
        )
        assert out.exit_code == 0, out.output
        client = client_for()
        exp = client.get_experiment_by_name(experiment)
        newest = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"])[0]
        return newest, max(m.step for m in client.get_metric_history(newest.info.run_id, "train/loss"))

    first, trained = run(0, "seeds")
    assert first.data.params["measured.budget_steps_fixed"] == "12" and trained == 12
    assert first.data.params["measured.budget_steps_by"] == "run"
    per_step[0] = 0.2
    second, trained = run(1, "seeds")
    assert second.data.params["measured.budget_steps_fixed"] == "12" and trained == 12
    assert second.data.params["measured.budget_steps_by"] == f"run {first.info.run_id}"
