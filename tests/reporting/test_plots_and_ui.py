"""ctk compare --plot / --curves (a PNG with one line per method, logged to the sweep's parent
run), the mlflow UI's view of ctk experiments, sweep run names and the reproduce verdicts."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from matplotlib import colors as mcolors
from matplotlib import image as mimage
from scipy import stats as sps

import cli
from tests.reporting.conftest import LOSS_KEY, TEMP_KEY
from toolkit.studies import stats
from toolkit.studies.comparison import collect, curve_series
from toolkit.studies.reproduce import PaperTable, TableRow, reproduce_report
from toolkit.studies.ui_view import KIND_TAG, ML_KIND, VIEW_TAG, prepare
from toolkit.tracking.store import client_for

CYCLE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]  # matplotlib's default lines


def _line_colours(png) -> int:
    """How many of the default cycle's colours are drawn opaque in the PNG: one per line
    (the bands are translucent, so their pixels are blended and never match exactly)."""
    img = mimage.imread(png)[..., :3]
    found = 0
    for hexcolour in CYCLE:
        rgb = np.array(mcolors.to_rgb(hexcolour))
        if (np.abs(img - rgb).max(axis=-1) < 1.5 / 255).sum() > 50:
            found += 1
    return found


def test_plot_png_has_a_line_per_method_and_goes_to_the_parent(sweep_experiment, tmp_path):
    store, parent = sweep_experiment
    png = tmp_path / "t.png"
    result = CliRunner().invoke(cli.main, ["compare", "sweep", "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _line_colours(png) == 2  # nt_xent and dcl
    assert f"logged to parent run(s) {parent}" in result.output
    logged = [a.path for a in client_for(store).list_artifacts(parent, "figures")]
    assert logged == ["figures/t.png"]
    # grouping by the loss alone: one line, the temperatures pooled is not a sweep plot
    result = CliRunner().invoke(cli.main, ["compare", "sweep", "--by", LOSS_KEY, "--plot", str(png)])
    assert result.exit_code == 1 and "no numeric swept key" in result.output


def test_plot_bands_are_the_t_intervals(sweep_experiment):
    from toolkit.studies.comparison import sweep_series

    comp = collect("sweep")
    series = sweep_series(comp, "linear_top1", TEMP_KEY)
    assert sorted(series) == ["loss=dcl", "loss=nt_xent"]
    for points in series.values():
        assert [x for x, _ in points] == [0.1, 0.5, 1.0]
    it, il = comp.by.index(TEMP_KEY), comp.by.index(LOSS_KEY)
    for g in comp.groups:
        s = dict(series[f"loss={g.values[il]}"])[float(g.values[it])]
        vals = g.metric("linear_top1")
        assert len(vals) == 2
        low, high = sps.t.interval(0.95, 1, loc=np.mean(vals), scale=sps.sem(vals))
        assert (s.low, s.high) == pytest.approx((low, high))


def test_curves_mean_and_band_over_seeds(stats_experiment, tmp_path):
    comp = collect("stats")
    curves = curve_series(comp, "train/loss")
    steps, sums = curves["loss=dcl"]
    assert steps == [0, 1, 2]
    first = [3.0 - 0.1 * s for s in range(4)]  # the fixture's step-0 loss per seed
    assert sums[0].mean == pytest.approx(np.mean(first))
    assert (sums[0].low, sums[0].high) == pytest.approx(
        sps.t.interval(0.95, 3, loc=np.mean(first), scale=sps.sem(first))
    )
    assert sums[2].low == sums[2].high == 1.5  # every seed equal: a zero-width band
    result = CliRunner().invoke(cli.main, ["compare", "stats", "--curves", "train/loss"])
    assert result.exit_code == 0, result.output
    assert "no parent run" in result.output
    assert _line_colours(tmp_path / "curves-train_loss.png") == 3
    result = CliRunner().invoke(cli.main, ["compare", "stats", "--curves", "nope"])
    assert result.exit_code == 1 and "--curves 'nope'" in result.output


def test_experiments_open_in_the_ml_view_with_columns(stats_experiment):
    client = client_for(stats_experiment)
    exp = client.get_experiment_by_name("stats")
    assert exp.tags[KIND_TAG] == ML_KIND
    routes = prepare(client)
    assert routes == [
        ("stats", f"#/experiments/{exp.experiment_id}/runs?workflowType=machine_learning&viewStateShareKey=ctk-columns")
    ]
    exp = client.get_experiment(exp.experiment_id)
    view = json.loads(exp.tags[VIEW_TAG])
    assert view["selectedColumns"] == [
        "metrics.`linear_top1`",
        "metrics.`uniformity`",
        f"params.`{LOSS_KEY}`",
        "params.`seed`",
    ]
    # the grid draws selected metrics by name; columnOrder is what puts the record first
    assert view["columnOrder"] == view["selectedColumns"]
    assert set(view["columnWidths"]) == set(view["selectedColumns"])
    assert routes[0][1] in exp.tags["mlflow.note.content"]


def test_columns_view_ignores_the_sweep_parent(sweep_experiment):
    store, _ = sweep_experiment
    client = client_for(store)
    prepare(client)
    view = json.loads(client.get_experiment_by_name("sweep").tags[VIEW_TAG])
    assert view["selectedColumns"] == [
        "metrics.`linear_top1`",
        f"params.`{LOSS_KEY}`",
        f"params.`{TEMP_KEY}`",
        "params.`seed`",
    ]


def test_sweep_run_names_say_what_differs():
    from domains import installed
    from toolkit.recipe import point_run_name
    from toolkit.runs import load_recipe

    recipe = load_recipe("recipes/toy/lmcl_three_bars_cl.yaml", ["seed=2"], installed.get)
    loss = recipe.common.objective.loss.name
    assert point_run_name(recipe, ["objective.loss.temperature=0.1", "seed=2"]) == f"{loss}-t0.1-s2"
    assert point_run_name(recipe, ["objective.loss.temperature=0.5", "optimizer.lr=[1, 2]"]) == f"{loss}-t0.5-l1_2-s2"


def test_reproduce_verdicts():
    measured = [0.70, 0.72, 0.69, 0.73]
    low, high = sps.t.interval(0.95, 3, loc=np.mean(measured), scale=sps.sem(measured))
    rows = [
        TableRow("inside", None, [], {"acc": 0.71}),
        TableRow("high", None, [], {"acc": 0.9}),
        TableRow("low", None, [], {"acc": 0.5}),
        TableRow("one", None, [], {"acc": 0.75}),
        TableRow("none", None, [], {}),
    ]
    table = PaperTable(
        "t",
        "T",
        "paper",
        [0, 1, 2, 3],
        ["acc"],
        rows,
        None,
        measured={r.label: {"acc": measured} for r in rows[:3]} | {"one": {"acc": [0.7]}, "none": {"acc": measured}},
    )
    recs = {r["row"]: r for r in reproduce_report(table).records}
    assert (recs["inside"]["ci_low"], recs["inside"]["ci_high"]) == pytest.approx((low, high))
    assert [recs[k]["verdict"] for k in ("inside", "high", "low", "one", "none")] == [
        "contains",
        "below",
        "above",
        "n<2: no interval",
        "no paper number",
    ]
    assert stats.verdict(None, 0.5) == "not measured"
