"""`ctk run --resume RUN_ID` needs nothing but the run: the command a Ctrl-C prints, pasted as
is, continues with the run's own overrides and precision and ends like an uninterrupted run."""

from __future__ import annotations

import os
import re
import shlex
import signal

from click.testing import CliRunner

import cli
import commands
from toolkit.tracking.store import client_for
from toolkit.training import precision

STARTED = ["--set", "budget.steps=20", "--precision", "bf16", "--quiet"]


def _runs(client):
    exp = client.get_experiment_by_name("pipeline-test").experiment_id
    return client.search_runs([exp], order_by=["attributes.start_time DESC"])


def _final(client, run):
    data = client.get_run(run.info.run_id).data
    return {k: v for k, v in data.metrics.items() if not k.startswith(("train/", "system/"))}, data


def test_printed_resume_command_alone_matches_the_uninterrupted_run(
    points_domain, points_recipe, default_signals, monkeypatch
):
    monkeypatch.setenv(precision.OVERRIDE_ENV, "native")  # bf16 on any CPU (emulated where it must)
    runner = CliRunner()
    ref = runner.invoke(cli.main, ["run", str(points_recipe), *STARTED])
    assert ref.exit_code == 0, ref.output
    plain = commands.execute

    def interrupted(recipe, **kwargs):
        def ctrl_c(step):
            if step == 13:
                os.kill(os.getpid(), signal.SIGINT)

        return plain(recipe, **{**kwargs, "hooks": [ctrl_c]})

    monkeypatch.setattr(commands, "execute", interrupted)
    stopped = runner.invoke(cli.main, ["run", str(points_recipe), *STARTED])
    assert stopped.exit_code == 130, stopped.output
    monkeypatch.setattr(commands, "execute", plain)
    printed = re.search(r"ctk (run --resume \S+)", stopped.output)
    assert printed, stopped.output
    client = client_for()
    killed = _runs(client)[0]
    assert killed.info.status == "KILLED" and killed.data.tags["error"] == "interrupted"

    # a recipe file given alone (the run's --set missing) is refused, naming the key
    refused = runner.invoke(cli.main, ["run", str(points_recipe), "--resume", killed.info.run_id])
    assert refused.exit_code == 2 and "budget.steps" in refused.output

    resumed = runner.invoke(cli.main, shlex.split(printed.group(1)))
    assert resumed.exit_code == 0, resumed.output
    reference, _ = _final(client, _runs(client)[1])
    got, data = _final(client, killed)
    assert client.get_run(killed.info.run_id).info.status == "FINISHED"
    assert got == reference and got
    assert data.params["precision"] == "bf16" and "error" not in data.tags
