"""One pass from recipe to run (issue 39, part 1): ``ctk run`` reads, overrides, names and
validates a recipe and decides its device and precision once, into one frozen plan that
``execute`` runs without changing it; ``--resume`` asks the checkpoint room once; the objective
is built once; marking dead runs is a step of the run path, not of entering a tracker.

Counted with spies on the functions that do each thing (monkeypatch), around the command line
as a user runs it."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

import cli
from toolkit import checkpoint as ckpt
from toolkit import objective as objective_mod
from toolkit import recipe as rc
from toolkit import runs
from toolkit.checkpoint import envelope, files
from toolkit.tracking.store import client_for, experiment_id
from toolkit.tracking.tracker import Tracker

ROOT = Path(cli.__file__).resolve().parent
FIND = sys.modules["toolkit.checkpoint.find"]  # the module (the package's `find` is its function)


@pytest.fixture
def counted(monkeypatch):
    """Counter of validations, Objective builds, resume look-ups, checkpoint reads, store look-ups."""
    calls: Counter = Counter()

    def spy(owner, name, key):
        real = getattr(owner, name)

        def wrapper(*args, **kwargs):
            calls[key] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)

    spy(rc, "validate", "validate")
    spy(ckpt, "resume_point", "resume_point")
    spy(FIND, "candidates", "candidates")
    spy(envelope, "load", "checkpoint file read")
    spy(files, "load", "checkpoint file read")
    spy(runs.planning, "_stored_run", "stored run")
    real_init = objective_mod.Objective.__init__

    def init(self, *args, **kwargs):
        calls["Objective"] += 1
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(objective_mod.Objective, "__init__", init)
    return calls


def test_a_run_with_set_validates_once_and_builds_its_objective_once(points_domain, points_recipe, counted):
    result = CliRunner().invoke(
        cli.main,
        ["run", str(points_recipe), "--quiet", "--set", "budget.steps=4", "--set", "objective.loss.temperature=0.3"],
    )
    assert result.exit_code == 0, result.output
    assert counted["validate"] == 1, counted
    assert counted["Objective"] == 1, counted
    assert counted["resume_point"] == 0 and counted["checkpoint file read"] == 0, counted
    run_id = result.output.split("run ", 1)[1].split()[0]
    run = client_for().get_run(run_id)
    assert run.info.run_name == "nt_xent-s4-t0.3-s0"  # named after what --set changed, without a second load
    assert run.data.params["tracking.run_name"] == "nt_xent-s4-t0.3-s0"
    assert run.data.params["precision"] == "fp32" and run.data.params["measured.precision"] == "fp32"
    # compile as set (the default, auto) and as chosen (eager on the CPU): a setting and a measurement
    assert run.data.params["compile"] == "auto" and run.data.params["measured.compile"] == "off"


def test_a_resume_asks_for_its_checkpoint_once(points_domain, points_recipe, counted):
    first = CliRunner().invoke(cli.main, ["run", str(points_recipe), "--quiet", "--set", "budget.steps=4"])
    assert first.exit_code == 0, first.output
    run_id = first.output.split("run ", 1)[1].split()[0]
    counted.clear()
    result = CliRunner().invoke(cli.main, ["run", "--resume", run_id, "--extend", "--quiet", "--set", "budget.steps=8"])
    assert result.exit_code == 0, result.output
    assert counted == {
        "resume_point": 1,
        "candidates": 1,
        "checkpoint file read": 1,
        "stored run": 1,
        "validate": 1,
        "Objective": 1,
    }, counted
    assert client_for().get_run(run_id).info.status == "FINISHED"


def test_the_plan_is_frozen_and_execute_changes_nothing_in_it(points_domain, points_recipe):
    p = runs.plan(points_recipe, ["budget.steps=4", "objective.loss.temperature=0.3"], points_domain)
    assert p.recipe.precision == p.precision.value == "fp32" and p.device.type == "cpu" and p.resume is None
    assert p.recipe.run_name == "nt_xent-s4-t0.3-s0" and p.domain is points_domain("points")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.recipe.resolved = {}  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.precision = None  # type: ignore[misc]
    before = (p.recipe.common.model_dump(), repr(p.recipe.resolved), repr(p.recipe.raw), p.recipe.overrides)
    runs.execute(p, progress=False)
    assert (p.recipe.common.model_dump(), repr(p.recipe.resolved), repr(p.recipe.raw), p.recipe.overrides) == before
    with pytest.raises(ValueError, match="decided"):
        runs.execute(p, device="cpu")


def test_auto_precision_is_decided_in_the_plan_and_the_recipe_given_is_left_as_it_was(points_domain, points_recipe):
    r = runs.load_recipe(points_recipe, ["precision=auto"], points_domain)
    p = runs.decide(r)
    assert r.precision == "auto" and r.resolved["precision"] == "auto"  # validated recipe untouched
    assert p.recipe.precision == p.recipe.resolved["precision"] == p.precision.value != "auto"
    assert p.precision.requested == "auto"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_entering_a_tracker_changes_no_other_run_a_new_run_marks_the_dead_ones(points_domain, points_recipe):
    client = client_for()
    eid = experiment_id(client, "pipeline-test")
    dead = client.create_run(
        eid, run_name="dead", tags={"ctk.host": socket.gethostname(), "ctk.pid": str(_dead_pid())}
    ).info.run_id
    with Tracker("pipeline-test", "other"):
        pass
    assert client.get_run(dead).info.status == "RUNNING"  # no hidden effect on other runs
    p = runs.plan(points_recipe, ["budget.steps=2"], points_domain)
    runs.execute(p, progress=False)  # the run path's own step: retire_dead_runs
    assert client.get_run(dead).info.status == "KILLED"
    assert "is gone" in client.get_run(dead).data.tags["ctk.killed_reason"]


def test_mlflow_environment_is_set_by_the_command_not_by_an_import(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DO_NOT_TRACK", "MLFLOW_DISABLE_TELEMETRY", "MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_TRACKING_URI")
    }
    code = (
        "import os\n"
        "import toolkit.runs, toolkit.tracking.store as s, toolkit.tracking.tracker\n"
        "assert 'DO_NOT_TRACK' not in os.environ and 'mlflow' not in __import__('sys').modules\n"
        "s.client_for()\n"
        "assert os.environ['DO_NOT_TRACK'] == 'true' and os.environ['MLFLOW_HTTP_REQUEST_TIMEOUT'] == '20'\n"
        "from click.testing import CliRunner\n"
        "import cli\n"
        "os.environ.pop('MLFLOW_DISABLE_TELEMETRY')\n"
        "assert CliRunner().invoke(cli.main, ['list', 'losses']).exit_code == 0\n"
        "assert os.environ['MLFLOW_DISABLE_TELEMETRY'] == 'true'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_resume_finds_the_run_in_the_store_its_recipe_names(points_domain, points_recipe, counted):
    """Resumed by run id alone, a run that logs to a store of its own (``tracking.uri``) is looked
    up there too once its checkpoint names it: a FINISHED run is refused, not continued."""
    other = f"sqlite:///{points_recipe.parent / 'other.db'}"
    first = CliRunner().invoke(
        cli.main, ["run", str(points_recipe), "--quiet", "--set", "budget.steps=2", "--set", f"tracking.uri={other}"]
    )
    assert first.exit_code == 0, first.output
    run_id = first.output.split("run ", 1)[1].split()[0]
    counted.clear()
    again = CliRunner().invoke(cli.main, ["run", "--resume", run_id, "--quiet"])
    assert again.exit_code == 2 and f"run {run_id} FINISHED" in again.output, again.output
    assert counted["resume_point"] == 1 and counted["stored run"] == 2, counted  # ./mlflow.db, then its own


def test_a_ctrl_c_no_command_caught_exits_130_not_clicks_aborted():
    """Click turns a KeyboardInterrupt into "Aborted!" and exit 1, which a script reads as a
    failure; the ctk group makes it 130 (the shell's status for SIGINT), as the run and the
    sweep do when they stop on Ctrl-C themselves."""
    import click

    def interrupted():
        raise KeyboardInterrupt

    cli.main.add_command(click.Command("interrupted-here", callback=interrupted))
    try:
        result = CliRunner().invoke(cli.main, ["interrupted-here"])
    finally:
        cli.main.commands.pop("interrupted-here")
    assert result.exit_code == 130, (result.exit_code, result.output)
    assert "Aborted!" not in result.output and "interrupted" in result.output
