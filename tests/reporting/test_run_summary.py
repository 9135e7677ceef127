"""What `ctk run` ends with: the metrics of record beside their baselines, where to look next."""

from __future__ import annotations

import random

import pytest

import commands
from domains import installed
from toolkit.runs import record_metrics

TOY = "recipes/toy/lmcl_three_bars_cl.yaml"


def test_summary_names_the_record_beside_its_baselines():
    r = commands.load(TOY, ["tracking.uri=sqlite:////nonexistent/none.db"])
    value, base = random.uniform(50, 99), random.uniform(10, 49)
    metrics = {"kmeans_accuracy": value, "kmeans_accuracy_euclidean": base, "dp_margin_occupancy": 0.25}
    text = commands.summary("abc", r, 12.3, metrics)
    lines = text.splitlines()
    assert "12.3 s" in lines[0] and r.run_name in lines[0]
    assert f"{value:.4f}" in lines[1] and "metric of record" in lines[1] and "kmeans_accuracy " in lines[1]
    assert f"{base:.4f}" in lines[2] and f"{value - base:+.4f}" in lines[2]
    assert "dp_margin_occupancy" not in text  # the full list only with --verbose
    assert f"ctk compare {r.tracking.experiment}" in text and "--verbose" in text
    assert "dp_margin_occupancy: 0.2500" in commands.summary("abc", r, 1.0, metrics, verbose=True)


def test_recipe_overrides_the_record_and_tracking_keys_keep_the_point():
    r = commands.load(TOY, ["tracking.record=[dp_margin_occupancy]"])
    assert record_metrics(r) == {"dp_margin_occupancy": ()}
    assert record_metrics(commands.load(TOY)) == {"kmeans_accuracy": ("kmeans_accuracy_euclidean",)}


@pytest.mark.parametrize(
    "recipe",
    ["recipes/vision/quickstart.yaml", "recipes/text/cpu/qt_bow_books.yaml", "recipes/toy/lmcl_three_bars_cl.yaml"],
)
def test_domains_declare_records_among_the_metrics_they_log(recipe):
    r = commands.load(recipe)
    logged = installed.get(r.domain).result_metrics(r)
    record = record_metrics(r)
    assert record
    for metric, baselines in record.items():
        assert metric in logged and all(b in logged for b in baselines), (metric, baselines)
        assert baselines  # each of these recipes computes its baselines in the same run


def test_single_run_name_says_what_differs_from_the_file():
    plain = commands.load_for_run(TOY, (), [], None).recipe
    changed = commands.load_for_run(TOY, ("objective.loss.temperature=0.3",), ["precision=fp32", "seed=2"], None).recipe
    assert "t0.3" in changed.run_name and "pfp32" in changed.run_name and changed.run_name.endswith("-s2")
    assert "t0.3" not in plain.run_name


def test_the_run_link_opens_the_run_in_the_machine_learning_view(monkeypatch):
    """mlflow 3.17 opens ``#/experiments/ID/runs/RUN`` in its GenAI navigation: the link ``ctk run``
    ends with asks for the machine-learning view, as ``ctk ui``'s links do (one form, one function)."""
    from toolkit.studies.ui_view import view_path
    from toolkit.tracking import store
    from toolkit.tracking.servers import ui_route

    monkeypatch.setattr(store, "run_location", lambda uri, run_id: ("/tmp/art", "7"))
    text = commands.summary("abc", commands.load(TOY), 1.0, {})
    link = "http://127.0.0.1:5000/#/experiments/7/runs/abc?workflowType=machine_learning"
    assert f"look further: ctk ui  (then {link})" in text.splitlines()
    assert view_path("7") == ui_route("7", view="ctk-columns")
    assert view_path("7") == "#/experiments/7/runs?workflowType=machine_learning&viewStateShareKey=ctk-columns"
    assert ui_route("7", "abc", page="artifacts") == "#/experiments/7/runs/abc/artifacts?workflowType=machine_learning"
