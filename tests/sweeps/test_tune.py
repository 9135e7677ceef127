"""ctk tune: the search space is parsed with every problem named; a 4-trial toy search on a local
Ray instance gives four child runs under one parent and writes the best trial's recipe."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import cli
from toolkit.recipe import RecipeError
from toolkit.studies.tune import parse_space
from toolkit.tracking.store import client_for

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "toy" / "lmcl_three_bars_cl.yaml"


def test_space_parsing_names_every_bad_item():
    space = parse_space(["a.b=loguniform(0.01, 1)", "c=choice(x, 2, true)", "d=randint(1,5)"])
    assert space == {"a.b": ("loguniform", [0.01, 1.0]), "c": ("choice", ["x", 2, True]), "d": ("randint", [1, 5])}
    with pytest.raises(RecipeError) as info:
        parse_space(["t=loguniform(0,1)", "u=uniform(2,1)", "nonsense", "v=normal(0,1)"])
    assert [p for p, _ in info.value.problems] == ["t", "u", "nonsense", "v"]


@pytest.mark.slow
def test_a_small_search_gives_child_runs_and_the_best_recipe(tmp_path, monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("CTK_CHECKPOINTS", str(tmp_path / "checkpoints"))
    result = CliRunner().invoke(
        cli.main,
        [
            "tune",
            str(RECIPE),
            "--space",
            "objective.loss.temperature=loguniform(0.05,1)",
            "--samples",
            "4",
            "--jobs",
            "2",
            "--metric",
            "kmeans_accuracy",
            "--experiment",
            "tune-test",
            "--out",
            "best.yaml",
            "--set",
            "budget.steps=120",
            "--set",
            "budget.eval_every=40",
            "--set",
            "evaluation.histogram=false",
        ],
    )
    assert result.exit_code == 0, result.output
    client = client_for(uri)
    runs = client.search_runs([client.get_experiment_by_name("tune-test").experiment_id])
    parent = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parent) == 1 and len(children) == 4
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parent[0].info.run_id}
    assert all(r.info.status in ("FINISHED", "KILLED") for r in children)
    # later trials start in the processes of ended ones (reuse_actors), not in fresh ones
    assert len({r.data.tags["ctk.pid"] for r in children}) < 4, [r.data.tags["ctk.pid"] for r in children]
    finished = [r for r in children if r.info.status == "FINISHED"]
    best_value = max(r.data.metrics["kmeans_accuracy"] for r in finished)
    assert parent[0].data.metrics["best/kmeans_accuracy"] == pytest.approx(best_value)
    best = yaml.safe_load((tmp_path / "best.yaml").read_text())
    best_temps = [
        float(r.data.params["objective.loss.temperature"])
        for r in finished
        if r.data.metrics["kmeans_accuracy"] == best_value
    ]
    assert any(abs(float(best["objective"]["loss"]["temperature"]) - t) < 1e-12 for t in best_temps)
    shown = CliRunner().invoke(cli.main, ["show", str(tmp_path / "best.yaml")])
    assert shown.exit_code == 0, shown.output
