"""Comparisons and plots start from what a run is for: its metrics of record (the ``ctk.record``
tag) first; settings a run chose itself are not compared."""

from __future__ import annotations

import numpy as np
from click.testing import CliRunner

import cli
from toolkit.evaluation import plots
from toolkit.studies.runsets import eval_metrics
from toolkit.tracking.store import client_for, experiment_id

from .conftest import LOSS_KEY, TEMP_KEY, log_run


def _sweep(store):
    client = client_for(store)
    eid = experiment_id(client, "rec")
    parent = client.create_run(eid, run_name="sweep-parent").info.run_id
    rng = np.random.default_rng(1)
    for t in (0.1, 0.5, 1.0):
        for seed in (0, 1):
            log_run(
                client,
                eid,
                {LOSS_KEY: "nt_xent", TEMP_KEY: t, "seed": seed, "evaluation.chosen.linear_c": 0.5},
                {
                    "alignment": rng.normal(0.3, 0.05),
                    "linear_top1": 80 + 10 * t + rng.normal(0, 0.5),
                    "zz_other": rng.normal(5, 1),
                },
                tags={"mlflow.parentRunId": parent, "ctk.record": "linear_top1"},
            )
    client.set_terminated(parent, "FINISHED")
    return client, eid


def _plotted(monkeypatch, args):
    drawn = {}
    original = plots.band_figure

    def spy(series, xlabel, ylabel, **kwargs):
        drawn.update(series=series, ylabel=ylabel)
        return original(series, xlabel, ylabel, **kwargs)

    monkeypatch.setattr(plots, "band_figure", spy)
    result = CliRunner().invoke(cli.main, ["compare", "rec", *args])
    assert result.exit_code == 0, result.output
    return drawn, result.output


def _means(series):
    return [point[1].mean for line in series.values() for point in line]


def test_plot_draws_the_metric_asked_else_the_metric_of_record(store, tmp_path, monkeypatch):
    client, eid = _sweep(store)
    runs = client.search_runs([eid])
    assert eval_metrics(runs)[0] == "linear_top1"
    drawn, _ = _plotted(monkeypatch, ["--plot", str(tmp_path / "a.png")])
    assert drawn["ylabel"] == "linear_top1" and min(_means(drawn["series"])) > 70  # not alignment's values
    drawn, _ = _plotted(monkeypatch, ["--metric", "zz_other", "--plot", str(tmp_path / "b.png")])
    assert drawn["ylabel"] == "zz_other" and max(_means(drawn["series"])) < 20
    drawn, output = _plotted(monkeypatch, ["--metric", "linear_top1", "--plot", str(tmp_path / "c.png")])
    assert drawn["ylabel"] == "linear_top1"
    assert "linear_c" not in output  # a chosen setting (a param) is not a compared metric
